//! One JSON-RPC session with an upstream MCP server, over either transport: request ids
//! and their waiting callers, the `initialize` handshake, `ping` answered, and what the
//! server sends on its own (notifications, requests) routed to the call holding the
//! session. The bytes on the wire are `stdio.rs` and `streamable.rs`; keeping a few
//! sessions per upstream is [`Pool`].
//!
//! A session serves one call at a time (a [`Lease`]): before the 2026 protocol, a request
//! the server sends during a call does not say which call it belongs to, so exclusive use
//! is what makes an `elicitation/create` surely this call's. Outside a call, such requests
//! are answered with an error.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_tasks_protocol::jsonrpc::{ErrorObject, INTERNAL_ERROR, METHOD_NOT_FOUND};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use mcp_tasks_protocol::legacy;

use super::{Target, stdio, streamable};

/// The version asked for in `initialize`; the server may answer with an older one.
pub(super) const ASKED_VERSION: &str = legacy::VERSION_2025_11_25;
/// The versions this client speaks (all with `initialize`).
const SPOKEN_VERSIONS: [&str; 3] = [
    legacy::VERSION_2025_11_25,
    legacy::VERSION_2025_06_18,
    "2025-03-26",
];
/// Sessions kept idle per upstream; more run while calls need them, then close.
const MAX_IDLE: usize = 4;

/// Something the server sent on its own.
#[derive(Debug)]
pub(super) enum Incoming {
    /// A server→client request, to be answered with [`Session::respond`].
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// A notification.
    Notification { method: String, params: Value },
}

/// Why a request got no result.
#[derive(Debug, thiserror::Error)]
pub(super) enum RpcError {
    /// The server answered with a JSON-RPC error.
    #[error("error {}: {}", .0.code, .0.message)]
    Error(ErrorObject),
    /// The connection went away after the request was written: the server may have
    /// received it (the reason, for the message).
    #[error("connection closed: {0}")]
    Closed(String),
    /// The connection was gone before the request was written: the server never saw it.
    #[error("connection closed before sending: {0}")]
    Unsent(String),
}

/// Why a session with an upstream could not be opened.
#[derive(Debug, thiserror::Error)]
pub(super) enum UpstreamError {
    /// The stdio server could not be started.
    #[error(transparent)]
    Stdio(#[from] stdio::StdioError),
    /// The Streamable HTTP transport could not be made.
    #[error(transparent)]
    Http(#[from] streamable::HttpError),
    /// `initialize` got no answer within the limit (in seconds).
    #[error("no answer to initialize within {0}s")]
    InitTimeout(u64),
    /// `initialize` got an error or the connection closed.
    #[error("initialize failed: {0}")]
    Initialize(#[source] RpcError),
    /// The server answered with a protocol version we do not speak.
    #[error(
        "the server answered initialize with protocol version {0:?}; this worker speaks {spoken}",
        spoken = SPOKEN_VERSIONS.join(", ")
    )]
    Version(String),
}

type Reply = Result<Value, ErrorObject>;

/// What both transports share with the session: where responses go and where the rest goes.
pub(super) struct Core {
    pending: Mutex<HashMap<i64, oneshot::Sender<Reply>>>,
    events: mpsc::UnboundedSender<Incoming>,
    /// Whether a call holds the session (else server requests are refused).
    leased: AtomicBool,
    /// Cancelled once the transport is gone.
    pub(super) closed: CancellationToken,
    why: Mutex<String>,
}

impl Core {
    fn new() -> (Arc<Core>, mpsc::UnboundedReceiver<Incoming>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let core = Arc::new(Core {
            pending: Mutex::default(),
            events: tx,
            leased: AtomicBool::new(false),
            closed: CancellationToken::new(),
            why: Mutex::default(),
        });
        (core, rx)
    }

    /// The transport is gone: every waiting request fails with `why`.
    pub(super) fn close(&self, why: impl Into<String>) {
        if let Ok(mut w) = self.why.lock()
            && w.is_empty()
        {
            *w = why.into();
        }
        self.closed.cancel();
        if let Ok(mut p) = self.pending.lock() {
            p.clear();
        }
    }

    fn why(&self) -> String {
        self.why
            .lock()
            .map(|w| w.clone())
            .unwrap_or_default()
            .chars()
            .take(300)
            .collect()
    }

    /// Fail our request `id` (the transport could not deliver it).
    pub(super) fn fail(&self, id: i64, error: ErrorObject) {
        let waiter = self.pending.lock().ok().and_then(|mut p| p.remove(&id));
        if let Some(w) = waiter {
            let _ = w.send(Err(error));
        }
    }

    /// Route one message from the server. Returns the reply to send at once, if any
    /// (`ping`, or a refused request outside a call).
    pub(super) fn dispatch(&self, message: Value) -> Option<Value> {
        let Value::Object(mut m) = message else {
            return None;
        };
        let method = m.get("method").and_then(Value::as_str).map(str::to_owned);
        let id = m.remove("id");
        match (method, id) {
            (None, Some(id)) => {
                let reply = match (m.remove("result"), m.remove("error")) {
                    (Some(r), _) => Ok(r),
                    (None, Some(e)) => Err(serde_json::from_value(e).unwrap_or_else(|_| {
                        ErrorObject::new(INTERNAL_ERROR, "malformed error from upstream")
                    })),
                    (None, None) => return None,
                };
                let waiter = id
                    .as_i64()
                    .and_then(|id| self.pending.lock().ok()?.remove(&id));
                if let Some(w) = waiter {
                    let _ = w.send(reply);
                }
                None
            }
            (Some(method), Some(id)) => {
                if method == "ping" {
                    return Some(json!({"jsonrpc": "2.0", "id": id, "result": {}}));
                }
                let params = m.remove("params").unwrap_or(Value::Null);
                if self.leased.load(Ordering::SeqCst) {
                    let _ = self.events.send(Incoming::Request { id, method, params });
                    return None;
                }
                Some(error_reply(
                    id,
                    &ErrorObject::new(
                        METHOD_NOT_FOUND,
                        format!("{method} is answered only during a tool call"),
                    ),
                ))
            }
            (Some(method), None) => {
                if self.leased.load(Ordering::SeqCst) {
                    let params = m.remove("params").unwrap_or(Value::Null);
                    let _ = self.events.send(Incoming::Notification { method, params });
                }
                None
            }
            (None, None) => None,
        }
    }
}

fn error_reply(id: Value, e: &ErrorObject) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": e})
}

/// The two transports.
enum Link {
    Stdio(stdio::Stdio),
    Http(streamable::Http),
}

/// A request sent, its answer still to come.
pub(super) struct Pending {
    /// The JSON-RPC id (for `notifications/cancelled`).
    pub(super) id: i64,
    rx: oneshot::Receiver<Reply>,
    core: Arc<Core>,
    /// The connection was closed before the request was written.
    unsent: bool,
}

impl Pending {
    /// The answer.
    pub(super) async fn wait(&mut self) -> Result<Value, RpcError> {
        match (&mut self.rx).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(RpcError::Error(e)),
            Err(_) if self.unsent => Err(RpcError::Unsent(self.core.why())),
            Err(_) => Err(RpcError::Closed(self.core.why())),
        }
    }
}

/// An initialized session.
pub(super) struct Session {
    link: Link,
    core: Arc<Core>,
    next_id: AtomicI64,
    /// Notifications and requests the server sent during the current call.
    pub(super) events: mpsc::UnboundedReceiver<Incoming>,
}

impl Session {
    /// Start the transport and run the `initialize` handshake, within `limit`.
    pub(super) async fn open(target: &Target, limit: Duration) -> Result<Session, UpstreamError> {
        let (core, events) = Core::new();
        let link = match target {
            Target::Command { argv, env, cwd } => Link::Stdio(stdio::Stdio::start(
                argv,
                env,
                cwd.as_deref(),
                core.clone(),
            )?),
            Target::Url(url) => Link::Http(streamable::Http::new(url, core.clone())?),
        };
        let session = Session {
            link,
            core,
            next_id: AtomicI64::new(1),
            events,
        };
        match tokio::time::timeout(limit, session.initialize()).await {
            Ok(Ok(())) => Ok(session),
            Ok(Err(e)) => {
                session.close().await;
                Err(e)
            }
            Err(_) => {
                session.close().await;
                Err(UpstreamError::InitTimeout(limit.as_secs()))
            }
        }
    }

    async fn initialize(&self) -> Result<(), UpstreamError> {
        let params = json!({
            "protocolVersion": ASKED_VERSION,
            // All three are forwarded to our own client as input requests.
            "capabilities": {"elicitation": {}, "sampling": {}, "roots": {}},
            "clientInfo": {"name": "mcp-tasks-worker", "version": env!("CARGO_PKG_VERSION")},
        });
        let result = self
            .request("initialize", params)
            .await
            .map_err(UpstreamError::Initialize)?;
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !SPOKEN_VERSIONS.contains(&version) {
            return Err(UpstreamError::Version(version.to_owned()));
        }
        if let Link::Http(h) = &self.link {
            h.set_version(version);
        }
        self.notify("notifications/initialized", json!({})).await;
        Ok(())
    }

    /// Whether the transport is still up.
    pub(super) fn is_alive(&self) -> bool {
        !self.core.closed.is_cancelled()
    }

    async fn send(&self, message: Value) {
        match &self.link {
            Link::Stdio(s) => s.send(&message),
            Link::Http(h) => h.send(message).await,
        }
    }

    /// Send a request; its answer comes through the returned [`Pending`].
    pub(super) async fn start(&self, method: &str, params: Value) -> Pending {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut p) = self.core.pending.lock() {
            p.insert(id, tx);
        }
        let unsent = self.core.closed.is_cancelled();
        if unsent {
            // Already gone: dropping the waiter makes `wait` report why, and nothing is
            // written, so the caller knows the server never saw it.
            drop(
                self.core
                    .pending
                    .lock()
                    .ok()
                    .and_then(|mut p| p.remove(&id)),
            );
        } else {
            self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
                .await;
        }
        Pending {
            id,
            rx,
            core: self.core.clone(),
            unsent,
        }
    }

    /// Send a request and wait for its answer.
    pub(super) async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        self.start(method, params).await.wait().await
    }

    /// Send a notification.
    pub(super) async fn notify(&self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await;
    }

    /// Answer the server's request `id`.
    pub(super) async fn respond(&self, id: Value, reply: Result<Value, ErrorObject>) {
        let message = match reply {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(e) => error_reply(id, &e),
        };
        self.send(message).await;
    }

    /// End the session (the process, or the HTTP session).
    pub(super) async fn close(self) {
        self.core.close("closed by the worker");
        match self.link {
            Link::Stdio(s) => s.stop().await,
            Link::Http(h) => h.delete().await,
        }
    }
}

/// Sessions of one upstream, started on demand.
pub(super) struct Pool {
    target: Target,
    limit: Duration,
    idle: Mutex<Vec<Session>>,
}

impl Pool {
    /// A pool starting sessions with `target`, each within `limit`.
    pub(super) fn new(target: Target, limit: Duration) -> Arc<Pool> {
        Arc::new(Pool {
            target,
            limit,
            idle: Mutex::default(),
        })
    }

    /// Keep `session` (the one discovery used) for the first call.
    pub(super) fn keep(&self, session: Session) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(session);
        }
    }

    /// A session for one call: an idle one still alive, else a new one.
    ///
    /// # Errors
    /// A new session could not be started or initialized.
    pub(super) async fn lease(self: &Arc<Self>) -> Result<Lease, UpstreamError> {
        loop {
            let next = self.idle.lock().ok().and_then(|mut idle| idle.pop());
            match next {
                Some(s) if s.is_alive() => return Ok(Lease::new(s, self.clone())),
                // A dead one (the process exited): drop it and look again.
                Some(s) => s.close().await,
                None => break,
            }
        }
        let s = Session::open(&self.target, self.limit).await?;
        Ok(Lease::new(s, self.clone()))
    }
}

/// A session held by one call. Dropped after [`Lease::finish`], it goes back to the pool;
/// dropped otherwise, the session is closed (its call may still run upstream).
pub(super) struct Lease {
    session: Option<Session>,
    pool: Arc<Pool>,
    clean: bool,
}

impl Lease {
    fn new(mut session: Session, pool: Arc<Pool>) -> Lease {
        // Whatever arrived while idle belonged to no call.
        while session.events.try_recv().is_ok() {}
        session.core.leased.store(true, Ordering::SeqCst);
        Lease {
            session: Some(session),
            pool,
            clean: false,
        }
    }

    /// The session.
    pub(super) fn session(&mut self) -> &mut Session {
        self.session.as_mut().expect("held until drop")
    }

    /// The call ended with nothing left running upstream: keep the session.
    pub(super) fn finish(&mut self) {
        self.clean = true;
    }

    /// Take the session out (to close it after last messages).
    pub(super) fn take(&mut self) -> Option<Session> {
        self.session.take()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(mut session) = self.session.take() else {
            return;
        };
        session.core.leased.store(false, Ordering::SeqCst);
        while session.events.try_recv().is_ok() {}
        if self.clean
            && session.is_alive()
            && let Ok(mut idle) = self.pool.idle.lock()
            && idle.len() < MAX_IDLE
        {
            idle.push(session);
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(session.close());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unspoken_version_names_those_spoken() {
        assert_eq!(
            UpstreamError::Version("1999-01-01".to_owned()).to_string(),
            "the server answered initialize with protocol version \"1999-01-01\"; \
             this worker speaks 2025-11-25, 2025-06-18, 2025-03-26"
        );
    }

    #[test]
    fn dispatch_routes_answers_pings_and_what_the_server_asks() {
        let (core, mut events) = Core::new();
        let (tx, mut rx) = oneshot::channel();
        core.pending.lock().unwrap().insert(7, tx);
        assert_eq!(
            core.dispatch(json!({"jsonrpc": "2.0", "id": 7, "result": {"x": 1}})),
            None
        );
        assert_eq!(rx.try_recv().unwrap(), Ok(json!({"x": 1})));

        // ping is answered at once, leased or not.
        let pong = core.dispatch(json!({"jsonrpc": "2.0", "id": "p", "method": "ping"}));
        assert_eq!(
            pong,
            Some(json!({"jsonrpc": "2.0", "id": "p", "result": {}}))
        );

        // Outside a call a server request is refused and a notification dropped.
        let ask = json!({"jsonrpc": "2.0", "id": 3, "method": "roots/list", "params": {}});
        let refused = core.dispatch(ask.clone()).expect("an error reply");
        assert_eq!(refused["error"]["code"], METHOD_NOT_FOUND);
        core.dispatch(json!({"jsonrpc": "2.0", "method": "notifications/progress"}));
        assert!(events.try_recv().is_err());

        // During a call both go to it.
        core.leased.store(true, Ordering::SeqCst);
        assert_eq!(core.dispatch(ask), None);
        assert!(
            matches!(events.try_recv(), Ok(Incoming::Request { method, .. }) if method == "roots/list")
        );

        // A closed transport fails what still waits, with its reason.
        let (tx, rx) = oneshot::channel();
        core.pending.lock().unwrap().insert(8, tx);
        core.close("the process exited");
        let mut pending = Pending {
            id: 8,
            rx,
            core: core.clone(),
            unsent: false,
        };
        let got = futures_util::FutureExt::now_or_never(pending.wait()).expect("ready");
        assert!(matches!(got, Err(RpcError::Closed(why)) if why == "the process exited"));

        // One never written (the transport was already closed) says so: it may be sent again.
        let (tx, rx) = oneshot::channel::<Reply>();
        drop(tx);
        let mut pending = Pending {
            id: 9,
            rx,
            core: core.clone(),
            unsent: true,
        };
        let got = futures_util::FutureExt::now_or_never(pending.wait()).expect("ready");
        assert!(matches!(got, Err(RpcError::Unsent(why)) if why == "the process exited"));
    }
}
