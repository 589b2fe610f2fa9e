//! Tools (base-protocol.md §8): the `Tool` listing entry and `CallToolResult`.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A `Tool` as listed by `tools/list` (B-28). Extra members a tool author sets (`title`,
/// `annotations`, `outputSchema`, `icons`, `_meta`) ride in `extra` unchanged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tool {
    /// Unique name, 1–128 chars of `A-Z a-z 0-9 _ - .`.
    pub name: String,
    /// Hint for the model.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// JSON Schema of the arguments; root `type` is `"object"`.
    pub input_schema: Value,
    /// Any other members, passed through.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}

/// `CallToolResult` (§8.4). `resultType` is added on the wire (T-23).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallToolResult {
    /// Always `"complete"` on what this server emits.
    #[serde(default = "complete")]
    pub result_type: String,
    /// Unstructured output blocks (B-31).
    pub content: Vec<Value>,
    /// Structured output; must match `outputSchema` when one is declared (B-30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<Value>,
    /// Tool-level failure (T-21): the task is still `completed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    /// Result metadata; the server puts its `serverInfo` here (B-09).
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

fn complete() -> String {
    "complete".to_owned()
}

impl CallToolResult {
    /// A successful result with one text block.
    pub fn text(text: impl Into<String>) -> Self {
        CallToolResult {
            result_type: complete(),
            content: vec![text_block(text)],
            structured_content: None,
            is_error: None,
            meta: None,
        }
    }

    /// A tool-level error with one text block (`isError: true`).
    pub fn error_text(text: impl Into<String>) -> Self {
        CallToolResult {
            is_error: Some(true),
            ..CallToolResult::text(text)
        }
    }

    /// Stamp the server's identity into `_meta` (kept if the tool set its own `_meta`).
    pub fn with_server_info(mut self) -> Self {
        let info = super::meta::server_meta();
        match &mut self.meta {
            Some(Value::Object(m)) => {
                if let Value::Object(i) = info {
                    for (k, v) in i {
                        m.entry(k).or_insert(v);
                    }
                }
            }
            _ => self.meta = Some(info),
        }
        self
    }

    /// This result as JSON with the server's identity in `_meta`: the same text as
    /// `serde_json::to_string(&self.with_server_info())`, but when the tool set no `_meta`
    /// of its own, written as it serializes rather than built as a `Value` first (a
    /// worker does this once per job).
    ///
    /// # Errors
    /// A member that cannot be serialized as JSON.
    pub fn to_json_with_server_info(self) -> serde_json::Result<String> {
        if self.meta.is_some() {
            return serde_json::to_string(&self.with_server_info());
        }
        /// The result's own members (its `_meta` absent), then the server's `_meta`.
        #[derive(Serialize)]
        struct Stamped<'a> {
            #[serde(flatten)]
            result: &'a CallToolResult,
            #[serde(rename = "_meta")]
            meta: super::meta::ServerMeta,
        }
        serde_json::to_string(&Stamped {
            result: &self,
            meta: super::meta::ServerMeta,
        })
    }

    /// Attach structured content and mirror it as a text block (B-30 SHOULD).
    pub fn with_structured(mut self, value: Value) -> Self {
        self.content.push(text_block(value.to_string()));
        self.structured_content = Some(value);
        self
    }
}

/// A `text` content block.
pub fn text_block(text: impl Into<String>) -> Value {
    json!({ "type": "text", "text": text.into() })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The direct writing gives the text the `Value` path gives, with or without the
    /// tool's own `_meta`, structured content or an error flag.
    #[test]
    fn a_stamped_result_reads_as_with_server_info_writes_it() {
        let results = [
            CallToolResult::text("done"),
            CallToolResult::error_text("bad \"quote\" \u{1}"),
            CallToolResult::text("x").with_structured(json!({"b": 1, "a": [true, null]})),
            CallToolResult {
                meta: Some(json!({"mine": 1})),
                ..CallToolResult::text("with meta")
            },
        ];
        for r in results {
            let direct = r.clone().to_json_with_server_info().unwrap();
            let built = serde_json::to_string(&r.with_server_info()).unwrap();
            assert_eq!(direct, built);
        }
    }

    #[test]
    fn tool_extra_members_pass_through() {
        let raw = json!({"name": "a", "description": "d", "inputSchema": {"type": "object"}, "title": "A"});
        let tool: Tool = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(serde_json::to_value(&tool).unwrap(), raw);
    }

    #[test]
    fn error_result_carries_result_type_and_is_error() {
        let v = serde_json::to_value(CallToolResult::error_text("no")).unwrap();
        assert_eq!(
            v,
            json!({"resultType": "complete", "content": [{"type": "text", "text": "no"}], "isError": true})
        );
    }
}
