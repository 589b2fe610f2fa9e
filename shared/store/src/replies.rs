//! What the Lua scripts answer, read into types once (`FromRedisValue`), next to the
//! scripts' own `return` lines: every script replies with a flat list of strings whose first
//! item says which case it is (`{"run", fence, deadline}`, `{"skip", why}`, `{"ok"}`…).
//! A reply that fits no case is [`StoreError::Corrupt`]: a script and this file disagree.

use redis::{FromRedisValue, ParsingError, Value};

use crate::jobs::{Ask, Start, Write};
use crate::tasks::{Answer, Created, Differs, Limit};
use crate::{StoreError, StoreResult};

/// Read a script's reply (the items [`crate::Store::acknowledged`] returns, or a direct
/// call's) as `T`.
pub(crate) fn read<T: FromRedisValue>(reply: Vec<Value>) -> StoreResult<T> {
    T::from_redis_value(Value::Array(reply)).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// A reply's items as strings.
fn strings(v: Value) -> Result<Vec<String>, ParsingError> {
    Vec::<String>::from_redis_value(v)
}

/// The error for a reply of no known shape.
fn unexpected(script: &str, items: &[String]) -> ParsingError {
    format!("the {script} script answered {items:?}").into()
}

fn number<T: std::str::FromStr>(script: &str, item: &str) -> Result<T, ParsingError> {
    item.parse()
        .map_err(|_| format!("the {script} script answered {item:?} for a number").into())
}

impl FromRedisValue for Start {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let items = strings(v)?;
        match items.as_slice() {
            [case, fence, deadline] if case == "run" => Ok(Start::Run {
                fence: number("start", fence)?,
                deadline_ms: deadline.parse().ok(),
            }),
            [case, why] if case == "skip" => Ok(Start::Skip(why.clone())),
            _ => Err(unexpected("start", &items)),
        }
    }
}

/// The refusals every worker write shares, by their first item.
fn write_case(case: &str) -> Option<Write> {
    match case {
        "ok" => Some(Write::Ok),
        "gone" => Some(Write::Gone),
        "terminal" => Some(Write::Terminal),
        "fenced" => Some(Write::Fenced),
        _ => None,
    }
}

impl FromRedisValue for Write {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let items = strings(v)?;
        items
            .first()
            .and_then(|case| write_case(case))
            .ok_or_else(|| unexpected("write", &items))
    }
}

impl FromRedisValue for Ask {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let items = strings(v)?;
        match items.first().map(String::as_str) {
            Some("answered") if items.len() % 2 == 1 => {
                let mut pairs = items.into_iter().skip(1);
                Ok(Ask::Answered(
                    std::iter::from_fn(|| Some((pairs.next()?, pairs.next()?))).collect(),
                ))
            }
            Some("waiting") => Ok(Ask::Waiting),
            Some(case) => write_case(case)
                .map(Ask::Refused)
                .ok_or_else(|| unexpected("ask", &items)),
            None => Err(unexpected("ask", &items)),
        }
    }
}

impl FromRedisValue for Answer {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let items = strings(v)?;
        match items.as_slice() {
            [case] if case == "ok" => Ok(Answer::Ok),
            [case] if case == "notfound" => Ok(Answer::NotFound),
            [case, key, method] if case == "invalid" => Ok(Answer::Invalid {
                key: key.clone(),
                method: method.clone(),
            }),
            _ => Err(unexpected("answer", &items)),
        }
    }
}

impl FromRedisValue for Created {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        created(&strings(v)?)
    }
}

/// The create script's items (or the limits script's refusal).
fn created(items: &[String]) -> Result<Created, ParsingError> {
    match items {
        [case, which] if case == "limit" => Ok(Created::Limited(match which.as_str() {
            "rate" => Limit::PerMinute,
            _ => Limit::Active,
        })),
        [case, which] if case == "differs" => Ok(Created::Conflict(match which.as_str() {
            "tool" => Differs::Tool,
            _ => Differs::Arguments,
        })),
        [case] if case == "existing" => Ok(Created::Existing),
        [at] => number("create", at).map(Created::At),
        _ => Err(unexpected("create", items)),
    }
}

/// The limits script's reply in a cluster: counted, or refused as [`Created::Limited`].
pub(crate) enum Counted {
    /// The owner's counts took the task.
    Yes,
    /// The task was counted before (a keyed call's retry): nothing was counted now.
    Known,
    /// Refused by a limit.
    Refused(Created),
}

impl FromRedisValue for Counted {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let items = strings(v)?;
        match items.first().map(String::as_str) {
            Some("limit") => created(&items).map(Counted::Refused),
            Some("known") => Ok(Counted::Known),
            _ => Ok(Counted::Yes),
        }
    }
}

/// The cancel script's reply.
pub(crate) struct Cancelled {
    /// The owner has such a task (ended now or before).
    pub(crate) found: bool,
    /// The tool of a task cancelled before any worker ran it (counted by the caller).
    pub(crate) unrun_tool: Option<String>,
}

impl FromRedisValue for Cancelled {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let mut items = strings(v)?.into_iter();
        Ok(Cancelled {
            found: items.next().is_some_and(|s| s == "ok"),
            unrun_tool: items.next(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(items: &[&str]) -> Vec<Value> {
        items
            .iter()
            .map(|s| Value::BulkString(s.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn each_case_reads_into_its_variant() {
        assert!(matches!(
            read::<Start>(reply(&["run", "7", ""])),
            Ok(Start::Run {
                fence: 7,
                deadline_ms: None
            })
        ));
        assert_eq!(read::<Write>(reply(&["fenced"])).ok(), Some(Write::Fenced));
        assert_eq!(
            read::<Ask>(reply(&["answered", "k", "{}"])).ok(),
            Some(Ask::Answered(vec![("k".into(), "{}".into())]))
        );
        assert_eq!(
            read::<Ask>(reply(&["gone"])).ok(),
            Some(Ask::Refused(Write::Gone))
        );
        assert_eq!(
            read::<Created>(reply(&["limit", "rate"])).ok(),
            Some(Created::Limited(Limit::PerMinute))
        );
        assert_eq!(
            read::<Created>(reply(&["123"])).ok(),
            Some(Created::At(123))
        );
        let c = read::<Cancelled>(reply(&["ok", "sleep"])).expect("reads");
        assert!(c.found && c.unrun_tool.as_deref() == Some("sleep"));
    }

    #[test]
    fn a_reply_of_no_known_shape_is_corrupt() {
        for bad in [
            read::<Start>(reply(&["run", "x", "1"])).err(),
            read::<Write>(reply(&["maybe"])).err(),
            read::<Ask>(reply(&["answered", "k"])).err(),
            read::<Answer>(reply(&["invalid", "k"])).err(),
            read::<Created>(reply(&["soon"])).err(),
        ] {
            assert!(matches!(bad, Some(StoreError::Corrupt(_))), "{bad:?}");
        }
    }
}
