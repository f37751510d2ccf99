//! The [`State`] struct (view, overlay, lists, selection, server, connection) and what is read off it.
//!
//! What is read off it: the keymap's context, the rows that pass the filter, the selected endpoint or app.

use chrono::{DateTime, Utc};

use super::overlay::Overlay;
use super::rows::{AppRow, AuditRow, CatalogRow, EndpointRow};
use crate::keymap::Context;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Catalog,
    Endpoints,
    /// The OAuth apps of the signed-in user or of a namespace they manage (`:apps [OWNER]`).
    Apps,
    /// An organization's audit log (`:audit ORG`).
    Audit,
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
    /// The filters the catalog was asked with (`:catalog task=… limit=…`).
    pub catalog_filters: Vec<(String, String)>,
    pub endpoints: Vec<EndpointRow>,
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
}

impl State {
    pub fn new(server: String, read_only: bool, now: DateTime<Utc>, log_file: String) -> State {
        State {
            home: server.clone(),
            view: View::Catalog,
            overlay: Overlay::None,
            catalog: Vec::new(),
            catalog_filters: Vec::new(),
            endpoints: Vec::new(),
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
        }
    }

    pub fn context(&self) -> Context {
        match (&self.overlay, self.view) {
            (Overlay::Confirm { .. }, _) => Context::Dialog,
            (Overlay::Secret(_), _) => Context::Secret,
            (Overlay::Logs { .. }, _) => Context::Logs,
            (Overlay::Describe(_), _) => Context::Pager,
            (_, View::Catalog) => Context::Catalog,
            (_, View::Endpoints) => Context::Endpoints,
            (_, View::Apps) => Context::Apps,
            (_, View::Audit) => Context::Audit,
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
        }
    }

    /// The endpoint under the selection, in the endpoints view.
    pub(super) fn selected_endpoint(&self) -> Option<&EndpointRow> {
        let rows = self.visible();
        (self.view == View::Endpoints)
            .then(|| rows.get(self.selected).map(|i| &self.endpoints[*i]))
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
