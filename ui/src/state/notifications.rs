//! The user's notifications: followed from sign-in with a long poll, the newest in the status line, all of
//! them in `:notifications` (newest at the top). A server without them (404) turns the feature off silently.

use super::action::NotificationsFailure;
use super::lists::clamp;
use super::model::{State, View, FEED_ROWS};
use super::rows::NotificationRow;
use crate::effects::Effect;

/// Signed in: following starts (unless it is under way, or the server has none).
pub(super) fn start(state: &mut State) -> Vec<Effect> {
    state.notifications.poll().into_iter().collect()
}

/// A poll answered: the new notifications go on top of the list, the newest to the status line (not those
/// of the first page: they are history), and the next poll starts.
pub(super) fn on_loaded(
    state: &mut State,
    result: Result<Vec<NotificationRow>, NotificationsFailure>,
) -> Vec<Effect> {
    let feed = &mut state.notifications;
    feed.polling = false;
    match result {
        Ok(rows) => {
            feed.failures = 0;
            let newest = feed.newest;
            let mut new: Vec<NotificationRow> = rows
                .into_iter()
                .filter(|r| newest.is_none_or(|n| r.seq > n))
                .collect();
            new.sort_by_key(|r| std::cmp::Reverse(r.seq));
            if let Some(top) = new.first() {
                feed.newest = Some(top.seq);
                if feed.primed {
                    let more = match new.len() {
                        1 => String::new(),
                        n => format!(" (+{} more: :notifications)", n - 1),
                    };
                    state.notice = Some((format!("{}{more}", top.headline()), top.is_bad()));
                    state.dirty = true;
                }
                let n = new.len();
                new.append(&mut feed.rows);
                new.truncate(FEED_ROWS);
                feed.rows = new;
                if state.view == View::Notifications {
                    if state.selected > 0 {
                        state.selected += n;
                    }
                    clamp(state);
                    state.dirty = true;
                }
            }
            state.notifications.primed = true;
        }
        // An older server: no notifications, and nothing said about it.
        Err(NotificationsFailure::Unsupported) => {
            feed.unsupported = true;
            if state.view == View::Notifications {
                state.dirty = true;
            }
            return Vec::new();
        }
        // Tried again, backing off; the connection's own state says when the server is gone.
        Err(NotificationsFailure::Failed(_)) => feed.failures += 1,
    }
    state.notifications.poll().into_iter().collect()
}
