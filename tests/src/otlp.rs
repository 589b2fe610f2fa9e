//! An OTLP/HTTP receiver for tests: accepts `POST /v1/traces` and `/v1/metrics` as protobuf,
//! keeps what arrived, and draws a trace as a span tree.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use prost::Message as _;

/// One exported span, flattened.
#[derive(Debug, Clone)]
pub struct Span {
    /// `service.name` of the process that sent it.
    pub service: String,
    /// Span name (`otel.name` when set).
    pub name: String,
    /// Hex trace id.
    pub trace_id: String,
    /// Hex span id.
    pub span_id: String,
    /// Hex parent span id; empty for a root.
    pub parent_id: String,
    /// Start, ns since the epoch.
    pub start_ns: u64,
    /// End, ns since the epoch.
    pub end_ns: u64,
    /// Attributes as text.
    pub attributes: BTreeMap<String, String>,
    /// Event messages, in order.
    pub events: Vec<String>,
}

#[derive(Default)]
struct Received {
    spans: Vec<Span>,
    /// `service.name` → metric names it pushed.
    metrics: BTreeMap<String, Vec<String>>,
}

/// The receiver; stops with the runtime.
pub struct Receiver {
    addr: SocketAddr,
    received: Arc<Mutex<Received>>,
}

fn text(v: Option<&AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn service_of(resource: Option<&opentelemetry_proto::tonic::resource::v1::Resource>) -> String {
    resource
        .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
        .map(|kv| text(kv.value.as_ref()))
        .unwrap_or_default()
}

impl Receiver {
    /// Listen on a free loopback port.
    pub async fn start() -> Result<Receiver> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let received = Arc::new(Mutex::new(Received::default()));
        let store = received.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let store = store.clone();
                let service =
                    hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                        let store = store.clone();
                        async move { Ok::<_, Infallible>(accept(req, &store).await) }
                    });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        Ok(Receiver { addr, received })
    }

    /// The value for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.received
            .lock()
            .map(|r| r.spans.clone())
            .unwrap_or_default()
    }

    /// Names of the metrics `service` pushed so far.
    pub fn metric_names(&self, service: &str) -> Vec<String> {
        self.received
            .lock()
            .ok()
            .and_then(|r| r.metrics.get(service).cloned())
            .unwrap_or_default()
    }
}

async fn accept(
    req: Request<hyper::body::Incoming>,
    store: &Mutex<Received>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    let Ok(body) = req.into_body().collect().await.map(|b| b.to_bytes()) else {
        return reply(StatusCode::BAD_REQUEST);
    };
    match path.as_str() {
        "/v1/traces" => {
            let Ok(export) = ExportTraceServiceRequest::decode(body) else {
                return reply(StatusCode::BAD_REQUEST);
            };
            let mut spans = Vec::new();
            for rs in export.resource_spans {
                let service = service_of(rs.resource.as_ref());
                for ss in rs.scope_spans {
                    for s in ss.spans {
                        spans.push(Span {
                            service: service.clone(),
                            name: s.name,
                            trace_id: hex(&s.trace_id),
                            span_id: hex(&s.span_id),
                            parent_id: hex(&s.parent_span_id),
                            start_ns: s.start_time_unix_nano,
                            end_ns: s.end_time_unix_nano,
                            attributes: s
                                .attributes
                                .iter()
                                .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
                                .collect(),
                            events: s.events.into_iter().map(|e| e.name).collect(),
                        });
                    }
                }
            }
            if let Ok(mut r) = store.lock() {
                r.spans.extend(spans);
            }
            reply(StatusCode::OK)
        }
        "/v1/metrics" => {
            let Ok(export) = ExportMetricsServiceRequest::decode(body) else {
                return reply(StatusCode::BAD_REQUEST);
            };
            if let Ok(mut r) = store.lock() {
                for rm in export.resource_metrics {
                    let names = r
                        .metrics
                        .entry(service_of(rm.resource.as_ref()))
                        .or_default();
                    for sm in rm.scope_metrics {
                        for m in sm.metrics {
                            if !names.contains(&m.name) {
                                names.push(m.name);
                            }
                        }
                    }
                }
            }
            reply(StatusCode::OK)
        }
        _ => reply(StatusCode::NOT_FOUND),
    }
}

fn reply(status: StatusCode) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(Bytes::new()));
    *res.status_mut() = status;
    res.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/x-protobuf"),
    );
    res
}

/// The spans of `trace_id` as an indented tree with offsets and durations from the root's
/// start, children in start order.
pub fn span_tree(spans: &[Span], trace_id: &str) -> String {
    let mine: Vec<&Span> = spans.iter().filter(|s| s.trace_id == trace_id).collect();
    let t0 = mine.iter().map(|s| s.start_ns).min().unwrap_or(0);
    let ids: Vec<&str> = mine.iter().map(|s| s.span_id.as_str()).collect();
    let mut out = String::new();
    fn walk(
        out: &mut String,
        all: &[&Span],
        parent: &str,
        roots: bool,
        ids: &[&str],
        depth: usize,
        t0: u64,
    ) {
        let mut kids: Vec<&&Span> = all
            .iter()
            .filter(|s| {
                if roots {
                    !ids.contains(&s.parent_id.as_str())
                } else {
                    s.parent_id == parent
                }
            })
            .collect();
        kids.sort_by_key(|s| s.start_ns);
        for s in kids {
            let op = s
                .attributes
                .get("store.op")
                .map(|op| format!(" {op}"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "{:indent$}{}{op} [{}] +{:.1} ms, {:.1} ms",
                "",
                s.name,
                s.service,
                (s.start_ns.saturating_sub(t0)) as f64 / 1e6,
                (s.end_ns.saturating_sub(s.start_ns)) as f64 / 1e6,
                indent = depth * 2
            );
            walk(out, all, &s.span_id, false, ids, depth + 1, t0);
        }
    }
    walk(&mut out, &mine, "", true, &ids, 0, t0);
    out
}
