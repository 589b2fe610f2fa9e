//! The floor of this design's stack: close to the least a gateway and a worker built on
//! hyper, redis-rs and Redis can do for a task (a lower bound, not the last word: a worker
//! could still send its finish with its next read), run by `bench --floor` in place of the
//! real ones so their CPU per task is measured by the same load and the same readings.
//!
//! It is a measuring device, not a server: no envelope checks, no `_meta`, no
//! authentication, no scripts, no notifications, no TTL bookkeeping beyond one `PEXPIRE`.
//! Its replies are the few members the bench reads, written as text rather than through
//! the protocol types: the least a response costs.
//! What it keeps is the shape every implementation of this design has:
//! - gateway (`MCPT_FLOOR_ROLE=gateway`): hyper's HTTP/1 server; per request the body
//!   read and parsed into a borrowed struct, one Redis round trip, a JSON response.
//!   `tools/call` writes the task hash and queues its job (`HSET`, `PEXPIRE`, `XADD`, one
//!   pipeline); `tasks/get` reads the status (`HMGET`); `tools/list` names `sleep`.
//! - worker (`MCPT_FLOOR_ROLE=worker`): `XREADGROUP` from the queue the real worker reads,
//!   then for the entries read one pipeline: each task's status set to `completed`,
//!   one `XACK` and one `XDEL` for all of them.
//!
//! The gateway prints `listening on http://ADDR` when ready, as the real one does, the
//! worker `ready`; both take `MCPT_REDIS_URL`, the gateway also `MCPT_LISTEN_ADDR`.

#![expect(
    clippy::disallowed_methods,
    reason = "the floor measures the least set of Redis commands a task needs, which no domain verb of the store is"
)]

use std::convert::Infallible;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use mcp_tasks_store::keys;
use redis::Value as RedisValue;
use redis::aio::MultiplexedConnection;
use serde::Deserialize;
use serde_json::value::RawValue;

// The allocator of the real worker (the gateway takes mimalloc for small blocks).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The queue `bench` drains and the real worker reads.
const QUEUE: &str = "default";
/// Stream entries one worker read takes at most.
const READ_COUNT: usize = 64;
/// The expiry a created task's hash gets (one hour, the real default TTL's order).
const TTL_MS: i64 = 3_600_000;
/// How long a worker's read waits for entries.
const BLOCK_MS: u64 = 2_000;
/// JSON-RPC's internal error (the floor answers every failure with it).
const INTERNAL_ERROR: i64 = -32603;

#[derive(Deserialize)]
struct Rpc<'a> {
    #[serde(borrow)]
    id: &'a RawValue,
    #[serde(borrow)]
    method: &'a str,
    #[serde(borrow, default)]
    params: Option<RpcParams<'a>>,
}

#[derive(Deserialize)]
struct RpcParams<'a> {
    #[serde(borrow, rename = "taskId", default)]
    task_id: Option<&'a str>,
}

fn main() -> ExitCode {
    let role = std::env::var("MCPT_FLOOR_ROLE").unwrap_or_default();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("floor: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let run = runtime.block_on(async {
        let url = std::env::var("MCPT_REDIS_URL").context("MCPT_REDIS_URL is not set")?;
        let client = redis::Client::open(url.as_str()).context("MCPT_REDIS_URL")?;
        match role.as_str() {
            "gateway" => gateway(&client).await,
            "worker" => worker(&client).await,
            other => bail!("MCPT_FLOOR_ROLE must be gateway or worker, not {other:?}"),
        }
    });
    match run {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("floor: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn gateway(client: &redis::Client) -> Result<()> {
    let con = client.get_multiplexed_async_connection().await?;
    let addr = std::env::var("MCPT_LISTEN_ADDR").unwrap_or_else(|_| "127.0.0.1:0".into());
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    println!("listening on http://{}", listener.local_addr()?);
    let http1 = std::sync::Arc::new(hyper::server::conn::http1::Builder::new());
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // Out of file descriptors, say: the bench reports the requests that failed.
            Err(e) => {
                eprintln!("floor: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (con, http1) = (con.clone(), http1.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| serve(con.clone(), req));
            let _ = http1.serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

async fn serve(
    con: MultiplexedConnection,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let text = match req.into_body().collect().await {
        Ok(body) => match answer(con, &body.to_bytes()).await {
            Ok(t) => t,
            Err(e) => error_text(&format!("{e:#}")),
        },
        Err(e) => error_text(&format!("reading the body: {e}")),
    };
    Ok(respond(text))
}

/// A JSON-RPC error response (id null: the floor does not keep the request's id that far).
fn error_text(message: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":null,"error":{{"code":{INTERNAL_ERROR},"message":{}}}}}"#,
        serde_json::Value::from(message)
    )
}

fn respond(text: String) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(Bytes::from(text)));
    res.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    res
}

async fn answer(mut con: MultiplexedConnection, body: &[u8]) -> Result<String> {
    let rpc: Rpc<'_> = serde_json::from_slice(body)?;
    let id = rpc.id.get();
    let task_id = rpc.params.and_then(|p| p.task_id);
    let result = match rpc.method {
        "tools/list" => r#"{"tools":[{"name":"sleep","inputSchema":{"type":"object"}}]}"#.into(),
        "tools/call" => {
            let task = mcp_tasks_store::new_task_id();
            let key = keys::task_key(&task, "");
            let () = redis::pipe()
                .hset(&key, "status", "working")
                .ignore()
                .pexpire(&key, TTL_MS)
                .ignore()
                .xadd(keys::queue_key(QUEUE), "*", &[("task", &key)])
                .ignore()
                .query_async(&mut con)
                .await?;
            format!(r#"{{"resultType":"task","taskId":"{task}","status":"working"}}"#)
        }
        "tasks/get" => {
            let task = task_id.ok_or_else(|| anyhow!("tasks/get without taskId"))?;
            let status: Option<String> = redis::cmd("HMGET")
                .arg(keys::task_key(task, ""))
                .arg("status")
                .query_async::<Vec<Option<String>>>(&mut con)
                .await?
                .pop()
                .flatten();
            let status = status.ok_or_else(|| anyhow!("no task {task}"))?;
            format!(r#"{{"taskId":"{task}","status":"{status}"}}"#)
        }
        other => bail!("method {other} is not served by the floor"),
    };
    Ok(format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#
    ))
}

async fn worker(client: &redis::Client) -> Result<()> {
    let stream = keys::queue_key(QUEUE);
    let mut con = client.get_multiplexed_async_connection().await?;
    let made: redis::RedisResult<()> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&stream)
        .arg(keys::GROUP)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(&mut con)
        .await;
    if let Err(e) = made
        && e.code() != Some("BUSYGROUP")
    {
        return Err(e.into());
    }
    // Reads block: their own connection, so the finishes never wait behind one.
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let mut reads = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let consumer = format!("floor-{}", std::process::id());
    println!("ready");
    loop {
        let reply: RedisValue = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(keys::GROUP)
            .arg(&consumer)
            .arg("COUNT")
            .arg(READ_COUNT)
            .arg("BLOCK")
            .arg(BLOCK_MS)
            .arg("STREAMS")
            .arg(&stream)
            .arg(">")
            .query_async(&mut reads)
            .await?;
        let entries = entries(reply)?;
        if entries.is_empty() {
            continue;
        }
        let mut pipe = redis::pipe();
        for (_, task_key) in &entries {
            pipe.hset(task_key, "status", "completed").ignore();
        }
        let ids: Vec<&str> = entries.iter().map(|(id, _)| id.as_str()).collect();
        pipe.xack(&stream, keys::GROUP, &ids)
            .ignore()
            .xdel(&stream, &ids)
            .ignore();
        let () = pipe.query_async(&mut con).await?;
    }
}

/// (entry id, task key) of each entry of an `XREADGROUP` reply for one stream (nil: none).
/// The reply is RESP2's (the URLs the bench gives speak it): arrays, not RESP3 maps; an
/// entry's fields are the one pair the floor's gateway writes, so its last value is the key.
fn entries(reply: RedisValue) -> Result<Vec<(String, String)>> {
    let streams = match reply {
        RedisValue::Nil => return Ok(Vec::new()),
        RedisValue::Array(s) => s,
        other => bail!("XREADGROUP answered {other:?}"),
    };
    let mut out = Vec::new();
    for s in streams {
        let RedisValue::Array(mut key_entries) = s else {
            bail!("XREADGROUP: a stream is not an array");
        };
        let Some(RedisValue::Array(items)) = key_entries.pop() else {
            bail!("XREADGROUP: a stream has no entries");
        };
        for item in items {
            let RedisValue::Array(mut parts) = item else {
                bail!("XREADGROUP: an entry is not an array");
            };
            let (Some(RedisValue::Array(mut fields)), Some(id)) = (parts.pop(), parts.pop()) else {
                bail!("XREADGROUP: an entry is not [id, fields]");
            };
            let (Some(task), Some(_name)) = (fields.pop(), fields.pop()) else {
                bail!("XREADGROUP: an entry has no task field");
            };
            out.push((redis::from_redis_value(id)?, redis::from_redis_value(task)?));
        }
    }
    Ok(out)
}
