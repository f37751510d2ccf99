//! Control-plane benchmark (not a test): the catalog list over a generated catalog of 10,000 items
//! (no filter, each filter, search), the seed catalog, and deploys, each printed beside `GET /health`
//! measured in the same run on the same server; all of it on each backend in turn: the embedded
//! SQLite file, then PostgreSQL (Debian's, started for the run by `scripts/postgres` unless
//! `SWITCHYARD_TEST_POSTGRES` names one). Real HTTP on loopback.
//!
//! Run: `cargo bench -p switchyard-server --bench control_plane`. Set `BENCH_SECONDS` to change the
//! time per scenario (default 1.5).

// A benchmark or a test may unwrap: a failed one is a failed run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/mod.rs"]
mod common;

use common::{header, measure, row, Postgres};
use serde_json::{json, Value};
use switchyard_server::{Application, Config};

struct Server {
    url: String,
    token: String,
    _dir: tempfile::TempDir,
}

async fn start(seed_items: Option<usize>, store_url: Option<String>) -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.store.data_dir = Some(dir.path().to_path_buf());
    config.store.url = store_url;
    config.server.listen = "127.0.0.1:0".parse().expect("addr");
    if let Some(n) = seed_items {
        let path = dir.path().join("catalog.json");
        std::fs::write(&path, generated_catalog(n)).expect("write catalog");
        config.catalog.seed_file = Some(path);
    }
    let app = Application::build(&config).await.expect("build");
    let url = format!("http://{}", app.local_addr());
    tokio::spawn(app.run(std::future::pending()));
    let token = std::fs::read_to_string(dir.path().join("admin-token")).expect("token");
    Server {
        url,
        token: token.trim().to_string(),
        _dir: dir,
    }
}

/// `n` items made from the built-in seed, renamed so every repo id and recipe id is unique.
fn generated_catalog(n: usize) -> String {
    let seed: Value =
        serde_json::from_str(include_str!("../../assets/catalog.json")).expect("seed");
    let base = seed["items"].as_array().expect("items");
    let items: Vec<Value> = (0..n)
        .map(|i| {
            let mut it = base[i % base.len()].clone();
            let author = format!(
                "{}-{}",
                it["authorName"].as_str().unwrap_or("a"),
                i / base.len()
            );
            let model = it["modelName"].as_str().unwrap_or("m").to_string();
            it["authorName"] = json!(author);
            it["repoId"] = json!(format!("{author}/{model}"));
            for r in it["recipes"].as_array_mut().expect("recipes") {
                let id = format!("{}-{i}", r["publicId"].as_str().unwrap_or("r"));
                r["publicId"] = json!(id);
            }
            it
        })
        .collect();
    json!({ "items": items }).to_string()
}

/// What one backend did: deploys/s at 1 and 16 connections.
struct Deploys {
    one: f64,
    sixteen: f64,
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let seconds: f64 = common::env_number("BENCH_SECONDS").unwrap_or(1.5);
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()
        .expect("client");
    let pg = Postgres::start();
    println!("SQLite: a file in a temp dir, synchronous = normal (WAL). PostgreSQL 15 on loopback, default settings (fsync at each commit).");
    let sqlite = backend("SQLite", &http, seconds, None).await;
    let postgres = backend("PostgreSQL", &http, seconds, Some(&pg)).await;
    let ratio = postgres.sixteen / sqlite.sixteen;
    println!(
        "\nDeploys/s, PostgreSQL beside SQLite: {:.0} vs {:.0} at 1 connection, {:.0} vs {:.0} at 16 = {:.2}x  (target >= 0.5x) {}",
        postgres.one,
        sqlite.one,
        postgres.sixteen,
        sqlite.sixteen,
        ratio,
        if ratio >= 0.5 { "PASS" } else { "MISS" }
    );
    println!("Targets (2-core machine): list p99 <= 5 ms with filters at 10,000 items; seed list >= 50% of /health; >= 1,000 deploys/s.");
}

async fn backend(
    name: &str,
    http: &reqwest::Client,
    seconds: f64,
    pg: Option<&Postgres>,
) -> Deploys {
    let url = match pg {
        Some(pg) => Some(pg.database().await),
        None => None,
    };
    let big = start(Some(10_000), url).await;
    let get = |srv: &Server, path: &str| {
        let (http, url) = (http.clone(), format!("{}{path}", srv.url));
        move |_: usize| http.get(&url)
    };
    println!("\n=== {name}");
    header("Catalog list, 10,000 items (latency at 1 connection)");
    let health1 = measure(1, seconds, get(&big, "/health")).await;
    row("GET /health (baseline)", 1, &health1, None);
    let scenarios = [
        ("no filter (all 10,000 items)", "/api/v1/catalog/list"),
        ("limit=20", "/api/v1/catalog/list?limit=20"),
        (
            "accelerator=neuron",
            "/api/v1/catalog/list?accelerator=neuron",
        ),
        ("engine=sglang", "/api/v1/catalog/list?engine=sglang"),
        ("license=gemma", "/api/v1/catalog/list?license=gemma"),
        ("task=translation", "/api/v1/catalog/list?task=translation"),
        (
            "search=qwen2.5-vl (case-insensitive)",
            "/api/v1/catalog/list?search=QWEN2.5-VL",
        ),
        (
            "task+accelerator+engine+limit",
            "/api/v1/catalog/list?task=text-generation&accelerator=gpu&engine=vllm&limit=50",
        ),
    ];
    for (name, path) in scenarios {
        let f = measure(1, seconds, get(&big, path)).await;
        row(name, 1, &f, Some(&health1));
    }

    let url = match pg {
        Some(pg) => Some(pg.database().await),
        None => None,
    };
    let seed = start(None, url).await;
    header("Seed catalog list against /health (throughput at 16 connections)");
    let health16 = measure(16, seconds, get(&seed, "/health")).await;
    row("GET /health (baseline)", 16, &health16, None);
    let list16 = measure(16, seconds, get(&seed, "/api/v1/catalog/list")).await;
    row("seed catalog list, no filter", 16, &list16, Some(&health16));
    let list16f = measure(
        16,
        seconds,
        get(
            &seed,
            "/api/v1/catalog/list?accelerator=gpu&task=text-generation",
        ),
    )
    .await;
    row(
        "seed catalog list, accelerator+task",
        16,
        &list16f,
        Some(&health16),
    );

    header("Deploys (recipe deploy, each a new endpoint in the store)");
    let deploy = |conns_tag: &'static str| {
        let (http, url, token) = (
            http.clone(),
            format!(
                "{}/api/v1/catalog/recipe/bge-large-en-v1-5-cpu-tei/deploy",
                seed.url
            ),
            seed.token.clone(),
        );
        move |i: usize| {
            http.post(&url).bearer_auth(&token).json(
                &json!({"namespace": "admin", "config": {"name": format!("b{conns_tag}-{i}")}}),
            )
        }
    };
    let health_d = measure(16, seconds, get(&seed, "/health")).await;
    row("GET /health (baseline)", 16, &health_d, None);
    let d1 = measure(1, seconds, deploy("a")).await;
    row("deploy, 1 connection", 1, &d1, Some(&health_d));
    let d16 = measure(16, seconds, deploy("b")).await;
    row("deploy, 16 connections", 16, &d16, Some(&health_d));
    Deploys {
        one: d1.rps,
        sixteen: d16.rps,
    }
}
