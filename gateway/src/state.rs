//! [`State`]: what every request of one gateway process shares (configuration, the store,
//! the event hub, the tool registry, the authenticator), built once by `run`.

use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use mcp_tasks_shared::config::GatewayConfig;
use mcp_tasks_shared::sync::lock;
use mcp_tasks_store::Store;
use mcp_tasks_store::events::EventHub;
use mcp_tasks_store::forward::Forwarder;
use tokio_util::sync::CancellationToken;

use crate::{auth, registry};

/// Shared by every request of one gateway process.
pub(crate) struct State {
    pub(crate) config: GatewayConfig,
    pub(crate) store: Store,
    pub(crate) hub: EventHub,
    pub(crate) registry: registry::Registry,
    /// Forwards `prompts/*` and `resources/*` to the workers holding upstream sessions.
    pub(crate) forwarder: Forwarder,
    /// Who may call.
    pub(crate) auth: Arc<auth::Authenticator>,
    /// Listening on loopback: `Host` must be a loopback name (DNS rebinding, B-17).
    pub(crate) loopback_only: bool,
    /// False once shutdown started: `/readyz` then fails.
    pub(crate) ready: AtomicBool,
    /// Cancelled when the gateway stops accepting: listen streams end gracefully.
    pub(crate) streams_end: CancellationToken,
    /// The operator's console, when `MCPT_CONSOLE=on`.
    #[cfg(feature = "console")]
    pub(crate) console: Option<mcp_tasks_console::Console>,
    /// Prunes of owners' unfinished sets at their limit.
    pub(crate) prunes: Prunes,
}

impl State {
    /// Whether the gateway still takes new work (`/readyz`).
    pub(crate) fn ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
}

/// Prunes of owners' unfinished sets (`Tasks::prune_active`), one at a time per stripe of
/// owners, so a burst of requests at an owner's limit does not read the owner's whole set
/// once each; nothing is kept per owner. A request that waited while a prune of its owner
/// started skips its own: that prune read the set after this request was refused.
pub(crate) struct Prunes {
    stripes: [Stripe; 32],
    hasher: RandomState,
}

#[derive(Default)]
struct Stripe {
    /// Held while a prune runs.
    running: tokio::sync::Mutex<()>,
    /// Prunes started on this stripe, and the owner (hashed) of the latest.
    started: Mutex<(u64, u64)>,
}

impl Prunes {
    pub(crate) fn new() -> Prunes {
        Prunes {
            stripes: std::array::from_fn(|_| Stripe::default()),
            hasher: RandomState::new(),
        }
    }

    /// Run `prune` of `owner`'s set after the prunes of its stripe before it, unless one of
    /// `owner`'s started while this call waited.
    pub(crate) async fn run<E>(
        &self,
        owner: &str,
        prune: impl Future<Output = Result<(), E>>,
    ) -> Result<(), E> {
        let key = self.hasher.hash_one(owner);
        let stripe = &self.stripes[key as usize % self.stripes.len()];
        let seen = lock(&stripe.started).0;
        let _running = stripe.running.lock().await;
        {
            let mut started = lock(&stripe.started);
            if started.0 != seen && started.1 == key {
                return Ok(());
            }
            *started = (started.0 + 1, key);
        }
        prune.await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// Of two requests of one owner waiting behind a running prune, one prunes and the other
    /// skips (a prune of its owner began after it did); another owner's always prunes. The
    /// running prune began before they did, so it does not excuse either.
    #[tokio::test]
    async fn a_prune_begun_while_waiting_spares_the_same_owner_only() {
        let prunes = Arc::new(Prunes::new());
        let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (entered, in_first) = tokio::sync::oneshot::channel::<()>();
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let first = tokio::spawn({
            let (prunes, ran) = (prunes.clone(), ran.clone());
            async move {
                prunes
                    .run("alice", async move {
                        entered.send(()).unwrap();
                        released.await.unwrap();
                        ran.lock().unwrap().push("alice");
                        Ok::<(), ()>(())
                    })
                    .await
            }
        });
        in_first.await.unwrap();
        let waiting: Vec<_> = ["alice", "alice", "bob"]
            .into_iter()
            .map(|owner| {
                let (prunes, ran) = (prunes.clone(), ran.clone());
                tokio::spawn(async move {
                    prunes
                        .run(owner, async move {
                            ran.lock().unwrap().push(owner);
                            Ok::<(), ()>(())
                        })
                        .await
                })
            })
            .collect();
        // On this one-thread runtime the spawned calls run while the test yields, until they
        // wait for the first (or, for another stripe's owner, are done).
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        release.send(()).unwrap();
        first.await.unwrap().unwrap();
        for w in waiting {
            w.await.unwrap().unwrap();
        }
        let mut ran = ran.lock().unwrap().clone();
        ran.sort_unstable();
        assert_eq!(ran, ["alice", "alice", "bob"], "one waiting alice skipped");
    }
}
