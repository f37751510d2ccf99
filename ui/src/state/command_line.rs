//! The `:` command line: typing it, running it, and showing it with a `:server` token masked.
//!
//! The commands are `:catalog [filters]` (alone: no filters), `:endpoints`, `:apps [OWNER]`, `:audit ORG`, `:webhooks`,
//! `:notifications`, `:server [URL [TOKEN]]`, `:help` and `:q`.

use super::action::type_into;
use super::apps::{show_apps, show_audit};
use super::connection::connect;
use super::lists::{show_catalog, switch};
use super::model::{State, View};
use super::overlay::Overlay;
use crate::effects::Effect;

/// A key while the command line is open: `enter` runs it, `esc` drops it.
pub(super) fn on_key(state: &mut State, key: &str) -> Vec<Effect> {
    let Overlay::Command(text) = &mut state.overlay else {
        return Vec::new();
    };
    match key {
        "esc" => state.overlay = Overlay::None,
        "enter" => {
            let cmd = text.trim().to_string();
            state.overlay = Overlay::None;
            return run(state, &cmd);
        }
        other => type_into(text, other),
    }
    Vec::new()
}

/// The command line as shown: whatever follows the URL of `:server URL` (a token) is masked, split the way
/// the command itself splits it.
pub fn shown_command(text: &str) -> String {
    let mut words = text.split_whitespace();
    if words.next() != Some("server") {
        return text.to_string();
    }
    let Some(url) = words.next() else {
        return text.to_string();
    };
    let after_url = text.find(url).map_or(text.len(), |i| i + url.len());
    let masked: String = text[after_url..]
        .chars()
        .map(|c| if c.is_whitespace() { c } else { '•' })
        .collect();
    format!("{}{masked}", &text[..after_url])
}

fn run(state: &mut State, cmd: &str) -> Vec<Effect> {
    match cmd {
        "q" | "quit" | "q!" => {
            state.quit = true;
            Vec::new()
        }
        // Alone, the whole catalog again: no filters.
        "catalog" | "cat" => show_catalog(state, Vec::new()),
        c if c.starts_with("catalog ") => filtered_catalog(state, &c["catalog ".len()..]),
        "endpoints" | "ep" | "endpoint" => switch(state, View::Endpoints),
        "webhooks" | "webhook" | "hooks" | "wh" => switch(state, View::Webhooks),
        "notifications" | "notification" | "notif" => switch(state, View::Notifications),
        "apps" | "app" => show_apps(state, None),
        c if c.starts_with("apps ") => match one_word(&c["apps ".len()..]) {
            Some(owner) => show_apps(state, Some(owner)),
            None => usage(
                state,
                ":apps [OWNER]: one namespace, yours or an organization you administer",
            ),
        },
        c if c == "audit" || c.starts_with("audit ") => match one_word(&c["audit".len()..]) {
            Some(org) => show_audit(state, org),
            None => usage(
                state,
                ":audit ORG: the audit log of an organization you administer",
            ),
        },
        "help" => {
            state.overlay = Overlay::Help(0);
            Vec::new()
        }
        // `:server` goes back to the server the console started with.
        "server" => {
            let home = state.home.clone();
            state.message = Some((format!("back to {home}"), false));
            connect(state, home, None)
        }
        c if c.starts_with("server ") => other_server(state, &c["server ".len()..]),
        // Debug builds only: the terminal must come back after a panic, and a test checks that it does.
        #[cfg(debug_assertions)]
        "panic" => panic!("the console was asked to panic (:panic, debug builds only)"),
        other => {
            state.message = Some((
                format!("unknown command :{other} (try :catalog, :endpoints, :apps, :audit ORG, :webhooks, :notifications, :server, :q)"),
                true,
            ));
            Vec::new()
        }
    }
}

/// The one word of `words`, if there is exactly one.
fn one_word(words: &str) -> Option<String> {
    let mut words = words.split_whitespace();
    match (words.next(), words.next()) {
        (Some(w), None) => Some(w.to_string()),
        _ => None,
    }
}

fn usage(state: &mut State, text: &str) -> Vec<Effect> {
    state.message = Some((format!("usage: {text}"), true));
    Vec::new()
}

/// `:catalog task=text-generation accelerator=gpu limit=10`: the API's own filters.
fn filtered_catalog(state: &mut State, words: &str) -> Vec<Effect> {
    let mut filters = Vec::new();
    for word in words.split_whitespace() {
        match word.split_once('=') {
            Some((k, v)) => filters.push((k.to_string(), v.to_string())),
            None => {
                state.message = Some((
                    format!("{word}: filters are key=value (accelerator, engine, license, task, search, limit)"),
                    true,
                ));
                return Vec::new();
            }
        }
    }
    show_catalog(state, filters)
}

/// `:server URL [TOKEN]`: another server; without a token, the one the console started with.
fn other_server(state: &mut State, words: &str) -> Vec<Effect> {
    let mut words = words.split_whitespace();
    let url = words.next().unwrap_or("").trim_end_matches('/').to_string();
    let token = words.next().map(str::to_string);
    if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() < 10 {
        state.message = Some((
            format!("{url}: a server is an http:// or https:// URL (:server URL [TOKEN])"),
            true,
        ));
        return Vec::new();
    }
    state.message = Some((format!("switched to {url}"), false));
    connect(state, url.clone(), Some((url, token)))
}
