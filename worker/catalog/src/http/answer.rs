//! What one answer of the service says: a status URL's report on its job ([`Poll`]), or
//! the call's result. Sending the requests and following the job is [`http`](super)'s.

use hyper::{StatusCode, Uri};
use serde_json::Value;

use super::Http;
use super::client::Reply;
use super::url::resolve;
use crate::STATUS_CHARS;
use mcp_tasks_worker::CallToolResult;

/// What one read of a status URL says.
pub(super) enum Poll {
    /// Still running, with this status message (if any).
    Running(Option<String>),
    /// Read this URL instead, now.
    Moved(Uri),
    /// Ended: the call's result.
    Done(CallToolResult),
}

impl Http {
    /// What one (non-transient) answer of a status URL says.
    pub(super) fn poll(&self, reply: &Reply, url: &Uri) -> Poll {
        let status = reply.status;
        if status == StatusCode::ACCEPTED {
            return Poll::Running(reply.json().as_ref().and_then(progress));
        }
        if status.is_redirection() && status != StatusCode::NOT_MODIFIED {
            return match reply.location().map(|l| resolve(url, l)) {
                Some(Ok(next)) => Poll::Moved(next),
                Some(Err(why)) => Poll::Done(CallToolResult::error_text(format!(
                    "the job's status URL redirected to an unusable URL: {why}"
                ))),
                None => Poll::Done(CallToolResult::error_text(format!(
                    "the job's status URL answered {status} without a Location header"
                ))),
            };
        }
        if !status.is_success() || reply.over {
            return Poll::Done(self.result(reply, "the job's status URL"));
        }
        let Some(doc) = reply
            .json()
            .filter(|d| d.get("status").is_some_and(Value::is_string))
        else {
            return Poll::Done(self.result(reply, "the job's status URL"));
        };
        let text = |field: &str| {
            let v = doc.get(field)?;
            v.as_str()
                .or_else(|| v.get("message")?.as_str())
                .map(str::to_owned)
        };
        match doc["status"].as_str().unwrap_or_default() {
            "pending" | "queued" | "running" | "in_progress" | "working" => {
                Poll::Running(progress(&doc))
            }
            "completed" | "succeeded" | "done" => Poll::Done(json_result(
                doc.get("result").cloned().unwrap_or_else(|| doc.clone()),
            )),
            "failed" | "error" => {
                let why = text("error")
                    .or_else(|| text("message"))
                    .unwrap_or_else(|| "no reason given".to_owned());
                let mut r = CallToolResult::error_text(format!("the job failed: {why}"));
                r.structured_content = Some(doc);
                Poll::Done(r)
            }
            "cancelled" | "canceled" => Poll::Done(CallToolResult::error_text(
                "the job was cancelled by the service",
            )),
            other => Poll::Done(CallToolResult::error_text(format!(
                "the job's status URL reported the unknown status {other:?} \
                 (expected pending, queued, running, in_progress, working, completed, \
                 succeeded, done, failed, error, cancelled)"
            ))),
        }
    }

    /// An answer that ends the call: a 2xx is the result, anything else a tool error.
    pub(super) fn result(&self, reply: &Reply, who: &str) -> CallToolResult {
        if !reply.status.is_success() {
            return CallToolResult::error_text(format!(
                "{who} answered {}{}",
                reply.status,
                reply.excerpt()
            ));
        }
        if reply.over {
            return CallToolResult::error_text(format!(
                "{who} answered with more than {} bytes (max_output)",
                self.service.max_output
            ));
        }
        match reply.json() {
            Some(v) => json_result(v),
            None => CallToolResult::text(String::from_utf8_lossy(&reply.body)),
        }
    }
}

/// The status message of a running job's JSON: `PROGRESS: MESSAGE`, either alone, or none.
pub(super) fn progress(doc: &Value) -> Option<String> {
    let progress = match doc.get("progress") {
        Some(Value::String(s)) => Some(s.trim().to_owned()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    }
    .filter(|s| !s.is_empty());
    let message = doc
        .get("message")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty());
    let text = match (progress, message) {
        (Some(p), Some(m)) => format!("{p}: {m}"),
        (Some(p), None) => p,
        (None, Some(m)) => m.to_owned(),
        (None, None) => return None,
    };
    Some(text.chars().take(STATUS_CHARS).collect())
}

/// A JSON result: an object is `structuredContent` (the spec wants an object there) and a
/// text block; a string is its text; anything else its JSON text.
fn json_result(value: Value) -> CallToolResult {
    match value {
        Value::Object(_) => {
            let mut r = CallToolResult::text(value.to_string());
            r.structured_content = Some(value);
            r
        }
        Value::String(s) => CallToolResult::text(s),
        other => CallToolResult::text(other.to_string()),
    }
}

/// Worth another try: the service is (perhaps briefly) overloaded or unreachable.
pub(super) fn transient(status: StatusCode) -> bool {
    matches!(status.as_u16(), 429 | 502 | 503 | 504)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_and_message_make_the_status_message() {
        let p = |v: Value| progress(&v);
        assert_eq!(
            p(serde_json::json!({"progress": "step 1/3"})).as_deref(),
            Some("step 1/3")
        );
        assert_eq!(
            p(serde_json::json!({"progress": 40})).as_deref(),
            Some("40")
        );
        assert_eq!(
            p(serde_json::json!({"progress": "2/3", "message": "resizing"})).as_deref(),
            Some("2/3: resizing")
        );
        assert_eq!(
            p(serde_json::json!({"message": " waiting "})).as_deref(),
            Some("waiting")
        );
        assert_eq!(p(serde_json::json!({"status": "running"})), None);
        let long = "x".repeat(1000);
        assert_eq!(
            p(serde_json::json!({ "message": long })).map(|s| s.chars().count()),
            Some(STATUS_CHARS)
        );
    }
}
