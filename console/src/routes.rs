//! The page router: every request under `/console` passes the checks of `access.rs`, then
//! goes to its page (overview, charts, tasks, a task, dead letters, the operator's forms),
//! to the sign-in page (`signin.rs`) or to the JSON API (`api.rs`).

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use mcp_tasks_shared::body::{self as reply, ResBody};

use crate::access::{host_refused, same_origin};
use crate::api::{self, Filter};
use crate::respond::{asset_response, html, not_found, secure_headers, see_other};
use crate::session::Sessions;
use crate::tasks::{UNKNOWN_TASK, cancel, find, whole};
use crate::view::Known;
use crate::{Console, MAX_FORM_BYTES, State, chart, dead, pages, signin, strike};

/// One request let in, as the routes read it.
struct Call {
    method: Method,
    path: String,
    query: Option<String>,
    /// The body of a `POST` (empty otherwise).
    body: Bytes,
    /// Sent as `application/json` (else a form).
    json_body: bool,
    /// `?fragment=1`: only the page's main part, for an open page's redraw.
    fragment: bool,
    principal: String,
}

/// Route one request under `/console`.
pub(crate) async fn serve(
    state: &Arc<State>,
    console: &Console,
    req: Request<Incoming>,
    peer: Option<IpAddr>,
) -> Response<ResBody> {
    if let Some(refused) = host_refused(state, &req) {
        return refused;
    }
    let path = req.uri().path();
    if path == "/console/signin" {
        return signin::signin(state, console, req, peer).await;
    }
    if let Some(asset) = path.strip_prefix("/console/static/") {
        return static_asset(req.method(), asset);
    }
    let Some(principal) = console.who(state, req.headers()).await else {
        return not_found();
    };
    if req.method() == Method::POST
        && !same_origin(req.uri(), req.headers(), &state.allowed_origins)
    {
        tracing::info!(http.path = %path, "console: POST refused: Origin missing or foreign");
        return api::error(StatusCode::FORBIDDEN, "Origin missing or not this server");
    }
    match Call::read(req, principal).await {
        Ok(call) => route(state, console, &call).await,
        Err(refused) => refused,
    }
}

/// `/console/static/…`. Public: nothing in them is secret, and the sign-in page needs
/// them.
fn static_asset(method: &Method, asset: &str) -> Response<ResBody> {
    match (method, asset) {
        (&Method::GET, "console.css") => asset_response("text/css", pages::CSS),
        (&Method::GET, "console.js") => asset_response("text/javascript", pages::JS),
        _ => not_found(),
    }
}

impl Call {
    /// What the routes need of `req`, its body read when it is a `POST`.
    async fn read(req: Request<Incoming>, principal: String) -> Result<Call, Response<ResBody>> {
        let path = req.uri().path().to_owned();
        let method = req.method().clone();
        let query = req.uri().query().map(str::to_owned);
        let json_body = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        let body = if method == Method::POST {
            read_body(req.into_body()).await?
        } else {
            Bytes::new()
        };
        let fragment = query.as_deref().is_some_and(|q| {
            api::pairs(q)
                .iter()
                .any(|(k, v)| k == "fragment" && v == "1")
        });
        Ok(Call {
            method,
            path,
            query,
            body,
            json_body,
            fragment,
            principal,
        })
    }

    /// The path's segments after `/console`.
    fn segments(&self) -> Vec<&str> {
        self.path
            .trim_start_matches("/console")
            .split('/')
            .filter(|s| !s.is_empty())
            .collect()
    }

    /// The body as the strike forms and the API read it.
    fn body(&self) -> (&[u8], bool) {
        (self.body.as_ref(), self.json_body)
    }
}

/// A `POST`'s body, at most [`MAX_FORM_BYTES`].
async fn read_body(body: Incoming) -> Result<Bytes, Response<ResBody>> {
    match Limited::new(body, MAX_FORM_BYTES).collect().await {
        Ok(b) => Ok(b.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(api::error(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("request body over {MAX_FORM_BYTES} bytes"),
        )),
        Err(e) => Err(api::error(
            StatusCode::BAD_REQUEST,
            &format!("request body not read: {e}"),
        )),
    }
}

/// The page (or API call) `call` asks for.
async fn route(state: &Arc<State>, console: &Console, call: &Call) -> Response<ResBody> {
    let shown = console.shown(state, &call.principal);
    let query = call.query.as_deref();
    match (&call.method, call.segments().as_slice()) {
        (&Method::GET, []) => overview(console, call.fragment, shown),
        (&Method::GET, ["chart", name @ ("queues.svg" | "rates.svg")]) => chart(console, name),
        (&Method::GET, ["tasks"]) => tasks(console, query, call.fragment, shown),
        (&Method::GET, ["tasks", id]) => task(state, console, id, call, shown).await,
        (&Method::POST, ["tasks", id, "cancel"]) => {
            match cancel(state, console, id, query, &call.principal).await {
                Ok(owner) => see_other(&api::task_path(id, &owner, "")),
                Err(res) => res,
            }
        }
        (&Method::GET, ["dead"]) => dead_letters(state, query, shown).await,
        (&Method::POST, ["dead", "redrive"]) => redrive(state, call, shown).await,
        (&Method::POST, ["strikes"]) => strike(state, console, call, shown).await,
        (&Method::POST, ["strikes", "restore"]) => restore(state, console, call, shown).await,
        (&Method::POST, ["signout"]) => signout(),
        (_, ["api", rest @ ..]) => {
            api::route(
                state,
                console,
                &call.method,
                rest,
                query,
                call.body(),
                &call.principal,
            )
            .await
        }
        _ => not_found(),
    }
}

/// `GET /console/`: the queues, workers, tools, strikes and charts.
fn overview(console: &Console, fragment: bool, shown: Option<&str>) -> Response<ResBody> {
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

/// `GET /console/chart/queues.svg` or `rates.svg`.
fn chart(console: &Console, name: &str) -> Response<ResBody> {
    let now = mcp_tasks_protocol::time::now_millis();
    let drawn = if name == "queues.svg" {
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

/// `GET /console/tasks`: the tasks remembered, filtered.
fn tasks(
    console: &Console,
    query: Option<&str>,
    fragment: bool,
    shown: Option<&str>,
) -> Response<ResBody> {
    match Filter::parse(query) {
        Ok(f) if fragment => html(StatusCode::OK, pages::tasks_main(&console.view, &f)),
        Ok(f) => html(StatusCode::OK, pages::tasks(&console.view, &f, shown)),
        Err(why) => reply::full(
            StatusCode::BAD_REQUEST,
            Some("text/plain"),
            format!("{why}\n"),
        ),
    }
}

/// `GET /console/tasks/{id}`: one task's page.
async fn task(
    state: &State,
    console: &Console,
    id: &str,
    call: &Call,
    shown: Option<&str>,
) -> Response<ResBody> {
    let Some(known) = find(state, console, id, call.query.as_deref()).await else {
        return reply::full(
            StatusCode::NOT_FOUND,
            Some("text/plain"),
            format!("{UNKNOWN_TASK}\n"),
        );
    };
    // The console remembers summaries: the page reads the task whole (a fragment
    // only its hash; the whole page its worker, deliveries and trace too).
    if call.fragment {
        let full = state.store.tasks().get(id, &known.record.owner).await;
        let known = match full {
            Ok(Some(record)) => Known {
                record: Arc::new(record),
                ..known
            },
            _ => known,
        };
        return html(StatusCode::OK, pages::task_main(&known));
    }
    let detail = state.store.console().task(id, &known.record.owner).await;
    let detail = detail
        .inspect_err(|e| tracing::warn!(error = %e, task.id = %id, "console: task detail not read"))
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

/// `GET /console/dead`: the dead letters, filtered by `tool` and `since`.
async fn dead_letters(
    state: &State,
    query: Option<&str>,
    shown: Option<&str>,
) -> Response<ResBody> {
    let filter = match dead::DeadFilter::parse(query) {
        Ok(f) => f,
        Err(why) => {
            return reply::full(
                StatusCode::BAD_REQUEST,
                Some("text/plain"),
                format!("{why}\n"),
            );
        }
    };
    match dead::list(state, &filter).await {
        Ok(letters) => html(StatusCode::OK, pages::dead(&letters, &filter, shown)),
        Err((status, why)) => html(status, pages::refused(&why, shown)),
    }
}

/// `POST /console/dead/redrive`: a dead letter's Redrive button. A new task: its page; a
/// letter redriven before: a page saying as what.
async fn redrive(state: &State, call: &Call, shown: Option<&str>) -> Response<ResBody> {
    match dead::redrive(state, call.body(), &call.principal).await {
        Ok(done) if done.new => see_other(&api::task_path(&done.task_id, &done.letter.owner, "")),
        Ok(done) => html(StatusCode::OK, pages::done(&done.message, shown)),
        Err((status, why)) => html(status, pages::refused(&why, shown)),
    }
}

/// `POST /console/strikes`: the overview's strike form.
async fn strike(
    state: &State,
    console: &Console,
    call: &Call,
    shown: Option<&str>,
) -> Response<ResBody> {
    match strike::strike(state, call.body(), &call.principal).await {
        // A name no worker advertises may be a typo: the operator reads the note.
        Ok(struck) if !struck.known => {
            strike::shown_now(state, console).await;
            html(StatusCode::OK, pages::done(&struck.message(), shown))
        }
        Ok(_) => {
            strike::shown_now(state, console).await;
            see_other("/console/")
        }
        Err((status, why)) => html(status, pages::refused(&why, shown)),
    }
}

/// `POST /console/strikes/restore`: the overview's restore buttons.
async fn restore(
    state: &State,
    console: &Console,
    call: &Call,
    shown: Option<&str>,
) -> Response<ResBody> {
    match strike::restore(state, call.body(), &call.principal).await {
        Ok(_) => {
            strike::shown_now(state, console).await;
            see_other("/console/")
        }
        Err((status, why)) => html(status, pages::refused(&why, shown)),
    }
}

/// `POST /console/signout`: the session cookie cleared.
fn signout() -> Response<ResBody> {
    let mut res = see_other("/console/signin");
    if let Ok(v) = HeaderValue::from_str(&Sessions::end()) {
        res.headers_mut().insert(header::SET_COOKIE, v);
    }
    res
}
