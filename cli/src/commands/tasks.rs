//! `call`, `get`, `cancel`, `watch`: the user side of the Tasks extension.
//!
//! `call` follows a task over `subscriptions/listen` (every status change arrives, in
//! order), falling back to polling `tasks/get` at `pollIntervalMs` when the server will not
//! stream. Status lines go to stderr with the time since the call; input requests are asked
//! on the terminal and answered with `tasks/update`; the result goes to stdout.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use mcp_tasks_shared::protocol::jsonrpc::INVALID_PARAMS;
use mcp_tasks_shared::protocol::meta::IDEMPOTENCY_KEY;
use serde_json::{Value, json};

use super::Fail;
use super::client::{CallError, Caps, Client, TASK_CAPS, TASKS};
use super::result::finish_result;
use super::terminal::{Terminal, answer_requests};

/// How a schema violation starts (the gateway's `launch.rs`): `invalid arguments for tool
/// NAME: WHY`. This, "not found" for an unknown task and the Tasks extension's name in a
/// refused call are the gateway's wording, read here: `tests/tests/e2e/cli.rs`
/// (`call_prints_results_progress_and_errors`, `get_cancel_and_watch_a_task`) fails if the gateway says them otherwise.
pub(super) const INVALID_ARGUMENTS: &str = "invalid arguments for tool ";

/// How long a `tasks/*` request may take.
const TIMEOUT: Option<Duration> = Some(Duration::from_secs(30));
/// How many MRTR rounds a synchronous `tools/call` may take before giving up.
const MAX_ROUNDS: usize = 16;
/// Consecutive failures to open a listen stream before giving up.
const MAX_RECONNECTS: u32 = 5;

pub(crate) fn rpc_fail(e: CallError) -> Fail {
    match e {
        CallError::Rpc { .. } => Fail::line(1, e.to_string()),
        CallError::Transport(why) => Fail::runtime(why),
    }
}

/// The one wording, in every command, for a task id the server does not know: unknown,
/// expired and someone else's answer alike (T-25).
fn not_found(id: &str) -> String {
    format!("task {id} not found (unknown, expired, or not readable with these credentials)")
}

/// [`rpc_fail`] for a `tasks/*` request about `id`: a task the server does not know reads
/// as [`not_found`].
fn task_fail(id: &str) -> impl Fn(CallError) -> Fail + '_ {
    move |e| match &e {
        CallError::Rpc { code, message }
            if *code == INVALID_PARAMS && message.to_ascii_lowercase().contains("not found") =>
        {
            Fail::runtime(not_found(id))
        }
        _ => rpc_fail(e),
    }
}

/// [`rpc_fail`] for a `tools/call` of `tool` made without `--task`: an error saying the
/// call needs the Tasks extension (a task-only tool, or one that asks for input) tells
/// the user to add `--task`.
fn call_fail(tool: &str, task: bool) -> impl Fn(CallError) -> Fail + '_ {
    move |e| match &e {
        CallError::Rpc { message, .. } if !task && message.contains(TASKS) => Fail::runtime(
            format!("tool {tool} runs only as a task: add --task (the server said: {message})"),
        ),
        _ => rpc_fail(e),
    }
}

fn is_terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled")
}

// ---------------------------------------------------------------------------------------
// call
// ---------------------------------------------------------------------------------------

/// Pauses before the retries of a `tools/call` whose connection failed.
const CALL_RETRIES: [Duration; 3] = [
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(2),
];

/// `tools/call` with `params` (carrying its idempotency key), sent again after each pause
/// of [`CALL_RETRIES`] while the gateway cannot be reached or the answer broke off; a
/// JSON-RPC error is the answer.
async fn call_retrying(client: &Client, params: &Value, caps: Caps) -> Result<Value, CallError> {
    let mut pauses = CALL_RETRIES.iter();
    loop {
        match client
            .request("tools/call", params.clone(), caps, None)
            .await
        {
            Err(CallError::Transport(why)) => match pauses.next() {
                Some(pause) => {
                    eprintln!(
                        "mcp-tasks: {why}; sending the call again in {} ms (same idempotency key)",
                        pause.as_millis()
                    );
                    tokio::time::sleep(*pause).await;
                }
                None => return Err(CallError::Transport(why)),
            },
            answer => return answer,
        }
    }
}

/// `call TOOL --args JSON [--task [--detach]]`.
pub(crate) async fn call(
    client: &Client,
    tool: &str,
    args: Value,
    task: bool,
    detach: bool,
) -> Result<(), Fail> {
    let caps = Caps {
        tasks: task,
        elicitation: true,
    };
    let started = Instant::now();
    let mut term = Terminal::default();
    // A fresh key for this call, the same on its retries: a call whose answer was lost
    // (the connection broke) is found again, not run twice.
    let key = format!("cli-{}", uuid::Uuid::new_v4());
    let mut params = json!({
        "name": tool,
        "arguments": args,
        "_meta": {IDEMPOTENCY_KEY: key},
    });
    for _ in 0..MAX_ROUNDS {
        let result = call_retrying(client, &params, caps)
            .await
            .map_err(call_fail(tool, task))?;
        match result["resultType"].as_str() {
            Some("task") if detach => {
                println!("{}", result["taskId"].as_str().unwrap_or(""));
                return Ok(());
            }
            Some("task") => return follow(client, &result, &mut term, started).await,
            Some("input_required") => {
                // MRTR: answer, then retry with the answers and the state echoed.
                let mut answered = HashSet::new();
                let answers =
                    answer_requests(&result["inputRequests"], &mut answered, &mut term).await?;
                let p = params.as_object_mut().expect("params is an object");
                p.insert("inputResponses".into(), Value::Object(answers));
                match result.get("requestState") {
                    Some(s) => p.insert("requestState".into(), s.clone()),
                    None => p.remove("requestState"),
                };
            }
            _ => return finish_result(&result),
        }
    }
    Err(Fail::runtime(format!(
        "the server asked for input {MAX_ROUNDS} times in a row; giving up"
    )))
}

/// What the follower has shown and answered so far.
struct Progress {
    started: Instant,
    shown: Option<(String, String)>,
    answered: HashSet<String>,
}

impl Progress {
    /// Print a status line when status or message changed.
    fn show(&mut self, task: &Value) {
        let status = task["status"].as_str().unwrap_or("?").to_owned();
        let message = task["statusMessage"].as_str().unwrap_or("").to_owned();
        let now = (status, message);
        if self.shown.as_ref() == Some(&now) {
            return;
        }
        let secs = self.started.elapsed().as_secs_f64();
        if now.1.is_empty() {
            eprintln!("[{secs:.1}s] {}", now.0);
        } else {
            eprintln!("[{secs:.1}s] {}: {}", now.0, now.1);
        }
        self.shown = Some(now);
    }
}

/// Follow the task `handle` names until it ends; Ctrl-C cancels it (exit 130).
async fn follow(
    client: &Client,
    handle: &Value,
    term: &mut Terminal,
    started: Instant,
) -> Result<(), Fail> {
    let Some(id) = handle["taskId"].as_str() else {
        return Err(Fail::runtime(format!(
            "the server answered a task without taskId: {handle}"
        )));
    };
    eprintln!("task {id}");
    let mut progress = Progress {
        started,
        shown: None,
        answered: HashSet::new(),
    };
    progress.show(handle);
    let end = tokio::select! {
        end = track(client, id, handle, &mut progress, term) => end?,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("\ninterrupted: cancelling task {id}");
            match client.request("tasks/cancel", json!({"taskId": id}), TASK_CAPS, TIMEOUT).await {
                Ok(_) => eprintln!("cancel requested for {id}"),
                Err(e) => eprintln!("mcp-tasks: cancel failed: {e}"),
            }
            return Err(Fail::quiet(130));
        }
    };
    match end["status"].as_str() {
        Some("completed") => finish_result(&end["result"]),
        Some("failed") => Err(Fail::line(
            1,
            format!(
                "error {}: {}",
                end["error"]["code"].as_i64().unwrap_or(0),
                end["error"]["message"].as_str().unwrap_or("(no message)")
            ),
        )),
        _ => Err(Fail::line(
            1,
            format!(
                "task {id} was cancelled{}",
                end["statusMessage"]
                    .as_str()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ),
        )),
    }
}

/// Handle one state of the task: show it, answer new input requests. `Some` when terminal.
async fn on_state(
    client: &Client,
    id: &str,
    task: &Value,
    progress: &mut Progress,
    term: &mut Terminal,
) -> Result<Option<Value>, Fail> {
    progress.show(task);
    let status = task["status"].as_str().unwrap_or("");
    if is_terminal(status) {
        return Ok(Some(task.clone()));
    }
    if status == "input_required" {
        let answers = answer_requests(&task["inputRequests"], &mut progress.answered, term).await?;
        if !answers.is_empty() {
            client
                .request(
                    "tasks/update",
                    json!({"taskId": id, "inputResponses": answers}),
                    TASK_CAPS,
                    TIMEOUT,
                )
                .await
                .map_err(task_fail(id))?;
        }
    }
    Ok(None)
}

/// Wait for the task's terminal state: over a listen stream (reopened when it ends), or by
/// polling when the server refuses to stream.
async fn track(
    client: &Client,
    id: &str,
    handle: &Value,
    progress: &mut Progress,
    term: &mut Terminal,
) -> Result<Value, Fail> {
    let ids = [id.to_owned()];
    let mut failures = 0;
    loop {
        let mut stream = match client.listen(&ids).await {
            Ok(s) => s,
            Err(CallError::Rpc { .. }) => break,
            Err(e) => {
                failures += 1;
                if failures > MAX_RECONNECTS {
                    return Err(rpc_fail(e));
                }
                tokio::time::sleep(Duration::from_millis(200 * u64::from(failures))).await;
                continue;
            }
        };
        failures = 0;
        let mut acknowledged = false;
        while let Some(msg) = stream.next().await {
            match msg["method"].as_str() {
                Some("notifications/subscriptions/acknowledged") => {
                    acknowledged = true;
                    let ids = &msg["params"]["notifications"]["taskIds"];
                    if !ids.as_array().is_some_and(|a| a.iter().any(|t| t == id)) {
                        // Not streamable (gone, or not ours): tasks/get says why.
                        let task = client
                            .request("tasks/get", json!({"taskId": id}), TASK_CAPS, TIMEOUT)
                            .await
                            .map_err(task_fail(id))?;
                        if let Some(end) = on_state(client, id, &task, progress, term).await? {
                            return Ok(end);
                        }
                        break;
                    }
                }
                Some("notifications/tasks") if msg["params"]["taskId"] == id => {
                    if let Some(end) = on_state(client, id, &msg["params"], progress, term).await? {
                        return Ok(end);
                    }
                }
                _ => {}
            }
        }
        if !acknowledged {
            break;
        }
        // The stream ended (gateway restart): open another, which starts with a snapshot.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Polling fallback.
    let mut poll_ms = handle["pollIntervalMs"].as_u64().unwrap_or(500);
    loop {
        let task = client
            .request("tasks/get", json!({"taskId": id}), TASK_CAPS, TIMEOUT)
            .await
            .map_err(task_fail(id))?;
        if let Some(end) = on_state(client, id, &task, progress, term).await? {
            return Ok(end);
        }
        poll_ms = task["pollIntervalMs"].as_u64().unwrap_or(poll_ms);
        tokio::time::sleep(Duration::from_millis(poll_ms.clamp(50, 10_000))).await;
    }
}

// ---------------------------------------------------------------------------------------
// get, cancel, watch
// ---------------------------------------------------------------------------------------

/// `get ID`: the task as `tasks/get` returns it, pretty.
pub(crate) async fn get(client: &Client, id: &str) -> Result<(), Fail> {
    let task = client
        .request("tasks/get", json!({"taskId": id}), TASK_CAPS, TIMEOUT)
        .await
        .map_err(task_fail(id))?;
    println!(
        "{}",
        serde_json::to_string_pretty(&task).unwrap_or_default()
    );
    Ok(())
}

/// `cancel ID`.
pub(crate) async fn cancel(client: &Client, id: &str) -> Result<(), Fail> {
    client
        .request("tasks/cancel", json!({"taskId": id}), TASK_CAPS, TIMEOUT)
        .await
        .map_err(task_fail(id))?;
    println!("cancel requested for {id} (it ends cancelled unless it finishes first)");
    Ok(())
}

/// `watch ID...`: one line per change, `ID status message`, until every task has ended;
/// exit 1 when one is unknown, failed or was cancelled.
pub(crate) async fn watch(client: &Client, ids: &[String]) -> Result<(), Fail> {
    let mut pending: Vec<String> = Vec::new();
    for id in ids {
        if !pending.contains(id) {
            pending.push(id.clone());
        }
    }
    let mut shown: HashMap<String, (String, String)> = HashMap::new();
    let mut missing = 0;
    let mut unsuccessful = 0;
    let mut failures = 0;
    let watching = async {
        while !pending.is_empty() {
            let mut stream = match client.listen(&pending).await {
                Ok(s) => s,
                Err(e @ CallError::Rpc { .. }) => return Err(rpc_fail(e)),
                Err(e) => {
                    failures += 1;
                    if failures > MAX_RECONNECTS {
                        return Err(rpc_fail(e));
                    }
                    tokio::time::sleep(Duration::from_millis(200 * u64::from(failures))).await;
                    continue;
                }
            };
            failures = 0;
            while let Some(msg) = stream.next().await {
                let params = &msg["params"];
                match msg["method"].as_str() {
                    Some("notifications/subscriptions/acknowledged") => {
                        let acked: Vec<&str> = params["notifications"]["taskIds"]
                            .as_array()
                            .map(|a| a.iter().filter_map(Value::as_str).collect())
                            .unwrap_or_default();
                        pending.retain(|id| {
                            let ok = acked.contains(&id.as_str());
                            if !ok {
                                eprintln!("mcp-tasks: {}", not_found(id));
                                missing += 1;
                            }
                            ok
                        });
                    }
                    Some("notifications/tasks") => {
                        let Some(id) = params["taskId"].as_str() else {
                            continue;
                        };
                        if !pending.iter().any(|p| p == id) {
                            continue;
                        }
                        let status = params["status"].as_str().unwrap_or("?").to_owned();
                        let mut message = params["statusMessage"].as_str().unwrap_or("").to_owned();
                        if status == "failed" {
                            let err = &params["error"];
                            message = format!(
                                "{message}{}error {}: {}",
                                if message.is_empty() { "" } else { " — " },
                                err["code"].as_i64().unwrap_or(0),
                                err["message"].as_str().unwrap_or("")
                            );
                        }
                        let now = (status.clone(), message.clone());
                        if shown.get(id) != Some(&now) {
                            if message.is_empty() {
                                println!("{id} {status}");
                            } else {
                                println!("{id} {status} {message}");
                            }
                            shown.insert(id.to_owned(), now);
                        }
                        if is_terminal(&status) {
                            if status != "completed" {
                                unsuccessful += 1;
                            }
                            pending.retain(|p| p != id);
                        }
                    }
                    _ => {}
                }
                if pending.is_empty() {
                    break;
                }
            }
            if !pending.is_empty() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    };
    tokio::select! {
        r = watching => r?,
        _ = tokio::signal::ctrl_c() => return Err(Fail::quiet(130)),
    }
    // Exit 1 for a failed or cancelled task as for an unknown one (`help`); the lines
    // said which.
    if missing > 0 || unsuccessful > 0 {
        return Err(Fail::quiet(1));
    }
    Ok(())
}
