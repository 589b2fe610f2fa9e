//! `tasks/update` (tasks-extension.md §9): answering completes the task, a decline is a tool
//! error, unknown keys are ignored, partial answers keep it waiting, unknown ids and
//! malformed or oversized `inputResponses` are -32602, and a repeated update is a no-op.
//!
//! Checklist ids cited: T-17, T-19, T-21, T-27, T-28, T-29, T-30, T-31, T-32, T-33, T-34,
//! T-53, T-56.

use anyhow::{Context as _, Result};
use mcp_tasks_tests::{TestContext, caps_tasks};
use serde_json::{Value, json};

use super::check::{self, Kind};
use super::{
    WITHIN, accept, assert_empty_ack, assert_unknown_task, create, observe, statuses,
    until_terminal, wait_input_required,
};

/// T-17, T-27, T-28, T-31: answering the ask returns an empty ack, the task goes back to
/// working and completes with the answer; the answered key never appears again.
#[tokio::test]
async fn answering_the_ask_completes_the_task() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "ask", json!({"question": "Name?"})).await?;
    let id = created["taskId"].as_str().context("id")?;
    let before = observe(&client, id, WITHIN, |t| t["status"] == "input_required").await?;
    let r = client
        .update(id, json!({"answer-1": accept(json!({"answer": "Grace"}))}))
        .await?;
    assert_empty_ack(&r, "tasks/update");
    let after = until_terminal(&client, id, WITHIN).await?;
    let last = after.last().context("seen")?;
    assert_eq!(last["status"], "completed", "{last}");
    assert_eq!(check::text(&last["result"]), "answer: Grace");
    assert_ne!(last["result"]["isError"], true);
    // T-28: the answered key is never outstanding again.
    for t in &after {
        if t["status"] == "input_required" {
            assert!(
                t["inputRequests"].get("answer-1").is_none(),
                "answered key reappeared: {after:?}"
            );
        }
    }
    let mut all = vec!["working"];
    all.extend(statuses(&before));
    all.extend(statuses(&after));
    check::transitions(all);
    ctx.cleanup().await;
    Ok(())
}

/// Decline is tool logic: `ask` completes with `isError` (T-21), not `failed`.
#[tokio::test]
async fn declined_ask_completes_with_is_error() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "ask", json!({"question": "Name?"})).await?;
    let id = created["taskId"].as_str().context("id")?;
    wait_input_required(&client, id).await?;
    let r = client
        .update(id, json!({"answer-1": {"action": "decline"}}))
        .await?;
    assert_empty_ack(&r, "tasks/update decline");
    let seen = until_terminal(&client, id, WITHIN).await?;
    let last = seen.last().context("seen")?;
    assert_eq!(last["status"], "completed", "{last}");
    assert_eq!(last["result"]["isError"], true, "{last}");
    ctx.cleanup().await;
    Ok(())
}

/// T-29: an answer for a key that was never issued is ignored and acknowledged; the task
/// stays `input_required` with its request, unchanged.
#[tokio::test]
async fn answer_for_unknown_key_is_ignored_and_acknowledged() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "ask", json!({"question": "Name?"})).await?;
    let id = created["taskId"].as_str().context("id")?;
    let before = wait_input_required(&client, id).await?;
    let r = client
        .update(id, json!({"answer-9": accept(json!({"answer": "x"}))}))
        .await?;
    assert_empty_ack(&r, "tasks/update unknown key");
    let after = client.get(id).await?;
    assert_eq!(after, before, "an ignored answer changed the task");
    // Garbage under an unknown key is ignored too: only outstanding keys are validated.
    let r = client.update(id, json!({"zzz": "not an answer"})).await?;
    assert_empty_ack(&r, "tasks/update unknown key, junk answer");
    assert_eq!(client.get(id).await?, before);
    // A valid answer beside junk for an unknown key is applied.
    let r = client
        .update(
            id,
            json!({"answer-1": accept(json!({"answer": "kept"})), "zzz": "junk"}),
        )
        .await?;
    assert_empty_ack(&r, "tasks/update valid answer plus junk");
    let seen = until_terminal(&client, id, WITHIN).await?;
    assert_eq!(
        check::text(&seen.last().context("seen")?["result"]),
        "answer: kept"
    );
    ctx.cleanup().await;
    Ok(())
}

/// T-19, T-30, T-31: answering one of two outstanding keys keeps the task
/// `input_required` with only the other; answering that one completes it.
#[tokio::test]
async fn partial_answers_keep_the_task_waiting() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "multi_input", json!({})).await?;
    let id = created["taskId"].as_str().context("id")?;
    wait_input_required(&client, id).await?;
    let r = client
        .update(id, json!({"name": accept(json!({"name": "Ada"}))}))
        .await?;
    assert_empty_ack(&r, "partial update");
    let t = client.get(id).await?;
    check::task(&t, Kind::Polled);
    assert_eq!(t["status"], "input_required", "{t}");
    let keys: Vec<&String> = t["inputRequests"]
        .as_object()
        .context("reqs")?
        .keys()
        .collect();
    assert_eq!(
        keys,
        ["color"],
        "only the unanswered key stays outstanding: {t}"
    );
    let r = client
        .update(id, json!({"color": accept(json!({"name": "teal"}))}))
        .await?;
    assert_empty_ack(&r, "final update");
    let seen = until_terminal(&client, id, WITHIN).await?;
    let last = seen.last().context("seen")?;
    assert_eq!(last["status"], "completed", "{last}");
    let text = check::text(&last["result"]);
    assert!(
        text.contains("name=Ada") && text.contains("color=teal"),
        "{text:?}"
    );
    ctx.cleanup().await;
    Ok(())
}

/// T-32, T-53: `tasks/update` and `tasks/cancel` of an unknown id are -32602.
#[tokio::test]
async fn update_and_cancel_of_unknown_id_are_invalid_params() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    for id in ["tsk_AAAAAAAAAAAAAAAAAAAAAA", "not/a:task*id"] {
        let r = client
            .update(id, json!({"answer-1": accept(json!({"answer": "x"}))}))
            .await?;
        assert_unknown_task(&r, &format!("tasks/update {id}"));
        let r = client.cancel(id).await?;
        assert_unknown_task(&r, &format!("tasks/cancel {id}"));
    }
    ctx.cleanup().await;
    Ok(())
}

/// T-33, T-53: `inputResponses` that is not an object, or a malformed answer for an
/// outstanding key, is -32602 and records nothing.
#[tokio::test]
async fn malformed_input_responses_are_rejected_and_change_nothing() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "ask", json!({"question": "Name?"})).await?;
    let id = created["taskId"].as_str().context("id")?;
    let before = wait_input_required(&client, id).await?;
    for bad in [json!("oops"), json!([]), json!(null), json!(7)] {
        let r = client.update(id, bad.clone()).await?;
        assert_eq!(
            r.error_code(),
            Some(-32602),
            "inputResponses {bad}: {}",
            r.body
        );
        let msg = r.body["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains("inputResponses"), "message {msg:?}");
    }
    let r = client
        .request("tasks/update", json!({"taskId": id}), &caps_tasks())
        .await?;
    assert_eq!(
        r.error_code(),
        Some(-32602),
        "missing inputResponses: {}",
        r.body
    );
    for bad in [
        json!({"answer-1": {"action": "maybe"}}),
        json!({"answer-1": "yes"}),
        json!({"answer-1": {"action": "accept", "content": {"answer": {"deep": 1}}}}),
        // A valid answer elsewhere does not rescue a malformed one: nothing is recorded.
        json!({"answer-1": {"action": "maybe"}, "answer-9": accept(json!({"answer": "x"}))}),
    ] {
        let r = client.update(id, bad.clone()).await?;
        assert_eq!(r.error_code(), Some(-32602), "answer {bad}: {}", r.body);
        let msg = r.body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains("answer-1"),
            "message should name the key: {msg:?}"
        );
        let now = client.get(id).await?;
        assert_eq!(now, before, "a rejected update changed the task");
    }
    ctx.cleanup().await;
    Ok(())
}

/// T-34: the same `tasks/update` twice: the second is a no-op ack; the first answer stands.
#[tokio::test]
async fn repeated_update_is_a_noop() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "multi_input", json!({})).await?;
    let id = created["taskId"].as_str().context("id")?;
    wait_input_required(&client, id).await?;
    let first = json!({"name": accept(json!({"name": "Ada"}))});
    assert_empty_ack(&client.update(id, first.clone()).await?, "first update");
    let once = client.get(id).await?;
    assert_empty_ack(&client.update(id, first).await?, "same update again");
    assert_eq!(
        client.get(id).await?,
        once,
        "a repeated update changed the task"
    );
    let other = json!({"name": accept(json!({"name": "Bob"}))});
    assert_empty_ack(&client.update(id, other).await?, "answered key again");
    assert_eq!(
        client.get(id).await?,
        once,
        "an answered key was applied twice"
    );
    client
        .update(id, json!({"color": accept(json!({"name": "red"}))}))
        .await?;
    let seen = until_terminal(&client, id, WITHIN).await?;
    let text = check::text(&seen.last().context("seen")?["result"]).to_owned();
    assert!(text.contains("name=Ada"), "first answer lost: {text:?}");
    assert!(!text.contains("Bob"), "second answer applied: {text:?}");
    ctx.cleanup().await;
    Ok(())
}

/// T-56: more than 64 answers in one `tasks/update` is -32602 and changes nothing.
#[tokio::test]
async fn oversize_input_responses_are_rejected() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let created = create(&client, "ask", json!({"question": "Name?"})).await?;
    let id = created["taskId"].as_str().context("id")?;
    let before = wait_input_required(&client, id).await?;
    let mut many = serde_json::Map::new();
    many.insert("answer-1".into(), accept(json!({"answer": "x"})));
    for i in 0..64 {
        many.insert(format!("extra-{i}"), accept(json!({"answer": "y"})));
    }
    let r = client.update(id, Value::Object(many)).await?;
    assert_eq!(r.error_code(), Some(-32602), "{}", r.body);
    let msg = r.body["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("inputResponses"), "message {msg:?}");
    assert_eq!(
        client.get(id).await?,
        before,
        "an oversize update changed the task"
    );
    ctx.cleanup().await;
    Ok(())
}
