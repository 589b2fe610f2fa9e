//! `subscriptions/listen` at the base-protocol level (base-protocol.md §14): the
//! acknowledgement comes first and every notification carries the listen id as
//! `subscriptionId` (string or integer). Task notification details are in `listen.rs`.
//!
//! Checklist ids cited: B-14, B-38, B-39.

use std::time::Duration;

use anyhow::{Context as _, Result};
use mcp_tasks_tests::{TestContext, caps_none};
use serde_json::{Value, json};

use super::{Events, content_type, long_task, ok_result, open_listen};

const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// B-38, B-39, B-14: the listen stream's first message is the acknowledgement with the
/// honoured subset (unknown task ids and unadvertised types left out); every notification
/// carries the listen id as `subscriptionId`; no requests, progress or log messages.
#[tokio::test]
async fn listen_acknowledges_first_and_tags_every_notification() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let discover = ok_result(
        &client
            .request("server/discover", json!({}), &caps_none())
            .await?,
    );
    let list_changed = discover["capabilities"]["tools"]["listChanged"] == true;
    let task = client
        .start_task("sleep", json!({"ms": 600, "steps": 3}))
        .await?;
    let res = open_listen(
        &client,
        json!("listen-1"),
        json!({"taskIds": [task, "tsk_neverissued"], "toolsListChanged": true}),
        "application/json, text/event-stream",
    )
    .await?;
    assert_eq!(content_type(res.headers()), "text/event-stream");
    let mut events = Events {
        body: res.into_body(),
        buf: Vec::new(),
    };
    let (ack, _) = events
        .next_message(Duration::from_secs(5))
        .await
        .context("no acknowledgement")?;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "B-38 first message: {ack}"
    );
    assert_eq!(ack["params"]["_meta"][SUBSCRIPTION_ID], "listen-1", "{ack}");
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([task]),
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"]
            .get("toolsListChanged")
            .is_some(),
        list_changed,
        "honoured subset: {ack}"
    );
    let mut statuses = Vec::new();
    while let Some((m, _)) = events.next_message(Duration::from_secs(10)).await {
        assert!(
            m.get("id").is_none(),
            "B-14: request or response on the stream: {m}"
        );
        assert_eq!(
            m["method"], "notifications/tasks",
            "B-39 only requested types: {m}"
        );
        assert_eq!(
            m["params"]["_meta"][SUBSCRIPTION_ID], "listen-1",
            "B-39: {m}"
        );
        assert_eq!(m["params"]["taskId"], task.as_str(), "{m}");
        let status = m["params"]["status"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let done = status == "completed";
        statuses.push(status);
        if done {
            break;
        }
    }
    assert_eq!(
        statuses.last().map(String::as_str),
        Some("completed"),
        "{statuses:?}"
    );
    ctx.cleanup().await;
    Ok(())
}

/// B-39: an integer listen id is echoed as an integer `subscriptionId`.
#[tokio::test]
async fn listen_with_an_integer_id_tags_notifications_with_the_integer() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let task = long_task(&client).await?;
    let res = open_listen(
        &client,
        json!(77),
        json!({"taskIds": [task]}),
        "text/event-stream, application/json",
    )
    .await?;
    assert_eq!(content_type(res.headers()), "text/event-stream");
    let mut events = Events {
        body: res.into_body(),
        buf: Vec::new(),
    };
    let (ack, _) = events
        .next_message(Duration::from_secs(5))
        .await
        .context("no acknowledgement")?;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(ack["params"]["_meta"][SUBSCRIPTION_ID], json!(77), "{ack}");
    client.cancel(&task).await?;
    let mut last = Value::Null;
    while let Some((m, _)) = events.next_message(Duration::from_secs(5)).await {
        assert_eq!(m["params"]["_meta"][SUBSCRIPTION_ID], json!(77), "{m}");
        let done = m["params"]["status"] == "cancelled";
        last = m;
        if done {
            break;
        }
    }
    assert_eq!(last["params"]["status"], "cancelled", "{last}");
    ctx.cleanup().await;
    Ok(())
}
