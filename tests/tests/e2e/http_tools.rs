//! Tools declared as `[[http]]` entries in a catalog file (`MCPT_TOOLS_FILE`, issue 7): the
//! arguments sent as JSON to a fixed URL, a `2xx` answer as the result, a `202` job polled
//! with its progress as status messages, `DELETE` on the job when the task is cancelled,
//! and a catalog with mistakes refused at start.
//!
//! Each test starts its own job service (a small hyper server in this process), Redis,
//! gateway and worker.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use mcp_tasks_tests::{CatalogStack, Client, assert_catalog_refused, poll_until};
use serde_json::{Value, json};

const WITHIN: Duration = Duration::from_secs(15);

/// The worker's environment variable whose value the catalog sends as `Authorization`.
const TOKEN_VAR: &str = "MCPT_E2E_JOB_TOKEN";
const TOKEN: &str = "Bearer e2e-secret";

/// A Redis, a gateway and a worker (with [`TOKEN_VAR`] set) offering the catalog `text`,
/// once `wanted` is listed.
async fn start(text: &str, wanted: &str) -> Result<CatalogStack> {
    CatalogStack::start(text, wanted, &[(TOKEN_VAR, TOKEN.to_owned())], &[]).await
}

/// Run `tool` as a task to completion and return its `CallToolResult`.
async fn run(client: &Client, tool: &str, args: Value) -> Result<Value> {
    let id = client.start_task(tool, args).await?;
    let t = client.wait_status(&id, "completed", WITHIN).await?;
    Ok(t["result"].clone())
}

/// Wait until task `id` shows the status message `want`.
async fn wait_message(client: &Client, id: &str, want: &str) -> Result<()> {
    poll_until(WITHIN, || async {
        let t = client.get(id).await.ok()?;
        (t["statusMessage"] == want).then_some(())
    })
    .await
    .with_context(|| format!("task {id} never showed the status message {want:?}"))
}

/// One request the job service received.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    authorization: Option<String>,
    idempotency_key: Option<String>,
    body: String,
}

#[derive(Default)]
struct State {
    seen: Vec<Seen>,
    /// Where `/jobs/1` is: 1 to 3 running (`step N/3`), then completed.
    step: u32,
}

/// The job service the tools call, on `127.0.0.1:0`:
///
/// | request | answer |
/// | --- | --- |
/// | `POST /echo` | `200` JSON `{"got": BODY, "authorization": HEADER}` |
/// | `GET /plain` | `200` text |
/// | `POST /broken` | `500` text `database on fire` |
/// | `POST /jobs` | `202`, `Location: jobs/1` (relative) |
/// | `GET /jobs/1` | running `step N/3` (N set by the test), then completed `{"pixels": 42}` |
/// | `POST /doomed` | `202`, JSON `{"statusUrl": "/doomed/1"}`; that one reports failed |
/// | `POST /redirecting` | `202` to `/redirecting/1`, which answers `303` to `/results/1` |
/// | `POST /forever` | `202` to `/forever/1`, running for ever; `DELETE` it: `204` |
struct JobServer {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for JobServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl JobServer {
    async fn start() -> Result<JobServer> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State {
            step: 1,
            ..State::default()
        }));
        let shared = state.clone();
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = shared.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| answer(state.clone(), req));
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(JobServer {
            addr,
            state,
            accept,
        })
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn set_step(&self, step: u32) {
        self.state.lock().expect("state").step = step;
    }

    fn seen(&self) -> Vec<Seen> {
        self.state.lock().expect("state").seen.clone()
    }
}

async fn answer(
    state: Arc<Mutex<State>>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let seen = Seen {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        authorization: header("authorization"),
        idempotency_key: header("idempotency-key"),
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    let step = {
        let mut state = state.lock().expect("state");
        state.seen.push(seen.clone());
        state.step
    };
    let reply = |status: u16, kind: &str, body: String, location: Option<&str>| {
        let mut r = Response::builder()
            .status(status)
            .header("content-type", kind);
        if let Some(l) = location {
            r = r.header("location", l);
        }
        Ok(r.body(Full::new(Bytes::from(body))).expect("response"))
    };
    let json = |status: u16, v: Value| reply(status, "application/json", v.to_string(), None);
    let accepted = |location: &str| {
        reply(
            202,
            "application/json",
            json!({"status": "pending"}).to_string(),
            Some(location),
        )
    };
    match (seen.method.as_str(), seen.path.as_str()) {
        ("POST", "/echo") => {
            let got: Value = serde_json::from_str(&seen.body).unwrap_or(Value::Null);
            json(
                200,
                json!({"got": got, "authorization": seen.authorization}),
            )
        }
        ("GET", "/plain") => reply(200, "text/plain", "plain text answer".to_owned(), None),
        ("POST", "/broken") => reply(500, "text/plain", "database on fire".to_owned(), None),
        ("POST", "/jobs") => accepted("jobs/1"),
        ("GET", "/jobs/1") if step <= 3 => json(
            200,
            json!({"status": "running", "progress": format!("step {step}/3")}),
        ),
        ("GET", "/jobs/1") => json(
            200,
            json!({"status": "completed", "result": {"pixels": 42}}),
        ),
        ("POST", "/doomed") => json(202, json!({"statusUrl": "/doomed/1"})),
        ("GET", "/doomed/1") => json(200, json!({"status": "failed", "error": "out of memory"})),
        ("POST", "/redirecting") => accepted("/redirecting/1"),
        ("GET", "/redirecting/1") => reply(303, "text/plain", String::new(), Some("/results/1")),
        ("GET", "/results/1") => json(200, json!({"answer": 42})),
        ("POST", "/forever") => accepted("/forever/1"),
        ("GET", "/forever/1") => json(200, json!({"status": "running", "message": "waiting"})),
        ("DELETE", "/forever/1") => reply(204, "text/plain", String::new(), None),
        _ => reply(404, "text/plain", "no such thing".to_owned(), None),
    }
}

/// Issue 7: a `2xx` answer is the result (JSON as `structuredContent` and text, other
/// bodies as text); the arguments arrive as the JSON body with the header taken from the
/// worker's environment and the task id as `Idempotency-Key`; a `500` and an unreachable
/// URL complete the task with `isError: true`.
#[tokio::test(flavor = "multi_thread")]
async fn immediate_answers_become_the_result() -> Result<()> {
    let server = JobServer::start().await?;
    let s = start(
        &format!(
            r#"
            [[http]]
            name = "echo_http"
            url = "{echo}"
            headers = {{ Authorization = "{TOKEN_VAR}" }}

            [[http]]
            name = "plain"
            url = "{plain}"
            method = "GET"

            [[http]]
            name = "broken"
            url = "{broken}"

            [[http]]
            name = "nowhere"
            url = "http://127.0.0.1:1/run"
            "#,
            echo = server.url("/echo"),
            plain = server.url("/plain"),
            broken = server.url("/broken"),
        ),
        "nowhere",
    )
    .await?;

    let args = json!({"text": "hello", "n": 3, "nested": {"a": [1, 2]}});
    let id = s.client.start_task("echo_http", args.clone()).await?;
    let r = s.client.wait_status(&id, "completed", WITHIN).await?["result"].clone();
    assert_eq!(r["structuredContent"]["got"], args, "{r}");
    assert_eq!(r["structuredContent"]["authorization"], TOKEN, "{r}");
    let text: Value = serde_json::from_str(r["content"][0]["text"].as_str().unwrap_or(""))?;
    assert_eq!(text, r["structuredContent"], "{r}");
    assert!(r.get("isError").is_none_or(|e| e == false), "{r}");
    let echo = server.seen().into_iter().find(|s| s.path == "/echo");
    assert_eq!(
        echo.and_then(|s| s.idempotency_key).as_deref(),
        Some(id.as_str())
    );

    let r = run(&s.client, "plain", json!({})).await?;
    assert_eq!(r["content"][0]["text"], "plain text answer", "{r}");
    assert!(r.get("structuredContent").is_none(), "{r}");
    let plain = server.seen().into_iter().find(|s| s.path == "/plain");
    assert_eq!(
        plain.map(|s| s.body).as_deref(),
        Some(""),
        "GET has no body"
    );

    let r = run(&s.client, "broken", json!({})).await?;
    assert_eq!(r["isError"], true, "{r}");
    let text = r["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("500 Internal Server Error") && text.contains("database on fire"),
        "{r}"
    );

    let r = run(&s.client, "nowhere", json!({})).await?;
    assert_eq!(r["isError"], true, "{r}");
    let text = r["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.starts_with("cannot reach http://127.0.0.1:1"), "{r}");
    Ok(())
}

/// Issue 7: a `202` job (relative `Location`) is polled; each new `progress` becomes the
/// task's status message, and the job's `result` the task's result. The job service moves
/// on only once the client has seen each step, so no step can be missed.
#[tokio::test(flavor = "multi_thread")]
async fn accepted_job_reports_progress_until_it_completes() -> Result<()> {
    let server = JobServer::start().await?;
    let s = start(
        &format!(
            r#"
            [[http]]
            name = "resize"
            url = "{}"
            headers = {{ Authorization = "{TOKEN_VAR}" }}
            poll_interval = "100ms"
            "#,
            server.url("/jobs"),
        ),
        "resize",
    )
    .await?;
    let id = s.client.start_task("resize", json!({"width": 10})).await?;
    for step in 1..=3 {
        server.set_step(step);
        wait_message(&s.client, &id, &format!("step {step}/3")).await?;
        assert_eq!(s.client.get(&id).await?["status"], "working");
    }
    server.set_step(4);
    let t = s.client.wait_status(&id, "completed", WITHIN).await?;
    assert_eq!(
        t["result"]["structuredContent"],
        json!({"pixels": 42}),
        "{t}"
    );
    assert!(t["result"].get("isError").is_none_or(|e| e == false), "{t}");

    let seen = server.seen();
    let polls: Vec<&Seen> = seen.iter().filter(|s| s.path == "/jobs/1").collect();
    assert!(polls.len() >= 4, "{seen:?}");
    assert!(
        polls
            .iter()
            .all(|p| p.method == "GET" && p.authorization.as_deref() == Some(TOKEN)),
        "{polls:?}"
    );
    Ok(())
}

/// Issue 7: a job whose status reports `failed` completes the task with `isError: true`
/// and the job's error; a `statusUrl` body field works without `Location`; a `303` from
/// the status URL leads to the result.
#[tokio::test(flavor = "multi_thread")]
async fn job_failures_and_redirects_to_the_result() -> Result<()> {
    let server = JobServer::start().await?;
    let s = start(
        &format!(
            r#"
            [[http]]
            name = "doomed"
            url = "{}"
            poll_interval = "100ms"

            [[http]]
            name = "redirecting"
            url = "{}"
            poll_interval = "100ms"
            "#,
            server.url("/doomed"),
            server.url("/redirecting"),
        ),
        "redirecting",
    )
    .await?;
    let r = run(&s.client, "doomed", json!({})).await?;
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(
        r["content"][0]["text"], "the job failed: out of memory",
        "{r}"
    );

    let r = run(&s.client, "redirecting", json!({})).await?;
    assert_eq!(r["structuredContent"], json!({"answer": 42}), "{r}");
    Ok(())
}

/// Issue 7: cancelling the task of a running job (`cancel = true`) sends `DELETE` to the
/// job's status URL, with the entry's headers; the task ends `cancelled`.
#[tokio::test(flavor = "multi_thread")]
async fn cancelled_task_deletes_the_remote_job() -> Result<()> {
    let server = JobServer::start().await?;
    let s = start(
        &format!(
            r#"
            [[http]]
            name = "forever"
            url = "{}"
            headers = {{ Authorization = "{TOKEN_VAR}" }}
            cancel = true
            poll_interval = "100ms"
            "#,
            server.url("/forever"),
        ),
        "forever",
    )
    .await?;
    let id = s.client.start_task("forever", json!({})).await?;
    wait_message(&s.client, &id, "waiting").await?;
    let r = s.client.cancel(&id).await?;
    assert!(r.body.get("error").is_none(), "{}", r.body);
    s.client.wait_status(&id, "cancelled", WITHIN).await?;
    let delete = poll_until(WITHIN, || async {
        server
            .seen()
            .into_iter()
            .find(|s| s.method == "DELETE" && s.path == "/forever/1")
    })
    .await
    .context("the job service never got DELETE /forever/1")?;
    assert_eq!(delete.authorization.as_deref(), Some(TOKEN));
    Ok(())
}

/// Issue 7: a job running past the entry's `timeout` fails the task with -32603 "http job
/// timed out after 1s", and (`cancel = true`) is deleted at the service.
#[tokio::test(flavor = "multi_thread")]
async fn http_job_past_its_timeout_fails_the_task() -> Result<()> {
    let server = JobServer::start().await?;
    let s = start(
        &format!(
            r#"
            [[http]]
            name = "forever"
            url = "{}"
            cancel = true
            timeout = "1s"
            poll_interval = "100ms"
            "#,
            server.url("/forever"),
        ),
        "forever",
    )
    .await?;
    let id = s.client.start_task("forever", json!({})).await?;
    let t = s.client.wait_status(&id, "failed", WITHIN).await?;
    assert_eq!(t["error"]["code"], -32603, "{t}");
    assert_eq!(t["error"]["message"], "http job timed out after 1s", "{t}");
    poll_until(WITHIN, || async {
        server
            .seen()
            .iter()
            .any(|s| s.method == "DELETE" && s.path == "/forever/1")
            .then_some(())
    })
    .await
    .context("the timed-out job was never deleted")?;
    Ok(())
}

/// Issue 7: an `[[http]]` entry with a mistake stops the worker at start: exit code 64 and
/// one line naming the file, the entry and the field.
#[tokio::test(flavor = "multi_thread")]
async fn http_catalog_with_mistakes_is_refused_at_start() -> Result<()> {
    let ok = "[[http]]\nname = \"fine\"\nurl = \"http://127.0.0.1:9/run\"\n";
    let cases = [
        (
            "[[http]]\nname = \"a\"\nurl = \"ftp://files.test/x\"\n".to_owned(),
            "[[http]] #1 (\"a\"): field url: \"ftp://files.test/x\": expected an http:// or https:// URL",
        ),
        (
            format!(
                "{ok}[[http]]\nname = \"b\"\nurl = \"http://127.0.0.1:9/\"\nheaders = {{ Authorization = \"MCPT_E2E_UNSET_TOKEN\" }}\n"
            ),
            "[[http]] #2 (\"b\"): field headers: \"Authorization\": environment variable MCPT_E2E_UNSET_TOKEN is not set",
        ),
        (
            format!("{ok}retries = 3\n"),
            "[[http]] #1 (\"fine\"): field retries: unknown field (expected one of name,",
        ),
    ];
    for (text, want) in cases {
        assert_catalog_refused(&text, want)?;
    }
    Ok(())
}
