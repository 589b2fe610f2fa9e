//! Table cases with bad routing headers: `MCP-Protocol-Version` (-32020, -32022, a 2025
//! `initialize`), `Mcp-Method` and `Mcp-Name` (-32020, the Base64 sentinel), and
//! conflicting duplicate routing headers (RFC 9110 §5.3).
//!
//! Checklist ids cited: B-18, B-19, B-20, B-21, B-22, B-24, T-40, T-41.

use mcp_tasks_tests::{VERSION, caps_none, caps_tasks};
use serde_json::json;

use super::{Expect, Table, VERSION_KEY, call_h, disc_h, discover, err, err_mentioning, list_h};
use crate::bad_input::{UNKNOWN_TASK, base64, enc, rq, sentinel, set, std_headers};

/// Protocol version (B-18, B-19, B-24).
pub(super) fn protocol_version(t: &mut Table) {
    let none = caps_none();
    let id = || Some(json!("v"));
    t.add(
        "version: MCP-Protocol-Version missing",
        set(disc_h(), "mcp-protocol-version", None),
        discover(json!("v")),
        err_mentioning(400, -32020, id(), "MCP-Protocol-Version"),
    );
    t.add(
        "version: header differs from _meta",
        set(disc_h(), "mcp-protocol-version", Some(b"2025-11-25")),
        discover(json!("v")),
        err_mentioning(400, -32020, id(), "MCP-Protocol-Version"),
    );
    t.add(
        "version: header with invalid UTF-8",
        set(disc_h(), "mcp-protocol-version", Some(b"2026-07-28\xff")),
        discover(json!("v")),
        err(400, -32020, id()),
    );
    t.add(
        "version: header is a malformed sentinel",
        set(disc_h(), "mcp-protocol-version", Some(b"=?base64?%%%?=")),
        discover(json!("v")),
        err(400, -32020, id()),
    );
    let mut spaced = rq(json!("v"), "server/discover", json!({}), &none);
    spaced["params"]["_meta"][VERSION_KEY] = json!(format!("{VERSION} "));
    t.add(
        "version: _meta version with a trailing space",
        disc_h(),
        enc(&spaced),
        err_mentioning(400, -32020, id(), "MCP-Protocol-Version"),
    );
    for version in ["2025-11-25", "1900-01-01", ""] {
        let mut body = rq(json!("v"), "server/discover", json!({}), &none);
        body["params"]["_meta"][VERSION_KEY] = json!(version);
        t.add(
            format!("version: unsupported {version:?} in header and _meta"),
            set(disc_h(), "mcp-protocol-version", Some(version.as_bytes())),
            enc(&body),
            Expect::Error {
                status: 400,
                code: -32022,
                id: id(),
                data: Some(json!({"supported": [VERSION], "requested": version})),
                mentions: None,
            },
        );
    }
    // A 2025 `initialize` starts a session (tests/tests/e2e/legacy/).
    t.add(
        "version: legacy initialize",
        vec![
            ("content-type".into(), b"application/json".to_vec()),
            (
                "accept".into(),
                b"application/json, text/event-stream".to_vec(),
            ),
        ],
        enc(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                               "clientInfo": {"name": "old", "version": "1"}}})),
        Expect::Result { id: json!(0) },
    );
}

/// Mcp-Method (B-20, B-22).
pub(super) fn mcp_method(t: &mut Table) {
    let none = caps_none();
    let id = || Some(json!(21));
    let list21 = enc(&rq(json!(21), "tools/list", json!({}), &none));
    for (name, value) in [
        ("missing", None),
        ("different method", Some(b"tools/call".to_vec())),
        ("different case", Some(b"TOOLS/LIST".to_vec())),
        ("invalid UTF-8", Some(b"tools/list\xff".to_vec())),
        (
            "raw non-ASCII",
            Some("tools/list\u{e9}".as_bytes().to_vec()),
        ),
        ("sentinel of another method", Some(sentinel(b"tools/call"))),
        (
            "sentinel with a bad payload",
            Some(b"=?base64?***?=".to_vec()),
        ),
        (
            "sentinel decoding to invalid UTF-8",
            Some(sentinel(&[0xff, 0xfe])),
        ),
        (
            "sentinel with uppercase markers",
            Some(format!("=?BASE64?{}?=", base64(b"tools/list")).into_bytes()),
        ),
        (
            "sentinel without the closing marker",
            Some(format!("=?base64?{}", base64(b"tools/list")).into_bytes()),
        ),
        (
            "sentinel of the value with a trailing space",
            Some(sentinel(b"tools/list ")),
        ),
    ] {
        t.add(
            format!("Mcp-Method: {name}"),
            set(list_h(), "mcp-method", value.as_deref()),
            list21.clone(),
            err_mentioning(400, -32020, id(), "Mcp-Method"),
        );
    }
}

/// Mcp-Name (B-21, B-22, T-40, T-41).
pub(super) fn mcp_name(t: &mut Table) {
    let none = caps_none();
    let tasks = caps_tasks();
    let id = || Some(json!(31));
    let call31 = |name: &str| {
        enc(&rq(
            json!(31),
            "tools/call",
            json!({"name": name, "arguments": {}}),
            &none,
        ))
    };
    let get31 = |task: &str| enc(&rq(json!(31), "tasks/get", json!({"taskId": task}), &tasks));
    let get_h = |name: Option<&[u8]>| set(std_headers("tasks/get", None), "mcp-name", name);
    for (name, value) in [
        ("missing on tools/call", None),
        ("different tool", Some(b"echo".to_vec())),
        ("different case", Some(b"GREET".to_vec())),
        ("invalid UTF-8", Some(b"greet\xff".to_vec())),
        ("malformed sentinel", Some(b"=?base64?Z3J$lZXQ=?=".to_vec())),
        ("sentinel of another name", Some(sentinel(b"echo"))),
        ("sentinel with surrounding space", Some(sentinel(b" greet"))),
    ] {
        t.add(
            format!("Mcp-Name: {name}"),
            call_h(value.as_deref()),
            call31("greet"),
            err_mentioning(400, -32020, id(), "Mcp-Name"),
        );
    }
    for (name, value) in [
        ("missing on tasks/get", None),
        ("different task id", Some(b"tsk_other".to_vec())),
        ("sentinel of another task id", Some(sentinel(b"tsk_other"))),
    ] {
        t.add(
            format!("Mcp-Name: {name}"),
            get_h(value.as_deref()),
            get31(UNKNOWN_TASK),
            err_mentioning(400, -32020, id(), "Mcp-Name"),
        );
    }
    for method in ["tasks/update", "tasks/cancel"] {
        t.add(
            format!("Mcp-Name: missing on {method}"),
            std_headers(method, None),
            enc(&rq(
                json!(31),
                method,
                json!({"taskId": UNKNOWN_TASK, "inputResponses": {}}),
                &tasks,
            )),
            err_mentioning(400, -32020, id(), "Mcp-Name"),
        );
    }
    let unicode = "t\u{e2}che-\u{5de5}\u{5177}";
    t.add(
        "Mcp-Name: raw UTF-8 where a sentinel is required",
        call_h(Some(unicode.as_bytes())),
        call31(unicode),
        err(400, -32020, id()),
    );
    t.add(
        "Mcp-Name: correct sentinel for a unicode tool (unknown tool, in-band)",
        call_h(Some(&sentinel(unicode.as_bytes()))),
        call31(unicode),
        err_mentioning(200, -32602, id(), "tool"),
    );
}

/// Conflicting duplicate routing headers (RFC 9110 §5.3 + B-18, B-20, B-21).
pub(super) fn duplicate_routing_headers(t: &mut Table) {
    let tasks = caps_tasks();
    let mut dup = disc_h();
    dup.push(("mcp-method".into(), b"tools/call".to_vec()));
    t.add(
        "Mcp-Method twice, the second value different",
        dup,
        discover(json!(61)),
        err(400, -32020, Some(json!(61))),
    );
    let mut dup = disc_h();
    dup.push(("mcp-protocol-version".into(), b"2025-11-25".to_vec()));
    t.add(
        "MCP-Protocol-Version twice, the second value different",
        dup,
        discover(json!(61)),
        err(400, -32020, Some(json!(61))),
    );
    let mut dup = std_headers("tasks/get", Some(UNKNOWN_TASK));
    dup.push(("mcp-name".into(), b"tsk_other".to_vec()));
    t.add(
        "Mcp-Name twice, the second value different",
        dup,
        enc(&rq(
            json!(61),
            "tasks/get",
            json!({"taskId": UNKNOWN_TASK}),
            &tasks,
        )),
        err(400, -32020, Some(json!(61))),
    );
}
