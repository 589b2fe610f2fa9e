//! The keywords that look at an instance alone: `type`, `enum`, `const`, the number,
//! string, array and object assertions. Each returns the violated constraint as a message;
//! the caller adds the location. Subschemas are `applicators.rs`.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use serde_json::{Number, Value};

use super::text::{CLIP, LISTED, article, clip, plural, show, with_pattern};
use super::{Obj, Validator, has_type, keyword, type_names};

impl Validator<'_> {
    /// Keywords that only look at `inst` itself; returns the violated constraint.
    pub(super) fn local(&mut self, s: &Obj, inst: &Value) -> Option<String> {
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
            Value::Number(n) => bounds(s, n).or_else(|| multiple(s, n)),
            Value::String(t) => self.string(s, t, inst),
            Value::Array(items) => sized(s, ("minItems", "maxItems"), items.len(), ITEMS)
                .or_else(|| self.unique(s, items)),
            Value::Object(obj) => self.object(s, obj),
            _ => None,
        }
    }

    /// `minLength`, `maxLength` and `pattern`.
    fn string(&mut self, s: &Obj, t: &str, inst: &Value) -> Option<String> {
        if s.contains_key("minLength") || s.contains_key("maxLength") {
            self.steps = self.steps.saturating_add(t.len() / 1024);
            let nouns = ("character", "characters");
            let counted = t.chars().count();
            if let Some(violation) = sized(s, ("minLength", "maxLength"), counted, nouns) {
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

    /// `uniqueItems`: items are bucketed by a hash that equal values share (`1` and `1.0`
    /// alike), so only items in one bucket are compared.
    fn unique(&mut self, s: &Obj, items: &[Value]) -> Option<String> {
        if keyword(s, "uniqueItems") != Some(&Value::Bool(true)) {
            return None;
        }
        let mut seen: HashMap<u64, Vec<usize>> = HashMap::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let mut hasher = std::hash::DefaultHasher::new();
            self.steps = self.steps.saturating_add(fingerprint(item, &mut hasher));
            let bucket = seen.entry(hasher.finish()).or_default();
            for &j in bucket.iter() {
                if self.spent() {
                    return None; // the caller's next tick reports it
                }
                if self.equal(&items[j], item) {
                    return Some(format!(
                        "must have unique items (item {i} repeats item {j})"
                    ));
                }
            }
            bucket.push(i);
        }
        None
    }

    /// `required`, `dependentRequired`, `minProperties` and `maxProperties`.
    fn object(&mut self, s: &Obj, obj: &Obj) -> Option<String> {
        let required = keyword(s, "required").and_then(Value::as_array);
        self.steps = self.steps.saturating_add(required.map_or(0, Vec::len));
        let mut names = required.into_iter().flatten().filter_map(Value::as_str);
        if let Some(missing) = names.find(|k| !obj.contains_key(*k)) {
            return Some(format!(
                "missing required property '{}'",
                clip(missing, CLIP)
            ));
        }
        if let Some(Value::Object(dependent)) = keyword(s, "dependentRequired") {
            for (present, needs) in dependent.iter().filter(|(k, _)| obj.contains_key(*k)) {
                let needs = needs.as_array().map_or(&[][..], Vec::as_slice);
                self.steps = self.steps.saturating_add(needs.len());
                let mut names = needs.iter().filter_map(Value::as_str);
                if let Some(missing) = names.find(|k| !obj.contains_key(*k)) {
                    return Some(format!(
                        "missing property '{}', required when '{}' is present",
                        clip(missing, CLIP),
                        clip(present, CLIP)
                    ));
                }
            }
        }
        let nouns = ("property", "properties");
        sized(s, ("minProperties", "maxProperties"), obj.len(), nouns)
    }
}

/// Nouns of `minItems`/`maxItems` (and of `contains`' counts).
pub(super) const ITEMS: (&str, &str) = ("item", "items");

/// Feeds `v` to `hasher` so that values [`Validator::equal`] finds equal hash alike
/// (numbers as their `f64`, object members in any order); returns the nodes visited.
fn fingerprint(v: &Value, hasher: &mut impl Hasher) -> usize {
    match v {
        Value::Null => 0u8.hash(hasher),
        Value::Bool(b) => (1u8, b).hash(hasher),
        Value::Number(n) => {
            let f = n.as_f64().unwrap_or_default();
            (2u8, if f == 0.0 { 0 } else { f.to_bits() }).hash(hasher);
        }
        Value::String(t) => (3u8, t).hash(hasher),
        Value::Array(items) => {
            (4u8, items.len()).hash(hasher);
            return 1 + items.iter().map(|i| fingerprint(i, hasher)).sum::<usize>();
        }
        Value::Object(members) => {
            // Order-independent: the members' own hashes are summed.
            let mut sum = 0u64;
            let mut visited = 1;
            for (k, v) in members {
                let mut member = std::hash::DefaultHasher::new();
                k.hash(&mut member);
                visited += fingerprint(v, &mut member);
                sum = sum.wrapping_add(member.finish());
            }
            (5u8, members.len(), sum).hash(hasher);
            return visited;
        }
    }
    1
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

/// `multipleOf`, exact on both numbers' shortest decimal forms (`0.0075` is a multiple of
/// `0.0001`, though not in `f64` division). A divisor that is not positive is absent.
fn multiple(s: &Obj, n: &Number) -> Option<String> {
    let divisor = keyword(s, "multipleOf")?.as_number()?;
    if divisor.as_f64().is_none_or(|d| d <= 0.0) {
        return None;
    }
    let ok = match (decimal(n), decimal(divisor)) {
        (Some(x), Some(m)) => divides(m, x),
        // Not reached for serde_json's numbers; kept so that nothing here can panic.
        _ => n.as_f64().zip(divisor.as_f64()).is_some_and(|(x, m)| {
            let q = x / m;
            q.is_finite() && q.fract() == 0.0
        }),
    };
    (!ok).then(|| format!("must be a multiple of {divisor} (got {n})"))
}

/// `|n|` as `(digits, exponent)` with `|n| = digits × 10^exponent` and no trailing zero
/// in `digits` (unless zero), read from `n`'s shortest decimal form.
fn decimal(n: &Number) -> Option<(u128, i64)> {
    let text = n.to_string();
    let text = text.strip_prefix('-').unwrap_or(&text);
    let (mantissa, exp) = match text.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i64>().ok()?),
        None => (text, 0),
    };
    let (whole, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut digits: u128 = 0;
    for c in whole.chars().chain(frac.chars()) {
        let d = u128::from(c.to_digit(10)?);
        digits = digits.checked_mul(10)?.checked_add(d)?;
    }
    let mut exp = exp.checked_sub(i64::try_from(frac.len()).ok()?)?;
    while digits != 0 && digits.is_multiple_of(10) {
        digits /= 10;
        exp += 1;
    }
    Some((digits, exp))
}

/// Whether `x` is an integer multiple of `m` (both from [`decimal`], `m` not zero).
fn divides((m, p): (u128, i64), (x, q): (u128, i64)) -> bool {
    if x == 0 {
        return true;
    }
    if m == 0 || m > u128::from(u64::MAX) {
        return false;
    }
    if q >= p {
        // x / m = (x · 10^(q-p)) / m: an integer when m divides x · 10^(q-p).
        let shift = u64::try_from(q - p).unwrap_or(u64::MAX);
        ((x % m) * pow10_mod(shift, m)).is_multiple_of(m)
    } else {
        // x / m = x / (m · 10^(p-q)); x has no trailing zero, so a divisor with one fails.
        let shift = u32::try_from(p - q).unwrap_or(u32::MAX);
        10u128
            .checked_pow(shift)
            .and_then(|t| t.checked_mul(m))
            .is_some_and(|d| x.is_multiple_of(d))
    }
}

/// `10^e mod m` for `0 < m <= u64::MAX` (so products of residues fit in `u128`).
fn pow10_mod(mut e: u64, m: u128) -> u128 {
    let (mut result, mut base) = (1 % m, 10 % m);
    while e > 0 {
        if e & 1 == 1 {
            result = result * base % m;
        }
        base = base * base % m;
        e >>= 1;
    }
    result
}

/// `min…`/`max…` (`names`) against a length counted in `nouns` (singular, plural).
pub(super) fn sized(
    s: &Obj,
    names: (&str, &str),
    len: usize,
    nouns: (&str, &str),
) -> Option<String> {
    let limit = |key: &str| keyword(s, key).and_then(Value::as_u64);
    let len = u64::try_from(len).unwrap_or(u64::MAX);
    if let Some(min) = limit(names.0).filter(|&m| len < m) {
        let min = plural(min, nouns);
        return Some(format!("must have at least {min} (got {len})"));
    }
    let max = plural(limit(names.1).filter(|&m| len > m)?, nouns);
    Some(format!("must have at most {max} (got {len})"))
}

/// Exact for two integers (any mix of i64/u64), via f64 otherwise.
pub(super) fn compare(a: &Number, b: &Number) -> Option<Ordering> {
    match (a.as_i128(), b.as_i128()) {
        (Some(x), Some(y)) => Some(x.cmp(&y)),
        _ => a.as_f64()?.partial_cmp(&b.as_f64()?),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::run;

    /// `enum`, `const`, the number and string keywords.
    const ENUM_NUMBER_STRING_KEYWORDS: &str = r##"
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
{"multipleOf":2} | 10 | ok
{"multipleOf":2} | -8 | ok
{"multipleOf":2} | 7 | must be a multiple of 2 (got 7)
{"multipleOf":2} | "7" | ok
{"multipleOf":1.5} | 4.5 | ok
{"multipleOf":1.5} | 0 | ok
{"multipleOf":1.5} | 35 | must be a multiple of 1.5 (got 35)
{"multipleOf":0.0001} | 0.0075 | ok
{"multipleOf":0.0001} | 0.00751 | must be a multiple of 0.0001 (got 0.00751)
{"multipleOf":0.01} | 19.99 | ok
{"multipleOf":1e-8} | 12391239123 | ok
{"type":"integer","multipleOf":0.123456789} | 1e308 | must be a multiple of 0.123456789 (got 1e+308)
{"multipleOf":100} | 1e300 | ok
{"multipleOf":3} | 18446744073709551615 | ok
{"multipleOf":18446744073709551615} | 18446744073709551614 | must be a multiple of 18446744073709551615 (got 18446744073709551614)
{"multipleOf":0} | 7 | ok
{"minLength":2,"maxLength":3} | "hé🎉" | ok
{"minLength":2,"maxLength":3} | "é" | must have at least 2 characters (got 1)
{"minLength":2,"maxLength":3} | "🎉🎉🎉🎉" | must have at most 3 characters (got 4)
{"minLength":1} | "" | must have at least 1 character (got 0)
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

    /// The array and object assertions.
    const ARRAY_AND_OBJECT_ASSERTIONS: &str = r##"
{"minItems":1,"maxItems":2} | ["a","b"] | ok
{"minItems":1,"maxItems":2} | [] | must have at least 1 item (got 0)
{"minItems":1,"maxItems":2} | ["a","b","c"] | must have at most 2 items (got 3)
{"uniqueItems":true} | [1,"1",[1],{"a":1},{"a":"1"},null,false,0] | ok
{"uniqueItems":true} | [1,2,1.0] | must have unique items (item 2 repeats item 0)
{"uniqueItems":true} | [{"a":1,"b":[2]},{"b":[2.0],"a":1}] | must have unique items (item 1 repeats item 0)
{"uniqueItems":true} | [0,-0.0] | must have unique items (item 1 repeats item 0)
{"uniqueItems":true} | [9007199254740993,9007199254740992] | ok
{"uniqueItems":true} | [[1,2],[2,1],{"a":[1]},{"a":[1,1]}] | ok
{"uniqueItems":false} | [1,1] | ok
{"uniqueItems":true} | "not an array" | ok
{"minProperties":1,"maxProperties":2} | {"a":1} | ok
{"minProperties":1,"maxProperties":2} | {} | must have at least 1 property (got 0)
{"minProperties":1,"maxProperties":2} | {"a":1,"b":2,"c":3} | must have at most 2 properties (got 3)
{"maxProperties":0} | [1] | ok
{"dependentRequired":{"card":["billing","cvc"]}} | {"card":1,"billing":2,"cvc":3} | ok
{"dependentRequired":{"card":["billing","cvc"]}} | {"billing":2} | ok
{"dependentRequired":{"card":["billing","cvc"]}} | {"card":1,"billing":2} | missing property 'cvc', required when 'card' is present
{"required":["a"],"dependentRequired":{"a":["b"]}} | {"b":1} | missing required property 'a'
"##;

    #[test]
    fn enum_number_string_keywords() {
        run(ENUM_NUMBER_STRING_KEYWORDS);
    }

    #[test]
    fn array_and_object_assertions() {
        run(ARRAY_AND_OBJECT_ASSERTIONS);
    }
}
