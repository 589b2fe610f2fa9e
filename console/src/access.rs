//! Who gets in and which requests are accepted: the loopback `Host` check, the principal
//! of a session or bearer token listed in `MCPT_CONSOLE_PRINCIPALS`, and the `Origin` a
//! `POST` must carry. Sessions themselves are `session.rs`'s; routing is `routes.rs`'s.

use hyper::header;
use hyper::{HeaderMap, Request, Response, StatusCode};
use mcp_tasks_protocol::meta::ANONYMOUS_OWNER;
use mcp_tasks_shared::body::{self as reply, ResBody};
use mcp_tasks_shared::owner::owner_digest;

use crate::{Console, State};

/// The refusal of a request whose `Host` is not a loopback name while the server listens
/// on loopback only (DNS rebinding); `None` when it may go on.
pub(crate) fn host_refused<B>(state: &State, req: &Request<B>) -> Option<Response<ResBody>> {
    if state.loopback_only && !mcp_tasks_shared::web::host_allowed(req.uri(), req.headers()) {
        return Some(reply::full(
            StatusCode::FORBIDDEN,
            Some("text/plain"),
            "Host not allowed: this server only answers loopback names\n",
        ));
    }
    None
}

/// Whether a state-changing request comes from a page of this server: its `Origin` must be
/// present and name this server's host (`Host`, or the HTTP/2 `:authority`), or be listed
/// in `MCPT_ALLOWED_ORIGINS`.
pub(crate) fn same_origin(uri: &hyper::Uri, headers: &HeaderMap, allowed: &[String]) -> bool {
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
pub(crate) fn listed(principals: &[String], principal: &str) -> bool {
    principals.iter().any(|p| p == principal)
        || principal
            .split_once(' ')
            .is_some_and(|(_, sub)| principals.iter().any(|p| p == sub))
}

/// How a console log line names its principal: the owner digest (logs carry no principal's
/// name), or `anonymous` without authentication.
pub(crate) fn logged(principal: &str) -> String {
    if principal == ANONYMOUS_OWNER {
        principal.to_owned()
    } else {
        owner_digest(principal)
    }
}

/// Whether the request reached the proxy in front over TLS (the session cookie is then
/// `Secure`).
pub(crate) fn over_tls(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .is_some_and(|v| v.as_bytes() == b"https")
}

impl Console {
    /// The principal allowed in, if the caller is one: anyone without authentication;
    /// else a session's or bearer token's principal listed in `MCPT_CONSOLE_PRINCIPALS`.
    pub(crate) async fn who(&self, state: &State, headers: &HeaderMap) -> Option<String> {
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
    pub(crate) fn shown<'a>(&self, state: &State, principal: &'a str) -> Option<&'a str> {
        state.auth.enabled().then_some(principal)
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
