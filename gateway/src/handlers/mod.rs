//! One module per method family.

pub(crate) mod discover;
pub(crate) mod listen;
pub(crate) mod tasks;
pub(crate) mod tools;

use mcp_tasks_protocol::meta::Capability;
use serde_json::Value;

use crate::envelope::Request;
use crate::error::DispatchError;

/// The owner digest of a request's principal (T-44). Without authentication every caller
/// is the same anonymous principal, and possession of a task id is the only check (T-43).
pub(crate) fn owner(req: &Request) -> &str {
    &req.owner
}

/// -32021 unless the request declares the Tasks extension (T-05, T-06).
pub(crate) fn require_tasks(req: &Request) -> Result<(), DispatchError> {
    match mcp_tasks_protocol::meta::missing_capabilities(&[Capability::Tasks], req.capabilities()) {
        None => Ok(()),
        Some(missing) => Err(DispatchError::MissingCapability(missing)),
    }
}

/// `params.taskId`, which the envelope already checked is a string for `tasks/*`.
pub(crate) fn task_id(req: &Request) -> Result<&str, DispatchError> {
    req.params
        .get("taskId")
        .and_then(Value::as_str)
        .ok_or_else(|| DispatchError::InvalidParams("params.taskId must be a string".into()))
}
