//! The tool set a worker advertises: each tool checked against the worker's queues and the
//! limits it may declare, its advert built, and the heartbeat that renews the adverts. The
//! rest of a worker's life is [`lifecycle`](crate::lifecycle)'s.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use mcp_tasks_protocol::time::now_millis;
use mcp_tasks_shared::config::WorkerConfig;
use mcp_tasks_store::Store;
use mcp_tasks_store::forward::UpstreamAdvert;
use mcp_tasks_store::registry::{HEARTBEAT_INTERVAL_MS, ToolAdvert};
use tokio_util::sync::CancellationToken;

use crate::tool::{DeadLetterPolicy, RetryPolicy, Tool, ToolSpec};
use crate::{Provider, WorkerError, runner};

/// A worker's tools once checked: by name, with the retry policies and limits the runner
/// applies and the adverts the gateways read.
#[derive(Default)]
pub(crate) struct ToolSet {
    pub(crate) by_name: HashMap<String, Arc<dyn Tool>>,
    pub(crate) retries: HashMap<String, RetryPolicy>,
    pub(crate) dead_letters: HashMap<String, DeadLetterPolicy>,
    /// The result bound of each tool that sets its own.
    pub(crate) result_limits: HashMap<String, usize>,
    pub(crate) limits: HashMap<String, runner::Limits>,
    pub(crate) adverts: Vec<ToolAdvert>,
}

impl ToolSet {
    /// Check `tools` in order (their order is their rank); the first one refused ends it.
    pub(crate) fn check(
        tools: Vec<Arc<dyn Tool>>,
        config: &WorkerConfig,
    ) -> Result<ToolSet, WorkerError> {
        let mut set = ToolSet::default();
        for (rank, tool) in tools.into_iter().enumerate() {
            set.add(u32::try_from(rank).unwrap_or(u32::MAX), tool, config)?;
        }
        Ok(set)
    }

    /// Check one tool's spec and take it in.
    fn add(
        &mut self,
        rank: u32,
        tool: Arc<dyn Tool>,
        config: &WorkerConfig,
    ) -> Result<(), WorkerError> {
        let spec = tool.spec();
        let refused = |why: String| WorkerError::Tools(format!("tool {}: {why}", spec.tool.name));
        if !config.queues.contains(&spec.queue) {
            return Err(WorkerError::Tools(format!(
                "tool {} uses queue {} which this worker does not serve (MCPT_QUEUES={})",
                spec.tool.name,
                spec.queue,
                config.queues.join(",")
            )));
        }
        if let Some(policy) = spec.retry {
            if policy.attempts == 0 || policy.initial.is_zero() || policy.max < policy.initial {
                return Err(refused(
                    "retry needs attempts of at least 1 and 0 < initial <= max".to_owned(),
                ));
            }
            self.retries.insert(spec.tool.name.clone(), policy);
        }
        self.dead_letters
            .insert(spec.tool.name.clone(), spec.dead_letters);
        if let Some(most) = spec.max_result_bytes {
            if most == 0 {
                return Err(refused("max_result_bytes must be at least 1".to_owned()));
            }
            self.result_limits.insert(spec.tool.name.clone(), most);
        }
        if spec.max_running == Some(0) {
            return Err(refused("max_running must be at least 1".to_owned()));
        }
        if spec.concurrency_key.is_some() && spec.max_running.is_none() && spec.rate.is_none() {
            return Err(refused(
                "concurrency_key needs max_running or rate".to_owned(),
            ));
        }
        if spec.max_running.is_some() || spec.rate.is_some() {
            self.limits.insert(
                spec.tool.name.clone(),
                runner::Limits {
                    max_running: spec.max_running,
                    key: spec.concurrency_key.clone(),
                    rate: spec.rate,
                },
            );
        }
        // The gateway validates calls with this schema: a keyword it would not enforce is
        // refused here rather than silently ignored on every call.
        if !spec.schema_checked_upstream
            && let Err(why) = mcp_tasks_shared::schema::unenforced(&spec.tool.input_schema)
        {
            return Err(refused(format!("its input schema: {why}")));
        }
        self.adverts.push(advert(&spec, rank, config));
        if self.by_name.insert(spec.tool.name.clone(), tool).is_some() {
            return Err(WorkerError::Tools(format!(
                "two tools are named {}",
                spec.tool.name
            )));
        }
        Ok(())
    }
}

/// Advertise the `providers`' upstreams, then `adverts`; returns the upstream adverts for
/// the [`heartbeat`]. The upstreams go first: a gateway that lists the tools also finds the
/// prompts and resources.
pub(crate) async fn advertise(
    store: &Store,
    adverts: &[ToolAdvert],
    providers: &[Arc<dyn Provider>],
) -> Result<Vec<UpstreamAdvert>, WorkerError> {
    let mut upstreams: Vec<UpstreamAdvert> = providers.iter().map(|p| p.advert()).collect();
    for u in &mut upstreams {
        u.heartbeat_ms = now_millis();
    }
    store.fleet().advertise_upstreams(&upstreams).await?;
    store.fleet().advertise(adverts).await?;
    Ok(upstreams)
}

fn advert(spec: &ToolSpec, rank: u32, config: &WorkerConfig) -> ToolAdvert {
    let clamp = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    ToolAdvert {
        tool: spec.tool.clone(),
        queue: spec.queue.clone(),
        policy: spec.policy,
        needs: spec.needs.clone(),
        pre_input: spec.pre_input.clone(),
        outlives_caller: spec.outlives_caller,
        priority: spec.priority,
        ttl_ms: clamp(
            spec.ttl
                .unwrap_or(config.tasks.ttl)
                .min(config.tasks.max_ttl),
        ),
        poll_interval_ms: clamp(spec.poll_interval.unwrap_or(config.tasks.poll_interval)),
        rank,
        heartbeat_ms: now_millis(),
    }
}

/// Renew the adverts every `HEARTBEAT_INTERVAL_MS` until `shutdown`.
pub(crate) async fn heartbeat(
    store: Store,
    mut adverts: Vec<ToolAdvert>,
    mut upstreams: Vec<UpstreamAdvert>,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(HEARTBEAT_INTERVAL_MS));
    tick.tick().await;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = now_millis();
        for a in &mut adverts {
            a.heartbeat_ms = now;
        }
        for u in &mut upstreams {
            u.heartbeat_ms = now;
        }
        if let Err(e) = store.fleet().advertise_upstreams(&upstreams).await {
            tracing::warn!(error = %e, "cannot renew upstream advertisements");
        }
        if let Err(e) = store.fleet().advertise(&adverts).await {
            tracing::warn!(error = %e, "cannot renew tool advertisements");
        }
    }
}
