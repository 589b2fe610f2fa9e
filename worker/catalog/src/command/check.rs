//! One `[[command]]` entry checked: its own fields read, `argv` and `stdin` made into
//! [`Part`]s, `cwd` and `progress` checked. The fields every kind takes are the crate
//! root's (`tool_spec`); running the command is [`command`](super)'s.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use mcp_tasks_shared::config::WorkerConfig;
use serde::Deserialize;

use super::{Command, CommandTool, Part};
use crate::{FieldError, bad, directory, fields, schema_properties, tool_spec};

/// The fields only `[[command]]` takes.
#[derive(Deserialize)]
struct CommandFields {
    #[serde(default, deserialize_with = "argv")]
    argv: Option<Vec<String>>,
    stdin: Option<String>,
    cwd: Option<String>,
    #[serde(default, deserialize_with = "fields::env_names")]
    env: Option<Vec<String>>,
    progress: Option<String>,
    #[serde(
        default = "fields::default_max_output",
        deserialize_with = "fields::max_output"
    )]
    max_output: usize,
    #[serde(default, deserialize_with = "fields::exit_codes")]
    retry_on_exit: Option<Vec<i32>>,
}

/// What is wrong with `argv`, or with one of its elements or the `stdin` text as a
/// [`Part`] (the element's place is added by the caller).
#[derive(Debug, thiserror::Error)]
enum ArgvError {
    /// Not a list of strings, or an empty one.
    #[error("expected a non-empty list of strings")]
    NotList,
    /// An element (its index and TOML type) is not a string.
    #[error("element {index} is a {kind}, expected a string")]
    NotString { index: usize, kind: &'static str },
    /// A placeholder naming no property of the schema.
    #[error("placeholder {{{0}}} names no property of input_schema")]
    UnknownArgument(String),
    /// A brace that is neither doubled nor part of a whole-element placeholder.
    #[error(
        "a placeholder must be a whole element like \"{{text}}\" (write {{{{ or }}}} for a literal brace)"
    )]
    LoneBrace,
}

/// `argv`: a non-empty list of strings. Walked by hand: the message names the element.
fn argv<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    fields::checked(d, |v| {
        let list = v
            .as_array()
            .filter(|a| !a.is_empty())
            .ok_or(ArgvError::NotList)?;
        let strings = list.iter().enumerate().map(|(index, element)| {
            element
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| ArgvError::NotString {
                    index,
                    kind: element.type_str(),
                })
        });
        strings.collect::<Result<_, _>>().map(Some)
    })
}

/// One `[[command]]` entry, checked.
pub(crate) fn entry(
    entry: &toml::Table,
    base: &Path,
    config: &WorkerConfig,
) -> Result<CommandTool, FieldError> {
    let (common, own) = fields::read::<CommandFields>(entry, &[])?;
    let timeout = common.timeout.clone();
    let spec = tool_spec(common, config)?;
    let names = schema_properties(&spec.tool.input_schema);
    if own.retry_on_exit.is_some() && spec.retry.is_none() {
        return Err(bad(
            "retry_on_exit",
            "needs retry = { attempts = N, ... } on the same entry",
        ));
    }

    let Some(argv) = own.argv else {
        return Err(bad(
            "argv",
            "missing (a list like [\"printf\", \"%s\", \"{text}\"])",
        ));
    };
    let mut parts = Vec::with_capacity(argv.len());
    for (i, s) in argv.iter().enumerate() {
        let part = template(s, names.as_ref())
            .map_err(|why| bad("argv", format!("element {i} {s:?}: {why}")))?;
        if i == 0 && matches!(part, Part::Arg(_)) {
            return Err(bad(
                "argv",
                "element 0 is the program and must be fixed, not a placeholder",
            ));
        }
        if i == 0 && matches!(&part, Part::Text(p) if p.is_empty()) {
            return Err(bad("argv", "element 0 (the program) is empty"));
        }
        parts.push(part);
    }
    let stdin = own
        .stdin
        .map(|s| template(&s, names.as_ref()).map_err(|why| bad("stdin", why.to_string())))
        .transpose()?;
    let cwd = own.cwd.map(|s| directory(base, &s)).transpose()?;
    let progress = own
        .progress
        .map(|s| {
            regex::Regex::new(&s).map_err(|e| {
                let first = e.to_string();
                let first = first.lines().last().unwrap_or_default().trim().to_owned();
                bad(
                    "progress",
                    format!("not a valid regular expression: {first}"),
                )
            })
        })
        .transpose()?;
    Ok(CommandTool {
        spec,
        command: Arc::new(Command {
            argv: parts,
            stdin,
            cwd,
            env: own.env.unwrap_or_default(),
            progress,
            max_output: own.max_output,
            timeout: timeout.map(|l| (l.value, l.written)),
            retry_on_exit: own.retry_on_exit.unwrap_or_default(),
        }),
    })
}

/// An element: exactly `{name}` is a placeholder; otherwise literal text in which `{{`
/// and `}}` stand for one brace and any other brace is refused.
fn template(s: &str, names: Option<&HashSet<String>>) -> Result<Part, ArgvError> {
    if let Some(name) = s.strip_prefix('{').and_then(|r| r.strip_suffix('}'))
        && !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-".contains(c))
    {
        if let Some(names) = names
            && !names.contains(name)
        {
            return Err(ArgvError::UnknownArgument(name.to_owned()));
        }
        return Ok(Part::Arg(name.to_owned()));
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' | '}' if chars.peek() == Some(&c) => {
                chars.next();
                out.push(c);
            }
            '{' | '}' => return Err(ArgvError::LoneBrace),
            _ => out.push(c),
        }
    }
    Ok(Part::Text(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_braces_are_escaped_and_placeholders_are_whole_elements() {
        let names = None;
        assert!(matches!(template("{a}", names), Ok(Part::Arg(n)) if n == "a"));
        assert!(matches!(template("{{a}}", names), Ok(Part::Text(t)) if t == "{a}"));
        assert!(template("x{a}", names).is_err());
        assert!(template("{a}{b}", names).is_err());
        assert!(template("{}", names).is_err());
        assert!(template("{a b}", names).is_err());
        assert!(matches!(template("%s", names), Ok(Part::Text(t)) if t == "%s"));
        assert_eq!(
            template("x{a}", names)
                .err()
                .map(|e| e.to_string())
                .as_deref(),
            Some(
                "a placeholder must be a whole element like \"{text}\" (write {{ or }} for a literal brace)"
            )
        );
    }
}
