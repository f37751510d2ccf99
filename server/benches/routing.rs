//! Routing benchmark (not a test): the proxy's balancers side by side under a skewed load, in one run.
//!
//! Each balancer (`random`, the default and the baseline; `least_connections`; `least_load`) has an endpoint
//! of its own, all alike: four replicas of the workspace's test engine, each holding one of two slots per
//! input for 5 ms, so that inputs beyond its capacity queue and a replica's service time grows with its
//! queue. A fixed number of callers, each sending one request after the other through the proxy, mix heavy
//! requests (16 inputs in one `/embed` body, 1 in 8) with light ones (1 input): at random, some replicas
//! get long queues by chance. The balancers take turns, and each figure is the median of the turns: req/s,
//! p50 and p99 of the light requests and of all, and the queue seen (each replica's
//! `vllm:num_requests_waiting`, read directly every 10 ms: the mean over replicas and reads, and the
//! longest). `sticky` is left out: every caller here is on 127.0.0.1, so it would send all to one replica.
//!
//! Run: `cargo build --release -p switchyard-test-engine && cargo bench -p switchyard-server --bench routing`.
//! `BENCH_SECONDS` sets a turn's time (default 8), `BENCH_TURNS` the turns per balancer (default 3),
//! `BENCH_CALLERS` the callers (default 16), `BENCH_TICK_MS` the server's `runtime.tick_ms` (how often
//! `least_load`'s figures are read; default the server's own, 1000); `BENCH_PART=balancers` runs that part
//! only.

// A benchmark or a test may unwrap: a failed one is a failed run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};
use switchyard_server::Config;

#[path = "common/mod.rs"]
mod common;

use common::server::{
    bench_client, closed_loop, engine_bin, load_average, mid, pct, runtime, turn_order, Make,
    Server, NS,
};

/// The parts `BENCH_PART` may name; without it, all of them run.
const PARTS: [&str; 2] = ["balancers", "ext_proc"];

const REPLICAS: u32 = 4;
/// Each replica's engine: slots (inputs served at once) and the time one input holds a slot.
const CAPACITY: u32 = 2;
const LATENCY_MS: u64 = 5;
/// A heavy request's inputs, and how often one is sent (every `HEAVY_EVERY`th request); the rest have one.
const HEAVY_INPUTS: usize = 16;
const HEAVY_EVERY: usize = 8;
/// Callers that load one replica past the proxy, in the second run of the balancers.
const OUTSIDE_CALLERS: usize = 4;
/// How often the bench reads each replica's queue from its `/metrics`.
const QUEUE_READ_EVERY: Duration = Duration::from_millis(10);
/// The balancers compared, each with its endpoint (named as the balancer, `-` for `_`); the first is the
/// baseline.
const BALANCERS: [&str; 3] = ["random", "least_connections", "least_load"];

/// The `ext_proc` part's router tag, and what its processor puts on every answer's head it sees.
const ROUTER: &str = "test-ext-proc";
/// The `ext_proc` part's replicas per endpoint, its connection counts, and the time of one turn.
const EXT_REPLICAS: u32 = 2;
const EXT_CONNS: [usize; 2] = [1, 8];
const EXT_TURN_SECONDS: f64 = 1.0;
const EXT_BODY: &str = r#"{"inputs":"x"}"#;

/// Numbers every request: which are heavy follows from it.
static SEQ: AtomicUsize = AtomicUsize::new(0);

/// The bench's server: its runtime's pace (`BENCH_TICK_MS`), and the `ext_proc` part's router, the test
/// engine as an external processor.
fn configure(config: &mut Config) {
    if let Some(ms) = common::env_number("BENCH_TICK_MS") {
        config.runtime.tick_ms = ms;
    }
    let args = [
        "--port",
        "{port}",
        "--ext-proc",
        "--grpc-port",
        "{grpc_port}",
    ];
    let engine = engine_bin().to_string_lossy().into_owned();
    let command = std::iter::once(engine).chain(args.map(String::from));
    config.runtime.routers.insert(
        ROUTER.into(),
        switchyard_server::config::Launcher {
            command: command.collect(),
            ..Default::default()
        },
    );
}

impl Server {
    /// The replicas' own addresses, as they tell them (`x-replica-address`) answering through the proxy.
    async fn replica_addresses(&self, name: &str, count: usize) -> Vec<String> {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..1000 {
            let r = self.http.post(self.route_url(name, "/echo")).body("x");
            let r = r.send().await.expect("echo");
            let address = r.headers().get("x-replica-address").expect("address");
            seen.insert(address.to_str().expect("address").to_string());
            if seen.len() == count {
                return seen.into_iter().collect();
            }
        }
        panic!("{name}: {count} replicas never answered: {seen:?}");
    }
}

/// An endpoint of `replicas` replicas of the test engine (run with `args` besides its port), balanced by
/// `balancer`.
fn engine_spec(name: &str, engine: &Path, replicas: u32, args: &[&str], balancer: &str) -> Value {
    let mut command = vec![
        engine.display().to_string(),
        "--port".into(),
        "{port}".into(),
    ];
    command.extend(args.iter().map(|a| a.to_string()));
    json!({
        "name": name, "type": "public",
        "provider": {"vendor": "aws", "region": "us-east-1"},
        "compute": {"accelerator": "cpu", "instanceType": "intel-icl", "instanceSize": "x2",
                    "scaling": {"minReplica": replicas, "maxReplica": replicas}},
        "model": {
            "framework": "custom", "repository": "bench/engine", "task": "feature-extraction",
            "image": {"custom": {"url": "local/test-engine", "healthRoute": "/health"}},
            "command": command,
        },
        "experimentalFeatures": {"loadBalancer": balancer},
    })
}

/// An endpoint of `REPLICAS` replicas of the test engine, balanced by `balancer`.
fn spec(name: &str, engine: &Path, balancer: &str) -> Value {
    let (capacity, latency) = (CAPACITY.to_string(), LATENCY_MS.to_string());
    let args = ["--latency-ms", &latency, "--capacity", &capacity];
    engine_spec(name, engine, REPLICAS, &args, balancer)
}

fn all_ready(ep: &Value) -> bool {
    ep["status"]["state"] == "running" && ep["status"]["readyReplica"] == REPLICAS
}

/// What one balancer's turn saw: each success's latency (light ones apart too), its time, its failures, and
/// each read of a replica's queue.
#[derive(Default)]
struct Turn {
    light: Vec<Duration>,
    all: Vec<Duration>,
    seconds: f64,
    errors: usize,
    queues: Vec<f64>,
}

impl Turn {
    fn rps(&self) -> f64 {
        self.all.len() as f64 / self.seconds
    }
}

/// The requests waiting in the engine at `address` (`vllm:num_requests_waiting`), when it answers.
async fn queue_of(http: &reqwest::Client, address: &str) -> Option<f64> {
    let r = http.get(format!("http://{address}/metrics")).send().await;
    let text = r.ok()?.text().await.ok()?;
    let value = text
        .lines()
        .find_map(|l| l.strip_prefix("vllm:num_requests_waiting "))?;
    value.trim().parse().ok()
}

/// `callers` tasks, each sending one request after the other through the proxy to `url` for `seconds`
/// (every `HEAVY_EVERY`th of all a heavy one), while another reads the replicas' queues. Only 2xx responses
/// read in full count; anything else is an error.
async fn turn(
    http: &reqwest::Client,
    url: &str,
    replicas: &[String],
    (callers, outside): (usize, usize),
    seconds: f64,
) -> Turn {
    let light = json!({"inputs": "x"}).to_string();
    let heavy = json!({"inputs": vec!["x"; HEAVY_INPUTS]}).to_string();
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    // Load the proxy does not see: heavy requests straight to the first replica (another server's
    // callers, or a client that reaches the replica another way), not counted in the figures.
    let beside: Vec<_> = (0..outside)
        .map(|_| {
            let (http, heavy) = (http.clone(), heavy.clone());
            let url = format!("http://{}/embed", replicas[0]);
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    let req = http.post(&url).header("content-type", "application/json");
                    let _ = req.body(heavy.clone()).send().await;
                }
            })
        })
        .collect();
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let (http, url) = (http.clone(), url.to_string());
            let (light, heavy) = (light.clone(), heavy.clone());
            tokio::spawn(async move {
                let mut seen = Vec::with_capacity(4096);
                let mut errors = 0;
                while Instant::now() < deadline {
                    let is_heavy = SEQ
                        .fetch_add(1, Ordering::Relaxed)
                        .is_multiple_of(HEAVY_EVERY);
                    let body = if is_heavy { &heavy } else { &light };
                    let req = http.post(&url).header("content-type", "application/json");
                    let t = Instant::now();
                    let ok = match req.body(body.clone()).send().await {
                        Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
                        Err(_) => false,
                    };
                    match ok {
                        true => seen.push((is_heavy, t.elapsed())),
                        false => errors += 1,
                    }
                }
                (seen, errors)
            })
        })
        .collect();
    let reader = {
        let (http, replicas) = (http.clone(), replicas.to_vec());
        tokio::spawn(async move {
            let mut queues = Vec::new();
            while Instant::now() < deadline {
                for address in &replicas {
                    queues.extend(queue_of(&http, address).await);
                }
                tokio::time::sleep(QUEUE_READ_EVERY).await;
            }
            queues
        })
    };
    let mut out = Turn::default();
    for t in tasks {
        let (seen, errors) = t.await.expect("caller");
        for (is_heavy, took) in seen {
            if !is_heavy {
                out.light.push(took);
            }
            out.all.push(took);
        }
        out.errors += errors;
    }
    out.seconds = start.elapsed().as_secs_f64();
    out.queues = reader.await.expect("queue reader");
    for b in beside {
        let _ = b.await;
    }
    out.light.sort_unstable();
    out.all.sort_unstable();
    out
}

/// A balancer's row: the medians of its turns.
struct Row {
    requests: usize,
    errors: usize,
    rps: f64,
    light50: f64,
    light99: f64,
    all50: f64,
    all99: f64,
    queue_mean: f64,
    queue_max: f64,
}

fn row_of(turns: &[Turn]) -> Row {
    let median = |f: &dyn Fn(&Turn) -> f64| mid(turns.iter().map(f).collect());
    let mean = |q: &[f64]| q.iter().sum::<f64>() / q.len().max(1) as f64;
    let longest = |q: &[f64]| q.iter().copied().fold(0.0, f64::max);
    Row {
        requests: turns.iter().map(|t| t.all.len()).sum(),
        errors: turns.iter().map(|t| t.errors).sum(),
        rps: median(&Turn::rps),
        light50: median(&|t| pct(&t.light, 0.50)),
        light99: median(&|t| pct(&t.light, 0.99)),
        all50: median(&|t| pct(&t.all, 0.50)),
        all99: median(&|t| pct(&t.all, 0.99)),
        queue_mean: median(&|t| mean(&t.queues)),
        queue_max: median(&|t| longest(&t.queues)),
    }
}

/// The balancer with the least `figure`, and that figure beside the baseline's (the first row).
fn best(rows: &[Row], figure: fn(&Row) -> f64) -> String {
    let (i, row) = rows
        .iter()
        .enumerate()
        .min_by(|a, b| figure(a.1).total_cmp(&figure(b.1)))
        .expect("rows");
    let (value, base) = (figure(row), figure(&rows[0]));
    match i {
        0 => format!("random, the baseline ({value:.1} ms)"),
        _ => format!(
            "{} ({value:.1} ms, {:.2}× random's {base:.1} ms)",
            BALANCERS[i],
            value / base
        ),
    }
}

async fn balancers(srv: &Server, engine: &Path) {
    let seconds: f64 = common::env_number("BENCH_SECONDS").unwrap_or(8.0);
    let turns: usize = common::env_number("BENCH_TURNS").unwrap_or(3).max(1);
    let callers: usize = common::env_number("BENCH_CALLERS").unwrap_or(16).max(1);
    let name = |balancer: &str| balancer.replace('_', "-");
    for balancer in BALANCERS {
        let spec = spec(&name(balancer), engine, balancer);
        srv.admin(Method::POST, "", Some(spec)).await;
    }
    let mut targets = Vec::new();
    for balancer in BALANCERS {
        let name = name(balancer);
        srv.wait_for(&name, "running, all replicas ready", all_ready)
            .await;
        let replicas = srv.replica_addresses(&name, REPLICAS as usize).await;
        targets.push((srv.route_url(&name, "/embed"), replicas));
    }
    // Warm-up: connections open, and `least_load` has its engines' figures (read once a tick, whatever the
    // traffic, so they stay fresh through the other balancers' turns).
    for (url, replicas) in &targets {
        turn(&srv.http, url, replicas, (callers, 0), 1.0).await;
    }
    for outside in [0, OUTSIDE_CALLERS] {
        let mut runs: Vec<Vec<Turn>> = BALANCERS.iter().map(|_| Vec::new()).collect();
        let load = load_average();
        for t in 0..turns {
            for i in turn_order(BALANCERS.len(), t) {
                let (url, replicas) = &targets[i];
                let load = (callers, outside);
                runs[i].push(turn(&srv.http, url, replicas, load, seconds).await);
            }
        }
        let beside = match outside {
            0 => String::new(),
            n => format!(
                "; beside it, {n} callers send {HEAVY_INPUTS}-input requests straight to one replica, \
                 past the proxy"
            ),
        };
        println!(
            "\nBalancers under a skewed load ({REPLICAS} replicas of the test engine, {CAPACITY} slots each, \
             {LATENCY_MS} ms per input; {callers} callers, 1 request in {HEAVY_EVERY} with {HEAVY_INPUTS} inputs, \
             the rest with 1{beside}; {turns} turns of {seconds} s per balancer; load average {load} before, {} after)",
            load_average()
        );
        report(&runs);
    }
}

/// The balancers' table, turn by turn p99s, and which was best.
fn report(runs: &[Vec<Turn>]) {
    println!("requests: summed over the turns; every other figure: the median of the turns (ms; queue: requests waiting in a replica's engine)");
    println!(
        "{:<18} {:>8} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "balancer",
        "requests",
        "req/s",
        "light p50",
        "light p99",
        "all p50",
        "all p99",
        "queue avg",
        "queue max"
    );
    let rows: Vec<Row> = runs.iter().map(|r| row_of(r)).collect();
    for (balancer, r) in BALANCERS.iter().zip(&rows) {
        let errors = common::errors_note(r.errors as u64);
        let base = if *balancer == BALANCERS[0] {
            "  (baseline)"
        } else {
            ""
        };
        println!(
            "{balancer:<18} {:>8} {:>7.0} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.2} {:>9.0}{base}{errors}",
            r.requests, r.rps, r.light50, r.light99, r.all50, r.all99, r.queue_mean, r.queue_max
        );
    }
    println!("\np99 of all requests, turn by turn (ms)");
    for (balancer, turns) in BALANCERS.iter().zip(runs) {
        let each: Vec<String> = turns
            .iter()
            .map(|t| format!("{:.1}", pct(&t.all, 0.99)))
            .collect();
        println!("{balancer:<18} {}", each.join(", "));
    }
    println!(
        "\nBest on p99, all requests:   {}",
        best(&rows, |r| r.all99)
    );
    println!(
        "Best on p99, light requests: {}",
        best(&rows, |r| r.light99)
    );
}

/// An endpoint of `EXT_REPLICAS` test-engine replicas with no inference time, routed by the `ROUTER`
/// processor when `routed`, else by `random`.
fn ext_spec(name: &str, engine: &Path, routed: bool) -> Value {
    let mut spec = engine_spec(name, engine, EXT_REPLICAS, &["--latency-ms", "0"], "random");
    if routed {
        spec["customRouter"] = json!({"tag": ROUTER, "protocol": "extProc", "env": {}});
    }
    spec
}

/// The counters of `/metrics` for `endpoint` that tell who chose its replicas: picks by the router, picks by
/// the balancer when the router failed or named none (fallback), and the router's failures (all reasons).
async fn router_counts(srv: &Server, endpoint: &str) -> [u64; 3] {
    let r = srv.http.get(format!("{}/metrics", srv.url));
    let text = r.bearer_auth(&srv.token).send().await.expect("metrics");
    let text = text.text().await.expect("metrics text");
    let labels = format!("{{namespace=\"{NS}\",endpoint=\"{endpoint}\",");
    let sum = |name: &str, extra: &str| -> u64 {
        let prefix = format!("{name}{labels}{extra}");
        text.lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .filter_map(|rest| rest.rsplit(' ').next()?.trim().parse::<u64>().ok())
            .sum()
    };
    let picks = "switchyard_proxy_picks_total";
    [
        sum(picks, "by=\"router\""),
        sum(picks, "by=\"fallback\""),
        sum("switchyard_proxy_router_failures_total", "why="),
    ]
}

/// One `POST /echo` with `x-pick`, which must succeed: its answer's head.
async fn echo_head(http: &reqwest::Client, url: &str, pick: usize) -> reqwest::header::HeaderMap {
    let req = http.post(url).header("x-pick", pick.to_string());
    let r = req.body(EXT_BODY).send().await.expect("echo");
    assert!(r.status().is_success(), "{url}: {}", r.status());
    let head = r.headers().clone();
    r.bytes().await.expect("echo body");
    head
}

fn field<'h>(h: &'h reqwest::header::HeaderMap, name: &str) -> &'h str {
    h.get(name).map_or("", |v| v.to_str().unwrap_or(""))
}

/// One `ext_proc` turn: the sorted latencies of the successes, the seconds it ran, the failures.
type EchoTurn = (Vec<Duration>, f64, usize);

/// `conns` tasks, each sending `POST /echo` (with `x-pick` alternating between the replicas) after the
/// other to `url` for `seconds`: the sorted latencies of the 2xx answers read in full, the time, the rest.
async fn echo_turn(http: &reqwest::Client, url: &str, conns: usize, seconds: f64) -> EchoTurn {
    let (http, url) = (http.clone(), url.to_string());
    let make: Make = Arc::new(move |n| {
        let pick = (n % EXT_REPLICAS as usize).to_string();
        let req = http.post(&url).header("x-pick", pick);
        req.header("content-type", "application/json")
            .body(EXT_BODY)
    });
    let (mut all, took, errors) = closed_loop(conns, seconds, &make).await;
    all.sort_unstable();
    (all, took, errors)
}

fn us(sorted: &[Duration], p: f64) -> f64 {
    pct(sorted, p) * 1e3
}

/// Fails when the processor did not name the replica of every routed request (the figures would not be its).
async fn ext_proc(srv: &Server, engine: &Path) -> Result<(), String> {
    let turns: usize = common::env_number("BENCH_EXT_TURNS").unwrap_or(10).max(1);
    let (plain, routed) = ("echo-plain", "echo-ext-proc");
    srv.admin(Method::POST, "", Some(ext_spec(plain, engine, false)))
        .await;
    srv.admin(Method::POST, "", Some(ext_spec(routed, engine, true)))
        .await;
    let ready = |ep: &Value| {
        ep["status"]["state"] == "running" && ep["status"]["readyReplica"] == EXT_REPLICAS
    };
    for name in [plain, routed] {
        srv.wait_for(name, "running, all replicas ready", ready)
            .await;
    }
    let replicas = srv.replica_addresses(plain, EXT_REPLICAS as usize).await;
    let direct = format!("http://{}/echo", replicas[0]);
    let (plain_url, routed_url) = (
        srv.route_url(plain, "/echo"),
        srv.route_url(routed, "/echo"),
    );

    // The processor learns the replicas from the runtime: until it has, it names none. Wait until it names
    // each one, as the replica it reached tells (`/seen` returns the request the replica got).
    let mut named = Vec::new();
    for pick in 0..EXT_REPLICAS as usize {
        let url = srv.route_url(routed, "/seen/x");
        let mut to = None;
        for _ in 0..400 {
            let r = srv.http.get(&url).header("x-pick", pick.to_string());
            let r = r.send().await.expect("seen");
            let address = field(r.headers(), "x-replica-address").to_string();
            let seen: Value = r.json().await.unwrap_or_default();
            let headers = &seen["headers"];
            let destination = headers["x-gateway-destination-endpoint"].as_str();
            if headers["x-processed"] == ROUTER && destination == Some(address.as_str()) {
                to = Some(address);
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let what = "the extProc router never named replica";
        named.push(to.ok_or(format!(
            "{what} {pick} of {routed} (is its sidecar running?)"
        ))?);
    }
    assert_ne!(named[0], named[1], "x-pick 0 and 1 reach two replicas");

    let scenarios = [
        ("direct to a replica (floor)", &direct),
        ("proxy, plain (random)", &plain_url),
        ("proxy, extProc router", &routed_url),
    ];
    // Warm-up: connections open at the highest count, each path run once.
    for (_, url) in scenarios {
        echo_turn(&srv.http, url, EXT_CONNS[1], 0.3).await;
    }
    let load = load_average();
    let before = router_counts(srv, routed).await;
    // Per connection count and scenario: each turn's (latencies, seconds, errors).
    type Runs = Vec<Vec<EchoTurn>>;
    let mut runs: Vec<Runs> = EXT_CONNS
        .iter()
        .map(|_| scenarios.iter().map(|_| Vec::new()).collect())
        .collect();
    for t in 0..turns {
        for (c, conns) in EXT_CONNS.iter().enumerate() {
            for i in turn_order(scenarios.len(), t) {
                let url = scenarios[i].1;
                runs[c][i].push(echo_turn(&srv.http, url, *conns, EXT_TURN_SECONDS).await);
            }
        }
    }
    let after = router_counts(srv, routed).await;
    // A sample after the turns: the processor saw the answer's head too.
    let head = echo_head(&srv.http, &routed_url, 0).await;
    let seen = field(&head, "x-response-seen").to_string();

    let routed_ok: usize = runs.iter().flat_map(|r| &r[2]).map(|t| t.0.len()).sum();
    let [by_router, fallback, failures] = [0, 1, 2].map(|i| after[i] - before[i]);
    println!(
        "\nextProc router beside the plain path (POST /echo, test engine with no inference time, \
         {EXT_REPLICAS} replicas per endpoint; {turns} turns of {EXT_TURN_SECONDS} s per scenario and \
         connection count; load average {load} before, {} after)",
        load_average()
    );
    println!("every figure: the median of the turns; added: routed minus plain within each turn, then the median");
    println!(
        "{:<30} {:>3} {:>8} {:>8} {:>8}",
        "scenario", "con", "req/s", "p50 µs", "p99 µs"
    );
    for (c, conns) in EXT_CONNS.iter().enumerate() {
        for ((name, _), turns) in scenarios.iter().zip(&runs[c]) {
            let median = |f: &dyn Fn(&EchoTurn) -> f64| mid(turns.iter().map(f).collect());
            let rps = median(&|(lat, s, _)| lat.len() as f64 / s);
            let p50 = median(&|(lat, _, _)| us(lat, 0.50));
            let p99 = median(&|(lat, _, _)| us(lat, 0.99));
            let errors: usize = turns.iter().map(|t| t.2).sum();
            let errors = common::errors_note(errors as u64);
            println!("{name:<30} {conns:>3} {rps:>8.0} {p50:>8.1} {p99:>8.1}{errors}");
        }
    }
    println!();
    for (c, conns) in EXT_CONNS.iter().enumerate() {
        let added = |a: usize, b: usize, p: f64| {
            let each = runs[c][a].iter().zip(&runs[c][b]);
            mid(each.map(|(x, y)| us(&x.0, p) - us(&y.0, p)).collect())
        };
        let ratio = {
            let each = runs[c][2].iter().zip(&runs[c][1]);
            mid(each
                .map(|(x, y)| (x.0.len() as f64 / x.1) / (y.0.len() as f64 / y.1))
                .collect())
        };
        println!(
            "{conns} connection(s): extProc adds {:.1} µs at p50, {:.1} µs at p99 over the plain path \
             (req/s {ratio:.2}× plain's); the plain path adds {:.1} and {:.1} µs over the direct call",
            added(2, 1, 0.50),
            added(2, 1, 0.99),
            added(1, 0, 0.50),
            added(1, 0, 0.99),
        );
    }
    println!(
        "\nrouted requests answered: {routed_ok}; picks by the router: {by_router}, by the balancer after the \
         router (fallback): {fallback}; router failures: {failures}; a sample's x-response-seen: {}",
        if seen.is_empty() { "(none)" } else { &seen }
    );
    if fallback > 0 || failures > 0 || (by_router as usize) < routed_ok || seen != ROUTER {
        return Err(
            "the extProc router did not decide every routed request: the figures above are \
                    not the processor's"
                .into(),
        );
    }
    Ok(())
}

fn main() {
    let part = std::env::var("BENCH_PART").unwrap_or_default();
    assert!(
        part.is_empty() || PARTS.contains(&part.as_str()),
        "BENCH_PART={part}: one of {PARTS:?}, or unset for all"
    );
    let wanted = |name: &str| part.is_empty() || part == name;
    let engine = engine_bin();
    let http = bench_client(Some(Duration::from_secs(30)));
    let server_rt = runtime("server");
    let srv = server_rt.block_on(Server::start(http, configure));
    let load_rt = runtime("load");
    if wanted("balancers") {
        load_rt.block_on(balancers(&srv, &engine));
    }
    let mut failed = None;
    if wanted("ext_proc") {
        failed = load_rt.block_on(ext_proc(&srv, &engine)).err();
    }
    // A clean shutdown stops every replica.
    srv.stop(&server_rt);
    if let Some(why) = failed {
        eprintln!("{why}");
        std::process::exit(1);
    }
}
