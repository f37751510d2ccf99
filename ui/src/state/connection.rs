//! The server and the connection to it: signing in, retrying with backoff, switching server.
//!
//! Also the in-process server stopping on its own.

use chrono::{DateTime, Utc};

use super::action::SignInFailure;
use super::lists::{load_catalog, load_endpoints, refresh};
use super::model::{Connection, NotificationsFeed, ServersFeed, State, View};
use super::overlay::Overlay;
use crate::effects::Effect;
use crate::natural::natural_cmp;

/// The answer to signing in: the user and the namespaces to list (the user's own, then the others in
/// natural order), then the current view loads.
pub(super) fn on_signed_in(
    state: &mut State,
    answer: Result<(String, Vec<String>), SignInFailure>,
) -> Vec<Effect> {
    match answer {
        Ok((user, mut orgs)) => {
            orgs.sort_by(|a, b| natural_cmp(a, b));
            state.connection = Connection::Connected;
            state.retry_at = None;
            state.retry_delay = chrono::Duration::seconds(1);
            state.namespaces = std::iter::once(user.clone()).chain(orgs).collect();
            state.user = Some(user);
            let mut effects = refresh(state);
            // Just started on the catalog: the endpoints too, to open on them if there are any.
            if state.landing && state.view == View::Catalog {
                effects.extend(load_endpoints(state));
            }
            effects
        }
        // A token the server refuses is not a lost server: no retrying. What is public (the catalog) is
        // still shown.
        Err(SignInFailure::Refused(e)) => {
            state.message = Some((
                format!(
                    "sign-in failed: {e}; the public catalog is shown (:server URL TOKEN signs in)"
                ),
                true,
            ));
            state.connection = Connection::Unauthorized(e);
            load_catalog(state)
        }
        Err(SignInFailure::Unreachable(e)) => {
            state.connection = Connection::Unreachable(e);
            Vec::new()
        }
    }
}

/// Whether a tick should try to sign in again: the server was lost before anyone signed in.
pub(super) fn lost(state: &State) -> bool {
    matches!(state.connection, Connection::Unreachable(_)) && state.user.is_none()
}

/// Signs in again, with backoff: 1 s, doubling up to 30 s.
pub(super) fn retry(state: &mut State, now: DateTime<Utc>) -> Vec<Effect> {
    if state.retry_at.is_some_and(|t| now < t) {
        return Vec::new();
    }
    state.retry_at = Some(now + state.retry_delay);
    state.retry_delay = (state.retry_delay * 2).min(chrono::Duration::seconds(30));
    vec![Effect::SignIn]
}

/// The in-process server stopped on its own.
pub(super) fn on_server_stopped(state: &mut State, why: String) {
    state.message = Some((format!("the in-process server stopped: {why}"), true));
    // Only while the console is on it: after `:server URL` the other server is still fine.
    if state.server == state.home {
        state.connection = Connection::Unreachable(why);
    }
}

/// Forgets everything of the server in use and talks to another (`Effect::Connect`).
pub(super) fn connect(
    state: &mut State,
    label: String,
    to: Option<(String, Option<String>)>,
) -> Vec<Effect> {
    state.epoch += 1;
    state.server = label;
    state.connection = Connection::Connecting;
    state.user = None;
    state.namespaces.clear();
    state.catalog.clear();
    state.endpoints.clear();
    state.apps.clear();
    state.audit.clear();
    state.apps_note = None;
    state.audit_note = None;
    state.webhooks.clear();
    state.webhooks_note = None;
    // Polls under way are the old server's: their answers are dropped, and following starts again on
    // signing in. A webhook of the old server means nothing on the new one.
    state.deliveries.close();
    state.deliveries.rows.clear();
    state.notifications = NotificationsFeed::default();
    state.notice = None;
    // The other server may have other servers beside it, and may let the user read them.
    state.servers = ServersFeed::default();
    if state.view == View::Deliveries {
        state.view = View::Webhooks;
    }
    state.selected = 0;
    state.overlay = Overlay::None;
    state.loading = false;
    state.retry_at = None;
    state.retry_delay = chrono::Duration::seconds(1);
    vec![Effect::Connect(to), Effect::SignIn]
}
