//! The keywords that apply subschemas: to items (`prefixItems`, `items`, `contains`), to
//! members and their names (`properties`, `patternProperties`, `additionalProperties`,
//! `propertyNames`), and to the instance itself (`allOf`, `anyOf`, `oneOf`, `not`,
//! `if`/`then`/`else`, `dependentSchemas`). Every subschema visit goes through
//! [`Validator::check`], which charges it to the depth and work bounds.

use serde_json::Value;

use super::assertions::ITEMS;
use super::text::{CLIP, REASONS, clip, plural, reasons, unexpected, with_pattern};
use super::{Fail, Loc, Obj, Step, Validator, Violation, keyword, schema_list, subschema};

impl<'s> Validator<'s> {
    /// The applicators to an array's items or an object's members.
    pub(super) fn children(&mut self, s: &'s Obj, inst: &Value, loc: &Loc, depth: usize) -> Step {
        match inst {
            Value::Array(items) => {
                self.items(s, items, loc, depth)?;
                self.contains(s, items, loc, depth)
            }
            Value::Object(obj) => self.members(s, obj, loc, depth),
            _ => Ok(()),
        }
    }

    /// `prefixItems` for the first items, `items` for the rest.
    fn items(&mut self, s: &'s Obj, items: &[Value], loc: &Loc, depth: usize) -> Step {
        let prefix = schema_list(s, "prefixItems");
        let rest = subschema(s, "items");
        for (i, item) in items.iter().enumerate() {
            let Some(sub) = prefix.get(i).or(rest) else {
                break;
            };
            self.check(sub, item, &Loc::Index(loc, i), depth)?;
        }
        Ok(())
    }

    /// `contains`, counted against `minContains` (default 1) and `maxContains`.
    fn contains(&mut self, s: &'s Obj, items: &[Value], loc: &Loc, depth: usize) -> Step {
        let Some(sub) = subschema(s, "contains") else {
            return Ok(());
        };
        let count = |key: &str| keyword(s, key).and_then(Value::as_u64);
        let (min, max) = (count("minContains").unwrap_or(1), count("maxContains"));
        let mut matched = 0u64;
        for (i, item) in items.iter().enumerate() {
            if matched >= min && max.is_none() {
                break;
            }
            if self.probe(sub, item, &Loc::Index(loc, i), depth)?.is_none() {
                matched += 1;
            }
        }
        let bound = if matched < min {
            format!("at least {}", plural(min, ITEMS))
        } else if let Some(max) = max.filter(|&m| matched > m) {
            format!("at most {}", plural(max, ITEMS))
        } else {
            return Ok(());
        };
        let message =
            format!("must contain {bound} matching the schema given in 'contains' (got {matched})");
        Err(self.fail(loc, message))
    }

    /// `propertyNames`, then for each member `properties` and `patternProperties`, and
    /// `additionalProperties` for a member matched by neither.
    fn members(&mut self, s: &'s Obj, obj: &Obj, loc: &Loc, depth: usize) -> Step {
        let props = keyword(s, "properties").and_then(Value::as_object);
        let patterns = keyword(s, "patternProperties").and_then(Value::as_object);
        let patterns = patterns.filter(|p| !p.is_empty());
        let extra = subschema(s, "additionalProperties");
        let names = subschema(s, "propertyNames");
        if props.is_none() && patterns.is_none() && extra.is_none() && names.is_none() {
            return Ok(());
        }
        self.tick(obj.len())?;
        for (key, value) in obj {
            if let Some(names) = names {
                self.name(names, key, loc, depth)?;
            }
            let here = Loc::Key(loc, key);
            let declared = props.and_then(|p| p.get(key));
            if let Some(sub) = declared {
                self.check(sub, value, &here, depth)?;
            }
            let matched = self.patterned(patterns, key, value, &here, depth)?;
            match extra {
                _ if declared.is_some() || matched => {}
                Some(Value::Bool(false)) => {
                    return Err(self.fail(loc, unexpected(key, props, patterns)));
                }
                Some(sub) => self.check(sub, value, &here, depth)?,
                None => {}
            }
        }
        Ok(())
    }

    /// `key` against `propertyNames`; the failure is the object's.
    fn name(&mut self, names: &'s Value, key: &str, loc: &Loc, depth: usize) -> Step {
        self.tick(key.len() / 1024)?;
        let Some(why) = self.probe(names, &Value::String(key.to_owned()), loc, depth)? else {
            return Ok(());
        };
        let message = format!(
            "invalid property name '{}': {}",
            clip(key, CLIP),
            why.message
        );
        Err(self.fail(loc, message))
    }

    /// Checks `value` against each `patternProperties` schema whose pattern matches `key`;
    /// whether any matched. A pattern that does not compile matches nothing.
    fn patterned(
        &mut self,
        patterns: Option<&'s Obj>,
        key: &str,
        value: &Value,
        here: &Loc,
        depth: usize,
    ) -> Result<bool, Fail> {
        let mut matched = false;
        for (pattern, sub) in patterns.into_iter().flatten() {
            self.tick(1 + (key.len() + pattern.len()) / 1024)?;
            if with_pattern(pattern, |re| re.is_match(key)) == Some(true) {
                matched = true;
                self.check(sub, value, here, depth)?;
            }
        }
        Ok(matched)
    }

    /// `allOf`, `anyOf`, `oneOf`, `not`, `if`/`then`/`else` and `dependentSchemas`.
    pub(super) fn logic(&mut self, s: &'s Obj, inst: &Value, loc: &Loc, depth: usize) -> Step {
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
            let n = || plural(alternatives.len() as u64, ("alternative", "alternatives"));
            let message = match hits.as_slice() {
                [] if !failed.is_empty() => {
                    let why = reasons(&failed, loc);
                    format!("must match {want} one of {} ({why})", n())
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
        self.dependent(s, inst, loc, depth)
    }

    /// `dependentSchemas`: the object matches the schema of each member it has.
    fn dependent(&mut self, s: &'s Obj, inst: &Value, loc: &Loc, depth: usize) -> Step {
        let (Some(Value::Object(dependent)), Value::Object(obj)) =
            (keyword(s, "dependentSchemas"), inst)
        else {
            return Ok(());
        };
        self.tick(dependent.len())?;
        for (present, sub) in dependent.iter().filter(|(k, _)| obj.contains_key(*k)) {
            if let Some(v) = self.probe(sub, inst, loc, depth)? {
                let message = format!(
                    "{} (applies when '{}' is present)",
                    v.message,
                    clip(present, CLIP)
                );
                return Err(Fail::Invalid(Violation { message, ..v }));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::run;

    /// `items`, `prefixItems`, `contains`, `minContains`, `maxContains`.
    const ARRAY_APPLICATORS: &str = r##"
{"properties":{"l":{"items":{"type":"string"}}}} | {"l":["a","b"]} | ok
{"properties":{"l":{"items":{"type":"string"}}}} | {"l":["a",2]} | /l/1: must be a string (got 2)
{"prefixItems":[{"type":"string"}],"items":{"type":"integer"}} | ["a",1,2] | ok
{"prefixItems":[{"type":"string"}],"items":{"type":"integer"}} | [1] | /0: must be a string (got 1)
{"prefixItems":[{"type":"string"}],"items":{"type":"integer"}} | ["a",1,"b"] | /2: must be an integer (got "b")
{"prefixItems":[{"type":"string"},{"type":"boolean"}]} | ["a"] | ok
{"prefixItems":[{"type":"string"},{"type":"boolean"}]} | ["a",true,"anything",3] | ok
{"prefixItems":[{"type":"string"},{"type":"boolean"}]} | ["a",1] | /1: must be a boolean (got 1)
{"prefixItems":[{}],"items":false} | [1] | ok
{"prefixItems":[{}],"items":false} | [1,2] | /1: not allowed by the schema
{"contains":{"type":"integer"}} | ["a",1] | ok
{"contains":{"type":"integer"}} | ["a","b"] | must contain at least 1 item matching the schema given in 'contains' (got 0)
{"contains":{"type":"integer"}} | [] | must contain at least 1 item matching the schema given in 'contains' (got 0)
{"contains":{"type":"integer"}} | {"not":"an array"} | ok
{"contains":{"type":"integer"},"minContains":2,"maxContains":3} | [1,"a",2] | ok
{"contains":{"type":"integer"},"minContains":2,"maxContains":3} | [1,"a"] | must contain at least 2 items matching the schema given in 'contains' (got 1)
{"contains":{"type":"integer"},"minContains":2,"maxContains":3} | [1,2,3,4] | must contain at most 3 items matching the schema given in 'contains' (got 4)
{"contains":{"type":"integer"},"minContains":0} | [] | ok
{"contains":{"type":"integer"},"minContains":0,"maxContains":0} | [1] | must contain at most 0 items matching the schema given in 'contains' (got 1)
"##;

    /// `properties`, `patternProperties`, `additionalProperties`, `propertyNames`,
    /// `dependentSchemas`.
    const OBJECT_APPLICATORS: &str = r##"
{"properties":{"a":{},"b":{}},"additionalProperties":false} | {"b":1} | ok
{"properties":{"a":{},"b":{}},"additionalProperties":false} | {"a":1,"zz":2} | unexpected property 'zz'; allowed: 'a', 'b'
{"additionalProperties":false} | {"q":1} | unexpected property 'q' (no additional properties are allowed)
{"properties":{"a":{}},"additionalProperties":{"type":"integer"}} | {"a":"s","n":3} | ok
{"properties":{"a":{}},"additionalProperties":{"type":"integer"}} | {"n":"3"} | /n: must be an integer (got "3")
{"patternProperties":{"^x-":{"type":"string"}}} | {"x-a":"s","other":1} | ok
{"patternProperties":{"^x-":{"type":"string"}}} | {"x-a":1} | /x-a: must be a string (got 1)
{"patternProperties":{"a":{"type":"string"},"b":{"minLength":2}}} | {"ab":"x"} | /ab: must have at least 2 characters (got 1)
{"properties":{"xa":{"type":"string"}},"patternProperties":{"^x":{"minLength":2}}} | {"xa":"a"} | /xa: must have at least 2 characters (got 1)
{"additionalProperties":false,"patternProperties":{"^x":{}}} | {"x1":1} | ok
{"properties":{"a":{}},"additionalProperties":false,"patternProperties":{"^x":{}}} | {"a":1,"y":1} | unexpected property 'y'; allowed: 'a', names matching "^x"
{"patternProperties":{"^x":{}},"additionalProperties":{"type":"integer"}} | {"x1":"s","n":1} | ok
{"patternProperties":{"^x":{}},"additionalProperties":{"type":"integer"}} | {"n":"s"} | /n: must be an integer (got "s")
{"patternProperties":{"(?<=a)b":{"type":"string"}},"additionalProperties":{"type":"integer"}} | {"ab":1} | ok
{"propertyNames":{"pattern":"^[a-z]+$"}} | {"abc":1} | ok
{"propertyNames":{"pattern":"^[a-z]+$"}} | {"abc":1,"Abc":2} | invalid property name 'Abc': must match the pattern "^[a-z]+$" (got "Abc")
{"propertyNames":{"maxLength":2}} | {"abc":1} | invalid property name 'abc': must have at most 2 characters (got 3)
{"propertyNames":false} | {} | ok
{"propertyNames":false} | {"a":1} | invalid property name 'a': not allowed by the schema
{"propertyNames":{"maxLength":1}} | ["not an object"] | ok
{"dependentSchemas":{"card":{"required":["billing"]}}} | {"card":1,"billing":1} | ok
{"dependentSchemas":{"card":{"required":["billing"]}}} | {"billing":1} | ok
{"dependentSchemas":{"card":{"required":["billing"]}}} | {"card":1} | missing required property 'billing' (applies when 'card' is present)
{"dependentSchemas":{"card":{"properties":{"n":{"type":"string"}}}}} | {"card":1,"n":2} | /n: must be a string (got 2) (applies when 'card' is present)
"##;

    #[test]
    fn array_applicators() {
        run(ARRAY_APPLICATORS);
    }

    #[test]
    fn object_applicators() {
        run(OBJECT_APPLICATORS);
    }
}
