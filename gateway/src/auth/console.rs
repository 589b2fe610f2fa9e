//! The console's view of the gateway's authentication ([`Access`]): who a request's or a
//! sign-in form's token stands for, and what a console session stays bound to.

use hyper::HeaderMap;
use mcp_tasks_console::{Access, Checked, Credential};
use serde_json::Value;

use super::{Authenticator, tokens};

impl Access for Authenticator {
    fn enabled(&self) -> bool {
        Authenticator::enabled(self)
    }

    fn principal<'a>(&'a self, headers: &'a HeaderMap) -> Checked<'a> {
        Box::pin(async move { Authenticator::principal(self, headers).await.ok() })
    }

    fn principal_of<'a>(&'a self, token: &'a str) -> Checked<'a> {
        Box::pin(async move { Authenticator::principal_of(self, token).await.ok() })
    }

    /// A token's SHA-256 (the session lasts while the token file still holds it), or for a
    /// JWT its `exp` (the session ends then; a JWT cannot be revoked here).
    fn credential_of(&self, token: &str) -> Credential {
        match self {
            Authenticator::Anonymous => Credential::None,
            Authenticator::Tokens(_) => Credential::Token(tokens::digest(token)),
            Authenticator::Jwt(_) => Credential::Expires(jwt_exp(token).unwrap_or(0)),
        }
    }

    fn still_holds(&self, principal: &str, matches: &dyn Fn(&[u8; 32]) -> bool) -> bool {
        match self {
            Authenticator::Tokens(file) => file.digests_of(principal).iter().any(matches),
            Authenticator::Anonymous | Authenticator::Jwt(_) => true,
        }
    }
}

/// The `exp` claim of a JWT already verified (read, not checked again).
fn jwt_exp(token: &str) -> Option<u64> {
    use base64::Engine as _;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice::<Value>(&bytes).ok()?["exp"].as_u64()
}
