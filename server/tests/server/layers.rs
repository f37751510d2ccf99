//! The server's modules import only modules below them, as the crate map in `src/lib.rs` says: no
//! import cycle, nothing reaches back up (the store never into services, services never into the API),
//! and the runtime and the proxy meet only in `routing`.

#[path = "../../../tests/e2e/common/layers.rs"]
mod layering;

use std::path::Path;

use layering::Layers;

/// Each module with its rank, lowest first. Modules of one rank may not import each other.
const RANKS: &[(&str, usize)] = &[
    ("model", 0),
    ("clock", 1),
    ("crypto", 1),
    ("passwords", 1),
    ("store", 2),
    ("webhooks::signature", 2),
    ("webhooks::receive", 3),
    ("config", 3),
    ("hardware", 3),
    ("catalog", 3),
    ("deploy", 4),
    ("auth", 4),
    ("outbound", 4),
    ("engines", 4),
    ("services", 5),
    ("client", 5),
    ("webhooks::deliver", 6),
    ("mail", 6),
    ("webhooks", 7),
    ("oauth", 6),
    ("routing", 6),
    ("error", 6),
    ("runtime", 7),
    ("proxy", 7),
    ("api", 8),
    ("app", 9),
    ("lib", 10),
];

#[test]
fn no_module_imports_one_above_it() {
    let layers = Layers {
        ranks: RANKS,
        tests: &[],
        listed_in: "the crate map in src/lib.rs",
    };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let problems = layering::problems(&src, &layers);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
