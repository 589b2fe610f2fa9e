//! Bearer-JWT verification for the gateway as an OAuth protected resource (MCP
//! authorization): the signing key set (JWKS) from a file or a URL, cached and rotated,
//! and the checks on one compact-JWS access token — an asymmetric signature by a key of
//! the set, `exp` (required) and `nbf` with leeway, `iss` and `aud` compared exactly, and
//! a non-empty `sub`. Reading `Authorization` and answering 401 is the caller's job.
//!
//! - Algorithms: RS256/384/512, PS256/384/512, ES256 (P-256), ES384 (P-384) and EdDSA
//!   (Ed25519). `none` and HS* are refused before any key is looked at (algorithm
//!   confusion); the token's `alg` must fit the key's type and curve, and the JWK's own
//!   `alg` when it has one. Symmetric (`oct`), encryption (`use` ≠ `sig`), P-521 and
//!   RSA keys under 2048 bits are dropped from the set when it is loaded.
//! - Key choice: by `kid`; a token without `kid` uses the set's only key, if it has one.
//! - Rotation: a file is re-read when its mtime or size changes, looked at no more than
//!   once a second, on the request path. A URL is re-fetched every 5 minutes in the
//!   background, and when a token names a key the set lacks, at most once per 30 s so a
//!   flood of bogus `kid`s cannot hammer the identity provider. A failed refresh keeps the
//!   keys in use and logs a warning; the token itself is never logged.
//! - Fast path of [`JwtVerifier::verify`]: a read lock to clone an `Arc` of the set, then
//!   the signature and claim checks; no I/O except the rate-limited refreshes above.
//!
//! Here: the verifier, its cache and refreshes, and the token checks. `jwt/keys.rs` turns a
//! JWKS document into usable keys; `jwt/source.rs` reads it from a file or a URL.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::crypto::CryptoProvider;
use jsonwebtoken::{Algorithm, Validation};
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

mod errors;
mod keys;
mod source;

use errors::KeySetError;
use errors::library_error;
pub(crate) use errors::{JwtConfigError, JwtError};

use keys::{Key, KeySet, parse_jwks};
#[cfg(test)]
use keys::{check_rsa, significant_bits};
use source::{FileStamp, Source, fetch, file_stamp, read_file};

/// Longest token looked at, in bytes; longer ones are refused unparsed.
const MAX_TOKEN_LEN: usize = 16 * 1024;
/// Largest JWKS document read, from a file or a URL.
const MAX_JWKS_BYTES: usize = 1024 * 1024;
/// A JWKS fetch (connect, answer and body) gives up after this long.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// URL source: period of the background refresh.
const URL_REFRESH_EVERY: Duration = Duration::from_secs(300);
/// URL source: least time between two fetches caused by unknown keys.
const UNKNOWN_KEY_REFETCH_GAP: Duration = Duration::from_secs(30);
/// File source: least time between two looks at the file's mtime.
const FILE_CHECK_EVERY: Duration = Duration::from_secs(1);

/// Where the key set comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum JwksSource {
    /// A JWKS JSON file, re-read when its mtime or size changes.
    File(PathBuf),
    /// An `http://` or `https://` URL, re-fetched every 5 minutes and on unknown keys.
    Url(String),
}

impl fmt::Display for JwksSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JwksSource::File(path) => write!(f, "file {}", path.display()),
            JwksSource::Url(url) => write!(f, "URL {url}"),
        }
    }
}

/// What a token must satisfy, and where its keys come from.
#[derive(Debug, Clone)]
pub(crate) struct JwtConfig {
    /// The key set.
    pub(crate) jwks: JwksSource,
    /// Required `iss`, compared exactly.
    pub(crate) issuer: String,
    /// Required `aud`: the claim is this string, or an array containing it.
    pub(crate) audience: String,
    /// Clock skew allowed on `exp` and `nbf` (whole seconds count).
    pub(crate) leeway: Duration,
}

/// Verifies bearer tokens against a cached JWKS. Cheap to clone (one `Arc`); `Send + Sync`.
#[derive(Clone)]
pub(crate) struct JwtVerifier {
    inner: Arc<Inner>,
}

impl fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JwtVerifier")
            .field("jwks", &self.inner.label)
            .field("issuer", &self.inner.issuer)
            .field("audience", &self.inner.audience)
            .finish_non_exhaustive()
    }
}

impl JwtVerifier {
    /// Load the key set once; an unreadable or invalid JWKS (or one without a usable
    /// signing key) is an error, one line naming the source. A URL source also starts the
    /// background refresh, which ends once every clone of the verifier is dropped.
    pub(crate) async fn new(config: JwtConfig) -> Result<JwtVerifier, JwtConfigError> {
        let JwtConfig {
            jwks,
            issuer,
            audience,
            leeway,
        } = config;
        let label = jwks.to_string();
        if issuer.is_empty() {
            return Err(JwtConfigError::EmptyIssuer);
        }
        if audience.is_empty() {
            return Err(JwtConfigError::EmptyAudience);
        }
        if CryptoProvider::try_get_default().is_none() {
            return Err(JwtConfigError::NoCryptoProvider);
        }
        let source = Source::new(jwks)?;
        let epoch = Instant::now();
        let inner = Inner {
            label,
            source,
            issuer,
            audience,
            leeway_secs: leeway.as_secs(),
            keys: RwLock::new(Arc::new(KeySet { keys: Vec::new() })),
            stale: AtomicBool::new(false),
            reload: tokio::sync::Mutex::new(ReloadState::default()),
            next_file_check_ms: AtomicU64::new(millis(FILE_CHECK_EVERY)),
            epoch,
        };
        {
            let mut state = inner.reload.lock().await;
            if let Err(why) = inner.refresh(&mut state).await {
                let label = inner.label.clone();
                return Err(JwtConfigError::Load { label, why });
            }
        }
        let inner = Arc::new(inner);
        if matches!(inner.source, Source::Url { .. }) {
            tokio::spawn(refresh_periodically(Arc::downgrade(&inner)));
        }
        Ok(JwtVerifier { inner })
    }

    /// Verify a compact JWS; `Ok(principal)` where principal = `"{iss} {sub}"`.
    pub(crate) async fn verify(&self, token: &str) -> Result<String, JwtError> {
        let header = TokenHeader::parse(token)?;
        let inner = &self.inner;
        inner.check_file_if_due().await;
        let keys = inner.current();
        if let Some(key) = keys.select(header.kid.as_deref(), header.alg)? {
            return inner.check(token, key, header.alg);
        }
        match inner.refresh_for_unknown_key(&keys).await {
            Ok(true) => match inner.current().select(header.kid.as_deref(), header.alg)? {
                Some(key) => inner.check(token, key, header.alg),
                None => Err(JwtError::UnknownKey),
            },
            Ok(false) if inner.stale.load(Ordering::Relaxed) => Err(JwtError::KeysUnavailable),
            Ok(false) => Err(JwtError::UnknownKey),
            Err(()) => Err(JwtError::KeysUnavailable),
        }
    }
}

/// State shared by the clones of one verifier and its background refresh.
struct Inner {
    /// `file …` or `URL …`, for messages.
    label: String,
    /// How the key set is read.
    source: Source,
    /// Required `iss`.
    issuer: String,
    /// Required `aud` (or member of it).
    audience: String,
    /// Clock skew allowed on `exp` and `nbf`.
    leeway_secs: u64,
    /// The keys in use; replaced whole by a refresh.
    keys: RwLock<Arc<KeySet>>,
    /// The last refresh failed: an unknown key may be one we could not fetch.
    stale: AtomicBool,
    /// Serializes refreshes and holds their bookkeeping.
    reload: tokio::sync::Mutex<ReloadState>,
    /// File source: when (milliseconds after `epoch`) the file is next looked at.
    next_file_check_ms: AtomicU64,
    /// Origin of `next_file_check_ms`.
    epoch: Instant,
}

/// Bookkeeping of refreshes, under [`Inner::reload`].
#[derive(Default)]
struct ReloadState {
    /// SHA-256 of the document in use: the same document again changes nothing.
    digest: Option<[u8; 32]>,
    /// File source: mtime and size when last read.
    file_stamp: Option<FileStamp>,
    /// URL source: when the last fetch for an unknown key started.
    last_unknown_key_fetch: Option<Instant>,
    /// File source: the failure last logged, so a missing file warns once, not every second.
    last_failure: Option<KeySetError>,
}

impl Inner {
    /// The keys in use.
    fn current(&self) -> Arc<KeySet> {
        Arc::clone(&self.keys.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Read the source (a file only if its stamp changed) and install the keys if the
    /// document changed. `Ok(true)` when other keys are now in use.
    async fn refresh(&self, state: &mut ReloadState) -> Result<bool, KeySetError> {
        let document = match &self.source {
            Source::File(path) => {
                let stamp = file_stamp(path).await?;
                if state.file_stamp == Some(stamp) {
                    // Unchanged: as good, or as broken, as when last read.
                    return match &state.last_failure {
                        Some(why) => Err(why.clone()),
                        None => Ok(false),
                    };
                }
                // Recorded before parsing: a broken file is reported once, not every second.
                state.file_stamp = Some(stamp);
                read_file(path).await?
            }
            Source::Url { uri, client } => fetch(uri, client).await?,
        };
        let digest: [u8; 32] = Sha256::digest(&document).into();
        if state.digest == Some(digest) {
            return Ok(false);
        }
        let (set, skipped) = parse_jwks(&document)?;
        for why in &skipped {
            tracing::warn!(jwks = %self.label, "JWKS key skipped: {why}");
        }
        let count = set.keys.len();
        *self.keys.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(set);
        let first = state.digest.is_none();
        state.digest = Some(digest);
        if first {
            tracing::info!(jwks = %self.label, keys = count, "JWKS loaded");
        } else {
            tracing::info!(jwks = %self.label, keys = count, "JWKS changed; new keys in use");
        }
        Ok(true)
    }

    /// [`Inner::refresh`], logging a failure (a file's only when it differs from the last
    /// one) and keeping [`Inner::stale`] up to date.
    async fn refresh_logged(&self, state: &mut ReloadState) -> Result<bool, ()> {
        match self.refresh(state).await {
            Ok(changed) => {
                if state.last_failure.take().is_some() {
                    tracing::info!(jwks = %self.label, "JWKS readable again");
                }
                self.stale.store(false, Ordering::Relaxed);
                Ok(changed)
            }
            Err(why) => {
                let repeated = state
                    .last_failure
                    .as_ref()
                    .is_some_and(|last| last.to_string() == why.to_string());
                if !repeated || matches!(self.source, Source::Url { .. }) {
                    tracing::warn!(
                        jwks = %self.label,
                        error = %why,
                        "JWKS refresh failed; keeping the keys in use"
                    );
                }
                state.last_failure = Some(why);
                self.stale.store(true, Ordering::Relaxed);
                Err(())
            }
        }
    }

    /// File source: look at the file if the last look is a second old (one request
    /// takes each turn; the others go on with the keys in use).
    async fn check_file_if_due(&self) {
        if !matches!(self.source, Source::File(_)) {
            return;
        }
        let now = millis(self.epoch.elapsed());
        let due = self.next_file_check_ms.load(Ordering::Relaxed);
        if now < due {
            return;
        }
        let next = now.saturating_add(millis(FILE_CHECK_EVERY));
        if self
            .next_file_check_ms
            .compare_exchange(due, next, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let mut state = self.reload.lock().await;
        // Failures are logged and leave the keys in use.
        let _ = self.refresh_logged(&mut state).await;
    }

    /// A token named a key that `seen` lacks. URL source: fetch again, unless a fetch for
    /// this reason started less than 30 s ago. `Ok(true)` when keys other than `seen` are
    /// now in use (fetched here, or by a refresh that finished while we waited).
    async fn refresh_for_unknown_key(&self, seen: &Arc<KeySet>) -> Result<bool, ()> {
        if !matches!(self.source, Source::Url { .. }) {
            return Ok(false);
        }
        let mut state = self.reload.lock().await;
        if !Arc::ptr_eq(seen, &self.current()) {
            return Ok(true);
        }
        if state
            .last_unknown_key_fetch
            .is_some_and(|at| at.elapsed() < UNKNOWN_KEY_REFETCH_GAP)
        {
            return Ok(false);
        }
        state.last_unknown_key_fetch = Some(Instant::now());
        self.refresh_logged(&mut state).await
    }

    /// Signature, `exp`/`nbf`, then `iss`, `aud` and `sub`; the principal on success.
    fn check(&self, token: &str, key: &Key, alg: Algorithm) -> Result<String, JwtError> {
        let mut validation = Validation::new(alg);
        validation.leeway = self.leeway_secs;
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp"]);
        // Checked below, exactly (the library would accept an array `iss`).
        validation.validate_aud = false;
        let claims = jsonwebtoken::decode::<Claims>(token, &key.decoding, &validation)
            .map_err(|e| library_error(&e))?
            .claims;
        match &claims.iss {
            Some(Value::String(iss)) if *iss == self.issuer => {}
            _ => return Err(JwtError::WrongIssuer),
        }
        let audience_ok = match &claims.aud {
            Some(Value::String(aud)) => *aud == self.audience,
            Some(Value::Array(auds)) => auds.iter().any(|aud| aud.as_str() == Some(&self.audience)),
            _ => false,
        };
        if !audience_ok {
            return Err(JwtError::WrongAudience);
        }
        match claims.sub {
            Some(Value::String(sub)) if !sub.is_empty() => Ok(format!("{} {sub}", self.issuer)),
            _ => Err(JwtError::MissingSubject),
        }
    }
}

/// Every 5 minutes, fetch the URL source again; ends when the verifier is gone.
async fn refresh_periodically(inner: Weak<Inner>) {
    let start = tokio::time::Instant::now() + URL_REFRESH_EVERY;
    let mut ticks = tokio::time::interval_at(start, URL_REFRESH_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let mut state = inner.reload.lock().await;
        // Failures are logged and leave the keys in use.
        let _ = inner.refresh_logged(&mut state).await;
    }
}

/// The claims looked at after the library checked the signature, `exp` and `nbf`.
#[derive(Deserialize)]
struct Claims {
    iss: Option<Value>,
    aud: Option<Value>,
    sub: Option<Value>,
}

/// The parts of the JOSE header needed to pick a key, read before any crypto.
struct TokenHeader {
    /// An accepted algorithm.
    alg: Algorithm,
    /// The key id, if any.
    kid: Option<String>,
}

impl TokenHeader {
    /// Split the token and read its header; `Malformed` or `UnsupportedAlgorithm`.
    fn parse(token: &str) -> Result<TokenHeader, JwtError> {
        #[derive(Deserialize)]
        struct Raw {
            alg: String,
            kid: Option<String>,
        }
        if token.len() > MAX_TOKEN_LEN {
            return Err(JwtError::Malformed);
        }
        let mut parts = token.split('.');
        let (Some(header), Some(_), Some(_), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(JwtError::Malformed);
        };
        let header = URL_SAFE_NO_PAD
            .decode(header)
            .map_err(|_| JwtError::Malformed)?;
        let raw: Raw = serde_json::from_slice(&header).map_err(|_| JwtError::Malformed)?;
        let alg = accepted_algorithm(&raw.alg).ok_or(JwtError::UnsupportedAlgorithm)?;
        Ok(TokenHeader { alg, kid: raw.kid })
    }
}

/// The algorithms this verifier accepts, by JOSE name; `None` for every other name.
fn accepted_algorithm(name: &str) -> Option<Algorithm> {
    Some(match name {
        "RS256" => Algorithm::RS256,
        "RS384" => Algorithm::RS384,
        "RS512" => Algorithm::RS512,
        "PS256" => Algorithm::PS256,
        "PS384" => Algorithm::PS384,
        "PS512" => Algorithm::PS512,
        "ES256" => Algorithm::ES256,
        "ES384" => Algorithm::ES384,
        "EdDSA" => Algorithm::EdDSA,
        _ => return None,
    })
}

/// Whole milliseconds, saturating.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use p256::elliptic_curve::Generate as _;
    use p256::elliptic_curve::common::getrandom;
    use rsa::traits::PublicKeyParts as _;
    use serde_json::json;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;
    use std::path::Path;

    const ISSUER: &str = "https://idp.example";
    const AUDIENCE: &str = "https://mcp.example/mcp";

    fn b64(bytes: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(bytes)
    }

    fn now() -> i64 {
        i64::try_from(jsonwebtoken::get_current_timestamp()).expect("timestamp fits i64")
    }

    /// Claims that pass every check, valid for an hour.
    fn good_claims(sub: &str) -> Value {
        json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "iat": now(), "exp": now() + 3600})
    }

    /// A private key of one of the accepted kinds.
    enum Signer {
        P256(p256::ecdsa::SigningKey),
        P384(p384::ecdsa::SigningKey),
        Rsa(Box<rsa::PrivateKey>),
        Ed25519(ed25519_dalek::SigningKey),
    }

    /// A test key: signs tokens, shows its public JWK.
    struct TestKey {
        kid: Option<String>,
        signer: Signer,
    }

    impl TestKey {
        fn p256(kid: &str) -> TestKey {
            TestKey::with(kid, Signer::P256(p256::ecdsa::SigningKey::generate()))
        }

        fn p384(kid: &str) -> TestKey {
            TestKey::with(kid, Signer::P384(p384::ecdsa::SigningKey::generate()))
        }

        fn rsa(kid: &str) -> TestKey {
            let key = rsa::PrivateKey::new(&mut getrandom::SysRng, 2048).expect("RSA keygen");
            TestKey::with(kid, Signer::Rsa(Box::new(key)))
        }

        fn ed25519(kid: &str) -> TestKey {
            let mut seed = [0u8; 32];
            getrandom::fill(&mut seed).expect("random seed");
            TestKey::with(
                kid,
                Signer::Ed25519(ed25519_dalek::SigningKey::from_bytes(&seed)),
            )
        }

        fn with(kid: &str, signer: Signer) -> TestKey {
            TestKey {
                kid: Some(kid.to_owned()),
                signer,
            }
        }

        /// The same key without a `kid` (in its JWK and its tokens).
        fn without_kid(mut self) -> TestKey {
            self.kid = None;
            self
        }

        /// Public JWK, with `use` and without `alg`.
        fn jwk(&self) -> Value {
            let mut jwk = match &self.signer {
                Signer::P256(key) => {
                    let point = key.verifying_key().to_sec1_point(false);
                    json!({"kty": "EC", "crv": "P-256",
                        "x": b64(point.x().expect("x")), "y": b64(point.y().expect("y"))})
                }
                Signer::P384(key) => {
                    let point = key.verifying_key().to_sec1_point(false);
                    json!({"kty": "EC", "crv": "P-384",
                        "x": b64(point.x().expect("x")), "y": b64(point.y().expect("y"))})
                }
                Signer::Rsa(key) => {
                    json!({"kty": "RSA", "n": b64(&key.n_bytes()), "e": b64(&key.e_bytes())})
                }
                Signer::Ed25519(key) => {
                    json!({"kty": "OKP", "crv": "Ed25519", "x": b64(key.verifying_key().as_bytes())})
                }
            };
            jwk["use"] = json!("sig");
            if let Some(kid) = &self.kid {
                jwk["kid"] = json!(kid);
            }
            jwk
        }

        /// A token with header `{"alg", "typ", "kid"}` and `claims`, signed per `alg`.
        fn sign(&self, alg: &str, claims: &Value) -> String {
            let mut header = json!({"alg": alg, "typ": "JWT"});
            if let Some(kid) = &self.kid {
                header["kid"] = json!(kid);
            }
            let input = format!(
                "{}.{}",
                b64(header.to_string().as_bytes()),
                b64(claims.to_string().as_bytes())
            );
            let signature = self.raw_signature(alg, input.as_bytes());
            format!("{input}.{}", b64(&signature))
        }

        fn raw_signature(&self, alg: &str, input: &[u8]) -> Vec<u8> {
            use ed25519_dalek::Signer as _;
            match (&self.signer, alg) {
                (Signer::P256(key), _) => {
                    let signature: p256::ecdsa::Signature = key.sign(input);
                    signature.to_bytes().to_vec()
                }
                (Signer::P384(key), _) => {
                    let signature: p384::ecdsa::Signature = key.sign(input);
                    signature.to_bytes().to_vec()
                }
                (Signer::Rsa(key), "PS256") => key
                    .sign_with_rng(
                        &mut getrandom::SysRng,
                        rsa::Pss::<Sha256>::new(),
                        &Sha256::digest(input),
                    )
                    .expect("PSS signature"),
                (Signer::Rsa(key), _) => key
                    .sign(rsa::Pkcs1v15Sign::new::<Sha256>(), &Sha256::digest(input))
                    .expect("PKCS#1 signature"),
                (Signer::Ed25519(key), _) => key.sign(input).to_bytes().to_vec(),
            }
        }

        /// An ES256/RS256/EdDSA token (per key type) with good claims for `sub`.
        fn token(&self, sub: &str) -> String {
            self.sign(self.default_alg(), &good_claims(sub))
        }

        fn default_alg(&self) -> &'static str {
            match self.signer {
                Signer::P256(_) => "ES256",
                Signer::P384(_) => "ES384",
                Signer::Rsa(_) => "RS256",
                Signer::Ed25519(_) => "EdDSA",
            }
        }
    }

    /// A directory removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> TempDir {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let dir = std::env::temp_dir().join(format!(
                "mcpt-jwt-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&dir).expect("temp dir");
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn jwks(keys: &[&TestKey]) -> String {
        json!({"keys": keys.iter().map(|k| k.jwk()).collect::<Vec<_>>()}).to_string()
    }

    fn config(jwks: JwksSource) -> JwtConfig {
        JwtConfig {
            jwks,
            issuer: ISSUER.to_owned(),
            audience: AUDIENCE.to_owned(),
            leeway: Duration::from_secs(30),
        }
    }

    /// A verifier over a JWKS file holding `document`; the directory lives as long as it.
    async fn file_verifier(document: &str) -> (JwtVerifier, TempDir, PathBuf) {
        let dir = TempDir::new();
        let path = dir.0.join("jwks.json");
        std::fs::write(&path, document).expect("write JWKS");
        let verifier = JwtVerifier::new(config(JwksSource::File(path.clone())))
            .await
            .expect("JWKS loads");
        (verifier, dir, path)
    }

    #[test]
    fn verifier_is_send_sync_and_clone() {
        fn check<T: Send + Sync + Clone + 'static>() {}
        check::<JwtVerifier>();
    }

    #[tokio::test]
    async fn valid_es256_token_gives_the_principal() {
        let key = TestKey::p256("k1");
        let (verifier, _dir, _) = file_verifier(&jwks(&[&key])).await;
        assert_eq!(
            verifier.verify(&key.token("alice")).await,
            Ok(format!("{ISSUER} alice"))
        );
    }

    #[tokio::test]
    async fn every_accepted_key_type_verifies() {
        let (p256, p384, rsa, ed) = (
            TestKey::p256("ec256"),
            TestKey::p384("ec384"),
            TestKey::rsa("rsa"),
            TestKey::ed25519("ed"),
        );
        let (verifier, _dir, _) = file_verifier(&jwks(&[&p256, &p384, &rsa, &ed])).await;
        let claims = good_claims("bob");
        for (key, alg) in [
            (&p256, "ES256"),
            (&p384, "ES384"),
            (&rsa, "RS256"),
            (&rsa, "PS256"),
            (&ed, "EdDSA"),
        ] {
            assert_eq!(
                verifier.verify(&key.sign(alg, &claims)).await,
                Ok(format!("{ISSUER} bob")),
                "{alg}"
            );
        }
        // The header's alg must fit the key it names.
        assert_eq!(
            verifier.verify(&p256.sign("ES384", &claims)).await,
            Err(JwtError::UnsupportedAlgorithm)
        );
        assert_eq!(
            verifier.verify(&ed.sign("ES256", &claims)).await,
            Err(JwtError::UnsupportedAlgorithm)
        );
        // A PKCS#1 signature presented as PSS does not verify.
        let mixed = rsa.sign("RS256", &claims);
        let (signing_input, signature) = mixed.rsplit_once('.').expect("three parts");
        let (_, payload) = signing_input.split_once('.').expect("three parts");
        let header = b64(json!({"alg": "PS256", "kid": "rsa"}).to_string().as_bytes());
        assert_eq!(
            verifier
                .verify(&format!("{header}.{payload}.{signature}"))
                .await,
            Err(JwtError::BadSignature)
        );
    }

    #[tokio::test]
    async fn jwk_alg_pins_the_token_alg() {
        let rsa = TestKey::rsa("rsa");
        let mut jwk = rsa.jwk();
        jwk["alg"] = json!("PS256");
        let (verifier, _dir, _) = file_verifier(&json!({"keys": [jwk]}).to_string()).await;
        let claims = good_claims("carol");
        assert!(verifier.verify(&rsa.sign("PS256", &claims)).await.is_ok());
        assert_eq!(
            verifier.verify(&rsa.sign("RS256", &claims)).await,
            Err(JwtError::UnsupportedAlgorithm)
        );
    }

    #[tokio::test]
    async fn exp_is_required_and_honoured_with_leeway() {
        let key = TestKey::p256("k1");
        let (verifier, _dir, _) = file_verifier(&jwks(&[&key])).await;
        let mut claims = good_claims("alice");
        claims["exp"] = json!(now() - 120);
        assert_eq!(
            verifier.verify(&key.sign("ES256", &claims)).await,
            Err(JwtError::Expired)
        );
        claims["exp"] = json!(now() - 10);
        assert!(
            verifier.verify(&key.sign("ES256", &claims)).await.is_ok(),
            "within the 30 s leeway"
        );
        claims.as_object_mut().expect("object").remove("exp");
        assert_eq!(
            verifier.verify(&key.sign("ES256", &claims)).await,
            Err(JwtError::MissingExpiry)
        );
        claims["exp"] = json!("tomorrow");
        assert_eq!(
            verifier.verify(&key.sign("ES256", &claims)).await,
            Err(JwtError::MissingExpiry),
            "not a NumericDate"
        );
    }

    #[tokio::test]
    async fn nbf_in_the_future_is_refused() {
        let key = TestKey::p256("k1");
        let (verifier, _dir, _) = file_verifier(&jwks(&[&key])).await;
        let mut claims = good_claims("alice");
        claims["nbf"] = json!(now() + 300);
        assert_eq!(
            verifier.verify(&key.sign("ES256", &claims)).await,
            Err(JwtError::NotYetValid)
        );
        claims["nbf"] = json!(now() + 10);
        assert!(
            verifier.verify(&key.sign("ES256", &claims)).await.is_ok(),
            "within the 30 s leeway"
        );
    }

    #[tokio::test]
    async fn issuer_is_checked_exactly() {
        let key = TestKey::p256("k1");
        let (verifier, _dir, _) = file_verifier(&jwks(&[&key])).await;
        for iss in [
            json!("https://evil.example"),
            json!("https://idp.example/"),
            json!([ISSUER]),
            Value::Null,
        ] {
            let mut claims = good_claims("alice");
            claims["iss"] = iss.clone();
            assert_eq!(
                verifier.verify(&key.sign("ES256", &claims)).await,
                Err(JwtError::WrongIssuer),
                "iss {iss}"
            );
        }
        let mut claims = good_claims("alice");
        claims.as_object_mut().expect("object").remove("iss");
        assert_eq!(
            verifier.verify(&key.sign("ES256", &claims)).await,
            Err(JwtError::WrongIssuer)
        );
    }

    #[tokio::test]
    async fn audience_is_a_string_or_an_array_containing_it() {
        let key = TestKey::p256("k1");
        let (verifier, _dir, _) = file_verifier(&jwks(&[&key])).await;
        let mut claims = good_claims("alice");
        claims["aud"] = json!(["https://other.example", AUDIENCE]);
        assert_eq!(
            verifier.verify(&key.sign("ES256", &claims)).await,
            Ok(format!("{ISSUER} alice"))
        );
        for aud in [
            json!("https://other.example"),
            json!(["https://other.example"]),
            json!([]),
            json!(42),
        ] {
            claims["aud"] = aud.clone();
            assert_eq!(
                verifier.verify(&key.sign("ES256", &claims)).await,
                Err(JwtError::WrongAudience),
                "aud {aud}"
            );
        }
        claims.as_object_mut().expect("object").remove("aud");
        assert_eq!(
            verifier.verify(&key.sign("ES256", &claims)).await,
            Err(JwtError::WrongAudience)
        );
    }

    #[tokio::test]
    async fn subject_is_required_and_non_empty() {
        let key = TestKey::p256("k1");
        let (verifier, _dir, _) = file_verifier(&jwks(&[&key])).await;
        let mut claims = good_claims("alice");
        for sub in [json!(""), json!(7)] {
            claims["sub"] = sub;
            assert_eq!(
                verifier.verify(&key.sign("ES256", &claims)).await,
                Err(JwtError::MissingSubject)
            );
        }
        claims.as_object_mut().expect("object").remove("sub");
        assert_eq!(
            verifier.verify(&key.sign("ES256", &claims)).await,
            Err(JwtError::MissingSubject)
        );
    }

    #[tokio::test]
    async fn signature_by_another_key_or_over_other_claims_is_refused() {
        let key = TestKey::p256("k1");
        let impostor = TestKey::p256("k1");
        let (verifier, _dir, _) = file_verifier(&jwks(&[&key])).await;
        assert_eq!(
            verifier.verify(&impostor.token("alice")).await,
            Err(JwtError::BadSignature)
        );
        // Alice's signature on Mallory's claims.
        let alice = key.token("alice");
        let mallory = key.token("mallory");
        let (alice_input, alice_signature) = alice.rsplit_once('.').expect("three parts");
        let (mallory_input, _) = mallory.rsplit_once('.').expect("three parts");
        assert_ne!(alice_input, mallory_input);
        assert_eq!(
            verifier
                .verify(&format!("{mallory_input}.{alice_signature}"))
                .await,
            Err(JwtError::BadSignature)
        );
        assert_eq!(
            verifier.verify(&format!("{alice_input}.")).await,
            Err(JwtError::BadSignature)
        );
    }

    #[tokio::test]
    async fn alg_none_and_hmac_are_refused() {
        let key = TestKey::p256("k1");
        let document = jwks(&[&key]);
        let (verifier, _dir, _) = file_verifier(&document).await;
        let claims = good_claims("alice");
        let payload = b64(claims.to_string().as_bytes());
        for alg in ["none", "None", "NONE"] {
            let header = b64(json!({"alg": alg, "kid": "k1"}).to_string().as_bytes());
            assert_eq!(
                verifier.verify(&format!("{header}.{payload}.")).await,
                Err(JwtError::UnsupportedAlgorithm),
                "alg {alg}"
            );
        }
        // Algorithm confusion: HMAC keyed with the public key, in every form a confused
        // verifier might use.
        let point = match &key.signer {
            Signer::P256(k) => k.verifying_key().to_sec1_point(false).as_bytes().to_vec(),
            _ => unreachable!("a P-256 key"),
        };
        let secrets: [Vec<u8>; 3] = [
            point,
            key.jwk().to_string().into_bytes(),
            document.into_bytes(),
        ];
        for secret in &secrets {
            for alg in [
                jsonwebtoken::Algorithm::HS256,
                jsonwebtoken::Algorithm::HS384,
                jsonwebtoken::Algorithm::HS512,
            ] {
                let mut header = jsonwebtoken::Header::new(alg);
                header.kid = Some("k1".to_owned());
                let token = jsonwebtoken::encode(
                    &header,
                    &claims,
                    &jsonwebtoken::EncodingKey::from_secret(secret).expect("HMAC key"),
                )
                .expect("HMAC token");
                assert_eq!(
                    verifier.verify(&token).await,
                    Err(JwtError::UnsupportedAlgorithm),
                    "{alg:?}"
                );
            }
        }
    }

    #[tokio::test]
    async fn keys_are_chosen_by_kid_or_as_the_only_key() {
        let (a, b) = (TestKey::p256("a"), TestKey::p256("b"));
        let (verifier, _dir, _) = file_verifier(&jwks(&[&a, &b])).await;
        assert!(verifier.verify(&a.token("alice")).await.is_ok());
        assert!(verifier.verify(&b.token("bob")).await.is_ok());
        let stranger = TestKey::p256("c");
        assert_eq!(
            verifier.verify(&stranger.token("carol")).await,
            Err(JwtError::UnknownKey)
        );
        // No kid with two keys in the set: ambiguous.
        let a_no_kid = TestKey {
            kid: None,
            signer: a.signer,
        };
        assert_eq!(
            verifier.verify(&a_no_kid.token("alice")).await,
            Err(JwtError::UnknownKey)
        );

        // No kid, and a set of one key (itself without kid): that key.
        let only = TestKey::ed25519("x").without_kid();
        let (verifier, _dir, _) = file_verifier(&jwks(&[&only])).await;
        assert_eq!(
            verifier.verify(&only.token("dave")).await,
            Ok(format!("{ISSUER} dave"))
        );
        assert_eq!(
            verifier
                .verify(&TestKey::ed25519("x").without_kid().token("dave"))
                .await,
            Err(JwtError::BadSignature)
        );
    }

    #[tokio::test]
    async fn malformed_tokens_are_refused_before_any_crypto() {
        let key = TestKey::p256("k1");
        let (verifier, _dir, _) = file_verifier(&jwks(&[&key])).await;
        let good = key.token("alice");
        let (header, rest) = good.split_once('.').expect("three parts");
        let oversized = format!("{good}{}", "A".repeat(MAX_TOKEN_LEN));
        for token in [
            String::new(),
            "abc".to_owned(),
            "a.b".to_owned(),
            format!("{good}.extra"),
            format!("!!.{rest}"),
            format!("{}.{rest}", b64(b"not json")),
            format!("{}.{rest}", b64(br#"{"kid":"k1"}"#)),
            format!("{header}.{}", "x.y"),
            oversized,
        ] {
            assert_eq!(
                verifier.verify(&token).await,
                Err(JwtError::Malformed),
                "token {token:.40}"
            );
        }
    }

    #[tokio::test]
    async fn file_rotation_is_picked_up_after_an_mtime_change() {
        let (old, new) = (TestKey::p256("old"), TestKey::rsa("new"));
        let (verifier, _dir, path) = file_verifier(&jwks(&[&old])).await;
        let loaded = Instant::now();
        let old_token = old.token("alice");
        assert!(verifier.verify(&old_token).await.is_ok());

        std::fs::write(&path, jwks(&[&new])).expect("rewrite JWKS");
        let new_token = new.token("alice");
        let early = verifier.verify(&new_token).await;
        if loaded.elapsed() < Duration::from_millis(800) {
            assert_eq!(early, Err(JwtError::UnknownKey), "looked at once a second");
        }
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(
            verifier.verify(&new_token).await,
            Ok(format!("{ISSUER} alice"))
        );
        assert_eq!(verifier.verify(&old_token).await, Err(JwtError::UnknownKey));
    }

    #[tokio::test]
    async fn a_broken_file_keeps_the_keys_in_use() {
        let key = TestKey::p256("k1");
        let (verifier, _dir, path) = file_verifier(&jwks(&[&key])).await;
        let token = key.token("alice");
        for broken in ["{\"keys\": [", "{\"keys\": []}"] {
            std::fs::write(&path, broken).expect("break JWKS");
            tokio::time::sleep(Duration::from_millis(1100)).await;
            assert!(verifier.verify(&token).await.is_ok(), "{broken}");
            // An unknown kid while the keys cannot be refreshed: maybe our fault.
            assert_eq!(
                verifier.verify(&TestKey::p256("k2").token("bob")).await,
                Err(JwtError::KeysUnavailable)
            );
        }
        std::fs::remove_file(&path).expect("remove JWKS");
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert!(verifier.verify(&token).await.is_ok());
        std::fs::write(&path, jwks(&[&key])).expect("restore JWKS");
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(
            verifier.verify(&TestKey::p256("k2").token("bob")).await,
            Err(JwtError::UnknownKey)
        );
    }

    #[tokio::test]
    async fn unusable_keys_are_skipped_and_symmetric_ones_never_used() {
        let ec = TestKey::p256("ec");
        let secret = b"a shared secret of some length!!";
        let mut encryption = TestKey::rsa("enc").jwk();
        encryption["use"] = json!("enc");
        let mut oaep = TestKey::rsa("oaep").jwk();
        oaep.as_object_mut().expect("object").remove("use");
        oaep["alg"] = json!("RSA-OAEP");
        let document = json!({"keys": [
            {"kty": "oct", "kid": "hmac", "k": b64(secret)},
            encryption,
            oaep,
            {"kty": "EC", "crv": "P-521", "kid": "p521", "x": "AA", "y": "AA"},
            {"kty": "EC", "crv": "P-256", "kid": "bad", "x": b64(&[1; 32]), "y": b64(&[2; 32])},
            {"kty": "RSA", "kid": "short", "n": b64(&[0xff; 128]), "e": "AQAB"},
            "not an object",
            ec.jwk(),
        ]});
        let (verifier, _dir, _) = file_verifier(&document.to_string()).await;
        assert_eq!(verifier.inner.current().keys.len(), 1);
        assert!(verifier.verify(&ec.token("alice")).await.is_ok());
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
        header.kid = Some("hmac".to_owned());
        let hmac = jsonwebtoken::encode(
            &header,
            &good_claims("alice"),
            &jsonwebtoken::EncodingKey::from_secret(secret).expect("HMAC key"),
        )
        .expect("HMAC token");
        assert_eq!(
            verifier.verify(&hmac).await,
            Err(JwtError::UnsupportedAlgorithm)
        );
    }

    #[tokio::test]
    async fn an_unusable_jwks_at_start_is_a_one_line_error_naming_it() {
        let dir = TempDir::new();
        let path = dir.0.join("jwks.json");
        let start = |path: &Path| JwtVerifier::new(config(JwksSource::File(path.to_owned())));

        let missing = start(&path).await.expect_err("missing file").to_string();
        for (document, why) in [
            ("not json", "not a JSON document"),
            ("{\"keys\": {}}", "no \"keys\" array"),
            ("{\"keys\": []}", "the set is empty"),
            (
                r#"{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}"#,
                "symmetric",
            ),
        ] {
            std::fs::write(&path, document).expect("write JWKS");
            let error = start(&path).await.expect_err(document).to_string();
            assert!(error.contains(why), "{error}");
            assert!(error.contains(&path.display().to_string()), "{error}");
            assert!(!error.contains('\n'), "{error}");
        }
        assert!(missing.contains(&path.display().to_string()), "{missing}");

        for url in ["ftp://idp.example/jwks", "https:///jwks", "not a url"] {
            let error = JwtVerifier::new(config(JwksSource::Url(url.to_owned())))
                .await
                .expect_err(url)
                .to_string();
            assert!(error.contains(url), "{error}");
        }
    }

    /// A loopback HTTP server answering every request with the current `body` (and
    /// `status`), counting requests.
    struct JwksServer {
        url: String,
        body: Arc<std::sync::Mutex<(u16, String)>>,
        hits: Arc<AtomicUsize>,
    }

    impl JwksServer {
        async fn start(status: u16, body: String) -> JwksServer {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let url = format!("http://{}/jwks.json", listener.local_addr().expect("addr"));
            let body = Arc::new(std::sync::Mutex::new((status, body)));
            let hits = Arc::new(AtomicUsize::new(0));
            let (served, counted) = (Arc::clone(&body), Arc::clone(&hits));
            tokio::spawn(async move {
                while let Ok((mut socket, _)) = listener.accept().await {
                    let mut request = Vec::new();
                    let mut buffer = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buffer).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => request.extend_from_slice(&buffer[..n]),
                        }
                    }
                    counted.fetch_add(1, Ordering::SeqCst);
                    let (status, body) = served.lock().expect("body").clone();
                    let response = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(response.as_bytes()).await;
                    let _ = socket.shutdown().await;
                }
            });
            JwksServer { url, body, hits }
        }

        fn serve(&self, status: u16, body: String) {
            *self.body.lock().expect("body") = (status, body);
        }

        fn hits(&self) -> usize {
            self.hits.load(Ordering::SeqCst)
        }
    }

    #[tokio::test]
    async fn url_source_refetches_on_unknown_kid_at_most_every_30_s() {
        let (a, b) = (TestKey::p256("a"), TestKey::rsa("b"));
        let server = JwksServer::start(200, jwks(&[&a])).await;
        let verifier = JwtVerifier::new(config(JwksSource::Url(server.url.clone())))
            .await
            .expect("JWKS fetched");
        assert_eq!(server.hits(), 1);
        assert!(verifier.verify(&a.token("alice")).await.is_ok());
        assert_eq!(server.hits(), 1, "known keys need no fetch");

        // Rotation at the identity provider: the new kid triggers one fetch.
        server.serve(200, jwks(&[&a, &b]));
        assert_eq!(
            verifier.verify(&b.token("bob")).await,
            Ok(format!("{ISSUER} bob"))
        );
        assert_eq!(server.hits(), 2);

        // A flood of bogus kids right after: no more fetches.
        for n in 0..20 {
            let bogus = TestKey::p256(&format!("bogus-{n}"));
            assert_eq!(
                verifier.verify(&bogus.token("mallory")).await,
                Err(JwtError::UnknownKey)
            );
        }
        assert_eq!(server.hits(), 2);
        assert!(verifier.verify(&a.token("alice")).await.is_ok());
    }

    #[tokio::test]
    async fn url_source_failures_at_start_name_the_url() {
        let server = JwksServer::start(404, "nope".to_owned()).await;
        let error = JwtVerifier::new(config(JwksSource::Url(server.url.clone())))
            .await
            .expect_err("404")
            .to_string();
        assert!(
            error.contains(&server.url) && error.contains("404"),
            "{error}"
        );

        server.serve(
            200,
            format!("{{\"keys\": [\"{}\"]}}", "A".repeat(MAX_JWKS_BYTES)),
        );
        let error = JwtVerifier::new(config(JwksSource::Url(server.url.clone())))
            .await
            .expect_err("too large")
            .to_string();
        assert!(error.contains("length limit"), "{error}");

        // https to a server that does not speak TLS: the handshake (rustls, ring) fails.
        let plain = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let https = format!("https://{}/jwks", plain.local_addr().expect("addr"));
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = plain.accept().await {
                let _ = socket.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
            }
        });
        let error = JwtVerifier::new(config(JwksSource::Url(https.clone())))
            .await
            .expect_err("not TLS")
            .to_string();
        assert!(error.contains(&https), "{error}");

        // Nothing listens on a port just freed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let url = format!("http://127.0.0.1:{port}/jwks");
        let error = JwtVerifier::new(config(JwksSource::Url(url.clone())))
            .await
            .expect_err("refused")
            .to_string();
        assert!(error.contains(&url) && !error.contains('\n'), "{error}");
    }

    #[test]
    fn error_texts_are_short_and_fixed() {
        assert_eq!(JwtError::Expired.to_string(), "token expired");
        assert_eq!(
            JwtError::BadSignature.to_string(),
            "token signature invalid"
        );
        assert_eq!(
            JwtError::UnsupportedAlgorithm.to_string(),
            "token signing algorithm not accepted"
        );
    }

    #[test]
    fn rsa_bounds() {
        assert_eq!(significant_bits(&[0, 0, 1]), 1);
        assert_eq!(significant_bits(&[0x80, 0]), 16);
        assert_eq!(significant_bits(&[]), 0);
        let n = [0xff; 256];
        assert!(check_rsa(&n, &[1, 0, 1]).is_ok());
        assert!(check_rsa(&n, &[1]).is_err(), "e = 1");
        assert!(check_rsa(&n, &[1, 0, 0]).is_err(), "even e");
        assert!(check_rsa(&n, &[1, 0, 0, 0, 0, 1]).is_err(), "e too large");
        assert!(check_rsa(&[0xff; 255], &[1, 0, 1]).is_err(), "2040 bits");
        assert!(check_rsa(&[0xfe; 256], &[1, 0, 1]).is_err(), "even n");
    }
}
