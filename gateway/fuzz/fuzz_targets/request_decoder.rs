//! Fuzz target for the gateway's request decoder: routing headers (`MCP-Protocol-Version`,
//! `Mcp-Method`, `Mcp-Name`, with and without `=?base64?…?=` sentinels) plus a body, through
//! `mcp_tasks_gateway::fuzzing::check_request`.
//!
//! Input layout: `[mode, version-header, method-header, name-header, rest…]`.
//! - `mode` even: `rest` is the raw body (the seeds are valid requests in this form);
//!   `mode` odd: `rest` drives a structure-aware generator of JSON-RPC bodies.
//! - each header byte picks how that header is derived (absent, the value from the body,
//!   its sentinel form, garbage, a malformed sentinel, …; see [`HeaderMode`]).
//!
//! Checked on every input (base-protocol.md §7.5, B-03, B-05, B-18…B-23):
//! - no panic;
//! - every rejection is a code the decoder may produce, with the status the mapping gives
//!   (-32601 → 404; -32700, -32600, -32020, -32021, -32022 → 400; -32602 → 400 for a bad
//!   `_meta`, 200 for in-band parameter errors);
//! - a body that is not JSON is -32700, JSON that is not an object or has an unusable id is
//!   -32600; a notification is never answered as a request and vice versa;
//! - for generated bodies, the exact outcome where the specification fixes it (a valid request
//!   is accepted; a missing or mismatched required header is -32020; an unsupported version
//!   is -32022; an unknown method is 404 / -32601; a missing `_meta` field is -32602).

#![no_main]

// A bin's modules sit beside it: these two are this target's alone.
#[path = "request_decoder/generate.rs"]
mod generate;
#[path = "request_decoder/headers.rs"]
mod headers;

use libfuzzer_sys::fuzz_target;
use mcp_tasks_gateway::fuzzing::check_request;
use serde_json::{Value, json};

use generate::{Generated, IdKind, MetaKind, Shape, Src, damage};
use headers::{HeaderMode, Seen, build_headers, take_garbage};

const VERSION: &str = "2026-07-28";
const VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
const CAPS_KEY: &str = "io.modelcontextprotocol/clientCapabilities";

/// What the server implements (anything else is -32601).
const METHODS: &[&str] = &[
    "server/discover",
    "tools/list",
    "tools/call",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "subscriptions/listen",
];

/// Methods the generator picks from: implemented, removed, legacy and made-up ones.
const METHOD_POOL: &[&str] = &[
    "server/discover",
    "tools/list",
    "tools/call",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "subscriptions/listen",
    "initialize",
    "ping",
    "tasks/list",
    "tasks/result",
    "resources/subscribe",
    "logging/setLevel",
    "notifications/initialized",
    "",
    "Tools/List",
];

fuzz_target!(|data: &[u8]| {
    let (mode, hv, hm, hn, rest) = match data {
        [m, v, me, n, rest @ ..] => (*m, *v, *me, *n, rest),
        _ => (0, 1, 1, 1, data),
    };
    let modes = [
        HeaderMode::from_byte(hv),
        HeaderMode::from_byte(hm),
        HeaderMode::from_byte(hn),
    ];
    if mode % 2 == 0 {
        raw_case(modes, rest);
    } else {
        structured_case(mode, modes, rest);
    }
});

// ---------------------------------------------------------------------------------------
// Checks common to every input
// ---------------------------------------------------------------------------------------

/// The status/code pairs the decoder may answer with (base-protocol.md §7.5, §16).
fn check_mapping(result: Result<bool, (u16, i64)>, context: &dyn Fn() -> String) {
    let Err((status, code)) = result else {
        return;
    };
    let ok = match code {
        -32700 | -32600 | -32020 | -32021 | -32022 => status == 400,
        -32601 => status == 404,
        -32602 => status == 400 || status == 200,
        _ => false,
    };
    assert!(
        ok,
        "unexpected rejection: HTTP {status}, code {code}; {}",
        context()
    );
    if status != 200 {
        assert!((400..500).contains(&status), "non-4xx rejection {status}");
    }
}

/// Oracles that hold for any body, independent of how it was made.
fn check_generic(body: &[u8], result: Result<bool, (u16, i64)>, context: &dyn Fn() -> String) {
    check_mapping(result, context);
    let value = match serde_json::from_slice::<Value>(body) {
        Err(_) => {
            assert_eq!(
                result,
                Err((400, -32700)),
                "B-03: a body that is not JSON is 400 / -32700; {}",
                context()
            );
            return;
        }
        Ok(v) => v,
    };
    let Value::Object(obj) = value else {
        assert_eq!(
            result,
            Err((400, -32600)),
            "B-03: JSON that is not an object is 400 / -32600; {}",
            context()
        );
        return;
    };
    match obj.get("id") {
        Some(Value::Null | Value::Bool(_) | Value::Array(_) | Value::Object(_)) => {
            assert_eq!(
                result,
                Err((400, -32600)),
                "B-02/B-03: an id that is not a string or integer is 400 / -32600; {}",
                context()
            );
        }
        Some(Value::Number(n)) if !n.is_i64() && !n.is_u64() => {
            assert_eq!(
                result,
                Err((400, -32600)),
                "B-02: a fractional id is 400 / -32600; {}",
                context()
            );
        }
        _ => {}
    }
    match result {
        Ok(false) => assert!(
            !obj.contains_key("id"),
            "a request with an id was taken for a notification; {}",
            context()
        ),
        Ok(true) => {
            assert!(
                obj.get("id").is_some_and(|i| i.is_string() || i.is_i64()),
                "accepted a request without a usable id; {}",
                context()
            );
            assert_eq!(
                obj.get("jsonrpc"),
                Some(&json!("2.0")),
                "B-02: accepted without jsonrpc 2.0; {}",
                context()
            );
            let method = obj.get("method").and_then(Value::as_str).unwrap_or("");
            assert!(
                METHODS.contains(&method),
                "B-23: accepted unknown method {method:?}; {}",
                context()
            );
            let meta = obj
                .get("params")
                .and_then(|p| p.get("_meta"))
                .cloned()
                .unwrap_or(Value::Null);
            assert_eq!(
                meta.get(VERSION_KEY),
                Some(&json!(VERSION)),
                "B-01/B-06: accepted without the supported version in _meta; {}",
                context()
            );
            assert!(
                meta.get(CAPS_KEY).is_some_and(Value::is_object),
                "B-06: accepted without client capabilities; {}",
                context()
            );
        }
        Err(_) => {}
    }
}

// ---------------------------------------------------------------------------------------
// Raw bodies
// ---------------------------------------------------------------------------------------

fn raw_case(modes: [HeaderMode; 3], rest: &[u8]) {
    let (garbage, body) = take_garbage(&modes, rest);
    // Canonical header values come from the body when it is a request, so that mutated
    // valid requests keep matching headers and reach the deeper checks.
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let field = |f: &dyn Fn(&Value) -> Option<&Value>| -> String {
        parsed
            .as_ref()
            .and_then(f)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let version = parsed
        .as_ref()
        .and_then(|v| v.get("params")?.get("_meta")?.get(VERSION_KEY)?.as_str())
        .unwrap_or(VERSION)
        .to_owned();
    let method = field(&|v| v.get("method"));
    let name = {
        let n = field(&|v| v.get("params")?.get("name"));
        if n.is_empty() {
            field(&|v| v.get("params")?.get("taskId"))
        } else {
            n
        }
    };
    let headers = build_headers(modes, [&version, &method, &name], garbage);
    let result = check_request(&headers.map, body);
    let context = || {
        format!(
            "headers {:?}, body {:?} → {result:?}",
            headers.map,
            String::from_utf8_lossy(&body[..body.len().min(512)])
        )
    };
    check_generic(body, result, &context);
}

// ---------------------------------------------------------------------------------------
// Generated bodies (drawn in `request_decoder/generate.rs`)
// ---------------------------------------------------------------------------------------

fn structured_case(mode: u8, modes: [HeaderMode; 3], rest: &[u8]) {
    let (garbage, rest) = take_garbage(&modes, rest);
    let mut src = Src(rest);
    let Generated {
        body,
        params,
        name_field,
        shape,
    } = Generated::draw(&mut src);
    let mut body = serde_json::to_vec(&Value::Object(body)).expect("serialisable");
    // Sometimes damage the serialisation (then only the generic oracle applies).
    let damaged = damage(mode, &mut src, &mut body);

    let version = params
        .get("_meta")
        .and_then(|m| m.get(VERSION_KEY))
        .and_then(Value::as_str)
        .unwrap_or(VERSION)
        .to_owned();
    let method_canon = shape.method.clone().unwrap_or_default();
    let name_canon = name_field
        .and_then(|f| params.get(f))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let headers = build_headers(modes, [&version, &method_canon, &name_canon], garbage);
    let result = check_request(&headers.map, &body);
    let context = || {
        format!(
            "headers {:?} (seen {:?}), body {} → {result:?}",
            headers.map,
            headers.seen,
            String::from_utf8_lossy(&body)
        )
    };
    check_generic(&body, result, &context);
    if damaged {
        return;
    }
    if let Some(expected) = expect(&shape, headers.seen) {
        assert_eq!(result, expected, "spec outcome; {}", context());
    }
}

/// The outcome the specification fixes for a generated body, when it fixes one.
fn expect(s: &Shape, seen: [Seen; 3]) -> Option<Result<bool, (u16, i64)>> {
    const BAD_REQUEST: Result<bool, (u16, i64)> = Err((400, -32600));
    match s.id {
        IdKind::Null | IdKind::Float | IdKind::Bool | IdKind::Obj | IdKind::Arr => {
            return Some(BAD_REQUEST);
        }
        IdKind::Int | IdKind::Str | IdKind::Absent => {}
    }
    let Some(method) = s.method.as_deref() else {
        return Some(BAD_REQUEST);
    };
    if !s.jsonrpc_ok || !s.params_ok {
        return Some(BAD_REQUEST);
    }
    if s.id == IdKind::Absent {
        return Some(Ok(false));
    }
    let [version, method_h, name_h] = seen;
    let known = METHODS.contains(&method);
    let name_required = known
        && matches!(
            method,
            "tools/call" | "tasks/get" | "tasks/update" | "tasks/cancel"
        );
    // Legacy `initialize` without a modern version: -32022 naming the versions (B-24).
    if method == "initialize"
        && matches!(
            s.meta,
            MetaKind::Missing | MetaKind::NotObject | MetaKind::NoVersion
        )
    {
        return Some(Err((400, -32022)));
    }
    let all_match = version == Seen::Matches
        && method_h == Seen::Matches
        && (!name_required || name_h == Seen::Matches);
    match s.meta {
        MetaKind::Valid => {}
        MetaKind::OtherVersion => {
            // Header equal to the body's version: unsupported (B-19); else a mismatch (B-18).
            return match (version, method_h) {
                (Seen::Matches, _) => Some(Err((400, -32022))),
                (Seen::Absent | Seen::Mismatch, _) => Some(Err((400, -32020))),
                _ => None,
            };
        }
        // B-06 (a MUST) when every header is right; with a bad header too, either error is
        // defensible.
        _ => return all_match.then_some(Err((400, -32602))),
    }
    // `_meta` valid from here on.
    let bad = |s: Seen| matches!(s, Seen::Absent | Seen::Mismatch);
    if bad(version) {
        return Some(Err((400, -32020)));
    }
    if version != Seen::Matches {
        return None;
    }
    if bad(method_h) {
        return Some(Err((400, -32020)));
    }
    if method_h != Seen::Matches {
        return None;
    }
    if !known {
        return Some(Err((404, -32601)));
    }
    if !name_required {
        return Some(Ok(true));
    }
    if !s.name_ok {
        // No usable name in the body: an in-band parameter error when the header matches
        // what little there is; with a bad header either error is defensible.
        return (name_h == Seen::Matches).then_some(Err((200, -32602)));
    }
    match name_h {
        Seen::Matches => Some(Ok(true)),
        Seen::Absent | Seen::Mismatch => Some(Err((400, -32020))),
        Seen::Unknown => None,
    }
}
