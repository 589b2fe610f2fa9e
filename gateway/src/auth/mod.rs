//! Who is calling (`MCPT_AUTH`): nobody in particular (`none`, loopback only unless allowed),
//! a static bearer token (`tokens.rs`), or a bearer JWT checked against a JWKS (`jwt.rs`).
//!
//! The gateway is an OAuth protected resource as the MCP authorization spec describes it:
//! a request without valid credentials gets HTTP 401 with a `WWW-Authenticate: Bearer`
//! challenge naming `/.well-known/oauth-protected-resource` (RFC 9728), which
//! [`resource_metadata`] answers. Tasks are owned by a digest of the principal
//! ([`owner_digest`]); neither the credential nor the principal itself is stored or logged.

#[cfg(feature = "console")]
mod console;
pub(crate) mod jwt;
mod tokens;

use std::time::Duration;

use hyper::HeaderMap;
use hyper::header::{self, HeaderValue};
use mcp_tasks_shared::config::{AuthConfig, AuthMode};
use serde_json::{Value, json};

/// The owner of every task when authentication is off.
pub(crate) const ANONYMOUS: &str = mcp_tasks_protocol::meta::ANONYMOUS_OWNER;

/// Where the protected-resource metadata is served (and the challenge points).
pub(crate) const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// Why authentication cannot be set up: one line naming the setting at fault.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// `MCPT_AUTH=tokens`: the token file is unreadable or malformed.
    #[error("MCPT_AUTH_TOKENS_FILE: {0}")]
    Tokens(tokens::TokensError),
    /// `MCPT_AUTH=jwt`: the issuer, audience or key set is unusable.
    #[error("MCPT_AUTH_JWKS: {0}")]
    Jwt(jwt::JwtConfigError),
}

/// Checks credentials.
pub(crate) enum Authenticator {
    /// `MCPT_AUTH=none`.
    Anonymous,
    /// `MCPT_AUTH=tokens`.
    Tokens(tokens::TokenFile),
    /// `MCPT_AUTH=jwt`.
    Jwt(jwt::JwtVerifier),
}

/// Why a request was refused: the parts of its `WWW-Authenticate` challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Challenge {
    /// RFC 6750 error code; `None` when no credentials were sent at all.
    pub(crate) error: Option<&'static str>,
    /// What was wrong, safe to show (never the token or its claims).
    pub(crate) description: String,
    /// Our fault, not the caller's: the signing keys cannot be fetched (HTTP 503, so a
    /// client keeps its token and retries).
    pub(crate) unavailable: bool,
}

impl Challenge {
    fn invalid(description: impl Into<String>) -> Challenge {
        Challenge {
            error: Some("invalid_token"),
            description: description.into(),
            unavailable: false,
        }
    }

    fn request(description: impl Into<String>) -> Challenge {
        Challenge {
            error: Some("invalid_request"),
            description: description.into(),
            unavailable: false,
        }
    }
}

pub(crate) use mcp_tasks_shared::owner::owner_digest;

/// The bearer token of `headers`: `Ok(None)` without an `Authorization` header.
fn bearer(headers: &HeaderMap) -> Result<Option<&str>, Challenge> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(Challenge::request("more than one Authorization header"));
    }
    let text = value
        .to_str()
        .map_err(|_| Challenge::invalid("Authorization header is not text"))?;
    let (scheme, token) = text.split_once(' ').unwrap_or((text, ""));
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(Challenge::request(
            "Authorization must use the Bearer scheme",
        ));
    }
    let token = token.trim();
    if token.is_empty() {
        return Err(Challenge::invalid("empty bearer token"));
    }
    Ok(Some(token))
}

impl Authenticator {
    /// Set up the configured mode: reads the token file or loads the JWKS once.
    ///
    /// # Errors
    /// The token file or key set cannot be read (one line naming it).
    pub(crate) async fn new(config: &AuthConfig) -> Result<Authenticator, AuthError> {
        Ok(match &config.mode {
            AuthMode::None => Authenticator::Anonymous,
            AuthMode::Tokens { file } => {
                Authenticator::Tokens(tokens::TokenFile::open(file).map_err(AuthError::Tokens)?)
            }
            AuthMode::Jwt {
                jwks,
                issuer,
                audience,
            } => {
                let source = if jwks.starts_with("http://") || jwks.starts_with("https://") {
                    jwt::JwksSource::Url(jwks.clone())
                } else {
                    jwt::JwksSource::File(jwks.into())
                };
                Authenticator::Jwt(
                    jwt::JwtVerifier::new(jwt::JwtConfig {
                        jwks: source,
                        issuer: issuer.clone(),
                        audience: audience.clone(),
                        leeway: Duration::from_secs(30),
                    })
                    .await
                    .map_err(AuthError::Jwt)?,
                )
            }
        })
    }

    /// Whether callers must authenticate.
    pub(crate) fn enabled(&self) -> bool {
        !matches!(self, Authenticator::Anonymous)
    }

    /// The owner digest of the caller, or the challenge to answer with.
    pub(crate) async fn owner(&self, headers: &HeaderMap) -> Result<String, Challenge> {
        if let Authenticator::Anonymous = self {
            return Ok(ANONYMOUS.to_owned());
        }
        Ok(owner_digest(&self.principal(headers).await?))
    }

    /// The caller's principal as `MCPT_AUTH` names it ([`ANONYMOUS`] without
    /// authentication), or the challenge to answer with.
    pub(crate) async fn principal(&self, headers: &HeaderMap) -> Result<String, Challenge> {
        if let Authenticator::Anonymous = self {
            return Ok(ANONYMOUS.to_owned());
        }
        let Some(token) = bearer(headers)? else {
            return Err(Challenge {
                error: None,
                description: "authentication required".into(),
                unavailable: false,
            });
        };
        self.principal_of(token).await
    }

    /// The principal a bearer token (static token or JWT) stands for.
    pub(crate) async fn principal_of(&self, token: &str) -> Result<String, Challenge> {
        match self {
            Authenticator::Anonymous => Ok(ANONYMOUS.to_owned()),
            Authenticator::Tokens(file) => file
                .principal(token)
                .ok_or_else(|| Challenge::invalid("unknown bearer token")),
            Authenticator::Jwt(verifier) => verifier.verify(token).await.map_err(|e| Challenge {
                unavailable: e == jwt::JwtError::KeysUnavailable,
                ..Challenge::invalid(e.to_string())
            }),
        }
    }
}

/// This server's resource URL: `MCPT_AUTH_RESOURCE`, else from the request's `Host` (and
/// `X-Forwarded-Proto` behind a TLS-terminating proxy).
pub(crate) fn resource_url(config: &AuthConfig, headers: &HeaderMap) -> String {
    if let Some(r) = &config.resource {
        return r.clone();
    }
    // Only a plain host[:port] is echoed; anything else (quotes, spaces, paths) is not.
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| {
            !h.is_empty()
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b))
        })
        .unwrap_or("localhost");
    let scheme = match headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
    {
        Some("https") => "https",
        _ => "http",
    };
    format!("{scheme}://{host}/mcp")
}

/// The `WWW-Authenticate` value for `challenge`.
pub(crate) fn www_authenticate(
    config: &AuthConfig,
    headers: &HeaderMap,
    challenge: &Challenge,
) -> HeaderValue {
    let resource = resource_url(config, headers);
    let origin = resource
        .strip_suffix("/mcp")
        .unwrap_or(resource.as_str())
        .to_owned();
    let mut value = format!("Bearer resource_metadata=\"{origin}{METADATA_PATH}\"");
    if let Some(error) = challenge.error {
        // Quotes and backslashes cannot occur in our descriptions; drop them if they do.
        let description: String = challenge
            .description
            .chars()
            .filter(|c| *c != '"' && *c != '\\' && !c.is_control())
            .collect();
        value.push_str(&format!(
            ", error=\"{error}\", error_description=\"{description}\""
        ));
    }
    HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static("Bearer"))
}

/// RFC 9728 protected-resource metadata.
pub(crate) fn resource_metadata(config: &AuthConfig, headers: &HeaderMap) -> Value {
    json!({
        "resource": resource_url(config, headers),
        "authorization_servers": config.authorization_servers,
        "bearer_methods_supported": ["header"],
        "resource_name": "mcp-tasks",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn owner_digests_are_stable_distinct_and_hide_the_principal() {
        let a = owner_digest("alice");
        assert_eq!(a, owner_digest("alice"));
        assert_ne!(a, owner_digest("bob"));
        assert_eq!(a.len(), 34);
        assert!(!a.contains("alice"));
        assert_ne!(a, ANONYMOUS);
    }

    #[test]
    fn bearer_tokens_are_read_strictly() {
        assert_eq!(bearer(&headers(&[])), Ok(None));
        assert_eq!(
            bearer(&headers(&[("authorization", "Bearer abc")])),
            Ok(Some("abc"))
        );
        assert_eq!(
            bearer(&headers(&[("authorization", "bearer  abc ")])),
            Ok(Some("abc"))
        );
        let basic = headers(&[("authorization", "Basic YWxhZGRpbjpvcGVuc2VzYW1l")]);
        assert_eq!(bearer(&basic).unwrap_err().error, Some("invalid_request"));
        let two = headers(&[("authorization", "Bearer a"), ("authorization", "Bearer b")]);
        assert_eq!(bearer(&two).unwrap_err().error, Some("invalid_request"));
        assert_eq!(
            bearer(&headers(&[("authorization", "Bearer ")]))
                .unwrap_err()
                .error,
            Some("invalid_token")
        );
    }

    #[test]
    fn challenges_point_at_the_metadata() {
        let config = AuthConfig {
            mode: AuthMode::None,
            allow_anonymous: false,
            resource: None,
            authorization_servers: vec!["https://idp.example".into()],
            high_priority: None,
        };
        let h = headers(&[("host", "mcp.example:8443"), ("x-forwarded-proto", "https")]);
        let none = www_authenticate(
            &config,
            &h,
            &Challenge {
                error: None,
                description: "authentication required".into(),
                unavailable: false,
            },
        );
        assert_eq!(
            none,
            "Bearer resource_metadata=\"https://mcp.example:8443/.well-known/oauth-protected-resource\""
        );
        let bad = www_authenticate(&config, &h, &Challenge::invalid("token \"expired\""));
        assert!(
            bad.to_str()
                .unwrap()
                .ends_with(", error=\"invalid_token\", error_description=\"token expired\""),
            "{bad:?}"
        );
        let meta = resource_metadata(&config, &h);
        assert_eq!(meta["resource"], "https://mcp.example:8443/mcp");
        assert_eq!(meta["authorization_servers"][0], "https://idp.example");
    }
}
