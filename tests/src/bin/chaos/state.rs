//! What was observed: each task's [`Track`] (its terminal versions, regressions, notes),
//! the kills and their recovery, and [`Shared`], the state every part of the run shares,
//! with [`Shared::observe`] recording one task state.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mcp_tasks_tests::{Client, Gateway};
use serde_json::Value;

use crate::GATEWAYS;
use crate::args::Args;
use crate::plan::Plan;
use crate::recovery::Direct;

/// One terminal version of a task, as seen on a stream, a poll or the final read.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) status: String,
    pub(crate) updated: String,
    pub(crate) text: Option<String>,
    pub(crate) is_error: bool,
    pub(crate) error: Option<String>,
    pub(crate) source: String,
    pub(crate) at: Duration,
}

impl Seen {
    pub(crate) fn key(&self) -> (&str, &str, Option<&str>, bool, Option<&str>) {
        (
            &self.status,
            &self.updated,
            self.text.as_deref(),
            self.is_error,
            self.error.as_deref(),
        )
    }

    pub(crate) fn describe(&self) -> String {
        let mut s = format!("{} at {}", self.status, self.updated);
        if let Some(t) = &self.text {
            s.push_str(&format!(" text {t:?}"));
        }
        if self.is_error {
            s.push_str(" isError");
        }
        if let Some(e) = &self.error {
            s.push_str(&format!(" error {e}"));
        }
        s
    }
}

pub(crate) fn is_terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled")
}

#[derive(Debug)]
pub(crate) struct Track {
    pub(crate) plan: Plan,
    pub(crate) id: Option<String>,
    pub(crate) submitted_at: Option<Instant>,
    pub(crate) input_seen_at: Option<Instant>,
    pub(crate) answer_started: bool,
    pub(crate) answered_at: Option<Instant>,
    pub(crate) cancel_started: bool,
    pub(crate) cancel_acked_at: Option<Instant>,
    /// Distinct terminal versions, in the order seen.
    pub(crate) terminals: Vec<Seen>,
    pub(crate) first_terminal_at: Option<Instant>,
    /// Newest non-terminal `lastUpdatedAt` seen, with its status.
    pub(crate) newest_open: Option<(String, String)>,
    pub(crate) regressions: Vec<String>,
    pub(crate) last_status: String,
    pub(crate) last_heard: Option<Instant>,
    pub(crate) polling: bool,
    pub(crate) last_poll: Option<Instant>,
    pub(crate) not_found: Vec<String>,
    pub(crate) notes: Vec<String>,
    pub(crate) final_task: Option<Value>,
    pub(crate) final_fence: Option<u64>,
}

impl Track {
    pub(crate) fn new(plan: Plan) -> Track {
        Track {
            plan,
            id: None,
            submitted_at: None,
            input_seen_at: None,
            answer_started: false,
            answered_at: None,
            cancel_started: false,
            cancel_acked_at: None,
            terminals: Vec::new(),
            first_terminal_at: None,
            newest_open: None,
            regressions: Vec::new(),
            last_status: String::new(),
            last_heard: None,
            polling: false,
            last_poll: None,
            not_found: Vec::new(),
            notes: Vec::new(),
            final_task: None,
            final_fence: None,
        }
    }
}

#[derive(Default)]
pub(crate) struct Tasks {
    pub(crate) list: Vec<Track>,
    pub(crate) by_id: HashMap<String, usize>,
    /// Ids submitted but not yet on a listen stream.
    pub(crate) unlistened: Vec<String>,
    pub(crate) terminal: usize,
}

/// A worker SIGKILLed while it held a task; resolved by the recovery watcher.
#[derive(Debug, Clone)]
pub(crate) struct Interrupted {
    pub(crate) index: usize,
    pub(crate) id: String,
    pub(crate) fence: u64,
    pub(crate) killed_at: Instant,
    /// Index into [`Recovery::kills`].
    pub(crate) kill: usize,
}

/// One SIGKILL: what the victim held and how fast its tasks were taken over.
#[derive(Debug, Default)]
pub(crate) struct Kill {
    pub(crate) at: f64,
    pub(crate) label: String,
    pub(crate) held: usize,
    /// Unfinished tasks no worker had started yet (the backlog) at the kill.
    pub(crate) queued: usize,
    pub(crate) recovered_ms: Vec<u64>,
}

#[derive(Default)]
pub(crate) struct Recovery {
    pub(crate) pending: Vec<Interrupted>,
    pub(crate) recovered_ms: Vec<u64>,
    pub(crate) finished_first: usize,
    pub(crate) kills: Vec<Kill>,
}

pub(crate) struct Shared {
    pub(crate) args: Args,
    pub(crate) started: Instant,
    pub(crate) deadline: Instant,
    pub(crate) tasks: Mutex<Tasks>,
    pub(crate) gateways: Vec<Mutex<Client>>,
    pub(crate) recovery: Mutex<Recovery>,
    /// Listen streams and pollers stop when set.
    pub(crate) done: AtomicBool,
    pub(crate) submitting: AtomicBool,
    pub(crate) submitted: AtomicUsize,
    pub(crate) submit_errors: AtomicU64,
    pub(crate) last_submit_error: Mutex<String>,
    pub(crate) kills: AtomicU64,
    pub(crate) gateway_restarts: AtomicU64,
    /// Redis restarts, or primary failovers with `--failover` ([`Args::redis_chaos`] names
    /// them).
    pub(crate) redis_disruptions: AtomicU64,
    pub(crate) streams_open: AtomicU64,
    pub(crate) stream_reopens: AtomicU64,
    pub(crate) redis: Direct,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// The state of a run starting now: every planned task untracked yet, the gateways'
    /// clients, `redis` for the recovery reads.
    pub(crate) fn new(args: &Args, plans: &[Plan], gateways: &[Gateway], redis: Direct) -> Shared {
        let started = Instant::now();
        Shared {
            started,
            deadline: started + args.max_duration,
            tasks: Mutex::new(Tasks {
                list: plans.iter().cloned().map(Track::new).collect(),
                ..Tasks::default()
            }),
            gateways: gateways.iter().map(|g| Mutex::new(g.client())).collect(),
            recovery: Mutex::new(Recovery::default()),
            done: AtomicBool::new(false),
            submitting: AtomicBool::new(true),
            submitted: AtomicUsize::new(0),
            submit_errors: AtomicU64::new(0),
            last_submit_error: Mutex::new(String::new()),
            kills: AtomicU64::new(0),
            gateway_restarts: AtomicU64::new(0),
            redis_disruptions: AtomicU64::new(0),
            streams_open: AtomicU64::new(0),
            stream_reopens: AtomicU64::new(0),
            redis,
            args: args.clone(),
        }
    }

    pub(crate) fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    pub(crate) fn past_deadline(&self) -> bool {
        Instant::now() >= self.deadline
    }

    pub(crate) fn client(&self, k: usize) -> Client {
        lock(&self.gateways[k % GATEWAYS]).clone()
    }

    /// Record a task state (a notification's params or a tasks/get result).
    pub(crate) fn observe(&self, task: &Value, source: &str) {
        let Some(id) = task["taskId"].as_str() else {
            return;
        };
        let status = task["status"].as_str().unwrap_or_default().to_owned();
        let updated = task["lastUpdatedAt"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let now = Instant::now();
        let mut tasks = lock(&self.tasks);
        let Some(&i) = tasks.by_id.get(id) else {
            return;
        };
        let mut newly_terminal = false;
        {
            let t = &mut tasks.list[i];
            t.last_heard = Some(now);
            if is_terminal(&status) {
                let seen = Seen {
                    status: status.clone(),
                    updated: updated.clone(),
                    text: task["result"]["content"][0]["text"]
                        .as_str()
                        .map(str::to_owned),
                    is_error: task["result"]["isError"] == true,
                    error: task.get("error").map(Value::to_string),
                    source: source.to_owned(),
                    at: now - self.started,
                };
                if !t.terminals.iter().any(|s| s.key() == seen.key()) {
                    if let Some((open_at, open_status)) = &t.newest_open
                        && *open_at > updated
                    {
                        t.regressions.push(format!(
                            "{open_status} at {open_at} is newer than terminal {}",
                            seen.describe()
                        ));
                    }
                    newly_terminal = t.terminals.is_empty();
                    if newly_terminal {
                        t.first_terminal_at = Some(now);
                    }
                    t.terminals.push(seen);
                }
                t.last_status = status;
            } else {
                if let Some(term) = t.terminals.iter().find(|s| s.updated < updated) {
                    t.regressions.push(format!(
                        "{status} at {updated} ({source}) after terminal {}",
                        term.describe()
                    ));
                }
                if t.newest_open.as_ref().is_none_or(|(u, _)| *u < updated) {
                    t.newest_open = Some((updated, status.clone()));
                }
                if status == "input_required" && t.input_seen_at.is_none() {
                    t.input_seen_at = Some(now);
                }
                if t.terminals.is_empty() {
                    t.last_status = status;
                }
            }
        }
        if newly_terminal {
            tasks.terminal += 1;
        }
    }

    pub(crate) fn note(&self, i: usize, note: String) {
        lock(&self.tasks).list[i].notes.push(note);
    }
}
