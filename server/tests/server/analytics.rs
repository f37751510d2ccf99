//! Endpoint analytics end to end: a known load replayed through the proxy (fixed statuses and delays), and
//! scaling forced on the manual clock, give the expected buckets and decisions through the API, on the
//! store under test (SQLite, or PostgreSQL in the suite's second pass), and summed across two servers on
//! one PostgreSQL.

use std::time::Duration;

use chrono::{DateTime, Utc};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use prost::Message;
use serde_json::{json, Value};

use crate::common;
use crate::runtime::{engine_endpoint, spawn, spawn_beside, Rt, NS};
use switchyard_server::clock::Clock;

/// The next 10-second bucket's start, plus a second: requests sent now fall in it.
fn into_next_bucket(now: DateTime<Utc>) -> DateTime<Utc> {
    let s = now.timestamp();
    let start = (s.div_euclid(10) + 1) * 10;
    DateTime::from_timestamp(start + 1, 0).expect("time")
}

/// Sends `n` GETs to the endpoint's `/status/{code}?ms={ms}`, one after another, each answered `code`.
async fn replay(rt: &Rt, name: &str, n: usize, code: u16, ms: u64) {
    for _ in 0..n {
        let url = format!("{}/status/{code}?ms={ms}", rt.endpoint_url(name));
        let resp = rt.http.get(url).send().await.expect("request");
        assert_eq!(resp.status().as_u16(), code);
    }
}

async fn analytics(rt: &Rt, name: &str, query: &str) -> Value {
    rt.admin
        .endpoint_analytics(NS, name, query)
        .await
        .expect("analytics")
}

/// Polls the series over one bucket (`[from, from + step)`) until it counts `requests`, and returns its point.
async fn point_with(rt: &Rt, name: &str, from: i64, step: i64, requests: u64) -> Value {
    let query = format!("from={from}&to={}&step={step}", from + step);
    let mut last = Value::Null;
    for _ in 0..400 {
        last = analytics(rt, name, &query).await;
        if last["points"][0]["requests"] == requests {
            return last["points"][0].clone();
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("never {requests} requests in {query}: {last}");
}

async fn decisions(rt: &Rt, name: &str) -> Vec<Value> {
    let list: Value = rt
        .admin
        .endpoint_decisions(NS, name, "")
        .await
        .expect("decisions");
    list["items"].as_array().cloned().unwrap_or_default()
}

/// The scaling decisions (the spec updates that forced them left out), newest first.
async fn scaling_decisions(rt: &Rt, name: &str) -> Vec<Value> {
    let list = decisions(rt, name).await;
    list.into_iter()
        .filter(|d| d["kind"] != "updated")
        .collect()
}

/// Polls the decisions until one of `kind` is the newest scaling decision, and returns those.
async fn newest_is(rt: &Rt, name: &str, kind: &str) -> Vec<Value> {
    for _ in 0..400 {
        let list = scaling_decisions(rt, name).await;
        if list.first().is_some_and(|d| d["kind"] == kind) {
            return list;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no {kind} decision: {:?}", decisions(rt, name).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_load_and_forced_scaling_give_their_buckets_and_decisions() {
    let rt = spawn(|c| {
        c.analytics.keep_10s_s = 30;
        c.runtime.scaling.scale_down_stabilization_s = 0;
        c.runtime.scaling.scale_up_stabilization_s = 0;
        c.runtime.scaling.evaluation_window_s = 2;
    })
    .await;
    let scaling = json!({"minReplica": 0, "maxReplica": 2, "scaleToZeroTimeout": 15});
    rt.create(engine_endpoint("traffic", "public", &[], scaling))
        .await;
    rt.wait_state("traffic", "running").await;

    // The load, in one bucket: 6 answered 200 after 30 ms, 3 answered 404, 2 answered 503 after 300 ms.
    let start = into_next_bucket(rt.clock.now());
    rt.clock.set(start);
    tokio::time::sleep(Duration::from_millis(200)).await;
    replay(&rt, "traffic", 6, 200, 30).await;
    replay(&rt, "traffic", 3, 404, 0).await;
    replay(&rt, "traffic", 2, 503, 300).await;
    let bucket = start.timestamp() - 1;
    rt.clock.set(start + chrono::Duration::seconds(10));
    let p = point_with(&rt, "traffic", bucket, 10, 11).await;
    assert_eq!(
        p["status"],
        json!({"1xx": 0, "2xx": 6, "3xx": 0, "4xx": 3, "5xx": 2})
    );
    assert_eq!(p["errors"], 2);
    assert_eq!(p["requestsPerSecond"], 1.1);
    // The 6th fastest took at least 30 ms, the slowest at least 300 ms.
    let (p50, p99) = (
        p["latencyMs"]["p50"].as_f64().expect("p50"),
        p["latencyMs"]["p99"].as_f64().expect("p99"),
    );
    assert!(p50 >= 25.0 && p99 >= 250.0 && p50 < p99, "{p}");
    assert_eq!(p["readyReplicas"], 1.0, "{p}");
    assert_eq!(p["cacheHitRatio"], 0.0);
    // `/metrics` shows the same gauges: held for a cold start, and the fleet the leader sees.
    let metrics = rt
        .http
        .get(format!("{}/metrics", rt.url))
        .bearer_auth(&rt.token)
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let labels = format!("{{namespace=\"{NS}\",endpoint=\"traffic\"}}");
    for line in [
        format!("switchyard_endpoint_waiting_requests{labels} 0"),
        format!("switchyard_endpoint_target_replicas{labels} 1"),
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in {metrics}");
    }
    // The bucket before holds none of it.
    let before = analytics(
        &rt,
        "traffic",
        &format!("from={}&to={bucket}&step=10", bucket - 10),
    )
    .await;
    assert_eq!(before["points"][0]["requests"], 0, "{before}");

    // Past the 10-second samples' time (30 s here), the same requests come from the minute's sample.
    rt.clock.set(start + chrono::Duration::seconds(70));
    let minute = bucket.div_euclid(60) * 60;
    let m = point_with(&rt, "traffic", minute, 60, 11).await;
    let whole = analytics(&rt, "traffic", &format!("from={minute}&to={}", minute + 60)).await;
    assert_eq!(whole["resolution"], 60, "{whole}");
    assert_eq!(m["status"]["2xx"], 6);
    let bad = rt
        .http
        .get(format!(
            "{}/api/v1/endpoints/{NS}/traffic/analytics?step=7",
            rt.url
        ))
        .bearer_auth(&rt.token)
        .send()
        .await
        .expect("request");
    assert_eq!(bad.status(), 400);
    let body: Value = bad.json().await.expect("json");
    assert!(
        body["error"]
            .as_str()
            .expect("error")
            .contains("step must be a multiple of"),
        "{body}"
    );

    // A forced scale-up (the minimum raised), and down again.
    let up = json!({"compute": {"scaling": {"minReplica": 2}}});
    rt.admin
        .update_endpoint::<Value>(NS, "traffic", &up)
        .await
        .expect("update");
    let list = newest_is(&rt, "traffic", "scaledUp").await;
    assert_eq!(list[0]["from"], 1);
    assert_eq!(list[0]["to"], 2);
    assert_eq!(list[0]["reason"], "the minimum in force is 2");
    let down = json!({"compute": {"scaling": {"minReplica": 0}}});
    rt.admin
        .update_endpoint::<Value>(NS, "traffic", &down)
        .await
        .expect("update");
    // Down once the replicas' CPU is sampled (idle, under the threshold) over the evaluation window.
    for _ in 0..400 {
        if scaling_decisions(&rt, "traffic")
            .await
            .first()
            .is_some_and(|d| d["kind"] == "scaledDown")
        {
            break;
        }
        rt.clock.advance(chrono::Duration::milliseconds(500));
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let list = newest_is(&rt, "traffic", "scaledDown").await;
    assert_eq!(
        (list[0]["from"].clone(), list[0]["to"].clone()),
        (json!(2), json!(1))
    );

    // Idle past the timeout: scaled to zero, saying for how long; a request wakes it, saying which.
    rt.clock.advance(chrono::Duration::minutes(16));
    rt.wait_state("traffic", "scaledToZero").await;
    let list = newest_is(&rt, "traffic", "scaledToZero").await;
    let reason = list[0]["reason"].as_str().expect("reason");
    assert!(
        reason.starts_with("no request for 1") && reason.ends_with(" min (the timeout is 15 min)"),
        "{reason}"
    );
    let cold = rt
        .http
        .get(format!("{}/status/200", rt.endpoint_url("traffic")))
        .send()
        .await
        .expect("request");
    assert_eq!(cold.status(), 503);
    rt.wait_state("traffic", "running").await;
    let list = newest_is(&rt, "traffic", "woken").await;
    let reason = list[0]["reason"].as_str().expect("reason");
    assert!(reason.starts_with("woken by a request: GET /"), "{reason}");
    assert!(reason.ends_with("/status/200"), "{reason}");
    let kinds: Vec<&str> = list.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        ["woken", "scaledToZero", "scaledDown", "scaledUp"],
        "newest first"
    );
    let all = decisions(&rt, "traffic").await;
    let at = |d: &Value| d["at"].as_str().unwrap_or_default().to_string();
    assert!(all.windows(2).all(|w| at(&w[0]) >= at(&w[1])), "{all:?}");
    // Each spec update rolled out.
    assert!(all.iter().any(|d| d["kind"] == "updated"), "{all:?}");

    // Another namespace's user may not read it.
    let stranger = reqwest::Client::new();
    let denied = stranger
        .get(format!(
            "{}/api/v1/endpoints/{NS}/traffic/decisions",
            rt.url
        ))
        .send()
        .await
        .expect("request");
    assert_eq!(denied.status(), 401);
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_postgres_add_up() {
    let Some(admin) = common::postgres_admin_url() else {
        eprintln!("skipped: two servers need SWITCHYARD_TEST_POSTGRES");
        return;
    };
    let url = common::fresh_postgres(&admin).await;
    let store = |c: &mut switchyard_server::Config| c.store.url = Some(url.clone());
    let a = spawn(store).await;
    let b = spawn_beside(&a, store).await;
    let scaling = json!({"minReplica": 1, "maxReplica": 1});
    a.create(engine_endpoint("shared", "public", &[], scaling))
        .await;
    a.wait_state("shared", "running").await;
    // Both proxies route to the replica the leader runs.
    for _ in 0..400 {
        let r = b
            .http
            .get(format!("{}/status/200", b.endpoint_url("shared")))
            .send()
            .await;
        if r.is_ok_and(|r| r.status() == 200) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // Both clocks at one instant, in a bucket of their own.
    let start = into_next_bucket(a.clock.now().max(b.clock.now()));
    a.clock.set(start);
    b.clock.set(start);
    tokio::time::sleep(Duration::from_millis(300)).await;
    replay(&a, "shared", 4, 200, 0).await;
    replay(&b, "shared", 3, 200, 0).await;
    replay(&b, "shared", 2, 500, 0).await;
    let end = start + chrono::Duration::seconds(10);
    a.clock.set(end);
    b.clock.set(end);
    let bucket = start.timestamp() - 1;
    // Either server answers the sum of both.
    let p = point_with(&b, "shared", bucket, 10, 9).await;
    assert_eq!(p["status"]["2xx"], 7);
    assert_eq!(p["status"]["5xx"], 2);
    let p = point_with(&a, "shared", bucket, 10, 9).await;
    assert_eq!(p["errors"], 2);
    b.shutdown().await;
    a.shutdown().await;
}

/// A collector on loopback: what `[telemetry] otlp_url` sends it, decoded.
async fn collector() -> (
    String,
    tokio::sync::mpsc::UnboundedReceiver<(String, ExportMetricsServiceRequest)>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let app = axum::Router::new().route(
        "/v1/metrics",
        axum::routing::post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let tx = tx.clone();
                async move {
                    let kind = headers
                        .get("content-type")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string();
                    let req = ExportMetricsServiceRequest::decode(body).expect("OTLP protobuf");
                    let _ = tx.send((kind, req));
                    axum::http::StatusCode::OK
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/v1/metrics", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, rx)
}

/// The value of the cumulative sum `name` for `endpoint` and `status` in `req`, if it holds one.
fn requests_of(req: &ExportMetricsServiceRequest, endpoint: &str, status: &str) -> Option<i64> {
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point::Value};
    let has = |kv: &[opentelemetry_proto::tonic::common::v1::KeyValue], k: &str, v: &str| {
        kv.iter().any(|a| {
            a.key == k
                && matches!(a.value.as_ref().and_then(|x| x.value.as_ref()), Some(Any::StringValue(s)) if s == v)
        })
    };
    let metrics = req
        .resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics);
    for m in metrics.filter(|m| m.name == "switchyard_proxy_requests") {
        let Some(Data::Sum(sum)) = &m.data else {
            continue;
        };
        assert!(sum.is_monotonic);
        for p in &sum.data_points {
            if has(&p.attributes, "endpoint", endpoint) && has(&p.attributes, "status", status) {
                if let Some(Value::AsInt(n)) = p.value {
                    return Some(n);
                }
            }
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_figures_reach_an_opentelemetry_collector() {
    let (url, mut received) = collector().await;
    let rt = spawn(|c| {
        c.telemetry.otlp_url = Some(url);
        c.telemetry.otlp_interval_s = 1;
        // The collector is on loopback, which the outbound guard refuses unless allowed.
        c.outbound.allow = vec!["127.0.0.0/8".into()];
    })
    .await;
    let scaling = json!({"minReplica": 1, "maxReplica": 1});
    rt.create(engine_endpoint("pushed", "public", &[], scaling))
        .await;
    rt.wait_state("pushed", "running").await;
    replay(&rt, "pushed", 3, 200, 0).await;
    replay(&rt, "pushed", 1, 404, 0).await;
    let mut seen = (None, None);
    while seen != (Some(3), Some(1)) {
        let (kind, req) = tokio::time::timeout(Duration::from_secs(30), received.recv())
            .await
            .expect("a push within 30 s")
            .expect("the collector runs");
        assert_eq!(kind, "application/x-protobuf");
        let resource = req.resource_metrics[0].resource.as_ref().expect("resource");
        assert!(resource
            .attributes
            .iter()
            .any(|a| a.key == "service.instance.id"));
        seen = (
            requests_of(&req, "pushed", "200"),
            requests_of(&req, "pushed", "404"),
        );
    }
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_that_holds_the_scaler_is_told() {
    let rt = spawn(|_| {}).await;
    let scaling = json!({"minReplica": 2, "maxReplica": 2});
    rt.create(engine_endpoint("capped", "public", &[], scaling))
        .await;
    rt.wait_state("capped", "running").await;
    // An administrator lowers the namespace's quota under what the endpoint asks for.
    let _: Value = rt
        .admin
        .request(
            reqwest::Method::PUT,
            &format!("/api/v1/admin/quotas/{NS}"),
            Some(&json!({"replicas": 1})),
        )
        .await
        .expect("set quota");
    let list = newest_is(&rt, "capped", "heldAtQuota").await;
    assert_eq!(
        list[0]["reason"],
        "wanted 2 replicas; the namespace's replica quota leaves it 1"
    );
    assert_eq!(list[0]["to"], 1);
    // Told once while it holds, not at every pass.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = decisions(&rt, "capped").await;
    let told = held.iter().filter(|d| d["kind"] == "heldAtQuota").count();
    assert_eq!(told, 1, "{held:?}");
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_exits_is_told_with_how() {
    let rt = spawn(|_| {}).await;
    let scaling = json!({"minReplica": 1, "maxReplica": 1});
    let body = engine_endpoint("crashy", "public", &["--crash-after-ms", "300"], scaling);
    rt.create(body).await;
    let list = newest_is(&rt, "crashy", "replicaExited").await;
    let reason = list[0]["reason"].as_str().expect("reason");
    assert!(
        reason.contains("exit status: 3") || reason.contains("exit status 3"),
        "{reason}"
    );
    assert!(reason.contains("; starting another"), "{reason}");
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engines_own_load_is_kept_where_it_is_read() {
    let rt = spawn(|_| {}).await;
    let scaling = json!({"minReplica": 1, "maxReplica": 1});
    let args = ["--latency-ms", "300", "--capacity", "1"];
    let mut body = engine_endpoint("engine", "public", &args, scaling);
    // `least_load` reads the engine's figures each pass.
    body["experimentalFeatures"] = json!({"loadBalancer": "least_load"});
    rt.create(body).await;
    rt.wait_state("engine", "running").await;
    let start = into_next_bucket(rt.clock.now());
    rt.clock.set(start);
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Three at once on one slot: one runs, the others wait in the engine.
    let url = format!("{}/embed", rt.endpoint_url("engine"));
    let embed = || rt.http.post(&url).json(&json!({"inputs": "x"})).send();
    let (a, b, c) = tokio::join!(embed(), embed(), embed());
    for r in [a, b, c] {
        assert_eq!(r.expect("request").status(), 200);
    }
    rt.clock.set(start + chrono::Duration::seconds(10));
    let p = point_with(&rt, "engine", start.timestamp() - 1, 10, 3).await;
    let figure = |k: &str| p[k].as_f64().unwrap_or(0.0);
    assert!(figure("queue") > 0.0, "{p}");
    assert!(figure("kvCachePercent") > 0.0, "{p}");
    rt.shutdown().await;
}
