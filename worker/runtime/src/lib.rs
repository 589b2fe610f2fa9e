//! The mcp-tasks worker: pulls jobs from Redis Streams and runs tools.
//!
//! - [`Tool`], [`ToolSpec`], [`TaskContext`]: the API for writing tools
//!   (see `examples/custom_tool.rs` for a worker with its own tool in ~20 lines).
//! - [`tools`]: the built-in packs (`demo`, `conformance`).
//! - [`run`]: advertise the tools, then read and run jobs until shutdown;
//!   [`run_with_admin`] also serves `/healthz`, `/readyz` and `/metrics` (`admin.rs`);
//!   [`run_serving`] also answers [`Provider`]s' forwarded requests (`forward.rs`).
//!
//! The job loop itself is in `runner/`; everything Redis is in `mcp_tasks_store`. The
//! `MCPT_TOOLS_FILE` catalog is `mcp-tasks-catalog` (`worker/catalog/`), built on this
//! crate's public API only; the `mcp-tasks-worker` binary (`worker/`) joins the two.

#![warn(missing_docs)]

mod admin;
mod claims;
mod context;
mod forward;
mod runner;
mod strikes;
mod tool;
pub mod tools;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use mcp_tasks_protocol::time::now_millis;
use mcp_tasks_shared::config::WorkerConfig;
use mcp_tasks_store::delayed::{DUE_EVERY, DUE_IDLE};
use mcp_tasks_store::events::EventHub;
use mcp_tasks_store::registry::{HEARTBEAT_INTERVAL_MS, ToolAdvert};
use mcp_tasks_store::{Store, StoreError};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use context::TaskContext;
pub use forward::{Provider, ProviderFuture};
pub use mcp_tasks_protocol::tasks::InputRequest;
pub use mcp_tasks_protocol::tools::CallToolResult;
pub use mcp_tasks_store::forward::UpstreamAdvert;
pub use mcp_tasks_store::registry::{Needs, Policy};
pub use tool::{Rate, Retry, RetryPolicy, Tool, ToolError, ToolFuture, ToolSpec};

/// Why a worker stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// Redis was unreachable at start.
    #[error("cannot reach redis")]
    Redis(#[from] StoreError),
    /// Two tools share a name, or a tool's queue is not served.
    #[error("{0}")]
    Tools(String),
}

fn advert(spec: &tool::ToolSpec, rank: u32, config: &WorkerConfig) -> ToolAdvert {
    let clamp = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    ToolAdvert {
        tool: spec.tool.clone(),
        queue: spec.queue.clone(),
        policy: spec.policy,
        needs: spec.needs.clone(),
        pre_input: spec.pre_input.clone(),
        outlives_caller: spec.outlives_caller,
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

/// Advertise `tools`, then run jobs from `config.queues` until `shutdown` fires; running
/// jobs then get `config.shutdown_grace` to finish.
///
/// # Errors
/// Redis unreachable at start, or an invalid tool set.
pub async fn run(
    config: WorkerConfig,
    tools: Vec<Arc<dyn Tool>>,
    shutdown: CancellationToken,
) -> Result<(), WorkerError> {
    run_with_admin(config, tools, None, shutdown).await
}

/// [`run`], serving `GET /healthz`, `/readyz` and `/metrics` on `admin` meanwhile (ready
/// while Redis answers and until `shutdown` fires; the listener stays up through the grace
/// period).
///
/// # Errors
/// Redis unreachable at start, or an invalid tool set.
pub async fn run_with_admin(
    config: WorkerConfig,
    tools: Vec<Arc<dyn Tool>>,
    admin: Option<tokio::net::TcpListener>,
    shutdown: CancellationToken,
) -> Result<(), WorkerError> {
    run_serving(config, tools, Vec::new(), admin, shutdown).await
}

/// [`run_with_admin`], also advertising `providers` (upstream prompts and resources) and
/// answering the requests gateways forward to them.
///
/// # Errors
/// Redis unreachable at start, or an invalid tool set.
pub async fn run_serving(
    config: WorkerConfig,
    tools: Vec<Arc<dyn Tool>>,
    providers: Vec<Arc<dyn Provider>>,
    admin: Option<tokio::net::TcpListener>,
    shutdown: CancellationToken,
) -> Result<(), WorkerError> {
    let store = Store::connect_sharded(&config.redis_url, config.queue_shards)
        .await?
        .with_replication(config.replication)?;
    let admin_stop = CancellationToken::new();
    let _admin_stop = admin_stop.clone().drop_guard();
    if let Some(listener) = admin {
        tokio::spawn(admin::serve(
            listener,
            store.clone(),
            shutdown.clone(),
            admin_stop.clone(),
        ));
    }
    tokio::spawn(admin::sample_depths(
        store.clone(),
        config.queues.clone(),
        admin_stop.clone(),
    ));
    store.ensure_groups(&config.queues).await?;
    store.warn_if_evicting().await;
    let mut by_name: HashMap<String, Arc<dyn Tool>> = HashMap::new();
    let mut retries = HashMap::new();
    let mut limits = HashMap::new();
    let mut adverts = Vec::new();
    for (rank, tool) in tools.into_iter().enumerate() {
        let spec = tool.spec();
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
                return Err(WorkerError::Tools(format!(
                    "tool {}: retry needs attempts of at least 1 and 0 < initial <= max",
                    spec.tool.name
                )));
            }
            retries.insert(spec.tool.name.clone(), policy);
        }
        if spec.max_running == Some(0) {
            return Err(WorkerError::Tools(format!(
                "tool {}: max_running must be at least 1",
                spec.tool.name
            )));
        }
        if spec.concurrency_key.is_some() && spec.max_running.is_none() && spec.rate.is_none() {
            return Err(WorkerError::Tools(format!(
                "tool {}: concurrency_key needs max_running or rate",
                spec.tool.name
            )));
        }
        if spec.max_running.is_some() || spec.rate.is_some() {
            limits.insert(
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
            return Err(WorkerError::Tools(format!(
                "tool {}: its input schema: {why}",
                spec.tool.name
            )));
        }
        adverts.push(advert(
            &spec,
            u32::try_from(rank).unwrap_or(u32::MAX),
            &config,
        ));
        if by_name.insert(spec.tool.name.clone(), tool).is_some() {
            return Err(WorkerError::Tools(format!(
                "two tools are named {}",
                spec.tool.name
            )));
        }
    }
    let mut upstreams: Vec<UpstreamAdvert> = providers.iter().map(|p| p.advert()).collect();
    for u in &mut upstreams {
        u.heartbeat_ms = now_millis();
    }
    // Before the tools: a gateway that lists the tools also finds the prompts and resources.
    store.advertise_upstreams(&upstreams).await?;
    store.advertise(&adverts).await?;

    let hub_stop = CancellationToken::new();
    let hub = EventHub::start(&store, hub_stop.clone());
    let consumer = format!("{}-{}", hostname(), uuid::Uuid::new_v4().simple());
    tracing::info!(
        worker = %consumer,
        queues = %config.queues.join(","),
        tools = by_name.len(),
        concurrency = config.concurrency,
        "worker started"
    );
    let tracker = TaskTracker::new();
    let strikes = Arc::new(strikes::StrikeWatch::default());
    strikes.prime(&store).await;
    let runner = Arc::new(runner::Runner {
        store: store.clone(),
        hub,
        tools: by_name,
        queues: config.queues.clone(),
        consumer,
        slots: runner::share::Slots::new(config.concurrency, config.guest_slots, config.fair_share),
        tracker: tracker.clone(),
        claims: claims::Claims::default(),
        lease: config.lease,
        max_deliveries: config.max_deliveries,
        max_result_bytes: config.max_result_bytes,
        stored_bytes: config.stored_bytes,
        stored_bytes_anonymous: config.stored_bytes_anonymous,
        max_input_requests: config.max_input_requests,
        strikes: strikes.clone(),
        retries,
        limits,
        slots_held: Arc::default(),
        due_wake: Arc::default(),
    });
    // Only workers with a tool that retries or is limited pay for moving due jobs (a script
    // per queue every DUE_EVERY to DUE_IDLE); any such worker moves every job of its queues.
    let retry_queues: Vec<String> = config
        .queues
        .iter()
        .filter(|q| {
            runner.retries.keys().chain(runner.limits.keys()).any(|t| {
                runner
                    .tools
                    .get(t)
                    .is_some_and(|tool| tool.spec().queue == **q)
            })
        })
        .cloned()
        .collect();
    if !retry_queues.is_empty() {
        tokio::spawn(move_due(
            store.clone(),
            retry_queues,
            runner.due_wake.clone(),
            hub_stop.clone(),
        ));
    }
    tokio::spawn(strikes.watch(store.clone(), config.queues.clone(), hub_stop.clone()));
    tokio::spawn(strikes::prune_held(
        store.clone(),
        config.queues.clone(),
        hub_stop.clone(),
    ));

    let tally = tokio::spawn(mcp_tasks_shared::tally::publish(
        store.clone(),
        format!("worker:{}", runner.consumer),
        hub_stop.clone(),
    ));
    let heartbeat = tokio::spawn(heartbeat(
        store.clone(),
        adverts,
        upstreams,
        shutdown.clone(),
    ));
    let forwarding = TaskTracker::new();
    for provider in providers {
        forwarding.spawn(forward::serve(
            store.clone(),
            provider,
            config.max_result_bytes,
            shutdown.clone(),
            forwarding.clone(),
        ));
    }
    forwarding.close();
    let renewing = CancellationToken::new();
    let renewer = tokio::spawn(runner.clone().renew_loop(renewing.clone()));
    let guest_loop = runner.slots.guests.clone().map(|guests| {
        tokio_util::task::AbortOnDropHandle::new(tokio::spawn(
            tracing::Instrument::in_current_span(
                runner.clone().guest_loop(guests, shutdown.clone()),
            ),
        ))
    });
    // On a runtime thread rather than the caller's (`block_on`'s) own: a job the loop spawns
    // then goes to that thread's next slot instead of waking another thread for it, and a
    // reply reaches the loop without waking the caller's thread (about one futex wake and a
    // context switch less per job). Dropping this future still stops the loop.
    let read_loop = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(
        tracing::Instrument::in_current_span(runner.clone().read_loop(shutdown)),
    ));
    if let Err(e) = read_loop.await
        && e.is_panic()
    {
        std::panic::resume_unwind(e.into_panic());
    }
    // Ended by the same shutdown; a job it holds is then given up with the parked tasks.
    if let Some(guest_loop) = guest_loop
        && let Err(e) = guest_loop.await
        && e.is_panic()
    {
        std::panic::resume_unwind(e.into_panic());
    }
    // One deadline for running jobs and forwarded requests alike.
    let deadline = tokio::time::Instant::now() + config.shutdown_grace;
    heartbeat.abort();
    // Tasks waiting for input would hold the shutdown for the whole grace period: give them
    // to other workers now. Running jobs keep their claims (renewed) while they finish.
    runner
        .claims
        .give_up(&store, &runner.consumer, config.lease, true)
        .await;
    tracker.close();
    let finished = tokio::time::timeout_at(deadline, tracker.wait())
        .await
        .is_ok();
    if !finished {
        runner
            .claims
            .give_up(&store, &runner.consumer, config.lease, false)
            .await;
    }
    renewing.cancel();
    let _ = renewer.await;
    if !finished {
        tracing::warn!(
            grace_ms = config.shutdown_grace.as_millis() as u64,
            "jobs still running after the grace period were handed back to their queue (for another worker, or this one after a restart)"
        );
    }
    // Forwarded requests ran meanwhile; whatever still runs at the deadline is cut off
    // (its gateway reports it taken but unanswered).
    if tokio::time::timeout_at(deadline, forwarding.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            "forwarded requests still running at the end of the grace period were dropped"
        );
    }
    hub_stop.cancel();
    // Its last counts, so the jobs finished during the drain are charted.
    let _ = tally.await;
    tracing::info!("worker stopped");
    Ok(())
}

async fn heartbeat(
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
        if let Err(e) = store.advertise_upstreams(&upstreams).await {
            tracing::warn!(error = %e, "cannot renew upstream advertisements");
        }
        if let Err(e) = store.advertise(&adverts).await {
            tracing::warn!(error = %e, "cannot renew tool advertisements");
        }
    }
}

/// Move due retries and waiting jobs back to their queues until `stop`: again when the next
/// one is due, at least [`DUE_EVERY`] and at most [`DUE_IDLE`] later (sooner when this
/// worker delays a job: `wake`), so an empty delayed set costs one `due.lua` per stream a
/// second, not four.
async fn move_due(
    store: Store,
    queues: Vec<String>,
    wake: Arc<tokio::sync::Notify>,
    stop: CancellationToken,
) {
    loop {
        let mut sleep = DUE_IDLE;
        for q in &queues {
            match store.move_due(q).await {
                Ok((_, Some(next))) => sleep = sleep.min(next),
                Ok((_, None)) => {}
                Err(e) => {
                    tracing::debug!(error = %e, queue.name = %q, "cannot move due retries yet");
                    sleep = sleep.min(DUE_EVERY);
                }
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(sleep.max(DUE_EVERY)) => {}
            // A job this worker just delayed: look again soon enough for its due time.
            () = wake.notified() => tokio::time::sleep(DUE_EVERY).await,
        }
    }
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_owned())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".to_owned())
}
