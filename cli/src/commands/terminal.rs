//! The terminal side of `call`: lines typed by the user (read on a thread, so Ctrl-C stays
//! responsive) and input requests asked there, field by field, from their JSON Schema.

use std::io::{BufRead as _, IsTerminal as _, Write as _};

use serde_json::{Map, Value, json};

use std::collections::HashSet;

use super::Fail;

/// Lines typed by the user, read on a thread so that Ctrl-C stays responsive.
#[derive(Default)]
pub(crate) struct Terminal {
    rx: Option<tokio::sync::mpsc::UnboundedReceiver<String>>,
    eof: bool,
}

impl Terminal {
    /// Show `prompt` on stderr and read one line; `None` at end of input.
    async fn ask(&mut self, prompt: &str) -> Option<String> {
        if self.eof {
            return None;
        }
        eprint!("{prompt}");
        let _ = std::io::stderr().flush();
        let rx = self.rx.get_or_insert_with(|| {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            std::thread::spawn(move || {
                for line in std::io::stdin().lock().lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
            rx
        });
        match rx.recv().await {
            Some(line) => {
                let line = line.trim_end_matches('\r').to_owned();
                if !std::io::stdin().is_terminal() {
                    // Show piped answers as if typed, so the transcript reads well.
                    eprintln!("{line}");
                }
                Some(line)
            }
            None => {
                self.eof = true;
                eprintln!();
                None
            }
        }
    }
}

/// Answer every request in `requests` whose key is not in `answered` (which then holds it).
pub(super) async fn answer_requests(
    requests: &Value,
    answered: &mut HashSet<String>,
    term: &mut Terminal,
) -> Result<Map<String, Value>, Fail> {
    let mut answers = Map::new();
    let Some(requests) = requests.as_object() else {
        return Ok(answers);
    };
    for (key, request) in requests {
        if answered.contains(key) {
            continue;
        }
        let method = request["method"].as_str().unwrap_or("");
        let answer = match method {
            "elicitation/create" => elicit(&request["params"], term).await,
            other => {
                return Err(Fail::runtime(format!(
                    "the server asks for {other:?} (input {key}), which this command cannot answer"
                )));
            }
        };
        answered.insert(key.clone());
        answers.insert(key.clone(), answer);
    }
    Ok(answers)
}

/// One elicitation on the terminal: the message, then one prompt per property. End of
/// input answers `cancel`.
pub(super) async fn elicit(params: &Value, term: &mut Terminal) -> Value {
    let message = params["message"]
        .as_str()
        .unwrap_or("The server asks for input");
    eprintln!("? {message}");
    if params["mode"] == "url" {
        let url = params["url"].as_str().unwrap_or("");
        eprintln!("  open {url}");
        return match term.ask("  press Enter when done: ").await {
            Some(_) => json!({"action": "accept"}),
            None => json!({"action": "cancel"}),
        };
    }
    let schema = &params["requestedSchema"];
    let required: HashSet<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut content = Map::new();
    if let Some(props) = schema["properties"].as_object() {
        for (name, prop) in props {
            let prompt = prompt_for(name, prop);
            loop {
                let Some(line) = term.ask(&prompt).await else {
                    return json!({"action": "cancel"});
                };
                let line = line.trim();
                if line.is_empty() {
                    if let Some(d) = prop.get("default") {
                        content.insert(name.clone(), d.clone());
                        break;
                    }
                    if !required.contains(name.as_str()) {
                        break;
                    }
                    eprintln!("  {name} is required");
                    continue;
                }
                match parse_value(prop, line) {
                    Ok(v) => {
                        content.insert(name.clone(), v);
                        break;
                    }
                    Err(why) => eprintln!("  {why}"),
                }
            }
        }
    }
    json!({"action": "accept", "content": content})
}

/// The allowed values of a property: `enum`, or the `const`s of `oneOf`/`anyOf`.
pub(super) fn choices(prop: &Value) -> Option<Vec<String>> {
    let show = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_owned);
    if let Some(e) = prop["enum"].as_array() {
        return Some(e.iter().map(show).collect());
    }
    let alts = prop["oneOf"].as_array().or(prop["anyOf"].as_array())?;
    Some(
        alts.iter()
            .filter_map(|a| a.get("const"))
            .map(show)
            .collect(),
    )
}

/// `name (type): `, with choices, description and default when the schema has them.
pub(super) fn prompt_for(name: &str, prop: &Value) -> String {
    let mut ty = prop["type"].as_str().unwrap_or("string").to_owned();
    if ty == "array" {
        ty = "comma-separated list".into();
        if let Some(c) = choices(&prop["items"]) {
            ty = format!("{ty} of {}", c.join("|"));
        }
    } else if let Some(c) = choices(prop) {
        ty = format!("{ty}, one of {}", c.join("|"));
    }
    if let Some(d) = prop.get("default") {
        ty = format!("{ty}, default {d}");
    }
    let mut prompt = format!("{name} ({ty}): ");
    if let Some(desc) = prop["description"].as_str().or(prop["title"].as_str()) {
        prompt = format!("  {desc}\n{prompt}");
    }
    prompt
}

/// Turn a typed line into the JSON value the property's type asks for.
pub(super) fn parse_value(prop: &Value, line: &str) -> Result<Value, String> {
    let ty = prop["type"].as_str().unwrap_or("string");
    let value = match ty {
        "integer" => line
            .parse::<i64>()
            .map(Value::from)
            .map_err(|_| format!("{line:?} is not an integer"))?,
        "number" => line
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| format!("{line:?} is not a number"))?,
        "boolean" => match line.to_ascii_lowercase().as_str() {
            "y" | "yes" | "true" | "1" => Value::Bool(true),
            "n" | "no" | "false" | "0" => Value::Bool(false),
            _ => return Err(format!("{line:?}: answer yes or no")),
        },
        "array" => {
            let items: Vec<Value> = line
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.to_owned()))
                .collect();
            if let Some(c) = choices(&prop["items"])
                && let Some(bad) = items
                    .iter()
                    .find(|i| !c.iter().any(|c| i.as_str() == Some(c)))
            {
                return Err(format!("{bad} is not one of {}", c.join("|")));
            }
            Value::Array(items)
        }
        _ => Value::String(line.to_owned()),
    };
    if ty != "array"
        && let Some(c) = choices(prop)
    {
        let shown = value
            .as_str()
            .map_or_else(|| value.to_string(), str::to_owned);
        if !c.contains(&shown) {
            return Err(format!("{line:?} is not one of {}", c.join("|")));
        }
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_answers() {
        let int = json!({"type": "integer"});
        assert_eq!(parse_value(&int, "42"), Ok(json!(42)));
        assert!(parse_value(&int, "4.2").is_err());
        assert_eq!(
            parse_value(&json!({"type": "number"}), "4.5"),
            Ok(json!(4.5))
        );
        assert_eq!(
            parse_value(&json!({"type": "boolean"}), "Yes"),
            Ok(json!(true))
        );
        assert_eq!(
            parse_value(&json!({"type": "string"}), "blue"),
            Ok(json!("blue"))
        );
        let colour = json!({"type": "string", "enum": ["red", "blue"]});
        assert_eq!(parse_value(&colour, "blue"), Ok(json!("blue")));
        assert!(parse_value(&colour, "green").is_err());
        let tags = json!({"type": "array", "items": {"type": "string"}});
        assert_eq!(parse_value(&tags, "a, b,"), Ok(json!(["a", "b"])));
        assert_eq!(
            prompt_for("answer", &json!({"type": "string"})),
            "answer (string): "
        );
    }
}
