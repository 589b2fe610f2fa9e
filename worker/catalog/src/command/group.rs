//! The process group a `[[command]]` runs in: waited on, and ended (SIGTERM, then SIGKILL
//! after a grace) when the program ends, on cancel or timeout, or when the call is dropped.
//! Building and starting the command is [`command`](super)'s.

use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::process::Child;

/// Time between SIGTERM to the group and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(5);

/// The child's process group. Unless [`Group::stop`] finished, dropping it (the runner
/// drops a cancelled handler's future) ends the group in the background.
pub(super) struct Group {
    pgid: u32,
    child: Option<Child>,
    done: bool,
}

impl Group {
    /// The group led by `child`, whose process group id is `pgid`.
    pub(super) fn new(pgid: u32, child: Child) -> Group {
        Group {
            pgid,
            child: Some(child),
            done: false,
        }
    }

    pub(super) async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        match &mut self.child {
            Some(c) => c.wait().await,
            None => std::future::pending().await,
        }
    }

    pub(super) async fn stop(&mut self) {
        end_group(self.pgid, self.child.as_mut()).await;
        self.done = true;
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let (pgid, mut child) = (self.pgid, self.child.take());
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                // SIGTERM now, synchronously: when the worker itself is exiting (the end of
                // its shutdown grace drops the handlers), the background follow-up below may
                // never run, and the group must not outlive it unsignalled.
                let _ = std::process::Command::new("kill")
                    .args(["-TERM", "--", &format!("-{pgid}")])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
                rt.spawn(async move { end_group(pgid, child.as_mut()).await });
            }
            Err(_) => {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", "--", &format!("-{pgid}")])
                    .stderr(Stdio::null())
                    .status();
            }
        }
    }
}

/// SIGTERM to every process of group `pgid`, SIGKILL to those left after [`KILL_GRACE`];
/// returns once the group is empty (or right after SIGKILL). `leader` is reaped on the way
/// so its zombie does not count as alive. The group's id cannot be reused while any member
/// lives, so signalling it cannot reach a stranger.
async fn end_group(pgid: u32, mut leader: Option<&mut Child>) {
    if !signal("0", pgid).await {
        return;
    }
    signal("TERM", pgid).await;
    let deadline = tokio::time::Instant::now() + KILL_GRACE;
    loop {
        if let Some(c) = leader.as_deref_mut() {
            let _ = c.try_wait();
        }
        if !signal("0", pgid).await {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            signal("KILL", pgid).await;
            if let Some(c) = leader {
                let _ = c.wait().await;
            }
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `kill -SIG -- -PGID`; whether it succeeded (for `0`: whether the group has a member).
async fn signal(sig: &str, pgid: u32) -> bool {
    tokio::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg("--")
        .arg(format!("-{pgid}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .is_ok_and(|s| s.success())
}
