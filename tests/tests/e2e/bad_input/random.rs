//! The bad-input property test: random bodies — random bytes, byte- and structure-level
//! mutations of valid requests, random routing header values — never get a 5xx or hang,
//! and every answer keeps the invariants. Seeded by hand (`BAD_INPUT_SEED`,
//! `BAD_INPUT_CASES` override the defaults).
//!
//! Checklist ids cited: none (the property covers B-43 and the status/code mapping through
//! the shared error checks).

use std::time::Instant;

use anyhow::Result;
use hyper::header::HeaderValue;
use mcp_tasks_tests::{TestContext, VERSION, caps_none, caps_tasks};
use serde_json::{Map, Value, json};

use super::{
    Answer, Probe, UNKNOWN_TASK, enc, error_shape_problems, redis_state, rq, sentinel, set,
    std_headers,
};

/// xorshift64*: small, seeded, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    fn byte(&mut self) -> u8 {
        (self.next() >> 24) as u8
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// A short string: ASCII, JSON-special characters, controls, non-ASCII.
    fn string(&mut self) -> String {
        const POOL: &[&str] = &[
            "a",
            "Z",
            "0",
            "-",
            "_",
            "/",
            " ",
            "\"",
            "\\",
            "{",
            "}",
            "[",
            "]",
            ":",
            ",",
            "\u{0}",
            "\u{1}",
            "\n",
            "\t",
            "\u{e9}",
            "\u{5de5}",
            "\u{1f600}",
            "=?base64?",
            "?=",
            "tsk_",
            "tools/call",
            "tasks/get",
            "2026-07-28",
        ];
        let n = self.below(8);
        (0..n).map(|_| *self.pick(POOL)).collect()
    }

    /// A random JSON value of bounded depth.
    fn value(&mut self, depth: u32) -> Value {
        match self.below(if depth == 0 { 6 } else { 8 }) {
            0 => Value::Null,
            1 => Value::Bool(self.one_in(2)),
            2 => json!(self.next() as i64),
            3 => json!(self.below(1000) as f64 / 7.0),
            4 => json!(self.below(100)),
            5 => Value::String(self.string()),
            6 => Value::Array((0..self.below(4)).map(|_| self.value(depth - 1)).collect()),
            _ => {
                let mut m = Map::new();
                for _ in 0..self.below(4) {
                    let k = self.string();
                    let v = self.value(depth - 1);
                    m.insert(k, v);
                }
                Value::Object(m)
            }
        }
    }
}

/// Valid requests the mutations start from (none of them can run long: `greet` is
/// synchronous and instant, `failing_job` is task-only and ends after 0.5 s).
fn base_requests() -> Vec<Value> {
    let none = caps_none();
    let tasks = caps_tasks();
    vec![
        rq(json!(1), "server/discover", json!({}), &none),
        rq(json!("l"), "tools/list", json!({}), &none),
        rq(
            json!(2),
            "tools/call",
            json!({"name": "greet", "arguments": {"name": "fuzz"}}),
            &none,
        ),
        rq(
            json!(3),
            "tools/call",
            json!({"name": "failing_job", "arguments": {}}),
            &tasks,
        ),
        rq(
            json!(4),
            "tasks/get",
            json!({"taskId": UNKNOWN_TASK}),
            &tasks,
        ),
        rq(
            json!(5),
            "tasks/update",
            json!({"taskId": UNKNOWN_TASK,
                   "inputResponses": {"k": {"action": "accept", "content": {"a": 1}}}}),
            &tasks,
        ),
        rq(
            json!(6),
            "tasks/cancel",
            json!({"taskId": UNKNOWN_TASK}),
            &tasks,
        ),
        rq(
            json!(7),
            "subscriptions/listen",
            json!({"notifications": {"taskIds": [UNKNOWN_TASK]}}),
            &tasks,
        ),
        json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}),
    ]
}

/// A path to a node of a JSON value.
type Path = Vec<PathStep>;

#[derive(Clone)]
enum PathStep {
    Key(String),
    Index(usize),
}

fn paths(v: &Value, here: &mut Path, out: &mut Vec<Path>) {
    out.push(here.clone());
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                here.push(PathStep::Key(k.clone()));
                paths(child, here, out);
                here.pop();
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                here.push(PathStep::Index(i));
                paths(child, here, out);
                here.pop();
            }
        }
        _ => {}
    }
}

fn node_mut<'a>(v: &'a mut Value, path: &[PathStep]) -> Option<&'a mut Value> {
    let mut cur = v;
    for step in path {
        cur = match step {
            PathStep::Key(k) => cur.get_mut(k.as_str())?,
            PathStep::Index(i) => cur.get_mut(*i)?,
        };
    }
    Some(cur)
}

/// The same value in another JSON type.
fn swap_type(rng: &mut Rng, v: &Value) -> Value {
    match v {
        Value::String(s) => match rng.below(4) {
            0 => json!(s.len()),
            1 => json!([s]),
            2 => json!({"value": s}),
            _ => Value::Null,
        },
        Value::Number(n) => match rng.below(3) {
            0 => json!(n.to_string()),
            1 => json!(n.as_f64().unwrap_or(0.0) + 0.5),
            _ => json!([n]),
        },
        Value::Object(m) => match rng.below(3) {
            0 => Value::Array(m.values().cloned().collect()),
            1 => json!(v.to_string()),
            _ => Value::Null,
        },
        Value::Array(a) => match rng.below(3) {
            0 => a.first().cloned().unwrap_or(Value::Null),
            1 => json!({"0": a}),
            _ => json!(a.len()),
        },
        Value::Bool(b) => json!(b.to_string()),
        Value::Null => json!({}),
    }
}

/// One structural mutation: replace, swap the type of, drop, or add a field.
fn mutate_value(rng: &mut Rng, v: &mut Value) {
    let mut all = Vec::new();
    paths(v, &mut Vec::new(), &mut all);
    let path = rng.pick(&all).clone();
    match rng.below(4) {
        0 => {
            if let Some(node) = node_mut(v, &path) {
                *node = rng.value(2);
            }
        }
        1 => {
            if let Some(node) = node_mut(v, &path) {
                *node = swap_type(rng, node);
            }
        }
        2 => {
            // Drop the node from its parent.
            if let Some((last, parent_path)) = path.split_last()
                && let Some(parent) = node_mut(v, parent_path)
            {
                match (parent, last) {
                    (Value::Object(m), PathStep::Key(k)) => {
                        m.remove(k);
                    }
                    (Value::Array(a), PathStep::Index(i)) if *i < a.len() => {
                        a.remove(*i);
                    }
                    _ => {}
                }
            }
        }
        _ => {
            if let Some(Value::Object(m)) = node_mut(v, &path) {
                let k = rng.string();
                let val = rng.value(1);
                m.insert(k, val);
            }
        }
    }
}

/// One byte-level mutation.
fn mutate_bytes(rng: &mut Rng, b: &mut Vec<u8>) {
    const TOKENS: &[&[u8]] = &[
        b"\"",
        b"{",
        b"}",
        b"[",
        b"]",
        b",",
        b":",
        b"\\",
        b"\\u0000",
        b"\\ud800",
        b"\xff",
        b"\xc0\xaf",
        b"null",
        b"1e400",
        b"-0",
        b"\x00",
        b"\n",
    ];
    let at = rng.below(b.len() + 1);
    match rng.below(6) {
        0 if !b.is_empty() => {
            let i = rng.below(b.len());
            b[i] ^= 1 << rng.below(8);
        }
        1 => b.insert(at, rng.byte()),
        2 if at < b.len() => {
            b.remove(at);
        }
        3 => {
            let tok = rng.pick(TOKENS);
            b.splice(at..at, tok.iter().copied());
        }
        4 => b.truncate(at),
        _ => {
            let end = (at + rng.below(16)).min(b.len());
            let chunk = b[at..end].to_vec();
            b.splice(at..at, chunk);
        }
    }
}

/// A header value: `good` as is or sentinel-wrapped, or something random.
fn header_value(rng: &mut Rng, good: &str) -> Option<Vec<u8>> {
    match rng.below(12) {
        0 => None,
        1 => Some(sentinel(good.as_bytes())),
        2 => Some(sentinel(rng.string().as_bytes())),
        3 => {
            Some(format!("=?base64?{}!?=", rng.string().replace(['\u{0}', '\n'], "")).into_bytes())
        }
        4 => {
            // Random visible bytes, including obs-text (invalid UTF-8).
            let n = rng.below(20);
            Some(
                (0..n)
                    .map(|_| match rng.byte() {
                        b if b < 0x20 || b == 0x7f => b'x',
                        b => b,
                    })
                    .collect(),
            )
        }
        5 => Some(good.to_uppercase().into_bytes()),
        _ => Some(good.as_bytes().to_vec()),
    }
}

/// What one random case was and what came back, for the report.
struct Outcome {
    created_task: bool,
    maybe_created: bool,
}

/// Check one answer for the invariants; `Err` describes the violation.
fn check_random_answer(sent: &[u8], a: &Answer) -> Result<Outcome, String> {
    let sent_json: Option<Value> = serde_json::from_slice(sent).ok();
    let method = sent_json
        .as_ref()
        .and_then(|v| v.get("method"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut outcome = Outcome {
        created_task: false,
        maybe_created: false,
    };
    if a.status >= 500 {
        return Err("5xx".into());
    }
    match a.status {
        202 => {
            if !a.raw.is_empty() {
                return Err("202 with a body".into());
            }
        }
        200 if a.content_type.starts_with("text/event-stream") => {
            if a.body["method"] != "notifications/subscriptions/acknowledged" {
                return Err("a stream whose first message is not the acknowledgement".into());
            }
        }
        200 => {
            if a.body["jsonrpc"] != "2.0" {
                return Err("200 without a JSON-RPC body".into());
            }
            if a.body.get("error").is_some() {
                let problems = error_shape_problems(&a.body);
                if !problems.is_empty() {
                    return Err(problems.join("; "));
                }
                let code = a.body["error"]["code"].as_i64().unwrap_or_default();
                if code == -32603 && method != "tools/call" {
                    return Err("internal error (-32603) answering bad input".into());
                }
                if ![-32602, -32603].contains(&code) {
                    return Err(format!("in-band error code {code}"));
                }
                // A synchronous call can fail after creating its task.
                outcome.maybe_created = method == "tools/call" && code == -32603;
            } else {
                let result = &a.body["result"];
                if !result.is_object() {
                    return Err("200 with neither result nor error".into());
                }
                if method == "tools/call" {
                    let bad_args = result["isError"] == true
                        && result["content"][0]["text"]
                            .as_str()
                            .unwrap_or("")
                            .starts_with("invalid arguments");
                    outcome.created_task = result["resultType"] == "task";
                    outcome.maybe_created = !bad_args && result["resultType"] != "input_required";
                }
            }
        }
        _ => {
            let problems = error_shape_problems(&a.body);
            if !problems.is_empty() {
                return Err(format!(
                    "non-2xx without a JSON-RPC error: {}",
                    problems.join("; ")
                ));
            }
            let code = a.body["error"]["code"].as_i64().unwrap_or_default();
            let fits = match a.status {
                400 => [-32700, -32600, -32602, -32020, -32021, -32022].contains(&code),
                404 => code == -32601,
                403 | 406 | 413 | 415 => code == -32600,
                _ => false,
            };
            if !fits {
                return Err(format!("HTTP {} with code {code}", a.status));
            }
        }
    }
    Ok(outcome)
}

/// Issue 3 item 5 (property): random bodies — random bytes, byte and structure mutations of
/// valid requests, random routing header values — never get a 5xx, never hang (5 s per
/// request), every non-2xx carries a JSON-RPC error body with a code that fits its status,
/// the gateway stays healthy, and Redis only gains the tasks of calls it accepted.
#[tokio::test]
async fn random_bodies_never_produce_a_5xx_or_a_hang() -> Result<()> {
    let seed: u64 = std::env::var("BAD_INPUT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x6d63_7074_6261_6431);
    let cases: usize = std::env::var("BAD_INPUT_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(500);
    let ctx = TestContext::start(1, 1).await?;
    let probe = Probe::new(ctx.gateways[0].addr);
    let before = redis_state(&ctx)?;
    let bases = base_requests();
    let mut rng = Rng::new(seed);
    let mut failures = Vec::new();
    let (mut tasks_made, mut maybe_made) = (0usize, 0usize);
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    let started = Instant::now();
    for case in 0..cases {
        let base = rng.pick(&bases).clone();
        let strategy = rng.below(5);
        let mut value = base.clone();
        let body = match strategy {
            0 => (0..rng.below(300)).map(|_| rng.byte()).collect(),
            1 | 2 => {
                for _ in 0..1 + rng.below(3) {
                    mutate_value(&mut rng, &mut value);
                }
                let mut b = enc(&value);
                if strategy == 2 {
                    for _ in 0..1 + rng.below(4) {
                        mutate_bytes(&mut rng, &mut b);
                    }
                }
                b
            }
            3 => {
                let mut b = enc(&value);
                for _ in 0..1 + rng.below(6) {
                    mutate_bytes(&mut rng, &mut b);
                }
                b
            }
            // Valid body, random headers only.
            _ => enc(&value),
        };
        // Routing headers follow the (mutated) body, so mutations reach the deep checks;
        // each is then randomly damaged.
        let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_owned();
        let method = text(value.get("method"));
        let name = value
            .get("params")
            .map(|p| {
                let n = text(p.get("name"));
                if n.is_empty() {
                    text(p.get("taskId"))
                } else {
                    n
                }
            })
            .unwrap_or_default();
        let damage = strategy == 4 || rng.one_in(3);
        let mut headers = std_headers(&method, None);
        if !name.is_empty() {
            headers.push(("mcp-name".into(), name.as_bytes().to_vec()));
        }
        if damage {
            for (header, good) in [
                ("mcp-protocol-version", VERSION.to_owned()),
                ("mcp-method", method.clone()),
                ("mcp-name", name.clone()),
            ] {
                if rng.one_in(2) {
                    headers = set(headers, header, header_value(&mut rng, &good).as_deref());
                }
            }
            if rng.one_in(8) {
                let options: [&[u8]; 5] = [
                    b"text/plain",
                    b"application/json; charset=utf-8",
                    b"application/JSON",
                    b"",
                    b"application/json\xff",
                ];
                let ct = *rng.pick(&options);
                headers = set(headers, "content-type", Some(ct));
            }
            if rng.one_in(8) {
                let options: [&[u8]; 5] = [
                    b"application/json",
                    b"text/event-stream",
                    b"*/*",
                    b"text/html",
                    b"",
                ];
                let accept = *rng.pick(&options);
                headers = set(headers, "accept", Some(accept));
            }
        }
        // Values hyper cannot send (control bytes) are dropped, as no HTTP client sends them.
        headers.retain(|(_, v)| HeaderValue::from_bytes(v).is_ok());
        match probe.post(&headers, body.clone()).await {
            Err(e) => failures.push(format!(
                "case {case}: {e:#}\n    body: {}",
                String::from_utf8_lossy(&body)
            )),
            Ok(answer) => {
                *statuses.entry(answer.status).or_default() += 1;
                match check_random_answer(&body, &answer) {
                    Ok(o) => {
                        tasks_made += usize::from(o.created_task);
                        maybe_made += usize::from(o.maybe_created || o.created_task);
                    }
                    Err(why) => failures.push(format!(
                        "case {case}: {why}\n    headers: {:?}\n    body: {}\n    got: {}",
                        headers
                            .iter()
                            .map(|(k, v)| format!("{k}: {}", String::from_utf8_lossy(v)))
                            .collect::<Vec<_>>(),
                        String::from_utf8_lossy(&body),
                        answer.describe()
                    )),
                }
            }
        }
    }
    println!(
        "bad-input property cases: {cases}, seed: {seed} (BAD_INPUT_SEED), {:.1} s, statuses {statuses:?}, tasks created {tasks_made}..={maybe_made}",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(probe.get("/healthz").await?, 200, "gateway still healthy");
    let after = redis_state(&ctx)?;
    let grown = after.tasks.saturating_sub(before.tasks);
    assert!(
        after.tasks >= before.tasks && (tasks_made..=maybe_made).contains(&grown),
        "task hashes went from {} to {} but accepted calls account for {tasks_made}..={maybe_made} (seed {seed})",
        before.tasks,
        after.tasks
    );
    assert!(
        after.queued <= before.queued + maybe_made as u64,
        "queue grew from {} to {} (seed {seed})",
        before.queued,
        after.queued
    );
    // And a valid request still works.
    let ok = probe
        .post(
            &std_headers("tools/list", None),
            enc(&rq(json!("after"), "tools/list", json!({}), &caps_none())),
        )
        .await?;
    assert_eq!(ok.status, 200, "{}", ok.describe());
    assert!(
        failures.is_empty(),
        "{} of {cases} random cases broke an invariant (seed {seed}):\n{}",
        failures.len(),
        failures.join("\n")
    );
    ctx.cleanup().await;
    Ok(())
}
