//! [`TaskContext`]: what a running handler can do with its task.

use std::sync::Arc;

use mcp_tasks_protocol::jsonrpc::ErrorObject;
use mcp_tasks_protocol::meta::{Capability, missing_capabilities};
use mcp_tasks_protocol::tasks::InputRequest;
use mcp_tasks_shared::metrics;
use mcp_tasks_store::{Ask, Store, StoreError, TaskRecord};
use serde_json::Value;
use tokio::sync::watch;

use crate::runner::share::{Slot, Slots};
use tokio_util::sync::CancellationToken;

use crate::tool::ToolError;

/// Handle given to a handler for one run of one task. Cheap to clone.
#[derive(Clone)]
pub struct TaskContext {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    task_id: String,
    fence: Fence,
    /// The call's client capabilities as stored, parsed at their first use.
    caps: Box<serde_json::value::RawValue>,
    caps_parsed: std::sync::OnceLock<Value>,
    pre: serde_json::Map<String, Value>,
    /// Latest known state of the task, fed by the runner's event monitor.
    latest: watch::Receiver<Option<TaskRecord>>,
    /// Fired when the client cancelled the task (or it stopped otherwise).
    stop: CancellationToken,
    /// The concurrency slot; given back while the task waits for input.
    slot: std::sync::Mutex<Option<Slot>>,
    slots: Slots,
    parked: Arc<std::sync::atomic::AtomicBool>,
    queue: String,
    owner: String,
    /// Input keys asked in this run, bounded by `max_inputs`.
    asked: std::sync::Mutex<std::collections::HashSet<String>>,
    max_inputs: u32,
    /// Status messages written and waiting: see [`STATUS_WINDOW`].
    status: tokio::sync::Mutex<StatusWrites>,
}

/// Status messages set within this long of the last one written are coalesced: the latest
/// is written when the window ends. A tool that reports every millisecond costs Redis ten
/// writes a second, not a thousand (issue 20), and every change still shows within 100 ms.
const STATUS_WINDOW: std::time::Duration = std::time::Duration::from_millis(100);

#[derive(Default)]
struct StatusWrites {
    /// When the last message was written.
    last: Option<std::time::Instant>,
    /// The latest message set since, not yet written.
    pending: Option<String>,
    /// A flush is scheduled for the end of the window.
    scheduled: bool,
}

impl std::fmt::Debug for TaskContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskContext")
            .field("task_id", &self.inner.task_id)
            .finish_non_exhaustive()
    }
}

/// Everything the runner hands to a context.
pub(crate) struct ContextParts {
    pub(crate) store: Store,
    pub(crate) task_id: String,
    pub(crate) fence: Fence,
    pub(crate) caps: Box<serde_json::value::RawValue>,
    pub(crate) pre: serde_json::Map<String, Value>,
    pub(crate) latest: watch::Receiver<Option<TaskRecord>>,
    pub(crate) stop: CancellationToken,
    pub(crate) slot: Slot,
    pub(crate) slots: Slots,
    /// Set while the handler waits for input.
    pub(crate) parked: Arc<std::sync::atomic::AtomicBool>,
    /// The job's queue (a metric attribute).
    pub(crate) queue: String,
    /// Digest of the caller's principal.
    pub(crate) owner: String,
    /// `MCPT_MAX_INPUT_REQUESTS`.
    pub(crate) max_inputs: u32,
}

/// The run's fencing token, which a fresh job takes only when its run outlasts a moment or
/// writes something (the runner's `start`): a context write waits for it.
#[derive(Clone)]
pub(crate) struct Fence {
    value: watch::Receiver<Option<u64>>,
    wanted: Arc<tokio::sync::Notify>,
}

impl Fence {
    /// A fence set by the runner through the returned sender; `wanted` is notified when a
    /// write needs it before the runner took it on its own.
    pub(crate) fn new(wanted: Arc<tokio::sync::Notify>) -> (watch::Sender<Option<u64>>, Fence) {
        let (tx, rx) = watch::channel(None);
        (tx, Fence { value: rx, wanted })
    }

    /// The token, once the run has started; [`ToolError::Stopped`] when it never will.
    async fn get(&self, stop: &CancellationToken) -> Result<u64, ToolError> {
        let mut rx = self.value.clone();
        loop {
            if let Some(f) = *rx.borrow_and_update() {
                return Ok(f);
            }
            self.wanted.notify_one();
            tokio::select! {
                changed = rx.changed() => if changed.is_err() { return Err(ToolError::Stopped) },
                () = stop.cancelled() => return Err(ToolError::Stopped),
            }
        }
    }
}

/// Run a store write, waiting out Redis outages (the handler pauses, then resumes) until
/// the run is stopped. Only a write the store refuses for its content is an error.
async fn persist<T, F, Fut>(stop: &CancellationToken, mut op: F) -> Result<T, ToolError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    let mut backoff = std::time::Duration::from_millis(100);
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(StoreError::Rejected(why)) => return Err(ToolError::internal(why)),
            Err(e) => {
                tracing::warn!(error = %e, "cannot write task state; retrying");
                tokio::select! {
                    () = stop.cancelled() => return Err(ToolError::Stopped),
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(std::time::Duration::from_secs(2));
            }
        }
    }
}

impl Inner {
    /// The client capabilities, parsed the first time they are read. They were valid JSON
    /// when the job was read (a raw value is checked whole); `null` should that ever fail.
    fn capabilities(&self) -> &Value {
        self.caps_parsed
            .get_or_init(|| serde_json::from_str(self.caps.get()).unwrap_or_default())
    }
}

impl TaskContext {
    pub(crate) fn new(parts: ContextParts) -> Self {
        TaskContext {
            inner: Arc::new(Inner {
                store: parts.store,
                task_id: parts.task_id,
                fence: parts.fence,
                caps: parts.caps,
                caps_parsed: std::sync::OnceLock::new(),
                pre: parts.pre,
                latest: parts.latest,
                stop: parts.stop,
                slot: std::sync::Mutex::new(Some(parts.slot)),
                slots: parts.slots,
                parked: parts.parked,
                queue: parts.queue,
                owner: parts.owner,
                asked: std::sync::Mutex::default(),
                max_inputs: parts.max_inputs,
                status: tokio::sync::Mutex::new(StatusWrites::default()),
            }),
        }
    }

    /// The task's id.
    pub fn task_id(&self) -> &str {
        &self.inner.task_id
    }

    /// Client capabilities of the call that created the task.
    pub fn client_capabilities(&self) -> &Value {
        self.inner.capabilities()
    }

    /// The answer to the tool's MRTR request `key` (see [`crate::ToolSpec::pre_input`]).
    pub fn pre_input(&self, key: &str) -> Option<&Value> {
        self.inner.pre.get(key)
    }

    /// A digest of the principal that called the tool (`anonymous` without authentication):
    /// the same for every task of one caller, never the caller's credential or name.
    pub fn owner(&self) -> &str {
        &self.inner.owner
    }

    /// Set the task's status message (shown to the client while it works).
    ///
    /// # Errors
    /// [`ToolError::Stopped`] when the task no longer runs here.
    pub async fn set_status(&self, message: impl AsRef<str>) -> Result<(), ToolError> {
        let message = message.as_ref();
        let mut writes = self.inner.status.lock().await;
        let now = std::time::Instant::now();
        if let Some(last) = writes.last
            && now < last + STATUS_WINDOW
        {
            writes.pending = Some(message.to_owned());
            if !writes.scheduled {
                writes.scheduled = true;
                let inner = Arc::downgrade(&self.inner);
                tokio::spawn(async move {
                    tokio::time::sleep_until((last + STATUS_WINDOW).into()).await;
                    // The run is over when its context is gone: nothing left to show.
                    if let Some(inner) = inner.upgrade() {
                        let _ = TaskContext { inner }.flush_status().await;
                    }
                });
            }
            // A stopped task learns it at once, coalesced or not.
            return if self.inner.stop.is_cancelled() {
                Err(ToolError::Stopped)
            } else {
                Ok(())
            };
        }
        writes.last = Some(now);
        writes.pending = None;
        self.write_status(message).await
    }

    /// Write the status message set last and not yet written, if any.
    async fn flush_status(&self) -> Result<(), ToolError> {
        let mut writes = self.inner.status.lock().await;
        writes.scheduled = false;
        let Some(message) = writes.pending.take() else {
            return Ok(());
        };
        writes.last = Some(std::time::Instant::now());
        self.write_status(&message).await
    }

    async fn write_status(&self, message: &str) -> Result<(), ToolError> {
        let i = &self.inner;
        let fence = i.fence.get(&i.stop).await?;
        match persist(&i.stop, || {
            i.store
                .jobs()
                .set_message(&i.task_id, &i.owner, fence, message)
        })
        .await?
        {
            mcp_tasks_store::Write::Ok => Ok(()),
            _ => Err(ToolError::Stopped),
        }
    }

    /// Ask the client for input under `key` and wait for the answer (an `ElicitResult`,
    /// `CreateMessageResult` or `ListRootsResult` as JSON). See the module docs of
    /// [`crate::Tool`] on key replay.
    ///
    /// # Errors
    /// The originating call did not declare the capability the request needs (-32021 is
    /// checked at call time for declared needs; this catches undeclared ones), the task
    /// stopped, or Redis failed.
    pub async fn input(&self, key: &str, request: InputRequest) -> Result<Value, ToolError> {
        let mut answers = self.input_all(vec![(key.to_owned(), request)]).await?;
        Ok(answers.pop().map(|(_, v)| v).unwrap_or(Value::Null))
    }

    /// Ask several questions at once; the task shows all of them until each is answered
    /// (partial answers keep it `input_required`, T-30). Answers come back in request order.
    ///
    /// # Errors
    /// As [`TaskContext::input`].
    pub async fn input_all(
        &self,
        requests: Vec<(String, InputRequest)>,
    ) -> Result<Vec<(String, Value)>, ToolError> {
        // A coalesced status message goes out before the question, never after it.
        self.flush_status().await?;
        self.count_asked(&requests)?;
        let encoded = self.encode_requests(&requests)?;
        let keys: Vec<String> = requests.into_iter().map(|(k, _)| k).collect();
        let i = &self.inner;
        let fence = i.fence.get(&i.stop).await?;
        if let Some(answers) = self.ask(fence, &encoded).await? {
            return Ok(answers);
        }
        // Parked: give the concurrency slot back while the client thinks (ARCHITECTURE.md).
        let slot = i.slot.lock().ok().and_then(|mut p| p.take());
        drop(slot);
        let parked = Parked::set(&i.parked, &i.queue);
        let answers = self.wait_for_answers(&keys, fence, &encoded).await?;
        drop(parked);
        let slot = i
            .slots
            .acquire(&i.owner)
            .await
            .map_err(|_| ToolError::Stopped)?;
        if let Ok(mut held) = i.slot.lock() {
            *held = Some(slot);
        }
        Ok(answers)
    }

    /// Count `requests`' keys among those asked in this run; an error past
    /// `MCPT_MAX_INPUT_REQUESTS`. A run replayed after a takeover asks the same keys again,
    /// which do not count twice.
    fn count_asked(&self, requests: &[(String, InputRequest)]) -> Result<(), ToolError> {
        let i = &self.inner;
        if let Ok(mut asked) = i.asked.lock() {
            asked.extend(requests.iter().map(|(k, _)| k.clone()));
            if asked.len() > i.max_inputs as usize {
                return Err(ToolError::Protocol(ErrorObject::new(
                    mcp_tasks_protocol::jsonrpc::INTERNAL_ERROR,
                    format!(
                        "the tool asked for more than {} inputs in one task (MCPT_MAX_INPUT_REQUESTS)",
                        i.max_inputs
                    ),
                )));
            }
        }
        Ok(())
    }

    /// Each request under its key as the ask script stores it; an error for a request of
    /// no known kind, or one whose capability the client did not declare.
    fn encode_requests(
        &self,
        requests: &[(String, InputRequest)],
    ) -> Result<Vec<(String, String)>, ToolError> {
        let mut encoded = Vec::with_capacity(requests.len());
        for (key, req) in requests {
            req.kind().map_err(|e| ToolError::internal(e.to_string()))?;
            let need = Capability::for_input_method(&req.method, &req.params);
            if let Some(missing) =
                need.and_then(|c| missing_capabilities(&[c], self.inner.capabilities()))
            {
                return Err(ToolError::Protocol(ErrorObject::missing_capability(
                    format!(
                        "the client did not declare the capability {} needs",
                        req.method
                    ),
                    missing,
                )));
            }
            let json =
                serde_json::to_string(req).map_err(|e| ToolError::internal(e.to_string()))?;
            encoded.push((key.clone(), json));
        }
        Ok(encoded)
    }

    /// Store the questions (the same keys and requests again are no change): their
    /// answers when all are in already, `None` while the task waits for them.
    async fn ask(
        &self,
        fence: u64,
        encoded: &[(String, String)],
    ) -> Result<Option<Vec<(String, Value)>>, ToolError> {
        let i = &self.inner;
        match persist(&i.stop, || {
            i.store.jobs().ask(&i.task_id, &i.owner, fence, encoded)
        })
        .await?
        {
            Ask::Answered(list) => Ok(Some(decode_answers(list))),
            Ask::Refused(_) => Err(ToolError::Stopped),
            Ask::Waiting => Ok(None),
        }
    }

    /// Wait on the task's latest state until every key is answered, asking again when the
    /// store lost the questions; [`ToolError::Stopped`] when the task ends first.
    async fn wait_for_answers(
        &self,
        keys: &[String],
        fence: u64,
        encoded: &[(String, String)],
    ) -> Result<Vec<(String, Value)>, ToolError> {
        let i = &self.inner;
        let mut latest = i.latest.clone();
        loop {
            let seen = Seen::of(latest.borrow_and_update().as_ref(), keys);
            match seen {
                Seen::Ended => return Err(ToolError::Stopped),
                Seen::Answered(list) => return Ok(decode_answers(list)),
                // Ask again: the same keys and requests again are no change.
                Seen::Lost => {
                    if let Some(answers) = self.ask(fence, encoded).await? {
                        return Ok(answers);
                    }
                }
                Seen::Nothing => {}
            }
            tokio::select! {
                changed = latest.changed() => if changed.is_err() { return Err(ToolError::Stopped) },
                () = i.stop.cancelled() => return Err(ToolError::Stopped),
            }
        }
    }

    /// Resolves when the client cancelled the task; the runner stops the handler right after.
    pub async fn cancelled(&self) {
        self.inner.stop.cancelled().await;
    }

    /// Whether the client cancelled the task.
    pub fn is_cancelled(&self) -> bool {
        self.inner.stop.is_cancelled()
    }
}

/// What a task's latest state says of the questions a parked handler waits on.
enum Seen {
    Nothing,
    Ended,
    Answered(Vec<(String, String)>),
    Lost,
}

impl Seen {
    fn of(rec: Option<&TaskRecord>, keys: &[String]) -> Seen {
        match rec {
            None => Seen::Nothing,
            Some(rec) if rec.is_terminal() => Seen::Ended,
            Some(rec) if keys.iter().all(|k| rec.answers.contains_key(k)) => Seen::Answered(
                keys.iter()
                    .map(|k| (k.clone(), rec.answers[k].clone()))
                    .collect(),
            ),
            // A question the store holds neither asked nor answered was lost (a Redis
            // failover to a replica without it) or this state predates it.
            Some(rec)
                if keys
                    .iter()
                    .any(|k| !rec.inputs.contains_key(k) && !rec.answers.contains_key(k)) =>
            {
                Seen::Lost
            }
            Some(_) => Seen::Nothing,
        }
    }
}

fn decode_answers(list: Vec<(String, String)>) -> Vec<(String, Value)> {
    list.into_iter()
        .map(|(k, v)| {
            let value = serde_json::from_str(&v).unwrap_or(Value::Null);
            (k, value)
        })
        .collect()
}

/// Marks a handler as waiting for input while alive (the flag, and the gauge).
struct Parked<'a>(&'a std::sync::atomic::AtomicBool, opentelemetry::KeyValue);

impl<'a> Parked<'a> {
    fn set(flag: &'a std::sync::atomic::AtomicBool, queue: &str) -> Self {
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
        let [attr] = metrics::queue_attrs(queue);
        metrics::get()
            .tasks_input_required
            .add(1, std::slice::from_ref(&attr));
        Parked(flag, attr)
    }
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.0.store(false, std::sync::atomic::Ordering::SeqCst);
        metrics::get()
            .tasks_input_required
            .add(-1, std::slice::from_ref(&self.1));
    }
}
