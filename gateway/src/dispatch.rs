//! Typed params → handler, for 2026-07-28 requests (2025 sessions route in `legacy/`).

use std::sync::Arc;

use crate::envelope::{Params, Request};
use crate::error::DispatchError;
use crate::handlers::{self, forward};
use crate::reply::Reply;
use crate::state::State;

/// Run the handler for `req`'s method with its typed `params`.
pub(crate) async fn dispatch(
    state: &Arc<State>,
    req: Request,
    params: Params,
    accepts_sse: bool,
) -> Result<Reply, DispatchError> {
    match params {
        Params::Discover => handlers::discover::discover(state, &req).await,
        Params::ListTools(p) => handlers::tools::list(state, &req, &p).await,
        // Boxed: a call's future is the deepest of all (it creates the task through the
        // store), and nesting it here would put its whole layout inside every request's.
        Params::CallTool(p) => Box::pin(handlers::tools::call(state, req, p)).await,
        Params::GetTask(p) => handlers::tasks::get(state, &req, &p).await,
        Params::UpdateTask(p) => handlers::tasks::update(state, &req, &p).await,
        Params::CancelTask(p) => handlers::tasks::cancel(state, &req, &p).await,
        Params::Listen(p) => handlers::listen::listen(state, req, p, accepts_sse).await,
        Params::ListPage(p) => {
            let page = forward::list(state, req.method, &p.cursor).await?;
            Ok(forward::complete(&req, page, forward::LIST_TTL_MS))
        }
        Params::GetPrompt(p) => {
            let got = forward::get_prompt(state, p).await?;
            Ok(forward::complete(&req, got, forward::LIST_TTL_MS))
        }
        Params::ReadResource(p) => {
            let read = forward::read(state, p).await?;
            Ok(forward::complete(&req, read, forward::READ_TTL_MS))
        }
    }
}
