//! The shapes of the console's non-JSON answers: HTML pages with their security headers,
//! redirects, static assets and the 404 everyone outside gets. JSON answers are `api.rs`'s.

use hyper::header::{self, HeaderValue};
use hyper::{HeaderMap, Response, StatusCode};
use maud::Markup;
use mcp_tasks_shared::body::{self as reply, ResBody};

pub(crate) fn html(status: StatusCode, page: Markup) -> Response<ResBody> {
    let mut res = reply::full(status, Some("text/html; charset=utf-8"), page.into_string());
    secure_headers(res.headers_mut());
    res
}

pub(crate) fn secure_headers(h: &mut HeaderMap) {
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

pub(crate) fn see_other(to: &str) -> Response<ResBody> {
    let mut res = reply::empty(StatusCode::SEE_OTHER);
    if let Ok(v) = HeaderValue::from_str(to) {
        res.headers_mut().insert(header::LOCATION, v);
    }
    res
}

/// What everyone outside the console gets, on every path: the gateway's own 404.
pub(crate) fn not_found() -> Response<ResBody> {
    reply::full(StatusCode::NOT_FOUND, Some("text/plain"), "not found\n")
}

pub(crate) fn asset_response(content_type: &'static str, body: &'static str) -> Response<ResBody> {
    let mut res = reply::full(StatusCode::OK, Some(content_type), body);
    res.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    res
}
