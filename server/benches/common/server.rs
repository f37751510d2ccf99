//! A Switchyard server in the bench's own process, on a scratch data dir, with the test engine beside the
//! bench for its replicas: what the proxy and routing benchmarks start, call and stop alike.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::Value;
use switchyard_server::{Application, Config};

/// The namespace the benches deploy in (the admin's own).
pub const NS: &str = "admin";

/// The test engine beside this bench: `target/release/deps/<bench>-…` → `target/release/switchyard-test-engine`.
pub fn engine_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("bench exe");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let bin = dir.join("switchyard-test-engine");
    if !bin.exists() {
        let build = "cargo build --release -p switchyard-test-engine";
        eprintln!("{} is missing: run `{build}` first", bin.display());
        std::process::exit(2);
    }
    bin
}

pub struct Server {
    pub url: String,
    pub token: String,
    pub data_dir: PathBuf,
    pub http: reqwest::Client,
    stop: tokio::sync::oneshot::Sender<()>,
    done: tokio::task::JoinHandle<std::io::Result<switchyard_server::app::Stopped>>,
    _dir: tempfile::TempDir,
}

impl Server {
    /// A server on a scratch data dir and a free port, configured further by `configure`.
    pub async fn start(http: reqwest::Client, configure: impl FnOnce(&mut Config)) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = Config::default();
        config.store.data_dir = Some(dir.path().to_path_buf());
        config.server.listen = "127.0.0.1:0".parse().expect("addr");
        configure(&mut config);
        let app = Application::build(&config).await.expect("build");
        let url = format!("http://{}", app.local_addr());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let done = tokio::spawn(app.run(async {
            let _ = stopped.await;
        }));
        let token = std::fs::read_to_string(dir.path().join("admin-token")).expect("admin token");
        Server {
            url,
            token: token.trim().to_string(),
            data_dir: dir.path().to_path_buf(),
            http,
            stop,
            done,
            _dir: dir,
        }
    }

    /// Where `route` of endpoint `name` is served.
    pub fn route_url(&self, name: &str, route: &str) -> String {
        format!("{}/endpoints/{NS}/{name}{route}", self.url)
    }

    /// An API call on the namespace's endpoints (`path` after `/v2/endpoint/admin`), which must succeed.
    pub async fn admin(&self, method: Method, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/v2/endpoint/{NS}{path}", self.url);
        let mut req = self.http.request(method, url).bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("admin request");
        let status = resp.status();
        let body: Value = resp.json().await.expect("admin json");
        assert!(status.is_success(), "{path}: {status} {body}");
        body
    }

    /// Polls the endpoint until `ok` holds (bounded to 60 s).
    pub async fn wait_for(&self, name: &str, what: &str, ok: impl Fn(&Value) -> bool) {
        let path = format!("/{name}");
        for _ in 0..3000 {
            if ok(&self.admin(Method::GET, &path, None).await) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let status = &self.admin(Method::GET, &path, None).await["status"];
        panic!("{name}: {what} never happened: {status}");
    }

    /// Stops the server cleanly (every replica with it), on `rt`.
    pub fn stop(self, rt: &tokio::runtime::Runtime) {
        let _ = self.stop.send(());
        let wait = async { tokio::time::timeout(Duration::from_secs(30), self.done).await };
        let stopped = rt.block_on(wait).expect("server stops in time");
        stopped.expect("join").expect("serve");
    }
}

/// The load's HTTP client: keep-alive connections enough for every caller, no Nagle delay; `timeout` for
/// each request when given.
pub fn bench_client(timeout: Option<Duration>) -> reqwest::Client {
    let mut b = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .tcp_nodelay(true);
    if let Some(t) = timeout {
        b = b.timeout(t);
    }
    b.build().expect("client")
}

/// A runtime of two workers whose threads are named `name`: the server on one, as in its own process, and
/// the load generator on another, so that their CPU is told apart (and in a profile: `perf report --sort
/// comm`).
pub fn runtime(name: &str) -> tokio::runtime::Runtime {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    let b = b.worker_threads(2).thread_name(name).enable_all();
    b.build().expect("runtime")
}

/// The order of the `n` scenarios in turn `turn`: each turn starts one scenario later, and every other
/// turn runs backwards, so that of two scenarios next to each other neither mostly runs right after the
/// other. The second of two back-to-back runs measures lower (in the proxy bench at 64 connections,
/// Switchyard's ratio to nginx's was a median 0.99 run after nginx and 1.11 run before it, 6 pairs each way),
/// and with the order only rotated the plain path ran right after nginx in 4 of 5 turns.
pub fn turn_order(n: usize, turn: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).map(|i| (i + turn) % n).collect();
    if turn % 2 == 1 {
        order.reverse();
    }
    order
}

/// The `p` quantile of sorted latencies, in ms (0 for none).
pub fn pct(sorted: &[Duration], p: f64) -> f64 {
    let n = sorted.len();
    let at = ((n as f64 * p) as usize).min(n.saturating_sub(1));
    sorted.get(at).map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// The median of `v` (the upper one of an even count).
pub fn mid(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The 1-minute load average, to tell a run that overlapped other work.
pub fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().next().unwrap_or("?").to_string()
}

/// A request of a closed loop, made from its number (never the same twice in a run).
pub type Make = Arc<dyn Fn(usize) -> reqwest::RequestBuilder + Send + Sync>;

/// Numbers the closed loops' requests.
static SEQ: AtomicUsize = AtomicUsize::new(0);

/// `conns` tasks, each sending `make(n)` after the other on its keep-alive connection until `seconds` have
/// passed. Returns the latencies of the 2xx responses read in full (as they came), the seconds it ran, and
/// how many others there were.
pub async fn closed_loop(conns: usize, seconds: f64, make: &Make) -> (Vec<Duration>, f64, usize) {
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let tasks: Vec<_> = (0..conns)
        .map(|_| {
            let make = make.clone();
            tokio::spawn(async move {
                let (mut lat, mut errors) = (Vec::with_capacity(1 << 14), 0);
                while Instant::now() < deadline {
                    let t = Instant::now();
                    let ok = match make(SEQ.fetch_add(1, Ordering::Relaxed)).send().await {
                        Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
                        Err(_) => false,
                    };
                    match ok {
                        true => lat.push(t.elapsed()),
                        false => errors += 1,
                    }
                }
                (lat, errors)
            })
        })
        .collect();
    let (mut all, mut errors) = (Vec::new(), 0);
    for t in tasks {
        let (lat, e) = t.await.expect("load task");
        all.extend(lat);
        errors += e;
    }
    (all, start.elapsed().as_secs_f64(), errors)
}
