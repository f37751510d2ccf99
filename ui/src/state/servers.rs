//! The servers on the store: read every few seconds from sign-in, for the status line (the leader, those not
//! answering). A user who may not read them (401, 403: not an instance administrator) is not asked again and
//! sees nothing of them; a failed read keeps the last list.

use super::action::LoadFailure;
use super::model::State;
use super::rows::ServerRow;
use crate::effects::Effect;

/// Signed in: the reads start (unless one is under way, or the user may not read them).
pub(super) fn start(state: &mut State) -> Vec<Effect> {
    state.servers.poll().into_iter().collect()
}

/// A read answered: the list (a frame only when it changed), kept after a failure, gone after a refusal
/// (which ends the reads); then the next read.
pub(super) fn on_loaded(
    state: &mut State,
    result: Result<Vec<ServerRow>, LoadFailure>,
) -> Vec<Effect> {
    let feed = &mut state.servers;
    feed.polling = false;
    match result {
        Ok(rows) => {
            feed.failures = 0;
            if rows != feed.rows {
                feed.rows = rows;
                state.dirty = true;
            }
        }
        Err(LoadFailure::Forbidden(_)) => {
            feed.refused = true;
            if !feed.rows.is_empty() {
                feed.rows.clear();
                state.dirty = true;
            }
            return Vec::new();
        }
        // Tried again, backing off; the connection's own state says when the server is gone.
        Err(LoadFailure::Failed(_)) => feed.failures += 1,
    }
    state.servers.poll().into_iter().collect()
}
