//! The endpoint runtime end to end: a real server on 127.0.0.1:0 running the test engine as real child
//! processes, driven over real HTTP. The scaler's clock is a manual one, moved by the tests.

use crate::common;

use std::collections::HashMap;
use std::path::PathBuf;

use common::engine_bin;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use serde_json::{json, Value};
use switchyard_server::client::{Client, ClientError};
use switchyard_server::clock::ManualClock;
use switchyard_server::{Application, Config};

pub(crate) const NS: &str = "admin";

pub(crate) struct Rt {
    pub(crate) url: String,
    pub(crate) admin: Client,
    pub(crate) token: String,
    data_dir: PathBuf,
    pub(crate) clock: ManualClock,
    pub(crate) http: reqwest::Client,
    private_addr: Option<std::net::SocketAddr>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<std::io::Result<switchyard_server::app::Stopped>>>,
    _dir: tempfile::TempDir,
}

pub(crate) async fn spawn(tweak: impl FnOnce(&mut Config)) -> Rt {
    start(tweak, None).await
}

/// A second server on the store of `first` (PostgreSQL): its secrets key, and its administrator's token.
pub(crate) async fn spawn_beside(first: &Rt, tweak: impl FnOnce(&mut Config)) -> Rt {
    let key = first.data_dir.join("secret.key");
    let tweak = |c: &mut Config| {
        tweak(c);
        c.secrets.key_file = Some(key);
    };
    start(tweak, Some(first.token.clone())).await
}

async fn start(tweak: impl FnOnce(&mut Config), token: Option<String>) -> Rt {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.store.data_dir = Some(dir.path().to_path_buf());
    config.store.url = common::test_store_url().await;
    config.server.listen = "127.0.0.1:0".parse().expect("addr");
    config.runtime.tick_ms = 50;
    config.runtime.stop_grace_ms = 2000;
    config.runtime.backoff_initial_ms = 0;
    config.runtime.backoff_max_ms = 0;
    config.runtime.start_timeout_s = 60;
    tweak(&mut config);
    let clock = ManualClock::new(Utc::now());
    let app = Application::build_with_clock(&config, Arc::new(clock.clone()))
        .await
        .expect("build");
    let url = format!("http://{}", app.local_addr());
    let private_addr = app.private_addr();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let done = tokio::spawn(app.run(async {
        let _ = rx.await;
    }));
    let token = token.unwrap_or_else(|| {
        std::fs::read_to_string(dir.path().join("admin-token"))
            .expect("admin token")
            .trim()
            .to_string()
    });
    Rt {
        admin: Client::new(&url, Some(token.clone())),
        url,
        token,
        data_dir: dir.path().to_path_buf(),
        clock,
        http: reqwest::Client::new(),
        private_addr,
        stop: Some(tx),
        done: Some(done),
        _dir: dir,
    }
}

pub(crate) fn engine_endpoint(
    name: &str,
    kind: &str,
    engine_args: &[&str],
    scaling: Value,
) -> Value {
    let mut command = vec![engine_bin(), "--port".into(), "{port}".into()];
    command.extend(engine_args.iter().map(|a| a.to_string()));
    json!({
        "name": name,
        "type": kind,
        "provider": {"vendor": "aws", "region": "us-east-1"},
        "compute": {"accelerator": "cpu", "instanceSize": "x2", "instanceType": "intel-icl", "scaling": scaling},
        "model": {
            "framework": "custom", "repository": "test/engine", "task": "feature-extraction",
            "image": {"custom": {"url": "local/test-engine", "healthRoute": "/health"}},
            "command": command,
        },
    })
}

impl Rt {
    pub(crate) async fn create(&self, body: Value) -> Value {
        self.admin
            .create_endpoint(NS, &body)
            .await
            .expect("create endpoint")
    }

    pub(crate) async fn get(&self, name: &str) -> Value {
        self.admin
            .get_endpoint(NS, name)
            .await
            .expect("get endpoint")
    }

    /// Polls until the endpoint is in `state` (bounded), and returns it.
    pub(crate) async fn wait_state(&self, name: &str, state: &str) -> Value {
        for _ in 0..600 {
            let ep = self.get(name).await;
            if ep["status"]["state"] == state {
                return ep;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "{name} never reached {state}: {}",
            self.get(name).await["status"]
        );
    }

    /// Polls `/metrics` until the proxy counts `n` requests in flight to the endpoint (bounded).
    async fn wait_in_flight(&self, name: &str, n: u64) {
        let line = format!(
            "switchyard_proxy_pending_requests{{namespace=\"{NS}\",endpoint=\"{name}\"}} {n}"
        );
        let mut text = String::new();
        for _ in 0..600 {
            let resp = self
                .http
                .get(format!("{}/metrics", self.url))
                .bearer_auth(&self.token);
            text = resp.send().await.unwrap().text().await.unwrap();
            if text.lines().any(|l| l == line) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("never {line}:\n{text}");
    }

    pub(crate) async fn wait_for(
        &self,
        name: &str,
        what: &str,
        ok: impl Fn(&Value) -> bool,
    ) -> Value {
        for _ in 0..600 {
            let ep = self.get(name).await;
            if ok(&ep) {
                return ep;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "{name}: {what} never happened: {}",
            self.get(name).await["status"]
        );
    }

    pub(crate) fn endpoint_url(&self, name: &str) -> String {
        format!("{}/endpoints/{NS}/{name}", self.url)
    }

    async fn embed(&self, name: &str, headers: &[(&str, &str)]) -> reqwest::Response {
        let mut req = self
            .http
            .post(format!("{}/embed", self.endpoint_url(name)))
            .json(&json!({"inputs": "hello"}));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.send().await.expect("request")
    }

    fn replica_pids(&self) -> Vec<i32> {
        let dir = self.data_dir.join("replicas").join("pids");
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                    .filter_map(|t| t.trim().parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    pub(crate) async fn shutdown(mut self) -> Vec<i32> {
        let pids = self.replica_pids();
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(done) = self.done.take() {
            tokio::time::timeout(Duration::from_secs(30), done)
                .await
                .expect("server stops in time")
                .expect("join")
                .expect("serve");
        }
        pids
    }
}

fn alive(pid: i32) -> bool {
    // A zombie has a /proc entry but is dead; check the state field.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            let state = s.rsplit(')').next().unwrap_or("").split_whitespace().next();
            state != Some("Z")
        })
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_serve_cache_idle_wake_pause() {
    let rt = spawn(|_| {}).await;
    let mut body = engine_endpoint(
        "emb",
        "public",
        &[],
        json!({"minReplica": 0, "maxReplica": 1, "scaleToZeroTimeout": 15}),
    );
    body["cacheHttpResponses"] = json!(true);
    let created = rt.create(body).await;
    assert_eq!(created["status"]["state"], "pending");
    let ep = rt.wait_state("emb", "running").await;
    assert_eq!(ep["status"]["readyReplica"], 1);
    assert_eq!(ep["status"]["targetReplica"], 1);
    assert_eq!(ep["status"]["url"], rt.endpoint_url("emb"));
    // The health route through the proxy, as huggingface_hub's wait() checks it.
    let health = rt
        .http
        .get(format!("{}/health", rt.endpoint_url("emb")))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);

    // Inference, then the cache: MISS, HIT, bypass.
    let first = rt.embed("emb", &[]).await;
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["x-cache"], "MISS");
    let vectors: Vec<Vec<f32>> = first.json().await.unwrap();
    assert_eq!(vectors.len(), 1);
    let hit = rt.embed("emb", &[]).await;
    assert_eq!(hit.headers()["x-cache"], "HIT");
    assert_eq!(hit.json::<Vec<Vec<f32>>>().await.unwrap(), vectors);
    let bypass = rt.embed("emb", &[("x-use-cache", "false")]).await;
    assert_eq!(bypass.status(), 200);
    assert!(bypass.headers().get("x-cache").is_none_or(|v| v != "HIT"));

    // Idle for the timeout: scaled to zero, replica gone.
    rt.clock.advance(chrono::Duration::minutes(14));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rt.get("emb").await["status"]["state"], "running");
    rt.clock.advance(chrono::Duration::minutes(2));
    let ep = rt.wait_state("emb", "scaledToZero").await;
    assert_eq!(ep["status"]["readyReplica"], 0);
    // A cache hit never wakes it.
    assert_eq!(rt.embed("emb", &[]).await.headers()["x-cache"], "HIT");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rt.get("emb").await["status"]["state"], "scaledToZero");

    // A miss wakes it: 503 with Retry-After at once…
    let cold = rt.embed("emb", &[("x-use-cache", "false")]).await;
    assert_eq!(cold.status(), 503);
    assert!(cold.headers().contains_key("retry-after"));
    let err: Value = cold.json().await.unwrap();
    assert!(err["error"].as_str().unwrap().contains("starting"));
    rt.wait_state("emb", "running").await;

    // …or, after another idle period, held until ready with X-Scale-Up-Timeout (a bad one is refused
    // and wakes nothing).
    rt.clock.advance(chrono::Duration::minutes(16));
    rt.wait_state("emb", "scaledToZero").await;
    let bad = rt
        .embed(
            "emb",
            &[("x-use-cache", "false"), ("x-scale-up-timeout", "soon")],
        )
        .await;
    assert_eq!(bad.status(), 400);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rt.get("emb").await["status"]["state"], "scaledToZero");
    let held = rt
        .embed(
            "emb",
            &[("x-use-cache", "false"), ("x-scale-up-timeout", "30")],
        )
        .await;
    assert_eq!(
        held.status(),
        200,
        "{:?}",
        held.headers().get("x-error-message")
    );
    assert_eq!(rt.get("emb").await["status"]["state"], "running");

    // Paused: 503, and a request does not wake it.
    let paused: Value = rt.admin.endpoint_action(NS, "emb", "pause").await.unwrap();
    assert_eq!(paused["status"]["state"], "paused");
    rt.wait_for("emb", "replicas stopped", |e| {
        e["status"]["readyReplica"] == 0
    })
    .await;
    for _ in 0..20 {
        if rt.replica_pids().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(rt.replica_pids().is_empty());
    let r = rt.embed("emb", &[("x-use-cache", "false")]).await;
    assert_eq!(r.status(), 503);
    assert!(r.headers().get("retry-after").is_none());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rt.get("emb").await["status"]["state"], "paused");
    let _: Value = rt.admin.endpoint_action(NS, "emb", "resume").await.unwrap();
    rt.wait_state("emb", "running").await;
    assert_eq!(
        rt.embed("emb", &[("x-use-cache", "false")]).await.status(),
        200
    );

    let pids = rt.shutdown().await;
    assert!(!pids.is_empty());
    for pid in pids {
        assert!(!alive(pid), "replica {pid} outlived the server");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_types_and_cidr() {
    let rt = spawn(|c| c.proxy.trusted_proxies = vec!["127.0.0.1/32".into()]).await;
    rt.create(engine_endpoint(
        "auth",
        "authenticated",
        &[],
        json!({"minReplica": 1, "maxReplica": 1}),
    ))
    .await;
    let mut open = engine_endpoint(
        "cidr",
        "public",
        &[],
        json!({"minReplica": 1, "maxReplica": 1}),
    );
    open["network"] = json!({"cidrBlock": true, "cidrList": ["10.1.0.0/16"]});
    rt.create(open).await;
    rt.wait_state("auth", "running").await;
    rt.wait_state("cidr", "running").await;

    let none = rt.embed("auth", &[]).await;
    assert_eq!(none.status(), 401);
    let bad = rt
        .embed("auth", &[("authorization", "Bearer sy_nope")])
        .await;
    assert_eq!(bad.status(), 401);
    let bearer = format!("Bearer {}", rt.token);
    let ok = rt.embed("auth", &[("authorization", &bearer)]).await;
    assert_eq!(ok.status(), 200);
    // Our token never reaches the replica.
    let echo = rt
        .http
        .post(format!("{}/echo", rt.endpoint_url("auth")))
        .header("authorization", &bearer)
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(echo.headers()["x-seen-authorization"], "absent");
    // A user without access to the namespace is refused.
    let _: Value = rt
        .admin
        .admin_create_user(&json!({"name": "mallory"}))
        .await
        .unwrap();
    let mallory = rt
        .admin
        .admin_create_token("mallory", &json!({}))
        .await
        .unwrap();
    let denied = rt
        .embed("auth", &[("authorization", &format!("Bearer {mallory}"))])
        .await;
    assert_eq!(denied.status(), 403);

    // CIDR: the peer (127.0.0.1, a trusted proxy here) forwards for 10.1.2.3 → allowed; 10.2.0.1 → 403.
    assert_eq!(
        rt.embed("cidr", &[("x-forwarded-for", "10.1.2.3")])
            .await
            .status(),
        200
    );
    let blocked = rt.embed("cidr", &[("x-forwarded-for", "10.2.0.1")]).await;
    assert_eq!(blocked.status(), 403);
    assert!(blocked.json::<Value>().await.unwrap()["error"]
        .as_str()
        .unwrap()
        .contains("10.2.0.1"));
    assert_eq!(rt.embed("cidr", &[]).await.status(), 403);
    rt.shutdown().await;
}

/// OAuth access tokens at the proxy: only their scopes, and only the organizations they reach (an
/// organization's exchanged token never reaches the member's own namespace).
#[tokio::test]
async fn oauth_tokens_at_the_proxy() {
    let rt = spawn(|_| {}).await;
    let _: Value = rt.admin.admin_create_org("acme").await.unwrap();
    let _: Value = rt
        .admin
        .admin_create_user(&json!({"name": "olga", "email": "olga@example.com"}))
        .await
        .unwrap();
    let _: Value = rt
        .admin
        .admin_set_member("acme", "olga", "read")
        .await
        .unwrap();
    let scaling = json!({"minReplica": 1, "maxReplica": 1});
    for ns in ["acme", "olga"] {
        let body = engine_endpoint("ep", "authenticated", &[], scaling.clone());
        let _: Value = rt.admin.create_endpoint(ns, &body).await.unwrap();
    }
    for ns in ["acme", "olga"] {
        let mut status = Value::Null;
        for _ in 0..400 {
            let ep: Value = rt.admin.get_endpoint(ns, "ep").await.unwrap();
            status = ep["status"].clone();
            if status["state"] == "running" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(status["state"], "running", "{ns}/ep never ran: {status}");
    }
    let exchange = |scopes: &'static [&'static str]| {
        let rt = &rt;
        async move {
            let app: Value = rt
                .admin
                .create_oauth_app(&json!({"owner": "acme", "name": "backend", "scopes": scopes, "tokenExchange": true}))
                .await
                .unwrap();
            let tok: Value = rt
                .http
                .post(format!("{}/oauth/token", rt.url))
                .basic_auth(
                    app["app"]["id"].as_str().unwrap(),
                    app["clientSecret"].as_str(),
                )
                .form(&[
                    (
                        "grant_type",
                        "urn:ietf:params:oauth:grant-type:token-exchange",
                    ),
                    ("subject_token", "olga@example.com"),
                    ("subject_token_type", "urn:hub:token-type:user-email"),
                ])
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            format!("Bearer {}", tok["access_token"].as_str().expect("token"))
        }
    };
    let call = |ns: &'static str, bearer: String| {
        let rt = &rt;
        async move {
            rt.http
                .post(format!("{}/endpoints/{ns}/ep/embed", rt.url))
                .header("authorization", bearer)
                .json(&json!({"inputs": "hi"}))
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    let inference = exchange(&["inference-api"]).await;
    assert_eq!(call("acme", inference.clone()).await, 200);
    assert_eq!(
        call("olga", inference).await,
        403,
        "never the member's own namespace"
    );
    let no_scope = exchange(&["openid"]).await;
    assert_eq!(
        call("acme", no_scope).await,
        403,
        "no scope that allows inference"
    );
    rt.shutdown().await;
}

/// Which replica served each of `n` requests.
async fn spread(
    rt: &Rt,
    name: &str,
    n: usize,
    headers: impl Fn(usize) -> Vec<(String, String)>,
) -> Vec<String> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let mut req = rt
            .http
            .post(format!("{}/embed", rt.endpoint_url(name)))
            .json(&json!({"inputs": "x"}));
        for (k, v) in headers(i) {
            req = req.header(k, v);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 200);
        out.push(resp.headers()["x-replica-id"].to_str().unwrap().to_string());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sticky_and_least_connections() {
    let rt = spawn(|c| c.proxy.trusted_proxies = vec!["127.0.0.1/32".into()]).await;
    let mut sticky = engine_endpoint(
        "sticky",
        "public",
        &[],
        json!({"minReplica": 3, "maxReplica": 3}),
    );
    sticky["experimentalFeatures"] = json!({"loadBalancer": "sticky"});
    rt.create(sticky).await;
    let mut least = engine_endpoint(
        "least",
        "public",
        &["--latency-ms", "300", "--capacity", "8"],
        json!({"minReplica": 3, "maxReplica": 3}),
    );
    least["experimentalFeatures"] = json!({"loadBalancer": "least_connections"});
    rt.create(least).await;
    rt.wait_for("sticky", "3 ready", |e| e["status"]["readyReplica"] == 3)
        .await;
    rt.wait_for("least", "3 ready", |e| e["status"]["readyReplica"] == 3)
        .await;

    // Sticky: each client (by forwarded address) always lands on the same replica; clients spread out.
    let clients = 30;
    let first = spread(&rt, "sticky", clients, |i| {
        vec![("x-forwarded-for".into(), format!("10.0.0.{i}"))]
    })
    .await;
    let again = spread(&rt, "sticky", clients, |i| {
        vec![("x-forwarded-for".into(), format!("10.0.0.{i}"))]
    })
    .await;
    assert_eq!(first, again);
    let distinct: std::collections::HashSet<_> = first.iter().collect();
    assert!(
        distinct.len() >= 2,
        "30 clients all on one replica: {first:?}"
    );

    // Least connections: 6 slow requests at once land 2 per replica.
    let reqs = (0..6).map(|_| {
        let http = rt.http.clone();
        let url = format!("{}/embed", rt.endpoint_url("least"));
        tokio::spawn(async move {
            let r = http
                .post(url)
                .json(&json!({"inputs": "x"}))
                .send()
                .await
                .unwrap();
            r.headers()["x-replica-id"].to_str().unwrap().to_string()
        })
    });
    let mut counts: HashMap<String, usize> = HashMap::new();
    for h in reqs.collect::<Vec<_>>() {
        *counts.entry(h.await.unwrap()).or_default() += 1;
    }
    assert_eq!(counts.len(), 3, "{counts:?}");
    assert!(counts.values().all(|c| *c == 2), "{counts:?}");
    rt.shutdown().await;
}

async fn burst(rt: &Rt, name: &str, n: usize, wait_s: &str) -> HashMap<u16, usize> {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let http = rt.http.clone();
            let url = format!("{}/embed", rt.endpoint_url(name));
            let wait = wait_s.to_string();
            tokio::spawn(async move {
                http.post(url)
                    .header("x-scale-up-timeout", wait)
                    .json(&json!({"inputs": format!("t{i}")}))
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
                    .unwrap_or(0)
            })
        })
        .collect();
    let mut counts = HashMap::new();
    for t in tasks {
        *counts.entry(t.await.unwrap()).or_default() += 1;
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_update_and_cold_wake_lose_nothing_under_a_burst() {
    let rt = spawn(|_| {}).await;
    rt.create(engine_endpoint(
        "roll",
        "public",
        &["--capacity", "64"],
        json!({"minReplica": 0, "maxReplica": 1}),
    ))
    .await;
    rt.wait_state("roll", "running").await;
    let before = rt.embed("roll", &[]).await.headers()["x-replica-id"]
        .to_str()
        .unwrap()
        .to_string();

    // A spec change under load: 64 callers send one request after another from before the change until the
    // endpoint runs again, each answer noted with the replica that gave it. New replica ready before the old
    // one stops: every request is answered 200, by the old replica and then by the new one.
    let rolled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let callers: Vec<_> = (0..64)
        .map(|c| {
            let (http, url) = (
                rt.http.clone(),
                format!("{}/embed", rt.endpoint_url("roll")),
            );
            let rolled = rolled.clone();
            tokio::spawn(async move {
                let mut answers: Vec<(u16, String)> = Vec::new();
                for i in 0.. {
                    // Each caller sends once more after it has seen the roll end, so some answers come after.
                    let last = rolled.load(std::sync::atomic::Ordering::SeqCst);
                    let answer = match http
                        .post(&url)
                        .json(&json!({"inputs": format!("{c}-{i}")}))
                        .send()
                        .await
                    {
                        Ok(r) => {
                            let replica = r
                                .headers()
                                .get("x-replica-id")
                                .and_then(|v| v.to_str().ok());
                            (r.status().as_u16(), replica.unwrap_or("").to_string())
                        }
                        Err(e) => (0, e.to_string()),
                    };
                    answers.push(answer);
                    if last {
                        break;
                    }
                }
                answers
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let updated: Value = rt
        .admin
        .update_endpoint(NS, "roll", &json!({"model": {"env": {"GENERATION": "2"}}}))
        .await
        .unwrap();
    assert_eq!(updated["status"]["state"], "updating");
    let ep = rt
        .wait_for("roll", "rolled", |e| e["status"]["state"] == "running")
        .await;
    rolled.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut by_replica: HashMap<String, usize> = HashMap::new();
    let mut failed = Vec::new();
    for caller in callers {
        for (status, replica) in caller.await.unwrap() {
            match status {
                200 => *by_replica.entry(replica).or_default() += 1,
                _ => failed.push((status, replica)),
            }
        }
    }
    assert!(
        failed.is_empty(),
        "lost under the roll: {failed:?} (and {by_replica:?})"
    );
    assert_eq!(ep["status"]["readyReplica"], 1);
    assert_eq!(replica_env(&rt, "roll", "GENERATION").await, "2");
    let after = rt.embed("roll", &[]).await.headers()["x-replica-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert_ne!(before, after);
    assert!(
        by_replica.get(&before).is_some_and(|n| *n > 0) && by_replica.get(&after).is_some_and(|n| *n > 0),
        "the load spanned the roll: answers by the old replica {before} and the new {after}: {by_replica:?}"
    );
    assert_eq!(by_replica.len(), 2, "{by_replica:?}");

    // 0 → 1 under a burst of 1,000 held requests: all answered 200.
    let _: Value = rt
        .admin
        .endpoint_action(NS, "roll", "scale-to-zero")
        .await
        .unwrap();
    rt.wait_for("roll", "no replicas", |e| e["status"]["readyReplica"] == 0)
        .await;
    let counts = burst(&rt, "roll", 1000, "60").await;
    assert_eq!(counts.get(&200), Some(&1000), "{counts:?}");
    assert_eq!(rt.get("roll").await["status"]["state"], "running");
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashes_restarts_failures_and_logs() {
    let rt = spawn(|c| c.runtime.max_crashes = 3).await;
    rt.create(engine_endpoint(
        "crash",
        "public",
        &[],
        json!({"minReplica": 1, "maxReplica": 1}),
    ))
    .await;
    rt.wait_state("crash", "running").await;
    let pids = rt.replica_pids();
    assert_eq!(pids.len(), 1);
    // SAFETY: killing a child process we started.
    unsafe {
        libc::kill(pids[0], libc::SIGKILL);
    }
    let ep = rt
        .wait_for("crash", "restarted", |e| {
            e["status"]["readyReplica"] == 1
                && e["status"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("signal 9"))
        })
        .await;
    assert_eq!(ep["status"]["state"], "running");
    assert_ne!(rt.replica_pids(), pids);

    // Logs: the engine's start line on stderr, with the replica id.
    let logs = rt
        .http
        .get(format!("{}/v2/endpoint/{NS}/crash/logs?tail=50", rt.url))
        .bearer_auth(&rt.token)
        .send()
        .await
        .unwrap();
    assert_eq!(logs.status(), 200);
    let text = logs.text().await.unwrap();
    assert!(text.contains("stderr: test engine pid"), "{text}");
    let bad = rt
        .http
        .get(format!(
            "{}/v2/endpoint/{NS}/crash/logs?since=yesterday",
            rt.url
        ))
        .bearer_auth(&rt.token)
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);

    // An update whose replicas cannot start: updateFailed, and the old replica still serves.
    let _: Value = rt
        .admin
        .update_endpoint(
            NS,
            "crash",
            &json!({"model": {"args": ["--exit-immediately"]}}),
        )
        .await
        .unwrap();
    let ep = rt.wait_state("crash", "updateFailed").await;
    assert!(
        ep["status"]["message"]
            .as_str()
            .unwrap()
            .contains("exit status 2"),
        "{}",
        ep["status"]
    );
    assert_eq!(rt.embed("crash", &[]).await.status(), 200);

    // A new endpoint that cannot start at all: failed, with the reason.
    rt.create(engine_endpoint(
        "never",
        "public",
        &["--exit-immediately"],
        json!({"minReplica": 1, "maxReplica": 1}),
    ))
    .await;
    let ep = rt.wait_state("never", "failed").await;
    let message = ep["status"]["message"].as_str().unwrap().to_string();
    assert!(
        message.contains("exit status 2") && message.contains("told to fail"),
        "{message}"
    );
    let mut missing = engine_endpoint(
        "missing",
        "public",
        &[],
        json!({"minReplica": 1, "maxReplica": 1}),
    );
    missing["model"]["command"] = json!(["/nonexistent/engine"]);
    rt.create(missing).await;
    let ep = rt.wait_state("missing", "failed").await;
    assert!(ep["status"]["message"]
        .as_str()
        .unwrap()
        .contains("/nonexistent/engine"));
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_commands_and_the_cache_need_permission() {
    let rt = spawn(|_| {}).await;
    let _: Value = rt
        .admin
        .admin_create_user(&json!({"name": "bob"}))
        .await
        .unwrap();
    let bob = Client::new(
        &rt.url,
        Some(
            rt.admin
                .admin_create_token("bob", &json!({}))
                .await
                .unwrap(),
        ),
    );
    let err = bob
        .create_endpoint::<Value>(
            "bob",
            &engine_endpoint(
                "mine",
                "public",
                &[],
                json!({"minReplica": 0, "maxReplica": 1}),
            ),
        )
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(reqwest::StatusCode::FORBIDDEN));
    assert!(bob.list_endpoints::<Value>("bob").await.unwrap()["items"]
        .as_array()
        .unwrap()
        .is_empty());
    // The response cache is for administrators too, on create and on update.
    let mut cached = common::endpoint_body("cached");
    cached["cacheHttpResponses"] = json!(true);
    let err = bob
        .create_endpoint::<Value>("bob", &cached)
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(reqwest::StatusCode::FORBIDDEN));
    let _: Value = bob
        .create_endpoint("bob", &common::endpoint_body("plain"))
        .await
        .unwrap();
    let err = bob
        .update_endpoint::<Value>(
            "bob",
            "plain",
            &json!({"experimentalFeatures": {"cacheHttpResponses": true}}),
        )
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(reqwest::StatusCode::FORBIDDEN));
    let ok: Value = rt
        .admin
        .update_endpoint("bob", "plain", &json!({"cacheHttpResponses": true}))
        .await
        .unwrap();
    assert_eq!(ok["cacheHttpResponses"], true);
    // Once on, others may change other fields.
    let _: Value = bob
        .update_endpoint("bob", "plain", &json!({"tags": ["x"]}))
        .await
        .unwrap();
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_router_sidecar_routes_every_request() {
    let rt = spawn(|c| {
        c.runtime.routers.insert(
            "test-router".into(),
            switchyard_server::config::Launcher {
                command: vec![
                    engine_bin(),
                    "--port".into(),
                    "{port}".into(),
                    "--router".into(),
                ],
                ..Default::default()
            },
        );
    })
    .await;
    let mut routed = engine_endpoint(
        "routed",
        "public",
        &[],
        json!({"minReplica": 2, "maxReplica": 2}),
    );
    routed["customRouter"] = json!({"tag": "test-router"});
    routed["experimentalFeatures"] = json!({"loadBalancer": "sticky"});
    rt.create(routed).await;
    rt.wait_for("routed", "2 ready", |e| e["status"]["readyReplica"] == 2)
        .await;
    // Served only once the sidecar knows both replicas; then every request goes through it, and its own
    // round robin (not the sticky balancer, which a custom router overrides) reaches both.
    let mut seen = std::collections::HashSet::new();
    for _ in 0..200 {
        let r = rt.embed("routed", &[]).await;
        if r.status() != 200 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        assert_eq!(r.headers()["x-routed-by"], "test-router");
        seen.insert(r.headers()["x-replica-id"].to_str().unwrap().to_string());
        if seen.len() == 2 {
            break;
        }
    }
    assert_eq!(seen.len(), 2, "{seen:?}");

    // Removing the router (a null tag) goes back to the balancer: no more x-routed-by.
    let _: Value = rt
        .admin
        .update_endpoint(NS, "routed", &json!({"customRouter": {"tag": null}}))
        .await
        .unwrap();
    let mut direct = false;
    for _ in 0..100 {
        let r = rt.embed("routed", &[]).await;
        if r.status() == 200 && r.headers().get("x-routed-by").is_none() {
            direct = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(direct, "requests still go through the removed router");

    // A tag no router is configured for: failed, saying why.
    let mut unknown = engine_endpoint(
        "unknown-router",
        "public",
        &[],
        json!({"minReplica": 1, "maxReplica": 1}),
    );
    unknown["customRouter"] = json!({"tag": "nope"});
    rt.create(unknown).await;
    let ep = rt.wait_state("unknown-router", "failed").await;
    assert!(
        ep["status"]["message"]
            .as_str()
            .unwrap()
            .contains("runtime.routers.nope"),
        "{}",
        ep["status"]
    );
    let pids = rt.shutdown().await;
    assert!(pids.iter().all(|p| !alive(*p)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_private_entry_point_lets_idle_and_slow_connections_go() {
    let rt = spawn(|c| {
        c.proxy.private_listen = Some("127.0.0.1:0".parse().unwrap());
        // Served by hyper: the header's time is the idle one too (an idle time of 600 s would outlast the
        // test's 20 s wait).
        c.proxy.idle_timeout_s = 600;
        c.proxy.header_timeout_s = 1;
    })
    .await;
    let private_addr = rt.private_addr.expect("private listener");
    // A connection that says nothing, and one whose head never ends: both closed, nothing written.
    for sent in [&b""[..], b"GET /endpoints/admin/x/ HTTP/1.1\r\nHost: x\r\n"] {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut tcp = tokio::net::TcpStream::connect(private_addr).await.unwrap();
        tcp.write_all(sent).await.unwrap();
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(20), tcp.read_to_end(&mut got)).await;
        assert!(
            matches!(read, Ok(Ok(0))),
            "{:?} after {:?}",
            read,
            String::from_utf8_lossy(sent)
        );
    }
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_entry_point_mcp_sessions_and_metrics() {
    let rt = spawn(|c| c.proxy.private_listen = Some("127.0.0.1:0".parse().unwrap())).await;
    let private_addr = rt.private_addr.expect("private listener");
    let mut private = engine_endpoint(
        "priv",
        "private",
        &[],
        json!({"minReplica": 1, "maxReplica": 1}),
    );
    private["privateService"] = json!({"accountId": "123456789012", "region": "us-east-1"});
    rt.create(private).await;
    let mut mcp = engine_endpoint(
        "mcp",
        "public",
        &[],
        json!({"minReplica": 3, "maxReplica": 3}),
    );
    mcp["experimentalFeatures"] = json!({"mcpLb": {"stateful": true}});
    rt.create(mcp).await;
    rt.wait_state("priv", "running").await;
    rt.wait_for("mcp", "3 ready", |e| e["status"]["readyReplica"] == 3)
        .await;

    // A private endpoint is not served on the public listener at all…
    assert_eq!(rt.embed("priv", &[]).await.status(), 404);
    // …and on the private entry point only for its account.
    let url = format!("http://{private_addr}/endpoints/{NS}/priv/embed");
    let post = |account: Option<&'static str>| {
        let mut req = rt.http.post(&url).json(&json!({"inputs": "x"}));
        if let Some(a) = account {
            req = req.header("x-private-link-account", a);
        }
        req.send()
    };
    assert_eq!(post(Some("123456789012")).await.unwrap().status(), 200);
    assert_eq!(post(Some("999999999999")).await.unwrap().status(), 403);
    assert_eq!(post(None).await.unwrap().status(), 403);
    // Public endpoints do not exist on the private entry point.
    let public_there = rt
        .http
        .post(format!("http://{private_addr}/endpoints/{NS}/mcp/embed"))
        .json(&json!({"inputs": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(public_there.status(), 404);

    // MCP sessions stay on the replica that issued them.
    let mcp_url = format!("{}/mcp", rt.endpoint_url("mcp"));
    for _ in 0..5 {
        let first = rt.http.post(&mcp_url).body("{}").send().await.unwrap();
        let session = first.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_string();
        let replica = first.headers()["x-replica-id"]
            .to_str()
            .unwrap()
            .to_string();
        for _ in 0..10 {
            let next = rt
                .http
                .post(&mcp_url)
                .header("mcp-session-id", &session)
                .body("{}")
                .send()
                .await
                .unwrap();
            assert_eq!(next.headers()["x-replica-id"].to_str().unwrap(), replica);
            assert_eq!(next.json::<Value>().await.unwrap()["known"], true);
        }
    }

    // Metrics: an administrator's token is needed; the counters are there (the 404 on the private entry
    // point counts for `mcp` too). The replica gauge follows the state at the runtime's next tick.
    assert_eq!(
        rt.http
            .get(format!("{}/metrics", rt.url))
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    let mut text = String::new();
    for _ in 0..100 {
        text = rt
            .http
            .get(format!("{}/metrics", rt.url))
            .bearer_auth(&rt.token)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if text.contains("switchyard_endpoint_ready_replicas{namespace=\"admin\",endpoint=\"mcp\",state=\"running\"} 3") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = rt.get("mcp").await["status"].clone();
    assert!(text.contains("switchyard_endpoint_ready_replicas{namespace=\"admin\",endpoint=\"mcp\",state=\"running\"} 3"), "{status} {text}");
    assert!(text.contains("switchyard_proxy_requests_total{namespace=\"admin\",endpoint=\"mcp\",status=\"200\"} 55"), "{text}");
    assert!(text.contains("switchyard_proxy_requests_total{namespace=\"admin\",endpoint=\"mcp\",status=\"404\"} 1"), "{text}");
    assert!(text.contains("switchyard_proxy_requests_total{namespace=\"admin\",endpoint=\"priv\",status=\"403\"} 2"), "{text}");
    assert!(text.contains("switchyard_proxy_request_duration_seconds_count{namespace=\"admin\",endpoint=\"mcp\"} 56"), "{text}");
    rt.shutdown().await;
}

/// Sets the manual clock to today's `hh:mm` UTC (the schedule's time of day).
fn at(rt: &Rt, hh: u32, mm: u32) {
    let today = Utc::now()
        .date_naive()
        .and_hms_opt(hh, mm, 0)
        .expect("time")
        .and_utc();
    rt.clock.set(today);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_raises_and_lowers_the_bounds() {
    let rt = spawn(|_| {}).await;
    at(&rt, 7, 0);
    // 08:00–18:00 at least 2 replicas; 18:00–22:00 at most 1; from 22:00 (wrapping past midnight to 08:00)
    // none needed, scale to zero after 5 idle minutes.
    let schedule = json!([
        {"at": "08:00", "minReplica": 2, "maxReplica": 3},
        {"at": "18:00", "minReplica": 1, "maxReplica": 1},
        {"at": "22:00", "minReplica": 0, "maxReplica": 3, "scaleToZeroTimeout": 5}
    ]);
    rt.create(engine_endpoint(
        "sched",
        "public",
        &[],
        json!({"minReplica": 0, "maxReplica": 3, "schedule": schedule}),
    ))
    .await;
    // 07:00 is in the 22:00 entry (midnight wrap): one replica for now, then idle → scaled to zero after 5 min.
    rt.wait_state("sched", "running").await;
    rt.clock.advance(chrono::Duration::minutes(6));
    rt.wait_state("sched", "scaledToZero").await;
    // 08:00: the entry raises the minimum to 2 and starts the scaled-to-zero endpoint.
    at(&rt, 8, 0);
    let ep = rt
        .wait_for("sched", "2 ready", |e| e["status"]["readyReplica"] == 2)
        .await;
    assert_eq!(ep["status"]["targetReplica"], 2);
    // 18:00: the maximum drops to 1: the extra replica goes at once, without waiting for stabilization.
    at(&rt, 18, 0);
    let ep = rt
        .wait_for("sched", "1 replica", |e| {
            e["status"]["targetReplica"] == 1 && e["status"]["readyReplica"] == 1
        })
        .await;
    assert_eq!(ep["status"]["state"], "running");
    // The minimum is 1 until 22:00: hours without requests do not scale it to zero.
    at(&rt, 21, 59);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rt.get("sched").await["status"]["state"], "running");
    // After 22:00 the idle timeout of the entry applies.
    at(&rt, 22, 6);
    rt.wait_state("sched", "scaledToZero").await;
    // A paused endpoint is left alone, even when an entry raises the minimum.
    let _: Value = rt
        .admin
        .endpoint_action(NS, "sched", "pause")
        .await
        .unwrap();
    at(&rt, 8, 30);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ep = rt.get("sched").await;
    assert_eq!(ep["status"]["state"], "paused");
    assert_eq!(ep["status"]["readyReplica"], 0);
    assert!(rt.replica_pids().is_empty());
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_requests_and_inference_load_scale_out() {
    let rt = spawn(|c| {
        c.runtime.scaling.evaluation_window_s = 2;
        c.runtime.scaling.scale_up_stabilization_s = 0;
        c.runtime.launchers.insert(
            "vLLM".into(),
            switchyard_server::config::Launcher {
                command: vec![
                    engine_bin(),
                    "--port".into(),
                    "{port}".into(),
                    "--latency-ms".into(),
                    "200".into(),
                    "--capacity".into(),
                    "1".into(),
                ],
                ..Default::default()
            },
        );
    })
    .await;
    let pending = engine_endpoint(
        "pending",
        "public",
        &["--latency-ms", "200", "--capacity", "1"],
        json!({"minReplica": 1, "maxReplica": 3, "measure": {"pendingRequests": 1.0}}),
    );
    rt.create(pending).await;
    let mut vllm = engine_endpoint(
        "vllm",
        "public",
        &[],
        json!({"minReplica": 1, "maxReplica": 3, "measure": {"inferenceLoad": {"requestsWaiting": 1.0}}}),
    );
    vllm["model"] = json!({"repository": "org/llm", "framework": "pytorch", "image": {"vLLM": {"url": "local/vllm"}}});
    rt.create(vllm).await;
    rt.wait_state("pending", "running").await;
    rt.wait_state("vllm", "running").await;

    // Keep 6 requests in flight against each; move the clock so samples spread over the window.
    let load = |name: &'static str| {
        let http = rt.http.clone();
        let url = format!("{}/embed", rt.endpoint_url(name));
        tokio::spawn(async move {
            let workers: Vec<_> = (0..6)
                .map(|_| {
                    let (http, url) = (http.clone(), url.clone());
                    tokio::spawn(async move {
                        for _ in 0..40 {
                            let _ = http.post(&url).json(&json!({"inputs": "x"})).send().await;
                        }
                    })
                })
                .collect();
            for w in workers {
                let _ = w.await;
            }
        })
    };
    let loads = [load("pending"), load("vllm")];
    let mut grown = (false, false);
    for _ in 0..200 {
        rt.clock.advance(chrono::Duration::milliseconds(500));
        tokio::time::sleep(Duration::from_millis(50)).await;
        grown.0 |= rt.get("pending").await["status"]["targetReplica"]
            .as_u64()
            .unwrap_or(0)
            > 1;
        grown.1 |= rt.get("vllm").await["status"]["targetReplica"]
            .as_u64()
            .unwrap_or(0)
            > 1;
        if grown.0 && grown.1 {
            break;
        }
    }
    assert!(
        grown.0,
        "pendingRequests never scaled out: {}",
        rt.get("pending").await["status"]
    );
    assert!(
        grown.1,
        "inferenceLoad never scaled out: {}",
        rt.get("vllm").await["status"]
    );
    for l in loads {
        l.abort();
    }
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_load_sends_requests_away_from_a_replica_whose_engine_is_busy() {
    let rt = spawn(|_| {}).await;
    let mut body = engine_endpoint(
        "balanced",
        "public",
        &["--latency-ms", "400", "--capacity", "1"],
        json!({"minReplica": 2, "maxReplica": 2}),
    );
    body["experimentalFeatures"] = json!({"loadBalancer": "least_load"});
    rt.create(body).await;
    rt.wait_state("balanced", "running").await;
    let echo = || async {
        let url = format!("{}/echo", rt.endpoint_url("balanced"));
        let answer = rt.http.post(url).body("x").send().await.expect("echo");
        let field = |name: &str| answer.headers()[name].to_str().unwrap().to_string();
        (field("x-replica-id"), field("x-replica-address"))
    };
    // Both replicas, as they answer through the proxy (idle, they tie, and ties go either way).
    let mut seen = std::collections::BTreeMap::new();
    for _ in 0..400 {
        let (id, address) = echo().await;
        seen.insert(id, address);
        if seen.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(seen.len(), 2, "both replicas serve: {seen:?}");
    let (busy_id, busy_address) = seen
        .iter()
        .next()
        .map(|(i, a)| (i.clone(), a.clone()))
        .unwrap();
    // That one is loaded directly, not through the proxy: only its engine knows (8 inferences queue for its one
    // slot, and more keep coming).
    let load: Vec<_> = (0..8)
        .map(|_| {
            let (http, url) = (rt.http.clone(), format!("http://{busy_address}/embed"));
            tokio::spawn(async move {
                loop {
                    let _ = http.post(&url).json(&json!({"inputs": "x"})).send().await;
                }
            })
        })
        .collect();
    // Once the runtime has read its queue, requests through the proxy go to the other one: twenty in a row
    // (at random, that happens about once in five thousand runs).
    let mut in_a_row = 0;
    for _ in 0..400 {
        let (id, _) = echo().await;
        in_a_row = if id == busy_id { 0 } else { in_a_row + 1 };
        if in_a_row == 20 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let metrics = rt
        .http
        .get(format!("http://{busy_address}/metrics"))
        .send()
        .await;
    let metrics = metrics.expect("metrics").text().await.expect("text");
    // The replicas' load as the API gives it (the console's describe shows it): the busy one's queue.
    let mut busy_queue = None;
    for _ in 0..100 {
        let replicas: Value = rt.admin.endpoint_replicas(NS, "balanced").await.unwrap();
        let items = replicas["items"].as_array().cloned().unwrap_or_default();
        assert_eq!(items.len(), 2, "{replicas}");
        busy_queue = items
            .iter()
            .find(|r| r["id"] == busy_id.as_str())
            .and_then(|r| r["queue"].as_f64());
        if busy_queue.is_some_and(|q| q >= 1.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    for task in load {
        task.abort();
    }
    assert!(busy_queue.is_some_and(|q| q >= 1.0), "{busy_queue:?}");
    assert_eq!(in_a_row, 20, "the busy replica kept getting requests");
    let waiting = metrics
        .lines()
        .find_map(|l| l.strip_prefix("vllm:num_requests_waiting "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert!(
        waiting.is_some_and(|w| w >= 1.0),
        "its engine had a queue: {metrics}"
    );
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_lines_name_each_requests_replica_and_what_chose_it() {
    for own_path in [true, false] {
        let rt = spawn(|c| {
            c.proxy.own_path = own_path;
            c.proxy.access_log = true;
        })
        .await;
        let body = engine_endpoint(
            "logged",
            "public",
            &[],
            json!({"minReplica": 2, "maxReplica": 2}),
        );
        rt.create(body).await;
        rt.wait_for("logged", "2 ready", |e| e["status"]["readyReplica"] == 2)
            .await;
        let mut answered = Vec::new();
        for n in 0..6 {
            let url = format!("{}/seen/x?n={n}", rt.endpoint_url("logged"));
            let answer = rt.http.get(url).send().await.expect("request");
            assert_eq!(answer.status(), 200);
            answered.push(
                answer.headers()["x-replica-id"]
                    .to_str()
                    .unwrap()
                    .to_string(),
            );
        }
        let wanted: Vec<String> = answered
            .iter()
            .enumerate()
            .map(|(n, replica)| {
                format!(" {replica} access: GET /endpoints/admin/logged/seen/x?n={n} 200 ")
            })
            .collect();
        let mut logs = String::new();
        for _ in 0..100 {
            logs = rt.admin.endpoint_logs(NS, "logged", 1000).await.unwrap();
            let all = wanted.iter().all(|w| {
                logs.lines()
                    .any(|l| l.contains(w) && l.ends_with("ms by=balancer"))
            });
            if all {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for w in &wanted {
            let found = logs
                .lines()
                .any(|l| l.contains(w) && l.ends_with("ms by=balancer"));
            assert!(found, "{w} in:\n{logs}");
        }
        rt.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_load_keeps_a_conversation_on_one_replica_until_that_replica_is_loaded() {
    for own_path in [true, false] {
        let rt = spawn(|c| c.proxy.own_path = own_path).await;
        let mut body = engine_endpoint(
            "affine",
            "public",
            &["--latency-ms", "400", "--capacity", "1"],
            json!({"minReplica": 3, "maxReplica": 3}),
        );
        body["experimentalFeatures"] = json!({"loadBalancer": "least_load"});
        rt.create(body).await;
        rt.wait_for("affine", "3 ready", |e| e["status"]["readyReplica"] == 3)
            .await;
        let system = "You answer questions about trains, briefly and politely. ".repeat(8);
        let turn = |n: usize| {
            let url = format!("{}/echo", rt.endpoint_url("affine"));
            let chat = json!({"messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": format!("question {n}")},
            ]});
            let req = rt.http.post(url).json(&chat);
            async move {
                let answer = req.send().await.expect("echo");
                let field = |name: &str| answer.headers()[name].to_str().unwrap().to_string();
                (field("x-replica-id"), field("x-replica-address"))
            }
        };
        // One conversation, one replica (at random, ten in a row on one of three: once in 19,683 runs).
        let (home, home_address) = turn(0).await;
        for n in 1..10 {
            assert_eq!(turn(n).await.0, home, "turn {n} left its replica");
        }
        // Loaded from outside the proxy (its engine's queue grows), it is left for the least loaded.
        let load: Vec<_> = (0..8)
            .map(|_| {
                let (http, url) = (rt.http.clone(), format!("http://{home_address}/embed"));
                tokio::spawn(async move {
                    loop {
                        let _ = http.post(&url).json(&json!({"inputs": "x"})).send().await;
                    }
                })
            })
            .collect();
        let mut away = 0;
        for n in 10..400 {
            away = if turn(n).await.0 == home { 0 } else { away + 1 };
            if away == 10 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        for task in load {
            task.abort();
        }
        assert_eq!(away, 10, "the conversation stayed on its loaded replica");
        rt.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hardware_usage_scales_out_streams_pass_through_and_logs_follow() {
    let rt = spawn(|c| {
        c.runtime.scaling.evaluation_window_s = 2;
        c.runtime.scaling.scale_up_stabilization_s = 0;
    })
    .await;
    rt.create(engine_endpoint(
        "cpu",
        "public",
        &["--busy", "--latency-ms", "100", "--capacity", "1"],
        json!({"minReplica": 1, "maxReplica": 2, "measure": {"hardwareUsage": 20.0}}),
    ))
    .await;
    rt.wait_state("cpu", "running").await;

    // Follow the logs from now on: the scale-out's new replica announces itself there.
    let mut follow = rt
        .http
        .get(format!(
            "{}/v2/endpoint/{NS}/cpu/logs?tail=0&follow=true",
            rt.url
        ))
        .bearer_auth(&rt.token)
        .send()
        .await
        .unwrap();
    assert_eq!(follow.status(), 200);

    // A stream passes through as it is produced: the first event arrives before the last is sent.
    let mut sse = rt
        .http
        .get(format!(
            "{}/stream?n=3&interval_ms=400",
            rt.endpoint_url("cpu")
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(sse.headers()["content-type"], "text/event-stream");
    let first = String::from_utf8(sse.chunk().await.unwrap().unwrap().to_vec()).unwrap();
    assert!(
        first.contains("data: 0") && !first.contains("data: 2"),
        "{first:?}"
    );

    // One CPU kept busy against a 20% threshold: the replica count grows to the maximum.
    let url = format!("{}/embed", rt.endpoint_url("cpu"));
    let http = rt.http.clone();
    let load = tokio::spawn(async move {
        for _ in 0..100 {
            let _ = http.post(&url).json(&json!({"inputs": "x"})).send().await;
        }
    });
    let mut grown = false;
    for _ in 0..100 {
        rt.clock.advance(chrono::Duration::milliseconds(500));
        tokio::time::sleep(Duration::from_millis(100)).await;
        if rt.get("cpu").await["status"]["targetReplica"] == 2 {
            grown = true;
            break;
        }
    }
    assert!(
        grown,
        "hardwareUsage never scaled out: {}",
        rt.get("cpu").await["status"]
    );
    load.abort();
    let mut followed = String::new();
    while !followed.contains("test engine pid") {
        match tokio::time::timeout(Duration::from_secs(20), follow.chunk()).await {
            Ok(Ok(Some(c))) => followed.push_str(&String::from_utf8_lossy(&c)),
            other => panic!("the log stream ended or stalled ({other:?}): {followed}"),
        }
    }
    assert!(followed.contains("stderr: test engine pid"), "{followed}");
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_domains_and_host_code_are_guarded() {
    // MODE is a variable of this server's own choosing that tenants may set.
    let rt = spawn(|c| c.runtime.tenant_env.push("MODE".into())).await;
    let mut routed = engine_endpoint(
        "dom",
        "public",
        &[],
        json!({"minReplica": 1, "maxReplica": 1}),
    );
    routed["route"] = json!({"domain": "models.example.com", "path": "/emb"});
    rt.create(routed).await;
    rt.wait_state("dom", "running").await;
    // Served by Host + path prefix…
    let via_domain = rt
        .http
        .post(format!("{}/emb/embed", rt.url))
        .header("host", "models.example.com")
        .json(&json!({"inputs": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(via_domain.status(), 200);
    // …but only there: the server's own address still answers the API.
    let api = rt
        .http
        .post(format!("{}/emb/embed", rt.url))
        .json(&json!({"inputs": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), 404);
    // Under the prefix, with any port, case or trailing dot in Host, the replica answers (its health
    // route here).
    let health = rt
        .http
        .get(format!("{}/emb/health", rt.url))
        .header("host", "Models.Example.COM.:8443")
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert!(health.headers().contains_key("x-replica-id"));

    // No endpoint can claim a taken domain and path, nor the server's own names.
    let mut twin = engine_endpoint(
        "twin",
        "public",
        &[],
        json!({"minReplica": 0, "maxReplica": 1}),
    );
    twin["route"] = json!({"domain": "MODELS.example.com", "path": "/emb/"});
    let err = rt
        .admin
        .create_endpoint::<Value>(NS, &twin)
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(reqwest::StatusCode::CONFLICT));
    for own in ["localhost", "127.0.0.1"] {
        let mut bad = engine_endpoint(
            "own",
            "public",
            &[],
            json!({"minReplica": 0, "maxReplica": 1}),
        );
        bad["route"] = json!({"domain": own, "path": "/"});
        let err = rt
            .admin
            .create_endpoint::<Value>(NS, &bad)
            .await
            .unwrap_err();
        assert_eq!(
            err.status(),
            Some(reqwest::StatusCode::BAD_REQUEST),
            "{own}"
        );
    }
    let plain = engine_endpoint(
        "plain",
        "public",
        &[],
        json!({"minReplica": 0, "maxReplica": 1}),
    );
    rt.create(plain).await;
    let err = rt
        .admin
        .update_endpoint::<Value>(
            NS,
            "plain",
            &json!({"route": {"domain": "models.example.com", "path": "/emb"}}),
        )
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(reqwest::StatusCode::CONFLICT));

    // Variables that change what an engine runs are code execution: not for everyone.
    let _: Value = rt
        .admin
        .admin_create_user(&json!({"name": "eve"}))
        .await
        .unwrap();
    let eve = Client::new(
        &rt.url,
        Some(
            rt.admin
                .admin_create_token("eve", &json!({}))
                .await
                .unwrap(),
        ),
    );
    let mut sneaky = common::endpoint_body("sneaky");
    sneaky["model"]["env"] = json!({"LD_PRELOAD": "/tmp/evil.so"});
    let err = eve
        .create_endpoint::<Value>("eve", &sneaky)
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(reqwest::StatusCode::FORBIDDEN));
    let _: Value = eve
        .create_endpoint("eve", &common::endpoint_body("honest"))
        .await
        .unwrap();
    let err = eve
        .update_endpoint::<Value>(
            "eve",
            "honest",
            &json!({"model": {"secrets": {"PYTHONSTARTUP": "/tmp/x.py"}}}),
        )
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(reqwest::StatusCode::FORBIDDEN));
    let ok: Value = eve
        .update_endpoint(
            "eve",
            "honest",
            &json!({"model": {"env": {"MODE": "fast"}}}),
        )
        .await
        .unwrap();
    assert_eq!(ok["model"]["env"]["MODE"], "fast");
    rt.shutdown().await;
}

/// The scaler keeps a namespace within its replica quota, even one an administrator lowered below what
/// the namespace's endpoints ask for; a token revoked through the API is refused by the proxy at once,
/// cached answers notwithstanding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_hold_the_scaler_and_revocations_reach_the_proxy() {
    use reqwest::Method;
    let rt = spawn(|_| {}).await;
    let scaling = json!({"minReplica": 2, "maxReplica": 2});
    rt.create(engine_endpoint("held", "authenticated", &[], scaling))
        .await;
    rt.wait_for("held", "two replicas ready", |e| {
        e["status"]["readyReplica"] == 2
    })
    .await;

    let _: Value = rt
        .admin
        .request(
            Method::PUT,
            &format!("/api/v1/admin/quotas/{NS}"),
            Some(&json!({"replicas": 1})),
        )
        .await
        .expect("set quota");
    let ep = rt
        .wait_for("held", "held to one replica", |e| {
            e["status"]["targetReplica"] == 1 && e["status"]["readyReplica"] == 1
        })
        .await;
    assert_eq!(
        ep["compute"]["scaling"]["minReplica"], 2,
        "the spec is unchanged"
    );

    // A token that just worked through the proxy (its answer cached) stops at once when revoked.
    let issued: Value = rt
        .admin
        .request(
            Method::POST,
            &format!("/api/v1/admin/users/{NS}/tokens"),
            Some(&json!({"displayName": "short-lived"})),
        )
        .await
        .expect("token");
    let token = issued["token"].as_str().expect("token").to_string();
    let id = issued["info"]["id"].as_str().expect("id").to_string();
    let bearer = format!("Bearer {token}");
    let ok = rt.embed("held", &[("authorization", &bearer)]).await;
    assert_eq!(ok.status(), 200);
    rt.admin
        .request::<Value>(Method::DELETE, &format!("/api/v1/admin/tokens/{id}"), None)
        .await
        .expect("revoke");
    let refused = rt.embed("held", &[("authorization", &bearer)]).await;
    assert_eq!(refused.status(), 401);
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_domain_belongs_to_one_namespace() {
    let rt = spawn(|_| {}).await;
    let _alice = tenant(&rt, "alice").await;
    let bob = tenant(&rt, "bob").await;
    // alice's site, made by an administrator in her namespace: the first to route the domain claims it.
    let mut site = engine_endpoint(
        "site",
        "public",
        &[],
        json!({"minReplica": 1, "maxReplica": 1}),
    );
    site["route"] = json!({"domain": "alice.example.com", "path": "/"});
    let _: Value = rt
        .admin
        .create_endpoint("alice", &site)
        .await
        .expect("alice's site");
    let routed = |domain: &str, path: &str, name: &str| {
        let mut body = common::endpoint_body(name);
        body["route"] = json!({"domain": domain, "path": path});
        body
    };

    // bob may not add a path under it, on create or on update.
    let err = bob
        .create_endpoint::<Value>("bob", &routed("alice.example.com", "/admin", "grab"))
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(reqwest::StatusCode::CONFLICT));
    assert!(
        err.to_string().contains("belongs to another namespace"),
        "{err}"
    );
    let _: Value = bob
        .create_endpoint("bob", &common::endpoint_body("plain"))
        .await
        .expect("bob's own endpoint");
    let err = bob
        .update_endpoint::<Value>(
            "bob",
            "plain",
            &json!({"route": {"domain": "alice.example.com", "path": "/admin"}}),
        )
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(reqwest::StatusCode::CONFLICT));
    // Nor any of the server's own names.
    for own in [
        "localhost.localdomain",
        "api.localhost",
        "localhost6.localdomain6",
    ] {
        let err = bob
            .create_endpoint::<Value>("bob", &routed(own, "/", "own"))
            .await
            .unwrap_err();
        assert_eq!(
            err.status(),
            Some(reqwest::StatusCode::BAD_REQUEST),
            "{own}"
        );
    }
    // alice's namespace may add paths under her domain.
    let _: Value = rt
        .admin
        .create_endpoint("alice", &routed("alice.example.com", "/api", "api"))
        .await
        .expect("another path of alice's");

    // Requests for her domain, any path, reach her site.
    for _ in 0..600 {
        let ep: Value = rt.admin.get_endpoint("alice", "site").await.expect("get");
        if ep["status"]["state"] == "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let via = |path: &str, host: &str| {
        rt.http
            .get(format!("{}{path}", rt.url))
            .header("host", host)
            .send()
    };
    let answer = via("/admin/users", "alice.example.com").await.expect("GET");
    let replica = answer
        .headers()
        .get("x-replica-id")
        .and_then(|v| v.to_str().ok());
    assert!(
        replica.is_some_and(|r| r.starts_with("site-")),
        "{replica:?}"
    );
    // The API's names stay the API's.
    let api = via("/health", "localhost.localdomain").await.expect("GET");
    assert_eq!(api.status(), 200);
    assert!(!api.headers().contains_key("x-replica-id"));

    // An administrator sees whose each domain is, assigns one ahead of its first endpoint, and cannot
    // give away or release one that endpoints route under.
    let list: Value = rt
        .admin
        .request(reqwest::Method::GET, "/api/v1/admin/domains", None)
        .await
        .expect("list");
    assert_eq!(list[0]["domain"], "alice.example.com");
    assert_eq!(list[0]["namespace"], "alice");
    assert_eq!(list[0]["assignedBy"], Value::Null);
    let assign = |domain: &str, ns: &str| {
        let path = format!("/api/v1/admin/domains/{domain}");
        let admin = rt.admin.clone();
        let body = json!({"namespace": ns});
        async move {
            admin
                .request::<Value>(reqwest::Method::PUT, &path, Some(&body))
                .await
        }
    };
    let given = assign("bob.example.com", "bob").await.expect("assign");
    assert_eq!(
        (&given["namespace"], &given["assignedBy"]),
        (&json!("bob"), &json!("admin"))
    );
    let err = rt
        .admin
        .create_endpoint::<Value>("alice", &routed("bob.example.com", "/", "taken"))
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(reqwest::StatusCode::CONFLICT));
    let _: Value = bob
        .create_endpoint("bob", &routed("bob.example.com", "/", "mine"))
        .await
        .expect("bob routes his own domain");
    let err = assign("alice.example.com", "bob").await.unwrap_err();
    assert_eq!(err.status(), Some(reqwest::StatusCode::CONFLICT));
    let err = assign("localhost.localdomain", "bob").await.unwrap_err();
    assert_eq!(err.status(), Some(reqwest::StatusCode::BAD_REQUEST));
    let release = |domain: &str| {
        let path = format!("/api/v1/admin/domains/{domain}");
        let admin = rt.admin.clone();
        async move {
            admin
                .request::<Value>(reqwest::Method::DELETE, &path, None)
                .await
        }
    };
    let err = release("bob.example.com").await.unwrap_err();
    assert_eq!(err.status(), Some(reqwest::StatusCode::CONFLICT));
    // A tenant cannot assign.
    let err = bob
        .request::<Value>(
            reqwest::Method::PUT,
            "/api/v1/admin/domains/x.example.com",
            Some(&json!({"namespace": "bob"})),
        )
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(reqwest::StatusCode::FORBIDDEN));
    rt.shutdown().await;
}

/// `CUDA_VISIBLE_DEVICES` of each replica process running now.
/// A variable of the environment a replica of `endpoint` runs with, as the test engine answers it
/// (`/env/NAME`, through the proxy).
async fn replica_env(rt: &Rt, endpoint: &str, var: &str) -> String {
    let url = format!("{}/env/{var}", rt.endpoint_url(endpoint));
    let answer = rt.http.get(url).send().await.expect("env");
    answer.text().await.expect("text")
}

fn visible_devices(rt: &Rt) -> Vec<String> {
    let mut seen: Vec<String> = rt
        .replica_pids()
        .into_iter()
        .filter_map(|pid| std::fs::read(format!("/proc/{pid}/environ")).ok())
        .filter_map(|env| {
            env.split(|b| *b == 0)
                .find_map(|kv| kv.strip_prefix(b"CUDA_VISIBLE_DEVICES="))
                .map(|v| String::from_utf8_lossy(v).into_owned())
        })
        .collect();
    seen.sort();
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpus_are_placed_one_replica_each_and_a_replica_waits_for_a_free_one() {
    let rt = spawn(|c| c.runtime.gpus = Some(vec!["0".into(), "1".into()])).await;
    let gpu = |name: &str, n: u32| {
        let mut body = engine_endpoint(
            name,
            "public",
            &[],
            json!({"minReplica": n, "maxReplica": n}),
        );
        body["compute"]["accelerator"] = json!("gpu");
        body["compute"]["instanceType"] = json!("nvidia-t4");
        body["compute"]["instanceSize"] = json!("x1");
        body
    };
    // The hardware list offers what two GPUs can hold, and no more.
    let hardware: Value = rt
        .admin
        .request(reqwest::Method::GET, "/v2/provider/admin", None)
        .await
        .expect("hardware");
    let status_of = |size: &str| {
        hardware["vendors"][0]["regions"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|r| r["computes"].as_array().into_iter().flatten())
            .find(|c| c["instanceType"] == "nvidia-t4" && c["instanceSize"] == size)
            .map(|c| c["status"].clone())
    };
    assert_eq!(status_of("x1"), Some(json!("available")));
    assert_eq!(status_of("x4"), Some(json!("unavailable")));

    // Two replicas of `a`: a GPU each, not the same one.
    rt.create(gpu("a", 2)).await;
    rt.wait_for("a", "two ready", |e| e["status"]["readyReplica"] == 2)
        .await;
    assert_eq!(visible_devices(&rt), ["0", "1"]);
    // `b` finds none free: pending, saying for whom.
    rt.create(gpu("b", 1)).await;
    let b = rt
        .wait_for("b", "waiting", |e| {
            e["status"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("waiting for a free GPU"))
        })
        .await;
    assert_eq!(b["status"]["state"], "pending");
    assert_eq!(
        b["status"]["message"],
        "waiting for a free GPU (2 of 2 held by admin/a, admin/a)"
    );
    // `a` lets one go: `b` starts on it.
    let _: Value = rt
        .admin
        .update_endpoint(
            NS,
            "a",
            &json!({"compute": {"scaling": {"minReplica": 1, "maxReplica": 1}}}),
        )
        .await
        .expect("scale a down");
    rt.wait_state("b", "running").await;
    let seen = replica_env(&rt, "b", "CUDA_VISIBLE_DEVICES").await;
    assert!(seen == "0" || seen == "1", "{seen}");
    rt.wait_for("a", "one replica", |e| e["status"]["readyReplica"] == 1)
        .await;
    assert_eq!(visible_devices(&rt), ["0", "1"], "still one each");
    // An update with no GPU to spare: the old replica makes room for the new one (a gap, never a stall).
    let _: Value = rt
        .admin
        .update_endpoint(NS, "b", &json!({"model": {"env": {"GENERATION": "2"}}}))
        .await
        .expect("update b");
    rt.wait_for("b", "rolled", |e| {
        e["status"]["state"] == "running" && e["status"]["readyReplica"] == 1
    })
    .await;
    assert_eq!(replica_env(&rt, "b", "GENERATION").await, "2");
    assert_eq!(visible_devices(&rt), ["0", "1"], "still one each");
    rt.shutdown().await;
}

/// A user of the server that is not an administrator, with a token.
async fn tenant(rt: &Rt, name: &str) -> Client {
    let _: Value = rt
        .admin
        .admin_create_user(&json!({"name": name}))
        .await
        .expect("create user");
    let token = rt
        .admin
        .admin_create_token(name, &json!({}))
        .await
        .expect("create token");
    Client::new(&rt.url, Some(token))
}

fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// A field of `/proc/<pid>/status` (`Uid`, `Groups`, …).
fn proc_status(pid: i32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_string())
        .unwrap_or_default()
}

/// A server whose data dir an older server left open (the dir and a log file), running one custom replica
/// that tries to read the server's secrets (the admin token, the secrets key, the database) by the data
/// dir's absolute path and reports on its stdout before it serves.
struct Nosy {
    rt: Rt,
    /// The data dir, canonical.
    data: PathBuf,
    pid: i32,
    /// The replica's working directory.
    cwd: PathBuf,
    /// Its logs once it runs.
    logs: String,
}

async fn nosy() -> Nosy {
    let rt = spawn(|c| {
        use std::os::unix::fs::PermissionsExt;
        let dir = c.store.data_dir.clone().expect("data dir");
        let open = std::fs::Permissions::from_mode(0o755);
        std::fs::set_permissions(&dir, open.clone()).expect("chmod");
        std::fs::create_dir(dir.join("logs")).expect("logs dir");
        std::fs::set_permissions(dir.join("logs"), open).expect("chmod");
        let log = dir.join("logs").join("console.log.2020-01-01");
        std::fs::write(&log, "old log\n").expect("log");
        std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    })
    .await;
    let data = rt.data_dir.canonicalize().expect("data dir");
    let script = format!(
        r#"echo "probe uid=$(id -u) home=$HOME"
for f in admin-token secret.key switchyard.db; do echo "probe $f: $(cat {d}/$f 2>&1 | head -c 200)"; done
echo "probe list: $(ls {d} 2>&1)"
exec {engine} --port "$PORT""#,
        d = data.display(),
        engine = engine_bin(),
    );
    let mut body = engine_endpoint(
        "nosy",
        "public",
        &[],
        json!({"minReplica": 1, "maxReplica": 1}),
    );
    body["model"]["command"] = json!(["/bin/sh", "-c", script]);
    rt.create(body).await;
    rt.wait_state("nosy", "running").await;
    let pids = rt.replica_pids();
    assert_eq!(pids.len(), 1);
    let cwd = std::fs::read_link(format!("/proc/{}/cwd", pids[0])).expect("replica cwd");
    let logs = rt
        .http
        .get(format!("{}/v2/endpoint/{NS}/nosy/logs?tail=50", rt.url))
        .bearer_auth(&rt.token)
        .send()
        .await
        .expect("logs")
        .text()
        .await
        .expect("logs text");
    Nosy {
        rt,
        data,
        pid: pids[0],
        cwd,
        logs,
    }
}

/// The data dir and its files are closed to other users (also those left open by an earlier start), and
/// a replica works in a directory of its own outside it, which is its home. As any user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_dir_is_closed_to_other_users_and_replicas_work_outside_it() {
    let n = nosy().await;
    assert_eq!(mode(&n.data) & 0o077, 0, "the data dir is closed to others");
    let mut files = vec![
        "admin-token",
        "secret.key",
        "logs",
        "logs/console.log.2020-01-01",
    ];
    files.extend(["switchyard.db", "switchyard.db-wal", "switchyard.db-shm"]);
    for f in files {
        let path = n.data.join(f);
        if path.exists() {
            assert_eq!(mode(&path) & 0o077, 0, "{f} is closed to others");
        }
    }
    assert!(
        !n.cwd.starts_with(&n.data),
        "{} is in the data dir",
        n.cwd.display()
    );
    assert!(
        n.logs.contains(&format!("home={}", n.cwd.display())),
        "{}",
        n.logs
    );
    n.rt.shutdown().await;
}

/// Run as root, the server runs the replica as the replica user, without groups, and every read of its
/// secrets fails. (Not as root, replicas run as the server's own user and could read its files: the test
/// above is what holds then.) CI runs as root, and fails this test if it is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_cannot_read_the_servers_secrets() {
    if !common::runs_as_root("replicas_cannot_read_the_servers_secrets") {
        return;
    }
    let n = nosy().await;
    let logs = &n.logs;
    let uids = proc_status(n.pid, "Uid");
    assert!(uids.split_whitespace().all(|u| u != "0"), "Uid: {uids}");
    assert_eq!(proc_status(n.pid, "Groups"), "", "no supplementary groups");
    assert!(!logs.contains("probe uid=0 "), "{logs}");
    for f in ["admin-token", "secret.key", "switchyard.db"] {
        let line = logs
            .lines()
            .find(|l| l.contains(&format!("probe {f}:")))
            .unwrap_or_else(|| panic!("no probe of {f}: {logs}"));
        assert!(line.contains("Permission denied"), "{line}");
    }
    assert!(
        logs.lines()
            .any(|l| l.contains("probe list:") && l.contains("Permission denied")),
        "{logs}"
    );
    let key = std::fs::read_to_string(n.data.join("secret.key")).expect("key");
    assert!(!logs.contains(&n.rt.token) && !logs.contains(key.trim()));
    n.rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_dir_inside_the_data_dir_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.store.data_dir = Some(dir.path().to_path_buf());
    config.store.url = common::test_store_url().await;
    config.server.listen = "127.0.0.1:0".parse().expect("addr");
    config.runtime.replica_dir = Some(dir.path().join("work"));
    let Err(err) = Application::build(&config).await else {
        panic!("a server started with its replicas in its data dir");
    };
    assert!(
        err.to_string().contains("runtime.replica_dir")
            && err.to_string().contains("inside the data dir"),
        "{err}"
    );
}

/// An engine endpoint (`tei`, run by the test engine), with `model` fields merged in.
fn tei_endpoint(name: &str, model: Value) -> Value {
    let mut body = engine_endpoint(
        name,
        "public",
        &[],
        json!({"minReplica": 0, "maxReplica": 1}),
    );
    body["model"] = json!({"repository": "org/model", "framework": "pytorch",
                           "image": {"tei": {"url": "local/tei"}}});
    if let (Some(m), Value::Object(extra)) = (body["model"].as_object_mut(), model) {
        m.extend(extra);
    }
    body
}

/// What a tenant may set or append is each launcher's allowlist (plus `runtime.tenant_env`); the rest
/// takes the custom-commands permission (403 naming `runtime.custom_commands`), which administrators
/// and `custom_command_users` have. `PORT` and `REPLICA_ID` are the server's (400, for everyone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_set_only_what_the_launcher_allows() {
    let rt = spawn(|c| {
        c.runtime.custom_command_users = vec!["carol".into()];
        c.runtime.launchers.insert(
            "tei".into(),
            switchyard_server::config::Launcher {
                command: vec![engine_bin(), "--port".into(), "{port}".into()],
                tenant_env: vec!["MAX_BATCH_*".into()],
                tenant_args: vec!["--max-batch-tokens".into(), "--json-output".into()],
                ..Default::default()
            },
        );
        c.runtime.routers.insert(
            "r".into(),
            switchyard_server::config::Launcher {
                command: vec![
                    engine_bin(),
                    "--port".into(),
                    "{port}".into(),
                    "--router".into(),
                ],
                tenant_env: vec!["ROUTER_MODE".into()],
                ..Default::default()
            },
        );
    })
    .await;
    let eve = tenant(&rt, "eve").await;
    let carol = tenant(&rt, "carol").await;
    let forbidden = |err: ClientError, what: &str| {
        assert_eq!(
            err.status(),
            Some(reqwest::StatusCode::FORBIDDEN),
            "{what}: {err}"
        );
        let text = err.to_string();
        assert!(
            text.contains(what) && text.contains("runtime.custom_commands"),
            "{text}"
        );
    };

    // Allowed: the launcher's names and flags, and the server-wide names.
    let ok = tei_endpoint(
        "ok",
        json!({"env": {"MAX_BATCH_TOKENS": "8", "RUST_LOG": "debug"},
        "secrets": {"HF_TOKEN": "hf_x"}, "args": ["--max-batch-tokens", "512", "--json-output"]}),
    );
    let _: Value = eve.create_endpoint("eve", &ok).await.expect("allowed");
    let _: Value = eve
        .update_endpoint(
            "eve",
            "ok",
            &json!({"model": {"args": ["--max-batch-tokens=64"]}}),
        )
        .await
        .expect("allowed flag=value");

    // Variables outside the allowlists, in env or secrets, on create or update.
    let names = [
        "GCONV_PATH",
        "OPENSSL_CONF",
        "GIT_SSH_COMMAND",
        "HTTPS_PROXY",
        "SSL_CERT_FILE",
    ];
    for (i, var) in names
        .into_iter()
        .chain(["HOME", "TMPDIR", "LD_PRELOAD"])
        .enumerate()
    {
        let field = if i % 2 == 0 { "env" } else { "secrets" };
        let bad = tei_endpoint("bad", json!({ field: {var: "/tmp/x"} }));
        forbidden(
            eve.create_endpoint::<Value>("eve", &bad).await.unwrap_err(),
            var,
        );
        let patch = json!({"model": { field: {var: "/tmp/x"} }});
        forbidden(
            eve.update_endpoint::<Value>("eve", "ok", &patch)
                .await
                .unwrap_err(),
            var,
        );
    }
    // Arguments the launcher does not list: another flag, a value after a value, a stray word.
    for args in [
        json!(["--trust-remote-code"]),
        json!(["--max-batch-tokens", "1", "2"]),
        json!(["x"]),
    ] {
        let last = args
            .as_array()
            .and_then(|a| a.last())
            .and_then(Value::as_str);
        let what = format!("{:?}", last.unwrap_or_default());
        let bad = tei_endpoint("bad", json!({ "args": args }));
        forbidden(
            eve.create_endpoint::<Value>("eve", &bad).await.unwrap_err(),
            &what,
        );
    }
    let err = eve
        .update_endpoint::<Value>(
            "eve",
            "ok",
            &json!({"model": {"args": ["--trust-remote-code"]}}),
        )
        .await
        .unwrap_err();
    forbidden(err, "tenant_args");

    // The router's variables follow the router's allowlist.
    let routed = |var: &str| {
        let mut body = tei_endpoint("routed", json!({}));
        body["customRouter"] = json!({"tag": "r", "env": {var: "1"}});
        body
    };
    forbidden(
        eve.create_endpoint::<Value>("eve", &routed("PYTHONPATH"))
            .await
            .unwrap_err(),
        "PYTHONPATH",
    );
    forbidden(
        eve.create_endpoint::<Value>("eve", &routed("OTHER"))
            .await
            .unwrap_err(),
        "OTHER",
    );
    let _: Value = eve
        .create_endpoint("eve", &routed("ROUTER_MODE"))
        .await
        .expect("router allowlist");
    // The proxy's own settings for an extProc router are anyone's; a value that is not one is refused.
    let mut ext = tei_endpoint("ext-routed", json!({}));
    ext["customRouter"] = json!({"tag": "r", "protocol": "extProc",
        "env": {"SWITCHYARD_EXT_PROC_TIMEOUT_MS": "250", "SWITCHYARD_EXT_PROC_FAIL_OPEN": "false"}});
    let _: Value = eve
        .create_endpoint("eve", &ext)
        .await
        .expect("the proxy's settings");
    ext["name"] = json!("ext-bad");
    ext["customRouter"]["env"]["SWITCHYARD_EXT_PROC_TIMEOUT_MS"] = json!("soon");
    let err = eve.create_endpoint::<Value>("eve", &ext).await.unwrap_err();
    assert_eq!(err.status().map(|s| s.as_u16()), Some(400), "{err}");
    assert!(
        err.to_string().contains("SWITCHYARD_EXT_PROC_TIMEOUT_MS"),
        "{err}"
    );

    // Who may run code on the host may set the rest; a tenant may then change other fields (and the
    // allowed ones) without being refused for what they did not touch.
    let trusted = tei_endpoint(
        "trusted",
        json!({"env": {"GCONV_PATH": "/opt/gconv"},
        "args": ["--trust-remote-code"]}),
    );
    let _: Value = rt
        .admin
        .create_endpoint("eve", &trusted)
        .await
        .expect("admin");
    let _: Value = eve
        .update_endpoint(
            "eve",
            "trusted",
            &json!({"tags": ["x"], "model": {"env": {"MAX_BATCH_SIZE": "4"}}}),
        )
        .await
        .expect("untouched fields are not checked again");
    // What was approved for one model is not approval for another: a new revision is checked whole.
    let moved = eve
        .update_endpoint::<Value>("eve", "trusted", &json!({"model": {"revision": "v2"}}))
        .await
        .unwrap_err();
    assert_eq!(
        moved.status(),
        Some(reqwest::StatusCode::FORBIDDEN),
        "{moved}"
    );
    let mut carols = tei_endpoint("carols", json!({"env": {"OPENSSL_CONF": "/etc/ssl/x.cnf"}}));
    carols["model"]["args"] = json!(["--trust-remote-code"]);
    let _: Value = carol
        .create_endpoint("carol", &carols)
        .await
        .expect("custom_command_users");

    // The server's own variables: refused for everyone, with the field named.
    for var in ["PORT", "REPLICA_ID"] {
        let bad = tei_endpoint("bad", json!({"env": {var: "1"}}));
        for who in [&rt.admin, &eve] {
            let err = who.create_endpoint::<Value>("eve", &bad).await.unwrap_err();
            assert_eq!(
                err.status(),
                Some(reqwest::StatusCode::BAD_REQUEST),
                "{var}: {err}"
            );
            let ClientError::Api { body, .. } = err else {
                panic!("{var}")
            };
            assert!(
                body.to_string().contains(&format!("model.env.{var}")),
                "{body}"
            );
        }
    }
    rt.shutdown().await;
}

/// A `GET` sent byte for byte, as an HTTP client would not (it normalizes the path first): the status and
/// the whole answer, head and body.
async fn raw_get(url: &str, host: &str, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url.strip_prefix("http://").expect("an http URL");
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.expect("read");
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dot_segments_never_reach_a_replica() {
    let rt = spawn(|_| {}).await;
    let mut body = engine_endpoint(
        "dots",
        "public",
        &[],
        json!({"minReplica": 1, "maxReplica": 1}),
    );
    body["route"] = json!({"domain": "models.example.com", "path": "/emb"});
    rt.create(body).await;
    rt.wait_state("dots", "running").await;
    let ours = "127.0.0.1";
    let domain = "models.example.com";

    // Normal paths reach the replica, dots inside a name included.
    for (host, path, want) in [
        (ours, "/endpoints/admin/dots/health", 200),
        (domain, "/emb/health", 200),
        (ours, "/endpoints/admin/dots/a..b", 404),
        (ours, "/endpoints/admin/dots/.well-known/x", 404),
    ] {
        let (status, text) = raw_get(&rt.url, host, path).await;
        assert_eq!(status, want, "{path}: {text}");
        assert!(text.contains("x-replica-id"), "{path} reached a replica");
    }

    // A dot segment, however it is spelled, is refused before routing: the replica never sees it.
    for (host, path) in [
        (ours, "/endpoints/admin/dots/../../v2/endpoint/carol"),
        (
            ours,
            "/endpoints/admin/dots/%2e%2e/%2E%2E/v2/endpoint/carol",
        ),
        (ours, "/endpoints/admin/dots/%2E./x"),
        (ours, "/endpoints/admin/dots/.%2e/x"),
        (ours, "/endpoints/admin/dots/./health"),
        (ours, "/endpoints/admin/dots/..%2f..%2fv2/endpoint/carol"),
        (ours, "/endpoints/admin/dots/..%5c..%5cv2"),
        (ours, "/endpoints/admin/dots/..;/x"),
        (ours, "/endpoints/admin/../admin/dots/health"),
        (domain, "/emb/../../v2/endpoint/carol"),
        (domain, "/emb/%2e%2e/x"),
    ] {
        let (status, text) = raw_get(&rt.url, host, path).await;
        assert_eq!(status, 400, "{host}{path}: {text}");
        assert!(
            !text.contains("x-replica-id"),
            "{host}{path} reached a replica"
        );
        assert!(text.contains("x-error-message: "), "{path}: {text}");
        let json = text.split("\r\n\r\n").nth(1).unwrap_or("");
        let b: Value = serde_json::from_str(json).unwrap_or(Value::Null);
        assert!(
            b["error"].as_str().unwrap_or("").contains("segment"),
            "{path}: {text}"
        );
    }
    rt.shutdown().await;
}

/// Writes the manifest an install leaves, for a built-in engine that runs the test engine (in the engines
/// dir the tests' servers are given: `<data-dir>/engines`).
fn fake_install(data_dir: &std::path::Path, name: &str) {
    let dir = data_dir.join("engines").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = json!({
        "name": name, "command": [engine_bin(), "--port", "{port}"], "healthRoute": "/health",
        "installedAt": "2026-11-24T00:00:00Z", "python": "/usr/bin/python3",
    });
    std::fs::write(dir.join("engine.json"), manifest.to_string()).unwrap();
}

/// Engines in `<data-dir>/engines`, whoever runs the test (root's default is elsewhere).
fn engines_in_data_dir(c: &mut Config) {
    c.runtime.engines_dir = c.store.data_dir.as_ref().map(|d| d.join("engines"));
}

/// A catalog recipe whose engine is not installed fails, saying which command installs it; once the
/// engine is in, the endpoint starts by itself and serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_engine_is_named_and_the_endpoint_starts_once_it_is_installed() {
    let rt = spawn(engines_in_data_dir).await;
    let deployed = rt
        .http
        .post(format!(
            "{}/api/v1/catalog/recipe/all-minilm-l6-v2-cpu-tei/deploy",
            rt.url
        ))
        .bearer_auth(&rt.token)
        .json(&json!({"namespace": NS, "config": {"name": "emb", "scaling": {"minReplica": 1}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(deployed.status(), 200);
    let failed = rt.wait_state("emb", "failed").await;
    let message = failed["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("run `switchyard engines install minilm`"),
        "{message}"
    );
    fake_install(&rt.data_dir, "minilm");
    let running = rt.wait_state("emb", "running").await;
    assert_eq!(running["status"]["readyReplica"], 1);
    let resp = rt
        .http
        .get(format!("{}/health", rt.endpoint_url("emb")))
        .bearer_auth(&rt.token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    rt.shutdown().await;
}

/// `GET /api/v1/engines` says which recipes run here and why not; installing and removing are an
/// administrator's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engines_api_tells_which_recipes_run_here() {
    let rt = spawn(engines_in_data_dir).await;
    let get = |token: Option<String>| {
        let req = rt.http.get(format!("{}/api/v1/engines", rt.url));
        async move {
            let req = match token {
                Some(t) => req.bearer_auth(t),
                None => req,
            };
            req.send().await.unwrap()
        }
    };
    assert_eq!(get(None).await.status(), 401);
    let before: Value = get(Some(rt.token.clone())).await.json().await.unwrap();
    let recipe = &before["recipes"]["all-minilm-l6-v2-cpu-tei"];
    assert_eq!(recipe["runs"], false, "{recipe}");
    assert_eq!(recipe["install"], "minilm", "{recipe}");
    let minilm = |v: &Value| {
        v["engines"]
            .as_array()
            .and_then(|a| a.iter().find(|e| e["name"] == "minilm").cloned())
            .unwrap_or_default()
    };
    assert_eq!(minilm(&before)["state"], "notInstalled");
    fake_install(&rt.data_dir, "minilm");
    let after: Value = get(Some(rt.token.clone())).await.json().await.unwrap();
    assert_eq!(after["recipes"]["all-minilm-l6-v2-cpu-tei"]["runs"], true);
    assert_eq!(
        after["recipes"]["all-minilm-l6-v2-cpu-tei"]["source"],
        "installed"
    );
    assert_eq!(after["recipes"]["bge-large-en-v1-5-cpu-tei"]["runs"], false);
    assert_eq!(minilm(&after)["state"], "installed");

    rt.admin
        .admin_create_user::<Value>(&json!({"name": "bob"}))
        .await
        .unwrap();
    let bob = rt
        .admin
        .admin_create_token("bob", &json!({}))
        .await
        .unwrap();
    let seen_by_bob: Value = get(Some(bob.clone())).await.json().await.unwrap();
    assert_eq!(
        seen_by_bob["recipes"], after["recipes"],
        "any signed-in caller reads it"
    );
    assert_eq!(minilm(&after)["program"], engine_bin());
    assert!(
        minilm(&seen_by_bob).get("program").is_none(),
        "the server's paths are for administrators"
    );
    let admin_call = |method: reqwest::Method, path: &str, token: &str| {
        rt.http
            .request(method, format!("{}/api/v1/admin/engines/{path}", rt.url))
            .bearer_auth(token)
            .send()
    };
    let r = admin_call(reqwest::Method::POST, "minilm/install", &bob)
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = admin_call(reqwest::Method::POST, "nope/install", &rt.token)
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = admin_call(reqwest::Method::DELETE, "smollm", &rt.token)
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "not installed");
    let r = admin_call(reqwest::Method::DELETE, "minilm", &bob)
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = admin_call(reqwest::Method::DELETE, "minilm", &rt.token)
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let gone: Value = get(Some(rt.token.clone())).await.json().await.unwrap();
    assert_eq!(minilm(&gone)["state"], "notInstalled");
    assert!(!rt.data_dir.join("engines/minilm").exists());
    rt.shutdown().await;
}

/// A stop lets a request already in flight through the proxy finish with its answer, takes no new
/// connection, and then the server ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_answers_the_requests_in_flight() {
    let mut rt = spawn(|_| {}).await;
    let body = engine_endpoint(
        "slow",
        "public",
        &["--latency-ms", "1500"],
        json!({"minReplica": 1, "maxReplica": 1}),
    );
    rt.create(body).await;
    rt.wait_state("slow", "running").await;
    let (http, url) = (
        rt.http.clone(),
        format!("{}/embed", rt.endpoint_url("slow")),
    );
    let in_flight = tokio::spawn(async move {
        let req = http.post(url).json(&json!({"inputs": "hello"}));
        let resp = req.send().await.expect("an answer, not a cut connection");
        (resp.status(), resp.text().await.expect("the whole body"))
    });
    // In flight: the proxy counts it (the replica answers only after 1.5 s).
    rt.wait_in_flight("slow", 1).await;
    rt.stop.take().expect("running").send(()).expect("stop");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let fresh = reqwest::Client::new();
    let refused = fresh.get(format!("{}/health", rt.url)).send().await;
    assert!(
        refused.is_err(),
        "a stopping server takes no new connection"
    );
    let (status, text) = in_flight.await.expect("request task");
    assert_eq!(status, 200, "{text}");
    assert!(text.starts_with("[["), "the embedding: {text}");
    // Not by the drain's give-up, which cuts what is still open: every request was done.
    let done = rt.done.take().expect("running");
    let stopped = done.await.expect("task").expect("served");
    assert_eq!(stopped, switchyard_server::app::Stopped::Drained);
}
