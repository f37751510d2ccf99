//! Where a key goes: text being typed first, else the keymap's command, to what is open or the list.
//!
//! Text being typed is the filter, a pane's search or the command line; an editor or a form takes its
//! context's commands and has every other key typed into it. What is open is a pane, help, the confirm
//! dialog or a secret shown once.

use super::layout::{help_columns, help_height};
use super::model::State;
use super::model::View;
use super::overlay::Overlay;
use super::{analytics, apps, command_line, confirm, editors, lists, panes, webhooks};
use crate::effects::Effect;
use crate::keymap::{Command, Keymap};

pub(super) fn on_key(state: &mut State, key: &str, keymap: &Keymap) -> Vec<Effect> {
    // Once a key is pressed, the console stays where it is taken.
    state.landing = false;
    // ctrl-c always quits, whatever is open and whatever a keymap file says.
    if key == "ctrl-c" {
        state.quit = true;
        return Vec::new();
    }
    // Text entry first: the filter, a pager's search and the command line take every printable key.
    if state.filtering {
        lists::on_filter_key(state, key);
        return Vec::new();
    }
    if panes::on_search_key(state, key) {
        return Vec::new();
    }
    if matches!(state.overlay, Overlay::Command(_)) {
        return command_line::on_key(state, key);
    }
    // In read-only mode, lookup finds no command that changes something, whatever the keymap says.
    let command = keymap.lookup(state.context(), key, state.read_only);
    match command {
        Some(command) => on_command(state, command, keymap),
        // An editor or a form: what its context does not bind is typed into it.
        None if state.overlay.is_editor() => editors::on_typed(state, key),
        None => Vec::new(),
    }
}

pub(super) fn on_command(state: &mut State, command: Command, keymap: &Keymap) -> Vec<Effect> {
    if state.overlay.is_editor() {
        return editors::on_command(state, command);
    }
    if state.overlay.pager().is_some() {
        if command == Command::Range {
            return analytics::cycle(state);
        }
        return panes::on_command(state, command);
    }
    // Help covers the list: keys do not reach it through it; the moving keys scroll it.
    let closes = matches!(command, Command::Back | Command::Quit | Command::Help);
    if matches!(state.overlay, Overlay::Help(_)) && !closes {
        scroll_help(state, command, keymap);
        return Vec::new();
    }
    if matches!(state.overlay, Overlay::Confirm { .. }) {
        return confirm::on_command(state, command);
    }
    // A secret shown once takes every key until it is dismissed.
    if matches!(state.overlay, Overlay::Secret(_)) {
        apps::on_secret_command(state, command);
        return Vec::new();
    }
    if !state.offers(command) {
        state.message = state.why_not_offered().map(|why| (why, true));
        return Vec::new();
    }
    match command {
        Command::Quit => state.quit = true,
        Command::Help => state.overlay = Overlay::Help(0),
        Command::Command => state.overlay = Overlay::Command(String::new()),
        Command::Back => {
            if state.overlay != Overlay::None {
                state.overlay = Overlay::None;
            } else if state.view == View::Deliveries {
                return webhooks::close_deliveries(state);
            } else {
                state.filter.clear();
                state.message = None;
            }
        }
        Command::Filter
        | Command::NextView
        | Command::Down
        | Command::Up
        | Command::PageDown
        | Command::PageUp
        | Command::Top
        | Command::Bottom
        | Command::Refresh
        | Command::Copy => return lists::on_command(state, command),
        Command::Open | Command::Describe | Command::Logs => return open(state, command),
        Command::Pause
        | Command::Resume
        | Command::ScaleToZero
        | Command::Delete
        | Command::RotateSecret
        | Command::DeleteSecret
        | Command::ToggleWebhook => ask(state, command),
        Command::New | Command::Edit | Command::Schedule | Command::Deploy => edit(state, command),
        Command::Replay => return webhooks::replay(state),
        Command::EditExternal => return editors::edit_externally(state),
        Command::Follow
        | Command::Wrap
        | Command::Range
        | Command::ScrollLeft
        | Command::ScrollRight
        | Command::Search
        | Command::NextMatch
        | Command::PrevMatch
        | Command::Toggle
        | Command::Confirm
        | Command::Save
        | Command::SwitchFormat
        | Command::AddEntry
        | Command::RemoveEntry
        | Command::NextField
        | Command::PrevField
        | Command::NextChoice
        | Command::PrevChoice => {}
    }
    Vec::new()
}

/// The actions that ask first, on what the view shows: an endpoint's, an app's or a webhook's.
fn ask(state: &mut State, command: Command) {
    match (state.view, command) {
        (View::Apps, _) | (_, Command::RotateSecret | Command::DeleteSecret) => {
            apps::ask(state, command)
        }
        (View::Webhooks, _) | (_, Command::ToggleWebhook) => webhooks::ask(state, command),
        _ => confirm::ask(state, command),
    }
}

/// The editors and forms on what the view shows: a new app or webhook, a webhook or an endpoint's spec
/// edited, an endpoint's schedule, a model's deploy.
fn edit(state: &mut State, command: Command) {
    match (state.view, command) {
        (View::Apps, Command::New) => apps::open_form(state),
        (View::Webhooks, Command::New | Command::Edit) => webhooks::open_form(state, command),
        (_, Command::Edit) => editors::edit_spec(state),
        (_, Command::Schedule) => editors::edit_schedule(state),
        (_, Command::Deploy) => editors::open_deploy_form(state),
        _ => {}
    }
}

/// `enter`, `d` and `l` on the selected row: a webhook's deliveries are its log and what opening it shows;
/// everything else opens to its description; an endpoint's log is its replicas' output.
fn open(state: &mut State, command: Command) -> Vec<Effect> {
    match (state.view, command) {
        (View::Webhooks, Command::Open | Command::Logs) => webhooks::open_deliveries(state),
        (View::Webhooks, _) => {
            webhooks::describe(state);
            Vec::new()
        }
        (_, Command::Logs) => panes::open_logs(state),
        _ => panes::open_describe(state),
    }
}

/// The moving keys on the help screen: scrolled by a line, a page or to an end, within its length.
fn scroll_help(state: &mut State, command: Command, keymap: &Keymap) {
    let page = help_height(state.size);
    let columns = help_columns(state.size);
    let last = keymap
        .help_length(state.read_only, columns)
        .saturating_sub(page);
    if let Overlay::Help(scroll) = &mut state.overlay {
        *scroll = match command {
            Command::Down => *scroll + 1,
            Command::Up => scroll.saturating_sub(1),
            Command::PageDown => *scroll + page,
            Command::PageUp => scroll.saturating_sub(page),
            Command::Top => 0,
            Command::Bottom => last,
            _ => *scroll,
        }
        .min(last);
    }
}
