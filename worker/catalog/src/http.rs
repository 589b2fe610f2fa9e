//! One `[[http]]` tool: check its entry, send the call's arguments to a fixed URL, and
//! follow the job the service starts until it reports an end.
//!
//! # The exchange
//!
//! 1. `METHOD url` with the arguments as the JSON body (`GET`: no body), the entry's
//!    `headers`, and `Idempotency-Key: TASK_ID` (a job runs again after a worker is lost;
//!    the key lets the service recognise the repeat).
//! 2. A `202 Accepted` starts a job. Its status URL is the `Location` header, else the
//!    `statusUrl`, `status_url` or `href` field of a JSON object body; relative URLs are
//!    resolved against the request URL. Any other 2xx answer is the result; any other
//!    answer is a result with `isError: true` naming the status, with a body excerpt.
//! 3. The status URL is read with `GET` every `poll_interval` (the tool's, else
//!    `MCPT_POLL_INTERVAL`) until it answers one of:
//!    - a `2xx` JSON object with a string `status`: `pending`, `queued`, `running`,
//!      `in_progress` or `working` (still running); `completed`, `succeeded` or `done`
//!      (`result` is the result, or the whole object when it has none); `failed` or
//!      `error` (`isError: true` with `error`, or `message`); `cancelled` or `canceled`.
//!      Any other `status` ends the call with `isError: true`.
//!    - `202` (still running), optionally with such a JSON body.
//!    - a redirect (`303`, also `301`, `302`, `307`, `308`) with `Location`: that URL is
//!      read at once, under the same rules (so `303` to the result works).
//!    - any other `2xx`: the result. Anything else: `isError: true`.
//!
//!    The `progress` (text, or a number shown as written) and `message` fields of a
//!    running job become the task's status message (`PROGRESS: MESSAGE`), when they change.
//!    A connection error, no answer, `429`, `502`, `503` or `504` is retried with backoff
//!    (the interval doubled each time, at most 10 s), 5 times in a row at most.
//!
//! A result is a JSON object body as `structuredContent` plus a text block of it; any
//! other body is one text block. Each body is read up to `max_output` bytes: a larger
//! result is a tool error. Each request has 60 s (`client.rs`); `timeout` bounds the whole
//! call and ends the task `failed` (-32603 `http job timed out after 30s`).
//!
//! # Cancellation
//!
//! The runner drops the call on `tasks/cancel` (also on timeout, expiry or shutdown).
//! With `cancel = true`, a job that had not ended then gets a `DELETE` on its status URL,
//! from a spawned task (a dropped future cannot send it) given 5 s.
//!
//! The entry's headers go only to its URL's origin (scheme, host and port): a status URL
//! elsewhere gets none of them, as a browser drops credentials on a cross-origin redirect.

mod client;
mod url;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, StatusCode, Uri};
use mcp_tasks_shared::config::WorkerConfig;
use serde::Deserialize;
use serde_json::Value;

use self::client::{NoAnswer, Reply, Service};
use self::url::{check_url, resolve};
use super::{FieldError, STATUS_CHARS, bad, fields, tool_spec};
use mcp_tasks_worker::{CallToolResult, Retry, TaskContext, Tool, ToolError, ToolFuture, ToolSpec};

/// Longest wait for the answer to the `DELETE` that cancels a job.
const CANCEL_TIMEOUT: Duration = Duration::from_secs(5);
/// Failed reads of a status URL in a row before the call gives up.
const POLL_RETRIES: u32 = 5;
/// Longest pause between two failed reads of a status URL.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Redirects followed in a row.
const MAX_REDIRECTS: u32 = 5;
/// Headers the worker writes itself (or that would break the framing).
const RESERVED_HEADERS: [&str; 7] = [
    "host",
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
    "upgrade",
    "idempotency-key",
];

/// A checked `[[http]]` entry, minus its [`ToolSpec`].
pub(super) struct Http {
    /// The URL, the headers and the client.
    service: Service,
    method: Method,
    cancel: bool,
    poll_interval: Duration,
    /// The limit and how the catalog wrote it (for the error message).
    timeout: Option<(Duration, String)>,
}

/// A catalog tool that calls an [`Http`] service.
pub(super) struct HttpTool {
    pub(super) spec: ToolSpec,
    http: Arc<Http>,
}

impl Tool for HttpTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn call(&self, ctx: TaskContext, args: Value) -> ToolFuture {
        Box::pin(self.http.clone().run(ctx, args))
    }
}

/// The fields only `[[http]]` takes.
#[derive(Deserialize)]
struct HttpFields {
    url: Option<String>,
    #[serde(default = "post", deserialize_with = "method")]
    method: Method,
    headers: Option<toml::Value>,
    #[serde(default, deserialize_with = "fields::flag")]
    cancel: bool,
    #[serde(
        default = "fields::default_max_output",
        deserialize_with = "fields::max_output"
    )]
    max_output: usize,
}

fn post() -> Method {
    Method::POST
}

fn method<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Method, D::Error> {
    fields::checked(d, |v| match v.as_str() {
        Some("POST") => Ok(Method::POST),
        Some("GET") => Ok(Method::GET),
        Some("PUT") => Ok(Method::PUT),
        _ => Err(format!(
            "{v}: expected \"POST\" (the default), \"GET\" or \"PUT\""
        )),
    })
}

/// One `[[http]]` entry, checked.
pub(super) fn entry(entry: &toml::Table, config: &WorkerConfig) -> Result<HttpTool, FieldError> {
    let (common, own) = fields::read::<HttpFields>(entry, &[])?;
    let timeout = common.timeout.clone().map(|l| (l.value, l.written));
    let spec = tool_spec(common, config)?;
    let Some(url) = own.url else {
        return Err(bad(
            "url",
            "missing (like \"https://jobs.example.com/v1/resize\")",
        ));
    };
    let url = check_url(&url).map_err(|why| bad("url", format!("{url:?}: {why}")))?;
    let headers = match &own.headers {
        None => HeaderMap::new(),
        Some(v) => headers_from_env(v).map_err(|why| bad("headers", why))?,
    };
    let service = Service::new(url, headers, own.max_output).map_err(|why| bad("url", why))?;
    let poll_interval = spec.poll_interval.unwrap_or(config.tasks.poll_interval);
    Ok(HttpTool {
        spec,
        http: Arc::new(Http {
            service,
            method: own.method,
            cancel: own.cancel,
            poll_interval,
            timeout,
        }),
    })
}

/// `{ Header-Name = "VARIABLE" }`: each header with the value of its variable now.
fn headers_from_env(v: &toml::Value) -> Result<HeaderMap, String> {
    let Some(table) = v.as_table() else {
        return Err(
            "expected a table like { Authorization = \"API_TOKEN\" } (header = variable)"
                .to_owned(),
        );
    };
    let mut headers = HeaderMap::new();
    for (name, var) in table {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("{name:?} is not a valid header name"))?;
        if RESERVED_HEADERS.contains(&header.as_str()) {
            return Err(format!("{name:?} is set by the worker"));
        }
        let Some(var) = var
            .as_str()
            .filter(|s| !s.is_empty() && !s.contains(['=', '\0']))
        else {
            return Err(format!(
                "{name:?}: expected the name of an environment variable"
            ));
        };
        let value = match std::env::var(var) {
            Ok(value) if !value.is_empty() => value,
            Ok(_) => return Err(format!("{name:?}: environment variable {var} is empty")),
            Err(std::env::VarError::NotPresent) => {
                return Err(format!("{name:?}: environment variable {var} is not set"));
            }
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(format!("{name:?}: environment variable {var} is not UTF-8"));
            }
        };
        let mut value = HeaderValue::from_str(&value).map_err(|_| {
            format!("{name:?}: environment variable {var} is not a valid header value")
        })?;
        value.set_sensitive(true);
        headers.append(header, value);
    }
    Ok(headers)
}

/// What one read of a status URL says.
enum Poll {
    /// Still running, with this status message (if any).
    Running(Option<String>),
    /// Read this URL instead, now.
    Moved(Uri),
    /// Ended: the call's result.
    Done(CallToolResult),
}

/// The remote job while the call follows it. Dropped before [`Remote::done`] is set (the
/// call was cancelled, timed out or gave up), it asks the service to cancel the job when
/// the entry says `cancel = true`.
struct Remote {
    http: Arc<Http>,
    url: Uri,
    task_id: String,
    done: bool,
}

impl Drop for Remote {
    fn drop(&mut self) {
        if self.done || !self.http.cancel {
            return;
        }
        // Spawned: the dropped call cannot await anything any more.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let (http, url) = (self.http.clone(), self.url.clone());
            let task_id = std::mem::take(&mut self.task_id);
            rt.spawn(async move { http.delete(&url, &task_id).await });
        }
    }
}

impl Http {
    async fn run(
        self: Arc<Self>,
        ctx: TaskContext,
        args: Value,
    ) -> Result<CallToolResult, ToolError> {
        let Some((limit, written)) = &self.timeout else {
            return self.clone().call(&ctx, args).await;
        };
        // On timeout the call is dropped here, and with it its [`Remote`].
        match tokio::time::timeout(*limit, self.clone().call(&ctx, args)).await {
            Ok(result) => result,
            Err(_) => Err(ToolError::internal(format!(
                "http job timed out after {written}"
            ))),
        }
    }

    async fn call(
        self: Arc<Self>,
        ctx: &TaskContext,
        args: Value,
    ) -> Result<CallToolResult, ToolError> {
        let body = (self.method != Method::GET).then(|| Bytes::from(args.to_string()));
        let first = self
            .service
            .send(
                self.method.clone(),
                &self.service.url,
                body,
                Some(ctx.task_id()),
            )
            .await;
        // Retryable under the entry's `retry` (the runner ends the task with `last` when no
        // attempt is left, as without one): no connection, or a busy or failing gateway.
        let reply = match first {
            Ok(reply) => reply,
            Err(e) => {
                let text = e.describe(&self.service.url);
                if !matches!(e, NoAnswer::Connect(_)) {
                    // It may have been received: not sent twice.
                    return Ok(CallToolResult::error_text(text));
                }
                return Err(ToolError::Retryable(Box::new(Retry {
                    last: Some(CallToolResult::error_text(text.clone())),
                    reason: text,
                    after: None,
                })));
            }
        };
        if transient(reply.status) {
            let last = self.result(&reply, "the service");
            return Err(ToolError::Retryable(Box::new(Retry {
                reason: format!("the service answered {}", reply.status),
                after: reply.retry_after(),
                last: Some(last),
            })));
        }
        if reply.status != StatusCode::ACCEPTED {
            return Ok(self.result(&reply, "the service"));
        }
        let given = reply.location().map(str::to_owned).or_else(|| {
            let body = reply.json()?;
            ["statusUrl", "status_url", "href"]
                .iter()
                .find_map(|f| body.get(f)?.as_str().map(str::to_owned))
        });
        let Some(given) = given else {
            return Ok(CallToolResult::error_text(
                "the service answered 202 Accepted without a Location header or a statusUrl field",
            ));
        };
        let url = match resolve(&self.service.url, &given) {
            Ok(url) => url,
            Err(why) => {
                return Ok(CallToolResult::error_text(format!(
                    "the service answered 202 Accepted with an unusable status URL: {why}"
                )));
            }
        };
        let mut remote = Remote {
            http: self.clone(),
            url,
            task_id: ctx.task_id().to_owned(),
            done: false,
        };
        let mut shown = String::new();
        show(ctx, &mut shown, reply.json().as_ref().and_then(progress)).await?;
        self.follow(ctx, &mut remote, &mut shown).await
    }

    /// Read the job's status URL until it reports an end (or keeps failing).
    async fn follow(
        &self,
        ctx: &TaskContext,
        remote: &mut Remote,
        shown: &mut String,
    ) -> Result<CallToolResult, ToolError> {
        let mut url = remote.url.clone();
        let (mut wait, mut failures, mut redirects) = (self.poll_interval, 0, 0);
        loop {
            tokio::time::sleep(wait).await;
            wait = self.poll_interval;
            let why = match self.service.send(Method::GET, &url, None, None).await {
                Ok(reply) if !transient(reply.status) => {
                    failures = 0;
                    match self.poll(&reply, &url) {
                        Poll::Running(status) => {
                            redirects = 0;
                            show(ctx, shown, status).await?;
                        }
                        Poll::Moved(next) if redirects < MAX_REDIRECTS => {
                            redirects += 1;
                            url = next;
                            wait = Duration::ZERO;
                        }
                        Poll::Moved(_) => {
                            remote.done = true;
                            return Ok(CallToolResult::error_text(format!(
                                "the job's status URL redirected more than {MAX_REDIRECTS} times in a row"
                            )));
                        }
                        Poll::Done(result) => {
                            remote.done = true;
                            return Ok(result);
                        }
                    }
                    continue;
                }
                Ok(reply) => format!("it answered {}{}", reply.status, reply.excerpt()),
                Err(e) => e.describe(&url),
            };
            failures += 1;
            if failures > POLL_RETRIES {
                return Ok(CallToolResult::error_text(format!(
                    "the job's status could not be read {failures} times in a row; last: {why}"
                )));
            }
            tracing::warn!(task.id = %ctx.task_id(), "cannot read an http job's status ({why}); retrying");
            wait = backoff(self.poll_interval, failures);
        }
    }

    /// What one (non-transient) answer of a status URL says.
    fn poll(&self, reply: &Reply, url: &Uri) -> Poll {
        let status = reply.status;
        if status == StatusCode::ACCEPTED {
            return Poll::Running(reply.json().as_ref().and_then(progress));
        }
        if status.is_redirection() && status != StatusCode::NOT_MODIFIED {
            return match reply.location().map(|l| resolve(url, l)) {
                Some(Ok(next)) => Poll::Moved(next),
                Some(Err(why)) => Poll::Done(CallToolResult::error_text(format!(
                    "the job's status URL redirected to an unusable URL: {why}"
                ))),
                None => Poll::Done(CallToolResult::error_text(format!(
                    "the job's status URL answered {status} without a Location header"
                ))),
            };
        }
        if !status.is_success() || reply.over {
            return Poll::Done(self.result(reply, "the job's status URL"));
        }
        let Some(doc) = reply
            .json()
            .filter(|d| d.get("status").is_some_and(Value::is_string))
        else {
            return Poll::Done(self.result(reply, "the job's status URL"));
        };
        let text = |field: &str| {
            let v = doc.get(field)?;
            v.as_str()
                .or_else(|| v.get("message")?.as_str())
                .map(str::to_owned)
        };
        match doc["status"].as_str().unwrap_or_default() {
            "pending" | "queued" | "running" | "in_progress" | "working" => {
                Poll::Running(progress(&doc))
            }
            "completed" | "succeeded" | "done" => Poll::Done(json_result(
                doc.get("result").cloned().unwrap_or_else(|| doc.clone()),
            )),
            "failed" | "error" => {
                let why = text("error")
                    .or_else(|| text("message"))
                    .unwrap_or_else(|| "no reason given".to_owned());
                let mut r = CallToolResult::error_text(format!("the job failed: {why}"));
                r.structured_content = Some(doc);
                Poll::Done(r)
            }
            "cancelled" | "canceled" => Poll::Done(CallToolResult::error_text(
                "the job was cancelled by the service",
            )),
            other => Poll::Done(CallToolResult::error_text(format!(
                "the job's status URL reported the unknown status {other:?} \
                 (expected pending, queued, running, in_progress, working, completed, \
                 succeeded, done, failed, error, cancelled)"
            ))),
        }
    }

    /// An answer that ends the call: a 2xx is the result, anything else a tool error.
    fn result(&self, reply: &Reply, who: &str) -> CallToolResult {
        if !reply.status.is_success() {
            return CallToolResult::error_text(format!(
                "{who} answered {}{}",
                reply.status,
                reply.excerpt()
            ));
        }
        if reply.over {
            return CallToolResult::error_text(format!(
                "{who} answered with more than {} bytes (max_output)",
                self.service.max_output
            ));
        }
        match reply.json() {
            Some(v) => json_result(v),
            None => CallToolResult::text(String::from_utf8_lossy(&reply.body)),
        }
    }

    /// Ask the service to cancel the job at `url` (best effort, logged).
    async fn delete(&self, url: &Uri, task_id: &str) {
        let answer = tokio::time::timeout(
            CANCEL_TIMEOUT,
            self.service.send(Method::DELETE, url, None, None),
        );
        let problem = match answer.await {
            Ok(Ok(reply)) if reply.status.is_success() || reply.status == StatusCode::NOT_FOUND => {
                tracing::debug!(task.id = %task_id, "http job {task_id} cancelled at the service");
                return;
            }
            Ok(Ok(reply)) => format!("it answered {}", reply.status),
            Ok(Err(e)) => e.describe(url),
            Err(_) => format!("no answer within {} s", CANCEL_TIMEOUT.as_secs()),
        };
        tracing::warn!(task.id = %task_id, "cannot cancel http job {task_id} at the service: {problem}");
    }
}

/// Set the task's status message when `text` is new.
async fn show(
    ctx: &TaskContext,
    shown: &mut String,
    text: Option<String>,
) -> Result<(), ToolError> {
    if let Some(text) = text.filter(|t| !t.is_empty() && t != shown) {
        ctx.set_status(&text).await?;
        *shown = text;
    }
    Ok(())
}

/// The status message of a running job's JSON: `PROGRESS: MESSAGE`, either alone, or none.
fn progress(doc: &Value) -> Option<String> {
    let progress = match doc.get("progress") {
        Some(Value::String(s)) => Some(s.trim().to_owned()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    }
    .filter(|s| !s.is_empty());
    let message = doc
        .get("message")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty());
    let text = match (progress, message) {
        (Some(p), Some(m)) => format!("{p}: {m}"),
        (Some(p), None) => p,
        (None, Some(m)) => m.to_owned(),
        (None, None) => return None,
    };
    Some(text.chars().take(STATUS_CHARS).collect())
}

/// A JSON result: an object is `structuredContent` (the spec wants an object there) and a
/// text block; a string is its text; anything else its JSON text.
fn json_result(value: Value) -> CallToolResult {
    match value {
        Value::Object(_) => {
            let mut r = CallToolResult::text(value.to_string());
            r.structured_content = Some(value);
            r
        }
        Value::String(s) => CallToolResult::text(s),
        other => CallToolResult::text(other.to_string()),
    }
}

/// Worth another try: the service is (perhaps briefly) overloaded or unreachable.
fn transient(status: StatusCode) -> bool {
    matches!(status.as_u16(), 429 | 502 | 503 | 504)
}

/// Pause after the `failures`-th failed read in a row: the interval, doubled each time.
fn backoff(interval: Duration, failures: u32) -> Duration {
    let first = interval.max(Duration::from_millis(250));
    first.saturating_mul(1 << failures.min(8)).min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn progress_and_message_make_the_status_message() {
        let p = |v: Value| progress(&v);
        assert_eq!(
            p(serde_json::json!({"progress": "step 1/3"})).as_deref(),
            Some("step 1/3")
        );
        assert_eq!(
            p(serde_json::json!({"progress": 40})).as_deref(),
            Some("40")
        );
        assert_eq!(
            p(serde_json::json!({"progress": "2/3", "message": "resizing"})).as_deref(),
            Some("2/3: resizing")
        );
        assert_eq!(
            p(serde_json::json!({"message": " waiting "})).as_deref(),
            Some("waiting")
        );
        assert_eq!(p(serde_json::json!({"status": "running"})), None);
        let long = "x".repeat(1000);
        assert_eq!(
            p(serde_json::json!({ "message": long })).map(|s| s.chars().count()),
            Some(STATUS_CHARS)
        );
    }

    #[test]
    fn backoff_doubles_up_to_a_bound() {
        let second = Duration::from_secs(1);
        assert_eq!(backoff(second, 1), Duration::from_secs(2));
        assert_eq!(backoff(second, 2), Duration::from_secs(4));
        assert_eq!(backoff(second, 5), MAX_BACKOFF);
        assert_eq!(
            backoff(Duration::from_millis(10), 1),
            Duration::from_millis(500)
        );
    }

    fn config() -> WorkerConfig {
        let env: HashMap<&str, &str> = HashMap::from([("MCPT_QUEUES", "default")]);
        WorkerConfig::from_source(&env).expect("config")
    }

    /// One entry's fields (the lines under `[[http]]`), checked. Their place in the file
    /// and the one-line format are `catalog.rs`'s, tested there.
    fn check(fields: &str) -> Result<HttpTool, String> {
        let table: toml::Table = fields.parse().expect("TOML");
        entry(&table, &config()).map_err(|e| format!("field {}: {}", e.field, e.problem))
    }

    #[test]
    fn a_full_entry_is_accepted() {
        // PATH is set wherever tests run; its value is only read.
        let tool = check(
            r#"
            name = "resize"
            url = "https://jobs.example.com/v1/resize?fast=1"
            method = "PUT"
            headers = { Authorization = "PATH", "X-Api-Key" = "PATH" }
            cancel = true
            max_output = 4096
            timeout = "10m"
            poll_interval = "2s"
            "#,
        )
        .expect("valid");
        assert_eq!(tool.spec.tool.name, "resize");
        let http = &tool.http;
        assert_eq!(http.method, Method::PUT);
        assert!(http.cancel);
        assert_eq!(http.poll_interval, Duration::from_secs(2));
        assert_eq!(http.service.max_output, 4096);
        assert_eq!(
            http.timeout.as_ref().map(|t| t.0),
            Some(Duration::from_secs(600))
        );

        let tool = check("name = \"g\"\nurl = \"http://127.0.0.1:1/\"\n").expect("valid");
        assert_eq!(tool.http.method, Method::POST);
        assert!(!tool.http.cancel);
        assert_eq!(tool.http.poll_interval, config().tasks.poll_interval);
        assert_eq!(
            tool.http.service.max_output,
            super::super::DEFAULT_MAX_OUTPUT
        );
    }

    #[test]
    fn each_mistake_names_the_field() {
        let ok = "name = \"a\"\nurl = \"http://svc.test/run\"\n";
        let cases = [
            ("name = \"a\"\n".to_owned(), "field url: missing"),
            (
                "name = \"a\"\nurl = \"ftp://svc.test/x\"\n".to_owned(),
                "field url: \"ftp://svc.test/x\": expected an http:// or https:// URL",
            ),
            (
                "name = \"a\"\nurl = \"/just/a/path\"\n".to_owned(),
                "field url: \"/just/a/path\": expected an http:// or https:// URL",
            ),
            (
                "name = \"a\"\nurl = \"http://svc.test/{id}\"\n".to_owned(),
                "field url: \"http://svc.test/{id}\": placeholders are not supported",
            ),
            (
                "name = \"a\"\nurl = \"http://u:p@svc.test/\"\n".to_owned(),
                "field url: \"http://u:p@svc.test/\": credentials in the URL are not sent",
            ),
            (
                "name = \"a\"\nurl = \"http://svc .test/\"\n".to_owned(),
                "field url: \"http://svc .test/\": not a URL",
            ),
            (
                format!("{ok}method = \"DELETE\"\n"),
                "field method: \"DELETE\": expected \"POST\" (the default), \"GET\" or \"PUT\"",
            ),
            (
                format!("{ok}headers = {{ Authorization = \"MCPT_SURELY_UNSET_VARIABLE\" }}\n"),
                "field headers: \"Authorization\": environment variable MCPT_SURELY_UNSET_VARIABLE is not set",
            ),
            (
                format!("{ok}headers = {{ \"Bad Name\" = \"PATH\" }}\n"),
                "field headers: \"Bad Name\" is not a valid header name",
            ),
            (
                format!("{ok}headers = {{ Host = \"PATH\" }}\n"),
                "field headers: \"Host\" is set by the worker",
            ),
            (
                format!("{ok}headers = {{ X-Key = 3 }}\n"),
                "field headers: \"X-Key\": expected the name of an environment variable",
            ),
            (
                format!("{ok}headers = [\"PATH\"]\n"),
                "field headers: expected a table like { Authorization = \"API_TOKEN\" }",
            ),
            (
                format!("{ok}cancel = \"yes\"\n"),
                "field cancel: expected true or false",
            ),
            (
                format!("{ok}argv = [\"x\"]\n"),
                "field argv: unknown field (expected one of name,",
            ),
            (
                format!("{ok}timeout = \"soon\"\n"),
                "field timeout: \"soon\": expected a duration",
            ),
            (
                format!("{ok}max_output = 0\n"),
                "field max_output: expected a positive number",
            ),
        ];
        for (fields, want) in cases {
            let got = match check(&fields) {
                Ok(_) => panic!("accepted: {fields}"),
                Err(e) => e,
            };
            assert!(
                got.starts_with(want),
                "for {fields:?}\n got: {got}\nwant: {want}"
            );
            assert_eq!(got.lines().count(), 1, "one line: {got}");
        }
    }
}
