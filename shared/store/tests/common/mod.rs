//! A private redis-server per test, killed on drop.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub(crate) struct Redis {
    child: Child,
    pub(crate) port: u16,
}

impl Redis {
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub(crate) fn start() -> Redis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(
            std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into()),
        )
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server must be installed");
        let redis = Redis { child, port };
        for _ in 0..500 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return redis;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("redis-server did not start");
    }

    /// `redis-cli` on this server, its output trimmed.
    #[allow(dead_code)]
    pub(crate) fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "redis-cli {args:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    #[allow(dead_code)]
    pub(crate) fn publish(&self, channel: &str, payload: &str) {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "PUBLISH", channel, payload])
            .output()
            .unwrap();
        assert!(out.status.success());
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
