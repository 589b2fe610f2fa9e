//! One `up` per data directory: `up` claims the directory before it starts anything, by
//! creating [`LOCK_FILE`] with `O_EXCL` (`create_new`) and its pid inside; the claim goes
//! (with the runtime file) when `up` exits, however it exits short of a kill.
//!
//! A lock whose pid is gone, or is no longer an `mcp-tasks up` (a recycled pid), was left
//! by an `up` that was killed: it is taken over. The takeover renames the stale lock to a
//! name of our own first, so of two `up`s taking over at once only one gets the stale
//! file; the other finds the winner's fresh lock and stops. (`File::lock` would do all of
//! this, but needs Rust 1.89; we support 1.88.)

use std::io::{ErrorKind, Write as _};
use std::path::{Path, PathBuf};

use crate::data::{Runtime, is_up, remove_runtime};

/// The lock file's name inside the data directory.
pub(crate) const LOCK_FILE: &str = "up.lock";

/// This process's claim on a data directory; dropped, it removes the lock and this
/// process's runtime file.
pub(crate) struct Claim {
    dir: PathBuf,
}

impl Claim {
    /// The directory claimed (absolute).
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let me = std::process::id();
        remove_runtime(&self.dir, me);
        if holder(&self.dir.join(LOCK_FILE)) == Some(me) {
            let _ = std::fs::remove_file(self.dir.join(LOCK_FILE));
        }
    }
}

/// Create `dir` if missing and claim it for this process.
///
/// # Errors
/// The directory cannot be created or written, or another live `up` holds it (the
/// message names it and says what to do).
pub(crate) fn claim(dir: &Path) -> Result<Claim, String> {
    let dir = std::fs::create_dir_all(dir)
        .and_then(|()| dir.canonicalize())
        .map_err(|e| format!("cannot use the data directory {}: {e}", dir.display()))?;
    let lock = dir.join(LOCK_FILE);
    let me = std::process::id();
    // Twice: once as found, once more after taking over a stale lock.
    for _ in 0..2 {
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&lock)
        {
            Ok(mut file) => {
                file.write_all(format!("{me}\n").as_bytes())
                    .map_err(|e| format!("cannot write {}: {e}", lock.display()))?;
                return Ok(Claim { dir });
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("cannot create {}: {e}", lock.display())),
        }
        match holder(&lock) {
            Some(pid) if is_up(pid) => return Err(in_use(&dir, pid)),
            // Just created by another `up` that has not written its pid yet.
            None if young(&lock) => return Err(in_use(&dir, 0)),
            stale => take_over(&lock, stale)?,
        }
    }
    Err(format!(
        "cannot claim {}: another `mcp-tasks up` is starting there",
        dir.display()
    ))
}

/// Remove a stale lock held by `stale` (the pid it held, if readable). Renamed away
/// first: if what we renamed turns out to be another newcomer's fresh lock, it is put
/// back.
fn take_over(lock: &Path, stale: Option<u32>) -> Result<(), String> {
    let aside = lock.with_extension(format!("stale.{}", std::process::id()));
    match std::fs::rename(lock, &aside) {
        Ok(()) => {}
        // Another `up` took it over first: try again as found.
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("cannot take over {}: {e}", lock.display())),
    }
    let got = holder(&aside);
    if got != stale && got.is_some_and(is_up) {
        let _ = std::fs::rename(&aside, lock);
        return Ok(());
    }
    let _ = std::fs::remove_file(&aside);
    Ok(())
}

/// The pid in a lock file.
fn holder(lock: &Path) -> Option<u32> {
    std::fs::read_to_string(lock).ok()?.trim().parse().ok()
}

/// Whether a lock file was created in the last second (its writer may still be at it).
fn young(lock: &Path) -> bool {
    std::fs::metadata(lock)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age.as_secs() < 1)
}

/// The message when another `up` holds `dir` (`pid` 0: one that is starting).
fn in_use(dir: &Path, pid: u32) -> String {
    let serving = Runtime::read(dir)
        .filter(|r| r.pid == pid)
        .map(|r| format!(" and serves {}", r.mcp_url))
        .unwrap_or_default();
    let who = if pid == 0 {
        "another `mcp-tasks up`".to_owned()
    } else {
        format!("another `mcp-tasks up` (pid {pid})")
    };
    format!(
        "{who} uses {}{serving}; stop it, or give this one --data with another directory",
        dir.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mcpt-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_claim_goes_with_its_drop() {
        let dir = temp_dir("claim");
        let claim = claim(&dir).expect("claimed");
        let lock = claim.dir().join(LOCK_FILE);
        assert_eq!(holder(&lock), Some(std::process::id()));
        drop(claim);
        assert!(!lock.exists(), "the lock goes with the claim");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_lock_left_by_a_dead_or_foreign_pid_is_taken_over() {
        let dir = temp_dir("stale");
        std::fs::create_dir_all(&dir).expect("dir");
        for stale in ["4294967295\n", &format!("{}\n", std::process::id()), "junk"] {
            std::fs::write(dir.join(LOCK_FILE), stale).expect("lock");
            // An old file: not one another `up` is still writing.
            let old = std::time::SystemTime::now() - std::time::Duration::from_secs(5);
            std::fs::File::options()
                .write(true)
                .open(dir.join(LOCK_FILE))
                .and_then(|f| f.set_modified(old))
                .expect("mtime");
            let claim = claim(&dir).unwrap_or_else(|e| panic!("{stale:?}: {e}"));
            assert_eq!(
                holder(&claim.dir().join(LOCK_FILE)),
                Some(std::process::id())
            );
            drop(claim);
        }
        let left: Vec<_> = std::fs::read_dir(&dir).expect("dir").collect();
        assert!(left.is_empty(), "left: {left:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
