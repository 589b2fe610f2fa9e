//! The live tool list: advertisements from `mcpt:tools`, cached for a second so a
//! `tools/call` costs no extra Redis round trip; and the same for the upstreams whose
//! prompts and resources workers serve (`mcpt:upstreams`); and the kill switch's strikes
//! (`mcpt:strikes`), read at most once a second, so a strike refuses calls on every gateway
//! within a second at no cost per call.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_tasks_protocol::time::now_millis;
use mcp_tasks_store::forward::UpstreamAdvert;
use mcp_tasks_store::registry::{ADVERT_STALE_MS, ToolAdvert};
use mcp_tasks_store::strikes::{Strike, Strikes};
use mcp_tasks_store::{Store, StoreResult};
use tokio::sync::RwLock;

const CACHE_FOR: Duration = Duration::from_secs(1);

/// One advertised tool, shared with the cached list it was found in: a call reads its
/// schemas and policy without copying them (a deep copy was 3.5 % of a `tools/call`).
pub(crate) struct FoundTool {
    list: Arc<Vec<ToolAdvert>>,
    at: usize,
}

impl std::ops::Deref for FoundTool {
    type Target = ToolAdvert;

    fn deref(&self) -> &ToolAdvert {
        &self.list[self.at]
    }
}

pub(crate) struct Registry {
    store: Store,
    tools: TtlCache<Vec<ToolAdvert>>,
    upstreams: TtlCache<Vec<UpstreamAdvert>>,
    strikes: TtlCache<Strikes>,
}

impl Registry {
    pub(crate) fn new(store: Store) -> Self {
        Registry {
            store,
            tools: TtlCache::new(),
            upstreams: TtlCache::new(),
            strikes: TtlCache::new(),
        }
    }

    /// Live tools in listing order (rank, then name).
    pub(crate) async fn tools(&self) -> StoreResult<Arc<Vec<ToolAdvert>>> {
        if let Some(tools) = self.tools.fresh().await {
            return Ok(tools);
        }
        self.refresh().await
    }

    /// One live tool; a miss re-reads Redis once (a worker may have just started).
    pub(crate) async fn find(&self, name: &str) -> StoreResult<Option<FoundTool>> {
        let found = |list: Arc<Vec<ToolAdvert>>| {
            let at = list.iter().position(|t| t.tool.name == name)?;
            Some(FoundTool { list, at })
        };
        if let Some(tool) = found(self.tools().await?) {
            return Ok(Some(tool));
        }
        Ok(found(self.refresh().await?))
    }

    /// The strike a call of `name` with `args` falls under, if any.
    pub(crate) async fn struck(
        &self,
        name: &str,
        args: &serde_json::Value,
    ) -> StoreResult<Option<Strike>> {
        // One read per second for the whole gateway, however many calls find it stale.
        let strikes = self
            .strikes
            .fresh_or_read_once(|| self.store.controls().strikes())
            .await?;
        Ok(strikes.matching(name, args).cloned())
    }

    async fn refresh(&self) -> StoreResult<Arc<Vec<ToolAdvert>>> {
        let now = now_millis();
        let mut live: Vec<ToolAdvert> = self
            .store
            .fleet()
            .adverts()
            .await?
            .into_iter()
            .filter(|a| now - a.heartbeat_ms < ADVERT_STALE_MS)
            .collect();
        live.sort_by(|a, b| {
            a.rank
                .cmp(&b.rank)
                .then_with(|| a.tool.name.cmp(&b.tool.name))
        });
        Ok(self.tools.put(live).await)
    }

    /// Live upstreams serving prompts or resources, in page order (rank, then name).
    pub(crate) async fn upstreams(&self) -> StoreResult<Arc<Vec<UpstreamAdvert>>> {
        if let Some(ups) = self.upstreams.fresh().await {
            return Ok(ups);
        }
        let now = now_millis();
        let mut live: Vec<UpstreamAdvert> = self
            .store
            .fleet()
            .upstream_adverts()
            .await?
            .into_iter()
            .filter(|a| now - a.heartbeat_ms < ADVERT_STALE_MS)
            .collect();
        live.sort_by(|a, b| a.rank.cmp(&b.rank).then_with(|| a.name.cmp(&b.name)));
        Ok(self.upstreams.put(live).await)
    }
}

/// A copy of something read from Redis, fresh for [`CACHE_FOR`] after it was stored.
struct TtlCache<T> {
    held: RwLock<Option<(Instant, Arc<T>)>>,
}

impl<T> TtlCache<T> {
    fn new() -> Self {
        TtlCache {
            held: RwLock::new(None),
        }
    }

    /// The copy, if it is fresh.
    async fn fresh(&self) -> Option<Arc<T>> {
        Self::fresh_in(&*self.held.read().await)
    }

    fn fresh_in(held: &Option<(Instant, Arc<T>)>) -> Option<Arc<T>> {
        held.as_ref()
            .filter(|(at, _)| at.elapsed() < CACHE_FOR)
            .map(|(_, value)| value.clone())
    }

    /// Keep `value` as the fresh copy, from now.
    async fn put(&self, value: T) -> Arc<T> {
        let value = Arc::new(value);
        *self.held.write().await = Some((Instant::now(), value.clone()));
        value
    }

    /// The fresh copy, or one `read` for all callers: concurrent callers that find the copy
    /// stale wait for the first one's read instead of each reading.
    async fn fresh_or_read_once<F>(&self, read: impl FnOnce() -> F) -> StoreResult<Arc<T>>
    where
        F: Future<Output = StoreResult<T>>,
    {
        if let Some(value) = self.fresh().await {
            return Ok(value);
        }
        let mut held = self.held.write().await;
        if let Some(value) = Self::fresh_in(&held) {
            return Ok(value);
        }
        let value = Arc::new(read().await?);
        *held = Some((Instant::now(), value.clone()));
        Ok(value)
    }
}
