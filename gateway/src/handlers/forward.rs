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
//! cursor (`{"u": NAME, "c": CURSOR}` in base64url); when an upstream's last page is
//! served, `nextCursor` points at the next upstream's first page. A page may thus be empty
//! (an upstream with nothing to list) and still have a `nextCursor`.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use mcp_tasks_protocol::jsonrpc::{ErrorObject, INTERNAL_ERROR, INVALID_PARAMS, result_bytes};
use mcp_tasks_protocol::meta::server_meta;
use mcp_tasks_protocol::method::Method;
use mcp_tasks_protocol::params::{GetPromptParams, Member, ReadResourceParams};
use mcp_tasks_protocol::results::{CacheScope, ForwardedResult};
use mcp_tasks_store::forward::{ForwardReply, UpstreamAdvert};
use serde_json::{Map, Value, json};

use crate::envelope::Request;
use crate::error::DispatchError;
use crate::reply::Reply;
use crate::state::State;

/// How long a forwarded request waits for a worker's answer.
const FORWARD_WAIT: Duration = Duration::from_secs(30);
/// How long a client may cache a page of prompts, resources or templates.
pub(crate) const LIST_TTL_MS: u64 = 5_000;
/// Resources may change at any time (server-everything's carry a timestamp): a read is
/// stale at once.
pub(crate) const READ_TTL_MS: u64 = 0;

/// Whether live upstreams offer prompts, and resources (the capabilities to advertise).
pub(crate) async fn offered(state: &State) -> Result<(bool, bool), DispatchError> {
    let ups = state.registry.upstreams().await?;
    Ok((
        ups.iter().any(|u| u.prompts),
        ups.iter().any(|u| u.resources),
    ))
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
        Member::Valid(ours) => read_cursor(&ups, ours)?,
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
        Some(Value::String(c)) if !c.is_empty() => Some(write_cursor(&up.name, Some(&c))),
        _ => ups.get(index + 1).map(|n| write_cursor(&n.name, None)),
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

/// `resources/read`'s result, without `_meta`. An unknown URI is -32602 with `data.uri`
/// (the upstream's "not found" too, whatever its code).
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
    let not_found = |message: String| -> DispatchError {
        ErrorObject::with_data(INVALID_PARAMS, message, json!({ "uri": uri })).into()
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
        // -32002 is the 2025 "resource not found"; the 2026 code is -32602 (SEP-2164).
        Err(DispatchError::Rpc(e)) if e.code == INVALID_PARAMS || e.code == -32002 => {
            Err(not_found(e.message))
        }
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

/// Ask a worker fronting `up`; its upstream's error comes back as [`DispatchError::Rpc`].
async fn forward(
    state: &State,
    up: &UpstreamAdvert,
    method: Method,
    params: Value,
) -> Result<Value, DispatchError> {
    match state
        .store
        .forward(&up.name, method.as_str(), params, FORWARD_WAIT)
        .await?
    {
        Some(ForwardReply::Result(v)) => Ok(v),
        Some(ForwardReply::Error(e)) => Err(e.into()),
        None => Err(ErrorObject::new(
            INTERNAL_ERROR,
            format!(
                "upstream {} did not answer {method} within {} s: no worker serving it took the request, or it is too slow",
                up.name,
                FORWARD_WAIT.as_secs()
            ),
        )
        .into()),
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
    ErrorObject::new(
        INTERNAL_ERROR,
        format!(
            "upstream {} answered {method} with a malformed result",
            up.name
        ),
    )
    .into()
}

/// Our cursor: which upstream, and its cursor (none: its first page).
fn write_cursor(upstream: &str, theirs: Option<&str>) -> String {
    let json = json!({ "u": upstream, "c": theirs }).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
}

/// The index of the cursor's upstream in `ups`, and its cursor.
fn read_cursor(
    ups: &[UpstreamAdvert],
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
/// other than `/`; `{+var}`, `{#var}` for any).
fn template_matches(template: &str, uri: &str) -> bool {
    let Some(open) = template.find('{') else {
        return template == uri;
    };
    let (literal, rest) = template.split_at(open);
    let Some(uri) = uri.strip_prefix(literal) else {
        return false;
    };
    let Some(close) = rest.find('}') else {
        return false;
    };
    let any = rest[1..close].starts_with(['+', '#']);
    let after = &rest[close + 1..];
    for (i, c) in uri.char_indices() {
        if c == '/' && !any {
            break;
        }
        let end = i + c.len_utf8();
        if template_matches(after, &uri[end..]) {
            return true;
        }
    }
    false
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
        let c = write_cursor("b", Some("p2"));
        assert_eq!(read_cursor(&ups, &c).ok(), Some((1, Some("p2".into()))));
        let c = write_cursor("b", None);
        assert_eq!(read_cursor(&ups, &c).ok(), Some((1, None)));
        for bad in ["", "!!", &write_cursor("gone", None)] {
            let e = read_cursor(&ups, bad).expect_err(bad).to_string();
            assert!(e.starts_with("invalid cursor: "), "{e}");
        }
    }
}
