//! [`unenforced`]: whether [`validate`](super::validate) enforces every keyword of a
//! schema, checked once when a tool is registered rather than on every call.
//!
//! The walk visits every subschema position (`properties`, `patternProperties`, `items`,
//! `prefixItems`, `contains`, `propertyNames`, `additionalProperties`, the combinators,
//! `if`/`then`/`else`, `dependentSchemas`, `$defs`, `definitions`) and checks that each
//! `$ref` points at one of those positions.

use std::fmt;

use serde_json::{Map, Value};

use super::text::{compile, show};
use super::vocabulary::{Kind, kind, needs, shape, suggest};
use super::{MAX_DEPTH, escape, resolve};

/// A part of a schema that [`validate`](super::validate) would not enforce, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unenforced {
    /// A keyword that is unknown, not implemented, or whose value cannot be used.
    #[error("keyword {keyword:?} at {} is not enforced by mcp-tasks' validator{why}", place(.at))]
    Keyword {
        /// JSON Pointer (RFC 6901) of the schema object holding the keyword; `""`: the root.
        at: String,
        /// The keyword.
        keyword: String,
        /// Why it is not enforced.
        why: Why,
    },
    /// A value in a schema position that is neither an object nor a boolean.
    #[error(
        "the schema at {} is not enforced by mcp-tasks' validator: a schema must be an \
         object or a boolean (got {found})",
        place(.at)
    )]
    NotASchema {
        /// JSON Pointer of the value.
        at: String,
        /// The value, clipped.
        found: String,
    },
    /// A subschema nested deeper than the validator evaluates.
    #[error(
        "the schema at {} is nested deeper than the {depth} levels mcp-tasks' validator \
         evaluates",
        place(.at)
    )]
    TooDeep {
        /// JSON Pointer of the subschema.
        at: String,
        /// The deepest nesting evaluated.
        depth: usize,
    },
}

/// Why a keyword is not enforced ([`Unenforced::Keyword`]); its `Display` continues that
/// sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Why {
    /// Not a keyword the validator knows; maybe a misspelling of `suggestion`.
    Unknown {
        /// A known keyword spelled alike.
        suggestion: Option<&'static str>,
    },
    /// A keyword the validator knows and does not implement.
    Unsupported {
        /// What to use instead.
        instead: &'static str,
    },
    /// Its value is not of the shape the keyword takes.
    Value {
        /// What the value must be.
        expected: &'static str,
        /// The value, clipped.
        got: String,
    },
    /// It does nothing without `needs` beside it (`then` without `if`).
    Alone {
        /// The keyword it needs.
        needs: &'static str,
    },
    /// A `$ref` the validator does not follow.
    Ref {
        /// The reference, clipped.
        reference: String,
        /// Why it is not followed.
        problem: &'static str,
    },
    /// A pattern (of `pattern` or `patternProperties`) the linear-time engine cannot compile.
    Pattern {
        /// The pattern, clipped.
        pattern: String,
        /// The engine's reason.
        reason: String,
    },
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Why::Unknown { suggestion: None } => {
                f.write_str(" (it knows no such keyword); remove it")
            }
            Why::Unknown {
                suggestion: Some(s),
            } => write!(
                f,
                " (it knows no such keyword; did you mean {s:?}?); correct or remove it"
            ),
            Why::Unsupported { instead } => write!(f, "; remove it or use {instead}"),
            Why::Value { expected, got } => {
                write!(f, ": its value must be {expected} (got {got})")
            }
            Why::Alone { needs } => write!(f, ": it has no effect without {needs:?} beside it"),
            Why::Ref { reference, problem } => write!(f, ": {reference} {problem}"),
            Why::Pattern { pattern, reason } => write!(
                f,
                ": the pattern {pattern} cannot be compiled by its linear-time regex engine \
                 ({reason})"
            ),
        }
    }
}

/// `at` for a message: `the root` or the pointer.
fn place(at: &str) -> &str {
    if at.is_empty() { "the root" } else { at }
}

/// Checks that [`validate`](super::validate) enforces every keyword of `schema`.
///
/// Annotations (`title`, `description`, `format`, ...; see the module docs) are accepted,
/// and so are vendor extensions named `x-…`.
///
/// # Errors
/// The first part of `schema`, in document order, that would not be
/// enforced: an unknown or unimplemented keyword, a value of the wrong shape, a keyword
/// that has no effect alone, a `$ref` that is not followed, a pattern that does not
/// compile, a non-schema in a schema position, or nesting beyond the validator's depth.
pub fn unenforced(schema: &Value) -> Result<(), Unenforced> {
    Walk { root: schema }.schema(schema, String::new(), 0, false)
}

/// The walk over one schema document.
struct Walk<'s> {
    /// The document, which `$ref`s point into.
    root: &'s Value,
}

impl Walk<'_> {
    /// The schema `s` at pointer `at`, `depth` levels down.
    fn schema(
        &self,
        s: &Value,
        at: String,
        depth: usize,
        below_id: bool,
    ) -> Result<(), Unenforced> {
        if depth >= MAX_DEPTH {
            return Err(Unenforced::TooDeep {
                at,
                depth: MAX_DEPTH,
            });
        }
        let obj = match s {
            Value::Object(obj) => obj,
            Value::Bool(_) => return Ok(()),
            other => {
                return Err(Unenforced::NotASchema {
                    at,
                    found: show(other),
                });
            }
        };
        let below_id = below_id || (depth > 0 && obj.contains_key("$id"));
        for (key, value) in obj {
            self.keyword(obj, key, value, &at, depth, below_id)?;
        }
        Ok(())
    }

    /// Keyword `key` (value `value`) of the schema object `obj` at `at`.
    fn keyword(
        &self,
        obj: &Map<String, Value>,
        key: &str,
        value: &Value,
        at: &str,
        depth: usize,
        below_id: bool,
    ) -> Result<(), Unenforced> {
        let fail = |why| Unenforced::Keyword {
            at: at.to_owned(),
            keyword: key.to_owned(),
            why,
        };
        if key.starts_with("x-") {
            return Ok(());
        }
        let Some(kind) = kind(key) else {
            return Err(fail(Why::Unknown {
                suggestion: suggest(key),
            }));
        };
        if let Some(needs) = needs(key)
            && !obj.contains_key(needs)
        {
            return Err(fail(Why::Alone { needs }));
        }
        let bad_value = |expected| {
            fail(Why::Value {
                expected,
                got: show(value),
            })
        };
        let here = format!("{at}/{}", escape(key));
        match kind {
            Kind::Schema if value.is_array() && key == "items" => Err(bad_value(
                "one schema (for one schema per position, use \"prefixItems\")",
            )),
            Kind::Schema => self.schema(value, here, depth + 1, below_id),
            Kind::Schemas => {
                let list = value.as_array().filter(|l| !l.is_empty());
                let list = list.ok_or_else(|| bad_value("a non-empty list of schemas"))?;
                for (i, sub) in list.iter().enumerate() {
                    self.schema(sub, format!("{here}/{i}"), depth + 1, below_id)?;
                }
                Ok(())
            }
            Kind::SchemaMap | Kind::PatternMap => {
                let map = value
                    .as_object()
                    .ok_or_else(|| bad_value("an object of schemas"))?;
                for (name, sub) in map {
                    if matches!(kind, Kind::PatternMap) {
                        pattern(name).map_err(fail)?;
                    }
                    self.schema(sub, format!("{here}/{}", escape(name)), depth + 1, below_id)?;
                }
                Ok(())
            }
            Kind::Pattern => match value.as_str() {
                Some(p) => pattern(p).map_err(fail),
                None => Err(bad_value("a string (a regular expression)")),
            },
            Kind::Ref => {
                let reference = value.as_str().ok_or_else(|| bad_value("a string"))?;
                self.reference(at, reference, below_id)
            }
            Kind::Unsupported(instead) => Err(fail(Why::Unsupported { instead })),
            leaf => match shape(leaf, value) {
                Some(expected) => Err(bad_value(expected)),
                None => Ok(()),
            },
        }
    }

    /// A `$ref` of the schema at `at`: followed only when local and pointing at a schema
    /// position, which the walk visits too.
    fn reference(&self, at: &str, reference: &str, below_id: bool) -> Result<(), Unenforced> {
        let fail = |problem| Unenforced::Keyword {
            at: at.to_owned(),
            keyword: "$ref".to_owned(),
            why: Why::Ref {
                reference: show(&Value::String(reference.to_owned())),
                problem,
            },
        };
        let Some(pointer) = reference.strip_prefix('#') else {
            return Err(fail(
                "is not a local reference (only \"#\" and \"#/JSON/Pointer\" into this schema are followed)",
            ));
        };
        if !pointer.is_empty() && !pointer.starts_with('/') {
            return Err(fail(
                "names an anchor (only \"#\" and \"#/JSON/Pointer\" into this schema are followed)",
            ));
        }
        if pointer.contains('%') {
            return Err(fail("is percent-encoded, and is not decoded"));
        }
        if below_id {
            return Err(fail(
                "is below a nested \"$id\", which changes its base; it would be resolved from the root",
            ));
        }
        if !is_position(self.root, pointer) || resolve(self.root, reference).is_none() {
            return Err(fail("does not point to a subschema of this schema"));
        }
        Ok(())
    }
}

/// Whether JSON Pointer `pointer` names a schema position of `root`: each step is a
/// keyword holding subschemas (then, for a list or an object of them, the entry).
fn is_position(root: &Value, pointer: &str) -> bool {
    let mut tokens = pointer
        .split('/')
        .skip(1)
        .map(|t| t.replace("~1", "/").replace("~0", "~"));
    let mut here = root;
    while let Some(key) = tokens.next() {
        let Some(value) = here.get(&key) else {
            return false;
        };
        here = match kind(&key) {
            Some(Kind::Schema) => value,
            Some(Kind::Schemas | Kind::SchemaMap | Kind::PatternMap) => {
                let entry = tokens.next().unwrap_or_default();
                let found = match value {
                    Value::Array(list) => entry.parse::<usize>().ok().and_then(|i| list.get(i)),
                    other => other.get(&entry),
                };
                let Some(found) = found else {
                    return false;
                };
                found
            }
            _ => return false,
        };
    }
    true
}

/// `p` compiled as [`validate`](super::validate) would compile it.
fn pattern(p: &str) -> Result<(), Why> {
    compile(p).map(drop).map_err(|e| {
        let text = e.to_string();
        // The engine's message is a caret diagram ending in the reason.
        let reason = text
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or_default();
        let reason = reason.trim().trim_start_matches("error: ");
        Why::Pattern {
            pattern: show(&Value::String(p.to_owned())),
            reason: reason.to_owned(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `schema | expected Display of the refusal, or ok`.
    const CASES: &str = r##"
true | ok
false | ok
{} | ok
{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false} | ok
{"title":"t","description":"d","default":{},"examples":[1],"deprecated":true,"readOnly":false,"writeOnly":false,"$comment":"c","$schema":"https://json-schema.org/draft/2020-12/schema","$id":"https://example.com/s"} | ok
{"properties":{"a":{"type":"string","format":"email","contentMediaType":"text/plain","contentEncoding":"base64","contentSchema":{"anything":1},"x-mcp-header":"A","$anchor":"a","$dynamicAnchor":"d"}}} | ok
{"type":["string","null"],"enum":["a",null],"const":"a","minLength":1,"maxLength":2,"pattern":"^[a-z]$"} | ok
{"type":"number","minimum":0,"maximum":9,"exclusiveMinimum":-1,"exclusiveMaximum":10.5,"multipleOf":0.5} | ok
{"prefixItems":[{"type":"string"},true],"items":false,"minItems":1,"maxItems":3,"uniqueItems":true,"contains":{"type":"string"},"minContains":1,"maxContains":2} | ok
{"properties":{"a":{}},"patternProperties":{"^x-":{"type":"string"}},"additionalProperties":{"type":"integer"},"propertyNames":{"maxLength":8},"dependentRequired":{"a":["b"]},"dependentSchemas":{"a":{"required":["c"]}},"minProperties":1,"maxProperties":5} | ok
{"allOf":[{}],"anyOf":[{},false],"oneOf":[true],"not":{"type":"null"},"if":{"required":["a"]},"then":{"required":["b"]},"else":{}} | ok
{"$defs":{"a/b":{"type":"string"},"n":{"properties":{"m":{"type":"integer"}}}},"definitions":{"d":{}},"properties":{"s":{"$ref":"#/$defs/a~1b"},"m":{"$ref":"#/$defs/n/properties/m"},"d":{"$ref":"#/definitions/d"},"again":{"$ref":"#/properties/s"},"tree":{"$ref":"#"}}} | ok
{"type":"object","properties":{"a":{"type":"string"}},"requried":["a"]} | keyword "requried" at the root is not enforced by mcp-tasks' validator (it knows no such keyword; did you mean "required"?); correct or remove it
{"properties":{"tags":{"items":{"anyOf":[{"type":"string"},{"typo":"string"}]}}}} | keyword "typo" at /properties/tags/items/anyOf/1 is not enforced by mcp-tasks' validator (it knows no such keyword; did you mean "type"?); correct or remove it
{"properties":{"a":{"maxlength":3}}} | keyword "maxlength" at /properties/a is not enforced by mcp-tasks' validator (it knows no such keyword; did you mean "maxLength"?); correct or remove it
{"foo":1} | keyword "foo" at the root is not enforced by mcp-tasks' validator (it knows no such keyword); remove it
{"$defs":{"unused":{"additionalProperties":{"unknown":true}}}} | keyword "unknown" at /$defs/unused/additionalProperties is not enforced by mcp-tasks' validator (it knows no such keyword); remove it
{"properties":{"a/b":{"patternProperties":{"^x":{"propertyNames":{"then":{}}}}}}} | keyword "then" at /properties/a~1b/patternProperties/^x/propertyNames is not enforced by mcp-tasks' validator: it has no effect without "if" beside it
{"minContains":1} | keyword "minContains" at the root is not enforced by mcp-tasks' validator: it has no effect without "contains" beside it
{"unevaluatedProperties":false} | keyword "unevaluatedProperties" at the root is not enforced by mcp-tasks' validator; remove it or use "additionalProperties"
{"properties":{"a":{"nullable":true}}} | keyword "nullable" at /properties/a is not enforced by mcp-tasks' validator; remove it or use a "type" list with "null", like ["string", "null"]
{"dependencies":{"a":["b"]}} | keyword "dependencies" at the root is not enforced by mcp-tasks' validator; remove it or use "dependentRequired" or "dependentSchemas"
{"items":[{"type":"string"}],"additionalItems":false} | keyword "items" at the root is not enforced by mcp-tasks' validator: its value must be one schema (for one schema per position, use "prefixItems") (got [{"type":"string"}])
{"properties":{"a":{"minLength":"3"}}} | keyword "minLength" at /properties/a is not enforced by mcp-tasks' validator: its value must be a non-negative integer (got "3")
{"maxItems":1.5} | keyword "maxItems" at the root is not enforced by mcp-tasks' validator: its value must be a non-negative integer (got 1.5)
{"type":"int"} | keyword "type" at the root is not enforced by mcp-tasks' validator: its value must be one of "object", "array", "string", "number", "integer", "boolean", "null", or a non-empty list of them (got "int")
{"type":[]} | keyword "type" at the root is not enforced by mcp-tasks' validator: its value must be one of "object", "array", "string", "number", "integer", "boolean", "null", or a non-empty list of them (got [])
{"required":"a"} | keyword "required" at the root is not enforced by mcp-tasks' validator: its value must be a list of property names (got "a")
{"dependentRequired":{"a":"b"}} | keyword "dependentRequired" at the root is not enforced by mcp-tasks' validator: its value must be an object of lists of property names (got {"a":"b"})
{"exclusiveMinimum":true} | keyword "exclusiveMinimum" at the root is not enforced by mcp-tasks' validator: its value must be a number (got true)
{"multipleOf":0} | keyword "multipleOf" at the root is not enforced by mcp-tasks' validator: its value must be a number above 0 (got 0)
{"uniqueItems":"yes"} | keyword "uniqueItems" at the root is not enforced by mcp-tasks' validator: its value must be true or false (got "yes")
{"enum":"a"} | keyword "enum" at the root is not enforced by mcp-tasks' validator: its value must be a list of values (got "a")
{"anyOf":[]} | keyword "anyOf" at the root is not enforced by mcp-tasks' validator: its value must be a non-empty list of schemas (got [])
{"properties":[]} | keyword "properties" at the root is not enforced by mcp-tasks' validator: its value must be an object of schemas (got [])
{"$id":5} | keyword "$id" at the root is not enforced by mcp-tasks' validator: its value must be a string (got 5)
{"properties":{"a":42}} | the schema at /properties/a is not enforced by mcp-tasks' validator: a schema must be an object or a boolean (got 42)
{"allOf":[{},"x"]} | the schema at /allOf/1 is not enforced by mcp-tasks' validator: a schema must be an object or a boolean (got "x")
"x" | the schema at the root is not enforced by mcp-tasks' validator: a schema must be an object or a boolean (got "x")
{"properties":{"a":{"pattern":"(?<=a)b"}}} | keyword "pattern" at /properties/a is not enforced by mcp-tasks' validator: the pattern "(?<=a)b" cannot be compiled by its linear-time regex engine (look-around, including look-ahead and look-behind, is not supported)
{"pattern":"(a)\\1"} | keyword "pattern" at the root is not enforced by mcp-tasks' validator: the pattern "(a)\\1" cannot be compiled by its linear-time regex engine (backreferences are not supported)
{"pattern":5} | keyword "pattern" at the root is not enforced by mcp-tasks' validator: its value must be a string (a regular expression) (got 5)
{"patternProperties":{"^(?!x)":{}}} | keyword "patternProperties" at the root is not enforced by mcp-tasks' validator: the pattern "^(?!x)" cannot be compiled by its linear-time regex engine (look-around, including look-ahead and look-behind, is not supported)
{"$ref":"https://example.com/s.json"} | keyword "$ref" at the root is not enforced by mcp-tasks' validator: "https://example.com/s.json" is not a local reference (only "#" and "#/JSON/Pointer" into this schema are followed)
{"properties":{"a":{"$ref":"#addressDef"}}} | keyword "$ref" at /properties/a is not enforced by mcp-tasks' validator: "#addressDef" names an anchor (only "#" and "#/JSON/Pointer" into this schema are followed)
{"$defs":{"a":{}},"$ref":"#/$defs/b"} | keyword "$ref" at the root is not enforced by mcp-tasks' validator: "#/$defs/b" does not point to a subschema of this schema
{"examples":[{}],"$ref":"#/examples/0"} | keyword "$ref" at the root is not enforced by mcp-tasks' validator: "#/examples/0" does not point to a subschema of this schema
{"$defs":{"a b":{}},"$ref":"#/$defs/a%20b"} | keyword "$ref" at the root is not enforced by mcp-tasks' validator: "#/$defs/a%20b" is percent-encoded, and is not decoded
{"$defs":{"a":{"$id":"https://example.com/a","items":{"$ref":"#/$defs/b"}},"b":{}}} | keyword "$ref" at /$defs/a/items is not enforced by mcp-tasks' validator: "#/$defs/b" is below a nested "$id", which changes its base; it would be resolved from the root
{"allOf":[{"type":"string"}],"properties":{"x-a":{},"b":{"$ref":"#/allOf/0"}},"$ref":"#/properties/x-a"} | ok
{"properties":{"a":{}},"$ref":"#/properties"} | keyword "$ref" at the root is not enforced by mcp-tasks' validator: "#/properties" does not point to a subschema of this schema
{"allOf":[{}],"$ref":"#/allOf/01"} | keyword "$ref" at the root is not enforced by mcp-tasks' validator: "#/allOf/01" does not point to a subschema of this schema
{"x-ext":{"type":"string"},"$ref":"#/x-ext"} | keyword "$ref" at the root is not enforced by mcp-tasks' validator: "#/x-ext" does not point to a subschema of this schema
{"$ref":5} | keyword "$ref" at the root is not enforced by mcp-tasks' validator: its value must be a string (got 5)
"##;

    fn outcome(schema: &Value) -> String {
        unenforced(schema).map_or_else(|e| e.to_string(), |()| "ok".to_owned())
    }

    #[test]
    fn refusals_name_the_keyword_and_its_place() {
        for line in CASES.lines().filter(|l| !l.is_empty()) {
            let (schema, expected) = line.split_once(" | ").expect("schema | expected");
            let schema: Value = serde_json::from_str(schema).expect(schema);
            assert_eq!(outcome(&schema), expected, "case: {line}");
        }
    }

    /// The fields, for callers that act on them (the catalog names the tool and the field).
    #[test]
    fn the_error_carries_keyword_and_pointer() {
        let refused = unenforced(&json!({"properties": {"tags": {"unevaluatedItems": false}}}));
        let Err(Unenforced::Keyword { at, keyword, why }) = refused else {
            panic!("not a keyword refusal: {refused:?}");
        };
        assert_eq!(
            (at.as_str(), keyword.as_str()),
            ("/properties/tags", "unevaluatedItems")
        );
        assert_eq!(
            why,
            Why::Unsupported {
                instead: "\"items\""
            }
        );
    }

    /// The first refusal in document order is reported, `$ref`s included.
    #[test]
    fn the_first_refusal_is_reported() {
        let schema = json!({"properties": {"a": {"bad": 1}}, "$ref": "#/nowhere", "other": 2});
        let got = outcome(&schema);
        assert!(
            got.starts_with("keyword \"bad\" at /properties/a "),
            "{got}"
        );
        let schema = json!({"$ref": "#/nowhere", "properties": {"a": {"bad": 1}}});
        let got = outcome(&schema);
        assert!(got.starts_with("keyword \"$ref\" at the root "), "{got}");
    }

    /// The walk stops where the validator does, and a nesting that deep is refused.
    #[test]
    fn deep_nesting_is_refused() {
        let deep = (0..100).fold(json!({}), |inner, _| json!({"items": inner}));
        let got = outcome(&deep);
        assert!(
            got.starts_with("the schema at /items/items/")
                && got.ends_with(
                    "is nested deeper than the 64 levels mcp-tasks' validator evaluates"
                ),
            "{got}"
        );
        let fine = (0..60).fold(json!({}), |inner, _| json!({"items": inner}));
        assert_eq!(outcome(&fine), "ok");
    }

    /// Every schema the validator's own tests call enforced is accepted: its module's
    /// conformance fixture (with an `$anchor` nobody references).
    #[test]
    fn the_conformance_fixture_is_enforced() {
        let fixture: Value = serde_json::from_str(super::super::tests::FIXTURE).expect("fixture");
        assert_eq!(outcome(&fixture), "ok");
    }
}
