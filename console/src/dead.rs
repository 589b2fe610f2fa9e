//! Dead letters from the console: the tasks that failed for good, listed newest first and
//! filtered as `mcp-tasks dead` filters them (`tool`, `since`), and one run again as
//! `mcp-tasks redrive` does, through the same store call
//! (`mcp_tasks_store::dead::DeadLetters::redrive_served`). Each redrive is logged with the
//! acting principal.
//!
//! Asked by the page (`GET /console/dead`, its Redrive buttons `POST /console/dead/redrive`,
//! form-encoded) or the API (`GET /console/api/dead`, `POST /console/api/dead/redrive`,
//! form-encoded or JSON: `{"id": "tsk_…"}`). The letters are read from Redis at each
//! request (they are not in the console's memory).

use std::time::Duration;

use hyper::StatusCode;
use mcp_tasks_protocol::time::now_millis;
use mcp_tasks_store::StoreError;
use mcp_tasks_store::dead::{DeadLetter, Redrive};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::access::logged;
use crate::strike::Refusal;
use crate::{State, api};

/// Which letters to list: of one tool, failed within a time.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct DeadFilter {
    pub(crate) tool: Option<String>,
    /// `since` as written (the page's filter field shows it again).
    pub(crate) since_text: Option<String>,
    pub(crate) since: Option<Duration>,
}

fn bad(why: impl Into<String>) -> Refusal {
    (StatusCode::BAD_REQUEST, why.into())
}

impl DeadFilter {
    /// Parse a query string (`tool`, `since` as a duration like `1h`); `Err` says what is
    /// wrong.
    pub(crate) fn parse(query: Option<&str>) -> Result<DeadFilter, String> {
        let mut f = DeadFilter::default();
        for (k, v) in api::pairs(query.unwrap_or("")) {
            let v = v.trim().to_owned();
            if v.is_empty() {
                continue;
            }
            match k.as_str() {
                "tool" => f.tool = Some(v),
                "since" => {
                    let since = mcp_tasks_shared::config::parse_duration(&v)
                        .filter(|d| !d.is_zero())
                        .ok_or_else(|| {
                            format!("bad since {v:?}: expected a duration like 30m, 1h or 7d")
                        })?;
                    f.since = Some(since);
                    f.since_text = Some(v);
                }
                "fragment" => {}
                other => {
                    return Err(format!(
                        "unknown parameter {other:?}: expected tool or since"
                    ));
                }
            }
        }
        Ok(f)
    }

    /// Whether `letter` passes, as of `now_ms`.
    fn keeps(&self, letter: &DeadLetter, now_ms: i64) -> bool {
        let after = self
            .since
            .map(|d| now_ms.saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)));
        self.tool.as_ref().is_none_or(|t| &letter.tool == t)
            && after.is_none_or(|at| letter.at_ms >= at)
    }
}

fn unavailable(e: &StoreError) -> Refusal {
    tracing::warn!(error = %e, "console: dead letters not read or redriven");
    (
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "redis unavailable ({}); retry",
            mcp_tasks_shared::error_chain(e)
        ),
    )
}

/// The queues whose streams may hold letters.
async fn queues(state: &State) -> Result<Vec<String>, Refusal> {
    state
        .store
        .fleet()
        .queue_names()
        .await
        .map_err(|e| unavailable(&e))
}

/// The live letters passing `filter`, newest first.
pub(crate) async fn list(state: &State, filter: &DeadFilter) -> Result<Vec<DeadLetter>, Refusal> {
    let queues = queues(state).await?;
    let letters = state
        .store
        .dead()
        .list(&queues)
        .await
        .map_err(|e| unavailable(&e))?;
    let now = now_millis();
    Ok(letters
        .into_iter()
        .filter(|l| filter.keeps(l, now))
        .collect())
}

/// One row of `GET /console/api/dead` (the letter without its job: `runnable` says whether
/// it was kept, which a redrive needs).
pub(crate) fn row(letter: &DeadLetter, now_ms: i64) -> Value {
    json!({
        "task_id": letter.task_id,
        "tool": letter.tool,
        "owner": letter.owner,
        "queue": letter.queue,
        "outcome": letter.outcome,
        "reason": letter.reason,
        "attempts": letter.attempts,
        "at_ms": letter.at_ms,
        "age_ms": (now_ms - letter.at_ms).max(0),
        "redriven": letter.redriven,
        "runnable": letter.job.is_some(),
    })
}

/// What a redrive request asks.
#[derive(Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Ask {
    id: String,
}

impl Ask {
    /// Read a request body: JSON when `json`, else a form (`id`).
    fn parse(body: &[u8], json: bool) -> Result<Ask, Refusal> {
        let ask = if json {
            serde_json::from_slice(body).map_err(|e| bad(format!("bad JSON body: {e}")))?
        } else if body.trim_ascii_start().starts_with(b"{") {
            return Err(bad(
                "the body looks like JSON: send it with Content-Type: application/json \
                 (or as a form: id=…)",
            ));
        } else {
            let mut ask = Ask::default();
            for (k, v) in api::pairs(&String::from_utf8_lossy(body)) {
                match k.as_str() {
                    "id" => ask.id = v,
                    other => return Err(bad(format!("unknown field {other:?}: expected id"))),
                }
            }
            ask
        };
        let id = ask.id.trim();
        if id.is_empty() {
            return Err(bad("no id: name the task of the dead letter to redrive"));
        }
        Ok(Ask { id: id.to_owned() })
    }
}

/// What a redrive did: the letter, and whether a task was made now or before.
pub(crate) struct Redone {
    pub(crate) letter: DeadLetter,
    /// The task that runs the letter again (made now or before).
    pub(crate) task_id: String,
    /// Made now (else redriven before: nothing was made).
    pub(crate) new: bool,
    /// What the operator is told, as `mcp-tasks redrive` says it.
    pub(crate) message: String,
}

/// Redrive the letter the request `body` (JSON when `json`) names, by `principal`.
pub(crate) async fn redrive(
    state: &State,
    (body, json): (&[u8], bool),
    principal: &str,
) -> Result<Redone, Refusal> {
    let id = Ask::parse(body, json)?.id;
    let queues = queues(state).await?;
    let found = state.store.dead().find(&queues, &id).await;
    let Some(letter) = found.map_err(|e| unavailable(&e))? else {
        return Err((
            StatusCode::NOT_FOUND,
            format!(
                "no dead letter for task {id} (the Dead letters page lists them; they are \
                 kept a while after the failure, see the tool's dead_letters)"
            ),
        ));
    };
    let done = match state.store.dead().redrive_served(&letter).await {
        Ok(done) => done,
        Err(StoreError::Rejected(why)) => return Err((StatusCode::CONFLICT, why)),
        Err(e) => return Err(unavailable(&e)),
    };
    let message = done.message(&letter);
    let (task_id, new) = match done {
        Redrive::Made(made) => (made, true),
        Redrive::Before(made) => (made, false),
        Redrive::Unserved => return Err((StatusCode::CONFLICT, message)),
    };
    if new {
        let by = logged(principal);
        tracing::info!(
            task.id = %id,
            console.owner = %by,
            "console: task {id} redriven as {task_id} by {by}"
        );
    }
    Ok(Redone {
        letter,
        task_id,
        new,
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(tool: &str, at_ms: i64) -> DeadLetter {
        DeadLetter {
            task_id: "tsk_1".to_owned(),
            owner: "anonymous".to_owned(),
            tool: tool.to_owned(),
            queue: "default".to_owned(),
            stream: "mcpt:queue:default".to_owned(),
            outcome: "failed".to_owned(),
            reason: "broke".to_owned(),
            attempts: 2,
            at_ms,
            job: None,
            redriven: None,
        }
    }

    #[test]
    fn filters_take_a_tool_and_a_positive_since() {
        let f = DeadFilter::parse(Some("tool=flaky&since=1h&fragment=1")).unwrap();
        assert_eq!(f.tool.as_deref(), Some("flaky"));
        assert_eq!(f.since, Some(Duration::from_secs(3600)));
        let now = 10_000_000;
        assert!(f.keeps(&letter("flaky", now - 60_000), now));
        assert!(!f.keeps(&letter("flaky", now - 7_200_000), now), "too old");
        assert!(!f.keeps(&letter("quiet", now), now), "another tool");
        assert_eq!(
            DeadFilter::parse(Some("tool=&since=")).unwrap(),
            DeadFilter::default()
        );
        let why = DeadFilter::parse(Some("since=0s")).unwrap_err();
        assert!(why.contains("expected a duration"), "{why}");
        let why = DeadFilter::parse(Some("colour=red")).unwrap_err();
        assert!(why.contains("unknown parameter \"colour\""), "{why}");
    }

    #[test]
    fn redrive_asks_come_as_forms_or_json() {
        assert_eq!(Ask::parse(b"id=tsk_1", false).unwrap().id, "tsk_1");
        assert_eq!(
            Ask::parse(br#"{"id": " tsk_1 "}"#, true).unwrap().id,
            "tsk_1"
        );
        let (status, why) = Ask::parse(b"id=", false).unwrap_err();
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(why.starts_with("no id"), "{why}");
        let (_, why) = Ask::parse(b"id=tsk_1&tool=x", false).unwrap_err();
        assert!(why.contains("unknown field \"tool\""), "{why}");
        let (_, why) = Ask::parse(br#"{"id": "tsk_1"}"#, false).unwrap_err();
        assert!(why.contains("Content-Type: application/json"), "{why}");
        let (_, why) = Ask::parse(br#"{"task": "tsk_1"}"#, true).unwrap_err();
        assert!(why.starts_with("bad JSON body"), "{why}");
    }
}
