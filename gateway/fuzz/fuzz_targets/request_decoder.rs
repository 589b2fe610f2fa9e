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

use base64::Engine as _;
use hyper::HeaderMap;
use hyper::header::{HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use mcp_tasks_gateway::fuzzing::check_request;
use serde_json::{Map, Value, json};

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
// Headers
// ---------------------------------------------------------------------------------------

/// How one routing header is derived from its canonical value (the body's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HeaderMode {
    /// Not sent.
    Absent,
    /// The canonical value as is.
    Plain,
    /// `=?base64?<canonical>?=`.
    Sentinel,
    /// Garbage bytes from the input.
    Garbage,
    /// A well-formed sentinel around garbage bytes (maybe not UTF-8).
    SentinelOfGarbage,
    /// A sentinel whose payload is not Base64.
    BadSentinel,
    /// The canonical value with surrounding whitespace (OWS).
    Padded,
    /// The canonical value plus one character.
    Appended,
    /// The canonical value, then a second garbage value of the same header.
    Duplicate,
    /// The canonical value with ASCII case swapped.
    CaseSwapped,
}

impl HeaderMode {
    fn from_byte(b: u8) -> HeaderMode {
        match b % 10 {
            0 => HeaderMode::Absent,
            1 => HeaderMode::Plain,
            2 => HeaderMode::Sentinel,
            3 => HeaderMode::Garbage,
            4 => HeaderMode::SentinelOfGarbage,
            5 => HeaderMode::BadSentinel,
            6 => HeaderMode::Padded,
            7 => HeaderMode::Appended,
            8 => HeaderMode::Duplicate,
            _ => HeaderMode::CaseSwapped,
        }
    }

    fn needs_garbage(self) -> bool {
        matches!(
            self,
            HeaderMode::Garbage
                | HeaderMode::SentinelOfGarbage
                | HeaderMode::BadSentinel
                | HeaderMode::Duplicate
        )
    }
}

/// What the server should make of a header, as far as the specification says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// Missing.
    Absent,
    /// Decodes to the canonical value.
    Matches,
    /// Present but unusable or different from the canonical value.
    Mismatch,
    /// Not modelled (garbage, duplicates, values needing encoding sent plain).
    Unknown,
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Visible ASCII, space and tab, no surrounding whitespace, not sentinel-shaped: a value a
/// client sends as is (base-protocol.md §7.2).
fn header_safe(v: &str) -> bool {
    v.bytes()
        .all(|b| b == b'\t' || b == b' ' || (0x21..=0x7e).contains(&b))
        && v.trim() == v
        && !(v.starts_with("=?base64?") && v.ends_with("?="))
}

/// Build the header values for `mode` and say what the server should see.
fn derive_header(mode: HeaderMode, canonical: &str, garbage: &[u8]) -> (Vec<Vec<u8>>, Seen) {
    match mode {
        HeaderMode::Absent => (vec![], Seen::Absent),
        HeaderMode::Plain => (
            vec![canonical.as_bytes().to_vec()],
            if header_safe(canonical) {
                Seen::Matches
            } else {
                Seen::Unknown
            },
        ),
        HeaderMode::Sentinel => (
            vec![format!("=?base64?{}?=", b64(canonical.as_bytes())).into_bytes()],
            Seen::Matches,
        ),
        HeaderMode::Garbage => (vec![garbage.to_vec()], Seen::Unknown),
        HeaderMode::SentinelOfGarbage => (
            vec![format!("=?base64?{}?=", b64(garbage)).into_bytes()],
            if garbage == canonical.as_bytes() {
                Seen::Matches
            } else {
                Seen::Mismatch
            },
        ),
        HeaderMode::BadSentinel => {
            let mut v = b"=?base64?".to_vec();
            v.extend(garbage.iter().copied().filter(u8::is_ascii_alphanumeric));
            v.extend_from_slice(b"!?=");
            (vec![v], Seen::Mismatch)
        }
        HeaderMode::Padded => (
            vec![format!(" \t{canonical} ").into_bytes()],
            if header_safe(canonical) {
                Seen::Matches
            } else {
                Seen::Unknown
            },
        ),
        HeaderMode::Appended => (vec![format!("{canonical}x").into_bytes()], Seen::Mismatch),
        HeaderMode::Duplicate => (
            vec![canonical.as_bytes().to_vec(), garbage.to_vec()],
            Seen::Unknown,
        ),
        HeaderMode::CaseSwapped => {
            let swapped: String = canonical
                .chars()
                .map(|c| {
                    if c.is_ascii_lowercase() {
                        c.to_ascii_uppercase()
                    } else {
                        c.to_ascii_lowercase()
                    }
                })
                .collect();
            if swapped == canonical {
                (vec![format!("{canonical}x").into_bytes()], Seen::Mismatch)
            } else {
                (vec![swapped.into_bytes()], Seen::Mismatch)
            }
        }
    }
}

/// Insert the values into `headers`; a value `HeaderValue` refuses (control characters,
/// which no HTTP parser would hand over) is dropped, and the header then counts as absent if
/// nothing else was added.
fn put(headers: &mut HeaderMap, name: &'static str, values: Vec<Vec<u8>>, seen: Seen) -> Seen {
    let name = HeaderName::from_static(name);
    let mut added = 0;
    let mut first_added = false;
    for (i, v) in values.iter().enumerate() {
        if let Ok(value) = HeaderValue::from_bytes(v) {
            headers.append(name.clone(), value);
            added += 1;
            if i == 0 {
                first_added = true;
            }
        }
    }
    match (added, first_added) {
        (0, _) => Seen::Absent,
        (_, true) => seen,
        (_, false) => Seen::Unknown,
    }
}

/// Three header values and their outcomes, built from `modes` and garbage taken from the
/// front of `rest` (chunks separated by `\n`) when a mode needs it. Returns the rest.
struct Headers {
    map: HeaderMap,
    seen: [Seen; 3],
}

fn take_garbage<'a>(modes: &[HeaderMode; 3], rest: &'a [u8]) -> ([&'a [u8]; 3], &'a [u8]) {
    let mut out: [&[u8]; 3] = [&[], &[], &[]];
    let mut rest = rest;
    for (i, m) in modes.iter().enumerate() {
        if m.needs_garbage() {
            let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
            out[i] = &rest[..end];
            rest = rest.get(end + 1..).unwrap_or(&[]);
        }
    }
    (out, rest)
}

fn build_headers(modes: [HeaderMode; 3], canonical: [&str; 3], garbage: [&[u8]; 3]) -> Headers {
    let names = ["mcp-protocol-version", "mcp-method", "mcp-name"];
    let mut map = HeaderMap::new();
    let mut seen = [Seen::Unknown; 3];
    for i in 0..3 {
        let (values, s) = derive_header(modes[i], canonical[i], garbage[i]);
        seen[i] = put(&mut map, names[i], values, s);
    }
    Headers { map, seen }
}

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
// Generated bodies
// ---------------------------------------------------------------------------------------

/// Bytes to choices; zeros once exhausted.
struct Src<'a>(&'a [u8]);

impl Src<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }

    fn pick(&mut self, n: u8) -> u8 {
        self.byte() % n
    }

    /// A short string: a length byte, then that many bytes (lossy UTF-8).
    fn string(&mut self) -> String {
        let len = usize::from(self.byte() % 24).min(self.0.len());
        let (s, rest) = self.0.split_at(len);
        self.0 = rest;
        String::from_utf8_lossy(s).into_owned()
    }

    /// A JSON value of bounded depth.
    fn value(&mut self, depth: u8) -> Value {
        match self.pick(if depth == 0 { 5 } else { 7 }) {
            0 => Value::Null,
            1 => Value::Bool(self.byte() & 1 == 1),
            2 => json!(i64::from(self.byte() as i8) * 1_000_003),
            3 => json!(f64::from(self.byte()) / 7.0),
            4 => Value::String(self.string()),
            5 => Value::Array((0..self.pick(4)).map(|_| self.value(depth - 1)).collect()),
            _ => {
                let mut m = Map::new();
                for _ in 0..self.pick(4) {
                    let k = self.string();
                    m.insert(k, self.value(depth - 1));
                }
                Value::Object(m)
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IdKind {
    Int,
    Str,
    Absent,
    Null,
    Float,
    Bool,
    Obj,
    Arr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MetaKind {
    Valid,
    Missing,
    NotObject,
    NoVersion,
    VersionNotString,
    OtherVersion,
    NoCaps,
    CapsNotObject,
}

/// What a generated body is, for the oracle.
struct Shape {
    id: IdKind,
    jsonrpc_ok: bool,
    method: Option<String>,
    params_ok: bool,
    meta: MetaKind,
    /// `params.name` / `params.taskId` is a string, for methods that need one.
    name_ok: bool,
}

fn structured_case(mode: u8, modes: [HeaderMode; 3], rest: &[u8]) {
    let (garbage, rest) = take_garbage(&modes, rest);
    let mut src = Src(rest);

    let id_kind = match src.pick(16) {
        0..=4 => IdKind::Int,
        5..=8 => IdKind::Str,
        9 | 10 => IdKind::Absent,
        11 => IdKind::Null,
        12 => IdKind::Float,
        13 => IdKind::Bool,
        14 => IdKind::Obj,
        _ => IdKind::Arr,
    };
    let id = match id_kind {
        IdKind::Int => Some(json!(i64::from(src.byte() as i8) * 977)),
        IdKind::Str => Some(Value::String(src.string())),
        IdKind::Absent => None,
        IdKind::Null => Some(Value::Null),
        IdKind::Float => Some(json!(f64::from(src.byte()) + 0.5)),
        IdKind::Bool => Some(Value::Bool(true)),
        IdKind::Obj => Some(json!({"id": 1})),
        IdKind::Arr => Some(json!([1])),
    };
    let jsonrpc = match src.pick(10) {
        0 => None,
        1 => Some(json!("1.0")),
        2 => Some(json!(2.0)),
        3 => Some(json!("2.0 ")),
        _ => Some(json!("2.0")),
    };
    let jsonrpc_ok = jsonrpc == Some(json!("2.0"));
    let method: Option<Value> = match src.pick(12) {
        0 => None,
        1 => Some(src.value(1)),
        2 => Some(Value::String(src.string())),
        _ => {
            let i = usize::from(src.byte()) % METHOD_POOL.len();
            Some(json!(METHOD_POOL[i]))
        }
    };
    let method_str = method.as_ref().and_then(Value::as_str).map(str::to_owned);

    let meta_kind = match src.pick(14) {
        0 => MetaKind::Missing,
        1 => MetaKind::NotObject,
        2 => MetaKind::NoVersion,
        3 => MetaKind::VersionNotString,
        4 => MetaKind::OtherVersion,
        5 => MetaKind::NoCaps,
        6 => MetaKind::CapsNotObject,
        _ => MetaKind::Valid,
    };
    let caps = if src.byte() & 1 == 1 {
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}})
    } else {
        json!({})
    };
    let meta = match meta_kind {
        MetaKind::Valid => Some(json!({VERSION_KEY: VERSION, CAPS_KEY: caps})),
        MetaKind::Missing => None,
        MetaKind::NotObject => Some(src.value(0)),
        MetaKind::NoVersion => Some(json!({CAPS_KEY: caps})),
        MetaKind::VersionNotString => Some(json!({VERSION_KEY: 20260728, CAPS_KEY: caps})),
        MetaKind::OtherVersion => {
            let v = match src.pick(3) {
                0 => "2025-11-25".to_owned(),
                1 => "1900-01-01".to_owned(),
                _ => src.string(),
            };
            Some(json!({VERSION_KEY: v, CAPS_KEY: caps}))
        }
        MetaKind::NoCaps => Some(json!({VERSION_KEY: VERSION})),
        MetaKind::CapsNotObject => Some(json!({VERSION_KEY: VERSION, CAPS_KEY: src.value(0)})),
    };
    // A drawn "other" version may happen to be the supported one.
    let meta_kind = match (meta_kind, &meta) {
        (MetaKind::OtherVersion, Some(m)) if m[VERSION_KEY] == VERSION => MetaKind::Valid,
        (k, _) => k,
    };

    let mut params = Map::new();
    if let Some(m) = meta {
        params.insert("_meta".into(), m);
    }
    let name_field = match method_str.as_deref() {
        Some("tools/call") => Some("name"),
        Some("tasks/get" | "tasks/update" | "tasks/cancel") => Some("taskId"),
        _ => None,
    };
    let mut name_ok = true;
    for field in ["name", "taskId"] {
        let is_required = name_field == Some(field);
        match src.pick(8) {
            0 if is_required => {
                name_ok = false;
            }
            1 => {
                params.insert(field.into(), src.value(1));
                if is_required && !params[field].is_string() {
                    name_ok = false;
                }
            }
            2 | 3 => {
                let v = match src.pick(4) {
                    0 => "greet".to_owned(),
                    1 => "tsk_AAAAAAAAAAAAAAAAAAAAAA".to_owned(),
                    _ => src.string(),
                };
                params.insert(field.into(), Value::String(v));
            }
            _ if is_required => {
                params.insert(field.into(), json!("echo"));
            }
            _ => {}
        }
    }
    for field in ["arguments", "inputResponses", "notifications", "cursor"] {
        if src.pick(4) == 0 {
            params.insert(field.into(), src.value(2));
        }
    }
    if src.pick(4) == 0 {
        let k = src.string();
        if !matches!(k.as_str(), "_meta" | "name" | "taskId") {
            params.insert(k, src.value(2));
        }
    }
    let params_value = match src.pick(12) {
        0 => None,
        1 => Some(Value::Array(vec![Value::Object(params.clone())])),
        2 => Some(src.value(0)),
        _ => Some(Value::Object(params.clone())),
    };
    let params_ok = matches!(params_value, None | Some(Value::Object(_)));
    // Without params at all, `_meta` is missing.
    let meta_kind = if params_value.is_none() {
        MetaKind::Missing
    } else {
        meta_kind
    };

    let mut obj = Map::new();
    if let Some(j) = jsonrpc {
        obj.insert("jsonrpc".into(), j);
    }
    if let Some(i) = &id {
        obj.insert("id".into(), i.clone());
    }
    if let Some(m) = method {
        obj.insert("method".into(), m);
    }
    if let Some(p) = params_value {
        obj.insert("params".into(), p);
    }
    if src.pick(8) == 0 {
        obj.insert("result".into(), json!({}));
    }
    if src.pick(8) == 0 {
        let k = src.string();
        if !matches!(
            k.as_str(),
            "jsonrpc" | "id" | "method" | "params" | "result" | "error"
        ) {
            obj.insert(k, src.value(1));
        }
    }
    let mut body = serde_json::to_vec(&Value::Object(obj)).expect("serialisable");
    // Sometimes damage the serialisation (then only the generic oracle applies).
    let damaged = match (mode >> 1) % 8 {
        0 => {
            let cut = usize::from(src.byte()) % (body.len() + 1);
            body.truncate(cut);
            true
        }
        1 => {
            let at = usize::from(src.byte()) % (body.len() + 1);
            let b = src.byte();
            body.insert(at, b);
            true
        }
        _ => false,
    };

    let version = params
        .get("_meta")
        .and_then(|m| m.get(VERSION_KEY))
        .and_then(Value::as_str)
        .unwrap_or(VERSION)
        .to_owned();
    let method_canon = method_str.clone().unwrap_or_default();
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
    let shape = Shape {
        id: id_kind,
        jsonrpc_ok,
        method: method_str,
        params_ok,
        meta: meta_kind,
        name_ok,
    };
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
