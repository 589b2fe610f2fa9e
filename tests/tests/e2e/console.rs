//! The operator's console (issue 15): its JSON API lists queues, workers and tasks and
//! cancels a task; it is off by default; with authentication only the principals of
//! `MCPT_CONSOLE_PRINCIPALS` get in (everyone else gets 404), sign-in sets a signed
//! HttpOnly, SameSite=Strict cookie, POSTs need this server's Origin; it refuses to start
//! on a non-loopback address without authentication; `mcp-tasks queues`, `workers` and
//! `tasks` read it with `--url`. The browser test is `tests/console/` (see
//! [`console_works_in_a_real_browser`]).

use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use bytes::Bytes;
use http_body_util::BodyExt as _;
use mcp_tasks_tests::jwt::TestIssuer;
use mcp_tasks_tests::{
    ALICE_TOKEN, BOB_TOKEN, Client, Gateway, Process, RedisCluster, RedisServer, TwoTokens, Worker,
    binary, poll_until, repo_root,
};
use serde_json::{Value, json};

const WITHIN: Duration = Duration::from_secs(20);

/// An HTTP answer: status, headers, body text.
pub(super) struct Answer {
    pub(super) status: u16,
    pub(super) headers: hyper::HeaderMap,
    pub(super) text: String,
}

impl Answer {
    pub(super) fn json(&self) -> Result<Value> {
        serde_json::from_str(&self.text).with_context(|| format!("not JSON: {}", self.text))
    }
}

pub(super) async fn send(
    client: &Client,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<Answer> {
    let res = client
        .send_raw(method, path, headers, Bytes::from(body.to_owned()))
        .await?;
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let text = String::from_utf8_lossy(&res.into_body().collect().await?.to_bytes()).into_owned();
    Ok(Answer {
        status,
        headers,
        text,
    })
}

pub(super) async fn get(client: &Client, path: &str) -> Result<Answer> {
    send(client, "GET", path, &[], "").await
}

pub(super) fn console_env() -> Vec<(&'static str, String)> {
    vec![("MCPT_CONSOLE", "on".to_owned())]
}

/// A Redis and a gateway with tokens (alice and bob) and the console on for alice alone.
struct Guarded {
    tokens: TwoTokens,
    redis: RedisServer,
    gateway: Gateway,
}

impl Guarded {
    fn start() -> Result<Guarded> {
        let tokens = TwoTokens::new()?;
        let redis = RedisServer::start()?;
        let mut env = tokens.env();
        env.extend(console_env());
        env.push(("MCPT_CONSOLE_PRINCIPALS", "alice".to_owned()));
        let gateway = Gateway::start(&redis.url(), &env)?;
        Ok(Guarded {
            tokens,
            redis,
            gateway,
        })
    }
}

/// The task's status as the console API shows it.
async fn console_status(client: &Client, id: &str) -> Result<String> {
    let a = get(client, &format!("/console/api/tasks/{id}")).await?;
    if a.status != 200 {
        bail!("HTTP {}: {}", a.status, a.text);
    }
    Ok(a.json()?["status"].as_str().unwrap_or("").to_owned())
}

/// Issue 15 §1, §4: the API shows the queue and the worker, lists a running task (found
/// in its queue stream, no index written per task), shows its detail with the worker and
/// deliveries, refuses a cancel without this server's Origin, cancels with it, and the
/// task then reads `cancelled` over MCP too. Bad filters get a JSON error that says why.
#[tokio::test]
async fn console_api_lists_a_running_task_and_cancels_it() -> Result<()> {
    let redis = RedisServer::start()?;
    let gateway = Gateway::start(&redis.url(), &console_env())?;
    let _worker = Worker::start(&redis.url(), &[])?;
    let client = gateway.client();
    client.wait_for_tool("sleep").await?;

    let id = client
        .start_task("sleep", json!({"ms": 60_000, "steps": 1}))
        .await?;
    let listed = poll_until(WITHIN, || async {
        let tasks = get(&client, "/console/api/tasks?tool=sleep")
            .await?
            .json()?;
        let found = tasks["tasks"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["id"] == id.as_str()).cloned());
        found.context("not listed yet")
    })
    .await?;
    assert_eq!(listed["queue"], "default", "{listed}");
    assert_eq!(listed["owner"], "anonymous", "{listed}");

    let queues = poll_until(WITHIN, || async {
        let q = get(&client, "/console/api/queues").await?.json()?;
        let default = q["queues"]
            .as_array()
            .and_then(|qs| qs.iter().find(|q| q["name"] == "default").cloned())
            .context("no default queue yet")?;
        if default["pending"].as_u64() == Some(0) {
            bail!("the job is not running yet: {default}");
        }
        Ok(default)
    })
    .await?;
    assert!(queues["length"].as_u64() >= Some(1), "{queues}");
    let workers = get(&client, "/console/api/workers").await?.json()?;
    let worker = &workers["workers"][0];
    assert!(worker["slots_in_use"].as_u64() >= Some(1), "{workers}");
    assert!(
        worker["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t == "sleep")),
        "{workers}"
    );

    let detail = poll_until(WITHIN, || async {
        let d = get(&client, &format!("/console/api/tasks/{id}"))
            .await?
            .json()?;
        if d["worker"].is_null() {
            bail!("not started yet: {d}");
        }
        Ok(d)
    })
    .await?;
    assert_eq!(detail["status"], "working", "{detail}");
    assert_eq!(detail["deliveries"], 1, "{detail}");

    // Bad input: a JSON error with a message, nothing changed.
    for (path, want) in [
        ("/console/api/tasks?status=done", "unknown status"),
        ("/console/api/tasks?limit=0", "bad limit"),
        ("/console/api/tasks?colour=red", "unknown parameter"),
        (
            "/console/api/tasks/tsk_AAAAAAAAAAAAAAAAAAAAAA",
            "unknown task id",
        ),
        ("/console/api/nothing", "no such console API"),
    ] {
        let a = get(&client, path).await?;
        assert!(a.status == 400 || a.status == 404, "{path}: {}", a.status);
        let message = a.json()?["error"].as_str().unwrap_or("").to_owned();
        assert!(message.contains(want), "{path}: {message}");
    }

    // A cancel from another site, or without any Origin, is refused.
    let cancel = format!("/console/api/tasks/{id}/cancel");
    let origin = format!("http://{}", gateway.addr);
    for headers in [vec![], vec![("origin", "http://evil.example")]] {
        let a = send(&client, "POST", &cancel, &headers, "").await?;
        assert_eq!(a.status, 403, "{}", a.text);
    }
    assert_eq!(console_status(&client, &id).await?, "working");
    let a = send(&client, "POST", &cancel, &[("origin", &origin)], "").await?;
    assert_eq!(a.status, 200, "{}", a.text);
    poll_until(WITHIN, || async {
        match console_status(&client, &id).await?.as_str() {
            "cancelled" => Ok(()),
            other => bail!("still {other}"),
        }
    })
    .await?;
    assert_eq!(client.get(&id).await?["status"], "cancelled");
    assert!(
        gateway
            .process
            .log_text()
            .contains("cancelled by anonymous"),
        "the action is logged with its principal"
    );

    // The pages render, with a policy that keeps other sites' scripts out.
    let page = get(&client, &format!("/console/tasks/{id}")).await?;
    assert_eq!(page.status, 200);
    assert!(page.text.contains(&id) && page.text.contains("cancelled"));
    let csp = page.headers.get("content-security-policy").context("CSP")?;
    assert!(csp.to_str()?.contains("default-src 'self'"));
    // The overview's chart: an SVG drawn from the gateway's own samples.
    let chart = get(&client, "/console/chart/queues.svg").await?;
    assert_eq!(chart.status, 200);
    assert_eq!(chart.headers["content-type"], "image/svg+xml");
    assert!(
        chart.text.starts_with("<svg") && chart.text.contains("<polyline"),
        "{}",
        chart.text
    );
    Ok(())
}

/// Issue 15 §1, §3: the overview's rates and run times come from the processes' tallies
/// (no Redis write per task): tasks created, completed, failed and cancelled over the last
/// 15 minutes add up to what was done, the run-time quantiles cover every ended task, per
/// queue and in all, and the rate chart draws its four lines.
#[tokio::test]
async fn console_counts_tasks_per_second_and_run_times() -> Result<()> {
    let redis = RedisServer::start()?;
    let gateway = Gateway::start(&redis.url(), &console_env())?;
    let _worker = Worker::start(&redis.url(), &[])?;
    let client = gateway.client();
    client.wait_for_tools(&["sleep", "fail"], WITHIN).await?;

    for _ in 0..3 {
        let id = client.start_task("sleep", json!({"ms": 0})).await?;
        client.wait_status(&id, "completed", WITHIN).await?;
    }
    let id = client
        .start_task("fail", json!({"mode": "protocol", "message": "on purpose"}))
        .await?;
    client.wait_status(&id, "failed", WITHIN).await?;
    let id = client.start_task("sleep", json!({"ms": 60_000})).await?;
    client.cancel(&id).await?;
    client.wait_status(&id, "cancelled", WITHIN).await?;

    let want = json!({"created": 5, "completed": 3, "failed": 1, "cancelled": 1});
    let queues = poll_until(WITHIN, || async {
        let q = get(&client, "/console/api/queues").await?.json()?;
        if q["last_15m"]["counts"] != want {
            bail!("not all counted yet: {}", q["last_15m"]);
        }
        Ok(q)
    })
    .await?;
    let all = &queues["last_15m"]["run_time"];
    assert!(all["count"].as_u64() >= Some(4), "{all}");
    assert!(all["p50_ms"].as_f64() > Some(0.0), "{all}");
    assert!(all["p99_ms"].as_f64() >= all["p50_ms"].as_f64(), "{all}");
    assert_eq!(
        queues["queues"][0]["run_time"], *all,
        "one queue: the same figures"
    );
    let per_second = queues["last_15m"]["per_second"]
        .as_array()
        .context("per_second")?;
    assert_eq!(per_second.len(), 90, "a point per 10 s over 15 minutes");

    let page = get(&client, "/console/").await?;
    assert!(
        page.text
            .contains("5 created, 3 completed, 1 failed, 1 cancelled"),
        "{}",
        page.text
    );
    let chart = get(&client, "/console/chart/rates.svg").await?;
    assert_eq!(chart.status, 200);
    assert_eq!(chart.headers["content-type"], "image/svg+xml");
    assert_eq!(chart.text.matches("<polyline").count(), 4, "{}", chart.text);
    Ok(())
}

/// Issue 15 §1: every replica's console lists every task, even one that ends before any
/// refresh finds it in its queue stream (the creating gateway names it in its tally), and
/// a task page or Cancel works on a replica that has not listed the task when the request
/// names the owner digest, as the console's links do; without it, the 404 says so.
#[tokio::test]
async fn console_replicas_see_short_tasks_and_find_tasks_by_owner() -> Result<()> {
    let redis = RedisServer::start()?;
    let a = Gateway::start(&redis.url(), &console_env())?;
    let b = Gateway::start(&redis.url(), &console_env())?;
    let _worker = Worker::start(&redis.url(), &[])?;
    let (client_a, client_b) = (a.client(), b.client());
    client_a.wait_for_tool("sleep").await?;

    let short = client_a.start_task("sleep", json!({"ms": 0})).await?;
    client_a.wait_status(&short, "completed", WITHIN).await?;
    poll_until(WITHIN, || async {
        match console_status(&client_b, &short).await?.as_str() {
            "completed" => Ok(()),
            other => bail!("replica b shows {other}"),
        }
    })
    .await?;
    // The console remembers a summary; the task's page and API read the result from Redis.
    let detail = get(&client_b, &format!("/console/api/tasks/{short}"))
        .await?
        .json()?;
    let text = detail["result"]["content"][0]["text"]
        .as_str()
        .with_context(|| format!("a result text: {detail}"))?;
    let fragment = get(&client_b, &format!("/console/tasks/{short}?fragment=1")).await?;
    assert!(fragment.text.contains(text), "{text}: {}", fragment.text);

    let origin = format!("http://{}", b.addr);
    for attempt in 0.. {
        let id = client_a
            .start_task("sleep", json!({"ms": 60_000, "steps": 1}))
            .await?;
        let by_owner = get(
            &client_b,
            &format!("/console/api/tasks/{id}?owner=anonymous"),
        )
        .await?;
        let bare = get(&client_b, &format!("/console/api/tasks/{id}")).await?;
        if bare.status != 404 {
            // Replica b listed it meanwhile: try again with a newer task.
            assert!(attempt < 5, "replica b always lists the task at once");
            continue;
        }
        assert!(
            bare.json()?["error"]
                .as_str()
                .unwrap_or("")
                .contains("?owner="),
            "{}",
            bare.text
        );
        assert_eq!(by_owner.status, 200, "{}", by_owner.text);
        assert_eq!(by_owner.json()?["id"], id.as_str());
        let wrong = get(
            &client_b,
            &format!("/console/api/tasks/{id}?owner=someone-else"),
        )
        .await?;
        assert_eq!(wrong.status, 404, "{}", wrong.text);
        let cancel = format!("/console/api/tasks/{id}/cancel?owner=anonymous");
        let c = send(&client_b, "POST", &cancel, &[("origin", &origin)], "").await?;
        assert_eq!(c.status, 200, "{}", c.text);
        client_a.wait_status(&id, "cancelled", WITHIN).await?;
        break;
    }
    Ok(())
}

/// Issue 15 §1 (Live): the event stream tells open pages of changes only: an idle fleet
/// (refreshed every 2 s, only ages moving) sends no `changed` event; a new task does.
#[tokio::test]
async fn console_events_signal_real_changes_only() -> Result<()> {
    let redis = RedisServer::start()?;
    let gateway = Gateway::start(&redis.url(), &console_env())?;
    let _worker = Worker::start(&redis.url(), &[])?;
    let client = gateway.client();
    client.wait_for_tool("sleep").await?;
    // Settled: one task ran (the queue, its group and the worker's consumer exist), both
    // processes' tallies counted it, and the console remembers it. A refresh absorbs the
    // tallies and signals before it reads the tasks they name, and signals again once it
    // has: on a loaded machine the counts show well before the task does.
    let id = client.start_task("sleep", json!({"ms": 0})).await?;
    client.wait_status(&id, "completed", WITHIN).await?;
    poll_until(WITHIN, || async {
        let q = get(&client, "/console/api/queues").await?.json()?;
        let counts = &q["last_15m"]["counts"];
        if counts["created"] != 1 || counts["completed"] != 1 {
            bail!("not counted yet: {counts}");
        }
        let tasks = get(&client, "/console/api/tasks?tool=sleep")
            .await?
            .json()?;
        let remembered = tasks["tasks"].as_array().is_some_and(|t| {
            t.iter()
                .any(|t| t["id"] == id.as_str() && t["status"] == "completed")
        });
        if !remembered {
            bail!("not remembered yet: {tasks}");
        }
        Ok(())
    })
    .await?;
    let res = client
        .send_raw("GET", "/console/api/events", &[], Bytes::new())
        .await?;
    assert_eq!(res.status(), 200);
    let mut events = mcp_tasks_tests::SseStream::from_response(res);
    // Over two refreshes and a heartbeat, nothing an open page shows changes.
    let idle = events.next(Duration::from_secs(5)).await;
    assert_eq!(idle, None, "an idle console signalled a change");
    client
        .start_task("sleep", json!({"ms": 60_000, "steps": 1}))
        .await?;
    assert!(
        events.next(WITHIN).await.is_some(),
        "a new task is a change"
    );
    Ok(())
}

/// `POST path` with a form `body` and this server's `origin`, as a browser sends a form.
pub(super) async fn post_form(
    client: &Client,
    origin: &str,
    path: &str,
    body: &str,
) -> Result<Answer> {
    let headers = [
        ("origin", origin),
        ("content-type", "application/x-www-form-urlencoded"),
    ];
    send(client, "POST", path, &headers, body).await
}

/// `POST path` with a JSON `body` and this server's `origin`.
pub(super) async fn post_json(
    client: &Client,
    origin: &str,
    path: &str,
    body: &str,
) -> Result<Answer> {
    let headers = [("origin", origin), ("content-type", "application/json")];
    send(client, "POST", path, &headers, body).await
}

/// Wait until `worker` has read one strike in force.
async fn worker_saw_one_strike(worker: &Worker) -> Result<()> {
    poll_until(WITHIN, || async {
        worker
            .process
            .log_text()
            .contains("strikes changed: 1 in force")
            .then_some(())
    })
    .await
    .context("the worker never saw the strike")
}

/// The hidden fields of the form holding the button labelled `label` on `page`, as a
/// form body: what a browser sends when the button is clicked.
pub(super) fn button_form(page: &str, label: &str) -> Result<String> {
    let at = page
        .find(&format!("aria-label=\"{label}\""))
        .with_context(|| format!("no button {label:?} on the page"))?;
    let form = &page[page[..at]
        .rfind("<form")
        .context("the button is in no form")?..at];
    let mut body = Vec::new();
    for input in form.split("<input").skip(1) {
        let attr = |name: &str| {
            let start = input.find(&format!("{name}=\""))? + name.len() + 2;
            Some(input[start..start + input[start..].find('"')?].to_owned())
        };
        if let (Some(name), Some(value)) = (attr("name"), attr("value")) {
            body.push(format!("{name}={}", value.replace('=', "%3D")));
        }
    }
    Ok(body.join("&"))
}

/// Issue 19 §4 ("and the same from the console"): the overview's Strike form refuses new
/// calls of the tool on the gateway and a queued call is held (the queue's Held column
/// counts it); a strike with `where` and `cancel_running` from the API cancels the matching
/// run; each strike is listed with a Restore button, and the fields that button sends lift
/// exactly its strike; an unknown tool is struck with a note; the API's restore queues the
/// held calls itself (no worker is up to do it) and they run. Bad asks get a message that
/// says what was wrong and change nothing; without this server's Origin they are refused.
#[tokio::test]
async fn console_strikes_a_tool_and_restores_it() -> Result<()> {
    let redis = RedisServer::start()?;
    let gateway = Gateway::start(&redis.url(), &console_env())?;
    let one_slot = [("MCPT_CONCURRENCY", "1".to_owned())];
    let mut worker = Worker::start(&redis.url(), &one_slot)?;
    let client = gateway.client();
    client.wait_for_tool("sleep").await?;
    let origin = format!("http://{}", gateway.addr);
    let strikes = || async {
        let listed = get(&client, "/console/api/strikes").await?.json()?;
        let names: Vec<String> = listed["strikes"]
            .as_array()
            .context("no strikes array")?
            .iter()
            .map(|s| s["describe"].as_str().unwrap_or("").to_owned())
            .collect();
        anyhow::Ok(names)
    };
    let overview = get(&client, "/console/").await?;
    assert!(
        overview.text.contains("No strikes")
            && overview.text.contains("action=\"/console/strikes\""),
        "the overview offers the strike form: {}",
        overview.text
    );

    // One slot: a long call occupies it, so the next waits in the queue.
    let long = client
        .start_task("sleep", json!({"ms": 60_000, "steps": 1}))
        .await?;
    client.wait_status(&long, "working", WITHIN).await?;
    let queued = client.start_task("sleep", json!({"ms": 10})).await?;

    // Refused: no Origin; a bad argument name; a malformed where; an unknown field; JSON
    // sent as a form; a name that is no tool name.
    let a = send(&client, "POST", "/console/strikes", &[], "tool=sleep").await?;
    assert_eq!(a.status, 403, "{}", a.text);
    for (body, want) in [
        (
            "tool=sleep&where=colour%3Dred",
            "has no argument &quot;colour&quot; to match (its arguments: ms, steps)",
        ),
        ("tool=sleep&where=colour", "expected ARG=VALUE"),
        ("tool=sleep&colour=red", "unknown field"),
        ("{\"tool\": \"sleep\"}", "Content-Type: application/json"),
        ("tool=a+b", "is not a tool name"),
    ] {
        let a = post_form(&client, &origin, "/console/strikes", body).await?;
        assert_eq!(a.status, 400, "{body}: {}", a.text);
        assert!(a.text.contains(want), "{body}: {}", a.text);
    }
    assert!(strikes().await?.is_empty(), "nothing struck by bad asks");

    // Strike from the form: new calls get a tool error naming it, on the gateway.
    let a = post_form(&client, &origin, "/console/strikes", "tool=sleep").await?;
    assert_eq!(a.status, 303, "{}", a.text);
    assert_eq!(a.headers["location"], "/console/");
    let landed = get(&client, "/console/").await?;
    assert!(
        landed.text.contains("aria-label=\"Restore tool sleep\""),
        "the page the operator lands on shows the strike"
    );
    assert!(
        gateway
            .process
            .log_text()
            .contains("console: tool sleep struck by anonymous"),
        "the strike is logged with its principal"
    );
    // Until this gateway reads the strikes (at most a second), calls still start: each is
    // then held like the queued one.
    let mut queued = vec![queued];
    let refused = loop {
        let r = client
            .call("sleep", json!({"ms": 1}), &mcp_tasks_tests::caps_tasks())
            .await?;
        let result = &r.body["result"];
        if result["isError"] == true {
            break result["content"][0]["text"]
                .as_str()
                .unwrap_or("")
                .to_owned();
        }
        let id = result["taskId"]
            .as_str()
            .context("neither a task nor refused")?;
        queued.push(id.to_owned());
        assert!(queued.len() < 20, "still not refused: {}", r.body);
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(refused.contains("tool sleep is struck"), "{refused}");
    worker_saw_one_strike(&worker).await?;

    // A strike with where and cancel_running, from the API: the long run (steps=1) is
    // cancelled by its worker; the slot frees, and the queued call is taken and held.
    let a = post_json(
        &client,
        &origin,
        "/console/api/strikes",
        r#"{"tool": "sleep", "where": "steps=1", "cancel_running": true}"#,
    )
    .await?;
    assert_eq!(a.status, 200, "{}", a.text);
    let struck = a.json()?;
    assert_eq!(struck["struck"], "tool sleep where steps=1", "{struck}");
    assert_eq!(struck["known"], true, "{struck}");
    client.wait_status(&long, "cancelled", WITHIN).await?;
    let held = poll_until(WITHIN, || async {
        let t = client.get(&queued[0]).await?;
        let message = t["statusMessage"].as_str().unwrap_or("").to_owned();
        if message.starts_with("held:") {
            Ok(t)
        } else {
            bail!("not held yet: {t}")
        }
    })
    .await?;
    assert_eq!(held["status"], "working", "{held}");
    let page = poll_until(WITHIN, || async {
        let q = get(&client, "/console/api/queues").await?.json()?;
        if q["queues"][0]["held"] == queued.len() {
            get(&client, "/console/").await
        } else {
            bail!("held not counted yet: {q}")
        }
    })
    .await?;

    // The Restore button of the where-strike lifts that strike alone.
    let fields = button_form(&page.text, "Restore tool sleep where steps=1")?;
    let a = post_form(&client, &origin, "/console/strikes/restore", &fields).await?;
    assert_eq!(a.status, 303, "{fields}: {}", a.text);
    assert_eq!(strikes().await?, ["tool sleep"]);

    // A name no worker advertises is struck with a note (it may be a typo); a restore of a
    // strike not in force names those that are.
    let a = post_form(&client, &origin, "/console/strikes", "tool=sleeep").await?;
    assert_eq!(a.status, 200, "{}", a.text);
    assert!(
        a.text
            .contains("no worker advertises a tool named sleeep; struck anyway"),
        "{}",
        a.text
    );
    let a = post_json(
        &client,
        &origin,
        "/console/api/strikes/restore",
        r#"{"tool": "sleep", "where": "ms=1"}"#,
    )
    .await?;
    assert_eq!(a.status, 404, "{}", a.text);
    let why = a.json()?["error"].as_str().unwrap_or("").to_owned();
    assert!(
        why.contains("no strike on tool sleep where ms=1 (in force: tool sleep, tool sleeep)"),
        "{why}"
    );
    let a = post_form(&client, &origin, "/console/strikes/restore", "tool=sleeep").await?;
    assert_eq!(a.status, 303, "{}", a.text);

    // With no worker up, the console's restore queues every held call itself.
    worker.process.kill();
    let a = post_json(
        &client,
        &origin,
        "/console/api/strikes/restore",
        r#"{"tool": "sleep"}"#,
    )
    .await?;
    assert_eq!(a.status, 200, "{}", a.text);
    let restored = a.json()?;
    assert_eq!(restored["restored"], "tool sleep", "{restored}");
    assert_eq!(restored["released"], queued.len(), "{restored}");
    assert!(strikes().await?.is_empty());
    let _worker = Worker::start(&redis.url(), &one_slot)?;
    for id in &queued {
        client.wait_status(id, "completed", WITHIN).await?;
    }
    poll_until(WITHIN, || async {
        let r = client
            .call("sleep", json!({"ms": 1}), &mcp_tasks_tests::caps_tasks())
            .await?;
        if r.body["result"]["isError"] == true {
            bail!("still refused: {}", r.body);
        }
        Ok(())
    })
    .await
    .context("calls run again after the restore")?;
    assert!(
        gateway
            .process
            .log_text()
            .contains("console: tool sleep restored by anonymous")
    );
    Ok(())
}

/// Issue 15 §4: against a Redis Cluster (8 shards over 3 masters) the console reads every
/// shard stream: the task shows in the list and its queue's depth, and Cancel ends it.
/// Issue 19 §4 there too: a strike from the console holds the queued calls on their shards,
/// the held count covers every shard, and a restore runs them.
#[tokio::test]
async fn console_reads_a_redis_cluster() -> Result<()> {
    let cluster = RedisCluster::start(3)?;
    let shards = ("MCPT_QUEUE_SHARDS", "8".to_owned());
    let mut env = console_env();
    env.push(shards.clone());
    let one_slot = ("MCPT_CONCURRENCY", "1".to_owned());
    let worker = Worker::start(&cluster.url(), &[shards, one_slot])?;
    let gateway = Gateway::start(&cluster.url(), &env)?;
    let client = gateway.client();
    client.wait_for_tool("sleep").await?;
    let id = client
        .start_task("sleep", json!({"ms": 60_000, "steps": 1}))
        .await?;
    poll_until(WITHIN, || async {
        let d = get(&client, &format!("/console/api/tasks/{id}"))
            .await?
            .json()?;
        if d["worker"].is_null() {
            bail!("not listed and started yet: {d}");
        }
        Ok(())
    })
    .await?;
    // Three more wait behind it (the worker's one slot is taken), on the shard streams of
    // their ids. Created only now: sooner, the worker could take one of them first (shards
    // are read in their order, not the calls').
    let mut queued = Vec::new();
    for _ in 0..3 {
        queued.push(client.start_task("sleep", json!({"ms": 10})).await?);
    }
    poll_until(WITHIN, || async {
        let q = get(&client, "/console/api/queues").await?.json()?;
        if q["queues"][0]["length"].as_u64() >= Some(1) {
            Ok(())
        } else {
            bail!("the queued calls are not in the queue's length: {q}")
        }
    })
    .await?;
    let origin = format!("http://{}", gateway.addr);

    // Issue 19 in a cluster: struck, the queued calls are held when the slot frees (each
    // script on its shard's keys), counted over every shard, and a restore runs them.
    let a = post_json(
        &client,
        &origin,
        "/console/api/strikes",
        r#"{"tool": "sleep"}"#,
    )
    .await?;
    assert_eq!(a.status, 200, "{}", a.text);
    worker_saw_one_strike(&worker).await?;
    let cancel = format!("/console/api/tasks/{id}/cancel");
    let a = send(&client, "POST", &cancel, &[("origin", &origin)], "").await?;
    assert_eq!(a.status, 200, "{}", a.text);
    poll_until(WITHIN, || async {
        match console_status(&client, &id).await?.as_str() {
            "cancelled" => Ok(()),
            other => bail!("still {other}"),
        }
    })
    .await?;
    poll_until(WITHIN, || async {
        let q = get(&client, "/console/api/queues").await?.json()?;
        if q["queues"][0]["held"] == 3 {
            Ok(())
        } else {
            bail!("not all held yet: {q}")
        }
    })
    .await?;
    let a = post_json(
        &client,
        &origin,
        "/console/api/strikes/restore",
        r#"{"tool": "sleep"}"#,
    )
    .await?;
    assert_eq!(a.status, 200, "{}", a.text);
    for id in &queued {
        client.wait_status(id, "completed", WITHIN).await?;
    }
    Ok(())
}

/// Issue 15 §1: without `MCPT_CONSOLE=on` there is no console.
#[tokio::test]
async fn console_is_off_by_default() -> Result<()> {
    let redis = RedisServer::start()?;
    let gateway = Gateway::start(&redis.url(), &[])?;
    for path in ["/console/", "/console/api/tasks", "/console/signin"] {
        assert_eq!(get(&gateway.client(), path).await?.status, 404, "{path}");
    }
    Ok(())
}

/// Issue 15 §2: with tokens, only alice (listed) gets in — by bearer token or by a signed
/// session cookie from the sign-in page (HttpOnly, SameSite=Strict); bob, anonymous
/// callers and forged cookies get 404 everywhere; sign-in needs this server's Origin and
/// answers a non-console principal as it answers a bad token.
#[tokio::test]
async fn console_admits_only_its_principals() -> Result<()> {
    let Guarded {
        tokens: _tokens,
        redis: _redis,
        gateway,
    } = Guarded::start()?;
    let anonymous = gateway.client();
    let bob = anonymous.with_token(BOB_TOKEN);
    let alice = anonymous.with_token(ALICE_TOKEN);
    let paths = [
        "/console/chart/queues.svg",
        "/console/",
        "/console/tasks",
        "/console/api/queues",
        "/console/api/tasks",
        "/console/api/events",
    ];
    for path in paths {
        for (who, client) in [("anonymous", &anonymous), ("bob", &bob)] {
            let a = get(client, path).await?;
            assert_eq!(
                (a.status, a.text.as_str()),
                (404, "not found\n"),
                "{who} {path}"
            );
        }
    }
    assert_eq!(get(&alice, "/console/api/queues").await?.status, 200);
    let origin = format!("http://{}", gateway.addr);

    // Bob's valid token and a made-up one are refused alike, without a cookie.
    for token in [BOB_TOKEN, "no-such-token-0123456789"] {
        let a = post_form(
            &anonymous,
            &origin,
            "/console/signin",
            &format!("token={token}"),
        )
        .await?;
        assert_eq!(a.status, 403, "{token}");
        assert!(a.text.contains("Sign-in refused"));
        assert!(!a.headers.contains_key("set-cookie"));
    }
    // No Origin: refused before the token is looked at.
    let a = send(
        &anonymous,
        "POST",
        "/console/signin",
        &[("content-type", "application/x-www-form-urlencoded")],
        &format!("token={ALICE_TOKEN}"),
    )
    .await?;
    assert_eq!(a.status, 403);
    assert!(!a.headers.contains_key("set-cookie"));

    let a = post_form(
        &anonymous,
        &origin,
        "/console/signin",
        &format!("token={ALICE_TOKEN}"),
    )
    .await?;
    assert_eq!(a.status, 303, "{}", a.text);
    let set = a
        .headers
        .get("set-cookie")
        .context("a session cookie")?
        .to_str()?
        .to_owned();
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/console"] {
        assert!(set.contains(flag), "{flag}: {set}");
    }
    let cookie = set.split(';').next().unwrap_or("").to_owned();
    let page = send(&anonymous, "GET", "/console/", &[("cookie", &cookie)], "").await?;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(page.text.contains("signed in as alice"));
    // A cookie changed by one character is no session.
    let mut forged = cookie.clone().into_bytes();
    let last = forged.len() - 2;
    forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged)?;
    assert_eq!(
        send(&anonymous, "GET", "/console/", &[("cookie", &forged)], "")
            .await?
            .status,
        404
    );
    Ok(())
}

/// Issue 15 §2: a session ends with the token it was started with: once the token file no
/// longer holds that token (the principal keeps another one), the cookie opens nothing.
#[tokio::test]
async fn console_session_ends_when_its_token_is_revoked() -> Result<()> {
    let Guarded {
        tokens,
        redis: _redis,
        gateway,
    } = Guarded::start()?;
    let client = gateway.client();
    let origin = format!("http://{}", gateway.addr);
    let a = post_form(
        &client,
        &origin,
        "/console/signin",
        &format!("token={ALICE_TOKEN}"),
    )
    .await?;
    assert_eq!(a.status, 303, "{}", a.text);
    let cookie = a.headers["set-cookie"]
        .to_str()?
        .split(';')
        .next()
        .unwrap_or("")
        .to_owned();
    let with_cookie = [("cookie", cookie.as_str())];
    let page = || send(&client, "GET", "/console/", &with_cookie, "");
    assert_eq!(page().await?.status, 200);
    std::fs::write(
        tokens.file(),
        format!("alice alice-second-token-0123456789abcdef\nbob {BOB_TOKEN}\n"),
    )?;
    poll_until(WITHIN, || async {
        match page().await?.status {
            404 => Ok(()),
            other => bail!("the session still opens the console: {other}"),
        }
    })
    .await?;
    Ok(())
}

/// Issue 15 §2: sign-in attempts are limited per client address: past 10 a minute the
/// answer is 429 with a message and `Retry-After`, whatever the token.
#[tokio::test]
async fn console_limits_sign_in_attempts() -> Result<()> {
    let Guarded {
        tokens: _tokens,
        redis: _redis,
        gateway,
    } = Guarded::start()?;
    let client = gateway.client();
    let origin = format!("http://{}", gateway.addr);
    for _ in 0..10 {
        let a = post_form(
            &client,
            &origin,
            "/console/signin",
            "token=guess-0123456789",
        )
        .await?;
        assert_eq!(a.status, 403, "{}", a.text);
    }
    let a = post_form(
        &client,
        &origin,
        "/console/signin",
        &format!("token={ALICE_TOKEN}"),
    )
    .await?;
    assert_eq!(a.status, 429, "{}", a.text);
    assert!(
        a.json()?["error"]
            .as_str()
            .unwrap_or("")
            .contains("too many sign-in attempts"),
        "{}",
        a.text
    );
    assert!(a.headers.contains_key("retry-after"));
    assert!(!a.headers.contains_key("set-cookie"));
    Ok(())
}

/// Issue 15 §2: with JWTs, sign-in takes a JWT whose subject is a console principal; an
/// expired one, or one for another subject, is refused without a cookie.
#[tokio::test]
async fn console_signs_in_with_a_jwt() -> Result<()> {
    let issuer = TestIssuer::new("https://idp.test");
    let dir = mcp_tasks_tests::TempDir::new("mcpt-console-jwt")?;
    let jwks = dir.path().join("jwks.json");
    std::fs::write(&jwks, issuer.jwks_json())?;
    let env = vec![
        ("MCPT_AUTH", "jwt".to_owned()),
        ("MCPT_AUTH_JWKS", jwks.display().to_string()),
        ("MCPT_AUTH_ISSUER", "https://idp.test".to_owned()),
        ("MCPT_AUTH_AUDIENCE", "mcp-tasks-test".to_owned()),
        ("MCPT_CONSOLE", "on".to_owned()),
        ("MCPT_CONSOLE_PRINCIPALS", "carol".to_owned()),
    ];
    let redis = RedisServer::start()?;
    let gateway = Gateway::start(&redis.url(), &env)?;
    let client = gateway.client();
    let origin = format!("http://{}", gateway.addr);
    for (why, jwt) in [
        ("expired", issuer.token("carol", "mcp-tasks-test", -120)),
        (
            "not a console principal",
            issuer.token("dave", "mcp-tasks-test", 600),
        ),
    ] {
        let a = post_form(&client, &origin, "/console/signin", &format!("token={jwt}")).await?;
        assert_eq!(a.status, 403, "{why}");
        assert!(!a.headers.contains_key("set-cookie"), "{why}");
    }
    let jwt = issuer.token("carol", "mcp-tasks-test", 600);
    let a = post_form(&client, &origin, "/console/signin", &format!("token={jwt}")).await?;
    assert_eq!(a.status, 303, "{}", a.text);
    let set = a.headers["set-cookie"].to_str()?;
    let max_age: u64 = set
        .split("; ")
        .find_map(|a| a.strip_prefix("Max-Age="))
        .context("Max-Age")?
        .parse()?;
    assert!(max_age <= 600, "a session ends with its JWT: {set}");
    let cookie = set.split(';').next().unwrap_or("").to_owned();
    let page = send(&client, "GET", "/console/tasks", &[("cookie", &cookie)], "").await?;
    assert_eq!(page.status, 200);
    assert!(
        page.text.contains("signed in as https://idp.test carol"),
        "{}",
        page.text
    );
    Ok(())
}

/// Issue 15 §2: the console is never served off loopback without authentication, not even
/// with `MCPT_AUTH_ALLOW_ANONYMOUS=1` (which lets MCP itself be anonymous).
#[tokio::test]
async fn console_refuses_non_loopback_without_auth() -> Result<()> {
    let env = [
        ("MCPT_REDIS_URL", "redis://127.0.0.1:1".to_owned()),
        ("MCPT_LISTEN_ADDR", "0.0.0.0:0".to_owned()),
        ("MCPT_AUTH_ALLOW_ANONYMOUS", "1".to_owned()),
        ("MCPT_CONSOLE", "on".to_owned()),
    ];
    let (mut process, _) = Process::spawn("mcp-tasks-gateway", &env)?;
    let line = process.usage_error()?;
    assert!(line.contains("refusing to serve the console"), "{line}");
    Ok(())
}

/// Issue 15 §2: with authentication and no `MCPT_CONSOLE_PRINCIPALS` nobody could sign
/// in: the gateway refuses to start, with one line saying what to set.
#[tokio::test]
async fn console_refuses_authentication_without_principals() -> Result<()> {
    let tokens = TwoTokens::new()?;
    let mut env = tokens.env();
    env.push(("MCPT_REDIS_URL", "redis://127.0.0.1:1".to_owned()));
    env.push(("MCPT_LISTEN_ADDR", "127.0.0.1:0".to_owned()));
    env.push(("MCPT_CONSOLE", "on".to_owned()));
    let (mut process, _) = Process::spawn("mcp-tasks-gateway", &env)?;
    let line = process.usage_error()?;
    assert!(line.contains("empty MCPT_CONSOLE_PRINCIPALS"), "{line}");
    Ok(())
}

/// Issue 15 §1 (Live), cost: a gateway serves at most `MCPT_CONSOLE_MAX_STREAMS` console
/// event streams; one more gets 503 with a message, and a closed one frees its place.
#[tokio::test]
async fn console_caps_open_event_streams() -> Result<()> {
    let redis = RedisServer::start()?;
    let mut env = console_env();
    env.push(("MCPT_CONSOLE_MAX_STREAMS", "2".to_owned()));
    let gateway = Gateway::start(&redis.url(), &env)?;
    let client = gateway.client();
    let open = || client.send_raw("GET", "/console/api/events", &[], Bytes::new());
    let first = open().await?;
    let second = open().await?;
    assert_eq!(
        (first.status().as_u16(), second.status().as_u16()),
        (200, 200)
    );
    let third = open().await?;
    assert_eq!(third.status(), 503);
    let text = String::from_utf8_lossy(&third.into_body().collect().await?.to_bytes()).into_owned();
    assert!(text.contains("MCPT_CONSOLE_MAX_STREAMS"), "{text}");
    drop(first);
    poll_until(WITHIN, || async {
        let again = open().await?;
        if again.status() != 200 {
            bail!("still {}", again.status());
        }
        Ok(())
    })
    .await?;
    Ok(())
}

fn cli(args: &[&str], env: &[(&str, &str)]) -> Result<(Option<i32>, String, String)> {
    let mut cmd = Command::new(binary("mcp-tasks"));
    cmd.args(args).env_clear();
    if let Ok(path) = std::env::var("PATH") {
        cmd.env("PATH", path);
    }
    // No `up` here: a data directory that holds none.
    cmd.env(
        "MCPT_DATA_DIR",
        std::env::temp_dir().join("mcpt-console-no-up"),
    );
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .output()
        .context("run `cargo build --workspace --bins` first")?;
    Ok((
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// Issue 15 §4: `queues`, `workers` and `tasks --url` read the console API with a console
/// principal's token (no Redis address); another principal's token gets one line saying
/// why; a bad filter is refused with the API's message.
#[tokio::test]
async fn cli_reads_the_console_with_url_and_token() -> Result<()> {
    let Guarded {
        tokens,
        redis,
        gateway,
    } = Guarded::start()?;
    let _worker = Worker::start(&redis.url(), &tokens.env())?;
    let alice = gateway.client().with_token(ALICE_TOKEN);
    alice.wait_for_tool("sleep").await?;
    let id = alice
        .start_task("sleep", json!({"ms": 60_000, "steps": 1}))
        .await?;
    let url = gateway.url();
    let as_alice = [("MCPT_TOKEN", ALICE_TOKEN)];
    let out = poll_until(WITHIN, || async {
        let out = cli(&["tasks", "--url", &url, "--status", "working"], &as_alice)?;
        if !out.1.contains(&id) {
            bail!("not listed yet: {out:?}");
        }
        Ok(out)
    })
    .await?;
    assert_eq!(out.0, Some(0), "{out:?}");
    assert!(out.1.starts_with("TASK"), "{out:?}");
    let out = cli(&["queues", "--url", &url], &as_alice)?;
    assert_eq!(out.0, Some(0), "{out:?}");
    assert!(
        out.1.contains("default") && out.1.contains("OLDEST"),
        "{out:?}"
    );
    let out = cli(&["workers", "--url", &url], &as_alice)?;
    assert_eq!(out.0, Some(0), "{out:?}");
    assert!(
        out.1.contains("sleep") && out.1.contains("CONSUMER"),
        "{out:?}"
    );

    let out = cli(&["tasks", "--url", &url], &[("MCPT_TOKEN", BOB_TOKEN)])?;
    assert_eq!(out.0, Some(1), "{out:?}");
    assert_eq!(out.2.lines().count(), 1, "{out:?}");
    assert!(out.2.contains("MCPT_CONSOLE_PRINCIPALS"), "{out:?}");
    let out = cli(&["tasks", "--url", &url, "--status", "done"], &as_alice)?;
    assert_eq!(out.0, Some(1), "{out:?}");
    assert!(out.2.contains("unknown status"), "{out:?}");
    assert_eq!(out.2.lines().count(), 1, "{out:?}");
    Ok(())
}

/// Issue 15 §6: the browser test (`tests/console/console.mjs`, playwright-core driving
/// Debian's chromium) against a gateway and a worker started here. Chromium and the npm
/// packages are required, like node for the other official-client tests: a test that
/// skipped itself would pass without having run.
#[tokio::test]
async fn console_works_in_a_real_browser() -> Result<()> {
    let dir = repo_root().join("tests/console");
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned());
    assert!(
        std::path::Path::new(&chromium).exists(),
        "no chromium at {chromium}: apt-get install -y chromium (.ci/run does), or set CHROMIUM"
    );
    assert!(
        dir.join("node_modules/playwright-core").exists(),
        "tests/console/node_modules is missing: run `npm ci --prefix tests/console` (tests/run-all.sh does)"
    );
    let Guarded {
        tokens,
        redis,
        gateway,
    } = Guarded::start()?;
    let _worker = Worker::start(&redis.url(), &tokens.env())?;
    gateway
        .client()
        .with_token(ALICE_TOKEN)
        .wait_for_tool("sleep")
        .await?;
    let shots = repo_root().join("target");
    // Screenshots of an earlier run must not stand in for this one's.
    for shot in ["console-overview.png", "console-task.png"] {
        let _ = std::fs::remove_file(shots.join(shot));
    }
    let out = tokio::process::Command::new("node")
        .arg(dir.join("console.mjs"))
        .env("CONSOLE_BASE", format!("http://{}", gateway.addr))
        .env("CONSOLE_TOKEN", ALICE_TOKEN)
        .env("OTHER_TOKEN", BOB_TOKEN)
        .env("CHROMIUM", &chromium)
        .env("SCREENSHOTS", &shots)
        .current_dir(&dir)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), out)
        .await
        .context("the browser test took over 120 s")??;
    let text = format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    for shot in ["console-overview.png", "console-task.png"] {
        assert!(shots.join(shot).exists(), "{shot} missing; {text}");
    }
    Ok(())
}
