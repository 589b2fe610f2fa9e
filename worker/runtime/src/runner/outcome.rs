//! What a run came to, written: a retryable failure's wait, the result's size checks, and
//! the finish script, retried through a Redis outage. Admission is
//! [`admit`](super::admit)'s; the run itself is [`job`](super::job)'s.

use std::time::Duration;

use mcp_tasks_protocol::jsonrpc::{ErrorObject, INTERNAL_ERROR};
use mcp_tasks_protocol::time::now_millis;
use mcp_tasks_shared::metrics;
use mcp_tasks_store::dead::Keep;
use mcp_tasks_store::stored::{self, Stored};
use mcp_tasks_store::{Delivery, Finish, Write};

use crate::CallToolResult;
use crate::tool::{Retry, ToolError};

use super::Runner;
use super::admit::short_duration;

/// What a tool's call came to.
pub(super) type Outcome = Result<CallToolResult, ToolError>;

impl Runner {
    /// What to write for `outcome`; `None` when nothing is (the entry released, or left
    /// pending for another worker).
    pub(super) async fn finish_of(
        &self,
        d: &Delivery,
        fence: u64,
        outcome: Outcome,
    ) -> Option<Finish> {
        match outcome {
            Ok(result) => Some(self.completed(d, result).await),
            Err(ToolError::Protocol(error)) => Some(failed(error)),
            // run_job turned these into a wait or their last outcome already.
            Err(ToolError::Retryable(retry)) => {
                Some(failed(ErrorObject::new(INTERNAL_ERROR, retry.reason)))
            }
            // Why the run stopped is read from the task itself.
            Err(ToolError::Stopped) => match self.store.tasks().get(&d.task_id, &d.owner).await {
                // Gone (expired) or terminal (cancelled while parked): release the entry.
                Ok(None) => {
                    self.release(d).await;
                    None
                }
                Ok(Some(rec)) if rec.is_terminal() => {
                    self.release(d).await;
                    None
                }
                Ok(Some(rec)) if rec.cancel_requested && rec.fence == fence => {
                    Some(Finish::Cancelled)
                }
                // Taken over by another worker, or stopped by this worker's shutdown: write
                // nothing; the job stays pending in the stream.
                Ok(Some(_)) | Err(_) => {
                    tracing::info!(task.id = %d.task_id, "run stopped without a result; job left pending");
                    None
                }
            },
        }
    }

    /// A tool's result as stored, or the failure when it is too large, would take its
    /// owner past `MCPT_LIMIT_STORED_BYTES`, or cannot be encoded.
    async fn completed(&self, d: &Delivery, result: CallToolResult) -> Finish {
        let finish = self.encoded(d.tool(), result);
        let Finish::Completed(json) = &finish else {
            return finish;
        };
        let limit = if d.owner == mcp_tasks_protocol::meta::ANONYMOUS_OWNER {
            self.stored_bytes_anonymous
        } else {
            self.stored_bytes
        };
        if limit == 0 {
            return finish;
        }
        // Kept as long as the task: counted until it expires.
        let lapses = match self.store.tasks().expiry(&d.task_id, &d.owner).await {
            Ok(Some(at)) => at,
            // Gone: the finish finds that out and stores nothing.
            Ok(None) => return finish,
            Err(e) => {
                tracing::warn!(error = %e, "cannot count the result's bytes; storing it");
                return finish;
            }
        };
        match self
            .store
            .limits()
            .count_stored(&d.owner, json.len(), lapses, limit, Stored::Result)
            .await
        {
            Ok(stored::Counted::Refused(total)) => failed(ErrorObject::new(
                INTERNAL_ERROR,
                format!(
                    "the tool's result is {} bytes, and this caller's tasks already keep {total} of at most {limit} (MCPT_LIMIT_STORED_BYTES); it was not stored",
                    json.len()
                ),
            )),
            Ok(stored::Counted::Yes(_)) => finish,
            Err(e) => {
                tracing::warn!(error = %e, "cannot count the result's bytes; storing it");
                finish
            }
        }
    }

    /// A tool's result as stored, or the failure when it is larger than the tool's bound
    /// or cannot be encoded.
    fn encoded(&self, tool: &str, result: CallToolResult) -> Finish {
        let (most, named) = match self.result_limits.get(tool) {
            Some(most) => (*most, format!("max_result_bytes of tool {tool}")),
            None => (self.max_result_bytes, "MCPT_MAX_RESULT_BYTES".to_owned()),
        };
        match result.to_json_with_server_info() {
            // Not stored: a result this large would fill Redis and every reader.
            Ok(json) if json.len() > most => failed(ErrorObject::new(
                INTERNAL_ERROR,
                format!(
                    "the tool's result is {} bytes; at most {most} are stored ({named})",
                    json.len(),
                ),
            )),
            Ok(json) => Finish::Completed(json),
            Err(e) => failed(ErrorObject::new(
                INTERNAL_ERROR,
                format!("result could not be encoded: {e}"),
            )),
        }
    }

    /// A retryable failure: with attempts left under the tool's policy, put the job in its
    /// delayed set (`None`: nothing more to write here); else the outcome the task ends with.
    pub(super) async fn try_again(
        &self,
        d: &Delivery,
        fence: u64,
        tool: &str,
        retry: Retry,
    ) -> Option<Outcome> {
        let Some(policy) = self.retries.get(tool).filter(|p| d.attempt < p.attempts) else {
            return Some(match retry.last {
                Some(result) => Ok(result),
                None => Err(ToolError::internal(retry.reason)),
            });
        };
        // A run that ended before taking its fence takes it now: the wait is fenced.
        let fence = if fence == 0 {
            self.start(d).await?.0
        } else {
            fence
        };
        let wait = policy.wait_after(d.attempt, retry.after);
        let next = d.attempt + 1;
        let message = format!(
            "retrying in {} (attempt {next} of {}): {}",
            short_duration(wait),
            policy.attempts,
            retry.reason
        );
        match self
            .store
            .jobs()
            .retry(d, fence, wait, &message, next)
            .await
        {
            Ok(Write::Ok) => {
                self.due_wake.notify_one();
                tracing::info!(
                    attempt = d.attempt,
                    wait_ms = wait.as_millis() as u64,
                    "run failed; tried again after a wait"
                );
            }
            Ok(_) => {}
            // Left pending: the sweep runs it again after the lease, a retry all the same.
            Err(e) => {
                tracing::warn!(error = %e, "cannot schedule the retry; the job stays pending")
            }
        }
        None
    }

    /// Write the terminal state, retrying while Redis is away.
    pub(super) async fn settle(&self, d: &Delivery, fence: u64, finish: &Finish) {
        let mut backoff = Duration::from_millis(100);
        // Until it is written (or refused): the result must not be lost to an outage. A
        // shutdown ends this with the process after the grace period.
        let keep = self.keep_of(d, finish);
        loop {
            match self
                .store
                .jobs()
                .finish_keeping(d, fence, finish, keep.as_ref())
                .await
            {
                Ok(Write::Ok) => {
                    record_finish(d, finish);
                    return;
                }
                Ok(Write::Fenced) => {
                    tracing::warn!(task.id = %d.task_id, "another worker owns this task now; result dropped");
                    return;
                }
                Ok(Write::Gone | Write::Terminal) => return,
                Err(e) => {
                    tracing::warn!(task.id = %d.task_id, error = %e, "cannot finish task; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        }
    }

    /// How `finish` keeps its task as a dead letter under its tool's policy: a failure,
    /// or a tool error where the tool keeps those; `None` for everything else.
    fn keep_of(&self, d: &Delivery, finish: &Finish) -> Option<Keep> {
        let policy = self.dead_letters.get(d.tool()).copied().unwrap_or_default();
        let keep = policy.keep?;
        let reason = match finish {
            Finish::Failed { message, .. } => message.clone(),
            Finish::Completed(json) if policy.tool_errors => tool_error_text(json)?,
            Finish::Completed(_) | Finish::Cancelled => return None,
        };
        Some(Keep {
            for_ms: u64::try_from(keep.as_millis()).unwrap_or(u64::MAX),
            max: self.dead_letters_max,
            reason,
        })
    }

    async fn release(&self, d: &Delivery) {
        if let Err(e) = self.store.jobs().release(d).await {
            tracing::warn!(task.id = %d.task_id, error = %e, "cannot release job entry");
        }
    }
}

/// The stream entry id's time part: when the create script queued the job (Redis clock).
fn entry_millis(entry: &str) -> Option<i64> {
    entry.split_once('-')?.0.parse().ok()
}

/// Count a task this worker ended, and how long it took from its call.
fn record_finish(d: &Delivery, finish: &Finish) {
    let status = match finish {
        Finish::Completed(_) => "completed",
        Finish::Failed { .. } => "failed",
        Finish::Cancelled => "cancelled",
    };
    let attrs = metrics::finish_attrs(d.tool(), status);
    let m = metrics::get();
    m.tasks_finished.add(1, &attrs);
    let run_ms = entry_millis(&d.entry).map(|created| (now_millis() - created).max(0) as u64);
    if let Some(ms) = run_ms {
        m.task_duration.record(ms as f64 / 1000.0, &attrs);
    }
    mcp_tasks_shared::tally::finished(status, &d.queue, run_ms);
}

/// The text of a stored result that is a tool error (`isError: true`): its first text
/// content, or a note that it had none; `None` for a result that is not an error.
fn tool_error_text(json: &str) -> Option<String> {
    let result: serde_json::Value = serde_json::from_str(json).ok()?;
    if result.get("isError") != Some(&serde_json::Value::Bool(true)) {
        return None;
    }
    let text = result
        .get("content")
        .and_then(serde_json::Value::as_array)
        .and_then(|content| content.iter().find_map(|c| c.get("text")?.as_str()));
    Some(text.map_or_else(|| "the tool reported an error".to_owned(), str::to_owned))
}

/// A failure as the finish script stores it: the error object, and its message for the
/// status line.
pub(super) fn failed(error: ErrorObject) -> Finish {
    let message = error.message.clone();
    let error = serde_json::to_string(&error)
        .unwrap_or_else(|_| format!(r#"{{"code":{INTERNAL_ERROR},"message":"internal error"}}"#));
    Finish::Failed { error, message }
}
