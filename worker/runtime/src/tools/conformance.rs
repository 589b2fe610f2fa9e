//! The `conformance` pack: the tasks fixture tools the official MCP conformance suite calls
//! (`spec/conformance-fixtures.md` §3), plus the base fixtures `server-stateless` calls.
//! `greet` comes first: `http-header-validation` calls the first listed tool with `{}`.

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
        Arc::new(Greet),
        Arc::new(SlowCompute),
        Arc::new(FailingJob),
        Arc::new(ProtocolErrorJob),
        Arc::new(ConfirmDelete),
        Arc::new(MultiInput),
        Arc::new(ToolWithTask),
        Arc::new(Simple(
            "test_missing_capability",
            "Needs the sampling capability.",
            Some(Needs::Sampling),
        )),
        Arc::new(Simple(
            "test_streaming_elicitation",
            "Answers without server-to-client requests.",
            None,
        )),
        Arc::new(Simple(
            "test_logging_tool",
            "Answers without log notifications.",
            None,
        )),
    ]
}

fn no_args() -> Value {
    json!({"type": "object", "properties": {}})
}

struct Greet;

impl Tool for Greet {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "greet",
            "Say hello (always synchronous).",
            json!({"type": "object", "properties": {"name": {"type": "string"}}}),
        )
        .policy(Policy::Sync)
    }

    fn call(&self, _ctx: TaskContext, args: Value) -> ToolFuture {
        let name = args
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("World")
            .to_owned();
        Box::pin(async move { Ok(CallToolResult::text(format!("Hello, {name}!"))) })
    }
}

struct SlowCompute;

impl Tool for SlowCompute {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "slow_compute",
            "Work for the given number of seconds.",
            json!({"type": "object", "properties": {"seconds": {"type": "number"}, "label": {"type": "string"}}}),
        )
        .poll_interval(std::time::Duration::from_millis(200))
    }

    fn call(&self, ctx: TaskContext, args: Value) -> ToolFuture {
        let seconds = args
            .get("seconds")
            .and_then(Value::as_f64)
            .unwrap_or(0.0)
            .clamp(0.0, 3600.0);
        let label = str_arg(&args, "label").to_owned();
        Box::pin(async move {
            ctx.set_status(format!("computing for {seconds} s")).await?;
            nap(&ctx, (seconds * 1000.0) as u64).await?;
            Ok(CallToolResult::text(format!(
                "computed {label} in {seconds} s"
            )))
        })
    }
}

struct FailingJob;

impl Tool for FailingJob {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "failing_job",
            "Completes with a tool error (isError) after a moment.",
            no_args(),
        )
        .policy(Policy::TaskOnly)
        .poll_interval(std::time::Duration::from_millis(200))
    }

    fn call(&self, ctx: TaskContext, _args: Value) -> ToolFuture {
        Box::pin(async move {
            nap(&ctx, 500).await?;
            Ok(CallToolResult::error_text(
                "the job failed at the tool level",
            ))
        })
    }
}

struct ProtocolErrorJob;

impl Tool for ProtocolErrorJob {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "protocol_error_job",
            "Fails with a JSON-RPC error after a moment.",
            no_args(),
        )
        .poll_interval(std::time::Duration::from_millis(200))
    }

    fn call(&self, ctx: TaskContext, _args: Value) -> ToolFuture {
        Box::pin(async move {
            nap(&ctx, 500).await?;
            Err(ToolError::Protocol(ErrorObject::new(
                INTERNAL_ERROR,
                "the job broke with a protocol error",
            )))
        })
    }
}

struct ConfirmDelete;

impl Tool for ConfirmDelete {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "confirm_delete",
            "Ask for confirmation, then pretend to delete the file.",
            json!({"type": "object", "properties": {"filename": {"type": "string"}}}),
        )
        .policy(Policy::TaskOnly)
        .needs(Needs::Elicitation)
        .poll_interval(std::time::Duration::from_millis(200))
    }

    fn call(&self, ctx: TaskContext, args: Value) -> ToolFuture {
        let filename = str_arg(&args, "filename").to_owned();
        Box::pin(async move {
            let schema = json!({
                "type": "object",
                "properties": {"confirm": {"type": "boolean"}},
                "required": ["confirm"]
            });
            let answer = ctx
                .input(
                    "confirm",
                    InputRequest::elicit_form(format!("Delete {filename}?"), schema),
                )
                .await?;
            Ok(match accepted_content(&answer) {
                Ok(c) if c.get("confirm").and_then(Value::as_bool) == Some(true) => {
                    CallToolResult::text(format!("Deleted {filename}"))
                }
                Ok(_) => CallToolResult::text(format!("Kept {filename}")),
                Err(why) => CallToolResult::error_text(format!("not deleted: {why}")),
            })
        })
    }
}

struct MultiInput;

impl Tool for MultiInput {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new("multi_input", "Ask two questions at once.", no_args())
            .policy(Policy::TaskOnly)
            .needs(Needs::Elicitation)
            .poll_interval(std::time::Duration::from_millis(200))
    }

    fn call(&self, ctx: TaskContext, _args: Value) -> ToolFuture {
        Box::pin(async move {
            let text = |q: &str| {
                InputRequest::elicit_form(
                    q,
                    json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
                )
            };
            let answers = ctx
                .input_all(vec![
                    ("name".to_owned(), text("What is your name?")),
                    ("color".to_owned(), text("What is your favourite colour?")),
                ])
                .await?;
            let parts: Vec<String> = answers
                .iter()
                .map(|(k, v)| {
                    let said = accepted_content(v)
                        .ok()
                        .and_then(|c| c.get("name").and_then(Value::as_str).map(str::to_owned))
                        .unwrap_or_else(|| "(no answer)".to_owned());
                    format!("{k}={said}")
                })
                .collect();
            Ok(CallToolResult::text(parts.join(", ")))
        })
    }
}

struct ToolWithTask;

impl Tool for ToolWithTask {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new("test_tool_with_task", "Asks for a name (MRTR), then greets as a task.", no_args())
            .policy(Policy::TaskOnly)
            .needs(Needs::Elicitation)
            .pre_input(
                "user_name",
                InputRequest::elicit_form(
                    "What is your name?",
                    json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
                ),
            )
            .poll_interval(std::time::Duration::from_millis(200))
    }

    fn call(&self, ctx: TaskContext, _args: Value) -> ToolFuture {
        Box::pin(async move {
            let name = ctx
                .pre_input("user_name")
                .and_then(|a| accepted_content(a).ok())
                .and_then(|c| c.get("name").and_then(Value::as_str))
                .unwrap_or("stranger")
                .to_owned();
            Ok(CallToolResult::text(format!(
                "Hello, {name}! Your task has finished."
            )))
        })
    }
}

/// A synchronous fixture that answers with a fixed text.
struct Simple(&'static str, &'static str, Option<Needs>);

impl Tool for Simple {
    fn spec(&self) -> ToolSpec {
        let spec = ToolSpec::new(self.0, self.1, no_args()).policy(Policy::Sync);
        match self.2 {
            Some(need) => spec.needs(need),
            None => spec,
        }
    }

    fn call(&self, _ctx: TaskContext, _args: Value) -> ToolFuture {
        let text = format!("{} ran", self.0);
        Box::pin(async move { Ok(CallToolResult::text(text)) })
    }
}
