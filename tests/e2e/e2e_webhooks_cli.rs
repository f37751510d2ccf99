//! The real `switchyard webhooks …` against the real `switchyard serve`, delivering to the real
//! `switchyard receive`: create, list, get, update, the activity (and following it), replays, the
//! signing secret and its rotation, disable, enable, delete, and the server's refusals.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;
use common::{serve_with, Server, BIN};

/// `switchyard receive` with ARGS, its stderr dropped.
fn receive(args: &[&str]) -> Server {
    common::receive(args, Stdio::null())
}

/// `switchyard webhooks --server URL --token TOKEN ARGS` with a config dir of its own.
struct Cli<'a> {
    server: &'a str,
    token: &'a str,
    config: &'a Path,
}

impl Cli<'_> {
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.arg("--config")
            .arg(self.config)
            .args(["webhooks", "--server", self.server, "--token", self.token])
            .args(args)
            .env_remove("SWITCHYARD_TOKEN")
            .stdin(Stdio::null());
        cmd
    }

    fn output(&self, args: &[&str]) -> Output {
        self.command(args)
            .output()
            .expect("run switchyard webhooks")
    }

    /// Stdout of a command that must succeed.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.output(args);
        assert!(
            out.status.success(),
            "webhooks {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    }

    /// Stderr of a command that must fail.
    fn fails(&self, args: &[&str]) -> String {
        let out = self.output(args);
        assert!(
            !out.status.success(),
            "webhooks {args:?} succeeded: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stderr).expect("utf-8")
    }

    /// Runs `args` until its stdout satisfies `ok` (at most 20 s); the last stdout.
    fn until(&self, args: &[&str], ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let out = self.ok(args);
            if ok(&out) || Instant::now() > deadline {
                return out;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The value of a `field: value` line of `get`'s or `create`'s output.
fn field<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {name:?} in {out}"))
}

/// The lines appended to `file` once there are at least `n` (at most 20 s).
fn lines_of(file: &Path, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let lines: Vec<Value> = std::fs::read_to_string(file)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        if lines.len() >= n || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test]
async fn the_cli_manages_webhooks_and_shows_their_deliveries() {
    let dir = tempfile::tempdir().expect("dir");
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        "[outbound]\nallow = [\"127.0.0.0/8\"]\n\n[webhooks]\nretry_schedule = [\"100ms\", \"100ms\"]\n",
    )
    .expect("config");
    let data = dir.path().join("data");
    let server = serve_with(&data, &["--config".as_ref(), config.as_os_str()]);
    let token = std::fs::read_to_string(data.join("admin-token")).expect("admin token");
    let token = token.trim();
    let received = dir.path().join("received.jsonl");
    let handler = format!("hook=append:{}", received.display());
    let receiver = receive(&["--secret", "s3cret", "--handler", &handler]);
    let cli_config = dir.path().join("cli").join("config.toml");
    let cli = Cli {
        server: &server.url,
        token,
        config: &cli_config,
    };
    let hook_url = format!("{}/webhooks/hook", receiver.url);

    // Create: the webhook, then its signing secret, once, with a note to keep it.
    let created = cli.ok(&[
        "create",
        "--url",
        &hook_url,
        "--watch",
        "user:admin",
        "--domain",
        "endpoint",
        "--secret",
        "s3cret",
    ]);
    let id = field(&created, "id").to_string();
    assert_eq!(field(&created, "url"), hook_url);
    assert_eq!(field(&created, "watched"), "user:admin");
    assert_eq!(field(&created, "domains"), "endpoint");
    assert_eq!(
        field(&created, "secret"),
        "set",
        "the shared secret is not printed"
    );
    let signing = field(&created, "signing secret").to_string();
    assert!(signing.starts_with("whsec_"), "{created}");
    assert!(created.contains("Keep it"), "{created}");

    // List: a table, and the raw answer with --json.
    let list = cli.ok(&["list"]);
    let mut lines = list.lines();
    let header = common::header(lines.next().expect("header"));
    assert_eq!(
        header,
        ["ID", "URL", "WATCHED", "DOMAINS", "ENABLED", "LAST RESULT"]
    );
    let row: Vec<&str> = lines.next().expect("a row").split_whitespace().collect();
    assert_eq!(
        row,
        [id.as_str(), &hook_url, "user:admin", "endpoint", "yes", "-"]
    );
    let raw: Value = serde_json::from_str(&cli.ok(&["list", "--json"])).expect("json");
    assert_eq!(raw[0]["id"], id.as_str());
    assert_eq!(raw[0]["secret"], "s3cret");
    assert_eq!(field(&cli.ok(&["get", &id]), "enabled"), "yes");

    // A change in the watched namespace is delivered, and the activity shows the attempt.
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{}/v2/endpoint/admin", server.url))
        .bearer_auth(token)
        .json(&common::endpoint("hooked"))
        .send()
        .await
        .expect("create endpoint");
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
    // (Deliveries go out concurrently: the endpoint's first state change may come first.)
    let is_create =
        |v: &Value| v["event"] == serde_json::json!({"action": "create", "scope": "endpoint"});
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut got = lines_of(&received, 1);
    while !got.iter().any(is_create) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        got = lines_of(&received, got.len() + 1);
    }
    let create = got
        .iter()
        .find(|v| is_create(v))
        .expect("the create was delivered");
    assert_eq!(create["webhook"]["id"], id.as_str());
    assert_eq!(create["webhook"]["version"], 3);
    assert_eq!(create["endpoint"]["name"], "hooked");
    let activity = cli.until(&["deliveries", &id], |out| out.contains("endpoint/create"));
    let mut lines = activity.lines();
    let header = common::header(lines.next().expect("header"));
    assert_eq!(
        header,
        [
            "TIME",
            "EVENT",
            "ATTEMPT",
            "STATUS",
            "DURATION",
            "ERROR CLASS",
            "NEXT",
            "DELIVERY"
        ]
    );
    let row = activity
        .lines()
        .find(|l| l.contains("endpoint/create"))
        .expect("the create's attempt");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[1..6], ["endpoint/create", "1", "200", cells[4], "-"]);
    assert!(cells[4].ends_with("ms"), "{row}");
    let delivery = cells.last().expect("delivery id").to_string();
    let list = cli.until(&["list"], |out| out.contains("ok 200"));
    assert!(list.contains("ok 200"), "{list}");
    let attempts: Vec<Value> = cli
        .ok(&["deliveries", &id, "--json", "--limit", "1"])
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(attempts.len(), 1);

    // --follow prints attempts as they come, until stopped.
    let mut follower = cli
        .command(&["deliveries", &id, "--follow", "--limit", "1"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("follow");
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = follower.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // The header and the last attempt first, then only what came after.
    let first = rx.recv_timeout(Duration::from_secs(20)).expect("header");
    assert!(first.starts_with("TIME"), "{first}");
    rx.recv_timeout(Duration::from_secs(20))
        .expect("the last attempt");
    let r = http
        .delete(format!("{}/v2/endpoint/admin/hooked", server.url))
        .bearer_auth(token)
        .send()
        .await
        .expect("delete endpoint");
    assert!(r.status().is_success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut followed = Vec::new();
    while Instant::now() < deadline
        && !followed
            .iter()
            .any(|l: &String| l.contains("endpoint/delete"))
    {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
            followed.push(line);
        }
    }
    let _ = follower.kill();
    let _ = follower.wait();
    assert!(
        followed
            .iter()
            .any(|l| l.contains("endpoint/delete") && l.contains("200")),
        "followed: {followed:?}"
    );

    // Replays: one delivery, and every failed one since two hours ago (none failed).
    // (The receiver answers a webhook-id it has seen without appending again: the activity shows it.)
    let replayed = cli.ok(&["replay", &id, &delivery]);
    assert!(
        replayed.starts_with(&format!("replaying delivery {delivery} as ")),
        "{replayed}"
    );
    let new = replayed
        .trim()
        .rsplit(' ')
        .next()
        .expect("the new id")
        .to_string();
    let activity = cli.until(&["deliveries", &id], |out| out.contains(&new));
    let row = activity
        .lines()
        .find(|l| l.contains(&new))
        .expect("the replay's attempt");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells[1..5],
        ["endpoint/create", "1", "replay", "200"],
        "{row}"
    );
    assert_eq!(create["event"]["scope"], "endpoint");
    let none = cli.ok(&["replay", &id, "--failed-since", "2h"]);
    assert!(none.starts_with("replaying 0 failed"), "{none}");
    assert!(cli.fails(&["replay", &id]).contains("DELIVERY_ID"));
    assert!(cli
        .fails(&["replay", &id, "--failed-since", "yesterday"])
        .contains("--failed-since"));

    // Update: the URL changes, the rest stays; nothing to change is an error.
    let other = format!("{}/webhooks/other", receiver.url);
    let updated = cli.ok(&["update", &id, "--url", &other]);
    assert_eq!(field(&updated, "url"), other);
    assert_eq!(field(&updated, "watched"), "user:admin");
    assert_eq!(field(&updated, "domains"), "endpoint");
    let back = cli.ok(&[
        "update", &id, "--url", &hook_url, "--domain", "endpoint", "--domain", "repo",
    ]);
    assert_eq!(field(&back, "domains"), "repo,endpoint");
    assert!(cli.fails(&["update", &id]).contains("nothing to change"));

    // The server's refusals reach the user with its message, and a non-zero exit.
    let bad = cli.fails(&["update", &id, "--url", "ftp://example.com/hook"]);
    assert!(bad.starts_with("error: ") && bad.contains("url"), "{bad}");
    let bad = cli.fails(&["create", "--url", &hook_url, "--watch", "user:nobody-here"]);
    assert!(
        bad.contains("watched[0].name") && bad.contains("nobody-here"),
        "{bad}"
    );
    assert!(cli
        .fails(&["create", "--url", &hook_url, "--watch", "admin"])
        .contains("TYPE:NAME"));
    let stranger = Cli {
        token: "sy_not-a-token",
        ..cli
    };
    assert!(stranger.fails(&["list"]).starts_with("error: "));

    // The signing secret, and its rotation.
    assert_eq!(cli.ok(&["signing-secret", &id]).trim(), signing);
    let rotated = cli.ok(&["rotate-secret", &id, "--grace", "60"]);
    let fresh = field(&rotated, "signing secret").to_string();
    assert!(fresh.starts_with("whsec_") && fresh != signing, "{rotated}");
    assert!(rotated.contains("60s"), "{rotated}");
    assert_eq!(cli.ok(&["signing-secret", &id]).trim(), fresh);

    // Disable, enable, disable; delete; then it is gone.
    assert!(cli.ok(&["disable", &id]).contains("disabled webhook"));
    let list = cli.ok(&["list"]);
    assert!(
        list.lines()
            .nth(1)
            .is_some_and(|l| l.split_whitespace().nth(4) == Some("no")),
        "{list}"
    );
    assert!(field(&cli.ok(&["get", &id]), "enabled").starts_with("no (disabled by admin"));
    assert!(cli
        .fails(&["replay", &id, &delivery])
        .contains("enable it first"));
    assert!(cli.ok(&["enable", &id]).contains("enabled webhook"));
    assert_eq!(field(&cli.ok(&["get", &id]), "enabled"), "yes");
    cli.ok(&["disable", &id]);
    assert_eq!(
        cli.ok(&["delete", &id]).trim(),
        format!("deleted webhook {id}")
    );
    assert!(cli.fails(&["get", &id]).contains("not found"));
    assert_eq!(cli.ok(&["list"]).trim(), "no webhooks");
}

/// A command without a token is told how to get one; a command whose reader goes away ends quietly, with
/// success, as other programs do (`switchyard webhooks list | head -1`).
#[test]
fn a_missing_token_says_how_to_sign_in_and_a_closed_pipe_ends_quietly() {
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().join("data");
    let server = serve_with(&data, &[]);
    let cli_config = dir.path().join("cli").join("config.toml");
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&cli_config)
        .args(["webhooks", "--server", &server.url, "list"])
        .env_remove("SWITCHYARD_TOKEN")
        .stdin(Stdio::null())
        .output()
        .expect("run switchyard webhooks");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("switchyard login --server {}", server.url)) && err.contains("401"),
        "{err}"
    );

    let token = std::fs::read_to_string(data.join("admin-token")).expect("admin token");
    let cli = Cli {
        server: &server.url,
        token: token.trim(),
        config: &cli_config,
    };
    // A pipe whose reader is gone before the command writes anything.
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let done = cli
        .command(&["list"])
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("run the listing");
    let err = String::from_utf8_lossy(&done.stderr);
    assert!(
        !err.contains("Broken pipe") && !err.contains("panicked"),
        "{err}"
    );
    use std::os::unix::process::ExitStatusExt;
    // SIGPIPE is 13 on Linux.
    assert!(
        done.status.success() || done.status.signal() == Some(13),
        "{:?}: {err}",
        done.status
    );
}
