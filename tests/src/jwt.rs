//! A token issuer for the end-to-end tests of `MCPT_AUTH=jwt`: a fresh ES256 (P-256) key
//! pair, its JWKS to hand the gateway (as a file or served over HTTP), and signed tokens —
//! with the usual claims, with any claims at all, or signed by a key the JWKS does not
//! hold but under the same `kid` (for bad-signature tests).

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use p256::ecdsa::signature::Signer as _;
use p256::ecdsa::{Signature, SigningKey};
use p256::elliptic_curve::Generate as _;
use serde_json::{Value, json};

/// A test identity provider: signs ES256 tokens with its own key.
pub struct TestIssuer {
    issuer: String,
    kid: String,
    key: SigningKey,
    /// Signs [`TestIssuer::foreign_token`]: a key outside the JWKS.
    foreign: SigningKey,
}

impl TestIssuer {
    /// An issuer whose tokens carry `iss` = `issuer`, with a fresh P-256 key and a `kid`
    /// derived from it (so two issuers never share a `kid`).
    pub fn new(issuer: &str) -> TestIssuer {
        let key = SigningKey::generate();
        let (x, _) = public_coordinates(&key);
        let kid = format!(
            "es256-{}",
            x.iter()
                .take(8)
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
        TestIssuer {
            issuer: issuer.to_owned(),
            kid,
            key,
            foreign: SigningKey::generate(),
        }
    }

    /// The `iss` of this issuer's tokens.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The `kid` of the key, in the JWKS and in every token header.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The JWKS document: `{"keys": [the public key, with kid, "use": "sig", "alg": "ES256"]}`.
    pub fn jwks_json(&self) -> String {
        let (x, y) = public_coordinates(&self.key);
        json!({"keys": [{
            "kty": "EC",
            "crv": "P-256",
            "x": URL_SAFE_NO_PAD.encode(x),
            "y": URL_SAFE_NO_PAD.encode(y),
            "kid": self.kid,
            "use": "sig",
            "alg": "ES256",
        }]})
        .to_string()
    }

    /// The usual claims: `iss`, `sub`, `aud`, `iat` = now and `exp` = now +
    /// `expires_in_secs` (negative: already expired).
    pub fn claims(&self, sub: &str, audience: &str, expires_in_secs: i64) -> Value {
        let now = unix_now();
        json!({
            "iss": self.issuer,
            "sub": sub,
            "aud": audience,
            "iat": now,
            "exp": now + expires_in_secs,
        })
    }

    /// A token with [`TestIssuer::claims`].
    pub fn token(&self, sub: &str, audience: &str, expires_in_secs: i64) -> String {
        self.token_with(self.claims(sub, audience, expires_in_secs))
    }

    /// A token with exactly `claims` (nothing added), signed with the issuer's key.
    pub fn token_with(&self, claims: Value) -> String {
        sign(&self.key, &self.kid, &claims)
    }

    /// Like [`TestIssuer::token`] and with the same `kid`, but signed by another key: the
    /// gateway must refuse it as a bad signature.
    pub fn foreign_token(&self, sub: &str, audience: &str, expires_in_secs: i64) -> String {
        sign(
            &self.foreign,
            &self.kid,
            &self.claims(sub, audience, expires_in_secs),
        )
    }
}

/// The compact JWS of `claims`: header `{"alg": "ES256", "typ": "JWT", "kid"}`.
fn sign(key: &SigningKey, kid: &str, claims: &Value) -> String {
    let header = json!({"alg": "ES256", "typ": "JWT", "kid": kid});
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let signature: Signature = key.sign(input.as_bytes());
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature.to_bytes()))
}

/// The x and y coordinates (32 bytes each) of the key's public point.
fn public_coordinates(key: &SigningKey) -> (Vec<u8>, Vec<u8>) {
    // An uncompressed SEC1 point: 0x04, then x, then y.
    let point = key.verifying_key().to_sec1_point(false);
    let bytes = point.as_bytes();
    let coordinates = bytes.get(1..).unwrap_or_default();
    let (x, y) = coordinates.split_at(coordinates.len() / 2);
    (x.to_vec(), y.to_vec())
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
