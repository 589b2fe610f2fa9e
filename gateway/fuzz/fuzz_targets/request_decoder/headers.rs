//! The routing headers of a fuzz input: how each is derived from its canonical value (the
//! body's), and what the server should make of it. The checks are `request_decoder.rs`'s.

use base64::Engine as _;
use hyper::HeaderMap;
use hyper::header::{HeaderName, HeaderValue};

/// How one routing header is derived from its canonical value (the body's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderMode {
    /// Not sent.
    Absent,
    /// The canonical value as is.
    Plain,
    /// `=?base64?<canonical>?=`.
    Sentinel,
    /// Garbage bytes from the input.
    Garbage,
    /// A well-formed sentinel around garbage bytes (maybe not UTF-8).
    SentinelOfGarbage,
    /// A sentinel whose payload is not Base64.
    BadSentinel,
    /// The canonical value with surrounding whitespace (OWS).
    Padded,
    /// The canonical value plus one character.
    Appended,
    /// The canonical value, then a second garbage value of the same header.
    Duplicate,
    /// The canonical value with ASCII case swapped.
    CaseSwapped,
}

impl HeaderMode {
    pub(crate) fn from_byte(b: u8) -> HeaderMode {
        match b % 10 {
            0 => HeaderMode::Absent,
            1 => HeaderMode::Plain,
            2 => HeaderMode::Sentinel,
            3 => HeaderMode::Garbage,
            4 => HeaderMode::SentinelOfGarbage,
            5 => HeaderMode::BadSentinel,
            6 => HeaderMode::Padded,
            7 => HeaderMode::Appended,
            8 => HeaderMode::Duplicate,
            _ => HeaderMode::CaseSwapped,
        }
    }

    pub(crate) fn needs_garbage(self) -> bool {
        matches!(
            self,
            HeaderMode::Garbage
                | HeaderMode::SentinelOfGarbage
                | HeaderMode::BadSentinel
                | HeaderMode::Duplicate
        )
    }
}

/// What the server should make of a header, as far as the specification says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Missing.
    Absent,
    /// Decodes to the canonical value.
    Matches,
    /// Present but unusable or different from the canonical value.
    Mismatch,
    /// Not modelled (garbage, duplicates, values needing encoding sent plain).
    Unknown,
}

pub(crate) fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Visible ASCII, space and tab, no surrounding whitespace, not sentinel-shaped: a value a
/// client sends as is (base-protocol.md §7.2).
pub(crate) fn header_safe(v: &str) -> bool {
    v.bytes()
        .all(|b| b == b'\t' || b == b' ' || (0x21..=0x7e).contains(&b))
        && v.trim() == v
        && !(v.starts_with("=?base64?") && v.ends_with("?="))
}

/// Build the header values for `mode` and say what the server should see.
pub(crate) fn derive_header(
    mode: HeaderMode,
    canonical: &str,
    garbage: &[u8],
) -> (Vec<Vec<u8>>, Seen) {
    match mode {
        HeaderMode::Absent => (vec![], Seen::Absent),
        HeaderMode::Plain => (
            vec![canonical.as_bytes().to_vec()],
            if header_safe(canonical) {
                Seen::Matches
            } else {
                Seen::Unknown
            },
        ),
        HeaderMode::Sentinel => (
            vec![format!("=?base64?{}?=", b64(canonical.as_bytes())).into_bytes()],
            Seen::Matches,
        ),
        HeaderMode::Garbage => (vec![garbage.to_vec()], Seen::Unknown),
        HeaderMode::SentinelOfGarbage => (
            vec![format!("=?base64?{}?=", b64(garbage)).into_bytes()],
            if garbage == canonical.as_bytes() {
                Seen::Matches
            } else {
                Seen::Mismatch
            },
        ),
        HeaderMode::BadSentinel => {
            let mut v = b"=?base64?".to_vec();
            v.extend(garbage.iter().copied().filter(u8::is_ascii_alphanumeric));
            v.extend_from_slice(b"!?=");
            (vec![v], Seen::Mismatch)
        }
        HeaderMode::Padded => (
            vec![format!(" \t{canonical} ").into_bytes()],
            if header_safe(canonical) {
                Seen::Matches
            } else {
                Seen::Unknown
            },
        ),
        HeaderMode::Appended => (vec![format!("{canonical}x").into_bytes()], Seen::Mismatch),
        HeaderMode::Duplicate => (
            vec![canonical.as_bytes().to_vec(), garbage.to_vec()],
            Seen::Unknown,
        ),
        HeaderMode::CaseSwapped => {
            let swapped: String = canonical
                .chars()
                .map(|c| {
                    if c.is_ascii_lowercase() {
                        c.to_ascii_uppercase()
                    } else {
                        c.to_ascii_lowercase()
                    }
                })
                .collect();
            if swapped == canonical {
                (vec![format!("{canonical}x").into_bytes()], Seen::Mismatch)
            } else {
                (vec![swapped.into_bytes()], Seen::Mismatch)
            }
        }
    }
}

/// Insert the values into `headers`; a value `HeaderValue` refuses (control characters,
/// which no HTTP parser would hand over) is dropped, and the header then counts as absent if
/// nothing else was added.
pub(crate) fn put(
    headers: &mut HeaderMap,
    name: &'static str,
    values: Vec<Vec<u8>>,
    seen: Seen,
) -> Seen {
    let name = HeaderName::from_static(name);
    let mut added = 0;
    let mut first_added = false;
    for (i, v) in values.iter().enumerate() {
        if let Ok(value) = HeaderValue::from_bytes(v) {
            headers.append(name.clone(), value);
            added += 1;
            if i == 0 {
                first_added = true;
            }
        }
    }
    match (added, first_added) {
        (0, _) => Seen::Absent,
        (_, true) => seen,
        (_, false) => Seen::Unknown,
    }
}

/// Three header values and their outcomes, built from `modes` and garbage taken from the
/// front of `rest` (chunks separated by `\n`) when a mode needs it. Returns the rest.
pub(crate) struct Headers {
    pub(crate) map: HeaderMap,
    pub(crate) seen: [Seen; 3],
}

pub(crate) fn take_garbage<'a>(
    modes: &[HeaderMode; 3],
    rest: &'a [u8],
) -> ([&'a [u8]; 3], &'a [u8]) {
    let mut out: [&[u8]; 3] = [&[], &[], &[]];
    let mut rest = rest;
    for (i, m) in modes.iter().enumerate() {
        if m.needs_garbage() {
            let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
            out[i] = &rest[..end];
            rest = rest.get(end + 1..).unwrap_or(&[]);
        }
    }
    (out, rest)
}

pub(crate) fn build_headers(
    modes: [HeaderMode; 3],
    canonical: [&str; 3],
    garbage: [&[u8]; 3],
) -> Headers {
    let names = ["mcp-protocol-version", "mcp-method", "mcp-name"];
    let mut map = HeaderMap::new();
    let mut seen = [Seen::Unknown; 3];
    for i in 0..3 {
        let (values, s) = derive_header(modes[i], canonical[i], garbage[i]);
        seen[i] = put(&mut map, names[i], values, s);
    }
    Headers { map, seen }
}
