//! Console sessions: after a sign-in, a cookie naming the principal, an expiry and the
//! credential signed in with, signed with HMAC-SHA-256 (`MCPT_CONSOLE_SECRET`, else a random key per process: then sessions
//! end with the process and one replica does not accept another's).
//!
//! A session ends with its credential: one started with a token names a keyed hash of
//! the token's digest, and each request checks that the token file still gives the
//! principal that token ([`super::Console::who`]), so removing the token ends the session
//! within a second; one started with a JWT expires with the JWT (`exp`).
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

use crate::Credential;

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

    /// What a cookie names of a token: a keyed hash of its digest (the digest itself is
    /// not shown to the browser).
    pub(crate) fn token_tag(&self, digest: &[u8; 32]) -> String {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(b"mcp-tasks console credential\0");
        mac.update(digest);
        B64.encode(&mac.finalize().into_bytes()[..16])
    }

    /// The cookie value for `principal`, valid until `expires_s` (seconds since the epoch),
    /// bound to `credential` (a [`Sessions::token_tag`], or `-`).
    fn value(&self, principal: &str, expires_s: u64, credential: &str) -> String {
        let payload = format!("{}.{expires_s}.{credential}", B64.encode(principal));
        let tag = self.mac(&payload).finalize().into_bytes();
        format!("{payload}.{}", B64.encode(tag))
    }

    /// The `Set-Cookie` value starting a session for `principal`, signed in with
    /// `credential`: it lasts [`LIFETIME`], or less when a JWT expires sooner.
    pub(crate) fn start(&self, principal: &str, credential: Credential, secure: bool) -> String {
        let now = now_s();
        let mut expires = now + LIFETIME.as_secs();
        let bound = match credential {
            Credential::Token(digest) => self.token_tag(&digest),
            Credential::Expires(exp) => {
                expires = expires.min(exp);
                "-".to_owned()
            }
            Credential::None => "-".to_owned(),
        };
        let value = self.value(principal, expires, &bound);
        format!(
            "{COOKIE}={value}; Path=/console; Max-Age={}; HttpOnly; SameSite=Strict{}",
            expires.saturating_sub(now),
            if secure { "; Secure" } else { "" }
        )
    }

    /// The `Set-Cookie` value ending the session.
    pub(crate) fn end() -> String {
        format!("{COOKIE}=; Path=/console; Max-Age=0; HttpOnly; SameSite=Strict")
    }

    /// The principal and credential tag of a valid, unexpired session cookie among
    /// `headers`.
    pub(crate) fn principal(&self, headers: &HeaderMap) -> Option<(String, String)> {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|line| line.split(';'))
            .filter_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='))
            .find_map(|value| self.check(value, now_s()))
    }

    fn check(&self, value: &str, now: u64) -> Option<(String, String)> {
        let (payload, tag) = value.rsplit_once('.')?;
        let tag = B64.decode(tag).ok()?;
        // `verify_slice` compares in constant time.
        self.mac(payload).verify_slice(&tag).ok()?;
        let mut parts = payload.splitn(3, '.');
        let (principal, expires, credential) = (parts.next()?, parts.next()?, parts.next()?);
        (expires.parse::<u64>().ok()? > now).then_some(())?;
        let principal = String::from_utf8(B64.decode(principal).ok()?).ok()?;
        Some((principal, credential.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_signed_and_expire() {
        let s = Sessions::new(Some("0123456789abcdef0123456789abcdef"));
        let v = s.value("alice", 1000, "-");
        let alice = Some(("alice".to_owned(), "-".to_owned()));
        assert_eq!(s.check(&v, 999), alice);
        assert_eq!(s.check(&v, 1000), None, "expired");
        let forged = v.replacen(&B64.encode("alice"), &B64.encode("mallory"), 1);
        assert_eq!(s.check(&forged, 0), None, "payload changed");
        let other = Sessions::new(None);
        assert_eq!(other.check(&v, 0), None, "another key");
        let header = s.start("bob", Credential::Expires(now_s() + 60), false);
        assert!(
            header.contains("Max-Age=60") || header.contains("Max-Age=59"),
            "{header}"
        );
        assert!(header.contains("HttpOnly") && header.contains("SameSite=Strict"));
        let mut h = HeaderMap::new();
        let cookie = header.split(';').next().unwrap();
        h.insert(header::COOKIE, format!("x=1; {cookie}").parse().unwrap());
        assert_eq!(s.principal(&h).map(|(p, _)| p).as_deref(), Some("bob"));
        let bound = s.value("carol", 1000, &s.token_tag(&[7; 32]));
        let changed = bound.replacen(&s.token_tag(&[7; 32]), &s.token_tag(&[8; 32]), 1);
        assert_eq!(s.check(&changed, 0), None, "credential changed");
    }
}
