//! The webhooks view and a webhook's live deliveries: the form (new, edit), the enable, disable and delete
//! actions (each asked first), following the attempts with a long poll, and replaying one.
//!
//! Following never blocks: each poll is an effect, and its answer starts the next one while the deliveries
//! view is open on the same webhook (its `feed` number says so); an answer for a view left since is dropped.

use super::action::{Refusal, SavedWebhook};
use super::deliveries::DeliveryRow;
use super::lists::{clamp, refresh, switch};
use super::model::{State, View, FEED_ROWS};
use super::overlay::{IssuedSecret, Overlay};
use super::rows::WebhookRow;
use crate::effects::{Effect, WebhookAction};
use crate::forms::input::Form;
use crate::forms::webhook::WebhookForm;
use crate::keymap::Command;
use crate::pager::Pager;

/// `n`: the form for a new webhook; `e`: the form on the selected one.
pub(super) fn open_form(state: &mut State, command: Command) {
    if state.view != View::Webhooks {
        return;
    }
    let form = match command {
        Command::New => WebhookForm::new(state.user.as_deref()),
        _ => match state.selected_webhook() {
            Some(h) => WebhookForm::edit(&h.id, &h.url, &h.watched, &h.domains),
            None => return,
        },
    };
    state.overlay = Overlay::Webhook(Box::new(form));
}

/// The server's answer to the form: the list again (and a new webhook's signing secret, shown once), or the
/// form with every issue beside its field.
pub(super) fn on_saved(state: &mut State, result: Result<SavedWebhook, Refusal>) -> Vec<Effect> {
    match result {
        Ok(saved) => {
            let verb = match &state.overlay {
                Overlay::Webhook(form) if form.id.is_some() => "saved",
                _ => "created",
            };
            state.message = Some((format!("{verb} webhook {}", saved.url), false));
            if matches!(state.overlay, Overlay::Webhook(_)) {
                state.overlay = Overlay::None;
            }
            if let Some(secret) = saved.signing_secret {
                state.overlay = Overlay::Secret(IssuedSecret::signing(saved.url, saved.id, secret));
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
        Command::Delete => WebhookAction::Delete,
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

/// `d` on a webhook: all it holds, and whether its deliveries are held, why and until when.
pub(super) fn describe(state: &mut State) {
    let Some(hook) = state.selected_webhook() else {
        return;
    };
    let title = format!("webhook {}", hook.url);
    let text = hook.details(state.now);
    state.overlay = Overlay::Describe(Pager::new(title, &text, false));
}

/// `enter` on a webhook: its deliveries, newest at the top, followed live.
pub(super) fn open_deliveries(state: &mut State) -> Vec<Effect> {
    let Some(hook) = state.selected_webhook() else {
        return Vec::new();
    };
    let (id, url, hook) = (hook.id.clone(), hook.url.clone(), hook.clone());
    state.view = View::Deliveries;
    state.selected = 0;
    state.filter.clear();
    state.filtering = false;
    state.overlay = Overlay::None;
    vec![state.deliveries.open(Some(hook), id, url)]
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
            let following = std::mem::replace(&mut d.primed, true);
            let newest = d.newest;
            let mut new: Vec<DeliveryRow> = rows
                .into_iter()
                .filter(|r| newest.is_none_or(|n| r.seq > n))
                .collect();
            // Newest first, whatever order they came in.
            new.sort_by_key(|r| std::cmp::Reverse(r.seq));
            // A new attempt may have held the webhook (or let it go): it is read again.
            let reread = (following && !new.is_empty()).then(|| d.reload_hook());
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
            return [Some(state.deliveries.poll()), reread]
                .into_iter()
                .flatten()
                .collect();
        }
        Err(e) => {
            d.failures += 1;
            d.note = Some(e);
            state.dirty = true;
        }
    }
    vec![state.deliveries.poll()]
}

/// The webhook of the deliveries view read again; an answer for a view left since is dropped, and a failed
/// read keeps what was known.
pub(super) fn on_webhook_loaded(state: &mut State, feed: u64, result: Result<WebhookRow, String>) {
    let d = &mut state.deliveries;
    if let (true, Ok(hook)) = (feed == d.feed && state.view == View::Deliveries, result) {
        if d.hook.as_ref() != Some(&hook) {
            d.hook = Some(hook);
            state.dirty = true;
        }
    }
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
