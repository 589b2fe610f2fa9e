//! How an entry's fields are read: the fields every kind takes ([`Common`]), the readers
//! of the field types that have a wording of their own (durations, policies, byte counts,
//! variable names), and the one place a serde error becomes a [`FieldError`].
//!
//! Each kind declares its own fields as a struct in its module (`catalog/command.rs`,
//! `catalog/http.rs`, `catalog/upstream.rs`); [`read`] checks an entry's keys against
//! the union of [`Common`]'s and the kind's field names once, then reads both. (Serde's
//! `deny_unknown_fields` cannot be combined with `flatten`, and its message would not name
//! the field as ours do.) A required field is an `Option` here, so that "missing" is said
//! by the kind with a hint; what serde cannot check (placeholders, variables present,
//! URL schemes, regular expressions) the kind checks after reading.

use std::time::Duration;

use mcp_tasks_shared::config::parse_duration;
use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use serde::{Deserialize, de::Error as _};

use super::{DEFAULT_MAX_OUTPUT, FieldError, bad};
use mcp_tasks_worker::{Policy, Priority, Rate, RateError, RetryPolicy};

/// What is wrong with the value of one of the common fields; serde carries its text to
/// [`typed`], which makes it the [`FieldError`]'s problem.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ValueError {
    /// Not a positive duration.
    #[error("{0}: expected a duration like \"250ms\", \"30s\", \"5m\", \"1h\"")]
    Duration(toml::Value),
    /// Not a boolean.
    #[error("expected true or false")]
    Flag,
    /// Not one of the policies.
    #[error("{0}: expected \"task\", \"auto\", \"sync\" or \"task_only\"")]
    Policy(toml::Value),
    /// A `rate` that is not a string.
    #[error("{0}: expected starts per window, like \"10/min\"")]
    RateType(toml::Value),
    /// A `rate` string that is not starts per window.
    #[error(transparent)]
    Rate(#[from] RateError),
    /// A `max_running` that is not a whole number of at least 1.
    #[error("{0}: expected a whole number of at least 1")]
    MaxRunning(toml::Value),
    /// A `retry_on_exit` that is not a list of exit codes.
    #[error("{0}: expected a list of exit codes from 1 to 255, like [75]")]
    ExitCodes(toml::Value),
    /// A `max_output` that is not a positive number.
    #[error("expected a positive number of bytes")]
    MaxOutput,
    /// Not one of the priorities.
    #[error("{0}: expected \"high\", \"normal\" or \"low\"")]
    Priority(toml::Value),
    /// A `max_result_bytes` out of range.
    #[error("{0}: expected a number of bytes from 1024 to {MOST_RESULT_BYTES}")]
    MaxResultBytes(toml::Value),
    /// A `dead_letters` that is neither a positive duration nor `false`.
    #[error("{0}: expected how long to keep them, like \"7d\", or false")]
    DeadLetters(toml::Value),
    /// An `env` that is not a list of variable names.
    #[error("expected a list of variable names (no '=', PATH is always passed)")]
    EnvNames,
}

/// What is wrong with a `retry` table.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RetryError {
    /// Not a table.
    #[error("{0}: {RETRY_SHAPE}")]
    NotTable(toml::Value),
    /// A key other than `attempts`, `initial` and `max`.
    #[error("unknown key {0:?}: {RETRY_SHAPE}")]
    UnknownKey(String),
    /// No `attempts`.
    #[error("attempts missing: {RETRY_SHAPE}")]
    NoAttempts,
    /// `attempts` out of range or not a whole number.
    #[error("attempts {0}: expected a whole number from 1 to 100")]
    Attempts(toml::Value),
    /// `initial` or `max` (the key) not a positive duration.
    #[error("{key} {value}: expected a duration like \"250ms\", \"30s\", \"5m\"")]
    Duration {
        key: &'static str,
        value: toml::Value,
    },
    /// `max` shorter than `initial`.
    #[error("max ({max:?}) is shorter than initial ({initial:?})")]
    MaxBelowInitial { max: Duration, initial: Duration },
}

/// How a `retry` table is written, for [`RetryError`]'s messages.
const RETRY_SHAPE: &str = "expected a table like { attempts = 3, initial = \"1s\", max = \"1m\" }";

/// The fields every kind takes (`[[upstream]]` refuses `description` and `input_schema`).
#[derive(Debug, Deserialize)]
pub(super) struct Common {
    pub(super) name: Option<String>,
    pub(super) description: Option<String>,
    pub(super) input_schema: Option<serde_json::Value>,
    #[serde(default, deserialize_with = "policy")]
    pub(super) policy: Option<Policy>,
    pub(super) queue: Option<String>,
    pub(super) ttl: Option<Limit>,
    pub(super) poll_interval: Option<Limit>,
    pub(super) timeout: Option<Limit>,
    #[serde(default, deserialize_with = "flag")]
    pub(super) outlives_caller: bool,
    #[serde(default, deserialize_with = "retry")]
    pub(super) retry: Option<RetryPolicy>,
    #[serde(default, deserialize_with = "max_running")]
    pub(super) max_running: Option<u32>,
    pub(super) concurrency_key: Option<String>,
    #[serde(default, deserialize_with = "rate")]
    pub(super) rate: Option<Rate>,
    #[serde(default, deserialize_with = "dead_letters")]
    pub(super) dead_letters: Option<Option<Duration>>,
    #[serde(default, deserialize_with = "flag")]
    pub(super) dead_letter_tool_errors: bool,
    #[serde(default, deserialize_with = "max_result_bytes")]
    pub(super) max_result_bytes: Option<usize>,
    #[serde(default, deserialize_with = "priority")]
    pub(super) priority: Option<Priority>,
}

/// The largest `max_result_bytes` an entry may set: 64 MiB. A result is held whole in the
/// worker, in Redis and in every gateway that answers for it.
pub(super) const MOST_RESULT_BYTES: usize = 64 << 20;

/// A positive duration like `30s`, and the text it was written as (for messages).
#[derive(Debug, Clone)]
pub(crate) struct Limit {
    pub(crate) value: Duration,
    pub(crate) written: String,
}

impl<'de> Deserialize<'de> for Limit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        checked(d, |v| {
            v.as_str()
                .and_then(|s| {
                    let written = s.trim();
                    parse_duration(written)
                        .filter(|d| !d.is_zero())
                        .map(|value| Limit {
                            value,
                            written: written.to_owned(),
                        })
                })
                .ok_or_else(|| ValueError::Duration(v.clone()))
        })
    }
}

/// One entry read as [`Common`] and the kind's fields `K`.
///
/// # Errors
/// A key neither declares (listed with those allowed, less `refused`, which the caller
/// words itself), or a field of the wrong type or value.
pub(super) fn read<K: DeserializeOwned>(
    entry: &toml::Table,
    refused: &[&str],
) -> Result<(Common, K), FieldError> {
    let known: Vec<&str> = field_names::<Common>()
        .iter()
        .chain(field_names::<K>())
        .copied()
        .filter(|f| !refused.contains(f))
        .collect();
    if let Some(key) = entry
        .keys()
        .find(|k| !known.contains(&k.as_str()) && !refused.contains(&k.as_str()))
    {
        return Err(bad(
            key,
            format!("unknown field (expected one of {})", known.join(", ")),
        ));
    }
    Ok((typed(entry)?, typed(entry)?))
}

/// `entry` as `T`, which ignores the keys it does not declare.
fn typed<T: DeserializeOwned>(entry: &toml::Table) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(toml::Value::Table(entry.clone())).map_err(|e| {
        let field = e.path().iter().next().map(ToString::to_string);
        let message = e.into_inner().message().trim().to_owned();
        // Serde says "invalid type: integer `3`, expected a string"; the value is in the
        // file, the expectation is the news.
        let problem = match message.split_once(", expected ") {
            Some((head, want)) if head.starts_with("invalid type: ") => format!("expected {want}"),
            _ => message,
        };
        bad(field.as_deref().unwrap_or("?"), problem)
    })
}

/// The names of `T`'s fields, as serde's derive hands them to `deserialize_struct`.
fn field_names<T: DeserializeOwned>() -> &'static [&'static str] {
    struct Probe<'a>(&'a mut &'static [&'static str]);

    impl<'de> Deserializer<'de> for Probe<'_> {
        type Error = de::value::Error;

        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(Self::Error::custom("not a struct"))
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(Self::Error::custom("only the field names were wanted"))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }

    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Probe(&mut fields));
    fields
}

/// Read the field as TOML, then `check` it; its `Err` is the whole problem.
pub(super) fn checked<'de, D: Deserializer<'de>, T, E: std::error::Error>(
    d: D,
    check: impl FnOnce(&toml::Value) -> Result<T, E>,
) -> Result<T, D::Error> {
    let v = toml::Value::deserialize(d)?;
    check(&v).map_err(D::Error::custom)
}

/// `true` or `false`.
pub(super) fn flag<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    checked(d, |v| v.as_bool().ok_or(ValueError::Flag))
}

fn policy<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Policy>, D::Error> {
    checked(d, |v| match v.as_str() {
        Some("task") => Ok(Some(Policy::Task)),
        Some("auto") => Ok(Some(Policy::Auto)),
        Some("sync") => Ok(Some(Policy::Sync)),
        Some("task_only") => Ok(Some(Policy::TaskOnly)),
        _ => Err(ValueError::Policy(v.clone())),
    })
}

/// `retry = { attempts = 3, initial = "1s", max = "1m" }`: attempts (runs in all, at least
/// 1) required; `initial` 1 s and `max` 1 min by default.
fn retry<'de, D: Deserializer<'de>>(d: D) -> Result<Option<RetryPolicy>, D::Error> {
    checked(d, |v| {
        // Walked by hand: a derived struct's messages (unknown field `tries`, ...) are not ours.
        let t = v
            .as_table()
            .ok_or_else(|| RetryError::NotTable(v.clone()))?;
        if let Some(k) = t
            .keys()
            .find(|k| !["attempts", "initial", "max"].contains(&k.as_str()))
        {
            return Err(RetryError::UnknownKey(k.clone()));
        }
        let attempts = match t.get("attempts") {
            None => return Err(RetryError::NoAttempts),
            Some(n) => n
                .as_integer()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| (1..=100).contains(n))
                .ok_or_else(|| RetryError::Attempts(n.clone()))?,
        };
        let duration = |key: &'static str, default: Duration| -> Result<Duration, RetryError> {
            match t.get(key) {
                None => Ok(default),
                Some(v) => v
                    .as_str()
                    .and_then(|s| parse_duration(s.trim()))
                    .filter(|d| !d.is_zero())
                    .ok_or_else(|| RetryError::Duration {
                        key,
                        value: v.clone(),
                    }),
            }
        };
        let initial = duration("initial", Duration::from_secs(1))?;
        let max = duration("max", Duration::from_secs(60))?;
        if max < initial {
            return Err(RetryError::MaxBelowInitial { max, initial });
        }
        Ok(Some(RetryPolicy {
            attempts,
            initial,
            max,
        }))
    })
}

/// `rate = "10/min"`.
fn rate<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Rate>, D::Error> {
    checked(d, |v| -> Result<_, ValueError> {
        let text = v.as_str().ok_or_else(|| ValueError::RateType(v.clone()))?;
        Ok(Some(Rate::parse(text)?))
    })
}

/// `max_running`: a whole number of at least 1.
/// `dead_letters = "7d"` (how long a task that failed for good stays listed) or `false`
/// (not kept): `Some(None)` for `false`.
fn dead_letters<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<Duration>>, D::Error> {
    checked(d, |v| match v {
        toml::Value::Boolean(false) => Ok(Some(None)),
        toml::Value::String(s) => parse_duration(s)
            .filter(|d| !d.is_zero())
            .map(|d| Some(Some(d)))
            .ok_or_else(|| ValueError::DeadLetters(v.clone())),
        _ => Err(ValueError::DeadLetters(v.clone())),
    })
}

fn max_running<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    checked(d, |v| {
        v.as_integer()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n >= 1)
            .map(Some)
            .ok_or_else(|| ValueError::MaxRunning(v.clone()))
    })
}

/// `retry_on_exit = [75, …]`: exit codes (1 to 255) worth another try.
pub(super) fn exit_codes<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<i32>>, D::Error> {
    checked(d, |v| {
        v.as_array()
            .and_then(|a| {
                a.iter()
                    .map(|x| {
                        x.as_integer()
                            .and_then(|n| i32::try_from(n).ok())
                            .filter(|n| (1..=255).contains(n))
                    })
                    .collect::<Option<Vec<i32>>>()
            })
            .filter(|l| !l.is_empty())
            .map(Some)
            .ok_or_else(|| ValueError::ExitCodes(v.clone()))
    })
}

/// `max_output` when unset: [`DEFAULT_MAX_OUTPUT`].
pub(super) fn default_max_output() -> usize {
    DEFAULT_MAX_OUTPUT
}

/// `max_output`: a positive number of bytes.
pub(super) fn max_output<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    checked(d, |v| {
        v.as_integer()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| *n >= 1)
            .ok_or(ValueError::MaxOutput)
    })
}

/// `priority = "high"` (or `"normal"`, `"low"`).
fn priority<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Priority>, D::Error> {
    checked(d, |v| {
        v.as_str()
            .and_then(Priority::parse)
            .map(Some)
            .ok_or_else(|| ValueError::Priority(v.clone()))
    })
}

/// `max_result_bytes`: from 1024 (as `MCPT_MAX_RESULT_BYTES`) to [`MOST_RESULT_BYTES`].
fn max_result_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    checked(d, |v| {
        v.as_integer()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| (1024..=MOST_RESULT_BYTES).contains(n))
            .map(Some)
            .ok_or_else(|| ValueError::MaxResultBytes(v.clone()))
    })
}

/// `env`: names of variables copied from the worker's environment (PATH always is).
pub(super) fn env_names<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    checked(d, |v| {
        string_list(v)
            .filter(|l| {
                l.iter()
                    .all(|n| !n.is_empty() && !n.contains(['=', '\0']) && n != "PATH")
            })
            .map(Some)
            .ok_or(ValueError::EnvNames)
    })
}

/// A list of strings, or `None` when `v` is anything else.
pub(super) fn string_list(v: &toml::Value) -> Option<Vec<String>> {
    v.as_array()?
        .iter()
        .map(|x| x.as_str().map(str::to_owned))
        .collect()
}
