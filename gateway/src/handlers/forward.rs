//! `prompts/list`, `prompts/get`, `resources/list`, `resources/templates/list` and
//! `resources/read`, for both protocol eras: served by the `[[upstream]]` entries workers
//! advertise with `prompts = true` or `resources = true`, each request forwarded to a
//! worker holding a session with the upstream (`mcp_tasks_store::forward`), so this
//! gateway holds none. While no live upstream offers them, they are -32601.
//!
//! Routing: a prompt name is the entry's `prefix` + the upstream's name, found among the
//! names each entry advertised at start. A resource URI goes to the entry that listed it,
//! else to the one with a matching URI template, else, when only one entry serves
//! resources, to that one (it may know URIs it does not list); otherwise it is unknown.
//!
//! Pagination: the upstreams offering a list are paged one after the other, in advert
//! order, and a page never mixes two: our cursor names the upstream and carries its own
//! cursor and the list it pages (`{"m": METHOD, "u": NAME, "c": CURSOR}` in base64url, so a
//! `prompts/list` cursor is no `resources/list` one); when an upstream's last page is
//! served, `nextCursor` points at the next upstream's first page. A page may thus be empty
//! (an upstream with nothing to list) and still have a `nextCursor`.

use std::sync::Arc;

use base64::Engine as _;
use mcp_tasks_protocol::jsonrpc::{
    ErrorObject, INTERNAL_ERROR, INVALID_PARAMS, RESOURCE_NOT_FOUND_2025, result_bytes,
};
use mcp_tasks_protocol::meta::server_meta;
use mcp_tasks_protocol::method::Method;
use mcp_tasks_protocol::params::{GetPromptParams, Member, ReadResourceParams};
use mcp_tasks_protocol::results::{CacheScope, ForwardedResult};
use mcp_tasks_store::forward::{ForwardReply, MAX_QUEUED, Outcome, UpstreamAdvert};
use serde_json::{Map, Value, json};

use crate::envelope::Request;
use crate::error::DispatchError;
use crate::reply::Reply;
use crate::state::State;

/// How long a client may cache a page of prompts, resources or templates.
pub(crate) const LIST_TTL_MS: u64 = 5_000;
/// Resources may change at any time (server-everything's carry a timestamp): a read is
/// stale at once.
pub(crate) const READ_TTL_MS: u64 = 0;

/// Add `prompts` and `resources` to `capabilities` while a live upstream offers them;
/// `server/discover` and a 2025 `initialize` both ask here. When Redis cannot say which
/// upstreams are live, neither is offered (the request still succeeds: tools do not depend
/// on it), and the failure is logged.
pub(crate) async fn add_capabilities(state: &State, capabilities: &mut Value) {
    let ups = match state.registry.upstreams().await {
        Ok(ups) => ups,
        Err(e) => {
            tracing::warn!(
                error = %mcp_tasks_shared::error_chain(&e),
                "cannot read upstream adverts; prompts and resources not offered"
            );
            return;
        }
    };
    if ups.iter().any(|u| u.prompts) {
        capabilities["prompts"] = json!({ "listChanged": false });
    }
    if ups.iter().any(|u| u.resources) {
        capabilities["resources"] = json!({ "subscribe": false, "listChanged": false });
    }
}

/// A 2026-07-28 answer: the forwarded result with `resultType`, the caching hints (§15;
/// `public`: one upstream session serves every caller alike) and our `_meta`.
pub(crate) fn complete(req: &Request, mut result: Map<String, Value>, ttl_ms: u64) -> Reply {
    // Ours to set, whatever the upstream sent.
    for ours in ["resultType", "ttlMs", "cacheScope"] {
        result.remove(ours);
    }
    let result = ForwardedResult {
        result_type: "complete",
        result,
        ttl_ms,
        cache_scope: CacheScope::Public,
        meta: server_meta(),
    };
    Reply::Json(result_bytes(&req.id, &result))
}

/// Whether `method` needs the prompts switch (else the resources one).
fn is_prompts(method: Method) -> bool {
    matches!(method, Method::PromptsList | Method::PromptsGet)
}

/// The live upstreams serving `method`, in page order; -32601 when there is none.
async fn serving(state: &State, method: Method) -> Result<Vec<UpstreamAdvert>, DispatchError> {
    let ups: Vec<UpstreamAdvert> = state
        .registry
        .upstreams()
        .await?
        .iter()
        .filter(|u| {
            if is_prompts(method) {
                u.prompts
            } else {
                u.resources
            }
        })
        .cloned()
        .collect();
    if ups.is_empty() {
        return Err(DispatchError::MethodNotFound(method.as_str().to_owned()));
    }
    Ok(ups)
}

/// One page of `method` (`prompts/list`, `resources/list`, `resources/templates/list`),
/// without `_meta`: the upstream's result, prompt names prefixed, `nextCursor` ours.
pub(crate) async fn list(
    state: &Arc<State>,
    method: Method,
    cursor: &Member<String>,
) -> Result<Map<String, Value>, DispatchError> {
    let ups = serving(state, method).await?;
    let (index, theirs) = match cursor {
        Member::Absent | Member::Invalid(Value::Null) => (0, None),
        Member::Valid(ours) => read_cursor(&ups, method, ours)?,
        Member::Invalid(_) => {
            return Err(DispatchError::InvalidParams(
                "params.cursor must be a string (a nextCursor of an earlier page)".into(),
            ));
        }
    };
    let up = &ups[index];
    let params = match &theirs {
        Some(c) => json!({ "cursor": c }),
        None => json!({}),
    };
    let mut page = match forward(state, up, method, params).await? {
        Value::Object(m) => m,
        _ => return Err(malformed(up, method)),
    };
    page.remove("_meta");
    let next = match page.remove("nextCursor") {
        Some(Value::String(c)) if !c.is_empty() => Some(write_cursor(method, &up.name, Some(&c))),
        _ => ups
            .get(index + 1)
            .map(|n| write_cursor(method, &n.name, None)),
    };
    if method == Method::PromptsList && !up.prefix.is_empty() {
        let Some(Value::Array(prompts)) = page.get_mut("prompts") else {
            return Err(malformed(up, method));
        };
        for p in prompts {
            if let Some(Value::String(name)) = p.get_mut("name") {
                *name = format!("{}{name}", up.prefix);
            }
        }
    }
    if let Some(next) = next {
        page.insert("nextCursor".into(), Value::String(next));
    }
    Ok(page)
}

/// `prompts/get`'s result, without `_meta`.
pub(crate) async fn get_prompt(
    state: &Arc<State>,
    params: GetPromptParams,
) -> Result<Map<String, Value>, DispatchError> {
    let ups = serving(state, Method::PromptsGet).await?;
    let Some(name) = params.name.valid() else {
        return Err(DispatchError::InvalidParams(
            "params.name must be a string (a name prompts/list gave)".into(),
        ));
    };
    let arguments = match params.arguments {
        Member::Absent | Member::Invalid(Value::Null) => None,
        Member::Valid(args) => {
            if let Some((k, _)) = args.iter().find(|(_, v)| !v.is_string()) {
                return Err(DispatchError::InvalidParams(format!(
                    "params.arguments.{k} must be a string (prompt arguments are strings)"
                )));
            }
            Some(args)
        }
        Member::Invalid(_) => {
            return Err(DispatchError::InvalidParams(
                "params.arguments must be an object of strings".into(),
            ));
        }
    };
    let found = ups.iter().find_map(|u| {
        let theirs = name.strip_prefix(u.prefix.as_str())?;
        u.prompt_names
            .iter()
            .any(|n| n == theirs)
            .then_some((u, theirs))
    });
    let Some((up, theirs)) = found else {
        return Err(DispatchError::InvalidParams(format!(
            "Unknown prompt: {name} (prompts/list names them)"
        )));
    };
    let mut forwarded = json!({ "name": theirs });
    if let Some(args) = arguments {
        forwarded["arguments"] = Value::Object(args);
    }
    let value = forward(state, up, Method::PromptsGet, forwarded).await?;
    object(up, Method::PromptsGet, value)
}

/// `resources/read`'s result, without `_meta`. An unknown URI is
/// [`DispatchError::ResourceNotFound`] (the upstream's "not found" too: -32602 or -32002).
pub(crate) async fn read(
    state: &Arc<State>,
    params: ReadResourceParams,
) -> Result<Map<String, Value>, DispatchError> {
    let ups = serving(state, Method::ResourcesRead).await?;
    let Some(uri) = params.uri.valid() else {
        return Err(DispatchError::InvalidParams(
            "params.uri must be a string".into(),
        ));
    };
    let not_found = |message: String| DispatchError::ResourceNotFound {
        uri: uri.clone(),
        message,
    };
    let routed = ups
        .iter()
        .find(|u| u.resource_uris.iter().any(|r| r == uri))
        .or_else(|| {
            ups.iter().find(|u| {
                u.resource_templates
                    .iter()
                    .any(|t| template_matches(t, uri))
            })
        })
        .or_else(|| (ups.len() == 1).then(|| &ups[0]));
    let Some(up) = routed else {
        return Err(not_found(format!(
            "Resource not found: {uri} (no upstream lists it or a template matching it)"
        )));
    };
    match forward(state, up, Method::ResourcesRead, json!({ "uri": uri })).await {
        Err(DispatchError::InvalidParams(message)) => Err(not_found(message)),
        Err(e) => Err(e),
        Ok(value) => {
            let result = object(up, Method::ResourcesRead, value)?;
            // An empty read is how some servers say "not found" (SEP-2164).
            match result.get("contents") {
                Some(Value::Array(c)) if !c.is_empty() => Ok(result),
                _ => Err(not_found(format!("Resource not found: {uri}"))),
            }
        }
    }
}

/// Ask a worker fronting `up`. Its upstream's error comes back as -32602
/// ([`DispatchError::InvalidParams`]: the upstream's -32602, and -32002, the 2025 "resource
/// not found") or -32603 with the upstream's message (every other code: an upstream's
/// -32601 or -32000…-32099 mean nothing to our client for a method we advertise).
async fn forward(
    state: &State,
    up: &UpstreamAdvert,
    method: Method,
    params: Value,
) -> Result<Value, DispatchError> {
    let forwarder = &state.forwarder;
    let wait = forwarder.wait().as_secs_f64();
    let failed = |why: String| DispatchError::Failed(format!("upstream {} {why}", up.name));
    match forwarder.forward(&up.name, method.as_str(), params).await? {
        Outcome::Answered(ForwardReply::Result(v)) => Ok(v),
        Outcome::Answered(ForwardReply::Error(e)) => Err(upstream_error(e)),
        Outcome::Busy => Err(DispatchError::Failed(format!(
            "busy: this gateway already waits on {} forwarded upstream requests (MCPT_FORWARD_MAX_IN_FLIGHT); try again shortly",
            state.config.forward_max_in_flight
        ))),
        Outcome::Backlogged => Err(failed(format!(
            "is busy: {MAX_QUEUED} requests already wait for its workers; try again shortly"
        ))),
        Outcome::NotTaken => Err(failed(format!(
            "did not answer {method}: no worker serving it took the request within {wait} s (MCPT_FORWARD_WAIT)"
        ))),
        Outcome::Unanswered => Err(failed(format!(
            "did not answer {method}: a worker took the request but no answer came within {wait} s (MCPT_FORWARD_WAIT)"
        ))),
    }
}

/// An upstream's error, in the codes a client of ours may see for these methods.
fn upstream_error(e: ErrorObject) -> DispatchError {
    match e.code {
        INVALID_PARAMS | RESOURCE_NOT_FOUND_2025 => DispatchError::InvalidParams(e.message),
        INTERNAL_ERROR => e.into(),
        _ => DispatchError::Failed(e.message),
    }
}

fn object(
    up: &UpstreamAdvert,
    method: Method,
    value: Value,
) -> Result<Map<String, Value>, DispatchError> {
    match value {
        Value::Object(mut m) => {
            m.remove("_meta");
            Ok(m)
        }
        _ => Err(malformed(up, method)),
    }
}

fn malformed(up: &UpstreamAdvert, method: Method) -> DispatchError {
    DispatchError::Failed(format!(
        "upstream {} answered {method} with a malformed result",
        up.name
    ))
}

/// Our cursor: which list, which upstream, and its cursor (none: its first page).
fn write_cursor(method: Method, upstream: &str, theirs: Option<&str>) -> String {
    let json = json!({ "m": method.as_str(), "u": upstream, "c": theirs }).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
}

/// The index of the cursor's upstream in `ups`, and its cursor; a cursor of another list
/// than `method`'s is refused.
fn read_cursor(
    ups: &[UpstreamAdvert],
    method: Method,
    ours: &str,
) -> Result<(usize, Option<String>), DispatchError> {
    let bad = |why: &str| DispatchError::InvalidParams(format!("invalid cursor: {why}"));
    let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(ours)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .ok_or_else(|| bad("not a nextCursor this server gave"))?;
    let (Some(name), Some(theirs)) = (decoded.get("u").and_then(Value::as_str), decoded.get("c"))
    else {
        return Err(bad("not a nextCursor this server gave"));
    };
    if decoded.get("m").and_then(Value::as_str) != Some(method.as_str()) {
        return Err(bad(&format!("not a nextCursor of {method}")));
    }
    let theirs = match theirs {
        Value::Null => None,
        Value::String(c) => Some(c.clone()),
        _ => return Err(bad("not a nextCursor this server gave")),
    };
    let index = ups.iter().position(|u| u.name == name).ok_or_else(|| {
        bad(&format!(
            "upstream {name} no longer serves this list; start over"
        ))
    })?;
    Ok((index, theirs))
}

/// Whether `uri` fits the RFC 6570 `template` (`{var}` stands for one or more characters
/// other than `/`; `{+var}`, `{#var}` for any). The template is compiled to a regular
/// expression, which the `regex` crate matches in time linear in the URI, so a long URI
/// cannot make matching backtrack; a template that does not compile matches nothing.
fn template_matches(template: &str, uri: &str) -> bool {
    let mut pattern = String::from("^");
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        pattern.push_str(&regex::escape(&rest[..open]));
        let Some(close) = rest[open..].find('}') else {
            return false;
        };
        let var = &rest[open + 1..open + close];
        pattern.push_str(if var.starts_with(['+', '#']) {
            "(?s:.+)"
        } else {
            "[^/]+"
        });
        rest = &rest[open + close + 1..];
    }
    pattern.push_str(&regex::escape(rest));
    pattern.push('$');
    regex::Regex::new(&pattern).is_ok_and(|r| r.is_match(uri))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_their_uris_only() {
        let t = "demo://resource/dynamic/blob/{resourceId}";
        assert!(template_matches(t, "demo://resource/dynamic/blob/7"));
        assert!(!template_matches(t, "demo://resource/dynamic/blob/"));
        assert!(!template_matches(t, "demo://resource/dynamic/blob/7/8"));
        assert!(!template_matches(t, "demo://resource/dynamic/text/7"));
        assert!(template_matches("file:///{+path}", "file:///a/b/c"));
        assert!(template_matches("x://{a}/{b}.txt", "x://1/2.txt"));
        assert!(!template_matches("x://{a}/{b}.txt", "x://1/2.md"));
    }

    /// Many variables and a long URI that almost fits: a backtracking matcher would try
    /// every split (hours); this one answers at once.
    #[test]
    fn a_long_uri_does_not_make_matching_backtrack() {
        let t = "x://{a}{b}{c}{d}{e}{f}{g}{h}.txt";
        let uri = format!("x://{}", "a".repeat(100_000));
        let started = std::time::Instant::now();
        assert!(!template_matches(t, &uri));
        assert!(template_matches(t, &format!("{uri}.txt")));
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn a_cursor_names_its_upstream() {
        let up = |name: &str| UpstreamAdvert {
            name: name.into(),
            prefix: String::new(),
            prompts: true,
            resources: false,
            prompt_names: vec![],
            resource_uris: vec![],
            resource_templates: vec![],
            rank: 0,
            heartbeat_ms: 0,
        };
        let ups = [up("a"), up("b")];
        let p = Method::PromptsList;
        let c = write_cursor(p, "b", Some("p2"));
        assert_eq!(read_cursor(&ups, p, &c).ok(), Some((1, Some("p2".into()))));
        let c = write_cursor(p, "b", None);
        assert_eq!(read_cursor(&ups, p, &c).ok(), Some((1, None)));
        let other = write_cursor(Method::ResourcesList, "b", None);
        for bad in ["", "!!", &write_cursor(p, "gone", None), &other] {
            let e = read_cursor(&ups, p, bad).expect_err(bad).to_string();
            assert!(e.starts_with("invalid cursor: "), "{e}");
        }
    }
}
