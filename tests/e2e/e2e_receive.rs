//! The real `switchyard receive`: a route appending to a file and a route running `cat`, behind a
//! shared secret, over real sockets.

use std::io::Read;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use crate::common;
use common::{Server, BIN};

/// Distinctive, so that finding it (or not) in a page means the page showed it (or did not).
const SECRET: &str = "receive-secret-7d1c4e9a";

/// `switchyard receive` with ARGS; its stderr kept for reading.
fn receive(args: &[&str]) -> (Server, std::process::ChildStderr) {
    let mut server = common::receive(args, Stdio::piped());
    let stderr = server.child.stderr.take().expect("stderr");
    (server, stderr)
}

async fn post(url: &str, secret: Option<&str>, body: &str) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(s) = secret {
        request = request.header("X-Webhook-Secret", s);
    }
    let response = request.send().await.expect("send");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON answer"))
}

#[tokio::test]
async fn receive_checks_the_secret_appends_and_runs() {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("hello.jsonl");
    let append = format!("hello=append:{}", file.display());
    let (server, _stderr) = receive(&[
        "--secret",
        SECRET,
        "--handler",
        &append,
        "--handler",
        "/say_hello=run:cat",
    ]);
    let hello = format!("{}/webhooks/hello", server.url);
    let say_hello = format!("{}/webhooks/say_hello", server.url);
    let payload = r#"{"event": {"action": "update"}, "repo": {"type": "model", "name": "a/b"}}"#;

    assert_eq!(
        post(&hello, None, payload).await,
        (401, json!({"error": "x-webhook-secret header not set."}))
    );
    assert_eq!(
        post(&hello, Some("wrong"), payload).await,
        (403, json!({"error": "Invalid webhook secret."}))
    );
    assert!(!file.exists(), "refused requests write nothing");

    assert_eq!(
        post(&hello, Some(SECRET), payload).await,
        (200, json!({"ok": true}))
    );
    assert_eq!(
        post(&hello, Some(SECRET), r#"{"second": true}"#).await,
        (200, json!({"ok": true}))
    );
    let text = std::fs::read_to_string(&file).expect("the file");
    assert_eq!(
        text,
        "{\"event\":{\"action\":\"update\"},\"repo\":{\"type\":\"model\",\"name\":\"a/b\"}}\n{\"second\":true}\n"
    );

    let (status, answer) = post(&say_hello, Some(SECRET), payload).await;
    assert_eq!(status, 200);
    assert_eq!(
        answer,
        serde_json::from_str::<Value>(payload).expect("json")
    );
    assert_eq!(
        post(&say_hello, None, payload).await,
        (401, json!({"error": "x-webhook-secret header not set."}))
    );

    let (status, _) = post(&format!("{}/webhooks/nope", server.url), Some(SECRET), "{}").await;
    assert_eq!(status, 404);
    let page = reqwest::get(format!("{}/", server.url))
        .await
        .expect("page")
        .text()
        .await
        .expect("html");
    assert!(page.contains("/webhooks/hello") && page.contains("/webhooks/say_hello"));
    assert!(
        !page.contains(SECRET),
        "the landing page shows the secret: {page}"
    );
}

#[test]
fn an_open_receiver_warns_and_duplicate_routes_are_refused() {
    let (server, mut stderr) = receive(&["--handler", "hello=run:cat"]);
    drop(server);
    let mut warning = String::new();
    stderr.read_to_string(&mut warning).expect("stderr");
    assert!(warning.contains("open to everyone"), "{warning}");

    let out = Command::new(BIN)
        .args(["receive", "--listen", "127.0.0.1:0"])
        .args(["--handler", "a=run:cat", "--handler", "/a=append:x.jsonl"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("two handlers for the route /webhooks/a"),
        "{stderr}"
    );
}
