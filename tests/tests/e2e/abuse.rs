//! Holding under abuse (issue 20), the smaller items: inputs that bent a tool's meaning.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use mcp_tasks_tests::{Client, TestContext, caps_none, meta};
use serde_json::json;

/// `sleep` with `ms: 1e3` (an integer to the schema, a float to JSON parsers) sleeps
/// 1,000 ms; it used to read 0 and answer "slept 0 ms".
#[tokio::test]
async fn sleep_takes_an_exponent_integer_at_its_value() -> Result<()> {
    let ctx = TestContext::start(1, 1).await?;
    let client = ctx.client();
    client.wait_for_tool("sleep").await?;
    let mut params = json!({"name": "sleep", "arguments": {}});
    params["_meta"] = meta(&caps_none());
    let body = serde_json::to_string(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}),
    )?
    .replace(r#""arguments":{}"#, r#""arguments":{"ms":1e3}"#);
    ensure!(body.contains(r#"{"ms":1e3}"#), "{body}");
    let started = Instant::now();
    let reply = client
        .post_raw(&Client::headers("tools/call", Some("sleep")), body)
        .await?;
    let took = started.elapsed();
    let text = reply.body["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    ensure!(text == "slept 1000 ms", "{}", reply.body);
    ensure!(
        took >= Duration::from_millis(1000),
        "answered after {took:?}"
    );
    ctx.cleanup().await;
    Ok(())
}
