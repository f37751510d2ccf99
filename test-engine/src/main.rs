//! `switchyard-test-engine`: a tiny TEI-shaped inference engine whose load and metrics are real, for
//! the runtime's tests and benchmarks (never used by production code).
//!
//! `POST /embed` answers like Text Embeddings Inference with deterministic vectors; every input holds
//! one of `--capacity` permits for `--latency-ms`, so requests beyond capacity really queue, and
//! `GET /metrics` reports that queue with vLLM's gauge names. The other routes (`/echo`, `/stream`,
//! `/env/{NAME}`, `/mcp`) and the failure flags exist to test the runtime and its serving proxy.

mod ext_proc;
mod router;

use std::collections::HashSet;
use std::convert::Infallible;
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::{builder::RangedU64ValueParser, Parser};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::Semaphore;
use tokio::time::sleep;

/// One line to stderr; a closed stderr must not take the engine down, so errors are ignored.
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// A tiny TEI-shaped test inference engine.
#[derive(Parser, Debug)]
#[command(name = "switchyard-test-engine", version)]
struct Cli {
    /// Port to listen on (0 picks a free port).
    #[arg(long, env = "PORT")]
    port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Time each inference (one input) takes.
    #[arg(long, default_value_t = 0)]
    latency_ms: u64,
    /// Inferences processed concurrently; the rest wait in a queue.
    #[arg(long, default_value_t = 4, value_parser = at_least_one())]
    capacity: usize,
    /// Time after start before /health answers 200 (503 until then).
    #[arg(long, default_value_t = 0)]
    start_delay_ms: u64,
    /// Embedding size.
    #[arg(long, default_value_t = 8, value_parser = at_least_one())]
    dim: usize,
    /// Exit with status 3 this long after start (a crashing replica).
    #[arg(long)]
    crash_after_ms: Option<u64>,
    /// Fail at start: exit with status 2 at once.
    #[arg(long)]
    exit_immediately: bool,
    /// /health always answers 503.
    #[arg(long)]
    fail_health: bool,
    /// Inferences burn CPU for their latency instead of sleeping.
    #[arg(long)]
    busy: bool,
    /// Run as a custom-router sidecar instead of an engine (see `router.rs`).
    #[arg(long)]
    router: bool,
    /// Run as an extProc custom-router sidecar: an Envoy external processor on `--grpc-port` (see
    /// `ext_proc.rs`), told the replicas on `--port`.
    #[arg(long)]
    ext_proc: bool,
    /// The extProc processor's gRPC port.
    #[arg(long, env = "GRPC_PORT", default_value_t = 9002)]
    grpc_port: u16,
    /// The model, as TEI takes it (`--model-id /repository` under the Docker provider); the test engine has
    /// none, and only says what it was given.
    #[arg(long)]
    model_id: Option<String>,
    /// At start, try to read this file or list this directory, and say how it went (`probe PATH: …`): what a
    /// confined replica can reach.
    #[arg(long)]
    probe: Vec<String>,
}

fn at_least_one() -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::new().range(1..)
}

struct Engine {
    permits: Semaphore,
    capacity: usize,
    waiting: AtomicUsize,
    running: AtomicUsize,
    requests: AtomicU64,
    latency: Duration,
    dim: usize,
    ready_at: Instant,
    fail_health: bool,
    busy: bool,
    replica_id: String,
    sessions: Mutex<HashSet<String>>,
    next_session: AtomicU64,
}

type Shared = Arc<Engine>;

/// Counts one in a gauge for as long as it lives, so a cancelled request is uncounted too.
struct Tracked<'a>(&'a AtomicUsize);

impl<'a> Tracked<'a> {
    fn enter(gauge: &'a AtomicUsize) -> Self {
        gauge.fetch_add(1, SeqCst);
        Tracked(gauge)
    }
}

impl Drop for Tracked<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
    }
}

impl Engine {
    /// One inference: wait for a permit (counted as waiting), then hold it for the latency.
    async fn infer(&self) -> bool {
        let permit = {
            let _waiting = Tracked::enter(&self.waiting);
            self.permits.acquire().await
        };
        let Ok(_permit) = permit else { return false };
        let _running = Tracked::enter(&self.running);
        if self.busy {
            // Real CPU use, for the hardware measure: spin for the latency on a blocking thread.
            let latency = self.latency;
            let _ = tokio::task::spawn_blocking(move || {
                let until = Instant::now() + latency;
                let mut x = 0u64;
                while Instant::now() < until {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                }
            })
            .await;
        } else if !self.latency.is_zero() {
            // A zero sleep still waits for the timer wheel (about 1 ms): skip it.
            sleep(self.latency).await;
        }
        true
    }
}

/// A deterministic unit vector of size `dim`: an FNV-1a hash of `text` seeds splitmix64.
fn embedding(text: &str, dim: usize) -> Vec<f32> {
    let fnv = |h: u64, b: u8| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    let mut state = text.bytes().fold(0xcbf2_9ce4_8422_2325, fnv);
    let mut next = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = (state ^ (state >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    };
    let raw: Vec<f32> = (0..dim).map(|_| next()).collect();
    let norm = raw.iter().map(|x| x * x).sum::<f32>().sqrt();
    raw.into_iter()
        .map(|x| x / norm.max(f32::MIN_POSITIVE))
        .collect()
}

/// The `inputs` of a TEI `/embed` body: one string or a non-empty list of strings.
fn parse_inputs(body: &[u8]) -> Result<Vec<String>, String> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("Failed to parse the JSON body: {e}"))?;
    let shape = || "`inputs` must be a string or a list of strings".to_string();
    match value.get("inputs") {
        None => Err("missing field `inputs`".to_string()),
        Some(Value::String(text)) => Ok(vec![text.clone()]),
        Some(Value::Array(items)) if items.is_empty() => Err("`inputs` cannot be empty".into()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| i.as_str().map(str::to_owned).ok_or_else(shape))
            .collect(),
        Some(_) => Err(shape()),
    }
}

/// Prometheus text exposition of the current load.
fn render_metrics(waiting: usize, running: usize, capacity: usize, requests: u64) -> String {
    let usage = running as f64 / capacity.max(1) as f64;
    format!(
        "# HELP vllm:num_requests_waiting Inferences waiting for a slot.\n\
         # TYPE vllm:num_requests_waiting gauge\n\
         vllm:num_requests_waiting {waiting}\n\
         # HELP vllm:num_requests_running Inferences holding a slot.\n\
         # TYPE vllm:num_requests_running gauge\n\
         vllm:num_requests_running {running}\n\
         # HELP vllm:kv_cache_usage_perc Slots in use as a fraction (1 = full).\n\
         # TYPE vllm:kv_cache_usage_perc gauge\n\
         vllm:kv_cache_usage_perc {usage}\n\
         # HELP test_engine_requests_total Embed requests received.\n\
         # TYPE test_engine_requests_total counter\n\
         test_engine_requests_total {requests}\n"
    )
}

fn error(status: StatusCode, message: impl Into<String>, kind: &str) -> Response {
    let body = json!({"error": message.into(), "error_type": kind});
    (status, Json(body)).into_response()
}

fn not_found(message: String) -> Response {
    error(StatusCode::NOT_FOUND, message, "NotFound")
}

async fn health(State(engine): State<Shared>) -> Response {
    if !engine.fail_health && Instant::now() >= engine.ready_at {
        Json(json!({"status": "ok"})).into_response()
    } else {
        let body = Json(json!({"status": "unavailable"}));
        (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
    }
}

async fn embed(State(engine): State<Shared>, body: Bytes) -> Response {
    engine.requests.fetch_add(1, SeqCst);
    let inputs = match parse_inputs(&body) {
        Ok(inputs) => inputs,
        Err(message) => return error(StatusCode::UNPROCESSABLE_ENTITY, message, "Validation"),
    };
    let mut vectors = Vec::with_capacity(inputs.len());
    for text in &inputs {
        if !engine.infer().await {
            let status = StatusCode::SERVICE_UNAVAILABLE;
            return error(status, "shutting down", "Overloaded");
        }
        vectors.push(embedding(text, engine.dim));
    }
    Json(vectors).into_response()
}

async fn metrics(State(e): State<Shared>) -> Response {
    let (waiting, running) = (e.waiting.load(SeqCst), e.running.load(SeqCst));
    let text = render_metrics(waiting, running, e.capacity, e.requests.load(SeqCst));
    let content_type = "text/plain; version=0.0.4; charset=utf-8";
    ([(header::CONTENT_TYPE, content_type)], text).into_response()
}

async fn echo(headers: HeaderMap, body: Bytes) -> Response {
    let mut response = Response::new(Body::from(body));
    let out = response.headers_mut();
    if let Some(content_type) = headers.get(header::CONTENT_TYPE) {
        out.insert(header::CONTENT_TYPE, content_type.clone());
    }
    let seen = if headers.contains_key(header::AUTHORIZATION) {
        "present"
    } else {
        "absent"
    };
    out.insert("x-seen-authorization", HeaderValue::from_static(seen));
    let forwarded = headers.get("x-forwarded-for").cloned();
    let forwarded = forwarded.unwrap_or(HeaderValue::from_static(""));
    out.insert("x-seen-forwarded-for", forwarded);
    response
}

/// Answers with status `code` after `?ms=` milliseconds (none by default): a known load for the analytics'
/// tests.
async fn status(
    Path(code): Path<u16>,
    Query(q): Query<std::collections::HashMap<String, u64>>,
) -> Response {
    if let Some(ms) = q.get("ms") {
        sleep(Duration::from_millis(*ms)).await;
    }
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST);
    (status, format!("{code}\n")).into_response()
}

/// The request as it came: method, path and query, every field (a repeated one joined by `, `) and the
/// body as text.
async fn seen(method: axum::http::Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let mut fields = serde_json::Map::new();
    for name in headers.keys() {
        let values: Vec<&str> = headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap_or("?"))
            .collect();
        fields.insert(name.to_string(), Value::from(values.join(", ")));
    }
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let body = String::from_utf8_lossy(&body);
    Json(json!({"method": method.as_str(), "path": path, "headers": fields, "body": body}))
        .into_response()
}

#[derive(Deserialize)]
struct StreamParams {
    n: Option<u64>,
    interval_ms: Option<u64>,
}

/// Server-sent events `data: 0` … `data: n-1`, `interval_ms` apart, each sent as soon as it is due.
async fn stream(Query(params): Query<StreamParams>) -> Response {
    let n = params.n.unwrap_or(5);
    let interval = Duration::from_millis(params.interval_ms.unwrap_or(50));
    let events = futures_util::stream::unfold(0u64, move |i| async move {
        if i > 0 && i < n {
            sleep(interval).await;
        }
        (i < n).then(|| (Ok::<_, Infallible>(format!("data: {i}\n\n")), i + 1))
    });
    let headers = [
        (header::CONTENT_TYPE, "text/event-stream"),
        (header::CACHE_CONTROL, "no-cache"),
    ];
    (headers, Body::from_stream(events)).into_response()
}

async fn env_var(Path(name): Path<String>) -> Response {
    match std::env::var_os(&name) {
        Some(value) => value.to_string_lossy().into_owned().into_response(),
        None => not_found(format!("{name} is not set")),
    }
}

/// MCP sessions: a request without `Mcp-Session-Id` opens one; with one, says if this process issued it.
async fn mcp(State(engine): State<Shared>, headers: HeaderMap) -> Response {
    let mut sessions = engine
        .sessions
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    match headers.get("mcp-session-id").map(HeaderValue::to_str) {
        Some(Ok(id)) => {
            Json(json!({"session": id, "known": sessions.contains(id)})).into_response()
        }
        Some(Err(_)) => error(StatusCode::BAD_REQUEST, "bad Mcp-Session-Id", "Validation"),
        None => {
            let n = engine.next_session.fetch_add(1, SeqCst) + 1;
            let id = format!("{}-{}-{n}", engine.replica_id, std::process::id());
            sessions.insert(id.clone());
            let body = Json(json!({"session": id, "new": true}));
            ([("mcp-session-id", id)], body).into_response()
        }
    }
}

async fn no_route(uri: Uri) -> Response {
    not_found(format!("no route for {}", uri.path()))
}

/// Resolves on SIGTERM or ctrl-c; open streams then get two seconds before the process exits.
async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
    say!("test engine: shutting down");
    tokio::spawn(async {
        sleep(Duration::from_secs(2)).await;
        std::process::exit(0);
    });
}

async fn run(cli: Cli, started: Instant) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind((cli.host.as_str(), cli.port))
        .await
        .map_err(|e| format!("cannot listen on {}:{}: {e}", cli.host, cli.port))?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    let replica_id = std::env::var("REPLICA_ID").unwrap_or_else(|_| address.to_string());
    let replica_header = HeaderValue::from_str(&replica_id)
        .map_err(|_| format!("REPLICA_ID {replica_id:?} is not a valid header value"))?;
    let engine = Arc::new(Engine {
        permits: Semaphore::new(cli.capacity),
        capacity: cli.capacity,
        waiting: AtomicUsize::new(0),
        running: AtomicUsize::new(0),
        requests: AtomicU64::new(0),
        latency: Duration::from_millis(cli.latency_ms),
        dim: cli.dim,
        ready_at: started + Duration::from_millis(cli.start_delay_ms),
        fail_health: cli.fail_health,
        busy: cli.busy,
        replica_id,
        sessions: Mutex::new(HashSet::new()),
        next_session: AtomicU64::new(0),
    });
    // Its address too, for a test that calls one replica directly.
    let address_header = HeaderValue::from_str(&address.to_string())
        .map_err(|_| format!("{address} is not a valid header value"))?;
    let tag_replica = move |mut response: Response| {
        let headers = response.headers_mut();
        headers.insert("x-replica-id", replica_header.clone());
        headers.insert("x-replica-address", address_header.clone());
        std::future::ready(response)
    };
    let engine_app = Router::new()
        .route("/health", get(health))
        .route("/embed", post(embed))
        .route("/metrics", get(metrics))
        .route("/echo", post(echo))
        .route("/seen/{*rest}", axum::routing::any(seen))
        .route("/status/{code}", get(status))
        .route("/stream", get(stream))
        .route("/env/{name}", get(env_var))
        .route("/mcp", post(mcp))
        .fallback(no_route)
        .layer(axum::middleware::map_response(tag_replica))
        .with_state(engine);
    let backends = Arc::new(router::Backends::default());
    let app = if cli.ext_proc {
        let (host, port, announced) = (cli.host.clone(), cli.grpc_port, backends.clone());
        tokio::spawn(async move {
            if let Err(e) = ext_proc::serve(&host, port, announced).await {
                say!("test engine: {e}");
                std::process::exit(1);
            }
        });
        router::app(backends, false)
    } else if cli.router {
        router::app(backends, true)
    } else {
        engine_app
    };

    let mut stdout = std::io::stdout();
    writeln!(stdout, "test engine listening on http://{address}")
        .and_then(|()| stdout.flush())
        .map_err(|e| format!("cannot write to stdout: {e}"))?;
    let server = axum::serve(listener, app).with_graceful_shutdown(shutdown_signal());
    server.await.map_err(|e| format!("server error: {e}"))
}

#[tokio::main]
async fn main() -> ExitCode {
    let started = Instant::now();
    let cli = Cli::parse();
    say!("test engine pid {}", std::process::id());
    if let Some(model) = &cli.model_id {
        say!("test engine: model {model}");
    }
    for path in &cli.probe {
        let outcome = match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => std::fs::read_dir(path).map(|_| "listed".to_string()),
            Ok(_) => std::fs::read(path).map(|b| format!("read {} bytes", b.len())),
            Err(e) => Err(e),
        };
        match outcome {
            Ok(done) => say!("probe {path}: {done}"),
            Err(e) => say!("probe {path}: {e}"),
        }
    }
    if cli.exit_immediately {
        say!("test engine: told to fail at start");
        return ExitCode::from(2);
    }
    if let Some(ms) = cli.crash_after_ms {
        tokio::spawn(async move {
            sleep(Duration::from_millis(ms)).await;
            say!("test engine: crashing as told after {ms} ms");
            std::process::exit(3);
        });
    }
    match run(cli, started).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            say!("test engine: {message}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embeddings_are_deterministic_unit_vectors_of_the_asked_size() {
        let a = embedding("hello", 8);
        assert_eq!(a.len(), 8);
        assert_eq!(a, embedding("hello", 8));
        assert_ne!(a, embedding("hello!", 8));
        assert_eq!(embedding("", 384).len(), 384);
        for v in [a, embedding("", 3), embedding("a longer sentence", 1024)] {
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
        }
    }

    #[test]
    fn inputs_are_a_string_or_a_non_empty_list_of_strings() {
        let strings = |items: &[&str]| Ok(items.iter().map(|s| s.to_string()).collect());
        assert_eq!(
            parse_inputs(br#"{"inputs": "x", "truncate": true}"#),
            strings(&["x"])
        );
        assert_eq!(
            parse_inputs(br#"{"inputs": ["a", "b"]}"#),
            strings(&["a", "b"])
        );
        let bad: [&[u8]; 5] = [
            br#"{"inputs": []}"#,
            br#"{"inputs": [1]}"#,
            br#"{"input": "x"}"#,
            b"{",
            b"[]",
        ];
        for body in bad {
            assert!(
                parse_inputs(body).is_err(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn metrics_render_as_prometheus_text() {
        let text = render_metrics(2, 3, 4, 17);
        for (name, kind, value) in [
            ("vllm:num_requests_waiting", "gauge", "2"),
            ("vllm:num_requests_running", "gauge", "3"),
            ("vllm:kv_cache_usage_perc", "gauge", "0.75"),
            ("test_engine_requests_total", "counter", "17"),
        ] {
            assert!(
                text.contains(&format!("# TYPE {name} {kind}\n{name} {value}\n")),
                "{text}"
            );
        }
        let samples: Vec<_> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(samples.len(), 4);
        for line in samples {
            let parts: Vec<_> = line.split(' ').collect();
            assert!(
                parts.len() == 2 && parts[1].parse::<f64>().is_ok(),
                "{line}"
            );
        }
        assert!(render_metrics(0, 0, 1, 0).contains("vllm:kv_cache_usage_perc 0\n"));
        assert!(render_metrics(0, 1, 1, 0).contains("vllm:kv_cache_usage_perc 1\n"));
    }
}
