//! Dead letters in the operator's console: `/console/dead` and `GET /console/api/dead` list
//! the tasks that failed for good (filtered by tool and age as `mcp-tasks dead`), and the
//! Redrive button (`POST /console/dead/redrive`, `/console/api/dead/redrive`) runs one
//! again as `mcp-tasks redrive` does: one new task, linked both ways; a second press makes
//! nothing and names that task; an unknown id is a 404 that says so, and a tool no live
//! worker advertises a refusal.

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use mcp_tasks_protocol::meta::RELATED_TASK_IDS_KEY as RELATED;
use mcp_tasks_tests::{Gateway, RedisServer, TempDir, Worker, write_catalog};
use serde_json::{Value, json};

use super::console::{button_form, console_env, get, post_form, post_json, send};
use super::dead_letters::flaky_entry;

const WITHIN: Duration = Duration::from_secs(20);

/// The keys `flaky` was run with, in order.
fn runs(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("runs"))
        .map(|t| t.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// The task ids of a `GET /console/api/dead` answer, in the order listed.
fn listed(dead: &Value) -> Vec<String> {
    dead["dead"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .filter_map(|r| r["task_id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// `flaky` fails on both its attempts and keeps its tool errors as dead letters. Its two
/// failed tasks are listed on the page and by the API, newest first; one is redriven by
/// the API (JSON), the other by its button on the page (the form the page holds); each new
/// task runs the same call, linked both ways; pressing again makes no task and names the
/// one made; an unknown id gets 404; a redrive without this server's Origin is refused, and
/// so is one of a tool no live worker advertises.
#[tokio::test]
async fn console_lists_dead_letters_and_redrives_one_once() -> Result<()> {
    let stamps = TempDir::new("mcpt-console-dead")?;
    let catalog = write_catalog(&flaky_entry(stamps.path()))?;
    let redis = RedisServer::start()?;
    let mut worker = Worker::start(
        &redis.url(),
        &[("MCPT_TOOLS_FILE", catalog.path().display().to_string())],
    )?;
    let gateway = Gateway::start(&redis.url(), &console_env())?;
    let client = gateway.client();
    client.wait_for_tools(&["flaky"], WITHIN).await?;
    let origin = format!("http://{}", gateway.addr);

    let first = client.start_task("flaky", json!({"key": "k1"})).await?;
    client.wait_status(&first, "completed", WITHIN).await?;
    let second = client.start_task("flaky", json!({"key": "k2"})).await?;
    client.wait_status(&second, "completed", WITHIN).await?;
    ensure!(runs(stamps.path()) == ["k1", "k1", "k2", "k2"]);

    // The letter is written with the terminal state: listed at once, newest first.
    let dead = get(&client, "/console/api/dead").await?.json()?;
    ensure!(listed(&dead) == [second.as_str(), first.as_str()], "{dead}");
    let row = &dead["dead"][1];
    ensure!(row["tool"] == "flaky" && row["attempts"] == 2, "{row}");
    ensure!(
        row["owner"] == "anonymous" && row["runnable"] == true,
        "{row}"
    );
    ensure!(row["redriven"].is_null(), "{row}");
    ensure!(
        row["reason"]
            .as_str()
            .is_some_and(|r| r.contains("broke on k1")),
        "{row}"
    );
    let recent = get(&client, "/console/api/dead?tool=flaky&since=1h")
        .await?
        .json()?;
    ensure!(listed(&recent).len() == 2, "{recent}");
    let other = get(&client, "/console/api/dead?tool=quiet").await?.json()?;
    ensure!(listed(&other).is_empty(), "{other}");
    let bad = get(&client, "/console/api/dead?since=soon").await?;
    ensure!(bad.status == 400, "{}: {}", bad.status, bad.text);
    ensure!(
        bad.json()?["error"]
            .as_str()
            .is_some_and(|e| e.contains("bad since"))
    );

    let page = get(&client, "/console/dead").await?;
    ensure!(page.status == 200, "{}", page.status);
    ensure!(
        page.text.contains("href=\"/console/dead\""),
        "in the navigation"
    );
    for (id, key) in [(&first, "k1"), (&second, "k2")] {
        ensure!(
            page.text.contains(&format!(
                "href=\"/console/tasks/{id}?owner=anonymous\"><code>{id}</code>"
            )),
            "{id} is listed with a link to its page:\n{}",
            page.text
        );
        ensure!(
            page.text.contains(&format!("broke on {key}")),
            "{}",
            page.text
        );
    }
    let filtered = get(&client, "/console/dead?tool=quiet").await?;
    ensure!(
        filtered.text.contains("No dead letters that match") && !filtered.text.contains(&*first),
        "{}",
        filtered.text
    );

    // Not from this server's pages: refused, nothing made.
    let body = format!("id={first}");
    let headers = [("content-type", "application/x-www-form-urlencoded")];
    let foreign = send(&client, "POST", "/console/dead/redrive", &headers, &body).await?;
    ensure!(
        foreign.status == 403,
        "{}: {}",
        foreign.status,
        foreign.text
    );

    // The API's redrive: one new task of the same call, linked both ways.
    let ask = json!({ "id": first }).to_string();
    let made = post_json(&client, &origin, "/console/api/dead/redrive", &ask).await?;
    ensure!(made.status == 200, "{}: {}", made.status, made.text);
    let made = made.json()?;
    let new = made["task_id"].as_str().context("no task_id")?.to_owned();
    ensure!(made["new"] == true && new != first, "{made}");
    ensure!(made["redriven"] == first.as_str(), "{made}");
    let t = client.wait_status(&new, "completed", WITHIN).await?;
    ensure!(t["_meta"][RELATED] == json!([first]), "{t}");
    let old = client.get(&first).await?;
    ensure!(old["_meta"][RELATED] == json!([new]), "{old}");
    ensure!(
        runs(stamps.path()) == ["k1", "k1", "k2", "k2", "k1", "k1"],
        "{:?}",
        runs(stamps.path())
    );
    ensure!(
        gateway
            .process
            .log_text()
            .contains(&format!("redriven as {new} by anonymous")),
        "the redrive is logged with its principal"
    );

    // Pressed again (API, as a form): nothing made, the task made named.
    let again = post_form(&client, &origin, "/console/api/dead/redrive", &body).await?;
    ensure!(again.status == 200, "{}: {}", again.status, again.text);
    let again = again.json()?;
    ensure!(
        again["new"] == false && again["task_id"] == new.as_str(),
        "{again}"
    );
    ensure!(
        again["message"]
            .as_str()
            .is_some_and(|m| m.contains("redriven before") && m.contains(&new)),
        "{again}"
    );

    // The page's button for the other letter: its form, as a browser sends it, lands on
    // the new task's page.
    let page = get(&client, "/console/dead").await?;
    ensure!(
        page.text.contains(&format!(
            "as <a href=\"/console/tasks/{new}?owner=anonymous\""
        )),
        "the first letter shows its redrive:\n{}",
        page.text
    );
    ensure!(
        !page
            .text
            .contains(&format!("aria-label=\"Redrive {first}\"")),
        "no button for a letter redriven"
    );
    let fields = button_form(&page.text, &format!("Redrive {second}"))?;
    ensure!(fields == format!("id={second}"), "{fields}");
    let pressed = post_form(&client, &origin, "/console/dead/redrive", &fields).await?;
    ensure!(
        pressed.status == 303,
        "{}: {}",
        pressed.status,
        pressed.text
    );
    let to = pressed
        .headers
        .get("location")
        .and_then(|l| l.to_str().ok())
        .context("no Location")?;
    let new2 = to
        .strip_prefix("/console/tasks/")
        .and_then(|rest| rest.strip_suffix("?owner=anonymous"))
        .with_context(|| format!("not a task page: {to}"))?
        .to_owned();
    ensure!(new2 != second && new2 != new, "{new2}");
    let t = client.wait_status(&new2, "completed", WITHIN).await?;
    ensure!(t["_meta"][RELATED] == json!([second]), "{t}");
    let pressed = post_form(&client, &origin, "/console/dead/redrive", &fields).await?;
    ensure!(
        pressed.status == 200,
        "{}: {}",
        pressed.status,
        pressed.text
    );
    ensure!(
        pressed.text.contains(&format!(
            "task {second} was redriven before, as {new2}: no new task"
        )),
        "{}",
        pressed.text
    );

    // Each new task failed too: four letters, no more tasks than the two redrives made.
    let dead = get(&client, "/console/api/dead").await?.json()?;
    ensure!(
        listed(&dead) == [&new2, &new, &second, &first].map(String::as_str),
        "{dead}"
    );
    ensure!(dead["dead"][2]["redriven"] == new2.as_str(), "{dead}");
    ensure!(dead["dead"][3]["redriven"] == new.as_str(), "{dead}");
    ensure!(
        runs(stamps.path()) == ["k1", "k1", "k2", "k2", "k1", "k1", "k2", "k2"],
        "{:?}",
        runs(stamps.path())
    );

    // An unknown id: 404 with a message, from the API and the page's form alike.
    let nope = post_json(
        &client,
        &origin,
        "/console/api/dead/redrive",
        r#"{"id": "tsk_nope"}"#,
    )
    .await?;
    ensure!(nope.status == 404, "{}: {}", nope.status, nope.text);
    ensure!(
        nope.json()?["error"]
            .as_str()
            .is_some_and(|e| e.contains("no dead letter for task tsk_nope")),
        "{}",
        nope.text
    );
    let nope = post_form(&client, &origin, "/console/dead/redrive", "id=tsk_nope").await?;
    ensure!(nope.status == 404, "{}: {}", nope.status, nope.text);
    ensure!(
        nope.text.contains("no dead letter for task tsk_nope"),
        "{}",
        nope.text
    );

    // With no worker advertising the tool (stopped, its advert gone), a redrive is refused
    // and nothing is made.
    worker.process.terminate(WITHIN)?;
    redis.cli(&["HDEL", "mcpt:tools", "flaky"])?;
    let ask = json!({ "id": new }).to_string();
    let unserved = post_json(&client, &origin, "/console/api/dead/redrive", &ask).await?;
    ensure!(
        unserved.status == 409,
        "{}: {}",
        unserved.status,
        unserved.text
    );
    ensure!(
        unserved.json()?["error"]
            .as_str()
            .is_some_and(|e| e.contains("no worker serves tool flaky now; nothing was created")),
        "{}",
        unserved.text
    );
    let dead = get(&client, "/console/api/dead").await?.json()?;
    ensure!(dead["dead"][1]["redriven"].is_null(), "{dead}");
    Ok(())
}
