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
//! `maxLength` (in Unicode scalar values), `allOf`, `anyOf`, `oneOf`, `not`,
//! `if`/`then`/`else`, and `$ref` of the form `#/$defs/NAME` or `#/definitions/NAME`.
//!
//! Ignored on purpose: `pattern` (no regex dependency), `format`, annotations and all
//! other keywords, remote or anchor `$ref`s (never fetched), and keywords whose value
//! has the wrong JSON type (treated as absent). `additionalProperties` is skipped
//! when `patternProperties` is present, since pattern keys cannot be matched.
//!
//! Bounded: neither schema (from a server) nor arguments (from a client) are trusted,
//! so evaluation stops after [`MAX_DEPTH`] nested schema levels (counting `$ref`
//! hops, which ends recursive `$ref`s) or [`MAX_STEPS`] units of work, yielding a
//! [`Violation`] instead of a stack overflow or a hang. Nothing here panics.

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

type Obj = Map<String, Value>;

/// The first violation found: where in the arguments, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    let mut validator = Validator { root: schema, steps: 0 };
    validator.check(schema, instance, &Loc::Root, 0).map_err(|fail| match fail {
        Fail::Invalid(violation) => violation,
        Fail::Fatal(message) => Violation { path: String::new(), message },
    })
}

/// `Fatal` (depth, budget) failures are never swallowed by `not`/`anyOf`/`if`.
enum Fail {
    Invalid(Violation),
    Fatal(String),
}

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
    fn tick(&mut self, n: usize) -> Result<(), Fail> {
        self.steps = self.steps.saturating_add(n);
        match self.steps > MAX_STEPS {
            true => Err(Fail::Fatal("arguments too complex to validate".to_owned())),
            false => Ok(()),
        }
    }

    fn check(&mut self, schema: &'s Value, inst: &Value, loc: &Loc, depth: usize) -> Result<(), Fail> {
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
        let reference = s.get("$ref").and_then(Value::as_str);
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
        let name = (pointer.strip_prefix("/$defs/"))
            .or_else(|| pointer.strip_prefix("/definitions/"))?;
        (!name.contains('/')).then(|| self.root.pointer(pointer))?
    }

    /// Keywords that only look at `inst` itself; returns the violated constraint.
    fn local(&mut self, s: &Obj, inst: &Value) -> Option<String> {
        let types = type_names(s);
        if !types.is_empty() && !types.iter().any(|t| has_type(inst, t)) {
            let wanted: Vec<String> = types.iter().map(|t| article(t)).collect();
            return Some(format!("must be {} (got {})", wanted.join(" or "), show(inst)));
        }
        if let Some(Value::Array(options)) = s.get("enum")
            && !options.iter().any(|o| self.equal(o, inst))
        {
            let shown: Vec<String> = options.iter().take(LISTED).map(show).collect();
            let more = if options.len() > LISTED { ", ..." } else { "" };
            return Some(format!("must be one of {}{more}", shown.join(", ")));
        }
        if let Some(expected) = s.get("const").filter(|c| !self.equal(c, inst)) {
            return Some(format!("must be {} (got {})", show(expected), show(inst)));
        }
        match inst {
            Value::Number(n) => bounds(s, n),
            Value::String(t) if s.contains_key("minLength") || s.contains_key("maxLength") => {
                self.steps = self.steps.saturating_add(t.len() / 1024);
                sized(s, "Length", t.chars().count(), "character")
            }
            Value::Array(items) => sized(s, "Items", items.len(), "item"),
            Value::Object(obj) => {
                let required = s.get("required").and_then(Value::as_array);
                self.steps = self.steps.saturating_add(required.map_or(0, Vec::len));
                let mut names = required.into_iter().flatten().filter_map(Value::as_str);
                let missing = names.find(|k| !obj.contains_key(*k))?;
                Some(format!("missing required property '{}'", clip(missing)))
            }
            _ => None,
        }
    }

    /// `items`, `properties` and `additionalProperties`.
    fn children(&mut self, s: &'s Obj, inst: &Value, loc: &Loc, depth: usize) -> Result<(), Fail> {
        match inst {
            Value::Array(items) => {
                let Some(item_schema) = subschema(s, "items") else { return Ok(()) };
                for (i, item) in items.iter().enumerate() {
                    self.check(item_schema, item, &Loc::Index(loc, i), depth)?;
                }
            }
            Value::Object(obj) => {
                let props = s.get("properties").and_then(Value::as_object);
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
    fn logic(&mut self, s: &'s Obj, inst: &Value, loc: &Loc, depth: usize) -> Result<(), Fail> {
        for sub in schema_list(s, "allOf") {
            self.check(sub, inst, loc, depth)?;
        }
        for (key, want, enough) in [("anyOf", "at least", 1), ("oneOf", "exactly", 2)] {
            let alternatives = schema_list(s, key);
            let (mut hits, mut first) = (Vec::new(), None);
            for (i, alt) in alternatives.iter().enumerate() {
                match self.probe(alt, inst, loc, depth)? {
                    None => hits.push(i + 1),
                    Some(v) => first = first.or(Some(v)),
                }
                if hits.len() == enough {
                    break;
                }
            }
            let n = plural(alternatives.len() as u64, "alternative");
            let message = match (hits.as_slice(), first) {
                ([], Some(v)) => format!("must match {want} one of {n} (alternative 1: {v})"),
                ([a, b], _) => format!("must match exactly one of {n}, but matches both {a} and {b}"),
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
    fn probe(&mut self, schema: &'s Value, inst: &Value, loc: &Loc, depth: usize) -> Result<Option<Violation>, Fail> {
        match self.check(schema, inst, loc, depth) {
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
    let kind = if type_names(s).contains(&"integer") { "an integer" } else { "a number" };
    let limits = [
        ("minimum", ">=", Ordering::is_ge as fn(Ordering) -> bool),
        ("exclusiveMinimum", ">", Ordering::is_gt),
        ("maximum", "<=", Ordering::is_le),
        ("exclusiveMaximum", "<", Ordering::is_lt),
    ];
    limits.into_iter().find_map(|(key, op, holds)| {
        let bound = s.get(key)?.as_number()?;
        let ok = compare(n, bound).is_some_and(holds);
        (!ok).then(|| format!("must be {kind} {op} {bound} (got {n})"))
    })
}

/// `min{suffix}` / `max{suffix}` against a length counted in `noun`s.
fn sized(s: &Obj, suffix: &str, len: usize, noun: &str) -> Option<String> {
    let limit = |key: String| s.get(&key).and_then(Value::as_u64);
    let len = u64::try_from(len).unwrap_or(u64::MAX);
    if let Some(min) = limit(format!("min{suffix}")).filter(|&m| len < m) {
        return Some(format!("must have at least {} (got {len})", plural(min, noun)));
    }
    let max = limit(format!("max{suffix}")).filter(|&m| len > m)?;
    Some(format!("must have at most {} (got {len})", plural(max, noun)))
}

/// Exact for two integers (any mix of i64/u64), via f64 otherwise.
fn compare(a: &Number, b: &Number) -> Option<Ordering> {
    match (a.as_i128(), b.as_i128()) {
        (Some(x), Some(y)) => Some(x.cmp(&y)),
        _ => a.as_f64()?.partial_cmp(&b.as_f64()?),
    }
}

fn subschema<'a>(s: &'a Obj, key: &str) -> Option<&'a Value> {
    s.get(key).filter(|v| v.is_object() || v.is_boolean())
}

fn schema_list<'a>(s: &'a Obj, key: &str) -> &'a [Value] {
    s.get(key).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn type_names(s: &Obj) -> Vec<&str> {
    match s.get("type") {
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
    if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") }
}

fn unexpected(key: &str, props: Option<&Obj>) -> String {
    let key = clip(key);
    let Some(props) = props.filter(|p| !p.is_empty()) else {
        return format!("unexpected property '{key}' (no additional properties are allowed)");
    };
    let names: Vec<String> = props.keys().take(LISTED).map(|k| format!("'{}'", clip(k))).collect();
    let more = if props.len() > LISTED { ", ..." } else { "" };
    format!("unexpected property '{key}'; allowed: {}{more}", names.join(", "))
}

/// At most [`CLIP`] characters of `text`.
fn clip(text: &str) -> String {
    match text.char_indices().nth(CLIP) {
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
    if cut { format!("{text}...") } else { text.into_owned() }
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
