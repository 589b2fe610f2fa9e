//! How a tool's `CallToolResult` is printed: the result on stdout, a tool error's text on
//! stderr with exit code 1. Getting the result is `tasks.rs`'s.

use serde_json::Value;

use super::Fail;
use super::tasks::INVALID_ARGUMENTS;

/// The printable form of a `CallToolResult`: `structuredContent` as JSON when present,
/// else its content blocks (text as is, others as a one-line summary).
fn render(result: &Value) -> String {
    if let Some(s) = result.get("structuredContent").filter(|s| !s.is_null()) {
        return serde_json::to_string_pretty(s).unwrap_or_default();
    }
    let blocks = result["content"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    blocks
        .iter()
        .map(|b| match b["type"].as_str().unwrap_or("") {
            "text" => b["text"].as_str().unwrap_or("").to_owned(),
            "image" | "audio" => format!(
                "[{} {}, {} bytes of base64]",
                b["type"].as_str().unwrap_or(""),
                b["mimeType"].as_str().unwrap_or("?"),
                b["data"].as_str().map_or(0, str::len)
            ),
            "resource_link" => format!("[link {}]", b["uri"].as_str().unwrap_or("?")),
            "resource" => b["resource"]["text"].as_str().map_or_else(
                || format!("[resource {}]", b["resource"]["uri"]),
                str::to_owned,
            ),
            other => format!("[{other} content]"),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Print a final `CallToolResult`; `isError` results go to stderr and exit 1.
pub(super) fn finish_result(result: &Value) -> Result<(), Fail> {
    let text = render(result);
    if result["isError"] == true {
        // A schema violation is the caller's mistake, not the tool's: no task was made.
        if let Some(why) = text
            .strip_prefix(INVALID_ARGUMENTS)
            .and_then(|rest| rest.split_once(": "))
            .map(|(_, why)| why)
        {
            return Err(Fail::runtime(format!("invalid arguments: {why}")));
        }
        return Err(Fail::line(1, format!("tool error: {text}")));
    }
    if !text.is_empty() {
        println!("{text}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn results_print_structured_content_first() {
        let r = json!({"content": [{"type": "text", "text": "hi"}], "structuredContent": {"a": 1}});
        assert_eq!(render(&r), "{\n  \"a\": 1\n}");
        let r = json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]});
        assert_eq!(render(&r), "a\nb");
    }
}
