//! Expiry (tasks-extension.md §13): a task is kept until its TTL and then gone; a running task
//! past its TTL ends `failed` and vanishes; a worker lets go of a parked task that expired.
//!
//! Checklist ids cited: T-24, T-51, T-52, T-53.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use mcp_tasks_tests::{caps_tasks, poll_until};
use serde_json::{Value, json};

use super::check::{self, Kind};
use super::{WITHIN, create, get_reply, pending_jobs, with_worker_env};

/// T-24, T-51, T-52, T-53: a task is kept at least until `createdAt + ttlMs` — running, or
/// failed with "Task expired before completion" — and afterwards a lookup is -32602.
#[tokio::test]
async fn task_is_kept_until_its_ttl_then_gone() -> Result<()> {
    let ctx = with_worker_env(&[("MCPT_DEFAULT_TTL", "1500ms".to_owned())]).await?;
    let client = ctx.client();
    let created = create(&client, "sleep", json!({"ms": 60_000})).await?;
    let id = created["taskId"].as_str().context("id")?;
    assert_eq!(created["ttlMs"], 1500, "{created}");
    let pttl: i64 = ctx
        .redis
        .cli(&["PTTL", &ctx.redis.task_key(id)?])?
        .trim()
        .parse()?;
    // Kept at least until the TTL, then for at most as long again so the expiry is readable.
    assert!(pttl > 1500 && pttl <= 3000, "PTTL {pttl}");
    let born = check::ts_ms(created["createdAt"].as_str().context("createdAt")?);
    let deadline = Instant::now() + WITHIN;
    loop {
        let r = get_reply(&client, id, &caps_tasks()).await?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis() as i64;
        if r.body.get("error").is_some() {
            assert!(
                now >= born + 1500 - 20,
                "task gone {} ms before its TTL",
                born + 1500 - now
            );
            assert_eq!(r.error_code(), Some(-32602), "{}", r.body);
            let msg = r.body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_lowercase();
            assert!(
                msg.contains("task") && (msg.contains("not found") || msg.contains("expired")),
                "message {msg:?}"
            );
            break;
        }
        let t = &r.body["result"];
        check::task(t, Kind::Polled);
        match t["status"].as_str() {
            Some("working") => {}
            Some("failed") => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)?
                    .as_millis() as i64;
                assert!(now >= born + 1500 - 20, "failed before its TTL: {t}");
                assert_eq!(
                    t["error"],
                    json!({"code": -32603, "message": "Task expired before completion"}),
                    "{t}"
                );
                assert_eq!(
                    check::ts_ms(t["lastUpdatedAt"].as_str().unwrap_or_default()),
                    born + 1500,
                    "{t}"
                );
            }
            _ => panic!("unexpected state before expiry: {t}"),
        }
        anyhow::ensure!(Instant::now() < deadline, "task never expired: {t}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ctx.cleanup().await;
    Ok(())
}

/// T-51, T-52: the hash expires counted from the task's creation time, which is its queue
/// entry's id: after Redis' clock steps back, or a failover to a replica whose clock is
/// behind, ids stay ahead of that clock, and an expiry counted from the clock would end the
/// hash before the task could read as expired.
#[tokio::test]
async fn the_hash_outlives_the_ttl_from_creation_when_ids_run_ahead_of_the_clock() -> Result<()> {
    let ctx = with_worker_env(&[("MCPT_DEFAULT_TTL", "1500ms".to_owned())]).await?;
    let client = ctx.client();
    // The queue's last id 10 s ahead of Redis' clock (the entry itself deleted at once, so
    // no worker reads it; the stream keeps its last id).
    let ahead = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis()
        + 10_000;
    let queue = mcp_tasks_store::keys::queue_key("default");
    let entry = ctx
        .redis
        .cli(&["XADD", &queue, &format!("{ahead}-0"), "probe", "1"])?;
    ctx.redis.cli(&["XDEL", &queue, entry.trim()])?;
    let created = create(&client, "sleep", json!({"ms": 60_000})).await?;
    let id = created["taskId"].as_str().context("id")?;
    let born = check::ts_ms(created["createdAt"].as_str().context("createdAt")?);
    assert!(
        born >= ahead as i64,
        "createdAt {born} is not the entry id's {ahead}"
    );
    let pttl: i64 = ctx
        .redis
        .cli(&["PTTL", &ctx.redis.task_key(id)?])?
        .trim()
        .parse()?;
    // createdAt + 1500 ms TTL + 1500 ms to read as expired, from a clock 10 s behind.
    assert!(
        pttl > 10_000 + 1500,
        "PTTL {pttl}: the hash would go before the TTL ends"
    );
    ctx.cleanup().await;
    Ok(())
}

/// T-52: a task that expires while its handler waits for input is let go by the worker:
/// the handler stops and the job is acknowledged (no subscription or entry left behind).
#[tokio::test]
async fn worker_lets_go_of_a_parked_task_that_expired() -> Result<()> {
    let ctx = with_worker_env(&[("MCPT_DEFAULT_TTL", "2s".to_owned())]).await?;
    let client = ctx.client();
    let id = client
        .start_task("ask", json!({"question": "Anyone?"}))
        .await?;
    client.wait_status(&id, "input_required", WITHIN).await?;
    assert_eq!(
        pending_jobs(&ctx)?,
        1,
        "the parked job is pending while it waits"
    );
    poll_until(Duration::from_secs(10), || async {
        (pending_jobs(&ctx).ok()? == 0).then_some(())
    })
    .await
    .context("the worker never released the expired task's job")?;
    let t = client.get(&id).await?;
    assert_eq!(t["status"], "failed", "{t}");
    assert_eq!(
        t["error"]["message"], "Task expired before completion",
        "{t}"
    );
    ctx.cleanup().await;
    Ok(())
}

/// T-52: a task still running when its TTL passes ends failed (-32603 "Task expired before
/// completion") at its deadline — listeners are told — and is gone a while later; its job
/// is released.
#[tokio::test]
async fn running_task_past_its_ttl_ends_failed_then_vanishes() -> Result<()> {
    let ctx = with_worker_env(&[("MCPT_DEFAULT_TTL", "2s".to_owned())]).await?;
    let client = ctx.client();
    let created = create(&client, "sleep", json!({"ms": 60_000, "steps": 2})).await?;
    let id = created["taskId"].as_str().context("id")?.to_owned();
    let born = check::ts_ms(created["createdAt"].as_str().context("createdAt")?);
    let mut sub = client.listen("ttl", &[&id]).await?;
    let t = client.wait_status(&id, "failed", WITHIN).await?;
    assert_eq!(
        t["error"],
        json!({"code": -32603, "message": "Task expired before completion"}),
        "{t}"
    );
    assert_eq!(t["statusMessage"], "Task expired before completion", "{t}");
    assert_eq!(
        check::ts_ms(t["lastUpdatedAt"].as_str().unwrap_or_default()),
        born + 2000,
        "{t}"
    );
    // The stream carries the expiry as the task's last notification.
    let mut last = Value::Null;
    while let Some(msg) = sub.next(Duration::from_secs(5)).await {
        if msg["method"] == "notifications/tasks" {
            last = msg["params"].clone();
            if last["status"] == "failed" {
                break;
            }
        }
    }
    assert_eq!(
        last["status"], "failed",
        "listener never saw the expiry: {last}"
    );
    poll_until(Duration::from_secs(5), || async {
        (pending_jobs(&ctx).ok()? == 0).then_some(())
    })
    .await
    .context("the expired task's job was not released")?;
    poll_until(Duration::from_secs(10), || async {
        let r = client
            .request("tasks/get", json!({"taskId": &id}), &caps_tasks())
            .await
            .ok()?;
        (r.error_code() == Some(-32602)).then_some(())
    })
    .await
    .context("the expired task never went away")?;
    ctx.cleanup().await;
    Ok(())
}
