//! Server-sent events: [`SseParser`], the one incremental parser of `text/event-stream`
//! bodies, and [`SseStream`], an open SSE response read one JSON-RPC message at a time.

use std::time::{Duration, SystemTime};

use anyhow::{Context as _, Result, bail};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use serde_json::Value;

/// Splits a `text/event-stream` body into events as its bytes arrive. An event ends at a
/// blank line (`\n\n`); its data is its `data:` lines, leading whitespace trimmed, joined by
/// `\n`. Events without data (comments, keep-alives) are skipped.
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
}

impl SseParser {
    /// An empty parser.
    pub fn new() -> SseParser {
        SseParser::default()
    }

    /// Append bytes of the body as they arrive.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The data of the next complete event with data, if one has arrived (removed from the
    /// buffer, as are the data-less events before it).
    pub fn next_data(&mut self) -> Option<String> {
        while let Some(pos) = self.buf.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = self.buf.drain(..pos + 2).collect();
            let text = String::from_utf8_lossy(&event);
            let data: Vec<&str> = text
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            if !data.is_empty() {
                return Some(data.join("\n"));
            }
        }
        None
    }
}

/// An open SSE response whose events each carry one JSON-RPC message.
pub struct SseStream {
    body: Incoming,
    parser: SseParser,
    /// When the last frame of the body arrived.
    last: SystemTime,
}

impl SseStream {
    /// The stream of a response already known to be SSE.
    pub fn from_response(res: hyper::Response<Incoming>) -> SseStream {
        SseStream {
            body: res.into_body(),
            parser: SseParser::new(),
            last: SystemTime::now(),
        }
    }

    /// The next JSON-RPC message, and when the frame completing it arrived (this machine's
    /// clock).
    ///
    /// # Errors
    /// Nothing came within `within`, the stream ended or broke, or an event's data is not
    /// JSON.
    pub async fn recv(&mut self, within: Duration) -> Result<(Value, SystemTime)> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(data) = self.parser.next_data() {
                let v = serde_json::from_str(&data)
                    .with_context(|| format!("undecodable SSE event data {data:?}"))?;
                return Ok((v, self.last));
            }
            let frame = match tokio::time::timeout_at(deadline, self.body.frame()).await {
                Err(_) => bail!("no SSE event within {within:?}"),
                Ok(None) => bail!("the SSE stream ended"),
                Ok(Some(f)) => f.context("reading the SSE stream")?,
            };
            self.last = SystemTime::now();
            if let Ok(data) = frame.into_data() {
                self.parser.push(&data);
            }
        }
    }

    /// The next JSON-RPC message (comments skipped), or `None` when the stream ended or
    /// broke, nothing came within `within`, or the event was not JSON.
    pub async fn next(&mut self, within: Duration) -> Option<Value> {
        self.recv(within).await.ok().map(|(v, _)| v)
    }

    /// Read the first message of a `subscriptions/listen` stream, its acknowledgement, and
    /// return the task ids it honoured.
    ///
    /// # Errors
    /// As [`SseStream::recv`], or the first message is not the acknowledgement.
    pub async fn acknowledged(&mut self, within: Duration) -> Result<Vec<String>> {
        let (v, _) = self.recv(within).await?;
        if v["method"] != "notifications/subscriptions/acknowledged" {
            bail!(
                "listen: first event is not the acknowledgement: {}",
                crate::truncate(&v.to_string(), 300)
            );
        }
        Ok(v["params"]["notifications"]["taskIds"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::SseParser;

    #[test]
    fn events_split_at_blank_lines_and_skip_data_less_ones() {
        let mut p = SseParser::new();
        p.push(b": keep-alive\n\ndata: {\"a\":");
        assert_eq!(p.next_data(), None);
        p.push(b"1}\n\nevent: x\ndata:one\ndata:  two\n\n");
        assert_eq!(p.next_data().as_deref(), Some("{\"a\":1}"));
        assert_eq!(p.next_data().as_deref(), Some("one\ntwo"));
        assert_eq!(p.next_data(), None);
    }
}
