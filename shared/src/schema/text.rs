//! Messages (quoting values and names in bounded space) and the compiled-pattern cache.

use serde_json::Value;

use super::{Loc, Obj, Violation};

/// Longest excerpt (in characters) of a string quoted in a message.
pub(super) const CLIP: usize = 60;
/// Most `enum` values or property names listed in a message.
pub(super) const LISTED: usize = 20;
/// Most failed `anyOf`/`oneOf` alternatives explained, each in at most [`REASON`] characters.
pub(super) const REASONS: usize = 3;
const REASON: usize = 160;

pub(super) fn article(t: &str) -> String {
    match t {
        "object" | "array" | "integer" => format!("an {t}"),
        "null" => "null".to_owned(),
        _ => format!("a {t}"),
    }
}

/// `n` and the noun of `nouns` (singular, plural) it takes.
pub(super) fn plural(n: u64, (one, many): (&str, &str)) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// An additional property refused: the allowed names (and patterns) are listed.
pub(super) fn unexpected(key: &str, props: Option<&Obj>, patterns: Option<&Obj>) -> String {
    let key = clip(key, CLIP);
    let names = props.into_iter().flat_map(|p| p.keys());
    let mut allowed: Vec<String> = names
        .take(LISTED)
        .map(|k| format!("'{}'", clip(k, CLIP)))
        .collect();
    if props.is_some_and(|p| p.len() > LISTED) {
        allowed.push("...".to_owned());
    }
    let patterns = patterns.into_iter().flat_map(|p| p.keys()).take(LISTED);
    let patterns: Vec<String> = patterns.map(|p| show(&Value::String(p.clone()))).collect();
    if !patterns.is_empty() {
        allowed.push(format!("names matching {}", patterns.join(" or ")));
    }
    if allowed.is_empty() {
        return format!("unexpected property '{key}' (no additional properties are allowed)");
    }
    format!(
        "unexpected property '{key}'; allowed: {}",
        allowed.join(", ")
    )
}

/// "alternative 1: why; alternative 2: why", without repeating the shared path.
pub(super) fn reasons(failed: &[(usize, Violation)], loc: &Loc) -> String {
    let here = loc.pointer();
    let explain = |(i, v): &(usize, Violation)| {
        let text = if v.path == here {
            v.message.clone()
        } else {
            v.to_string()
        };
        format!("alternative {i}: {}", clip(&text, REASON))
    };
    failed.iter().map(explain).collect::<Vec<_>>().join("; ")
}

/// At most `max` characters of `text`.
pub(super) fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", text.get(..i).unwrap_or_default()),
        None => text.to_owned(),
    }
}

/// Compact JSON of `v`, cut after [`CLIP`] bytes without serializing the rest.
pub(super) fn show(v: &Value) -> String {
    let mut out = Capped(Vec::new());
    let cut = serde_json::to_writer(&mut out, v).is_err();
    let valid = std::str::from_utf8(&out.0).map_or_else(|e| e.valid_up_to(), str::len);
    let text = String::from_utf8_lossy(out.0.get(..valid).unwrap_or_default());
    format!("{text}{}", if cut { "..." } else { "" })
}

/// A writer that refuses bytes beyond [`CLIP`], aborting serialization early.
struct Capped(Vec<u8>);

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let room = CLIP.saturating_sub(self.0.len()).min(buf.len());
        if room == 0 && !buf.is_empty() {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        self.0.extend(buf.iter().take(room));
        Ok(room)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Largest compiled pattern, in bytes.
const PATTERN_SIZE: usize = 64 << 10;
/// Compiled patterns kept per thread before the cache starts over.
const PATTERNS_CACHED: usize = 256;

/// `pattern` compiled by the linear-time engine, within [`PATTERN_SIZE`].
pub(super) fn compile(pattern: &str) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(pattern)
        .size_limit(PATTERN_SIZE)
        .dfa_size_limit(PATTERN_SIZE)
        .build()
}

/// Run `f` on `pattern` compiled (from the thread's cache); `None` when it does not compile.
pub(super) fn with_pattern<T>(pattern: &str, f: impl FnOnce(&regex::Regex) -> T) -> Option<T> {
    use std::cell::RefCell;
    use std::collections::HashMap;
    thread_local! {
        static CACHE: RefCell<HashMap<String, Option<regex::Regex>>> = RefCell::new(HashMap::new());
    }
    CACHE.with(|cache| {
        let mut cache = cache.borrow_mut();
        if !cache.contains_key(pattern) {
            if cache.len() >= PATTERNS_CACHED {
                cache.clear();
            }
            cache.insert(pattern.to_owned(), compile(pattern).ok());
        }
        cache.get(pattern)?.as_ref().map(f)
    })
}
