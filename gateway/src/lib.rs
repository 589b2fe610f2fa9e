//! The mcp-tasks gateway: MCP 2026-07-28 over Streamable HTTP, stateless, and the 2025
//! revisions in sessions kept in Redis.
//!
//! A request flows down this list, and each module uses only those below it (no cycles):
//!
//! - `lib.rs`: [`run`], the accept loop and the drain; `conn.rs` bounds and times
//!   connections.
//! - `http.rs`: routes, and `/mcp` as a pipeline of named steps (Origin and Host,
//!   authentication, 2025 `GET`/`DELETE`, Content-Type and Accept, the body, one request).
//! - `dispatch.rs` and `handlers/`: one 2026-07-28 handler per method, taking its typed
//!   params; `legacy/`: 2025 sessions (the record and `initialize`, their requests, the
//!   tasks API, answers to our input requests, the `GET` stream).
//! - `launch.rs`: the one path from a `tools/call` to a task, shared by both eras.
//! - `console/`: the operator's console (`MCPT_CONSOLE=on`): pages, its JSON API and
//!   live updates, served beside `/mcp`.
//! - `state.rs`: what every request shares; `auth/` (who is calling: static tokens, JWTs
//!   against a JWKS in `auth/jwt/`), `registry.rs` (the live tool list, cached briefly).
//! - `envelope.rs`, `headers.rs`: the JSON-RPC envelope, `_meta`, routing headers and
//!   header/body checks, then the [`Method`](mcp_tasks_protocol::method::Method) and its
//!   typed params (`mcp_tasks_protocol::params`, `::legacy`), parsed once.
//! - `error.rs`: the one mapping from errors to JSON-RPC error objects and HTTP statuses,
//!   for both eras.
//! - `reply.rs`: what handlers answer with and how it becomes a response (JSON, SSE).
//!
//! The gateway never runs a tool and keeps no task state: every answer comes from Redis
//! (through `mcp_tasks_store`), so any replica answers any request.

#![warn(missing_docs)]

mod auth;
mod conn;
mod dispatch;
mod envelope;
mod error;
mod handlers;
mod headers;
mod http;
mod launch;
mod legacy;
mod registry;
mod reply;
mod state;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use mcp_tasks_shared::config::GatewayConfig;
use mcp_tasks_store::events::EventHub;
use mcp_tasks_store::{Store, StoreError};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::state::State;

/// Check the authentication settings the way [`run`] will use them (read the token file,
/// load the key set), so a binary can refuse a bad configuration before it says it listens.
///
/// # Errors
/// [`GatewayError::Auth`], whose text is the one-line reason.
pub async fn check_auth(config: &GatewayConfig) -> Result<(), GatewayError> {
    auth::Authenticator::new(&config.auth)
        .await
        .map(drop)
        .map_err(GatewayError::Auth)
}

/// Why the gateway stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// Redis unreachable at start.
    #[error("cannot reach redis")]
    Redis(#[from] StoreError),
    /// The listener failed.
    #[error("listener failed")]
    Io(#[from] std::io::Error),
    /// Authentication cannot be set up (token file or key set unreadable).
    #[error("{0}")]
    Auth(auth::AuthError),
    /// The address is reachable and the configuration would serve it unauthenticated.
    #[error("{0}")]
    Exposed(#[from] mcp_tasks_shared::config::Exposure),
    /// `MCPT_CONSOLE=on` in a gateway built without the console.
    #[error(
        "MCPT_CONSOLE=on, but this gateway was built without the console (build it with `--features console`, as the mcp-tasks command and the image are)"
    )]
    NoConsole,
}

/// Serve MCP on `listener` until `shutdown` fires, then stop accepting, report not-ready,
/// end listen streams and let in-flight requests finish within the grace period.
///
/// # Errors
/// Redis unreachable at start, or the listener failing.
pub async fn run(
    config: GatewayConfig,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), GatewayError> {
    let local: SocketAddr = listener.local_addr()?;
    config.check_exposure(local)?;
    #[cfg(not(feature = "console"))]
    if config.console.enabled {
        return Err(GatewayError::NoConsole);
    }
    let hub_stop = CancellationToken::new();
    let state = start_state(config, local, &hub_stop).await?;
    let connections = Arc::new(conn::Connections::new(
        state.config.max_connections,
        state.config.header_timeout,
        state.config.idle_timeout,
    ));
    let protocols = Arc::new(Protocols::new());
    let graceful = GracefulShutdown::new();
    tracing::info!(addr = %local, "gateway started");
    let stop_accepting = stop_accepting(&state, &shutdown);
    tokio::pin!(stop_accepting);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut stop_accepting => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Some(slot) = connections.admit() else {
            tracing::debug!(peer = %peer, "MCPT_MAX_CONNECTIONS reached; connection refused");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        spawn_connection(&state, &protocols, graceful.watcher(), stream, peer, slot);
    }
    tracing::info!("draining in-flight requests");
    if tokio::time::timeout(state.config.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still in flight after the grace period; closing");
    }
    hub_stop.cancel();
    tracing::info!("gateway stopped");
    Ok(())
}

/// What every request shares: authentication, Redis, the event hub (stopped by
/// `hub_stop`, as are the tally and the console), the tool registry.
async fn start_state(
    config: GatewayConfig,
    local: SocketAddr,
    hub_stop: &CancellationToken,
) -> Result<Arc<State>, GatewayError> {
    let auth = Arc::new(
        auth::Authenticator::new(&config.auth)
            .await
            .map_err(GatewayError::Auth)?,
    );
    let store = Store::connect_sharded(&config.redis_url, config.queue_shards)
        .await?
        .with_replication(config.replication)?;
    store.warn_if_evicting().await;
    let hub = EventHub::start(&store, hub_stop.clone());
    tokio::spawn(mcp_tasks_shared::tally::publish(
        store.clone(),
        format!("gateway:{}", uuid::Uuid::new_v4().simple()),
        hub_stop.clone(),
    ));
    let streams_end = CancellationToken::new();
    let loopback_only = local.ip().is_loopback();
    #[cfg(feature = "console")]
    let console = config.console.enabled.then(|| {
        let mount = mcp_tasks_console::Mount {
            store: store.clone(),
            auth: auth.clone(),
            allowed_origins: config.allowed_origins.clone(),
            loopback_only,
            streams_end: streams_end.clone(),
        };
        mcp_tasks_console::Console::start(&config.console, mount, &hub, hub_stop.clone())
    });
    Ok(Arc::new(State {
        hub,
        #[cfg(feature = "console")]
        console,
        registry: registry::Registry::new(store.clone()),
        forwarder: store.forwarder(mcp_tasks_store::forward::ForwardLimits {
            wait: config.forward_wait,
            max_in_flight: config.forward_max_in_flight,
        }),
        auth,
        store,
        loopback_only,
        ready: AtomicBool::new(true),
        streams_end,
        prunes: state::Prunes::new(),
        config,
    }))
}

/// After SIGTERM: report not-ready but keep accepting for MCPT_DRAIN_DELAY, so load
/// balancers stop routing here before the listener closes.
async fn stop_accepting(state: &State, shutdown: &CancellationToken) {
    shutdown.cancelled().await;
    state.ready.store(false, Ordering::Relaxed);
    tracing::info!(
        delay_ms = state.config.drain_delay.as_millis() as u64,
        "not ready; draining soon"
    );
    tokio::time::sleep(state.config.drain_delay).await;
    // Listen streams end now, when the listener closes, not at SIGTERM: a client that
    // reconnects during the drain delay would land here again.
    state.streams_end.cancel();
}

/// The HTTP/1 and HTTP/2 connection settings every connection is served with.
struct Protocols {
    http1: hyper::server::conn::http1::Builder,
    http2: hyper::server::conn::http2::Builder<TokioExecutor>,
}

impl Protocols {
    fn new() -> Protocols {
        // No hyper header timeout: it would also close idle keep-alive connections at the
        // header timeout; `conn` times request heads and idleness apart.
        let mut http1 = hyper::server::conn::http1::Builder::new();
        http1.header_read_timeout(None);
        let http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        Protocols { http1, http2 }
    }
}

/// Serve one admitted connection on a task of its own, every request through
/// [`http::serve`], until it closes, times out or the gateway stops.
fn spawn_connection(
    state: &Arc<State>,
    protocols: &Arc<Protocols>,
    watcher: Watcher,
    mut stream: TcpStream,
    peer: SocketAddr,
    slot: Arc<conn::Conn>,
) {
    let stopping = state.streams_end.clone();
    let state = state.clone();
    let requests = slot.clone();
    let service = hyper::service::service_fn(move |req: hyper::Request<_>| {
        // The console's sign-in limit counts attempts per client address.
        #[cfg(feature = "console")]
        let req = {
            let mut req = req;
            req.extensions_mut().insert(conn::Peer(peer));
            req
        };
        let busy = requests.begin();
        let served = http::serve(state.clone(), req);
        async move {
            let res = served.await;
            Ok::<_, std::convert::Infallible>(res.map(|body| conn::Tracked::new(body, busy)))
        }
    });
    let protocols = protocols.clone();
    tokio::spawn(async move {
        // The first bytes tell HTTP/1 from HTTP/2. Until they come the connection is
        // closed by its timeouts, or at once when the gateway stops accepting (graceful
        // shutdown does not wait for it).
        let opening = tokio::select! {
            opening = conn::Opening::read(&mut stream) => opening,
            why = slot.closing() => return conn::Conn::record_close(why),
            () = stopping.cancelled() => return,
        };
        let http2 = opening.is_http2();
        let io = TokioIo::new(conn::Watched::new(stream, slot.clone(), opening));
        // HTTP/1 and HTTP/2 apart, not one connection type for both: that one holds
        // HTTP/2's state inline, kilobytes every idle listen stream would keep.
        let served: Pin<Box<dyn Future<Output = hyper::Result<()>> + Send>> = if http2 {
            Box::pin(watcher.watch(protocols.http2.serve_connection(io, service)))
        } else {
            Box::pin(watcher.watch(protocols.http1.serve_connection(io, service)))
        };
        tokio::select! {
            ended = served => if let Err(e) = ended {
                tracing::debug!(peer = %peer, error = %e, "connection ended with an error");
            },
            why = slot.closing() => conn::Conn::record_close(why),
        }
    });
}

/// Entry points for fuzzing the request decoder (`gateway/fuzz`); not a stable API.
#[doc(hidden)]
pub mod fuzzing {
    use mcp_tasks_protocol::jsonrpc::ErrorObject;

    /// Run the checks a POST body goes through before dispatch (routing headers, JSON,
    /// envelope, `_meta`, header/body agreement). `Ok(true)` for a request, `Ok(false)` for
    /// a notification, else the HTTP status and JSON-RPC error code it would be answered with.
    ///
    /// # Errors
    /// The rejection, as (HTTP status, JSON-RPC code).
    pub fn check_request(headers: &hyper::HeaderMap, body: &[u8]) -> Result<bool, (u16, i64)> {
        let routing = crate::headers::Routing::from_headers(headers);
        match crate::envelope::parse(body, &routing) {
            Ok(crate::envelope::Body::Request(..)) => Ok(true),
            Ok(crate::envelope::Body::Notification | crate::envelope::Body::Initialize { .. }) => {
                Ok(false)
            }
            Err((_, e)) => Err((e.status().as_u16(), ErrorObject::from(&e).code)),
        }
    }
}
