//! Webhooks against the real server on loopback: management as the hub's client calls it, deliveries
//! of endpoint and catalog changes to a receiver on 127.0.0.1:0 (checked with the Standard Webhooks
//! verifier), and the fault matrix: retries, 410, redirects, 429 with Retry-After, the circuit
//! breaker, an address the SSRF guard refuses, a stale lease, replays and secret rotation.

use crate::common;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use common::{endpoint_body, spawn_with, TestServer};
use serde_json::{json, Value};
use switchyard_server::client::Client;
use switchyard_server::config::Config;
use switchyard_server::signing::{verify, SigningKey};
use switchyard_server::store::DeliveryQueue;

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Got {
    path: String,
    headers: HeaderMap,
    body: Value,
    raw: Vec<u8>,
}

/// A scripted answer: status and extra headers.
type Answer = (u16, Vec<(&'static str, String)>);

#[derive(Clone, Default)]
struct Receiver {
    got: Arc<Mutex<Vec<Got>>>,
    /// Answers in order; when empty, 200.
    script: Arc<Mutex<VecDeque<Answer>>>,
    /// Answer every request with this status (after the script).
    always: Arc<Mutex<Option<u16>>>,
}

impl Receiver {
    async fn start() -> (Receiver, String) {
        let r = Receiver::default();
        let app = Router::new()
            .route("/hook", post(receive))
            .route("/other", post(receive))
            .with_state(r.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        (r, url)
    }

    fn script(&self, answers: impl IntoIterator<Item = Answer>) {
        self.script.lock().expect("lock").extend(answers);
    }

    fn got(&self) -> Vec<Got> {
        self.got.lock().expect("lock").clone()
    }

    /// Waits until the requests so far satisfy `ok` (at most 20 s); all requests so far.
    async fn wait_all(&self, ok: impl Fn(&[Got]) -> bool) -> Vec<Got> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let got = self.got();
            if ok(&got) || Instant::now() > deadline {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until a request satisfying `ok` came (at most 20 s); all requests so far.
    async fn wait_until(&self, ok: impl Fn(&Got) -> bool) -> Vec<Got> {
        self.wait_all(|got| got.iter().any(&ok)).await
    }

    /// The requests that carried the same `webhook-id` as the first one.
    fn first_event(&self) -> Vec<Got> {
        let got = self.got();
        let Some(id) = got
            .first()
            .and_then(|g| header(g, "webhook-id"))
            .map(str::to_string)
        else {
            return Vec::new();
        };
        got.into_iter()
            .filter(|g| header(g, "webhook-id") == Some(id.as_str()))
            .collect()
    }

    /// Waits until the first event was received `n` times (at most 20 s).
    async fn first_event_times(&self, n: usize) -> Vec<Got> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let got = self.first_event();
            if got.len() >= n || Instant::now() > deadline {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until `n` requests came (at most 20 s).
    async fn wait_for(&self, n: usize) -> Vec<Got> {
        self.wait_all(|got| got.len() >= n).await
    }
}

async fn receive(
    State(r): State<Receiver>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    r.got.lock().expect("lock").push(Got {
        path: uri.path().to_string(),
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        raw: body.to_vec(),
    });
    let scripted = r.script.lock().expect("lock").pop_front();
    let (status, extra) = scripted
        .or_else(|| r.always.lock().expect("lock").map(|s| (s, vec![])))
        .unwrap_or((200, vec![]));
    let mut resp = (
        StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
        "{\"ok\":true}",
    )
        .into_response();
    for (k, v) in extra {
        resp.headers_mut()
            .insert(k, v.parse().expect("header value"));
    }
    resp
}

/// A server that lets loopback through and retries quickly.
async fn server(configure: impl FnOnce(&mut Config)) -> TestServer {
    spawn_with(|c| {
        c.outbound.allow = vec!["127.0.0.0/8".into()];
        c.webhooks.retry_schedule = vec!["50ms".into(), "50ms".into(), "50ms".into()];
        c.webhooks.timeout = "2s".into();
        c.webhooks.lease = "5s".into();
        configure(c);
    })
    .await
}

async fn create(client: &Client, body: Value) -> (String, String) {
    let created: Value = client.create_webhook(&body).await.expect("create webhook");
    (
        created["webhook"]["id"].as_str().expect("id").to_string(),
        created["signingSecret"]
            .as_str()
            .expect("signing secret")
            .to_string(),
    )
}

fn watch_endpoints(url: &str, user: &str) -> Value {
    json!({"watched": [{"type": "user", "name": user}], "domains": ["endpoint"],
           "url": format!("{url}/hook"), "secret": "s3cret"})
}

fn header<'a>(g: &'a Got, name: &str) -> Option<&'a str> {
    g.headers.get(name).and_then(|v| v.to_str().ok())
}

/// The Standard Webhooks check a receiver makes.
fn verifies(g: &Got, secrets: &[&str]) -> bool {
    let keys: Vec<SigningKey> = secrets
        .iter()
        .map(|s| SigningKey::parse(s).expect("key"))
        .collect();
    verify(
        &keys,
        header(g, "webhook-id"),
        header(g, "webhook-timestamp"),
        header(g, "webhook-signature"),
        &g.raw,
        chrono::Utc::now().timestamp(),
    )
    .is_ok()
}

/// A time the server recorded (`at`, `nextAttemptAt`).
fn time(v: &Value) -> chrono::DateTime<chrono::Utc> {
    let text = v.as_str().unwrap_or_else(|| panic!("a time: {v}"));
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("{text}: {e}"))
        .to_utc()
}

fn ms(n: i64) -> chrono::Duration {
    chrono::Duration::milliseconds(n)
}

async fn attempts(client: &Client, id: &str) -> Vec<Value> {
    client
        .webhook_deliveries(id, None, Some(100), None)
        .await
        .expect("deliveries")
}

/// The webhook once it is disabled (or as it is after 10 s): the server records the attempt first,
/// then disables it.
async fn disabled_soon(client: &Client, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let w: Value = client.webhook(id).await.expect("get");
        if w["webhook"]["disabled"] == true || Instant::now() > deadline {
            return w;
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
}

/// Waits until the webhook's activity satisfies `ok` (at most 20 s).
async fn activity_until(client: &Client, id: &str, ok: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let a = attempts(client, id).await;
        if ok(&a) || Instant::now() > deadline {
            return a;
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
}

#[tokio::test]
async fn management_follows_the_hub_and_its_rules() {
    let s = server(|_| {}).await;
    let alice = s.user("alice", None).await;
    let bob = s.user("bob", None).await;
    let (_r, url) = Receiver::start().await;

    let (id, signing) = create(
        &alice,
        json!({"watched": [{"type": "user", "name": "alice"}],
        "domains": ["repo", "discussions"], "url": format!("{url}/hook"), "secret": "abc"}),
    )
    .await;
    assert!(signing.starts_with("whsec_"));
    let list: Value = alice.webhooks().await.expect("list");
    let list = list.as_array().expect("a bare array");
    assert_eq!(list.len(), 1);
    let w = &list[0];
    assert_eq!(w["id"], id.as_str());
    assert_eq!(w["secret"], "abc");
    assert_eq!(w["disabled"], false);
    assert_eq!(w["job"], Value::Null);
    assert_eq!(w["domains"], json!(["repo", "discussion"]));
    assert_eq!(w["watched"], json!([{"type": "user", "name": "alice"}]));

    // An empty `watched` on update leaves it as it was.
    let updated: Value = alice
        .update_webhook(&id, &json!({"watched": [], "url": format!("{url}/other")}))
        .await
        .expect("update");
    assert_eq!(
        updated["webhook"]["watched"],
        json!([{"type": "user", "name": "alice"}])
    );
    assert_eq!(updated["webhook"]["url"], format!("{url}/other"));
    let off: Value = alice
        .set_webhook_enabled(&id, false)
        .await
        .expect("disable");
    assert_eq!(off["webhook"]["disabled"], true);
    let on: Value = alice.set_webhook_enabled(&id, true).await.expect("enable");
    assert_eq!(on["webhook"]["disabled"], false);

    // Another user neither sees nor touches it.
    let theirs: Value = bob.webhooks().await.expect("list");
    assert_eq!(theirs, json!([]));
    let err = bob.webhook::<Value>(&id).await.expect_err("not bob's");
    assert_eq!(err.status(), Some(StatusCode::NOT_FOUND));

    // Bad input: a clear 400 naming the field, nothing stored.
    for (body, field) in [
        (
            json!({"watched": [{"type": "user", "name": "nobody"}], "url": format!("{url}/h")}),
            "watched[0].name",
        ),
        (
            json!({"watched": [{"type": "user", "name": "alice"}], "url": "ftp://example.com/"}),
            "url",
        ),
        (
            json!({"watched": [{"type": "user", "name": "alice"}], "url": "http://169.254.169.254/"}),
            "url",
        ),
        (json!({"watched": [], "url": format!("{url}/h")}), "watched"),
        (
            json!({"watched": [{"type": "user", "name": "bob"}], "domains": ["endpoint"], "url": format!("{url}/h")}),
            "watched[0].name",
        ),
    ] {
        let err = alice
            .create_webhook::<Value>(&body)
            .await
            .expect_err("refused");
        assert_eq!(err.status(), Some(StatusCode::BAD_REQUEST), "{body}");
        let (answer, paths) = issue_paths(err);
        assert!(
            paths.iter().any(|p| p == field),
            "{answer} should name {field}"
        );
    }
    // Every issue at once, a missing URL among them.
    let err = alice
        .create_webhook::<Value>(&json!({"watched": [], "secret": "a b"}))
        .await
        .expect_err("refused");
    let (answer, mut paths) = issue_paths(err);
    paths.sort_unstable();
    assert_eq!(paths, ["secret", "url", "watched"], "{answer}");
    let jobs = alice
        .create_webhook::<Value>(
            &json!({"watched": [{"type": "user", "name": "alice"}], "jobSourceId": "x"}),
        )
        .await;
    assert_eq!(
        jobs.expect_err("no jobs").status(),
        Some(StatusCode::BAD_REQUEST)
    );
    let all: Value = alice.webhooks().await.expect("list");
    assert_eq!(all.as_array().map(Vec::len), Some(1));

    // Scopes: `webhooks` or unrestricted.
    let narrow = s.token_for("alice", Some(&["read-endpoints"])).await;
    assert_eq!(
        narrow
            .webhooks::<Value>()
            .await
            .expect_err("scope")
            .status(),
        Some(StatusCode::FORBIDDEN)
    );
    let scoped = s.token_for("alice", Some(&["webhooks"])).await;
    let seen: Value = scoped.webhooks().await.expect("webhooks scope");
    assert_eq!(seen.as_array().map(Vec::len), Some(1));

    // An organization's admins manage its webhooks.
    let _: Value = s.admin.admin_create_org("acme").await.expect("org");
    let _: Value = s
        .admin
        .admin_set_member("acme", "alice", "admin")
        .await
        .expect("member");
    let _: Value = s
        .admin
        .admin_set_member("acme", "bob", "write")
        .await
        .expect("member");
    let (org_hook, _) = create(
        &alice,
        json!({"watched": [{"type": "org", "name": "acme"}],
        "domains": ["endpoint"], "url": format!("{url}/hook"), "owner": "acme"}),
    )
    .await;
    let mine: Value = alice.webhook(&org_hook).await.expect("org admin sees it");
    assert_eq!(mine["webhook"]["owner"], "acme");
    let err = bob
        .create_webhook::<Value>(&json!({"watched": [{"type": "org", "name": "acme"}], "url": format!("{url}/hook"), "owner": "acme"}))
        .await
        .expect_err("bob is not an admin of acme");
    assert_eq!(err.status(), Some(StatusCode::FORBIDDEN));

    alice.delete_webhook(&id).await.expect("delete");
    assert_eq!(
        alice
            .webhook::<Value>(&id)
            .await
            .expect_err("gone")
            .status(),
        Some(StatusCode::NOT_FOUND)
    );
}

use switchyard_server::client::ClientError;

#[tokio::test]
async fn endpoint_changes_arrive_signed_once_each_and_show_in_the_activity() {
    let s = server(|_| {}).await;
    let alice = s.user("alice", None).await;
    let (r, url) = Receiver::start().await;
    let (id, signing) = create(&alice, watch_endpoints(&url, "alice")).await;

    let _: Value = alice
        .create_endpoint("alice", &endpoint_body("e1"))
        .await
        .expect("create");
    let got = r.wait_for(1).await;
    let first = got.first().expect("a delivery");
    assert_eq!(first.path, "/hook");
    assert_eq!(header(first, "x-webhook-secret"), Some("s3cret"));
    assert_eq!(header(first, "content-type"), Some("application/json"));
    assert!(verifies(first, &[&signing]), "signature checks out");
    assert!(
        !verifies(first, &[&SigningKey::generate()]),
        "a wrong key does not"
    );
    let body = &first.body;
    assert_eq!(
        body["event"],
        json!({"action": "create", "scope": "endpoint"})
    );
    assert_eq!(body["webhook"], json!({"id": id, "version": 3}));
    assert_eq!(body["id"].as_str(), header(first, "webhook-id"));
    assert_eq!(
        body["repo"]["name"],
        "sentence-transformers/all-MiniLM-L6-v2"
    );
    assert_eq!(body["endpoint"]["name"], "e1");

    // The endpoint moves on (a state change), then goes: each change its own delivery.
    alice.delete_endpoint("alice", "e1").await.expect("delete");
    let deleted = json!({"action": "delete", "scope": "endpoint"});
    let got = r.wait_until(|g| g.body["event"] == deleted).await;
    let scopes: Vec<Value> = got.iter().map(|g| g.body["event"].clone()).collect();
    assert!(
        scopes.contains(&json!({"action": "delete", "scope": "endpoint"})),
        "{scopes:?}"
    );
    let ids: std::collections::HashSet<_> =
        got.iter().filter_map(|g| header(g, "webhook-id")).collect();
    assert_eq!(ids.len(), got.len(), "each event its own id");

    let activity = activity_until(&alice, &id, |a| a.len() >= got.len()).await;
    let newest = &activity[0];
    assert_eq!(newest["statusCode"], 200);
    assert_eq!(newest["state"], "succeeded");
    assert_eq!(newest["attempt"], 1);
    assert_eq!(newest["response"], "{\"ok\":true}");
    assert_eq!(newest["errorClass"], Value::Null);
    assert!(newest["durationMs"].as_i64().is_some());

    // Following: `after` the newest seq with `wait` returns when the next attempt comes.
    let seq = newest["seq"].as_i64().expect("seq");
    let follower = {
        let alice = alice.clone();
        let id = id.clone();
        tokio::spawn(async move {
            alice
                .webhook_deliveries::<Vec<Value>>(&id, Some(seq), None, Some(20))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _: Value = alice
        .create_endpoint("alice", &endpoint_body("e2"))
        .await
        .expect("create");
    let next = follower.await.expect("join").expect("follow");
    assert!(!next.is_empty() && next.iter().all(|a| a["seq"].as_i64() > Some(seq)));

    // Another user's endpoints are not watched by alice's webhook.
    let bob = s.user("bob", None).await;
    let before = r.got().len();
    let _: Value = bob
        .create_endpoint("bob", &endpoint_body("b1"))
        .await
        .expect("create");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(r.got()[before..]
        .iter()
        .all(|g| g.body["endpoint"]["name"] != "b1"));
}

/// Adds or changes the catalog item `acme/tiny`, its recipe pinned to `revision`: one event.
async fn put_item(s: &TestServer, revision: &str) {
    let item = json!({"modelName": "tiny", "createdAt": "2024-01-01T00:00:00Z",
        "authorName": "acme", "license": "mit", "repoId": "acme/tiny", "task": "text-generation",
        "recipes": [{"accelerator": "cpu", "engineType": "tei", "publicId": "tiny-cpu",
            "revision": revision, "memoryGb": 1.0}]});
    let _: Value = s.admin.admin_put_catalog_item(&item).await.expect("put");
}

/// A webhook of the admin's watching `acme/tiny`.
async fn watch_tiny(s: &TestServer, url: &str) -> String {
    let body = json!({"watched": [{"type": "model", "name": "acme/tiny"}],
        "domains": ["repo"], "url": format!("{url}/hook")});
    create(&s.admin, body).await.0
}

#[tokio::test]
async fn catalog_changes_take_the_repo_scopes() {
    let s = server(|_| {}).await;
    let (r, url) = Receiver::start().await;
    watch_tiny(&s, &url).await;
    put_item(&s, "aaaa").await;
    put_item(&s, "bbbb").await;
    s.admin
        .admin_delete_catalog_item("acme/tiny")
        .await
        .expect("delete");
    let got = r.wait_for(3).await;
    let events: Vec<Value> = got.iter().map(|g| g.body["event"].clone()).collect();
    assert_eq!(
        events,
        vec![
            json!({"action": "create", "scope": "repo"}),
            json!({"action": "update", "scope": "repo.content"}),
            json!({"action": "delete", "scope": "repo"}),
        ]
    );
    assert_eq!(
        got[1].body["updatedRefs"],
        json!([{"ref": "refs/recipes/tiny-cpu", "oldSha": "aaaa", "newSha": "bbbb"}])
    );
    assert_eq!(got[0].body["repo"]["type"], "model");
    assert_eq!(got[0].body["repo"]["owner"]["id"], "acme");
}

#[tokio::test]
async fn failures_are_retried_on_schedule_with_one_id_until_they_succeed() {
    let s = server(|_| {}).await;
    let (r, url) = Receiver::start().await;
    r.script([(500, vec![]), (502, vec![])]);
    let id = watch_tiny(&s, &url).await;
    put_item(&s, "aaaa").await;
    let got = r.first_event_times(3).await;
    assert_eq!(got.len(), 3, "the first event, sent until it succeeded");
    assert_eq!(got[0].raw, got[2].raw, "the same body on every retry");
    let event = got[0].body["id"].clone();
    let a = activity_until(&s.admin, &id, |a| {
        a.iter()
            .any(|x| x["eventId"] == event && x["state"] == "succeeded")
    })
    .await;
    let mine: Vec<&Value> = a.iter().filter(|x| x["eventId"] == event).collect();
    let codes: Vec<Value> = mine.iter().rev().map(|x| x["statusCode"].clone()).collect();
    assert_eq!(codes, vec![json!(500), json!(502), json!(200)]);
    assert_eq!(mine[2]["errorClass"], "status");
    assert!(
        mine[2]["nextAttemptAt"].is_string(),
        "a failed attempt says when the next one goes"
    );
    // By the server's own record: each retry planned the schedule's delay (50 ms, less its 20 % jitter) after
    // the failed attempt began, and sent no earlier than planned.
    for pair in mine.windows(2) {
        let (later, failed) = (pair[0], pair[1]);
        let planned = time(&failed["nextAttemptAt"]);
        assert!(
            planned - time(&failed["at"]) >= ms(40 - 1),
            "retried after the schedule's delay, not at once: {failed}"
        );
        assert!(
            time(&later["at"]) >= planned,
            "sent before its time: {later} after {failed}"
        );
    }
}

#[tokio::test]
async fn gone_disables_and_redirects_are_not_followed() {
    let s = server(|_| {}).await;
    let alice = s.user("alice", None).await;
    let (r, url) = Receiver::start().await;
    r.script([
        (302, vec![("location", format!("{url}/other"))]),
        (410, vec![]),
    ]);
    let (id, _) = create(&alice, watch_endpoints(&url, "alice")).await;
    let _: Value = alice
        .create_endpoint("alice", &endpoint_body("e1"))
        .await
        .expect("create");
    // Both attempts, each recorded when it ends: events go out concurrently, so the 410 may be on record
    // before the 302.
    let both = |a: &[Value]| {
        [302, 410]
            .iter()
            .all(|c| a.iter().any(|x| x["statusCode"] == *c))
    };
    let a = activity_until(&alice, &id, both).await;
    let redirect = a
        .iter()
        .find(|x| x["statusCode"] == 302)
        .expect("the redirect's attempt");
    assert_eq!(redirect["errorClass"], "redirect");
    assert!(
        r.got().iter().all(|g| g.path == "/hook"),
        "the redirect's target was never called"
    );
    let w = disabled_soon(&alice, &id).await;
    assert_eq!(w["webhook"]["disabled"], true);
    assert!(w["webhook"]["disabledReason"]
        .as_str()
        .unwrap_or_default()
        .contains("410"));
    let told: Vec<Value> = alice
        .notifications(None, None, None)
        .await
        .expect("notices");
    assert!(
        told.iter()
            .any(|n| n["kind"] == "webhook.disabled" && n["subject"] == id.as_str()),
        "the owner is told: {told:?}"
    );
    let after = attempts(&alice, &id).await;
    assert!(
        after.iter().all(|x| x["state"] != "pending"),
        "pending deliveries were cancelled"
    );
    // Disabled: later changes queue nothing for it.
    let before = r.got().len();
    let _: Value = alice
        .create_endpoint("alice", &endpoint_body("e2"))
        .await
        .expect("create");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(r.got().len(), before);
}

#[tokio::test]
async fn retry_after_is_honoured() {
    let s = server(|_| {}).await;
    let (r, url) = Receiver::start().await;
    r.script([(429, vec![("retry-after", "1".to_string())])]);
    let id = watch_tiny(&s, &url).await;
    put_item(&s, "aaaa").await;
    let got = r.first_event_times(2).await;
    assert_eq!(got.len(), 2, "sent again after the 429");
    let a = activity_until(&s.admin, &id, |a| {
        a.iter().any(|x| x["state"] == "succeeded")
    })
    .await;
    let [later, limited] = &a[..] else {
        panic!("two attempts: {a:?}")
    };
    assert_eq!(limited["statusCode"], 429);
    assert_eq!(later["statusCode"], 200);
    // By the server's own record: the retry was planned a Retry-After (1 s) on, over the schedule's 50 ms, and
    // went no earlier.
    let planned = time(&limited["nextAttemptAt"]);
    assert!(
        planned - time(&limited["at"]) >= ms(1000 - 1),
        "planned without waiting for Retry-After: {limited}"
    );
    assert!(
        time(&later["at"]) >= planned,
        "sent before Retry-After was over: {later}"
    );
}

/// When the server holds the webhook's deliveries (its breaker open, or a `Retry-After`), as it recorded it.
async fn held_until(s: &TestServer, id: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    let db = s.db().await;
    let held: Option<String> = sqlx::query_scalar("SELECT held_until FROM webhooks WHERE id = $1")
        .bind(id)
        .fetch_one(&db)
        .await
        .expect("the webhook's row");
    db.close().await;
    held.map(|t| time(&json!(t)))
}

#[tokio::test]
async fn an_open_breaker_holds_deliveries_without_spending_attempts() {
    let s = server(|c| {
        c.webhooks.breaker_failures = 2;
        // One at a time, so the failures are counted before the next attempt goes.
        c.webhooks.concurrency = 1;
        c.webhooks.breaker_hold = "1s".into();
        c.webhooks.retry_schedule = vec!["10ms".into(); 7];
    })
    .await;
    let alice = s.user("alice", None).await;
    let (r, url) = Receiver::start().await;
    *r.always.lock().expect("lock") = Some(503);
    let (id, _) = create(&alice, watch_endpoints(&url, "alice")).await;
    for n in 0..3 {
        let _: Value = alice
            .create_endpoint("alice", &endpoint_body(&format!("e{n}")))
            .await
            .expect("create");
    }

    // Two failures in a row, and the server records the hold; nothing more was tried by then.
    let mut hold = None;
    for _ in 0..500 {
        hold = held_until(&s, &id).await;
        if hold.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let hold = hold.expect("the breaker opened and the hold was recorded");
    // What started before the hold ends (a busy machine may see the hold late, after it ended).
    let before: Vec<Value> = attempts(&alice, &id)
        .await
        .into_iter()
        .filter(|x| time(&x["at"]) < hold)
        .collect();
    assert_eq!(
        before.len(),
        2,
        "the breaker opened after two failures: {before:?}"
    );
    let codes: Vec<&Value> = before.iter().map(|x| &x["statusCode"]).collect();
    assert_eq!(codes, [&json!(503), &json!(503)], "{before:?}");
    let second = &before[0];
    assert!(
        hold >= time(&second["at"]) + ms(1000),
        "held for breaker_hold from the second failure: until {hold}, {second}"
    );

    // The receiver recovers; once the hold is over, a probe goes and then the rest.
    *r.always.lock().expect("lock") = None;
    let creates: Vec<Value> = (0..3).map(|n| json!(format!("e{n}"))).collect();
    let delivered = |got: &[Got]| {
        creates
            .iter()
            .all(|name| got.iter().any(|g| g.body["endpoint"]["name"] == *name))
    };
    let got = r.wait_all(delivered).await;
    assert!(
        delivered(&got),
        "all delivered after recovery: {} requests",
        got.len()
    );
    let ids: std::collections::HashSet<&str> = got
        .iter()
        .filter(|g| creates.contains(&g.body["endpoint"]["name"]))
        .filter_map(|g| header(g, "webhook-id"))
        .collect();
    let a = activity_until(&alice, &id, |a| {
        ids.iter().all(|e| {
            a.iter()
                .any(|x| x["eventId"] == *e && x["state"] == "succeeded")
        })
    })
    .await;
    for event in &ids {
        let mine: Vec<&Value> = a.iter().filter(|x| x["eventId"] == *event).collect();
        // Each attempt on record was a request the receiver got, numbered on from the last: none spent
        // while held.
        let mut numbers: Vec<i64> = mine.iter().filter_map(|x| x["attempt"].as_i64()).collect();
        numbers.sort_unstable();
        assert_eq!(
            numbers,
            (1..=mine.len() as i64).collect::<Vec<_>>(),
            "{event}: {mine:?}"
        );
        let sent = r
            .got()
            .iter()
            .filter(|g| header(g, "webhook-id") == Some(event))
            .count();
        assert_eq!(sent, mine.len(), "{event}: every attempt was sent, once");
        assert!(
            mine.iter().all(|x| x["attempt"].as_i64() <= Some(3)),
            "{mine:?}"
        );
    }
    // Nothing started while held.
    let started_after = time(&second["at"]);
    let during: Vec<&Value> = a
        .iter()
        .filter(|x| time(&x["at"]) > started_after && time(&x["at"]) < hold)
        .collect();
    assert!(
        during.is_empty(),
        "attempts while held until {hold}: {during:?}"
    );
}

#[tokio::test]
async fn a_name_that_resolves_to_a_private_address_is_refused_at_connect() {
    let s = server(|c| {
        c.outbound
            .resolve
            .insert("private.test".into(), "10.0.0.1".into());
        c.webhooks.retry_schedule = vec![];
    })
    .await;
    let alice = s.user("alice", None).await;
    let (id, _) = create(
        &alice,
        json!({"watched": [{"type": "user", "name": "alice"}],
        "domains": ["endpoint"], "url": "http://private.test/hook"}),
    )
    .await;
    let _: Value = alice
        .create_endpoint("alice", &endpoint_body("e1"))
        .await
        .expect("create");
    let a = activity_until(&alice, &id, |a| !a.is_empty()).await;
    assert_eq!(a[0]["errorClass"], "refused");
    assert_eq!(a[0]["state"], "failed");
    assert!(a[0]["error"]
        .as_str()
        .unwrap_or_default()
        .contains("private.test"));
}

#[tokio::test]
async fn a_stale_claim_cannot_record_and_replays_send_again() {
    let s = server(|c| c.webhooks.retry_schedule = vec![]).await;
    let alice = s.user("alice", None).await;
    let (r, url) = Receiver::start().await;
    r.script([(500, vec![])]);
    let (id, _) = create(&alice, watch_endpoints(&url, "alice")).await;
    let _: Value = alice
        .create_endpoint("alice", &endpoint_body("e1"))
        .await
        .expect("create");
    let a = activity_until(&alice, &id, |a| a.iter().any(|x| x["state"] == "failed")).await;
    let failed = a
        .iter()
        .find(|x| x["state"] == "failed")
        .expect("a failed delivery");
    let delivery = failed["deliveryId"].as_str().expect("delivery").to_string();

    // A claim whose lease another worker took over records nothing.
    let store = s.store().await;
    let outcome = switchyard_server::store::Outcome {
        delivery_id: delivery.clone(),
        webhook_id: id.clone(),
        claim_token: "stale".into(),
        number: 9,
        started_at: chrono::Utc::now(),
        duration_ms: 1,
        status_code: Some(200),
        error_class: None,
        error: None,
        response: None,
        next_attempt_at: None,
        state: "succeeded",
        manual: false,
        now: chrono::Utc::now(),
    };
    store.record_outcome(&outcome).await.expect("record");
    let after = attempts(&alice, &id).await;
    let same: Vec<&Value> = after
        .iter()
        .filter(|x| x["deliveryId"] == delivery.as_str())
        .collect();
    assert_eq!(same.len(), 1, "the stale worker's attempt was not recorded");
    assert_eq!(same[0]["state"], "failed");

    let replayed: Value = alice.replay_delivery(&id, &delivery).await.expect("replay");
    assert!(replayed["deliveryId"].is_string());
    let a = activity_until(&alice, &id, |a| a.iter().any(|x| x["manual"] == true)).await;
    let replay = a.iter().find(|x| x["manual"] == true).expect("the replay");
    assert_eq!(replay["statusCode"], 200);
    assert_eq!(
        replay["eventId"], failed["eventId"],
        "a replay is the same event"
    );
    assert_eq!(
        r.first_event().len(),
        2,
        "sent twice: the failure and the replay"
    );
}

#[tokio::test]
async fn a_rotated_secret_and_the_old_one_both_sign_during_the_grace_period() {
    let s = server(|_| {}).await;
    let alice = s.user("alice", None).await;
    let (r, url) = Receiver::start().await;
    let (id, old) = create(&alice, watch_endpoints(&url, "alice")).await;
    let rotated: Value = alice
        .rotate_webhook_secret(&id, Some(3600))
        .await
        .expect("rotate");
    let new = rotated["signingSecret"]
        .as_str()
        .expect("secret")
        .to_string();
    assert_ne!(new, old);
    let current: Value = alice.webhook_signing_secret(&id).await.expect("secret");
    assert_eq!(current["signingSecret"], new.as_str());
    let _: Value = alice
        .create_endpoint("alice", &endpoint_body("e1"))
        .await
        .expect("create");
    let got = r.wait_for(1).await;
    let g = &got[0];
    assert_eq!(
        header(g, "webhook-signature").map(|s| s.split(' ').count()),
        Some(2)
    );
    assert!(verifies(g, &[&old]) && verifies(g, &[&new]));
    // Every delivery of the grace period is signed by both, the deletion's too.
    alice.delete_endpoint("alice", "e1").await.expect("delete");
    let gone = json!({"action": "delete", "scope": "endpoint"});
    let got = r.wait_until(|g| g.body["event"] == gone).await;
    let deleted = got
        .iter()
        .find(|g| g.body["event"] == gone)
        .expect("the deletion's event");
    assert!(verifies(deleted, &[&old]) && verifies(deleted, &[&new]));
    let _: Value = alice
        .rotate_webhook_secret(&id, Some(0))
        .await
        .expect("rotate, no grace");
    let latest: Value = alice.webhook_signing_secret(&id).await.expect("secret");
    let latest = latest["signingSecret"]
        .as_str()
        .expect("secret")
        .to_string();
    let _: Value = alice
        .create_endpoint("alice", &endpoint_body("e2"))
        .await
        .expect("create");
    let got = r.wait_until(|g| g.body["endpoint"]["name"] == "e2").await;
    let g = got
        .iter()
        .find(|g| g.body["endpoint"]["name"] == "e2")
        .expect("e2's event");
    assert_eq!(
        header(g, "webhook-signature").map(|s| s.split(' ').count()),
        Some(1)
    );
    assert!(verifies(g, &[&latest]) && !verifies(g, &[&old]) && !verifies(g, &[&new]));

    // A rotation with no body at all: the default grace period, so the last two both sign.
    let path = format!("/api/settings/webhooks/{id}/rotate-secret");
    let bare: Value = alice
        .request(reqwest::Method::POST, &path, None)
        .await
        .expect("rotate with no body");
    let bare = bare["signingSecret"].as_str().expect("secret").to_string();
    assert_ne!(bare, latest);
    let _: Value = alice
        .create_endpoint("alice", &endpoint_body("e3"))
        .await
        .expect("create");
    let got = r.wait_until(|g| g.body["endpoint"]["name"] == "e3").await;
    let g = got
        .iter()
        .find(|g| g.body["endpoint"]["name"] == "e3")
        .expect("e3's event");
    assert!(verifies(g, &[&bare]) && verifies(g, &[&latest]) && !verifies(g, &[&old]));
}

#[tokio::test]
async fn a_receiver_that_is_down_is_retried_until_it_answers() {
    let s = server(|c| c.webhooks.retry_schedule = vec!["300ms".into(); 7]).await;
    // A port nothing listens on, which a receiver takes later.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let id = watch_tiny_at(&s, &format!("http://127.0.0.1:{port}")).await;
    put_item(&s, "aaaa").await;
    let a = activity_until(&s.admin, &id, |a| !a.is_empty()).await;
    assert_eq!(a[0]["errorClass"], "connect");
    assert_eq!(a[0]["statusCode"], Value::Null);
    let r = Receiver::default();
    let app = Router::new()
        .route("/hook", post(receive))
        .with_state(r.clone());
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("rebind");
    tokio::spawn(async move { axum::serve(listener, app).await });
    let got = r.wait_for(1).await;
    assert_eq!(got.len(), 1, "delivered once the receiver came up");
    let a = activity_until(&s.admin, &id, |a| {
        a.iter().any(|x| x["state"] == "succeeded")
    })
    .await;
    assert!(a.iter().any(|x| x["state"] == "succeeded"));
}

/// A webhook of the admin's watching `acme/tiny`, sending to `base`/hook.
async fn watch_tiny_at(s: &TestServer, base: &str) -> String {
    watch_tiny(s, base).await
}

/// A receiver that records each request as it comes and answers it only once the gate is opened.
async fn gated_receiver() -> (Receiver, String, tokio::sync::watch::Sender<bool>) {
    let r = Receiver::default();
    let (gate, opened) = tokio::sync::watch::channel(false);
    let kept = r.clone();
    let app = Router::new().route(
        "/hook",
        post(
            move |uri: axum::http::Uri, headers: HeaderMap, body: axum::body::Bytes| {
                let (r, mut opened) = (kept.clone(), opened.clone());
                async move {
                    let answer = receive(State(r), uri, headers, body).await;
                    let _ = opened.wait_for(|open| *open).await;
                    answer
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (r, url, gate)
}

#[tokio::test]
async fn a_slow_receiver_times_out_and_does_not_hold_up_the_others() {
    let s = server(|c| {
        // Far longer than ten deliveries to a receiver that answers at once take.
        c.webhooks.timeout = "5s".into();
        c.webhooks.lease = "10s".into();
        c.webhooks.concurrency = 2;
        c.webhooks.retry_schedule = vec!["50ms".into(); 3];
    })
    .await;
    let (slow, slow_url, gate) = gated_receiver().await;
    let (fast, fast_url) = Receiver::start().await;
    let slow_id = watch_tiny(&s, &slow_url).await;
    let fast_id = watch_tiny(&s, &fast_url).await;
    for n in 0..10 {
        put_item(&s, &format!("rev{n}")).await;
    }
    // The slow receiver holds requests (its webhook's two slots) and answers none while the gate is shut.
    let held = slow.wait_for(2).await;
    assert!(
        held.len() >= 2,
        "the slow receiver's slots are taken: {held:?}"
    );
    // Meanwhile the other webhook delivers everything: before any attempt to the slow one has ended.
    let got = fast.wait_for(10).await;
    assert_eq!(got.len(), 10, "the fast receiver got every event");
    let slow_ended = attempts(&s.admin, &slow_id).await;
    assert!(
        slow_ended.is_empty(),
        "held up: an attempt to the slow receiver ended before the others were delivered: {slow_ended:?}"
    );
    let fast_done = activity_until(&s.admin, &fast_id, |a| a.len() >= 10).await;
    assert!(
        fast_done
            .iter()
            .all(|x| x["state"] == "succeeded" && x["attempt"] == 1),
        "{fast_done:?}"
    );

    // With the gate still shut, the slow receiver's attempts end at the timeout, and say so.
    let a = activity_until(&s.admin, &slow_id, |a| !a.is_empty()).await;
    assert!(!a.is_empty(), "the slow receiver's attempts ended");
    for x in &a {
        assert_eq!(x["errorClass"], "timeout", "{x}");
        assert!(
            x["durationMs"].as_i64() >= Some(5000),
            "gave up before its timeout: {x}"
        );
    }
    gate.send_replace(true);
    assert!(slow.got().len() <= 10 * 4, "bounded attempts");
}

#[tokio::test]
async fn a_disabled_accounts_webhooks_send_nothing_until_it_is_enabled() {
    let s = server(|c| c.webhooks.retry_schedule = vec!["300ms".into(); 7]).await;
    let bob = s.user("bob", None).await;
    let (r, url) = Receiver::start().await;
    *r.always.lock().expect("lock") = Some(500);
    let body = json!({"watched": [{"type": "model", "name": "acme/tiny"}],
        "domains": ["repo"], "url": format!("{url}/hook")});
    let (id, _) = create(&bob, body).await;
    put_item(&s, "aaaa").await;
    let _ = r.wait_for(1).await;
    // Disabled while its first delivery waits for a retry, then a change it watches.
    let path = |what: &str| format!("/api/v1/admin/users/bob/{what}");
    let _: Value = s
        .admin
        .request(reqwest::Method::POST, &path("disable"), None)
        .await
        .expect("disable");
    let seen = r.got().len();
    put_item(&s, "bbbb").await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(r.got().len(), seen, "nothing sent for a disabled owner");

    *r.always.lock().expect("lock") = None;
    let _: Value = s
        .admin
        .request(reqwest::Method::POST, &path("enable"), None)
        .await
        .expect("enable");
    put_item(&s, "cccc").await;
    let new_sha = |g: &Got| g.body["updatedRefs"][0]["newSha"].clone();
    let got = r.wait_until(|g| new_sha(g) == "cccc").await;
    let after: Vec<Value> = got[seen..].iter().map(new_sha).collect();
    assert_eq!(after, [json!("cccc")], "only what came after the enable");
    let a = attempts(&bob, &id).await;
    assert!(a.iter().any(|x| x["state"] == "cancelled"), "{a:?}");
}

#[tokio::test]
async fn disabling_mid_retry_stops_attempts_and_a_replay_brings_them_back() {
    let s = server(|c| c.webhooks.retry_schedule = vec!["400ms".into(); 7]).await;
    let (r, url) = Receiver::start().await;
    *r.always.lock().expect("lock") = Some(500);
    let id = watch_tiny(&s, &url).await;
    put_item(&s, "aaaa").await;
    let _ = r.wait_for(1).await;
    let _: Value = s
        .admin
        .set_webhook_enabled(&id, false)
        .await
        .expect("disable");
    let seen = r.got().len();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(
        r.got().len(),
        seen,
        "no attempt after the webhook was disabled"
    );
    let a = attempts(&s.admin, &id).await;
    assert!(a.iter().all(|x| x["state"] == "cancelled"), "{a:?}");
    // No attempt is said to come next once the delivery was cancelled.
    assert!(a.iter().all(|x| x["nextAttemptAt"].is_null()), "{a:?}");
    *r.always.lock().expect("lock") = None;
    let _: Value = s
        .admin
        .set_webhook_enabled(&id, true)
        .await
        .expect("enable");
    let since = (chrono::Utc::now() - chrono::Duration::minutes(5)).to_rfc3339();
    let replayed: Value = s.admin.replay_failed(&id, &since).await.expect("replay");
    assert_eq!(replayed["replayed"], 1);
    let a = activity_until(&s.admin, &id, |a| {
        a.iter().any(|x| x["state"] == "succeeded")
    })
    .await;
    assert!(a
        .iter()
        .any(|x| x["state"] == "succeeded" && x["manual"] == true));
}

#[tokio::test]
async fn a_huge_answer_is_cut_to_its_first_kib() {
    let s = server(|_| {}).await;
    let app = Router::new().route("/hook", post(|| async { "y".repeat(10 * 1024 * 1024) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let id = watch_tiny(&s, &url).await;
    put_item(&s, "aaaa").await;
    let a = activity_until(&s.admin, &id, |a| !a.is_empty()).await;
    assert_eq!(a[0]["statusCode"], 200);
    assert_eq!(a[0]["state"], "succeeded");
    assert_eq!(a[0]["response"].as_str().map(str::len), Some(1024));
}

#[tokio::test]
async fn a_webhook_failing_for_too_long_is_disabled_and_its_owner_told() {
    let s = server(|c| {
        c.webhooks.retry_schedule = vec!["50ms".into()];
        c.webhooks.disable_after = "100ms".into();
    })
    .await;
    let (r, url) = Receiver::start().await;
    *r.always.lock().expect("lock") = Some(503);
    let id = watch_tiny(&s, &url).await;
    put_item(&s, "aaaa").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    put_item(&s, "bbbb").await;
    let w = disabled_soon(&s.admin, &id).await;
    assert_eq!(w["webhook"]["disabled"], true);
    let reason = w["webhook"]["disabledReason"].as_str().unwrap_or_default();
    assert!(reason.contains("no delivery succeeded since"), "{reason}");
    let told: Vec<Value> = s
        .admin
        .notifications(None, None, None)
        .await
        .expect("notices");
    assert!(told.iter().any(|n| n["kind"] == "webhook.disabled"));
}

#[tokio::test]
async fn the_rate_limit_spaces_attempts_and_old_activity_is_pruned() {
    let s = server(|c| {
        c.webhooks.rate_limit = 10;
        // Long enough that the first attempts are still on record when the tenth ends.
        c.webhooks.retention = "3s".into();
    })
    .await;
    let (r, url) = Receiver::start().await;
    let id = watch_tiny(&s, &url).await;
    for n in 0..10 {
        put_item(&s, &format!("rev{n}")).await;
    }
    let got = r.wait_for(10).await;
    assert_eq!(got.len(), 10);
    let a = activity_until(&s.admin, &id, |a| a.len() >= 10).await;
    let mut starts: Vec<_> = a.iter().map(|x| time(&x["at"])).collect();
    starts.sort();
    // By the server's own record: each start after the first booked a tenth of a second after the one before,
    // so the ten span at least 900 ms, less how late the first went after its booking (a busy machine's pause).
    let spread = starts[starts.len() - 1] - starts[0];
    assert!(
        a.len() == 10 && spread >= ms(800),
        "10 per second: {} attempts over {spread:?}",
        a.len()
    );
    // Finished deliveries older than the retention go, their attempts with them.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let a = attempts(&s.admin, &id).await;
        if a.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "activity kept past its retention: {} attempts",
            a.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The endpoints (namespace/name) whose events the server queued for the webhook, as its store has them.
async fn queued_for(s: &TestServer, id: &str) -> std::collections::BTreeSet<String> {
    let db = s.db().await;
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT e.namespace, e.subject FROM deliveries d JOIN events e ON e.seq = d.event_seq \
         WHERE d.webhook_id = $1",
    )
    .bind(id)
    .fetch_all(&db)
    .await
    .expect("deliveries");
    db.close().await;
    rows.into_iter()
        .map(|(ns, name)| format!("{ns}/{name}"))
        .collect()
}

#[tokio::test]
async fn a_credential_watches_only_endpoints_it_may_read_and_sees_only_its_notices() {
    let s = server(|_| {}).await;
    let _alice = s.user("alice", None).await;
    for org in ["acme", "other"] {
        let _: Value = s.admin.admin_create_org(org).await.expect("org");
    }
    let _: Value = s
        .admin
        .admin_set_member("acme", "alice", "write")
        .await
        .expect("member");
    let (r, url) = Receiver::start().await;
    let watch = |org: &str| {
        json!({"watched": [{"type": "org", "name": org}], "domains": ["endpoint"],
            "url": format!("{url}/hook")})
    };
    let webhooks_only = s.token_for("alice", Some(&["webhooks"])).await;
    let err = webhooks_only
        .create_webhook::<Value>(&watch("acme"))
        .await
        .expect_err("no read-endpoints scope");
    assert_eq!(err.status(), Some(StatusCode::BAD_REQUEST));
    let reader = s
        .token_for("alice", Some(&["webhooks", "read-endpoints"]))
        .await;
    // An organization alice is not in: its endpoints are not hers to read, nor to watch.
    let err = reader
        .create_webhook::<Value>(&watch("other"))
        .await
        .expect_err("not a member of other");
    assert_eq!(err.status(), Some(StatusCode::BAD_REQUEST));
    let (id, _) = create(&reader, watch("acme")).await;
    let err = reader
        .rotate_webhook_secret::<Value>(&id, Some(i64::MAX))
        .await
        .expect_err("grace out of range");
    assert_eq!(err.status(), Some(StatusCode::BAD_REQUEST));

    // Events alice may read (acme's) are queued and arrive; others' (other's, and acme's once she has left
    // it) are not. Events are fanned out as their change commits, so the store's queue is complete by now.
    let make = |ns: &'static str, name: &'static str| {
        let admin = s.admin.clone();
        async move {
            let _: Value = admin
                .create_endpoint(ns, &endpoint_body(name))
                .await
                .expect("create");
        }
    };
    make("acme", "a1").await;
    make("other", "o1").await;
    let path = "/api/v1/admin/orgs/acme/members/alice";
    let _: Value = s
        .admin
        .request(reqwest::Method::DELETE, path, None)
        .await
        .expect("alice leaves acme");
    make("acme", "a2").await;
    let queued = queued_for(&s, &id).await;
    assert_eq!(
        queued,
        ["acme/a1".to_string()].into(),
        "what the webhook was sent"
    );
    let names = |got: &[Got]| {
        got.iter()
            .map(|g| {
                g.body["endpoint"]["name"]
                    .as_str()
                    .unwrap_or("?")
                    .to_string()
            })
            .collect::<std::collections::BTreeSet<_>>()
    };
    let sent = ["a1".to_string()].into();
    let got = r.wait_all(|got| names(got) == sent).await;
    assert_eq!(names(&got), sent, "what arrived");

    // alice's notices: an endpoint's (seen with read-endpoints) and a webhook's (seen with `webhooks`).
    let mut ep = endpoint_body("e1");
    ep["notifications"] = json!({"email": false, "push": true});
    let full = s.token_for("alice", None).await;
    let _: Value = full.create_endpoint("alice", &ep).await.expect("create");
    full.delete_endpoint("alice", "e1").await.expect("delete");
    let _: Value = s
        .admin
        .admin_set_member("acme", "alice", "write")
        .await
        .expect("member again");
    *r.always.lock().expect("lock") = Some(410);
    make("acme", "a3").await;
    let w = disabled_soon(&full, &id).await;
    assert_eq!(w["webhook"]["disabled"], true, "410 Gone disables it");
    let kinds = |notices: Vec<Value>| {
        let mut k: Vec<String> = notices
            .iter()
            .filter_map(|n| n["kind"].as_str().map(String::from))
            .collect();
        k.sort();
        k
    };
    // The notices are written as their changes commit, the webhook's just after it is disabled: asked
    // until the credential's list is what it should be (bounded), then that list is the assertion.
    let seen = |c: &Client, expected: &'static [&'static str]| {
        let c = c.clone();
        async move {
            let mut got = Vec::new();
            for _ in 0..250 {
                got = kinds(c.notifications(None, None, None).await.expect("notices"));
                if got == expected {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            got
        }
    };
    let both: &[&str] = &["endpoint.deleted", "webhook.disabled"];
    assert_eq!(seen(&full, both).await, both);
    assert_eq!(
        seen(&webhooks_only, &["webhook.disabled"]).await,
        ["webhook.disabled"]
    );
    let endpoints_only = s.token_for("alice", Some(&["read-endpoints"])).await;
    assert_eq!(
        seen(&endpoints_only, &["endpoint.deleted"]).await,
        ["endpoint.deleted"]
    );
}

/// The answer of a refused request and the paths of its issues.
fn issue_paths(err: ClientError) -> (Value, Vec<String>) {
    let ClientError::Api { body: answer, .. } = err else {
        panic!("api error")
    };
    let paths = answer["issues"]
        .as_array()
        .expect("issues")
        .iter()
        .filter_map(|i| i["path"].as_str().map(str::to_owned))
        .collect();
    (answer, paths)
}
