//! A request within a 2025 session: its method, typed params and handler. The session's
//! client capabilities stand in for the `_meta` ones a 2026-07-28 request carries, so the
//! shared services see one shape.

use std::sync::Arc;

use hyper::Response;
use mcp_tasks_protocol::jsonrpc::{self, Id};
use mcp_tasks_protocol::legacy::{CallToolParams, ListTasksParams, TaskParams};
use mcp_tasks_protocol::meta::{CLIENT_CAPABILITIES_KEY, server_meta};
use mcp_tasks_protocol::method::Method;
use mcp_tasks_protocol::params::{ListPageParams, ListToolsParams, META};
use mcp_tasks_store::registry::Policy;
use serde_json::{Map, Value, json};
use tracing::Instrument as _;

use super::session::Session;
use super::{call, tasks};
use crate::envelope::{Request, typed};
use crate::error::{DispatchError, Era};
use crate::handlers::forward;
use crate::http;
use crate::reply::{self, Reply, ResBody};
use crate::state::State;

/// Answer one request of `session`, in its span.
pub(super) async fn request(
    state: &Arc<State>,
    session: Session,
    id: Id,
    method: String,
    mut params: Map<String, Value>,
    accepts_sse: bool,
    key_header: Option<&Value>,
) -> Response<ResBody> {
    let span = tracing::info_span!(
        "request",
        otel.name = %method,
        rpc.method = %method,
        rpc.id = %id,
        protocol.version = %session.version,
        task.id = tracing::field::Empty,
    );
    let outcome = match with_key_header(&mut params, key_header) {
        Ok(()) => {
            dispatch(state, &session, id.clone(), &method, params, accepts_sse)
                .instrument(span)
                .await
        }
        Err(e) => Err(e),
    };
    match outcome {
        Ok(reply) => reply::ok(reply),
        Err(e) => {
            e.log();
            e.response(Era::Legacy, Some(&id))
        }
    }
}

/// The `Idempotency-Key` header into `params._meta`, as on 2026-07-28 ([`http::with_key_header`]).
fn with_key_header(
    params: &mut Map<String, Value>,
    key_header: Option<&Value>,
) -> Result<(), DispatchError> {
    if key_header.is_none() {
        return Ok(());
    }
    match params
        .entry(META)
        .or_insert_with(|| Value::Object(Map::new()))
    {
        Value::Object(meta) => http::with_key_header(meta, key_header),
        _ => Err(DispatchError::InvalidParams(
            "params._meta must be an object".into(),
        )),
    }
}

/// The methods a session serves: the tasks API only on 2025-11-25.
fn serves(method: Method, tasks_api: bool) -> bool {
    match method {
        Method::Ping | Method::ToolsList | Method::ToolsCall => true,
        // -32601 by the handler while no upstream offers them.
        Method::PromptsList
        | Method::PromptsGet
        | Method::ResourcesList
        | Method::ResourcesTemplatesList
        | Method::ResourcesRead => true,
        Method::TasksGet | Method::TasksResult | Method::TasksList | Method::TasksCancel => {
            tasks_api
        }
        _ => false,
    }
}

async fn dispatch(
    state: &Arc<State>,
    session: &Session,
    id: Id,
    name: &str,
    mut params: Map<String, Value>,
    accepts_sse: bool,
) -> Result<Reply, DispatchError> {
    let Some(method) = Method::from_name(name).filter(|m| serves(*m, session.has_tasks())) else {
        return Err(DispatchError::MethodNotFound(name.to_owned()));
    };
    // The request as the shared services see it: the session's capabilities in `_meta`.
    let mut meta = match params.remove(META) {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    meta.insert(CLIENT_CAPABILITIES_KEY.to_owned(), session.caps.clone());
    let req = Request {
        id,
        method,
        meta,
        owner: session.owner.clone(),
    };
    match method {
        Method::Ping => Ok(Reply::Json(jsonrpc::result_bytes(&req.id, &json!({})))),
        Method::ToolsList => list_tools(state, session, &req, &typed(params)?).await,
        Method::ToolsCall => {
            let params: CallToolParams = typed(params)?;
            call::call(state, session, req, params, accepts_sse).await
        }
        Method::TasksGet => tasks::get(state, &req, &typed::<TaskParams>(params)?).await,
        Method::TasksResult => {
            let params: TaskParams = typed(params)?;
            tasks::result(state, req, &params, accepts_sse).await
        }
        Method::TasksList => {
            let params: ListTasksParams = typed(params)?;
            tasks::list(state, session, &req, &params).await
        }
        Method::TasksCancel => tasks::cancel(state, &req, &typed::<TaskParams>(params)?).await,
        Method::PromptsList | Method::ResourcesList | Method::ResourcesTemplatesList => {
            let params: ListPageParams = typed(params)?;
            let page = forward::list(state, method, &params.cursor).await?;
            Ok(with_meta(&req, page))
        }
        Method::PromptsGet => Ok(with_meta(
            &req,
            forward::get_prompt(state, typed(params)?).await?,
        )),
        Method::ResourcesRead => Ok(with_meta(&req, forward::read(state, typed(params)?).await?)),
        other => Err(DispatchError::MethodNotFound(other.as_str().to_owned())),
    }
}

/// A forwarded result in 2025 shape: the upstream's, with our `_meta`.
fn with_meta(req: &Request, mut result: Map<String, Value>) -> Reply {
    result.insert(META.to_owned(), server_meta());
    Reply::Json(jsonrpc::result_bytes(&req.id, &result))
}

/// `tools/list` in 2025 shape; on 2025-11-25 each tool says whether it runs as a task.
async fn list_tools(
    state: &Arc<State>,
    session: &Session,
    req: &Request,
    params: &ListToolsParams,
) -> Result<Reply, DispatchError> {
    if !params.cursor.is_absent_or_null() {
        return Err(DispatchError::InvalidParams(
            "invalid cursor: this server lists every tool on one page".into(),
        ));
    }
    let tools = state.registry.tools().await?;
    let listed: Vec<Value> = tools
        .iter()
        .map(|advert| {
            let mut tool = serde_json::to_value(&advert.tool).unwrap_or(Value::Null);
            if session.has_tasks()
                && let Value::Object(t) = &mut tool
            {
                // A task-only tool needs tasks in 2026-07-28 only because its questions
                // travel in the task; a 2025 call's stream carries them, so it runs
                // synchronously too. A tool that asks before it starts cannot run on
                // 2025 at all (the call refuses it); it stays "required".
                let support = match advert.policy {
                    Policy::Sync => "forbidden",
                    Policy::Auto | Policy::Task => "optional",
                    Policy::TaskOnly if advert.pre_input.is_empty() => "optional",
                    Policy::TaskOnly => "required",
                };
                t.insert("execution".into(), json!({ "taskSupport": support }));
            }
            tool
        })
        .collect();
    Ok(Reply::Json(jsonrpc::result_bytes(
        &req.id,
        &json!({ "tools": listed, "_meta": server_meta() }),
    )))
}
