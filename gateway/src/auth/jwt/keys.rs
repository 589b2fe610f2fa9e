//! The JWKS document → the usable signing keys: one [`Key`] per JWK that passes the rules
//! (asymmetric, `use` = `sig` when present, a known type and curve, RSA of 2048–8192 bits
//! with a sane exponent), and why each other JWK was skipped.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::crypto::CryptoProvider;
use jsonwebtoken::jwk::{
    AlgorithmParameters, EllipticCurve, Jwk, KeyOperations, OtherKeyParameters, PublicKeyUse,
};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize as _;
use serde_json::Value;

use super::errors::KeySetError;
use super::{JwtError, accepted_algorithm};

/// Smallest and largest RSA modulus accepted, in bits.
const RSA_BITS: std::ops::RangeInclusive<usize> = 2048..=8192;
/// Largest RSA public exponent accepted (the `rsa` crate's bound).
const RSA_MAX_EXPONENT: u64 = (1 << 33) - 1;

/// The usable signing keys of one JWKS document.
pub(super) struct KeySet {
    /// In document order.
    pub(super) keys: Vec<Key>,
}

impl KeySet {
    /// The key for a token: by `kid`, or the only key when the token has none.
    /// `Ok(None)` when no key is named so; `Err(UnsupportedAlgorithm)` when keys are
    /// named so but none fits `alg`.
    pub(super) fn select(
        &self,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<Option<&Key>, JwtError> {
        let named = |key: &&Key| match kid {
            Some(kid) => key.kid.as_deref() == Some(kid),
            None => self.keys.len() == 1,
        };
        let mut any_named = false;
        for key in self.keys.iter().filter(named) {
            if key.fits(alg) {
                return Ok(Some(key));
            }
            any_named = true;
        }
        if any_named {
            Err(JwtError::UnsupportedAlgorithm)
        } else {
            Ok(None)
        }
    }
}

/// One signing key of the set.
pub(super) struct Key {
    /// The JWK's `kid`.
    pub(super) kid: Option<String>,
    /// The JWK's `alg`, when it has one: then tokens must use exactly it.
    pub(super) alg: Option<Algorithm>,
    /// Type and curve.
    pub(super) kind: KeyKind,
    /// The public key, for the library.
    pub(super) decoding: DecodingKey,
}

/// Key type and curve, which decide the algorithms a key may verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeyKind {
    /// `kty: RSA`: RS* and PS*.
    Rsa,
    /// `kty: EC`, `crv: P-256`: ES256.
    P256,
    /// `kty: EC`, `crv: P-384`: ES384.
    P384,
    /// `kty: OKP`, `crv: Ed25519`: EdDSA.
    Ed25519,
}

impl KeyKind {
    /// Whether a key of this kind may verify `alg`.
    pub(super) fn allows(self, alg: Algorithm) -> bool {
        use Algorithm::{ES256, ES384, EdDSA, PS256, PS384, PS512, RS256, RS384, RS512};
        matches!(
            (self, alg),
            (KeyKind::Rsa, RS256 | RS384 | RS512 | PS256 | PS384 | PS512)
                | (KeyKind::P256, ES256)
                | (KeyKind::P384, ES384)
                | (KeyKind::Ed25519, EdDSA)
        )
    }

    /// An algorithm of this kind, to check the key material when the set is loaded.
    pub(super) fn probe_algorithm(self) -> Algorithm {
        match self {
            KeyKind::Rsa => Algorithm::RS256,
            KeyKind::P256 => Algorithm::ES256,
            KeyKind::P384 => Algorithm::ES384,
            KeyKind::Ed25519 => Algorithm::EdDSA,
        }
    }
}

impl Key {
    /// Whether this key may verify a token signed with `alg`.
    pub(super) fn fits(&self, alg: Algorithm) -> bool {
        self.kind.allows(alg) && self.alg.is_none_or(|own| own == alg)
    }

    /// Read one JWK; `Err` says why it is not a usable signing key.
    // A String: the reason is only logged or listed in `NoUsableKey`, never matched on.
    pub(super) fn from_jwk(value: &Value, provider: &CryptoProvider) -> Result<Key, String> {
        let jwk = read_jwk(value)?;
        let common = &jwk.common;
        if let Some(usage) = &common.public_key_use
            && *usage != PublicKeyUse::Signature
        {
            let usage = match usage {
                PublicKeyUse::Signature => "sig",
                PublicKeyUse::Encryption => "enc",
                PublicKeyUse::Other(other) => other,
            };
            return Err(format!("\"use\" is {usage:?}, not \"sig\""));
        }
        if let Some(ops) = &common.key_operations
            && !ops.contains(&KeyOperations::Verify)
        {
            return Err("\"key_ops\" lacks \"verify\"".to_owned());
        }
        // The name as sent (a string: `read_jwk`): the library reads every name it does not
        // know as one `UNKNOWN_ALGORITHM`, and the message names it.
        let alg = match value.get("alg").and_then(Value::as_str) {
            None => None,
            Some(name) => Some(
                accepted_algorithm(name)
                    .ok_or_else(|| format!("algorithm {name:?} is not accepted"))?,
            ),
        };
        let kind = key_kind(&jwk.algorithm)?;
        if let Some(alg) = alg
            && !kind.allows(alg)
        {
            return Err(format!("algorithm {alg:?} does not fit a {kind:?} key"));
        }
        let decoding = DecodingKey::from_jwk(&jwk).map_err(|_| match kind {
            KeyKind::Rsa => "unreadable \"n\" or \"e\"".to_owned(),
            KeyKind::P256 | KeyKind::P384 => "unreadable \"x\" or \"y\"".to_owned(),
            KeyKind::Ed25519 => "unreadable \"x\"".to_owned(),
        })?;
        // Parse the key now rather than on the first token.
        let probe = alg.unwrap_or(kind.probe_algorithm());
        (provider.verifier_factory)(&probe, &decoding)
            .map_err(|e| format!("invalid key material: {e}"))?;
        Ok(Key {
            kid: common.key_id.clone(),
            alg,
            kind,
            decoding,
        })
    }
}

/// One member of the set as the library's [`Jwk`].
// A String: a per-key "skipped because" reason, as in `Key::from_jwk`.
fn read_jwk(value: &Value) -> Result<Jwk, String> {
    if !value.is_object() {
        return Err("not a JSON object".to_owned());
    }
    // The library reads a null member as absent and a number as an enum variant's index;
    // such keys were refused, and still are.
    if let Some(name) = ["kid", "use", "alg", "kty", "crv"]
        .into_iter()
        .find(|name| value.get(name).is_some_and(|member| !member.is_string()))
    {
        return Err(format!("\"{name}\" is not a string"));
    }
    if value.get("key_ops").is_some_and(|ops| !ops.is_array()) {
        return Err("\"key_ops\" lacks \"verify\"".to_owned());
    }
    Jwk::deserialize(value).map_err(|e| format!("not a JWK: {e}"))
}

/// The key's type and curve, once its material has the sizes and bounds accepted.
// A String: a per-key "skipped because" reason, as in `Key::from_jwk`.
fn key_kind(params: &AlgorithmParameters) -> Result<KeyKind, String> {
    match params {
        AlgorithmParameters::RSA(rsa) => {
            check_rsa(&base64url("n", &rsa.n)?, &base64url("e", &rsa.e)?)?;
            Ok(KeyKind::Rsa)
        }
        AlgorithmParameters::EllipticCurve(ec) => {
            let (kind, size) = match ec.curve {
                EllipticCurve::P256 => (KeyKind::P256, 32),
                EllipticCurve::P384 => (KeyKind::P384, 48),
                ref other => return Err(unsupported_curve("EC", Some(curve_name(other)))),
            };
            let (x, y) = (base64url("x", &ec.x)?, base64url("y", &ec.y)?);
            if x.len() != size || y.len() != size {
                return Err(format!("coordinates are not {size} bytes"));
            }
            Ok(kind)
        }
        AlgorithmParameters::OctetKeyPair(okp) => {
            if okp.curve != EllipticCurve::Ed25519 {
                return Err(unsupported_curve("OKP", Some(curve_name(&okp.curve))));
            }
            if base64url("x", &okp.x)?.len() != 32 {
                return Err("\"x\" is not 32 bytes".to_owned());
            }
            Ok(KeyKind::Ed25519)
        }
        AlgorithmParameters::OctetKey(_) => Err("symmetric keys are never accepted".to_owned()),
        AlgorithmParameters::Other(other) => Err(unreadable(other)),
        _ => Err("key type not supported".to_owned()),
    }
}

/// Why a JWK the library could not give parameters of its type is unusable: an unknown
/// type or curve, or a member of a known type missing or not a string.
fn unreadable(other: &OtherKeyParameters) -> String {
    let text = |name: &str| other.fields.get(name).and_then(Value::as_str);
    let members: &[&str] = match (text("kty"), text("crv")) {
        (None, _) => return "no \"kty\"".to_owned(),
        (Some("oct"), _) => return "symmetric keys are never accepted".to_owned(),
        (Some("RSA"), _) => &["n", "e"],
        (Some("EC"), Some("P-256" | "P-384")) => &["x", "y"],
        (Some("OKP"), Some("Ed25519")) => &["x"],
        (Some(kty @ ("EC" | "OKP")), curve) => return unsupported_curve(kty, curve),
        (Some(kty), _) => return format!("key type {kty:?} is not supported"),
    };
    for name in members {
        match other.fields.get(*name) {
            None => return format!("no \"{name}\""),
            Some(Value::String(_)) => {}
            Some(_) => return format!("\"{name}\" is not a string"),
        }
    }
    "not a JWK".to_owned()
}

fn unsupported_curve(kty: &str, curve: Option<&str>) -> String {
    format!("{kty} curve {curve:?} is not supported")
}

/// The JOSE name of a curve.
fn curve_name(curve: &EllipticCurve) -> &'static str {
    match curve {
        EllipticCurve::P256 => "P-256",
        EllipticCurve::P384 => "P-384",
        EllipticCurve::P521 => "P-521",
        EllipticCurve::Ed25519 => "Ed25519",
        _ => "unknown",
    }
}

/// A key member's bytes.
// A String: a per-key "skipped because" reason, as in `Key::from_jwk`.
fn base64url(name: &str, text: &str) -> Result<Vec<u8>, String> {
    URL_SAFE_NO_PAD
        .decode(text)
        .map_err(|_| format!("\"{name}\" is not base64url"))
}

/// The RSA public key checks the `rsa` crate makes when verifying, plus a 2048-bit floor.
// A String: a per-key "skipped because" reason, as in `Key::from_jwk`.
pub(super) fn check_rsa(n: &[u8], e: &[u8]) -> Result<(), String> {
    let bits = significant_bits(n);
    if !RSA_BITS.contains(&bits) {
        return Err(format!(
            "RSA modulus of {bits} bits (accepted: {} to {})",
            RSA_BITS.start(),
            RSA_BITS.end()
        ));
    }
    let odd = |bytes: &[u8]| bytes.last().is_some_and(|low| low & 1 == 1);
    let e_value = e
        .iter()
        .skip_while(|byte| **byte == 0)
        .try_fold(0u64, |acc, byte| {
            acc.checked_mul(256).map(|acc| acc + u64::from(*byte))
        });
    if !odd(n) || !odd(e) || !e_value.is_some_and(|e| (3..=RSA_MAX_EXPONENT).contains(&e)) {
        return Err("RSA modulus or exponent out of bounds".to_owned());
    }
    Ok(())
}

/// Bit length of a big-endian unsigned integer.
pub(super) fn significant_bits(bytes: &[u8]) -> usize {
    match bytes.iter().position(|byte| *byte != 0) {
        Some(first) => (bytes.len() - first - 1) * 8 + (8 - bytes[first].leading_zeros() as usize),
        None => 0,
    }
}

/// Parse a JWKS document: `Ok` with the usable keys and why the others were skipped;
/// `Err` when it is no JWKS or holds no usable signing key.
pub(super) fn parse_jwks(document: &[u8]) -> Result<(KeySet, Vec<String>), KeySetError> {
    let value: Value =
        serde_json::from_slice(document).map_err(|e| KeySetError::NotJson(e.into()))?;
    // Not `JwkSet`: it refuses the whole set for one malformed key, which is skipped here.
    let Some(jwks) = value.get("keys").and_then(Value::as_array) else {
        return Err(KeySetError::NoKeysArray);
    };
    let provider = CryptoProvider::try_get_default().ok_or(KeySetError::NoCryptoProvider)?;
    let mut keys = Vec::new();
    let mut skipped = Vec::new();
    for (index, jwk) in jwks.iter().enumerate() {
        match Key::from_jwk(jwk, provider) {
            Ok(key) => keys.push(key),
            Err(why) => {
                let name = match jwk.get("kid").and_then(Value::as_str) {
                    Some(kid) => format!("key {index} (kid {kid:?})"),
                    None => format!("key {index}"),
                };
                skipped.push(format!("{name}: {why}"));
            }
        }
    }
    if keys.is_empty() {
        return Err(KeySetError::NoUsableKey(skipped));
    }
    Ok((KeySet { keys }, skipped))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::parse_jwks;

    /// Why each unusable JWK is skipped: the reasons a set of only such keys is refused with.
    #[test]
    fn skipped_keys_say_why() {
        let coordinate = "A".repeat(43);
        let cases = [
            (json!("not an object"), "not a JSON object"),
            (json!({"crv": "P-256"}), "no \"kty\""),
            (
                json!({"kty": 0, "crv": "P-256", "x": coordinate, "y": coordinate}),
                "\"kty\" is not a string",
            ),
            (
                json!({"kty": "EC", "crv": 0, "x": coordinate, "y": coordinate}),
                "\"crv\" is not a string",
            ),
            (
                json!({"kty": "EC", "crv": "P-256", "x": coordinate, "y": coordinate, "use": null}),
                "\"use\" is not a string",
            ),
            (
                json!({"kty": "EC", "crv": "P-256", "x": coordinate, "y": coordinate, "kid": 7}),
                "\"kid\" is not a string",
            ),
            (
                json!({"kty": "EC", "crv": "P-256", "x": coordinate, "y": coordinate, "use": "enc"}),
                "\"use\" is \"enc\", not \"sig\"",
            ),
            (
                json!({"kty": "EC", "crv": "P-256", "x": coordinate, "y": coordinate, "key_ops": ["sign"]}),
                "\"key_ops\" lacks \"verify\"",
            ),
            (
                json!({"kty": "EC", "crv": "P-256", "x": coordinate, "y": coordinate, "alg": "ES512"}),
                "algorithm \"ES512\" is not accepted",
            ),
            (
                json!({"kty": "EC", "crv": "P-256", "x": coordinate, "y": coordinate, "alg": "RS256"}),
                "algorithm RS256 does not fit a P256 key",
            ),
            (
                json!({"kty": "EC", "crv": "P-521", "x": coordinate, "y": coordinate}),
                "EC curve Some(\"P-521\") is not supported",
            ),
            (
                json!({"kty": "EC", "crv": "secp256k1", "x": coordinate, "y": coordinate}),
                "EC curve Some(\"secp256k1\") is not supported",
            ),
            (
                json!({"kty": "OKP", "crv": "X25519", "x": coordinate}),
                "OKP curve Some(\"X25519\") is not supported",
            ),
            (
                json!({"kty": "EC", "crv": "P-256", "x": coordinate}),
                "no \"y\"",
            ),
            (
                json!({"kty": "EC", "crv": "P-256", "x": "!!", "y": coordinate}),
                "\"x\" is not base64url",
            ),
            (
                json!({"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA"}),
                "coordinates are not 32 bytes",
            ),
            (
                json!({"kty": "OKP", "crv": "Ed25519", "x": "AA"}),
                "\"x\" is not 32 bytes",
            ),
            (json!({"kty": "RSA", "n": "AA"}), "no \"e\""),
            (
                json!({"kty": "RSA", "n": "AA", "e": 3}),
                "\"e\" is not a string",
            ),
            (
                json!({"kty": "RSA", "n": "AQAB", "e": "AQAB"}),
                "RSA modulus of 17 bits",
            ),
            (
                json!({"kty": "oct", "k": "c2VjcmV0"}),
                "symmetric keys are never accepted",
            ),
            (json!({"kty": "XYZ"}), "key type \"XYZ\" is not supported"),
        ];
        for (jwk, why) in cases {
            let document = json!({"keys": [jwk]}).to_string();
            let Err(error) = parse_jwks(document.as_bytes()) else {
                panic!("accepted: {document}");
            };
            let error = error.to_string();
            assert!(
                error.contains("key 0") && error.contains(why),
                "{error} / {why}"
            );
        }
    }
}
