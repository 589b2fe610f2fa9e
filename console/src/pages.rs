//! The console's HTML, rendered on the server with maud (which escapes every value it
//! inserts). Each page's live part is a `<main data-live>` the browser script
//! (`console.js`) fetches again as a fragment (`?fragment=1`) when the event stream says
//! something changed: rendering stays here, in one place.

use maud::{DOCTYPE, Markup, html};
use mcp_tasks_protocol::time::now_millis;
use mcp_tasks_store::console::TaskDetail;
use mcp_tasks_store::dead::{DeadLetter, one_line};

use super::api::{self, Filter};
use super::chart;
use super::dead::DeadFilter;
use super::rates::Quantiles;
use super::view::{Fleet, Known, View};

/// The stylesheet, served as `/console/static/console.css`.
pub(crate) const CSS: &str = include_str!("console.css");
/// The live-update script, served as `/console/static/console.js`.
pub(crate) const JS: &str = include_str!("console.js");

/// Milliseconds as `850ms`, `12.3s`, `4m05s`, `2h10m`.
pub(crate) fn age(ms: i64) -> String {
    let ms = ms.max(0);
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{}m{:02}s", ms / 60_000, ms % 60_000 / 1000),
        _ => format!("{}h{:02}m", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

fn time(ms: i64) -> String {
    mcp_tasks_protocol::time::rfc3339_millis(ms)
}

/// The frame around a page: title, navigation, who is signed in.
fn layout(title: &str, principal: Option<&str>, main: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · mcp-tasks console" }
                link rel="stylesheet" href="/console/static/console.css";
                script src="/console/static/console.js" defer {}
            }
            body {
                header {
                    strong { "mcp-tasks" }
                    nav aria-label="Console" {
                        a href="/console/" { "Overview" }
                        a href="/console/tasks" { "Tasks" }
                        a href="/console/dead" { "Dead letters" }
                    }
                    @if let Some(p) = principal {
                        form method="post" action="/console/signout" class="signout" {
                            span { "signed in as " (p) }
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                (main)
            }
        }
    }
}

/// A run time in ms, as `age` writes it; `-` when nothing was measured.
fn run_time(q: Option<Quantiles>, pick: fn(&Quantiles) -> f64) -> String {
    q.map_or_else(|| "-".to_owned(), |q| age(pick(&q).round() as i64))
}

/// A rate per second, with one decimal below 10.
fn per_second(r: f64) -> String {
    if r < 10.0 {
        format!("{r:.1}")
    } else {
        format!("{r:.0}")
    }
}

/// The overview's live part.
pub(crate) fn overview_main(view: &View, fleet: &Fleet, scale: u64) -> Markup {
    let now = now_millis();
    let points = view.rate_points(now);
    let rate_top = chart::rate_scale(&points);
    let totals = view.rate_totals();
    let all = view.run_time(None);
    html! {
        main data-live="" {
            h1 { "Overview" }
            @if let Some(e) = &fleet.error { p.error role="alert" { "Refresh failed: " (e) } }
            p.muted { "As of " (time(fleet.refreshed_ms)) " (read every 2 s; the page redraws when something changes)" }
            h2 { "Queues" }
            @if fleet.queues.is_empty() { p { "No queues yet (no worker has started)." } } @else {
                table aria-label="Queues" {
                    thead { tr { th { "Queue" } th { "Depth" } th { "Lag" } th { "Pending (running)" } th { "Oldest waiting" } th { "Consumers" } th { "Held" } th { "Run time p50" } th { "Run time p99" } } }
                    tbody { @for q in &fleet.queues {
                        @let rt = view.run_time(Some(&q.name));
                        tr {
                            td { (q.name) } td.n { (q.length) } td.n { (q.lag) } td.n { (q.pending) }
                            td.n { (q.oldest_waiting_ms.map_or_else(|| "-".to_owned(), age)) } td.n { (q.consumers) } td.n { (q.held) }
                            td.n { (run_time(rt, |q| q.p50_ms)) } td.n { (run_time(rt, |q| q.p99_ms)) }
                        }
                    } }
                }
            }
            h2 { "Jobs over the last 15 minutes" }
            figure.chart {
                img src={ "/console/chart/queues.svg?at=" (fleet.refreshed_ms) } width="720" height="160"
                    alt="Jobs waiting and running, all queues, over the last 15 minutes";
                figcaption {
                    span.waiting { "━ waiting (lag)" } " " span.running { "━ running (pending)" }
                    " · all queues · scale 0 to " (scale) " · now at the right"
                }
            }
            h2 { "Tasks per second over the last 15 minutes" }
            figure.chart {
                img src={ "/console/chart/rates.svg?at=" (fleet.refreshed_ms) } width="720" height="160"
                    alt="Tasks created, completed, failed and cancelled per second, all queues, over the last 15 minutes";
                figcaption {
                    span.created { "━ created" } " " span.completed { "━ completed" } " "
                    span.failed { "━ failed" } " " span.cancelled { "━ cancelled" }
                    " · all queues · per second, 10 s points · scale 0 to " (per_second(rate_top)) "/s · now at the right"
                }
            }
            p id="totals" {
                "Last 15 minutes: " (totals.created) " created, " (totals.completed) " completed, "
                (totals.failed) " failed, " (totals.cancelled) " cancelled; run time (call to end) p50 "
                (run_time(all, |q| q.p50_ms)) ", p99 " (run_time(all, |q| q.p99_ms)) "."
            }
            p.muted { "Counted by each gateway and worker and written every 5 s; a process' counts from before this console's first read are not shown." }
            h2 { "Workers" }
            @if fleet.workers.is_empty() { p { "No live workers." } } @else {
                table aria-label="Workers" {
                    thead { tr { th { "Worker" } th { "Queues" } th { "Tools" } th { "Slots in use" } th { "Last seen" } } }
                    tbody { @for w in &fleet.workers { tr {
                        td { code { (w.name) } } td { (w.queues.join(", ")) } td { (w.tools.join(", ")) }
                        td.n { (w.slots_in_use) } td.n { (age(i64::try_from(w.idle_ms).unwrap_or(i64::MAX))) " ago" }
                    } } }
                }
            }
            h2 { "Tools" }
            @if fleet.tools.is_empty() { p { "No tools advertised." } } @else {
                table aria-label="Tools" {
                    thead { tr { th { "Tool" } th { "Queue" } th { "Policy" } th { "Last heartbeat" } } }
                    tbody { @for t in &fleet.tools { tr {
                        td { (t.name) } td { (t.queue) } td { (t.policy) }
                        td.n { (age(t.heartbeat_age_ms)) " ago" @if t.stale { " (stale)" } }
                    } } }
                }
            }
            (strikes(fleet))
        }
    }
}

/// The kill switch: the strikes in force, each with its Restore button (what
/// `mcp-tasks restore` does).
fn strikes(fleet: &Fleet) -> Markup {
    html! {
        h2 { "Strikes" }
        @if fleet.strikes.is_empty() { p { "No strikes: every tool runs." } } @else {
            table aria-label="Strikes" {
                thead { tr { th { "Tool" } th { "Where" } th { "Since" } th { "Running calls" } th {} } }
                tbody { @for s in &fleet.strikes { tr {
                    td { (s.tool) } td { (s.when.as_deref().unwrap_or("-")) } td { (time(s.since_ms)) }
                    td { @if s.cancel_running { "cancelled" } @else { "left to finish" } }
                    td {
                        form method="post" action="/console/strikes/restore" {
                            input type="hidden" name="tool" value=(s.tool);
                            @if let Some(w) = &s.when { input type="hidden" name="where" value=(w); }
                            button type="submit" aria-label={ "Restore " (s.describe) } { "Restore" }
                        }
                    }
                } } }
            }
        }
    }
}

/// The form that strikes a tool: outside the live part, so a redraw never takes what is
/// being typed.
fn strike_form(fleet: &Fleet) -> Markup {
    let mut names: Vec<&str> = fleet.tools.iter().map(|t| t.name.as_str()).collect();
    names.dedup();
    html! {
        section.strike aria-label="Strike a tool" {
            h2 { "Strike a tool" }
            p.muted { "A strike refuses new calls with a tool error and holds queued ones until restored (or their TTL ends), on every gateway and worker within a second; as " code { "mcp-tasks strike" } " does." }
            form method="post" action="/console/strikes" {
                label { "Tool " input name="tool" required list="tool-names" autocomplete="off"; }
                datalist id="tool-names" { @for n in &names { option value=(n) {} } }
                label { "only where " input name="where" placeholder="ARG=VALUE" autocomplete="off"; }
                label { input type="checkbox" name="cancel_running" value="on"; " cancel running calls" }
                button type="submit" { "Strike" }
            }
        }
    }
}

/// A form's action refused: what was wrong, and the way back.
pub(crate) fn refused(why: &str, principal: Option<&str>) -> Markup {
    let page = html! {
        main {
            h1 { "Not done" }
            p.error role="alert" { (why) }
            p { a href="/console/" { "Back to the overview" } }
        }
    };
    layout("Not done", principal, page)
}

/// A form's action done, with something the operator should read.
pub(crate) fn done(what: &str, principal: Option<&str>) -> Markup {
    let page = html! {
        main {
            h1 { "Done" }
            p role="status" { (what) }
            p { a href="/console/" { "Back to the overview" } }
        }
    };
    layout("Done", principal, page)
}

/// `GET /console/`.
pub(crate) fn overview(view: &View, fleet: &Fleet, scale: u64, principal: Option<&str>) -> Markup {
    let page = html! { (overview_main(view, fleet, scale)) (strike_form(fleet)) };
    layout("Overview", principal, page)
}

/// The task list's live part.
pub(crate) fn tasks_main(view: &View, filter: &Filter) -> Markup {
    let now = now_millis();
    let rows = view.tasks(filter.limit, |k| filter.keeps(k));
    let status = filter.status.map(|s| s.as_str()).unwrap_or("");
    html! {
        main data-live="" {
            h1 { "Tasks" }
            form.filters method="get" action="/console/tasks" role="search" {
                label { "Status " select name="status" {
                    option value="" selected[status.is_empty()] { "any" }
                    @for s in ["working", "input_required", "completed", "failed", "cancelled"] {
                        option value=(s) selected[status == s] { (s) }
                    }
                } }
                label { "Tool " input name="tool" value=(filter.tool.as_deref().unwrap_or("")); }
                label { "Queue " input name="queue" value=(filter.queue.as_deref().unwrap_or("")); }
                label { "Task id " input name="q" value=(filter.id.as_deref().unwrap_or("")); }
                button type="submit" { "Filter" }
            }
            @if rows.is_empty() { p { "No tasks seen yet that match." } } @else {
                table aria-label="Tasks" {
                    thead { tr { th { "Task" } th { "Status" } th { "Message" } th { "Tool" } th { "Queue" } th { "Age" } th { "Owner" } } }
                    tbody { @for k in &rows {
                        @let (st, msg) = api::status_of(k);
                        tr data-task=(k.record.id) {
                            td { a href=(api::task_path(&k.record.id, &k.record.owner, "")) { code { (k.record.id) } } }
                            td { span class={ "status " (st) } { (st) } }
                            td { (msg.unwrap_or_default()) }
                            td { (k.record.tool) } td { (k.queue) }
                            td.n { (age(now - k.record.created_ms)) }
                            td { code { (k.record.owner) } }
                        }
                    } }
                }
            }
        }
    }
}

/// `GET /console/tasks`.
pub(crate) fn tasks(view: &View, filter: &Filter, principal: Option<&str>) -> Markup {
    layout("Tasks", principal, tasks_main(view, filter))
}

/// One dead letter's row: its task (a link to the task's page), the error in a line (the
/// whole of it as the cell's title), and its Redrive button or the task its redrive made.
fn dead_row(l: &DeadLetter, now: i64) -> Markup {
    html! {
        tr data-task=(l.task_id) {
            td { (time(l.at_ms)) br; span.muted { (age(now - l.at_ms)) " ago" } }
            td { a href=(api::task_path(&l.task_id, &l.owner, "")) { code { (l.task_id) } } }
            td { (l.tool) }
            td { code { (l.owner) } }
            td.n { (l.attempts) }
            td title=(l.reason) { (one_line(&l.reason, 80)) }
            td {
                @if let Some(made) = &l.redriven {
                    "as " a href=(api::task_path(made, &l.owner, "")) { code { (made) } }
                } @else if l.job.is_none() {
                    "arguments not kept: cannot run again"
                } @else {
                    form method="post" action="/console/dead/redrive" {
                        input type="hidden" name="id" value=(l.task_id);
                        button type="submit" aria-label={ "Redrive " (l.task_id) } { "Redrive" }
                    }
                }
            }
        }
    }
}

/// `GET /console/dead`: the dead letters passing `filter`, newest first.
pub(crate) fn dead(letters: &[DeadLetter], filter: &DeadFilter, principal: Option<&str>) -> Markup {
    let now = now_millis();
    let main = html! {
        main {
            h1 { "Dead letters" }
            p.muted { "Tasks that failed for good, as " code { "mcp-tasks dead" } " lists them, read when the page loads. Redrive runs one again as a new task of the same tool, arguments and owner, linked both ways, on the queue its tool is served on now (as " code { "mcp-tasks redrive" } " does)." }
            form.filters method="get" action="/console/dead" role="search" {
                label { "Tool " input name="tool" value=(filter.tool.as_deref().unwrap_or("")); }
                label { "Failed within " input name="since" placeholder="1h" value=(filter.since_text.as_deref().unwrap_or("")); }
                button type="submit" { "Filter" }
            }
            @if letters.is_empty() { p { "No dead letters that match." } } @else {
                table aria-label="Dead letters" {
                    thead { tr { th { "Failed" } th { "Task" } th { "Tool" } th { "Owner" } th { "Tries" } th { "Error" } th { "Redriven" } } }
                    tbody { @for l in letters { (dead_row(l, now)) } }
                }
            }
        }
    };
    layout("Dead letters", principal, main)
}

fn json_block(label: &str, v: &serde_json::Value) -> Markup {
    html! {
        h2 { (label) }
        pre aria-label=(label) { (serde_json::to_string_pretty(v).unwrap_or_default()) }
    }
}

/// A task's live part: status, timestamps, input requests, result or error.
pub(crate) fn task_main(k: &Known) -> Markup {
    let j = api::task(k, None, None);
    let r = &k.record;
    let (st, msg) = api::status_of(k);
    html! {
        main data-live="" {
            h1 { "Task " code { (r.id) } }
            dl {
                dt { "Status" } dd { span class={ "status " (st) } data-status=(st) { (st) } }
                dt { "Status message" } dd { (msg.unwrap_or_default()) }
                dt { "Tool" } dd { (r.tool) }
                dt { "Queue" } dd { (k.queue) }
                dt { "Owner" } dd { code { (r.owner) } }
                dt { "Created" } dd { (time(r.created_ms)) }
                dt { "Last updated" } dd { (time(r.updated_ms)) }
                dt { "TTL" } dd { (r.ttl_ms.map_or_else(|| "never expires".to_owned(), |t| age(i64::try_from(t).unwrap_or(i64::MAX)))) }
                dt { "Version" } dd { (r.version) }
                @if r.cancel_requested && !r.is_terminal() { dt { "Cancel" } dd { "requested" } }
            }
            @if !r.is_terminal() {
                form method="post" action=(api::task_path(&r.id, &r.owner, "/cancel")) {
                    button type="submit" { "Cancel" }
                }
            }
            @if !j["input_requests"].is_null() { (json_block("Pending input requests", &j["input_requests"])) }
            @if !j["result"].is_null() { (json_block("Result", &j["result"])) }
            @if !j["error"].is_null() { (json_block("Error", &j["error"])) }
        }
    }
}

/// `GET /console/tasks/{id}`: the live part, then what is read once per view (worker,
/// deliveries, trace).
pub(crate) fn task(
    k: &Known,
    detail: Option<&TaskDetail>,
    trace_url: Option<&str>,
    principal: Option<&str>,
) -> Markup {
    let j = api::task(k, detail, trace_url);
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::Null => "-".to_owned(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let main = html! {
        (task_main(k))
        aside aria-label="Execution" {
            h2 { "Execution" }
            dl {
                dt { "Worker" } dd { code { (text(&j["worker"])) } }
                dt { "Deliveries" } dd { (text(&j["deliveries"])) }
                dt { "Trace" } dd {
                    @if let Some(url) = j["trace_url"].as_str() { a href=(url) { code { (text(&j["trace_id"])) } } }
                    @else { code { (text(&j["trace_id"])) } }
                }
            }
            p.muted { "Worker, deliveries and trace are read when the page loads, while the job's entry exists." }
        }
    };
    layout("Task", principal, main)
}

/// `GET /console/signin`.
pub(crate) fn signin(refused: bool) -> Markup {
    let main = html! {
        main {
            h1 { "Sign in" }
            @if refused { p.error role="alert" { "Sign-in refused." } }
            form method="post" action="/console/signin" {
                label for="token" { "Token or JWT" }
                input id="token" name="token" type="password" autocomplete="off" required;
                button type="submit" { "Sign in" }
            }
        }
    };
    layout("Sign in", None, main)
}
