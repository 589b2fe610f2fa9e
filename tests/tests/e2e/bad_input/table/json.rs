//! Table cases with a broken body: invalid JSON (400 / -32700, no id), bodies that are not a
//! JSON-RPC request (400 / -32600) and requests without the required `_meta` fields
//! (400 / -32602).
//!
//! Checklist ids cited: B-02, B-03, B-06.

use mcp_tasks_tests::{VERSION, caps_none, meta};
use serde_json::{Map, Value, json};

use super::{CAPS_KEY, Table, VERSION_KEY, err, list_h};
use crate::bad_input::{enc, rq};

/// Invalid JSON (400 / -32700, no id: B-03).
pub(super) fn invalid_json(t: &mut Table) {
    let none = caps_none();
    let valid_list = enc(&rq(json!(1), "tools/list", json!({}), &none));
    let parse = || err(400, -32700, None);
    let truncated = valid_list[..valid_list.len() / 2].to_vec();
    let mut trailing = valid_list.clone();
    trailing.extend_from_slice(b" xyz");
    let mut two = valid_list.clone();
    two.extend_from_slice(&valid_list);
    let mut utf16 = vec![0xff, 0xfe];
    for c in String::from_utf8_lossy(&valid_list).encode_utf16() {
        utf16.extend_from_slice(&c.to_le_bytes());
    }
    for (name, body) in [
        ("not JSON at all", b"hello".to_vec()),
        ("empty body", Vec::new()),
        ("whitespace only", b" \r\n\t ".to_vec()),
        ("truncated JSON (half a request)", truncated),
        (
            "unterminated object",
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/list""#.to_vec(),
        ),
        ("trailing garbage after the request", trailing),
        ("two requests concatenated", two),
        (
            "single quotes",
            br#"{'jsonrpc':'2.0','id':1,'method':'tools/list'}"#.to_vec(),
        ),
        (
            "trailing comma",
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/list",}"#.to_vec(),
        ),
        (
            "NaN literal",
            br#"{"jsonrpc":"2.0","id":NaN,"method":"tools/list"}"#.to_vec(),
        ),
        (
            "comment in JSON",
            br#"{"jsonrpc":"2.0", /* c */ "id":1,"method":"tools/list"}"#.to_vec(),
        ),
        (
            "invalid UTF-8 inside a string",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\xff\xfe\"}".to_vec(),
        ),
        (
            "invalid UTF-8 (overlong encoding) in a string",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xc0\xaf\"}".to_vec(),
        ),
        (
            "bare invalid UTF-8 bytes",
            vec![0xff, 0xfe, 0xfd, 0x80, 0x00],
        ),
        ("UTF-16 encoded request", utf16),
        (
            "control character in a string",
            b"{\"method\":\"a\x01b\"}".to_vec(),
        ),
        ("100k unclosed [", vec![b'['; 100_000]),
        ("100k nested balanced arrays", {
            let mut b = vec![b'['; 100_000];
            b.extend(std::iter::repeat_n(b']', 100_000));
            b
        }),
        ("100k nested objects", {
            let mut b = b"{\"a\":".repeat(100_000);
            b.push(b'1');
            b.extend(std::iter::repeat_n(b'}', 100_000));
            b
        }),
        ("deep nesting inside a valid request", {
            let mut b = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"x":"#.to_vec();
            b.extend(std::iter::repeat_n(b'[', 5_000));
            b.extend(std::iter::repeat_n(b']', 5_000));
            b.extend_from_slice(b"}}");
            b
        }),
    ] {
        t.add(format!("parse: {name}"), list_h(), body, parse());
    }
}

/// Not a JSON-RPC request (400 / -32600: B-02, B-03).
pub(super) fn not_a_request(t: &mut Table) {
    let none = caps_none();
    for (name, body) in [
        ("body null", "null"),
        ("body number", "42"),
        ("body string", "\"tools/list\""),
        ("body true", "true"),
        ("body empty array", "[]"),
        ("body empty object", "{}"),
        (
            "id null",
            r#"{"jsonrpc":"2.0","id":null,"method":"tools/list","params":{}}"#,
        ),
        (
            "id float",
            r#"{"jsonrpc":"2.0","id":1.5,"method":"tools/list","params":{}}"#,
        ),
        (
            "id object",
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}"#,
        ),
        (
            "id bool",
            r#"{"jsonrpc":"2.0","id":true,"method":"tools/list"}"#,
        ),
        (
            "id array",
            r#"{"jsonrpc":"2.0","id":[1],"method":"tools/list"}"#,
        ),
        ("jsonrpc only", r#"{"jsonrpc":"2.0"}"#),
        (
            "notification with params array",
            r#"{"jsonrpc":"2.0","method":"notifications/x","params":[1]}"#,
        ),
        (
            "notification with jsonrpc 1.0",
            r#"{"jsonrpc":"1.0","method":"notifications/x"}"#,
        ),
        (
            "notification with method number",
            r#"{"jsonrpc":"2.0","method":7}"#,
        ),
    ] {
        t.add(
            format!("envelope: {name}"),
            list_h(),
            body.as_bytes().to_vec(),
            err(400, -32600, None),
        );
    }
    let req = rq(json!(1), "tools/list", json!({}), &none);
    t.add(
        "envelope: batch of one valid request",
        list_h(),
        enc(&json!([req.clone()])),
        err(400, -32600, None),
    );
    t.add(
        "envelope: batch of two",
        list_h(),
        enc(&json!([req.clone(), req.clone()])),
        err(400, -32600, None),
    );
    let mut envelope_with_id = Vec::new();
    let edit = |f: &dyn Fn(&mut Map<String, Value>)| {
        let mut v = rq(json!("e-1"), "tools/list", json!({}), &none);
        f(v.as_object_mut().expect("object"));
        enc(&v)
    };
    envelope_with_id.push((
        "jsonrpc missing",
        edit(&|o| {
            o.remove("jsonrpc");
        }),
    ));
    envelope_with_id.push((
        "jsonrpc 1.0",
        edit(&|o| {
            o.insert("jsonrpc".into(), json!("1.0"));
        }),
    ));
    envelope_with_id.push((
        "jsonrpc as number 2.0",
        edit(&|o| {
            o.insert("jsonrpc".into(), json!(2.0));
        }),
    ));
    envelope_with_id.push((
        "jsonrpc \"2.0 \"",
        edit(&|o| {
            o.insert("jsonrpc".into(), json!("2.0 "));
        }),
    ));
    envelope_with_id.push((
        "method missing",
        edit(&|o| {
            o.remove("method");
        }),
    ));
    envelope_with_id.push((
        "method number",
        edit(&|o| {
            o.insert("method".into(), json!(42));
        }),
    ));
    envelope_with_id.push((
        "method null",
        edit(&|o| {
            o.insert("method".into(), Value::Null);
        }),
    ));
    envelope_with_id.push((
        "method object",
        edit(&|o| {
            o.insert("method".into(), json!({"name": "tools/list"}));
        }),
    ));
    envelope_with_id.push((
        "params array",
        edit(&|o| {
            o.insert("params".into(), json!([{"_meta": meta(&caps_none())}]));
        }),
    ));
    envelope_with_id.push((
        "params string",
        edit(&|o| {
            o.insert("params".into(), json!("params"));
        }),
    ));
    envelope_with_id.push((
        "params null",
        edit(&|o| {
            o.insert("params".into(), Value::Null);
        }),
    ));
    envelope_with_id.push((
        "params number",
        edit(&|o| {
            o.insert("params".into(), json!(3));
        }),
    ));
    envelope_with_id.push((
        "posted result response",
        enc(&json!({"jsonrpc": "2.0", "id": "e-1", "result": {"resultType": "complete"}})),
    ));
    envelope_with_id.push((
        "posted error response",
        enc(&json!({"jsonrpc": "2.0", "id": "e-1", "error": {"code": -32603, "message": "x"}})),
    ));
    for (name, body) in envelope_with_id {
        t.add(
            format!("envelope: {name}"),
            list_h(),
            body,
            err(400, -32600, Some(json!("e-1"))),
        );
    }
}

/// Required _meta fields (400 / -32602: B-06).
pub(super) fn missing_meta(t: &mut Table) {
    let meta_cases: Vec<(&str, Value)> = vec![
        (
            "params missing",
            json!({"jsonrpc": "2.0", "id": 11, "method": "tools/list"}),
        ),
        (
            "_meta missing",
            json!({"jsonrpc": "2.0", "id": 11, "method": "tools/list", "params": {}}),
        ),
        (
            "_meta array",
            json!({"jsonrpc": "2.0", "id": 11, "method": "tools/list", "params": {"_meta": []}}),
        ),
        (
            "protocolVersion missing",
            json!({"jsonrpc": "2.0", "id": 11, "method": "tools/list",
                   "params": {"_meta": {CAPS_KEY: {}}}}),
        ),
        (
            "protocolVersion a number",
            json!({"jsonrpc": "2.0", "id": 11, "method": "tools/list",
                   "params": {"_meta": {VERSION_KEY: 20260728, CAPS_KEY: {}}}}),
        ),
        (
            "clientCapabilities missing",
            json!({"jsonrpc": "2.0", "id": 11, "method": "tools/list",
                   "params": {"_meta": {VERSION_KEY: VERSION}}}),
        ),
        (
            "clientCapabilities a string",
            json!({"jsonrpc": "2.0", "id": 11, "method": "tools/list",
                   "params": {"_meta": {VERSION_KEY: VERSION, CAPS_KEY: "all"}}}),
        ),
        (
            "clientCapabilities null",
            json!({"jsonrpc": "2.0", "id": 11, "method": "tools/list",
                   "params": {"_meta": {VERSION_KEY: VERSION, CAPS_KEY: null}}}),
        ),
    ];
    for (name, body) in meta_cases {
        t.add(
            format!("_meta: {name}"),
            list_h(),
            enc(&body),
            err(400, -32602, Some(json!(11))),
        );
    }
}
