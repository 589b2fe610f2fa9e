//! Notifications on `subscriptions/listen` streams (base-protocol.md §12,
//! tasks-extension.md §12).

use serde::Serialize;
use serde_json::{Value, json};

use super::jsonrpc::Id;
use super::meta::SUBSCRIPTION_ID_KEY;
use super::tasks::DetailedTask;

/// Method of the acknowledgement, the first message of a listen stream (B-38, T-46).
pub const ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";
/// Method of a task status notification (T-47).
pub const TASKS: &str = "notifications/tasks";

/// `_meta` carrying the listen request's id (B-39).
pub fn subscription_meta(subscription: &Id) -> Value {
    json!({ SUBSCRIPTION_ID_KEY: subscription })
}

/// The filter a listen stream honours, echoed in the acknowledgement.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Honoured<'a> {
    /// Task ids the stream will notify about; absent when none (T-46).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub task_ids: Vec<&'a str>,
}

/// Params of `notifications/subscriptions/acknowledged`.
#[derive(Debug, Serialize)]
pub struct AcknowledgedParams<'a> {
    /// Carries the subscription id.
    #[serde(rename = "_meta")]
    pub meta: Value,
    /// The honoured subset of the requested filter.
    pub notifications: Honoured<'a>,
}

/// Params of `notifications/tasks`: a `DetailedTask` without `resultType`, plus `_meta`.
#[derive(Debug, Serialize)]
pub struct TaskNotificationParams<'a> {
    /// The task.
    #[serde(flatten)]
    pub task: &'a DetailedTask,
    /// Carries the subscription id.
    #[serde(rename = "_meta")]
    pub meta: Value,
}
