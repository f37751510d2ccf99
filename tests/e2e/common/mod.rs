//! The real `switchyard` binary as a child process, shared by the end-to-end tests.

#![allow(dead_code)]

pub mod cluster;
pub mod docker;
pub mod tmux;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

/// Whether `test`, which needs `what`, can run here (`have`). In CI (`CI` set) it must: a test never passes
/// there by being skipped. Elsewhere it says why it is skipped.
pub fn needs(have: bool, test: &str, what: &str) -> bool {
    if !have {
        assert!(
            std::env::var_os("CI").is_none(),
            "{test} needs {what}, which CI provides (./scripts/test)"
        );
        eprintln!("{test}: skipped, it needs {what} (./scripts/test provides it)");
    }
    have
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}

/// The workspace's test engine, built beside the test binaries.
pub fn engine_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let bin = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("switchyard-test-engine");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --workspace` first",
        bin.display()
    );
    bin
}

pub struct Server {
    pub child: Child,
    pub url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `switchyard serve` on a free port with `extra` arguments; waits for its address.
pub fn serve_with(data_dir: &Path, extra: &[&std::ffi::OsStr]) -> Server {
    serve_as(data_dir, extra, |_| {})
}

/// `switchyard serve` on a free port with `extra` arguments, its command changed by `configure` (its
/// environment, where its stderr goes) before it starts; waits for its address.
pub fn serve_as(
    data_dir: &Path,
    extra: &[&std::ffi::OsStr],
    configure: impl FnOnce(&mut Command),
) -> Server {
    serve_logged(data_dir, extra, configure, None)
}

/// [`serve_as`], its log (stdout) appended to `log` when given.
pub fn serve_logged(
    data_dir: &Path,
    extra: &[&std::ffi::OsStr],
    configure: impl FnOnce(&mut Command),
    log: Option<std::fs::File>,
) -> Server {
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .args(extra)
        .env_remove("SWITCHYARD_LISTEN")
        .stderr(Stdio::null());
    configure(&mut cmd);
    announcing_to(cmd, "switchyard serve", log)
}

/// `switchyard receive --listen 127.0.0.1:0 ARGS`, with no secret from the environment; waits for its
/// address. Its stderr goes to `stderr` (`Stdio::piped()` to read it from `child.stderr`).
pub fn receive(args: &[&str], stderr: Stdio) -> Server {
    let mut cmd = Command::new(BIN);
    cmd.args(["receive", "--listen", "127.0.0.1:0"])
        .args(args)
        .env_remove("WEBHOOK_SECRET")
        .env_remove("WEBHOOK_SIGNING_SECRET")
        .stderr(stderr);
    announcing(cmd, "switchyard receive")
}

/// Starts `cmd` and waits for the `listening on URL` line of its stdout.
fn announcing(cmd: Command, what: &str) -> Server {
    announcing_to(cmd, what, None)
}

/// [`announcing`], every line of its stdout written to `log` too.
fn announcing_to(mut cmd: Command, what: &str, mut log: Option<std::fs::File>) -> Server {
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {what}: {e}"));
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(f) = log.as_mut() {
                use std::io::Write;
                let _ = writeln!(f, "{line}");
            }
            if !sent {
                if let Some(rest) = line.split("listening on ").nth(1) {
                    let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_string());
                    sent = true;
                }
            }
        }
    });
    let url = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("{what} announces its address"));
    Server { child, url }
}

/// The column names of a table the CLI printed (its first line), split on runs of spaces.
pub fn header(line: &str) -> Vec<&str> {
    line.split("  ")
        .filter(|c| !c.is_empty())
        .map(str::trim)
        .collect()
}

pub fn serve(data_dir: &Path) -> Server {
    serve_with(data_dir, &[])
}

/// A public endpoint on the smallest CPU instance, as an API body.
pub fn endpoint(name: &str) -> serde_json::Value {
    serde_json::json!({
        "name": name,
        "type": "public",
        "provider": {"vendor": "aws", "region": "us-east-1"},
        "compute": {"accelerator": "cpu", "instanceType": "intel-icl", "instanceSize": "x1",
                    "scaling": {"minReplica": 0, "maxReplica": 1}},
        "model": {"repository": "BAAI/bge-small-en-v1.5", "framework": "pytorch", "image": {"hub": {}}}
    })
}
