//! Starts the real `switchyard-test-engine` binary and talks HTTP to it.

// A test may unwrap: a failed one is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdout, Command};
use tokio::time::{sleep, timeout};

const WAIT: Duration = Duration::from_secs(10);

struct Engine {
    child: Child,
    base: String,
    http: reqwest::Client,
    /// The rest of stderr, kept open as a supervisor would.
    stderr: BufReader<ChildStderr>,
    _stdout: BufReader<ChildStdout>,
}

fn command(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_switchyard-test-engine"));
    cmd.args(args)
        .env_remove("PORT")
        .env_remove("REPLICA_ID")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// Starts the engine and waits for its listening line (and its pid line on stderr).
async fn start(mut cmd: Command) -> Engine {
    let mut child = cmd.spawn().expect("spawn the test engine");
    let pid = child.id().expect("a running child has a pid");
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    let (mut stdout, mut stderr) = (BufReader::new(stdout), BufReader::new(stderr));
    let mut line = String::new();
    timeout(WAIT, stdout.read_line(&mut line))
        .await
        .expect("the listening line within 10 s")
        .expect("read stdout");
    let base = line
        .strip_prefix("test engine listening on ")
        .and_then(|l| l.strip_suffix('\n'))
        .expect(&line);
    let base = base.to_string();
    assert!(base.starts_with("http://127.0.0.1:"), "{line}");
    let mut pid_line = String::new();
    timeout(WAIT, stderr.read_line(&mut pid_line))
        .await
        .expect("the pid line within 10 s")
        .expect("read stderr");
    assert_eq!(pid_line, format!("test engine pid {pid}\n"));
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(WAIT)
        .build()
        .expect("http client");
    Engine {
        child,
        base,
        http,
        stderr,
        _stdout: stdout,
    }
}

impl Engine {
    async fn get(&self, path: &str) -> reqwest::Response {
        self.http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect(path)
    }

    /// `POST /embed` as an owned future, so it can run in its own task.
    fn embed(&self, body: Value) -> impl std::future::Future<Output = reqwest::Response> + 'static {
        let request = self
            .http
            .post(format!("{}/embed", self.base))
            .json(&body)
            .send();
        async move { request.await.expect("POST /embed") }
    }

    /// The value of an unlabelled sample in the current /metrics.
    async fn metric(&self, name: &str) -> f64 {
        let text = self
            .get("/metrics")
            .await
            .text()
            .await
            .expect("metrics body");
        text.lines()
            .filter_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .next()
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    }
}

#[tokio::test]
async fn serves_health_embeddings_env_and_a_real_queue() {
    let engine = start(command(&[
        "--port",
        "0",
        "--capacity",
        "1",
        "--latency-ms",
        "200",
    ]))
    .await;
    let port = engine.base.rsplit(':').next().expect("a port");

    let health = engine.get("/health").await;
    assert_eq!(health.status(), 200);
    assert_eq!(
        health.headers()["x-replica-id"],
        format!("127.0.0.1:{port}").as_str()
    );
    assert_eq!(
        health.json::<Value>().await.expect("json"),
        json!({"status": "ok"})
    );

    let response = engine
        .embed(json!({"inputs": ["a", "b", "a"], "truncate": true}))
        .await;
    assert_eq!(response.status(), 200);
    let vectors: Vec<Vec<f32>> = response
        .json()
        .await
        .expect("an array of arrays of numbers");
    assert_eq!(vectors.len(), 3);
    assert!(vectors.iter().all(|v| v.len() == 8));
    assert_eq!(vectors[0], vectors[2]);
    assert_ne!(vectors[0], vectors[1]);

    let bad = engine.embed(json!({"input": "x"})).await;
    assert_eq!(bad.status(), 422);
    assert_eq!(
        bad.json::<Value>().await.expect("json")["error_type"],
        "Validation"
    );

    let path = engine.get("/env/PATH").await;
    assert_eq!(path.status(), 200);
    assert_eq!(
        path.text().await.expect("text"),
        std::env::var("PATH").expect("PATH is set")
    );
    assert_eq!(
        engine
            .get("/env/SWITCHYARD_TEST_ENGINE_UNSET_VAR")
            .await
            .status(),
        404
    );

    // The first request runs three inputs one after the other; the second one has to queue.
    let first = tokio::spawn(engine.embed(json!({"inputs": ["x", "y", "z"]})));
    let mut running = false;
    for _ in 0..200 {
        if engine.metric("vllm:num_requests_running").await == 1.0 {
            running = true;
            break;
        }
        sleep(Duration::from_millis(5)).await;
    }
    assert!(running, "the first request never showed as running");
    let second = tokio::spawn(engine.embed(json!({"inputs": "w"})));
    let mut queued = false;
    for _ in 0..200 {
        if engine.metric("vllm:num_requests_waiting").await == 1.0 {
            queued = true;
            break;
        }
        sleep(Duration::from_millis(5)).await;
    }
    assert!(queued, "the second request never showed as waiting");
    assert_eq!(engine.metric("vllm:kv_cache_usage_perc").await, 1.0);
    for (task, inputs) in [(first, 3), (second, 1)] {
        let response = timeout(WAIT, task)
            .await
            .expect("embed within 10 s")
            .expect("task");
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.json::<Vec<Vec<f32>>>().await.expect("json").len(),
            inputs
        );
    }
    assert_eq!(engine.metric("vllm:num_requests_waiting").await, 0.0);
    assert_eq!(engine.metric("vllm:num_requests_running").await, 0.0);
    assert_eq!(engine.metric("test_engine_requests_total").await, 4.0);
}

#[tokio::test]
async fn echo_stream_mcp_and_unknown_routes() {
    let mut cmd = command(&["--port", "0"]);
    cmd.env("REPLICA_ID", "replica-7");
    let engine = start(cmd).await;

    let echo = engine
        .http
        .post(format!("{}/echo", engine.base))
        .header("content-type", "application/x-thing")
        .header("authorization", "Bearer secret")
        .header("x-forwarded-for", "10.0.0.9")
        .body("raw \x01 bytes")
        .send()
        .await
        .expect("POST /echo");
    assert_eq!(echo.status(), 200);
    assert_eq!(echo.headers()["content-type"], "application/x-thing");
    assert_eq!(echo.headers()["x-seen-authorization"], "present");
    assert_eq!(echo.headers()["x-seen-forwarded-for"], "10.0.0.9");
    assert_eq!(echo.headers()["x-replica-id"], "replica-7");
    assert_eq!(echo.text().await.expect("text"), "raw \x01 bytes");
    let bare = engine
        .http
        .post(format!("{}/echo", engine.base))
        .send()
        .await
        .expect("POST /echo");
    assert_eq!(bare.headers()["x-seen-authorization"], "absent");
    assert_eq!(bare.headers()["x-seen-forwarded-for"], "");

    let stream = engine.get("/stream?n=3&interval_ms=10").await;
    assert_eq!(stream.status(), 200);
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    assert_eq!(
        stream.text().await.expect("text"),
        "data: 0\n\ndata: 1\n\ndata: 2\n\n"
    );

    let mcp = format!("{}/mcp", engine.base);
    let opened = engine
        .http
        .post(&mcp)
        .body("{}")
        .send()
        .await
        .expect("POST /mcp");
    assert_eq!(opened.status(), 200);
    let id = opened.headers()["mcp-session-id"]
        .to_str()
        .expect("ascii id")
        .to_string();
    assert!(id.starts_with("replica-7-"), "{id}");
    for (session, known) in [(id.as_str(), true), ("someone-else-1", false)] {
        let reply = engine
            .http
            .post(&mcp)
            .header("mcp-session-id", session)
            .send()
            .await
            .expect("POST /mcp");
        assert_eq!(reply.status(), 200);
        assert_eq!(reply.headers()["x-replica-id"], "replica-7");
        assert_eq!(
            reply.json::<Value>().await.expect("json"),
            json!({"session": session, "known": known})
        );
    }

    let missing = engine.get("/no/such/route").await;
    assert_eq!(missing.status(), 404);
    assert_eq!(missing.headers()["x-replica-id"], "replica-7");
    assert!(missing.json::<Value>().await.expect("a JSON 404")["error"].is_string());
}

#[tokio::test]
async fn start_delay_and_fail_health_hold_health_at_503() {
    let mut engine = start(command(&["--port", "0", "--start-delay-ms", "300"])).await;
    assert_eq!(engine.get("/health").await.status(), 503);
    let mut healthy = false;
    for _ in 0..200 {
        if engine.get("/health").await.status() == 200 {
            healthy = true;
            break;
        }
        sleep(Duration::from_millis(25)).await;
    }
    assert!(healthy, "/health never turned 200");

    #[cfg(unix)]
    {
        let pid = engine.child.id().expect("running").to_string();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("run kill");
        assert!(sent.success());
        let status = timeout(WAIT, engine.child.wait())
            .await
            .expect("exit within 10 s")
            .expect("wait");
        assert_eq!(status.code(), Some(0), "SIGTERM is a graceful exit");
    }

    let sick = start(command(&["--port", "0", "--fail-health"])).await;
    sleep(Duration::from_millis(50)).await;
    assert_eq!(sick.get("/health").await.status(), 503);
}

#[tokio::test]
async fn exit_immediately_and_crash_after_exit_with_their_statuses() {
    let failed = timeout(
        WAIT,
        command(&["--port", "0", "--exit-immediately"]).output(),
    )
    .await
    .expect("exit within 10 s")
    .expect("run the engine");
    assert_eq!(failed.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&failed.stderr).contains("test engine: told to fail at start"));
    assert!(failed.stdout.is_empty(), "it never listened");

    let mut engine = start(command(&["--port", "0", "--crash-after-ms", "300"])).await;
    assert_eq!(engine.get("/health").await.status(), 200);
    let status = timeout(WAIT, engine.child.wait())
        .await
        .expect("crash within 10 s")
        .expect("wait");
    assert_eq!(status.code(), Some(3));
    let mut rest = String::new();
    timeout(WAIT, engine.stderr.read_to_string(&mut rest))
        .await
        .expect("stderr closes")
        .expect("read stderr");
    assert!(rest.contains("crashing as told"), "{rest}");
}
