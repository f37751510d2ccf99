//! The one update function: each action goes to the module owning what it changes; ticks are here.

use chrono::{DateTime, Utc};

use super::action::Action;
use super::model::State;
use super::{
    analytics, apps, confirm, connection, editors, engines, keys, lists, notifications, panes,
    servers, webhooks,
};
use crate::effects::Effect;
use crate::keymap::{Command, Keymap};

/// Applies one action. Returns the API calls to make. Sets `dirty` when the screen needs drawing again.
pub fn update(state: &mut State, action: Action, keymap: &Keymap) -> Vec<Effect> {
    // Ticks and refreshes mostly change nothing on screen: they say so themselves.
    if !matches!(
        action,
        Action::Tick(_)
            | Action::EndpointsLoaded(..)
            | Action::LogsLoaded { .. }
            | Action::DeliveriesLoaded { .. }
            | Action::WebhookLoaded { .. }
            | Action::NotificationsLoaded(_)
            | Action::ServersLoaded(_)
            | Action::AnalyticsLoaded { .. }
            | Action::SparklinesLoaded(_)
    ) {
        state.dirty = true;
    }
    match action {
        Action::Tick(now) => on_tick(state, now),
        Action::Resize(w, h) => {
            state.size = (w, h);
            Vec::new()
        }
        Action::Wheel(down) => {
            let command = if down { Command::Down } else { Command::Up };
            keys::on_command(state, command, keymap)
        }
        Action::Click(row) => {
            lists::on_click(state, row);
            Vec::new()
        }
        Action::SignedIn(answer) => {
            let mut effects = connection::on_signed_in(state, answer);
            if state.user.is_some() {
                effects.extend(notifications::start(state));
                effects.extend(servers::start(state));
            }
            effects
        }
        Action::EnginesLoaded { polled, result } => engines::on_loaded(state, polled, result),
        Action::EngineInstallStarted(result) => engines::on_install_started(state, result),
        Action::EndpointsLoaded(seq, _) if seq < state.endpoints_seq => Vec::new(),
        Action::CatalogLoaded(seq, _) if seq < state.catalog_seq => Vec::new(),
        Action::AppsLoaded(seq, _) if seq < state.apps_seq => Vec::new(),
        Action::AuditLoaded(seq, _) if seq < state.audit_seq => Vec::new(),
        Action::WebhooksLoaded(seq, _) if seq < state.webhooks_seq => Vec::new(),
        Action::WebhooksLoaded(_, rows) => {
            lists::on_webhooks_loaded(state, rows);
            Vec::new()
        }
        Action::WebhookSaved(result) => webhooks::on_saved(state, result),
        Action::WebhookLoaded { feed, result } => {
            webhooks::on_webhook_loaded(state, feed, result);
            Vec::new()
        }
        Action::DeliveriesLoaded { feed, result } => {
            webhooks::on_deliveries_loaded(state, feed, result)
        }
        Action::Replayed(result) => {
            webhooks::on_replayed(state, result);
            Vec::new()
        }
        Action::NotificationsLoaded(result) => notifications::on_loaded(state, result),
        Action::ServersLoaded(result) => servers::on_loaded(state, result),
        Action::AppsLoaded(_, rows) => {
            lists::on_apps_loaded(state, rows);
            Vec::new()
        }
        Action::AuditLoaded(_, rows) => {
            lists::on_audit_loaded(state, rows);
            Vec::new()
        }
        Action::AppCreated(result) => apps::on_created(state, result),
        Action::SecretIssued(issued) => apps::on_secret_issued(state, issued),
        Action::EndpointsLoaded(_, rows) => {
            lists::on_endpoints_loaded(state, rows);
            Vec::new()
        }
        Action::CatalogLoaded(_, rows) => {
            lists::on_catalog_loaded(state, rows);
            Vec::new()
        }
        Action::LogsLoaded {
            namespace,
            name,
            text,
        } => {
            panes::on_logs_loaded(state, &namespace, &name, text);
            Vec::new()
        }
        Action::ReplicasLoaded {
            namespace,
            name,
            result,
        } => {
            panes::on_replicas_loaded(state, namespace, name, result);
            Vec::new()
        }
        Action::AnalyticsLoaded { range, result } => {
            analytics::on_loaded(state, range, result);
            Vec::new()
        }
        Action::SparklinesLoaded(lines) => {
            analytics::on_sparklines_loaded(state, lines);
            Vec::new()
        }
        Action::Done(result) => confirm::on_done(state, result),
        Action::Saved {
            namespace,
            name,
            result,
        } => editors::on_saved(state, namespace, name, result),
        Action::ExternallyEdited(edit, text) => {
            editors::on_externally_edited(state, edit, text);
            Vec::new()
        }
        Action::ServerStopped(why) => {
            connection::on_server_stopped(state, why);
            Vec::new()
        }
        Action::Deployed(result) => editors::on_deployed(state, result),
        Action::Key(key) => keys::on_key(state, &key.0, keymap),
    }
}

/// A second passed: the clock, and the live parts: followed logs reload, a lost server is retried, the
/// endpoints view refreshes.
fn on_tick(state: &mut State, now: DateTime<Utc>) -> Vec<Effect> {
    // The clock shows minutes: one frame a minute when nothing else happens.
    if now.timestamp().div_euclid(60) != state.now.timestamp().div_euclid(60) {
        state.dirty = true;
    }
    state.now = now;
    if let Some(reload) = panes::followed_logs(&state.overlay) {
        return vec![reload];
    }
    if connection::lost(state) {
        return connection::retry(state, now);
    }
    let mut effects = lists::refresh_due(state);
    effects.extend(analytics::due(state));
    effects
}
