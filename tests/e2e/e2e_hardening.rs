//! The real `switchyard` binary against a careless environment: its log pipe closed under it, `~` and
//! relative paths in its settings, and configs that `config check` must refuse as `serve` does.

use std::io::{BufRead, BufReader, Read};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;
use common::{endpoint, Server, BIN};

/// Generous: these bound a hang, they do not measure speed.
const DEADLINE: Duration = Duration::from_secs(60);

/// Waits for `child` to exit by itself within `limit`; kills it and returns `None` when it does not.
fn wait_exit(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(status) = child.try_wait().expect("wait for the process") {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// `cmd`'s output, or a failed test when it runs past [`DEADLINE`].
fn output(cmd: &mut Command) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start switchyard");
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = out.read_to_end(&mut text);
        text
    });
    let mut stderr = Vec::new();
    let _ = err.read_to_end(&mut stderr);
    let status = wait_exit(&mut child, DEADLINE).expect("switchyard exits by itself");
    let stdout = reader.join().unwrap();
    Output {
        status,
        stdout,
        stderr,
    }
}

/// A command with nothing of the caller's environment but `HOME` (no `SWITCHYARD_*`, no XDG dirs).
fn switchyard(home: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_clear()
        .env("HOME", home)
        .env("SWITCHYARD_LOG", "info");
    cmd
}

/// `switchyard serve` with stdout (and stderr too, unless `keep_stderr`: then it is piped to the test)
/// piped into `grep -m1`, which exits after the line announcing the address: the log pipe is closed
/// from then on, before any request.
fn serve_into_closed_pipe(data_dir: &Path, keep_stderr: bool) -> Server {
    let mut reader = Command::new("grep")
        .args(["-m1", "listening on"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start grep");
    let pipe: OwnedFd = reader.stdin.take().expect("grep's stdin").into();
    let stderr = match keep_stderr {
        true => Stdio::piped(),
        false => Stdio::from(pipe.try_clone().expect("dup the pipe")),
    };
    let child = switchyard(data_dir)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .stdout(Stdio::from(pipe))
        .stderr(stderr)
        .spawn()
        .expect("start switchyard serve");
    let mut line = String::new();
    BufReader::new(reader.stdout.take().expect("grep's stdout"))
        .read_line(&mut line)
        .expect("read grep's output");
    let url = line
        .split("listening on ")
        .nth(1)
        .expect("the server announces its address")
        .trim()
        .to_string();
    // The reader is gone: every later write to the pipe fails.
    assert!(wait_exit(&mut reader, DEADLINE).is_some(), "grep exits");
    Server { child, url }
}

/// Requests whose handlers log after committing, each answered in full.
async fn logging_requests(data_dir: &Path, url: &str) {
    let token = std::fs::read_to_string(data_dir.join("admin-token")).expect("admin token");
    let http = reqwest::Client::new();
    for i in 0..3 {
        let name = format!("piped-{i}");
        let r = http
            .post(format!("{url}/v2/endpoint/admin"))
            .bearer_auth(token.trim())
            .json(&endpoint(&name))
            .send()
            .await
            .expect("a reply to the create");
        assert_eq!(r.status(), 200);
        let body: Value = r.json().await.expect("a whole JSON reply");
        assert_eq!(body["name"], name.as_str());
    }
    let r = http
        .delete(format!("{url}/v2/endpoint/admin/piped-0"))
        .bearer_auth(token.trim())
        .send()
        .await
        .expect("a reply to the delete");
    assert!(r.status().is_success(), "{}", r.status());
    let list: Value = http
        .get(format!("{url}/v2/endpoint/admin"))
        .bearer_auth(token.trim())
        .send()
        .await
        .expect("a reply to the list")
        .json()
        .await
        .expect("a whole JSON list");
    let names: Vec<&str> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

/// SIGTERM, then the server must stop by itself.
fn terminate(server: &mut Child) -> ExitStatus {
    let killed = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .expect("run kill");
    assert!(killed.success());
    wait_exit(server, DEADLINE).expect("the server stops on SIGTERM")
}

#[tokio::test]
async fn a_closed_log_pipe_fails_no_request_and_no_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = serve_into_closed_pipe(dir.path(), false);
    logging_requests(dir.path(), &server.url).await;
    let status = terminate(&mut server.child);
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn a_closed_stdout_is_reported_once_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = serve_into_closed_pipe(dir.path(), true);
    let mut stderr = server.child.stderr.take().expect("stderr");
    let reading = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    logging_requests(dir.path(), &server.url).await;
    let status = terminate(&mut server.child);
    assert!(status.success(), "{status}");
    let stderr = reading.join().unwrap();
    assert_eq!(
        stderr.matches("the log output is closed").count(),
        1,
        "{stderr}"
    );
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn tilde_is_home_and_relative_paths_are_the_typists() {
    let dir = tempfile::tempdir().unwrap();
    let (home, cwd) = (dir.path().join("home"), dir.path().join("cwd"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&cwd).unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "[store]\ndata_dir = \"~/sy-data\"\n").unwrap();

    // The example config's spelling: the store lands under HOME, not in a `./~` directory.
    let out = output(
        switchyard(&home)
            .current_dir(&cwd)
            .args(["admin", "--config"])
            .arg(&cfg)
            .args(["user", "list"]),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(home.join("sy-data/switchyard.db").exists());
    assert!(!cwd.join("~").exists());

    // Paths typed on the command line or in the environment: `~` too, and relative to where they were typed.
    let shown = |args: &[&str], env: Option<(&str, &str)>| {
        let mut cmd = switchyard(&home);
        cmd.current_dir(&cwd).args(["config", "check"]).args(args);
        if let Some((k, v)) = env {
            cmd.env(k, v);
        }
        let out = output(&mut cmd);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    let has = |stdout: &str, key: &str, path: &Path| {
        let line = format!("{key} = \"{}\"", path.display());
        assert!(stdout.contains(&line), "{line} not in:\n{stdout}");
    };
    has(
        &shown(&["--data-dir", "rel"], None),
        "data_dir",
        &cwd.join("rel"),
    );
    has(
        &shown(&["--data-dir=~/d"], None),
        "data_dir",
        &home.join("d"),
    );
    let env = Some(("SWITCHYARD_SECRETS_KEY_FILE", "keys/k"));
    has(&shown(&[], env), "key_file", &cwd.join("keys/k"));

    // A relative path in a config file is refused, naming the key.
    std::fs::write(&cfg, "[store]\ndata_dir = \"sy-data\"\n").unwrap();
    let out = output(switchyard(&home).args(["config", "check"]).arg(&cfg));
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("store.data_dir: relative path \"sy-data\""),
        "{err}"
    );
}

#[test]
fn config_check_refuses_what_serve_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let cases = [
        ("[secrets]\nkey = \"short\"\n", "secrets key"),
        ("[store]\nurl = \"mysql://x\"\n", "store.url"),
        (
            "[catalog]\nhardware_file = \"/nonexistent/hw.json\"\n",
            "hardware list",
        ),
        (
            "[catalog]\nseed_file = \"~/no-seed.json\"\n",
            "catalog seed",
        ),
        (
            "[proxy]\ntrusted_proxies = [\"10.0.0.0/99\"]\n",
            "proxy.trusted_proxies",
        ),
        (
            "[runtime]\npublic_url = \"ftp://example.com\"\n",
            "runtime.public_url",
        ),
        (
            "[store]\ndata_dir = \"data\"\n",
            "store.data_dir: relative path",
        ),
        ("[secrets]\nkey_file = \"~bob/key\"\n", "~user"),
    ];
    let last_line = |out: &Output| {
        text(&out.stderr)
            .trim_end()
            .lines()
            .last()
            .map(str::to_owned)
    };
    for (i, (config, expected)) in cases.into_iter().enumerate() {
        let file = dir.path().join(format!("c{i}.toml"));
        std::fs::write(&file, config).unwrap();
        let data = dir.path().join(format!("data-{i}"));
        let check = output(
            switchyard(home)
                .args(["config", "check"])
                .arg(&file)
                .arg("--data-dir")
                .arg(&data),
        );
        let serve = output(
            switchyard(home)
                .args(["serve", "--listen", "127.0.0.1:0", "--config"])
                .arg(&file)
                .arg("--data-dir")
                .arg(&data),
        );
        assert!(!check.status.success(), "config check passed:\n{config}");
        assert!(!serve.status.success(), "serve started:\n{config}");
        let message = last_line(&check).unwrap_or_default();
        assert_eq!(Some(&message), last_line(&serve).as_ref(), "{config}");
        assert!(message.contains(expected), "{message}");
        assert!(
            !data.exists(),
            "a refused config wrote its data dir:\n{config}"
        );
    }
}
