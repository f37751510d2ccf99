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
    ("clock", 10),
    ("crypto", 10),
    ("passwords", 10),
    ("store", 20),
    ("signing", 20),
    ("webhooks::receive", 30),
    ("config", 30),
    ("hardware", 30),
    ("catalog", 30),
    ("deploy", 40),
    ("auth", 40),
    ("outbound", 40),
    ("engines", 40),
    ("services", 50),
    ("client", 50),
    ("webhooks::deliver", 60),
    ("mail", 60),
    ("webhooks", 70),
    ("oauth", 60),
    ("routing", 60),
    ("error", 60),
    ("runtime", 70),
    ("telemetry", 70),
    // Inside the proxy: what both paths share, below `proxy` (which keeps `Proxy`); the steps that take
    // `Proxy`, above it; the two paths, side by side (neither imports the other); the workers, which hand a
    // connection from one to the other, on top.
    ("proxy::http1", 65),
    ("proxy::bodies", 65),
    ("proxy::cache", 65),
    ("proxy::balance", 65),
    ("proxy::limit", 65),
    ("proxy::poll", 65),
    ("proxy::count", 65),
    ("proxy::stop", 65),
    ("proxy::edge", 66),
    ("proxy::forward", 67),
    ("proxy", 70),
    ("proxy::resolve", 71),
    ("proxy::access", 71),
    ("proxy::own", 72),
    ("proxy::general", 72),
    ("proxy::workers", 74),
    ("api", 80),
    ("app", 90),
    ("lib", 100),
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
