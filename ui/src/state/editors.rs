//! The spec and schedule editors and the deploy form: opening, their keys, and answers to their saves.
//!
//! An editor opens on the selected row (or hands the spec to `$EDITOR`) and stays open until the server
//! answers: it closes, or keeps what was typed and shows the refusal.

use super::action::Refusal;
use super::lists::{refresh, switch};
use super::model::{State, View};
use super::overlay::Overlay;
use crate::effects::{Effect, ExternalEdit};
use crate::form::DeployForm;
use crate::schedule::ScheduleEditor;
use crate::spec::{self, Outcome, SpecEditor};

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

/// The forms and editors take every key; `esc` closes them. They stay open until the server answers a
/// save: a refused one keeps what was typed.
pub(super) fn on_key(state: &mut State, key: &str) -> Vec<Effect> {
    if key == "esc" {
        state.overlay = Overlay::None;
        return Vec::new();
    }
    let update = |namespace: &str, name: &str, patch| Effect::Update {
        namespace: namespace.to_string(),
        name: name.to_string(),
        patch,
    };
    match &mut state.overlay {
        Overlay::Spec(e) => match e.on_key(key) {
            Outcome::Stay => Vec::new(),
            Outcome::Save(patch) => vec![update(&e.edit.namespace, &e.edit.name, patch)],
            Outcome::External => vec![e.external()],
        },
        Overlay::Schedule(e) => e
            .on_key(key)
            .map(|p| update(&e.namespace, &e.name, p))
            .into_iter()
            .collect(),
        Overlay::Deploy(form) => form.on_key(key).map(Effect::Deploy).into_iter().collect(),
        _ => Vec::new(),
    }
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

/// The server's answer to a deploy: the endpoints view with the new endpoint, or the form with the refusal.
pub(super) fn on_deployed(state: &mut State, result: Result<String, Refusal>) -> Vec<Effect> {
    match result {
        Ok(endpoint) => {
            state.message = Some((format!("deployed {endpoint}"), false));
            switch(state, View::Endpoints)
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
