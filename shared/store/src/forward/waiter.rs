//! The gateway's side of forwarding: push a request, wait for its answer.
//!
//! One reply list per gateway process (`mcpt:forwarded:{GATEWAY}`, named in every request
//! it sends) and one loop draining it with `BLPOP` on one connection of its own
//! ([`KeyCon`], the job reader's kind: it follows a Sentinel promotion and, in a cluster,
//! the key's slot). The loop hands each answer to the request waiting for it by id; a
//! request that stops waiting (timeout, or its client went away) takes its entry out, and
//! an answer arriving after that is dropped. So a burst of forwarded requests costs no
//! connection each, only a map entry, and at most [`ForwardLimits::max_in_flight`] of them
//! wait at once.
//!
//! Backpressure: a request list holds at most [`MAX_QUEUED`] requests (past it the
//! request is taken back and refused), and a request that timed out is taken back if still
//! there, which tells "no worker took it" from "a worker took it but did not answer".

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::AsyncCommands as _;
use serde_json::Value;
use tokio::sync::{Semaphore, oneshot};
use tokio_util::sync::CancellationToken;

use super::{Answer, ForwardReply, Forwarded, KEEP_MS};
use crate::reader::KeyCon;
use crate::{READ_BLOCK, Store, StoreError, StoreResult, keys};

/// Requests one upstream's list holds at most; more are refused at once rather than
/// queued behind work no worker will reach before their gateways give up.
pub const MAX_QUEUED: usize = 1024;

/// Pause before the drain loop reconnects after Redis failed.
const RETRY: Duration = Duration::from_secs(1);

/// How a gateway forwards.
#[derive(Debug, Clone, Copy)]
pub struct ForwardLimits {
    /// How long a request waits for its answer.
    pub wait: Duration,
    /// Requests waiting at once; past it a request is refused ([`Outcome::Busy`]).
    pub max_in_flight: usize,
}

/// How a forwarded request ended.
#[derive(Debug)]
pub enum Outcome {
    /// The upstream's answer (a result or its error).
    Answered(ForwardReply),
    /// This gateway already waits for `max_in_flight` answers.
    Busy,
    /// The upstream's request list is full ([`MAX_QUEUED`]).
    Backlogged,
    /// No worker took the request within the wait (taken back from the list).
    NotTaken,
    /// A worker took the request but no answer came within the wait.
    Unanswered,
}

/// Forwards requests for one gateway process (see the module docs). Dropping it stops the
/// drain loop.
pub struct Forwarder {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    reply_to: String,
    limits: ForwardLimits,
    permits: Semaphore,
    pending: Mutex<HashMap<String, oneshot::Sender<ForwardReply>>>,
    started: AtomicBool,
    stop: CancellationToken,
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.inner.stop.cancel();
    }
}

impl std::fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarder")
            .field("reply_to", &self.inner.reply_to)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// The forwarder of this gateway process, with a reply list of its own; its drain loop
    /// starts with the first request.
    pub fn forwarder(&self, limits: ForwardLimits) -> Forwarder {
        let gateway = uuid::Uuid::new_v4().simple().to_string();
        Forwarder {
            inner: Arc::new(Inner {
                store: self.clone(),
                reply_to: keys::forwarded_key(&gateway),
                limits,
                permits: Semaphore::new(limits.max_in_flight),
                pending: Mutex::new(HashMap::new()),
                started: AtomicBool::new(false),
                stop: CancellationToken::new(),
            }),
        }
    }
}

impl Forwarder {
    /// How long a request waits for its answer.
    pub fn wait(&self) -> Duration {
        self.inner.limits.wait
    }

    /// Have a worker fronting `upstream` send it `method` with `params`, and wait for the
    /// answer.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn forward(
        &self,
        upstream: &str,
        method: &str,
        params: Value,
    ) -> StoreResult<Outcome> {
        let Ok(_permit) = self.inner.permits.try_acquire() else {
            return Ok(Outcome::Busy);
        };
        if !self.inner.started.swap(true, Ordering::AcqRel) {
            tokio::spawn(drain(self.inner.clone()));
        }
        let wait = self.inner.limits.wait;
        let wait_ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
        let request = Forwarded {
            id: uuid::Uuid::new_v4().simple().to_string(),
            reply_to: self.inner.reply_to.clone(),
            method: method.to_owned(),
            params,
            deadline_ms: mcp_tasks_protocol::time::now_millis().saturating_add(wait_ms),
        };
        let text =
            serde_json::to_string(&request).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        // Registered before the push, so no answer can come before its waiter.
        let (tx, rx) = oneshot::channel();
        let _waiting = Waiting::register(&self.inner, &request.id, tx);
        let key = keys::forward_key(upstream);
        let mut con = self.inner.store.con.clone();
        let (queued,): (usize,) = redis::pipe()
            .lpush(&key, &text)
            .pexpire(&key, wait_ms.saturating_add(KEEP_MS))
            .ignore()
            .query_async(&mut con)
            .await?;
        if queued > MAX_QUEUED {
            let removed: usize = con.lrem(&key, 1, &text).await?;
            if removed > 0 {
                return Ok(Outcome::Backlogged);
            }
            // A worker took it meanwhile: wait for its answer after all.
        }
        if let Ok(Ok(reply)) = tokio::time::timeout(wait, rx).await {
            return Ok(Outcome::Answered(reply));
        }
        let removed: usize = con.lrem(&key, 1, &text).await?;
        Ok(if removed > 0 {
            Outcome::NotTaken
        } else {
            Outcome::Unanswered
        })
    }
}

/// A request's entry in the waiting map, taken out when the request stops waiting.
struct Waiting<'a> {
    inner: &'a Inner,
    id: &'a str,
}

impl<'a> Waiting<'a> {
    fn register(inner: &'a Inner, id: &'a str, tx: oneshot::Sender<ForwardReply>) -> Self {
        inner.pending().insert(id.to_owned(), tx);
        Waiting { inner, id }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.inner.pending().remove(self.id);
    }
}

impl Inner {
    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<ForwardReply>>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hand an answer to its waiter, if it still waits.
    fn deliver(&self, text: &str) {
        let answer: Answer = match serde_json::from_str(text) {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "an unreadable answer to a forwarded request was dropped");
                return;
            }
        };
        match self.pending().remove(&answer.id) {
            Some(tx) => {
                let _ = tx.send(answer.reply);
            }
            None => tracing::debug!("an answer came after its forwarded request gave up"),
        }
    }
}

/// Pop this gateway's answers until its forwarder is dropped.
async fn drain(inner: Arc<Inner>) {
    let mut con = KeyCon::new(inner.store.backend().clone());
    let mut blpop = redis::cmd("BLPOP");
    blpop.arg(&inner.reply_to).arg(READ_BLOCK.as_secs_f64());
    loop {
        let popped: redis::RedisResult<Option<(String, String)>> = tokio::select! {
            r = con.query(&blpop) => r,
            () = inner.stop.cancelled() => return,
        };
        match popped {
            Ok(Some((_, text))) => inner.deliver(&text),
            Ok(None) => {}
            Err(e) => {
                // Answers wait in the list meanwhile (for a minute).
                tracing::warn!(error = %e, "cannot read answers to forwarded requests; retrying");
                tokio::select! {
                    () = tokio::time::sleep(RETRY) => {}
                    () = inner.stop.cancelled() => return,
                }
            }
        }
    }
}
