//! The console's modules import only modules below them, in the order written in `src/lib.rs` and
//! `src/state/mod.rs`: no import cycle, and nothing reaches back up (the state never into the views).
//!
//! Every `crate::` and `super::` path in a module's source, use-trees (`super::{a, b}`) included, is resolved
//! to the module it names and compared with the order below. A module's own tests (`#[cfg(test)] mod tests`
//! and what follows it, and `state/tests.rs`) may use anything.

use std::path::{Path, PathBuf};

/// The modules, lowest first: each may name only modules before it.
const ORDER: &[&str] = &[
    "format",
    "effects",
    "pager",
    "form",
    "schedule",
    "spec",
    "keymap",
    "state::rows",
    "state::overlay",
    "state::model",
    "state::action",
    "state::layout",
    "state::lists",
    "state::connection",
    "state::panes",
    "state::editors",
    "state::confirm",
    "state::command_line",
    "state::keys",
    "state::update",
    "state",
    "views",
    "lib",
];

/// Test modules, above everything they test.
const TESTS: &[&str] = &["state::tests"];

fn rank(module: &str) -> Option<usize> {
    ORDER.iter().position(|m| *m == module)
}

/// The `.rs` files under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `state/keys.rs` is `state::keys`, `state/mod.rs` is `state`, `lib.rs` is `lib`.
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).unwrap_or(file).with_extension("");
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts.join("::")
}

/// Reads the use-tree (or plain path) at the start of `text` and pushes each path it names, as segments after
/// `prefix`: `a::{b, c::d as e}` names `a::b` and `a::c::d`. Returns the text after it.
fn paths<'a>(text: &'a str, prefix: &[String], out: &mut Vec<Vec<String>>) -> &'a str {
    let mut segments = prefix.to_vec();
    let mut rest = text.trim_start();
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            rest = group;
            loop {
                rest = paths(rest, &segments, out).trim_start();
                match rest.strip_prefix(',') {
                    Some(after) => rest = after,
                    None => return rest.strip_prefix('}').unwrap_or(rest),
                }
            }
        }
        let name = identifier(rest);
        if !name.is_empty() {
            segments.push(name.to_string());
        }
        rest = &rest[name.len()..];
        if let Some(after) = rest.strip_prefix("::") {
            rest = after;
            continue;
        }
        if segments.len() > prefix.len() {
            out.push(segments);
        }
        // `path as name`: the name is the importer's own.
        return match rest.trim_start().strip_prefix("as ") {
            Some(alias) => {
                let alias = alias.trim_start();
                &alias[identifier(alias).len()..]
            }
            None => rest,
        };
    }
}

/// The identifier (or `*`) at the start of `text`.
fn identifier(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '*'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The modules `module`'s source names through `crate::` and `super::` paths.
fn named_modules(module: &str, source: &str) -> Vec<String> {
    let own: Vec<String> = module.split("::").map(str::to_string).collect();
    let mut found = Vec::new();
    for root in ["crate::", "super::"] {
        for (i, _) in source.match_indices(root) {
            // Only where a path starts: not the second `super::` of `super::super::`, nor inside a name.
            let before = source[..i].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let mut text = &source[i + root.len()..];
            let mut base: Vec<String> = Vec::new();
            if root == "super::" {
                base = own[..own.len().saturating_sub(1)].to_vec();
                while let Some(after) = text.strip_prefix("super::") {
                    base.pop();
                    text = after;
                }
            }
            let mut named = Vec::new();
            paths(text, &base, &mut named);
            for path in named {
                // The longest prefix of the path that is a module: `state::layout::pager_height` is in
                // `state::layout`, `state::Overlay` in `state`.
                let module = (1..=path.len())
                    .rev()
                    .map(|n| path[..n].join("::"))
                    .find(|m| rank(m).is_some() || TESTS.contains(&m.as_str()))
                    .unwrap_or_else(|| path.join("::"));
                found.push(module);
            }
        }
    }
    found
}

#[test]
fn no_module_imports_one_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let mut problems = Vec::new();
    let mut seen = Vec::new();
    for file in &files {
        let module = module_of(&src, file);
        if TESTS.contains(&module.as_str()) {
            continue;
        }
        let Some(own) = rank(&module) else {
            problems.push(format!(
                "{}: {module} is not in ORDER here: add it, and to the list in src/lib.rs or src/state/mod.rs",
                file.display()
            ));
            continue;
        };
        seen.push(module.clone());
        let text =
            std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let code = text
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or(&text);
        for named in named_modules(&module, code) {
            match rank(&named) {
                Some(r) if r < own => {}
                Some(_) if named == module => {}
                Some(_) => problems.push(format!("{module} imports {named}, which is above it")),
                None => problems.push(format!("{module} names {named}, which is not in ORDER")),
            }
        }
    }
    for module in ORDER {
        if !seen.iter().any(|m| m == module) {
            problems.push(format!("ORDER names {module}, which has no source file"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn use_trees_are_read_whole() {
    let mut out = Vec::new();
    let rest = paths("state::{layout::{a, b as c}, Overlay,};", &[], &mut out);
    let joined: Vec<String> = out.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        joined,
        ["state::layout::a", "state::layout::b", "state::Overlay"]
    );
    assert_eq!(rest, ";");
    assert_eq!(
        named_modules(
            "state::keys",
            "use super::{lists, panes};\nuse crate::views::draw;\nuse super::super::spec::{self, Outcome};"
        ),
        ["views", "state::lists", "state::panes", "spec", "spec"]
    );
}
