//! Several servers on one PostgreSQL (not a test): real `switchyard serve` processes, each figure for three
//! servers beside the same figure for one, measured in the same run.
//!
//! 1. Failover: `kill -9` of the leader → another server holds the lease (read from the store every 10 ms),
//!    → its first reconcile (the replica rows written again under its epoch), → the endpoint served again
//!    through a survivor (its replica is a local process, which died with its server and is started anew).
//! 2. Deploys/s: endpoint creations by 8 concurrent clients, through one server alone, then spread over three.
//! 3. Deliveries/s: a burst of endpoint changes, each delivered to a webhook receiver on loopback; from the
//!    first change to the last delivery, with one server, then three (changes spread over them).
//! 4. Proxy throughput to one replica (the test engine): wrk through one server, then through each of
//!    three at once (summed). All of it shares this machine's cores.
//!
//! Run: `cargo build --release -p switchyard-test-engine && cargo bench --bench servers` (a throwaway
//! PostgreSQL is started unless `SWITCHYARD_TEST_POSTGRES` names one; wrk is installed when missing, as
//! root). `BENCH_ROUNDS` sets the failovers measured (default 3), `BENCH_SECONDS` each wrk run (default 5).

// A benchmark or a test may unwrap: a failed one is a failed run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../server/benches/common/mod.rs"]
mod bench;
#[path = "../tests/e2e/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use serde_json::{json, Value};
use sqlx::Row;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run());
}

const CONFIG: &str = "[runtime]\ntick_ms = 200\nstop_grace_ms = 1000\npublic_url = \"http://switchyard.bench.test\"\n\n\
                      [outbound]\nallow = [\"127.0.0.0/8\"]\n\n[webhooks]\ntimeout = \"5s\"\n\n\
                      [quotas]\nendpoints = 100000\nreplicas = 100000\n";

async fn run() {
    let pg = bench::Postgres::start();
    let rounds: usize = bench::env_number("BENCH_ROUNDS").unwrap_or(3);
    let seconds: u64 = bench::env_number("BENCH_SECONDS").unwrap_or(5);
    println!("several servers on one PostgreSQL; {rounds} failovers, wrk {seconds} s per run");
    failover(&pg.url, rounds).await;
    let http = reqwest::Client::new();
    println!(
        "\n{:<44} {:>12} {:>12}",
        "scenario", "1 server", "3 servers"
    );
    let deploys = [
        deploys(&pg.url, 1, &http).await,
        deploys(&pg.url, 3, &http).await,
    ];
    println!(
        "{:<44} {:>12.1} {:>12.1}",
        "deploys/s (8 clients)", deploys[0], deploys[1]
    );
    let sent = [
        deliveries(&pg.url, 1, &http).await,
        deliveries(&pg.url, 3, &http).await,
    ];
    println!(
        "{:<44} {:>12.1} {:>12.1}",
        "deliveries/s (a burst of 300 changes)", sent[0], sent[1]
    );
    if let Some(wrk) = bench::tool("wrk", "wrk") {
        let (one, three) = proxy(&pg.url, &wrk, seconds, &http).await;
        println!(
            "{:<44} {:>12.0} {:>12.0}",
            "proxy req/s (wrk, 16 connections each)", one, three
        );
    }
}

/// An endpoint of the test engine (a local process) with `n` replicas.
fn engine(name: &str, n: u32) -> Value {
    json!({
        "name": name, "type": "public",
        "provider": {"vendor": "aws", "region": "us-east-1"},
        "compute": {"accelerator": "cpu", "instanceType": "intel-icl", "instanceSize": "x2",
                    "scaling": {"minReplica": n, "maxReplica": n}},
        "model": {"repository": "test/engine", "framework": "custom",
                  "image": {"custom": {"url": "local/test-engine"}},
                  "command": [common::engine_bin().display().to_string(), "--port", "{port}"]},
    })
}

async fn post(http: &reqwest::Client, c: &Cluster, i: usize, path: &str, body: &Value) -> u16 {
    http.post(format!("{}{path}", c.nodes[i].url()))
        .bearer_auth(&c.token)
        .json(body)
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

async fn served(http: &reqwest::Client, url: &str) -> bool {
    let res = http
        .post(format!("{url}/endpoints/admin/svc/embed"))
        .json(&json!({"inputs": "x"}))
        .send()
        .await;
    res.is_ok_and(|r| r.status() == 200)
}

async fn failover(admin_url: &str, rounds: usize) {
    let mut c = Cluster::start(admin_url, 3, CONFIG).await;
    let http = reqwest::Client::new();
    assert_eq!(
        post(&http, &c, 0, "/v2/endpoint/admin", &engine("svc", 1)).await,
        200
    );
    sqlx::any::install_default_drivers();
    let mut db = <sqlx::AnyConnection as sqlx::Connection>::connect(&c.store)
        .await
        .expect("the cluster's store");
    let (mut leased, mut reconciled, mut serving) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        for i in c.running() {
            while !served(&http, c.nodes[i].url()).await {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let leader = c.leader(&http, 0).await;
        let before: i64 = sqlx::query("SELECT epoch FROM leases")
            .fetch_one(&mut db)
            .await
            .expect("lease")
            .get("epoch");
        let survivor = c.nodes[(leader + 1) % 3].url().to_string();
        let killed = Instant::now();
        c.kill(leader);
        let epoch = loop {
            let row = sqlx::query("SELECT epoch FROM leases")
                .fetch_one(&mut db)
                .await;
            if let Some(e) = row
                .ok()
                .map(|r| r.get::<i64, _>("epoch"))
                .filter(|e| *e > before)
            {
                break e;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        leased.push(killed.elapsed());
        loop {
            let rows = sqlx::query("SELECT epoch FROM replicas")
                .fetch_all(&mut db)
                .await;
            let epochs: Vec<i64> = rows
                .unwrap_or_default()
                .iter()
                .map(|r| r.get("epoch"))
                .collect();
            if !epochs.is_empty() && epochs.iter().all(|e| *e == epoch) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        reconciled.push(killed.elapsed());
        while !served(&http, &survivor).await {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        serving.push(killed.elapsed());
        c.up(leader);
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2].as_secs_f64()
    };
    println!(
        "\nfailover, kill -9 of the leader (median of {rounds}; lease 6 s, renewed every 2 s)"
    );
    println!(
        "  → another server holds the lease   {:>6.2} s",
        median(&mut leased)
    );
    println!(
        "  → its first reconcile              {:>6.2} s",
        median(&mut reconciled)
    );
    println!(
        "  → served again through a survivor  {:>6.2} s  (a local replica, started anew)",
        median(&mut serving)
    );
}

/// Endpoints created per second by 8 clients through `n` servers (round robin).
async fn deploys(admin_url: &str, n: usize, http: &reqwest::Client) -> f64 {
    let c = Arc::new(Cluster::start(admin_url, n, CONFIG).await);
    // Spread over namespaces: each instance type allows a namespace a few dozen endpoints.
    const SPACES: usize = 16;
    for o in 0..SPACES {
        let made = post(
            http,
            &c,
            0,
            "/api/v1/admin/orgs",
            &json!({"name": format!("o{o}")}),
        )
        .await;
        assert!((200..300).contains(&made), "org o{o}: {made}");
    }
    let next = Arc::new(AtomicUsize::new(0));
    const TOTAL: usize = 400;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (c, next, http) = (c.clone(), next.clone(), http.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                if k >= TOTAL {
                    break;
                }
                let body = common::endpoint(&format!("d{k}"));
                let path = format!("/v2/endpoint/o{}", k % SPACES);
                let status = post(&http, &c, k % n, &path, &body).await;
                assert_eq!(status, 200, "deploy {k}");
            }
        }));
    }
    for t in tasks {
        t.await.expect("client");
    }
    TOTAL as f64 / started.elapsed().as_secs_f64()
}

/// Deliveries per second of a burst of 300 endpoint changes, with `n` servers sending.
async fn deliveries(admin_url: &str, n: usize, http: &reqwest::Client) -> f64 {
    let c = Cluster::start(admin_url, n, CONFIG).await;
    let common::cluster::Receiver { url, got, .. } =
        common::cluster::receiver(Duration::ZERO).await;
    let hook = json!({"watched": [{"type": "user", "name": "admin"}], "domains": ["endpoint"],
                      "url": url});
    let made = post(http, &c, 0, "/api/settings/webhooks", &hook).await;
    assert!((200..300).contains(&made), "webhook: {made}");
    for k in 0..10 {
        assert_eq!(
            post(
                http,
                &c,
                0,
                "/v2/endpoint/admin",
                &common::endpoint(&format!("h{k}"))
            )
            .await,
            200
        );
    }
    // What the creations sent, out of the way first.
    let settled = Instant::now();
    while settled.elapsed() < Duration::from_secs(30) {
        let seen = got.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(500)).await;
        if got.load(Ordering::Relaxed) == seen && seen > 0 {
            break;
        }
    }
    let base = got.load(Ordering::Relaxed);
    const CHANGES: usize = 300;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in 0..6 {
        let (http, urls, token) = (
            http.clone(),
            c.running()
                .iter()
                .map(|i| c.nodes[*i].url().to_string())
                .collect::<Vec<_>>(),
            c.token.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for k in (client..CHANGES).step_by(6) {
                let url = format!("{}/v2/endpoint/admin/h{}", urls[k % urls.len()], k % 10);
                let change = json!({"model": {"env": {"CHANGE": format!("c{k}")}}});
                let res = http.put(url).bearer_auth(&token).json(&change).send().await;
                assert!(res.is_ok_and(|r| r.status() == 200), "change {k}");
            }
        }));
    }
    for t in tasks {
        t.await.expect("client");
    }
    while got.load(Ordering::Relaxed) < base + CHANGES {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "deliveries stalled"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    CHANGES as f64 / started.elapsed().as_secs_f64()
}

/// wrk req/s through one server, and summed through three at once, to one replica.
async fn proxy(
    admin_url: &str,
    wrk: &std::path::Path,
    seconds: u64,
    http: &reqwest::Client,
) -> (f64, f64) {
    let c = Cluster::start(admin_url, 3, CONFIG).await;
    assert_eq!(
        post(http, &c, 0, "/v2/endpoint/admin", &engine("svc", 1)).await,
        200
    );
    for i in 0..3 {
        while !served(http, c.nodes[i].url()).await {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let url = |i: usize| format!("{}/endpoints/admin/svc/health", c.nodes[i].url());
    let one = bench::wrk(wrk, &url(0), 16, seconds, None, None).rps;
    let runs: Vec<_> = (0..3)
        .map(|i| {
            let (wrk, u) = (wrk.to_path_buf(), url(i));
            std::thread::spawn(move || bench::wrk(&wrk, &u, 16, seconds, None, None).rps)
        })
        .collect();
    let three = runs.into_iter().map(|t| t.join().expect("wrk")).sum();
    (one, three)
}
