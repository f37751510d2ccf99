//! Console benchmark (not a test): time from start to the first frame with the in-process server, and the
//! time to draw one frame of 10,000 endpoints, each beside a baseline measured in the same run.
//!
//! Run: `cargo bench -p switchyard-ui --bench console`.

// A benchmark or a test may unwrap: a failed one is a failed run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use chrono::Utc;
use ratatui::backend::TestBackend;
use ratatui::Terminal;
use serde_json::json;
use switchyard_server::client::Client;
use switchyard_server::{Application, Config};
use switchyard_ui::keymap::Keymap;
use switchyard_ui::state::{update, Action, Effect, EndpointRow, State};
use switchyard_ui::{perform, views};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn draw_times(state: &State, frames: usize) -> (Duration, Duration) {
    let keymap = Keymap::builtin();
    let mut terminal = Terminal::new(TestBackend::new(200, 50)).expect("terminal");
    let mut times: Vec<Duration> = (0..frames)
        .map(|_| {
            let t = Instant::now();
            terminal
                .draw(|f| views::draw(f, state, &keymap))
                .expect("draw");
            t.elapsed()
        })
        .collect();
    times.sort();
    (percentile(&times, 0.5), percentile(&times, 0.99))
}

fn endpoints(n: usize) -> Vec<EndpointRow> {
    (0..n)
        .map(|i| {
            EndpointRow::from_json(
                &format!("ns{}", i % 50),
                &json!({"name": format!("endpoint-{i}"), "type": "public", "model": {"repository": "org/model"},
                        "status": {"state": "running", "readyReplica": 1, "targetReplica": 2,
                                   "url": format!("http://127.0.0.1:8080/endpoints/ns/endpoint-{i}"),
                                   "updatedAt": "2026-11-22T10:00:00.000Z"}}),
            )
        })
        .collect()
}

async fn first_frame() -> (Duration, Duration, Duration) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.store.data_dir = Some(dir.path().to_path_buf());
    config.server.listen = "127.0.0.1:0".parse().expect("addr");
    let started = Instant::now();
    let app = Application::build(&config).await.expect("build");
    let built = started.elapsed();
    let url = format!("http://{}", app.local_addr());
    let token = std::fs::read_to_string(dir.path().join("admin-token")).expect("token");
    tokio::spawn(app.run(std::future::pending()));
    let keymap = Keymap::builtin();
    let mut state = State::new(url.clone(), false, Utc::now(), String::new());
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).expect("terminal");
    terminal
        .draw(|f| views::draw(f, &state, &keymap))
        .expect("draw");
    let first = started.elapsed();
    let client = Client::new(&url, Some(token.trim().to_string()));
    for effect in [Effect::SignIn, Effect::LoadCatalog(1, Vec::new())] {
        if let Some(action) = perform(&client, effect).await {
            update(&mut state, action, &keymap);
        }
    }
    terminal
        .draw(|f| views::draw(f, &state, &keymap))
        .expect("draw");
    (built, first, started.elapsed())
}

fn main() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let runs: Vec<(Duration, Duration, Duration)> =
        (0..5).map(|_| rt.block_on(first_frame())).collect();
    let median = |f: fn(&(Duration, Duration, Duration)) -> Duration| {
        let mut v: Vec<Duration> = runs.iter().map(f).collect();
        v.sort();
        v[v.len() / 2]
    };
    let (built, first, loaded) = (median(|r| r.0), median(|r| r.1), median(|r| r.2));
    println!("Start to first frame, in-process server on a new data dir (median of 5)");
    println!(
        "  server built (baseline: store, catalog seed, listener)  {:>8.1} ms",
        built.as_secs_f64() * 1e3
    );
    println!("  first frame drawn                                       {:>8.1} ms   target ≤ 300 ms  {}", first.as_secs_f64() * 1e3, if first <= Duration::from_millis(300) { "PASS" } else { "MISS" });
    println!(
        "  signed in, catalog loaded and drawn                     {:>8.1} ms",
        loaded.as_secs_f64() * 1e3
    );

    let keymap = Keymap::builtin();
    let mut empty = State::new("bench".into(), false, Utc::now(), String::new());
    update(
        &mut empty,
        Action::Key(switchyard_ui::state::Key("tab".into())),
        &keymap,
    );
    let mut full = empty.clone();
    let seq = full.endpoints_seq;
    update(
        &mut full,
        Action::EndpointsLoaded(seq, Ok(endpoints(10_000))),
        &keymap,
    );
    let mut filtered = full.clone();
    filtered.filter = "endpoint-99".into();
    let (e50, e99) = draw_times(&empty, 200);
    let (f50, f99) = draw_times(&full, 200);
    let (g50, g99) = draw_times(&filtered, 200);
    println!("\nOne frame at 200×50 (200 frames)                          p50        p99");
    println!(
        "  endpoints view, empty (baseline)                  {:>8.3} ms {:>8.3} ms",
        e50.as_secs_f64() * 1e3,
        e99.as_secs_f64() * 1e3
    );
    println!("  endpoints view, 10,000 rows                       {:>8.3} ms {:>8.3} ms   target ≤ 5 ms  {}", f50.as_secs_f64() * 1e3, f99.as_secs_f64() * 1e3, if f99 <= Duration::from_millis(5) { "PASS" } else { "MISS" });
    println!(
        "  10,000 rows with a filter typed                   {:>8.3} ms {:>8.3} ms",
        g50.as_secs_f64() * 1e3,
        g99.as_secs_f64() * 1e3
    );
}
