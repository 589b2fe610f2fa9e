//! Connections: how many a gateway keeps, and when it closes one no request is using.
//!
//! Before authentication a connection costs a file descriptor and memory, so nothing a
//! client sends (or does not send) may keep one open for free:
//! - a new connection must start a request (HTTP/1 request head, or an HTTP/2 stream)
//!   within `MCPT_HEADER_TIMEOUT`, whatever protocol it speaks or whether it speaks at all,
//!   and so must the next request on an HTTP/1 connection once its first byte arrives
//!   (hyper's own header timeout would also close idle keep-alive connections at that
//!   shorter timeout, so [`Watched`] replaces it);
//! - a connection with no request in flight (HTTP/1 keep-alive, HTTP/2 with no open
//!   stream, PINGs or not) closes after `MCPT_IDLE_TIMEOUT`;
//! - at `MCPT_MAX_CONNECTIONS` open, a new connection closes the oldest one that has not
//!   yet started a request, so a flood of silent connections cannot lock out clients or
//!   `/healthz`; with none to close the new connection is refused at once.
//!
//! A request counts as in flight from its head to the end of its response body (an SSE
//! stream is in flight as long as it is open), tracked by [`Tracked`] around the body.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::body::{Body, Frame, SizeHint};
use opentelemetry::KeyValue;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::CancellationToken;

/// The client's address (the TCP peer), in every request's extensions (for the console).
#[cfg(feature = "console")]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub(crate) std::net::SocketAddr);

/// Why the gateway closed a connection itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closed {
    /// No request head within the header timeout.
    HeaderTimeout,
    /// No request in flight for the idle timeout.
    Idle,
    /// Closed to make room for a new connection while it had sent nothing.
    Evicted,
}

impl Closed {
    fn as_str(self) -> &'static str {
        match self {
            Closed::HeaderTimeout => "header_timeout",
            Closed::Idle => "idle",
            Closed::Evicted => "evicted",
        }
    }
}

/// Every connection of one gateway.
#[derive(Debug)]
pub(crate) struct Connections {
    max: usize,
    header_timeout: Duration,
    idle_timeout: Duration,
    open: AtomicUsize,
    next_id: AtomicU64,
    /// Connections that have not started a request yet, oldest first: the ones closed to
    /// make room.
    silent: Mutex<BTreeMap<u64, CancellationToken>>,
    /// Where [`Conn::idle_since`] counts from.
    epoch: Instant,
}

impl Connections {
    pub(crate) fn new(max: usize, header_timeout: Duration, idle_timeout: Duration) -> Self {
        Connections {
            max,
            header_timeout,
            idle_timeout,
            open: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
            silent: Mutex::new(BTreeMap::new()),
            epoch: Instant::now(),
        }
    }

    /// Take a slot for a just-accepted connection, closing the oldest silent one when all
    /// are taken; `None`: refuse it.
    pub(crate) fn admit(self: &Arc<Self>) -> Option<Arc<Conn>> {
        let metrics = mcp_tasks_shared::metrics::get();
        if self.open.load(Ordering::Relaxed) >= self.max {
            let oldest = self.silent_set().pop_first();
            match oldest {
                Some((_, evict)) => evict.cancel(),
                None => {
                    metrics.connections_refused.add(1, &[]);
                    return None;
                }
            }
        }
        self.open.fetch_add(1, Ordering::Relaxed);
        metrics.connections_open.add(1, &[]);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let evicted = CancellationToken::new();
        self.silent_set().insert(id, evicted.clone());
        Some(Arc::new(Conn {
            id,
            all: self.clone(),
            evicted,
            in_flight: AtomicUsize::new(0),
            started: AtomicBool::new(false),
            idle_since: AtomicU64::new(self.millis()),
            read_any: AtomicBool::new(false),
            http2: AtomicBool::new(false),
            head_since: AtomicU64::new(NONE),
        }))
    }

    fn silent_set(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, CancellationToken>> {
        // The map holds no invariant a panic elsewhere could break.
        self.silent.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn millis(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// One open connection; its slot is given back on drop.
#[derive(Debug)]
pub(crate) struct Conn {
    id: u64,
    all: Arc<Connections>,
    evicted: CancellationToken,
    in_flight: AtomicUsize,
    started: AtomicBool,
    /// Milliseconds since [`Connections::epoch`] when the last request ended.
    idle_since: AtomicU64,
    /// Whether any byte arrived yet.
    read_any: AtomicBool,
    /// The connection opened with the HTTP/2 preface: bytes between requests are frames
    /// (PING, SETTINGS), not the start of a request head.
    http2: AtomicBool,
    /// HTTP/1: when bytes of a request head came in while no request was in flight
    /// ([`NONE`]: none did).
    head_since: AtomicU64,
}

/// No time: [`Conn::head_since`] unset.
const NONE: u64 = u64::MAX;

impl Conn {
    /// A request head arrived: the connection is busy until the returned guard drops.
    pub(crate) fn begin(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.head_since.store(NONE, Ordering::Release);
        if !self.started.swap(true, Ordering::AcqRel) {
            self.all.silent_set().remove(&self.id);
        }
        Busy(Some(self.clone()))
    }

    /// Resolves when the connection should be closed: evicted, no first request within
    /// the header timeout, or nothing in flight for the idle timeout.
    pub(crate) async fn closing(&self) -> Closed {
        loop {
            let now = Instant::now();
            let wake = if self.in_flight.load(Ordering::Acquire) > 0 {
                // Busy: look again later; a request ending restarts the clock.
                now + self.all.header_timeout.min(self.all.idle_timeout)
            } else {
                let at = |millis: u64, after: Duration| {
                    self.all.epoch + Duration::from_millis(millis) + after
                };
                let idle_since = self.idle_since.load(Ordering::Acquire);
                let (mut due, mut why) = if self.started.load(Ordering::Acquire) {
                    (at(idle_since, self.all.idle_timeout), Closed::Idle)
                } else {
                    (
                        at(idle_since, self.all.header_timeout),
                        Closed::HeaderTimeout,
                    )
                };
                let head_since = self.head_since.load(Ordering::Acquire);
                if head_since != NONE && at(head_since, self.all.header_timeout) < due {
                    (due, why) = (
                        at(head_since, self.all.header_timeout),
                        Closed::HeaderTimeout,
                    );
                }
                if due <= now {
                    return why;
                }
                due
            };
            tokio::select! {
                () = self.evicted.cancelled() => return Closed::Evicted,
                () = tokio::time::sleep_until(wake.into()) => {}
            }
        }
    }

    /// `bytes` came in (the first read's bytes, or any later read's).
    fn received(&self, bytes: &[u8]) {
        if !self.read_any.swap(true, Ordering::AcqRel) {
            let n = bytes.len().min(HTTP2_PREFACE.len());
            self.http2
                .store(bytes[..n] == HTTP2_PREFACE[..n], Ordering::Release);
        }
        if !self.http2.load(Ordering::Acquire)
            && self.in_flight.load(Ordering::Acquire) == 0
            && self.head_since.load(Ordering::Acquire) == NONE
        {
            self.head_since.store(self.all.millis(), Ordering::Release);
        }
    }

    /// Count a close the gateway decided on.
    pub(crate) fn record_close(why: Closed) {
        mcp_tasks_shared::metrics::get()
            .connections_closed
            .add(1, &[KeyValue::new("reason", why.as_str())]);
        tracing::debug!(reason = why.as_str(), "closing connection");
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.all.silent_set().remove(&self.id);
        self.all.open.fetch_sub(1, Ordering::Relaxed);
        mcp_tasks_shared::metrics::get()
            .connections_open
            .add(-1, &[]);
    }
}

/// How HTTP/2's connection preface (`PRI * HTTP/2.0…`) starts; no HTTP/1 method does.
const HTTP2_PREFACE: &[u8; 4] = b"PRI ";

/// The first bytes of a new connection, read to tell HTTP/2 ([`HTTP2_PREFACE`]) from
/// HTTP/1; [`Watched`] gives them to the server before the rest.
#[derive(Debug, Default)]
pub(crate) struct Opening {
    bytes: [u8; 4],
    len: u8,
    given: u8,
}

impl Opening {
    /// Read until the first bytes decide (four of them, or fewer that already differ from
    /// the preface), the peer closes, or the read fails (the server then meets the same).
    pub(crate) async fn read<S: AsyncRead + Unpin>(io: &mut S) -> Opening {
        use tokio::io::AsyncReadExt as _;
        let mut opening = Opening::default();
        let mut n = 0;
        while n < HTTP2_PREFACE.len() {
            match io.read(&mut opening.bytes[n..]).await {
                Ok(0) | Err(_) => break,
                Ok(k) => n += k,
            }
            if opening.bytes[..n] != HTTP2_PREFACE[..n] {
                break;
            }
        }
        opening.len = n as u8;
        opening
    }

    /// Whether the connection opened with HTTP/2's preface.
    pub(crate) fn is_http2(&self) -> bool {
        self.bytes == *HTTP2_PREFACE && usize::from(self.len) == HTTP2_PREFACE.len()
    }
}

/// A socket that tells its [`Conn`] when bytes arrive.
#[derive(Debug)]
pub(crate) struct Watched<S> {
    io: S,
    conn: Arc<Conn>,
    /// Read before the server had the socket; given to it first.
    opening: Opening,
}

impl<S> Watched<S> {
    pub(crate) fn new(io: S, conn: Arc<Conn>, opening: Opening) -> Self {
        Watched { io, conn, opening }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let opening = &mut self.opening;
        if opening.given < opening.len && buf.remaining() > 0 {
            let rest = &opening.bytes[usize::from(opening.given)..usize::from(opening.len)];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            opening.given += n as u8;
            // What has arrived behind the opening comes in the same read. Given alone, the
            // opening is a partial request head, and hyper then doubles its read buffer to
            // 16 KiB for the rest of the connection (an idle listen stream's largest cost).
            // Nothing more yet, or an error: the opening alone now, and the next read meets
            // the rest (or, after an error, the closed socket).
            if buf.remaining() > 0 {
                let _ = Pin::new(&mut self.io).poll_read(cx, buf);
            }
            self.conn.received(&buf.filled()[before..]);
            return Poll::Ready(Ok(()));
        }
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled
            && buf.filled().len() > before
        {
            self.conn.received(&buf.filled()[before..]);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// One request in flight on a connection.
#[derive(Debug)]
pub(crate) struct Busy(Option<Arc<Conn>>);

impl Busy {
    fn end(&mut self) {
        if let Some(conn) = self.0.take() {
            conn.idle_since.store(conn.all.millis(), Ordering::Release);
            conn.in_flight.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.end();
    }
}

/// A response body that keeps its request in flight until it ends or is dropped.
#[derive(Debug)]
pub(crate) struct Tracked<B> {
    body: B,
    busy: Busy,
}

impl<B> Tracked<B> {
    pub(crate) fn new(body: B, busy: Busy) -> Self {
        Tracked { body, busy }
    }
}

impl<B: Body + Unpin> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            self.busy.end();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The gateway's side of a loopback connection whose client sent `parts`, a moment
    /// apart, then closed.
    async fn accepted_after(parts: &'static [&'static [u8]]) -> tokio::net::TcpStream {
        use tokio::io::AsyncWriteExt as _;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
            for part in parts {
                client.write_all(part).await.unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        listener.accept().await.unwrap().0
    }

    /// What a server reading through [`Watched`] gets from a connection that sent `parts`,
    /// and whether it opened with HTTP/2's preface.
    async fn served_after(parts: &'static [&'static [u8]]) -> (bool, Vec<u8>) {
        use tokio::io::AsyncReadExt as _;
        let mut stream = accepted_after(parts).await;
        let opening = Opening::read(&mut stream).await;
        let http2 = opening.is_http2();
        let conn = conns(4).admit().unwrap();
        let mut watched = Watched::new(stream, conn.clone(), opening);
        let mut all = Vec::new();
        watched.read_to_end(&mut all).await.unwrap();
        if !all.is_empty() {
            assert!(
                conn.read_any.load(Ordering::Acquire),
                "bytes seen by the Conn"
            );
        }
        (http2, all)
    }

    #[tokio::test]
    async fn the_opening_is_told_apart_then_given_to_the_server_first() {
        const HTTP2: [&[&[u8]]; 2] = [
            &[b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"],
            &[b"P", b"R", b"I * HTTP/2.0\r\n\r\nSM\r\n\r\n"],
        ];
        const HTTP1: [&[&[u8]]; 5] = [
            &[b"POST /mcp HTTP/1.1\r\n"],
            &[b"P", b"OST / HTTP/1.1"],
            &[b"PRIX"],
            &[b"PR"],
            &[],
        ];
        for parts in HTTP2 {
            assert_eq!(
                served_after(parts).await,
                (true, parts.concat()),
                "{parts:?}"
            );
        }
        for parts in HTTP1 {
            assert_eq!(
                served_after(parts).await,
                (false, parts.concat()),
                "{parts:?}"
            );
        }
    }

    /// hyper parses a request head from its first read: the opening must not come alone
    /// (a partial head makes hyper double its read buffer for the connection's life).
    #[tokio::test]
    async fn the_opening_and_what_followed_it_come_in_one_read() {
        use tokio::io::AsyncReadExt as _;
        const HEAD: &[u8] = b"POST /mcp HTTP/1.1\r\nhost: x\r\n\r\n";
        let mut stream = accepted_after(&[HEAD]).await;
        let opening = Opening::read(&mut stream).await;
        assert!(
            usize::from(opening.len) < HEAD.len(),
            "the opening is a prefix"
        );
        let mut watched = Watched::new(stream, conns(4).admit().unwrap(), opening);
        let mut first = [0u8; 8192];
        let n = watched.read(&mut first).await.unwrap();
        assert_eq!(&first[..n], HEAD);
    }

    fn conns(max: usize) -> Arc<Connections> {
        Arc::new(Connections::new(
            max,
            Duration::from_millis(200),
            Duration::from_millis(400),
        ))
    }

    #[tokio::test]
    async fn a_full_gateway_closes_the_oldest_silent_connection_else_refuses() {
        let all = conns(2);
        let a = all.admit().expect("first");
        let b = all.admit().expect("second");
        let busy_b = b.begin();
        // Full: `a` never sent a request, so it makes room.
        let c = all.admit().expect("third evicts the silent one");
        assert_eq!(a.closing().await, Closed::Evicted);
        drop(a);
        let _busy_c = c.begin();
        // Full of busy connections: refused.
        assert!(all.admit().is_none());
        drop((busy_b, b));
        assert!(all.admit().is_some());
    }

    #[tokio::test]
    async fn silence_then_idleness_close_a_connection() {
        let all = conns(8);
        let silent = all.admit().expect("admitted");
        let started = Instant::now();
        assert_eq!(silent.closing().await, Closed::HeaderTimeout);
        assert!(started.elapsed() >= Duration::from_millis(200));

        let used = all.admit().expect("admitted");
        let busy = used.begin();
        // In flight: not closed however long it takes.
        let waited = tokio::time::timeout(Duration::from_millis(600), used.closing()).await;
        assert!(waited.is_err(), "a busy connection was closed");
        drop(busy);
        let ended = Instant::now();
        assert_eq!(used.closing().await, Closed::Idle);
        assert!(ended.elapsed() >= Duration::from_millis(400));
    }

    #[tokio::test]
    async fn a_started_http1_head_must_finish_within_the_header_timeout() {
        let all = conns(8);
        let h1 = all.admit().expect("admitted");
        h1.received(b"GET / HTTP/1.1\r\n");
        drop(h1.begin());
        // Idle, then the first bytes of a second head: the header timeout, not the idle one.
        h1.received(b"GE");
        let started = Instant::now();
        assert_eq!(h1.closing().await, Closed::HeaderTimeout);
        assert!(started.elapsed() < Duration::from_millis(350));

        // HTTP/2 frames between streams (PING, SETTINGS) are not a request head.
        let h2 = all.admit().expect("admitted");
        h2.received(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        drop(h2.begin());
        h2.received(b"\x00\x00\x08\x06");
        assert_eq!(h2.closing().await, Closed::Idle);
    }
}
