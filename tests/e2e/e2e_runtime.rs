//! The real `switchyard` binary running real replicas (the workspace's test engine): a clean stop leaves no
//! replica behind, a kill -9 of the server takes its replicas with it, and a restart brings the endpoint back.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common;
use common::{engine_bin, serve_with};

fn pids(data_dir: &Path) -> Vec<String> {
    std::fs::read_dir(data_dir.join("replicas").join("pids"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                .map(|p| p.trim().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit(')').next().unwrap_or("").split_whitespace().next() != Some("Z"))
        .unwrap_or(false)
}

async fn wait_serving(http: &reqwest::Client, url: &str, token: &str) -> Value {
    for _ in 0..300 {
        let ep: Value = http
            .get(format!("{url}/v2/endpoint/admin/svc"))
            .bearer_auth(token)
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("json");
        if ep["status"]["state"] == "running" && ep["status"]["readyReplica"] == 1 {
            let r = http
                .post(format!("{url}/endpoints/admin/svc/embed"))
                .json(&json!({"inputs": "x"}))
                .send()
                .await
                .expect("embed");
            if r.status() == 200 {
                return ep;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the endpoint never served");
}

async fn wait_dead(pids: &[String]) {
    for _ in 0..100 {
        if pids.iter().all(|p| !alive(p)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("replicas {pids:?} outlived their server");
}

#[tokio::test]
async fn replicas_live_and_die_with_the_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data_dir = dir.path().join("data");
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[runtime]\ntick_ms = 100\nstop_grace_ms = 2000\n").expect("config");
    let http = reqwest::Client::new();

    let mut server = serve_with(&data_dir, &["--config".as_ref(), config.as_os_str()]);
    let token = std::fs::read_to_string(data_dir.join("admin-token"))
        .expect("token")
        .trim()
        .to_string();
    let body = json!({
        "name": "svc", "type": "public",
        "provider": {"vendor": "aws", "region": "us-east-1"},
        "compute": {"accelerator": "cpu", "instanceType": "intel-icl", "instanceSize": "x2",
                    "scaling": {"minReplica": 1, "maxReplica": 1}},
        "model": {"repository": "test/engine", "framework": "custom",
                  "image": {"custom": {"url": "local/test-engine"}},
                  "command": [engine_bin().display().to_string(), "--port", "{port}"]},
    });
    let created = http
        .post(format!("{}/v2/endpoint/admin", server.url))
        .bearer_auth(&token)
        .json(&body)
        .send()
        .await
        .expect("create");
    assert_eq!(created.status(), 200);
    wait_serving(&http, &server.url, &token).await;
    let first = pids(&data_dir);
    assert_eq!(first.len(), 1);
    assert!(alive(&first[0]));

    // A clean stop (SIGTERM) stops the replicas and exits 0.
    let status = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let exit = server.child.wait().expect("wait");
    assert!(exit.success(), "{exit:?}");
    wait_dead(&first).await;
    assert!(pids(&data_dir).is_empty());

    // Restart: the stored endpoint runs again.
    let mut server = serve_with(&data_dir, &["--config".as_ref(), config.as_os_str()]);
    wait_serving(&http, &server.url, &token).await;
    let second = pids(&data_dir);
    assert_eq!(second.len(), 1);
    assert_ne!(second, first);

    // kill -9 of the server: its replicas die with it, and the next start serves again.
    server.child.kill().expect("kill -9");
    server.child.wait().expect("wait");
    wait_dead(&second).await;
    let server = serve_with(&data_dir, &["--config".as_ref(), config.as_os_str()]);
    let ep = wait_serving(&http, &server.url, &token).await;
    assert_eq!(ep["status"]["readyReplica"], 1);
    let third = pids(&data_dir);
    assert_eq!(third.len(), 1, "{third:?}");
    assert!(!third.contains(&second[0]));
}
