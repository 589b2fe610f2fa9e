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

mod api;
mod chart;
mod pages;
mod rates;
mod session;
mod signin_limit;
mod strike;
mod view;

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{HeaderMap, Method, Request, Response, StatusCode};
use maud::Markup;
use mcp_tasks_protocol::meta::ANONYMOUS_OWNER;
use mcp_tasks_shared::body::{self as reply, ResBody};
use mcp_tasks_shared::config::ConsoleConfig;
use mcp_tasks_shared::owner::owner_digest;
use mcp_tasks_store::Store;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use api::Filter;
use session::Sessions;
use view::{Known, View};

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

/// One open event stream, counted while it lives.
struct StreamSlot(Arc<AtomicUsize>);

impl StreamSlot {
    /// A slot, unless `max` streams are open.
    fn take(open: &Arc<AtomicUsize>, max: usize) -> Option<StreamSlot> {
        open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .ok()?;
        Some(StreamSlot(open.clone()))
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How often an idle event stream sends a comment (keeps proxies from closing it).
const KEEPALIVE: Duration = Duration::from_secs(15);
/// Largest sign-in form accepted.
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
}

fn html(status: StatusCode, page: Markup) -> Response<ResBody> {
    let mut res = reply::full(status, Some("text/html; charset=utf-8"), page.into_string());
    secure_headers(res.headers_mut());
    res
}

fn secure_headers(h: &mut HeaderMap) {
    h.insert(
        "content-security-policy",
        HeaderValue::from_static("default-src 'self'; frame-ancestors 'none'; form-action 'self'"),
    );
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("referrer-policy", HeaderValue::from_static("same-origin"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

fn see_other(to: &str) -> Response<ResBody> {
    let mut res = reply::empty(StatusCode::SEE_OTHER);
    if let Ok(v) = HeaderValue::from_str(to) {
        res.headers_mut().insert(header::LOCATION, v);
    }
    res
}

/// What everyone outside the console gets, on every path: the gateway's own 404.
fn not_found() -> Response<ResBody> {
    reply::full(StatusCode::NOT_FOUND, Some("text/plain"), "not found\n")
}

/// Whether a state-changing request comes from a page of this server: its `Origin` must be
/// present and name this server's host (`Host`, or the HTTP/2 `:authority`), or be listed
/// in `MCPT_ALLOWED_ORIGINS`.
fn same_origin(uri: &hyper::Uri, headers: &HeaderMap, allowed: &[String]) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok()) else {
        return false;
    };
    if allowed.iter().any(|a| a == origin) {
        return true;
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| uri.authority().map(hyper::http::uri::Authority::as_str));
    let Some(host) = host else {
        return false;
    };
    origin == format!("http://{host}") || origin == format!("https://{host}")
}

/// Whether `principal` is in `MCPT_CONSOLE_PRINCIPALS`. A JWT's principal is
/// `"{iss} {sub}"`; its `sub` alone may be listed, since only `MCPT_AUTH_ISSUER` is
/// accepted (token-file principals hold no spaces).
fn listed(principals: &[String], principal: &str) -> bool {
    principals.iter().any(|p| p == principal)
        || principal
            .split_once(' ')
            .is_some_and(|(_, sub)| principals.iter().any(|p| p == sub))
}

/// How a console log line names its principal: the owner digest (logs carry no principal's
/// name), or `anonymous` without authentication.
fn logged(principal: &str) -> String {
    if principal == ANONYMOUS_OWNER {
        principal.to_owned()
    } else {
        owner_digest(principal)
    }
}

fn over_tls(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .is_some_and(|v| v.as_bytes() == b"https")
}

impl Console {
    /// The principal allowed in, if the caller is one: anyone without authentication;
    /// else a session's or bearer token's principal listed in `MCPT_CONSOLE_PRINCIPALS`.
    async fn who(&self, state: &State, headers: &HeaderMap) -> Option<String> {
        if !state.auth.enabled() {
            return Some(ANONYMOUS_OWNER.to_owned());
        }
        let principal = match self.sessions.principal(headers) {
            // A session lasts while its token does (a JWT's ends at its `exp`).
            Some((p, credential)) => {
                let holds = state
                    .auth
                    .still_holds(&p, &|digest| self.sessions.token_tag(digest) == credential);
                if !holds {
                    return None;
                }
                p
            }
            None if headers.contains_key(header::AUTHORIZATION) => {
                state.auth.principal(headers).await?
            }
            None => return None,
        };
        listed(&self.config.principals, &principal).then_some(principal)
    }

    /// The principal shown in the page header (none without authentication).
    fn shown<'a>(&self, state: &State, principal: &'a str) -> Option<&'a str> {
        state.auth.enabled().then_some(principal)
    }
}

impl Console {
    /// Answer one request under `/console` from `peer` (its address, for the sign-in
    /// limit).
    pub async fn serve(&self, req: Request<Incoming>, peer: Option<IpAddr>) -> Response<ResBody> {
        serve(&self.state, self, req, peer).await
    }
}

/// Route one request under `/console`.
async fn serve(
    state: &Arc<State>,
    console: &Console,
    req: Request<Incoming>,
    peer: Option<IpAddr>,
) -> Response<ResBody> {
    if state.loopback_only && !mcp_tasks_shared::web::host_allowed(req.uri(), req.headers()) {
        return reply::full(
            StatusCode::FORBIDDEN,
            Some("text/plain"),
            "Host not allowed: this server only answers loopback names\n",
        );
    }
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    if path == "/console/signin" {
        return signin(state, console, req, peer).await;
    }
    if let Some(asset) = path.strip_prefix("/console/static/") {
        // Public: nothing in them is secret, and the sign-in page needs them.
        return match (&method, asset) {
            (&Method::GET, "console.css") => asset_response("text/css", pages::CSS),
            (&Method::GET, "console.js") => asset_response("text/javascript", pages::JS),
            _ => not_found(),
        };
    }
    let Some(principal) = console.who(state, req.headers()).await else {
        return not_found();
    };
    if method == Method::POST && !same_origin(req.uri(), req.headers(), &state.allowed_origins) {
        tracing::info!(http.path = %path, "console: POST refused: Origin missing or foreign");
        return api::error(StatusCode::FORBIDDEN, "Origin missing or not this server");
    }
    let query = req.uri().query().map(str::to_owned);
    let json_body = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let body = if method == Method::POST {
        match Limited::new(req.into_body(), MAX_FORM_BYTES)
            .collect()
            .await
        {
            Ok(b) => b.to_bytes(),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                return api::error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &format!("request body over {MAX_FORM_BYTES} bytes"),
                );
            }
            Err(e) => {
                return api::error(
                    StatusCode::BAD_REQUEST,
                    &format!("request body not read: {e}"),
                );
            }
        }
    } else {
        Bytes::new()
    };
    let fragment = query.as_deref().is_some_and(|q| {
        api::pairs(q)
            .iter()
            .any(|(k, v)| k == "fragment" && v == "1")
    });
    let shown = console.shown(state, &principal);
    let segments: Vec<&str> = path
        .trim_start_matches("/console")
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    match (&method, segments.as_slice()) {
        (&Method::GET, []) => {
            let fleet = console.view.fleet();
            let scale = chart::scale(&console.view.history());
            if fragment {
                html(
                    StatusCode::OK,
                    pages::overview_main(&console.view, &fleet, scale),
                )
            } else {
                html(
                    StatusCode::OK,
                    pages::overview(&console.view, &fleet, scale, shown),
                )
            }
        }
        (&Method::GET, ["chart", name @ ("queues.svg" | "rates.svg")]) => {
            let now = mcp_tasks_protocol::time::now_millis();
            let drawn = if *name == "queues.svg" {
                chart::svg(&console.view.history(), now)
            } else {
                chart::rates_svg(&console.view.rate_points(now), now)
            };
            match drawn {
                Ok(svg) => {
                    let mut res = reply::full(StatusCode::OK, Some("image/svg+xml"), svg);
                    secure_headers(res.headers_mut());
                    res
                }
                Err(why) => {
                    tracing::warn!(error = %why, "console: chart not drawn");
                    api::error(StatusCode::INTERNAL_SERVER_ERROR, "chart not drawn")
                }
            }
        }
        (&Method::GET, ["tasks"]) => match Filter::parse(query.as_deref()) {
            Ok(f) if fragment => html(StatusCode::OK, pages::tasks_main(&console.view, &f)),
            Ok(f) => html(StatusCode::OK, pages::tasks(&console.view, &f, shown)),
            Err(why) => reply::full(StatusCode::BAD_REQUEST, Some("text/plain"), why + "\n"),
        },
        (&Method::GET, ["tasks", id]) => {
            let Some(known) = find(state, console, id, query.as_deref()).await else {
                return reply::full(
                    StatusCode::NOT_FOUND,
                    Some("text/plain"),
                    format!("{UNKNOWN_TASK}\n"),
                );
            };
            // The console remembers summaries: the page reads the task whole (a fragment
            // only its hash; the whole page its worker, deliveries and trace too).
            if fragment {
                let full = state.store.get_task(id, &known.record.owner).await;
                let known = match full {
                    Ok(Some(record)) => Known {
                        record: Arc::new(record),
                        ..known
                    },
                    _ => known,
                };
                return html(StatusCode::OK, pages::task_main(&known));
            }
            let detail = state.store.console_task(id, &known.record.owner).await;
            let detail = detail
                .inspect_err(
                    |e| tracing::warn!(error = %e, task.id = %id, "console: task detail not read"),
                )
                .ok()
                .flatten();
            let known = whole(known, detail.as_ref());
            html(
                StatusCode::OK,
                pages::task(
                    &known,
                    detail.as_ref(),
                    console.config.trace_url.as_deref(),
                    shown,
                ),
            )
        }
        (&Method::POST, ["tasks", id, "cancel"]) => {
            match cancel(state, console, id, query.as_deref(), &principal).await {
                Ok(owner) => see_other(&api::task_path(id, &owner, "")),
                Err(res) => res,
            }
        }
        (&Method::POST, ["strikes"]) => {
            match strike::strike(state, (&body, json_body), &principal).await {
                // A name no worker advertises may be a typo: the operator reads the note.
                Ok(struck) if !struck.known => {
                    shown_now(state, console).await;
                    html(StatusCode::OK, pages::done(&struck.message(), shown))
                }
                Ok(_) => {
                    shown_now(state, console).await;
                    see_other("/console/")
                }
                Err((status, why)) => html(status, pages::refused(&why, shown)),
            }
        }
        (&Method::POST, ["strikes", "restore"]) => {
            match strike::restore(state, (&body, json_body), &principal).await {
                Ok(_) => {
                    shown_now(state, console).await;
                    see_other("/console/")
                }
                Err((status, why)) => html(status, pages::refused(&why, shown)),
            }
        }
        (&Method::POST, ["signout"]) => {
            let mut res = see_other("/console/signin");
            if let Ok(v) = HeaderValue::from_str(&Sessions::end()) {
                res.headers_mut().insert(header::SET_COOKIE, v);
            }
            res
        }
        (_, ["api", rest @ ..]) => {
            let body = (body.as_ref(), json_body);
            api_route(
                state,
                console,
                &method,
                rest,
                query.as_deref(),
                body,
                &principal,
            )
            .await
        }
        _ => not_found(),
    }
}

fn asset_response(content_type: &'static str, body: &'static str) -> Response<ResBody> {
    let mut res = reply::full(StatusCode::OK, Some(content_type), body);
    res.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    res
}

/// `/console/api/…`.
async fn api_route(
    state: &Arc<State>,
    console: &Console,
    method: &Method,
    rest: &[&str],
    query: Option<&str>,
    (body, json_body): (&[u8], bool),
    principal: &str,
) -> Response<ResBody> {
    match (method, rest) {
        (&Method::GET, ["queues"]) => {
            let fleet = console.view.fleet();
            let queues: Vec<serde_json::Value> = fleet
                .queues
                .iter()
                .map(|q| {
                    let mut row = serde_json::to_value(q).unwrap_or_default();
                    row["run_time"] = serde_json::json!(console.view.run_time(Some(&q.name)));
                    row
                })
                .collect();
            api::ok(&serde_json::json!({
                "queues": queues,
                "last_15m": {
                    "counts": console.view.rate_totals(),
                    "run_time": console.view.run_time(None),
                    "per_second": console.view.rate_points(mcp_tasks_protocol::time::now_millis()),
                },
                "refreshed_ms": fleet.refreshed_ms,
                "error": fleet.error,
            }))
        }
        (&Method::GET, ["workers"]) => {
            let fleet = console.view.fleet();
            api::ok(&serde_json::json!({
                "workers": fleet.workers,
                "tools": fleet.tools,
                "refreshed_ms": fleet.refreshed_ms,
                "error": fleet.error,
            }))
        }
        (&Method::GET, ["tasks"]) => match Filter::parse(query) {
            Ok(f) => api::ok(&api::tasks(&console.view, &f)),
            Err(why) => api::error(StatusCode::BAD_REQUEST, &why),
        },
        (&Method::GET, ["tasks", id]) => {
            let Some(known) = find(state, console, id, query).await else {
                return api::error(StatusCode::NOT_FOUND, UNKNOWN_TASK);
            };
            let detail = state
                .store
                .console_task(id, &known.record.owner)
                .await
                .ok()
                .flatten();
            let known = whole(known, detail.as_ref());
            api::ok(&api::task(
                &known,
                detail.as_ref(),
                console.config.trace_url.as_deref(),
            ))
        }
        (&Method::POST, ["tasks", id, "cancel"]) => {
            match cancel(state, console, id, query, principal).await {
                Ok(_) => api::ok(&serde_json::json!({ "cancelled": id })),
                Err(res) => res,
            }
        }
        (&Method::GET, ["strikes"]) => {
            api::ok(&serde_json::json!({ "strikes": console.view.fleet().strikes }))
        }
        (&Method::POST, ["strikes"]) => {
            match strike::strike(state, (body, json_body), principal).await {
                Ok(struck) => {
                    shown_now(state, console).await;
                    api::ok(&serde_json::json!({
                        "struck": struck.strike.describe(),
                        "new": struck.new,
                        "known": struck.known,
                        "cancel_running": struck.strike.cancel_running,
                        "message": struck.message(),
                    }))
                }
                Err((status, why)) => api::error(status, &why),
            }
        }
        (&Method::POST, ["strikes", "restore"]) => {
            let done = strike::restore(state, (body, json_body), principal).await;
            if done.is_ok() {
                shown_now(state, console).await;
            }
            match done {
                Ok(r) => api::ok(&match r.released {
                    Ok(n) => serde_json::json!({ "restored": r.describe, "released": n }),
                    Err(why) => serde_json::json!({
                        "restored": r.describe,
                        "released": null,
                        "note": format!("held jobs not all queued again here ({why}): the workers queue the rest within a few seconds"),
                    }),
                }),
                Err((status, why)) => api::error(status, &why),
            }
        }
        (&Method::GET, ["events"]) => events(state, console),
        (
            _,
            ["queues" | "workers" | "tasks" | "events" | "strikes"]
            | ["tasks", _]
            | ["strikes", "restore"],
        ) => api::error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed here"),
        _ => api::error(StatusCode::NOT_FOUND, "no such console API"),
    }
}

/// After a strike or restore: the strikes in force into the console's memory now, so the
/// page the operator lands on shows them (the refresh would within 2 s).
async fn shown_now(state: &State, console: &Console) {
    match state.store.strikes().await {
        Ok(strikes) => console.view.set_strikes(view::strike_rows(strikes)),
        Err(e) => tracing::debug!(error = %e, "console: strikes not re-read; the refresh will"),
    }
}

/// A remembered summary completed with the task as just read, when it was.
fn whole(known: Known, detail: Option<&mcp_tasks_store::console::TaskDetail>) -> Known {
    match detail {
        Some(d) => Known {
            record: Arc::new(d.record.clone()),
            ..known
        },
        None => known,
    }
}

/// What a task id this gateway cannot find gets.
const UNKNOWN_TASK: &str = "unknown task id (a gateway that has not listed the task finds \
     it when the request names its owner digest: ?owner=DIGEST, as the console's links do)";

/// A task by id: remembered by this gateway, else read from Redis when the request names
/// its owner (`?owner=DIGEST`). A task's key holds its owner digest, so a task this
/// gateway never listed cannot be read without it.
async fn find(state: &State, console: &Console, id: &str, query: Option<&str>) -> Option<Known> {
    if let Some(known) = console.view.task(id) {
        return Some(known);
    }
    let owner = api::pairs(query?)
        .into_iter()
        .find_map(|(k, v)| (k == "owner").then_some(v))?;
    let detail = state.store.console_task(id, &owner).await;
    let detail = detail
        .inspect_err(|e| tracing::warn!(error = %e, task.id = %id, "console: task not read"))
        .ok()??;
    Some(Known {
        record: Arc::new(detail.record),
        queue: detail.queue.unwrap_or_default(),
    })
}

/// Ask for a task's cancellation as an operator; logged with the acting principal.
/// Returns the task's owner digest.
async fn cancel(
    state: &State,
    console: &Console,
    id: &str,
    query: Option<&str>,
    principal: &str,
) -> Result<String, Response<ResBody>> {
    let Some(known) = find(state, console, id, query).await else {
        return Err(api::error(StatusCode::NOT_FOUND, UNKNOWN_TASK));
    };
    let owner = known.record.owner.clone();
    match state.store.cancel(id, &owner).await {
        Ok(true) => {
            let by = logged(principal);
            tracing::info!(task.id = %id, console.owner = %by, "console: task {id} cancelled by {by}");
            Ok(owner)
        }
        Ok(false) => Err(api::error(StatusCode::NOT_FOUND, UNKNOWN_TASK)),
        Err(e) => {
            tracing::warn!(error = %e, task.id = %id, "console: cancel failed");
            Err(api::error(
                StatusCode::SERVICE_UNAVAILABLE,
                "redis unavailable; retry",
            ))
        }
    }
}

/// `GET /console/api/events`: `event: changed` whenever the console's memory changed
/// (at most every refresh, plus each followed task's changes), until the gateway drains.
fn events(state: &Arc<State>, console: &Console) -> Response<ResBody> {
    let max = console.config.max_streams;
    let Some(slot) = StreamSlot::take(&console.streams, max) else {
        return api::error(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!(
                "this gateway serves at most {max} open console pages \
                 (MCPT_CONSOLE_MAX_STREAMS); close some, then reload"
            ),
        );
    };
    let mut changes = console.view.changes();
    let end = state.streams_end.clone();
    let (tx, rx) = mpsc::channel::<Bytes>(4);
    tokio::spawn(async move {
        let _slot = slot;
        if tx
            .send(Bytes::from_static(b"retry: 3000\n\n"))
            .await
            .is_err()
        {
            return;
        }
        loop {
            let frame = tokio::select! {
                () = end.cancelled() => return,
                () = tx.closed() => return,
                changed = changes.changed() => match changed {
                    Ok(()) => {
                        let generation = *changes.borrow_and_update();
                        Bytes::from(format!("event: changed\ndata: {generation}\n\n"))
                    }
                    Err(_) => return,
                },
                () = tokio::time::sleep(KEEPALIVE) => Bytes::from_static(b": keep-alive\n\n"),
            };
            if tx.send(frame).await.is_err() {
                return;
            }
        }
    });
    reply::sse(rx)
}

/// `/console/signin`: the form (`GET`), or a token checked with the gateway's own
/// authentication (`POST`), answered with a session cookie for a console principal.
async fn signin(
    state: &State,
    console: &Console,
    req: Request<Incoming>,
    peer: Option<IpAddr>,
) -> Response<ResBody> {
    if !state.auth.enabled() {
        // Nothing to sign in to: everyone who reaches a loopback-only console is in.
        return see_other("/console/");
    }
    match *req.method() {
        Method::GET => html(StatusCode::OK, pages::signin(false)),
        Method::POST => {
            if !same_origin(req.uri(), req.headers(), &state.allowed_origins) {
                return api::error(StatusCode::FORBIDDEN, "Origin missing or not this server");
            }
            if let Some(peer) = peer
                && let Err(wait) = console.attempts.admit(peer, std::time::Instant::now())
            {
                tracing::info!("console: sign-in refused: too many attempts from one address");
                let mut res = api::error(
                    StatusCode::TOO_MANY_REQUESTS,
                    &format!(
                        "too many sign-in attempts from this address ({} a minute); try again in {} s",
                        signin_limit::ATTEMPTS,
                        wait.as_secs().max(1)
                    ),
                );
                if let Ok(v) = HeaderValue::from_str(&wait.as_secs().max(1).to_string()) {
                    res.headers_mut().insert(header::RETRY_AFTER, v);
                }
                return res;
            }
            let secure = over_tls(req.headers());
            let body = match Limited::new(req.into_body(), MAX_FORM_BYTES)
                .collect()
                .await
            {
                Ok(b) => b.to_bytes(),
                Err(_) => return api::error(StatusCode::PAYLOAD_TOO_LARGE, "form too large"),
            };
            let form = api::pairs(&String::from_utf8_lossy(&body));
            let token = form
                .iter()
                .find(|(k, _)| k == "token")
                .map(|(_, v)| v.trim().to_owned())
                .unwrap_or_default();
            let principal = if token.is_empty() {
                None
            } else {
                state.auth.principal_of(&token).await
            };
            match principal.filter(|p| listed(&console.config.principals, p)) {
                Some(p) => {
                    let who = logged(&p);
                    tracing::info!(console.owner = %who, "console: {who} signed in");
                    let mut res = see_other("/console/");
                    let credential = state.auth.credential_of(&token);
                    let cookie = console.sessions.start(&p, credential, secure);
                    if let Ok(v) = HeaderValue::from_str(&cookie) {
                        res.headers_mut().insert(header::SET_COOKIE, v);
                    }
                    res
                }
                None => {
                    // The same answer for a bad token and a principal not allowed in.
                    tracing::info!("console: sign-in refused");
                    html(StatusCode::FORBIDDEN, pages::signin(true))
                }
            }
        }
        _ => reply::full(
            StatusCode::METHOD_NOT_ALLOWED,
            Some("text/plain"),
            "use GET or POST\n",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A POST from this server's own page passes over HTTP/1 (`Host`) and HTTP/2
    /// (`:authority`, no `Host`); a foreign or missing `Origin` does not.
    #[test]
    fn same_origin_reads_host_or_authority() {
        let path: hyper::Uri = "/console/api/tasks/x/cancel".parse().unwrap();
        let h2: hyper::Uri = "http://127.0.0.1:8080/console/api/tasks/x/cancel"
            .parse()
            .unwrap();
        let mut h = HeaderMap::new();
        h.insert(header::ORIGIN, "http://127.0.0.1:8080".parse().unwrap());
        assert!(same_origin(&h2, &h, &[]), "HTTP/2: :authority only");
        assert!(!same_origin(&path, &h, &[]), "no host at all");
        h.insert(header::HOST, "127.0.0.1:8080".parse().unwrap());
        assert!(same_origin(&path, &h, &[]));
        h.insert(header::ORIGIN, "http://evil.example".parse().unwrap());
        assert!(!same_origin(&h2, &h, &[]));
        assert!(same_origin(&h2, &h, &["http://evil.example".to_owned()]));
        h.remove(header::ORIGIN);
        assert!(!same_origin(&h2, &h, &[]));
    }
}
