//! A tmux session as a real terminal for the console, shared by its end-to-end test and its idle benchmark.

#![allow(dead_code)]

use std::process::Command;
use std::time::Duration;

/// Runs `tmux` with `args` on the server of the session `name` (outside any tmux the caller is in) and returns
/// what it printed. Each session has a server of its own (`-L`): sessions of tests running side by side never
/// meet one server exiting as another's last session ends.
pub fn run(name: &str, args: &[&str]) -> String {
    let out = Command::new("tmux")
        .args(["-L", name])
        .args(args)
        .env_remove("TMUX")
        .output()
        .expect("tmux (installed by scripts/test)");
    assert!(out.status.success(), "tmux {args:?} failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A detached session running `cmd` (120×30 unless sized), on a tmux server of its own; killed when dropped,
/// with its server and the server's socket (`.1`).
pub struct Tmux(pub String, String);

impl Tmux {
    pub fn new(name: String, cmd: &str) -> Tmux {
        Tmux::sized(name, cmd, (120, 30))
    }

    /// A session `size` (columns, rows) from the start: what runs in it sees that size first.
    pub fn sized(name: String, cmd: &str, (width, height): (u16, u16)) -> Tmux {
        let (width, height) = (width.to_string(), height.to_string());
        run(
            &name,
            &[
                "new-session",
                "-d",
                "-s",
                &name,
                "-x",
                &width,
                "-y",
                &height,
                cmd,
            ],
        );
        let socket = run(&name, &["display-message", "-p", "#{socket_path}"]);
        Tmux(name, socket.trim().to_string())
    }

    /// The screen's lines, trailing blanks cut.
    pub fn lines(&self) -> Vec<String> {
        let screen = self.screen();
        screen.lines().map(|l| l.trim_end().to_string()).collect()
    }

    pub fn screen(&self) -> String {
        run(&self.0, &["capture-pane", "-p", "-t", &self.0])
    }

    /// The pid of the pane's first process.
    pub fn pane_pid(&self) -> String {
        run(&self.0, &["list-panes", "-t", &self.0, "-F", "#{pane_pid}"])
            .trim()
            .to_string()
    }

    pub fn keys(&self, keys: &[&str]) {
        for k in keys {
            run(&self.0, &["send-keys", "-t", &self.0, k]);
            std::thread::sleep(Duration::from_millis(80));
        }
    }

    /// Types `text` literally.
    pub fn type_text(&self, text: &str) {
        run(&self.0, &["send-keys", "-t", &self.0, "-l", text]);
    }

    /// Waits (bounded) until the screen shows `text`.
    pub fn wait_for(&self, text: &str) -> String {
        for _ in 0..150 {
            let s = self.screen();
            if s.contains(text) {
                return s;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the screen never showed {text:?}:\n{}", self.screen());
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        // The session's own server, and the session with it; the server leaves its socket behind.
        let _ = Command::new("tmux")
            .args(["-L", &self.0, "kill-server"])
            .env_remove("TMUX")
            .status();
        let _ = std::fs::remove_file(&self.1);
    }
}
