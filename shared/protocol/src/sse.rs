//! The one reader of `text/event-stream` bodies in the workspace: the CLI's listen and
//! call streams, the catalog's Streamable HTTP upstreams, the test harness and the bench
//! all feed the bytes they receive to an [`SseDecoder`] and take whole events' data out.
//! (The gateway only writes SSE; its framing is `gateway/src/reply.rs`.)
//!
//! It follows the WHATWG event-stream rules as far as MCP uses them: lines end with
//! `\r\n`, `\n` or `\r`; a blank line ends an event; `data:` lines (one leading space
//! dropped) are joined with `\n`; comments (`:`…) and the `event`, `id` and `retry` fields
//! are read past. An event with no `data:` line is not dispatched.

/// Splits a `text/event-stream` body into events as its bytes arrive.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes received and not yet read as lines (from `pos`).
    buf: Vec<u8>,
    /// How much of `buf` has been read.
    pos: usize,
    /// The data of the event in progress.
    data: String,
    /// Whether the event in progress has a `data:` line.
    has_data: bool,
}

impl SseDecoder {
    /// An empty decoder.
    pub fn new() -> SseDecoder {
        SseDecoder::default()
    }

    /// Append bytes of the body as they arrive.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The data of the next complete event, if one has arrived (it and the lines before it
    /// are consumed).
    pub fn next_data(&mut self) -> Option<String> {
        loop {
            let rest = &self.buf[self.pos..];
            let end = rest.iter().position(|b| matches!(b, b'\n' | b'\r'))?;
            let eol = match rest.get(end + 1) {
                _ if rest[end] == b'\n' => 1,
                Some(b'\n') => 2,
                Some(_) => 1,
                // A `\r` last in the buffer may be the first half of `\r\n`: wait.
                None => return None,
            };
            let line = String::from_utf8_lossy(&rest[..end]).into_owned();
            self.pos += end + eol;
            if line.is_empty() {
                if std::mem::take(&mut self.has_data) {
                    return Some(std::mem::take(&mut self.data));
                }
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
                None => (line.as_str(), ""),
            };
            if field == "data" {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
        }
    }

    /// Bytes held: received and not yet read, plus the data of the event in progress. A
    /// reader bounds this to refuse an endless event.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.pos + self.data.len()
    }
}

#[cfg(test)]
mod tests {
    use super::SseDecoder;

    fn all(d: &mut SseDecoder) -> Vec<String> {
        std::iter::from_fn(|| d.next_data()).collect()
    }

    #[test]
    fn events_end_at_blank_lines_and_data_less_ones_are_skipped() {
        let mut d = SseDecoder::new();
        d.push(b": keep-alive\n\ndata: {\"a\":");
        assert_eq!(d.next_data(), None);
        d.push(b"1}\n\nevent: x\nid: 7\ndata:one\ndata:  two\n\n");
        assert_eq!(all(&mut d), ["{\"a\":1}", "one\n two"]);
        assert_eq!(d.buffered(), 0);
    }

    #[test]
    fn every_line_ending_counts_even_split_across_pushes() {
        let mut d = SseDecoder::new();
        d.push(b"data: a\r\n\r\ndata: b\r\rdata: c\r");
        assert_eq!(all(&mut d), ["a", "b"]);
        d.push(b"\n\r\n");
        assert_eq!(all(&mut d), ["c"]);
    }

    #[test]
    fn an_unfinished_event_is_held_and_counted() {
        let mut d = SseDecoder::new();
        d.push(b"data: 12345\ndata: 678");
        assert_eq!(d.next_data(), None);
        assert_eq!(d.buffered(), "12345".len() + "data: 678".len());
        d.push(b"\n\n");
        assert_eq!(all(&mut d), ["12345\n678"]);
    }
}
