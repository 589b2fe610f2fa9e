//! `strike`, `restore` and `strikes`: the kill switch, written to and read from Redis
//! (`mcp_tasks_store::strikes`). Gateways and workers read the strikes once a second: new
//! calls of a struck tool get a tool error, its queued jobs are held; a restore puts the
//! held jobs back on their queues at once (workers would within a few seconds too).

use mcp_tasks_shared::protocol::time::{now_millis, rfc3339_millis};
use mcp_tasks_store::strikes::{self, Strike, strike_id};

use super::Fail;
use super::ops::{TIMEOUT, ask, connect, table};

/// `--where ARG=VALUE` as a pair.
///
/// # Errors
/// No `=`, or an empty argument name.
pub(crate) fn parse_where(text: &str) -> Result<(String, String), String> {
    strikes::parse_where(text).map_err(|e| format!("--where {e}"))
}

/// `strike TOOL [--where ARG=VALUE] [--cancel-running]`.
pub(crate) async fn strike(
    url: &str,
    tool: &str,
    when: Option<(String, String)>,
    cancel_running: bool,
) -> Result<(), Fail> {
    let strike = Strike {
        tool: tool.to_owned(),
        when,
        at_ms: now_millis(),
        cancel_running,
    };
    // The name first, before any connection: no advert needed to refuse it.
    strikes::check(&strike, &[]).map_err(Fail::usage)?;
    let store = connect(url).await?;
    let adverts = ask(url, store.fleet().adverts()).await?;
    strikes::check(&strike, &adverts).map_err(|e| match &strike.when {
        Some((arg, value)) => Fail::usage(format!("--where {arg}={value}: {e}")),
        None => Fail::usage(e),
    })?;
    let known = adverts.iter().any(|a| a.tool.name == tool);
    let new = ask(url, store.controls().strike(&strike)).await?;
    if !known {
        eprintln!("mcp-tasks: note: no worker advertises a tool named {tool}; struck anyway");
    }
    println!("{}", strike.struck_message(new));
    Ok(())
}

/// `restore TOOL [--where ARG=VALUE]`: lift the strike and queue its held jobs again.
pub(crate) async fn restore(
    url: &str,
    tool: &str,
    when: Option<(String, String)>,
) -> Result<(), Fail> {
    let store = connect(url).await?;
    if !ask(
        url,
        store
            .controls()
            .lift_strike(&strike_id(tool, when.as_ref())),
    )
    .await?
    {
        let left = ask(url, store.controls().strikes()).await?;
        let names: Vec<String> = left.0.iter().map(Strike::describe).collect();
        return Err(Fail::runtime(format!(
            "no strike on {}{}",
            Strike {
                tool: tool.to_owned(),
                when,
                at_ms: 0,
                cancel_running: false
            }
            .describe(),
            if names.is_empty() {
                " (none is in force)".to_owned()
            } else {
                format!(" (in force: {})", names.join(", "))
            }
        )));
    }
    let what = Strike {
        tool: tool.to_owned(),
        when,
        at_ms: 0,
        cancel_running: false,
    }
    .describe();
    // The strike is lifted: that is the command's work, done. Releasing the held jobs here
    // only saves the workers their few seconds; when it fails, they release the rest.
    match tokio::time::timeout(TIMEOUT, store.controls().release_all_held()).await {
        Ok(Ok(released)) => println!("restored {what}: {released} held jobs queued again"),
        Ok(Err(e)) => println!(
            "restored {what}; held jobs not all queued again here ({}): the workers queue \
             the rest within a few seconds",
            mcp_tasks_shared::error_chain(&e)
        ),
        Err(_) => println!(
            "restored {what}; queueing the held jobs again took over {} s here: the workers \
             queue the rest within a few seconds",
            TIMEOUT.as_secs()
        ),
    }
    Ok(())
}

/// `strikes`: the strikes in force.
pub(crate) async fn list(url: &str) -> Result<(), Fail> {
    let store = connect(url).await?;
    let strikes = ask(url, store.controls().strikes()).await?;
    if strikes.is_empty() {
        println!("no strikes");
        return Ok(());
    }
    let rows: Vec<Vec<String>> = strikes
        .0
        .iter()
        .map(|s| {
            vec![
                s.tool.clone(),
                s.when
                    .as_ref()
                    .map_or("-".to_owned(), |(a, v)| format!("{a}={v}")),
                rfc3339_millis(s.at_ms),
                if s.cancel_running { "cancel" } else { "finish" }.to_owned(),
            ]
        })
        .collect();
    table(&["TOOL", "WHERE", "SINCE", "RUNNING"], &rows);
    Ok(())
}
