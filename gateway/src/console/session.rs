//! Console sessions: after a sign-in, a cookie naming the principal and an expiry, signed
//! with HMAC-SHA-256 (`MCPT_CONSOLE_SECRET`, else a random key per process: then sessions
//! end with the process and one replica does not accept another's).
//!
//! The cookie is `HttpOnly` (no script reads it), `SameSite=Strict` (no other site's page
//! sends it) and scoped to `/console`; `Secure` when the request came over TLS through a
//! proxy (`X-Forwarded-Proto: https`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{KeyInit as _, Mac as _};
use hyper::HeaderMap;
use hyper::header;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The cookie's name.
pub(crate) const COOKIE: &str = "mcpt_console";

/// How long a session lasts.
pub(crate) const LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// Signs and checks session cookies.
pub(crate) struct Sessions {
    key: Vec<u8>,
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Sessions {
    /// With `secret`, or a random key (two v4 UUIDs: 244 CSPRNG bits) when `None`.
    pub(crate) fn new(secret: Option<&str>) -> Sessions {
        let key = match secret {
            Some(s) => s.as_bytes().to_vec(),
            None => [uuid::Uuid::new_v4(), uuid::Uuid::new_v4()]
                .iter()
                .flat_map(|u| *u.as_bytes())
                .collect(),
        };
        Sessions { key }
    }

    fn mac(&self, payload: &str) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(b"mcp-tasks console session\0");
        mac.update(payload.as_bytes());
        mac
    }

    /// The cookie value for `principal`, valid until `expires_s` (seconds since the epoch).
    fn value(&self, principal: &str, expires_s: u64) -> String {
        let payload = format!("{}.{expires_s}", B64.encode(principal));
        let tag = self.mac(&payload).finalize().into_bytes();
        format!("{payload}.{}", B64.encode(tag))
    }

    /// The `Set-Cookie` value starting a session for `principal`.
    pub(crate) fn start(&self, principal: &str, secure: bool) -> String {
        let value = self.value(principal, now_s() + LIFETIME.as_secs());
        format!(
            "{COOKIE}={value}; Path=/console; Max-Age={}; HttpOnly; SameSite=Strict{}",
            LIFETIME.as_secs(),
            if secure { "; Secure" } else { "" }
        )
    }

    /// The `Set-Cookie` value ending the session.
    pub(crate) fn end() -> String {
        format!("{COOKIE}=; Path=/console; Max-Age=0; HttpOnly; SameSite=Strict")
    }

    /// The principal of a valid, unexpired session cookie among `headers`.
    pub(crate) fn principal(&self, headers: &HeaderMap) -> Option<String> {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|line| line.split(';'))
            .filter_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='))
            .find_map(|value| self.check(value, now_s()))
    }

    fn check(&self, value: &str, now: u64) -> Option<String> {
        let (payload, tag) = value.rsplit_once('.')?;
        let tag = B64.decode(tag).ok()?;
        // `verify_slice` compares in constant time.
        self.mac(payload).verify_slice(&tag).ok()?;
        let (principal, expires) = payload.split_once('.')?;
        (expires.parse::<u64>().ok()? > now).then_some(())?;
        String::from_utf8(B64.decode(principal).ok()?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_signed_and_expire() {
        let s = Sessions::new(Some("0123456789abcdef0123456789abcdef"));
        let v = s.value("alice", 1000);
        assert_eq!(s.check(&v, 999).as_deref(), Some("alice"));
        assert_eq!(s.check(&v, 1000), None, "expired");
        let forged = v.replacen(&B64.encode("alice"), &B64.encode("mallory"), 1);
        assert_eq!(s.check(&forged, 0), None, "payload changed");
        let other = Sessions::new(None);
        assert_eq!(other.check(&v, 0), None, "another key");
        let header = s.start("bob", false);
        assert!(header.contains("HttpOnly") && header.contains("SameSite=Strict"));
        let mut h = HeaderMap::new();
        let cookie = header.split(';').next().unwrap();
        h.insert(header::COOKIE, format!("x=1; {cookie}").parse().unwrap());
        assert_eq!(s.principal(&h).as_deref(), Some("bob"));
    }
}
