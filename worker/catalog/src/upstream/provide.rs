//! An upstream's prompts and resources (`prompts = true`, `resources = true`), served for
//! gateways: what is listed at start (prompt names, resource URIs and templates, which the
//! gateways route by and which two entries may not share), and how a forwarded request is
//! asked upstream ([`Provider`]). Lists, gets and reads pass through unchanged; prompt
//! names are the gateway's to prefix.

use std::collections::HashMap;
use std::sync::Arc;

use mcp_tasks_protocol::jsonrpc::{ErrorObject, INTERNAL_ERROR, METHOD_NOT_FOUND};
use mcp_tasks_worker::UpstreamAdvert;
use mcp_tasks_worker::{Provider, ProviderFuture};
use serde_json::Value;

use super::list::{ListError, list_pages};
use super::session::{Incoming, Pool, RpcError, Session};
use crate::{FieldError, bad};

/// The methods forwarded, and which switch each needs.
const PROMPT_METHODS: [&str; 2] = ["prompts/list", "prompts/get"];
const RESOURCE_METHODS: [&str; 3] = [
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// What an entry's prompts and resources claim across the catalog: our prompt name, a
/// resource URI or a URI template → the entry that has it.
#[derive(Debug, Default)]
pub(crate) struct Claims {
    prompts: HashMap<String, String>,
    resources: HashMap<String, String>,
}

/// Why an upstream's prompts or resources could not be listed at start.
#[derive(Debug, thiserror::Error)]
pub(super) enum ServedError {
    /// The list (the method) could not be read.
    #[error("{method} failed: {source}")]
    List {
        method: &'static str,
        source: ListError,
    },
    /// An item of the list lacks its `member` string.
    #[error("{method}: an item has no {member} string")]
    NoMember {
        method: &'static str,
        member: &'static str,
    },
}

/// Every item of a paged upstream list (`prompts/list` → `prompts`), each item's `member`.
pub(super) async fn list_all(
    session: &Session,
    method: &'static str,
    items: &str,
    member: &'static str,
) -> Result<Vec<String>, ServedError> {
    let listed = list_pages(session, method, items)
        .await
        .map_err(|source| ServedError::List { method, source })?;
    members(method, &listed, member)
}

/// [`list_all`], but an upstream answering -32601 (it has no such list) has none.
pub(super) async fn list_all_or_none(
    session: &Session,
    method: &'static str,
    items: &str,
    member: &'static str,
) -> Result<Vec<String>, ServedError> {
    match list_pages(session, method, items).await {
        Ok(listed) => members(method, &listed, member),
        Err(e) if e.not_found() => Ok(Vec::new()),
        Err(source) => Err(ServedError::List { method, source }),
    }
}

fn members(
    method: &'static str,
    listed: &[Value],
    member: &'static str,
) -> Result<Vec<String>, ServedError> {
    listed
        .iter()
        .map(|item| {
            item.get(member)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or(ServedError::NoMember { method, member })
        })
        .collect()
}

impl Claims {
    /// Claim `advert`'s prompts (prefixed) and resources for its entry.
    ///
    /// # Errors
    /// The field and a sentence: the name, URI or template an earlier entry has.
    pub(super) fn claim(&mut self, advert: &UpstreamAdvert) -> Result<(), FieldError> {
        for name in &advert.prompt_names {
            let ours = format!("{}{name}", advert.prefix);
            if let Some(other) = self.prompts.insert(ours.clone(), advert.name.clone()) {
                return Err(bad(
                    "prefix",
                    format!(
                        "the upstream's prompt {name:?} would be listed as {ours:?}, which entry {other:?} already lists; set or change prefix"
                    ),
                ));
            }
        }
        let claimed = advert.resource_uris.iter().map(|u| ("resource", u)).chain(
            advert
                .resource_templates
                .iter()
                .map(|t| ("resource template", t)),
        );
        for (kind, uri) in claimed {
            if let Some(other) = self.resources.insert(uri.clone(), advert.name.clone()) {
                return Err(bad(
                    "resources",
                    format!(
                        "the upstream's {kind} {uri:?} is also served by entry {other:?}; a URI may have one upstream only"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// One entry's prompts and resources, asked through its session pool.
pub(super) struct UpstreamProvider {
    pub(super) advert: UpstreamAdvert,
    pub(super) pool: Arc<Pool>,
}

impl Provider for UpstreamProvider {
    fn advert(&self) -> UpstreamAdvert {
        self.advert.clone()
    }

    fn request(&self, method: String, params: Value) -> ProviderFuture {
        let pool = self.pool.clone();
        let name = self.advert.name.clone();
        let allowed = (self.advert.prompts && PROMPT_METHODS.contains(&method.as_str()))
            || (self.advert.resources && RESOURCE_METHODS.contains(&method.as_str()));
        Box::pin(async move {
            if !allowed {
                return Err(ErrorObject::new(
                    METHOD_NOT_FOUND,
                    format!("upstream {name} does not serve {method} here"),
                ));
            }
            ask(&pool, &name, &method, params).await
        })
    }
}

/// Send one request on a leased session; what the server asks meanwhile is refused (a
/// list or a read has no client to ask).
async fn ask(
    pool: &Arc<Pool>,
    name: &str,
    method: &str,
    params: Value,
) -> Result<Value, ErrorObject> {
    let mut lease = pool.lease().await.map_err(|e| {
        ErrorObject::new(INTERNAL_ERROR, format!("upstream {name} cannot start: {e}"))
    })?;
    let session = lease.session();
    let mut pending = session.start(method, params).await;
    let answer = loop {
        tokio::select! {
            answer = pending.wait() => break answer,
            Some(event) = session.events.recv() => {
                if let Incoming::Request { id, method: asked, .. } = event {
                    let refused = ErrorObject::new(
                        METHOD_NOT_FOUND,
                        format!("{asked} is not answered during {method}"),
                    );
                    session.respond(id, Err(refused)).await;
                }
            }
        }
    };
    match answer {
        Ok(v) => {
            lease.finish();
            Ok(without_meta(v))
        }
        Err(RpcError::Error(e)) => {
            // The session is fine: the upstream answered. Its details (data, a long
            // message) are for our logs; the client gets the code and the first line.
            lease.finish();
            tracing::warn!(
                upstream.name = %name,
                rpc.method = %method,
                error.code = e.code,
                error.message = %e.message,
                error.data = ?e.data,
                "upstream {name} answered {method} with an error"
            );
            let first = e.message.lines().next().unwrap_or_default();
            Err(ErrorObject::new(
                e.code,
                format!("upstream {name}: {}", short(first)),
            ))
        }
        Err(RpcError::Closed(why) | RpcError::Unsent(why)) => {
            tracing::warn!(upstream.name = %name, rpc.method = %method, error = %why, "upstream {name} closed the connection during {method}");
            Err(ErrorObject::new(
                INTERNAL_ERROR,
                format!("upstream {name} closed the connection"),
            ))
        }
    }
}

/// At most 200 characters of `message`.
fn short(message: &str) -> String {
    match message.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &message[..at]),
        None => message.to_owned(),
    }
}

/// The upstream's `_meta` is its own business, as for tool results.
fn without_meta(mut v: Value) -> Value {
    if let Some(m) = v.as_object_mut() {
        m.remove("_meta");
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn advert(name: &str, prefix: &str, prompts: &[&str], uris: &[&str]) -> UpstreamAdvert {
        UpstreamAdvert {
            name: name.into(),
            prefix: prefix.into(),
            prompts: true,
            resources: true,
            prompt_names: prompts.iter().map(|s| (*s).to_owned()).collect(),
            resource_uris: uris.iter().map(|s| (*s).to_owned()).collect(),
            resource_templates: vec![],
            rank: 0,
            heartbeat_ms: 0,
        }
    }

    #[test]
    fn a_prompt_name_or_uri_has_one_entry() {
        let mut c = Claims::default();
        c.claim(&advert("a", "", &["p"], &["x://1"]))
            .expect("first");
        c.claim(&advert("b", "b_", &["p"], &["x://2"]))
            .expect("prefixed apart");
        let e = c.claim(&advert("c", "", &["p"], &[])).expect_err("clash");
        assert_eq!(e.field, "prefix");
        assert!(e.problem.contains("entry \"a\""), "{}", e.problem);
        let e = c
            .claim(&advert("d", "d_", &[], &["x://2"]))
            .expect_err("clash");
        assert_eq!(e.field, "resources");
        assert!(
            e.problem
                .contains("\"x://2\" is also served by entry \"b\""),
            "{}",
            e.problem
        );
    }
}
