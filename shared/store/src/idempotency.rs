//! Idempotent creation: a `tools/call` carrying an idempotency key gets a task id derived
//! from its owner and key ([`keyed_task_id`]), so every retry, from any gateway, names the
//! same task hash, and the create script (`create.lua`) finds it instead of making another.
//! What the script compares a retry with is [`call_digest`]: the tool's arguments in a
//! canonical form.

use std::io::Write as _;

use base64::Engine as _;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

/// The task id of `owner`'s call under idempotency key `key`: `tsk_` and 128 bits of
/// SHA-256 over both. Another principal's same key is another id (and the task hash is
/// keyed by owner besides, so it reveals nothing).
pub fn keyed_task_id(owner: &str, key: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(b"mcpt-idempotency\0");
    hash.update(owner.as_bytes());
    hash.update(b"\0");
    hash.update(key.as_bytes());
    let digest = hash.finalize();
    let mut id = String::with_capacity(26);
    id.push_str("tsk_");
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode_string(&digest[..16], &mut id);
    id
}

/// The digest a keyed task keeps of its arguments: SHA-256 of their canonical JSON (object
/// members sorted by name, no whitespace), in hex. Member order is the client's whim; it
/// does not make a retry another call.
pub fn call_digest(arguments: &Value) -> String {
    let mut hash = HashWriter(Sha256::new());
    write_canonical(&mut hash, arguments);
    let digest = hash.0.finalize();
    let mut hex = String::with_capacity(64);
    for b in digest {
        hex.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        hex.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
    }
    hex
}

/// Feeds what is written into the hash.
struct HashWriter(Sha256);

impl std::io::Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `v` as canonical JSON into `out`.
fn write_canonical(out: &mut HashWriter, v: &Value) {
    match v {
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_unstable_by(|a, b| a.0.cmp(b.0));
            let _ = out.write_all(b"{");
            for (i, (name, value)) in members.into_iter().enumerate() {
                if i > 0 {
                    let _ = out.write_all(b",");
                }
                let _ = serde_json::to_writer(&mut *out, name);
                let _ = out.write_all(b":");
                write_canonical(out, value);
            }
            let _ = out.write_all(b"}");
        }
        Value::Array(items) => {
            let _ = out.write_all(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    let _ = out.write_all(b",");
                }
                write_canonical(out, item);
            }
            let _ = out.write_all(b"]");
        }
        scalar => {
            let _ = serde_json::to_writer(&mut *out, scalar);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn keyed_ids_are_per_owner_and_key() {
        let a = keyed_task_id("alice", "k1");
        assert_eq!(a, keyed_task_id("alice", "k1"));
        assert_ne!(a, keyed_task_id("bob", "k1"));
        assert_ne!(a, keyed_task_id("alice", "k2"));
        // No owner and key pair runs into another by moving the separator.
        assert_ne!(keyed_task_id("a", "bc"), keyed_task_id("ab", "c"));
        assert!(a.starts_with("tsk_") && a.len() == 26, "{a}");
    }

    #[test]
    fn the_digest_ignores_member_order_only() {
        let one = call_digest(&json!({"b": 1, "a": {"y": [1, 2], "x": "s"}}));
        let two = call_digest(&json!({"a": {"x": "s", "y": [1, 2]}, "b": 1}));
        assert_eq!(one, two);
        assert_eq!(one.len(), 64);
        assert_ne!(
            one,
            call_digest(&json!({"a": {"x": "s", "y": [2, 1]}, "b": 1}))
        );
        assert_ne!(
            call_digest(&json!({"a": 1})),
            call_digest(&json!({"a": "1"}))
        );
    }
}
