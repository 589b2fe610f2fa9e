//! The public API for tool authors: implement [`Tool`], describe it with a [`ToolSpec`].
//! How handlers behave under failures (they may run more than once) is on [`Tool`].

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use mcp_tasks_protocol::jsonrpc::{ErrorObject, INTERNAL_ERROR};
use mcp_tasks_protocol::tasks::InputRequest;
use mcp_tasks_protocol::tools::{CallToolResult, Tool as WireTool};
use mcp_tasks_store::Priority;
use mcp_tasks_store::registry::{Needs, Policy};
use serde_json::Value;

use crate::context::TaskContext;

/// What a handler returns.
pub type ToolFuture = Pin<Box<dyn Future<Output = Result<CallToolResult, ToolError>> + Send>>;

/// A tool a worker can run.
///
/// # Handlers may run more than once
///
/// Execution is at-least-once: if a worker dies while a handler runs (or shuts down before it
/// finishes), another worker runs the same job again from the start, with a new fencing
/// token; the earlier run can no longer write the task. Write handlers so a second run is
/// harmless (idempotent side effects, or side effects keyed by [`TaskContext::task_id`]).
///
/// Input requests replay: a handler asks with a key ([`TaskContext::input`]); a key that was
/// already answered in an earlier run returns the stored answer at once, without asking the
/// client again, and a key still outstanding keeps waiting for the same answer. Use fixed
/// keys in a fixed order (`"confirm"`, `"step-2"`), never random ones, and never reuse a key
/// for a different question (T-28).
///
/// # Cancellation
///
/// When the client cancels a running task, the runner drops the handler's future and ends
/// the task `cancelled`; cleanup belongs in `Drop` guards. [`TaskContext::cancelled`] lets a
/// handler notice first (e.g. to stop a child process gracefully). A task whose TTL passes
/// while its handler runs ends `failed` ("Task expired before completion") the same way.
pub trait Tool: Send + Sync + 'static {
    /// Name, schema and execution policy, advertised to gateways.
    fn spec(&self) -> ToolSpec;

    /// Run one call. `args` already passed the spec's input schema.
    fn call(&self, ctx: TaskContext, args: Value) -> ToolFuture;
}

/// Why a handler did not produce a result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ToolError {
    /// A JSON-RPC error: the task ends `failed` with it (T-21). Tool-level failures are
    /// results with `isError: true` instead ([`CallToolResult::error_text`]).
    #[error("{}", .0.message)]
    Protocol(ErrorObject),
    /// The task no longer needs this run (cancelled, expired, or taken over by another
    /// worker). Return it with `?`; the runner settles the task.
    #[error("task stopped")]
    Stopped,
    /// A failure worth another try (a flaky backend, a quota). With attempts left under
    /// the tool's [`RetryPolicy`], the job waits (in Redis, holding no worker slot) and
    /// runs again; otherwise, or without a policy, the task ends with
    /// [`Retry::last`] (a `completed` result) or fails with the reason.
    #[error("{}", .0.reason)]
    Retryable(Box<Retry>),
}

/// What a [`ToolError::Retryable`] carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Retry {
    /// Why, for the status message (`retrying in 4s (attempt 2 of 3): REASON`).
    pub reason: String,
    /// The least wait the failure asked for (an HTTP `Retry-After`), instead of the
    /// policy's backoff when longer.
    pub after: Option<Duration>,
    /// The result the task ends with when no attempt is left; `None`: it fails (-32603)
    /// with the reason.
    pub last: Option<CallToolResult>,
}

/// How a tool's retryable failures are tried again: up to `attempts` runs in all, waiting
/// `initial`, then twice as long each time up to `max`, each wait drawn between half and
/// all of that (jitter, so failed calls do not come back in step).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Runs in all, the first included (at least 1).
    pub attempts: u32,
    /// The first wait.
    pub initial: Duration,
    /// The longest wait.
    pub max: Duration,
}

impl RetryPolicy {
    /// The wait after failed attempt `attempt` (1-based), before jitter.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(32);
        self.initial
            .saturating_mul(1u32 << doublings.min(31))
            .min(self.max)
    }

    /// [`RetryPolicy::backoff`] with jitter: between half and all of it, at random.
    pub fn wait(&self, attempt: u32) -> Duration {
        let full = self.backoff(attempt);
        let half = full / 2;
        let spread = u64::try_from((full - half).as_millis()).unwrap_or(u64::MAX);
        let random = u64::try_from(uuid::Uuid::new_v4().as_u128() >> 64).unwrap_or(0);
        half + Duration::from_millis(if spread == 0 {
            0
        } else {
            random % (spread + 1)
        })
    }

    /// The wait before the attempt after `attempt`: [`RetryPolicy::wait`], or longer when
    /// the failure asked for `after` (an HTTP `Retry-After`), but never longer than `max`:
    /// a server cannot park a task for a day with one header.
    pub fn wait_after(&self, attempt: u32, after: Option<Duration>) -> Duration {
        self.wait(attempt)
            .max(after.unwrap_or_default().min(self.max))
    }
}

impl ToolError {
    /// An internal error (-32603) with `message`.
    pub fn internal(message: impl Into<String>) -> Self {
        ToolError::Protocol(ErrorObject::new(INTERNAL_ERROR, message))
    }

    /// A retryable failure (see [`ToolError::Retryable`]) that fails the task with
    /// `reason` when no attempt is left.
    pub fn retryable(reason: impl Into<String>) -> Self {
        ToolError::Retryable(Box::new(Retry {
            reason: reason.into(),
            after: None,
            last: None,
        }))
    }
}

/// How a tool is listed and run.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    /// The `tools/list` entry.
    pub tool: WireTool,
    /// Queue its jobs use (default `default`).
    pub queue: String,
    /// Priority of its jobs unless a call asks another (default `normal`): workers take
    /// a queue's `high` jobs before its `normal` ones, and those before `low` ones.
    pub priority: Priority,
    /// Execution policy (default [`Policy::Task`]).
    pub policy: Policy,
    /// Client capabilities a call must declare.
    pub needs: Vec<Needs>,
    /// Input asked for before a task exists (MRTR), answered in [`TaskContext::pre_input`].
    pub pre_input: BTreeMap<String, InputRequest>,
    /// Task lifetime (default `MCPT_DEFAULT_TTL`).
    pub ttl: Option<Duration>,
    /// Suggested poll interval (default `MCPT_POLL_INTERVAL`).
    pub poll_interval: Option<Duration>,
    /// Keep running when a synchronous caller goes away (default: such a call is cancelled).
    pub outlives_caller: bool,
    /// How [`ToolError::Retryable`] failures are tried again (default: never).
    pub retry: Option<RetryPolicy>,
    /// How its tasks that fail for good are kept for operators (default: `failed` ones,
    /// a week).
    pub dead_letters: DeadLetterPolicy,
    /// Largest result stored, in bytes of its JSON (default `MCPT_MAX_RESULT_BYTES`); a
    /// larger one fails the task with an error naming the limit, and nothing is stored.
    pub max_result_bytes: Option<usize>,
    /// At most this many calls run at once across the fleet (per value of
    /// `concurrency_key`'s argument, when set); the others wait, holding no worker slot.
    pub max_running: Option<u32>,
    /// The argument whose value `max_running` and `rate` count per (`"repo"`: at most N
    /// per repo).
    pub concurrency_key: Option<String>,
    /// At most this many starts per window across the fleet (per `concurrency_key` value);
    /// the others wait, holding no worker slot.
    pub rate: Option<Rate>,
    /// The input schema is another server's, which validates its own input (an upstream
    /// MCP server's tool): keywords the gateway's validator does not enforce are then
    /// allowed, and left to that server. Ours (`false`, the default) must use only
    /// keywords the validator enforces.
    pub schema_checked_upstream: bool,
}

/// How a tool's tasks that fail for good (after their last attempt) are kept as dead
/// letters, listed by `mcp-tasks dead` and the console and run again by `mcp-tasks redrive`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadLetterPolicy {
    /// How long a letter stays listed; `None`: not kept.
    pub keep: Option<Duration>,
    /// Keep tasks that completed with a tool error (`isError`) too, not only `failed` ones.
    pub tool_errors: bool,
}

/// How long a dead letter stays listed unless its tool says otherwise: a week.
pub const DEFAULT_DEAD_LETTER_KEEP: Duration = Duration::from_secs(7 * 24 * 3600);

impl Default for DeadLetterPolicy {
    fn default() -> Self {
        DeadLetterPolicy {
            keep: Some(DEFAULT_DEAD_LETTER_KEEP),
            tool_errors: false,
        }
    }
}

/// A start rate: `starts` per `per` (`"10/min"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Starts allowed in any window of `per`.
    pub starts: u32,
    /// The window.
    pub per: Duration,
}

/// A `rate` that is not starts per window ([`Rate::parse`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?}: expected starts per window, like \"10/min\", \"2/s\" or \"5/10s\"")]
pub struct RateError {
    /// The text as given.
    pub text: String,
}

impl Rate {
    /// `N/s`, `N/min`, `N/h`, `N/day`, or `N/` and a duration (`5/10s`).
    ///
    /// # Errors
    /// Anything else, or `N` or the window zero.
    pub fn parse(text: &str) -> Result<Rate, RateError> {
        let bad = || RateError {
            text: text.to_owned(),
        };
        let (n, per) = text.trim().split_once('/').ok_or_else(bad)?;
        let starts: u32 = n.trim().parse().ok().filter(|n| *n >= 1).ok_or_else(bad)?;
        let per = match per.trim() {
            "s" | "sec" | "second" => Duration::from_secs(1),
            "m" | "min" | "minute" => Duration::from_secs(60),
            "h" | "hour" => Duration::from_secs(3600),
            "d" | "day" => Duration::from_secs(86_400),
            other => mcp_tasks_shared::config::parse_duration(other)
                .filter(|d| !d.is_zero())
                .ok_or_else(bad)?,
        };
        Ok(Rate { starts, per })
    }
}

impl ToolSpec {
    /// A tool named `name` taking arguments described by `input_schema` (root type object).
    pub fn new(name: &str, description: &str, input_schema: Value) -> Self {
        ToolSpec {
            tool: WireTool {
                name: name.to_owned(),
                description: description.to_owned(),
                input_schema,
                extra: serde_json::Map::new(),
            },
            queue: mcp_tasks_shared::config::DEFAULT_QUEUE.to_owned(),
            policy: Policy::Task,
            needs: Vec::new(),
            pre_input: BTreeMap::new(),
            ttl: None,
            poll_interval: None,
            outlives_caller: false,
            retry: None,
            dead_letters: DeadLetterPolicy::default(),
            max_result_bytes: None,
            priority: Priority::Normal,
            max_running: None,
            concurrency_key: None,
            rate: None,
            schema_checked_upstream: false,
        }
    }

    /// Start at most `rate.starts` calls per `rate.per` across the fleet.
    #[must_use]
    pub fn rate(mut self, rate: Rate) -> Self {
        self.rate = Some(rate);
        self
    }

    /// Run at most `n` calls at once across the fleet.
    #[must_use]
    pub fn max_running(mut self, n: u32) -> Self {
        self.max_running = Some(n);
        self
    }

    /// Count [`ToolSpec::max_running`] per value of argument `arg`.
    #[must_use]
    pub fn concurrency_key(mut self, arg: &str) -> Self {
        self.concurrency_key = Some(arg.to_owned());
        self
    }

    /// Try [`ToolError::Retryable`] failures again under `policy`.
    #[must_use]
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// Set the execution policy.
    #[must_use]
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Require a client capability.
    #[must_use]
    pub fn needs(mut self, need: Needs) -> Self {
        self.needs.push(need);
        self
    }

    /// Put the tool's jobs on `queue`.
    #[must_use]
    pub fn queue(mut self, queue: &str) -> Self {
        queue.clone_into(&mut self.queue);
        self
    }

    /// Ask for `request` under `key` before the task is created (an MRTR round).
    #[must_use]
    pub fn pre_input(mut self, key: &str, request: InputRequest) -> Self {
        self.pre_input.insert(key.to_owned(), request);
        self
    }

    /// Task lifetime.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Keep running when the client of a synchronous call disconnects, instead of being
    /// cancelled (for work that must finish anyway, such as a deployment).
    #[must_use]
    pub fn outlives_caller(mut self) -> Self {
        self.outlives_caller = true;
        self
    }

    /// Suggested poll interval.
    #[must_use]
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = Some(interval);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_as_starts_per_window() {
        let r = |t| Rate::parse(t);
        assert_eq!(
            r("10/min"),
            Ok(Rate {
                starts: 10,
                per: Duration::from_secs(60)
            })
        );
        assert_eq!(
            r("2/s"),
            Ok(Rate {
                starts: 2,
                per: Duration::from_secs(1)
            })
        );
        assert_eq!(
            r(" 5/10s "),
            Ok(Rate {
                starts: 5,
                per: Duration::from_secs(10)
            })
        );
        for bad in ["10", "0/min", "x/min", "10/fortnight", "10/0s", "-1/s"] {
            assert!(r(bad).is_err(), "{bad}");
        }
        assert_eq!(
            r("10").map_err(|e| e.to_string()),
            Err(
                "\"10\": expected starts per window, like \"10/min\", \"2/s\" or \"5/10s\""
                    .to_owned()
            )
        );
    }

    #[test]
    fn backoff_doubles_up_to_max_and_jitter_stays_within_half() {
        let p = RetryPolicy {
            attempts: 10,
            initial: Duration::from_secs(1),
            max: Duration::from_secs(60),
        };
        let secs: Vec<u64> = (1..=8).map(|a| p.backoff(a).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(p.backoff(u32::MAX), Duration::from_secs(60));
        for attempt in 1..=8 {
            let w = p.wait(attempt);
            assert!(
                w >= p.backoff(attempt) / 2 && w <= p.backoff(attempt),
                "{w:?}"
            );
        }
    }

    #[test]
    fn retry_after_lengthens_the_wait_up_to_max_only() {
        let p = RetryPolicy {
            attempts: 3,
            initial: Duration::from_millis(10),
            max: Duration::from_secs(30),
        };
        let w = p.wait_after(1, Some(Duration::from_secs(5)));
        assert_eq!(w, Duration::from_secs(5));
        let w = p.wait_after(1, Some(Duration::from_secs(86_400)));
        assert_eq!(w, Duration::from_secs(30));
        assert!(p.wait_after(1, None) <= Duration::from_millis(10));
    }
}
