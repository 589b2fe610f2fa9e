//! Forwarded requests: a [`Provider`] (an `[[upstream]]` entry serving its prompts or
//! resources) answers the requests gateways push for it. One loop per provider pops them
//! (`mcp_tasks_store::forward`: the channel and why it is at most once) and answers a few
//! at a time; each answer is pushed back for the waiting gateway.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use mcp_tasks_protocol::jsonrpc::{ErrorObject, INTERNAL_ERROR};
use mcp_tasks_protocol::time::now_millis;
use mcp_tasks_store::Store;
use mcp_tasks_store::forward::{ForwardReply, Forwarded, UpstreamAdvert};
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Requests of one provider answered at once; more wait in Redis for this or another
/// worker.
const AT_ONCE: usize = 8;
/// Pause before reconnecting after Redis failed.
const RETRY: Duration = Duration::from_secs(1);

/// What a provider's request answers with.
pub type ProviderFuture = Pin<Box<dyn Future<Output = Result<Value, ErrorObject>> + Send>>;

/// Something besides tools that this worker serves for gateways: an upstream's prompts
/// and resources.
pub trait Provider: Send + Sync {
    /// What gateways are told (`heartbeat_ms` is set by the worker).
    fn advert(&self) -> UpstreamAdvert;

    /// Answer `method` with `params` (already checked by the gateway to be one the advert
    /// offers).
    fn request(&self, method: String, params: Value) -> ProviderFuture;
}

/// Pop and answer `provider`'s requests until `shutdown`; answers run in `tracker`, and
/// a result larger than `max_bytes` (`MCPT_MAX_RESULT_BYTES`) is answered with an error.
pub(crate) async fn serve(
    store: Store,
    provider: Arc<dyn Provider>,
    max_bytes: usize,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    let name = provider.advert().name;
    let permits = Arc::new(Semaphore::new(AT_ONCE));
    // Reconnects by itself after an error.
    let mut reader = store.forward_reader(&name);
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => p.expect("never closed"),
            () = shutdown.cancelled() => return,
        };
        // Stopping during the pop may lose one request: its gateway then times out.
        let next = tokio::select! {
            n = reader.next(mcp_tasks_store::READ_BLOCK) => n,
            () = shutdown.cancelled() => return,
        };
        let request = match next {
            Ok(Some(request)) => request,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(upstream.name = %name, error = %e, "cannot read forwarded requests");
                pause(&shutdown).await;
                continue;
            }
        };
        let (store, provider, name) = (store.clone(), provider.clone(), name.clone());
        tracker.spawn(async move {
            answer(&store, provider.as_ref(), &name, max_bytes, request).await;
            drop(permit);
        });
    }
}

async fn pause(shutdown: &CancellationToken) {
    tokio::select! {
        () = tokio::time::sleep(RETRY) => {}
        () = shutdown.cancelled() => {}
    }
}

/// Ask the provider, and push its answer unless the gateway has given up meanwhile.
async fn answer(
    store: &Store,
    provider: &dyn Provider,
    name: &str,
    max_bytes: usize,
    mut request: Forwarded,
) {
    let method = request.method.clone();
    let params = std::mem::take(&mut request.params);
    let left = u64::try_from(request.deadline_ms - now_millis()).unwrap_or(0);
    let started = std::time::Instant::now();
    let Ok(reply) = tokio::time::timeout(
        Duration::from_millis(left),
        provider.request(method.clone(), params),
    )
    .await
    else {
        tracing::warn!(upstream.name = %name, rpc.method = %method, "forwarded {method} outlived its gateway's wait");
        return;
    };
    let ok = reply.is_ok();
    let reply = match reply {
        Ok(v) => within(v, max_bytes),
        Err(e) => ForwardReply::Error(e),
    };
    if let Err(e) = store.answer_forwarded(&request, reply).await {
        tracing::warn!(upstream.name = %name, rpc.method = %method, error = %e, "cannot answer a forwarded {method}");
        return;
    }
    tracing::debug!(
        upstream.name = %name,
        rpc.method = %method,
        ok,
        duration_ms = started.elapsed().as_millis() as u64,
        "forwarded {method} answered"
    );
}

/// `result`, unless larger than `max_bytes` (`MCPT_MAX_RESULT_BYTES`, as for tool results:
/// an answer that large would pass through Redis and every gateway's memory).
fn within(result: Value, max_bytes: usize) -> ForwardReply {
    match serde_json::to_vec(&result) {
        Ok(bytes) if bytes.len() > max_bytes => ForwardReply::Error(ErrorObject::new(
            INTERNAL_ERROR,
            format!(
                "the upstream's result is {} bytes; at most {max_bytes} are forwarded (MCPT_MAX_RESULT_BYTES)",
                bytes.len()
            ),
        )),
        _ => ForwardReply::Result(result),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_over_the_cap_is_an_error_naming_the_variable() {
        let big = serde_json::json!({ "contents": [{ "text": "x".repeat(100) }] });
        assert!(matches!(within(big.clone(), 1000), ForwardReply::Result(_)));
        let ForwardReply::Error(e) = within(big, 50) else {
            panic!("a result over the cap passed");
        };
        assert_eq!(e.code, INTERNAL_ERROR);
        assert!(e.message.contains("MCPT_MAX_RESULT_BYTES"), "{}", e.message);
    }
}
