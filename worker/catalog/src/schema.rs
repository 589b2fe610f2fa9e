//! The `input_schema` of a catalog tool, checked before the tool is offered.
//!
//! Two checks: the shape the gateway needs (a root object schema with well-formed
//! `properties` and `required`), and that the gateway's validator enforces every keyword
//! (`mcp_tasks_shared::schema::unenforced`, whose module docs list what it enforces). A
//! `[[command]]` or `[[http]]` entry failing either is a catalog mistake. An `[[upstream]]`
//! tool must have the shape; a keyword we do not enforce only gets a warning
//! (`upstream.rs`), since that schema is the upstream server's and it validates its own input.

use mcp_tasks_shared::schema::{Unenforced, unenforced};
use serde_json::{Value, json};

/// Why an input schema is refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SchemaError {
    /// Not a JSON object.
    #[error("expected a table (a JSON Schema object)")]
    NotATable,
    /// The root is not `type = "object"`.
    #[error("the root must have type = \"object\"")]
    RootNotObject,
    /// `properties` is not an object of objects.
    #[error("properties must be a table of schema tables")]
    Properties,
    /// `required` is not a list of strings.
    #[error("required must be a list of property names")]
    Required,
    /// A keyword the gateway's validator would not enforce.
    #[error(transparent)]
    Unenforced(#[from] Unenforced),
}

/// The schema has the shape the gateway can use and every keyword is enforced.
pub(crate) fn check_schema(schema: &Value) -> Result<(), SchemaError> {
    check_shape(schema)?;
    unenforced(schema)?;
    Ok(())
}

/// The shape alone: an object schema with well-formed `properties` and `required`.
pub(crate) fn check_shape(schema: &Value) -> Result<(), SchemaError> {
    let obj = schema.as_object().ok_or(SchemaError::NotATable)?;
    if obj.get("type") != Some(&json!("object")) {
        return Err(SchemaError::RootNotObject);
    }
    if let Some(p) = obj.get("properties")
        && !p
            .as_object()
            .is_some_and(|m| m.values().all(Value::is_object))
    {
        return Err(SchemaError::Properties);
    }
    if let Some(r) = obj.get("required")
        && !r.as_array().is_some_and(|a| a.iter().all(Value::is_string))
    {
        return Err(SchemaError::Required);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;

    use mcp_tasks_shared::config::WorkerConfig;

    use super::*;

    /// The catalog `text`'s load error, as the worker prints it.
    fn load_error(text: &str) -> String {
        let env: HashMap<&str, &str> = HashMap::from([("MCPT_QUEUES", "default")]);
        let config = WorkerConfig::from_source(&env).expect("config");
        match crate::parse("t.toml", Path::new("."), text, &config, &[]) {
            Ok(_) => panic!("accepted: {text}"),
            Err(e) => e.to_string(),
        }
    }

    /// A keyword the gateway would not enforce stops the catalog at load, named with its
    /// place in the schema; so does a typo and a pattern the regex engine cannot compile.
    #[test]
    fn an_unenforced_keyword_fails_the_load_naming_it() {
        let cases = [
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\ninput_schema = { type = \"object\", properties = { tags = { type = \"array\", unevaluatedItems = false } } }\n",
                "MCPT_TOOLS_FILE=t.toml: [[command]] #1 (\"a\"): field input_schema: keyword \"unevaluatedItems\" at /properties/tags is not enforced by mcp-tasks' validator; remove it or use \"items\"",
            ),
            (
                "[[command]]\nname = \"a\"\nargv = [\"x\"]\ninput_schema = { type = \"object\", properties = { text = { type = \"string\" } }, requried = [\"text\"] }\n",
                "MCPT_TOOLS_FILE=t.toml: [[command]] #1 (\"a\"): field input_schema: keyword \"requried\" at the root is not enforced by mcp-tasks' validator (it knows no such keyword; did you mean \"required\"?); correct or remove it",
            ),
            (
                "[[http]]\nname = \"h\"\nurl = \"https://example.com/x\"\ninput_schema = { type = \"object\", properties = { id = { type = \"string\", pattern = \"^(?!tmp)\" } } }\n",
                "MCPT_TOOLS_FILE=t.toml: [[http]] #1 (\"h\"): field input_schema: keyword \"pattern\" at /properties/id is not enforced by mcp-tasks' validator: the pattern \"^(?!tmp)\" cannot be compiled by its linear-time regex engine (look-around, including look-ahead and look-behind, is not supported)",
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(load_error(text), expected, "catalog: {text}");
        }
    }

    /// The shape is checked first, with its own messages.
    #[test]
    fn the_shape_comes_before_the_keywords() {
        let root = check_schema(&json!({"type": "array", "bogus": 1})).expect_err("array root");
        assert_eq!(root.to_string(), "the root must have type = \"object\"");
        let props = check_schema(&json!({"type": "object", "properties": {"a": 1}}));
        assert_eq!(
            props.expect_err("a = 1").to_string(),
            "properties must be a table of schema tables"
        );
        assert!(check_shape(&json!({"type": "object", "nullable": true})).is_ok());
    }

    /// Every built-in tool's schema is enforced (the worker refuses one that is not).
    #[test]
    fn the_builtin_tools_schemas_are_enforced() {
        let packs = ["demo".to_owned(), "conformance".to_owned()];
        let tools = mcp_tasks_worker::tools::packs(&packs);
        assert!(tools.len() > 2);
        for tool in tools {
            let spec = tool.spec();
            assert_eq!(
                unenforced(&spec.tool.input_schema),
                Ok(()),
                "{}",
                spec.tool.name
            );
        }
    }

    /// Every `input_schema` of the example catalogs under deploy/ is enforced.
    #[test]
    fn the_example_catalogs_schemas_are_enforced() {
        let examples = [
            include_str!("../../../deploy/examples/build-tools.toml"),
            include_str!("../../../deploy/examples/http-tools.toml"),
            include_str!("../../../deploy/examples/upstream-everything.toml"),
        ];
        for text in examples {
            let table: toml::Table = text.parse().expect("example TOML");
            let entries = table.values().filter_map(toml::Value::as_array).flatten();
            for schema in entries.filter_map(|e| e.get("input_schema")) {
                let schema = serde_json::to_value(schema).expect("JSON");
                assert!(check_schema(&schema).is_ok(), "{schema}");
            }
        }
    }
}
