//! Docker provider benchmark (not a test). Two comparisons, each with its baseline measured in the same run:
//!
//! 1. The cold start of a replica from a cached image through Switchyard — the create request to the first
//!    byte through the proxy, split into create (request → the engine's `create` event), start (→ its `start`
//!    event), healthy (→ the engine answering its health route, polled directly) and first byte (→ the first
//!    200 through the proxy) — beside `docker run` of the same image to its first answer (the floor). The
//!    control plane's share is the difference of the medians; the target is 250 ms or less.
//! 2. Proxy throughput to a container replica beside a local-process replica of the same engine (the test
//!    engine), wrk at 1 and 16 connections.
//!
//! Run: `cargo build --release -p switchyard-test-engine && bash -c 'source scripts/docker &&
//! cargo bench -p switchyard-server --bench containers'` (scripts/docker starts an engine when none answers and
//! exports `SWITCHYARD_TEST_DOCKER_HOST`; any engine named there or in `DOCKER_HOST` will do). `BENCH_ROUNDS`
//! sets the cold starts measured (default 7), `BENCH_SECONDS` the time per wrk run (default 3).

// A benchmark or a test may unwrap: a failed one is a failed run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bollard::query_parameters::EventsOptions;
use bollard::Docker;
use common::{tool, wrk, Wrk};
use futures_util::StreamExt;
use serde_json::{json, Value};
use switchyard_server::config::ProviderName;
use switchyard_server::{Application, Config};

const IMAGE: &str = "switchyard-bench/test-engine:latest";

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run());
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

fn ms(ns: i64) -> f64 {
    ns as f64 / 1e6
}

/// The test engine beside this bench: `target/release/deps/containers-…` → `target/release/…`.
fn engine_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("bench exe");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let bin = dir.join("switchyard-test-engine");
    assert!(
        bin.exists(),
        "{} is missing: cargo build --release -p switchyard-test-engine",
        bin.display()
    );
    bin
}

fn docker_cli(host: &str, args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(args)
        .env("DOCKER_HOST", host)
        .env("DOCKER_BUILDKIT", "0")
        .output()
        .expect("docker");
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The test engine as an image (its binary and libraries on `scratch`), in the engine's store.
fn build_image(host: &str) {
    let ctx = tempfile::tempdir().expect("context");
    let root = ctx.path();
    std::fs::copy(engine_bin(), root.join("engine")).expect("copy");
    let ldd = Command::new("ldd").arg(engine_bin()).output().expect("ldd");
    for lib in String::from_utf8_lossy(&ldd.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
    {
        let to = root.join(lib.trim_start_matches('/'));
        std::fs::create_dir_all(to.parent().expect("dir")).expect("dir");
        std::fs::copy(lib, &to).expect("lib");
    }
    std::fs::write(
        root.join("Dockerfile"),
        "FROM scratch\nCOPY . /\nENTRYPOINT [\"/engine\", \"--host\", \"0.0.0.0\", \"--port\", \"8080\"]\n",
    )
    .expect("Dockerfile");
    docker_cli(
        host,
        &["build", "-q", "-t", IMAGE, &root.display().to_string()],
    );
}

/// Polls `url` every millisecond until it answers 200; the time it did (ns since the epoch).
async fn first_200(http: &reqwest::Client, url: &str, post: bool) -> i64 {
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        let req = if post {
            http.post(url).json(&json!({"inputs": "x"}))
        } else {
            http.get(url)
        };
        if let Ok(r) = req.timeout(Duration::from_secs(2)).send().await {
            if r.status() == 200 {
                return now_ns();
            }
        }
        assert!(Instant::now() < give_up, "{url} never answered 200");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// `docker run` of the image to its first answer, `rounds` times: the floor, in ms.
async fn floor(host: &str, network: &str, rounds: usize) -> Vec<f64> {
    let http = reqwest::Client::new();
    let mut out = Vec::new();
    for i in 0..rounds {
        let name = format!("switchyard-bench-floor-{}-{i}", std::process::id());
        let t0 = now_ns();
        let id = docker_cli(
            host,
            &["run", "-d", "--name", &name, "--network", network, IMAGE],
        );
        let ip = docker_cli(
            host,
            &[
                "inspect",
                "-f",
                &format!("{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}"),
                &id,
            ],
        );
        let answered = first_200(&http, &format!("http://{ip}:8080/health"), false).await;
        out.push(ms(answered - t0));
        docker_cli(host, &["rm", "-f", &id]);
    }
    out
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

struct Server {
    url: String,
    token: String,
    stop: tokio::sync::oneshot::Sender<()>,
}

async fn serve(dir: &Path, docker: Option<(&str, &str)>) -> Server {
    let mut config = Config::default();
    config.store.data_dir = Some(dir.to_path_buf());
    config.server.listen = "127.0.0.1:0".parse().expect("addr");
    config.runtime.tick_ms = 1000;
    config.runtime.stop_grace_ms = 1000;
    if let Some((host, network)) = docker {
        config.runtime.provider = ProviderName::Docker;
        config.runtime.docker.host = Some(host.to_string());
        config.runtime.docker.network = network.to_string();
        config.runtime.docker.stop_on_shutdown = true;
    }
    let app = Application::build(&config).await.expect("server");
    let url = format!("http://{}", app.local_addr());
    let token = std::fs::read_to_string(dir.join("admin-token"))
        .expect("token")
        .trim()
        .to_string();
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(app.run(async {
        let _ = rx.await;
    }));
    Server { url, token, stop }
}

fn endpoint(name: &str, image: Value, command: Option<Vec<String>>) -> Value {
    let mut body = json!({
        "name": name, "type": "public",
        "provider": {"vendor": "aws", "region": "us-east-1"},
        "compute": {"accelerator": "cpu", "instanceType": "intel-icl", "instanceSize": "x2",
                    "scaling": {"minReplica": 1, "maxReplica": 1}},
        "model": {"repository": "bench/engine", "framework": "custom", "image": image},
        // The test engine needs no model at /repository.
        "experimentalFeatures": {"skipRepoDownload": true},
    });
    if let Some(c) = command {
        body["model"]["command"] = json!(c);
    }
    body
}

async fn create(http: &reqwest::Client, s: &Server, body: &Value) {
    let r = http
        .post(format!("{}/v2/endpoint/admin", s.url))
        .bearer_auth(&s.token)
        .json(body)
        .send()
        .await
        .expect("create");
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
}

async fn delete(http: &reqwest::Client, s: &Server, name: &str) {
    let r = http
        .delete(format!("{}/v2/endpoint/admin/{name}", s.url))
        .bearer_auth(&s.token)
        .send()
        .await
        .expect("delete");
    assert!(r.status().is_success());
}

/// One cold start through Switchyard: (create, start, healthy, first byte) in ms, each from the one before.
async fn cold_start(http: &reqwest::Client, docker: &Docker, s: &Server, name: &str) -> [f64; 4] {
    let filters = HashMap::from([
        ("type".to_string(), vec!["container".to_string()]),
        (
            "label".to_string(),
            vec![format!("dev.switchyard.endpoint={name}")],
        ),
    ]);
    let mut events = docker.events(Some(EventsOptions {
        filters: Some(filters),
        ..Default::default()
    }));
    let t0 = now_ns();
    let image = json!({"custom": {"url": IMAGE, "port": 8080}});
    create(http, s, &endpoint(name, image, None)).await;
    let (mut created, mut started, mut id) = (0i64, 0i64, String::new());
    while started == 0 {
        let next = tokio::time::timeout(Duration::from_secs(60), events.next()).await;
        let e = next
            .expect("the replica's container within a minute")
            .expect("an event")
            .expect("event");
        let at = e.time_nano.unwrap_or(0);
        match e.action.as_deref() {
            Some("create") => {
                created = at;
                id = e.actor.and_then(|a| a.id).unwrap_or_default();
            }
            Some("start") => started = at,
            _ => {}
        }
    }
    let ip = docker
        .inspect_container(
            &id,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .ok()
        .and_then(|c| {
            c.network_settings?
                .networks?
                .values()
                .next()?
                .ip_address
                .clone()
        })
        .expect("the replica's address");
    let healthy = first_200(http, &format!("http://{ip}:8080/health"), false).await;
    let through = first_200(
        http,
        &format!("{}/endpoints/admin/{name}/embed", s.url),
        true,
    )
    .await;
    [
        ms(created - t0),
        ms(started - created),
        ms(healthy - started),
        ms(through - healthy),
    ]
}

async fn run() {
    let rounds: usize = common::env_number("BENCH_ROUNDS").unwrap_or(7).max(1);
    let seconds: u64 = common::env_number("BENCH_SECONDS").unwrap_or(3);
    let Some(host) = std::env::var("SWITCHYARD_TEST_DOCKER_HOST")
        .ok()
        .or_else(|| std::env::var("DOCKER_HOST").ok())
    else {
        println!("skipped: no Docker Engine named (source scripts/docker, or set DOCKER_HOST)");
        return;
    };
    let docker = Docker::connect_with_unix(&host, 120, bollard::API_DEFAULT_VERSION)
        .expect("docker")
        .negotiate_version()
        .await
        .expect("the Docker Engine answers");
    build_image(&host);
    let network = format!("switchyard-bench-{}", std::process::id());
    docker_cli(&host, &["network", "create", &network]);

    println!("\nCold start of a replica from a cached image ({rounds} rounds, medians)");
    let mut floors = floor(&host, &network, rounds).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let s = serve(&dir.path().join("docker"), Some((&host, &network))).await;
    let http = reqwest::Client::new();
    let mut phases: [Vec<f64>; 4] = Default::default();
    let mut totals = Vec::new();
    for i in 0..rounds {
        let name = format!("cold-{i}");
        let split = cold_start(&http, &docker, &s, &name).await;
        totals.push(split.iter().sum());
        for (p, v) in phases.iter_mut().zip(split) {
            p.push(v);
        }
        delete(&http, &s, &name).await;
    }
    let names = [
        "create (request → container created)",
        "start (created → started)",
        "healthy (started → health route answers)",
        "first byte (healthy → 200 through the proxy)",
    ];
    for (name, p) in names.iter().zip(phases.iter_mut()) {
        println!("{name:<52} {:>9.1} ms", median(p));
    }
    let total = median(&mut totals);
    let floor_ms = median(&mut floors);
    println!(
        "{:<52} {:>9.1} ms",
        "Switchyard: request → first byte", total
    );
    println!(
        "{:<52} {:>9.1} ms",
        "docker run → first answer (the floor)", floor_ms
    );
    let share = total - floor_ms;
    println!(
        "{:<52} {:>9.1} ms  (goal ≤ 250 ms: {})",
        "the control plane's share",
        share,
        if share <= 250.0 { "PASS" } else { "MISS" }
    );

    let Some(wrk_bin) = tool("wrk", "wrk") else {
        let _ = s.stop.send(());
        return;
    };
    println!(
        "\nProxy throughput: a container replica beside a local-process replica of the same engine"
    );
    let image = json!({"custom": {"url": IMAGE, "port": 8080}});
    create(&http, &s, &endpoint("box", image, None)).await;
    first_200(&http, &format!("{}/endpoints/admin/box/embed", s.url), true).await;
    let local = serve(&dir.path().join("local"), None).await;
    let command = vec![
        engine_bin().display().to_string(),
        "--port".into(),
        "{port}".into(),
    ];
    let image = json!({"custom": {"url": "local/test-engine"}});
    create(&http, &local, &endpoint("proc", image, Some(command))).await;
    first_200(
        &http,
        &format!("{}/endpoints/admin/proc/embed", local.url),
        true,
    )
    .await;
    let script = dir.path().join("embed.lua");
    std::fs::write(
        &script,
        "wrk.method = \"POST\"\nwrk.body = '{\"inputs\": \"x\"}'\nwrk.headers[\"Content-Type\"] = \"application/json\"\n",
    )
    .expect("script");
    println!(
        "{:<44} {:>3} {:>10} {:>9} {:>9}",
        "", "con", "req/s", "p50 ms", "p99 ms"
    );
    for conns in [1, 16] {
        let base = wrk(
            &wrk_bin,
            &format!("{}/endpoints/admin/proc/embed", local.url),
            conns,
            seconds,
            None,
            Some(&script),
        );
        row("a local-process replica (baseline)", conns, &base, None);
        let via = wrk(
            &wrk_bin,
            &format!("{}/endpoints/admin/box/embed", s.url),
            conns,
            seconds,
            None,
            Some(&script),
        );
        row("a container replica", conns, &via, Some(&base));
    }
    delete(&http, &s, "box").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _ = s.stop.send(());
    let _ = local.stop.send(());
    tokio::time::sleep(Duration::from_secs(2)).await;
    for net in [network.clone(), format!("{network}-admin")] {
        let _ = Command::new("docker")
            .args(["network", "rm", &net])
            .env("DOCKER_HOST", &host)
            .output();
    }
}

fn row(name: &str, conns: usize, f: &Wrk, base: Option<&Wrk>) {
    let vs = base.map_or(String::new(), |b| {
        format!("  {:>5.1}% of the baseline", 100.0 * f.rps / b.rps)
    });
    println!(
        "{name:<44} {conns:>3} {:>10.0} {:>9.3} {:>9.3}{vs}{}",
        f.rps,
        f.p50 / 1e3,
        f.p99 / 1e3,
        common::errors_note(f.errors)
    );
}
