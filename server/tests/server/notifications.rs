//! Endpoint notifications: state changes that need a person reach the owner's stream
//! (`/api/v1/notifications`, held or streamed) and, by mail, an SMTP server this test runs on loopback.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{endpoint_body, engine_bin, spawn_with};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// A message the SMTP server took: envelope recipients and the raw message.
#[derive(Debug, Clone)]
struct Received {
    to: Vec<String>,
    data: String,
}

/// The smallest SMTP server lettre talks to: EHLO, MAIL, RCPT, DATA, QUIT; no TLS, no auth.
async fn smtp_server() -> (Arc<Mutex<Vec<Received>>>, u16) {
    let inbox = Arc::new(Mutex::new(Vec::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let kept = inbox.clone();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let inbox = kept.clone();
            tokio::spawn(async move {
                let (read, mut write) = sock.into_split();
                let mut lines = BufReader::new(read).lines();
                let _ = write.write_all(b"220 localhost ESMTP test\r\n").await;
                let mut to = Vec::new();
                while let Ok(Some(line)) = lines.next_line().await {
                    let verb = line
                        .split_whitespace()
                        .next()
                        .unwrap_or_default()
                        .to_ascii_uppercase();
                    let answer: &[u8] = match verb.as_str() {
                        "EHLO" | "HELO" => b"250-localhost\r\n250 8BITMIME\r\n",
                        "RCPT" => {
                            to.push(line[8..].trim().trim_matches(['<', '>']).to_string());
                            b"250 OK\r\n"
                        }
                        "DATA" => {
                            let _ = write.write_all(b"354 go ahead\r\n").await;
                            let mut data = String::new();
                            while let Ok(Some(l)) = lines.next_line().await {
                                if l == "." {
                                    break;
                                }
                                data.push_str(&l);
                                data.push('\n');
                            }
                            inbox.lock().expect("lock").push(Received {
                                to: std::mem::take(&mut to),
                                data,
                            });
                            b"250 queued\r\n"
                        }
                        "QUIT" => {
                            let _ = write.write_all(b"221 bye\r\n").await;
                            return;
                        }
                        _ => b"250 OK\r\n",
                    };
                    if write.write_all(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (inbox, port)
}

async fn eventually<T>(what: &str, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn state_changes_reach_the_owners_stream_and_inbox() {
    let (inbox, port) = smtp_server().await;
    let s = spawn_with(|c| {
        c.email.smtp_url = Some(format!("smtp://127.0.0.1:{port}"));
        c.runtime.tick_ms = 50;
        // A replica that becomes healthy: the endpoint runs.
        c.runtime.launchers.insert(
            "hub".into(),
            switchyard_server::config::Launcher {
                command: vec![engine_bin(), "--port".into(), "{port}".into()],
                ..Default::default()
            },
        );
    })
    .await;
    let _: Value = s
        .admin
        .admin_create_user(&json!({"name": "alice", "email": "alice@example.com"}))
        .await
        .expect("user");
    let alice = s.token_for("alice", None).await;
    let bob = s.user("bob", None).await;

    let mut body = endpoint_body("e1");
    body["notifications"] = json!({"email": true, "push": true});
    body["compute"]["scaling"]["minReplica"] = json!(1);
    let _: Value = alice.create_endpoint("alice", &body).await.expect("create");
    // Notifications off (the default); it runs too, so it has a state change that could be told.
    let mut quiet = endpoint_body("e2");
    quiet["compute"]["scaling"]["minReplica"] = json!(1);
    let _: Value = alice
        .create_endpoint("alice", &quiet)
        .await
        .expect("create");

    let running = eventually("the running notice", async || {
        let notices: Vec<Value> = alice.notifications(None, None, None).await.ok()?;
        notices
            .into_iter()
            .find(|n| n["kind"] == "endpoint.running")
    })
    .await;
    assert_eq!(running["namespace"], "alice");
    assert_eq!(running["subject"], "e1");
    assert_eq!(running["title"], "Endpoint alice/e1 is running");

    let mail = eventually("the running mail", async || {
        inbox
            .lock()
            .ok()?
            .iter()
            .find(|m| m.data.contains("is running"))
            .cloned()
    })
    .await;
    assert_eq!(mail.to, vec!["alice@example.com".to_string()]);
    assert!(
        mail.data
            .contains("Subject: [Switchyard] alice/e1 is running"),
        "{}",
        mail.data
    );
    assert!(
        mail.data
            .contains("From: Switchyard <switchyard@localhost>"),
        "{}",
        mail.data
    );

    // A follower held on `after` hears of the deletion as it commits.
    let seq = running["seq"].as_i64().expect("seq");
    let follower = {
        let alice = alice.clone();
        tokio::spawn(async move {
            alice
                .notifications::<Vec<Value>>(Some(seq), None, Some(20))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    alice.delete_endpoint("alice", "e1").await.expect("delete");
    let next = follower.await.expect("join").expect("follow");
    assert_eq!(
        next.first().map(|n| n["kind"].clone()),
        Some(json!("endpoint.deleted"))
    );

    // The streamed form gives the same notices as server-sent events.
    let token = alice_token(&s, "alice").await;
    let stream = format!("{}/api/v1/notifications/stream?after=0", s.url);
    let text = first_event(reqwest::Client::new().get(&stream).bearer_auth(&token)).await;
    assert!(
        text.contains("event: notice") && text.contains("endpoint.running"),
        "{text}"
    );
    // A client that reconnects names the last event it had, which wins over the URL's `after`.
    let again = reqwest::Client::new().get(&stream).bearer_auth(&token);
    let text = first_event(again.header("last-event-id", seq.to_string())).await;
    assert!(
        text.contains("endpoint.deleted") && !text.contains("endpoint.running"),
        "{text}"
    );
    let bad = reqwest::Client::new().get(&stream).bearer_auth(&token);
    let bad = bad.header("last-event-id", "x").send().await.expect("send");
    assert_eq!(bad.status(), reqwest::StatusCode::BAD_REQUEST);

    // Nothing for the endpoint without notifications (once it runs, as e1 did), and nothing for anyone else.
    eventually("e2 running", async || {
        let e2: Value = alice.get_endpoint("alice", "e2").await.ok()?;
        (e2["status"]["state"] == "running").then_some(())
    })
    .await;
    let all: Vec<Value> = alice
        .notifications(None, Some(100), None)
        .await
        .expect("notices");
    assert!(all.iter().all(|n| n["subject"] == "e1"), "{all:?}");
    let theirs: Vec<Value> = bob.notifications(None, None, None).await.expect("notices");
    assert_eq!(theirs, Vec::<Value>::new());
}

/// The first chunk of a notice stream (at most 10 s away), as text.
async fn first_event(request: reqwest::RequestBuilder) -> String {
    let mut resp = request.send().await.expect("stream");
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let chunk = tokio::time::timeout(Duration::from_secs(10), resp.chunk())
        .await
        .expect("an event in time")
        .expect("read")
        .expect("a chunk");
    String::from_utf8_lossy(&chunk).into_owned()
}

async fn alice_token(s: &common::TestServer, user: &str) -> String {
    s.admin
        .admin_create_token(user, &json!({}))
        .await
        .expect("token")
}

#[tokio::test]
async fn an_organizations_admins_are_told_and_bad_queries_are_refused() {
    let s = spawn_with(|_| {}).await;
    let _: Value = s.admin.admin_create_org("acme").await.expect("org");
    let carol = s.user("carol", None).await;
    let dave = s.user("dave", None).await;
    let _: Value = s
        .admin
        .admin_set_member("acme", "carol", "admin")
        .await
        .expect("member");
    let _: Value = s
        .admin
        .admin_set_member("acme", "dave", "write")
        .await
        .expect("member");
    let mut body = endpoint_body("e1");
    body["notifications"] = json!({"email": false, "push": true});
    let _: Value = carol.create_endpoint("acme", &body).await.expect("create");
    dave.delete_endpoint("acme", "e1").await.expect("delete");
    let told: Vec<Value> = carol
        .notifications(None, None, None)
        .await
        .expect("notices");
    assert_eq!(
        told.iter().map(|n| n["kind"].clone()).collect::<Vec<_>>(),
        vec![json!("endpoint.deleted")]
    );
    assert_eq!(told[0]["namespace"], "acme");
    let not_admin: Vec<Value> = dave.notifications(None, None, None).await.expect("notices");
    assert!(
        not_admin.is_empty(),
        "only the organization's admins are told"
    );
    let err = carol
        .request::<Value>(reqwest::Method::GET, "/api/v1/notifications?after=x", None)
        .await
        .expect_err("bad query");
    assert_eq!(err.status(), Some(reqwest::StatusCode::BAD_REQUEST));
}
