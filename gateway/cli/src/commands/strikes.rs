//! `strike`, `restore` and `strikes`: the kill switch, written to and read from Redis
//! (`mcp_tasks_store::strikes`). Gateways and workers read the strikes once a second: new
//! calls of a struck tool get a tool error, its queued jobs are held; a restore puts the
//! held jobs back on their queues at once (workers would within a few seconds too).

use mcp_tasks_shared::protocol::time::{now_millis, rfc3339_millis};
use mcp_tasks_store::Store;
use mcp_tasks_store::strikes::{Strike, strike_id};
use serde_json::Value;

use super::Fail;
use super::ops::{TIMEOUT, ask, connect, table};

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
    let adverts = ask(url, store.adverts()).await?;
    let schemas: Vec<&Value> = adverts
        .iter()
        .filter(|a| a.tool.name == tool)
        .map(|a| &a.tool.input_schema)
        .collect();
    let known = !schemas.is_empty();
    // A --where naming no argument of the tool would match no call: refuse it rather than
    // strike nothing. Checked only where the tool is advertised with named properties.
    if let Some((arg, _)) = &strike.when
        && let Some(names) = argument_names(&schemas)
        && !names.iter().any(|n| n == arg)
    {
        return Err(Fail::usage(format!(
            "--where {arg}=…: tool {tool} has no argument {arg:?} (its arguments: {})",
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            }
        )));
    }
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
    if !ask(url, store.lift_strike(&strike_id(tool, when.as_ref()))).await? {
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
    let what = Strike {
        tool: tool.to_owned(),
        when,
        at_ms: 0,
        cancel_running: false,
    }
    .describe();
    // The strike is lifted: that is the command's work, done. Releasing the held jobs here
    // only saves the workers their few seconds; when it fails, they release the rest.
    match tokio::time::timeout(TIMEOUT, release(&store)).await {
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

/// Queue again the held jobs no strike in force covers; how many.
async fn release(store: &Store) -> Result<usize, mcp_tasks_store::StoreError> {
    let left = store.strikes().await?;
    let queues = store.queue_names().await?;
    store.release_held(&queues, &left).await
}

/// The argument names the advertised input schemas `schemas` of one tool declare (the
/// union over workers); `None` when there is no advert or one declares no `properties`
/// (then any argument may be passed and none can be refused).
fn argument_names(schemas: &[&Value]) -> Option<Vec<String>> {
    if schemas.is_empty() {
        return None;
    }
    let mut names = Vec::new();
    for schema in schemas {
        for name in schema.get("properties")?.as_object()?.keys() {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
    }
    names.sort();
    Some(names)
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

    #[test]
    fn argument_names_come_from_the_advertised_schemas() {
        let a = serde_json::json!({"type": "object", "properties": {"repo": {}, "n": {}}});
        let b = serde_json::json!({"type": "object", "properties": {"env": {}}});
        let open = serde_json::json!({"type": "object"});
        assert_eq!(
            argument_names(&[&a, &b]),
            Some(vec!["env".into(), "n".into(), "repo".into()])
        );
        assert_eq!(argument_names(&[&a, &open]), None);
        assert_eq!(argument_names(&[]), None);
    }
}
