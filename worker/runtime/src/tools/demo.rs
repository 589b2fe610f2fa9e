//! The `demo` pack: the contract outside tools and tests rely on.
//!
//! - `echo {text}` → `text`; always synchronous.
//! - `sleep {ms, steps?}` → status `step i/N` while working (none for `ms: 0` without
//!   `steps`); `slept <ms> ms`.
//! - `ask {question}` → one form elicitation (`answer: string`); `answer: X`.
//! - `fail {mode, message}` → `protocol`: failed with -32603 and `message`; `tool`: completed
//!   with `isError: true`.

use std::sync::Arc;

use mcp_tasks_protocol::jsonrpc::{ErrorObject, INTERNAL_ERROR};
use serde_json::{Value, json};

use super::{accepted_content, nap, str_arg};
use crate::{
    CallToolResult, InputRequest, Needs, Policy, TaskContext, Tool, ToolError, ToolFuture, ToolSpec,
};

/// The pack's tools, in listing order.
pub fn tools() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(Echo),
        Arc::new(Sleep),
        Arc::new(Ask),
        Arc::new(Fail),
    ]
}

struct Echo;

impl Tool for Echo {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "echo",
            "Return the given text unchanged.",
            json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        )
        .policy(Policy::Sync)
    }

    fn call(&self, _ctx: TaskContext, args: Value) -> ToolFuture {
        let text = str_arg(&args, "text").to_owned();
        Box::pin(async move { Ok(CallToolResult::text(text)) })
    }
}

struct Sleep;

impl Tool for Sleep {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "sleep",
            "Wait for ms milliseconds in steps, reporting 'step i/N' as the status message.",
            json!({
                "type": "object",
                "properties": {
                    "ms": {"type": "integer", "minimum": 0, "maximum": 86_400_000u64},
                    "steps": {"type": "integer", "minimum": 1, "maximum": 10_000}
                },
                "required": ["ms"]
            }),
        )
    }

    fn call(&self, ctx: TaskContext, args: Value) -> ToolFuture {
        let ms = args.get("ms").and_then(whole_number).unwrap_or(0);
        let steps = args.get("steps").and_then(whole_number).unwrap_or(1).max(1);
        // Nothing to wait for and no steps asked for: nothing to report either (the
        // benchmark's unit of work, one lifecycle with no status writes).
        let quiet = ms == 0 && args.get("steps").is_none();
        Box::pin(async move {
            for i in 1..=steps {
                if quiet {
                    break;
                }
                ctx.set_status(format!("step {i}/{steps}")).await?;
                // Spread ms over the steps so the total is exact.
                let slice = ms * i / steps - ms * (i - 1) / steps;
                nap(&ctx, slice).await?;
            }
            Ok(CallToolResult::text(format!("slept {ms} ms")))
        })
    }
}

/// A JSON number without a fractional part, as the schema's `integer` accepts it: `1000`,
/// and also `1e3` or `1000.0`, which serde_json holds as floats.
fn whole_number(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| {
        let f = v.as_f64()?;
        // Exact below 2^53; the schema bounds `ms` far lower.
        (f >= 0.0 && f.fract() == 0.0 && f < 9_007_199_254_740_992.0).then_some(f as u64)
    })
}

struct Ask;

const ASK_KEY: &str = "answer-1";

impl Tool for Ask {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "ask",
            "Ask the user a question (form elicitation) and return the answer.",
            json!({"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]}),
        )
        .policy(Policy::TaskOnly)
        .needs(Needs::Elicitation)
    }

    fn call(&self, ctx: TaskContext, args: Value) -> ToolFuture {
        let question = str_arg(&args, "question").to_owned();
        Box::pin(async move {
            let schema = json!({
                "type": "object",
                "properties": {"answer": {"type": "string"}},
                "required": ["answer"]
            });
            let answer = ctx
                .input(ASK_KEY, InputRequest::elicit_form(question, schema))
                .await?;
            Ok(match accepted_content(&answer) {
                Ok(content) => match content.get("answer").and_then(Value::as_str) {
                    Some(a) => CallToolResult::text(format!("answer: {a}")),
                    None => CallToolResult::error_text("the answer has no 'answer' string"),
                },
                Err(why) => CallToolResult::error_text(format!("no answer: {why}")),
            })
        })
    }
}

struct Fail;

impl Tool for Fail {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "fail",
            "Fail on purpose: mode 'protocol' fails the task with a JSON-RPC error, mode 'tool' completes with isError.",
            json!({
                "type": "object",
                "properties": {
                    "mode": {"type": "string", "enum": ["protocol", "tool"]},
                    "message": {"type": "string"}
                },
                "required": ["mode", "message"]
            }),
        )
    }

    fn call(&self, _ctx: TaskContext, args: Value) -> ToolFuture {
        let protocol = str_arg(&args, "mode") == "protocol";
        let message = str_arg(&args, "message").to_owned();
        Box::pin(async move {
            if protocol {
                Err(ToolError::Protocol(ErrorObject::new(
                    INTERNAL_ERROR,
                    message,
                )))
            } else {
                Ok(CallToolResult::error_text(message))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers_in_any_json_spelling() {
        for (text, want) in [
            ("1000", Some(1000)),
            ("1e3", Some(1000)),
            ("1000.0", Some(1000)),
            ("0", Some(0)),
            ("1.5", None),
            ("-1", None),
            ("\"5\"", None),
        ] {
            let v: Value = serde_json::from_str(text).expect("JSON");
            assert_eq!(whole_number(&v), want, "{text}");
        }
    }
}
