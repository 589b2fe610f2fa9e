//! Per-request metadata (`params._meta`, base-protocol.md §3) and capability objects (§3.5).
//!
//! Client capabilities are kept as JSON: the spec lets them carry keys this server does not
//! know, and a task stores the originating request's capabilities verbatim (T-45).

use serde_json::{Map, Value, json};

use super::{SERVER_NAME, SERVER_VERSION, TASKS_EXTENSION};

/// `_meta` key: protocol version of this request (required).
pub const PROTOCOL_VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key: client capabilities for this request (required).
pub const CLIENT_CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key: self-reported client identity (optional).
pub const CLIENT_INFO_KEY: &str = "io.modelcontextprotocol/clientInfo";
/// `_meta` key on results: server identity.
pub const SERVER_INFO_KEY: &str = "io.modelcontextprotocol/serverInfo";
/// `_meta` key on listen-stream notifications: the listen request id.
pub const SUBSCRIPTION_ID_KEY: &str = "io.modelcontextprotocol/subscriptionId";
/// `_meta` key of a `tools/call`: the caller's idempotency key (issue 38), as the HTTP header
/// [`IDEMPOTENCY_KEY_HEADER`] also carries it.
pub const IDEMPOTENCY_KEY: &str = "io.github.mcp-tasks/idempotencyKey";

/// The HTTP header carrying an idempotency key (the IETF httpapi draft's name).
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";
/// `_meta` key of a `tools/call` asking for its job's priority: `"high"`, `"normal"` or
/// `"low"` (default: the tool's own). Workers take a queue's `high` jobs first.
pub const PRIORITY_KEY: &str = "io.github.mcp-tasks/priority";
/// `_meta` key of a `tasks/get` result: the ids of tasks linked to this one (a redriven
/// dead letter and the task its redrive made).
pub const RELATED_TASK_IDS_KEY: &str = "io.modelcontextprotocol/relatedTaskIds";
/// `_meta` key: W3C trace context.
pub const TRACEPARENT_KEY: &str = "traceparent";
/// The owner of every task when the gateway authenticates no one.
pub const ANONYMOUS_OWNER: &str = "anonymous";

/// The `_meta` object every result carries (B-09).
pub fn server_meta() -> Value {
    json!({ SERVER_INFO_KEY: { "name": SERVER_NAME, "version": SERVER_VERSION } })
}

/// [`server_meta`] as a field of the results sent most (tasks/get, a created task, the
/// empty acknowledgement): its text, built once, copied into each response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerMeta;

impl serde::Serialize for ServerMeta {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Built once: serde_json copies a raw value's text as it is, where a map of a map
        // would scan every key and value for characters to escape on each response.
        static TEXT: std::sync::OnceLock<Box<serde_json::value::RawValue>> =
            std::sync::OnceLock::new();
        TEXT.get_or_init(|| {
            serde_json::value::to_raw_value(&server_meta())
                .unwrap_or_else(|e| unreachable!("a Value always serializes: {e}"))
        })
        .serialize(s)
    }
}

/// A client capability the server may need: each maps to a path in `ClientCapabilities`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    /// `extensions["io.modelcontextprotocol/tasks"]`.
    Tasks,
    /// `elicitation` with form mode (`elicitation: {}` means form only).
    ElicitationForm,
    /// `elicitation.url`.
    ElicitationUrl,
    /// `sampling`.
    Sampling,
    /// `roots`.
    Roots,
}

impl Capability {
    /// Whether `caps` (a `ClientCapabilities` object) declares this capability.
    ///
    /// Tasks: declared iff `extensions` is an object with an own key for the extension whose
    /// value is an object (tasks-extension.md §2.2).
    pub fn declared_in(self, caps: &Value) -> bool {
        let is_object = |v: Option<&Value>| v.is_some_and(Value::is_object);
        match self {
            Capability::Tasks => {
                is_object(caps.get("extensions").and_then(|e| e.get(TASKS_EXTENSION)))
            }
            Capability::ElicitationForm => match caps.get("elicitation") {
                Some(Value::Object(e)) => e.is_empty() || is_object(e.get("form")),
                _ => false,
            },
            Capability::ElicitationUrl => {
                is_object(caps.get("elicitation").and_then(|e| e.get("url")))
            }
            Capability::Sampling => is_object(caps.get("sampling")),
            Capability::Roots => is_object(caps.get("roots")),
        }
    }

    /// Merge this capability into a `requiredCapabilities` object (T-04, §14 data rule).
    pub fn add_to(self, required: &mut Map<String, Value>) {
        let empty = || Value::Object(Map::new());
        let nested = |required: &mut Map<String, Value>, outer: &str, inner: &str| {
            let slot = required.entry(outer.to_owned()).or_insert_with(empty);
            if let Value::Object(m) = slot {
                m.insert(inner.to_owned(), empty());
            }
        };
        match self {
            Capability::Tasks => nested(required, "extensions", TASKS_EXTENSION),
            Capability::ElicitationForm => {
                required
                    .entry("elicitation".to_owned())
                    .or_insert_with(empty);
            }
            Capability::ElicitationUrl => nested(required, "elicitation", "url"),
            Capability::Sampling => {
                required.insert("sampling".to_owned(), empty());
            }
            Capability::Roots => {
                required.insert("roots".to_owned(), empty());
            }
        }
    }

    /// The capability an input request method needs (T-45), if the method is one of the three.
    pub fn for_input_method(method: &str, params: &Value) -> Option<Capability> {
        match method {
            "elicitation/create" => Some(
                if params.get("mode").and_then(Value::as_str) == Some("url") {
                    Capability::ElicitationUrl
                } else {
                    Capability::ElicitationForm
                },
            ),
            "sampling/createMessage" => Some(Capability::Sampling),
            "roots/list" => Some(Capability::Roots),
            _ => None,
        }
    }
}

/// The capabilities in `required` that `caps` lacks, as a `requiredCapabilities` object, or
/// `None` when nothing is missing.
pub fn missing_capabilities(required: &[Capability], caps: &Value) -> Option<Value> {
    let mut missing = Map::new();
    for cap in required.iter().filter(|c| !c.declared_in(caps)) {
        cap.add_to(&mut missing);
    }
    (!missing.is_empty()).then_some(Value::Object(missing))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fields of the hot results write exactly what `server_meta()` is.
    #[test]
    fn server_meta_fields_write_the_server_meta_object() {
        // As text: `Value` maps compare equal whatever their order.
        assert_eq!(
            serde_json::to_string(&ServerMeta).unwrap(),
            serde_json::to_string(&server_meta()).unwrap()
        );
        // As a member of a result, as text and as a `Value`.
        #[derive(serde::Serialize)]
        struct Result {
            n: u8,
            #[serde(rename = "_meta")]
            meta: ServerMeta,
        }
        let r = Result {
            n: 1,
            meta: ServerMeta,
        };
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            format!(r#"{{"n":1,"_meta":{}}}"#, server_meta())
        );
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"n": 1, "_meta": server_meta()})
        );
    }

    #[test]
    fn tasks_declared_only_as_an_object_under_extensions() {
        let yes = json!({"extensions": {TASKS_EXTENSION: {}}});
        assert!(Capability::Tasks.declared_in(&yes));
        for no in [
            json!({}),
            json!({"extensions": {TASKS_EXTENSION: null}}),
            json!({"extensions": {TASKS_EXTENSION: true}}),
            json!({"extensions": null}),
            json!({"tasks": {}}),
        ] {
            assert!(!Capability::Tasks.declared_in(&no), "{no}");
        }
    }

    #[test]
    fn empty_elicitation_means_form_only() {
        let caps = json!({"elicitation": {}});
        assert!(Capability::ElicitationForm.declared_in(&caps));
        assert!(!Capability::ElicitationUrl.declared_in(&caps));
        let url_only = json!({"elicitation": {"url": {}}});
        assert!(!Capability::ElicitationForm.declared_in(&url_only));
    }

    #[test]
    fn missing_lists_everything_absent_in_one_object() {
        let got = missing_capabilities(
            &[Capability::Tasks, Capability::ElicitationForm],
            &json!({}),
        );
        assert_eq!(
            got,
            Some(json!({"extensions": {TASKS_EXTENSION: {}}, "elicitation": {}}))
        );
        assert_eq!(
            missing_capabilities(&[Capability::Sampling], &json!({"sampling": {}})),
            None
        );
    }
}
