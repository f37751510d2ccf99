//! What the HTTP benchmarks share: a closed-loop load of `conns` connections for a while, and the
//! rows they print (req/s, p50, p99, and the share of a baseline measured in the same run).

#![allow(dead_code)]

pub mod server;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct Figures {
    pub rps: f64,
    pub p50: Duration,
    pub p99: Duration,
    pub errors: usize,
}

/// Runs `conns` loops for the scenario's time, each sending the request `make(i)` builds; counts only
/// 2xx as successes.
pub async fn measure<F>(conns: usize, seconds: f64, make: F) -> Figures
where
    F: Fn(usize) -> reqwest::RequestBuilder + Send + Sync + 'static,
{
    let make = Arc::new(make);
    let counter = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    // Warm-up: connections open, caches filled.
    for _ in 0..conns.max(4) {
        let _ = make(usize::MAX - 1)
            .send()
            .await
            .and_then(|r| r.error_for_status());
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let make = make.clone();
        let counter = counter.clone();
        let errors = errors.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(4096);
            while Instant::now() < deadline {
                let i = counter.fetch_add(1, Ordering::Relaxed);
                let t = Instant::now();
                let ok = match make(i).send().await {
                    Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
                    Err(_) => false,
                };
                if ok {
                    lat.push(t.elapsed());
                } else {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("task"));
    }
    let elapsed = start.elapsed().as_secs_f64();
    all.sort();
    let pct = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    Figures {
        rps: all.len() as f64 / elapsed,
        p50: pct(0.50),
        p99: pct(0.99),
        errors: errors.load(Ordering::Relaxed),
    }
}

/// The end of a row: how many requests failed, when any did.
/// The environment variable `name` read as a number (or any value that parses), when it is set and parses.
pub fn env_number<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

pub fn errors_note(errors: u64) -> String {
    match errors {
        0 => String::new(),
        e => format!("  ({e} errors)"),
    }
}

pub fn row(name: &str, conns: usize, f: &Figures, baseline: Option<&Figures>) {
    let vs = baseline.map_or(String::new(), |b| {
        format!("{:>6.1}% of /health", 100.0 * f.rps / b.rps)
    });
    let errs = errors_note(f.errors as u64);
    println!(
        "{name:<44} {conns:>3} {:>10.0} {:>9.3} {:>9.3}  {vs}{errs}",
        f.rps,
        f.p50.as_secs_f64() * 1e3,
        f.p99.as_secs_f64() * 1e3
    );
}

pub fn header(title: &str) {
    println!("\n{title}");
    println!(
        "{:<44} {:>3} {:>10} {:>9} {:>9}",
        "scenario", "con", "req/s", "p50 ms", "p99 ms"
    );
}

/// A PostgreSQL server for the run: the one named in the environment, or a throwaway one.
pub struct Postgres {
    pub url: String,
    child: Option<std::process::Child>,
}

impl Postgres {
    pub fn start() -> Postgres {
        if let Ok(url) = std::env::var("SWITCHYARD_TEST_POSTGRES") {
            return Postgres { url, child: None };
        }
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let mut child = std::process::Command::new("bash")
            .arg("-c")
            .arg("trap 'exit 0' TERM; source scripts/postgres; echo \"$SWITCHYARD_TEST_POSTGRES\"; while sleep 1; do :; done")
            .current_dir(root)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start PostgreSQL (scripts/postgres)");
        let mut line = String::new();
        let out = child.stdout.take().expect("stdout");
        std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line).expect("its URL");
        Postgres {
            url: line.trim().to_string(),
            child: Some(child),
        }
    }

    /// A new empty database on it.
    pub async fn database(&self) -> String {
        use sqlx::{Connection, Executor};
        sqlx::any::install_default_drivers();
        let name = format!(
            "bench_{}",
            switchyard_server::crypto::random_id().to_lowercase()
        );
        let mut conn = sqlx::AnyConnection::connect(&self.url)
            .await
            .expect("connect");
        conn.execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .expect("create database");
        let base = self
            .url
            .rsplit_once('/')
            .map_or(self.url.as_str(), |(b, _)| b);
        format!("{base}/{name}")
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            // SIGTERM: the script's trap stops the server and removes its directory.
            // SAFETY: kill(2) takes plain integers and touches no memory of ours; the pid is our child's.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
        }
    }
}

/// The path of `bin`, installed from Debian's package `pkg` when missing and this runs as root; `None`
/// (and why, printed) when it cannot be had.
pub fn tool(bin: &str, pkg: &str) -> Option<PathBuf> {
    let find = || {
        let dirs = [
            "/usr/sbin",
            "/usr/bin",
            "/usr/local/sbin",
            "/usr/local/bin",
            "/sbin",
            "/bin",
        ];
        dirs.iter()
            .map(|d| Path::new(d).join(bin))
            .find(|p| p.exists())
    };
    if let Some(p) = find() {
        return Some(p);
    }
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    if !root {
        println!("{bin} is missing and this is not root: skipping what needs it (apt-get install -y {pkg})");
        return None;
    }
    println!("{bin} is missing: installing Debian's {pkg} (apt-get install -y {pkg})");
    let ok = |args: &[&str]| {
        let s = Command::new("apt-get")
            .args(args)
            .stdout(Stdio::null())
            .status();
        s.is_ok_and(|s| s.success())
    };
    // A stale package list: updated once, and tried again.
    let installed = ok(&["install", "-y", pkg]) || (ok(&["update"]) && ok(&["install", "-y", pkg]));
    if !installed {
        println!("could not install {pkg}: skipping what needs it");
        return None;
    }
    find()
}

/// A port free on loopback now.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
    l.local_addr().expect("addr").port()
}

/// What one wrk run saw.
#[derive(Clone, Copy)]
pub struct Wrk {
    pub rps: f64,
    /// CPU µs per request of the proxy under test (NaN when there is none).
    pub cpu: f64,
    pub p50: f64,
    pub p99: f64,
    pub errors: u64,
}

/// A wrk duration (`45.12us`, `1.20ms`, `2.00s`) in µs.
pub fn wrk_us(text: &str) -> Option<f64> {
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let (n, unit) = text.split_at(split);
    let n: f64 = n.parse().ok()?;
    let scale = match unit {
        "us" => 1.0,
        "ms" => 1e3,
        "s" => 1e6,
        "m" => 6e7,
        _ => return None,
    };
    Some(n * scale)
}

pub fn parse_wrk(out: &str) -> Option<Wrk> {
    let mut w = Wrk {
        rps: 0.0,
        cpu: f64::NAN,
        p50: 0.0,
        p99: 0.0,
        errors: 0,
    };
    for line in out.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["50%", v] => w.p50 = wrk_us(v)?,
            ["99%", v] => w.p99 = wrk_us(v)?,
            ["Requests/sec:", v] => w.rps = v.parse().ok()?,
            [n, "requests", "in", ..] => w.cpu = n.parse().ok()?,
            ["Non-2xx", "or", "3xx", "responses:", n] => w.errors += n.parse::<u64>().ok()?,
            ["Socket", "errors:", rest @ ..] => {
                let n = rest
                    .iter()
                    .filter_map(|x| x.trim_end_matches(',').parse::<u64>().ok());
                w.errors += n.sum::<u64>();
            }
            _ => {}
        }
    }
    // Until the caller measures CPU, `cpu` holds the number of requests.
    (w.rps > 0.0).then_some(w)
}

/// A word naming one wrk run, unlike any other run's: this process's id, the time and a count.
fn run_id() -> String {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let since = std::time::UNIX_EPOCH
        .elapsed()
        .unwrap_or_default()
        .as_micros();
    format!("{}-{since}-{n}", std::process::id())
}

/// One wrk run of `secs` s (whole seconds): `conns` connections, a thread per 32 of them.
pub fn wrk(
    bin: &Path,
    url: &str,
    conns: usize,
    secs: u64,
    header: Option<&str>,
    script: Option<&Path>,
) -> Wrk {
    let threads = conns.div_ceil(32).min(2).to_string();
    let mut cmd = Command::new(bin);
    cmd.args([
        "-t",
        &threads,
        "-c",
        &conns.to_string(),
        "-d",
        &format!("{secs}s"),
        "--latency",
    ]);
    if let Some(h) = header {
        cmd.args(["-H", h]);
    }
    if let Some(s) = script {
        cmd.arg("-s").arg(s);
    }
    cmd.arg(url);
    if script.is_some() {
        // A script's `init(args)` gets a word no other run has: one that numbers its requests makes them
        // differ from every earlier run's too (a response cache must not answer a run from the one before).
        cmd.args(["--", &run_id()]);
    }
    let out = cmd.output().expect("run wrk");
    let text = String::from_utf8_lossy(&out.stdout);
    parse_wrk(&text).unwrap_or_else(|| panic!("wrk {url}: no figures in {text:?}"))
}
