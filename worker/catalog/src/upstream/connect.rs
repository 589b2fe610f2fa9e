//! Starting a checked `[[upstream]]` entry: the session opened, its tools listed and
//! chosen, its prompts and resources listed when served, and our tools made of them. How
//! a call then runs is `upstream/call.rs`; the paged lists are `upstream/list.rs`.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use mcp_tasks_protocol::tools::Tool as WireTool;
use serde_json::Value;

use super::list::list_tools;
use super::provide::ServedError;
use super::session::{Pool, Session};
use super::{Claims, Select, Target, Upstream, UpstreamTool, call, provide};
use crate::schema::{SchemaError, check_shape};
use crate::{FieldError, bad};
use mcp_tasks_worker::{Provider, Tool, UpstreamAdvert};

/// Time to start an upstream and finish `initialize` (npx may download the package first).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Members of an upstream tool listing passed on to our `tools/list` besides name,
/// description and schema (not `execution`: how we run it is our policy's business).
const PASSED_MEMBERS: [&str; 4] = ["title", "annotations", "outputSchema", "icons"];

/// Why one of the upstream's tools cannot be one of ours.
#[derive(Debug, thiserror::Error)]
enum UnusableTool {
    /// Its name, with the prefix (given), is not a tool name.
    #[error("cannot be listed as {0:?} (1 to 128 characters of A-Z a-z 0-9 _ . -)")]
    Name(String),
    /// Its input schema is not an object schema.
    #[error("its inputSchema: {0}")]
    Schema(#[source] SchemaError),
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
    pub(crate) async fn connect(
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
                return Err(bad(field, e.to_string()));
            }
        };
        if let Some(advert) = &served
            && let Err(e) = claims.claim(advert)
        {
            session.close().await;
            return Err(e);
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
    async fn served(&self, session: &Session) -> Result<Option<UpstreamAdvert>, ServedError> {
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
        let usable = |t: &WireTool| -> Result<(WireTool, bool), UnusableTool> {
            let ours = format!("{}{}", self.prefix, t.name);
            if !valid_name(&ours) {
                return Err(UnusableTool::Name(ours));
            }
            check_shape(&t.input_schema).map_err(UnusableTool::Schema)?;
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::parse;
    use super::*;

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
        let all = entry("[\"*\"]").choose(&listed).expect("chosen");
        let names: Vec<&str> = all.iter().map(|(t, _)| t.name.as_str()).collect();
        assert_eq!(names, ["loose"]);
        let named = entry("[\"loose\"]").choose(&listed).expect("chosen");
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
}
