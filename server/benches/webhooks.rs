//! Webhook delivery benchmark (not a test): a server on the embedded SQLite store delivering to a
//! receiver on loopback that answers 200 at once, every attempt persisted, 1 KiB payloads; beside it,
//! the same receiver driven directly by the load generator (wrk), which is the ceiling.
//!
//! - latency from an event's commit to its receipt: one event at a time on an idle server, then 1,000
//!   events/s offered (open loop: each commit starts on its tick whatever the others do);
//! - a backlog of 100,000 pending deliveries: the process's memory with it queued, then the rate at which
//!   it drains (the sustained deliveries/s);
//! - with `BENCH_PG=1`, the backlog again on PostgreSQL.
//!
//! Run: `cargo bench -p switchyard-server --bench webhooks`. `BENCH_BACKLOG` sets the backlog (default
//! 100000), `BENCH_SECONDS` the time of the offered-load run (default 5).

// A benchmark or a test may unwrap: a failed one is a failed run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use axum::routing::post;
use axum::Router;
use common::{tool, wrk, Postgres};
use serde_json::{json, Value};
use switchyard_server::model::event::EventKind;
use switchyard_server::store::{NewEvent, Store};
use switchyard_server::{Application, Config};

/// Arrival time of each `webhook-id`.
type Arrivals = Arc<Mutex<HashMap<String, Instant>>>;

/// The receiver, on a thread and runtime of its own (as another process would be).
fn receiver() -> (String, Arrivals) {
    let arrivals: Arrivals = Arc::default();
    let kept = arrivals.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let app = Router::new().route(
                "/hook",
                post(move |headers: HeaderMap, _body: axum::body::Bytes| {
                    let kept = kept.clone();
                    async move {
                        let at = Instant::now();
                        if let Some(id) = headers.get("webhook-id").and_then(|v| v.to_str().ok()) {
                            kept.lock()
                                .expect("lock")
                                .entry(id.to_string())
                                .or_insert(at);
                        }
                        "ok"
                    }
                }),
            );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
            tx.send(url).expect("send");
            axum::serve(listener, app).await.expect("serve");
        });
    });
    (rx.recv().expect("receiver url"), arrivals)
}

struct Server {
    store: Arc<dyn Store>,
    webhook: String,
    _dir: tempfile::TempDir,
}

/// A server delivering to `hook` for changes of the catalog item `bench/m`.
async fn start(hook: &str, store_url: Option<String>) -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.store.data_dir = Some(dir.path().to_path_buf());
    config.store.url = store_url;
    config.server.listen = "127.0.0.1:0".parse().expect("addr");
    config.outbound.allow = vec!["127.0.0.0/8".into()];
    let app = Application::build(&config).await.expect("build");
    let url = format!("http://{}", app.local_addr());
    let store = app.state().store.clone();
    tokio::spawn(app.run(std::future::pending()));
    let token = std::fs::read_to_string(dir.path().join("admin-token")).expect("token");
    let admin = switchyard_server::client::Client::new(&url, Some(token.trim().to_string()));
    let created: Value = admin
        .create_webhook(&json!({"watched": [{"type": "model", "name": "bench/m"}],
            "domains": ["repo"], "url": hook, "secret": "bench-secret"}))
        .await
        .expect("create webhook");
    let webhook = created["webhook"]["id"].as_str().expect("id").to_string();
    Server {
        store,
        webhook,
        _dir: dir,
    }
}

/// A 1 KiB payload.
fn payload() -> Value {
    json!({"event": {"action": "update", "scope": "repo.config"},
        "repo": {"type": "model", "name": "bench/m", "id": "bench/m", "private": false,
            "url": {"web": "http://x/bench/m", "api": "http://x/api/models/bench/m"}, "owner": {"id": "bench"}},
        "updatedConfig": {"note": "x".repeat(760)}})
}

fn event(hook: &Value) -> NewEvent {
    NewEvent {
        kind: EventKind::RepoUpdated,
        namespace: "bench".into(),
        subject: "bench/m".into(),
        payload: json!({}),
        hook: Some(hook.clone()),
    }
}

/// Commits `n` events in one unit of work; their ids and when the commit returned.
async fn commit(store: &dyn Store, hook: &Value, n: usize) -> (Vec<String>, Instant) {
    let mut unit = store.begin().await.expect("begin");
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        let e = unit
            .append_event(event(hook), chrono::Utc::now())
            .await
            .expect("append");
        ids.push(e.id);
    }
    unit.commit().await.expect("commit");
    (ids, Instant::now())
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p) as usize).min(sorted.len().saturating_sub(1));
    sorted.get(i).map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
}

/// Waits until every id arrived (or `limit` passes); the commit → receipt latencies, sorted, and how
/// many never came.
async fn latencies(
    arrivals: &Arrivals,
    sent: &[(String, Instant)],
    limit: Duration,
) -> (Vec<Duration>, usize) {
    let deadline = Instant::now() + limit;
    loop {
        let done = {
            let a = arrivals.lock().expect("lock");
            sent.iter().all(|(id, _)| a.contains_key(id))
        };
        if done || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let a = arrivals.lock().expect("lock");
    let mut lat: Vec<Duration> = sent
        .iter()
        .filter_map(|(id, at)| a.get(id).map(|r| r.saturating_duration_since(*at)))
        .collect();
    lat.sort();
    let lost = sent.len() - lat.len();
    (lat, lost)
}

fn rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "MISS"
    }
}

async fn idle(s: &Server, arrivals: &Arrivals) {
    let hook = payload();
    let mut sent = Vec::new();
    for _ in 0..100 {
        let (ids, at) = commit(s.store.as_ref(), &hook, 1).await;
        sent.extend(ids.into_iter().map(|id| (id, at)));
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let (lat, lost) = latencies(arrivals, &sent, Duration::from_secs(10)).await;
    println!(
        "one event at a time, idle server: p50 {:.2} ms, p99 {:.2} ms, lost {lost}   target p99 <= 20 ms: {}",
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        verdict(pct(&lat, 0.99) <= 20.0 && lost == 0)
    );
}

async fn offered(s: &Server, arrivals: &Arrivals, rate: u64, seconds: u64) {
    let hook = Arc::new(payload());
    let sent: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut tasks = Vec::new();
    let start = Instant::now();
    for _ in 0..rate * seconds {
        tick.tick().await;
        let (store, hook, sent) = (s.store.clone(), hook.clone(), sent.clone());
        tasks.push(tokio::spawn(async move {
            let (ids, at) = commit(store.as_ref(), &hook, 1).await;
            sent.lock()
                .expect("lock")
                .extend(ids.into_iter().map(|id| (id, at)));
        }));
    }
    for t in tasks {
        t.await.expect("commit task");
    }
    let offered_for = start.elapsed().as_secs_f64();
    let sent = sent.lock().expect("lock").clone();
    let (lat, lost) = latencies(arrivals, &sent, Duration::from_secs(30)).await;
    println!(
        "{rate} events/s offered for {seconds} s ({:.0}/s committed): p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms, lost {lost}   \
         target p50 <= 5 ms and p99 <= 50 ms: {}",
        sent.len() as f64 / offered_for,
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        pct(&lat, 1.0),
        verdict(pct(&lat, 0.5) <= 5.0 && pct(&lat, 0.99) <= 50.0 && lost == 0)
    );
}

/// Queues `n` deliveries while the webhook is held, then lets them go; the drain rate.
async fn backlog(name: &str, s: &Server, arrivals: &Arrivals, n: usize) -> f64 {
    let hook = payload();
    let webhook = s.webhook.clone();
    let far = chrono::Utc::now() + chrono::Duration::days(1);
    s.store.hold_webhook(&webhook, far).await.expect("hold");
    let fill = Instant::now();
    let mut ids = Vec::with_capacity(n);
    while ids.len() < n {
        let (batch, _) = commit(s.store.as_ref(), &hook, (n - ids.len()).min(1000)).await;
        ids.extend(batch);
    }
    let fill_s = fill.elapsed().as_secs_f64();
    let queued_rss = rss_mb();
    let go = Instant::now();
    s.store.release_webhook(&webhook).await.expect("release");
    s.store.outbox().notify_one();
    let mut peak = queued_rss;
    let deadline = Instant::now() + Duration::from_secs(600);
    // Counting the receiver's ids, not looking each one up: the receiver waits on that lock.
    let before = arrivals.lock().expect("lock").len();
    let done_at = loop {
        let got = arrivals.lock().expect("lock").len() - before;
        peak = peak.max(rss_mb());
        if got >= ids.len() || Instant::now() > deadline {
            break (Instant::now(), got);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let missing = {
        let a = arrivals.lock().expect("lock");
        ids.iter().filter(|id| !a.contains_key(*id)).count()
    };
    assert_eq!(missing, 0, "every queued event arrived");
    let secs = done_at.0.duration_since(go).as_secs_f64();
    let rate = done_at.1 as f64 / secs;
    let counts = s.store.delivery_counts().await.unwrap_or_default();
    println!(
        "{name}: {n} deliveries queued in {fill_s:.1} s ({:.0} events/s committed); process RSS {queued_rss:.0} MB queued, \
         {peak:.0} MB peak while draining   target <= 200 MB: {}",
        n as f64 / fill_s,
        verdict(peak <= 200.0)
    );
    println!(
        "{name}: drained {} of {n} in {secs:.1} s = {rate:.0} deliveries/s (each attempt persisted)   deliveries now {counts:?}",
        done_at.1
    );
    rate
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let env = |k: &str, d: u64| common::env_number(k).unwrap_or(d);
    let n = env("BENCH_BACKLOG", 100_000) as usize;
    let seconds = env("BENCH_SECONDS", 5);
    println!("Webhook delivery, one run: 2 cores shared by the server, the receiver and the load generator; 1 KiB payloads.");
    let (hook, arrivals) = receiver();
    if let Some(bin) = tool("wrk", "wrk") {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = dir.path().join("post.lua");
        let body = serde_json::to_string(&payload())
            .expect("json")
            .replace('"', "\\\"");
        std::fs::write(
            &script,
            format!("local h = {{[\"Content-Type\"] = \"application/json\", [\"webhook-id\"] = \"wrk\"}}\nrequest = function() return wrk.format(\"POST\", nil, h, \"{body}\") end\n"),
        )
        .expect("script");
        let w = tokio::task::block_in_place(|| wrk(&bin, &hook, 16, 3, None, Some(&script)));
        println!(
            "ceiling: the receiver driven directly by wrk (16 connections): {:.0} requests/s, p50 {:.2} ms, p99 {:.2} ms",
            w.rps,
            w.p50 / 1e3,
            w.p99 / 1e3
        );
    }
    let s = start(&hook, None).await;
    println!("\nSQLite (the default: a file in a temp dir, WAL, synchronous = normal)");
    idle(&s, &arrivals).await;
    offered(&s, &arrivals, 1000, seconds).await;
    let rate = backlog("SQLite", &s, &arrivals, n).await;
    println!(
        "sustained deliveries/s on SQLite: {rate:.0}   target >= 2,000: {}",
        verdict(rate >= 2000.0)
    );
    drop(s);
    if std::env::var("BENCH_PG").is_ok_and(|v| v == "1") {
        let pg = Postgres::start();
        let s = start(&hook, Some(pg.database().await)).await;
        println!("\nPostgreSQL 15 on loopback");
        let rate = backlog("PostgreSQL", &s, &arrivals, n).await;
        println!(
            "sustained deliveries/s on PostgreSQL: {rate:.0}   reference target >= 1,000: {}",
            verdict(rate >= 1000.0)
        );
    }
}
