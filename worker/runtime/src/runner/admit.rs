//! Admission of one job: the tool that runs it and what the run consumes, the fleet-wide
//! limits it waits for, and the start script that takes its fence. What the run comes to is
//! [`outcome`](super::outcome)'s; the run itself is [`job`](super::job)'s.

use std::sync::Arc;
use std::time::Duration;

use mcp_tasks_protocol::jsonrpc::{ErrorObject, INTERNAL_ERROR};
use mcp_tasks_protocol::time::now_millis;
use mcp_tasks_shared::sync::lock;
use mcp_tasks_store::{Delivery, Job, Start, Store};
use serde_json::Value;

use crate::tool::Tool;

use super::Runner;
use super::outcome::failed;

impl Runner {
    /// The tool that runs the job and what the run consumes of it (moved out of the
    /// delivery, not copied: the rest of the job's life reads only its tool's name);
    /// `None` when the job or its tool is missing, after failing the task. It is started
    /// first, so the usual checks (cancelled, expired, too many runs) apply before it
    /// fails.
    pub(super) async fn resolve(&self, d: &mut Delivery) -> Option<(Arc<dyn Tool>, Inputs)> {
        let why = match &mut d.job {
            Ok(job) => match self.tools.get(&job.tool) {
                Some(tool) => return Some((tool.clone(), Inputs::take(job))),
                None => format!("no worker here runs tool {}", job.tool),
            },
            Err(why) => format!("job could not be read: {why}"),
        };
        if let Some((fence, _)) = self.start(d).await {
            let finish = failed(ErrorObject::new(INTERNAL_ERROR, why));
            self.settle(d, fence, &finish).await;
        }
        None
    }

    /// The fleet-wide slot a limited tool's run needs: `Some` to run (holding the slot, if
    /// any, until dropped), `None` when the job waits (parked in its delayed set) or Redis is
    /// away (left pending: the sweep brings it back).
    pub(super) async fn limit_slot(&self, d: &Delivery, args: &Value) -> Option<Option<LimitSlot>> {
        let Some(limits) = self.limits.get(d.tool()) else {
            return Some(None);
        };
        let value = limits.key.as_ref().map(|arg| match args.get(arg) {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => String::new(),
        });
        let limit = mcp_tasks_store::keys::limit_name(d.tool(), value.as_deref());
        // The rate first: a start it counts is kept (a delivery again counts once).
        if let Some(rate) = limits.rate {
            match self
                .store
                .limits()
                .rate_start(&limit, rate.starts, rate.per, &d.task_id)
                .await
            {
                Ok(None) => {}
                Ok(Some(wait)) => {
                    let message = format!(
                        "waiting for the rate limit ({} per {})",
                        rate.starts,
                        short_duration(rate.per)
                    );
                    if let Err(e) = self.store.limits().park(d, &message, Some(wait)).await {
                        tracing::warn!(error = %e, "cannot park a rate-limited job; it stays pending");
                    }
                    self.due_wake.notify_one();
                    return None;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot count a rate-limited start; the job stays pending");
                    return None;
                }
            }
        }
        let Some(slots) = limits.max_running else {
            return Some(None);
        };
        let arrival = d.queued_at().unwrap_or_else(now_millis);
        match self
            .store
            .limits()
            .acquire_slot(&limit, slots, &d.task_id, arrival, self.lease)
            .await
        {
            Ok(mcp_tasks_store::limits::Slot::Taken { .. }) => {
                let id = (limit, d.task_id.clone());
                lock(&self.slots_held).insert(id.clone());
                Some(Some(LimitSlot {
                    store: self.store.clone(),
                    held: self.slots_held.clone(),
                    id,
                }))
            }
            Ok(mcp_tasks_store::limits::Slot::Wait { running }) => {
                let message = format!("waiting for a slot ({running} of {slots} running)");
                if let Err(e) = self.store.limits().park(d, &message, None).await {
                    tracing::warn!(error = %e, "cannot park a job waiting for a slot; it stays pending");
                }
                self.due_wake.notify_one();
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot take a concurrency slot; the job stays pending");
                None
            }
        }
    }

    /// Take the task's fencing token: `(fence, deadline)`, or `None` when there is nothing
    /// to run (skipped, or Redis away: the job stays pending).
    pub(super) async fn start(&self, d: &Delivery) -> Option<(u64, Option<i64>)> {
        match self
            .store
            .jobs()
            .start(d, &self.consumer, self.max_deliveries)
            .await
        {
            Ok(Start::Run { fence, deadline_ms }) => Some((fence, deadline_ms)),
            Ok(Start::Skip(why)) => {
                tracing::info!(task.id = %d.task_id, reason = %why, "job skipped");
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot start job; leaving it pending");
                None
            }
        }
    }
}

/// A concurrency slot held by a run; given back (in the background) when dropped.
pub(super) struct LimitSlot {
    store: Store,
    held: Arc<std::sync::Mutex<std::collections::HashSet<(String, String)>>>,
    id: (String, String),
}

impl Drop for LimitSlot {
    fn drop(&mut self) {
        lock(&self.held).remove(&self.id);
        let (store, (limit, task)) = (self.store.clone(), self.id.clone());
        tokio::spawn(async move {
            // Lost: the slot lapses with its lease.
            if let Err(e) = store.limits().free_slot(&limit, &task).await {
                tracing::warn!(error = %e, "cannot give a concurrency slot back; it lapses with its lease");
            }
        });
    }
}

/// `250ms`, `4s`, `1m30s`: a wait as the status message says it.
pub(super) fn short_duration(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{}s", (ms + 500) / 1000),
        _ => {
            let s = (ms + 500) / 1000;
            if s.is_multiple_of(60) {
                format!("{}m", s / 60)
            } else {
                format!("{}m{}s", s / 60, s % 60)
            }
        }
    }
}

/// What a run consumes of its job: its arguments, the call's client capabilities and its
/// MRTR answers, moved out of the delivery rather than deep-copied per run.
pub(super) struct Inputs {
    pub(super) args: Value,
    pub(super) caps: Box<serde_json::value::RawValue>,
    pub(super) pre: serde_json::Map<String, Value>,
}

impl Inputs {
    /// Take them out of `job`, which keeps its tool's name (all a run reads of it later:
    /// a retry or a release requeues the stream entry, not this copy).
    pub(super) fn take(job: &mut Job) -> Inputs {
        Inputs {
            args: std::mem::take(&mut job.args),
            caps: std::mem::replace(&mut job.caps, serde_json::value::RawValue::NULL.to_owned()),
            pre: std::mem::take(&mut job.pre),
        }
    }
}
