//! Creation and shapes (tasks-extension.md §5, §7): the `CreateTaskResult` is durable and
//! well formed, every status has exactly its fields, `lastUpdatedAt` never decreases, an
//! MRTR round comes before the task; and the shape rules of [`super::check`] reject what
//! they must.
//!
//! Checklist ids cited: T-09…T-13, T-14, T-15, T-16, T-17, T-19, T-20, T-23, T-42, T-52.

use anyhow::{Context as _, Result};
use mcp_tasks_tests::{Gateway, TestContext, caps_tasks};
use serde_json::{Value, json};

use super::check::{self, Kind};
use super::{
    WITHIN, accept, create, get_reply, statuses, task_count, until_terminal, wait_input_required,
};

/// T-09, T-12, T-13, T-14, T-16, T-42, T-52: the `CreateTaskResult` is a working task with
/// exactly the task fields, ids are header-safe with ≥ 22 random characters, the task is
/// readable at once on another gateway, and its Redis key lives no longer than `ttlMs`.
#[tokio::test]
async fn create_task_result_is_durable_and_well_formed() -> Result<()> {
    let mut ctx = TestContext::start(1, 1).await?;
    ctx.gateways.push(Gateway::start(&ctx.redis.url(), &[])?);
    let a = ctx.gateways[0].client();
    let b = ctx.gateways[1].client();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let created = create(&a, "sleep", json!({"ms": 3000})).await?;
        let id = created["taskId"].as_str().context("taskId")?.to_owned();
        // T-14: readable at once, on any replica.
        let got = get_reply(&b, &id, &caps_tasks()).await?;
        assert_eq!(got.status, 200, "{}", got.body);
        let got = &got.body["result"];
        check::task(got, Kind::Polled);
        assert_eq!(got["taskId"], id.as_str());
        assert_eq!(got["createdAt"], created["createdAt"]);
        assert_eq!(got["ttlMs"], created["ttlMs"]);
        assert_eq!(got["pollIntervalMs"], created["pollIntervalMs"]);
        // T-52: a finite TTL backs the Redis key's expiry.
        let ttl = created["ttlMs"].as_i64().context("ttlMs is an integer")?;
        assert!(ttl > 0, "ttlMs {ttl}");
        let pttl: i64 = ctx
            .redis
            .cli(&["PTTL", &ctx.redis.task_key(&id)?])?
            .trim()
            .parse()?;
        // Kept at least until the TTL, plus up to a minute so an expiry stays readable.
        assert!(
            pttl > ttl - 60_000 && pttl <= ttl + 60_000,
            "PTTL {pttl} vs ttlMs {ttl}"
        );
        ids.push(id);
    }
    // T-42: charset, length, no shared random part.
    for id in &ids {
        assert!(
            id.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
            "id {id:?} not [A-Za-z0-9_-]+"
        );
        let random = id
            .split_once('_')
            .filter(|(p, _)| p.bytes().all(|b| b.is_ascii_lowercase()))
            .map_or(id.as_str(), |(_, r)| r);
        assert!(
            random.len() >= 22,
            "id {id:?} has too few random characters"
        );
    }
    for (i, x) in ids.iter().enumerate() {
        for y in &ids[i + 1..] {
            let differing = x.bytes().zip(y.bytes()).filter(|(p, q)| p != q).count();
            assert!(differing >= 10, "ids look related: {x} {y}");
        }
    }
    ctx.cleanup().await;
    Ok(())
}

/// T-09…T-13, T-19, T-20, T-23: each status is reported with exactly its own fields, well
/// typed, in RFC 3339 millisecond UTC, whatever the status.
#[tokio::test]
async fn every_status_has_exactly_its_fields() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let working = create(&client, "sleep", json!({"ms": 20_000, "steps": 2})).await?;
    let working = working["taskId"].as_str().context("id")?.to_owned();
    let asking = create(&client, "ask", json!({"question": "Colour?"})).await?;
    let asking = asking["taskId"].as_str().context("id")?.to_owned();
    let done = create(&client, "sleep", json!({"ms": 10})).await?;
    let done = done["taskId"].as_str().context("id")?.to_owned();
    let failed = create(&client, "fail", json!({"mode": "protocol", "message": "x"})).await?;
    let failed = failed["taskId"].as_str().context("id")?.to_owned();

    let t = client.wait_status(&working, "working", WITHIN).await?;
    check::task(&t, Kind::Polled);
    wait_input_required(&client, &asking).await?;
    let t = client.wait_status(&done, "completed", WITHIN).await?;
    check::task(&t, Kind::Polled);
    let t = client.wait_status(&failed, "failed", WITHIN).await?;
    check::task(&t, Kind::Polled);
    client.cancel(&working).await?;
    let t = client.wait_status(&working, "cancelled", WITHIN).await?;
    check::task(&t, Kind::Polled);
    // createdAt is the real time of creation.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64;
    let created = check::ts_ms(t["createdAt"].as_str().context("createdAt")?);
    assert!(
        (now - created).abs() < 120_000,
        "createdAt {created} vs now {now}"
    );
    ctx.cleanup().await;
    Ok(())
}

/// T-11, T-17: across the polls of a stepping sleep, `lastUpdatedAt` never goes backwards,
/// `createdAt` never changes, and every status change is an allowed one.
#[tokio::test]
async fn last_updated_at_never_decreases() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "sleep", json!({"ms": 600, "steps": 6})).await?;
    let id = created["taskId"].as_str().context("id")?;
    let seen = until_terminal(&client, id, WITHIN).await?;
    let mut last = check::ts_ms(created["lastUpdatedAt"].as_str().context("lastUpdatedAt")?);
    for t in &seen {
        assert_eq!(t["createdAt"], created["createdAt"], "createdAt changed");
        let updated = check::ts_ms(t["lastUpdatedAt"].as_str().context("lastUpdatedAt")?);
        assert!(updated >= last, "lastUpdatedAt went back: {seen:?}");
        last = updated;
    }
    // The step messages were observable changes, each with its own lastUpdatedAt.
    assert!(
        seen.iter().any(|t| t["statusMessage"] == "step 6/6"),
        "no step 6/6 seen: {seen:?}"
    );
    let mut all = vec!["working"];
    all.extend(statuses(&seen));
    check::transitions(all);
    assert_eq!(seen.last().context("seen")?["status"], "completed");
    ctx.cleanup().await;
    Ok(())
}

/// T-11: an observable change (the sleep's step message, then its finish) writes the later
/// of the writer's clock and the stored `lastUpdatedAt`, compared as digits (the scripts
/// make no number of either): a stored time a day ahead of every clock stays, and a stored
/// time with fewer digits (`5`, the greater as text) gives way to the clock.
#[tokio::test]
async fn observable_changes_keep_the_later_last_updated_at() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let now_ms = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis(),
    )?;
    let ahead = now_ms + 86_400_000;
    for (stored, expect_stored) in [(ahead.to_string(), true), ("5".to_owned(), false)] {
        let created = create(&client, "sleep", json!({"ms": 1_000})).await?;
        let id = created["taskId"].as_str().context("id")?;
        // Starting writes no time: the step message and the finish are the next to.
        ctx.redis
            .cli(&["HSET", &ctx.redis.task_key(id)?, "updated", &stored])?;
        let seen = until_terminal(&client, id, WITHIN).await?;
        let last = seen.last().context("seen")?;
        assert_eq!(last["status"], "completed", "{last}");
        let updated = check::ts_ms(last["lastUpdatedAt"].as_str().context("lastUpdatedAt")?);
        if expect_stored {
            assert_eq!(
                updated, ahead,
                "the finish moved lastUpdatedAt back: {last}"
            );
        } else {
            // The worker's clock at the finish, a second after the creation (a stored time
            // before createdAt would read as createdAt).
            let born = check::ts_ms(created["createdAt"].as_str().context("createdAt")?);
            assert!(
                updated >= born + 900 && updated < ahead,
                "stored {stored} kept over the worker's clock: {last}"
            );
        }
    }
    ctx.cleanup().await;
    Ok(())
}

/// T-15, T-16: `test_tool_with_task` asks its MRTR question on `tools/call` before any task
/// exists; the retry with the answer gets a plain `CreateTaskResult`, and the task uses it.
#[tokio::test]
async fn mrtr_round_comes_before_the_task() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let r = client
        .call("test_tool_with_task", json!({}), &caps_tasks())
        .await?;
    assert_eq!(r.status, 200, "{}", r.body);
    let round1 = &r.body["result"];
    assert_eq!(round1["resultType"], "input_required", "{}", r.body);
    assert!(
        round1.get("taskId").is_none(),
        "round 1 created a task: {round1}"
    );
    let reqs = round1["inputRequests"]
        .as_object()
        .context("inputRequests")?;
    assert!(reqs.contains_key("user_name"), "{round1}");
    for (k, v) in reqs {
        check::input_request(k, v);
    }
    assert_eq!(
        task_count(&ctx)?,
        0,
        "a task exists before the MRTR round finished"
    );

    let mut params = json!({
        "name": "test_tool_with_task",
        "arguments": {},
        "inputResponses": {"user_name": accept(json!({"name": "Ada"}))},
    });
    if let Some(state) = round1.get("requestState") {
        params["requestState"] = state.clone();
    }
    let r = client.request("tools/call", params, &caps_tasks()).await?;
    let created = &r.body["result"];
    assert_eq!(created["resultType"], "task", "{}", r.body);
    check::task(created, Kind::Created);
    for absent in ["inputRequests", "requestState", "result", "error"] {
        assert!(
            created.get(absent).is_none(),
            "{absent} on CreateTaskResult"
        );
    }
    let id = created["taskId"].as_str().context("id")?;
    let seen = until_terminal(&client, id, WITHIN).await?;
    let last = seen.last().context("seen")?;
    assert_eq!(last["status"], "completed", "{last}");
    let text = check::text(&last["result"]);
    assert!(
        text.contains("Ada"),
        "result does not use the MRTR answer: {text:?}"
    );
    // The MRTR key is not a task key: the task never asked for it.
    assert!(
        seen.iter().all(|t| t.get("inputRequests").is_none()),
        "{seen:?}"
    );
    ctx.cleanup().await;
    Ok(())
}

/// The shape rules themselves reject what they must (so the tests above can fail).
#[test]
fn shape_rules_reject_malformed_tasks() {
    let good = json!({
        "resultType": "complete", "taskId": "tsk_a", "status": "completed",
        "createdAt": "2026-08-01T09:30:00.125Z", "lastUpdatedAt": "2026-08-01T09:30:01.000Z",
        "ttlMs": 60000, "pollIntervalMs": 500,
        "result": {"resultType": "complete", "content": [{"type": "text", "text": "x"}]}
    });
    check::task(&good, Kind::Polled);
    let with = |key: &str, value: Option<Value>| {
        let mut t = good.clone();
        match value {
            Some(v) => t[key] = v,
            None => drop(t.as_object_mut().and_then(|o| o.remove(key))),
        }
        t
    };
    let mut created_with_result = with("resultType", Some(json!("task")));
    created_with_result["status"] = json!("working");
    let cases = [
        ("no ttlMs key", with("ttlMs", None), Kind::Polled),
        (
            "no pollIntervalMs",
            with("pollIntervalMs", None),
            Kind::Polled,
        ),
        ("negative ttl", with("ttlMs", Some(json!(-1))), Kind::Polled),
        (
            "fractional poll",
            with("pollIntervalMs", Some(json!(1.5))),
            Kind::Polled,
        ),
        (
            "no Z",
            with("createdAt", Some(json!("2026-08-01T09:30:00.125+00:00"))),
            Kind::Polled,
        ),
        (
            "no millis",
            with("createdAt", Some(json!("2026-08-01T09:30:00Z"))),
            Kind::Polled,
        ),
        (
            "updated < created",
            with("lastUpdatedAt", Some(json!("2026-08-01T09:29:00.000Z"))),
            Kind::Polled,
        ),
        (
            "foreign field",
            with("error", Some(json!({"code": 1, "message": "m"}))),
            Kind::Polled,
        ),
        (
            "extra field",
            with("worker", Some(json!("w"))),
            Kind::Polled,
        ),
        ("no result", with("result", None), Kind::Polled),
        (
            "result without resultType",
            with("result", Some(json!({"content": []}))),
            Kind::Polled,
        ),
        (
            "unknown status",
            with("status", Some(json!("done"))),
            Kind::Polled,
        ),
        (
            "resultType task on get",
            with("resultType", Some(json!("task"))),
            Kind::Polled,
        ),
        ("resultType on notification", good.clone(), Kind::Notified),
        ("created with a result", created_with_result, Kind::Created),
    ];
    for (what, t, kind) in cases {
        let rejected = std::panic::catch_unwind(|| check::task(&t, kind)).is_err();
        assert!(rejected, "shape rule accepted: {what}");
    }
    assert!(check::allowed("working", "input_required"));
    assert!(!check::allowed("completed", "working"));
    assert!(!check::allowed("cancelled", "cancelled"));
    assert_eq!(check::ts_ms("1970-01-01T00:00:01.000Z"), 1000);
    assert_eq!(check::ts_ms("2000-03-01T00:00:00.000Z"), 951_868_800_000);
}
