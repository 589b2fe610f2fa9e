//! Table cases refused before JSON: `Content-Type`, `Accept` and `Origin` (415, 406, 403),
//! and a body over `MCPT_MAX_BODY_BYTES` (413).
//!
//! Checklist ids cited: B-17, B-44.

use mcp_tasks_tests::{caps_none, caps_tasks};
use serde_json::json;

use super::{Expect, Table, disc_h, discover, err, err_mentioning, list_h, listen, listen_h};
use crate::bad_input::{enc, rq, set};

/// Transport checks before JSON (B-17, B-44; §6.2).
pub(super) fn before_json(t: &mut Table) {
    let tasks = caps_tasks();
    for (name, value) in [
        ("text/plain", Some(b"text/plain".to_vec())),
        ("missing", None),
        ("invalid UTF-8", Some(b"application/json\xff".to_vec())),
        ("form", Some(b"application/x-www-form-urlencoded".to_vec())),
    ] {
        t.add(
            format!("Content-Type {name}"),
            set(disc_h(), "content-type", value.as_deref()),
            discover(json!(1)),
            err(415, -32600, None),
        );
    }
    t.add(
        "Content-Type with charset is fine",
        set(
            disc_h(),
            "content-type",
            Some(b"application/json; charset=utf-8"),
        ),
        discover(json!("x")),
        Expect::Result { id: json!("x") },
    );
    t.add(
        "Accept text/html",
        set(disc_h(), "accept", Some(b"text/html")),
        discover(json!(1)),
        err(406, -32600, None),
    );
    t.add(
        "Accept without SSE on subscriptions/listen",
        set(listen_h(), "accept", Some(b"application/json")),
        listen(json!({"notifications": {"taskIds": []}}), &tasks),
        err(406, -32600, Some(json!(41))),
    );
    t.add(
        "Origin not allowed",
        set(disc_h(), "origin", Some(b"http://evil.example.com")),
        discover(json!(1)),
        err(403, -32600, None),
    );

    t.add(
        "Accept with only invalid UTF-8 (names neither type)",
        set(disc_h(), "accept", Some(b"\xff\xfe")),
        discover(json!(1)),
        err(406, -32600, None),
    );
    let mut split_accept = set(disc_h(), "accept", Some(b"text/html"));
    split_accept.push(("accept".into(), b"application/json".to_vec()));
    t.add(
        "Accept split over two field lines (RFC 9110 §5.3: one list)",
        split_accept,
        discover(json!("x")),
        Expect::Result { id: json!("x") },
    );
}

/// Huge bodies (MCPT_MAX_BODY_BYTES, default 1 MiB).
pub(super) fn huge_bodies(t: &mut Table) {
    let none = caps_none();
    let mut big = enc(&rq(json!(51), "tools/list", json!({}), &none));
    big.truncate(big.len() - 2);
    big.extend_from_slice(b",\"pad\":\"");
    big.extend(std::iter::repeat_n(b'a', 2 * 1024 * 1024));
    big.extend_from_slice(b"\"}}");
    t.add(
        "body of 2 MiB",
        list_h(),
        big,
        err_mentioning(413, -32600, None, "MCPT_MAX_BODY_BYTES"),
    );
}
