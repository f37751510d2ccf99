//! The console's modules import only modules below them, in the order written in `src/lib.rs`,
//! `src/forms/mod.rs` and `src/state/mod.rs`: no import cycle, and nothing reaches back up (the state never
//! into the views).

#[path = "../../../tests/e2e/common/layers.rs"]
mod layering;

use std::path::Path;

use layering::Layers;

/// The modules, lowest first: each may name only modules before it.
const ORDER: &[&str] = &[
    "format",
    "natural",
    "columns",
    "effects",
    "pager",
    "forms::issues",
    "forms::input",
    "forms::deploy",
    "forms::app",
    "forms::webhook",
    "forms",
    "schedule",
    "spec",
    "keymap",
    "state::rows",
    "state::charts",
    "state::deliveries",
    "state::overlay",
    "state::model",
    "state::action",
    "state::notes",
    "state::layout",
    "state::engines",
    "state::lists",
    "state::connection",
    "state::panes",
    "state::analytics",
    "state::editors",
    "state::apps",
    "state::webhooks",
    "state::notifications",
    "state::servers",
    "state::confirm",
    "state::command_line",
    "state::keys",
    "state::update",
    "state",
    "views",
    "clipboard",
    "reader",
    "editor",
    "failures",
    "perform",
    "event_loop",
    "lib",
];

fn ranked() -> Vec<(&'static str, usize)> {
    ORDER.iter().enumerate().map(|(i, m)| (*m, i)).collect()
}

#[test]
fn no_module_imports_one_above_it() {
    let ranks = ranked();
    let layers = Layers {
        ranks: &ranks,
        tests: &["state::tests"],
        listed_in: "src/lib.rs, src/forms/mod.rs or src/state/mod.rs",
    };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let problems = layering::problems(&src, &layers);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn use_trees_are_read_whole() {
    let ranks = ranked();
    let layers = Layers {
        ranks: &ranks,
        tests: &[],
        listed_in: "",
    };
    let mut out = Vec::new();
    let rest = layering::paths("state::{layout::{a, b as c}, Overlay,};", &[], &mut out);
    let joined: Vec<String> = out.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        joined,
        ["state::layout::a", "state::layout::b", "state::Overlay"]
    );
    assert_eq!(rest, ";");
    assert_eq!(
        layering::named_modules(
            &layers,
            "state::keys",
            "use super::{lists, panes};\nuse crate::views::draw;\nuse super::super::spec::{self, Outcome};"
        ),
        ["views", "state::lists", "state::panes", "spec", "spec"]
    );
}
