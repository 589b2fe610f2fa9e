//! Why a token was refused ([`JwtError`]), why JWT checking cannot be set up
//! ([`JwtConfigError`]) and why a key set cannot be fetched or read ([`KeySetError`]). Each is one line naming what went wrong; a cause's
//! own text is part of that line (so no `source()`: printing a chain would repeat it).

use std::sync::Arc;

use mcp_tasks_shared::web;

use jsonwebtoken::errors::ErrorKind;

use super::{FETCH_TIMEOUT, MAX_JWKS_BYTES};

/// Why a token was refused. The text is short and safe for a `WWW-Authenticate`
/// `error_description`: it never holds the token or its claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum JwtError {
    /// Not three base64url parts, unreadable JSON, a claim of the wrong type, or too long.
    #[error("malformed token")]
    Malformed,
    /// No key of the set has the token's `kid` (or, without `kid`, the set has several).
    #[error("token signing key not known")]
    UnknownKey,
    /// The signature does not verify with the selected key.
    #[error("token signature invalid")]
    BadSignature,
    /// `exp` is past, beyond the leeway.
    #[error("token expired")]
    Expired,
    /// `nbf` is ahead, beyond the leeway.
    #[error("token not yet valid")]
    NotYetValid,
    /// No `exp` claim, or not a number: tokens without an expiry are refused.
    #[error("token has no expiry")]
    MissingExpiry,
    /// `iss` absent, not a string, or not the configured issuer.
    #[error("token issuer not accepted")]
    WrongIssuer,
    /// `aud` absent, or neither the configured audience nor an array containing it.
    #[error("token audience not accepted")]
    WrongAudience,
    /// `sub` absent, not a string, or empty.
    #[error("token has no subject")]
    MissingSubject,
    /// `alg` is `none`, HS*, unknown, or does not fit the selected key.
    #[error("token signing algorithm not accepted")]
    UnsupportedAlgorithm,
    /// The token names a key the set lacks and the key set could not be refreshed: the
    /// fault may be ours (the caller may answer 503 rather than 401).
    #[error("signing keys unavailable")]
    KeysUnavailable,
}

/// Map a library error to the reason given to the client.
pub(super) fn library_error(error: &jsonwebtoken::errors::Error) -> JwtError {
    match error.kind() {
        ErrorKind::InvalidSignature => JwtError::BadSignature,
        ErrorKind::ExpiredSignature => JwtError::Expired,
        ErrorKind::ImmatureSignature => JwtError::NotYetValid,
        ErrorKind::MissingRequiredClaim(claim) if claim == "exp" => JwtError::MissingExpiry,
        ErrorKind::InvalidIssuer => JwtError::WrongIssuer,
        ErrorKind::InvalidAudience => JwtError::WrongAudience,
        ErrorKind::InvalidAlgorithm
        | ErrorKind::MissingAlgorithm
        | ErrorKind::UnsupportedAlgorithm
        | ErrorKind::InvalidAlgorithmName => JwtError::UnsupportedAlgorithm,
        // Key material is checked when the set is loaded; if it still fails, no valid
        // signature can be shown with it.
        ErrorKind::InvalidEcdsaKey
        | ErrorKind::InvalidEddsaKey
        | ErrorKind::InvalidRsaKey(_)
        | ErrorKind::InvalidKeyFormat => JwtError::BadSignature,
        _ => JwtError::Malformed,
    }
}

/// Why a [`super::JwtVerifier`] cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum JwtConfigError {
    /// The required `iss` is empty.
    #[error("JWT issuer is empty")]
    EmptyIssuer,
    /// The required `aud` is empty.
    #[error("JWT audience is empty")]
    EmptyAudience,
    /// jsonwebtoken was built without a crypto provider.
    #[error("no jsonwebtoken crypto provider (build features)")]
    NoCryptoProvider,
    /// The JWKS URL does not parse.
    #[error("invalid JWKS URL {url}: {why}")]
    InvalidUrl {
        url: String,
        why: hyper::http::uri::InvalidUri,
    },
    /// The JWKS URL is not `http(s)://HOST/…`.
    #[error("invalid JWKS URL {url}: expected http://HOST/… or https://HOST/…")]
    NotHttpUrl { url: String },
    /// The HTTP client for the JWKS URL cannot be built.
    #[error("JWKS URL {url}: {why}")]
    Client { url: String, why: web::TlsSetup },
    /// The first load of the key set failed; `label` is `file …` or `URL …`.
    #[error("cannot load JWKS from {label}: {why}")]
    Load { label: String, why: KeySetError },
}

/// Why the key set could not be read, fetched or used. `Clone`, so that a broken file,
/// unchanged since, reports the same failure again without being re-read.
#[derive(Debug, Clone, thiserror::Error)]
pub enum KeySetError {
    /// The file's metadata cannot be read (missing, no permission).
    #[error("cannot stat: {0}")]
    Stat(Arc<std::io::Error>),
    /// The file cannot be opened.
    #[error("cannot open: {0}")]
    Open(Arc<std::io::Error>),
    /// Reading the file failed.
    #[error("cannot read: {0}")]
    Read(Arc<std::io::Error>),
    /// The file holds more than [`MAX_JWKS_BYTES`].
    #[error("larger than {} bytes", MAX_JWKS_BYTES)]
    TooLarge,
    /// The GET request cannot be built.
    #[error("cannot build the request: {0}")]
    BuildRequest(Arc<hyper::http::Error>),
    /// The request failed (connect, TLS, protocol); its error and sources, `: `-separated.
    #[error("request failed: {0}")]
    RequestFailed(String),
    /// The answer is not HTTP 200.
    #[error("answered HTTP {0}")]
    Status(hyper::StatusCode),
    /// Reading the body failed or it exceeded the limit; the error and its sources.
    #[error("reading the body: {0}")]
    Body(String),
    /// No complete answer within [`FETCH_TIMEOUT`].
    #[error("no complete answer within {} s", FETCH_TIMEOUT.as_secs())]
    Timeout,
    /// The document is not JSON.
    #[error("not a JSON document: {0}")]
    NotJson(Arc<serde_json::Error>),
    /// The document has no `keys` array.
    #[error("no \"keys\" array")]
    NoKeysArray,
    /// jsonwebtoken has no crypto provider to check the keys with.
    #[error("no jsonwebtoken crypto provider")]
    NoCryptoProvider,
    /// Not one key of the set is usable: why each was skipped (none: the set is empty).
    #[error("no usable signing key ({})", why_none(.0))]
    NoUsableKey(Vec<String>),
}

/// The parenthesis of [`KeySetError::NoUsableKey`].
fn why_none(skipped: &[String]) -> String {
    if skipped.is_empty() {
        "the set is empty".to_owned()
    } else {
        skipped.join("; ")
    }
}
