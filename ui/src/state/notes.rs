//! What a view says in place of its list when it has none to show (refused, unreachable, or empty with a
//! reason), and what it offers to do: a list that could not be had offers nothing to do with it, and what
//! acts on the selected row needs one.

use super::model::{Connection, State, View};
use crate::keymap::Command;

/// How to get a token that may manage OAuth apps, for those who signed in with another kind.
pub const PERSONAL_TOKEN_HINT: &str = "A `switchyard login` sign-in is an app's token and a token made with \
     --scope is restricted: neither may. Make an unrestricted one on the server with `switchyard admin \
     --data-dir DIR token create NAME` (no --scope) and open the console with it: `:server URL TOKEN`, or \
     `switchyard --server URL --token TOKEN`. The in-process console (`switchyard` alone) has the admin's.";

/// Why the notifications view is empty: none came yet, and whether any will.
fn no_notifications(state: &State) -> String {
    let pushing = state
        .endpoints
        .iter()
        .filter(|e| e.raw["notifications"]["push"] == true)
        .count();
    let what =
        "a notice comes when one is running after a deploy or an update, fails, scales to zero or \
                is deleted";
    match (state.endpoints.len(), pushing) {
        (0, _) => format!(
            "No notifications yet. They come from endpoints whose spec has notifications.push (the \
             deploy form's \"notify me here\" switch): {what}."
        ),
        (_, 0) => format!(
            "No notifications yet, and none will come as things are: an endpoint notifies only when its \
             spec has notifications.push, and none of yours has it. The deploy form's \"notify me here\" \
             switch sets it for a new one; for one that exists, `e` edits its spec (\"notifications\": \
             {{\"push\": true}}). Then {what}."
        ),
        (_, n) => format!(
            "No notifications yet. {n} of your endpoints notify here (notifications.push): {what}."
        ),
    }
}

impl State {
    /// Why the server is not there, as a view without rows says it: whole, with what to do.
    fn unreachable_note(&self) -> Option<String> {
        let Connection::Unreachable(why) = &self.connection else {
            return None;
        };
        let back = match self.server == self.home {
            true => String::new(),
            false => format!("; `:server` alone goes back to {}", self.home),
        };
        Some(format!(
            "Cannot reach {}: {why}. The console tries again by itself; `:server URL [TOKEN]` opens another \
             server{back}.",
            self.server
        ))
    }

    /// What the view says in place of its list, if it has none to show: why it could not be had, or why it
    /// is empty.
    pub fn list_note(&self) -> Option<String> {
        let empty = match self.view {
            View::Catalog => self.catalog.is_empty(),
            View::Endpoints => self.endpoints.is_empty(),
            View::Apps => {
                return self
                    .apps_note
                    .clone()
                    .or(self.empty_note(self.apps.is_empty()))
            }
            View::Audit => {
                return self
                    .audit_note
                    .clone()
                    .or(self.empty_note(self.audit.is_empty()))
            }
            View::Webhooks => {
                return (self.webhooks_note.clone()).or(self.empty_note(self.webhooks.is_empty()))
            }
            View::Deliveries => false,
            View::Notifications => return self.notifications_note(),
        };
        self.empty_note(empty)
    }

    /// An empty list of a server that is not there says so.
    fn empty_note(&self, empty: bool) -> Option<String> {
        empty.then(|| self.unreachable_note()).flatten()
    }

    fn notifications_note(&self) -> Option<String> {
        let n = &self.notifications;
        if n.unsupported {
            return Some("this server has no notifications (it is older than this console)".into());
        }
        if !n.rows.is_empty() {
            return None;
        }
        self.unreachable_note()
            .or_else(|| n.primed.then(|| no_notifications(self)))
    }

    /// What the view offers to do now, for the footer and the keys: `offered(command)`. Commands that work on
    /// the view's list need one the server gave (not a refusal in its place), and those on its selected row
    /// need a row.
    pub fn offered(&self) -> impl Fn(Command) -> bool {
        let refused = match self.view {
            View::Apps => self.apps_note.is_some(),
            View::Audit => self.audit_note.is_some(),
            View::Webhooks => self.webhooks_note.is_some(),
            _ => false,
        };
        let rows = !self.visible().is_empty();
        move |command| match command {
            Command::New => !refused,
            c if on_row(c) => !refused && rows,
            _ => true,
        }
    }

    /// Whether the view offers `command` now (see [`State::offered`]).
    pub fn offers(&self, command: Command) -> bool {
        self.offered()(command)
    }

    /// Why a command of the view's is not offered, when the view says why.
    pub fn why_not_offered(&self) -> Option<String> {
        match self.view {
            View::Apps => self.apps_note.clone(),
            View::Audit => self.audit_note.clone(),
            View::Webhooks => self.webhooks_note.clone(),
            _ => None,
        }
    }
}

/// Commands on the selected row of a list.
fn on_row(command: Command) -> bool {
    matches!(
        command,
        Command::Open
            | Command::Describe
            | Command::Copy
            | Command::Edit
            | Command::EditExternal
            | Command::Delete
            | Command::Logs
            | Command::Pause
            | Command::Resume
            | Command::ScaleToZero
            | Command::Schedule
            | Command::Deploy
            | Command::RotateSecret
            | Command::DeleteSecret
            | Command::ToggleWebhook
            | Command::Replay
    )
}
