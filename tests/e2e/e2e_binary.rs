//! The real `switchyard` binary: serve on a temp data dir, use it over HTTP and through `admin`,
//! kill -9 it, restart it, and find every acknowledged write intact.

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

use crate::common;
use common::{serve_with, BIN};

fn admin(data_dir: &Path, args: &[&str]) -> String {
    let out = Command::new(BIN)
        .arg("admin")
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .output()
        .expect("run switchyard admin");
    assert!(
        out.status.success(),
        "admin {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The common endpoint, with a secret to see kept across a crash.
fn endpoint(name: &str) -> Value {
    let mut body = common::endpoint(name);
    body["model"]["secrets"] = json!({"TOKEN": "kept-secret"});
    body
}

#[tokio::test]
async fn acknowledged_writes_survive_kill_9_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    // The tenant's endpoints carry a secret named TOKEN: a name this server lets tenants set.
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[runtime]\ntenant_env = [\"TOKEN\"]\n").unwrap();
    let serve = |dir: &Path| serve_with(dir, &["--config".as_ref(), config.as_os_str()]);

    let server = serve(dir.path());
    let admin_token = std::fs::read_to_string(dir.path().join("admin-token")).unwrap();
    let admin_token = admin_token.trim();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("admin-token"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    // The shell administers the same store while the server runs.
    admin(
        dir.path(),
        &["user", "create", "dana", "--email", "dana@example.com"],
    );
    let token = admin(
        dir.path(),
        &[
            "token",
            "create",
            "dana",
            "--scope",
            "write-endpoints",
            "--expires-in",
            "30d",
        ],
    );
    let token = token.trim();
    assert!(token.starts_with("sy_"));
    assert!(admin(dir.path(), &["user", "list"]).contains("dana"));

    // Writes through the API, each acknowledged with a 2xx.
    let mut names = Vec::new();
    for i in 0..20 {
        let name = format!("ep-{i}");
        let r = http
            .post(format!("{}/v2/endpoint/dana", server.url))
            .bearer_auth(token)
            .json(&endpoint(&name))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
        names.push(name);
    }
    let r = http
        .put(format!("{}/v2/endpoint/dana/ep-0", server.url))
        .bearer_auth(token)
        .json(&json!({"compute": {"scaling": {"maxReplica": 3}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // kill -9: no chance to flush anything.
    drop(server);

    let server = serve(dir.path());
    let r: Value = http
        .get(format!("{}/v2/endpoint/dana", server.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let got: Vec<&str> = r["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    let mut want: Vec<&str> = names.iter().map(String::as_str).collect();
    want.sort();
    let mut got_sorted = got.clone();
    got_sorted.sort();
    assert_eq!(got_sorted, want);
    let ep0 = r["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "ep-0")
        .unwrap();
    assert_eq!(ep0["compute"]["scaling"]["maxReplica"], 3);
    assert_eq!(ep0["model"]["secrets"], json!({"TOKEN": null}));

    // The bootstrap token still works and was not replaced.
    let me: Value = http
        .get(format!("{}/api/whoami-v2", server.url))
        .bearer_auth(admin_token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(me["name"], "admin");
}

#[test]
fn config_check_and_openapi() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    // A valid key (base64 of 32 bytes): `config check` refuses any other, as `serve` does.
    let key = "aGlkZGVuLXZhbHVlLW9mLXRoaXJ0eS10d28tYnl0ZXM=";
    std::fs::write(
        &cfg,
        format!("[server]\nlisten = \"127.0.0.1:9999\"\n[secrets]\nkey = \"{key}\"\n"),
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["config", "check"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("127.0.0.1:9999"));
    assert!(!text.contains(key));

    std::fs::write(&cfg, "[server]\nlisten = 12\n").unwrap();
    let out = Command::new(BIN)
        .args(["config", "check"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("listen"));

    let out = Command::new(BIN).arg("openapi").output().unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc["paths"]["/api/v1/catalog/list"].is_object());
}

/// `switchyard admin … --password-stdin` with `input` on stdin: whether it succeeded, and what it
/// printed (stdout and stderr).
fn admin_with_stdin(data_dir: &Path, args: &[&str], input: &str) -> (bool, String) {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new(BIN)
        .arg("admin")
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run switchyard admin");
    // A command that refuses before it reads its input may have exited already: the pipe is then closed
    // (EPIPE), and what it said and how it ended are what the test judges.
    let mut stdin = child.stdin.take().unwrap();
    if let Err(e) = stdin.write_all(input.as_bytes()) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), printed)
}

/// Passwords from the shell: read from stdin's first line, never printed, stored as a hash that the
/// server checks; a password that breaks the rules is refused and changes nothing.
#[tokio::test]
async fn admin_sets_passwords_from_stdin() {
    use switchyard_server::services::accounts::check_password;
    use switchyard_server::store::{SqlStore, StoreUrl, Synchronous};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();

    let (ok, printed) = admin_with_stdin(
        data,
        &[
            "user",
            "create",
            "pat",
            "--email",
            "pat@example.com",
            "--admin",
            "--password-stdin",
        ],
        "correct horse battery\nsecond line\n",
    );
    assert!(ok, "{printed}");
    assert!(printed.contains("created user pat"), "{printed}");
    // No email, and a line ending from Windows.
    let (ok, printed) = admin_with_stdin(
        data,
        &["user", "create", "quinn", "--password-stdin"],
        "  spaces count  \r\n",
    );
    assert!(ok, "{printed}");
    let (ok, printed) = admin_with_stdin(
        data,
        &["user", "create", "rosa", "--password-stdin"],
        "short\n",
    );
    assert!(
        !ok && printed.contains("at least 8 characters"),
        "{printed}"
    );
    assert!(!printed.contains("short") && !admin(data, &["user", "list"]).contains("rosa"));

    let (ok, printed) = admin_with_stdin(
        data,
        &["user", "set-password", "pat", "--password-stdin"],
        "tr0ub4dor&3 again",
    );
    assert!(ok, "{printed}");
    assert!(!printed.contains("tr0ub4dor"), "{printed}");
    let (ok, printed) = admin_with_stdin(
        data,
        &["user", "set-password", "nobody", "--password-stdin"],
        "correct horse battery\n",
    );
    assert!(!ok && printed.contains("nobody"), "{printed}");
    let (ok, printed) = admin_with_stdin(
        data,
        &["user", "set-password", "pat", "--password-stdin"],
        "",
    );
    assert!(!ok && printed.contains("no password"), "{printed}");
    let (ok, _) = admin_with_stdin(data, &["user", "set-password", "pat"], "x\n");
    assert!(!ok, "set-password takes the password from stdin only");

    let store = SqlStore::open(
        &StoreUrl::Sqlite(data.join("switchyard.db")),
        Synchronous::Normal,
    )
    .await
    .unwrap();
    let signs_in = |name: &'static str, password: &'static str| {
        let store = &store;
        async move {
            check_password(store, name, password)
                .await
                .unwrap()
                .map(|a| (a.name, a.is_admin, a.email))
        }
    };
    assert_eq!(
        signs_in("pat", "tr0ub4dor&3 again").await,
        Some(("pat".into(), true, Some("pat@example.com".into())))
    );
    assert_eq!(signs_in("pat", "correct horse battery").await, None);
    assert_eq!(
        signs_in("quinn", "  spaces count  ").await,
        Some(("quinn".into(), false, None))
    );
    assert_eq!(signs_in("quinn", "spaces count").await, None);
}
