//! One worker's life in steps: connect to Redis, start the runner over the checked tools,
//! start its loops, and drain them at shutdown. Checking and advertising the tools is
//! [`advertise`](crate::advertise)'s; reading and running jobs is [`runner`]'s.

use std::sync::Arc;

use mcp_tasks_shared::config::WorkerConfig;
use mcp_tasks_store::Store;
use mcp_tasks_store::delayed::{DUE_EVERY, DUE_IDLE};
use mcp_tasks_store::events::EventHub;
use mcp_tasks_store::forward::UpstreamAdvert;
use mcp_tasks_store::registry::ToolAdvert;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::{AbortOnDropHandle, TaskTracker};

use crate::advertise::{ToolSet, advertise, heartbeat};
use crate::{Provider, Tool, WorkerError, admin, claims, forward, runner, strikes};

/// Run a worker until `shutdown` and its drain end (see [`crate::run_serving`]).
pub(crate) async fn serve(
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
    start_admin(&store, &config, admin, &shutdown, &admin_stop);
    store.jobs().ensure_groups(&config.queues).await?;
    store.warn_if_evicting().await;
    let mut tools = ToolSet::check(tools, &config)?;
    let upstreams = advertise(&store, &tools.adverts, &providers).await?;
    let adverts = std::mem::take(&mut tools.adverts);
    let worker = Worker::start(config, store, tools).await;
    worker.start_background();
    let mut loops = worker.start_loops(adverts, upstreams, providers, shutdown);
    loops.join_readers().await;
    worker.drain(loops).await;
    tracing::info!("worker stopped");
    Ok(())
}

/// The admin listener (`/healthz`, `/readyz`, `/metrics`) when there is one, and the queue
/// depth samples it reports, both until `admin_stop`.
fn start_admin(
    store: &Store,
    config: &WorkerConfig,
    admin: Option<tokio::net::TcpListener>,
    shutdown: &CancellationToken,
    admin_stop: &CancellationToken,
) {
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
}

/// A started worker: its store, its runner, and the token that stops its background loops.
struct Worker {
    config: WorkerConfig,
    store: Store,
    runner: Arc<runner::Runner>,
    /// The runs the runner spawned, waited for in the drain.
    tracker: TaskTracker,
    /// Stops the event hub and the background loops once the drain is done.
    hub_stop: CancellationToken,
}

/// The loops a worker started, joined or stopped in its drain.
struct Loops {
    tally: JoinHandle<()>,
    heartbeat: JoinHandle<()>,
    /// The forwarded requests being answered.
    forwarding: TaskTracker,
    renewing: CancellationToken,
    renewer: JoinHandle<()>,
    guest_loop: Option<AbortOnDropHandle<()>>,
    read_loop: Option<AbortOnDropHandle<()>>,
}

impl Worker {
    /// Start the event hub and build the runner over `tools`.
    async fn start(config: WorkerConfig, store: Store, tools: ToolSet) -> Worker {
        let hub_stop = CancellationToken::new();
        let hub = EventHub::start(&store, hub_stop.clone());
        let consumer = format!("{}-{}", hostname(), uuid::Uuid::new_v4().simple());
        tracing::info!(
            worker = %consumer,
            queues = %config.queues.join(","),
            tools = tools.by_name.len(),
            concurrency = config.concurrency,
            "worker started"
        );
        let tracker = TaskTracker::new();
        let strikes = Arc::new(strikes::StrikeWatch::default());
        strikes.prime(&store).await;
        let runner = Arc::new(runner::Runner {
            store: store.clone(),
            hub,
            tools: tools.by_name,
            queues: config.queues.clone(),
            consumer,
            slots: runner::share::Slots::new(
                config.concurrency,
                config.guest_slots,
                config.fair_share,
            ),
            tracker: tracker.clone(),
            claims: claims::Claims::default(),
            lease: config.lease,
            max_deliveries: config.max_deliveries,
            max_result_bytes: config.max_result_bytes,
            result_limits: tools.result_limits,
            stored_bytes: config.stored_bytes,
            stored_bytes_anonymous: config.stored_bytes_anonymous,
            max_input_requests: config.max_input_requests,
            strikes,
            retries: tools.retries,
            dead_letters: tools.dead_letters,
            dead_letters_max: config.dead_letters_max,
            limits: tools.limits,
            slots_held: Arc::default(),
            due_wake: Arc::default(),
        });
        Worker {
            config,
            store,
            runner,
            tracker,
            hub_stop,
        }
    }

    /// The loops that run until `hub_stop`: moving due jobs (where a tool needs it), and
    /// watching and pruning strikes.
    fn start_background(&self) {
        let due_queues = self.due_queues();
        if !due_queues.is_empty() {
            tokio::spawn(move_due(
                self.store.clone(),
                due_queues,
                self.runner.due_wake.clone(),
                self.hub_stop.clone(),
            ));
        }
        tokio::spawn(self.runner.strikes.clone().watch(
            self.store.clone(),
            self.config.queues.clone(),
            self.hub_stop.clone(),
        ));
        tokio::spawn(strikes::prune_held(
            self.store.clone(),
            self.config.queues.clone(),
            self.hub_stop.clone(),
        ));
    }

    /// The queues whose due jobs this worker moves. Only workers with a tool that retries or
    /// is limited pay for moving due jobs (a script per queue every DUE_EVERY to DUE_IDLE);
    /// any such worker moves every job of its queues.
    fn due_queues(&self) -> Vec<String> {
        let runner = &self.runner;
        self.config
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
            .collect()
    }

    /// The loops that run until `shutdown` (and the tally, until the drain is done): the
    /// heartbeat, forwarded requests, claim renewal, and the guest and job read loops.
    fn start_loops(
        &self,
        adverts: Vec<ToolAdvert>,
        upstreams: Vec<UpstreamAdvert>,
        providers: Vec<Arc<dyn Provider>>,
        shutdown: CancellationToken,
    ) -> Loops {
        let (store, runner) = (&self.store, &self.runner);
        let tally = tokio::spawn(mcp_tasks_shared::tally::publish(
            store.clone(),
            format!("worker:{}", runner.consumer),
            self.hub_stop.clone(),
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
                self.config.max_result_bytes,
                shutdown.clone(),
                forwarding.clone(),
            ));
        }
        forwarding.close();
        let renewing = CancellationToken::new();
        let renewer = tokio::spawn(runner.clone().renew_loop(renewing.clone()));
        let guest_loop = runner.slots.guests.clone().map(|guests| {
            AbortOnDropHandle::new(tokio::spawn(tracing::Instrument::in_current_span(
                runner.clone().guest_loop(guests, shutdown.clone()),
            )))
        });
        // On a runtime thread rather than the caller's (`block_on`'s) own: a job the loop
        // spawns then goes to that thread's next slot instead of waking another thread for
        // it, and a reply reaches the loop without waking the caller's thread (about one
        // futex wake and a context switch less per job). Dropping this future still stops
        // the loop.
        let read_loop = AbortOnDropHandle::new(tokio::spawn(tracing::Instrument::in_current_span(
            runner.clone().read_loop(shutdown),
        )));
        Loops {
            tally,
            heartbeat,
            forwarding,
            renewing,
            renewer,
            guest_loop,
            read_loop: Some(read_loop),
        }
    }

    /// After the read loops ended: give running jobs and forwarded requests the grace
    /// period, hand back what is left, then stop the background loops.
    async fn drain(self, loops: Loops) {
        let (store, runner, config) = (&self.store, &self.runner, &self.config);
        // One deadline for running jobs and forwarded requests alike.
        let deadline = tokio::time::Instant::now() + config.shutdown_grace;
        loops.heartbeat.abort();
        // Tasks waiting for input would hold the shutdown for the whole grace period: give
        // them to other workers now. Running jobs keep their claims (renewed) while they
        // finish.
        runner
            .claims
            .give_up(store, &runner.consumer, config.lease, true)
            .await;
        self.tracker.close();
        let finished = tokio::time::timeout_at(deadline, self.tracker.wait())
            .await
            .is_ok();
        if !finished {
            runner
                .claims
                .give_up(store, &runner.consumer, config.lease, false)
                .await;
        }
        loops.renewing.cancel();
        let _ = loops.renewer.await;
        if !finished {
            tracing::warn!(
                grace_ms = config.shutdown_grace.as_millis() as u64,
                "jobs still running after the grace period were handed back to their queue (for another worker, or this one after a restart)"
            );
        }
        // Forwarded requests ran meanwhile; whatever still runs at the deadline is cut off
        // (its gateway reports it taken but unanswered).
        if tokio::time::timeout_at(deadline, loops.forwarding.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                "forwarded requests still running at the end of the grace period were dropped"
            );
        }
        self.hub_stop.cancel();
        // Its last counts, so the jobs finished during the drain are charted.
        let _ = loops.tally.await;
    }
}

impl Loops {
    /// Wait for the job read loop (ended by `shutdown`), then the guest loop; a panic in
    /// either goes on here.
    async fn join_readers(&mut self) {
        if let Some(read_loop) = self.read_loop.take()
            && let Err(e) = read_loop.await
            && e.is_panic()
        {
            std::panic::resume_unwind(e.into_panic());
        }
        // Ended by the same shutdown; a job it holds is then given up with the parked tasks.
        if let Some(guest_loop) = self.guest_loop.take()
            && let Err(e) = guest_loop.await
            && e.is_panic()
        {
            std::panic::resume_unwind(e.into_panic());
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
            match store.jobs().move_due(q).await {
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
