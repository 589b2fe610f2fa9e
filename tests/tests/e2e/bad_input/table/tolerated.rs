//! Table cases that must be served: extra fields and ignorable headers are tolerated, and
//! notifications are accepted (202) and ignored.
//!
//! Checklist ids cited: B-12, B-13.

use mcp_tasks_tests::{VERSION, caps_none, caps_tasks, meta};
use serde_json::json;

use super::{CAPS_KEY, Expect, Table, disc_h, discover, list_h};
use crate::bad_input::{enc, rq, sentinel, set, std_headers};

/// Extra fields are tolerated.
pub(super) fn extra_fields(t: &mut Table) {
    let none = caps_none();
    let mut extra = rq(
        json!("x"),
        "tools/list",
        json!({"unknownParam": {"nested": [1, 2]}, "another": null}),
        &none,
    );
    extra["extraTopLevel"] = json!(true);
    extra["params"]["_meta"]["com.example/trace"] = json!("abc");
    extra["params"]["_meta"]["progressToken"] = json!(7);
    extra["params"]["_meta"][CAPS_KEY]["experimentalThing"] = json!({"on": true});
    t.add(
        "tolerated: unknown params, top-level and _meta fields",
        list_h(),
        enc(&extra),
        Expect::Result { id: json!("x") },
    );
    t.add(
        "tolerated: Mcp-Name on a method that needs none",
        set(list_h(), "mcp-name", Some(b"whatever\xff")),
        enc(&rq(json!("x"), "tools/list", json!({}), &none)),
        Expect::Result { id: json!("x") },
    );
    t.add(
        "tolerated: sentinel-encoded version and method headers",
        set(
            set(
                disc_h(),
                "mcp-protocol-version",
                Some(&sentinel(VERSION.as_bytes())),
            ),
            "mcp-method",
            Some(&sentinel(b"server/discover")),
        ),
        discover(json!("x")),
        Expect::Result { id: json!("x") },
    );
    t.add(
        "tolerated: Mcp-Session-Id and Last-Event-ID are ignored (B-12)",
        set(
            set(disc_h(), "mcp-session-id", Some(b"abc")),
            "last-event-id",
            Some(b"42"),
        ),
        discover(json!("x")),
        Expect::Result { id: json!("x") },
    );
    for id in [json!(""), json!(-1), json!(i64::MAX), json!("\u{1f600}")] {
        t.add(
            format!("tolerated: id {id} echoed"),
            disc_h(),
            discover(id.clone()),
            Expect::Result { id },
        );
    }
    t.add(
        "tolerated: legacy task parameter on tools/list ignored",
        list_h(),
        enc(&rq(
            json!("x"),
            "tools/list",
            json!({"task": {"ttl": 1}}),
            &none,
        )),
        Expect::Result { id: json!("x") },
    );
}

/// Notifications are accepted and ignored (B-13).
pub(super) fn notifications(t: &mut Table) {
    t.add(
        "notification: unknown method",
        list_h(),
        br#"{"jsonrpc":"2.0","method":"notifications/whatever"}"#.to_vec(),
        Expect::Accepted,
    );
    t.add(
        "notification: a tools/call without id runs nothing",
        std_headers("tools/call", Some("echo")),
        enc(&json!({"jsonrpc": "2.0", "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"text": "x"},
                               "_meta": meta(&caps_tasks())}})),
        Expect::Accepted,
    );
    t.add(
        "notification: garbage params, no routing headers",
        vec![("content-type".into(), b"application/json".to_vec())],
        br#"{"jsonrpc":"2.0","method":"x","params":{"a":[1,{"b":null}]}}"#.to_vec(),
        Expect::Accepted,
    );
}
