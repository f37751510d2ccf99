//! The console end to end: the real binary in tmux (a real terminal), on its in-process server. Open it, filter
//! the catalog, find an endpoint in the list, pause it through a confirmed action, quit with `:q`; the shell
//! gets exit status 0 and its normal screen back.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

mod common;

use common::tmux::Tmux;
use common::BIN;

/// Runs the console in tmux. After it exits the pane shows its exit status, and `TTY-SAME` when the
/// terminal's settings are what they were before it started.
fn start(data_dir: &Path) -> Tmux {
    start_with(data_dir, "")
}

/// The same with `env` (`NAME=value …`) in front of the console.
fn start_with(data_dir: &Path, env: &str) -> Tmux {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("sy-console-{}-{n}", std::process::id());
    let cmd = format!(
        "before=$(stty -g); {env} {BIN} --data-dir {} --listen 127.0.0.1:0; echo EXITED $?; \
         [ \"$(stty -g)\" = \"$before\" ] && echo TTY-SAME; sleep 60",
        data_dir.display()
    );
    Tmux::new(name, &cmd)
}

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
    let screen = tmux.wait_for("connected");
    assert!(screen.contains("catalog (62/62)"), "{screen}");

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

    // Its schedule: add an entry (00:00, the endpoint's own bounds), save it, and find it in the spec.
    tmux.keys(&["s"]);
    tmux.wait_for("schedule admin/console-test");
    tmux.keys(&["a", "Enter"]);
    tmux.wait_for("saved the schedule of admin/console-test");
    tmux.keys(&["d"]);
    tmux.wait_for("\"at\": \"00:00\"");
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
