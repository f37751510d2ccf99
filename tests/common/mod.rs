//! The real `switchyard` binary as a child process, shared by the end-to-end tests.

#![allow(dead_code)]

pub mod tmux;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

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
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .args(extra)
        .env_remove("SWITCHYARD_LISTEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start switchyard serve");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
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
        .expect("the server announces its address");
    Server { child, url }
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
