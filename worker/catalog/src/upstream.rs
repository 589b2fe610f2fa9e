//! `[[upstream]]` entries: an existing MCP server whose tools this worker offers as tasks.
//!
//! ```toml
//! [[upstream]]
//! name = "everything"
//! command = ["npx", "-y", "@modelcontextprotocol/server-everything", "stdio"]
//! env = ["HOME"]              # besides PATH, copied from the worker's environment
//! tools = ["get-sum", "trigger-long-running-operation"]   # or ["*"]
//! prefix = "ev_"              # listed as ev_get-sum, ...
//! timeout = "10m"             # per call, the upstream's own task included
//! prompts = true              # serve its prompts (as ev_NAME) and
//! resources = true            # its resources and templates through any gateway
//! ```
//!
//! With `prompts` or `resources` on, `tools` may be left out (no tools then). The prompt
//! names, resource URIs and templates listed at start are advertised so gateways can route
//! `prompts/get` and `resources/read`; two entries claiming one is a mistake. How those
//! requests reach the upstream is `upstream/provide.rs`.
//!
//! `url = "http://host/mcp"` instead of `command` reaches a Streamable HTTP server.
//! `policy`, `queue`, `ttl` and `poll_interval` apply to every tool of the entry.
//!
//! At worker start each upstream is started and initialized (`initialize` asking for
//! 2025-11-25, accepting 2025-06-18 and 2025-03-26 too), `tools/list` is read to its last
//! page, and each selected tool becomes one [`Tool`] with the upstream's description and
//! input schema. An upstream that cannot be started or initialized, or lacks a listed
//! tool, stops the worker with one line and exit 64, like any catalog mistake: there is
//! no retry, because a worker advertising tools it cannot run is worse than one that
//! does not start. After start, a session whose process died is replaced on the next
//! call.
//!
//! A listed tool's `inputSchema` must be an object schema (else the tool is skipped, or
//! refused when named in `tools`). A keyword in it that the gateway's validator does not
//! enforce (`mcp_tasks_shared::schema::unenforced`) does not refuse the tool: the schema is
//! the upstream's, and the upstream validates its own input; one warning names the tool
//! and the keyword, and the gateway enforces the rest (the tool's spec is marked
//! `schema_checked_upstream`, so the worker's own check before advertising lets it pass).
//!
//! The entry is checked in `upstream/check.rs` and started in `upstream/connect.rs`. How
//! a call runs upstream (progress, input requests, the upstream's own tasks, cancellation)
//! is `upstream/call.rs`; sessions and their pool are `upstream/session.rs`.

mod call;
mod check;
mod connect;
mod list;
mod provide;
mod session;
mod stdio;
mod streamable;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use mcp_tasks_worker::{CallToolResult, TaskContext, Tool, ToolError, ToolFuture, ToolSpec};

pub(super) use self::check::entry;
pub(crate) use self::provide::Claims;

/// How to reach an upstream.
#[derive(Debug, Clone)]
pub(super) enum Target {
    /// A stdio server: the program and its arguments, allowlisted variables, folder.
    Command {
        argv: Vec<String>,
        env: Vec<String>,
        cwd: Option<PathBuf>,
    },
    /// A Streamable HTTP endpoint.
    Url(String),
}

/// Which upstream tools to offer.
#[derive(Debug, Clone)]
enum Select {
    All,
    Names(Vec<String>),
}

/// A checked `[[upstream]]` entry, its tools not yet known.
#[derive(Debug)]
pub(crate) struct Upstream {
    /// Where the entry is, for messages: `[[upstream]] #2 ("everything")`.
    pub(super) place: String,
    /// The entry's `name`.
    pub(super) name: String,
    target: Target,
    select: Select,
    prefix: String,
    /// `prompts = true`.
    prompts: bool,
    /// `resources = true`.
    resources: bool,
    /// Position among the catalog's entries.
    rank: u32,
    /// Policy, queue, ttl and poll interval for every tool (name and schema replaced).
    template: ToolSpec,
    timeout: Option<(Duration, String)>,
}

/// One upstream tool offered by this worker.
struct UpstreamTool {
    spec: ToolSpec,
    call: Arc<call::Remote>,
}

impl Tool for UpstreamTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn call(&self, ctx: TaskContext, args: Value) -> ToolFuture {
        let remote = self.call.clone();
        Box::pin(async move { remote.run(ctx, args).await })
    }
}

/// The result of an upstream `tools/call` (or `tasks/result`) as ours: `_meta` is the
/// upstream's business and is dropped.
fn our_result(upstream: &str, mut value: Value) -> Result<CallToolResult, ToolError> {
    if let Some(m) = value.as_object_mut() {
        m.remove("_meta");
        m.remove("resultType");
    }
    serde_json::from_value(value).map_err(|e| {
        ToolError::internal(format!(
            "upstream {upstream} returned a malformed result: {e}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;

    use mcp_tasks_shared::config::WorkerConfig;
    use serde_json::json;

    use super::*;

    /// The catalog `text` checked (a file `t.toml` in the current folder).
    // String, not `CatalogError`: the tests compare the one-line message as text.
    pub(super) fn parse(text: &str) -> Result<super::super::Catalog, String> {
        let env: HashMap<&str, &str> = HashMap::from([("MCPT_QUEUES", "default,slow")]);
        let config = WorkerConfig::from_source(&env).expect("config");
        let builtin = mcp_tasks_worker::tools::packs(&["demo".to_owned()]);
        super::super::parse("t.toml", Path::new("."), text, &config, &builtin)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn an_upstream_result_loses_its_meta() {
        let r = our_result(
            "u",
            json!({"content": [{"type": "text", "text": "3"}], "isError": false,
                   "_meta": {"io.modelcontextprotocol/related-task": {"taskId": "t"}}}),
        )
        .expect("valid");
        assert_eq!(r.content[0]["text"], "3");
        assert_eq!(r.meta, None);
        assert!(our_result("u", json!({"nothing": 1})).is_err());
    }
}
