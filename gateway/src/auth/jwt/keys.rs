//! The JWKS document → the usable signing keys: one [`Key`] per JWK that passes the rules
//! (asymmetric, `use` = `sig` when present, a known type and curve, RSA of 2048–8192 bits
//! with a sane exponent), and why each other JWK was skipped.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::crypto::CryptoProvider;
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::Value;

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
    pub(super) fn from_jwk(jwk: &Value, provider: &CryptoProvider) -> Result<Key, String> {
        if !jwk.is_object() {
            return Err("not a JSON object".to_owned());
        }
        let text = |name: &str| -> Result<Option<&str>, String> {
            match jwk.get(name) {
                None => Ok(None),
                Some(Value::String(value)) => Ok(Some(value)),
                Some(_) => Err(format!("\"{name}\" is not a string")),
            }
        };
        let required = |name: &str| -> Result<&str, String> {
            text(name)?.ok_or_else(|| format!("no \"{name}\""))
        };
        let bytes = |name: &str| -> Result<Vec<u8>, String> {
            URL_SAFE_NO_PAD
                .decode(required(name)?)
                .map_err(|_| format!("\"{name}\" is not base64url"))
        };
        let kid = text("kid")?.map(str::to_owned);
        if let Some(usage) = text("use")?
            && usage != "sig"
        {
            return Err(format!("\"use\" is {usage:?}, not \"sig\""));
        }
        if let Some(ops) = jwk.get("key_ops")
            && !ops
                .as_array()
                .is_some_and(|ops| ops.iter().any(|op| op == "verify"))
        {
            return Err("\"key_ops\" lacks \"verify\"".to_owned());
        }
        let alg = match text("alg")? {
            None => None,
            Some(name) => Some(
                accepted_algorithm(name)
                    .ok_or_else(|| format!("algorithm {name:?} is not accepted"))?,
            ),
        };
        let (kind, decoding) = match (required("kty")?, text("crv")?) {
            ("RSA", _) => {
                let (n, e) = (bytes("n")?, bytes("e")?);
                check_rsa(&n, &e)?;
                (KeyKind::Rsa, DecodingKey::from_rsa_raw_components(&n, &e))
            }
            ("EC", Some(curve @ ("P-256" | "P-384"))) => {
                let (kind, size) = if curve == "P-256" {
                    (KeyKind::P256, 32)
                } else {
                    (KeyKind::P384, 48)
                };
                let (x, y) = (bytes("x")?, bytes("y")?);
                if x.len() != size || y.len() != size {
                    return Err(format!("coordinates are not {size} bytes"));
                }
                let key = DecodingKey::from_ec_components(required("x")?, required("y")?)
                    .map_err(|_| "unreadable \"x\" or \"y\"".to_owned())?;
                (kind, key)
            }
            ("OKP", Some("Ed25519")) => {
                if bytes("x")?.len() != 32 {
                    return Err("\"x\" is not 32 bytes".to_owned());
                }
                let key = DecodingKey::from_ed_components(required("x")?)
                    .map_err(|_| "unreadable \"x\"".to_owned())?;
                (KeyKind::Ed25519, key)
            }
            ("oct", _) => return Err("symmetric keys are never accepted".to_owned()),
            (kty @ ("EC" | "OKP"), curve) => {
                return Err(format!("{kty} curve {curve:?} is not supported"));
            }
            (kty, _) => return Err(format!("key type {kty:?} is not supported")),
        };
        if let Some(alg) = alg
            && !kind.allows(alg)
        {
            return Err(format!("algorithm {alg:?} does not fit a {kind:?} key"));
        }
        // Parse the key now rather than on the first token.
        let probe = alg.unwrap_or(kind.probe_algorithm());
        (provider.verifier_factory)(&probe, &decoding)
            .map_err(|e| format!("invalid key material: {e}"))?;
        Ok(Key {
            kid,
            alg,
            kind,
            decoding,
        })
    }
}

/// The RSA public key checks the `rsa` crate makes when verifying, plus a 2048-bit floor.
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
pub(super) fn parse_jwks(document: &[u8]) -> Result<(KeySet, Vec<String>), String> {
    let value: Value =
        serde_json::from_slice(document).map_err(|e| format!("not a JSON document: {e}"))?;
    let Some(jwks) = value.get("keys").and_then(Value::as_array) else {
        return Err("no \"keys\" array".to_owned());
    };
    let provider = CryptoProvider::try_get_default()
        .ok_or_else(|| "no jsonwebtoken crypto provider".to_owned())?;
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
        let why = if skipped.is_empty() {
            "the set is empty".to_owned()
        } else {
            skipped.join("; ")
        };
        return Err(format!("no usable signing key ({why})"));
    }
    Ok((KeySet { keys }, skipped))
}
