//! `switchyard-ui`: the operator console. One loop: terminal events, a one-second tick and API results all
//! become [`state::Action`]s; [`state::update`] changes the state and names the API calls to make, which run
//! as tasks through the typed client (`switchyard_server::client`) and report back as actions; the screen is
//! drawn from the state, only after something changed.
//!
//! The console talks to the server only over HTTP, so the in-process and the remote cases are one path.

pub mod form;
pub mod keymap;
pub mod schedule;
pub mod spec;
pub mod state;
pub mod views;

use std::time::Duration;

use chrono::Utc;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use serde_json::Value;
use switchyard_server::client::{Client, ClientError};
use tokio::sync::mpsc;

use keymap::Keymap;
use state::{Action, Effect, EndpointAction, EndpointRow, Key, State};

pub struct Options {
    pub client: Client,
    /// Shown in the status line: `in-process` or the server's URL.
    pub server_label: String,
    pub read_only: bool,
    pub log_file: String,
    /// The user's keymap overrides, if the file exists.
    pub keymap_text: Option<String>,
}

/// A key as the keymap names it.
pub fn key_name(ev: &KeyEvent) -> Option<String> {
    let base = match ev.code {
        KeyCode::Char(c) if ev.modifiers.contains(KeyModifiers::CONTROL) => {
            return Some(format!("ctrl-{}", c.to_ascii_lowercase()))
        }
        KeyCode::Char(' ') => "space".into(),
        KeyCode::Char(c) => c.to_string(),
        KeyCode::Enter => "enter".into(),
        KeyCode::Esc => "esc".into(),
        KeyCode::Tab => "tab".into(),
        KeyCode::BackTab => "backtab".into(),
        KeyCode::Backspace => "backspace".into(),
        KeyCode::Up => "up".into(),
        KeyCode::Down => "down".into(),
        KeyCode::Left => "left".into(),
        KeyCode::Right => "right".into(),
        KeyCode::Home => "home".into(),
        KeyCode::End => "end".into(),
        KeyCode::PageUp => "pageup".into(),
        KeyCode::PageDown => "pagedown".into(),
        KeyCode::Delete => "delete".into(),
        KeyCode::F(n) => format!("f{n}"),
        _ => return None,
    };
    Some(base)
}

/// Runs the console until the user quits. The terminal is restored on every exit path, a panic included.
pub async fn run(options: Options) -> std::io::Result<()> {
    let (keymap, problems) = Keymap::with_overrides(options.keymap_text.as_deref());
    let mut state = State::new(
        options.server_label,
        options.read_only,
        Utc::now(),
        options.log_file,
    );
    state.keymap_problems = problems;
    // Raw mode and the alternate screen, with a panic hook that restores the terminal.
    let mut terminal = ratatui::try_init()?;
    let result = event_loop(&mut terminal, &mut state, &keymap, options.client).await;
    ratatui::restore();
    result
}

async fn event_loop(
    terminal: &mut ratatui::DefaultTerminal,
    state: &mut State,
    keymap: &Keymap,
    client: Client,
) -> std::io::Result<()> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Action>();
    // Terminal events are read on a thread of their own (the read blocks).
    let keys = tx.clone();
    std::thread::spawn(move || loop {
        let action = match event::read() {
            Ok(Event::Key(k)) if k.kind != KeyEventKind::Release => {
                key_name(&k).map(|n| Action::Key(Key(n)))
            }
            Ok(Event::Resize(..)) => Some(Action::Resize),
            Ok(_) => None,
            // No more input: quit rather than run on deaf.
            Err(_) => Some(Action::Key(Key("ctrl-c".into()))),
        };
        if let Some(a) = action {
            if keys.send(a).is_err() {
                break;
            }
        }
    });
    // SIGTERM and SIGHUP (a closed ssh session) quit like ctrl-c: the terminal and the server are put back.
    #[cfg(unix)]
    {
        let signals = tx.clone();
        tokio::spawn(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let (Ok(mut term), Ok(mut hup)) = (
                signal(SignalKind::terminate()),
                signal(SignalKind::hangup()),
            ) else {
                return;
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = hup.recv() => {}
            }
            let _ = signals.send(Action::Key(Key("ctrl-c".into())));
        });
    }
    let ticks = tx.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(1));
        loop {
            every.tick().await;
            if ticks.send(Action::Tick(Utc::now())).is_err() {
                break;
            }
        }
    });
    // The catalog loads once signed in.
    spawn_effect(&client, Effect::SignIn, tx.clone());
    terminal.draw(|f| views::draw(f, state, keymap))?;
    while let Some(first) = rx.recv().await {
        // Everything that is already waiting is applied before one redraw.
        let mut next = Some(first);
        while let Some(action) = next {
            for effect in state::update(state, action, keymap) {
                match effect {
                    // The terminal is ours: the clipboard escape is written here, not in a task.
                    Effect::Copy(text) => copy_to_clipboard(&text),
                    other => spawn_effect(&client, other, tx.clone()),
                }
            }
            next = rx.try_recv().ok();
        }
        if state.quit {
            break;
        }
        terminal.draw(|f| views::draw(f, state, keymap))?;
    }
    Ok(())
}

/// A client error for the screen; a refusal of the token starts with its status (`401 …`), which `update`
/// tells from a lost server.
fn message(e: &ClientError) -> String {
    match e {
        ClientError::Api {
            status, message, ..
        } if status.as_u16() == 401 || status.as_u16() == 403 => {
            format!("{} {message}", status.as_u16())
        }
        ClientError::Api { message, .. } => message.clone(),
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

fn spawn_effect(client: &Client, effect: Effect, tx: mpsc::UnboundedSender<Action>) {
    let client = client.clone();
    tokio::spawn(async move {
        let action = perform(&client, effect).await;
        let _ = tx.send(action);
    });
}

/// Runs one effect against the server.
pub async fn perform(client: &Client, effect: Effect) -> Action {
    match effect {
        Effect::SignIn => Action::SignedIn(sign_in(client).await.map_err(|e| message(&e))),
        // Done by the event loop itself.
        Effect::Copy(text) => Action::Done(Ok(format!("copied {text}"))),
        Effect::Deploy(request) => {
            let namespace = request.body["namespace"].as_str().unwrap_or("").to_string();
            let answer = match &request.target {
                Ok(repo_id) => client.deploy_model::<Value>(repo_id, &request.body).await,
                Err(recipe) => client.deploy_recipe::<Value>(recipe, &request.body).await,
            };
            Action::Deployed(match answer {
                Ok(v) => Ok(format!(
                    "{namespace}/{}",
                    v["endpoint"]["name"].as_str().unwrap_or("")
                )),
                Err(ClientError::Api { message, body, .. }) => {
                    let issues = body["issues"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|i| {
                            let s = |k: &str| i[k].as_str().unwrap_or("").to_string();
                            (s("path"), s("message"))
                        })
                        .collect();
                    Err((message, issues))
                }
                Err(e) => Err((message(&e), Vec::new())),
            })
        }
        Effect::Update {
            namespace,
            name,
            patch,
            what,
        } => Action::Done(
            client
                .update_endpoint::<Value>(&namespace, &name, &patch)
                .await
                .map(|_| format!("saved the {what} of {namespace}/{name}"))
                .map_err(|e| format!("saving the {what} of {namespace}/{name}: {}", message(&e))),
        ),
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
        Effect::LoadCatalog(filters) => Action::CatalogLoaded(
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
        ),
        Effect::LoadEndpoints(namespaces) => {
            let mut rows = Vec::new();
            for ns in &namespaces {
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
                    Err(e) => return Action::EndpointsLoaded(Err(message(&e))),
                }
            }
            Action::EndpointsLoaded(Ok(rows))
        }
        Effect::Act {
            action,
            namespace,
            name,
        } => {
            let result = match action {
                EndpointAction::Delete => client
                    .delete_endpoint(&namespace, &name)
                    .await
                    .map(|_| "deleted".to_string()),
                other => client
                    .endpoint_action::<Value>(&namespace, &name, other.verb())
                    .await
                    .map(|ep| ep["status"]["state"].as_str().unwrap_or("").to_string()),
            };
            Action::Done(
                result
                    .map(|s| format!("{} {namespace}/{name}: {s}", action.verb()))
                    .map_err(|e| format!("{} {namespace}/{name}: {}", action.verb(), message(&e))),
            )
        }
    }
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
