//! `dead` and `redrive`: the tasks that failed for good (dead letters, kept by the finish
//! script: `mcp_tasks_store::dead`), read from Redis, and one of them run again as a new
//! task of the same tool, arguments and owner, linked both ways.

use std::time::Duration;

use mcp_tasks_shared::protocol::time::{now_millis, rfc3339_millis};
use mcp_tasks_store::dead::{DeadLetter, Redrive, one_line};

use super::Fail;
use super::ops::{age, ask, connect, table};

/// `--since`: a positive duration like `1h`.
///
/// # Errors
/// Not a positive duration.
pub(crate) fn parse_since(text: &str) -> Result<Duration, String> {
    mcp_tasks_shared::config::parse_duration(text)
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{text:?}: expected a duration like 30m, 1h or 7d"))
}

/// `dead [--tool T] [--since D] [--json]`: the live letters, newest first.
pub(crate) async fn list(
    url: &str,
    tool: Option<&str>,
    since: Option<Duration>,
    json: bool,
) -> Result<(), Fail> {
    let store = connect(url).await?;
    let queues = ask(url, store.fleet().queue_names()).await?;
    let letters = ask(url, store.dead().list(&queues)).await?;
    let after = since.map(|d| now_millis() - i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let shown: Vec<&DeadLetter> = letters
        .iter()
        .filter(|l| tool.is_none_or(|t| l.tool == t))
        .filter(|l| after.is_none_or(|at| l.at_ms >= at))
        .collect();
    if json {
        for letter in shown {
            let line = serde_json::to_string(letter)
                .map_err(|e| Fail::runtime(format!("cannot encode a dead letter: {e}")))?;
            println!("{line}");
        }
        return Ok(());
    }
    if shown.is_empty() {
        println!("no dead letters{}", filters_said(tool, since));
        return Ok(());
    }
    let rows: Vec<Vec<String>> = shown
        .iter()
        .map(|l| {
            vec![
                rfc3339_millis(l.at_ms),
                l.task_id.clone(),
                l.tool.clone(),
                one_line(&l.owner, 16),
                l.attempts.to_string(),
                one_line(&l.reason, 60),
                l.redriven.clone().unwrap_or_else(|| "-".to_owned()),
            ]
        })
        .collect();
    table(
        &[
            "FAILED", "TASK", "TOOL", "OWNER", "TRIES", "ERROR", "REDRIVEN",
        ],
        &rows,
    );
    Ok(())
}

/// `redrive ID`: run the letter of task `id` again as a new task, where its tool is served
/// now (`mcp_tasks_store::dead::DeadLetters::redrive_served`, as the console's button).
pub(crate) async fn redrive(url: &str, id: &str) -> Result<(), Fail> {
    let store = connect(url).await?;
    let queues = ask(url, store.fleet().queue_names()).await?;
    let Some(letter) = ask(url, store.dead().find(&queues, id)).await? else {
        return Err(Fail::runtime(format!(
            "no dead letter for task {id} (`mcp-tasks dead` lists them; they are kept a \
             while after the failure, see the tool's dead_letters)"
        )));
    };
    let done = ask(url, store.dead().redrive_served(&letter)).await?;
    match done {
        Redrive::Unserved => Err(Fail::runtime(done.message(&letter))),
        Redrive::Made(_) | Redrive::Before(_) => {
            println!("{}", done.message(&letter));
            Ok(())
        }
    }
}

/// What an empty listing was filtered by, for its one line.
fn filters_said(tool: Option<&str>, since: Option<Duration>) -> String {
    let mut said = String::new();
    if let Some(tool) = tool {
        said.push_str(&format!(" of tool {tool}"));
    }
    if let Some(since) = since {
        let ms = i64::try_from(since.as_millis()).unwrap_or(i64::MAX);
        said.push_str(&format!(" in the last {}", age(ms)));
    }
    said
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_a_positive_duration() {
        assert_eq!(parse_since("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_since("0s").is_err());
        assert!(
            parse_since("soon")
                .unwrap_err()
                .contains("expected a duration")
        );
    }
}
