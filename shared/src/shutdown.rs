//! OS signals → a [`CancellationToken`] (STYLE.md §7).

use tokio_util::sync::CancellationToken;

/// A token cancelled on SIGINT or SIGTERM (Kubernetes sends SIGTERM to start a graceful
/// shutdown). Components take child tokens.
pub fn on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let fire = token.clone();
    tokio::spawn(async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot listen for SIGTERM");
                        let _ = ctrl_c.await;
                        fire.cancel();
                        return;
                    }
                };
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        #[cfg(not(unix))]
        let _ = ctrl_c.await;
        tracing::info!("shutdown signal received");
        fire.cancel();
    });
    token
}

/// Wait for the next tick of `tick` (missed ticks delay the next, never burst), or for
/// `stop`: `false` once stopped. The loop of a periodic background job reads
/// `while every(&mut tick, &stop).await { … }`.
pub async fn every(tick: &mut tokio::time::Interval, stop: &CancellationToken) -> bool {
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::select! {
        () = stop.cancelled() => false,
        _ = tick.tick() => true,
    }
}
