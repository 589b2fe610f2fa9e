//! Readings of the machine and of Redis: CPU ticks, RSS and open-file limits from `/proc`,
//! Redis `INFO` fields, and [`Snap`], one reading of both, with per-command deltas.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::{Context as _, Result};
use redis::aio::MultiplexedConnection;

/// utime + stime of `pid` and its stime alone (the kernel working for it), in clock ticks.
pub(crate) fn proc_ticks(pid: u32) -> Option<(u64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f: Vec<&str> = s[s.rfind(')')? + 1..].split_whitespace().collect();
    let (user, system) = (
        f.get(11)?.parse::<u64>().ok()?,
        f.get(12)?.parse::<u64>().ok()?,
    );
    Some((user + system, system))
}

/// VmRSS of `pid` in bytes.
pub(crate) fn vm_rss(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Soft limit on open files of `pid` ("self" for this process).
pub(crate) fn fd_limit(pid: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = s.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line.split_whitespace().nth(3)?;
    if soft == "unlimited" {
        return Some(u64::MAX);
    }
    soft.parse().ok()
}

pub(crate) fn clk_tck() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

pub(crate) async fn info(con: &mut MultiplexedConnection, section: &str) -> Result<String> {
    redis::cmd("INFO")
        .arg(section)
        .query_async(con)
        .await
        .with_context(|| format!("INFO {section}"))
}

pub(crate) fn info_field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// One reading of Redis and of the processes.
#[derive(Clone)]
pub(crate) struct Snap {
    pub(crate) at: Instant,
    /// command → (calls, usec); INFO left out.
    pub(crate) cmds: BTreeMap<String, (u64, u64)>,
    /// used_cpu_user + used_cpu_sys, seconds.
    pub(crate) redis_cpu: f64,
    pub(crate) used_memory: i64,
    /// Ticks per watched process (same order as [`crate::stack::Env::pids`]).
    pub(crate) ticks: Vec<u64>,
    /// Of those, system time (stime), same order.
    pub(crate) sys_ticks: Vec<u64>,
    /// Busy ticks of the whole machine (/proc/stat).
    pub(crate) machine: u64,
}

/// Busy clock ticks of all CPUs since boot: user nice system irq softirq steal.
pub(crate) fn machine_busy() -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/stat") else {
        return 0;
    };
    let Some(line) = s.lines().find(|l| l.starts_with("cpu ")) else {
        return 0;
    };
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest is inside user).
    [0, 1, 2, 5, 6, 7].iter().filter_map(|i| f.get(*i)).sum()
}

impl Snap {
    pub(crate) fn calls(&self) -> u64 {
        self.cmds.values().map(|c| c.0).sum()
    }
    pub(crate) fn usec(&self) -> u64 {
        self.cmds.values().map(|c| c.1).sum()
    }
}

/// Per-command (calls, usec) deltas, largest first.
pub(crate) fn cmd_delta(a: &Snap, b: &Snap) -> Vec<(String, u64, u64)> {
    let mut out: Vec<(String, u64, u64)> = b
        .cmds
        .iter()
        .map(|(k, (calls, usec))| {
            let (c0, u0) = a.cmds.get(k).copied().unwrap_or_default();
            (k.clone(), calls.saturating_sub(c0), usec.saturating_sub(u0))
        })
        .filter(|(_, c, _)| *c > 0)
        .collect();
    out.sort_by(|x, y| y.1.cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
    out
}
