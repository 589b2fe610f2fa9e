//! How a principal is named where it is stored: by a digest, never by its name.

use sha2::{Digest as _, Sha256};

/// A task owner: a digest of the principal, so Redis, the worker and the logs never hold
/// the principal's name.
pub fn owner_digest(principal: &str) -> String {
    let d = Sha256::new()
        .chain_update(b"mcp-tasks principal\0")
        .chain_update(principal.as_bytes())
        .finalize();
    let mut out = String::with_capacity(34);
    out.push_str("p:");
    for b in &d[..16] {
        out.push_str(&format!("{b:02x}"));
    }
    out
}
