//! Server-sent events: [`SseStream`], an open SSE response read one JSON-RPC message at a
//! time. The bytes are split into events by the workspace's one decoder,
//! [`mcp_tasks_protocol::sse::SseDecoder`] (re-exported by this crate).

use std::time::{Duration, SystemTime};

use anyhow::{Context as _, Result, bail};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use serde_json::Value;

pub use mcp_tasks_protocol::sse::SseDecoder;

/// An open SSE response whose events each carry one JSON-RPC message.
pub struct SseStream {
    body: Incoming,
    parser: SseDecoder,
    /// When the last frame of the body arrived.
    last: SystemTime,
}

impl SseStream {
    /// The stream of a response already known to be SSE.
    pub fn from_response(res: hyper::Response<Incoming>) -> SseStream {
        SseStream {
            body: res.into_body(),
            parser: SseDecoder::new(),
            last: SystemTime::now(),
        }
    }

    /// The next JSON-RPC message, and when the frame completing it arrived (this machine's
    /// clock).
    ///
    /// # Errors
    /// Nothing came within `within`, the stream ended or broke, or an event's data is not
    /// JSON.
    pub async fn recv(&mut self, within: Duration) -> Result<(Value, SystemTime)> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(data) = self.parser.next_data() {
                let v = serde_json::from_str(&data)
                    .with_context(|| format!("undecodable SSE event data {data:?}"))?;
                return Ok((v, self.last));
            }
            let frame = match tokio::time::timeout_at(deadline, self.body.frame()).await {
                Err(_) => bail!("no SSE event within {within:?}"),
                Ok(None) => bail!("the SSE stream ended"),
                Ok(Some(f)) => f.context("reading the SSE stream")?,
            };
            self.last = SystemTime::now();
            if let Ok(data) = frame.into_data() {
                self.parser.push(&data);
            }
        }
    }

    /// The next JSON-RPC message (comments skipped), or `None` when the stream ended or
    /// broke, nothing came within `within`, or the event was not JSON.
    pub async fn next(&mut self, within: Duration) -> Option<Value> {
        self.recv(within).await.ok().map(|(v, _)| v)
    }

    /// Read the first message of a `subscriptions/listen` stream, its acknowledgement, and
    /// return the task ids it honoured.
    ///
    /// # Errors
    /// As [`SseStream::recv`], or the first message is not the acknowledgement.
    pub async fn acknowledged(&mut self, within: Duration) -> Result<Vec<String>> {
        let (v, _) = self.recv(within).await?;
        if v["method"] != "notifications/subscriptions/acknowledged" {
            bail!(
                "listen: first event is not the acknowledgement: {}",
                crate::truncate(&v.to_string(), 300)
            );
        }
        Ok(v["params"]["notifications"]["taskIds"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default())
    }
}
