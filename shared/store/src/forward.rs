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
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{
    Backend, CONNECT_TIMEOUT, Con, RESPONSE_TIMEOUT, Store, StoreError, StoreResult, keys,
};

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
    /// Names the reply list.
    pub id: String,
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

/// How long an answer waits for its gateway, and unclaimed requests for a worker, at most
/// beyond their deadline.
const KEEP_MS: i64 = 60_000;

impl Store {
    /// Advertise (or renew) upstreams.
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn advertise_upstreams(&self, adverts: &[UpstreamAdvert]) -> StoreResult<()> {
        let items: Vec<(String, String)> = adverts
            .iter()
            .filter_map(|a| Some((a.name.clone(), serde_json::to_string(a).ok()?)))
            .collect();
        if items.is_empty() {
            return Ok(());
        }
        let mut con = self.con.clone();
        let _: () = con.hset_multiple(keys::UPSTREAMS_KEY, &items).await?;
        Ok(())
    }

    /// All upstream advertisements, live or stale (callers filter by heartbeat).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn upstream_adverts(&self) -> StoreResult<Vec<UpstreamAdvert>> {
        let mut con = self.con.clone();
        let all: HashMap<String, String> = con.hgetall(keys::UPSTREAMS_KEY).await?;
        Ok(all
            .values()
            .filter_map(|v| serde_json::from_str(v).ok())
            .collect())
    }

    /// Have a worker fronting `upstream` send it `method` with `params`, and wait up to
    /// `wait` for the answer; `None` when none came in time.
    ///
    /// # Errors
    /// Redis unavailable, or an answer this version cannot read.
    pub async fn forward(
        &self,
        upstream: &str,
        method: &str,
        params: Value,
        wait: Duration,
    ) -> StoreResult<Option<ForwardReply>> {
        let wait_ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
        let request = Forwarded {
            id: uuid::Uuid::new_v4().simple().to_string(),
            method: method.to_owned(),
            params,
            deadline_ms: mcp_tasks_protocol::time::now_millis().saturating_add(wait_ms),
        };
        let text =
            serde_json::to_string(&request).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        // Connect first: a gateway that cannot wait must not leave work behind.
        let mut waiting = self.blocking(wait).await?;
        let key = keys::forward_key(upstream);
        let mut con = self.con.clone();
        let _: () = redis::pipe()
            .lpush(&key, text)
            .ignore()
            .pexpire(&key, wait_ms.saturating_add(KEEP_MS))
            .ignore()
            .query_async(&mut con)
            .await?;
        let popped: Option<(String, String)> = waiting
            .blpop(
                keys::forwarded_key(&request.id),
                wait.as_secs_f64().max(0.01),
            )
            .await?;
        popped
            .map(|(_, text)| {
                serde_json::from_str(&text).map_err(|e| StoreError::Corrupt(e.to_string()))
            })
            .transpose()
    }

    /// Answer the forwarded request `id` (kept a minute for its gateway).
    ///
    /// # Errors
    /// Redis unavailable.
    pub async fn answer_forwarded(&self, id: &str, reply: &ForwardReply) -> StoreResult<()> {
        let text = serde_json::to_string(reply).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let key = keys::forwarded_key(id);
        let mut con = self.con.clone();
        let _: () = redis::pipe()
            .lpush(&key, text)
            .ignore()
            .pexpire(&key, KEEP_MS)
            .ignore()
            .query_async(&mut con)
            .await?;
        Ok(())
    }

    /// A reader of the requests forwarded to `upstream`.
    ///
    /// # Errors
    /// Redis unreachable.
    pub async fn forward_reader(&self, upstream: &str) -> StoreResult<ForwardReader> {
        Ok(ForwardReader {
            con: self.blocking(crate::READ_BLOCK).await?,
            key: keys::forward_key(upstream),
        })
    }

    /// A connection of its own for commands blocking up to `block`.
    async fn blocking(&self, block: Duration) -> StoreResult<Con> {
        let timeout = block + RESPONSE_TIMEOUT;
        match self.backend() {
            backend @ (Backend::Single(_) | Backend::Sentinel(_)) => {
                let client = backend.single().await.expect("one Redis")?;
                let config = ConnectionManagerConfig::new()
                    .set_response_timeout(Some(timeout))
                    .set_connection_timeout(Some(CONNECT_TIMEOUT));
                Ok(Con::Single(
                    ConnectionManager::new_with_config(client, config).await?,
                ))
            }
            Backend::Cluster { seeds } => {
                let client = redis::cluster::ClusterClientBuilder::new(seeds.clone())
                    .connection_timeout(CONNECT_TIMEOUT)
                    .response_timeout(timeout)
                    .build()?;
                Ok(Con::Cluster(client.get_async_connection().await?))
            }
        }
    }
}

/// Pops the requests forwarded to one upstream (a worker's, on a connection of its own).
pub struct ForwardReader {
    con: Con,
    key: String,
}

impl ForwardReader {
    /// The next request, waiting up to `block` (at most [`crate::READ_BLOCK`]); requests
    /// whose deadline passed are dropped on the way.
    ///
    /// # Errors
    /// Redis unavailable, or a request this version cannot read.
    pub async fn next(&mut self, block: Duration) -> StoreResult<Option<Forwarded>> {
        let block = block.min(crate::READ_BLOCK).as_secs_f64().max(0.01);
        let popped: Option<(String, String)> = self.con.brpop(&self.key, block).await?;
        let Some((_, text)) = popped else {
            return Ok(None);
        };
        let request: Forwarded =
            serde_json::from_str(&text).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        if request.deadline_ms < mcp_tasks_protocol::time::now_millis() {
            return Ok(None);
        }
        Ok(Some(request))
    }
}
