//! The lists (catalog, endpoints, OAuth apps, an audit log, webhooks, a webhook's deliveries, notifications):
//! loading, switching, the selection, the `/` filter, copying a row.
//!
//! The selection moves with keys and the mouse, and follows its endpoint through a reload; copying puts the
//! selected model's id, endpoint's URL or app's client id on the clipboard. Endpoints and apps are listed by
//! name in natural order (`a-2` before `a-10`).

use super::action::{type_into, LoadFailure};
use super::engines;
use super::layout::{list_height, row_at};
use super::model::{Connection, State, View};
use super::notes::PERSONAL_TOKEN_HINT;
use super::overlay::Overlay;
use super::rows::{AppRow, AuditRow, CatalogRow, EndpointRow, WebhookRow};
use crate::effects::Effect;
use crate::keymap::Command;
use crate::natural::natural_cmp;

/// The catalog with the server's `filters` (none: the whole catalog), loaded again.
pub(super) fn show_catalog(state: &mut State, filters: Vec<(String, String)>) -> Vec<Effect> {
    state.catalog_asked = filters;
    switch(state, View::Catalog)
}

/// Shows `view`, unfiltered and from its first row, and loads it.
pub(super) fn switch(state: &mut State, view: View) -> Vec<Effect> {
    state.view = view;
    state.selected = 0;
    state.filter.clear();
    state.filtering = false;
    state.overlay = Overlay::None;
    refresh(state)
}

/// Loads the catalog (with the filters asked), whatever the view: it is public.
pub(super) fn load_catalog(state: &mut State) -> Vec<Effect> {
    state.catalog_seq += 1;
    vec![Effect::LoadCatalog(
        state.catalog_seq,
        state.catalog_asked.clone(),
    )]
}

/// Loads the endpoints of every namespace signed in to.
pub(super) fn load_endpoints(state: &mut State) -> Vec<Effect> {
    state.loading = true;
    state.endpoints_seq += 1;
    vec![Effect::LoadEndpoints(
        state.endpoints_seq,
        state.namespaces.clone(),
    )]
}

/// Loads the current view's list again (the endpoints need a signed-in user: signs in first).
pub(super) fn refresh(state: &mut State) -> Vec<Effect> {
    match state.view {
        View::Catalog => {
            let mut effects = load_catalog(state);
            effects.extend(engines::load(state));
            effects
        }
        View::Endpoints if state.user.is_some() => load_endpoints(state),
        View::Endpoints => vec![Effect::SignIn],
        View::Apps => {
            state.apps_seq += 1;
            vec![Effect::LoadApps(state.apps_seq, state.apps_owner.clone())]
        }
        View::Audit => {
            state.audit_seq += 1;
            vec![Effect::LoadAudit(state.audit_seq, state.audit_org.clone())]
        }
        View::Webhooks => {
            state.webhooks_seq += 1;
            vec![Effect::LoadWebhooks(state.webhooks_seq)]
        }
        // The live lists: the deliveries start over from the newest page; the notifications poll unless a
        // poll is under way.
        View::Deliveries => {
            let d = &state.deliveries;
            let (id, url, hook) = (d.webhook.clone(), d.url.clone(), d.hook.clone());
            state.selected = 0;
            let poll = state.deliveries.open(hook, id, url);
            vec![poll, state.deliveries.reload_hook()]
        }
        View::Notifications => state.notifications.poll().into_iter().collect(),
    }
}

/// The answer to the latest webhooks load. A list that cannot be had is said so in place of the table.
pub(super) fn on_webhooks_loaded(state: &mut State, rows: Result<Vec<WebhookRow>, LoadFailure>) {
    match rows {
        Ok(rows) => {
            state.webhooks = rows;
            state.webhooks_note = None;
        }
        Err(LoadFailure::Forbidden(e) | LoadFailure::Failed(e)) => {
            state.webhooks.clear();
            state.webhooks_note = Some(e);
        }
    }
    clamp(state);
}

/// What the audit view says in place of its table when the server does not let the user see the log.
pub(super) const AUDIT_FORBIDDEN: &str = "only the organization's administrators see its audit log";

/// The answer to the latest apps load. A list that cannot be had is said so in place of the table.
pub(super) fn on_apps_loaded(state: &mut State, rows: Result<Vec<AppRow>, LoadFailure>) {
    match rows {
        Ok(mut rows) => {
            rows.sort_by(|a, b| natural_cmp(&a.name, &b.name));
            state.apps = rows;
            state.apps_note = None;
        }
        Err(failure) => {
            state.apps.clear();
            state.apps_note = Some(match failure {
                LoadFailure::Forbidden(e) => format!("{e}. {PERSONAL_TOKEN_HINT}"),
                LoadFailure::Failed(e) => e,
            });
        }
    }
    clamp(state);
}

/// The answer to the latest audit log load; a refusal (403) is said in words, not shown as an empty log.
pub(super) fn on_audit_loaded(state: &mut State, rows: Result<Vec<AuditRow>, LoadFailure>) {
    match rows {
        Ok(rows) => {
            state.audit = rows;
            state.audit_note = None;
        }
        Err(failure) => {
            state.audit.clear();
            state.audit_note = Some(match failure {
                // The token's kind, not the user: what would do is said.
                LoadFailure::Forbidden(e) if e.contains("personal token") => {
                    format!("{e}. {PERSONAL_TOKEN_HINT}")
                }
                LoadFailure::Forbidden(_) => AUDIT_FORBIDDEN.to_string(),
                LoadFailure::Failed(e) => e,
            });
        }
    }
    clamp(state);
}

/// The endpoints view refreshes every tick, unless something covers it, a load is under way, or nobody is
/// signed in (signing in again is for `r` and the retries).
pub(super) fn refresh_due(state: &mut State) -> Vec<Effect> {
    let due = state.overlay == Overlay::None && !state.loading && state.user.is_some();
    if state.view == View::Endpoints && due {
        refresh(state)
    } else {
        Vec::new()
    }
}

/// The answer to the latest catalog load: its filters are the shown ones from now on.
pub(super) fn on_catalog_loaded(state: &mut State, rows: Result<Vec<CatalogRow>, String>) {
    match rows {
        Ok(rows) => {
            // The catalog is public: it says the server is up, not that the token is good.
            if !matches!(state.connection, Connection::Unauthorized(_)) {
                state.connection = Connection::Connected;
            }
            state.catalog = rows;
            state.catalog_filters = state.catalog_asked.clone();
            clamp(state);
        }
        // A catalog query the server refused (a bad filter) is the user's to fix, not a lost server: the
        // catalog shown stays, with its own filters.
        Err(e) => {
            state.catalog_asked = state.catalog_filters.clone();
            state.message = Some((format!("catalog: {e}"), true));
        }
    }
}

/// The answer to the latest endpoints load. Rows the same as those shown need no frame.
pub(super) fn on_endpoints_loaded(state: &mut State, rows: Result<Vec<EndpointRow>, String>) {
    state.loading = false;
    let mut rows = match rows {
        Ok(rows) => rows,
        Err(e) => {
            state.dirty = true;
            state.connection = Connection::Unreachable(e);
            return;
        }
    };
    if state.connection != Connection::Connected {
        state.connection = Connection::Connected;
        state.dirty = true;
    }
    // Namespace by namespace as signed in (the user's own first), each one's names in natural order.
    let at = |ns: &str| state.namespaces.iter().position(|n| n == ns);
    rows.sort_by(|a, b| {
        (at(&a.namespace).cmp(&at(&b.namespace)))
            .then_with(|| natural_cmp(&a.namespace, &b.namespace))
            .then_with(|| natural_cmp(&a.name, &b.name))
    });
    land(state, !rows.is_empty());
    if rows == state.endpoints {
        return;
    }
    state.dirty = true;
    // The selection follows its endpoint when rows come and go.
    let selected = state
        .selected_endpoint()
        .map(|e| (e.namespace.clone(), e.name.clone()));
    state.endpoints = rows;
    if let Some((ns, name)) = selected {
        if let Some(at) = state
            .visible()
            .iter()
            .position(|i| state.endpoints[*i].namespace == ns && state.endpoints[*i].name == name)
        {
            state.selected = at;
        }
    }
    clamp(state);
}

/// The first endpoints answer after the console started: it opens on the endpoints when there are any and
/// nothing was done yet.
fn land(state: &mut State, any: bool) {
    let untouched = state.overlay == Overlay::None && !state.filtering && state.filter.is_empty();
    if std::mem::take(&mut state.landing) && any && untouched && state.view == View::Catalog {
        state.view = View::Endpoints;
        state.selected = 0;
        state.dirty = true;
    }
}

pub(super) fn clamp(state: &mut State) {
    let n = state.visible().len();
    state.selected = state.selected.min(n.saturating_sub(1));
}

/// A click on screen row `row` selects the list's row there, when nothing covers the list.
pub(super) fn on_click(state: &mut State, row: u16) {
    if state.overlay == Overlay::None && !state.filtering {
        if let Some(i) = row_at(state, row) {
            state.selected = i;
        }
    }
}

/// A key while the `/` filter is typed: `enter` applies it, `esc` drops it.
pub(super) fn on_filter_key(state: &mut State, key: &str) {
    match key {
        "esc" => {
            state.filtering = false;
            state.filter.clear();
        }
        "enter" => state.filtering = false,
        other => type_into(&mut state.filter, other),
    }
    state.selected = 0;
}

/// The list's own commands: the filter, the other view, moving the selection, reloading, copying.
pub(super) fn on_command(state: &mut State, command: Command) -> Vec<Effect> {
    let rows = state.visible().len();
    match command {
        Command::Filter => {
            state.filtering = true;
            state.filter.clear();
        }
        Command::NextView => {
            let next = match state.view {
                View::Catalog => View::Endpoints,
                View::Endpoints
                | View::Apps
                | View::Audit
                | View::Webhooks
                | View::Deliveries
                | View::Notifications => View::Catalog,
            };
            return switch(state, next);
        }
        Command::Down => state.selected = (state.selected + 1).min(rows.saturating_sub(1)),
        Command::Up => state.selected = state.selected.saturating_sub(1),
        Command::PageDown => {
            let page = list_height(state.view, state.size);
            state.selected = (state.selected + page).min(rows.saturating_sub(1));
        }
        Command::PageUp => {
            let page = list_height(state.view, state.size);
            state.selected = state.selected.saturating_sub(page);
        }
        Command::Top => state.selected = 0,
        Command::Bottom => state.selected = rows.saturating_sub(1),
        Command::Refresh => return refresh(state),
        Command::Copy => return copy(state),
        _ => {}
    }
    Vec::new()
}

/// The selected model's id, endpoint's URL or app's client id (of an audit entry, the app's) to the clipboard.
fn copy(state: &mut State) -> Vec<Effect> {
    let rows = state.visible();
    let text = rows.get(state.selected).map(|&i| match state.view {
        View::Catalog => state.catalog[i].repo_id.clone(),
        View::Endpoints => state.endpoints[i].url.clone(),
        View::Apps => state.apps[i].id.clone(),
        View::Audit => state.audit[i].app_id.clone(),
        View::Webhooks => state.webhooks[i].url.clone(),
        View::Deliveries => state.deliveries.rows[i].delivery_id.clone(),
        View::Notifications => {
            let n = &state.notifications.rows[i];
            format!("{}/{}", n.namespace, n.subject)
        }
    });
    match text.filter(|t| !t.is_empty()) {
        Some(text) => {
            state.message = Some((format!("copied {text}"), false));
            vec![Effect::Copy(text)]
        }
        None => Vec::new(),
    }
}
