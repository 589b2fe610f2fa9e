//! [`State`]: what every request of one gateway process shares (configuration, the store,
//! the event hub, the tool registry, the authenticator), built once by `run`.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, Ordering};

use mcp_tasks_shared::config::GatewayConfig;
use mcp_tasks_store::Store;
use mcp_tasks_store::events::EventHub;
use mcp_tasks_store::forward::Forwarder;
use tokio_util::sync::CancellationToken;

use crate::{auth, console, registry};

/// Shared by every request of one gateway process.
pub(crate) struct State {
    pub(crate) config: GatewayConfig,
    pub(crate) store: Store,
    pub(crate) hub: EventHub,
    pub(crate) registry: registry::Registry,
    /// Forwards `prompts/*` and `resources/*` to the workers holding upstream sessions.
    pub(crate) forwarder: Forwarder,
    /// Who may call.
    pub(crate) auth: auth::Authenticator,
    /// Listening on loopback: `Host` must be a loopback name (DNS rebinding, B-17).
    pub(crate) loopback_only: bool,
    /// False once shutdown started: `/readyz` then fails.
    pub(crate) ready: AtomicBool,
    /// Cancelled when the gateway stops accepting: listen streams end gracefully.
    pub(crate) streams_end: CancellationToken,
    /// The operator's console, when `MCPT_CONSOLE=on`.
    pub(crate) console: Option<console::Console>,
    /// Taken while an owner's unfinished set is pruned.
    pub(crate) prunes: OwnerLocks,
}

impl State {
    /// Whether the gateway still takes new work (`/readyz`).
    pub(crate) fn ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
}

/// Locks by owner, striped: owners that share a stripe wait for each other, which is
/// harmless for the rare work they guard, and nothing is kept per owner.
pub(crate) struct OwnerLocks {
    stripes: [tokio::sync::Mutex<()>; 32],
    hasher: RandomState,
}

impl OwnerLocks {
    pub(crate) fn new() -> OwnerLocks {
        OwnerLocks {
            stripes: std::array::from_fn(|_| tokio::sync::Mutex::new(())),
            hasher: RandomState::new(),
        }
    }

    /// `owner`'s stripe, held until the guard drops.
    pub(crate) async fn lock(&self, owner: &str) -> tokio::sync::MutexGuard<'_, ()> {
        let stripe = self.hasher.hash_one(owner) as usize % self.stripes.len();
        self.stripes[stripe].lock().await
    }
}
