//! Result types of the base methods (base-protocol.md §5, §8, §9, §12): `server/discover`,
//! `tools/list`, the MRTR `InputRequiredResult`, and the listen stream's closing response.

use serde::Serialize;
use serde_json::{Map, Value};

use super::tools::Tool;

/// `cacheScope` of a cacheable result (§15).
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheScope {
    /// No caller-specific data: shared caches may reuse it.
    Public,
    /// Reuse only within the same authorization context.
    Private,
}

/// `DiscoverResult` (B-10).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoverResult {
    /// Always `"complete"`.
    pub result_type: &'static str,
    /// Versions the server accepts (B-01).
    pub supported_versions: Vec<&'static str>,
    /// `ServerCapabilities`.
    pub capabilities: Value,
    /// Guidance for the model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions: Option<&'static str>,
    /// Cache freshness in ms.
    pub ttl_ms: u64,
    /// Cache scope.
    pub cache_scope: CacheScope,
    /// `serverInfo`.
    #[serde(rename = "_meta")]
    pub meta: Value,
}

/// `ListToolsResult` (B-26): one page, no `nextCursor`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListToolsResult<'a> {
    /// Always `"complete"`.
    pub result_type: &'static str,
    /// The tools, in a deterministic order (B-27).
    pub tools: Vec<&'a Tool>,
    /// Cache freshness in ms.
    pub ttl_ms: u64,
    /// Cache scope.
    pub cache_scope: CacheScope,
    /// `serverInfo`.
    #[serde(rename = "_meta")]
    pub meta: Value,
}

/// A result of `prompts/list`, `prompts/get`, `resources/list`, `resources/templates/list`
/// or `resources/read` as an upstream gave it, made a 2026-07-28 result (§15).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ForwardedResult {
    /// Always `"complete"`.
    pub result_type: &'static str,
    /// The upstream's members (`prompts`, `contents`, `nextCursor`…), without its `_meta`.
    #[serde(flatten)]
    pub result: Map<String, Value>,
    /// Cache freshness in ms.
    pub ttl_ms: u64,
    /// Cache scope.
    pub cache_scope: CacheScope,
    /// `serverInfo`.
    #[serde(rename = "_meta")]
    pub meta: Value,
}

/// `InputRequiredResult` of an MRTR round (§9, B-32): the requests still unanswered.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InputRequiredResult {
    /// Always `"input_required"`.
    pub result_type: &'static str,
    /// Key → request object.
    pub input_requests: Map<String, Value>,
    /// `serverInfo`.
    #[serde(rename = "_meta")]
    pub meta: Value,
}

/// The response that ends a listen stream the server closes (B-40).
#[derive(Debug, Serialize)]
pub struct ListenResult {
    /// Always `"complete"`.
    #[serde(rename = "resultType")]
    pub result_type: &'static str,
    /// Carries the subscription id.
    #[serde(rename = "_meta")]
    pub meta: Value,
}
