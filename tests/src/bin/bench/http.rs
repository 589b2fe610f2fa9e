//! The bench's MCP requests: prebuilt JSON-RPC bodies sent through the harness [`Client`]
//! (one keep-alive pool), and the timestamps of the notifications they receive.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, bail};
use bytes::Bytes;
use mcp_tasks_tests::{Client, REQUEST_TIMEOUT, SseStream, caps_tasks, meta, truncate};
use serde_json::Value;

/// MCP over HTTP with one shared keep-alive pool and prebuilt request bodies.
#[derive(Clone)]
pub(crate) struct Http {
    client: Client,
    /// `params._meta` declaring the tasks extension, as JSON text.
    pub(crate) meta: Arc<str>,
    /// `tools/call sleep {"ms":0}`.
    create: Bytes,
}

static NEXT_SUB: AtomicU64 = AtomicU64::new(1);

impl Http {
    pub(crate) fn new(addr: SocketAddr, path: &str, token: Option<&str>) -> Result<Http> {
        let meta: Arc<str> = serde_json::to_string(&meta(&caps_tasks()))?.into();
        let create = call_body(&meta, 0);
        let client = Client::for_load(addr).with_path(path);
        Ok(Http {
            client: match token {
                Some(t) => client.with_token(t),
                None => client,
            },
            meta,
            create,
        })
    }

    /// A JSON-RPC request; its `result` (fails on an HTTP or JSON-RPC error).
    pub(crate) async fn rpc(&self, method: &str, name: Option<&str>, body: Bytes) -> Result<Value> {
        let mut r = self
            .client
            .post_raw(&Client::headers(method, name), body)
            .await
            .with_context(|| method.to_owned())?;
        if r.body.is_null() {
            bail!(
                "{method}: HTTP {}, not JSON: {}",
                r.status,
                String::from_utf8_lossy(&r.raw[..r.raw.len().min(300)])
            );
        }
        if r.status != 200 || r.body.get("error").is_some() {
            bail!("{method}: HTTP {}: {}", r.status, short(&r.body));
        }
        Ok(r.body["result"].take())
    }

    /// `tools/call sleep {"ms":0}`: the new task id.
    pub(crate) async fn create(&self) -> Result<String> {
        self.create_with(self.create.clone()).await
    }

    /// `tools/call sleep {"ms":0}` with a fresh idempotency key in `_meta`: the new task id.
    pub(crate) async fn create_keyed(&self) -> Result<String> {
        static NEXT_KEY: AtomicU64 = AtomicU64::new(1);
        let run = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let n = NEXT_KEY.fetch_add(1, Ordering::Relaxed);
        let meta = self.meta.strip_suffix('}').unwrap_or(&self.meta);
        let keyed = format!(r#"{meta},"io.github.mcp-tasks/idempotencyKey":"bench-{run}-{n}"}}"#);
        self.create_with(call_body(&keyed, 0)).await
    }

    /// `tools/call` with this prebuilt body: the new task id.
    pub(crate) async fn create_with(&self, body: Bytes) -> Result<String> {
        let r = self.rpc("tools/call", Some("sleep"), body).await?;
        match r["taskId"].as_str() {
            Some(id) if r["resultType"] == "task" => Ok(id.to_owned()),
            _ => bail!("tools/call answered without a task handle: {}", short(&r)),
        }
    }

    /// `tasks/cancel`.
    pub(crate) async fn cancel(&self, id: &str) -> Result<()> {
        let meta = &self.meta;
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{{"taskId":"{id}","_meta":{meta}}}}}"#
        );
        self.rpc("tasks/cancel", Some(id), body.into()).await?;
        Ok(())
    }

    /// `tasks/get`: the task's status.
    pub(crate) async fn get(&self, id: &str) -> Result<String> {
        let meta = &self.meta;
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{{"taskId":"{id}","_meta":{meta}}}}}"#
        );
        let r = self.rpc("tasks/get", Some(id), body.into()).await?;
        match r["status"].as_str() {
            Some(s) => Ok(s.to_owned()),
            None => bail!("tasks/get {id} has no status: {}", short(&r)),
        }
    }

    /// Open `subscriptions/listen` for `task` (or for no task ids at all).
    pub(crate) async fn listen(&self, task: Option<&str>) -> Result<SseStream> {
        let ids: Vec<String> = task.into_iter().map(str::to_owned).collect();
        self.listen_all(&ids).await
    }

    /// Open `subscriptions/listen` naming `tasks` (none: `{"notifications":{}}`).
    pub(crate) async fn listen_all(&self, tasks: &[String]) -> Result<SseStream> {
        let sub = NEXT_SUB.fetch_add(1, Ordering::Relaxed);
        let meta = &self.meta;
        let filter = if tasks.is_empty() {
            "{}".to_owned()
        } else {
            serde_json::json!({ "taskIds": tasks }).to_string()
        };
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":"L{sub}","method":"subscriptions/listen","params":{{"notifications":{filter},"_meta":{meta}}}}}"#
        );
        self.client
            .post_stream_raw(&Client::headers("subscriptions/listen", None), body.into())
            .await
            .context("subscriptions/listen")
    }

    /// Wait (up to 20 s) until `tools/list` names the demo tool `sleep`.
    pub(crate) async fn wait_for_sleep_tool(&self) -> Result<()> {
        self.client
            .wait_for_tools(&["sleep"], Duration::from_secs(20))
            .await
            .context(
                "the sleep tool never appeared in tools/list (is a worker with MCPT_TOOLS=demo running?)",
            )
    }
}

/// The next message of a bench stream and when it arrived: [`SseStream::recv`] bounded by
/// [`REQUEST_TIMEOUT`].
pub(crate) async fn next_event(sse: &mut SseStream) -> Result<(Value, SystemTime)> {
    sse.recv(REQUEST_TIMEOUT).await
}

/// The acknowledgement of a bench stream: the task ids it honoured.
pub(crate) async fn ack(sse: &mut SseStream) -> Result<Vec<String>> {
    sse.acknowledged(REQUEST_TIMEOUT).await
}

pub(crate) fn short(v: &Value) -> String {
    truncate(&v.to_string(), 300)
}

/// `tools/call sleep {"ms":ms}` with `_meta` `meta`.
pub(crate) fn call_body(meta: &str, ms: u64) -> Bytes {
    Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"sleep","arguments":{{"ms":{ms}}},"_meta":{meta}}}}}"#
    ))
}

/// `2026-11-29T19:21:24.033Z` → ms since the epoch.
pub(crate) fn parse_rfc3339_ms(ts: &str) -> Option<i64> {
    let (date, time) = ts.split_once('T')?;
    let mut d = date.split('-');
    let (y, m, day): (i64, i64, i64) = (
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
    );
    let mut t = time.trim_end_matches('Z').split(':');
    let (h, min): (i64, i64) = (t.next()?.parse().ok()?, t.next()?.parse().ok()?);
    let sec_part = t.next()?;
    let (secs, frac) = sec_part.split_once('.').unwrap_or((sec_part, "0"));
    let s: i64 = secs.parse().ok()?;
    let ms: i64 = format!("{frac:0<3}")[..3].parse().ok()?;
    // days_from_civil (H. Hinnant).
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + h) * 60 + min) * 60_000 + s * 1000 + ms)
}

pub(crate) fn now_micros(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// Create one task and wait until it completed: the task the get phases read.
pub(crate) async fn completed_task(http: &Http) -> Result<String> {
    let done_id = http.create().await.context("first task")?;
    let t0 = Instant::now();
    while http.get(&done_id).await? != "completed" {
        if t0.elapsed() > REQUEST_TIMEOUT {
            bail!("the first task did not complete within {REQUEST_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(done_id)
}
