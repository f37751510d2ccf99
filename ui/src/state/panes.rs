//! Describe and logs, the panes over the list: opening them, scrolling, searching and following.
//!
//! A replica's output comes in made printable; followed logs pause when scrolled away from their end, like
//! `less +F`. Empty logs say why they are empty.

use super::action::type_into;
use super::layout::pager_window;
use super::model::{State, View};
use super::overlay::Overlay;
use super::rows::{CatalogRow, EndpointRow, Recipe, ReplicaLoad};
use crate::effects::Effect;
use crate::keymap::Command;
use crate::pager::{Pager, Window};
use crate::schedule::minute_of_day;

/// The selected row described: a model's recipes, an endpoint's summary and whole resource, an app's, an
/// audit entry's, an attempt's (the request sent and the answer) or a notification's details.
pub(super) fn describe(state: &mut State) {
    let rows = state.visible();
    let Some(&i) = rows.get(state.selected) else {
        return;
    };
    let (title, text) = match state.view {
        View::Catalog => {
            let item = &state.catalog[i];
            (item.repo_id.clone(), recipes(state, item))
        }
        View::Endpoints => {
            let ep = &state.endpoints[i];
            let replicas = match &state.replicas {
                Some((ns, name, loaded)) if *ns == ep.namespace && *name == ep.name => match loaded
                {
                    Ok(list) if list.is_empty() => "(none ready)\n".to_string(),
                    Ok(list) => ReplicaLoad::table(list),
                    Err(e) => format!("(not read: {e})\n"),
                },
                _ => "(reading…)\n".to_string(),
            };
            let decisions = state.charts.decisions_text(&ep.namespace, &ep.name);
            let text = format!(
                "{}\nready replicas (queue and kv cache: the engine's own, as last read):\n{replicas}\ndecisions, newest first:\n{decisions}\nthe whole resource:\n{}",
                ep.summary(minute_of_day(state.now)),
                serde_json::to_string_pretty(&ep.raw).unwrap_or_default()
            );
            let mut pager = Pager::new(format!("{}/{}", ep.namespace, ep.name), &text, false);
            // The charts take the top of the pane once they are read.
            pager.charts = matches!(state.charts.of(&ep.namespace, &ep.name), Some(Ok(_)));
            state.overlay = Overlay::Describe(pager);
            return;
        }
        View::Apps => {
            let app = &state.apps[i];
            (format!("app {}", app.name), app.details())
        }
        View::Deliveries => {
            let feed = &state.deliveries;
            let d = &feed.rows[i];
            let standing = feed.standing(d, state.now);
            let text = d.details(&feed.url, feed.hook.as_ref(), &standing);
            (format!("attempt {} of {}", d.attempt, d.delivery_id), text)
        }
        View::Audit => {
            let e = &state.audit[i];
            (format!("audit entry {}", e.id), e.details())
        }
        View::Notifications => {
            let n = &state.notifications.rows[i];
            (format!("notification {}", n.seq), n.details())
        }
        // A webhook's own describe says whether it is held (`webhooks::describe`).
        View::Webhooks => return,
    };
    state.overlay = Overlay::Describe(Pager::new(title, &text, false));
}

/// Opens the selected row's description; an endpoint's replicas and charts are read for it (see
/// [`on_replicas_loaded`], `analytics::on_loaded`).
pub(super) fn open_describe(state: &mut State) -> Vec<Effect> {
    describe(state);
    let selected = (state.view == View::Endpoints)
        .then(|| state.selected_endpoint())
        .flatten();
    let Some(ep) = selected else {
        return Vec::new();
    };
    let (namespace, name) = (ep.namespace.clone(), ep.name.clone());
    let mut effects = vec![Effect::LoadReplicas {
        namespace: namespace.clone(),
        name: name.clone(),
    }];
    effects.push(state.charts.load(state.now, namespace, name));
    effects
}

/// An endpoint's replicas came: kept, and its description, when open, shows them.
pub(super) fn on_replicas_loaded(
    state: &mut State,
    namespace: String,
    name: String,
    result: Result<Vec<ReplicaLoad>, String>,
) {
    state.replicas = Some((namespace, name, result));
    redescribe(state);
}

/// The open description made again from what the state holds now, drawn where the reader was.
pub(super) fn redescribe(state: &mut State) {
    let Overlay::Describe(p) = &state.overlay else {
        return;
    };
    let before = p.clone();
    describe(state);
    state.dirty = true;
    if let Overlay::Describe(p) = &mut state.overlay {
        if p.title == before.title {
            // The reader's place, search and way of showing long lines stay.
            p.top = before.top.min(p.lines.len().saturating_sub(1));
            p.query = before.query;
            p.typing = before.typing;
            p.current = before.current.filter(|c| *c < p.lines.len());
            p.wrap = before.wrap;
            p.left = before.left;
        }
    }
}

/// A model's recipes, as describe shows them: each with whether it runs here, and if not, why and what would
/// change that.
fn recipes(state: &State, item: &CatalogRow) -> String {
    let mut text = format!(
        "{}\ntask {} · license {}\n\n{}\n",
        item.repo_id,
        item.task,
        item.license,
        Recipe::header()
    );
    for recipe in &item.recipes {
        text.push_str(&recipe.line());
        match state.engines.recipes.get(&recipe.id) {
            Some(r) if r.runs => text.push_str(&format!("\n    runs here ({})", r.engine)),
            Some(r) => text.push_str(&format!("\n    {}", r.message)),
            None => {}
        }
        text.push('\n');
    }
    text
}

/// The selected endpoint's replica output, followed. Until some comes, the pane says why there is none.
pub(super) fn open_logs(state: &mut State) -> Vec<Effect> {
    let Some(ep) = state.selected_endpoint() else {
        return Vec::new();
    };
    let (namespace, name) = (ep.namespace.clone(), ep.name.clone());
    let title = format!("logs {namespace}/{name}");
    state.overlay = Overlay::Logs {
        namespace: namespace.clone(),
        name: name.clone(),
        pager: Pager::new(title, &no_output(Some(ep)), true),
        follow: true,
    };
    vec![Effect::LoadLogs { namespace, name }]
}

/// Why an endpoint's logs are empty: no replica runs (and why), none has started yet, or the running ones
/// have printed nothing yet.
fn no_output(ep: Option<&EndpointRow>) -> String {
    // On a line of its own, under what it explains.
    let why = |e: &EndpointRow| match e.message.as_str() {
        "" => String::new(),
        m => format!("\n(why: {m})"),
    };
    match ep {
        Some(e) if e.ready == 0 && e.target == 0 => format!(
            "(no replicas are running: the endpoint is {}){}",
            e.state,
            why(e)
        ),
        Some(e) if e.ready == 0 => format!(
            "(no replica is ready yet: the endpoint is {}; output shows here as it comes){}",
            e.state,
            why(e)
        ),
        Some(e) => format!(
            "(waiting for output: {} replica(s) running, none has printed anything yet)",
            e.ready
        ),
        None => "(waiting for output: nothing printed yet)".to_string(),
    }
}

/// The reload a tick asks for while logs are open and followed.
pub(super) fn followed_logs(overlay: &Overlay) -> Option<Effect> {
    match overlay {
        Overlay::Logs {
            namespace,
            name,
            follow: true,
            ..
        } => Some(Effect::LoadLogs {
            namespace: namespace.clone(),
            name: name.clone(),
        }),
        _ => None,
    }
}

/// A replica's output for the open logs. Paused logs stay as they are, even when a load was already under way.
pub(super) fn on_logs_loaded(
    state: &mut State,
    namespace: &str,
    name: &str,
    text: Result<String, String>,
) {
    if let Overlay::Logs {
        namespace: n,
        name: e,
        pager,
        follow: true,
    } = &mut state.overlay
    {
        if *n == namespace && *e == name {
            let text = match text {
                Ok(text) if text.trim().is_empty() => {
                    let row = state
                        .endpoints
                        .iter()
                        .find(|r| r.namespace == namespace && r.name == name);
                    no_output(row)
                }
                Ok(text) => printable(&text),
                Err(e) => printable(&format!("(logs unavailable: {e})")),
            };
            if text.lines().ne(pager.lines.iter().map(String::as_str)) {
                pager.set_text(&text);
                state.dirty = true;
            }
        }
    }
}

/// Replica output as text the terminal shows as it is: tabs expanded, escape sequences and other control
/// characters dropped (a replica's colours or cursor moves must not reach our screen).
fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' => out.push('\n'),
            '\t' => out.push_str("    "),
            '\u{1b}' => {
                // CSI sequences (`ESC [ … final`), else the one character after ESC.
                if chars.peek() == Some(&'[') {
                    chars.next();
                    for d in chars.by_ref() {
                        if ('@'..='~').contains(&d) {
                            break;
                        }
                    }
                } else {
                    chars.next();
                }
            }
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// A key while a search is typed into the open pane; `false` when no search is being typed.
pub(super) fn on_search_key(state: &mut State, key: &str) -> bool {
    let size = state.size;
    let Some((pager, follow)) = state.overlay.pager().filter(|(p, _)| p.typing) else {
        return false;
    };
    let window = pager_window(size, pager.charts);
    match key {
        "esc" => {
            pager.typing = false;
            pager.query.clear();
            pager.current = None;
        }
        "enter" => {
            pager.typing = false;
            // Looking for something in logs pauses them, so the match stays put.
            if let Some(follow) = follow {
                *follow = false;
            }
            if !pager.find(true, window) {
                state.message = Some((format!("no match for {:?}", pager.query), true));
            }
        }
        other => type_into(&mut pager.query, other),
    }
    true
}

/// Scrolling and searching in describe and logs. Moving away from the end of followed logs pauses them,
/// like `less +F`.
pub(super) fn on_command(state: &mut State, command: Command) -> Vec<Effect> {
    let size = state.size;
    let Some((pager, follow)) = state.overlay.pager() else {
        return Vec::new();
    };
    let window = pager_window(size, pager.charts);
    let following = follow.as_deref() == Some(&true);
    let mut pause = false;
    let mut reload = false;
    let mut note = None;
    match command {
        Command::Back if !pager.query.is_empty() => {
            pager.query.clear();
            pager.current = None;
        }
        Command::Down
        | Command::PageDown
        | Command::Up
        | Command::PageUp
        | Command::Top
        | Command::Bottom => pause = scroll(pager, command, following, window),
        Command::Wrap => pager.toggle_wrap(window),
        Command::ScrollLeft => pager.sideways(-SIDEWAYS, window),
        Command::ScrollRight => pager.sideways(SIDEWAYS, window),
        Command::Search => {
            pager.typing = true;
            pager.query.clear();
            pager.current = None;
        }
        Command::NextMatch | Command::PrevMatch => {
            note = next_match(pager, command == Command::NextMatch, window);
            pause = true;
        }
        Command::Follow => {
            if let Some(follow) = follow {
                *follow = !*follow;
                pager.tail = *follow;
                reload = *follow;
            }
        }
        Command::Back => state.overlay = Overlay::None,
        Command::Quit => state.quit = true,
        Command::Help => state.overlay = Overlay::Help(0),
        // The pager covers the list: other keys do not reach it.
        _ => {}
    }
    if pause {
        if let Some((_, Some(follow))) = state.overlay.pager() {
            *follow = false;
        }
    }
    if let Some(n) = note {
        state.message = Some((n, true));
    }
    match &state.overlay {
        Overlay::Logs {
            namespace, name, ..
        } if reload => vec![Effect::LoadLogs {
            namespace: namespace.clone(),
            name: name.clone(),
        }],
        _ => Vec::new(),
    }
}

/// Columns a sideways scroll moves by.
const SIDEWAYS: isize = 20;

/// Moves the pager's window by a row, a page or to an end. Returns whether that pauses followed logs: any
/// move but down to the end does.
fn scroll(pager: &mut Pager, command: Command, following: bool, window: Window) -> bool {
    let page = window.height as isize;
    match command {
        Command::Down | Command::PageDown => {
            pager.scroll(if command == Command::Down { 1 } else { page }, window);
            // Down to the end keeps following; anywhere above it pauses.
            let at_end = pager.at_end(window);
            if following && at_end {
                pager.tail = true;
            }
            following && !at_end
        }
        Command::Up => {
            pager.scroll(-1, window);
            true
        }
        Command::PageUp => {
            pager.scroll(-page, window);
            true
        }
        Command::Top => {
            pager.to_top();
            true
        }
        Command::Bottom => {
            pager.to_end(window);
            pager.tail = following;
            false
        }
        _ => false,
    }
}

/// `n` and `N`: the next or previous match; what to tell the user when there is none.
fn next_match(pager: &mut Pager, forward: bool, window: Window) -> Option<String> {
    if pager.find(forward, window) {
        return None;
    }
    Some(if pager.query.is_empty() {
        "no search: / searches".to_string()
    } else {
        format!("no match for {:?}", pager.query)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_output_is_made_printable() {
        assert_eq!(
            printable("a\tb\u{1b}[31mred\u{1b}[0m\r\nnext\u{7}"),
            "a    bred\nnext"
        );
    }
}
