//! Checks that a crate's modules import only modules below them: no import cycle, and nothing reaches
//! back up. Used by `ui/tests/console/layers.rs` and `server/tests/server/layers.rs`, each with its own order.
//!
//! Every `crate::` and `super::` path in a module's source, use-trees (`super::{a, b}`) included, is resolved
//! to the module it names and compared with the module's own rank. A module's own tests (`#[cfg(test)] mod
//! tests` and what follows it, and the files named in `tests`) may use anything.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// A crate's layering: each module with its rank (lowest first). A module may name its own
/// submodules and modules of a lower rank; two modules of one rank may not name each other.
pub struct Layers<'a> {
    pub ranks: &'a [(&'a str, usize)],
    /// Test modules, above everything they test.
    pub tests: &'a [&'a str],
    /// Where a new module is to be listed besides the test's table, for the message.
    pub listed_in: &'a str,
}

impl Layers<'_> {
    fn rank(&self, module: &str) -> Option<usize> {
        self.ranks
            .iter()
            .find(|(m, _)| *m == module)
            .map(|(_, r)| *r)
    }

    /// The longest prefix of a path that is a listed module: `state::layout::pager_height` is in
    /// `state::layout`, `state::Overlay` in `state`, `proxy::cache::Shard` in `proxy` when only `proxy`
    /// is listed.
    fn owner(&self, path: &[String]) -> String {
        (1..=path.len())
            .rev()
            .map(|n| path[..n].join("::"))
            .find(|m| self.rank(m).is_some() || self.tests.contains(&m.as_str()))
            .unwrap_or_else(|| path.join("::"))
    }
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
pub fn paths<'a>(text: &'a str, prefix: &[String], out: &mut Vec<Vec<String>>) -> &'a str {
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
pub fn named_modules(layers: &Layers, module: &str, source: &str) -> Vec<String> {
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
                found.push(layers.owner(&path));
            }
        }
    }
    found
}

/// Every import in `src` that breaks the layering, one line each.
pub fn problems(src: &Path, layers: &Layers) -> Vec<String> {
    let mut files = Vec::new();
    sources(src, &mut files);
    files.sort();
    let mut problems = Vec::new();
    let mut seen = Vec::new();
    for file in &files {
        let path: Vec<String> = module_of(src, file)
            .split("::")
            .map(str::to_string)
            .collect();
        let module = layers.owner(&path);
        if layers.tests.contains(&module.as_str()) {
            continue;
        }
        let Some(own) = layers.rank(&module) else {
            problems.push(format!(
                "{}: {module} is not in the layers here: add it, and to the list in {}",
                file.display(),
                layers.listed_in
            ));
            continue;
        };
        seen.push(module.clone());
        let text =
            std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        // A module's own tests, whether or not other modules' tests share them, may use anything.
        let code = [
            "#[cfg(test)]\nmod tests",
            "#[cfg(test)]\npub(super) mod tests",
        ]
        .iter()
        .filter_map(|start| text.find(start))
        .min()
        .map_or(&text[..], |end| &text[..end]);
        for named in named_modules(layers, &path.join("::"), code) {
            match layers.rank(&named) {
                _ if named == module => {}
                Some(r) if r < own => {}
                Some(_) => {
                    problems.push(format!("{module} imports {named}, which is not below it"))
                }
                None => problems.push(format!(
                    "{module} names {named}, which is not in the layers"
                )),
            }
        }
    }
    for (module, _) in layers.ranks {
        if !seen.iter().any(|m| m == module) {
            problems.push(format!(
                "the layers name {module}, which has no source file"
            ));
        }
    }
    problems
}
