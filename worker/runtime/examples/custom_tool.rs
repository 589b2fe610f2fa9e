//! A worker with one tool of its own, in about twenty lines.
//!
//! ```sh
//! cargo run -p mcp-tasks-worker --example custom_tool   # next to a running gateway
//! ```
//! `count_words {text}` reports progress and returns the word count.

use std::sync::Arc;

use mcp_tasks_shared::config::WorkerConfig;
use mcp_tasks_worker::{CallToolResult, TaskContext, Tool, ToolFuture, ToolSpec};
use serde_json::{Value, json};

struct CountWords;

impl Tool for CountWords {
    fn spec(&self) -> ToolSpec {
        let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]});
        ToolSpec::new("count_words", "Count the words of a text.", schema)
    }

    fn call(&self, ctx: TaskContext, args: Value) -> ToolFuture {
        Box::pin(async move {
            ctx.set_status("counting").await?;
            let words = args["text"]
                .as_str()
                .unwrap_or_default()
                .split_whitespace()
                .count();
            Ok(CallToolResult::text(format!("{words} words")))
        })
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = WorkerConfig::from_env()?;
    let tools: Vec<Arc<dyn Tool>> = vec![Arc::new(CountWords)];
    mcp_tasks_worker::run(config, tools, mcp_tasks_shared::shutdown::on_signal()).await?;
    Ok(())
}
