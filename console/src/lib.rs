//! The operator's console (`MCPT_CONSOLE=on`): pages under `/console/`, the JSON API under
//! `/console/api/` (also what `mcp-tasks queues`, `workers` and `tasks` read with
//! `--url`), and an event stream telling open pages that something changed.
//!
//! Who gets in: without authentication (`MCPT_AUTH=none`, loopback only, see
//! `GatewayConfig::check_exposure`) everyone who can reach the gateway; otherwise only the
//! principals of `MCPT_CONSOLE_PRINCIPALS`, by a session cookie from the sign-in page
//! (`session.rs`) or a bearer token. Everyone else gets 404 on every console path but the
//! sign-in page, as for a path that does not exist. State-changing requests (`POST`) must
//! carry an `Origin` of this server (or one of `MCPT_ALLOWED_ORIGINS`). Every action is
//! logged with the acting principal (an operator named in the configuration).
//!
//! Reads come from the console's memory (`view.rs`), kept by one refresher per gateway;
//! a task's detail page reads that task once more (worker, deliveries, trace).
//!
//! The gateway mounts it (its `console` feature) and gives it only a [`Mount`]: the store,
//! the gateway's authentication behind [`Access`], and a few settings.
//!
//! Layout: `routes.rs` routes the pages, `api.rs` the JSON API, `events.rs` the event
//! stream, `signin.rs` the sign-in page; `access.rs` decides who gets in and which `POST`s
//! are accepted, `respond.rs` shapes the answers; `tasks.rs` finds and cancels a task for
//! both the pages and the API; `strike.rs` and `dead.rs` are the kill switch and the dead
//! letters' list and redrive for both; `view.rs` is the console's memory and its refresher.

mod access;
mod api;
mod chart;
mod dead;
mod events;
mod pages;
mod rates;
mod respond;
mod routes;
mod session;
mod signin;
mod signin_limit;
mod strike;
mod tasks;
mod view;

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use hyper::body::Incoming;
use hyper::{HeaderMap, Request, Response};
use mcp_tasks_shared::body::ResBody;
use mcp_tasks_shared::config::ConsoleConfig;
use mcp_tasks_store::Store;
use tokio_util::sync::CancellationToken;

use session::Sessions;
use view::View;

/// A principal, once a credential is checked (`None`: not valid).
pub type Checked<'a> = Pin<Box<dyn Future<Output = Option<String>> + Send + 'a>>;

/// What the console asks of the authentication of the server that mounts it.
pub trait Access: Send + Sync {
    /// Whether callers authenticate (without, every caller is the anonymous principal).
    fn enabled(&self) -> bool;
    /// The principal of a request's `Authorization` header.
    fn principal<'a>(&'a self, headers: &'a HeaderMap) -> Checked<'a>;
    /// The principal a bearer token (a static token or a JWT) stands for.
    fn principal_of<'a>(&'a self, token: &'a str) -> Checked<'a>;
    /// What a session signed in with `token` is bound to.
    fn credential_of(&self, token: &str) -> Credential;
    /// Whether `principal` still holds a token whose digest passes `matches` (static
    /// tokens); always true where a session is capped otherwise (a JWT's `exp`).
    fn still_holds(&self, principal: &str, matches: &dyn Fn(&[u8; 32]) -> bool) -> bool;
}

/// What a console session is bound to (see [`Access::credential_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    /// No authentication.
    None,
    /// A token of the token file, by its SHA-256.
    Token([u8; 32]),
    /// A JWT valid until these seconds since the epoch.
    Expires(u64),
}

/// What the console is given by the server that mounts it.
pub struct Mount {
    /// The task store.
    pub store: Store,
    /// Who callers are.
    pub auth: Arc<dyn Access>,
    /// `MCPT_ALLOWED_ORIGINS`: origins whose `POST`s are accepted besides this server's.
    pub allowed_origins: Vec<String>,
    /// Listening on loopback only: `Host` must then be a loopback name (DNS rebinding).
    pub loopback_only: bool,
    /// Cancelled when the server stops accepting: event streams end.
    pub streams_end: CancellationToken,
}

/// The console's name for what it is given.
type State = Mount;

/// The console of one gateway.
pub struct Console {
    state: Arc<Mount>,
    view: Arc<View>,
    sessions: Sessions,
    config: ConsoleConfig,
    /// Event streams open now (at most `MCPT_CONSOLE_MAX_STREAMS`).
    streams: Arc<AtomicUsize>,
    /// Sign-in attempts per client address.
    attempts: signin_limit::Attempts,
}

/// Largest request body accepted (a sign-in form, a strike).
const MAX_FORM_BYTES: usize = 16 * 1024;

impl Console {
    /// The console of `config` on `mount`, with its refresher started (it stops with
    /// `stop`).
    #[must_use]
    pub fn start(
        config: &ConsoleConfig,
        mount: Mount,
        hub: &mcp_tasks_store::events::EventHub,
        stop: CancellationToken,
    ) -> Console {
        let store = &mount.store;
        if config.secret.is_none() {
            tracing::info!(
                "console: MCPT_CONSOLE_SECRET unset: sessions are signed with a random key of \
                 this process (they end at a restart and other replicas do not accept them)"
            );
        }
        let view = Arc::new(View::new());
        tokio::spawn(view::refresher(
            view.clone(),
            store.clone(),
            hub.clone(),
            stop,
        ));
        Console {
            state: Arc::new(mount),
            view,
            sessions: Sessions::new(config.secret.as_deref()),
            config: config.clone(),
            streams: Arc::new(AtomicUsize::new(0)),
            attempts: signin_limit::Attempts::default(),
        }
    }

    /// Answer one request under `/console` from `peer` (its address, for the sign-in
    /// limit).
    pub async fn serve(&self, req: Request<Incoming>, peer: Option<IpAddr>) -> Response<ResBody> {
        routes::serve(&self.state, self, req, peer).await
    }
}
