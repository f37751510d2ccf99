//! The extProc custom router: a real gRPC external processor (the test engine's `--ext-proc`, written
//! against Envoy's protos) run as the endpoint's router sidecar, on both proxy paths.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::engine_bin;
use crate::runtime::{engine_endpoint, spawn, Rt, NS};

const TAG: &str = "test-ext-proc";

async fn spawn_with_processor(own_path: bool) -> Rt {
    spawn(|c| {
        c.proxy.own_path = own_path;
        c.proxy.access_log = true;
        // Bodies past this are not held whole: the processor sees their head alone.
        c.server.body_limit = 64 * 1024;
        c.runtime.routers.insert(
            TAG.into(),
            switchyard_server::config::Launcher {
                command: vec![
                    engine_bin(),
                    "--port".into(),
                    "{port}".into(),
                    "--ext-proc".into(),
                    "--grpc-port".into(),
                    "{grpc_port}".into(),
                ],
                ..Default::default()
            },
        );
    })
    .await
}

/// An endpoint of two test-engine replicas routed by the processor, with `env` for the router.
fn routed(name: &str, env: Value) -> Value {
    let mut body = engine_endpoint(
        name,
        "public",
        &[],
        json!({"minReplica": 2, "maxReplica": 2}),
    );
    body["customRouter"] = json!({"tag": TAG, "protocol": "extProc", "env": env});
    body
}

/// One call through the proxy: the status, the answer's fields, and its body.
async fn call(
    rt: &Rt,
    name: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (u16, reqwest::header::HeaderMap, String) {
    let url = format!("{}{path}", rt.endpoint_url(name));
    let mut req = match &body {
        Some(b) => rt.http.post(url).json(b),
        None => rt.http.get(url),
    };
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let fields = resp.headers().clone();
    (status, fields, resp.text().await.expect("body"))
}

fn field<'h>(h: &'h reqwest::header::HeaderMap, name: &str) -> &'h str {
    h.get(name).map_or("", |v| v.to_str().unwrap_or(""))
}

/// The replica `x-pick: n` sends to, once the processor knows the replicas (the runtime tells it, and the
/// test engine's answer carries its address).
async fn replica_picked(rt: &Rt, name: &str, n: &str) -> String {
    for _ in 0..400 {
        let (status, h, _) = call(rt, name, "/seen/x", &[("x-pick", n)], None).await;
        if status == 200 && !field(&h, "x-replica-address").is_empty() {
            let seen = rt
                .http
                .get(format!("{}/seen/x", rt.endpoint_url(name)))
                .header("x-pick", n)
                .send()
                .await
                .expect("request");
            let body: Value = seen.json().await.expect("json");
            // Named by the processor: the replica saw the destination it was named by.
            if let Some(d) = body["headers"]["x-gateway-destination-endpoint"].as_str() {
                if !d.is_empty() {
                    return d.to_string();
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!(
        "the processor never named replica {n}: {}",
        rt.get(name).await["status"]
    );
}

async fn metrics(rt: &Rt) -> String {
    let resp = rt
        .http
        .get(format!("{}/metrics", rt.url))
        .bearer_auth(&rt.token)
        .send()
        .await
        .expect("metrics");
    resp.text().await.expect("text")
}

/// The value of the metric line `name{namespace,endpoint,<extra>}`.
fn counter(text: &str, name: &str, endpoint: &str, extra: &str) -> u64 {
    let line = format!("{name}{{namespace=\"{NS}\",endpoint=\"{endpoint}\",{extra}}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&line))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_processor_decides_each_request_on_both_proxy_paths() {
    for own_path in [true, false] {
        let rt = spawn_with_processor(own_path).await;
        rt.create(routed("picked", json!({}))).await;
        rt.wait_for("picked", "2 ready", |e| e["status"]["readyReplica"] == 2)
            .await;
        let first = replica_picked(&rt, "picked", "0").await;
        let second = replica_picked(&rt, "picked", "1").await;
        assert_ne!(first, second, "the two replicas have two addresses");

        // Each request goes where the processor says, and the replica sees the request as it changed it.
        for (pick, replica) in [("0", &first), ("1", &second), ("1", &second), ("0", &first)] {
            let (status, h, body) = call(
                &rt,
                "picked",
                "/seen/chat?q=1",
                &[
                    ("x-pick", pick),
                    ("x-rewrite-me", "original"),
                    ("x-remove-me", "1"),
                ],
                Some(json!({"model": "m1", "prompt": "hi"})),
            )
            .await;
            assert_eq!(status, 200, "{body}");
            assert_eq!(field(&h, "x-replica-address"), replica.as_str());
            // The response's head went to the processor too, which marked it.
            assert_eq!(field(&h, "x-response-seen"), "test-ext-proc");
            let seen: Value = serde_json::from_str(&body).expect("json");
            let headers = &seen["headers"];
            assert_eq!(seen["path"], "/seen/chat?q=1");
            assert_eq!(headers["x-processed"], "test-ext-proc");
            assert_eq!(headers["x-rewrite-me"], "rewritten");
            assert!(headers.get("x-remove-me").is_none(), "{headers}");
            // Read from the JSON body.
            assert_eq!(headers["x-model"], "m1");
            assert_eq!(headers["x-gateway-destination-endpoint"], replica.as_str());
            assert_eq!(
                seen["body"],
                json!({"model": "m1", "prompt": "hi"}).to_string()
            );
        }

        // A body larger than the proxy holds whole: the processor decides on the head alone, and the body
        // goes on as it came.
        let prompt = "x".repeat(100 * 1024);
        let (status, h, body) = call(
            &rt,
            "picked",
            "/seen/large",
            &[("x-pick", "1")],
            Some(json!({"model": "m3", "prompt": prompt})),
        )
        .await;
        assert_eq!(
            (status, field(&h, "x-replica-address")),
            (200, second.as_str())
        );
        let seen: Value = serde_json::from_str(&body).expect("json");
        assert_eq!(seen["headers"]["x-processed"], "test-ext-proc");
        assert!(
            seen["headers"].get("x-model").is_none(),
            "the body was not shown"
        );
        assert_eq!(
            seen["body"],
            json!({"model": "m3", "prompt": prompt}).to_string()
        );

        // A processor that asks for no response head (`mode_override`) is not sent one.
        let (status, h, body) =
            call(&rt, "picked", "/seen/x", &[("x-skip-response", "1")], None).await;
        assert_eq!(status, 200);
        let seen: Value = serde_json::from_str(&body).expect("json");
        assert_eq!(seen["headers"]["x-processed"], "test-ext-proc");
        assert!(h.get("x-response-seen").is_none(), "{h:?}");

        // A stream passes as it comes: its first event arrives alone, after the processor saw its head.
        let url = format!("{}/stream?n=2&interval_ms=300", rt.endpoint_url("picked"));
        let mut sse = rt.http.get(url).header("x-pick", "0").send().await.unwrap();
        assert_eq!(sse.headers()["content-type"], "text/event-stream");
        assert_eq!(sse.headers()["x-response-seen"], "test-ext-proc");
        let first = sse.chunk().await.unwrap().unwrap();
        let first = String::from_utf8_lossy(&first);
        assert!(
            first.contains("data: 0") && !first.contains("data: 1"),
            "{first:?}"
        );
        drop(sse);

        // Named in the `envoy.lb` metadata instead of a header.
        let (status, h, _) = call(
            &rt,
            "picked",
            "/seen/x",
            &[("x-pick", "1"), ("x-pick-via", "metadata")],
            None,
        )
        .await;
        assert_eq!(
            (status, field(&h, "x-replica-address")),
            (200, second.as_str())
        );

        // A body the processor replaces: the replica gets the new one, with its length.
        let (status, _, body) = call(
            &rt,
            "picked",
            "/seen/x",
            &[("x-pick", "0")],
            Some(json!({"model": "m2", "rewrite_body": true})),
        )
        .await;
        assert_eq!(status, 200);
        let seen: Value = serde_json::from_str(&body).expect("json");
        let replaced = seen["body"].as_str().unwrap_or_default();
        let replaced: Value = serde_json::from_str(replaced).expect("a JSON body");
        assert_eq!(replaced, json!({"rewritten": true, "model": "m2"}));
        let length = seen["body"].as_str().map(str::len).unwrap_or_default();
        assert_eq!(seen["headers"]["content-length"], length.to_string());

        // An immediate answer: the caller gets the processor's 403, and no replica is asked.
        let before = counter(
            &metrics(&rt).await,
            "switchyard_proxy_picks_total",
            "picked",
            "by=\"router\"",
        );
        let (status, h, body) = call(&rt, "picked", "/forbidden/x", &[("x-pick", "0")], None).await;
        assert_eq!(status, 403, "{body}");
        assert_eq!(field(&h, "x-denied-by"), "test-ext-proc");
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap()["error"],
            "denied by the processor"
        );

        // An address that is no ready replica is refused.
        let (status, _, body) =
            call(&rt, "picked", "/seen/x", &[("x-pick", "elsewhere")], None).await;
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("not a ready replica"), "{body}");

        // A list: the first named that is a ready replica.
        let (status, h, _) = call(&rt, "picked", "/seen/x", &[("x-pick", "1,0")], None).await;
        assert_eq!(
            (status, field(&h, "x-replica-address")),
            (200, second.as_str())
        );

        // Each request's replica and why, in that replica's logs.
        let mut logs = String::new();
        for _ in 0..100 {
            logs = rt.admin.endpoint_logs(NS, "picked", 1000).await.unwrap();
            let routed = logs
                .lines()
                .filter(|l| l.contains(" access: POST /endpoints/admin/picked/seen/chat?q=1 200 "))
                .filter(|l| l.ends_with(" by=router"))
                .count();
            if routed == 4 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let routed = logs
            .lines()
            .filter(|l| l.contains("/seen/chat?q=1 200 ") && l.ends_with(" by=router"));
        assert_eq!(routed.count(), 4, "{logs}");

        let text = metrics(&rt).await;
        let router = counter(
            &text,
            "switchyard_proxy_picks_total",
            "picked",
            "by=\"router\"",
        );
        assert_eq!(
            router,
            before + 1,
            "one routed request since the 403:\n{text}"
        );
        assert_eq!(
            counter(
                &text,
                "switchyard_proxy_router_failures_total",
                "picked",
                "why=\"refused\""
            ),
            1
        );
        rt.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_processor_that_hangs_or_dies_fails_open_within_its_timeout() {
    for own_path in [true, false] {
        let rt = spawn_with_processor(own_path).await;
        let quick = json!({"SWITCHYARD_EXT_PROC_TIMEOUT_MS": "300"});
        rt.create(routed("open", quick.clone())).await;
        let mut closed = quick.clone();
        closed["SWITCHYARD_EXT_PROC_FAIL_OPEN"] = json!("false");
        rt.create(routed("closed", closed)).await;
        for name in ["open", "closed"] {
            rt.wait_for(name, "2 ready", |e| e["status"]["readyReplica"] == 2)
                .await;
            replica_picked(&rt, name, "0").await;
        }

        // Requests before the router ran were failed by it (there was none yet): counted from here.
        let base = metrics(&rt).await;
        let since = |text: &str, endpoint: &str, name: &str, extra: &str| {
            counter(text, name, endpoint, extra) - counter(&base, name, endpoint, extra)
        };
        // A processor that never answers: the request goes to the balancer once its time is up…
        let (status, h, body) = call(&rt, "open", "/seen/x", &[("x-hang", "1")], None).await;
        assert_eq!(status, 200, "{body}");
        assert!(!field(&h, "x-replica-address").is_empty());
        let seen: Value = serde_json::from_str(&body).expect("json");
        let replica = field(&h, "x-replica-id").to_string();
        let mut logged = false;
        for _ in 0..100 {
            let logs = rt.admin.endpoint_logs(NS, "open", 1000).await.unwrap();
            let line = format!(" {replica} access: GET /endpoints/admin/open/seen/x 200 ");
            logged = logs
                .lines()
                .any(|l| l.contains(&line) && l.ends_with(" by=fallback"));
            if logged {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(logged, "the fallback's access line");
        assert!(
            seen["headers"].get("x-processed").is_none(),
            "the processor changed nothing"
        );
        // …or, fail-open off, is refused.
        let (status, _, body) = call(&rt, "closed", "/seen/x", &[("x-hang", "1")], None).await;
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("custom router failed"), "{body}");
        // A body too large to show it is no way around a router that fails closed.
        let large = json!({"prompt": "x".repeat(100 * 1024)});
        let (status, _, body) =
            call(&rt, "closed", "/seen/x", &[("x-hang", "1")], Some(large)).await;
        assert_eq!(status, 503, "{body}");

        let text = metrics(&rt).await;
        let failures = "switchyard_proxy_router_failures_total";
        let picks = "switchyard_proxy_picks_total";
        assert_eq!(
            since(&text, "open", failures, "why=\"timeout\""),
            1,
            "{text}"
        );
        assert_eq!(since(&text, "open", picks, "by=\"fallback\""), 1, "{text}");
        assert_eq!(
            since(&text, "closed", failures, "why=\"timeout\""),
            2,
            "{text}"
        );
        assert_eq!(
            since(&text, "closed", picks, "by=\"fallback\""),
            0,
            "{text}"
        );

        // A processor that dies under a request: it goes to the balancer too, and the runtime starts the
        // router again, which then decides again.
        let (status, _, body) = call(&rt, "open", "/seen/x", &[("x-die", "1")], None).await;
        assert_eq!(status, 200, "{body}");
        let text = metrics(&rt).await;
        let failed = ["timeout", "error"]
            .map(|why| since(&text, "open", failures, &format!("why=\"{why}\"")));
        assert_eq!(failed.iter().sum::<u64>(), 2, "{text}");
        replica_picked(&rt, "open", "1").await;
        rt.shutdown().await;
    }
}
