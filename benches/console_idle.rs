//! Console idle benchmark (not a test): CPU time the real binary uses while nobody touches it, the console on
//! its in-process server in a real terminal (tmux), beside the baseline of the same server run headless with
//! `switchyard serve`. The console's share is the difference.
//!
//! Run: `cargo bench -p switchyard --bench console_idle` (needs tmux).

// A benchmark or a test may unwrap: a failed one is a failed run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");
const WINDOW: Duration = Duration::from_secs(5);
const WINDOWS: usize = 3;

/// CPU time of all the threads of a process, in nanoseconds (`/proc/<pid>/task/*/schedstat`, first field).
fn cpu_ns(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("task dir")
        .filter_map(|t| {
            let t = t.ok()?;
            let stat = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
            stat.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}

/// CPU milliseconds per second used by `pid`: the median of a few windows.
fn idle_cpu(pid: u32) -> f64 {
    let mut windows: Vec<f64> = (0..WINDOWS)
        .map(|_| {
            let before = cpu_ns(pid);
            let started = Instant::now();
            std::thread::sleep(WINDOW);
            let used = cpu_ns(pid).saturating_sub(before) as f64 / 1e6;
            used / started.elapsed().as_secs_f64()
        })
        .collect();
    windows.sort_by(f64::total_cmp);
    windows[WINDOWS / 2]
}

#[path = "../tests/e2e/common/tmux.rs"]
mod tmux;

use tmux::Tmux;

/// Starts the console in tmux; returns the session (closed when dropped), the console's pid and the times
/// from the start to its first frame and to "connected" (as a terminal shows them; polled every few
/// milliseconds).
fn console(data: &std::path::Path) -> (Tmux, u32, Duration, Duration) {
    let cmd = format!(
        "exec {BIN} --data-dir {} --listen 127.0.0.1:0",
        data.display()
    );
    let session = Tmux::new(format!("sy-idle-{}", std::process::id()), &cmd);
    let started = Instant::now();
    let mut first = None;
    while started.elapsed() < Duration::from_secs(15) {
        let screen = session.screen();
        if first.is_none() && screen.contains(" switchyard ") {
            first = Some(started.elapsed());
        }
        if screen.contains("connected") {
            let connected = started.elapsed();
            let pid = session.pane_pid().parse().expect("pane pid");
            return (session, pid, first.unwrap_or(connected), connected);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    panic!("the console never connected");
}

fn serve(data: &std::path::Path) -> Child {
    let mut child = Command::new(BIN)
        .args([
            "--data-dir",
            &data.display().to_string(),
            "serve",
            "--listen",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve");
    let mut line = String::new();
    let stdout = child.stdout.take().expect("stdout");
    let mut reader = std::io::BufReader::new(stdout);
    while !line.contains("listening") {
        line.clear();
        std::io::BufRead::read_line(&mut reader, &mut line).expect("read");
    }
    // Keep the pipe open (and drained) while it runs.
    std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
    child
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    println!(
        "Idle CPU, nothing touched (CPU ms per second, median of {WINDOWS} windows of {} s)",
        WINDOW.as_secs()
    );
    let mut server = serve(&dir.path().join("serve"));
    // Let start-up work (catalog seed, first reconciler ticks) pass.
    std::thread::sleep(Duration::from_secs(2));
    let baseline = idle_cpu(server.id());
    let _ = server.kill();
    let _ = server.wait();
    println!("  switchyard serve, headless (baseline)        {baseline:>7.3} ms/s");

    let (session, pid, first, connected) = console(&dir.path().join("console"));
    println!(
        "  (start of the binary in tmux: first frame {:.0} ms, signed in {:.0} ms; target ≤ 300 ms {})",
        first.as_secs_f64() * 1e3,
        connected.as_secs_f64() * 1e3,
        if first <= Duration::from_millis(300) {
            "PASS"
        } else {
            "MISS"
        }
    );
    std::thread::sleep(Duration::from_secs(2));
    let console = idle_cpu(pid);
    drop(session);
    let extra = console - baseline;
    println!(
        "  console on its in-process server, catalog    {console:>7.3} ms/s   console's own share {extra:>6.3} ms/s \
         (target: no CPU while idle, read as ≤ 1 ms/s = 0.1 % of a core) {}",
        if extra <= 1.0 { "PASS" } else { "MISS" }
    );
}
