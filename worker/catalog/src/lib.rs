//! Tools declared in a TOML file (`MCPT_TOOLS_FILE`) instead of written in Rust.
//!
//! This module reads and checks the catalog: every mistake stops the worker at start with
//! one line naming the file, the entry and the field (the binary exits 64, as for a bad
//! variable). Each kind's own fields are checked beside the code that runs it: a
//! `[[command]]` entry in `catalog/command/check.rs`, run by `catalog/command.rs`; an
//! `[[http]]` entry (a fixed URL called with the arguments as JSON, its `202` jobs polled)
//! in `catalog/http/check.rs`, run by `catalog/http.rs`, which documents its polling
//! protocol. An `[[upstream]]` entry (an existing MCP server, over stdio or Streamable
//! HTTP) is checked in `catalog/upstream/check.rs`, but its tools are only known once
//! [`Catalog::connect`] has started it and read its `tools/list`; `catalog/upstream.rs`
//! documents the entry and how calls are forwarded.
//!
//! ```toml
//! [[command]]
//! name = "say"
//! description = "Print the text."
//! argv = ["printf", "%s", "{text}"]
//! input_schema = { type = "object", properties = { text = { type = "string" } }, required = ["text"] }
//! timeout = "30s"
//! ```
//!
//! An `argv` element that is exactly `{name}` becomes that argument's value as one
//! element; any other brace in an element is a mistake (`{{` and `}}` write a literal
//! brace), so an argument can never add, split or reinterpret elements.

#![warn(missing_docs)]

mod command;
mod fields;
mod http;
mod schema;
mod upstream;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use mcp_tasks_shared::config::WorkerConfig;
use serde_json::{Value, json};

use self::fields::Common;
use self::schema::check_schema;
use mcp_tasks_worker::{Tool, ToolSpec};

/// Least time between two status messages a catalog tool writes (at most four a second).
pub(crate) const STATUS_EVERY: Duration = Duration::from_millis(250);
/// Longest status message a catalog tool writes, in characters.
pub(crate) const STATUS_CHARS: usize = 200;

/// Copy the latest offered text to the task's status message, at most every
/// [`STATUS_EVERY`]; texts in between are skipped, the latest always lands.
pub(crate) async fn report(
    ctx: mcp_tasks_worker::TaskContext,
    mut latest: tokio::sync::watch::Receiver<String>,
) {
    while latest.changed().await.is_ok() {
        let text = latest.borrow_and_update().clone();
        if ctx.set_status(&text).await.is_err() {
            return;
        }
        tokio::time::sleep(STATUS_EVERY).await;
    }
}

/// Sleep for `limit`, or forever without one.
pub(crate) async fn sleep_or_never(limit: Option<Duration>) {
    match limit {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

/// Aborts its task when dropped (a call's helper tasks end with the call).
pub(crate) struct AbortOnDrop(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The variable naming the catalog file; unset or empty means no catalog.
pub const ENV_TOOLS_FILE: &str = "MCPT_TOOLS_FILE";

/// Default `max_output`: bytes of stdout (and of stderr) kept, the tail. Stdout appears in
/// the result twice (text and `structuredContent`), so this stays well under the default
/// `MCPT_MAX_RESULT_BYTES` (1 MiB).
pub const DEFAULT_MAX_OUTPUT: usize = 256 << 10;

/// A mistake in the catalog, as one line: `MCPT_TOOLS_FILE=PATH: WHERE: WHAT`.
#[derive(Debug, thiserror::Error)]
#[error("{ENV_TOOLS_FILE}={file}: {what}")]
pub struct CatalogError {
    /// The catalog file as given.
    pub file: String,
    /// The entry, the field and what is wrong with it.
    pub what: String,
}

/// What is wrong with one field of one entry (the entry is added by the caller).
#[derive(Debug)]
struct FieldError {
    field: String,
    problem: String,
}

fn bad(field: &str, problem: impl Into<String>) -> FieldError {
    FieldError {
        field: field.to_owned(),
        problem: problem.into(),
    }
}

/// The catalog named by `MCPT_TOOLS_FILE`, or an empty one when it is unset.
///
/// # Errors
/// The file cannot be read, is not TOML, or has a mistake (see [`parse`]).
pub fn from_env(config: &WorkerConfig, builtin: &[Arc<dyn Tool>]) -> Result<Catalog, CatalogError> {
    match std::env::var_os(ENV_TOOLS_FILE) {
        Some(path) if !path.is_empty() => load(Path::new(&path), config, builtin),
        _ => Ok(Catalog::default()),
    }
}

/// A checked catalog: the tools it declares, and the `[[upstream]]` entries whose tools
/// [`Catalog::connect`] finds out.
#[derive(Default)]
pub struct Catalog {
    /// The tools declared one by one (`[[command]]`, `[[http]]`).
    pub tools: Vec<Arc<dyn Tool>>,
    upstreams: Vec<upstream::Upstream>,
    label: String,
    /// Names in use (built-in and declared tools), which an upstream's tools must avoid.
    taken: HashSet<String>,
}

impl Catalog {
    /// Every tool of the catalog: the declared ones, then those of each upstream, which is
    /// started, initialized and asked for its `tools/list` (`catalog/upstream.rs`), and the
    /// providers of the upstreams' prompts and resources. The upstreams' sessions stay open
    /// for the calls.
    ///
    /// # Errors
    /// An upstream cannot be started or initialized, lacks a listed tool, or one of its
    /// tools, prompts or resources would take a name or URI already in use; the message is
    /// one line, as for a mistake.
    pub async fn connect(self) -> Result<Connected, CatalogError> {
        let Catalog {
            mut tools,
            upstreams,
            label,
            mut taken,
        } = self;
        let mut claims = upstream::Claims::default();
        let mut providers = Vec::new();
        for up in upstreams {
            let place = up.place.clone();
            let (found, provider) =
                up.connect(&mut taken, &mut claims)
                    .await
                    .map_err(|e| CatalogError {
                        file: label.clone(),
                        what: format!("{place}: field {}: {}", e.field, e.problem),
                    })?;
            tools.extend(found);
            providers.extend(provider);
        }
        Ok(Connected { tools, providers })
    }
}

/// What a connected catalog serves.
pub struct Connected {
    /// Its tools.
    pub tools: Vec<Arc<dyn Tool>>,
    /// The `[[upstream]]` entries serving prompts or resources.
    pub providers: Vec<Arc<dyn mcp_tasks_worker::Provider>>,
}

/// The catalog at `path`; relative `cwd`s are taken from its folder.
///
/// # Errors
/// The file cannot be read, is not TOML, or has a mistake (see [`parse`]).
pub fn load(
    path: &Path,
    config: &WorkerConfig,
    builtin: &[Arc<dyn Tool>],
) -> Result<Catalog, CatalogError> {
    let label = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| CatalogError {
        file: label.clone(),
        what: format!("cannot read the file: {e}"),
    })?;
    let base = path.parent().unwrap_or(Path::new("."));
    parse(&label, base, &text, config, builtin)
}

/// The catalog `text` (the file `label`, whose folder is `base`), checked against the
/// worker's queues and the names of the `builtin` tools.
///
/// # Errors
/// The first mistake: TOML syntax, an unknown kind or field, a field of the wrong type or
/// value, a duplicate or clashing name, an unserved queue.
pub fn parse(
    label: &str,
    base: &Path,
    text: &str,
    config: &WorkerConfig,
    builtin: &[Arc<dyn Tool>],
) -> Result<Catalog, CatalogError> {
    let fail = |what: String| CatalogError {
        file: label.to_owned(),
        what,
    };
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].lines().count().max(1));
        let at = line.map(|l| format!(" at line {l}")).unwrap_or_default();
        fail(format!("not valid TOML{at}: {}", e.message().trim()))
    })?;
    let reserved: HashSet<String> = builtin.iter().map(|t| t.spec().tool.name).collect();
    let mut seen = HashSet::new();
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    let mut upstreams = Vec::new();
    // Walked by hand, not derived: serde's unknown-field and type messages are not ours, and
    // each entry must stay a raw table for `fields::read`'s check of its keys.
    for (kind, entries) in &table {
        match kind.as_str() {
            "command" | "http" | "upstream" => {}
            other => {
                return Err(fail(format!(
                    "unknown key {other:?} (expected [[command]], [[http]] or [[upstream]] entries)"
                )));
            }
        }
        let Some(entries) = entries.as_array() else {
            return Err(fail(format!(
                "{kind}: expected [[{kind}]] tables, found a {}",
                entries.type_str()
            )));
        };
        for (i, entry) in entries.iter().enumerate() {
            let place = |name: Option<&str>| match name {
                Some(n) => format!("[[{kind}]] #{} ({n:?})", i + 1),
                None => format!("[[{kind}]] #{}", i + 1),
            };
            let Some(entry) = entry.as_table() else {
                return Err(fail(format!("{}: not a table", place(None))));
            };
            let name = entry.get("name").and_then(toml::Value::as_str);
            if kind == "upstream" {
                let up = upstream::entry(
                    entry,
                    base,
                    config,
                    place(name),
                    u32::try_from(upstreams.len()).unwrap_or(u32::MAX),
                )
                .map_err(|e| fail(format!("{}: field {}: {}", place(name), e.field, e.problem)))?;
                if upstreams
                    .iter()
                    .any(|u: &upstream::Upstream| u.name == up.name)
                {
                    return Err(fail(format!(
                        "{}: field name: {:?} is used by an earlier [[upstream]] entry",
                        up.place, up.name
                    )));
                }
                upstreams.push(up);
                continue;
            }
            let tool: Arc<dyn Tool> = match kind.as_str() {
                "http" => http::entry(entry, config).map(|t| Arc::new(t) as Arc<dyn Tool>),
                _ => command::entry(entry, base, config).map(|t| Arc::new(t) as Arc<dyn Tool>),
            }
            .map_err(|e| fail(format!("{}: field {}: {}", place(name), e.field, e.problem)))?;
            let name = tool.spec().tool.name;
            let clash = if reserved.contains(&name) {
                Some("is also the name of a built-in tool (MCPT_TOOLS)")
            } else if !seen.insert(name.clone()) {
                Some("is used by an earlier entry")
            } else {
                None
            };
            if let Some(why) = clash {
                return Err(fail(format!(
                    "{}: field name: {name:?} {why}",
                    place(Some(&name))
                )));
            }
            tools.push(tool);
        }
    }
    Ok(Catalog {
        tools,
        upstreams,
        label: label.to_owned(),
        taken: reserved.into_iter().chain(seen).collect(),
    })
}

/// `cwd`, relative to the catalog's folder `base`: it must be a directory.
fn directory(base: &Path, cwd: &str) -> Result<PathBuf, FieldError> {
    let dir = base.join(cwd);
    if !dir.is_dir() {
        return Err(bad("cwd", format!("{} is not a directory", dir.display())));
    }
    Ok(dir)
}

/// The fields every kind takes, checked, as a [`ToolSpec`].
fn tool_spec(common: Common, config: &WorkerConfig) -> Result<ToolSpec, FieldError> {
    let Some(name) = common.name else {
        return Err(bad("name", "missing"));
    };
    let valid = (1..=128).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    if !valid {
        return Err(bad(
            "name",
            format!("{name:?}: expected 1 to 128 characters of A-Z a-z 0-9 _ . -"),
        ));
    }
    let schema = match common.input_schema {
        None => json!({"type": "object"}),
        Some(schema) => {
            check_schema(&schema).map_err(|why| bad("input_schema", why.to_string()))?;
            schema
        }
    };
    let description = common.description.unwrap_or_default();
    let mut spec = ToolSpec::new(&name, &description, schema);
    if let Some(policy) = common.policy {
        spec.policy = policy;
    }
    spec.queue = match common.queue {
        None => config.queues.first().cloned().unwrap_or(spec.queue),
        Some(q) if config.queues.contains(&q) => q,
        Some(q) => {
            return Err(bad(
                "queue",
                format!(
                    "{q:?} is not served by this worker (MCPT_QUEUES={})",
                    config.queues.join(",")
                ),
            ));
        }
    };
    spec.ttl = common.ttl.map(|l| l.value);
    spec.poll_interval = common.poll_interval.map(|l| l.value);
    spec.outlives_caller = common.outlives_caller;
    spec.retry = common.retry;
    if let Some(keep) = common.dead_letters {
        spec.dead_letters.keep = keep;
    }
    spec.dead_letters.tool_errors = common.dead_letter_tool_errors;
    spec.max_result_bytes = common.max_result_bytes;
    spec.priority = common.priority.unwrap_or_default();
    spec.max_running = common.max_running;
    spec.rate = common.rate;
    if let Some(key) = common.concurrency_key {
        let arg = key
            .strip_prefix('{')
            .and_then(|k| k.strip_suffix('}'))
            .filter(|k| !k.is_empty() && !k.contains(['{', '}']))
            .ok_or_else(|| {
                bad(
                    "concurrency_key",
                    format!("{key:?}: expected one argument's placeholder, like \"{{repo}}\""),
                )
            })?;
        if spec.max_running.is_none() && spec.rate.is_none() {
            return Err(bad(
                "concurrency_key",
                "needs max_running = N or rate = \"N/min\" on the same entry",
            ));
        }
        if let Some(names) = schema_properties(&spec.tool.input_schema)
            && !names.contains(arg)
        {
            return Err(bad(
                "concurrency_key",
                format!("{key:?} names no property of input_schema"),
            ));
        }
        spec.concurrency_key = Some(arg.to_owned());
    }
    Ok(spec)
}

/// The declared property names, when the schema lists `properties`.
fn schema_properties(schema: &Value) -> Option<HashSet<String>> {
    schema
        .get("properties")?
        .as_object()
        .map(|m| m.keys().cloned().collect())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use mcp_tasks_worker::Policy;

    fn config() -> WorkerConfig {
        let env: HashMap<&str, &str> = HashMap::from([("MCPT_QUEUES", "default,slow")]);
        WorkerConfig::from_source(&env).expect("config")
    }

    // String, not `CatalogError`: the tests compare the one-line message as text.
    fn check(text: &str) -> Result<Vec<Arc<dyn Tool>>, String> {
        let builtin = mcp_tasks_worker::tools::packs(&["demo".to_owned()]);
        parse("t.toml", Path::new("."), text, &config(), &builtin)
            .map(|c| c.tools)
            .map_err(|e| e.to_string())
    }

    fn refused(text: &str) -> String {
        match check(text) {
            Ok(_) => panic!("accepted: {text}"),
            Err(e) => e,
        }
    }

    /// The example catalog under deploy/ parses, and `outlives_caller` reaches the spec.
    #[test]
    fn the_build_tools_example_is_a_valid_catalog() {
        let tools = check(include_str!("../../../deploy/examples/build-tools.toml"))
            .expect("deploy/examples/build-tools.toml");
        let specs: Vec<ToolSpec> = tools.iter().map(|t| t.spec()).collect();
        assert_eq!(specs.len(), 2);
        assert!(specs[0].outlives_caller && !specs[1].outlives_caller);
        assert!(
            refused("[[command]]\nname = \"x\"\nargv = [\"true\"]\noutlives_caller = \"yes\"\n")
                .contains("field outlives_caller: expected true or false")
        );
    }

    #[test]
    fn a_full_entry_becomes_a_tool_spec() {
        let tools = check(
            r#"
            [[command]]
            name = "say"
            description = "Print it."
            argv = ["printf", "%s{{}}", "{text}"]
            stdin = "{text}"
            input_schema = { type = "object", properties = { text = { type = "string" } } }
            policy = "auto"
            queue = "slow"
            ttl = "1h"
            poll_interval = "250ms"
            timeout = "30s"
            env = ["HOME"]
            progress = "^step (.*)$"
            max_output = 4096
            "#,
        )
        .expect("valid");
        let spec = tools[0].spec();
        assert_eq!(spec.tool.name, "say");
        assert_eq!(spec.policy, Policy::Auto);
        assert_eq!(spec.queue, "slow");
        assert_eq!(spec.ttl, Some(Duration::from_secs(3600)));
        assert_eq!(spec.poll_interval, Some(Duration::from_millis(250)));
        assert_eq!(
            spec.tool.input_schema["properties"]["text"]["type"],
            "string"
        );
    }

    /// A tool keeps its failures a week unless it says otherwise; `false` keeps none.
    #[test]
    fn dead_letters_are_kept_a_week_unless_the_entry_says() {
        let tools = check(
            r#"
            [[command]]
            name = "a"
            argv = ["true"]
            [[command]]
            name = "b"
            argv = ["true"]
            dead_letters = "1h"
            dead_letter_tool_errors = true
            [[command]]
            name = "c"
            argv = ["true"]
            dead_letters = false
            "#,
        )
        .expect("valid");
        let policies: Vec<_> = tools.iter().map(|t| t.spec().dead_letters).collect();
        assert_eq!(
            policies[0].keep,
            Some(mcp_tasks_worker::DEFAULT_DEAD_LETTER_KEEP)
        );
        assert!(!policies[0].tool_errors);
        assert_eq!(policies[1].keep, Some(Duration::from_secs(3600)));
        assert!(policies[1].tool_errors);
        assert_eq!(policies[2].keep, None);
    }

    /// How long finished tasks stay readable and how large their results may be are read
    /// from the same entry; unset, the worker's defaults apply.
    #[test]
    fn retention_and_result_size_are_set_per_entry() {
        let tools = check(
            r#"
            [[command]]
            name = "a"
            argv = ["true"]
            ttl = "2h"
            max_result_bytes = 4096
            [[command]]
            name = "b"
            argv = ["true"]
            "#,
        )
        .expect("valid");
        assert_eq!(tools[0].spec().ttl, Some(Duration::from_secs(7200)));
        assert_eq!(tools[0].spec().max_result_bytes, Some(4096));
        assert_eq!(tools[1].spec().ttl, None);
        assert_eq!(tools[1].spec().max_result_bytes, None);
    }

    /// A tool's jobs are `normal` unless its entry says otherwise.
    #[test]
    fn priority_is_normal_unless_the_entry_says() {
        let tools = check(
            "[[command]]\nname = \"a\"\nargv = [\"true\"]\npriority = \"high\"\n\
             [[command]]\nname = \"b\"\nargv = [\"true\"]\n",
        )
        .expect("valid");
        assert_eq!(tools[0].spec().priority, mcp_tasks_worker::Priority::High);
        assert_eq!(tools[1].spec().priority, mcp_tasks_worker::Priority::Normal);
    }

    #[test]
    fn defaults_apply() {
        let tools = check("[[command]]\nname = \"x\"\nargv = [\"true\"]\n").expect("valid");
        let spec = tools[0].spec();
        assert_eq!(spec.policy, Policy::Task);
        assert_eq!(spec.queue, "default");
        assert_eq!(spec.tool.input_schema, json!({"type": "object"}));
    }

    #[test]
    fn each_mistake_names_file_entry_and_field() {
        let cases = [
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\nshell = true\n",
                "t.toml: [[command]] #1 (\"a\"): field shell: unknown field (expected one of name,",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"echo\", \"{text} extra\"]\n",
                "[[command]] #1 (\"a\"): field argv: element 1 \"{text} extra\": a placeholder must be a whole element",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\n[[command]]\nname = \"a\"\nargv = [\"y\"]\n",
                "[[command]] #2 (\"a\"): field name: \"a\" is used by an earlier entry",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\ntimeout = \"ten\"\n",
                "[[command]] #1 (\"a\"): field timeout: \"ten\": expected a duration",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\nqueue = \"gpu\"\n",
                "[[command]] #1 (\"a\"): field queue: \"gpu\" is not served by this worker (MCPT_QUEUES=default,slow)",
            ),
            (
                "[[command]]\nname = \"echo\"\nargv = [\"x\"]\n",
                "field name: \"echo\" is also the name of a built-in tool",
            ),
            (
                "[[command]]\nargv = [\"x\"]\n",
                "[[command]] #1: field name: missing",
            ),
            (
                "[[command]]\nname = \"a b\"\nargv = [\"x\"]\n",
                "field name: \"a b\": expected 1 to 128 characters",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"{prog}\"]\n",
                "field argv: element 0 is the program and must be fixed",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\", \"{txt}\"]\ninput_schema = { type = \"object\", properties = { text = { type = \"string\" } } }\n",
                "field argv: element 1 \"{txt}\": placeholder {txt} names no property of input_schema",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\ninput_schema = { type = \"array\" }\n",
                "field input_schema: the root must have type = \"object\"",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\npolicy = \"later\"\n",
                "field policy: \"later\": expected",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\nretry = { attempts = 0 }\n",
                "field retry: attempts 0: expected a whole number from 1 to 100",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\nretry = { attempts = 3, initial = \"soon\" }\n",
                "field retry: initial \"soon\": expected a duration",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\nretry = { attempts = 3, initial = \"2m\" }\n",
                "field retry: max (60s) is shorter than initial (120s)",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\nretry = { attempts = 3, tries = 2 }\n",
                "field retry: unknown key \"tries\"",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\ndead_letters = true\n",
                "field dead_letters: true: expected how long to keep them, like \"7d\", or false",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\ndead_letters = \"0s\"\n",
                "field dead_letters: \"0s\": expected how long",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\npriority = \"urgent\"\n",
                "field priority: \"urgent\": expected \"high\", \"normal\" or \"low\"",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\nmax_result_bytes = 10\n",
                "field max_result_bytes: 10: expected a number of bytes from 1024 to 67108864",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\nmax_result_bytes = \"1MiB\"\n",
                "field max_result_bytes: \"1MiB\": expected a number of bytes",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\nmax_running = 0\n",
                "field max_running: 0: expected a whole number of at least 1",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\nconcurrency_key = \"{repo}\"\n",
                "field concurrency_key: needs max_running = N or rate = \"N/min\" on the same entry",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\nrate = \"ten a minute\"\n",
                "field rate: \"ten a minute\": expected starts per window, like \"10/min\"",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\nmax_running = 2\nconcurrency_key = \"repo\"\n",
                "field concurrency_key: \"repo\": expected one argument's placeholder",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\nmax_running = 2\nconcurrency_key = \"{rep}\"\ninput_schema = { type = \"object\", properties = { repo = { type = \"string\" } } }\n",
                "field concurrency_key: \"{rep}\" names no property of input_schema",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\nretry_on_exit = [75]\n",
                "field retry_on_exit: needs retry = { attempts = N, ... } on the same entry",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\nretry = { attempts = 2 }\nretry_on_exit = [0]\n",
                "field retry_on_exit: [0]: expected a list of exit codes from 1 to 255",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\nprogress = \"(\"\n",
                "field progress: not a valid regular expression",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\ncwd = \"/nonexistent/dir\"\n",
                "field cwd: /nonexistent/dir is not a directory",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = []\n",
                "field argv: expected a non-empty list of strings",
            ),
            (
                "[[http]]\nname = \"a\"\n",
                "t.toml: [[http]] #1 (\"a\"): field url: missing",
            ),
            (
                "[[upstream]]\nname = \"a\"\n",
                "[[upstream]] #1 (\"a\"): field command: missing",
            ),
            (
                "name = \"a\"\n",
                "unknown key \"name\" (expected [[command]], [[http]] or [[upstream]] entries)",
            ),
            ("[[command]\n", "not valid TOML at line 1"),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\ndescription = 3\n",
                "[[command]] #1 (\"a\"): field description: expected a string",
            ),
            (
                "[[command]]\nname = 3\nargv = [\"x\"]\n",
                "[[command]] #1: field name: expected a string",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\", 3]\n",
                "field argv: element 1 is a integer, expected a string",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\nmax_output = -1\n",
                "field max_output: expected a positive number of bytes",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\nenv = [\"PATH\"]\n",
                "field env: expected a list of variable names",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\nttl = 5\n",
                "field ttl: 5: expected a duration like",
            ),
        ];
        for (text, want) in cases {
            let got = refused(text);
            assert!(
                got.contains(want),
                "for {text:?}\n got: {got}\nwant: {want}"
            );
            assert!(got.starts_with("MCPT_TOOLS_FILE=t.toml: "), "{got}");
            assert_eq!(got.lines().count(), 1, "one line: {got}");
        }
    }
}
