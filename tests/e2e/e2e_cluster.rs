//! Several real `switchyard serve` processes on the test script's PostgreSQL act as one control plane: one
//! leader runs the replicas, every server serves the API and the proxy, a leader that dies or is paused is
//! replaced, and what one server revokes the others refuse. On SQLite a second server is refused.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common;
use common::cluster::{live_replicas, postgres, receiver, signal, Cluster};
use common::engine_bin;

/// Every server announces this one public URL (as a load balancer in front of them would be).
const PUBLIC: &str = "http://switchyard.example.test";

fn config() -> String {
    format!(
        "[runtime]\ntick_ms = 200\nstop_grace_ms = 1000\npublic_url = \"{PUBLIC}\"\n\n\
         [proxy]\nauth_cache_s = 3600\n"
    )
}

/// An endpoint of `min`..`max` replicas of the workspace's test engine, as local processes.
fn engine_endpoint(name: &str, kind: &str, min: u32, max: u32) -> Value {
    json!({
        "name": name, "type": kind,
        "provider": {"vendor": "aws", "region": "us-east-1"},
        "compute": {"accelerator": "cpu", "instanceType": "intel-icl", "instanceSize": "x2",
                    "scaling": {"minReplica": min, "maxReplica": max}},
        "model": {"repository": "test/engine", "framework": "custom",
                  "image": {"custom": {"url": "local/test-engine"}},
                  "command": [engine_bin().display().to_string(), "--port", "{port}"]},
    })
}

async fn send(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    token: &str,
    body: Option<&Value>,
) -> (reqwest::StatusCode, Value) {
    let mut req = http.request(method, url).bearer_auth(token);
    if let Some(b) = body {
        req = req.json(b);
    }
    let res = req.send().await.expect("request");
    let status = res.status();
    (status, res.json().await.unwrap_or(Value::Null))
}

async fn endpoint(http: &reqwest::Client, c: &Cluster, i: usize, name: &str) -> Value {
    let url = format!("{}/v2/endpoint/admin/{name}", c.nodes[i].url());
    send(http, reqwest::Method::GET, url, &c.token, None)
        .await
        .1
}

/// Whether a request through server `url`'s proxy is answered 200.
async fn answers(http: &reqwest::Client, url: &str, name: &str, token: Option<&str>) -> bool {
    let mut req = http
        .post(format!("{url}/endpoints/admin/{name}/embed"))
        .json(&json!({"inputs": "x"}));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req.send().await.is_ok_and(|r| r.status() == 200)
}

/// Waits until requests through server `i` are answered.
async fn serves_through(http: &reqwest::Client, c: &Cluster, i: usize, name: &str) {
    for _ in 0..600 {
        if answers(http, c.nodes[i].url(), name, None).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "{name} is not served through server {i}; its log:\n{}",
        c.nodes[i].logged()
    );
}

/// Samples the replicas alive across every server's data dir until dropped; keeps the most seen at once.
struct Sampler {
    most: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    fn start(dirs: Vec<PathBuf>, name: &'static str) -> Sampler {
        let most = Arc::new(AtomicUsize::new(0));
        let seen = most.clone();
        let task = tokio::spawn(async move {
            loop {
                let n: usize = dirs.iter().map(|d| live_replicas(d, name).len()).sum();
                seen.fetch_max(n, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        Sampler { most, task }
    }

    /// The most replicas seen alive at once since the last call.
    fn take(&self) -> usize {
        self.most.swap(0, Ordering::Relaxed)
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The replicas of endpoint `name` alive on every server.
fn alive_now(c: &Cluster, name: &str) -> usize {
    c.nodes
        .iter()
        .map(|n| live_replicas(&n.dir, name).len())
        .sum()
}

async fn settles_to(c: &Cluster, name: &str, n: usize) {
    for _ in 0..300 {
        if alive_now(c, name) == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{} replicas of {name} alive, not {n}", alive_now(c, name));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_act_as_one_and_outlive_their_leader() {
    let Some(pg) = postgres("three_servers_act_as_one_and_outlive_their_leader") else {
        return;
    };
    let mut c = Cluster::start(&pg, 3, &config()).await;
    let http = reqwest::Client::new();
    let sampler = Sampler::start(c.nodes.iter().map(|n| n.dir.clone()).collect(), "svc");

    // Deployed through a server that does not lead, served through each.
    let leader = c.leader(&http, 0).await;
    let follower = (0..3).find(|i| *i != leader).expect("a follower");
    let url = format!("{}/v2/endpoint/admin", c.nodes[follower].url());
    let body = engine_endpoint("svc", "public", 1, 1);
    let (status, _) = send(&http, reqwest::Method::POST, url, &c.token, Some(&body)).await;
    assert_eq!(status, 200);
    for i in 0..3 {
        serves_through(&http, &c, i, "svc").await;
    }
    // One public URL, the same from every server; one replica, never more.
    for i in 0..3 {
        let ep = endpoint(&http, &c, i, "svc").await;
        assert_eq!(ep["status"]["url"], format!("{PUBLIC}/endpoints/admin/svc"));
        assert_eq!(ep["status"]["readyReplica"], 1);
    }
    for _ in 0..10 {
        assert!(answers(&http, c.nodes[follower].url(), "svc", None).await);
    }
    assert_eq!(
        sampler.take(),
        1,
        "replicas alive at once, for maxReplica 1"
    );
    assert!(!c.nodes[0]
        .logged()
        .contains("announce different public URLs"));

    // The operator's view: three servers, one leader.
    let listed = c.servers(&http, follower).await;
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert_eq!(listed.iter().filter(|s| s["leader"] == true).count(), 1);
    assert!(listed.iter().all(|s| s["state"] == "running"), "{listed:?}");
    let ((_, first_epoch), _) = c.rows().await;

    // A scale-up asked through a follower, and writes acknowledged by the leader, then kill -9 of the leader.
    let survivor = follower;
    let url = format!("{}/v2/endpoint/admin/svc", c.nodes[survivor].url());
    let body = engine_endpoint("svc", "public", 2, 2);
    let (status, _) = send(&http, reqwest::Method::PUT, url, &c.token, Some(&body)).await;
    assert_eq!(status, 200);
    let mut acknowledged = Vec::new();
    for k in 0..5 {
        let url = format!("{}/v2/endpoint/admin", c.nodes[leader].url());
        let body = engine_endpoint(&format!("w{k}"), "public", 0, 1);
        let (status, _) = send(&http, reqwest::Method::POST, url, &c.token, Some(&body)).await;
        assert_eq!(status, 200);
        acknowledged.push(format!("w{k}"));
    }
    sampler.take();
    c.kill(leader);

    // Another server leads, under a new epoch, and brings the endpoint to its two replicas.
    let next = c.leader(&http, survivor).await;
    assert_ne!(next, leader);
    for _ in 0..600 {
        let ep = endpoint(&http, &c, survivor, "svc").await;
        if ep["status"]["readyReplica"] == 2 && ep["status"]["state"] == "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for i in c.running() {
        serves_through(&http, &c, i, "svc").await;
    }
    settles_to(&c, "svc", 2).await;
    assert!(
        sampler.take() <= 2,
        "more replicas than maxReplica 2 at once"
    );
    let ((holder, epoch), epochs) = c.rows().await;
    assert!(
        epoch > first_epoch,
        "the lease moved on: {epoch} after {first_epoch}"
    );
    assert!(
        epochs.iter().all(|e| *e == epoch),
        "{epochs:?} under {holder}'s epoch {epoch}"
    );
    // Nothing the dead leader acknowledged is lost.
    for name in &acknowledged {
        let ep = endpoint(&http, &c, survivor, name).await;
        assert_eq!(ep["name"], name.as_str(), "{ep}");
    }
    // The dead server shows as not answering.
    let listed = c.servers(&http, survivor).await;
    let dead = listed
        .iter()
        .filter(|s| s["state"] == "notAnswering")
        .count();
    // It may still be within its 10 s: wait for it to be called silent.
    if dead == 0 {
        for _ in 0..200 {
            let listed = c.servers(&http, survivor).await;
            if listed.iter().any(|s| s["state"] == "notAnswering") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let listed = c.servers(&http, survivor).await;
    let states: Vec<&str> = listed.iter().filter_map(|s| s["state"].as_str()).collect();
    let silent = listed.iter().find(|s| s["state"] == "notAnswering");
    assert_eq!(
        states.iter().filter(|s| **s == "running").count(),
        2,
        "{listed:?}"
    );
    assert!(silent.is_some_and(|s| s["leader"] == false), "{listed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_held_on_a_follower_wakes_the_endpoint() {
    let Some(pg) = postgres("a_request_held_on_a_follower_wakes_the_endpoint") else {
        return;
    };
    let c = Cluster::start(&pg, 2, &config()).await;
    let http = reqwest::Client::new();
    let leader = c.leader(&http, 0).await;
    let follower = 1 - leader;
    let url = format!("{}/v2/endpoint/admin", c.nodes[leader].url());
    let body = engine_endpoint("cold", "public", 0, 1);
    let (status, _) = send(&http, reqwest::Method::POST, url, &c.token, Some(&body)).await;
    assert_eq!(status, 200);
    // Served through the follower first: its routes know the endpoint (they follow the store a moment
    // behind), before it goes to zero.
    serves_through(&http, &c, follower, "cold").await;
    let url = format!(
        "{}/v2/endpoint/admin/cold/scale-to-zero",
        c.nodes[follower].url()
    );
    let (status, body) = send(&http, reqwest::Method::POST, url, &c.token, None).await;
    assert_eq!(status, 200, "{body}");
    for _ in 0..300 {
        let ep = endpoint(&http, &c, follower, "cold").await;
        if ep["status"]["state"] == "scaledToZero" && alive_now(&c, "cold") == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        endpoint(&http, &c, follower, "cold").await["status"]["state"],
        "scaledToZero"
    );
    assert_eq!(alive_now(&c, "cold"), 0);
    // Held on the follower; the leader wakes the endpoint and the follower sends it on.
    let res = http
        .post(format!(
            "{}/endpoints/admin/cold/embed",
            c.nodes[follower].url()
        ))
        .header("X-Scale-Up-Timeout", "120")
        .json(&json!({"inputs": "x"}))
        .send()
        .await
        .expect("held request");
    assert_eq!(
        res.status(),
        200,
        "{}",
        res.text().await.unwrap_or_default()
    );
    assert_eq!(alive_now(&c, "cold"), 1);
    let replica_dir = &c.nodes[leader].dir;
    assert_eq!(
        live_replicas(replica_dir, "cold").len(),
        1,
        "the leader runs it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_steps_down_and_writes_nothing_as_leader() {
    let Some(pg) = postgres("a_paused_leader_steps_down_and_writes_nothing_as_leader") else {
        return;
    };
    let c = Cluster::start(&pg, 3, &config()).await;
    let http = reqwest::Client::new();
    let leader = c.leader(&http, 0).await;
    let other = (0..3).find(|i| *i != leader).expect("another server");
    let url = format!("{}/v2/endpoint/admin", c.nodes[other].url());
    let body = engine_endpoint("svc", "public", 1, 1);
    let (status, _) = send(&http, reqwest::Method::POST, url, &c.token, Some(&body)).await;
    assert_eq!(status, 200);
    serves_through(&http, &c, other, "svc").await;
    let ((_, paused_epoch), _) = c.rows().await;

    // Paused past its lease: another server leads and runs the endpoint.
    signal(&c.nodes[leader].pid(), "STOP");
    let mut next = leader;
    for _ in 0..600 {
        let listed = c.servers(&http, other).await;
        let lead = listed.iter().find(|s| s["leader"] == true);
        if let Some(i) = lead.and_then(|s| c.index_of(s["address"].as_str().unwrap_or_default())) {
            if i != leader {
                next = i;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_ne!(next, leader, "no server took over from the paused leader");
    for _ in 0..600 {
        if live_replicas(&c.nodes[next].dir, "svc").len() == 1
            && answers(&http, c.nodes[other].url(), "svc", None).await
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(live_replicas(&c.nodes[next].dir, "svc").len(), 1);

    // Woken: it steps down, lets its replica go, and every replica row is the new term's.
    signal(&c.nodes[leader].pid(), "CONT");
    for _ in 0..300 {
        if c.nodes[leader]
            .logged()
            .contains("this server no longer leads")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        c.nodes[leader]
            .logged()
            .contains("this server no longer leads"),
        "{}",
        c.nodes[leader].logged()
    );
    settles_to(&c, "svc", 1).await;
    let ((holder, epoch), epochs) = c.rows().await;
    assert!(epoch > paused_epoch);
    assert!(
        epochs.iter().all(|e| *e == epoch),
        "{epochs:?} under {holder}'s epoch {epoch}"
    );
    let listed = c.servers(&http, other).await;
    assert_eq!(listed.iter().filter(|s| s["leader"] == true).count(), 1);
    // It serves on, as a follower.
    serves_through(&http, &c, leader, "svc").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_on_one_server_is_refused_by_the_others() {
    let Some(pg) = postgres("a_revocation_on_one_server_is_refused_by_the_others") else {
        return;
    };
    let c = Cluster::start(&pg, 3, &config()).await;
    let http = reqwest::Client::new();
    let url = format!("{}/v2/endpoint/admin", c.nodes[0].url());
    let body = engine_endpoint("private", "authenticated", 1, 1);
    let (status, body) = send(&http, reqwest::Method::POST, url, &c.token, Some(&body)).await;
    assert_eq!(status, 200, "{body}");
    let url = format!("{}/api/v1/admin/users/admin/tokens", c.nodes[0].url());
    let (status, made) = send(
        &http,
        reqwest::Method::POST,
        url,
        &c.token,
        Some(&json!({})),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    let (token, id) = (
        made["token"].as_str().expect("token"),
        made["info"]["id"].as_str().expect("id"),
    );
    // Answered through the two others, which now hold the answer in their caches (for an hour).
    for i in [1, 2] {
        for _ in 0..600 {
            if answers(&http, c.nodes[i].url(), "private", Some(token)).await {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(answers(&http, c.nodes[i].url(), "private", Some(token)).await);
    }
    let url = format!("{}/api/v1/admin/tokens/{id}", c.nodes[0].url());
    let (status, _) = send(&http, reqwest::Method::DELETE, url, &c.token, None).await;
    assert_eq!(status, 204);
    // Only the revocation's notice can clear an hour-long cache.
    for i in [1, 2] {
        let mut refused = false;
        for _ in 0..100 {
            if !answers(&http, c.nodes[i].url(), "private", Some(token)).await {
                refused = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(refused, "server {i} still answers a deleted token");
    }
}

#[tokio::test]
async fn a_second_server_on_one_sqlite_store_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let _first = common::serve(&data);
    let refused = |args: &[&str], env: &[(&str, String)]| {
        let out = std::process::Command::new(common::BIN)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .env_remove("SWITCHYARD_LISTEN")
            .env_remove("SWITCHYARD_STORE_URL")
            .env_remove("SWITCHYARD_SECRETS_KEY")
            .envs(env.iter().map(|(k, v)| (*k, v)))
            .output()
            .expect("serve");
        assert!(!out.status.success(), "a second server started");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let data_s = data.display().to_string();
    let said = refused(&["--data-dir", &data_s], &[]);
    assert!(
        said.contains("another switchyard server uses the data dir"),
        "{said}"
    );
    let other = dir.path().join("other").display().to_string();
    let db = format!("sqlite://{}", data.join("switchyard.db").display());
    let key = data.join("secret.key").display().to_string();
    let env = [
        ("SWITCHYARD_STORE_URL", db),
        ("SWITCHYARD_SECRETS_KEY_FILE", key),
    ];
    let said = refused(&["--data-dir", &other], &env);
    assert!(said.contains("point them all at PostgreSQL"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_change_is_delivered_though_the_leader_dies_mid_burst() {
    let Some(pg) = postgres("every_change_is_delivered_though_the_leader_dies_mid_burst") else {
        return;
    };
    let hooks =
        "[outbound]\nallow = [\"127.0.0.0/8\"]\n\n[webhooks]\ntimeout = \"2s\"\nlease = \"5s\"\n\
                 retry_schedule = [\"100ms\", \"100ms\", \"200ms\", \"500ms\"]\n";
    let mut c = Cluster::start(&pg, 3, &format!("{}\n{hooks}", config())).await;
    let http = reqwest::Client::new();
    let received = c.root.path().join("received.jsonl");
    let handler = format!("hook=append:{}", received.display());
    let receiver = common::receive(
        &["--secret", "s3cret", "--handler", &handler],
        std::process::Stdio::null(),
    );
    let hook = json!({"watched": [{"type": "user", "name": "admin"}], "domains": ["endpoint"],
                      "url": format!("{}/webhooks/hook", receiver.url), "secret": "s3cret"});
    let url = format!("{}/api/settings/webhooks", c.nodes[0].url());
    let (status, made) = send(&http, reqwest::Method::POST, url, &c.token, Some(&hook)).await;
    assert!(status.is_success(), "{made}");
    let url = format!("{}/v2/endpoint/admin", c.nodes[0].url());
    let body = engine_endpoint("hooked", "public", 0, 1);
    let (status, _) = send(&http, reqwest::Method::POST, url, &c.token, Some(&body)).await;
    assert_eq!(status, 200);
    let url = format!("{}/v2/endpoint/admin/hooked/pause", c.nodes[0].url());
    let (status, _) = send(&http, reqwest::Method::POST, url, &c.token, None).await;
    assert_eq!(status, 200);

    // A burst of changes through every server; the leader killed halfway.
    let leader = c.leader(&http, 0).await;
    let mut acknowledged = Vec::new();
    for k in 0..30 {
        if k == 15 {
            c.kill(leader);
        }
        let i = c.running()[k % c.running().len()];
        let url = format!("{}/v2/endpoint/admin/hooked", c.nodes[i].url());
        let change = json!({"model": {"env": {"BURST": format!("v{k}")}}});
        let (status, _) = send(&http, reqwest::Method::PUT, url, &c.token, Some(&change)).await;
        if status == 200 {
            acknowledged.push(format!("v{k}"));
        }
    }
    assert!(acknowledged.len() >= 25, "{acknowledged:?}");
    // Each acknowledged change reached the receiver at least once (a claim of the dead server lapses and
    // another server sends it again).
    let delivered = |path: &std::path::Path| -> std::collections::HashSet<String> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|v| {
                v.pointer("/endpoint/model/env/BURST")?
                    .as_str()
                    .map(str::to_string)
            })
            .collect()
    };
    for _ in 0..600 {
        if acknowledged
            .iter()
            .all(|v| delivered(&received).contains(v))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let got = delivered(&received);
    let missing: Vec<&String> = acknowledged.iter().filter(|v| !got.contains(*v)).collect();
    assert!(missing.is_empty(), "never delivered: {missing:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhooks_concurrency_holds_across_servers() {
    let Some(pg) = postgres("a_webhooks_concurrency_holds_across_servers") else {
        return;
    };
    let hooks =
        "[outbound]\nallow = [\"127.0.0.0/8\"]\n\n[webhooks]\nconcurrency = 1\nrate_limit = 50\n";
    let c = Cluster::start(&pg, 3, &format!("{}\n{hooks}", config())).await;
    let http = reqwest::Client::new();
    let common::cluster::Receiver { url, got, most } = receiver(Duration::from_millis(50)).await;
    let hook = json!({"watched": [{"type": "user", "name": "admin"}], "domains": ["endpoint"], "url": url});
    let made = format!("{}/api/settings/webhooks", c.nodes[0].url());
    let (status, body) = send(&http, reqwest::Method::POST, made, &c.token, Some(&hook)).await;
    assert!(status.is_success(), "{body}");
    // Changes through every server: each server's workers hear of them and claim some.
    let mut changes = 0;
    for k in 0..24 {
        let url = format!("{}/v2/endpoint/admin", c.nodes[k % 3].url());
        let body = common::endpoint(&format!("e{k}"));
        let (status, _) = send(&http, reqwest::Method::POST, url, &c.token, Some(&body)).await;
        assert_eq!(status, 200);
        changes += 1;
    }
    for _ in 0..600 {
        if got.load(Ordering::SeqCst) >= changes {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        got.load(Ordering::SeqCst) >= changes,
        "{} of {changes} delivered",
        got.load(Ordering::SeqCst)
    );
    assert_eq!(
        most.load(Ordering::SeqCst),
        1,
        "sends in flight at once to a webhook of concurrency 1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_view_on_any_server_sees_an_attempt_another_recorded() {
    let Some(pg) = postgres("a_live_view_on_any_server_sees_an_attempt_another_recorded") else {
        return;
    };
    let hooks = "[outbound]\nallow = [\"127.0.0.0/8\"]\n";
    let c = Cluster::start(&pg, 2, &format!("{}\n{hooks}", config())).await;
    let http = reqwest::Client::new();
    let common::cluster::Receiver { url, got, .. } = receiver(Duration::from_millis(50)).await;
    let hook = json!({"watched": [{"type": "user", "name": "admin"}], "domains": ["endpoint"], "url": url});
    let made = format!("{}/api/settings/webhooks", c.nodes[0].url());
    let (status, made) = send(&http, reqwest::Method::POST, made, &c.token, Some(&hook)).await;
    assert!(status.is_success(), "{made}");
    let id = made["webhook"]["id"]
        .as_str()
        .expect("webhook id")
        .to_string();
    // A paused endpoint: its changes are then one event each (no state follows them).
    let base = c.nodes[0].url().to_string();
    let body = engine_endpoint("watched", "public", 0, 1);
    let (status, _) = send(
        &http,
        reqwest::Method::POST,
        format!("{base}/v2/endpoint/admin"),
        &c.token,
        Some(&body),
    )
    .await;
    assert_eq!(status, 200);
    let pause = format!("{base}/v2/endpoint/admin/watched/pause");
    assert_eq!(
        send(&http, reqwest::Method::POST, pause, &c.token, None)
            .await
            .0,
        200
    );
    let attempts = format!("{base}/api/settings/webhooks/{id}/deliveries");
    let mut last = (0, usize::MAX);
    for _ in 0..300 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let page = send(
            &http,
            reqwest::Method::GET,
            attempts.clone(),
            &c.token,
            None,
        )
        .await
        .1;
        let seq = page[0]["seq"].as_i64().unwrap_or(0);
        let n = got.load(Ordering::SeqCst);
        if (seq, n) == last && n > 0 {
            break;
        }
        last = (seq, n);
    }
    // Both servers' live views wait (30 s at most) for the attempt after the last one; one change, one
    // delivery, one attempt, recorded by one of the two: the other's view can only hear of it from the other.
    let views: Vec<_> = (0..2)
        .map(|i| {
            let url = format!(
                "{}/api/settings/webhooks/{id}/deliveries?after={}&wait=30",
                c.nodes[i].url(),
                last.0
            );
            let (http, token) = (http.clone(), c.token.clone());
            tokio::spawn(async move {
                let res = http.get(url).bearer_auth(token).send().await.expect("view");
                res.json::<Value>().await.expect("view json")
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let url = format!("{}/v2/endpoint/admin/watched", c.nodes[1].url());
    let change = json!({"model": {"env": {"SEEN": "yes"}}});
    let (status, _) = send(&http, reqwest::Method::PUT, url, &c.token, Some(&change)).await;
    assert_eq!(status, 200);
    for (i, view) in views.into_iter().enumerate() {
        let seen = view.await.expect("view task");
        let n = seen.as_array().map_or(0, Vec::len);
        assert_eq!(n, 1, "server {i}'s live view: {seen}");
    }
    assert!(got.load(Ordering::SeqCst) >= 1);
}

/// An extProc endpoint served through every server: each server's proxy asks the router the leader runs (its
/// gRPC address, as the leader recorded it), and sends the request to the replica it names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_server_asks_an_ext_proc_router_the_leader_runs() {
    let Some(pg) = postgres("every_server_asks_an_ext_proc_router_the_leader_runs") else {
        return;
    };
    let engine = engine_bin().display().to_string();
    let routers = format!(
        "\n[runtime.routers.picker]\ncommand = [\"{engine}\", \"--ext-proc\", \"--port\", \"{{port}}\", \"--grpc-port\", \"{{grpc_port}}\"]\n"
    );
    let c = Cluster::start(&pg, 2, &format!("{}{routers}", config())).await;
    let http = reqwest::Client::new();
    let mut body = engine_endpoint("picked", "public", 2, 2);
    body["customRouter"] = json!({"tag": "picker", "protocol": "extProc"});
    let url = format!("{}/v2/endpoint/admin", c.nodes[0].url());
    let (status, made) = send(&http, reqwest::Method::POST, url, &c.token, Some(&body)).await;
    assert_eq!(status, 200, "{made}");
    for i in 0..2 {
        let mut named = Vec::new();
        for _ in 0..600 {
            named.clear();
            for pick in ["0", "1"] {
                let res = http
                    .get(format!(
                        "{}/endpoints/admin/picked/seen/x",
                        c.nodes[i].url()
                    ))
                    .header("x-pick", pick)
                    .send()
                    .await
                    .expect("request");
                if res.status() != 200 {
                    break;
                }
                let seen: Value = res.json().await.unwrap_or(Value::Null);
                if let Some(d) = seen["headers"]["x-gateway-destination-endpoint"].as_str() {
                    named.push(d.to_string());
                }
            }
            if named.len() == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(
            named.len(),
            2,
            "through server {i}:\n{}",
            c.nodes[i].logged()
        );
        assert_ne!(named[0], named[1], "two replicas named through server {i}");
    }
}
