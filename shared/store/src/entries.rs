//! Stream entries as `XREADGROUP` returns them, taken apart by moving their bytes rather
//! than copying them. redis-rs' `StreamReadReply` first clones the whole reply (it tries
//! two layouts on copies), then builds a hash map per entry, and every `get` copies the
//! field again: a tenth of a worker's instructions per job went there.

use redis::streams::StreamId;
use redis::{FromRedisValue, ParsingError, Value};

/// One stream entry: its id and its fields, in the order they were written.
#[derive(Debug, Default)]
pub(crate) struct Entry {
    pub(crate) id: String,
    fields: Vec<(Value, Value)>,
}

impl Entry {
    /// Field `name` as text, moved out of the entry; `None` when it is absent (or was
    /// taken already) or is not text.
    pub(crate) fn take(&mut self, name: &str) -> Option<String> {
        let (_, value) = self
            .fields
            .iter_mut()
            .find(|(k, _)| matches!(k, Value::BulkString(b) if b == name.as_bytes()))?;
        match std::mem::replace(value, Value::Nil) {
            Value::BulkString(bytes) => String::from_utf8(bytes).ok(),
            Value::SimpleString(s) => Some(s),
            _ => None,
        }
    }

    fn from_value(v: Value) -> Result<Entry, ParsingError> {
        let Value::Array(parts) = v else {
            return Err(unexpected("a stream entry", &v));
        };
        let mut parts = parts.into_iter();
        let id = match parts.next() {
            Some(Value::BulkString(b)) => String::from_utf8(b)?,
            Some(Value::SimpleString(s)) => s,
            other => return Err(unexpected("an entry id", &other.unwrap_or(Value::Nil))),
        };
        let fields = match parts.next() {
            Some(Value::Array(flat)) => pairs(flat),
            Some(Value::Map(pairs)) => pairs,
            // An entry deleted while pending comes back with its fields nil.
            Some(Value::Nil) | None => Vec::new(),
            Some(other) => return Err(unexpected("entry fields", &other)),
        };
        Ok(Entry { id, fields })
    }
}

impl From<StreamId> for Entry {
    /// An entry as redis-rs' own stream replies hold it (`XAUTOCLAIM`: the rare path).
    fn from(s: StreamId) -> Entry {
        Entry {
            id: s.id,
            fields: s
                .map
                .into_iter()
                .map(|(k, v)| (Value::BulkString(k.into_bytes()), v))
                .collect(),
        }
    }
}

/// An `XREADGROUP` reply: each stream read, by key, with the entries it gave. A nil reply
/// (nothing new before the block ran out) is empty.
#[derive(Debug, Default)]
pub(crate) struct ReadReply(pub(crate) Vec<(String, Vec<Entry>)>);

impl FromRedisValue for ReadReply {
    fn from_redis_value(v: Value) -> Result<ReadReply, ParsingError> {
        let streams = match v {
            Value::Nil => return Ok(ReadReply::default()),
            // RESP2: [[key, entries], ...]; RESP3: {key: entries, ...}.
            Value::Array(rows) => rows
                .into_iter()
                .map(|row| match row {
                    Value::Array(kv) if kv.len() == 2 => {
                        let mut kv = kv.into_iter();
                        Ok((
                            kv.next().unwrap_or(Value::Nil),
                            kv.next().unwrap_or(Value::Nil),
                        ))
                    }
                    other => Err(unexpected("a [stream, entries] pair", &other)),
                })
                .collect::<Result<Vec<_>, _>>()?,
            Value::Map(pairs) => pairs,
            other => return Err(unexpected("an XREADGROUP reply", &other)),
        };
        let mut out = Vec::with_capacity(streams.len());
        for (key, entries) in streams {
            let key = match key {
                Value::BulkString(b) => String::from_utf8(b)?,
                Value::SimpleString(s) => s,
                other => return Err(unexpected("a stream key", &other)),
            };
            let entries = match entries {
                Value::Array(entries) => entries
                    .into_iter()
                    .map(Entry::from_value)
                    .collect::<Result<Vec<_>, _>>()?,
                Value::Nil => Vec::new(),
                other => return Err(unexpected("stream entries", &other)),
            };
            out.push((key, entries));
        }
        Ok(ReadReply(out))
    }
}

/// `[k1, v1, k2, v2, ...]` as pairs (an odd last element is dropped).
fn pairs(flat: Vec<Value>) -> Vec<(Value, Value)> {
    let mut out = Vec::with_capacity(flat.len() / 2);
    let mut it = flat.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        out.push((k, v));
    }
    out
}

fn unexpected(what: &str, got: &Value) -> ParsingError {
    format!("expected {what}, got {got:?}").into()
}

/// Why a delivered entry has no job a worker can run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadJob {
    /// The entry has no `job` field.
    #[error("job entry has no job field")]
    Missing,
    /// The `job` field is not a job's JSON.
    #[error("undecodable job: {0}")]
    Undecodable(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn entry(id: &str, fields: &[(&str, &str)]) -> Value {
        let flat = fields
            .iter()
            .flat_map(|(k, v)| [bulk(k), bulk(v)])
            .collect();
        Value::Array(vec![bulk(id), Value::Array(flat)])
    }

    #[test]
    fn a_resp2_reply_gives_each_stream_its_entries_and_fields() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                bulk("q:a"),
                Value::Array(vec![
                    entry("1-0", &[("task", "t1"), ("job", "{}")]),
                    entry("2-0", &[("task", "t2")]),
                ]),
            ]),
            Value::Array(vec![bulk("q:b"), Value::Array(vec![])]),
        ]);
        let ReadReply(mut streams) = ReadReply::from_redis_value(reply).unwrap();
        assert_eq!(streams.len(), 2);
        let (key, entries) = &mut streams[0];
        assert_eq!(key, "q:a");
        assert_eq!(entries[0].id, "1-0");
        assert_eq!(entries[0].take("job").as_deref(), Some("{}"));
        assert_eq!(entries[0].take("task").as_deref(), Some("t1"));
        // Taken once: the second take finds nothing.
        assert_eq!(entries[0].take("task"), None);
        assert_eq!(entries[1].take("task").as_deref(), Some("t2"));
        assert_eq!(entries[1].take("job"), None);
        assert_eq!(streams[1].0, "q:b");
        assert!(streams[1].1.is_empty());
    }

    #[test]
    fn a_resp3_map_reply_and_a_nil_reply_are_read() {
        let reply = Value::Map(vec![(
            bulk("q:a"),
            Value::Array(vec![Value::Array(vec![
                bulk("3-1"),
                Value::Map(vec![(bulk("attempt"), bulk("2"))]),
            ])]),
        )]);
        let ReadReply(mut streams) = ReadReply::from_redis_value(reply).unwrap();
        assert_eq!(streams[0].1[0].id, "3-1");
        assert_eq!(streams[0].1[0].take("attempt").as_deref(), Some("2"));
        assert!(
            ReadReply::from_redis_value(Value::Nil)
                .unwrap()
                .0
                .is_empty()
        );
    }

    #[test]
    fn an_entry_deleted_while_pending_has_no_fields() {
        let reply = Value::Array(vec![Value::Array(vec![
            bulk("q:a"),
            Value::Array(vec![Value::Array(vec![bulk("4-0"), Value::Nil])]),
        ])]);
        let ReadReply(mut streams) = ReadReply::from_redis_value(reply).unwrap();
        assert_eq!(streams[0].1[0].id, "4-0");
        assert_eq!(streams[0].1[0].take("task"), None);
    }

    #[test]
    fn a_reply_of_another_shape_is_an_error_that_says_what_was_expected() {
        let err = ReadReply::from_redis_value(Value::Int(3)).unwrap_err();
        assert!(err.to_string().contains("an XREADGROUP reply"), "{err}");
        let err = ReadReply::from_redis_value(Value::Array(vec![Value::Int(1)])).unwrap_err();
        assert!(err.to_string().contains("[stream, entries]"), "{err}");
    }
}
