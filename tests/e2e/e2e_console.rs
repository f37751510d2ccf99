//! The console end to end: the real binary in tmux (a real terminal), on its in-process server. Open it, filter
//! the catalog, find an endpoint in the list, pause it through a confirmed action, quit with `:q`; the shell
//! gets exit status 0 and its normal screen back.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common;

use common::tmux::Tmux;
use common::BIN;

/// Runs the console in tmux. After it exits the pane shows its exit status, and `TTY-SAME` when the
/// terminal's settings are what they were before it started.
fn start(data_dir: &Path) -> Tmux {
    start_with(data_dir, "")
}

/// The same with `env` (`NAME=value …`) in front of the console.
fn start_with(data_dir: &Path, env: &str) -> Tmux {
    start_at(data_dir, env, (120, 30))
}

/// The same in a terminal of `size` (columns, rows).
fn start_at(data_dir: &Path, env: &str, size: (u16, u16)) -> Tmux {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("sy-console-{}-{n}", std::process::id());
    let cmd = format!(
        "before=$(stty -g); {env} {BIN} --data-dir {} --listen 127.0.0.1:0; echo EXITED $?; \
         [ \"$(stty -g)\" = \"$before\" ] && echo TTY-SAME; sleep 60",
        data_dir.display()
    );
    Tmux::sized(name, &cmd, size)
}

/// The two terminals the console is tried in: a roomy one and the smallest it takes.
const SIZES: [(u16, u16); 2] = [(120, 35), (80, 24)];

#[tokio::test]
async fn browse_filter_act_and_quit() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The "editor": raises maxReplica to 2 in the file it is given.
    let editor = dir.path().join("editor.sh");
    std::fs::write(
        &editor,
        "#!/bin/sh\nsed -i 's/\"maxReplica\": [0-9]*/\"maxReplica\": 2/' \"$1\"\n",
    )
    .expect("editor script");
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let tmux = start_with(
        &dir.path().join("data"),
        &format!("VISUAL= EDITOR={}", editor.display()),
    );
    // Signed in, then the catalog (its answer may come a frame after the sign-in's).
    tmux.wait_for("connected");
    tmux.wait_for("catalog (63/63)");

    // Filter the catalog.
    tmux.keys(&["/", "r", "e", "r", "a", "n", "k", "Enter"]);
    let screen = tmux.wait_for("/rerank");
    assert!(screen.contains("bge-reranker-base"), "{screen}");
    assert!(!screen.contains("Qwen"), "{screen}");

    // Deploy through the form: the server's validation issue shows beside its field, then a good name deploys
    // and the endpoints view shows the new endpoint.
    tmux.keys(&["Escape", "/"]);
    tmux.type_text("bge-large");
    tmux.keys(&["Enter", "D"]);
    tmux.wait_for("deploy BAAI/bge-large-en-v1.5");
    tmux.keys(&["Down", "Down"]);
    tmux.type_text("Bad_Name");
    tmux.keys(&["Enter"]);
    tmux.wait_for("may contain only lowercase letters");
    for _ in 0.."Bad_Name".len() {
        tmux.keys(&["BSpace"]);
    }
    tmux.type_text("console-test");
    tmux.keys(&["Enter"]);
    tmux.wait_for("deployed admin/console-test");
    tmux.wait_for("endpoints (1/1)");

    // Its schedule: add an entry (00:00, the endpoint's own bounds), save it, and find it in effect in describe.
    tmux.keys(&["s"]);
    tmux.wait_for("schedule admin/console-test");
    tmux.keys(&["a", "Enter"]);
    tmux.wait_for("saved the schedule of admin/console-test");
    tmux.keys(&["d"]);
    tmux.wait_for("entry 1 of 1 in effect now (from 00:00 UTC)");
    tmux.keys(&["Escape"]);

    // The spec in $EDITOR: the console gives it the terminal, takes it back with the edited text in its own
    // editor (checked), and ctrl-s saves it.
    tmux.keys(&["E"]);
    tmux.wait_for("back from the editor");
    tmux.wait_for("\"maxReplica\": 2");
    tmux.keys(&["C-s"]);
    tmux.wait_for("saved the spec of admin/console-test");
    std::thread::sleep(Duration::from_millis(500));
    tmux.keys(&["d", "/"]);
    tmux.type_text("maxreplica");
    tmux.keys(&["Enter"]);
    tmux.wait_for("/maxreplica (n next");
    let screen = tmux.wait_for("\"maxReplica\": 2");
    assert!(!screen.contains("\"maxReplica\": 1"), "{screen}");
    tmux.keys(&["Escape", "Escape"]);

    // Pause it: the dialog defaults to Cancel, so Tab to Yes first.
    tmux.keys(&["p"]);
    tmux.wait_for("pause admin/console-test?");
    tmux.keys(&["Tab", "Enter"]);
    tmux.wait_for("pause admin/console-test: paused");

    // Its replica output (none: no launcher runs `tei` here), followed until closed.
    tmux.keys(&["l"]);
    tmux.wait_for("logs admin/console-test (following");
    tmux.keys(&["Space"]);
    tmux.wait_for("logs admin/console-test (paused");
    tmux.keys(&["Escape"]);

    // The catalog with the API's own filters; a filter the server refuses is shown, not hidden.
    tmux.keys(&[":"]);
    tmux.type_text("catalog task=text-ranking");
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("bge-reranker-base");
    assert!(!screen.contains("Qwen"), "{screen}");
    tmux.keys(&[":"]);
    tmux.type_text("catalog limit=0");
    tmux.keys(&["Enter"]);
    tmux.wait_for("catalog: ");

    // Another server, unreachable: the console stays up and says so; `:server` goes back.
    tmux.keys(&[":"]);
    tmux.type_text("server http://127.0.0.1:9");
    tmux.keys(&["Enter"]);
    tmux.wait_for("unreachable");
    tmux.keys(&[":"]);
    tmux.type_text("server");
    tmux.keys(&["Enter"]);
    tmux.wait_for("connected");

    tmux.keys(&[":", "q", "Enter"]);
    let screen = tmux.wait_for("EXITED");
    assert!(screen.contains("EXITED 0"), "{screen}");
    assert!(screen.contains("TTY-SAME"), "{screen}");
    // The alternate screen is gone: the shell's own lines are back.
    assert!(!screen.contains("catalog ("), "{screen}");
}

/// SIGTERM (or a closed ssh session's SIGHUP) quits cleanly: exit status 0, the terminal given back.
#[test]
fn sigterm_quits_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tmux = start(dir.path());
    tmux.wait_for("connected");
    let shell = tmux.pane_pid();
    let child = Command::new("pgrep")
        .args(["-P", &shell, "switchyard"])
        .output()
        .expect("pgrep");
    let pid = String::from_utf8_lossy(&child.stdout).trim().to_string();
    assert!(
        !pid.is_empty(),
        "no console process under the pane's shell {shell}"
    );
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill")
        .success());
    let screen = tmux.wait_for("EXITED");
    assert!(screen.contains("EXITED 0"), "{screen}");
    assert!(!screen.contains("catalog ("), "{screen}");
    // Printed just after EXITED, only when the terminal's settings are what they were before.
    tmux.wait_for("TTY-SAME");
}

/// A panic (debug builds have `:panic` for this) still gives the terminal back: the shell's screen, and its
/// settings as they were.
#[test]
fn a_panic_restores_the_terminal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tmux = start_with(dir.path(), "RUST_BACKTRACE=0");
    tmux.wait_for("connected");
    tmux.keys(&[":"]);
    tmux.type_text("panic");
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("EXITED");
    assert!(screen.contains("EXITED 101"), "{screen}");
    assert!(screen.contains("asked to panic"), "{screen}");
    assert!(screen.contains("TTY-SAME"), "{screen}");
    assert!(!screen.contains("catalog ("), "{screen}");
}

/// Webhooks in the console, live, at 120×35 and at 80×24: a webhook made in the console's form (its
/// `whsec_` signing secret shown once) points at a receiver in this test; its deliveries view is open when an
/// endpoint is created in the watched namespace, and the attempt appears on screen without a key pressed,
/// naming the endpoint and what changed. `t` then replays it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_deliveries_appear_live() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    // The receiver: counts what comes and answers 200.
    let received = Arc::new(AtomicUsize::new(0));
    let counter = received.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the receiver");
    let receiver = listener.local_addr().expect("receiver address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    for size in SIZES {
        deliveries_at(size, &format!("http://{receiver}/hook")).await;
    }
    assert!(received.load(Ordering::SeqCst) >= 2);
}

/// One run of [`webhook_deliveries_appear_live`] in a terminal of `size`, on a console of its own.
async fn deliveries_at(size: (u16, u16), hook: &str) {
    use switchyard_server::client::Client;

    // The console, on an in-process server that may send to loopback.
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let tmux = start_at(&data, "SWITCHYARD_OUTBOUND_ALLOW=127.0.0.0/8", size);
    let screen = tmux.wait_for("connected");
    let url = screen
        .split("in-process ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the status line shows the in-process server's URL")
        .to_string();
    let token = std::fs::read_to_string(data.join("admin-token")).expect("admin token");
    let client = Client::new(&url, Some(token.trim().to_string()));

    // The form: the URL; watching the user's endpoints is what it starts with. The signing secret shows
    // once, and is gone when dismissed.
    tmux.keys(&[":"]);
    tmux.type_text("webhooks");
    tmux.keys(&["Enter"]);
    tmux.wait_for("webhooks (0/0)");
    tmux.keys(&["n"]);
    tmux.wait_for("new webhook");
    tmux.type_text(hook);
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("(shown once)");
    assert!(
        screen.contains("signing secret  whsec_"),
        "{size:?}: {screen}"
    );
    assert!(screen.contains("will not be"), "{size:?}: {screen}");
    tmux.keys(&["Escape"]);
    let screen = tmux.wait_for("webhooks (1/1)");
    assert!(!screen.contains("whsec_"), "{size:?}: {screen}");
    tmux.wait_for("user:admin");
    tmux.keys(&["Enter"]);
    tmux.wait_for(&format!("deliveries of {hook} · live (0/0)"));

    // A change in the watched namespace, through the API; no key is pressed from here until it shows. The
    // row names the endpoint and what changed.
    let _: serde_json::Value = client
        .create_endpoint("admin", &common::endpoint("hooked"))
        .await
        .expect("create an endpoint");
    // Deliveries go out concurrently: the state change's may be listed before the creation's.
    let created = |l: &str| l.contains("endpoint admin/hooked") && l.contains("created");
    let screen = wait_long_until(&tmux, "the created row", |s| s.lines().any(created));
    let row = screen
        .lines()
        .find(|l| created(l))
        .unwrap_or_else(|| panic!("{size:?}: no created row:\n{screen}"));
    assert!(row.contains("200"), "{size:?}: {row}");
    // Its state changes say old → new (the first of them, from `pending`, whichever comes in first).
    let screen = wait_long(&tmux, "pending → ");
    assert!(
        screen
            .lines()
            .any(|l| l.contains("endpoint admin/hooked") && l.contains("pending → ")),
        "{size:?}: {screen}"
    );

    // `t` replays the selected (newest) delivery; the result goes to the message line, and the replay's own
    // attempt comes in live, marked `(r)`.
    tmux.keys(&["g", "t"]);
    tmux.wait_for("replayed delivery");
    wait_long(&tmux, "(r)");

    // esc goes back to the list, with the last result.
    tmux.keys(&["Escape"]);
    tmux.wait_for("200 ok");
    tmux.keys(&[":", "q", "Enter"]);
    let screen = tmux.wait_for("EXITED");
    assert!(screen.contains("EXITED 0"), "{size:?}: {screen}");
}

/// At 120×35 and 80×24: what does not fit is cut with `…` (the footer ends `? more`), the help is two
/// columns where they fit and one at 80 columns, never running into each other, and the deploy form has the
/// endpoint's two notification switches.
#[test]
fn cut_text_the_help_and_the_deploy_form_at_both_sizes() {
    for size in SIZES {
        let dir = tempfile::tempdir().expect("tempdir");
        let tmux = start_at(&dir.path().join("data"), "", size);
        tmux.wait_for("connected");
        tmux.wait_for("catalog (63/63)");
        let width = usize::from(size.0);
        let lines = tmux.lines();
        let footer = lines
            .iter()
            .rev()
            .find(|l| !l.is_empty())
            .cloned()
            .unwrap_or_default();
        assert!(footer.ends_with("? more"), "{size:?}: {footer:?}");
        assert!(lines.iter().all(|l| l.chars().count() <= width), "{size:?}");
        // At 80 columns some catalog cells are cut: each says so.
        if size.0 == 80 {
            let rows = lines.iter().filter(|l| l.starts_with('│'));
            assert!(
                rows.clone().any(|l| l.contains("…│") || l.contains("… ")),
                "{lines:?}"
            );
        }

        // A model's recipes (describe) cover neither the status line nor the footer.
        tmux.keys(&["Enter"]);
        let screen = tmux.wait_for("task ");
        assert!(screen.starts_with(" switchyard "), "{size:?}: {screen}");
        tmux.keys(&["Escape"]);

        // The help: a binding's line holds one binding at 80 columns, two side by side at 120.
        tmux.keys(&["?"]);
        let screen = tmux.wait_for("console log:");
        assert!(screen.starts_with(" switchyard "), "{size:?}: {screen}");
        let copy = screen
            .lines()
            .find(|l| l.contains("copy (URL, id)"))
            .unwrap_or_else(|| panic!("{size:?}: {screen}"));
        let after = copy.split("copy (URL, id)").nth(1).unwrap_or_default();
        match size.0 {
            80 => assert_eq!(after.trim_matches([' ', '│']), "", "{size:?}: {copy:?}"),
            _ => assert!(
                screen
                    .lines()
                    .any(|l| l.contains("quit") && l.contains("recipes")),
                "{size:?}: {screen}"
            ),
        }
        assert!(
            !screen.contains("idapps") && !screen.contains("id)apps"),
            "{screen}"
        );
        tmux.keys(&["Escape"]);

        // The deploy form, with its notification switches: pushed here on, mail off.
        tmux.keys(&["D"]);
        let screen = tmux.wait_for("notify me by mail");
        let push = screen
            .lines()
            .find(|l| l.contains("notify me here (push)"))
            .unwrap_or_else(|| panic!("{size:?}: {screen}"));
        assert!(push.contains(" yes "), "{size:?}: {push}");
        let mail = screen.lines().find(|l| l.contains("notify me by mail"));
        assert!(
            mail.is_some_and(|l| l.contains(" no ")),
            "{size:?}: {screen}"
        );
        tmux.keys(&["Escape", ":", "q", "Enter"]);
        let screen = tmux.wait_for("EXITED");
        assert!(screen.contains("EXITED 0"), "{size:?}: {screen}");
    }
}

/// Waits up to a minute for `text` (a delivery needs the outbox and a worker to come round).
fn wait_long(tmux: &Tmux, text: &str) -> String {
    wait_long_until(tmux, text, |s| s.contains(text))
}

/// Waits up to a minute for a screen that `shows` (`what`, for the message when it never does).
fn wait_long_until(tmux: &Tmux, what: &str, shows: impl Fn(&str) -> bool) -> String {
    for _ in 0..600 {
        let s = tmux.screen();
        if shows(&s) {
            return s;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the screen never showed {what:?}:\n{}", tmux.screen());
}

/// The console's log lines, all days' files together.
fn console_log(data_dir: &Path) -> String {
    let logs = data_dir.join("logs");
    let mut text = String::new();
    for entry in std::fs::read_dir(&logs).expect("the logs dir").flatten() {
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with("console.log")
        {
            text.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
        }
    }
    text
}

/// Quitting does not wait for the console's own held requests (its notifications long poll is open from
/// sign-in): the in-process server's stop finds every request done, instead of giving up on them after
/// its drain time, at 120×35 and at 80×24. What the console made is its user's alone, so a second start
/// has nothing to close.
#[test]
fn quitting_finds_every_request_done_and_leaves_private_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    for (width, height) in [("120", "35"), ("80", "24")] {
        let tmux = start(&data);
        common::tmux::run(
            &tmux.0,
            &["resize-window", "-t", &tmux.0, "-x", width, "-y", height],
        );
        tmux.wait_for("connected");
        tmux.keys(&[":"]);
        tmux.type_text("notifications");
        tmux.keys(&["Enter"]);
        tmux.keys(&[":", "q", "Enter"]);
        let screen = tmux.wait_for("EXITED");
        assert!(screen.contains("EXITED 0"), "{width}x{height}: {screen}");
    }
    let log = console_log(&data);
    assert_eq!(
        log.matches("every request is done; stopping").count(),
        2,
        "{log}"
    );
    assert!(!log.contains("requests still open"), "{log}");
    assert!(!log.contains("closed to other users"), "{log}");
    for entry in std::fs::read_dir(data.join("logs"))
        .expect("logs")
        .flatten()
    {
        let mode =
            std::os::unix::fs::PermissionsExt::mode(&entry.metadata().expect("meta").permissions());
        assert_eq!(
            mode & 0o077,
            0,
            "{:?} is open to others: {mode:o}",
            entry.path()
        );
    }
}

/// The configured port is taken: the console's in-process server takes a free one and says which in the
/// status line; `serve` on that port fails, naming `--listen`.
#[test]
fn a_taken_port_moves_the_console_and_stops_serve() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port to hold");
    let addr = taken.local_addr().expect("addr");
    let dir = tempfile::tempdir().expect("tempdir");
    let name = format!("sy-console-port-{}", std::process::id());
    let cmd = format!(
        "SWITCHYARD_LISTEN={addr} {BIN} --data-dir {}; echo EXITED $?; sleep 60",
        dir.path().join("console").display()
    );
    let tmux = Tmux::new(name, &cmd);
    let screen = tmux.wait_for("connected");
    assert!(screen.contains(&format!("({addr} was taken)")), "{screen}");
    tmux.keys(&[":", "q", "Enter"]);
    let screen = tmux.wait_for("EXITED");
    assert!(screen.contains("EXITED 0"), "{screen}");

    let out = Command::new(BIN)
        .args(["serve", "--listen", &addr.to_string(), "--data-dir"])
        .arg(dir.path().join("serve"))
        .output()
        .expect("run serve");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("binding {addr}")) && err.contains("--listen"),
        "{err}"
    );
    drop(taken);
}
