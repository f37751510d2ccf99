//! The OAuth apps and audit log views: opening them (`:apps [OWNER]`, `:audit ORG`), the new-app form, the
//! secret and delete actions (each asked first), and their answers.
//!
//! A secret the server makes (a new confidential app, a rotation) is shown once in a popup and is gone from the
//! state when the popup is dismissed; messages name the app, never the secret.

use super::action::{CreatedApp, Refusal};
use super::lists::{refresh, switch};
use super::model::{State, View};
use super::overlay::{IssuedSecret, Overlay};
use crate::effects::{AppAction, Effect};
use crate::forms::app::AppForm;
use crate::forms::input::Form;
use crate::keymap::Command;

/// `:apps [OWNER]`: the apps of the signed-in user, or of a namespace they manage.
pub(super) fn show_apps(state: &mut State, owner: Option<String>) -> Vec<Effect> {
    if state.apps_owner != owner {
        state.apps.clear();
        state.apps_note = None;
        state.apps_owner = owner;
    }
    switch(state, View::Apps)
}

/// `:audit ORG`: an organization's audit log.
pub(super) fn show_audit(state: &mut State, org: String) -> Vec<Effect> {
    if state.audit_org != org {
        state.audit.clear();
        state.audit_note = None;
        state.audit_org = org;
    }
    switch(state, View::Audit)
}

/// The new-app form, for the namespace whose apps are shown.
pub(super) fn open_form(state: &mut State) {
    if state.view == View::Apps {
        let form = AppForm::new(state.apps_owner.clone());
        state.overlay = Overlay::NewApp(Box::new(form));
    }
}

/// Asks before `command`'s action on the selected app. An app without a secret has none to delete.
pub(super) fn ask(state: &mut State, command: Command) {
    let (Some(app), Some(action)) = (state.selected_app(), command.app_action()) else {
        return;
    };
    if action == AppAction::DeleteSecret && app.public {
        state.message = Some((
            format!("{} is public already: it has no secret", app.name),
            true,
        ));
        return;
    }
    state.overlay = Overlay::Confirm {
        asked: Effect::AppAct {
            action,
            id: app.id.clone(),
            name: app.name.clone(),
        },
        yes: false,
    };
}

/// A command while a secret is shown: only dismissing it does anything, and that drops it.
pub(super) fn on_secret_command(state: &mut State, command: Command) {
    if command == Command::Back {
        state.overlay = Overlay::None;
    }
}

/// The server's answer to the new-app form: the secret popup (or a message, for a public app) and the list
/// again, or the form with every issue.
pub(super) fn on_created(state: &mut State, result: Result<CreatedApp, Refusal>) -> Vec<Effect> {
    match result {
        Ok(app) => {
            match app.secret {
                Some(secret) => {
                    state.message = Some((format!("created {}", app.name), false));
                    state.overlay =
                        Overlay::Secret(IssuedSecret::client(app.name, app.client_id, secret));
                }
                None => {
                    state.message = Some((
                        format!(
                            "created public app {} (client id {})",
                            app.name, app.client_id
                        ),
                        false,
                    ));
                    if matches!(state.overlay, Overlay::NewApp(_)) {
                        state.overlay = Overlay::None;
                    }
                }
            }
            reload(state)
        }
        Err((message, issues)) => {
            match &mut state.overlay {
                Overlay::NewApp(form) => form.refused(message, &issues),
                _ => state.message = Some((format!("new app: {message}"), true)),
            }
            Vec::new()
        }
    }
}

/// A rotated secret: shown once, over whatever is open (it cannot be had again), and the list again.
pub(super) fn on_secret_issued(state: &mut State, issued: IssuedSecret) -> Vec<Effect> {
    state.message = Some((
        format!(
            "rotated the secret of {}: the old one no longer works",
            issued.of
        ),
        false,
    ));
    state.overlay = Overlay::Secret(issued);
    reload(state)
}

/// The apps list again, when it is the one shown.
fn reload(state: &mut State) -> Vec<Effect> {
    if state.view == View::Apps {
        refresh(state)
    } else {
        Vec::new()
    }
}
