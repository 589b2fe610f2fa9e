//! `strike`, `restore` and `strikes`: the kill switch, written to and read from Redis
//! (`mcp_tasks_store::strikes`). Gateways and workers read the strikes once a second: new
//! calls of a struck tool get a tool error, its queued jobs are held; a restore puts the
//! held jobs back on their queues at once (workers would within a few seconds too).

use mcp_tasks_shared::protocol::time::{now_millis, rfc3339_millis};
use mcp_tasks_store::strikes::{Strike, strike_id};

use super::Fail;
use super::ops::{ask, connect, table};

/// `--where ARG=VALUE` as a pair.
///
/// # Errors
/// No `=`, or an empty argument name.
pub(crate) fn parse_where(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((arg, value)) if !arg.trim().is_empty() => {
            Ok((arg.trim().to_owned(), value.to_owned()))
        }
        _ => Err(format!(
            "--where {text:?}: expected ARG=VALUE, an argument name and the value to match"
        )),
    }
}

/// `strike TOOL [--where ARG=VALUE] [--cancel-running]`.
pub(crate) async fn strike(
    url: &str,
    tool: &str,
    when: Option<(String, String)>,
    cancel_running: bool,
) -> Result<(), Fail> {
    if tool.trim().is_empty() || tool.contains(char::is_whitespace) {
        return Err(Fail::usage(format!("{tool:?} is not a tool name")));
    }
    let store = connect(url).await?;
    let strike = Strike {
        tool: tool.to_owned(),
        when,
        at_ms: now_millis(),
        cancel_running,
    };
    let known = ask(url, store.adverts())
        .await?
        .iter()
        .any(|a| a.tool.name == tool);
    let new = ask(url, store.strike(&strike)).await?;
    if !known {
        eprintln!("mcp-tasks: note: no worker advertises a tool named {tool}; struck anyway");
    }
    println!(
        "{} {}: new calls are refused and queued jobs held{}",
        if new { "struck" } else { "struck again" },
        strike.describe(),
        if cancel_running {
            "; running ones are cancelled"
        } else {
            "; running ones finish"
        }
    );
    Ok(())
}

/// `restore TOOL [--where ARG=VALUE]`: lift the strike and queue its held jobs again.
pub(crate) async fn restore(
    url: &str,
    tool: &str,
    when: Option<(String, String)>,
) -> Result<(), Fail> {
    let store = connect(url).await?;
    let id = strike_id(tool, when.as_ref());
    if !ask(url, store.lift_strike(&id)).await? {
        let left = ask(url, store.strikes()).await?;
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
    let left = ask(url, store.strikes()).await?;
    let queues = ask(url, store.queue_names()).await?;
    let released = ask(url, store.release_held(&queues, &left)).await?;
    println!("restored {id}: {released} held jobs queued again");
    Ok(())
}

/// `strikes`: the strikes in force.
pub(crate) async fn list(url: &str) -> Result<(), Fail> {
    let store = connect(url).await?;
    let strikes = ask(url, store.strikes()).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn where_takes_arg_equals_value() {
        assert_eq!(parse_where("repo=web"), Ok(("repo".into(), "web".into())));
        assert_eq!(parse_where("q=a=b"), Ok(("q".into(), "a=b".into())));
        assert_eq!(parse_where("n="), Ok(("n".into(), String::new())));
        assert!(parse_where("repo").is_err());
        assert!(parse_where("=web").is_err());
    }
}
