//! The product code stays readable in pieces: no file under `gateway/`, `console/`,
//! `worker/`, `shared/` or `cli/` (skipping `target` and `fuzz` directories) holds more than
//! 500 lines before its test module, and no function in them is longer than 100
//! lines from its `fn` line to its closing brace (as rustfmt lays it out).

use std::fs;

use mcp_tasks_tests::{product_rust_files, repo_root};

/// The most lines a file may have before its tests.
const MAX_FILE_LINES: usize = 500;

/// The most lines a function may have.
const MAX_FN_LINES: usize = 100;

/// The lines of `text` before its test module: the first `#[cfg(test)]` at the start of
/// a line that is followed by a `mod` (a `#[cfg(test)] use` earlier does not end the count).
fn product_lines(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    let end = lines
        .windows(2)
        .position(|w| w[0].starts_with("#[cfg(test)]") && w[1].starts_with("mod "))
        .unwrap_or(lines.len());
    lines[..end].to_vec()
}

/// The indentation and name of a function item starting on `line`, if one does.
fn fn_start(line: &str) -> Option<(&str, &str)> {
    let body = line.trim_start();
    let indent = &line[..line.len() - body.len()];
    let mut rest = body;
    if let Some(r) = rest.strip_prefix("pub") {
        rest = match r.strip_prefix('(') {
            Some(r) => r.split_once(')')?.1,
            None => r,
        }
        .trim_start();
    }
    for qualifier in ["async ", "const ", "unsafe "] {
        rest = rest.strip_prefix(qualifier).unwrap_or(rest).trim_start();
    }
    let name = rest.strip_prefix("fn ")?;
    let end = name
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(name.len());
    (end > 0).then_some((indent, &name[..end]))
}

/// Each function in `lines` longer than `max`, as (first line number, name, length).
fn long_functions(lines: &[&str], max: usize) -> Vec<(usize, String, usize)> {
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some((indent, name)) = fn_start(line) else {
            continue;
        };
        // The signature ends on the `fn` line or on a line at the same indentation
        // (`) -> T {`, `{` after a where clause); a `;` there is a declaration.
        let Some(open) = (i..lines.len()).find(|&j| {
            let l = lines[j].trim_end();
            (j == i || lines[j].starts_with(indent) && !lines[j][indent.len()..].starts_with(' '))
                && (l.ends_with('{') || l.ends_with(';') || l.ends_with('}'))
        }) else {
            continue;
        };
        if lines[open].trim_end().ends_with(';') {
            continue;
        }
        let close = if lines[open].trim_end().ends_with('}') {
            Some(open)
        } else {
            let closing = format!("{indent}}}");
            (open + 1..lines.len()).find(|&j| lines[j].trim_end() == closing)
        };
        if let Some(close) = close
            && close - i + 1 > max
        {
            found.push((i + 1, name.to_owned(), close - i + 1));
        }
    }
    found
}

#[test]
fn no_product_file_or_function_is_too_long() -> anyhow::Result<()> {
    let root = repo_root();
    let files = product_rust_files()?;
    assert!(files.len() > 50, "found only {} product files", files.len());
    let mut over = Vec::new();
    for path in &files {
        let text = fs::read_to_string(path)?;
        let lines = product_lines(&text);
        let shown = path.strip_prefix(&root).unwrap_or(path).display();
        if lines.len() > MAX_FILE_LINES {
            over.push(format!(
                "{shown}: {} lines before its tests (at most {MAX_FILE_LINES})",
                lines.len()
            ));
        }
        for (at, name, len) in long_functions(&lines, MAX_FN_LINES) {
            over.push(format!(
                "{shown}:{at}: fn {name} is {len} lines (at most {MAX_FN_LINES})"
            ));
        }
    }
    assert!(
        over.is_empty(),
        "split these along their concerns:\n{}",
        over.join("\n")
    );
    Ok(())
}

/// The measure itself: a long function is seen, whatever its signature looks like, and a
/// declaration or a short function is not.
#[test]
fn the_measure_sees_long_functions_and_only_those() {
    let mut text = String::from(
        "trait T {\n    fn declared(\n        &self,\n    ) -> u8;\n}\n\
         pub(crate) async fn long<X>(x: X)\nwhere\n    X: Copy,\n{\n",
    );
    for _ in 0..100 {
        text.push_str("    let _ = 1;\n");
    }
    text.push_str("}\n\nfn short() -> u8 { 1 }\n\nimpl S {\n    pub fn method(&self) {\n");
    for _ in 0..10 {
        text.push_str("        let _ = 1;\n");
    }
    text.push_str("    }\n}\n#[cfg(test)]\nuse std::fmt;\n#[cfg(test)]\nmod tests {\n    fn ignored() {}\n}\n");
    let lines = product_lines(&text);
    assert_eq!(
        long_functions(&lines, MAX_FN_LINES),
        vec![(6, "long".to_owned(), 105)]
    );
    assert_eq!(
        long_functions(&lines, 11),
        vec![(6, "long".to_owned(), 105), (115, "method".to_owned(), 12)]
    );
    assert!(!lines.iter().any(|l| l.contains("ignored")));
    assert!(
        lines.iter().any(|l| l.contains("use std::fmt")),
        "an early cfg(test) use is product"
    );
}
