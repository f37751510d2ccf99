//! `switchyard-ui`: the operator console. One loop: terminal events, a one-second tick and API results all
//! become [`state::Action`]s; [`state::update`] changes the state and names the API calls to make, which run
//! as tasks through the typed client (`switchyard_server::client`) and report back as actions; the screen is
//! drawn from the state, only after something changed.
//!
//! The console talks to the server only over HTTP, so the in-process and the remote cases are one path.
//!
//! # Layers
//!
//! The modules, lowest first. Each imports only modules listed before it, never one after it: there is no
//! import cycle, the views draw from the state, and the state knows nothing of the views.
//!
//! 1. Plain data, for everything above:
//!    - `format`: the spec's text formats, JSON and TOML. Imports nothing of the crate.
//!    - `natural`: names in natural order (`a-2` before `a-10`). Imports nothing of the crate.
//!    - `columns`: a table's columns sharing its width by importance; cells cut to fit with `…`; text
//!      broken into lines. Imports nothing of the crate.
//!    - `effects`: what the state asks the runtime to do ([`effects::Effect`]) and the requests it carries
//!      (`EndpointAction`, `DeployRequest`, `ExternalEdit`). Imports `format`.
//! 2. The widgets' own state and the keymap, each knowing nothing of the console around it:
//!    - `pager`: a scrollable, searchable text (describe, logs), wrapped or scrolled sideways. Imports
//!      `columns`.
//!    - `forms`: the three forms and what they share, layered the same way (listed in `forms/mod.rs`):
//!      - `forms::issues`: a form's issues, placed beside its fields. Imports nothing of the crate.
//!      - `forms::input`: what the forms share: the edits a key asks for, typing into a field, sending and
//!        the server's answer. Imports `forms::issues`.
//!      - `forms::deploy`: the deploy form. Imports `effects`, `forms::input`, `forms::issues`.
//!      - `forms::app`: the new-app form. Imports `forms::input`, `forms::issues`.
//!      - `forms::webhook`: the webhook form (new or edited). Imports `forms::input`, `forms::issues`.
//!    - `schedule`: the schedule editor. Imports `forms::input`.
//!    - `spec`: the spec editor. Imports `format`, `effects`.
//!    - `keymap`: keys to commands, per context. Imports `effects`.
//! 3. `state`: the console's state and its one `update` function, no I/O. Imports layers 1 and 2; its own
//!    modules are layered the same way (listed in `state/mod.rs`), and `state::layout` holds the screen
//!    geometry that paging and clicks need and the views draw with.
//! 4. `views`: drawing, from `&State` only. Imports layers 1 to 3.
//! 5. The runtime: the terminal's and the server's I/O, and what it needs.
//!    - `clipboard`: the OSC 52 escape that puts a text on the clipboard. Imports nothing of the crate.
//!    - `reader`: the thread that reads the terminal's events as actions, key names, the gate that stops it
//!      while `$EDITOR` runs. Imports `keymap`, `state`.
//!    - `editor`: handing the terminal to `$EDITOR` on a temporary file. Imports `format`, `reader`.
//!    - `failures`: a failed call as the state takes it (the message, a refusal and its issues). Imports
//!      `state`.
//!    - `perform`: running effects against the server, one call (or a few) each. Imports `effects`,
//!      `state`, `failures`.
//!    - `event_loop`: the loop itself: actions in, `update`, effects run, a redraw when something changed.
//!      Imports everything below it.
//! 6. This file: [`run`] (the terminal set up and restored around the loop) and its [`Options`]. Imports
//!    everything.
//!
//! A module's own tests may use anything. `tests/console/layers.rs` checks the order.

mod clipboard;
pub mod columns;
mod editor;
pub mod effects;
mod event_loop;
mod failures;
pub mod format;
pub mod forms;
pub mod keymap;
pub mod natural;
pub mod pager;
mod perform;
mod reader;
pub mod schedule;
pub mod spec;
pub mod state;
pub mod views;

use chrono::Utc;
use ratatui::crossterm::event;
use switchyard_server::client::Client;

use event_loop::{event_loop, LoopOptions};
use keymap::Keymap;
use state::State;

pub use clipboard::osc52;
pub use perform::perform;
pub use reader::key_name;

/// What the console is started with: the server to talk to and how, and the user's settings.
pub struct Options {
    pub client: Client,
    /// Shown in the status line: `in-process` or the server's URL.
    pub server_label: String,
    pub read_only: bool,
    pub log_file: String,
    /// The user's keymap overrides, if the file exists.
    pub keymap_text: Option<String>,
    /// The `--server` URL and its token (`--token`, `SWITCHYARD_TOKEN`, the config dir's token file): `:server`
    /// to that same URL without a token uses it. It never goes to another server, and the in-process server's
    /// admin token never leaves the console.
    pub remote_token: Option<(String, String)>,
    /// Mouse support: the wheel scrolls, a click selects a row (the terminal's own selection then needs shift).
    pub mouse: bool,
    /// Tells why the in-process server stopped, if it stops on its own.
    pub server_stopped: Option<tokio::sync::oneshot::Receiver<String>>,
}

/// Runs the console until the user quits. The terminal is restored on every exit path, a panic included.
pub async fn run(options: Options) -> std::io::Result<()> {
    let (keymap, problems) = Keymap::with_overrides(options.keymap_text.as_deref());
    let mut state = State::new(
        options.server_label.clone(),
        options.read_only,
        Utc::now(),
        options.log_file.clone(),
    );
    state.keymap_problems = problems;
    // Raw mode and the alternate screen, with a panic hook that restores the terminal.
    let mut terminal = ratatui::try_init()?;
    if options.mouse {
        let _ = ratatui::crossterm::execute!(std::io::stdout(), event::EnableMouseCapture);
        // After ratatui's hook (which restores the terminal), mouse reporting is turned off too.
        let restore = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let _ = ratatui::crossterm::execute!(std::io::stdout(), event::DisableMouseCapture);
            restore(info);
        }));
    }
    let for_the_loop = LoopOptions {
        client: options.client,
        remote_token: options.remote_token,
        mouse: options.mouse,
        server_stopped: options.server_stopped,
    };
    let result = event_loop(&mut terminal, &mut state, &keymap, for_the_loop).await;
    let _ = ratatui::crossterm::execute!(std::io::stdout(), event::DisableMouseCapture);
    ratatui::restore();
    result
}
