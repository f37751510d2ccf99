//! The event loop: terminal events, a one-second tick, signals and API results come in as actions on one
//! channel; each goes through `update`, its effects run (API calls as tasks, the clipboard, `$EDITOR` and
//! the client in use here), and the screen is drawn again when something changed. Imports everything below
//! it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use switchyard_server::client::Client;
use tokio::sync::mpsc;

use crate::clipboard::copy_to_clipboard;
use crate::editor::{edit_externally, EDITING};
use crate::effects::Effect;
use crate::keymap::Keymap;
use crate::perform::perform;
use crate::reader::{read_input, InputGate, ALWAYS};
use crate::state::{self, Action, Key, State};
use crate::views;

/// What the loop takes of the console's options: the server it starts with and how the terminal is used.
pub(crate) struct LoopOptions {
    pub client: Client,
    /// The `--server` URL and its token, which `:server` to that same URL without a token uses.
    pub remote_token: Option<(String, String)>,
    /// Mouse support, turned on again after `$EDITOR`.
    pub mouse: bool,
    /// Tells why the in-process server stopped, if it stops on its own.
    pub server_stopped: Option<tokio::sync::oneshot::Receiver<String>>,
}

/// Runs the loop until the state says quit. The terminal is set up and restored by the caller.
pub(crate) async fn event_loop(
    terminal: &mut ratatui::DefaultTerminal,
    state: &mut State,
    keymap: &Keymap,
    mut options: LoopOptions,
) -> std::io::Result<()> {
    let home = options.client.clone();
    let mut client = options.client.clone();
    let gate = Arc::new(InputGate::default());
    // Every action carries the epoch it was asked in: answers from a server the console has left are dropped.
    let (tx, mut rx) = mpsc::unbounded_channel::<(u64, Action)>();
    start_feeds(&tx, &gate, options.server_stopped.take());
    if let Ok(size) = terminal.size() {
        state.size = (size.width, size.height);
    }
    // The catalog loads once signed in.
    spawn_effect(&client, Effect::SignIn, state.epoch, tx.clone());
    // The first frame at once; after it, a frame only when an action changed something on screen.
    terminal.draw(|f| views::draw(f, state, keymap))?;
    state.dirty = false;
    while let Some(first) = rx.recv().await {
        // Everything that is already waiting is applied before one redraw.
        let mut next = Some(first);
        while let Some((epoch, action)) = next {
            if epoch == ALWAYS || epoch == state.epoch {
                for effect in state::update(state, action, keymap) {
                    match effect {
                        // The terminal is ours: the clipboard escape is written here, not in a task.
                        Effect::Copy(text) => copy_to_clipboard(&text),
                        Effect::Connect(to) => {
                            client = client_for(to, &home, options.remote_token.as_ref())
                        }
                        Effect::ExternalEdit(edit, text) => {
                            let text = tokio::task::block_in_place(|| {
                                edit_externally(terminal, &gate, &text, edit.format, options.mouse)
                            });
                            state.dirty = true;
                            let _ = tx.send((ALWAYS, Action::ExternallyEdited(edit, text)));
                        }
                        other => spawn_effect(&client, other, state.epoch, tx.clone()),
                    }
                }
            }
            next = rx.try_recv().ok();
        }
        if state.quit {
            break;
        }
        if state.dirty {
            state.dirty = false;
            terminal.draw(|f| views::draw(f, state, keymap))?;
        }
    }
    Ok(())
}

/// Starts what feeds the loop, each sending on `tx`: the terminal's reading thread (behind `gate`), the
/// signals, the in-process server's stop and the tick.
fn start_feeds(
    tx: &mpsc::UnboundedSender<(u64, Action)>,
    gate: &Arc<InputGate>,
    server_stopped: Option<tokio::sync::oneshot::Receiver<String>>,
) {
    read_input(tx.clone(), gate.clone());
    #[cfg(unix)]
    quit_on_signals(tx.clone());
    if let Some(stopped) = server_stopped {
        report_server_stop(stopped, tx.clone());
    }
    tick_every_second(tx.clone());
}

/// SIGTERM, SIGHUP (a closed ssh session) and SIGINT quit like ctrl-c: the terminal and the server are put
/// back. SIGINT while `$EDITOR` has the terminal is the editor's (ctrl-c typed there reaches us too).
#[cfg(unix)]
fn quit_on_signals(tx: mpsc::UnboundedSender<(u64, Action)>) {
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut hup), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
            signal(SignalKind::interrupt()),
        ) else {
            return;
        };
        loop {
            tokio::select! {
                _ = term.recv() => break,
                _ = hup.recv() => break,
                _ = int.recv() => {
                    if !EDITING.load(Ordering::SeqCst) {
                        break;
                    }
                }
            }
        }
        let _ = tx.send((ALWAYS, Action::Key(Key("ctrl-c".into()))));
    });
}

/// Tells the state why the in-process server stopped, if it stops on its own.
fn report_server_stop(
    stopped: tokio::sync::oneshot::Receiver<String>,
    tx: mpsc::UnboundedSender<(u64, Action)>,
) {
    tokio::spawn(async move {
        if let Ok(why) = stopped.await {
            let _ = tx.send((ALWAYS, Action::ServerStopped(why)));
        }
    });
}

/// A tick every second, for the clock and the live lists.
fn tick_every_second(tx: mpsc::UnboundedSender<(u64, Action)>) {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(1));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            if tx.send((ALWAYS, Action::Tick(Utc::now()))).is_err() {
                break;
            }
        }
    });
}

/// The client for `:server`: another server's URL with its token (given, or the `--server` one's when the URL
/// is that same server), or `None` for the one the console started with.
fn client_for(
    to: Option<(String, Option<String>)>,
    home: &Client,
    remote_token: Option<&(String, String)>,
) -> Client {
    match to {
        Some((url, token)) => {
            let known =
                remote_token.filter(|(u, _)| u.trim_end_matches('/') == url.trim_end_matches('/'));
            Client::new(&url, token.or(known.map(|(_, t)| t.clone())))
        }
        None => home.clone(),
    }
}

/// Runs an API effect as a task; its action comes back with the epoch it was asked in.
fn spawn_effect(
    client: &Client,
    effect: Effect,
    epoch: u64,
    tx: mpsc::UnboundedSender<(u64, Action)>,
) {
    let client = client.clone();
    tokio::spawn(async move {
        if let Some(action) = perform(&client, effect).await {
            let _ = tx.send((epoch, action));
        }
    });
}
