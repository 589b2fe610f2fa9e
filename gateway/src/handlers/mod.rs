//! The 2026-07-28 handlers, one module per method family; each takes the checked
//! [`Request`] and its method's typed params (`envelope::Params`).

pub(crate) mod discover;
pub(crate) mod forward;
pub(crate) mod listen;
pub(crate) mod tasks;
pub(crate) mod tools;

use mcp_tasks_protocol::meta::Capability;
use mcp_tasks_protocol::params::Member;

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

/// `params.taskId` (checked to be a string by the envelope on 2026-07-28, not on 2025).
pub(crate) fn task_id(task_id: &Member<String>) -> Result<&str, DispatchError> {
    task_id
        .valid()
        .map(String::as_str)
        .ok_or_else(|| DispatchError::InvalidParams("params.taskId must be a string".into()))
}
