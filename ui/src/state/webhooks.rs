//! The webhooks view and a webhook's live deliveries: the form (new, edit), the enable, disable and delete
//! actions (each asked first), following the attempts with a long poll, and replaying one.
//!
//! Following never blocks: each poll is an effect, and its answer starts the next one while the deliveries
//! view is open on the same webhook (its `feed` number says so); an answer for a view left since is dropped.

use super::action::Refusal;
use super::lists::{clamp, refresh, switch};
use super::model::{State, View, FEED_ROWS};
use super::overlay::Overlay;
use super::rows::DeliveryRow;
use crate::effects::{Effect, WebhookAction};
use crate::form_input::Form;
use crate::keymap::Command;
use crate::webhook_form::WebhookForm;

/// `n`: the form for a new webhook; `e`: the form on the selected one.
pub(super) fn open_form(state: &mut State, command: Command) {
    if state.view != View::Webhooks {
        return;
    }
    let form = match command {
        Command::NewWebhook => WebhookForm::new(state.user.as_deref()),
        _ => match state.selected_webhook() {
            Some(h) => WebhookForm::edit(&h.id, &h.url, &h.watched, &h.domains),
            None => return,
        },
    };
    state.overlay = Overlay::Webhook(Box::new(form));
}

/// The server's answer to the form: the list again, or the form with every issue beside its field.
pub(super) fn on_saved(state: &mut State, result: Result<String, Refusal>) -> Vec<Effect> {
    match result {
        Ok(url) => {
            let verb = match &state.overlay {
                Overlay::Webhook(form) if form.id.is_some() => "saved",
                _ => "created",
            };
            state.message = Some((format!("{verb} webhook {url}"), false));
            if matches!(state.overlay, Overlay::Webhook(_)) {
                state.overlay = Overlay::None;
            }
            if state.view == View::Webhooks {
                refresh(state)
            } else {
                Vec::new()
            }
        }
        Err((message, issues)) => {
            match &mut state.overlay {
                Overlay::Webhook(form) => form.refused(message, &issues),
                _ => state.message = Some((format!("webhook: {message}"), true)),
            }
            Vec::new()
        }
    }
}

/// Asks before enabling, disabling (whichever the selected webhook is not) or deleting it.
pub(super) fn ask(state: &mut State, command: Command) {
    let Some(hook) = state.selected_webhook() else {
        return;
    };
    let action = match command {
        Command::DeleteWebhook => WebhookAction::Delete,
        _ if hook.enabled => WebhookAction::Disable,
        _ => WebhookAction::Enable,
    };
    state.overlay = Overlay::Confirm {
        asked: Effect::WebhookAct {
            action,
            id: hook.id.clone(),
            url: hook.url.clone(),
        },
        yes: false,
    };
}

/// `enter` on a webhook: its deliveries, newest at the top, followed live.
pub(super) fn open_deliveries(state: &mut State) -> Vec<Effect> {
    let Some(hook) = state.selected_webhook() else {
        return Vec::new();
    };
    let (id, url) = (hook.id.clone(), hook.url.clone());
    state.view = View::Deliveries;
    state.selected = 0;
    state.filter.clear();
    state.filtering = false;
    state.overlay = Overlay::None;
    vec![state.deliveries.open(id, url)]
}

/// `esc` in the deliveries: following stops, and the webhooks list (with their last results) again.
pub(super) fn close_deliveries(state: &mut State) -> Vec<Effect> {
    state.deliveries.close();
    switch(state, View::Webhooks)
}

/// A poll of the deliveries answered: new attempts go on top (the selection stays on its attempt, or on
/// the top to see the newest), and the next poll starts. An answer for a feed left since is dropped.
pub(super) fn on_deliveries_loaded(
    state: &mut State,
    feed: u64,
    result: Result<Vec<DeliveryRow>, String>,
) -> Vec<Effect> {
    let open = state.view == View::Deliveries;
    let d = &mut state.deliveries;
    if feed != d.feed || !open {
        return Vec::new();
    }
    match result {
        Ok(rows) => {
            if d.note.take().is_some() {
                state.dirty = true;
            }
            let d = &mut state.deliveries;
            d.failures = 0;
            d.primed = true;
            let newest = d.newest;
            let mut new: Vec<DeliveryRow> = rows
                .into_iter()
                .filter(|r| newest.is_none_or(|n| r.seq > n))
                .collect();
            // Newest first, whatever order they came in.
            new.sort_by_key(|r| std::cmp::Reverse(r.seq));
            if let Some(top) = new.first() {
                d.newest = Some(top.seq);
                let n = new.len();
                new.append(&mut d.rows);
                new.truncate(FEED_ROWS);
                d.rows = new;
                // Away from the top, the selection stays on its attempt; on the top it shows the newest.
                if state.selected > 0 {
                    state.selected += n;
                }
                clamp(state);
                state.dirty = true;
            }
        }
        Err(e) => {
            d.failures += 1;
            d.note = Some(e);
            state.dirty = true;
        }
    }
    vec![state.deliveries.poll()]
}

/// `r`: the selected delivery again; the answer goes to the message line.
pub(super) fn replay(state: &mut State) -> Vec<Effect> {
    let Some(attempt) = state.selected_delivery() else {
        return Vec::new();
    };
    let delivery = attempt.delivery_id.clone();
    state.message = Some((format!("replaying delivery {delivery}…"), false));
    vec![Effect::ReplayDelivery {
        id: state.deliveries.webhook.clone(),
        delivery,
    }]
}

pub(super) fn on_replayed(state: &mut State, result: Result<String, String>) {
    state.message = Some(match result {
        Ok(m) => (m, false),
        Err(m) => (m, true),
    });
}
