//! One `[[http]]` entry checked: its own fields read, its URL checked, its headers taken
//! from the environment. The fields every kind takes are the crate root's (`tool_spec`);
//! calling the service is [`http`](super)'s.

use std::sync::Arc;

use hyper::Method;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use mcp_tasks_shared::config::WorkerConfig;
use serde::Deserialize;

use super::client::Service;
use super::url::check_url;
use super::{Http, HttpTool};
use crate::{FieldError, bad, fields, tool_spec};

/// Headers the worker writes itself (or that would break the framing).
const RESERVED_HEADERS: [&str; 7] = [
    "host",
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
    "upgrade",
    "idempotency-key",
];

/// The fields only `[[http]]` takes.
#[derive(Deserialize)]
struct HttpFields {
    url: Option<String>,
    #[serde(default = "post", deserialize_with = "method")]
    method: Method,
    headers: Option<toml::Value>,
    #[serde(default, deserialize_with = "fields::flag")]
    cancel: bool,
    #[serde(
        default = "fields::default_max_output",
        deserialize_with = "fields::max_output"
    )]
    max_output: usize,
}

fn post() -> Method {
    Method::POST
}

/// A `method` other than the three an `[[http]]` tool sends.
#[derive(Debug, thiserror::Error)]
#[error("{0}: expected \"POST\" (the default), \"GET\" or \"PUT\"")]
struct MethodError(toml::Value);

fn method<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Method, D::Error> {
    fields::checked(d, |v| match v.as_str() {
        Some("POST") => Ok(Method::POST),
        Some("GET") => Ok(Method::GET),
        Some("PUT") => Ok(Method::PUT),
        _ => Err(MethodError(v.clone())),
    })
}

/// What is wrong with `headers` (each header named by its key).
#[derive(Debug, thiserror::Error)]
enum HeaderError {
    /// Not a table of header = variable.
    #[error("expected a table like {{ Authorization = \"API_TOKEN\" }} (header = variable)")]
    NotTable,
    /// The key is no header name.
    #[error("{0:?} is not a valid header name")]
    Name(String),
    /// A header the worker writes itself.
    #[error("{0:?} is set by the worker")]
    Reserved(String),
    /// The value is not a variable name.
    #[error("{0:?}: expected the name of an environment variable")]
    NotVariable(String),
    /// The variable is set but empty.
    #[error("{name:?}: environment variable {var} is empty")]
    Empty { name: String, var: String },
    /// The variable is not set.
    #[error("{name:?}: environment variable {var} is not set")]
    Unset { name: String, var: String },
    /// The variable's value is not UTF-8.
    #[error("{name:?}: environment variable {var} is not UTF-8")]
    NotUnicode { name: String, var: String },
    /// The variable's value cannot be sent as a header value.
    #[error("{name:?}: environment variable {var} is not a valid header value")]
    Value { name: String, var: String },
}

/// One `[[http]]` entry, checked.
pub(crate) fn entry(entry: &toml::Table, config: &WorkerConfig) -> Result<HttpTool, FieldError> {
    let (common, own) = fields::read::<HttpFields>(entry, &[])?;
    let timeout = common.timeout.clone().map(|l| (l.value, l.written));
    let spec = tool_spec(common, config)?;
    let Some(url) = own.url else {
        return Err(bad(
            "url",
            "missing (like \"https://jobs.example.com/v1/resize\")",
        ));
    };
    let url = check_url(&url).map_err(|why| bad("url", format!("{url:?}: {why}")))?;
    let headers = match &own.headers {
        None => HeaderMap::new(),
        Some(v) => headers_from_env(v).map_err(|why| bad("headers", why.to_string()))?,
    };
    let service =
        Service::new(url, headers, own.max_output).map_err(|why| bad("url", why.to_string()))?;
    let poll_interval = spec.poll_interval.unwrap_or(config.tasks.poll_interval);
    Ok(HttpTool {
        spec,
        http: Arc::new(Http {
            service,
            method: own.method,
            cancel: own.cancel,
            poll_interval,
            timeout,
        }),
    })
}

/// `{ Header-Name = "VARIABLE" }`: each header with the value of its variable now.
/// Walked by hand: its keys are header names, not fields a struct could declare.
fn headers_from_env(v: &toml::Value) -> Result<HeaderMap, HeaderError> {
    let Some(table) = v.as_table() else {
        return Err(HeaderError::NotTable);
    };
    let mut headers = HeaderMap::new();
    for (name, var) in table {
        let header =
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| HeaderError::Name(name.clone()))?;
        if RESERVED_HEADERS.contains(&header.as_str()) {
            return Err(HeaderError::Reserved(name.clone()));
        }
        let Some(var) = var
            .as_str()
            .filter(|s| !s.is_empty() && !s.contains(['=', '\0']))
        else {
            return Err(HeaderError::NotVariable(name.clone()));
        };
        let (name, var) = (name.clone(), var.to_owned());
        let value = match std::env::var(&var) {
            Ok(value) if !value.is_empty() => value,
            Ok(_) => return Err(HeaderError::Empty { name, var }),
            Err(std::env::VarError::NotPresent) => return Err(HeaderError::Unset { name, var }),
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(HeaderError::NotUnicode { name, var });
            }
        };
        let Ok(mut value) = HeaderValue::from_str(&value) else {
            return Err(HeaderError::Value { name, var });
        };
        value.set_sensitive(true);
        headers.append(header, value);
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use super::*;

    fn config() -> WorkerConfig {
        let env: HashMap<&str, &str> = HashMap::from([("MCPT_QUEUES", "default")]);
        WorkerConfig::from_source(&env).expect("config")
    }

    /// One entry's fields (the lines under `[[http]]`), checked. Their place in the file
    /// and the one-line format are `catalog.rs`'s, tested there.
    // String, not `FieldError`: the tests compare `field NAME: PROBLEM` as text.
    fn check(fields: &str) -> Result<HttpTool, String> {
        let table: toml::Table = fields.parse().expect("TOML");
        entry(&table, &config()).map_err(|e| format!("field {}: {}", e.field, e.problem))
    }

    #[test]
    fn a_full_entry_is_accepted() {
        // PATH is set wherever tests run; its value is only read.
        let tool = check(
            r#"
            name = "resize"
            url = "https://jobs.example.com/v1/resize?fast=1"
            method = "PUT"
            headers = { Authorization = "PATH", "X-Api-Key" = "PATH" }
            cancel = true
            max_output = 4096
            timeout = "10m"
            poll_interval = "2s"
            "#,
        )
        .expect("valid");
        assert_eq!(tool.spec.tool.name, "resize");
        let http = &tool.http;
        assert_eq!(http.method, Method::PUT);
        assert!(http.cancel);
        assert_eq!(http.poll_interval, Duration::from_secs(2));
        assert_eq!(http.service.max_output, 4096);
        assert_eq!(
            http.timeout.as_ref().map(|t| t.0),
            Some(Duration::from_secs(600))
        );

        let tool = check("name = \"g\"\nurl = \"http://127.0.0.1:1/\"\n").expect("valid");
        assert_eq!(tool.http.method, Method::POST);
        assert!(!tool.http.cancel);
        assert_eq!(tool.http.poll_interval, config().tasks.poll_interval);
        assert_eq!(tool.http.service.max_output, crate::DEFAULT_MAX_OUTPUT);
    }

    #[test]
    fn each_mistake_names_the_field() {
        let ok = "name = \"a\"\nurl = \"http://svc.test/run\"\n";
        let cases = [
            ("name = \"a\"\n".to_owned(), "field url: missing"),
            (
                "name = \"a\"\nurl = \"ftp://svc.test/x\"\n".to_owned(),
                "field url: \"ftp://svc.test/x\": expected an http:// or https:// URL",
            ),
            (
                "name = \"a\"\nurl = \"/just/a/path\"\n".to_owned(),
                "field url: \"/just/a/path\": expected an http:// or https:// URL",
            ),
            (
                "name = \"a\"\nurl = \"http://svc.test/{id}\"\n".to_owned(),
                "field url: \"http://svc.test/{id}\": placeholders are not supported",
            ),
            (
                "name = \"a\"\nurl = \"http://u:p@svc.test/\"\n".to_owned(),
                "field url: \"http://u:p@svc.test/\": credentials in the URL are not sent",
            ),
            (
                "name = \"a\"\nurl = \"http://svc .test/\"\n".to_owned(),
                "field url: \"http://svc .test/\": not a URL",
            ),
            (
                format!("{ok}method = \"DELETE\"\n"),
                "field method: \"DELETE\": expected \"POST\" (the default), \"GET\" or \"PUT\"",
            ),
            (
                format!("{ok}headers = {{ Authorization = \"MCPT_SURELY_UNSET_VARIABLE\" }}\n"),
                "field headers: \"Authorization\": environment variable MCPT_SURELY_UNSET_VARIABLE is not set",
            ),
            (
                format!("{ok}headers = {{ \"Bad Name\" = \"PATH\" }}\n"),
                "field headers: \"Bad Name\" is not a valid header name",
            ),
            (
                format!("{ok}headers = {{ Host = \"PATH\" }}\n"),
                "field headers: \"Host\" is set by the worker",
            ),
            (
                format!("{ok}headers = {{ X-Key = 3 }}\n"),
                "field headers: \"X-Key\": expected the name of an environment variable",
            ),
            (
                format!("{ok}headers = [\"PATH\"]\n"),
                "field headers: expected a table like { Authorization = \"API_TOKEN\" }",
            ),
            (
                format!("{ok}cancel = \"yes\"\n"),
                "field cancel: expected true or false",
            ),
            (
                format!("{ok}argv = [\"x\"]\n"),
                "field argv: unknown field (expected one of name,",
            ),
            (
                format!("{ok}timeout = \"soon\"\n"),
                "field timeout: \"soon\": expected a duration",
            ),
            (
                format!("{ok}max_output = 0\n"),
                "field max_output: expected a positive number",
            ),
        ];
        for (fields, want) in cases {
            let got = match check(&fields) {
                Ok(_) => panic!("accepted: {fields}"),
                Err(e) => e,
            };
            assert!(
                got.starts_with(want),
                "for {fields:?}\n got: {got}\nwant: {want}"
            );
            assert_eq!(got.lines().count(), 1, "one line: {got}");
        }
    }
}
