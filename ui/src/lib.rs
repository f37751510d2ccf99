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
//!    - `form_issues`: a form's issues, placed beside its fields. Imports nothing of the crate.
//!    - `form_input`: what the forms share: the edits a key asks for, typing into a field, sending and the
//!      server's answer. Imports `form_issues`.
//!    - `form`: the deploy form. Imports `effects`, `form_input`, `form_issues`.
//!    - `app_form`: the new-app form. Imports `form_input`, `form_issues`.
//!    - `webhook_form`: the webhook form (new or edited). Imports `form_input`, `form_issues`.
//!    - `schedule`: the schedule editor. Imports `form_input`.
//!    - `spec`: the spec editor. Imports `format`, `effects`.
//!    - `keymap`: keys to commands, per context. Imports `effects`.
//! 3. `state`: the console's state and its one `update` function, no I/O. Imports layers 1 and 2; its own
//!    modules are layered the same way (listed in `state/mod.rs`), and `state::layout` holds the screen
//!    geometry that paging and clicks need and the views draw with.
//! 4. `views`: drawing, from `&State` only. Imports layers 1 to 3.
//! 5. This file: the event loop, the terminal, `$EDITOR` and running effects against the server. Imports
//!    everything.
//!
//! A module's own tests may use anything. `tests/console/layers.rs` checks the order.

pub mod app_form;
pub mod columns;
pub mod effects;
pub mod form;
pub mod form_input;
pub mod form_issues;
pub mod format;
pub mod keymap;
pub mod natural;
pub mod pager;
pub mod schedule;
pub mod spec;
pub mod state;
pub mod views;
pub mod webhook_form;

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use chrono::Utc;
use ratatui::crossterm::event::{
    self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers, MouseButton, MouseEventKind,
};
use serde_json::Value;
use switchyard_server::client::{Client, ClientError};
use tokio::sync::mpsc;

use effects::{AppAction, DeployRequest, Effect, EndpointAction, WebhookAction};
use keymap::Keymap;
use state::{
    Action, AppRow, AuditRow, CreatedApp, DeliveryRow, EndpointRow, IssuedSecret, Key, LoadFailure,
    NotificationRow, NotificationsFailure, SavedWebhook, Secret, ServerRow, SignInFailure, State,
    WebhookRow,
};

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

/// A key as the keymap names it.
pub fn key_name(ev: &KeyEvent) -> Option<String> {
    let name = match ev.code {
        KeyCode::Char(c) if ev.modifiers.contains(KeyModifiers::CONTROL) => {
            format!("ctrl-{}", c.to_ascii_lowercase())
        }
        KeyCode::Char(' ') => "space".into(),
        KeyCode::Char(c) => c.to_string(),
        KeyCode::F(n) => format!("f{n}"),
        code => keymap::NAMED_KEYS
            .iter()
            .find(|(named, _)| *named == code)?
            .1
            .to_string(),
    };
    Some(name)
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
    let result = event_loop(&mut terminal, &mut state, &keymap, options).await;
    let _ = ratatui::crossterm::execute!(std::io::stdout(), event::DisableMouseCapture);
    ratatui::restore();
    result
}

/// Lets the event loop take the terminal's input away from the reading thread while `$EDITOR` runs.
#[derive(Default)]
struct InputGate {
    /// (pause asked, paused)
    state: Mutex<(bool, bool)>,
    changed: Condvar,
}

impl InputGate {
    /// Called by the reading thread between reads: parks while a pause is asked.
    fn wait_if_paused(&self) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        while s.0 {
            s.1 = true;
            self.changed.notify_all();
            s = match self.changed.wait(s) {
                Ok(s) => s,
                Err(_) => return,
            };
        }
        s.1 = false;
    }

    /// Returns once the reading thread is parked.
    fn pause(&self) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        s.0 = true;
        while !s.1 {
            s = match self.changed.wait_timeout(s, Duration::from_secs(1)) {
                Ok((s, _)) => s,
                Err(_) => return,
            };
        }
    }

    fn resume(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.0 = false;
            self.changed.notify_all();
        }
    }
}

/// Terminal events become actions on a thread of their own. The thread checks the gate between short polls,
/// so it can be stopped without losing a key to it.
fn read_input(tx: mpsc::UnboundedSender<(u64, Action)>, gate: Arc<InputGate>) {
    std::thread::spawn(move || loop {
        gate.wait_if_paused();
        let action = match event::poll(Duration::from_millis(200)) {
            Ok(false) => continue,
            Ok(true) => match event::read() {
                Ok(Event::Key(k)) if k.kind != KeyEventKind::Release => {
                    key_name(&k).map(|n| Action::Key(Key(n)))
                }
                Ok(Event::Resize(w, h)) => Some(Action::Resize(w, h)),
                Ok(Event::Mouse(m)) => match m.kind {
                    MouseEventKind::ScrollDown => Some(Action::Wheel(true)),
                    MouseEventKind::ScrollUp => Some(Action::Wheel(false)),
                    MouseEventKind::Down(MouseButton::Left) => Some(Action::Click(m.row)),
                    _ => None,
                },
                Ok(_) => None,
                Err(_) => Some(Action::Key(Key("ctrl-c".into()))),
            },
            // No more input: quit rather than run on deaf.
            Err(_) => Some(Action::Key(Key("ctrl-c".into()))),
        };
        if let Some(a) = action {
            if tx.send((ALWAYS, a)).is_err() {
                break;
            }
        }
    });
}

/// The epoch of actions that do not come from a server (keys, ticks): never dropped.
const ALWAYS: u64 = u64::MAX;

/// `$EDITOR` has the terminal: a SIGINT is meant for it.
static EDITING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

async fn event_loop(
    terminal: &mut ratatui::DefaultTerminal,
    state: &mut State,
    keymap: &Keymap,
    mut options: Options,
) -> std::io::Result<()> {
    let home = options.client.clone();
    let mut client = options.client.clone();
    // Every action carries the epoch it was asked in: answers from a server the console has left are dropped.
    let (tx, mut rx) = mpsc::unbounded_channel::<(u64, Action)>();
    let gate = Arc::new(InputGate::default());
    read_input(tx.clone(), gate.clone());
    #[cfg(unix)]
    quit_on_signals(tx.clone());
    if let Some(stopped) = options.server_stopped.take() {
        report_server_stop(stopped, tx.clone());
    }
    tick_every_second(tx.clone());
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
                    if !EDITING.load(std::sync::atomic::Ordering::SeqCst) {
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

/// `$VISUAL`, else `$EDITOR`, else `vi`, on a private temporary file holding `text`; the console gives the
/// terminal to it and takes it back after. Returns the text the editor left, or why there is none.
fn edit_externally(
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
    EDITING.store(true, std::sync::atomic::Ordering::SeqCst);
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("switchyard")
        .arg(&path)
        .status();
    EDITING.store(false, std::sync::atomic::Ordering::SeqCst);
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

/// Whether the server refused the token (401 or 403), as opposed to failing in some other way.
fn refused_token(e: &ClientError) -> bool {
    matches!(e, ClientError::Api { status, .. } if status.as_u16() == 401 || status.as_u16() == 403)
}

fn sign_in_failure(e: &ClientError) -> SignInFailure {
    match refused_token(e) {
        true => SignInFailure::Refused(message(e)),
        false => SignInFailure::Unreachable(message(e)),
    }
}

/// A client error for the screen; a refusal of the token starts with its status (`401 …`).
fn message(e: &ClientError) -> String {
    match e {
        ClientError::Api {
            status, message, ..
        } if refused_token(e) => format!("{} {message}", status.as_u16()),
        ClientError::Api { message, .. } => message.clone(),
        // Already says where and why (`nothing answers at URL (Connection refused…)`).
        ClientError::Transport(why) => why.clone(),
        other => other.to_string(),
    }
}

/// The OSC 52 sequence that asks the terminal to put `text` on the clipboard.
pub fn osc52(text: &str) -> String {
    use base64::Engine;
    format!(
        "\x1b]52;c;{}\x07",
        base64::engine::general_purpose::STANDARD.encode(text)
    )
}

fn copy_to_clipboard(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout();
    let _ = out
        .write_all(osc52(text).as_bytes())
        .and_then(|()| out.flush());
}

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

/// A refusal as the screen shows it: the message and every issue of the answer, the `{path, message}` items of
/// `issues` (an invalid body) and the `{field: why}` of `details` (invalid parameters).
fn refusal(e: &ClientError) -> state::Refusal {
    match e {
        ClientError::Api { message, body, .. } => {
            let text = |v: &Value| match v {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            let listed = body["issues"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|i| (text(&i["path"]), text(&i["message"])));
            let detailed = body["details"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(field, why)| (field.clone(), text(why)));
            (message.clone(), listed.chain(detailed).collect())
        }
        other => (message(other), Vec::new()),
    }
}

/// Runs one effect against the server; `None` for the effects the event loop runs itself (it owns the
/// terminal and the client).
pub async fn perform(client: &Client, effect: Effect) -> Option<Action> {
    Some(match effect {
        Effect::SignIn => Action::SignedIn(sign_in(client).await.map_err(|e| sign_in_failure(&e))),
        // Done by the event loop itself, which owns the terminal and the client.
        Effect::Copy(_) | Effect::Connect(_) | Effect::ExternalEdit(..) => return None,
        Effect::Deploy(request) => deploy(client, request).await,
        Effect::LoadEngines { delay, polled } => {
            pause(delay).await;
            let result = client
                .engines::<Value>()
                .await
                .map(|v| state::EngineMarks::from_json(&v))
                .map_err(|e| e.to_string());
            Action::EnginesLoaded { polled, result }
        }
        Effect::InstallEngine { name, .. } => Action::EngineInstallStarted(
            client
                .install_engine::<Value>(&name)
                .await
                .map(|_| name)
                .map_err(|e| e.to_string()),
        ),
        Effect::Update {
            namespace,
            name,
            patch,
        } => {
            let result = client
                .update_endpoint::<Value>(&namespace, &name, &patch)
                .await
                .map(|_| String::new())
                .map_err(|e| refusal(&e));
            Action::Saved {
                namespace,
                name,
                result,
            }
        }
        Effect::LoadLogs { namespace, name } => {
            let text = client
                .endpoint_logs(&namespace, &name, 500)
                .await
                .map_err(|e| message(&e));
            Action::LogsLoaded {
                namespace,
                name,
                text,
            }
        }
        Effect::LoadCatalog(seq, filters) => load_catalog(client, seq, &filters).await,
        Effect::LoadEndpoints(seq, namespaces) => load_endpoints(client, seq, &namespaces).await,
        Effect::Act {
            action,
            namespace,
            name,
        } => act(client, action, &namespace, &name).await,
        Effect::LoadApps(seq, owner) => Action::AppsLoaded(
            seq,
            client
                .oauth_apps::<Value>(owner.as_deref())
                .await
                .map(|v| rows_of(&v, AppRow::from_json))
                .map_err(|e| load_failure(&e)),
        ),
        Effect::LoadAudit(seq, org) => Action::AuditLoaded(
            seq,
            client
                .audit_log::<Value>(&org)
                .await
                .map(|v| rows_of(&v, AuditRow::from_json))
                .map_err(|e| load_failure(&e)),
        ),
        Effect::CreateApp(body) => Action::AppCreated(
            client
                .create_oauth_app::<Value>(&body)
                .await
                .map(|v| CreatedApp {
                    name: v["app"]["name"].as_str().unwrap_or("").to_string(),
                    client_id: v["app"]["id"].as_str().unwrap_or("").to_string(),
                    secret: secret_of(&v),
                })
                .map_err(|e| refusal(&e)),
        ),
        Effect::AppAct { action, id, name } => app_act(client, action, id, name).await,
        Effect::LoadWebhooks(seq) => Action::WebhooksLoaded(
            seq,
            client
                .webhooks::<Value>()
                .await
                .map(|v| rows_of(&v, WebhookRow::from_json))
                .map_err(|e| load_failure(&e)),
        ),
        Effect::SaveWebhook { id, body } => {
            let answer = match &id {
                Some(id) => client.update_webhook::<Value>(id, &body).await,
                None => client.create_webhook::<Value>(&body).await,
            };
            Action::WebhookSaved(answer.map(|v| saved_webhook(&v)).map_err(|e| refusal(&e)))
        }
        Effect::LoadWebhook { feed, id } => Action::WebhookLoaded {
            feed,
            result: load_webhook(client, &id).await,
        },
        Effect::WebhookAct { action, id, url } => webhook_act(client, action, &id, &url).await,
        Effect::FollowDeliveries {
            feed,
            id,
            after,
            wait,
            delay,
        } => {
            pause(delay).await;
            let wait = after.map(|_| wait).filter(|w| *w > 0);
            Action::DeliveriesLoaded {
                feed,
                result: client
                    .webhook_deliveries::<Value>(&id, after, None, wait)
                    .await
                    .map(|v| rows_of(&v, DeliveryRow::from_json))
                    .map_err(|e| message(&e)),
            }
        }
        Effect::ReplayDelivery { id, delivery } => Action::Replayed(
            client
                .replay_delivery::<Value>(&id, &delivery)
                .await
                .map(|v| {
                    format!(
                        "replayed delivery {delivery}: new delivery {}",
                        v["deliveryId"].as_str().unwrap_or("?")
                    )
                })
                .map_err(|e| format!("replaying delivery {delivery}: {}", message(&e))),
        ),
        Effect::FollowNotifications { after, wait, delay } => {
            pause(delay).await;
            let wait = after.map(|_| wait).filter(|w| *w > 0);
            Action::NotificationsLoaded(
                client
                    .notifications::<Value>(after, None, wait)
                    .await
                    .map(|v| rows_of(&v, NotificationRow::from_json))
                    .map_err(|e| match e.status() {
                        Some(s) if s.as_u16() == 404 => NotificationsFailure::Unsupported,
                        _ => NotificationsFailure::Failed(message(&e)),
                    }),
            )
        }
        Effect::LoadServers { delay } => {
            pause(delay).await;
            Action::ServersLoaded(
                client
                    .admin_servers::<Value>()
                    .await
                    .map(|v| rows_of(&v, ServerRow::from_json))
                    .map_err(|e| servers_failure(&e)),
            )
        }
    })
}

/// Waits `seconds` before a poll (a failed one backs off).
async fn pause(seconds: u64) {
    if seconds > 0 {
        tokio::time::sleep(Duration::from_secs(seconds)).await;
    }
}

/// A confirmed action on a webhook: its message, or why it failed.
async fn webhook_act(client: &Client, action: WebhookAction, id: &str, url: &str) -> Action {
    let result = match action {
        WebhookAction::Delete => client.delete_webhook(id).await,
        WebhookAction::Enable | WebhookAction::Disable => client
            .set_webhook_enabled::<Value>(id, action == WebhookAction::Enable)
            .await
            .map(|_| ()),
    };
    let verb = action.verb();
    Action::Done(
        result
            .map(|()| format!("{verb}d webhook {url}"))
            .map_err(|e| format!("{verb} webhook {url}: {}", message(&e))),
    )
}

/// The rows of a JSON array.
fn rows_of<T>(v: &Value, row: impl Fn(&Value) -> T) -> Vec<T> {
    v.as_array().into_iter().flatten().map(row).collect()
}

/// Why a list could not be loaded; a 403 is the server not letting the user see it.
fn load_failure(e: &ClientError) -> LoadFailure {
    match e {
        ClientError::Api {
            status, message, ..
        } if status.as_u16() == 403 => LoadFailure::Forbidden(message.clone()),
        other => LoadFailure::Failed(message(other)),
    }
}

/// Why the servers on the store could not be read; a 401 or 403 is the user not being an instance
/// administrator (the console stops asking).
fn servers_failure(e: &ClientError) -> LoadFailure {
    match refused_token(e) {
        true => LoadFailure::Forbidden(message(e)),
        false => LoadFailure::Failed(message(e)),
    }
}

/// One webhook, read again (whether it is held, and why).
async fn load_webhook(client: &Client, id: &str) -> Result<WebhookRow, String> {
    client
        .webhook::<Value>(id)
        .await
        .map(|v| WebhookRow::from_json(&v["webhook"]))
        .map_err(|e| message(&e))
}

/// The webhook in the form's answer, with the signing secret a new one comes with (in that answer only).
fn saved_webhook(answer: &Value) -> SavedWebhook {
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    SavedWebhook {
        id: text(&answer["webhook"]["id"]),
        url: text(&answer["webhook"]["url"]),
        signing_secret: answer["signingSecret"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(|s| Secret::new(s.to_string())),
    }
}

/// The secret in an answer about an app, if the server made one (it is in that answer only).
fn secret_of(answer: &Value) -> Option<Secret> {
    answer["clientSecret"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(|s| Secret::new(s.to_string()))
}

/// A confirmed action on an OAuth app: a rotated secret to show once, or a message.
async fn app_act(client: &Client, action: AppAction, id: String, name: String) -> Action {
    let done = match action {
        AppAction::RotateSecret => match client.oauth_app_secret::<Value>(&id, true).await {
            Ok(v) => match secret_of(&v) {
                Some(secret) => {
                    return Action::SecretIssued(IssuedSecret::client(name, id, secret))
                }
                None => Err("the server sent no new secret".to_string()),
            },
            Err(e) => Err(message(&e)),
        },
        AppAction::DeleteSecret => client
            .oauth_app_secret::<Value>(&id, false)
            .await
            .map(|_| format!("deleted the secret of {name}: it is a public app now"))
            .map_err(|e| message(&e)),
        AppAction::Delete => client
            .delete_oauth_app(&id)
            .await
            .map(|()| format!("deleted app {name}"))
            .map_err(|e| message(&e)),
    };
    let verb = match action {
        AppAction::RotateSecret => "rotating the secret of",
        AppAction::DeleteSecret => "deleting the secret of",
        AppAction::Delete => "deleting",
    };
    Action::Done(done.map_err(|e| format!("{verb} {name}: {e}")))
}

/// A deploy form's request: the new endpoint's `namespace/name`, or the server's refusal.
async fn deploy(client: &Client, request: DeployRequest) -> Action {
    let namespace = request.body["namespace"].as_str().unwrap_or("").to_string();
    let answer = match &request.target {
        Ok(repo_id) => client.deploy_model::<Value>(repo_id, &request.body).await,
        Err(recipe) => client.deploy_recipe::<Value>(recipe, &request.body).await,
    };
    Action::Deployed(
        answer
            .map(|v| {
                format!(
                    "{namespace}/{}",
                    v["endpoint"]["name"].as_str().unwrap_or("")
                )
            })
            .map_err(|e| refusal(&e)),
    )
}

/// The catalog, with the API's filters.
async fn load_catalog(client: &Client, seq: u64, filters: &[(String, String)]) -> Action {
    Action::CatalogLoaded(
        seq,
        client
            .catalog_list::<Value>(
                &filters
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect::<Vec<_>>(),
            )
            .await
            .map(|v| {
                v["items"]
                    .as_array()
                    .map(|items| items.iter().map(state::CatalogRow::from_json).collect())
                    .unwrap_or_default()
            })
            .map_err(|e| message(&e)),
    )
}

/// The endpoints of every namespace, one list call each.
async fn load_endpoints(client: &Client, seq: u64, namespaces: &[String]) -> Action {
    let mut rows = Vec::new();
    for ns in namespaces {
        match client.list_endpoints::<Value>(ns).await {
            Ok(v) => rows.extend(
                v["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|e| EndpointRow::from_json(ns, e)),
            ),
            // A namespace that went away, or lost access: skip it.
            Err(ClientError::Api { .. }) => {}
            Err(e) => return Action::EndpointsLoaded(seq, Err(message(&e))),
        }
    }
    Action::EndpointsLoaded(seq, Ok(rows))
}

/// A confirmed lifecycle action on an endpoint: its message, or why it failed.
async fn act(client: &Client, action: EndpointAction, namespace: &str, name: &str) -> Action {
    let result = match action {
        EndpointAction::Delete => client
            .delete_endpoint(namespace, name)
            .await
            .map(|_| "deleted".to_string()),
        other => client
            .endpoint_action::<Value>(namespace, name, other.verb())
            .await
            .map(|ep| ep["status"]["state"].as_str().unwrap_or("").to_string()),
    };
    Action::Done(
        result
            .map(|s| format!("{} {namespace}/{name}: {s}", action.verb()))
            .map_err(|e| format!("{} {namespace}/{name}: {}", action.verb(), message(&e))),
    )
}

/// The signed-in user and the namespaces to list: their own and their organizations', or, for an instance
/// administrator, every user's and organization's.
async fn sign_in(client: &Client) -> Result<(String, Vec<String>), ClientError> {
    let me: Value = client.whoami().await?;
    let name = me["name"].as_str().unwrap_or("").to_string();
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a["name"].as_str().map(str::to_string))
            .collect()
    };
    let mut others = names(&me["orgs"]);
    if me["isAdmin"] == true {
        if let (Ok(users), Ok(orgs)) = (
            client.admin_list_users::<Value>().await,
            client.admin_list_orgs::<Value>().await,
        ) {
            others = names(&users)
                .into_iter()
                .chain(names(&orgs))
                .filter(|n| *n != name)
                .collect();
        }
    }
    Ok((name, others))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clipboard_escape() {
        assert_eq!(osc52("http://x"), "\x1b]52;c;aHR0cDovL3g=\x07");
    }
}
