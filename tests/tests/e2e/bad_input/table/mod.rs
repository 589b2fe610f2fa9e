//! The bad-input table test: every malformed request of the table gets exactly the status,
//! code and id the mapping names, with a message, and changes nothing in Redis. The cases
//! are built by topic in the submodules; [`table`] lists them in a fixed order.
//!
//! Checklist ids cited: B-02, B-03, B-05, B-06, B-18…B-25, B-43, B-44, T-24, T-32, T-33,
//! T-40, T-41, T-53, T-56.

mod headers;
mod json;
mod params;
mod tolerated;
mod transport;

use std::time::Instant;

use anyhow::Result;
use mcp_tasks_tests::{TestContext, caps_none};
use serde_json::{Value, json};

use super::{Answer, Headers, Probe, enc, error_shape_problems, redis_state, rq, set, std_headers};

const VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
const CAPS_KEY: &str = "io.modelcontextprotocol/clientCapabilities";

/// What a case must get.
#[derive(Debug, Clone)]
enum Expect {
    /// A JSON-RPC error with exactly this HTTP status and code; `id`: `Some` = echoed
    /// unchanged, `None` = omitted (unreadable). `data`: fields that must be in
    /// `error.data`. `mentions`: a word the message must contain (case-insensitive, T-53).
    Error {
        status: u16,
        code: i64,
        id: Option<Value>,
        data: Option<Value>,
        mentions: Option<&'static str>,
    },
    /// Tolerated input: HTTP 200 with a result for this id.
    Result { id: Value },
    /// HTTP 200 with a `CallToolResult` whose `isError` is true (B-29: bad arguments).
    ToolError { id: Value },
    /// HTTP 202 with an empty body (B-13).
    Accepted,
}

fn err(status: u16, code: i64, id: Option<Value>) -> Expect {
    Expect::Error {
        status,
        code,
        id,
        data: None,
        mentions: None,
    }
}

fn err_mentioning(status: u16, code: i64, id: Option<Value>, word: &'static str) -> Expect {
    Expect::Error {
        status,
        code,
        id,
        data: None,
        mentions: Some(word),
    }
}

struct Case {
    name: String,
    headers: Headers,
    body: Vec<u8>,
    expect: Expect,
}

/// Builds the table.
#[derive(Default)]
struct Table(Vec<Case>);

impl Table {
    fn add(&mut self, name: impl Into<String>, headers: Headers, body: Vec<u8>, expect: Expect) {
        self.0.push(Case {
            name: name.into(),
            headers,
            body,
            expect,
        });
    }
}

/// Compare an answer with what the case expects; the problems found.
fn judge(case: &Case, a: &Answer) -> Vec<String> {
    let mut p = Vec::new();
    match &case.expect {
        Expect::Error {
            status,
            code,
            id,
            data,
            mentions,
        } => {
            if a.status != *status {
                p.push(format!("HTTP {} (expected {status})", a.status));
            }
            if !a.content_type.starts_with("application/json") {
                p.push(format!(
                    "content-type {:?} (expected application/json)",
                    a.content_type
                ));
            }
            p.extend(error_shape_problems(&a.body));
            let got = a.body["error"]["code"].as_i64();
            if got != Some(*code) {
                p.push(format!("code {got:?} (expected {code})"));
            }
            match id {
                Some(id) if &a.body["id"] != id => {
                    p.push(format!("id {} (expected {id} echoed)", a.body["id"]));
                }
                None if a.body.get("id").is_some_and(|i| !i.is_null()) => {
                    p.push(format!("id {} (expected none: unreadable)", a.body["id"]));
                }
                _ => {}
            }
            if let Some(Value::Object(want)) = data {
                for (k, v) in want {
                    if &a.body["error"]["data"][k] != v {
                        p.push(format!(
                            "error.data.{k} = {} (expected {v})",
                            a.body["error"]["data"][k]
                        ));
                    }
                }
            }
            if let Some(word) = mentions {
                let msg = a.body["error"]["message"]
                    .as_str()
                    .unwrap_or("")
                    .to_lowercase();
                if !msg.contains(&word.to_lowercase()) {
                    p.push(format!("T-53: message does not mention {word:?}"));
                }
            }
        }
        Expect::Result { id } | Expect::ToolError { id } => {
            if a.status != 200 {
                p.push(format!("HTTP {} (expected 200)", a.status));
            }
            if !a.body["result"].is_object() {
                p.push("no result object".to_owned());
            }
            if &a.body["id"] != id {
                p.push(format!("id {} (expected {id} echoed)", a.body["id"]));
            }
            if matches!(case.expect, Expect::ToolError { .. })
                && a.body["result"]["isError"] != true
            {
                p.push("result.isError is not true".to_owned());
            }
        }
        Expect::Accepted => {
            if a.status != 202 {
                p.push(format!("HTTP {} (expected 202)", a.status));
            }
            if !a.raw.is_empty() {
                p.push("202 with a body".to_owned());
            }
        }
    }
    p
}

/// A `server/discover` request with `id`.
fn discover(id: Value) -> Vec<u8> {
    enc(&rq(id, "server/discover", json!({}), &caps_none()))
}

/// The standard headers of `tools/list`.
fn list_h() -> Headers {
    std_headers("tools/list", None)
}

/// The standard headers of `server/discover`.
fn disc_h() -> Headers {
    std_headers("server/discover", None)
}

/// The `tools/call` headers with `Mcp-Name` set to `name` (removed when `None`).
fn call_h(name: Option<&[u8]>) -> Headers {
    set(std_headers("tools/call", None), "mcp-name", name)
}

/// A `subscriptions/listen` request with id 41.
fn listen(params: Value, caps: &Value) -> Vec<u8> {
    enc(&rq(json!(41), "subscriptions/listen", params, caps))
}

/// The standard headers of `subscriptions/listen`.
fn listen_h() -> Headers {
    std_headers("subscriptions/listen", None)
}

/// Every malformed request of the table, grouped as issue 3 item 5 lists them.
fn table() -> Vec<Case> {
    let mut t = Table::default();
    json::invalid_json(&mut t);
    json::not_a_request(&mut t);
    json::missing_meta(&mut t);
    headers::protocol_version(&mut t);
    headers::mcp_method(&mut t);
    headers::mcp_name(&mut t);
    params::unknown_methods(&mut t);
    params::wrong_params(&mut t);
    tolerated::extra_fields(&mut t);
    tolerated::notifications(&mut t);
    transport::before_json(&mut t);
    headers::duplicate_routing_headers(&mut t);
    transport::huge_bodies(&mut t);
    t.0
}

/// Issue 3 item 5, B-02, B-03, B-05, B-06, B-18…B-25, B-43, B-44, T-24, T-32, T-33, T-40,
/// T-41, T-53, T-56: each malformed request gets exactly the status, code and id the
/// mapping names, with a message, and no task hash or queue entry appears; a valid request
/// right after still works.
#[tokio::test]
async fn malformed_requests_get_the_specified_error_and_change_nothing() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let probe = Probe::new(ctx.gateways[0].addr);
    let before = redis_state(&ctx)?;
    let started = Instant::now();
    let cases = table();
    let mut failures = Vec::new();
    for case in &cases {
        // A transport error is retried twice: a server that answers 413 before reading a
        // huge body may reset the connection while the client is still sending it.
        let mut answer = probe.post(&case.headers, case.body.clone()).await;
        for _ in 0..2 {
            if answer.is_ok() {
                break;
            }
            answer = probe.post(&case.headers, case.body.clone()).await;
        }
        match answer {
            Err(e) => failures.push(format!("{}: request failed: {e:#}", case.name)),
            Ok(answer) => {
                let problems = judge(case, &answer);
                if !problems.is_empty() {
                    failures.push(format!(
                        "{}: {}\n    got: {}",
                        case.name,
                        problems.join("; "),
                        answer.describe()
                    ));
                }
            }
        }
    }
    println!(
        "bad-input cases tried: {} ({:.1} s)",
        cases.len(),
        started.elapsed().as_secs_f64()
    );
    let after = redis_state(&ctx)?;
    assert_eq!(
        after, before,
        "bad input changed Redis (task hashes, queue length)"
    );
    assert_eq!(probe.get("/healthz").await?, 200, "gateway still healthy");
    // A valid request still works, extra unknown fields included.
    let mut body = rq(
        json!("after"),
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "still here"}, "extra": [1]}),
        &caps_none(),
    );
    body["extraTopLevel"] = json!({});
    let ok = probe
        .post(&std_headers("tools/call", Some("echo")), enc(&body))
        .await?;
    assert_eq!(ok.status, 200, "{}", ok.describe());
    assert_eq!(ok.body["id"], "after", "{}", ok.describe());
    assert!(
        ok.body["result"].to_string().contains("still here"),
        "{}",
        ok.describe()
    );
    assert!(
        failures.is_empty(),
        "{} of {} bad-input cases got the wrong answer:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    ctx.cleanup().await;
    Ok(())
}
