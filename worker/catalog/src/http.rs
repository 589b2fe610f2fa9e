//! One `[[http]]` tool: check its entry, send the call's arguments to a fixed URL, and
//! follow the job the service starts until it reports an end. The entry is checked in
//! `http/check.rs`, an answer read in `http/answer.rs`, requests sent by `http/client.rs`.
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

mod answer;
mod check;
mod client;
mod url;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::{Method, StatusCode, Uri};
use serde_json::Value;

use self::answer::{Poll, progress, transient};
pub(super) use self::check::entry;
use self::client::{NoAnswer, Service};
use self::url::resolve;
use mcp_tasks_worker::{CallToolResult, Retry, TaskContext, Tool, ToolError, ToolFuture, ToolSpec};

/// Longest wait for the answer to the `DELETE` that cancels a job.
const CANCEL_TIMEOUT: Duration = Duration::from_secs(5);
/// Failed reads of a status URL in a row before the call gives up.
const POLL_RETRIES: u32 = 5;
/// Longest pause between two failed reads of a status URL.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Redirects followed in a row.
const MAX_REDIRECTS: u32 = 5;

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

/// Pause after the `failures`-th failed read in a row: the interval, doubled each time.
fn backoff(interval: Duration, failures: u32) -> Duration {
    let first = interval.max(Duration::from_millis(250));
    first.saturating_mul(1 << failures.min(8)).min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
