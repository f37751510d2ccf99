//! The [`State`] struct (view, overlay, lists, selection, server, connection) and what is read off it.
//!
//! What is read off it: the keymap's context, the rows that pass the filter, the selected endpoint or app.

use chrono::{DateTime, Utc};

use super::deliveries::{DeliveryRow, Standing};
use super::overlay::Overlay;
use super::rows::{
    AppRow, AuditRow, CatalogRow, EndpointRow, EngineMarks, NotificationRow, ReplicaLoad,
    ServerRow, WebhookRow,
};
use crate::effects::Effect;
use crate::keymap::Context;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Catalog,
    Endpoints,
    /// The OAuth apps of the signed-in user or of a namespace they manage (`:apps [OWNER]`).
    Apps,
    /// An organization's audit log (`:audit ORG`).
    Audit,
    /// The caller's webhooks and its organizations' (`:webhooks`).
    Webhooks,
    /// One webhook's attempts, live (`enter` on a webhook).
    Deliveries,
    /// The user's notifications, newest at the top (`:notifications`).
    Notifications,
}

/// Seconds a long poll asks the server to hold the request: under the client's 30-second timeout.
pub const LONG_POLL_WAIT: u64 = 25;

/// Most rows a live list keeps (the oldest go).
pub const FEED_ROWS: usize = 1000;

/// Seconds before polling again after `failures` failed polls in a row: 1, 2, 4… up to 30.
fn backoff(failures: u32) -> u64 {
    match failures {
        0 => 0,
        n => 2u64.saturating_pow(n - 1).min(30),
    }
}

/// The deliveries view's feed: the webhook followed and its attempts (newest first). Each answer starts the
/// next poll, so one is under way at a time; answers for a feed left since are dropped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeliveriesFeed {
    pub webhook: String,
    pub url: String,
    pub rows: Vec<DeliveryRow>,
    /// The newest `seq` seen: the next poll asks for what comes after it.
    pub newest: Option<i64>,
    /// The first page came: from then on the feed follows.
    pub primed: bool,
    /// Bumped for each webhook opened (and when the view is left): answers for another are dropped.
    pub feed: u64,
    pub failures: u32,
    /// Why the last poll failed, shown over the list until one succeeds.
    pub note: Option<String>,
    /// The webhook as last read: whether it is held, failing or disabled, and why.
    pub hook: Option<WebhookRow>,
}

impl DeliveriesFeed {
    /// Starts over on `hook`: the newest page at once, then following.
    pub fn open(&mut self, hook: Option<WebhookRow>, webhook: String, url: String) -> Effect {
        *self = DeliveriesFeed {
            webhook,
            url,
            feed: self.feed + 1,
            hook,
            ..DeliveriesFeed::default()
        };
        self.poll()
    }

    /// The webhook read again (whether it is held now): after the attempts that may have changed that.
    pub fn reload_hook(&self) -> Effect {
        Effect::LoadWebhook {
            feed: self.feed,
            id: self.webhook.clone(),
        }
    }

    /// The latest attempt after `row`'s of the same delivery, if one is in the list.
    pub fn later(&self, row: &DeliveryRow) -> Option<i64> {
        let same = self
            .rows
            .iter()
            .filter(|r| r.delivery_id == row.delivery_id);
        same.map(|r| r.attempt).filter(|n| *n > row.attempt).max()
    }

    /// What `row` says of its attempt at `now`.
    pub fn standing(&self, row: &DeliveryRow, now: DateTime<Utc>) -> Standing {
        let held = self.hook.as_ref().and_then(|h| h.held(now));
        row.standing(self.later(row), held, now)
    }

    /// Stops following: a poll under way is dropped when it answers.
    pub fn close(&mut self) {
        self.feed += 1;
    }

    /// The next poll: the newest page until one came, then a long poll for what comes after the newest seen
    /// (after 0 while there is none yet), backing off after failures.
    pub fn poll(&self) -> Effect {
        Effect::FollowDeliveries {
            feed: self.feed,
            id: self.webhook.clone(),
            after: self.newest.or(self.primed.then_some(0)),
            wait: if self.primed { LONG_POLL_WAIT } else { 0 },
            delay: backoff(self.failures),
        }
    }
}

/// The notifications feed: the user's notifications (newest first), the poll under way, and whether this
/// server has them at all.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NotificationsFeed {
    pub rows: Vec<NotificationRow>,
    pub newest: Option<i64>,
    /// The first page came (the history, not shown in the status line).
    pub primed: bool,
    pub polling: bool,
    pub failures: u32,
    /// The server has no notifications (404): nothing is polled and nothing is said.
    pub unsupported: bool,
}

impl NotificationsFeed {
    /// The next poll, unless one is under way or the server has none.
    pub fn poll(&mut self) -> Option<Effect> {
        if self.polling || self.unsupported {
            return None;
        }
        self.polling = true;
        Some(Effect::FollowNotifications {
            after: self.newest.or(self.primed.then_some(0)),
            wait: if self.primed { LONG_POLL_WAIT } else { 0 },
            delay: backoff(self.failures),
        })
    }
}

/// Seconds between two reads of the servers on the store.
pub const SERVERS_EVERY: u64 = 5;

/// The servers on the store, read every few seconds from sign-in while the user may read them (an instance
/// administrator); one read under way at a time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServersFeed {
    /// The last list read: a failed read keeps it.
    pub rows: Vec<ServerRow>,
    /// A read was asked: the next ones wait [`SERVERS_EVERY`] seconds.
    pub asked: bool,
    /// A read is under way: signing in again starts none.
    pub polling: bool,
    /// Failed reads in a row: the next waits longer.
    pub failures: u32,
    /// The server does not let the user read them (401, 403): nothing is asked and nothing is shown.
    pub refused: bool,
}

impl ServersFeed {
    /// The next read, unless one is under way or the user may not read them: at once the first time, then
    /// every few seconds, backing off after failures.
    pub fn poll(&mut self) -> Option<Effect> {
        if self.polling || self.refused {
            return None;
        }
        let delay = match self.asked {
            true => SERVERS_EVERY.max(backoff(self.failures)),
            false => 0,
        };
        self.asked = true;
        self.polling = true;
        Some(Effect::LoadServers { delay })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Connection {
    Connecting,
    Connected,
    /// The server could not be reached: the console retries with backoff.
    Unreachable(String),
    /// The server refused the token.
    Unauthorized(String),
}

#[derive(Debug, Clone)]
pub struct State {
    pub view: View,
    pub overlay: Overlay,
    pub catalog: Vec<CatalogRow>,
    /// The server's filters of the catalog shown (`:catalog task=… limit=…`): in its title, and `r` reloads
    /// with them.
    pub catalog_filters: Vec<(String, String)>,
    /// The filters of the catalog load under way: they become the shown ones when it answers.
    pub(super) catalog_asked: Vec<(String, String)>,
    /// Which catalog recipes run on the server, and its engine installs.
    pub engines: EngineMarks,
    /// An install is being followed (one poll a second until it ends).
    pub(super) engines_followed: bool,
    /// The built-in engine the deploy under way needs first: offered once the endpoint exists.
    pub(super) install_after_deploy: Option<String>,
    /// The update that sets the notifications of the endpoint the deploy under way makes, and then the
    /// endpoint it went to (its answer is told with the deploy's).
    pub(super) notify_after_deploy: Option<serde_json::Value>,
    pub(super) notifying: Option<(String, String)>,
    pub endpoints: Vec<EndpointRow>,
    /// The replicas of the endpoint last described (`namespace`, `name`): `None` until they load.
    pub(super) replicas: Option<(String, String, Result<Vec<ReplicaLoad>, String>)>,
    /// The described endpoint's charts, their range, and the list's sparklines.
    pub charts: super::charts::Charts,
    pub apps: Vec<AppRow>,
    /// Whose apps are shown: `None` for the signed-in user's own.
    pub apps_owner: Option<String>,
    /// Whose audit log is shown.
    pub audit_org: String,
    pub audit: Vec<AuditRow>,
    /// Why the apps or the audit log could not be loaded, shown in place of an empty table.
    pub apps_note: Option<String>,
    pub audit_note: Option<String>,
    pub selected: usize,
    /// `/` filter: editing (`Some(text)` while typing) and applied text.
    pub filter: String,
    pub filtering: bool,
    pub server: String,
    pub connection: Connection,
    pub user: Option<String>,
    pub namespaces: Vec<String>,
    pub message: Option<(String, bool)>,
    pub read_only: bool,
    pub quit: bool,
    /// An endpoints load is under way: ticks do not start another.
    pub loading: bool,
    /// The console has just started: the first endpoints answer opens the endpoints view when there are
    /// any (until a key is pressed).
    pub(super) landing: bool,
    /// The latest catalog and endpoints loads asked for.
    pub catalog_seq: u64,
    pub endpoints_seq: u64,
    pub apps_seq: u64,
    pub audit_seq: u64,
    /// Bumped when the console switches server: answers from before are dropped by the runtime.
    pub epoch: u64,
    /// The server the console started with (`:server` alone goes back to it).
    pub home: String,
    /// The terminal's size (columns, rows).
    pub size: (u16, u16),
    /// Something on screen changed since the last frame.
    pub dirty: bool,
    pub(super) retry_at: Option<DateTime<Utc>>,
    pub(super) retry_delay: chrono::Duration,
    pub now: DateTime<Utc>,
    /// Where logs go, shown on the help screen.
    pub log_file: String,
    /// Problems with the keymap, shown once at start.
    pub keymap_problems: Vec<String>,
    pub webhooks: Vec<WebhookRow>,
    pub webhooks_seq: u64,
    /// Why the webhooks could not be loaded, shown in place of an empty table.
    pub webhooks_note: Option<String>,
    pub deliveries: DeliveriesFeed,
    pub notifications: NotificationsFeed,
    /// The newest notification, as the status line shows it (an error when something failed).
    pub notice: Option<(String, bool)>,
    /// The servers on the store: the status line names the leader and those not answering.
    pub servers: ServersFeed,
}

impl State {
    pub fn new(server: String, read_only: bool, now: DateTime<Utc>, log_file: String) -> State {
        State {
            home: server.clone(),
            view: View::Catalog,
            overlay: Overlay::None,
            catalog: Vec::new(),
            catalog_filters: Vec::new(),
            catalog_asked: Vec::new(),
            engines: EngineMarks::default(),
            engines_followed: false,
            install_after_deploy: None,
            notify_after_deploy: None,
            notifying: None,
            endpoints: Vec::new(),
            replicas: None,
            charts: Default::default(),
            apps: Vec::new(),
            apps_owner: None,
            audit_org: String::new(),
            audit: Vec::new(),
            apps_note: None,
            audit_note: None,
            selected: 0,
            filter: String::new(),
            filtering: false,
            server,
            connection: Connection::Connecting,
            user: None,
            namespaces: Vec::new(),
            message: None,
            read_only,
            quit: false,
            loading: false,
            landing: true,
            catalog_seq: 0,
            endpoints_seq: 0,
            apps_seq: 0,
            audit_seq: 0,
            epoch: 0,
            size: (80, 24),
            dirty: true,
            retry_at: None,
            retry_delay: chrono::Duration::seconds(1),
            now,
            log_file,
            keymap_problems: Vec::new(),
            webhooks: Vec::new(),
            webhooks_seq: 0,
            webhooks_note: None,
            deliveries: DeliveriesFeed::default(),
            notifications: NotificationsFeed::default(),
            notice: None,
            servers: ServersFeed::default(),
        }
    }

    /// The keys of the line being typed into (the command line, the `/` filter, a pane's search): not the
    /// keymap's, since these lines take every printable key.
    pub fn typing_keys(&self) -> Option<&'static [(&'static str, &'static str)]> {
        let searching = match &self.overlay {
            Overlay::Describe(p) => p.typing,
            Overlay::Logs { pager, .. } => pager.typing,
            _ => false,
        };
        match &self.overlay {
            Overlay::Command(_) => {
                Some(&[("enter", "run"), ("esc", "cancel"), ("backspace", "delete")])
            }
            _ if self.filtering => Some(&[("enter", "keep the filter"), ("esc", "clear it")]),
            _ if searching => Some(&[("enter", "find"), ("esc", "cancel the search")]),
            _ => None,
        }
    }

    pub fn context(&self) -> Context {
        match (&self.overlay, self.view) {
            (Overlay::Confirm { .. }, _) => Context::Dialog,
            (Overlay::Secret(_), _) => Context::Secret,
            (Overlay::Logs { .. }, _) => Context::Logs,
            (Overlay::Describe(_), _) => Context::Pager,
            (Overlay::Help(_), _) => Context::Help,
            (Overlay::Spec(_), _) => Context::Spec,
            (Overlay::Schedule(_), _) => Context::Schedule,
            (Overlay::Deploy(_) | Overlay::NewApp(_) | Overlay::Webhook(_), _) => Context::Form,
            (_, View::Catalog) => Context::Catalog,
            (_, View::Endpoints) => Context::Endpoints,
            (_, View::Apps) => Context::Apps,
            (_, View::Audit) => Context::Audit,
            (_, View::Webhooks) => Context::Webhooks,
            (_, View::Deliveries) => Context::Deliveries,
            (_, View::Notifications) => Context::Notifications,
        }
    }

    /// Rows of the current view that pass the filter (indices into the view's list).
    pub fn visible(&self) -> Vec<usize> {
        let f = self.filter.to_lowercase();
        match self.view {
            View::Catalog => (0..self.catalog.len())
                .filter(|i| f.is_empty() || self.catalog[*i].matches(&f))
                .collect(),
            View::Endpoints => (0..self.endpoints.len())
                .filter(|i| f.is_empty() || self.endpoints[*i].matches(&f))
                .collect(),
            View::Apps => (0..self.apps.len())
                .filter(|i| f.is_empty() || self.apps[*i].matches(&f))
                .collect(),
            View::Audit => (0..self.audit.len())
                .filter(|i| f.is_empty() || self.audit[*i].matches(&f))
                .collect(),
            View::Webhooks => (0..self.webhooks.len())
                .filter(|i| f.is_empty() || self.webhooks[*i].matches(&f))
                .collect(),
            View::Deliveries => (0..self.deliveries.rows.len())
                .filter(|i| f.is_empty() || self.deliveries.rows[*i].matches(&f))
                .collect(),
            View::Notifications => (0..self.notifications.rows.len())
                .filter(|i| f.is_empty() || self.notifications.rows[*i].matches(&f))
                .collect(),
        }
    }

    /// The endpoint under the selection, in the endpoints view.
    pub(super) fn selected_endpoint(&self) -> Option<&EndpointRow> {
        let rows = self.visible();
        (self.view == View::Endpoints)
            .then(|| rows.get(self.selected).map(|i| &self.endpoints[*i]))
            .flatten()
    }

    /// The webhook under the selection, in the webhooks view.
    pub(super) fn selected_webhook(&self) -> Option<&WebhookRow> {
        let rows = self.visible();
        (self.view == View::Webhooks)
            .then(|| rows.get(self.selected).map(|i| &self.webhooks[*i]))
            .flatten()
    }

    /// The attempt under the selection, in the deliveries view.
    pub(super) fn selected_delivery(&self) -> Option<&DeliveryRow> {
        let rows = self.visible();
        (self.view == View::Deliveries)
            .then(|| rows.get(self.selected).map(|i| &self.deliveries.rows[*i]))
            .flatten()
    }

    /// The app under the selection, in the apps view.
    pub(super) fn selected_app(&self) -> Option<&AppRow> {
        let rows = self.visible();
        (self.view == View::Apps)
            .then(|| rows.get(self.selected).map(|i| &self.apps[*i]))
            .flatten()
    }
}
