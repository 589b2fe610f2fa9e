//! Method → handler.

use std::sync::Arc;

use crate::State;
use crate::envelope::Request;
use crate::error::DispatchError;
use crate::handlers;
use crate::http::Reply;

/// Run the handler for `req`'s method (already known to be implemented).
pub(crate) async fn dispatch(
    state: &Arc<State>,
    req: Request,
    accepts_sse: bool,
) -> Result<Reply, DispatchError> {
    match req.method.as_str() {
        "server/discover" => handlers::discover::discover(&req),
        "tools/list" => handlers::tools::list(state, &req).await,
        "tools/call" => handlers::tools::call(state, req).await,
        "tasks/get" => handlers::tasks::get(state, &req).await,
        "tasks/update" => handlers::tasks::update(state, &req).await,
        "tasks/cancel" => handlers::tasks::cancel(state, &req).await,
        "subscriptions/listen" => handlers::listen::listen(state, req, accepts_sse).await,
        other => Err(DispatchError::MethodNotFound(other.to_owned())),
    }
}
