//! Serving-proxy benchmark (not a test): the proxy against a direct call to the same replica, in one run.
//! Prints req/s, p50, p99 and CPU per request for each path, then the derived figures beside their
//! targets: added latency at 1 connection, throughput at 64 connections, the full feature path (auth +
//! CIDR + cache lookup + least connections) against the plain path, cache hits against the direct
//! replica, and the control plane's share of a cold start (0 → ready through Switchyard, minus the
//! engine's own start). The replica is the workspace's test engine, a real child process on loopback.
//! A raw TCP relay (bytes copied both ways, no HTTP) on the server's runtime is measured beside it: what a
//! hop costs on that runtime's shape (no floor: nginx as a proxy adds less); a blocking relay (a thread per
//! direction) shows, at one connection, what a hop costs without an event loop.
//!
//! Then the comparison an operator makes: an nginx replica (`return 200`) run by Switchyard as a custom
//! endpoint, wrk as the load generator at 1 and 64 connections, and in front of that same replica nginx as
//! a reverse proxy (`worker_processes auto`, upstream keep-alive) and as a caching proxy (`proxy_cache`),
//! beside Switchyard's plain path, full feature path and cache hits, measured in turns; each goal against
//! nginx printed with PASS/MISS. nginx and wrk come from Debian's packages (`nginx-light`, `wrk`), installed
//! by the bench when missing and it runs as root; else that comparison is skipped, saying so.
//!
//! Run: `cargo build --release -p switchyard-test-engine && cargo bench -p switchyard-server --bench proxy`.
//! Set `BENCH_SECONDS` to change the measured time per scenario of the engine part (default 2.0; the nginx
//! part takes turns of `WRK_SECONDS`); `BENCH_PART=nginx` (or `engine`) runs one of the two comparisons only;
//! `BENCH_BUSY_POLL_US` sets the server's `proxy.busy_poll_us` (0 measures it without busy polling).

// A benchmark or a test may unwrap: a failed one is a failed run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};

#[path = "common/mod.rs"]
mod common;

use common::server::{
    bench_client, closed_loop, engine_bin, load_average, mid, runtime, turn_order, Make, Server, NS,
};
use common::{free_port, tool, wrk, Wrk};

/// The request everywhere. The engine's `/echo` answers at once; its `/embed` holds each input in a tokio
/// sleep even at `--latency-ms 0`, and that timer's 1 ms granularity would swamp µs-sized figures.
const ROUTE: &str = "/echo";
const BODY: &str = r#"{"inputs":"x"}"#;
const COLD_RUNS: usize = 5;
/// Turns each scenario takes within its measured time.
const ROUNDS: usize = 8;

/// Numbers every request, so that a body made from it is never sent twice.
static SEQ: AtomicUsize = AtomicUsize::new(0);

/// A custom-image endpoint running the test engine, with `extra` merged into the spec.
fn spec(name: &str, engine: &Path, min_replica: u32, extra: Value) -> Value {
    let mut spec = json!({
        "name": name, "type": "public",
        "provider": {"vendor": "aws", "region": "us-east-1"},
        "compute": {"accelerator": "cpu", "instanceType": "intel-icl", "instanceSize": "x2",
                    "scaling": {"minReplica": min_replica, "maxReplica": 1}},
        "model": {
            "framework": "custom", "repository": "bench/engine", "task": "feature-extraction",
            "image": {"custom": {"url": "local/test-engine", "healthRoute": "/health"}},
            "command": [engine, "--port", "{port}", "--latency-ms", "0", "--capacity", "256"],
        },
    });
    for (k, v) in extra.as_object().expect("object") {
        spec[k] = v.clone();
    }
    spec
}

/// CPU seconds so far of the threads of process `pid` whose name starts with `comm`.
fn cpu_of(pid: &str, comm: &str) -> f64 {
    let read = |p: PathBuf| std::fs::read_to_string(p).unwrap_or_default();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"));
    let tasks = tasks.into_iter().flatten().flatten();
    let ours = tasks.filter(|t| read(t.path().join("comm")).starts_with(comm));
    // The first field of `schedstat`: nanoseconds on a CPU.
    let ns = ours.map(|t| read(t.path().join("schedstat")));
    let ns = ns.filter_map(|s| s.split(' ').next()?.parse::<f64>().ok());
    ns.sum::<f64>() / 1e9
}

impl Server {
    /// The pids in the replicas' pid files (named by replica id, `<endpoint>-<random>`) from `name`.
    fn replica_pids(&self, name: &str) -> Vec<String> {
        let dir = std::fs::read_dir(self.data_dir.join("replicas").join("pids"));
        let files = dir.into_iter().flatten().flatten();
        let files = files.filter(|f| f.file_name().to_string_lossy().starts_with(name));
        let pids = files.map(|f| std::fs::read_to_string(f.path()).unwrap_or_default());
        pids.map(|p| p.trim().to_string()).collect()
    }

    /// CPU seconds so far of the server's threads, of the load generator's, and of every replica.
    fn cpu(&self) -> [f64; 3] {
        let replicas = self.replica_pids("").iter().map(|p| cpu_of(p, "")).sum();
        // The server's: its runtime's threads and its data-plane workers' (`proxy-…`).
        let server = cpu_of("self", "server") + cpu_of("self", "proxy");
        [server, cpu_of("self", "load"), replicas]
    }
}

fn running(ep: &Value) -> bool {
    ep["status"]["state"] == "running" && ep["status"]["readyReplica"] == 1
}

/// What the loads of one scenario saw: the latency of each success, the time they ran, the failures,
/// and the CPU seconds spent meanwhile by the server, the load generator and the replicas.
#[derive(Default)]
struct Sample {
    lat: Vec<Duration>,
    seconds: f64,
    errors: usize,
    cpu: [f64; 3],
}

struct Figures {
    rps: f64,
    p50: Duration,
    p99: Duration,
}

/// `conns` connections sending `make(n)` in a closed loop for `seconds` (see [`closed_loop`]), into `into`.
async fn load(conns: usize, seconds: f64, make: &Make, into: &mut Sample) {
    let (lat, took, errors) = closed_loop(conns, seconds, make).await;
    into.lat.extend(lat);
    into.errors += errors;
    into.seconds += took;
}

/// Each scenario warmed up (connections open, caches filled), then all measured in turns, `ROUNDS`
/// slices each, so that whatever else the machine does weighs on every scenario alike; prints the rows.
async fn compare(
    srv: &Server,
    conns: usize,
    secs: f64,
    scenarios: &[(&str, &Make)],
) -> Vec<Figures> {
    let mut samples: Vec<Sample> = scenarios.iter().map(|_| Sample::default()).collect();
    for (_, make) in scenarios {
        load(conns, 0.2, make, &mut Sample::default()).await;
    }
    for _ in 0..ROUNDS {
        for ((_, make), sample) in scenarios.iter().zip(&mut samples) {
            let before = srv.cpu();
            load(conns, secs / ROUNDS as f64, make, sample).await;
            let after = srv.cpu();
            (0..3).for_each(|i| sample.cpu[i] += after[i] - before[i]);
        }
    }
    let rows = samples
        .into_iter()
        .zip(scenarios)
        .map(|(mut s, (name, _))| {
            s.lat.sort_unstable();
            let n = s.lat.len();
            let pct = |p: f64| s.lat[((n as f64 * p) as usize).min(n - 1)];
            let (rps, p50, p99) = (n as f64 / s.seconds, pct(0.5), pct(0.99));
            let cpu = s.cpu.map(|c| c * 1e6 / n as f64);
            let errors = common::errors_note(s.errors as u64);
            let (us50, us99, [proxy, client, engine]) = (us(p50), us(p99), cpu);
            print!("{name:<40} {conns:>3} {rps:>8.0} {us50:>8.1} {us99:>8.1}");
            println!("  {proxy:>7.1} {client:>7.1} {engine:>7.1}{errors}");
            Figures { rps, p50, p99 }
        });
    rows.collect()
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The `x-cache` header of one request, which must succeed.
async fn x_cache(make: &Make) -> String {
    let r = make(SEQ.fetch_add(1, Ordering::Relaxed)).send().await;
    let r = r.expect("probe");
    assert!(r.status().is_success(), "probe: {}", r.status());
    let cache = r.headers().get("x-cache").and_then(|v| v.to_str().ok());
    cache.unwrap_or("-").to_string()
}

fn median(v: Vec<Duration>) -> f64 {
    mid(v.into_iter().map(ms).collect())
}

/// The engine started by hand on a free port: spawn → `/health` answers 200 (polled every 2 ms).
async fn engine_start(http: &reqwest::Client, engine: &Path) -> Duration {
    let free = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr());
    let port = free.expect("free port").port().to_string();
    let url = format!("http://127.0.0.1:{port}/health");
    let t = Instant::now();
    let mut child = Command::new(engine)
        .args(["--port", &port, "--latency-ms", "0", "--capacity", "256"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the test engine");
    while !matches!(http.get(&url).send().await, Ok(r) if r.status().is_success()) {
        assert!(t.elapsed().as_secs() < 30, "the engine never answered");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let took = t.elapsed();
    let _ = child.kill();
    let _ = child.wait();
    took
}

/// `cold` scaled to zero (no replica process left), then one request held until a replica answers it.
async fn switchyard_start(srv: &Server) -> Duration {
    srv.admin(Method::POST, "/cold/scale-to-zero", None).await;
    srv.wait_for("cold", "scale to zero", |ep| {
        let status = &ep["status"];
        let zero = status["state"] == "scaledToZero" && status["readyReplica"] == 0;
        zero && srv.replica_pids("cold-").is_empty()
    })
    .await;
    let t = Instant::now();
    let req = srv.http.post(srv.route_url("cold", ROUTE)).body(BODY);
    let req = req.header("content-type", "application/json");
    let resp = req.header("x-scale-up-timeout", "30").send().await;
    let took = t.elapsed();
    assert_eq!(resp.expect("cold request").status(), 200, "cold request");
    srv.wait_for("cold", "running", running).await;
    took
}

/// The floor under any proxy: a TCP relay on the server's runtime that copies bytes both ways without
/// reading them (no HTTP, no routing). Whatever it adds over the direct call, the kernel and the scheduler
/// cost every proxy on this machine. Returns its URL for `ROUTE`.
fn relay(server: &tokio::runtime::Handle, to: String) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind relay");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("relay addr");
    server.spawn(async move {
        let listener = tokio::net::TcpListener::from_std(listener).expect("relay listener");
        while let Ok((mut inbound, _)) = listener.accept().await {
            let to = to.clone();
            tokio::spawn(async move {
                let _ = inbound.set_nodelay(true);
                if let Ok(mut out) = tokio::net::TcpStream::connect(&to).await {
                    let _ = out.set_nodelay(true);
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                }
            });
        }
    });
    format!("http://{addr}{ROUTE}")
}

/// A blocking relay: a thread per direction per connection, plain `read` and `write`, no event loop. At one
/// connection it shows what a hop costs on this machine without an async runtime's wake-ups (it is no design
/// for many connections). Its threads are named `server-…`, so their CPU counts as the proxy's.
fn blocking_relay(to: String) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind relay");
    let addr = listener.local_addr().expect("relay addr");
    let thread = || std::thread::Builder::new().name("server-relay".into());
    let accept = move || {
        for inbound in listener.incoming().flatten() {
            let Ok(out) = std::net::TcpStream::connect(&to) else {
                continue;
            };
            let _ = (inbound.set_nodelay(true), out.set_nodelay(true));
            let (Ok(inbound2), Ok(out2)) = (inbound.try_clone(), out.try_clone()) else {
                continue;
            };
            for (mut from, mut into) in [(inbound, out), (out2, inbound2)] {
                let _ = thread().spawn(move || {
                    let _ = std::io::copy(&mut from, &mut into);
                    let _ = into.shutdown(std::net::Shutdown::Write);
                });
            }
        }
    };
    thread().spawn(accept).expect("relay thread");
    format!("http://{addr}{ROUTE}")
}

async fn bench(srv: &Server, engine: &Path, secs: f64, server: tokio::runtime::Handle) {
    let full_features = json!({
        "type": "authenticated",
        "network": {"cidrBlock": true, "cidrList": ["127.0.0.0/8"]},
        "cacheHttpResponses": true,
        "experimentalFeatures": {"loadBalancer": "least_connections"},
    });
    let cached = json!({"cacheHttpResponses": true});
    // `cold` has a minimum of 0: at 1 the reconciler starts a scaled-to-zero endpoint again at once.
    let (plain_spec, cold_spec) = (json!({}), json!({}));
    let endpoints = [("plain", 1, plain_spec), ("full", 1, full_features)];
    let more = [("cached", 1, cached), ("cold", 0, cold_spec)];
    for (name, min, extra) in endpoints.into_iter().chain(more) {
        let spec = spec(name, engine, min, extra);
        srv.admin(Method::POST, "", Some(spec)).await;
    }
    for name in ["plain", "full", "cached"] {
        srv.wait_for(name, "running, 1 ready replica", running)
            .await;
    }
    // The replica's own address: the runtime gave it `PORT`, which the engine tells at `/env/PORT`.
    let env = format!("{}/endpoints/{NS}/plain/env/PORT", srv.url);
    let port = srv.http.get(env).send().await.expect("env").text().await;
    let port = port.expect("port").trim().to_string();
    let direct = format!("http://127.0.0.1:{port}{ROUTE}");
    let relayed = relay(&server, format!("127.0.0.1:{port}"));
    let blocking = blocking_relay(format!("127.0.0.1:{port}"));

    let post = |url: &str, token: Option<&str>, unique: bool| -> Make {
        let (http, url, token) = (srv.http.clone(), url.to_string(), token.map(str::to_string));
        Arc::new(move |n| {
            let req = http.post(&url).header("content-type", "application/json");
            let req = match &token {
                Some(t) => req.bearer_auth(t),
                None => req,
            };
            match unique {
                true => req.body(format!(r#"{{"inputs":"x{n}"}}"#)),
                false => req.body(BODY),
            }
        })
    };
    let direct = post(&direct, None, false);
    let relayed = post(&relayed, None, false);
    let blocking = post(&blocking, None, false);
    let plain = post(&srv.route_url("plain", ROUTE), None, false);
    let full = post(&srv.route_url("full", ROUTE), Some(&srv.token), true);
    let cached = post(&srv.route_url("cached", ROUTE), None, false);
    assert_eq!(x_cache(&full).await, "MISS", "full: new bodies miss");
    x_cache(&cached).await;
    assert_eq!(x_cache(&cached).await, "HIT", "cached: the same body hits");

    println!("\nProxy against the replica itself (test engine, POST {ROUTE}, {secs} s each)");
    println!("{:<75} CPU µs per request", "");
    let head = "con    req/s   p50 µs   p99 µs    proxy  client  engine";
    println!("{:<40} {head}", "scenario");
    let (base, plain_name) = ("direct to the replica (baseline)", "proxy, plain");
    let floor = "raw TCP relay on the server's runtime";
    let all = "proxy, auth+CIDR+cache miss+least conn";
    let threads = "blocking relay (thread per direction)";
    let one = [
        (base, &direct),
        (plain_name, &plain),
        (all, &full),
        (floor, &relayed),
        (threads, &blocking),
    ];
    let one = compare(srv, 1, secs, &one).await;
    let hits = "proxy, cache hits";
    let many = [
        (base, &direct),
        (plain_name, &plain),
        (all, &full),
        (hits, &cached),
        (floor, &relayed),
    ];
    let many = compare(srv, 64, secs, &many).await;

    let (mut own, mut through) = (Vec::new(), Vec::new());
    for _ in 0..COLD_RUNS {
        own.push(engine_start(&srv.http, engine).await);
        through.push(switchyard_start(srv).await);
    }
    println!("\nCold start, {COLD_RUNS} runs each (ms)");
    let alone = "engine alone: spawn → /health 200";
    let proxied = "Switchyard: scaled to zero → 200";
    for (name, runs) in [(alone, &own), (proxied, &through)] {
        let runs: Vec<_> = runs.iter().map(|d| format!("{:.1}", ms(*d))).collect();
        println!("{name:<40} {}", runs.join(", "));
    }

    let (own, through) = (median(own), median(through));
    let medians = format!("{own:.1} ms alone, {through:.1} ms through Switchyard");
    println!("{:<40} {medians}", "medians");

    println!("\nFigures (targets for a 2-core machine)");
    let added = |f: &Figures| (us(f.p50) - us(one[0].p50), us(f.p99) - us(one[0].p99));
    let ((add50, add99), (full50, _)) = (added(&one[1]), added(&one[2]));
    let (ratio, hits) = (many[1].rps / many[0].rps, many[3].rps / many[0].rps);
    let share = through - own;
    let figures = [
        ("added p50, 1 connection", add50, "µs", 40.0, true),
        ("added p99, 1 connection", add99, "µs", 100.0, true),
        ("req/s ÷ direct, 64 connections", ratio, "×", 0.5, false),
        (
            "full path's added p50, 1 conn",
            full50,
            "µs",
            full_allowance(add50),
            true,
        ),
        ("cache hits ÷ direct, 64 conns", hits, "×", 0.9, false),
        (
            "cold start: control plane's share",
            share,
            "ms",
            250.0,
            true,
        ),
    ];
    // The same figures for the relays (bytes copied, no HTTP; on the server's runtime, with its wake-ups:
    // no floor, since nginx as a proxy adds less), and what the proxy adds beyond a relay.
    let (relay50, relay99) = added(&one[3]);
    let floors = [
        ("relay", relay50, "µs", "added p50 of the raw TCP relay"),
        ("relay", relay99, "µs", "added p99 of the raw TCP relay"),
        (
            "relay",
            many[4].rps / many[0].rps,
            "×",
            "req/s ÷ direct of the raw TCP relay, 64 connections",
        ),
        (
            "blocking relay",
            added(&one[4]).0,
            "µs",
            "added p50 of the blocking relay, no event loop",
        ),
        (
            "proxy's own share",
            add50 - relay50,
            "µs",
            "added p50 of the plain path minus the relay's",
        ),
    ];
    for (name, value, unit, what) in floors {
        println!("{name:<40} {value:>10.2} {unit:<2}   ({what})");
    }
    // `at_most`: which side of the target passes.
    for (name, value, unit, target, at_most) in figures {
        let (op, word) = verdict(value, target, at_most);
        let target = format!("{op} {target:.1} {unit}");
        println!("{name:<40} {value:>10.2} {unit:<2}   target {target:<10} {word}");
    }
}

fn main() {
    let secs: f64 = common::env_number("BENCH_SECONDS").unwrap_or(2.0);
    let engine = engine_bin();
    let http = bench_client(None);
    let server_rt = runtime("server");
    let srv = server_rt.block_on(Server::start(http, |config| {
        if let Some(us) = common::env_number("BENCH_BUSY_POLL_US") {
            config.proxy.busy_poll_us = us;
        }
    }));
    // `BENCH_PART`: `engine` for the test-engine tables only, `nginx` for the side by side with nginx only.
    let part = std::env::var("BENCH_PART").unwrap_or_default();
    let load_rt = runtime("load");
    if part != "nginx" {
        load_rt.block_on(bench(&srv, &engine, secs, server_rt.handle().clone()));
    }
    if part != "engine" {
        load_rt.block_on(nginx_bench(&srv, server_rt.handle().clone()));
    }
    // A clean shutdown stops every replica.
    srv.stop(&server_rt);
}

// ---- nginx side by side ------------------------------------------------------------------------------
//
// The comparison an operator makes: an nginx replica answering 200 on every path, wrk as the load
// generator, and in front of that same replica nginx as a reverse proxy (`worker_processes auto`, upstream
// keep-alive; a second server block the same with `proxy_cache`) beside Switchyard. Each scenario is
// measured in turns, one wrk run of one second per turn, and its figures are the medians over the turns.

/// The nginx replica's configuration, `@PORT@` filled in by the replica's own command from `$PORT`.
/// `/port` tells the port (the proxy comparison needs the replica's address); every other path is 200.
const NGINX_REPLICA: &str = r#"worker_processes 1;
error_log nginx-error.log;
pid nginx.pid;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path tmp-body;
    proxy_temp_path tmp-proxy;
    fastcgi_temp_path tmp-fastcgi;
    uwsgi_temp_path tmp-uwsgi;
    scgi_temp_path tmp-scgi;
    keepalive_requests 1000000;
    server {
        listen 127.0.0.1:@PORT@;
        location = /port { return 200 "@PORT@"; }
        location / { return 200 "ok\n"; }
    }
}
"#;

/// nginx as a reverse proxy in front of the replica at `@UPSTREAM@`: plainly on `@PLAIN@`, with its own
/// response cache on `@CACHED@`.
const NGINX_PROXY: &str = r#"@USER@
worker_processes auto;
error_log @DIR@/error.log;
pid @DIR@/nginx.pid;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path @DIR@/tmp-body;
    proxy_temp_path @DIR@/tmp-proxy;
    fastcgi_temp_path @DIR@/tmp-fastcgi;
    uwsgi_temp_path @DIR@/tmp-uwsgi;
    scgi_temp_path @DIR@/tmp-scgi;
    proxy_cache_path @DIR@/cache keys_zone=hits:10m;
    keepalive_requests 1000000;
    upstream replica {
        server 127.0.0.1:@UPSTREAM@;
        keepalive 64;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:@PLAIN@;
        location / {
            proxy_pass http://replica;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
    server {
        listen 127.0.0.1:@CACHED@;
        location / {
            proxy_pass http://replica;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache hits;
            proxy_cache_valid 200 10m;
            add_header X-Cache $upstream_cache_status;
        }
    }
}
"#;

/// wrk's script for requests that differ (a new query string each, which a replica ignores and a cache
/// key covers), so that the full path's cache lookup misses. Every 1-connection row uses it alike.
const WRK_UNIQUE: &str = r#"local threads = 0
function setup(thread)
    threads = threads + 1
    thread:set("tid", threads)
end
local run = ""
function init(args)
    run = args[1] or ""
end
local n = 0
function request()
    n = n + 1
    return wrk.format(nil, wrk.path .. "?r=" .. run .. "&t=" .. tid .. "&n=" .. n)
end
"#;

/// Turns per scenario, of `WRK_SECONDS` each, taken in rotation so that a slow spell of the machine falls on
/// every scenario alike (each turn starting one scenario later, and every other turn backwards, so that none
/// mostly follows the same one: see [`turn_order`]);
/// each figure's median over the turns is reported. At one connection the scenarios are a few microseconds apart and a turn
/// varies by more than that, so there are more turns, and the latency goals are judged on the difference
/// from nginx within each turn (see [`paired`]). The throughput goal at 64 connections is judged likewise,
/// on the ratio to nginx's within each turn and in more pairs (see [`paired_ratio`], [`WRK_PAIRS_MANY`]).
const WRK_TURNS: usize = 5;
const WRK_TURNS_ONE: usize = 9;
const WRK_SECONDS: u64 = 2;
/// Pairs of nginx and Switchyard's plain path at one connection run after the turns, back to back, the
/// order alternating: the two are about 2 µs apart there, and 9 turns leave a median with a spread of about
/// 3 µs on this machine. The one-connection goals are judged on the turns and these pairs together.
const WRK_PAIRS_ONE: usize = 12;
/// The same at 64 connections, for the throughput goal: the two are within a few percent of each other,
/// and nginx's figure swings by more from one run to the next (its workers take new connections
/// unevenly), so a median of 5 turns, each after the others' turns, says little of which is ahead. These
/// pairs take turns of [`WRK_PAIR_SECONDS_MANY`]: a pair's ratio spreads as much in 1 s turns as in 2 s
/// ones on this machine (a standard deviation of 0.075 against 0.079, 24 and 12 pairs), since the
/// machine's slow spells last longer than a pair, so twice the pairs fit in the time and their median is
/// the steadier.
const WRK_PAIRS_MANY: usize = 40;
const WRK_PAIR_SECONDS_MANY: u64 = 1;

/// nginx's master process, stopped when dropped: `SIGTERM` (its fast shutdown, which stops its workers
/// too; a `SIGKILL` would leave them running), then `SIGKILL` after 5 s.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        // SAFETY: a signal to the child this bench started and has not reaped yet.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM) };
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if !matches!(self.0.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A scenario for wrk: its name, URL, extra header, whether its requests differ, and the CPU seconds so
/// far of the proxy under test.
struct Target {
    name: &'static str,
    url: String,
    header: Option<String>,
    unique: bool,
    cpu: fn(u32) -> f64,
    pid: u32,
}

/// `pairs` more runs of `secs` each of nginx and Switchyard's plain path (`targets[1]` and `targets[2]`)
/// at `conns` connections, back to back, the order alternating; each added to its target's `turns`.
fn more_pairs(
    bin: &Path,
    script: &Path,
    (conns, pairs, secs): (usize, usize, u64),
    targets: &[Target],
    turns: &mut [Vec<Wrk>],
) {
    for pair in 0..pairs {
        let order = if pair % 2 == 0 { [1, 2] } else { [2, 1] };
        for i in order {
            let t = &targets[i];
            let script = t.unique.then_some(script);
            turns[i].push(wrk(bin, &t.url, conns, secs, t.header.as_deref(), script));
        }
    }
}

/// Each target warmed up, then measured in `turns` turns; prints a row per target and returns their
/// medians, and each target's turns.
fn wrk_compare(
    bin: &Path,
    script: &Path,
    conns: usize,
    turns: usize,
    targets: &[Target],
) -> (Vec<Wrk>, Vec<Vec<Wrk>>) {
    let mut runs: Vec<Vec<Wrk>> = targets.iter().map(|_| Vec::new()).collect();
    let run = |t: &Target, secs| {
        let script = t.unique.then_some(script);
        let before = (t.cpu)(t.pid);
        let mut w = wrk(bin, &t.url, conns, secs, t.header.as_deref(), script);
        w.cpu = ((t.cpu)(t.pid) - before) * 1e6 / w.cpu;
        w
    };
    for t in targets {
        run(t, 1);
    }
    for turn in 0..turns {
        for i in turn_order(targets.len(), turn) {
            runs[i].push(run(&targets[i], WRK_SECONDS));
        }
    }
    let rows = targets.iter().zip(&runs).map(|(t, r)| {
        let m = Wrk {
            rps: mid(r.iter().map(|w| w.rps).collect()),
            p50: mid(r.iter().map(|w| w.p50).collect()),
            p99: mid(r.iter().map(|w| w.p99).collect()),
            cpu: mid(r.iter().map(|w| w.cpu).collect()),
            errors: r.iter().map(|w| w.errors).sum(),
        };
        let errors = common::errors_note(m.errors);
        let name = t.name;
        println!(
            "{name:<44} {conns:>3} {:>8.0} {:>8.1} {:>8.1} {:>9.1}{errors}",
            m.rps, m.p50, m.p99, m.cpu
        );
        m
    });
    (rows.collect(), runs)
}

/// How `ours` compares with `nginx`, pair by pair (both measured within each turn, or back to back, so a
/// slow spell of the machine touches both): the median of the differences `ours − nginx` of `figure`, and in
/// how many pairs `ours` was not above.
fn paired(ours: &[Wrk], nginx: &[Wrk], figure: fn(&Wrk) -> f64) -> (f64, usize) {
    let d: Vec<f64> = ours
        .iter()
        .zip(nginx)
        .map(|(o, n)| figure(o) - figure(n))
        .collect();
    let not_above = d.iter().filter(|d| **d <= 0.0).count();
    (mid(d), not_above)
}

/// [`paired`] for a figure that is to be at least nginx's: the median of `ours ÷ nginx`, and in how many
/// pairs `ours` was not below.
fn paired_ratio(ours: &[Wrk], nginx: &[Wrk], figure: fn(&Wrk) -> f64) -> (f64, usize) {
    let r: Vec<f64> = ours
        .iter()
        .zip(nginx)
        .map(|(o, n)| figure(o) / figure(n))
        .collect();
    let not_below = r.iter().filter(|r| **r >= 1.0).count();
    (mid(r), not_below)
}

/// CPU seconds so far of nginx's master `pid` and its workers.
fn nginx_cpu(pid: u32) -> f64 {
    let children = format!("/proc/{pid}/task/{pid}/children");
    let children = std::fs::read_to_string(children).unwrap_or_default();
    let workers = children.split_whitespace().map(|c| cpu_of(c, ""));
    cpu_of(&pid.to_string(), "") + workers.sum::<f64>()
}

async fn nginx_bench(srv: &Server, server: tokio::runtime::Handle) {
    let (Some(nginx), Some(wrk_bin)) = (tool("nginx", "nginx-light"), tool("wrk", "wrk")) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    // The replicas may run as another user: they read their configuration from here.
    let open = |p: &Path, mode| {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(mode))
    };
    open(dir.path(), 0o755).expect("chmod");
    let template = dir.path().join("replica.conf");
    std::fs::write(&template, NGINX_REPLICA).expect("replica conf");
    open(&template, 0o644).expect("chmod");
    let script = dir.path().join("unique.lua");
    std::fs::write(&script, WRK_UNIQUE).expect("wrk script");
    // The replica's command: its configuration with its port, in its own working directory, where it
    // writes its pid, log and temporary files.
    let command = format!(
        "sed \"s/@PORT@/$PORT/g\" {} > nginx.conf && exec {} -e stderr -p \"$PWD/\" -c \"$PWD/nginx.conf\" -g 'daemon off;'",
        template.display(),
        nginx.display()
    );
    let replica = |name: &str, extra: Value| {
        let mut s = spec(name, Path::new("/bin/sh"), 1, extra);
        s["model"]["command"] = json!(["/bin/sh", "-c", command]);
        s["model"]["image"]["custom"]["healthRoute"] = json!("/");
        s
    };
    let full_features = json!({
        "type": "authenticated",
        "network": {"cidrBlock": true, "cidrList": ["127.0.0.0/8"]},
        "cacheHttpResponses": true,
        "experimentalFeatures": {"loadBalancer": "least_connections"},
    });
    let cached = json!({"cacheHttpResponses": true});
    let endpoints = [
        ("ngx", json!({})),
        ("ngx-full", full_features),
        ("ngx-cached", cached),
    ];
    for (name, extra) in &endpoints {
        srv.admin(Method::POST, "", Some(replica(name, extra.clone())))
            .await;
    }
    for (name, _) in &endpoints {
        srv.wait_for(name, "running, 1 ready replica", running)
            .await;
    }
    let at = |name: &str| format!("{}/endpoints/{NS}/{name}/", srv.url);
    let port = srv.http.get(format!("{}port", at("ngx"))).send().await;
    let port = port.expect("port").text().await.expect("port");
    let port: u16 = port.trim().parse().expect("the replica's port");

    let (plain_port, cached_port) = (free_port(), free_port());
    let user = if std::fs::metadata("/proc/self")
        .is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
    {
        "user root;"
    } else {
        ""
    };
    let conf = NGINX_PROXY
        .replace("@USER@", user)
        .replace("@DIR@", &dir.path().display().to_string())
        .replace("@UPSTREAM@", &port.to_string())
        .replace("@PLAIN@", &plain_port.to_string())
        .replace("@CACHED@", &cached_port.to_string());
    let conf_path = dir.path().join("proxy.conf");
    std::fs::write(&conf_path, conf).expect("proxy conf");
    let child = Command::new(&nginx)
        .args(["-e", "stderr", "-p"])
        .arg(dir.path())
        .arg("-c")
        .arg(&conf_path)
        .args(["-g", "daemon off;"])
        .stdout(Stdio::null())
        .spawn()
        .expect("start nginx as a proxy");
    let proxy_child = Child(child);
    let proxy_child = &proxy_child.0;
    let proxied = format!("http://127.0.0.1:{plain_port}/");
    let nginx_cached = format!("http://127.0.0.1:{cached_port}/");
    let t = Instant::now();
    while !matches!(srv.http.get(&proxied).send().await, Ok(r) if r.status().is_success()) {
        assert!(
            t.elapsed().as_secs() < 10,
            "nginx as a proxy never answered"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let relayed = relay(&server, format!("127.0.0.1:{port}"));
    let relayed = relayed.trim_end_matches(ROUTE).to_string() + "/";
    let cache_of = |url: String| {
        let http = srv.http.clone();
        async move {
            let r = http.get(url).send().await.expect("probe");
            let v = r.headers().get("x-cache").and_then(|v| v.to_str().ok());
            v.unwrap_or("-").to_string()
        }
    };
    for url in [nginx_cached.clone(), at("ngx-cached")] {
        cache_of(url.clone()).await;
        assert_eq!(
            cache_of(url.clone()).await,
            "HIT",
            "{url}: the same request hits"
        );
    }

    let bearer = format!("Authorization: Bearer {}", srv.token);
    // The proxy's CPU: nginx's master and workers, or this process's server threads (the relay's too).
    let nginx_pid = proxy_child.id();
    let target = |name: &'static str, url: String, header: Option<&String>, unique| {
        let (cpu, pid): (fn(u32) -> f64, u32) = match name {
            n if n.starts_with("direct") => (|_| f64::NAN, 0),
            n if n.starts_with("nginx") => (nginx_cpu, nginx_pid),
            _ => (|_| cpu_of("self", "server") + cpu_of("self", "proxy"), 0),
        };
        Target {
            name,
            url,
            header: header.cloned(),
            unique,
            cpu,
            pid,
        }
    };
    let direct = format!("http://127.0.0.1:{port}/");
    let (wrk_bin, script) = (wrk_bin.as_path(), script.as_path());

    // `BENCH_HOLD=SECS`: the servers are held that long, their URLs printed, to be measured by hand.
    if let Some(secs) = common::env_number("BENCH_HOLD") {
        let (plain, full) = (at("ngx"), at("ngx-full"));
        println!("held for {secs} s: direct={direct} nginx={proxied} nginx-cached={nginx_cached} plain={plain} full={full} relay={relayed} (token in {})", srv.data_dir.join("admin-token").display());
        tokio::task::block_in_place(|| std::thread::sleep(Duration::from_secs(secs)));
    }
    let load = load_average();
    println!("\nSide by side with nginx (nginx replica answering 200, wrk GET /, {WRK_TURNS_ONE} turns of {WRK_SECONDS} s at 1 connection and {WRK_PAIRS_ONE} more pairs of nginx and plain, {WRK_TURNS} at 64 and {WRK_PAIRS_MANY} more pairs of {WRK_PAIR_SECONDS_MANY} s; medians; load average {load} before)");
    println!(
        "{:<44} con    req/s   p50 µs   p99 µs  CPU µs/req (proxy)",
        "scenario"
    );
    let one_targets = [
        target("direct to the nginx replica", direct.clone(), None, true),
        target(
            "nginx as a proxy (upstream keep-alive)",
            proxied.clone(),
            None,
            true,
        ),
        target("Switchyard, plain", at("ngx"), None, true),
        target(
            "Switchyard, auth+CIDR+cache miss+least conn",
            at("ngx-full"),
            Some(&bearer),
            true,
        ),
        target(
            "raw TCP relay on the server's runtime",
            relayed.clone(),
            None,
            true,
        ),
    ];
    let (one, mut one_turns) = tokio::task::block_in_place(|| {
        wrk_compare(wrk_bin, script, 1, WRK_TURNS_ONE, &one_targets)
    });
    tokio::task::block_in_place(|| {
        let pairs = (1, WRK_PAIRS_ONE, WRK_SECONDS);
        more_pairs(wrk_bin, script, pairs, &one_targets, &mut one_turns)
    });
    let many = [
        target("direct to the nginx replica", direct, None, false),
        target(
            "nginx as a proxy (upstream keep-alive)",
            proxied,
            None,
            false,
        ),
        target("Switchyard, plain", at("ngx"), None, false),
        target("nginx proxy_cache hits", nginx_cached, None, false),
        target("Switchyard, cache hits", at("ngx-cached"), None, false),
        target(
            "raw TCP relay on the server's runtime",
            relayed,
            None,
            false,
        ),
    ];
    let (many, many_turns) = tokio::task::block_in_place(|| {
        let (rows, mut turns) = wrk_compare(wrk_bin, script, 64, WRK_TURNS, &many);
        let pairs = (64, WRK_PAIRS_MANY, WRK_PAIR_SECONDS_MANY);
        more_pairs(wrk_bin, script, pairs, &many, &mut turns);
        (rows, turns)
    });
    println!("(load average {} after)", load_average());
    let rps = |w: &Wrk| w.rps;
    let (by_pair, ahead) = paired_ratio(&many_turns[2], &many_turns[1], rps);
    let pairs_many = many_turns[1].len();

    let added = |w: &Wrk| (w.p50 - one[0].p50, w.p99 - one[0].p99);
    let ((ngx50, ngx99), (sy50, sy99), (full50, _), (relay50, _)) = (
        added(&one[1]),
        added(&one[2]),
        added(&one[3]),
        added(&one[4]),
    );
    println!("\nGoals against nginx, in this run");
    let figures = [
        (
            "added p50, 1 connection, relay",
            relay50,
            "the raw TCP relay's, for reference".to_string(),
        ),
        (
            "added p50, 1 connection",
            sy50,
            format!("nginx's {ngx50:.1} µs (medians of the rows)"),
        ),
        (
            "added p99, 1 connection",
            sy99,
            format!("nginx's {ngx99:.1} µs (medians of the rows)"),
        ),
    ];
    for (name, value, note) in figures {
        println!("{name:<44} {value:>10.1} µs   ({note})");
    }
    // At one connection the verdict is on the difference within each turn: the same p50 or p99 less
    // nginx's, the direct figure dropping out.
    let (p50, p99) = (|w: &Wrk| w.p50, |w: &Wrk| w.p99);
    let ((d50, k50), (d99, k99)) = (
        paired(&one_turns[2], &one_turns[1], p50),
        paired(&one_turns[2], &one_turns[1], p99),
    );
    let pairs = one_turns[1].len();
    let goals = [
        (
            "p50 − nginx's, 1 conn, by pair",
            d50,
            0.0,
            "µs",
            true,
            format!("not above nginx in {k50} of {pairs} pairs"),
        ),
        (
            "p99 − nginx's, 1 conn, by pair",
            d99,
            0.0,
            "µs",
            true,
            format!("not above nginx in {k99} of {pairs} pairs"),
        ),
        (
            "req/s ÷ nginx's, 64 conn, by pair",
            by_pair,
            1.0,
            "",
            false,
            format!(
                "not below nginx in {ahead} of {pairs_many} pairs; medians of the rows {:.0} and nginx's {:.0}",
                many[2].rps, many[1].rps
            ),
        ),
        (
            "full path's added p50, 1 conn",
            full50,
            full_allowance(sy50),
            "µs",
            true,
            format!("(the plain path's {sy50:.1} µs, and a quarter of it)"),
        ),
        (
            "cache hits req/s, 64 connections",
            many[4].rps,
            many[3].rps,
            "",
            false,
            "(nginx's proxy_cache)".to_string(),
        ),
    ];
    for (name, value, target, unit, at_most, note) in goals {
        let (op, word) = verdict(value, target, at_most);
        let target = format!("{op} {target:.2} {unit}");
        println!("{name:<44} {value:>10.2} {unit:<2}   target {target:<22} {word}  {note}");
    }
}

/// The most the full feature path (auth + CIDR + cache miss + least connections) may add at one
/// connection, given the plain path's added p50: 1.25× that, or, when the proxy answers sooner than a
/// direct call (the plain path's figure below zero), that figure plus a quarter of its size (nearer zero).
fn full_allowance(plain: f64) -> f64 {
    plain + 0.25 * plain.abs()
}

/// The comparison a target asks for (`at_most`: the value may not exceed it) and whether it passed.
fn verdict(value: f64, target: f64, at_most: bool) -> (&'static str, &'static str) {
    let pass = if at_most {
        value <= target
    } else {
        value >= target
    };
    (
        if at_most { "≤" } else { "≥" },
        if pass { "PASS" } else { "MISS" },
    )
}
