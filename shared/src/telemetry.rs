//! Logs, traces and metrics for one process.
//!
//! - Logs: `RUST_LOG` filters (default `info`), `MCPT_LOG_FORMAT=json` for JSON lines, on
//!   stderr (stdout carries only the `listening on` contract line). The access log (one line
//!   per request, created task and finished job, log target [`ACCESS`]) is off unless
//!   `MCPT_ACCESS_LOG=on` or `RUST_LOG` names it: at thousands of tasks a second, formatting
//!   and writing those lines was a sixth of the gateway's and workers' CPU. Log lines carry
//!   the per-call spans (`request`, `job`) only with the access log; without it and without
//!   an exporter, those spans are not built at all.
//! - Traces: `tracing` spans exported by OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//!   `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set; HTTP/protobuf unless
//!   `OTEL_EXPORTER_OTLP_PROTOCOL=grpc`. Every other knob is a standard `OTEL_*` variable read by
//!   the SDK (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`,
//!   `OTEL_BSP_*`, `OTEL_EXPORTER_OTLP_HEADERS`, ...). Off without an endpoint: no span is then
//!   built for export and a call's `traceparent` is passed through to the worker unchanged.
//! - Metrics: the instruments of [`crate::metrics`], always readable as Prometheus text
//!   ([`prometheus_text`], served on `GET /metrics`), and pushed by OTLP when an endpoint is
//!   set (`OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, `OTEL_METRIC_EXPORT_INTERVAL`).
//!
//! Every span the binaries open, in one table as [`crate::metrics`] lists the instruments
//! (STYLE.md §8); the `tracing` macros need literal names, so this table is where a span's
//! name and fields are defined and the call sites follow it:
//!
//! | span | level | fields | opened by |
//! | --- | --- | --- | --- |
//! | `request` (exported as `otel.name` = the method) | info | `rpc.method`, `rpc.id`, `task.id` (once known), `protocol.version` (2025 sessions) | gateway: `http.rs` (2026-07-28), `legacy/dispatch.rs` (2025) |
//! | `listen` | info | `listen.tasks`, `rpc.id` | gateway: `handlers/listen.rs`, one per open stream |
//! | `job` | info | `task.id`, `queue.name`, `tool.name`, `queue.wait_ms` | worker: `runner.rs`, one per run of a job; child of the caller's trace |
//! | `store` | debug (always exported) | `store.op` (`create`, `get`, `answer`, `cancel`, `start`, `status`, `ask`, `finish`, `release`), `task.id` | store: one per Redis script, `shared/store/src/{tasks,jobs}.rs` |

use std::collections::HashMap;
use std::sync::OnceLock;

/// The access log's target: `tracing::info!(target: ACCESS, …)` (the macros need the
/// literal, `"access"`; this names it for the filter).
pub const ACCESS: &str = "access";

/// The spans opened once per call (see the table above), on log lines only with the
/// access log.
const PER_CALL_SPANS: [&str; 2] = ["request", "job"];

use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::filter::{FilterExt as _, LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

/// The Prometheus registry the process' instruments are read from.
static REGISTRY: OnceLock<prometheus::Registry> = OnceLock::new();

/// Whether spans are exported (set once by [`init`]).
static TRACING: OnceLock<bool> = OnceLock::new();

/// The running exporters; [`Telemetry::shutdown`] flushes what they still hold.
#[must_use = "dropping it without shutdown loses the last spans"]
pub struct Telemetry {
    tracer: Option<SdkTracerProvider>,
    meter: SdkMeterProvider,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("traces_exported", &self.tracer.is_some())
            .finish_non_exhaustive()
    }
}

impl Telemetry {
    /// Export what is still buffered and stop the exporters (call once, at exit).
    pub fn shutdown(self) {
        if let Some(tracer) = self.tracer
            && let Err(e) = tracer.shutdown()
        {
            eprintln!("telemetry: cannot flush spans: {e}");
        }
        // The Prometheus reader has nothing to flush; an OTLP reader pushes a last time.
        let _ = self.meter.shutdown();
    }
}

/// Where the standard variables are read from (a map in tests).
trait Source {
    fn get(&self, name: &str) -> Option<String>;
}

struct Env;

impl Source for Env {
    fn get(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.trim().is_empty())
    }
}

impl Source for HashMap<&str, &str> {
    fn get(&self, name: &str) -> Option<String> {
        HashMap::get(self, name)
            .map(|v| (*v).to_owned())
            .filter(|v| !v.trim().is_empty())
    }
}

/// Why telemetry could not be set up; the message names the variable or the exporter.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TelemetryError {
    /// A variable has a value this process does not take.
    #[error("{name}={value:?}: expected {expected}")]
    BadVariable {
        /// The variable.
        name: String,
        /// Its value.
        value: String,
        /// What it may be.
        expected: &'static str,
    },
    /// `RUST_LOG` is not a filter.
    #[error("RUST_LOG={filter:?}: {why}")]
    BadFilter {
        /// Its value.
        filter: String,
        /// The parser's complaint.
        why: String,
    },
    /// An exporter could not be built.
    #[error("cannot build the {which} exporter: {why}")]
    Exporter {
        /// `OTLP span`, `OTLP metric` or `Prometheus`.
        which: &'static str,
        /// The exporter's error.
        why: String,
    },
}

/// Which signals go out by OTLP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Export {
    traces: bool,
    metrics: bool,
}

fn export_plan(env: &impl Source) -> Result<Export, TelemetryError> {
    let disabled = env
        .get("OTEL_SDK_DISABLED")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    for var in [
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    ] {
        if let Some(v) = env.get(var)
            && !matches!(v.as_str(), "http/protobuf" | "grpc")
        {
            return Err(TelemetryError::BadVariable {
                name: var.to_owned(),
                value: v,
                expected: "http/protobuf or grpc",
            });
        }
    }
    let signal = |endpoint: &str, exporter: &str| -> Result<bool, TelemetryError> {
        let wanted = match env.get(exporter).as_deref() {
            None | Some("otlp") => true,
            Some("none") => false,
            Some(other) => {
                return Err(TelemetryError::BadVariable {
                    name: exporter.to_owned(),
                    value: other.to_owned(),
                    expected: "otlp or none",
                });
            }
        };
        let endpoint =
            env.get("OTEL_EXPORTER_OTLP_ENDPOINT").is_some() || env.get(endpoint).is_some();
        Ok(!disabled && wanted && endpoint)
    };
    Ok(Export {
        traces: signal("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER")?,
        metrics: signal(
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            "OTEL_METRICS_EXPORTER",
        )?,
    })
}

/// Install logging, tracing export and the metric readers for a binary named `service`
/// (the OTel `service.name` is `mcp-tasks-{service}` unless `OTEL_SERVICE_NAME` says
/// otherwise). Call it inside the Tokio runtime: the gRPC exporter needs one.
///
/// # Errors
/// A malformed `OTEL_*` variable, or an exporter that cannot be built; the message names the
/// variable.
pub fn init(service: &'static str) -> Result<Telemetry, TelemetryError> {
    let plan = export_plan(&Env)?;
    let mut resource = opentelemetry_sdk::Resource::builder();
    if Env.get("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name(format!("mcp-tasks-{service}"));
    }
    let resource = resource.build();

    let tracer = if plan.traces {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .build()
            .map_err(|e| TelemetryError::Exporter {
                which: "OTLP span",
                why: e.to_string(),
            })?;
        Some(
            SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(resource.clone())
                .build(),
        )
    } else {
        None
    };

    let registry = REGISTRY.get_or_init(prometheus::Registry::new).clone();
    let prometheus = opentelemetry_prometheus::exporter()
        .with_registry(registry)
        .scope_info_enabled(false)
        .build()
        .map_err(|e| TelemetryError::Exporter {
            which: "Prometheus",
            why: e.to_string(),
        })?;
    let mut meter = SdkMeterProvider::builder()
        .with_reader(prometheus)
        .with_resource(resource);
    if plan.metrics {
        let exporter = opentelemetry_otlp::MetricExporter::builder()
            .build()
            .map_err(|e| TelemetryError::Exporter {
                which: "OTLP metric",
                why: e.to_string(),
            })?;
        meter = meter.with_periodic_exporter(exporter);
    }
    let meter = meter.build();
    opentelemetry::global::set_meter_provider(meter.clone());
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    mcp_tasks_store::observe::set_observer(count_store_events);
    let _ = TRACING.set(tracer.is_some());

    let filter = fmt_filter(
        std::env::var("RUST_LOG").ok().as_deref(),
        std::env::var(crate::config::ENV_ACCESS_LOG).ok().as_deref(),
    )?;
    let json = std::env::var(crate::config::ENV_LOG_FORMAT).is_ok_and(|v| v == "json");
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    // JSON lines escape on their own; text lines escape every field (and the message) so
    // nothing a client sent starts a line or reaches a terminal as an escape.
    let fmt = if json {
        fmt.json().with_filter(filter).boxed()
    } else {
        fmt.fmt_fields(EscapedFields).with_filter(filter).boxed()
    };
    // Exported spans do not follow RUST_LOG: the `store` spans are debug for logs but part
    // of every trace.
    let otel = tracer.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("mcp-tasks"))
            .with_filter(export_filter())
            .boxed()
    });
    if tracing_subscriber::registry()
        .with(layers(fmt, otel))
        .try_init()
        .is_ok()
    {
        tracing::debug!(
            service,
            traces = plan.traces,
            metrics = plan.metrics,
            "telemetry initialised"
        );
    }
    Ok(Telemetry { tracer, meter })
}

/// The log filter: `RUST_LOG` (default `info`), with the access log on when `access` is
/// `on`, off when it is `off` or unset and `RUST_LOG` does not name it; and whether the
/// access log may show (then log lines carry the per-call spans too).
///
/// # Errors
/// `access` neither `on` nor `off`, or a malformed `RUST_LOG`.
fn log_filter(
    rust_log: Option<&str>,
    access: Option<&str>,
) -> Result<(EnvFilter, bool), TelemetryError> {
    let on = match access.map(str::trim) {
        None | Some("" | "off") => false,
        Some("on") => true,
        Some(other) => {
            return Err(TelemetryError::BadVariable {
                name: crate::config::ENV_ACCESS_LOG.to_owned(),
                value: other.to_owned(),
                expected: "on or off",
            });
        }
    };
    let base = rust_log.filter(|l| !l.trim().is_empty()).unwrap_or("info");
    let named = base.split(',').any(|d| d.trim().starts_with(ACCESS));
    let extra = if on {
        format!(",{ACCESS}=info")
    } else if named {
        String::new()
    } else {
        format!(",{ACCESS}=off")
    };
    let filter =
        EnvFilter::try_new(format!("{base}{extra}")).map_err(|e| TelemetryError::BadFilter {
            filter: base.to_owned(),
            why: e.to_string(),
        })?;
    Ok((filter, on || named))
}

/// The log lines' filter: [`log_filter`], and the per-call spans (`request`, `job`) only
/// with the access log. Those spans cost a registry entry and their fields formatted for
/// every call; without the access log and without an exporter no layer wants them, and
/// `info_span!` builds nothing.
///
/// # Errors
/// As [`log_filter`].
fn fmt_filter<S>(
    rust_log: Option<&str>,
    access: Option<&str>,
) -> Result<impl tracing_subscriber::layer::Filter<S> + use<S>, TelemetryError>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let (filter, access) = log_filter(rust_log, access)?;
    Ok(
        filter.and(tracing_subscriber::filter::filter_fn(move |meta| {
            access || !meta.is_span() || !PER_CALL_SPANS.contains(&meta.name())
        })),
    )
}

/// What the exporter's layer takes: `info` and up, and the store's `debug` spans.
fn export_filter() -> Targets {
    Targets::new()
        .with_default(LevelFilter::INFO)
        .with_target("mcp_tasks_store", LevelFilter::DEBUG)
}

/// A layer of the process' subscriber.
type BoxedLayer = Box<dyn tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync>;

/// The subscriber's layers: the log lines, and the exporter's spans where one is set. An
/// absent exporter is left out rather than added as a `None` layer: a `None` layer says
/// every callsite interests it, and then every span of every level (a `store` span per
/// Redis call, a `job` span per run) is built although no layer records it.
fn layers(fmt: BoxedLayer, otel: Option<BoxedLayer>) -> Vec<BoxedLayer> {
    std::iter::once(fmt).chain(otel).collect()
}

/// The store's reports as metrics.
fn count_store_events(what: mcp_tasks_store::observe::Observed<'_>) {
    use mcp_tasks_store::observe::Observed;
    let metrics = crate::metrics::get();
    match what {
        Observed::RedisError { kind } => metrics
            .redis_errors
            .add(1, &[opentelemetry::KeyValue::new("error.kind", kind)]),
        Observed::Unreplicated { op } => metrics
            .redis_unreplicated
            .add(1, &[opentelemetry::KeyValue::new("op", op)]),
        Observed::CancelledUnrun { tool } => {
            metrics
                .tasks_finished
                .add(1, &crate::metrics::finish_attrs(tool, "cancelled"));
            // No worker ran it: no run time, and the queue is not known here.
            crate::tally::finished("cancelled", "", None);
        }
    }
}

/// The process' metrics in the Prometheus text format (empty before [`init`]).
pub fn prometheus_text() -> Vec<u8> {
    let Some(registry) = REGISTRY.get() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let encoder = prometheus::TextEncoder::new();
    if let Err(e) = prometheus::Encoder::encode(&encoder, &registry.gather(), &mut out) {
        tracing::warn!(error = %e, "cannot encode metrics");
    }
    out
}

/// Whether spans are exported.
pub fn exporting() -> bool {
    TRACING.get().copied().unwrap_or(false)
}

/// Make `span` a child of the W3C `traceparent` (from a call's `_meta`, an HTTP header or a
/// job); a malformed value is ignored. No-op unless spans are exported.
pub fn set_parent(span: &tracing::Span, traceparent: &str) {
    if !exporting() {
        return;
    }
    let carrier = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    let cx = TraceContextPropagator::new().extract(&carrier);
    if cx.span().span_context().is_valid() {
        let _ = span.set_parent(cx);
    }
}

/// The W3C `traceparent` of the current span, to carry into a job; `fallback` (the caller's
/// own) when spans are not exported.
pub fn current_traceparent(fallback: Option<String>) -> Option<String> {
    if !exporting() {
        return fallback;
    }
    let cx = tracing::Span::current().context();
    let mut carrier: HashMap<String, String> = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    carrier.remove("traceparent").or(fallback)
}

/// Text-log fields with control characters escaped: a value holding a newline, a carriage
/// return or an ANSI escape (a client name, a request id, an error quoting input) stays
/// inside its one line, as `\n`, `\r`, `\u{1b}`. Applied to every field of every event
/// and span, so no call site has to remember it. (Field names lose their italics on a
/// terminal: they are formatted without colour first.)
struct EscapedFields;

impl<'writer> tracing_subscriber::fmt::FormatFields<'writer> for EscapedFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        mut writer: tracing_subscriber::fmt::format::Writer<'writer>,
        fields: R,
    ) -> std::fmt::Result {
        let mut raw = String::new();
        tracing_subscriber::fmt::format::DefaultFields::new().format_fields(
            tracing_subscriber::fmt::format::Writer::new(&mut raw),
            fields,
        )?;
        writer.write_str(&escape_controls(&raw))
    }
}

/// `text` with every control character (C0, DEL, C1) and Unicode line or paragraph
/// separator written as an escape.
fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    let needs = |c: char| c.is_control() || c == '\u{2028}' || c == '\u{2029}';
    if !text.contains(needs) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs(c) => out.push_str(&c.escape_unicode().to_string()),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::{escape_controls, log_filter};

    /// The access log is off by default, on with `MCPT_ACCESS_LOG=on` whatever `RUST_LOG`
    /// says, left to `RUST_LOG` when it names it; a bad value is an error naming it.
    #[test]
    fn the_access_log_is_off_unless_asked_for() {
        let shown = |rust_log, access| log_filter(rust_log, access).unwrap().0.to_string();
        let spans = |rust_log, access| log_filter(rust_log, access).unwrap().1;
        let default = shown(None, None);
        assert!(default.contains("access=off"), "{default}");
        assert!(!spans(None, None));
        assert!(shown(Some("debug"), Some("off")).contains("access=off"));
        assert!(shown(Some("warn"), Some("on")).contains("access=info"));
        assert!(spans(Some("warn"), Some("on")));
        let named = shown(Some("warn,access=info"), None);
        assert!(!named.contains("access=off"), "{named}");
        assert!(spans(Some("warn,access=info"), None));
        let e = log_filter(None, Some("yes")).unwrap_err();
        assert!(
            e.to_string()
                .contains("MCPT_ACCESS_LOG=\"yes\": expected on or off"),
            "{e}"
        );
        assert!(log_filter(Some("info,[=bad"), None).is_err());
    }

    #[test]
    fn control_characters_in_log_fields_are_escaped() {
        assert_eq!(escape_controls("plain é"), "plain é");
        assert_eq!(
            escape_controls("x\n\u{1b}[33m WARN forged\r\u{2028}\u{85}\t"),
            "x\\n\\u{1b}[33m WARN forged\\r\\u{2028}\\u{85}\\t"
        );
    }

    /// Without the access log and without an exporter, a request's or a job's span is not
    /// built, nor a `store` span (debug) (a long-lived `listen` span is); with the access
    /// log, log lines carry the request span again. The layers are those [`init`] installs.
    #[test]
    fn per_call_spans_are_built_only_for_the_access_log() {
        use tracing_subscriber::Layer as _;
        use tracing_subscriber::layer::SubscriberExt as _;
        let built = |access: Option<&str>, name: &str| {
            let layer = tracing_subscriber::fmt::layer()
                .with_filter(super::fmt_filter(None, access).unwrap())
                .boxed();
            let subscriber = tracing_subscriber::registry().with(super::layers(layer, None));
            tracing::subscriber::with_default(subscriber, || match name {
                "request" => !tracing::info_span!("request", rpc.id = 1).is_disabled(),
                "job" => !tracing::info_span!("job", task.id = 1).is_disabled(),
                "store" => !tracing::debug_span!("store", store.op = "finish").is_disabled(),
                _ => !tracing::info_span!("listen", rpc.id = 1).is_disabled(),
            })
        };
        assert!(!built(None, "request"));
        assert!(!built(None, "job"));
        assert!(!built(None, "store"));
        assert!(built(None, "listen"));
        assert!(built(Some("on"), "request"));
        assert!(built(Some("on"), "job"));
    }

    /// With an exporter, its layer still gets every span its own filter takes (the
    /// store's `debug` spans too, which the log lines leave out), and the log lines their
    /// events: each layer keeps its own filter in the list [`init`] installs.
    #[test]
    fn an_exporter_gets_its_spans_beside_the_log_lines() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tracing_subscriber::Layer as _;
        use tracing_subscriber::layer::SubscriberExt as _;

        #[derive(Clone, Default)]
        struct Count(Arc<AtomicUsize>);
        impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Count {
            fn on_new_span(
                &self,
                _: &tracing::span::Attributes<'_>,
                _: &tracing::span::Id,
                _: tracing_subscriber::layer::Context<'_, S>,
            ) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        let spans = Count::default();
        let buf = Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
        let writer = {
            let buf = buf.clone();
            move || Sink(buf.clone())
        };
        let fmt = tracing_subscriber::fmt::layer()
            .with_writer(writer)
            .with_ansi(false)
            .with_filter(super::fmt_filter(None, None).unwrap())
            .boxed();
        let otel = spans.clone().with_filter(super::export_filter()).boxed();
        let subscriber = tracing_subscriber::registry().with(super::layers(fmt, Some(otel)));
        tracing::subscriber::with_default(subscriber, || {
            let _request = tracing::info_span!("request", rpc.id = 1).entered();
            let _store = tracing::debug_span!(target: "mcp_tasks_store", "store").entered();
            tracing::debug!("not a log line at the default level");
            tracing::info!("a log line");
        });
        assert_eq!(spans.0.load(Ordering::Relaxed), 2);
        let text = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.contains("a log line"), "{text}");
        // The log line carries no per-call span without the access log.
        assert!(!text.contains("request"), "{text}");
    }

    /// Through the real formatter: an event whose message and fields carry a forged line
    /// is written as one line without an escape byte.
    #[test]
    fn a_forged_line_stays_one_line() {
        use tracing_subscriber::layer::SubscriberExt as _;
        let buf = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
        let writer = {
            let buf = buf.clone();
            move || Sink(buf.clone())
        };
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .with_writer(writer)
                .with_ansi(false)
                .fmt_fields(super::EscapedFields),
        );
        let forged = "a\n\u{1b}[31mERROR forged";
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("request", rpc.id = %forged);
            let _in = span.enter();
            tracing::warn!(client.name = %forged, "saw {forged}");
        });
        let text = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(!text.contains('\u{1b}'), "{text}");
        assert_eq!(text.matches("a\\n").count(), 3, "{text}");
    }

    struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    use super::*;

    #[test]
    fn export_is_off_without_an_endpoint() {
        let env: HashMap<&str, &str> = HashMap::new();
        assert_eq!(
            export_plan(&env),
            Ok(Export {
                traces: false,
                metrics: false
            })
        );
    }

    #[test]
    fn one_endpoint_exports_both_signals_unless_told_otherwise() {
        let mut env = HashMap::from([("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")]);
        assert_eq!(
            export_plan(&env),
            Ok(Export {
                traces: true,
                metrics: true
            })
        );
        env.insert("OTEL_METRICS_EXPORTER", "none");
        assert_eq!(export_plan(&env).map(|p| p.metrics), Ok(false));
        env.insert("OTEL_SDK_DISABLED", "true");
        assert_eq!(export_plan(&env).map(|p| p.traces), Ok(false));
    }

    #[test]
    fn signal_endpoints_enable_only_their_signal() {
        let env = HashMap::from([(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://x:4318/v1/traces",
        )]);
        assert_eq!(
            export_plan(&env),
            Ok(Export {
                traces: true,
                metrics: false
            })
        );
    }

    #[test]
    fn unknown_protocols_and_exporters_name_the_variable() {
        let env = HashMap::from([("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]);
        let err = export_plan(&env).unwrap_err().to_string();
        assert!(
            err.starts_with("OTEL_EXPORTER_OTLP_PROTOCOL=\"http/json\""),
            "{err}"
        );
        let env = HashMap::from([("OTEL_TRACES_EXPORTER", "zipkin")]);
        assert!(
            export_plan(&env)
                .unwrap_err()
                .to_string()
                .contains("OTEL_TRACES_EXPORTER")
        );
    }
}
