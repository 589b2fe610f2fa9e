//! Shape rules for task objects, shared by the e2e modules that observe tasks
//! (`lifecycle/`, `listen.rs`, `cluster_of_two.rs`): the fields of each status and envelope,
//! the input request shape, the allowed transitions and the timestamp format.
//!
//! Checklist ids cited: T-07…T-13, T-16, T-17, T-19, T-20, T-23, T-47, T-57.

use serde_json::Value;

/// Every status a task may have (T-10).
pub(crate) const STATUSES: [&str; 5] = [
    "working",
    "input_required",
    "completed",
    "failed",
    "cancelled",
];

/// The `Task` fields (§5.1).
const TASK_FIELDS: [&str; 7] = [
    "taskId",
    "status",
    "statusMessage",
    "createdAt",
    "lastUpdatedAt",
    "ttlMs",
    "pollIntervalMs",
];

/// Where a task object came from; each place allows a different envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `CreateTaskResult` (`resultType: "task"`, no status payload, T-16).
    Created,
    /// `tasks/get` result (`resultType: "complete"`, T-08).
    Polled,
    /// `notifications/tasks` params (no `resultType`, T-47).
    Notified,
}

/// Whether `status` is terminal.
pub(crate) fn is_terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled")
}

/// Assert `t` is a well-formed task object of `kind` (T-07…T-13, T-16, T-19, T-20).
pub(crate) fn task(t: &Value, kind: Kind) {
    let obj = t
        .as_object()
        .unwrap_or_else(|| panic!("task is not an object: {t}"));
    let status = t["status"]
        .as_str()
        .unwrap_or_else(|| panic!("status missing or not a string: {t}"));
    assert!(STATUSES.contains(&status), "unknown status {status}: {t}");
    // T-09: required fields.
    assert!(
        t["taskId"].as_str().is_some_and(|s| !s.is_empty()),
        "taskId: {t}"
    );
    let created = ts_ms(
        t["createdAt"]
            .as_str()
            .unwrap_or_else(|| panic!("createdAt: {t}")),
    );
    let updated = ts_ms(
        t["lastUpdatedAt"]
            .as_str()
            .unwrap_or_else(|| panic!("lastUpdatedAt: {t}")),
    );
    assert!(updated >= created, "lastUpdatedAt before createdAt: {t}");
    // T-09, T-11: ttlMs key present, a non-negative integer or null.
    match obj.get("ttlMs") {
        Some(Value::Null) => {}
        Some(v) => assert!(v.is_u64(), "ttlMs not a non-negative integer: {t}"),
        None => panic!("ttlMs key missing: {t}"),
    }
    // T-11, T-12: pollIntervalMs present, a non-negative integer.
    assert!(
        obj.get("pollIntervalMs").is_some_and(Value::is_u64),
        "pollIntervalMs missing or not a non-negative integer: {t}"
    );
    if let Some(m) = obj.get("statusMessage") {
        assert!(m.is_string(), "statusMessage not a string: {t}");
    }
    // The envelope of each kind (T-07, T-08).
    let mut allowed: Vec<&str> = TASK_FIELDS.to_vec();
    match kind {
        Kind::Created => {
            assert_eq!(t["resultType"], "task", "CreateTaskResult: {t}");
            assert_eq!(status, "working", "tasks are seeded working (T-16): {t}");
            allowed.extend(["resultType", "_meta"]);
        }
        Kind::Polled => {
            assert_eq!(t["resultType"], "complete", "tasks/get result: {t}");
            allowed.extend(["resultType", "_meta"]);
        }
        Kind::Notified => {
            assert!(obj.get("resultType").is_none(), "notification: {t}");
            allowed.push("_meta");
        }
    }
    // T-13, T-16, T-19, T-20: exactly the payload of the status, nothing foreign.
    let payload = match (kind, status) {
        (Kind::Created, _) => None,
        (_, "input_required") => Some("inputRequests"),
        (_, "completed") => Some("result"),
        (_, "failed") => Some("error"),
        _ => None,
    };
    if let Some(p) = payload {
        allowed.push(p);
        assert!(obj.contains_key(p), "{status} task without {p}: {t}");
    }
    for key in obj.keys() {
        assert!(
            allowed.contains(&key.as_str()),
            "unexpected top-level field {key:?} on a {status} task ({kind:?}): {t}"
        );
    }
    if let Some(m) = obj.get("_meta") {
        assert!(m.is_object(), "_meta not an object: {t}");
    }
    match payload {
        Some("inputRequests") => {
            let reqs = t["inputRequests"]
                .as_object()
                .unwrap_or_else(|| panic!("inputRequests not an object: {t}"));
            assert!(!reqs.is_empty(), "input_required with no requests: {t}");
            for (key, req) in reqs {
                input_request(key, req);
            }
        }
        Some("result") => call_tool_result(&t["result"]),
        Some("error") => {
            let e = &t["error"];
            assert!(e["code"].is_i64(), "error.code: {t}");
            assert!(e["message"].is_string(), "error.message: {t}");
        }
        _ => {}
    }
}

/// A completed `tools/call` task's `result` is a full `CallToolResult` (T-23).
pub(crate) fn call_tool_result(r: &Value) {
    assert_eq!(
        r["resultType"], "complete",
        "result without resultType: {r}"
    );
    let content = r["content"]
        .as_array()
        .unwrap_or_else(|| panic!("result.content not an array: {r}"));
    for c in content {
        assert!(c["type"].is_string(), "content item without type: {r}");
    }
    if let Some(e) = r.get("isError") {
        assert!(e.is_boolean(), "isError not a boolean: {r}");
    }
}

/// One `inputRequests` value is a well-formed request object (T-57).
pub(crate) fn input_request(key: &str, req: &Value) {
    assert!(
        !key.is_empty() && key.bytes().all(|b| (0x21..=0x7e).contains(&b)),
        "key {key:?} is not short printable ASCII"
    );
    let obj = req
        .as_object()
        .unwrap_or_else(|| panic!("inputRequests[{key}] not an object: {req}"));
    for k in obj.keys() {
        assert!(
            k == "method" || k == "params",
            "inputRequests[{key}] has field {k:?} (no jsonrpc/id allowed): {req}"
        );
    }
    let params = &req["params"];
    match req["method"].as_str() {
        Some("elicitation/create") => {
            assert!(params["message"].is_string(), "elicitation message: {req}");
            match params.get("mode").and_then(Value::as_str) {
                None | Some("form") => {
                    let schema = &params["requestedSchema"];
                    assert_eq!(schema["type"], "object", "requestedSchema: {req}");
                    assert!(schema["properties"].is_object(), "requestedSchema: {req}");
                }
                Some("url") => assert!(params["url"].is_string(), "url: {req}"),
                Some(other) => panic!("unknown elicitation mode {other}: {req}"),
            }
        }
        Some("sampling/createMessage") => {
            assert!(params["messages"].is_array(), "sampling messages: {req}");
            assert!(params["maxTokens"].is_i64(), "sampling maxTokens: {req}");
        }
        Some("roots/list") => {
            assert!(
                params.is_null() || params.is_object(),
                "roots/list params: {req}"
            );
        }
        _ => panic!("inputRequests[{key}] has no known method: {req}"),
    }
}

/// Whether the state machine allows `from` → `to` (T-17); staying is allowed.
pub(crate) fn allowed(from: &str, to: &str) -> bool {
    from == to && !is_terminal(from)
        || matches!(
            (from, to),
            (
                "working",
                "input_required" | "completed" | "failed" | "cancelled"
            ) | (
                "input_required",
                "working" | "completed" | "failed" | "cancelled"
            )
        )
}

/// Assert a sequence of observed statuses only takes allowed steps (T-17).
pub(crate) fn transitions<'a>(statuses: impl IntoIterator<Item = &'a str>) {
    let seen: Vec<&str> = statuses.into_iter().collect();
    for pair in seen.windows(2) {
        assert!(
            allowed(pair[0], pair[1]),
            "illegal transition {} -> {} in {seen:?}",
            pair[0],
            pair[1]
        );
    }
}

/// Milliseconds since the epoch of an RFC 3339 UTC timestamp with exactly millisecond
/// precision and a `Z` suffix, e.g. `2026-08-01T09:30:00.125Z` (T-11). Panics otherwise.
pub(crate) fn ts_ms(s: &str) -> i64 {
    let b = s.as_bytes();
    let shape_ok = b.len() == 24
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'.',
            23 => *c == b'Z',
            _ => c.is_ascii_digit(),
        });
    assert!(shape_ok, "timestamp {s:?} is not YYYY-MM-DDTHH:MM:SS.mmmZ");
    let n = |r: std::ops::Range<usize>| -> i64 { s[r].parse().expect("digits") };
    let (y, mo, d) = (n(0..4), n(5..7), n(8..10));
    let (h, mi, se, ms) = (n(11..13), n(14..16), n(17..19), n(20..23));
    assert!(
        (1..=12).contains(&mo) && (1..=31).contains(&d) && h < 24 && mi < 60 && se < 61,
        "timestamp {s:?} out of range"
    );
    // Days from civil (H. Hinnant).
    let yy = if mo <= 2 { y - 1 } else { y };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let doy = (153 * ((mo + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    ((days * 24 + h) * 60 + mi) * 60_000 + se * 1000 + ms
}

/// `v` without the top-level `keys`.
pub(crate) fn without(v: &Value, keys: &[&str]) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        for k in keys {
            o.remove(*k);
        }
    }
    v
}

/// The text of the first content item of a `CallToolResult`.
pub(crate) fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}
