//! Tool advertisements: what a live worker offers, read by gateways for `tools/list` and
//! for deciding how to run a `tools/call`.

use std::collections::{BTreeMap, HashMap};

use redis::AsyncCommands as _;

use serde::{Deserialize, Serialize};

use mcp_tasks_protocol::meta::Capability;
use mcp_tasks_protocol::tasks::InputRequest;
use mcp_tasks_protocol::tools::Tool;

use crate::{StoreResult, keys};

/// How the server runs a call of a tool (ARCHITECTURE.md, "tools/call").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// Never a task: the gateway waits for the result.
    Sync,
    /// Run as a task; answer synchronously if it finishes within a short budget.
    Auto,
    /// A task when the request declares the extension, else a synchronous call.
    Task,
    /// Only as a task: without the extension the call gets -32021 (T-04).
    TaskOnly,
}

/// Client capabilities a tool needs, as advertised (serializable names for [`Capability`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Needs {
    /// Form-mode elicitation.
    Elicitation,
    /// URL-mode elicitation.
    ElicitationUrl,
    /// Sampling.
    Sampling,
    /// Roots.
    Roots,
}

impl From<Needs> for Capability {
    fn from(n: Needs) -> Capability {
        match n {
            Needs::Elicitation => Capability::ElicitationForm,
            Needs::ElicitationUrl => Capability::ElicitationUrl,
            Needs::Sampling => Capability::Sampling,
            Needs::Roots => Capability::Roots,
        }
    }
}

/// One tool as a worker advertises it in `mcpt:tools`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolAdvert {
    /// The `tools/list` entry.
    pub tool: Tool,
    /// Queue (stream) its jobs go to.
    pub queue: String,
    /// Execution policy.
    pub policy: Policy,
    /// Client capabilities a call must declare (checked before any task exists, T-45).
    #[serde(default)]
    pub needs: Vec<Needs>,
    /// Input the call must carry before a task is created (MRTR round, T-15): key → request.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pre_input: BTreeMap<String, InputRequest>,
    /// Keep running when the caller of a synchronous call goes away (2025 sessions).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub outlives_caller: bool,
    /// The priority of its jobs unless a call asks another.
    #[serde(default, skip_serializing_if = "crate::Priority::is_normal")]
    pub priority: crate::Priority,
    /// Task lifetime in ms.
    pub ttl_ms: u64,
    /// Suggested poll interval in ms.
    pub poll_interval_ms: u64,
    /// Position in `tools/list` (ties broken by name), so the order is deterministic.
    pub rank: u32,
    /// When the advertising worker last confirmed it, ms since the epoch.
    pub heartbeat_ms: i64,
}

/// How long an advertisement stays live without a heartbeat.
pub const ADVERT_STALE_MS: i64 = 15_000;

/// How often workers renew their advertisements.
pub const HEARTBEAT_INTERVAL_MS: u64 = 5_000;

impl crate::Fleet<'_> {
    /// Advertise (or renew) tools.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn advertise(self, adverts: &[ToolAdvert]) -> StoreResult<()> {
        let items: Vec<(String, String)> = adverts
            .iter()
            .filter_map(|a| Some((a.tool.name.clone(), serde_json::to_string(a).ok()?)))
            .collect();
        if items.is_empty() {
            return Ok(());
        }
        let mut con = self.store.con.clone();
        let _: () = con.hset_multiple(keys::TOOLS_KEY, &items).await?;
        Ok(())
    }

    /// All advertisements, live or stale (callers filter by heartbeat).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn adverts(self) -> StoreResult<Vec<ToolAdvert>> {
        let mut con = self.store.con.clone();
        let all: HashMap<String, String> = con.hgetall(keys::TOOLS_KEY).await?;
        Ok(all
            .values()
            .filter_map(|v| serde_json::from_str(v).ok())
            .collect())
    }
}
