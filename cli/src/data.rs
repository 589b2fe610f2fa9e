//! Where `mcp-tasks up` keeps its data, and the runtime file through which the other
//! subcommands find a running `up`.
//!
//! The data directory is `--data DIR`, else `MCPT_DATA_DIR`, else `$XDG_DATA_HOME/mcp-tasks`,
//! else `~/.local/share/mcp-tasks`. It holds the private Redis's append-only file (see
//! `up/redis.rs`) and, while `up` runs, [`RUNTIME_FILE`]: where it serves (MCP URL, Redis
//! URL) and its process id. `up` removes the file on a clean exit; a file whose process is
//! gone is ignored (and replaced by the next `up`).
//!
//! The subcommands read the file only when no `--url`/`--redis` flag and no `MCPT_URL` /
//! `MCPT_REDIS_URL` says otherwise (`commands/mod.rs`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

/// Environment variable naming the data directory (what `--data` defaults to).
pub(crate) const ENV_DATA_DIR: &str = "MCPT_DATA_DIR";

/// The runtime file's name inside the data directory.
pub(crate) const RUNTIME_FILE: &str = "up.json";

/// The data directory when none is given: `MCPT_DATA_DIR`, `$XDG_DATA_HOME/mcp-tasks`,
/// `$HOME/.local/share/mcp-tasks`; `None` without any of them.
pub(crate) fn default_dir() -> Option<PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = var(ENV_DATA_DIR) {
        return Some(dir);
    }
    // The XDG base directory spec: a relative XDG_DATA_HOME is invalid and ignored.
    if let Some(xdg) = var("XDG_DATA_HOME").filter(|p| p.is_absolute()) {
        return Some(xdg.join("mcp-tasks"));
    }
    var("HOME").map(|home| home.join(".local/share/mcp-tasks"))
}

/// Where a running `up` serves, as written to [`RUNTIME_FILE`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Runtime {
    /// The `up` process.
    pub(crate) pid: u32,
    /// Its MCP endpoint.
    pub(crate) mcp_url: String,
    /// The Redis it uses (its private one, or `MCPT_REDIS_URL`).
    pub(crate) redis_url: String,
    /// The private Redis's process, if `up` started one.
    pub(crate) redis_pid: Option<u32>,
    /// The operator's console, when the gateway serves one.
    pub(crate) console_url: Option<String>,
}

impl Runtime {
    fn to_json(&self) -> Value {
        json!({
            "pid": self.pid,
            "mcp_url": self.mcp_url,
            "redis_url": self.redis_url,
            "redis_pid": self.redis_pid,
            "console_url": self.console_url,
        })
    }

    fn from_json(v: &Value) -> Option<Runtime> {
        Some(Runtime {
            pid: u32::try_from(v["pid"].as_u64()?).ok()?,
            mcp_url: v["mcp_url"].as_str()?.to_owned(),
            redis_url: v["redis_url"].as_str()?.to_owned(),
            redis_pid: v["redis_pid"].as_u64().and_then(|p| u32::try_from(p).ok()),
            console_url: v["console_url"].as_str().map(str::to_owned),
        })
    }

    /// Write it to `dir`'s runtime file, readable by this user only (the Redis URL may
    /// carry a password).
    pub(crate) fn write(&self, dir: &Path) -> std::io::Result<()> {
        let path = dir.join(RUNTIME_FILE);
        let tmp = dir.join(format!("{RUNTIME_FILE}.tmp"));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&tmp)?;
        std::io::Write::write_all(&mut file, format!("{:#}\n", self.to_json()).as_bytes())?;
        // Readers never see half a file.
        std::fs::rename(tmp, path)
    }

    /// The runtime file in `dir`, whatever its process's state; `None` when absent or
    /// unreadable.
    pub(crate) fn read(dir: &Path) -> Option<Runtime> {
        let text = std::fs::read_to_string(dir.join(RUNTIME_FILE)).ok()?;
        Runtime::from_json(&serde_json::from_str(&text).ok()?)
    }

    /// The runtime file of an `up` still running with the data directory `dir` (default:
    /// [`default_dir`]). A file left by an `up` that was killed is ignored, even when its
    /// pid now belongs to another process.
    pub(crate) fn find(dir: Option<&Path>) -> Option<Runtime> {
        let dir = dir.map(Path::to_path_buf).or_else(default_dir)?;
        Runtime::read(&dir).filter(|r| is_up(r.pid))
    }
}

/// Remove `dir`'s runtime file if it is `pid`'s (a newer `up` may have replaced it).
pub(crate) fn remove_runtime(dir: &Path, pid: u32) {
    if Runtime::read(dir).is_some_and(|r| r.pid == pid) {
        let _ = std::fs::remove_file(dir.join(RUNTIME_FILE));
    }
}

/// Whether process `pid` exists (`kill -0`).
pub(crate) fn is_alive(pid: u32) -> bool {
    if Path::new("/proc/self").exists() {
        return Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(pid);
    }
    Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A process that exited but was not reaped yet still has a `/proc` entry.
fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // `PID (COMM) STATE …`; COMM may hold spaces and parentheses.
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

/// Whether process `pid` is a live `mcp-tasks up`: its program is a file named
/// `mcp-tasks` and its first argument is `up`, so a recycled pid (another program, or
/// another `mcp-tasks` command) is not mistaken for it.
pub(crate) fn is_up(pid: u32) -> bool {
    if !is_alive(pid) {
        return false;
    }
    let (program, first) = match std::fs::read(format!("/proc/{pid}/cmdline")) {
        Ok(cmdline) => {
            let mut args = cmdline.split(|b| *b == 0);
            let _argv0 = args.next();
            // The executable itself, not what argv[0] claims; a rebuilt binary reads
            // `mcp-tasks (deleted)`.
            let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
                .map(|p| {
                    p.to_string_lossy()
                        .trim_end_matches(" (deleted)")
                        .to_owned()
                })
                .unwrap_or_default();
            (
                exe,
                args.next().map(|a| String::from_utf8_lossy(a).into_owned()),
            )
        }
        // No /proc (macOS): what `ps` says, split on spaces.
        Err(_) => {
            let Ok(out) = Command::new("ps")
                .args(["-o", "args=", "-p", &pid.to_string()])
                .stderr(Stdio::null())
                .output()
            else {
                return false;
            };
            let line = String::from_utf8_lossy(&out.stdout).into_owned();
            let mut words = line.split_whitespace().map(str::to_owned);
            (words.next().unwrap_or_default(), words.next())
        }
    };
    Path::new(&program)
        .file_name()
        .is_some_and(|n| n == "mcp-tasks")
        && first.as_deref() == Some("up")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_file_round_trips() {
        let dir = std::env::temp_dir().join(format!("mcpt-cli-data-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let r = Runtime {
            pid: std::process::id(),
            mcp_url: "http://127.0.0.1:1/mcp".into(),
            redis_url: "redis://127.0.0.1:2".into(),
            redis_pid: Some(7),
            console_url: Some("http://127.0.0.1:1/console/".into()),
        };
        r.write(&dir).expect("written");
        assert_eq!(Runtime::read(&dir), Some(r.clone()));
        remove_runtime(&dir, r.pid + 1);
        assert!(Runtime::read(&dir).is_some(), "another pid's file stays");
        remove_runtime(&dir, r.pid);
        assert_eq!(Runtime::read(&dir), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn this_process_is_alive_and_not_an_up() {
        assert!(is_alive(std::process::id()));
        // A test binary: alive, but not `mcp-tasks up`.
        assert!(!is_up(std::process::id()));
        assert!(!is_up(u32::MAX));
    }
}
