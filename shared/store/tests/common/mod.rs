//! A private redis-server per test, killed on drop.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The queue the store tests use.
#[allow(dead_code)]
pub(crate) const QUEUE: &str = "default";

/// A store on `redis`, with [`QUEUE`]'s consumer group.
#[allow(dead_code)]
pub(crate) async fn store(redis: &Redis) -> mcp_tasks_store::Store {
    let store = mcp_tasks_store::Store::connect(&redis.url()).await.unwrap();
    store
        .jobs()
        .ensure_groups(&[QUEUE.to_owned()])
        .await
        .unwrap();
    store
}

/// A task of `owner` living `ttl_ms`, its job (a `deploy`) queued on [`QUEUE`]: its id.
#[allow(dead_code)]
pub(crate) async fn queued_task(
    store: &mcp_tasks_store::Store,
    owner: &str,
    ttl_ms: u64,
) -> String {
    let (id, created) = create_task(
        store,
        owner,
        Some(ttl_ms),
        mcp_tasks_store::OwnerLimits::default(),
    )
    .await;
    assert!(
        matches!(created, mcp_tasks_store::Created::At(_)),
        "{created:?}"
    );
    id
}

/// Try to create a task of `owner` living `ttl_ms` (`None`: forever) within `limits`, its
/// job (a `deploy`) on [`QUEUE`]: its id and what the store answered.
#[allow(dead_code)]
pub(crate) async fn create_task(
    store: &mcp_tasks_store::Store,
    owner: &str,
    ttl_ms: Option<u64>,
    limits: mcp_tasks_store::OwnerLimits,
) -> (String, mcp_tasks_store::Created) {
    create_task_at(
        store,
        owner,
        ttl_ms,
        limits,
        mcp_tasks_store::Priority::Normal,
    )
    .await
}

/// [`create_task`] at `priority`.
#[allow(dead_code)]
pub(crate) async fn create_task_at(
    store: &mcp_tasks_store::Store,
    owner: &str,
    ttl_ms: Option<u64>,
    limits: mcp_tasks_store::OwnerLimits,
    priority: mcp_tasks_store::Priority,
) -> (String, mcp_tasks_store::Created) {
    use mcp_tasks_store::{NewTask, new_task_id};
    let id = new_task_id();
    let job = job(owner, "deploy", serde_json::json!({"repo": "web"}));
    let created = store
        .tasks()
        .create(&NewTask {
            id: &id,
            ttl_ms,
            poll_ms: 500,
            owner,
            limits,
            queue: QUEUE,
            priority,
            job: &job,
            keyed: None,
        })
        .await
        .unwrap();
    (id, created)
}

/// A job of `owner` calling `tool` with `args`, no capabilities, answers or trace.
#[allow(dead_code)]
pub(crate) fn job(owner: &str, tool: &str, args: serde_json::Value) -> mcp_tasks_store::Job {
    mcp_tasks_store::Job {
        tool: tool.into(),
        args,
        caps: serde_json::value::RawValue::from_string("{}".to_owned()).expect("raw {}"),
        pre: serde_json::Map::new(),
        traceparent: None,
        owner: owner.into(),
    }
}

/// The next job on [`QUEUE`], delivered to consumer `w1`.
#[allow(dead_code)]
pub(crate) async fn next_delivery(store: &mcp_tasks_store::Store) -> mcp_tasks_store::Delivery {
    let mut reader = store.jobs().reader().await.unwrap();
    let mut got = reader
        .read(&[QUEUE.to_owned()], "w1", 1, None)
        .await
        .unwrap();
    assert_eq!(got.len(), 1, "one job expected on {QUEUE}");
    got.remove(0)
}

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
