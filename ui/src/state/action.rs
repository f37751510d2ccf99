//! What comes into `update` ([`Action`], [`Key`]), and what a typed key does to a line of text.
//!
//! An action is a key, a tick, the terminal's size, the mouse, or the answer to an effect; the lines typed
//! into are the filter, a pane's search and the command line.

use chrono::{DateTime, Utc};

use super::charts::{Analytics, ChartRange};
use super::deliveries::DeliveryRow;
use super::overlay::{IssuedSecret, Secret};
use super::rows::{
    AppRow, AuditRow, CatalogRow, EndpointRow, EngineMarks, NotificationRow, ReplicaLoad,
    ServerRow, WebhookRow,
};
use crate::effects::ExternalEdit;

/// A refusal from the server: its message and its `{path, message}` issues.
pub type Refusal = (String, Vec<(String, String)>);

/// Why a list could not be loaded: the server does not let the user see it (403), or something else.
#[derive(Debug, Clone, PartialEq)]
pub enum LoadFailure {
    Forbidden(String),
    Failed(String),
}

/// A new OAuth app: its name, client id and, unless it is public, its secret (shown this once).
#[derive(Debug, Clone, PartialEq)]
pub struct CreatedApp {
    pub name: String,
    pub client_id: String,
    pub secret: Option<Secret>,
}

/// A webhook the form saved: its id and URL and, for a new one, its signing secret (shown this once).
#[derive(Debug, Clone, PartialEq)]
pub struct SavedWebhook {
    pub id: String,
    pub url: String,
    pub signing_secret: Option<Secret>,
}

/// A key pressed, named as the keymap names keys (`ctrl-c`, `enter`, `G`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key(pub String);

/// Why signing in failed: the server refused the token (not retried), or could not be asked.
#[derive(Debug, Clone, PartialEq)]
pub enum SignInFailure {
    Refused(String),
    Unreachable(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Key(Key),
    /// A second passed (the clock in the status line) or a refresh is due.
    Tick(DateTime<Utc>),
    /// The terminal's new size (columns, rows).
    Resize(u16, u16),
    /// A mouse wheel turn (`true`: down) or a click on a screen row.
    Wheel(bool),
    Click(u16),
    SignedIn(Result<(String, Vec<String>), SignInFailure>),
    /// The answer to the load with this sequence number; older answers than the latest asked are dropped.
    CatalogLoaded(u64, Result<Vec<CatalogRow>, String>),
    EndpointsLoaded(u64, Result<Vec<EndpointRow>, String>),
    /// An update from an editor was saved (its message) or refused.
    Saved {
        namespace: String,
        name: String,
        result: Result<String, Refusal>,
    },
    /// `$EDITOR` closed: the text it left, for the spec editor.
    ExternallyEdited(ExternalEdit, Result<String, String>),
    /// The in-process server stopped on its own: why.
    ServerStopped(String),
    /// An endpoint action finished: its message.
    Done(Result<String, String>),
    LogsLoaded {
        namespace: String,
        name: String,
        text: Result<String, String>,
    },
    ReplicasLoaded {
        namespace: String,
        name: String,
        result: Result<Vec<ReplicaLoad>, String>,
    },
    /// An endpoint's charts over `range`, or (namespace, name, why) they were not read.
    AnalyticsLoaded {
        range: ChartRange,
        result: Result<Analytics, (String, String, String)>,
    },
    /// The list's sparklines: each endpoint's requests per second (those that could not be read left out).
    SparklinesLoaded(Vec<((String, String), Vec<f64>)>),
    /// `namespace/name` of the new endpoint, or the server's refusal.
    Deployed(Result<String, Refusal>),
    /// What the server can run (`polled`: while an install is followed), or why it did not say.
    EnginesLoaded {
        polled: bool,
        result: Result<EngineMarks, String>,
    },
    /// An engine install started on the server (the engine's name), or was refused.
    EngineInstallStarted(Result<String, String>),
    AppsLoaded(u64, Result<Vec<AppRow>, LoadFailure>),
    AuditLoaded(u64, Result<Vec<AuditRow>, LoadFailure>),
    /// The new-app form's answer: the app, or the server's refusal.
    AppCreated(Result<CreatedApp, Refusal>),
    /// An app's secret was rotated: the new one, shown once. (Other app actions answer with `Done`.)
    SecretIssued(IssuedSecret),
    WebhooksLoaded(u64, Result<Vec<WebhookRow>, LoadFailure>),
    /// The webhook form's answer: the webhook (with its signing secret when it was just made), or the
    /// server's refusal.
    WebhookSaved(Result<SavedWebhook, Refusal>),
    /// The webhook of the deliveries view, read again (`feed` tells an answer for a view left since).
    WebhookLoaded {
        feed: u64,
        result: Result<WebhookRow, String>,
    },
    /// A poll of the deliveries view's feed: the attempts that came, newest first (none when the wait ran
    /// out), or why the poll failed.
    DeliveriesLoaded {
        feed: u64,
        result: Result<Vec<DeliveryRow>, String>,
    },
    /// A replay was queued (its message) or refused.
    Replayed(Result<String, String>),
    /// A poll of the notifications: those that came, oldest first, or why not.
    NotificationsLoaded(Result<Vec<NotificationRow>, NotificationsFailure>),
    /// A read of the servers on the store: the list, or why not (`Forbidden`: the user may not read it).
    ServersLoaded(Result<Vec<ServerRow>, LoadFailure>),
}

/// Why the notifications could not be had: this server has none (an older one, 404: the feature is off
/// without a word), or the poll failed (tried again, backing off).
#[derive(Debug, Clone, PartialEq)]
pub enum NotificationsFailure {
    Unsupported,
    Failed(String),
}

/// A key typed into a line of text without bounds (a filter, a search, a command line): backspace
/// deletes, space and single characters are added.
pub(super) fn type_into(text: &mut String, key: &str) {
    crate::forms::input::type_into(text, key, usize::MAX, |_| true);
}
