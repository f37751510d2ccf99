//! Analytics benchmark (not a test): the proxy's throughput with the endpoints' series recorded
//! (`analytics.enabled = true`, the default) beside the same server with recording off, in one run.
//!
//! Two servers in this process, alike but for that setting, each with one endpoint of one replica of the
//! workspace's test engine answering `GET /status/200` at once. A fixed number of connections each send one
//! request after the other through one server's proxy for a turn; the servers take turns (the order turned
//! about each time, see `turn_order`), and each figure is the median of the turns. A turn spans several
//! 10-second buckets, so the recorder's writes fall inside it. At the end the recording server's series are
//! read back through the API: the requests it counted, beside those the load sent.
//!
//! Run: `cargo build --release -p switchyard-test-engine && cargo bench -p switchyard-server --bench analytics`.
//! `BENCH_SECONDS` sets a turn's time (default 20), `BENCH_TURNS` the turns per server (default 4),
//! `BENCH_CONNS` the connections (default 16).

// A benchmark or a test may unwrap: a failed one is a failed run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

#[path = "common/mod.rs"]
mod common;

use common::server::{
    bench_client, closed_loop, engine_bin, load_average, mid, pct, runtime, turn_order, Make,
    Server, NS,
};

const ENDPOINT: &str = "recorded";

/// One turn's figures: requests per second, p50 and p99 in milliseconds, failures.
struct Turn {
    rps: f64,
    p50: f64,
    p99: f64,
    errors: usize,
}

async fn turn(srv: &Server, conns: usize, seconds: f64) -> Turn {
    let url = srv.route_url(ENDPOINT, "/status/200");
    let http = srv.http.clone();
    let make: Make = Arc::new(move |_| http.get(&url));
    let (mut lat, secs, errors) = closed_loop(conns, seconds, &make).await;
    lat.sort();
    Turn {
        rps: lat.len() as f64 / secs,
        p50: pct(&lat, 0.5),
        p99: pct(&lat, 0.99),
        errors,
    }
}

async fn deploy(srv: &Server) {
    let engine = engine_bin().display().to_string();
    let spec = json!({
        "name": ENDPOINT, "type": "public",
        "provider": {"vendor": "aws", "region": "us-east-1"},
        "compute": {"accelerator": "cpu", "instanceType": "intel-icl", "instanceSize": "x2",
                    "scaling": {"minReplica": 1, "maxReplica": 1}},
        "model": {
            "framework": "custom", "repository": "bench/engine", "task": "feature-extraction",
            "image": {"custom": {"url": "local/test-engine", "healthRoute": "/health"}},
            "command": [engine, "--port", "{port}"],
        },
    });
    srv.admin(Method::POST, "", Some(spec)).await;
    srv.wait_for(ENDPOINT, "running", |ep| ep["status"]["state"] == "running")
        .await;
}

/// The requests the recording server's series hold for the endpoint over the last `minutes`.
async fn recorded(srv: &Server, minutes: i64) -> u64 {
    let from = chrono::Utc::now().timestamp() - minutes * 60;
    let url = format!(
        "{}/api/v1/endpoints/{NS}/{ENDPOINT}/analytics?from={from}&step=60",
        srv.url
    );
    let resp = srv.http.get(url).bearer_auth(&srv.token).send().await;
    let series: Value = resp.expect("analytics").json().await.expect("json");
    let points = series["points"].as_array().cloned().unwrap_or_default();
    points.iter().filter_map(|p| p["requests"].as_u64()).sum()
}

fn main() {
    let seconds: f64 = common::env_number("BENCH_SECONDS").unwrap_or(20.0);
    let turns: usize = common::env_number("BENCH_TURNS").unwrap_or(4);
    let conns: usize = common::env_number("BENCH_CONNS").unwrap_or(16);
    let http = bench_client(Some(Duration::from_secs(30)));
    let server_rt = runtime("server");
    let on = server_rt.block_on(Server::start(http.clone(), |c| c.analytics.enabled = true));
    let off = server_rt.block_on(Server::start(http, |c| c.analytics.enabled = false));
    let load_rt = runtime("load");
    load_rt.block_on(async {
        deploy(&on).await;
        deploy(&off).await;
        // Warm: connections open, the replicas' first requests served.
        turn(&on, conns, 1.0).await;
        turn(&off, conns, 1.0).await;
    });
    let servers = [("recording on", &on), ("recording off", &off)];
    let mut seen: [Vec<Turn>; 2] = Default::default();
    let mut sent = 0.0;
    for t in 0..turns {
        for i in turn_order(2, t) {
            let figures = load_rt.block_on(turn(servers[i].1, conns, seconds));
            if i == 0 {
                sent += figures.rps * seconds;
            }
            seen[i].push(figures);
        }
    }
    let minutes = ((seconds * turns as f64 * 2.0) / 60.0).ceil() as i64 + 2;
    // The last bucket is written once the clock leaves it.
    std::thread::sleep(Duration::from_secs(11));
    let counted = load_rt.block_on(recorded(&on, minutes));
    println!(
        "analytics: {conns} connections, {turns} turns of {seconds} s each (medians), load average {}",
        load_average()
    );
    println!(
        "{:<14} {:>10} {:>9} {:>9} {:>8} {:>7}",
        "scenario", "req/s", "p50 ms", "p99 ms", "of off", "errors"
    );
    let base = mid(seen[1].iter().map(|f| f.rps).collect());
    for (i, (name, _)) in servers.iter().enumerate() {
        let rps = mid(seen[i].iter().map(|f| f.rps).collect());
        let p50 = mid(seen[i].iter().map(|f| f.p50).collect());
        let p99 = mid(seen[i].iter().map(|f| f.p99).collect());
        let errors: usize = seen[i].iter().map(|f| f.errors).sum();
        println!(
            "{name:<14} {rps:>10.0} {p50:>9.2} {p99:>9.2} {:>7.1}% {errors:>7}",
            rps / base * 100.0
        );
    }
    let each: Vec<String> = seen
        .iter()
        .map(|s| {
            let v: Vec<String> = s.iter().map(|f| format!("{:.0}", f.rps)).collect();
            v.join(" ")
        })
        .collect();
    println!("turns (req/s): on [{}], off [{}]", each[0], each[1]);
    println!(
        "the recording server counted {counted} requests in its series; the turns sent about {sent:.0} (and the warm-up)"
    );
    on.stop(&server_rt);
    off.stop(&server_rt);
}
