//! The kill switch: strikes (a tool, or its calls with one argument value, stopped fleet
//! wide by an operator) and the jobs held because of them.
//!
//! - `mcpt:strikes` (hash, [`keys::STRIKES_KEY`]): strike id ([`Strike::id`]) → [`Strike`]
//!   JSON. Written by `mcp-tasks strike` / `restore`; every gateway and worker reads it
//!   whole at most once a second (one `HGETALL`, never one per task).
//! - `mcpt:held:{…}` (hash, [`keys::held_key`], the hash tag of its stream): held stream
//!   entry id → the entry's fields as a JSON array. A worker that reads a job of a struck
//!   tool moves it here (`hold.lua`) instead of running it; a restore puts it back at the
//!   end of its stream (`unhold.lua`), where the next free worker slot runs it.
//! - `mcpt:held:{…}:ends` (zset, [`keys::held_ends_key`]): held entry id → when its task's
//!   TTL ends. Workers drop held jobs past it every [`PRUNE_EVERY`] (`prune_held.lua`).
//!
//! Matching a job against the strikes happens here in Rust ([`Strikes::matching`]); the
//! scripts only move entries.

use std::collections::HashMap;

use redis::AsyncCommands;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::handles::Controls;
use crate::{Job, StoreResult, keys};

/// How often workers drop held jobs whose task's TTL has ended (one script call per
/// stream they serve).
pub const PRUNE_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// One strike: new calls of `tool` (with `arg` = `value`, when given) are refused, its
/// queued jobs held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Strike {
    /// The tool struck.
    pub tool: String,
    /// Only calls whose argument `.0` is `.1` (`--where ARG=VALUE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<(String, String)>,
    /// When it was struck (ms since the epoch).
    pub at_ms: i64,
    /// Whether running calls are cancelled too (`--cancel-running`).
    #[serde(default)]
    pub cancel_running: bool,
}

impl Strike {
    /// Its field in the strikes hash: `TOOL`, or `TOOL ARG=VALUE` (tool names carry no
    /// spaces; a strike is restored by naming the same pair).
    pub fn id(&self) -> String {
        strike_id(&self.tool, self.when.as_ref())
    }

    /// Whether a call of `tool` with `args` falls under this strike. An argument matches
    /// `VALUE` when it is that string, or when its JSON is (`--where n=3` matches `3`).
    pub fn matches(&self, tool: &str, args: &Value) -> bool {
        if self.tool != tool {
            return false;
        }
        let Some((arg, want)) = &self.when else {
            return true;
        };
        match args.get(arg) {
            Some(Value::String(s)) => s == want,
            Some(other) => serde_json::from_str::<Value>(want).is_ok_and(|w| w == *other),
            None => false,
        }
    }

    /// What an operator who struck it is told (`new`: not in force before).
    pub fn struck_message(&self, new: bool) -> String {
        format!(
            "{} {}: new calls are refused and queued jobs held; running ones {}",
            if new { "struck" } else { "struck again" },
            self.describe(),
            if self.cancel_running {
                "are cancelled"
            } else {
                "finish"
            }
        )
    }

    /// `tool NAME`, or `tool NAME where ARG=VALUE`: how messages name it.
    pub fn describe(&self) -> String {
        match &self.when {
            None => format!("tool {}", self.tool),
            Some((arg, value)) => format!("tool {} where {arg}={value}", self.tool),
        }
    }
}

/// The strikes hash field of `tool` (and `when`).
pub fn strike_id(tool: &str, when: Option<&(String, String)>) -> String {
    match when {
        None => tool.to_owned(),
        Some((arg, value)) => format!("{tool} {arg}={value}"),
    }
}

/// `ARG=VALUE` (`--where` of `mcp-tasks strike`, the console's "where" field) as a pair.
///
/// # Errors
/// No `=`, or an empty argument name; the message says so.
pub fn parse_where(text: &str) -> Result<(String, String), StrikeError> {
    match text.split_once('=') {
        Some((arg, value)) if !arg.trim().is_empty() => {
            Ok((arg.trim().to_owned(), value.to_owned()))
        }
        _ => Err(StrikeError::BadWhere(text.to_owned())),
    }
}

/// Why a strike cannot be recorded ([`parse_where`], [`check`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StrikeError {
    /// A `where` without `=` or without an argument name.
    #[error("{0:?}: expected ARG=VALUE, an argument name and the value to match")]
    BadWhere(String),
    /// Empty, or holds white space.
    #[error("{0:?} is not a tool name")]
    BadTool(String),
    /// The `where` names an argument the advertised tool does not have.
    #[error("tool {tool} has no argument {arg:?} to match (its arguments: {})", known_arguments(.known))]
    NoSuchArgument {
        /// The tool.
        tool: String,
        /// The argument named.
        arg: String,
        /// The arguments its adverts declare.
        known: Vec<String>,
    },
}

fn known_arguments(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

/// Whether `strike` can be recorded against the tools `adverts` advertise: `Err` says why
/// not. A tool name with white space is refused; so is a `where` naming no argument of
/// the tool (it would match no call), checked where the tool is advertised with named
/// properties. A tool no worker advertises is accepted: it may be struck before it starts.
///
/// # Errors
/// As above.
pub fn check(strike: &Strike, adverts: &[crate::registry::ToolAdvert]) -> Result<(), StrikeError> {
    let tool = &strike.tool;
    if tool.trim().is_empty() || tool.contains(char::is_whitespace) {
        return Err(StrikeError::BadTool(tool.clone()));
    }
    let schemas: Vec<&Value> = adverts
        .iter()
        .filter(|a| a.tool.name == *tool)
        .map(|a| &a.tool.input_schema)
        .collect();
    if let Some((arg, _)) = &strike.when
        && let Some(names) = argument_names(&schemas)
        && !names.iter().any(|n| n == arg)
    {
        return Err(StrikeError::NoSuchArgument {
            tool: tool.clone(),
            arg: arg.clone(),
            known: names,
        });
    }
    Ok(())
}

/// The argument names the advertised input schemas `schemas` of one tool declare (the
/// union over workers); `None` when there is no advert or one declares no `properties`
/// (then any argument may be passed and none can be refused).
fn argument_names(schemas: &[&Value]) -> Option<Vec<String>> {
    if schemas.is_empty() {
        return None;
    }
    let mut names = Vec::new();
    for schema in schemas {
        for name in schema.get("properties")?.as_object()?.keys() {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
    }
    names.sort();
    Some(names)
}

/// Every strike in force.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Strikes(pub Vec<Strike>);

impl Strikes {
    /// The first strike a call of `tool` with `args` falls under.
    pub fn matching(&self, tool: &str, args: &Value) -> Option<&Strike> {
        self.0.iter().find(|s| s.matches(tool, args))
    }

    /// Whether none is in force.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A job put aside by the kill switch.
#[derive(Debug, Clone)]
pub struct HeldJob {
    /// Its stream.
    pub stream: String,
    /// The entry id it had there (its field in the held hash).
    pub entry: String,
    /// Task id.
    pub task_id: String,
    /// The task's owner digest.
    pub owner: String,
    /// The job, when it decodes.
    pub job: Option<Job>,
}

impl Controls<'_> {
    /// Strike: record `strike` (replacing one with the same id). `true` when it is new.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn strike(self, strike: &Strike) -> StoreResult<bool> {
        let json = serde_json::to_string(strike)
            .map_err(|e| crate::StoreError::Corrupt(format!("strike not encodable: {e}")))?;
        let mut con = self.store.con.clone();
        let added: i64 = con.hset(keys::STRIKES_KEY, strike.id(), json).await?;
        Ok(added == 1)
    }

    /// Lift the strike with id `id`; `true` when there was one.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn lift_strike(self, id: &str) -> StoreResult<bool> {
        let mut con = self.store.con.clone();
        let removed: i64 = con.hdel(keys::STRIKES_KEY, id).await?;
        Ok(removed == 1)
    }

    /// Every strike in force (one `HGETALL`), oldest first; entries this version cannot
    /// read are left out.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn strikes(self) -> StoreResult<Strikes> {
        let mut con = self.store.con.clone();
        let all: HashMap<String, String> = con.hgetall(keys::STRIKES_KEY).await?;
        let mut list: Vec<Strike> = all
            .values()
            .filter_map(|v| serde_json::from_str(v).ok())
            .collect();
        list.sort_by(|a, b| a.at_ms.cmp(&b.at_ms).then_with(|| a.id().cmp(&b.id())));
        Ok(Strikes(list))
    }

    /// Hold delivered job `d` (its tool is struck): off the stream, into the stream's held
    /// hash, the task `working` with status message `message`. `false` when there was
    /// nothing to hold (the task ended or is gone; the entry was acknowledged).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn hold(self, d: &crate::Delivery, message: &str) -> StoreResult<bool> {
        let mut con = self.store.con.clone();
        let key = self.store.layout.task_key(&d.task_id, &d.owner);
        let side = [keys::held_key(&d.stream), keys::held_ends_key(&d.stream)];
        let held: i64 = self
            .store
            .on_delivery(&self.store.scripts.hold, &key, d, &side)
            .arg(message)
            .invoke_async(&mut con)
            .await?;
        Ok(held == 1)
    }

    /// The jobs held on the streams of `queue`.
    ///
    /// TODO-scalability: one `HGETALL` per stream; a strike that holds hundreds of
    /// thousands of jobs would want `HSCAN` pages.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn held(self, queue: &str) -> StoreResult<Vec<HeldJob>> {
        let mut con = self.store.con.clone();
        let mut out = Vec::new();
        for stream in self.store.layout.queue_streams(queue) {
            let all: HashMap<String, String> = con.hgetall(keys::held_key(&stream)).await?;
            for (entry, fields) in all {
                let flat: Vec<String> = serde_json::from_str(&fields).unwrap_or_default();
                let field = |name: &str| {
                    flat.chunks(2)
                        .find(|kv| kv.first().is_some_and(|k| k == name))
                        .and_then(|kv| kv.get(1).cloned())
                };
                let job: Option<Job> = field("job").and_then(|j| serde_json::from_str(&j).ok());
                let owner = crate::jobs::entry_owner(field("owner"), job.as_ref());
                out.push(HeldJob {
                    stream: stream.clone(),
                    entry,
                    task_id: field("task").unwrap_or_default(),
                    owner,
                    job,
                });
            }
        }
        Ok(out)
    }

    /// How many jobs are held on the streams of `queue` (one `HLEN` per stream).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn held_count(self, queue: &str) -> StoreResult<u64> {
        let mut con = self.store.con.clone();
        let mut n = 0;
        for stream in self.store.layout.queue_streams(queue) {
            let len: u64 = con.hlen(keys::held_key(&stream)).await?;
            n += len;
        }
        Ok(n)
    }

    /// Drop the held jobs of `queue` whose task's TTL has ended (their tasks are gone);
    /// how many. One script call per stream, each dropping at most 1,000.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn prune_held(self, queue: &str) -> StoreResult<u64> {
        let mut con = self.store.con.clone();
        let mut n = 0;
        for stream in self.store.layout.queue_streams(queue) {
            let dropped: u64 = self
                .store
                .scripts
                .prune_held
                .key(keys::held_key(&stream))
                .key(keys::held_ends_key(&stream))
                .arg(1000)
                .invoke_async(&mut con)
                .await?;
            n += dropped;
        }
        Ok(n)
    }

    /// Put `job` back at the end of its stream (or drop it when its task ended
    /// meanwhile), with status message `message`; `true` when queued again.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn unhold(self, job: &HeldJob, message: &str) -> StoreResult<bool> {
        let mut con = self.store.con.clone();
        let queued: i64 = self
            .store
            .scripts
            .unhold
            .key(keys::held_key(&job.stream))
            .key(&job.stream)
            .key(self.store.layout.task_key(&job.task_id, &job.owner))
            .key(keys::held_ends_key(&job.stream))
            .arg(self.store.layout.events_channel(&job.task_id))
            .arg(&job.entry)
            .arg(message)
            .invoke_async(&mut con)
            .await?;
        Ok(queued == 1)
    }

    /// Release the jobs held on `queues` that no strike in `strikes` covers any more;
    /// how many went back to their queue.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn release_held(self, queues: &[String], strikes: &Strikes) -> StoreResult<usize> {
        let mut released = 0;
        for queue in queues {
            for job in self.held(queue).await? {
                let struck = job
                    .job
                    .as_ref()
                    .is_some_and(|j| strikes.matching(&j.tool, &j.args).is_some());
                if struck {
                    continue;
                }
                let tool = job.job.as_ref().map_or("?", |j| j.tool.as_str());
                if self
                    .unhold(&job, &format!("queued again: {tool} was restored"))
                    .await?
                {
                    released += 1;
                }
            }
        }
        Ok(released)
    }

    /// Release the held jobs of every queue that no strike in force covers any more (what
    /// a restore does at once, and workers within seconds); how many were queued again.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn release_all_held(self) -> StoreResult<usize> {
        let left = self.strikes().await?;
        let queues = self.store.fleet().queue_names().await?;
        self.release_held(&queues, &left).await
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn strike(when: Option<(&str, &str)>) -> Strike {
        Strike {
            tool: "deploy".into(),
            when: when.map(|(a, v)| (a.into(), v.into())),
            at_ms: 1,
            cancel_running: false,
        }
    }

    #[test]
    fn a_strike_matches_its_tool_and_argument_value() {
        let all = strike(None);
        assert!(all.matches("deploy", &json!({})));
        assert!(!all.matches("build", &json!({})));
        let repo = strike(Some(("repo", "web")));
        assert!(repo.matches("deploy", &json!({"repo": "web"})));
        assert!(!repo.matches("deploy", &json!({"repo": "api"})));
        assert!(!repo.matches("deploy", &json!({})));
        let n = strike(Some(("n", "3")));
        assert!(n.matches("deploy", &json!({"n": 3})));
        assert!(n.matches("deploy", &json!({"n": "3"})));
        assert_eq!(repo.id(), "deploy repo=web");
        assert_eq!(repo.describe(), "tool deploy where repo=web");
    }

    #[test]
    fn where_takes_arg_equals_value() {
        assert_eq!(parse_where("repo=web"), Ok(("repo".into(), "web".into())));
        assert_eq!(parse_where("q=a=b"), Ok(("q".into(), "a=b".into())));
        assert_eq!(parse_where("n="), Ok(("n".into(), String::new())));
        assert!(parse_where("repo").is_err());
        assert!(parse_where("=web").is_err());
    }

    #[test]
    fn argument_names_come_from_the_advertised_schemas() {
        let a = json!({"type": "object", "properties": {"repo": {}, "n": {}}});
        let b = json!({"type": "object", "properties": {"env": {}}});
        let open = json!({"type": "object"});
        assert_eq!(
            argument_names(&[&a, &b]),
            Some(vec!["env".into(), "n".into(), "repo".into()])
        );
        assert_eq!(argument_names(&[&a, &open]), None);
        assert_eq!(argument_names(&[]), None);
    }
}
