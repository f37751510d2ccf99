//! The clipboard, through the terminal: an OSC 52 escape asks the terminal to put a text on it, which works
//! over ssh too. Imports nothing of the crate.

use std::io::Write;

/// The OSC 52 sequence that asks the terminal to put `text` on the clipboard.
pub fn osc52(text: &str) -> String {
    use base64::Engine;
    format!(
        "\x1b]52;c;{}\x07",
        base64::engine::general_purpose::STANDARD.encode(text)
    )
}

/// Writes the OSC 52 sequence for `text` to the terminal. The event loop calls it, as it owns the terminal.
pub(crate) fn copy_to_clipboard(text: &str) {
    let mut out = std::io::stdout();
    let _ = out
        .write_all(osc52(text).as_bytes())
        .and_then(|()| out.flush());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clipboard_escape() {
        assert_eq!(osc52("http://x"), "\x1b]52;c;aHR0cDovL3g=\x07");
    }
}
