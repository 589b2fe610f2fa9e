//! The project's binaries as child processes: where they are ([`bin_dir`], [`binary`]),
//! [`Process`] (cleaned environment, stderr kept in a log file, killed on drop), and the
//! running [`Gateway`] and [`Worker`].

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};

use crate::client::Client;
use crate::temp_dir;

/// Directory holding the project's binaries.
pub fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("MCPT_BIN_DIR") {
        return PathBuf::from(dir);
    }
    // target/debug/deps/e2e-HASH → target/debug
    let exe = std::env::current_exe().expect("test executable path");
    let mut dir = exe.parent().expect("exe dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

/// A project binary by name.
pub fn binary(name: &str) -> PathBuf {
    bin_dir().join(name)
}

/// A spawned project process; killed on drop, its stderr kept in a log file (printed on
/// drop when the test panics, then removed).
pub struct Process {
    child: Child,
    log: PathBuf,
    name: String,
}

impl Process {
    /// Spawn `name` with `env` (added to a cleaned environment plus PATH/HOME).
    pub fn spawn(name: &str, env: &[(&str, String)]) -> Result<(Process, Option<String>)> {
        Process::spawn_command(name, Command::new(binary(name)), env)
    }

    /// Spawn `name` as [`Process::spawn`] does, with its soft and hard limit on open files
    /// set to `open_files` (through `sh`'s `ulimit`, which then `exec`s the binary).
    pub fn spawn_with_open_files(
        name: &str,
        env: &[(&str, String)],
        open_files: u64,
    ) -> Result<Process> {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("ulimit -n {open_files} && exec \"$0\""))
            .arg(binary(name));
        Ok(Process::spawn_command(name, cmd, env)?.0)
    }

    fn spawn_command(
        name: &str,
        mut cmd: Command,
        env: &[(&str, String)],
    ) -> Result<(Process, Option<String>)> {
        let log = temp_dir("mcpt-log")?.join(format!("{name}.log"));
        cmd.env_clear();
        // TMPDIR: what a service writes to its temp dir goes where the suite looks for leftovers.
        for keep in [
            "PATH",
            "HOME",
            "RUST_LOG",
            "RUST_BACKTRACE",
            "TMPDIR",
            "TOKIO_WORKER_THREADS",
        ] {
            if let Ok(v) = std::env::var(keep) {
                cmd.env(keep, v);
            }
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| {
                format!(
                    "cannot start {} (run `cargo build --workspace` first)",
                    binary(name).display()
                )
            })?;
        Ok((
            Process {
                child,
                log,
                name: name.to_owned(),
            },
            None,
        ))
    }

    /// Wait for a stdout line starting with `prefix` (up to 20 s) and return its rest.
    pub fn wait_line(&mut self, prefix: &str) -> Result<String> {
        let stdout = self
            .child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("stdout already taken"))?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return Ok(rest.to_owned());
                    }
                }
                Err(_) => break,
            }
        }
        bail!(
            "{} printed no line starting with {prefix:?}; log:\n{}",
            self.name,
            self.log_text()
        )
    }

    /// For a process that must refuse to start: wait (up to 20 s) for it to exit, check it
    /// exited 64 with exactly one non-empty line on stderr and nothing starting with
    /// `listening on` on stdout, and return that line.
    pub fn usage_error(&mut self) -> Result<String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(s) = self.child.try_wait()? {
                break s;
            }
            if Instant::now() > deadline {
                bail!("{} kept running; log:\n{}", self.name, self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut out = String::new();
        if let Some(mut stdout) = self.child.stdout.take() {
            std::io::Read::read_to_string(&mut stdout, &mut out)?;
        }
        let log = self.log_text();
        let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
        if status.code() != Some(64) || lines.len() != 1 || out.contains("listening on") {
            bail!(
                "{} should exit 64 with one stderr line and no listening line; got {status}, stderr {log:?}, stdout {out:?}",
                self.name
            );
        }
        Ok(lines[0].to_owned())
    }

    /// What the process wrote to stderr so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Send SIGTERM and wait for the exit status (up to `within`). A process that already
    /// exited gets no signal (once waited for, its pid may be another process's).
    pub fn terminate(&mut self, within: Duration) -> Result<std::process::ExitStatus> {
        if let Some(status) = self.child.try_wait()? {
            return Ok(status);
        }
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status()?;
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                bail!("{} did not exit within {within:?} of SIGTERM", self.name);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The child, for tests that need it.
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("--- {} log ---\n{}", self.name, self.log_text());
        }
        // The log was printed if the test failed; its private folder goes either way.
        if let Some(dir) = self.log.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A running gateway.
pub struct Gateway {
    /// Its process.
    pub process: Process,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Gateway {
    /// Start one on a free port against `redis_url`, with extra `env`.
    pub fn start(redis_url: &str, env: &[(&str, String)]) -> Result<Gateway> {
        let all = Gateway::env(redis_url, env);
        let (process, _) = Process::spawn("mcp-tasks-gateway", &all)?;
        Gateway::listening(process)
    }

    /// [`Gateway::start`] with the process limited to `open_files` file descriptors.
    pub fn start_with_open_files(
        redis_url: &str,
        env: &[(&str, String)],
        open_files: u64,
    ) -> Result<Gateway> {
        let all = Gateway::env(redis_url, env);
        let process = Process::spawn_with_open_files("mcp-tasks-gateway", &all, open_files)?;
        Gateway::listening(process)
    }

    fn env<'a>(redis_url: &str, env: &[(&'a str, String)]) -> Vec<(&'a str, String)> {
        let mut all = vec![
            ("MCPT_REDIS_URL", redis_url.to_owned()),
            ("MCPT_LISTEN_ADDR", "127.0.0.1:0".to_owned()),
        ];
        all.extend(env.iter().cloned());
        all
    }

    fn listening(mut process: Process) -> Result<Gateway> {
        let addr = process.wait_line("listening on http://")?.parse()?;
        Ok(Gateway { process, addr })
    }

    /// How many file descriptors the gateway process has open (Linux `/proc`).
    pub fn open_fds(&mut self) -> Result<usize> {
        let pid = self.process.child().id();
        Ok(std::fs::read_dir(format!("/proc/{pid}/fd"))?.count())
    }

    /// The MCP endpoint URL.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// A client for this gateway.
    pub fn client(&self) -> Client {
        Client::new(self.addr)
    }
}

/// A running worker.
pub struct Worker {
    /// Its process.
    pub process: Process,
    /// Its `/healthz`, `/readyz`, `/metrics` listener.
    pub admin: SocketAddr,
}

impl Worker {
    /// Start one against `redis_url` with `MCPT_TOOLS=conformance,demo` and extra `env`.
    pub fn start(redis_url: &str, env: &[(&str, String)]) -> Result<Worker> {
        let mut all = vec![
            ("MCPT_REDIS_URL", redis_url.to_owned()),
            ("MCPT_TOOLS", "conformance,demo".to_owned()),
        ];
        all.extend(env.iter().cloned());
        let (mut process, _) = Process::spawn("mcp-tasks-worker", &all)?;
        let admin = process.wait_line("listening on http://")?.parse()?;
        Ok(Worker { process, admin })
    }
}
