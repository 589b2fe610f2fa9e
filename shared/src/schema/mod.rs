//! Bounded validator for `tools/call` arguments against a tool's `inputSchema`, and the
//! registration check that says whether it enforces all of a schema.
//!
//! The gateway validates arguments before creating a task, so a bad call gets an
//! immediate tool error naming the field and the rule, e.g.
//! `invalid arguments: /ms: must be an integer >= 0 (got -5)`.
//!
//! # Keywords
//!
//! Enforced (JSON Schema draft 2020-12): boolean schemas; `type` (`integer` = a number
//! without fractional part, so `1.0` counts), `enum`, `const`; `minimum`, `maximum`,
//! `exclusiveMinimum`, `exclusiveMaximum`, `multipleOf` (exact on the numbers' shortest
//! decimal form, so `0.0075` is a multiple of `0.0001`); `minLength` and `maxLength` (in
//! Unicode scalar values), `pattern` (see below); `items`, `prefixItems`, `minItems`,
//! `maxItems`, `uniqueItems`, `contains`, `minContains`, `maxContains`; `properties`,
//! `patternProperties`, `additionalProperties` (the properties matched by neither of those
//! two), `propertyNames`, `required`, `dependentRequired`, `dependentSchemas`,
//! `minProperties`, `maxProperties`; `allOf`, `anyOf`, `oneOf`, `not`, `if`/`then`/`else`;
//! `$defs`, `definitions` and `$ref` to `#` or to any `#/JSON/Pointer` into the schema.
//!
//! Accepted and not checked, because they assert nothing: `title`, `description`,
//! `default`, `examples`, `deprecated`, `readOnly`, `writeOnly`, `$comment`,
//! `contentMediaType`, `contentEncoding`, `contentSchema`, vendor extensions named `x-…`,
//! the identifiers `$id`, `$anchor` and `$dynamicAnchor`, `$schema` (not read: every schema
//! is evaluated as 2020-12), and `format`, which 2020-12 makes an annotation unless the
//! schema's meta-schema asks for the format-assertion vocabulary (not implemented here).
//!
//! # Enforce or refuse
//!
//! Anything else would not be enforced: a keyword the validator does not know (a typo such
//! as `requried`), one it knows but does not implement (`unevaluatedProperties`,
//! `unevaluatedItems`, `$dynamicRef`, draft-07's `dependencies` and `additionalItems`), a
//! value of the wrong shape (`"minLength": "3"`), `then` without `if`, a `$ref` that is
//! remote, names an anchor or sits below a nested `$id`, a pattern the regex engine cannot
//! compile. [`unenforced`] finds the first of these with its place in the schema, and
//! registration refuses the tool with that message: the `MCPT_TOOLS_FILE` catalog at load
//! (`worker/catalog/src/schema.rs`) and the worker for every tool it is about to advertise
//! (`worker/runtime/src/lib.rs`). The catalog keeps an upstream MCP server's tools with a
//! warning instead: that schema is not ours, and the upstream validates its own input
//! (`worker/catalog/src/upstream.rs`, which also notes what is still missing for that).
//!
//! [`validate`] itself never fails on a schema: what it cannot enforce is treated as
//! absent, so valid input is never rejected because of it.
//!
//! # Patterns
//!
//! `pattern` and `patternProperties` run on the `regex` crate, whose matching is linear in
//! the input (no catastrophic backtracking on a hostile pattern or string). A pattern it
//! cannot compile (look-around, back-references: ECMA-262 features it lacks) or one over
//! 64 KiB compiled is refused at registration. Its classes are Unicode-aware: `\d` and
//! `\w` also match non-ASCII digits and letters, where ECMA-262's match ASCII only.
//! Compiled patterns are cached per thread.
//!
//! # Bounds
//!
//! Neither schema (from a server) nor arguments (from a client) are trusted, so evaluation
//! stops after 64 nested schema levels (counting `$ref` hops, which ends recursive `$ref`s)
//! or 100 000 units of work, yielding a [`Violation`] instead of a stack overflow or a
//! hang. Nothing here panics.
//!
//! The keywords that look at an instance alone are in `assertions.rs`, those that apply
//! subschemas in `applicators.rs`, the registration check in `refuse.rs` with the table of
//! known keywords in `vocabulary.rs`, messages and the pattern cache in `text.rs`.

mod applicators;
mod assertions;
mod refuse;
mod text;
mod vocabulary;

use serde_json::{Map, Value};
use std::cmp::Ordering;
use std::fmt;

pub use refuse::{Unenforced, Why, unenforced};

use self::assertions::compare;

/// Maximum nesting of schema evaluations, including `$ref` hops.
const MAX_DEPTH: usize = 64;
/// Maximum units of work (subschema visits, compared nodes, listed properties).
const MAX_STEPS: usize = 100_000;

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
///
/// # Errors
/// The first [`Violation`]; also one when the evaluation goes over its depth or work
/// bounds (see the module docs).
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

/// `Fatal` (depth, budget) failures are never swallowed by `not`/`anyOf`/`if`/`contains`.
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
            Loc::Key(up, key) => format!("{}/{}", up.pointer(), escape(key)),
            Loc::Index(up, i) => format!("{}/{i}", up.pointer()),
        }
    }
}

/// `key` as one JSON Pointer (RFC 6901) reference token.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
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

    /// Whether the work budget is spent (the next [`Validator::tick`] fails).
    fn spent(&self) -> bool {
        self.steps > MAX_STEPS
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

    /// The subschema a local `$ref` (`#` or `#/JSON/Pointer`) names; `None` for any other.
    fn resolve(&self, reference: &str) -> Option<&'s Value> {
        resolve(self.root, reference)
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
            _ if self.spent() => false,
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

/// The value a local `$ref` names in `root`: `#` is `root`, `#/a/b` a JSON Pointer into
/// it. Percent-encoded pointers are not decoded, so they (like remote and anchor
/// references) name nothing.
fn resolve<'s>(root: &'s Value, reference: &str) -> Option<&'s Value> {
    let pointer = reference.strip_prefix('#')?;
    if pointer.contains('%') {
        return None;
    }
    root.pointer(pointer)
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

/// The seven names `type` takes.
const TYPE_NAMES: [&str; 7] = [
    "object", "array", "string", "number", "integer", "boolean", "null",
];

fn has_type(v: &Value, t: &str) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.as_f64().is_some_and(|f| f.fract() == 0.0),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => true, // unknown type names are ignored (and refused at registration)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The MCP conformance suite's 2020-12 schema; `FIXTURE` in a case line stands for it.
    pub(in crate::schema) const FIXTURE: &str = r##"{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",
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

    /// `type`, `properties`, `required`.
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
{"$ref":"https://example.com/s.json","allOf":[{"$ref":"#addressDef"},{"$ref":"#/$defs/none"},{"$ref":"#/$defs/a%20b"}]} | 1 | ok
{"$defs":{"a":{"properties":{"b":{"type":"string"}}}},"properties":{"s":{"$ref":"#/$defs/a/properties/b"}}} | {"s":1} | /s: must be a string (got 1)
{"properties":{"a":{"type":"string"},"b":{"$ref":"#/properties/a"}}} | {"b":1} | /b: must be a string (got 1)
{"type":"object","properties":{"child":{"$ref":"#"}},"required":["n"]} | {"n":1,"child":{"n":2,"child":{}}} | /child/child: missing required property 'n'
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

    /// Runs a case table: `schema | instance | expected Display of the violation, or ok`.
    pub(in crate::schema) fn run(cases: &str) {
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
