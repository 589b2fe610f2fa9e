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
//! How a call runs upstream (progress, input requests, the upstream's own tasks,
//! cancellation) is `upstream/call.rs`; sessions and their pool are `upstream/session.rs`.

mod call;
mod provide;
mod session;
mod stdio;
mod streamable;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use mcp_tasks_protocol::jsonrpc::METHOD_NOT_FOUND;
use mcp_tasks_protocol::tools::Tool as WireTool;
use mcp_tasks_shared::config::WorkerConfig;
use serde::Deserialize;
use serde_json::{Value, json};

use super::fields::{self, string_list};
use super::schema::check_shape;
use super::{FieldError, bad, directory, tool_spec};
use mcp_tasks_worker::{CallToolResult, TaskContext, Tool, ToolError, ToolFuture, ToolSpec};

pub(crate) use self::provide::Claims;
use self::session::{Pool, RpcError, Session};
use mcp_tasks_worker::Provider;
use mcp_tasks_worker::UpstreamAdvert;

/// Time to start an upstream and finish `initialize` (npx may download the package first).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Time for one `tools/list` page at start.
pub(super) const LIST_TIMEOUT: Duration = Duration::from_secs(30);
/// Members of an upstream tool listing passed on to our `tools/list` besides name,
/// description and schema (not `execution`: how we run it is our policy's business).
const PASSED_MEMBERS: [&str; 4] = ["title", "annotations", "outputSchema", "icons"];

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

/// The fields only `[[upstream]]` takes.
#[derive(Deserialize)]
struct UpstreamFields {
    #[serde(default, deserialize_with = "command")]
    command: Option<Vec<String>>,
    #[serde(default, deserialize_with = "url")]
    url: Option<String>,
    #[serde(default, deserialize_with = "fields::env_names")]
    env: Option<Vec<String>>,
    cwd: Option<String>,
    #[serde(default, deserialize_with = "select")]
    tools: Option<Select>,
    prefix: Option<String>,
    prompts: Option<bool>,
    resources: Option<bool>,
}

/// `command`: a non-empty list of strings, the program first.
fn command<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    fields::checked(d, |v| {
        string_list(v)
            .filter(|a| a.first().is_some_and(|p| !p.is_empty()))
            .map(Some)
            .ok_or_else(|| "expected a non-empty list of strings".to_owned())
    })
}

/// `url`: a string (checked once read).
fn url<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    fields::checked(d, |v| {
        v.as_str()
            .map(|s| Some(s.to_owned()))
            .ok_or_else(|| "expected a string like \"http://host:port/mcp\"".to_owned())
    })
}

/// `tools`: `["*"]`, or names listed once each.
fn select<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Select>, D::Error> {
    fields::checked(d, |v| match string_list(v) {
        Some(l) if l == ["*"] => Ok(Some(Select::All)),
        Some(l) if !l.is_empty() && l.iter().all(|n| !n.is_empty() && n != "*") => {
            let mut seen = HashSet::new();
            if let Some(dup) = l.iter().find(|n| !seen.insert(n.as_str())) {
                return Err(format!("{dup:?} is listed twice"));
            }
            Ok(Some(Select::Names(l)))
        }
        _ => Err("expected [\"*\"] or a non-empty list of tool names".to_owned()),
    })
}

/// The common fields an `[[upstream]]` entry cannot set: its upstream lists them.
const FROM_UPSTREAM: [&str; 2] = ["description", "input_schema"];

/// One `[[upstream]]` entry, checked; `place` names it in later messages.
pub(super) fn entry(
    entry: &toml::Table,
    base: &Path,
    config: &WorkerConfig,
    place: String,
    rank: u32,
) -> Result<Upstream, FieldError> {
    let (common, own) = fields::read::<UpstreamFields>(entry, &FROM_UPSTREAM)?;
    if let Some(field) = FROM_UPSTREAM.iter().find(|f| entry.contains_key(**f)) {
        return Err(bad(
            field,
            "comes from the upstream's tools/list and cannot be set here",
        ));
    }
    let timeout = common.timeout.clone().map(|l| (l.value, l.written));
    let template = tool_spec(common, config)?;
    let name = template.tool.name.clone();
    let target = match (own.command, own.url) {
        (None, None) => {
            return Err(bad(
                "command",
                "missing (command = [\"npx\", \"-y\", \"some-mcp-server\"] for stdio, \
                 or url = \"http://host/mcp\")",
            ));
        }
        (Some(_), Some(_)) => return Err(bad("url", "give either command or url, not both")),
        (Some(argv), None) => Target::Command {
            argv,
            env: own.env.unwrap_or_default(),
            cwd: own.cwd.map(|s| directory(base, &s)).transpose()?,
        },
        (None, Some(url)) => {
            if own.env.is_some() {
                return Err(bad("env", "applies to command, not to url"));
            }
            if own.cwd.is_some() {
                return Err(bad("cwd", "applies to command, not to url"));
            }
            let ok = (url.starts_with("http://") || url.starts_with("https://"))
                && url.parse::<hyper::Uri>().is_ok_and(|u| u.host().is_some());
            if !ok {
                return Err(bad(
                    "url",
                    format!(
                        "{url:?}: expected an http:// or https:// URL like \"https://host/mcp\""
                    ),
                ));
            }
            Target::Url(url)
        }
    };
    let (prompts, resources) = (own.prompts.unwrap_or(false), own.resources.unwrap_or(false));
    let select = match own.tools {
        Some(select) => select,
        // Only prompts or resources wanted.
        None if prompts || resources => Select::Names(Vec::new()),
        None => {
            return Err(bad(
                "tools",
                "missing (tools = [\"*\"] for all, or a list of tool names; or leave it out with prompts = true or resources = true)",
            ));
        }
    };
    let prefix = own.prefix.unwrap_or_default();
    if !prefix
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
    {
        return Err(bad(
            "prefix",
            format!("{prefix:?}: expected characters of A-Z a-z 0-9 _ . -"),
        ));
    }
    Ok(Upstream {
        place,
        name,
        target,
        select,
        prefix,
        prompts,
        resources,
        rank,
        template,
        timeout,
    })
}

/// Whether `name` is a tool name we can list (base-protocol: 1–128 of A-Z a-z 0-9 _ - .).
fn valid_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
}

impl Upstream {
    /// Start the upstream, read its tools and make ours; names in `taken` are refused
    /// (and ours are added to it). With `prompts` or `resources`, also list those (their
    /// names and URIs are claimed in `claims`) and return the provider serving them.
    ///
    /// # Errors
    /// The field and the problem: the upstream cannot be started or initialized, its
    /// `tools/list` (or prompts or resources list) fails, a listed tool is missing or
    /// unusable, a name or URI clashes.
    pub(super) async fn connect(
        self,
        taken: &mut HashSet<String>,
        claims: &mut Claims,
    ) -> Result<(Vec<Arc<dyn Tool>>, Option<Arc<dyn Provider>>), FieldError> {
        let field = match &self.target {
            Target::Command { .. } => "command",
            Target::Url(_) => "url",
        };
        let session = Session::open(&self.target, START_TIMEOUT)
            .await
            .map_err(|e| bad(field, format!("cannot start the upstream: {e}")))?;
        let listed = if matches!(&self.select, Select::Names(n) if n.is_empty()) {
            Vec::new()
        } else {
            match list_tools(&session).await {
                Ok(l) => l,
                Err(e) => {
                    session.close().await;
                    return Err(bad(field, format!("tools/list failed: {e}")));
                }
            }
        };
        let served = match self.served(&session).await {
            Ok(s) => s,
            Err(e) => {
                session.close().await;
                return Err(bad(field, e));
            }
        };
        if let Some(advert) = &served
            && let Err((field, why)) = claims.claim(advert)
        {
            session.close().await;
            return Err(bad(field, why));
        }
        let chosen = match self.choose(&listed) {
            Ok(c) => c,
            Err(e) => {
                session.close().await;
                return Err(e);
            }
        };
        let pool = Pool::new(self.target.clone(), START_TIMEOUT);
        pool.keep(session);
        let provider = served.map(|advert| {
            Arc::new(provide::UpstreamProvider {
                advert,
                pool: pool.clone(),
            }) as Arc<dyn Provider>
        });
        let timeout = self.timeout.map(Arc::new);
        let mut tools: Vec<Arc<dyn Tool>> = Vec::with_capacity(chosen.len());
        for (listing, task_required) in chosen {
            let mut spec = self.template.clone();
            let ours = format!("{}{}", self.prefix, listing.name);
            if !taken.insert(ours.clone()) {
                return Err(bad(
                    if self.prefix.is_empty() {
                        "tools"
                    } else {
                        "prefix"
                    },
                    format!(
                        "the upstream's tool {:?} would be listed as {ours:?}, a name already taken \
                         (a built-in tool or an earlier entry); set or change prefix",
                        listing.name
                    ),
                ));
            }
            spec.tool = WireTool {
                name: ours,
                description: listing.description.clone(),
                input_schema: listing.input_schema.clone(),
                extra: listing
                    .extra
                    .iter()
                    .filter(|(k, _)| PASSED_MEMBERS.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            };
            spec.schema_checked_upstream = true;
            tools.push(Arc::new(UpstreamTool {
                spec,
                call: Arc::new(call::Remote {
                    upstream: self.name.clone(),
                    tool: listing.name,
                    task_required,
                    pool: pool.clone(),
                    timeout: timeout.clone(),
                }),
            }));
        }
        Ok((tools, provider))
    }

    /// With `prompts` or `resources` on: the advert of what the upstream lists.
    async fn served(&self, session: &Session) -> Result<Option<UpstreamAdvert>, String> {
        if !self.prompts && !self.resources {
            return Ok(None);
        }
        let mut advert = UpstreamAdvert {
            name: self.name.clone(),
            prefix: self.prefix.clone(),
            prompts: self.prompts,
            resources: self.resources,
            prompt_names: Vec::new(),
            resource_uris: Vec::new(),
            resource_templates: Vec::new(),
            rank: self.rank,
            heartbeat_ms: 0,
        };
        if self.prompts {
            advert.prompt_names =
                provide::list_all(session, "prompts/list", "prompts", "name").await?;
        }
        if self.resources {
            advert.resource_uris =
                provide::list_all(session, "resources/list", "resources", "uri").await?;
            // Templates are optional: a server without any may not know the method.
            advert.resource_templates = provide::list_all_or_none(
                session,
                "resources/templates/list",
                "resourceTemplates",
                "uriTemplate",
            )
            .await?;
        }
        Ok(Some(advert))
    }

    /// The selected listings, each with whether the upstream requires a task for it.
    fn choose(&self, listed: &[WireTool]) -> Result<Vec<(WireTool, bool)>, FieldError> {
        let usable = |t: &WireTool| -> Result<(WireTool, bool), String> {
            let ours = format!("{}{}", self.prefix, t.name);
            if !valid_name(&ours) {
                return Err(format!(
                    "cannot be listed as {ours:?} (1 to 128 characters of A-Z a-z 0-9 _ . -)"
                ));
            }
            check_shape(&t.input_schema).map_err(|why| format!("its inputSchema: {why}"))?;
            // Not our schema: the upstream validates its own input, so the tool is kept and
            // the gateway enforces what it can.
            if let Err(why) = mcp_tasks_shared::schema::unenforced(&t.input_schema) {
                tracing::warn!(
                    upstream.name = %self.name,
                    tool.name = %ours,
                    "upstream {}: tool {:?} kept, but its inputSchema is only partly checked \
                     by the gateway (the upstream validates its own input): {why}",
                    self.name,
                    t.name
                );
            }
            let support = t
                .extra
                .get("execution")
                .and_then(|e| e.get("taskSupport"))
                .and_then(Value::as_str);
            Ok((t.clone(), support == Some("required")))
        };
        match &self.select {
            Select::All => Ok(listed
                .iter()
                .filter_map(|t| match usable(t) {
                    Ok(u) => Some(u),
                    Err(why) => {
                        tracing::warn!(
                            upstream.name = %self.name,
                            "upstream {}: tool {:?} skipped: {why}",
                            self.name,
                            t.name
                        );
                        None
                    }
                })
                .collect()),
            Select::Names(names) => names
                .iter()
                .map(|n| {
                    let Some(t) = listed.iter().find(|t| &t.name == n) else {
                        let mut have: Vec<&str> = listed.iter().map(|t| t.name.as_str()).collect();
                        have.sort_unstable();
                        return Err(bad(
                            "tools",
                            format!(
                                "the upstream has no tool {n:?} (it has: {})",
                                have.join(", ")
                            ),
                        ));
                    };
                    usable(t).map_err(|why| bad("tools", format!("tool {n:?} {why}")))
                })
                .collect(),
        }
    }
}

/// Every tool the upstream lists.
async fn list_tools(session: &Session) -> Result<Vec<WireTool>, String> {
    list_pages(session, "tools/list", "tools")
        .await
        .map_err(|e| e.why)?
        .into_iter()
        .map(|t| {
            serde_json::from_value(t).map_err(|e| format!("a tool listing does not parse: {e}"))
        })
        .collect()
}

/// Why an upstream list could not be read.
#[derive(Debug)]
struct ListError {
    /// The upstream answered -32601: it has no such list.
    not_found: bool,
    why: String,
}

/// Every item of a paged upstream list (`tools/list` → its `tools`), following
/// `nextCursor`.
async fn list_pages(session: &Session, method: &str, items: &str) -> Result<Vec<Value>, ListError> {
    let fail = |why: String| ListError {
        not_found: false,
        why,
    };
    let mut found = Vec::new();
    let mut cursor: Option<String> = None;
    // Bounded, so a server that always returns a cursor cannot hold the start forever.
    for _ in 0..1000 {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let page = tokio::time::timeout(LIST_TIMEOUT, session.request(method, params))
            .await
            .map_err(|_| fail(format!("no answer within {}s", LIST_TIMEOUT.as_secs())))?
            .map_err(|e| ListError {
                not_found: matches!(&e, RpcError::Error(o) if o.code == METHOD_NOT_FOUND),
                why: e.to_string(),
            })?;
        let Some(Value::Array(list)) = page.get(items) else {
            return Err(fail(format!("the answer has no {items} list")));
        };
        found.extend(list.iter().cloned());
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(c) if !c.is_empty() => cursor = Some(c.to_owned()),
            _ => return Ok(found),
        }
    }
    Err(fail("more than 1000 pages".to_owned()))
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

    use super::*;

    fn parse(text: &str) -> Result<super::super::Catalog, String> {
        let env: HashMap<&str, &str> = HashMap::from([("MCPT_QUEUES", "default,slow")]);
        let config = WorkerConfig::from_source(&env).expect("config");
        let builtin = mcp_tasks_worker::tools::packs(&["demo".to_owned()]);
        super::super::parse("t.toml", Path::new("."), text, &config, &builtin)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn an_entry_is_checked_before_anything_starts() {
        let c = parse(
            r#"
            [[upstream]]
            name = "everything"
            command = ["node", "index.js", "stdio"]
            env = ["HOME"]
            tools = ["get-sum"]
            prefix = "ev_"
            policy = "auto"
            queue = "slow"
            timeout = "10m"

            [[upstream]]
            name = "remote"
            url = "http://127.0.0.1:3001/mcp"
            tools = ["*"]
            "#,
        )
        .expect("valid");
        assert!(c.tools.is_empty());
        assert_eq!(c.upstreams.len(), 2);
        let up = &c.upstreams[0];
        assert_eq!(up.place, "[[upstream]] #1 (\"everything\")");
        assert_eq!(up.template.queue, "slow");
        assert_eq!(up.prefix, "ev_");
        assert!(matches!(&up.select, Select::Names(n) if n == &["get-sum"]));
        assert!(
            matches!(&c.upstreams[1].target, Target::Url(u) if u == "http://127.0.0.1:3001/mcp")
        );
    }

    #[test]
    fn each_mistake_names_entry_and_field() {
        let ok = "name = \"u\"\ncommand = [\"x\"]\ntools = [\"*\"]\n";
        let cases = [
            (format!("[[upstream]]\n{ok}shell = true\n"), "[[upstream]] #1 (\"u\"): field shell: unknown field (expected one of name, policy,"),
            (format!("[[upstream]]\n{ok}description = \"d\"\n"), "field description: comes from the upstream's tools/list"),
            ("[[upstream]]\nname = \"u\"\ntools = [\"*\"]\n".to_owned(), "field command: missing"),
            (format!("[[upstream]]\n{ok}url = \"http://h/mcp\"\n"), "field url: give either command or url, not both"),
            ("[[upstream]]\nname = \"u\"\ncommand = []\ntools = [\"*\"]\n".to_owned(), "field command: expected a non-empty list of strings"),
            ("[[upstream]]\nname = \"u\"\ncommand = [\"x\"]\n".to_owned(), "field tools: missing"),
            ("[[upstream]]\nname = \"u\"\ncommand = [\"x\"]\ntools = [\"a\", \"a\"]\n".to_owned(), "field tools: \"a\" is listed twice"),
            ("[[upstream]]\nname = \"u\"\ncommand = [\"x\"]\ntools = [\"*\", \"a\"]\n".to_owned(), "field tools: expected [\"*\"] or a non-empty list"),
            ("[[upstream]]\nname = \"u\"\nurl = \"ftp://h\"\ntools = [\"*\"]\n".to_owned(), "field url: \"ftp://h\": expected an http:// or https:// URL"),
            ("[[upstream]]\nname = \"u\"\nurl = \"http://h/mcp\"\nenv = [\"HOME\"]\ntools = [\"*\"]\n".to_owned(), "field env: applies to command, not to url"),
            (format!("[[upstream]]\n{ok}prefix = \"a b\"\n"), "field prefix: \"a b\": expected characters"),
            (format!("[[upstream]]\n{ok}timeout = \"later\"\n"), "field timeout: \"later\": expected a duration"),
            (format!("[[upstream]]\n{ok}[[upstream]]\n{ok}"), "[[upstream]] #2 (\"u\"): field name: \"u\" is used by an earlier [[upstream]] entry"),
        ];
        for (text, want) in cases {
            let got = match parse(&text) {
                Ok(_) => panic!("accepted: {text}"),
                Err(e) => e,
            };
            assert!(
                got.contains(want),
                "for {text:?}\n got: {got}\nwant: {want}"
            );
            assert!(
                got.starts_with("MCPT_TOOLS_FILE=t.toml: [[upstream]] #"),
                "{got}"
            );
            assert_eq!(got.lines().count(), 1, "one line: {got}");
        }
    }

    #[test]
    fn the_example_catalog_is_valid() {
        let text = include_str!("../../../deploy/examples/upstream-everything.toml");
        let c = parse(text).expect("deploy/examples/upstream-everything.toml");
        assert_eq!(c.upstreams.len(), 1);
        assert_eq!(c.upstreams[0].prefix, "everything_");
    }

    /// An upstream's schema with a keyword the gateway does not enforce keeps its tool (the
    /// upstream validates its own input); one that is not an object schema does not.
    #[test]
    fn an_unenforced_upstream_keyword_keeps_the_tool() {
        let listing = |name: &str, input_schema: Value| WireTool {
            name: name.to_owned(),
            description: String::new(),
            input_schema,
            extra: serde_json::Map::new(),
        };
        let listed = [
            listing(
                "loose",
                json!({"type": "object", "unevaluatedProperties": false}),
            ),
            listing("odd", json!({"type": "array"})),
        ];
        let entry = |tools: &str| {
            let text = format!("[[upstream]]\nname = \"u\"\ncommand = [\"x\"]\ntools = {tools}\n");
            parse(&text).expect("valid").upstreams.remove(0)
        };
        let all = entry("[\"*\"]").choose(&listed).ok().expect("chosen");
        let names: Vec<&str> = all.iter().map(|(t, _)| t.name.as_str()).collect();
        assert_eq!(names, ["loose"]);
        let named = entry("[\"loose\"]").choose(&listed).ok().expect("chosen");
        assert_eq!(named[0].0.input_schema["unevaluatedProperties"], false);
        let refused = entry("[\"odd\"]").choose(&listed).expect_err("refused");
        assert_eq!(
            refused.problem,
            "tool \"odd\" its inputSchema: the root must have type = \"object\""
        );
    }

    #[tokio::test]
    async fn an_upstream_that_cannot_start_is_one_line() {
        let c = parse(
            "[[upstream]]\nname = \"u\"\ncommand = [\"/nonexistent/server\"]\ntools = [\"*\"]\n",
        )
        .expect("valid");
        let e = c.connect().await.err().expect("refused").to_string();
        assert!(
            e.starts_with("MCPT_TOOLS_FILE=t.toml: [[upstream]] #1 (\"u\"): field command: cannot start the upstream: cannot start /nonexistent/server"),
            "{e}"
        );
        assert_eq!(e.lines().count(), 1, "{e}");
        // A process that exits at once: the reason says so (whether the initialize was
        // written before it went is a race: "connection closed" or "… before sending").
        let c = parse("[[upstream]]\nname = \"u\"\ncommand = [\"sh\", \"-c\", \"echo no way >&2; exit 3\"]\ntools = [\"*\"]\n")
            .expect("valid");
        let e = c.connect().await.err().expect("refused").to_string();
        assert!(
            e.contains("initialize failed: connection closed")
                && e.contains(": the process exited"),
            "{e}"
        );
        assert!(e.contains("no way"), "{e}");
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
