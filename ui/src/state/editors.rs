//! The spec and schedule editors and the deploy form: opening, answers to their saves; the keys of every
//! editor and form (the new-app and webhook forms too): the keymap's commands of their context, and typing.
//!
//! An editor opens on the selected row (or hands the spec to `$EDITOR`) and stays open until the server
//! answers: it closes, or keeps what was typed and shows the refusal.

use serde_json::Value;

use super::action::Refusal;
use super::engines;
use super::lists::{refresh, switch};
use super::model::{State, View};
use super::overlay::Overlay;
use crate::effects::{Effect, ExternalEdit};
use crate::forms::deploy::DeployForm;
use crate::forms::input::{Form, FormEdit};
use crate::keymap::Command;
use crate::schedule::{ScheduleEdit, ScheduleEditor};
use crate::spec::{self, SpecEditor};

/// The spec editor on the selected endpoint.
pub(super) fn edit_spec(state: &mut State) {
    if let Some(ep) = state.selected_endpoint() {
        let editor = SpecEditor::new(&ep.namespace, &ep.name, &ep.raw);
        state.overlay = Overlay::Spec(Box::new(editor));
    }
}

/// The selected endpoint's spec to `$EDITOR` (the runtime owns the terminal).
pub(super) fn edit_externally(state: &mut State) -> Vec<Effect> {
    match state.selected_endpoint() {
        Some(ep) => {
            let (edit, text) = spec::edit_of(&ep.namespace, &ep.name, &ep.raw);
            vec![Effect::ExternalEdit(edit, text)]
        }
        None => Vec::new(),
    }
}

/// The schedule editor on the selected endpoint.
pub(super) fn edit_schedule(state: &mut State) {
    if let Some(ep) = state.selected_endpoint() {
        let editor = ScheduleEditor::new(&ep.namespace, &ep.name, &ep.raw);
        state.overlay = Overlay::Schedule(Box::new(editor));
    }
}

/// The deploy form on the selected catalog model, into the user's own namespace.
pub(super) fn open_deploy_form(state: &mut State) {
    let rows = state.visible();
    if let (View::Catalog, Some(&i)) = (state.view, rows.get(state.selected)) {
        let item = &state.catalog[i];
        let recipes = item.recipes.iter().map(|r| r.id.clone()).collect();
        let namespace = state.user.clone().unwrap_or_default();
        state.overlay = Overlay::Deploy(Box::new(DeployForm::new(
            &item.repo_id,
            recipes,
            &namespace,
        )));
    }
}

/// A command of the keymap in an editor or a form: `Back` closes it; the others edit it. They stay open
/// until the server answers a save: a refused one keeps what was typed.
pub(super) fn on_command(state: &mut State, command: Command) -> Vec<Effect> {
    if command == Command::Back {
        state.overlay = Overlay::None;
        return Vec::new();
    }
    let effects = match &mut state.overlay {
        Overlay::Spec(e) => spec_command(e, command),
        Overlay::Schedule(e) => schedule_edit(command)
            .and_then(|edit| e.edit(edit))
            .map(|patch| update(&e.namespace, &e.name, patch))
            .into_iter()
            .collect(),
        overlay => form_edit(command)
            .map(|edit| form(overlay, edit))
            .unwrap_or_default(),
    };
    // A deploy sent: the engine it needs, if the server has none for it, is offered once it is made, and
    // its notifications are set then.
    if let Some(Effect::Deploy(request)) = effects.first() {
        state.install_after_deploy = engines::needed_for(state, request);
        state.notify_after_deploy = request.notifications.clone();
    }
    effects
}

/// A key the editor's or form's context does not bind: typed into it.
pub(super) fn on_typed(state: &mut State, key: &str) -> Vec<Effect> {
    match &mut state.overlay {
        Overlay::Spec(e) => e.type_key(key),
        Overlay::Schedule(e) => {
            e.edit(ScheduleEdit::Type(key));
        }
        overlay => return form(overlay, FormEdit::Type(key)),
    }
    Vec::new()
}

/// The update of an endpoint's spec an editor saves.
fn update(namespace: &str, name: &str, patch: Value) -> Effect {
    Effect::Update {
        namespace: namespace.to_string(),
        name: name.to_string(),
        patch,
    }
}

fn spec_command(e: &mut SpecEditor, command: Command) -> Vec<Effect> {
    match command {
        Command::Save => e
            .save()
            .map(|patch| update(&e.edit.namespace, &e.edit.name, patch))
            .into_iter()
            .collect(),
        Command::SwitchFormat => {
            e.switch_format();
            Vec::new()
        }
        Command::EditExternal => vec![e.external()],
        _ => Vec::new(),
    }
}

fn schedule_edit(command: Command) -> Option<ScheduleEdit<'static>> {
    Some(match command {
        Command::Down => ScheduleEdit::NextEntry,
        Command::Up => ScheduleEdit::PrevEntry,
        Command::NextField => ScheduleEdit::NextField,
        Command::PrevField => ScheduleEdit::PrevField,
        Command::AddEntry => ScheduleEdit::Add,
        Command::RemoveEntry => ScheduleEdit::Remove,
        Command::Save => ScheduleEdit::Save,
        _ => return None,
    })
}

fn form_edit(command: Command) -> Option<FormEdit<'static>> {
    Some(match command {
        Command::NextField => FormEdit::NextField,
        Command::PrevField => FormEdit::PrevField,
        Command::NextChoice => FormEdit::NextChoice,
        Command::PrevChoice => FormEdit::PrevChoice,
        Command::Save => FormEdit::Submit,
        _ => return None,
    })
}

/// `edit` on the open form; the request to make when it is sent.
fn form(overlay: &mut Overlay, edit: FormEdit) -> Vec<Effect> {
    let sent = match overlay {
        Overlay::Deploy(f) => f.edit(edit).map(Effect::Deploy),
        Overlay::NewApp(f) => f.edit(edit).map(Effect::CreateApp),
        Overlay::Webhook(f) => f.edit(edit).map(|body| Effect::SaveWebhook {
            id: f.id.clone(),
            body,
        }),
        _ => None,
    };
    sent.into_iter().collect()
}

/// The server's answer to an editor's save. The editor waiting for it closes, or keeps its text and shows the
/// refusal; an answer for an editor closed since is a message.
pub(super) fn on_saved(
    state: &mut State,
    namespace: String,
    name: String,
    result: Result<String, Refusal>,
) -> Vec<Effect> {
    // The editor that is waiting for this answer, if it is still open.
    let open = match &state.overlay {
        Overlay::Spec(e) if e.busy && e.edit.namespace == namespace && e.edit.name == name => {
            Some("spec")
        }
        Overlay::Schedule(e) if e.busy && e.namespace == namespace && e.name == name => {
            Some("schedule")
        }
        _ => None,
    };
    let what = open.unwrap_or("update");
    // The notifications of an endpoint just deployed: told with the deploy.
    let key = (namespace.clone(), name.clone());
    if open.is_none() && state.notifying.as_ref() == Some(&key) {
        state.notifying = None;
        let deployed = format!("deployed {namespace}/{name}");
        state.message = Some(match result {
            Ok(_) => (format!("{deployed}; its notifications are on"), false),
            Err((m, _)) => (
                format!("{deployed}, but its notifications were not set: {m}"),
                true,
            ),
        });
        return Vec::new();
    }
    match result {
        Ok(_) => {
            state.message = Some((format!("saved the {what} of {namespace}/{name}"), false));
            if open.is_some() {
                state.overlay = Overlay::None;
            }
            refresh(state)
        }
        // The editor keeps its text and shows the refusal; a closed one leaves a message.
        Err((message, issues)) => {
            match &mut state.overlay {
                Overlay::Spec(e) if open.is_some() => e.refused(message, &issues),
                Overlay::Schedule(e) if open.is_some() => e.refused(message, &issues),
                _ => state.message = Some((format!("saving {namespace}/{name}: {message}"), true)),
            }
            Vec::new()
        }
    }
}

/// `$EDITOR` closed: the spec editor opens on the text it left.
pub(super) fn on_externally_edited(
    state: &mut State,
    edit: ExternalEdit,
    text: Result<String, String>,
) {
    match text {
        Ok(text) => {
            let mut editor = SpecEditor::with_text(edit, &text);
            editor.note = Some("back from the editor: ctrl-s saves, esc drops the edit".into());
            state.overlay = Overlay::Spec(Box::new(editor));
        }
        Err(e) => state.message = Some((e, true)),
    }
}

/// The update that sets the notifications the deploy form asked for, on the endpoint `namespace/name` it
/// made.
fn notify(state: &mut State, endpoint: &str) -> Option<Effect> {
    let patch = state.notify_after_deploy.take()?;
    let (namespace, name) = endpoint.split_once('/')?;
    state.notifying = Some((namespace.to_string(), name.to_string()));
    Some(update(namespace, name, patch))
}

/// The server's answer to a deploy: the endpoints view with the new endpoint, or the form with the refusal.
pub(super) fn on_deployed(state: &mut State, result: Result<String, Refusal>) -> Vec<Effect> {
    match result {
        Ok(endpoint) => {
            state.message = Some((format!("deployed {endpoint}"), false));
            let mut effects = switch(state, View::Endpoints);
            effects.extend(notify(state, &endpoint));
            engines::offer_install(state, &endpoint);
            effects
        }
        Err((message, issues)) => {
            match &mut state.overlay {
                Overlay::Deploy(form) => form.refused(message, &issues),
                _ => state.message = Some((format!("deploy: {message}"), true)),
            }
            Vec::new()
        }
    }
}
