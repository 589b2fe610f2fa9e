//! Request params of revision 2026-07-28, one struct per method (base-protocol.md §8, §12;
//! tasks-extension.md §8–§10). `_meta` is not here: the envelope reads it for every method.
//!
//! Each member is a [`Member`]: absent, of the spec's type, or something else. Params never
//! fail to parse as a whole; the gateway rejects an ill-typed member with its own message
//! and at its own point in the checks, so the order of its answers does not depend on the
//! order of the client's keys.

use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer};
use serde_json::{Map, Value};

/// `params._meta`: its member name.
pub const META: &str = "_meta";

/// One member of a params object, as received.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Member<T> {
    /// Not sent.
    #[default]
    Absent,
    /// Sent, of the type the spec gives it.
    Valid(T),
    /// Sent, of another type (`null` included): kept for the gateway's message.
    Invalid(Value),
}

impl<T> Member<T> {
    /// Whether the member was sent at all (`null` counts).
    pub fn is_present(&self) -> bool {
        !matches!(self, Member::Absent)
    }

    /// Whether the member was left out or sent as `null`.
    pub fn is_absent_or_null(&self) -> bool {
        matches!(self, Member::Absent | Member::Invalid(Value::Null))
    }

    /// The value, when sent with the right type.
    pub fn valid(&self) -> Option<&T> {
        match self {
            Member::Valid(v) => Some(v),
            _ => None,
        }
    }

    /// The value, when sent with the right type.
    pub fn into_valid(self) -> Option<T> {
        match self {
            Member::Valid(v) => Some(v),
            _ => None,
        }
    }
}

impl<T: DeserializeOwned> Member<T> {
    fn from_value(value: Value) -> Self {
        match T::deserialize(&value) {
            Ok(v) => Member::Valid(v),
            Err(_) => Member::Invalid(value),
        }
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Member<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Value::deserialize(d).map(Member::from_value)
    }
}

/// For a member whose type is a struct: valid only when sent as a JSON object (serde would
/// also build a struct from an array).
///
/// # Errors
/// Only when the input is not JSON at all.
pub fn object_member<'de, D, T>(d: D) -> Result<Member<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    let value = Value::deserialize(d)?;
    Ok(if value.is_object() {
        Member::from_value(value)
    } else {
        Member::Invalid(value)
    })
}

/// Parse a params object (without `_meta`) into a method's params struct.
///
/// # Errors
/// None in practice: every params struct here takes any object.
pub fn from_map<P: DeserializeOwned>(params: Map<String, Value>) -> Result<P, serde_json::Error> {
    P::deserialize(Value::Object(params))
}

/// Answers to input requests, by key (MRTR and `tasks/update`): each any JSON result.
pub type InputResponses = Map<String, Value>;

/// `tools/list` params (§8.2).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListToolsParams {
    /// Pagination cursor; this server lists every tool on one page and issues none.
    #[serde(default)]
    pub cursor: Member<String>,
}

/// `prompts/list`, `resources/list` and `resources/templates/list` params: a page.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListPageParams {
    /// The `nextCursor` of the page before, opaque; absent for the first page.
    #[serde(default)]
    pub cursor: Member<String>,
}

/// `prompts/get` params.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GetPromptParams {
    /// The prompt's name, as `prompts/list` gave it.
    #[serde(default)]
    pub name: Member<String>,
    /// Values of the prompt's arguments, by name.
    #[serde(default)]
    pub arguments: Member<Map<String, Value>>,
}

/// `resources/read` params.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadResourceParams {
    /// The resource's URI.
    #[serde(default)]
    pub uri: Member<String>,
}

/// `tools/call` params (§8.3; tasks-extension.md §7 for `inputResponses`).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallToolParams {
    /// The tool's name (B-29).
    #[serde(default)]
    pub name: Member<String>,
    /// The tool's arguments: an object, any JSON inside; `{}` when absent.
    #[serde(default)]
    pub arguments: Member<Map<String, Value>>,
    /// Answers to the `inputRequests` of an earlier `InputRequiredResult` (MRTR, T-15).
    #[serde(default)]
    pub input_responses: Member<InputResponses>,
}

/// `tasks/get` params (tasks-extension.md §8).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GetTaskParams {
    /// The task (T-24).
    #[serde(default)]
    pub task_id: Member<String>,
}

/// `tasks/update` params (tasks-extension.md §9).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateTaskParams {
    /// The task (T-27).
    #[serde(default)]
    pub task_id: Member<String>,
    /// Answers to the task's outstanding input requests, by key (T-28…T-34).
    #[serde(default)]
    pub input_responses: Member<InputResponses>,
}

/// `tasks/cancel` params (tasks-extension.md §10).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelTaskParams {
    /// The task (T-35).
    #[serde(default)]
    pub task_id: Member<String>,
}

/// `subscriptions/listen` params (base-protocol.md §12).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenParams {
    /// Which notifications the stream carries.
    #[serde(default, deserialize_with = "object_member")]
    pub notifications: Member<NotificationFilter>,
}

/// The `notifications` filter of `subscriptions/listen` (tasks-extension.md §12).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NotificationFilter {
    /// Tasks whose status notifications the stream carries (T-46).
    #[serde(default)]
    pub task_ids: Member<Vec<Member<String>>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse<P: DeserializeOwned>(v: Value) -> P {
        match v {
            Value::Object(m) => from_map(m).unwrap(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn members_are_absent_valid_or_invalid() {
        let p: CallToolParams = parse(json!({"name": "echo", "arguments": [1], "x": 1}));
        assert_eq!(p.name, Member::Valid("echo".into()));
        assert_eq!(p.arguments, Member::Invalid(json!([1])));
        assert_eq!(p.input_responses, Member::Absent);
        let p: GetTaskParams = parse(json!({"taskId": null}));
        assert!(p.task_id.is_present() && p.task_id.is_absent_or_null());
    }

    #[test]
    fn struct_members_need_an_object() {
        let p: ListenParams = parse(json!({"notifications": [["tsk_a"]]}));
        assert!(matches!(p.notifications, Member::Invalid(_)));
        let p: ListenParams = parse(json!({"notifications": {"taskIds": ["tsk_a", 5]}}));
        let ids = p
            .notifications
            .into_valid()
            .unwrap()
            .task_ids
            .into_valid()
            .unwrap();
        assert_eq!(
            ids,
            vec![Member::Valid("tsk_a".into()), Member::Invalid(json!(5))]
        );
    }
}
