//! `docs/configuration.md` names exactly the `MCPT_*` variables the product code reads:
//! every string literal `"MCPT_…"` in the `.rs` files under `gateway/`, `console/`, `worker/`,
//! `shared/` and `cli/` (skipping `target` and `fuzz` directories) must appear there as `` `MCPT_X` ``,
//! and every `MCPT_*` name the page mentions must be one the code names.

use std::collections::BTreeSet;
use std::fs;

use mcp_tasks_tests::{PRODUCT_DIRS, product_rust_files, repo_root};

/// The `MCPT_[A-Z0-9_]+` names in `text` that start right after `open` and end right
/// before `close` (`"` and `"` for string literals, `` ` `` for Markdown code).
fn names(text: &str, open: char, close: char) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in text.match_indices("MCPT_") {
        if !text[..at].ends_with(open) {
            continue;
        }
        let rest = &text[at..];
        let len = rest
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(rest.len());
        if len > "MCPT_".len() && rest[len..].starts_with(close) {
            found.insert(rest[..len].to_owned());
        }
    }
    found
}

/// Every `MCPT_[A-Z0-9_]+` word in `text`, however it is quoted, but prefixes like
/// `MCPT_LIMIT_*`.
fn mentioned(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in text.match_indices("MCPT_") {
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &text[at..];
        let len = rest
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(rest.len());
        // `MCPT_LIMIT_*` names a family, not a variable.
        let name = rest[..len].trim_end_matches('_');
        if name.len() > "MCPT_".len() && !rest[len..].starts_with('*') {
            found.insert(name.to_owned());
        }
    }
    found
}

#[test]
fn configuration_page_names_exactly_the_variables_the_code_reads() -> anyhow::Result<()> {
    let root = repo_root();
    let files = product_rust_files()?;
    let mut in_code = BTreeSet::new();
    for file in &files {
        in_code.extend(names(&fs::read_to_string(file)?, '"', '"'));
    }
    assert!(
        !in_code.is_empty(),
        "no MCPT_ variable found under {PRODUCT_DIRS:?} of {}",
        root.display()
    );

    let page = root.join("docs/configuration.md");
    let doc = fs::read_to_string(&page)?;
    let documented = names(&doc, '`', '`');
    let missing: Vec<String> = in_code
        .difference(&documented)
        .map(|v| format!("`{v}`"))
        .collect();
    let stale: Vec<String> = mentioned(&doc)
        .difference(&in_code)
        .map(|v| format!("`{v}`"))
        .collect();

    let mut problems = Vec::new();
    if !missing.is_empty() {
        problems.push(format!(
            "read by the code but missing from docs/configuration.md: {}",
            missing.join(", ")
        ));
    }
    if !stale.is_empty() {
        problems.push(format!(
            "named in docs/configuration.md but read by no product code: {}",
            stale.join(", ")
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    Ok(())
}
