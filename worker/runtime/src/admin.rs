//! The worker's own small HTTP listener (`MCPT_ADMIN_ADDR`): `GET /healthz` (the process
//! answers), `GET /readyz` (Redis answers and the worker is not stopping) and `GET /metrics`
//! (Prometheus text). It serves no MCP; the gateway does.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use mcp_tasks_shared::metrics;
use mcp_tasks_store::Store;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// How often the queue gauges are refreshed from Redis.
const DEPTH_EVERY: Duration = Duration::from_secs(5);

/// Serve the admin routes on `listener` until `stop` fires. `stopping` reports not-ready
/// from the start of a shutdown.
pub(crate) async fn serve(
    listener: TcpListener,
    store: Store,
    stopping: CancellationToken,
    stop: CancellationToken,
) {
    loop {
        let (stream, _) = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "admin listener cannot accept");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let (store, stopping) = (store.clone(), stopping.clone());
        let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
            let (store, stopping) = (store.clone(), stopping.clone());
            async move { Ok::<_, Infallible>(route(&req, &store, &stopping).await) }
        });
        tokio::spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "admin connection ended with an error");
            }
        });
    }
}

async fn route<B>(
    req: &Request<B>,
    store: &Store,
    stopping: &CancellationToken,
) -> Response<Full<Bytes>> {
    let text = |status: StatusCode, body: &'static str| {
        let mut res = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
        *res.status_mut() = status;
        res.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        res
    };
    if req.method() != Method::GET {
        let mut res = text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
        res.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET"));
        return res;
    }
    match req.uri().path() {
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" if !stopping.is_cancelled() && store.ping().await.is_ok() => {
            text(StatusCode::OK, "ready\n")
        }
        "/readyz" => text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n"),
        "/metrics" => {
            let mut res = Response::new(Full::new(Bytes::from(
                mcp_tasks_shared::telemetry::prometheus_text(),
            )));
            res.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            res
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

/// Sample each queue's length, lag and pending count for the queue gauges until `stop`.
pub(crate) async fn sample_depths(store: Store, queues: Vec<String>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(DEPTH_EVERY);
    while mcp_tasks_shared::shutdown::every(&mut tick, &stop).await {
        for queue in &queues {
            match store.fleet().queue_depth(queue).await {
                Ok(depth) => metrics::set_queue_depth(queue, depth),
                Err(e) => {
                    tracing::debug!(queue.name = %queue, error = %e, "cannot sample queue depth");
                    metrics::forget_queue_depth(queue);
                }
            }
        }
    }
}
