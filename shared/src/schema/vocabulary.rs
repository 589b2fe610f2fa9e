//! The keywords the validator knows: what each one's value must be, which hold subschemas,
//! which are known and refused, and the closest known keyword to a misspelt one. The walk
//! that uses them is `refuse.rs`.

use serde_json::Value;

use super::TYPE_NAMES;

/// What a keyword's value must be, and whether it holds subschemas.
#[derive(Clone, Copy)]
pub(super) enum Kind {
    /// Asserts nothing; any value.
    Annotation,
    /// Asserts nothing; a string (`$id`, `$anchor`, `$schema`).
    Identifier,
    /// One subschema.
    Schema,
    /// A non-empty list of subschemas.
    Schemas,
    /// An object of subschemas.
    SchemaMap,
    /// An object of subschemas whose names are patterns (`patternProperties`).
    PatternMap,
    /// `type`.
    Type,
    /// Any value (`const`).
    Any,
    /// A list of values (`enum`).
    List,
    Number,
    /// A number above zero (`multipleOf`).
    Divisor,
    /// A non-negative integer (`minLength`, ...).
    Count,
    Flag,
    /// A list of property names (`required`).
    Names,
    /// An object of lists of property names (`dependentRequired`).
    NamesMap,
    Pattern,
    Ref,
    /// Known, not implemented; what to use instead.
    Unsupported(&'static str),
}

/// Every keyword the walk knows, in the module docs' order.
const KEYWORDS: &[(&str, Kind)] = &[
    ("type", Kind::Type),
    ("enum", Kind::List),
    ("const", Kind::Any),
    ("minimum", Kind::Number),
    ("maximum", Kind::Number),
    ("exclusiveMinimum", Kind::Number),
    ("exclusiveMaximum", Kind::Number),
    ("multipleOf", Kind::Divisor),
    ("minLength", Kind::Count),
    ("maxLength", Kind::Count),
    ("pattern", Kind::Pattern),
    ("items", Kind::Schema),
    ("prefixItems", Kind::Schemas),
    ("minItems", Kind::Count),
    ("maxItems", Kind::Count),
    ("uniqueItems", Kind::Flag),
    ("contains", Kind::Schema),
    ("minContains", Kind::Count),
    ("maxContains", Kind::Count),
    ("properties", Kind::SchemaMap),
    ("patternProperties", Kind::PatternMap),
    ("additionalProperties", Kind::Schema),
    ("propertyNames", Kind::Schema),
    ("required", Kind::Names),
    ("dependentRequired", Kind::NamesMap),
    ("dependentSchemas", Kind::SchemaMap),
    ("minProperties", Kind::Count),
    ("maxProperties", Kind::Count),
    ("allOf", Kind::Schemas),
    ("anyOf", Kind::Schemas),
    ("oneOf", Kind::Schemas),
    ("not", Kind::Schema),
    ("if", Kind::Schema),
    ("then", Kind::Schema),
    ("else", Kind::Schema),
    ("$defs", Kind::SchemaMap),
    ("definitions", Kind::SchemaMap),
    ("$ref", Kind::Ref),
    ("title", Kind::Annotation),
    ("description", Kind::Annotation),
    ("default", Kind::Annotation),
    ("examples", Kind::Annotation),
    ("deprecated", Kind::Annotation),
    ("readOnly", Kind::Annotation),
    ("writeOnly", Kind::Annotation),
    ("$comment", Kind::Annotation),
    ("contentMediaType", Kind::Annotation),
    ("contentEncoding", Kind::Annotation),
    ("contentSchema", Kind::Annotation),
    ("format", Kind::Annotation),
    ("$schema", Kind::Identifier),
    ("$id", Kind::Identifier),
    ("$anchor", Kind::Identifier),
    ("$dynamicAnchor", Kind::Identifier),
    (
        "unevaluatedProperties",
        Kind::Unsupported("\"additionalProperties\""),
    ),
    ("unevaluatedItems", Kind::Unsupported("\"items\"")),
    ("$dynamicRef", Kind::Unsupported("\"$ref\"")),
    ("$recursiveRef", Kind::Unsupported("\"$ref\"")),
    (
        "additionalItems",
        Kind::Unsupported("\"items\", which applies to the items after \"prefixItems\""),
    ),
    (
        "dependencies",
        Kind::Unsupported("\"dependentRequired\" or \"dependentSchemas\""),
    ),
    (
        "nullable",
        Kind::Unsupported("a \"type\" list with \"null\", like [\"string\", \"null\"]"),
    ),
];

/// The kind of keyword `key`; `None` when the validator does not know it.
pub(super) fn kind(key: &str) -> Option<Kind> {
    KEYWORDS
        .iter()
        .find_map(|(k, kind)| (*k == key).then_some(*kind))
}

/// The keyword that `key` has no effect without (`if` for `then`).
pub(super) fn needs(key: &str) -> Option<&'static str> {
    NEEDS
        .iter()
        .find_map(|(k, needs)| (*k == key).then_some(*needs))
}

/// Keywords that do nothing without another beside them.
const NEEDS: [(&str, &str); 4] = [
    ("then", "if"),
    ("else", "if"),
    ("minContains", "contains"),
    ("maxContains", "contains"),
];

/// Longest unknown keyword, in bytes, for which a known one is suggested.
const SUGGEST_UP_TO: usize = 40;

/// What the value of a keyword of kind `kind` must be, when `value` is not that.
pub(super) fn shape(kind: Kind, value: &Value) -> Option<&'static str> {
    let ok = match kind {
        Kind::Annotation | Kind::Any => true,
        Kind::Identifier => value.is_string(),
        Kind::Type => match value {
            Value::String(t) => TYPE_NAMES.contains(&t.as_str()),
            Value::Array(ts) => {
                !ts.is_empty()
                    && ts
                        .iter()
                        .all(|t| t.as_str().is_some_and(|t| TYPE_NAMES.contains(&t)))
            }
            _ => false,
        },
        Kind::List => value.is_array(),
        Kind::Number => value.is_number(),
        Kind::Divisor => value.as_f64().is_some_and(|d| d > 0.0),
        Kind::Count => value.as_u64().is_some(),
        Kind::Flag => value.is_boolean(),
        Kind::Names => names(value),
        Kind::NamesMap => value.as_object().is_some_and(|m| m.values().all(names)),
        _ => true, // the kinds holding schemas, patterns and references are checked by the walk
    };
    (!ok).then_some(match kind {
        Kind::Identifier => "a string",
        Kind::Type => "one of \"object\", \"array\", \"string\", \"number\", \"integer\", \"boolean\", \"null\", or a non-empty list of them",
        Kind::List => "a list of values",
        Kind::Number => "a number",
        Kind::Divisor => "a number above 0",
        Kind::Count => "a non-negative integer",
        Kind::Flag => "true or false",
        Kind::Names => "a list of property names",
        _ => "an object of lists of property names",
    })
}

/// A list of strings.
fn names(value: &Value) -> bool {
    value
        .as_array()
        .is_some_and(|a| a.iter().all(Value::is_string))
}

/// The known keyword `key` most likely misspells: the same letters in another case, or
/// at most two edits away (one for short keywords).
pub(super) fn suggest(key: &str) -> Option<&'static str> {
    if key.len() > SUGGEST_UP_TO {
        return None;
    }
    let known = KEYWORDS.iter().map(|(k, _)| *k);
    if let Some(same) = known.clone().find(|k| k.eq_ignore_ascii_case(key)) {
        return Some(same);
    }
    let most = if key.chars().count() <= 4 { 1 } else { 2 };
    known
        .map(|k| (edits(key, k), k))
        .filter(|(d, _)| *d <= most)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Levenshtein distance between `a` and `b`, in characters.
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = i;
        let mut left = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let up = row.get(j + 1).copied().unwrap_or_default();
            let here = (diagonal + usize::from(ca != cb)).min(left + 1).min(up + 1);
            diagonal = up;
            if let Some(cell) = row.get_mut(j + 1) {
                *cell = here;
            }
            left = here;
        }
        if let Some(first) = row.first_mut() {
            *first = i + 1;
        }
    }
    row.last().copied().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A long unknown keyword gets no suggestion (the edit distance is not computed).
    #[test]
    fn suggestions_are_bounded() {
        assert_eq!(suggest(&"x".repeat(SUGGEST_UP_TO + 1)), None);
        assert_eq!(suggest("requird"), Some("required"));
        assert_eq!(suggest("propertys"), Some("properties"));
        assert_eq!(suggest("tpye"), None);
        assert_eq!(edits("kitten", "sitting"), 3);
    }
}
