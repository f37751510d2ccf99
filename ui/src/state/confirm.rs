//! Actions that ask first: the dialog (cancel by default) and the answer.
//!
//! The actions are an endpoint's pause, resume, scale to zero and delete, an app's secret rotation, secret
//! deletion and deletion, and a webhook's enable, disable and delete. The dialog holds the very effect that
//! runs on `yes`.

use super::lists::refresh;
use super::model::State;
use super::overlay::Overlay;
use crate::effects::Effect;
use crate::keymap::Command;

/// Asks before `command`'s action on the selected endpoint.
pub(super) fn ask(state: &mut State, command: Command) {
    if let (Some(ep), Some(action)) = (state.selected_endpoint(), command.endpoint_action()) {
        state.overlay = Overlay::Confirm {
            asked: Effect::Act {
                action,
                namespace: ep.namespace.clone(),
                name: ep.name.clone(),
            },
            yes: false,
        };
    }
}

/// A command while the dialog is open: toggle the button, confirm (the action runs only on `yes`) or cancel.
pub(super) fn on_command(state: &mut State, command: Command) -> Vec<Effect> {
    let Overlay::Confirm { asked, yes } = &mut state.overlay else {
        return Vec::new();
    };
    match command {
        Command::Toggle => *yes = !*yes,
        Command::Confirm if *yes => {
            let effect = asked.clone();
            state.overlay = Overlay::None;
            return vec![effect];
        }
        Command::Confirm | Command::Back => state.overlay = Overlay::None,
        _ => {}
    }
    Vec::new()
}

/// A confirmed action finished: its message, and the list again.
pub(super) fn on_done(state: &mut State, result: Result<String, String>) -> Vec<Effect> {
    state.message = Some(match result {
        Ok(m) => (m, false),
        Err(m) => (m, true),
    });
    refresh(state)
}
