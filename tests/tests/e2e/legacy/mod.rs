//! 2025 clients (protocol 2025-11-25 and 2025-06-18) on the same endpoint and the same tasks
//! as 2026-07-28: sessions any gateway accepts, synchronous calls answered on a stream with
//! progress, input requests and keep-alives, and the 2025-11-25 tasks API.
//!
//! The official TypeScript SDK 1.x clients are driven by `tests/legacy/legacy.mjs`
//! ([`official_clients`]); the rest are raw HTTP, through the 2025 session helpers in this
//! file. The tests are in:
//! - [`sessions`]: a session started on one gateway continues on another, and belongs to
//!   its principal;
//! - [`sync_calls`]: synchronous calls that ask, are left or cancelled, and outlive an idle
//!   proxy thanks to keep-alives;
//! - [`tasks_api`]: the 2025-11-25 tasks API and the session's notification stream;
//! - [`official_clients`]: the official 2025 SDK clients against two gateways.

mod official_clients;
mod sessions;
mod sync_calls;
mod tasks_api;

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use mcp_tasks_tests::{Client, Reply, SseStream};
use serde_json::{Value, json};

const WITHIN: Duration = Duration::from_secs(15);

/// A 2025 session on one or more gateways.
struct Session {
    id: String,
    version: &'static str,
}

fn base_headers() -> Vec<(&'static str, &'static str)> {
    vec![
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ]
}

impl Session {
    /// `initialize` on `client`, then `notifications/initialized`.
    async fn start(client: &Client, version: &'static str, caps: Value) -> Result<Session> {
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": caps,
            "clientInfo": {"name": "raw-2025", "version": "1"}}});
        let r = client
            .post_raw(&base_headers(), serde_json::to_vec(&body)?)
            .await?;
        ensure!(r.status == 200, "initialize: {} {}", r.status, r.body);
        ensure!(
            r.body["result"]["protocolVersion"] == version,
            "negotiated {}",
            r.body
        );
        let id = r
            .headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .context("no Mcp-Session-Id")?
            .to_owned();
        let s = Session { id, version };
        let r = s
            .post(
                client,
                &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            )
            .await?;
        ensure!(r.status == 202, "initialized: {}", r.status);
        Ok(s)
    }

    fn headers(&self) -> Vec<(&'static str, &str)> {
        let mut h = base_headers();
        h.push(("mcp-session-id", &self.id));
        h.push(("mcp-protocol-version", self.version));
        h
    }

    async fn post(&self, client: &Client, body: &Value) -> Result<Reply> {
        client
            .post_raw(&self.headers(), serde_json::to_vec(body)?)
            .await
    }

    async fn request(
        &self,
        client: &Client,
        id: u64,
        method: &str,
        params: Value,
    ) -> Result<Reply> {
        self.post(
            client,
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .await
    }

    async fn stream(
        &self,
        client: &Client,
        id: Value,
        method: &str,
        params: Value,
    ) -> Result<SseStream> {
        client
            .post_stream(
                &self.headers(),
                &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
            )
            .await
    }
}

/// Read messages until the response to `id`; returns (messages before it, the response).
async fn until_response(
    stream: &mut SseStream,
    id: &Value,
    within: Duration,
) -> Result<(Vec<Value>, Value)> {
    let mut before = Vec::new();
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(m) = stream.next(left).await else {
            bail!("the stream ended or went quiet before the response; got {before:?}");
        };
        if m.get("method").is_none() && m["id"] == *id {
            return Ok((before, m));
        }
        before.push(m);
    }
}

fn text(response: &Value) -> String {
    response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}
