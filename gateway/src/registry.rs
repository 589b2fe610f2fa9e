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
    cache: RwLock<Option<(Instant, Arc<Vec<ToolAdvert>>)>>,
    upstreams: RwLock<Option<(Instant, Arc<Vec<UpstreamAdvert>>)>>,
    strikes: RwLock<Option<(Instant, Arc<Strikes>)>>,
}

impl Registry {
    pub(crate) fn new(store: Store) -> Self {
        Registry {
            store,
            cache: RwLock::new(None),
            upstreams: RwLock::new(None),
            strikes: RwLock::new(None),
        }
    }

    /// Live tools in listing order (rank, then name).
    pub(crate) async fn tools(&self) -> StoreResult<Arc<Vec<ToolAdvert>>> {
        if let Some((at, tools)) = self.cache.read().await.as_ref()
            && at.elapsed() < CACHE_FOR
        {
            return Ok(tools.clone());
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
        let fresh = |held: &Option<(Instant, Arc<Strikes>)>| {
            held.as_ref()
                .filter(|(at, _)| at.elapsed() < CACHE_FOR)
                .map(|(_, s)| s.clone())
        };
        let cached = fresh(&*self.strikes.read().await);
        let strikes = match cached {
            Some(s) => s,
            None => {
                // One read per second for the whole gateway: concurrent calls that find
                // the copy stale wait for the first one's read instead of each reading.
                let mut held = self.strikes.write().await;
                match fresh(&held) {
                    Some(s) => s,
                    None => {
                        let read = Arc::new(self.store.strikes().await?);
                        *held = Some((Instant::now(), read.clone()));
                        read
                    }
                }
            }
        };
        Ok(strikes.matching(name, args).cloned())
    }

    async fn refresh(&self) -> StoreResult<Arc<Vec<ToolAdvert>>> {
        let now = now_millis();
        let mut live: Vec<ToolAdvert> = self
            .store
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
        let live = Arc::new(live);
        *self.cache.write().await = Some((Instant::now(), live.clone()));
        Ok(live)
    }

    /// Live upstreams serving prompts or resources, in page order (rank, then name).
    pub(crate) async fn upstreams(&self) -> StoreResult<Arc<Vec<UpstreamAdvert>>> {
        if let Some((at, ups)) = self.upstreams.read().await.as_ref()
            && at.elapsed() < CACHE_FOR
        {
            return Ok(ups.clone());
        }
        let now = now_millis();
        let mut live: Vec<UpstreamAdvert> = self
            .store
            .upstream_adverts()
            .await?
            .into_iter()
            .filter(|a| now - a.heartbeat_ms < ADVERT_STALE_MS)
            .collect();
        live.sort_by(|a, b| a.rank.cmp(&b.rank).then_with(|| a.name.cmp(&b.name)));
        let live = Arc::new(live);
        *self.upstreams.write().await = Some((Instant::now(), live.clone()));
        Ok(live)
    }
}
