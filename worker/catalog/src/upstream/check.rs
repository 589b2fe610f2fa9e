//! One `[[upstream]]` entry checked before anything starts: its own fields read, how to
//! reach the server ([`Target`]) and which tools to offer ([`Select`]). Starting it and
//! reading its lists is `upstream/connect.rs`.

use std::collections::HashSet;
use std::path::Path;

use mcp_tasks_shared::config::WorkerConfig;
use serde::Deserialize;

use super::{Select, Target, Upstream};
use crate::fields::{self, string_list};
use crate::{FieldError, bad, directory, tool_spec};

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

/// What is wrong with the value of one of the fields only `[[upstream]]` takes.
#[derive(Debug, thiserror::Error)]
enum UpstreamValueError {
    /// `command` is not a non-empty list of strings with a program first.
    #[error("expected a non-empty list of strings")]
    Command,
    /// `url` is not a string.
    #[error("expected a string like \"http://host:port/mcp\"")]
    Url,
    /// `tools` names one tool twice.
    #[error("{0:?} is listed twice")]
    ListedTwice(String),
    /// `tools` is neither `["*"]` nor a list of names.
    #[error("expected [\"*\"] or a non-empty list of tool names")]
    Tools,
}

/// `command`: a non-empty list of strings, the program first.
fn command<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    fields::checked(d, |v| {
        string_list(v)
            .filter(|a| a.first().is_some_and(|p| !p.is_empty()))
            .map(Some)
            .ok_or(UpstreamValueError::Command)
    })
}

/// `url`: a string (checked once read).
fn url<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    fields::checked(d, |v| {
        v.as_str()
            .map(|s| Some(s.to_owned()))
            .ok_or(UpstreamValueError::Url)
    })
}

/// `tools`: `["*"]`, or names listed once each.
fn select<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Select>, D::Error> {
    fields::checked(d, |v| match string_list(v) {
        Some(l) if l == ["*"] => Ok(Some(Select::All)),
        Some(l) if !l.is_empty() && l.iter().all(|n| !n.is_empty() && n != "*") => {
            let mut seen = HashSet::new();
            if let Some(dup) = l.iter().find(|n| !seen.insert(n.as_str())) {
                return Err(UpstreamValueError::ListedTwice(dup.clone()));
            }
            Ok(Some(Select::Names(l)))
        }
        _ => Err(UpstreamValueError::Tools),
    })
}

/// The common fields an `[[upstream]]` entry cannot set: its upstream lists them.
const FROM_UPSTREAM: [&str; 2] = ["description", "input_schema"];

/// One `[[upstream]]` entry, checked; `place` names it in later messages.
pub(crate) fn entry(
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

#[cfg(test)]
mod tests {
    use super::super::tests::parse;
    use super::*;

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
        let text = include_str!("../../../../deploy/examples/upstream-everything.toml");
        let c = parse(text).expect("deploy/examples/upstream-everything.toml");
        assert_eq!(c.upstreams.len(), 1);
        assert_eq!(c.upstreams[0].prefix, "everything_");
    }
}
