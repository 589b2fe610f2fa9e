//! Bounded validator for `tools/call` arguments against a tool's `inputSchema`.
//!
//! The gateway validates arguments before creating a task, so a bad call gets an
//! immediate tool error naming the field and the rule, e.g.
//! `invalid arguments: /ms: must be an integer >= 0 (got -5)`.
//!
//! Supported (JSON Schema 2020-12 subset): boolean schemas, `type` (`integer` = a
//! number without fractional part, so `1.0` counts), `properties`, `required`,
//! `additionalProperties`, `items`, `minItems`, `maxItems`, `enum`, `const`,
//! `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`, `minLength` and
//! `maxLength` (in Unicode scalar values), `pattern` (see below), `allOf`, `anyOf`, `oneOf`, `not`,
//! `if`/`then`/`else`, and `$ref` of the form `#/$defs/NAME` or `#/definitions/NAME`.
//!
//! `pattern` runs on the `regex` crate, whose matching is linear in the input (no
//! catastrophic backtracking on a hostile pattern or string); a pattern it cannot compile
//! (look-around, back-references: ECMA-262 features it lacks) or one over 64 KiB compiled is
//! treated as absent, so valid input is never rejected. Compiled patterns are cached per
//! thread.
//!
//! Ignored on purpose: `format` (an annotation in 2020-12 unless a schema opts into the
//! format-assertion vocabulary), annotations and all other keywords, remote or anchor `$ref`s (never fetched), and keywords whose value
//! has the wrong JSON type (treated as absent). To never reject valid input, items
//! covered by `prefixItems` are not checked against `items`, and
//! `additionalProperties` is skipped when `patternProperties` is present.
//!
//! Bounded: neither schema (from a server) nor arguments (from a client) are trusted,
//! so evaluation stops after 64 nested schema levels (counting `$ref` hops, which
//! ends recursive `$ref`s) or 100 000 units of work, yielding a [`Violation`]
//! instead of a stack overflow or a hang. Nothing here panics.

use serde_json::{Map, Number, Value};
use std::cmp::Ordering;
use std::fmt;

/// Maximum nesting of schema evaluations, including `$ref` hops.
const MAX_DEPTH: usize = 64;
/// Maximum units of work (subschema visits, compared nodes, listed properties).
const MAX_STEPS: usize = 100_000;
/// Longest excerpt (in characters) of a string quoted in a message.
const CLIP: usize = 60;
/// Most `enum` values or property names listed in a message.
const LISTED: usize = 20;
/// Most failed `anyOf`/`oneOf` alternatives explained, each in at most [`REASON`] characters.
const REASONS: usize = 3;
const REASON: usize = 160;

type Obj = Map<String, Value>;

/// Keyword `key` of schema object `s`. A schema object has a handful of keywords and each
/// is looked up for every value checked: a scan of that handful costs less than hashing
/// the key (SipHash) on every lookup.
fn keyword<'a>(s: &'a Obj, key: &str) -> Option<&'a Value> {
    if s.len() <= 8 {
        s.iter().find_map(|(k, v)| (k == key).then_some(v))
    } else {
        s.get(key)
    }
}

/// The first violation found: where in the arguments, and what is wrong.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Violation {
    /// JSON Pointer (RFC 6901) of the offending instance location; `""` for the root.
    pub path: String,
    /// The violated constraint, e.g. `must be an integer >= 0 (got -5)`.
    pub message: String,
}

impl fmt::Display for Violation {
    /// `message` at the root, `path: message` elsewhere.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.path.as_str() {
            "" => f.write_str(&self.message),
            path => write!(f, "{path}: {}", self.message),
        }
    }
}

impl std::error::Error for Violation {}

/// Validates `instance` against `schema`, returning the first violation in a
/// deterministic order (keywords in a fixed order, properties in instance order).
pub fn validate(schema: &Value, instance: &Value) -> Result<(), Violation> {
    let mut validator = Validator {
        root: schema,
        steps: 0,
    };
    validator
        .check(schema, instance, &Loc::Root, 0)
        .map_err(|fail| match fail {
            Fail::Invalid(violation) => violation,
            Fail::Fatal(message) => Violation {
                message,
                ..Violation::default()
            },
        })
}

/// `Fatal` (depth, budget) failures are never swallowed by `not`/`anyOf`/`if`.
enum Fail {
    Invalid(Violation),
    Fatal(String),
}

type Step = Result<(), Fail>;
type Probe = Result<Option<Violation>, Fail>;

/// Instance location as a borrowed linked list, rendered only on failure.
enum Loc<'a> {
    Root,
    Key(&'a Loc<'a>, &'a str),
    Index(&'a Loc<'a>, usize),
}

impl Loc<'_> {
    fn pointer(&self) -> String {
        match self {
            Loc::Root => String::new(),
            Loc::Key(up, key) => {
                let key = key.replace('~', "~0").replace('/', "~1");
                format!("{}/{key}", up.pointer())
            }
            Loc::Index(up, i) => format!("{}/{i}", up.pointer()),
        }
    }
}

struct Validator<'s> {
    root: &'s Value,
    steps: usize,
}

impl<'s> Validator<'s> {
    fn tick(&mut self, n: usize) -> Step {
        self.steps = self.steps.saturating_add(n);
        if self.steps > MAX_STEPS {
            return Err(Fail::Fatal("arguments too complex to validate".to_owned()));
        }
        Ok(())
    }

    fn check(&mut self, schema: &'s Value, inst: &Value, loc: &Loc, depth: usize) -> Step {
        if depth >= MAX_DEPTH {
            return Err(Fail::Fatal(format!(
                "schema is too deep to validate (over {MAX_DEPTH} levels, or a recursive $ref)"
            )));
        }
        self.tick(1)?;
        let s = match schema {
            Value::Object(s) => s,
            Value::Bool(false) => return Err(self.fail(loc, "not allowed by the schema".into())),
            _ => return Ok(()),
        };
        let reference = keyword(s, "$ref").and_then(Value::as_str);
        if let Some(target) = reference.and_then(|r| self.resolve(r)) {
            self.check(target, inst, loc, depth + 1)?;
        }
        let message = self.local(s, inst);
        self.tick(0)?;
        if let Some(message) = message {
            return Err(self.fail(loc, message));
        }
        self.children(s, inst, loc, depth + 1)?;
        self.logic(s, inst, loc, depth + 1)
    }

    /// Builds an ordinary failure, charging for the text it allocates.
    fn fail(&mut self, loc: &Loc, message: String) -> Fail {
        let path = loc.pointer();
        self.steps = self.steps.saturating_add((path.len() + message.len()) / 64);
        Fail::Invalid(Violation { path, message })
    }

    fn resolve(&self, reference: &str) -> Option<&'s Value> {
        let pointer = reference.strip_prefix('#')?;
        let name =
            (pointer.strip_prefix("/$defs/")).or_else(|| pointer.strip_prefix("/definitions/"))?;
        (!name.contains('/')).then(|| self.root.pointer(pointer))?
    }

    /// Keywords that only look at `inst` itself; returns the violated constraint.
    fn local(&mut self, s: &Obj, inst: &Value) -> Option<String> {
        let types = type_names(s);
        if !types.is_empty() && !types.iter().any(|t| has_type(inst, t)) {
            let wanted: Vec<String> = types.iter().map(|t| article(t)).collect();
            return Some(format!(
                "must be {} (got {})",
                wanted.join(" or "),
                show(inst)
            ));
        }
        if let Some(Value::Array(options)) = keyword(s, "enum")
            && !options.iter().any(|o| self.equal(o, inst))
        {
            let shown: Vec<String> = options.iter().take(LISTED).map(show).collect();
            let more = if options.len() > LISTED { ", ..." } else { "" };
            return Some(format!("must be one of {}{more}", shown.join(", ")));
        }
        if let Some(expected) = keyword(s, "const").filter(|c| !self.equal(c, inst)) {
            return Some(format!("must be {} (got {})", show(expected), show(inst)));
        }
        match inst {
            Value::Number(n) => bounds(s, n),
            Value::String(t) => self.string(s, t, inst),
            Value::Array(items) => sized(s, ("minItems", "maxItems"), items.len(), "item"),
            Value::Object(obj) => {
                let required = keyword(s, "required").and_then(Value::as_array);
                self.steps = self.steps.saturating_add(required.map_or(0, Vec::len));
                let mut names = required.into_iter().flatten().filter_map(Value::as_str);
                let missing = names.find(|k| !obj.contains_key(*k))?;
                Some(format!(
                    "missing required property '{}'",
                    clip(missing, CLIP)
                ))
            }
            _ => None,
        }
    }

    /// `minLength`, `maxLength` and `pattern`.
    fn string(&mut self, s: &Obj, t: &str, inst: &Value) -> Option<String> {
        if s.contains_key("minLength") || s.contains_key("maxLength") {
            self.steps = self.steps.saturating_add(t.len() / 1024);
            if let Some(violation) = sized(
                s,
                ("minLength", "maxLength"),
                t.chars().count(),
                "character",
            ) {
                return Some(violation);
            }
        }
        let pattern = keyword(s, "pattern").and_then(Value::as_str)?;
        self.steps = self.steps.saturating_add(1 + t.len() / 1024);
        let matched = with_pattern(pattern, |re| re.is_match(t))?;
        (!matched).then(|| {
            format!(
                "must match the pattern {} (got {})",
                show(&Value::String(pattern.to_owned())),
                show(inst)
            )
        })
    }

    /// `items`, `properties` and `additionalProperties`.
    fn children(&mut self, s: &'s Obj, inst: &Value, loc: &Loc, depth: usize) -> Step {
        match inst {
            Value::Array(items) => {
                let Some(item_schema) = subschema(s, "items") else {
                    return Ok(());
                };
                let prefix = schema_list(s, "prefixItems").len(); // unsupported, so left unchecked
                for (i, item) in items.iter().enumerate().skip(prefix) {
                    self.check(item_schema, item, &Loc::Index(loc, i), depth)?;
                }
            }
            Value::Object(obj) => {
                let props = keyword(s, "properties").and_then(Value::as_object);
                let extra = subschema(s, "additionalProperties")
                    .filter(|_| !s.contains_key("patternProperties"));
                if props.is_none() && extra.is_none() {
                    return Ok(());
                }
                self.tick(obj.len())?;
                for (key, value) in obj {
                    let declared = props.and_then(|p| p.get(key));
                    if declared.is_none() && extra == Some(&Value::Bool(false)) {
                        return Err(self.fail(loc, unexpected(key, props)));
                    }
                    if let Some(sub) = declared.or(extra) {
                        self.check(sub, value, &Loc::Key(loc, key), depth)?;
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// `allOf`, `anyOf`, `oneOf`, `not` and `if`/`then`/`else`.
    fn logic(&mut self, s: &'s Obj, inst: &Value, loc: &Loc, depth: usize) -> Step {
        for sub in schema_list(s, "allOf") {
            self.check(sub, inst, loc, depth)?;
        }
        for (key, want, enough) in [("anyOf", "at least", 1), ("oneOf", "exactly", 2)] {
            let alternatives = schema_list(s, key);
            if alternatives.is_empty() {
                continue;
            }
            let (mut hits, mut failed) = (Vec::new(), Vec::new());
            for (i, alt) in alternatives.iter().enumerate() {
                match self.probe(alt, inst, loc, depth)? {
                    None => hits.push(i + 1),
                    Some(v) if failed.len() < REASONS => failed.push((i + 1, v)),
                    Some(_) => {}
                }
                if hits.len() == enough {
                    break;
                }
            }
            let n = || plural(alternatives.len() as u64, "alternative");
            let message = match hits.as_slice() {
                [] if !failed.is_empty() => {
                    format!(
                        "must match {want} one of {} ({})",
                        n(),
                        reasons(&failed, loc)
                    )
                }
                [a, b] => format!(
                    "must match exactly one of {}, but matches both {a} and {b}",
                    n()
                ),
                _ => continue,
            };
            return Err(self.fail(loc, message));
        }
        if let Some(negated) = subschema(s, "not")
            && self.probe(negated, inst, loc, depth)?.is_none()
        {
            return Err(self.fail(loc, "must not match the schema given in 'not'".into()));
        }
        if let Some(condition) = subschema(s, "if") {
            let holds = self.probe(condition, inst, loc, depth)?.is_none();
            if let Some(sub) = subschema(s, if holds { "then" } else { "else" }) {
                self.check(sub, inst, loc, depth)?;
            }
        }
        Ok(())
    }

    /// `Ok(None)` if `inst` matches, `Ok(Some(why))` if not; fatal failures propagate.
    fn probe(&mut self, sub: &'s Value, inst: &Value, loc: &Loc, depth: usize) -> Probe {
        match self.check(sub, inst, loc, depth) {
            Ok(()) => Ok(None),
            Err(Fail::Invalid(v)) => Ok(Some(v)),
            Err(fatal) => Err(fatal),
        }
    }

    /// Deep equality where `1 == 1.0`; charges one step per node compared.
    fn equal(&mut self, a: &Value, b: &Value) -> bool {
        self.steps = self.steps.saturating_add(1);
        match (a, b) {
            _ if self.steps > MAX_STEPS => false,
            (Value::Number(x), Value::Number(y)) => compare(x, y) == Some(Ordering::Equal),
            (Value::Array(x), Value::Array(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(p, q)| self.equal(p, q))
            }
            (Value::Object(x), Value::Object(y)) => {
                let mut pairs = x.iter().map(|(k, v)| (v, y.get(k)));
                x.len() == y.len() && pairs.all(|(v, w)| w.is_some_and(|w| self.equal(v, w)))
            }
            _ => a == b,
        }
    }
}

fn bounds(s: &Obj, n: &Number) -> Option<String> {
    let kind = if type_names(s).contains(&"integer") {
        "an integer"
    } else {
        "a number"
    };
    let limits = [
        ("minimum", ">=", Ordering::is_ge as fn(Ordering) -> bool),
        ("exclusiveMinimum", ">", Ordering::is_gt),
        ("maximum", "<=", Ordering::is_le),
        ("exclusiveMaximum", "<", Ordering::is_lt),
    ];
    limits.into_iter().find_map(|(key, op, holds)| {
        let bound = keyword(s, key)?.as_number()?;
        let ok = compare(n, bound).is_some_and(holds);
        (!ok).then(|| format!("must be {kind} {op} {bound} (got {n})"))
    })
}

/// `min{suffix}` / `max{suffix}` (`names`) against a length counted in `noun`s.
fn sized(s: &Obj, names: (&str, &str), len: usize, noun: &str) -> Option<String> {
    let limit = |key: &str| keyword(s, key).and_then(Value::as_u64);
    let len = u64::try_from(len).unwrap_or(u64::MAX);
    if let Some(min) = limit(names.0).filter(|&m| len < m) {
        let min = plural(min, noun);
        return Some(format!("must have at least {min} (got {len})"));
    }
    let max = plural(limit(names.1).filter(|&m| len > m)?, noun);
    Some(format!("must have at most {max} (got {len})"))
}

/// Exact for two integers (any mix of i64/u64), via f64 otherwise.
fn compare(a: &Number, b: &Number) -> Option<Ordering> {
    match (a.as_i128(), b.as_i128()) {
        (Some(x), Some(y)) => Some(x.cmp(&y)),
        _ => a.as_f64()?.partial_cmp(&b.as_f64()?),
    }
}

fn subschema<'a>(s: &'a Obj, key: &str) -> Option<&'a Value> {
    keyword(s, key).filter(|v| v.is_object() || v.is_boolean())
}

fn schema_list<'a>(s: &'a Obj, key: &str) -> &'a [Value] {
    keyword(s, key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn type_names(s: &Obj) -> Vec<&str> {
    match keyword(s, "type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn has_type(v: &Value, t: &str) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.as_f64().is_some_and(|f| f.fract() == 0.0),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => true, // unknown type names are ignored
    }
}

fn article(t: &str) -> String {
    match t {
        "object" | "array" | "integer" => format!("an {t}"),
        "null" => "null".to_owned(),
        _ => format!("a {t}"),
    }
}

fn plural(n: u64, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

fn unexpected(key: &str, props: Option<&Obj>) -> String {
    let key = clip(key, CLIP);
    let Some(props) = props.filter(|p| !p.is_empty()) else {
        return format!("unexpected property '{key}' (no additional properties are allowed)");
    };
    let names: Vec<String> = props
        .keys()
        .take(LISTED)
        .map(|k| format!("'{}'", clip(k, CLIP)))
        .collect();
    let (names, more) = (
        names.join(", "),
        if props.len() > LISTED { ", ..." } else { "" },
    );
    format!("unexpected property '{key}'; allowed: {names}{more}")
}

/// "alternative 1: why; alternative 2: why", without repeating the shared path.
fn reasons(failed: &[(usize, Violation)], loc: &Loc) -> String {
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
fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", text.get(..i).unwrap_or_default()),
        None => text.to_owned(),
    }
}

/// Compact JSON of `v`, cut after [`CLIP`] bytes without serializing the rest.
fn show(v: &Value) -> String {
    let mut out = Capped(Vec::new());
    let cut = serde_json::to_writer(&mut out, v).is_err();
    let valid = std::str::from_utf8(&out.0).map_or_else(|e| e.valid_up_to(), str::len);
    let text = String::from_utf8_lossy(out.0.get(..valid).unwrap_or_default());
    format!("{text}{}", if cut { "..." } else { "" })
}

/// Largest compiled pattern, in bytes.
const PATTERN_SIZE: usize = 64 << 10;
/// Compiled patterns kept per thread before the cache starts over.
const PATTERNS_CACHED: usize = 256;

/// Run `f` on `pattern` compiled (from the thread's cache); `None` when it does not compile.
fn with_pattern<T>(pattern: &str, f: impl FnOnce(&regex::Regex) -> T) -> Option<T> {
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
            let compiled = regex::RegexBuilder::new(pattern)
                .size_limit(PATTERN_SIZE)
                .dfa_size_limit(PATTERN_SIZE)
                .build()
                .ok();
            cache.insert(pattern.to_owned(), compiled);
        }
        cache.get(pattern)?.as_ref().map(f)
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The MCP conformance suite's 2020-12 schema; `FIXTURE` in a case line stands for it.
    const FIXTURE: &str = r##"{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",
      "$defs":{"address":{"$anchor":"addressDef","type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"}}}},
      "properties":{"name":{"type":"string"},"address":{"$ref":"#/$defs/address"},"contactMethod":{"type":"string","enum":["phone","email"]},
        "phone":{"type":"string"},"email":{"type":"string"}},
      "allOf":[{"anyOf":[{"required":["phone"]},{"required":["email"]}]}],
      "if":{"properties":{"contactMethod":{"const":"phone"}},"required":["contactMethod"]},
      "then":{"required":["phone"]},"else":{"required":["email"]},"additionalProperties":false}"##;

    // Case tables: `schema | instance | expected Display of the violation, or ok`.

    /// Documented messages and the conformance fixture.
    const EXAMPLES_AND_FIXTURE: &str = r##"
{"type":"object","properties":{"ms":{"type":"integer","minimum":0}}} | {"ms":-5} | /ms: must be an integer >= 0 (got -5)
{"required":["question"]} | {"q":1} | missing required property 'question'
{"properties":{"mode":{"enum":["protocol","tool"]}}} | {"mode":"x"} | /mode: must be one of "protocol", "tool"
FIXTURE | {"name":"a","email":"x"} | ok
FIXTURE | {"contactMethod":"phone","phone":"1","address":{"city":"c"}} | ok
FIXTURE | {"name":"a"} | must match at least one of 2 alternatives (alternative 1: missing required property 'phone'; alternative 2: missing required property 'email')
FIXTURE | {"name":"a","contactMethod":"phone","email":"x"} | missing required property 'phone'
FIXTURE | {"email":"x","address":{"city":7}} | /address/city: must be a string (got 7)
FIXTURE | {"email":"x","contactMethod":"fax"} | /contactMethod: must be one of "phone", "email"
FIXTURE | {"email":"x","fax":"1"} | unexpected property 'fax'; allowed: 'name', 'address', 'contactMethod', 'phone', 'email'
FIXTURE | "x" | must be an object (got "x")
"##;

    /// `type`, `properties`, `required`, `additionalProperties`.
    const TYPE_AND_OBJECT_KEYWORDS: &str = r##"
{"type":"object"} | {} | ok
{"type":"object"} | [1,"x"] | must be an object (got [1,"x"])
{"type":"array"} | [] | ok
{"type":"array"} | {"a":1} | must be an array (got {"a":1})
{"type":"string"} | "s" | ok
{"type":"number"} | 1.5 | ok
{"type":"number"} | "1" | must be a number (got "1")
{"type":"integer"} | 1.0 | ok
{"type":"integer"} | 18446744073709551615 | ok
{"type":"integer"} | 1.5 | must be an integer (got 1.5)
{"type":"boolean"} | false | ok
{"type":"boolean"} | 0 | must be a boolean (got 0)
{"type":"null"} | null | ok
{"type":["string","null"]} | null | ok
{"type":["string","null"]} | 5 | must be a string or null (got 5)
{"properties":{"a/b":{"properties":{"c~d":{"type":"string"}}}}} | {"a/b":{"c~d":1}} | /a~1b/c~0d: must be a string (got 1)
{"properties":{"a":{"required":["x"]}}} | {"a":{}} | /a: missing required property 'x'
{"properties":{"a":{"required":["x"]}}} | {"a":{"x":null},"b":1} | ok
{"required":["a"],"properties":{"a":{"type":"string"}}} | ["not an object"] | ok
{"properties":{"a":{},"b":{}},"additionalProperties":false} | {"b":1} | ok
{"properties":{"a":{},"b":{}},"additionalProperties":false} | {"a":1,"zz":2} | unexpected property 'zz'; allowed: 'a', 'b'
{"additionalProperties":false} | {"q":1} | unexpected property 'q' (no additional properties are allowed)
{"properties":{"a":{}},"additionalProperties":{"type":"integer"}} | {"a":"s","n":3} | ok
{"properties":{"a":{}},"additionalProperties":{"type":"integer"}} | {"n":"3"} | /n: must be an integer (got "3")
{"additionalProperties":false,"patternProperties":{"^x":{}}} | {"x1":1} | ok
"##;

    /// `items`, `minItems`, `maxItems`, `enum`, `const`, bounds, lengths.
    const ARRAY_ENUM_NUMBER_STRING_KEYWORDS: &str = r##"
{"properties":{"l":{"items":{"type":"string"},"minItems":1,"maxItems":2}}} | {"l":["a","b"]} | ok
{"properties":{"l":{"items":{"type":"string"},"minItems":1,"maxItems":2}}} | {"l":["a",2]} | /l/1: must be a string (got 2)
{"properties":{"l":{"items":{"type":"string"},"minItems":1,"maxItems":2}}} | {"l":[]} | /l: must have at least 1 item (got 0)
{"properties":{"l":{"items":{"type":"string"},"minItems":1,"maxItems":2}}} | {"l":["a","b","c"]} | /l: must have at most 2 items (got 3)
{"prefixItems":[{"type":"string"}],"items":{"type":"integer"}} | ["a",1,"b"] | /2: must be an integer (got "b")
{"enum":[1,{"a":[true]}]} | 1.0 | ok
{"enum":[1,{"a":[true]}]} | {"a":[true]} | ok
{"enum":[1,null,{"a":[true]}]} | {"a":[false]} | must be one of 1, null, {"a":[true]}
{"const":"phone"} | "phone" | ok
{"const":"phone"} | "email" | must be "phone" (got "email")
{"const":{"a":1}} | {"a":1.0} | ok
{"const":{"a":1}} | {"a":1,"b":2} | must be {"a":1} (got {"a":1,"b":2})
{"minimum":1,"maximum":10,"exclusiveMaximum":10.5} | 10.0 | ok
{"minimum":1,"maximum":10,"exclusiveMaximum":10.5} | 0.5 | must be a number >= 1 (got 0.5)
{"minimum":1,"maximum":10,"exclusiveMaximum":10.5} | 11 | must be a number <= 10 (got 11)
{"exclusiveMinimum":0} | 0 | must be a number > 0 (got 0)
{"exclusiveMaximum":0} | 0 | must be a number < 0 (got 0)
{"maximum":9007199254740992} | 9007199254740993 | must be a number <= 9007199254740992 (got 9007199254740993)
{"maximum":18446744073709551614} | 18446744073709551615 | must be a number <= 18446744073709551614 (got 18446744073709551615)
{"minimum":-9223372036854775808,"maximum":18446744073709551615} | -1 | ok
{"type":"integer","minimum":-1e308,"maximum":1e308} | 1e300 | ok
{"minLength":2,"maxLength":3} | "hé🎉" | ok
{"minLength":2,"maxLength":3} | "é" | must have at least 2 characters (got 1)
{"minLength":2,"maxLength":3} | "🎉🎉🎉🎉" | must have at most 3 characters (got 4)
{"format":"email","title":"t","x-mcp-header":"h"} | "not checked" | ok
{"pattern":"^[0-9]+$"} | "123" | ok
{"pattern":"^[0-9]+$"} | "12a" | must match the pattern "^[0-9]+$" (got "12a")
{"pattern":"b"} | "abc" | ok
{"pattern":"^[0-9]+$"} | 12 | ok
{"minLength":4,"pattern":"^[a-z]+$"} | "ab" | must have at least 4 characters (got 2)
{"pattern":"^\\p{L}+$"} | "héllo" | ok
{"pattern":"(?<=a)b"} | "xb" | ok
{"pattern":"(a)\\1"} | "ab" | ok
{"pattern":"(unclosed"} | "x" | ok
"##;

    /// `allOf`, `anyOf`, `oneOf`, `not`, `if`/`then`/`else`, boolean schemas, `$ref`.
    const COMBINATORS_BOOLEANS_REFS: &str = r##"
{"allOf":[{"type":"integer"},{"minimum":3}]} | 3 | ok
{"allOf":[{"type":"integer"},{"minimum":3}]} | 2 | must be a number >= 3 (got 2)
{"properties":{"x":{"anyOf":[{"type":"string"},{"type":"null"}]}}} | {"x":null} | ok
{"properties":{"x":{"anyOf":[{"type":"string"},{"type":"null"}]}}} | {"x":1} | /x: must match at least one of 2 alternatives (alternative 1: must be a string (got 1); alternative 2: must be null (got 1))
{"oneOf":[{"type":"integer"},{"minimum":2},{"type":"string"}]} | 1 | ok
{"oneOf":[{"type":"integer"},{"minimum":2},{"type":"string"}]} | 5 | must match exactly one of 3 alternatives, but matches both 1 and 2
{"oneOf":[{"type":"integer"},{"minimum":2}]} | 1.5 | must match exactly one of 2 alternatives (alternative 1: must be an integer (got 1.5); alternative 2: must be a number >= 2 (got 1.5))
{"properties":{"a":{"anyOf":[{"required":["b"]},{"properties":{"c":{"type":"string"}}},{},{}]}}} | {"a":{"c":0}} | ok
{"anyOf":[{"required":["b"]},{"properties":{"c":{"type":"string"}}},{"not":{}},{"not":{}}]} | {"c":0} | must match at least one of 4 alternatives (alternative 1: missing required property 'b'; alternative 2: /c: must be a string (got 0); alternative 3: must not match the schema given in 'not')
{"not":{"type":"string"}} | 1 | ok
{"not":{"type":"string"}} | "s" | must not match the schema given in 'not'
{"if":{"minimum":10},"then":{"maximum":20},"else":{"const":0}} | 15 | ok
{"if":{"minimum":10},"then":{"maximum":20},"else":{"const":0}} | 0 | ok
{"if":{"minimum":10},"then":{"maximum":20},"else":{"const":0}} | 25 | must be a number <= 20 (got 25)
{"if":{"minimum":10},"then":{"maximum":20},"else":{"const":0}} | 3 | must be 0 (got 3)
{"then":false,"else":false} | 1 | ok
true | {"anything":[1]} | ok
false | null | not allowed by the schema
{"properties":{"x":false}} | {"x":1} | /x: not allowed by the schema
{"$defs":{"a/b":{"type":"string"}},"properties":{"s":{"$ref":"#/$defs/a~1b"}}} | {"s":1} | /s: must be a string (got 1)
{"definitions":{"n":{"type":"integer"}},"properties":{"n":{"$ref":"#/definitions/n"}}} | {"n":"1"} | /n: must be an integer (got "1")
{"$ref":"https://example.com/s.json","allOf":[{"$ref":"#addressDef"},{"$ref":"#/$defs/none"},{"$ref":"#"}]} | 1 | ok
"##;

    /// Recursive and malformed schemas.
    const NASTY_SCHEMAS: &str = r##"
{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"} | 1 | schema is too deep to validate (over 64 levels, or a recursive $ref)
{"$defs":{"a":{"$ref":"#/$defs/a"}},"not":{"anyOf":[{"$ref":"#/$defs/a"}]}} | 1 | schema is too deep to validate (over 64 levels, or a recursive $ref)
{"$defs":{"t":{"properties":{"c":{"$ref":"#/$defs/t"}},"additionalProperties":false}},"$ref":"#/$defs/t"} | {"c":{"c":{"c":{}}}} | ok
{"type":5,"required":"x","properties":[],"minimum":"3","items":3,"enum":{},"minLength":-1,"maxItems":1.5} | {"a":1} | ok
{"allOf":{},"anyOf":"x","oneOf":[],"not":7,"if":[],"$ref":5,"additionalProperties":"no","type":[]} | [1,2] | ok
42 | "a schema that is not an object accepts anything" | ok
"##;

    fn message(schema: &Value, instance: &Value) -> String {
        validate(schema, instance).map_or_else(|v| v.to_string(), |()| "ok".to_owned())
    }

    fn parse(text: &str) -> Value {
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }

    fn run(cases: &str) {
        for line in cases.lines().filter(|l| !l.is_empty()) {
            let parts: Vec<&str> = line.split(" | ").collect();
            let [schema, instance, expected] = parts[..] else {
                panic!("bad case: {line}")
            };
            let schema = parse(if schema == "FIXTURE" { FIXTURE } else { schema });
            assert_eq!(message(&schema, &parse(instance)), expected, "case: {line}");
        }
    }

    #[test]
    fn examples_and_fixture() {
        run(EXAMPLES_AND_FIXTURE);
    }

    #[test]
    fn type_and_object_keywords() {
        run(TYPE_AND_OBJECT_KEYWORDS);
    }

    #[test]
    fn array_enum_number_string_keywords() {
        run(ARRAY_ENUM_NUMBER_STRING_KEYWORDS);
    }

    #[test]
    fn combinators_booleans_refs() {
        run(COMBINATORS_BOOLEANS_REFS);
    }

    #[test]
    fn nasty_schemas() {
        run(NASTY_SCHEMAS);
    }

    #[test]
    fn violation_fields_and_display() {
        let v = validate(
            &json!({"properties": {"ms": {"minimum": 0}}}),
            &json!({"ms": -5}),
        );
        let v = v.expect_err("negative");
        assert_eq!(
            (v.path.as_str(), v.message.as_str()),
            ("/ms", "must be a number >= 0 (got -5)")
        );
        assert_eq!(
            format!("invalid arguments: {v}"),
            "invalid arguments: /ms: must be a number >= 0 (got -5)"
        );
    }

    #[test]
    fn deep_nesting_is_bounded() {
        let schema = (0..100).fold(json!({}), |inner, _| json!({"items": inner}));
        let inst = (0..100).fold(json!(1), |inner, _| json!([inner]));
        let too_deep = "schema is too deep to validate (over 64 levels, or a recursive $ref)";
        assert_eq!(message(&schema, &inst), too_deep);
        assert_eq!(message(&json!({"type": "array"}), &inst), "ok");
        // Recursion through every combinator fits easily in half of tokio's 2 MiB worker stack.
        let chain = json!({"$defs": {"a": {"not": {"anyOf": [{"if": {"$ref": "#/$defs/a"}}]}}},
            "properties": {"x": {"oneOf": [{"allOf": [{"$ref": "#/$defs/a"}]}]}}});
        let run = move || message(&chain, &json!({"x": 1}));
        let thread = std::thread::Builder::new()
            .stack_size(1 << 20)
            .spawn(run)
            .expect("spawn");
        assert_eq!(thread.join().expect("no stack overflow"), too_deep);
    }

    #[test]
    fn work_is_bounded() {
        // Each level doubles the work: 2^30 evaluations without a budget.
        let mut defs = Map::new();
        defs.insert("l0".into(), json!({"type": "string"}));
        for i in 1..30 {
            let below = json!({"$ref": format!("#/$defs/l{}", i - 1)});
            defs.insert(format!("l{i}"), json!({"anyOf": [below.clone(), below]}));
        }
        let blowup = json!({"$defs": defs, "$ref": "#/$defs/l29"});
        assert_eq!(
            message(&blowup, &json!(1)),
            "arguments too complex to validate"
        );
        let big = Value::Array(vec![json!(1); MAX_STEPS]);
        assert_eq!(
            message(&json!({"items": {}}), &big),
            "arguments too complex to validate"
        );
    }

    #[test]
    fn long_values_are_clipped() {
        let long = "é".repeat(100_000);
        let got = message(&json!({"type": "integer"}), &json!(long));
        assert!(got.len() < 100 && got.ends_with("...)"), "{got}");
        let got = message(&json!({"additionalProperties": false}), &json!({ long: 1 }));
        assert!(got.len() < 200, "{got}");
        let nested = (0..100).fold(json!("x"), |inner, _| json!([inner]));
        let got = message(&json!({"const": 1}), &nested);
        assert!(
            got.starts_with("must be 1 (got [[[[") && got.len() < 100,
            "{got}"
        );
    }
}
