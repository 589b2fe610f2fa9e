//! Error codes (base-protocol.md §16): a sweep of every kind of rejection this server
//! produces, checking that no code comes from the undefined part of the MCP-reserved range.
//!
//! Checklist ids cited: B-43.

use std::time::Duration;

use anyhow::{Context as _, Result};
use mcp_tasks_tests::{Reply, TestContext, caps_none, caps_tasks};
use serde_json::json;

use super::{assert_code_allowed, bytes, headers, request, set};

/// B-43: a sweep of every kind of rejection this server produces — each code is one of the
/// standard five or -32020/-32021/-32022, none from the rest of -32020…-32099.
#[tokio::test]
async fn no_undefined_codes_in_the_reserved_range() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    let std_codes = [
        -32700, -32600, -32601, -32602, -32603, -32020, -32021, -32022,
    ];
    let mut replies: Vec<Reply> = Vec::new();
    let discover = request(json!(1), "server/discover", json!({}), &caps_none());
    replies.push(
        client
            .post_raw(&headers("server/discover", None), b"{".to_vec())
            .await?,
    );
    replies.push(
        client
            .post_raw(&headers("server/discover", None), b"[]".to_vec())
            .await?,
    );
    replies.push(
        client
            .post_raw(
                &set(headers("server/discover", None), "mcp-method", None),
                bytes(&discover),
            )
            .await?,
    );
    replies.push(
        client
            .post_raw(
                &set(
                    headers("server/discover", None),
                    "mcp-protocol-version",
                    Some("v9"),
                ),
                bytes(&discover),
            )
            .await?,
    );
    replies.push(
        client
            .post_raw(
                &set(
                    headers("server/discover", None),
                    "content-type",
                    Some("text/plain"),
                ),
                bytes(&discover),
            )
            .await?,
    );
    replies.push(
        client
            .post_raw(
                &set(
                    headers("server/discover", None),
                    "accept",
                    Some("text/html"),
                ),
                bytes(&discover),
            )
            .await?,
    );
    replies.push(
        client
            .post_raw(
                &set(
                    headers("server/discover", None),
                    "origin",
                    Some("http://evil.example.com"),
                ),
                bytes(&discover),
            )
            .await?,
    );
    replies.push(client.request("ping", json!({}), &caps_none()).await?);
    replies.push(client.call("nope", json!({}), &caps_none()).await?);
    replies.push(
        client
            .request("tasks/get", json!({"taskId": "tsk_x"}), &caps_none())
            .await?,
    );
    replies.push(
        client
            .request("tasks/get", json!({"taskId": "tsk_x"}), &caps_tasks())
            .await?,
    );
    replies.push(
        client
            .request("tasks/cancel", json!({"taskId": "tsk_x"}), &caps_tasks())
            .await?,
    );
    replies.push(
        client
            .request(
                "tasks/update",
                json!({"taskId": "tsk_x", "inputResponses": {}}),
                &caps_tasks(),
            )
            .await?,
    );
    replies.push(
        client
            .request("subscriptions/listen", json!({}), &caps_tasks())
            .await?,
    );
    replies.push(
        client
            .call(
                "fail",
                json!({"mode": "protocol", "message": "x"}),
                &caps_none(),
            )
            .await?,
    );
    replies.push(
        client
            .call("protocol_error_job", json!({}), &caps_none())
            .await?,
    );
    let failed_task = client.start_task("protocol_error_job", json!({})).await?;
    let t = client
        .wait_status(&failed_task, "failed", Duration::from_secs(10))
        .await?;
    let mut codes: Vec<i64> = vec![t["error"]["code"].as_i64().context("task error code")?];
    for r in &replies {
        if let Some(code) = r.error_code() {
            codes.push(code);
        }
    }
    assert!(codes.len() >= 14, "too few errors collected: {codes:?}");
    for code in &codes {
        assert_code_allowed(*code, "sweep");
        assert!(
            std_codes.contains(code),
            "unexpected code {code}: {codes:?}"
        );
    }
    ctx.cleanup().await;
    Ok(())
}
