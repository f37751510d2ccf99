//! `$EDITOR`: the console hands the terminal to the user's editor on a temporary file and takes it back
//! after. Imports `format` and `reader`.

use std::sync::atomic::{AtomicBool, Ordering};

use chrono::Utc;
use ratatui::crossterm::event;

use crate::format;
use crate::reader::InputGate;

/// `$EDITOR` has the terminal: a SIGINT is meant for it.
pub(crate) static EDITING: AtomicBool = AtomicBool::new(false);

/// `$VISUAL`, else `$EDITOR`, else `vi`, on a private temporary file holding `text`; the console gives the
/// terminal to it and takes it back after. Returns the text the editor left, or why there is none.
pub(crate) fn edit_externally(
    terminal: &mut ratatui::DefaultTerminal,
    gate: &InputGate,
    text: &str,
    format: format::Format,
    mouse: bool,
) -> Result<String, String> {
    use ratatui::crossterm::{execute, terminal as term};
    use std::io::Write;
    let editor = ["VISUAL", "EDITOR"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|e| !e.trim().is_empty()))
        .unwrap_or_else(|| "vi".to_string());
    let path = std::env::temp_dir().join(format!(
        "switchyard-spec-{}-{}.{}",
        std::process::id(),
        Utc::now().timestamp_nanos_opt().unwrap_or(0),
        format.extension()
    ));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
        .open(&path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    gate.pause();
    let mut out = std::io::stdout();
    let _ = execute!(out, event::DisableMouseCapture, term::LeaveAlternateScreen);
    let _ = term::disable_raw_mode();
    // Through the shell, so `EDITOR="code --wait"` works as it does for git.
    EDITING.store(true, Ordering::SeqCst);
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("switchyard")
        .arg(&path)
        .status();
    EDITING.store(false, Ordering::SeqCst);
    let _ = term::enable_raw_mode();
    let _ = execute!(out, term::EnterAlternateScreen);
    if mouse {
        let _ = execute!(out, event::EnableMouseCapture);
    }
    let _ = terminal.clear();
    gate.resume();
    let edited = std::fs::read_to_string(&path);
    let _ = std::fs::remove_file(&path);
    match status {
        Ok(s) if s.success() => edited.map_err(|e| format!("reading {}: {e}", path.display())),
        Ok(s) => Err(format!("{editor} exited with {s}: the edit was dropped")),
        Err(e) => Err(format!("running {editor}: {e}")),
    }
}
