//! The sign-in page (`/console/signin`): the form, and a token checked with the gateway's
//! own authentication, answered with a session cookie (`session.rs`) for a console
//! principal. Attempts per address are limited by `signin_limit.rs`.

use std::net::IpAddr;
use std::time::Duration;

use http_body_util::{BodyExt as _, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use mcp_tasks_shared::body::{self as reply, ResBody};

use crate::access::{listed, logged, over_tls, same_origin};
use crate::respond::{html, see_other};
use crate::{Console, MAX_FORM_BYTES, State, api, pages, signin_limit};

/// `/console/signin`: the form (`GET`), or a token checked with the gateway's own
/// authentication (`POST`), answered with a session cookie for a console principal.
pub(crate) async fn signin(
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
        Method::POST => sign_in(state, console, req, peer).await,
        _ => reply::full(
            StatusCode::METHOD_NOT_ALLOWED,
            Some("text/plain"),
            "use GET or POST\n",
        ),
    }
}

/// `POST /console/signin`: a session for the principal of the form's `token`, if it is
/// a console principal.
async fn sign_in(
    state: &State,
    console: &Console,
    req: Request<Incoming>,
    peer: Option<IpAddr>,
) -> Response<ResBody> {
    if !same_origin(req.uri(), req.headers(), &state.allowed_origins) {
        return api::error(StatusCode::FORBIDDEN, "Origin missing or not this server");
    }
    if let Some(peer) = peer
        && let Err(wait) = console.attempts.admit(peer, std::time::Instant::now())
    {
        tracing::info!("console: sign-in refused: too many attempts from one address");
        return too_many_attempts(wait);
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

/// What an address gets past its sign-in attempts: 429, with when to try again.
fn too_many_attempts(wait: Duration) -> Response<ResBody> {
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
    res
}
