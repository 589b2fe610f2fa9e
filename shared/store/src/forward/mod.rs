//! Prompts and resources of `[[upstream]]` servers, forwarded to the workers that hold the
//! upstream sessions: which upstreams live workers serve them for ([`UpstreamAdvert`] in
//! `mcpt:upstreams`), and the request/reply channel a gateway uses to have one of those
//! workers ask its upstream, so gateways hold no upstream session.
//!
//! A gateway pushes a [`Forwarded`] request on `mcpt:forward:{NAME}` (`LPUSH`, the list's
//! expiry renewed, so requests no worker takes do not stay), then waits for the answer on
//! a list of its own, `mcpt:forwarded:{ID}` (`BLPOP` on a connection of its own: a blocked
//! command holds every later one of its connection). A worker fronting `NAME` pops requests
//! ([`ForwardReader`], `BRPOP`, its own connection too), drops those whose deadline passed
//! (their gateway gave up), asks its upstream and pushes the answer ([`Store::answer_forwarded`]).
//!
//! At most once: a worker that dies holding a request leaves its gateway to time out. The
//! forwarded methods only read, so the client may simply ask again.

use std::collections::HashMap;
use std::time::Duration;

use mcp_tasks_protocol::jsonrpc::ErrorObject;
use redis::AsyncCommands as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::handles::Fleet;
use crate::reader::KeyCon;
use crate::{Store, StoreError, StoreResult, keys};

mod waiter;

pub use waiter::{ForwardLimits, Forwarder, MAX_QUEUED, Outcome};

/// One `[[upstream]]` entry whose prompts or resources a worker serves, as advertised in
/// `mcpt:upstreams` (renewed with the tool adverts, stale like them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpstreamAdvert {
    /// The entry's `name`: also the name of its request list.
    pub name: String,
    /// The entry's `prefix`, put before each prompt name.
    pub prefix: String,
    /// `prompts = true`: `prompts/list` and `prompts/get` are forwarded to it.
    pub prompts: bool,
    /// `resources = true`: `resources/list`, `resources/templates/list` and
    /// `resources/read` are forwarded to it.
    pub resources: bool,
    /// Its prompts' names upstream (without the prefix), as listed at worker start.
    #[serde(default)]
    pub prompt_names: Vec<String>,
    /// Its resources' URIs, as listed at worker start.
    #[serde(default)]
    pub resource_uris: Vec<String>,
    /// Its resource templates' `uriTemplate`s, as listed at worker start.
    #[serde(default)]
    pub resource_templates: Vec<String>,
    /// Position among the worker's entries (ties broken by name): the order of list pages.
    pub rank: u32,
    /// When the advertising worker last confirmed it, ms since the epoch.
    pub heartbeat_ms: i64,
}

/// A request forwarded to a worker fronting an upstream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Forwarded {
    /// Tells its answer from the others on the reply list.
    pub id: String,
    /// The reply list of the waiting gateway (`mcpt:forwarded:{GATEWAY}`).
    pub reply_to: String,
    /// The upstream method (`prompts/get`, …).
    pub method: String,
    /// Its params as the upstream takes them (prompt names without our prefix).
    pub params: Value,
    /// After this (ms since the epoch) the gateway no longer waits: drop the request.
    pub deadline_ms: i64,
}

/// The upstream's answer to a [`Forwarded`] request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ForwardReply {
    /// Its result.
    Result(Value),
    /// A JSON-RPC error (the upstream's, or why it could not be asked).
    Error(ErrorObject),
}

/// An answer as it rides on a gateway's reply list.
#[derive(Debug, Serialize, Deserialize)]
struct Answer {
    id: String,
    reply: ForwardReply,
}

/// How long an answer waits for its gateway, and unclaimed requests for a worker, at most
/// beyond their deadline.
const KEEP_MS: i64 = 60_000;

impl Store {
    /// Answer the forwarded `request` on its gateway's reply list (kept a minute past the
    /// last answer, so the list of a gateway that went away does not stay).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn answer_forwarded(
        &self,
        request: &Forwarded,
        reply: ForwardReply,
    ) -> StoreResult<()> {
        let answer = Answer {
            id: request.id.clone(),
            reply,
        };
        let text =
            serde_json::to_string(&answer).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let mut con = self.con.clone();
        let _: () = redis::pipe()
            .lpush(&request.reply_to, text)
            .ignore()
            .pexpire(&request.reply_to, KEEP_MS)
            .ignore()
            .query_async(&mut con)
            .await?;
        Ok(())
    }

    /// A reader of the requests forwarded to `upstream`.
    pub fn forward_reader(&self, upstream: &str) -> ForwardReader {
        ForwardReader {
            con: KeyCon::new(self.backend().clone()),
            key: keys::forward_key(upstream),
        }
    }
}

impl Fleet<'_> {
    /// Advertise (or renew) upstreams.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn advertise_upstreams(self, adverts: &[UpstreamAdvert]) -> StoreResult<()> {
        let items: Vec<(String, String)> = adverts
            .iter()
            .filter_map(|a| Some((a.name.clone(), serde_json::to_string(a).ok()?)))
            .collect();
        if items.is_empty() {
            return Ok(());
        }
        let mut con = self.store.con.clone();
        let _: () = con.hset_multiple(keys::UPSTREAMS_KEY, &items).await?;
        Ok(())
    }

    /// All upstream advertisements, live or stale (callers filter by heartbeat).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn upstream_adverts(self) -> StoreResult<Vec<UpstreamAdvert>> {
        let mut con = self.store.con.clone();
        let all: HashMap<String, String> = con.hgetall(keys::UPSTREAMS_KEY).await?;
        Ok(all
            .values()
            .filter_map(|v| serde_json::from_str(v).ok())
            .collect())
    }
}

/// How close to its deadline a request is no longer started: the gateway would give up
/// before the answer came, and an upstream call cut off midway costs the upstream session.
pub const MIN_TIME_LEFT: Duration = Duration::from_secs(1);

/// Pops the requests forwarded to one upstream (a worker's, on a connection of its own).
pub struct ForwardReader {
    con: KeyCon,
    key: String,
}

impl ForwardReader {
    /// The next request, waiting up to `block` (at most [`crate::READ_BLOCK`]); requests
    /// with less than [`MIN_TIME_LEFT`] before their deadline are dropped on the way
    /// (their gateways report them taken but unanswered).
    ///
    /// # Errors
    /// Redis unavailable, or a request this version cannot read.
    pub async fn next(&mut self, block: Duration) -> StoreResult<Option<Forwarded>> {
        let block = block.min(crate::READ_BLOCK).as_secs_f64().max(0.01);
        let popped: Option<(String, String)> = self
            .con
            .query(redis::cmd("BRPOP").arg(&self.key).arg(block))
            .await?;
        let Some((_, text)) = popped else {
            return Ok(None);
        };
        let request: Forwarded =
            serde_json::from_str(&text).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let left = request.deadline_ms - mcp_tasks_protocol::time::now_millis();
        if left < i64::try_from(MIN_TIME_LEFT.as_millis()).unwrap_or(i64::MAX) {
            tracing::debug!(rpc.method = %request.method, "a forwarded request too close to its deadline was skipped");
            return Ok(None);
        }
        Ok(Some(request))
    }
}
