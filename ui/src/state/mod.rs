//! The console's state and its one update function; the views draw from it, and it knows nothing of them.
//!
//! Terminal keys and API results come in as [`Action`]s; [`update`] changes the [`State`] and returns the
//! [`Effect`]s (API calls) to run. No I/O and no `.await` here.
//!
//! The modules, lowest first; each imports only modules listed before it (and the crate's lower layers),
//! and this file only declares them and re-exports what the rest of the crate uses:
//! - `rows`: the rows of the lists (catalog, endpoints, OAuth apps, audit entries, webhooks,
//!   notifications) and the servers on the store, as parsed from the API.
//! - `deliveries`: a webhook's attempts: what each is about and what changed, the request sent and the
//!   answer, what it stands for now (superseded, due, held).
//! - `overlay`: what covers the view (help, the dialog, a secret shown once, the command line, a pane, an
//!   editor or form); the type a secret is held in.
//! - `model`: the [`State`] struct, the view, the connection and the live feeds; what is read off them.
//! - `action`: what comes into `update` ([`Action`], [`Key`]); a key typed into a line of text.
//! - `notes`: what a view says in place of its list (refused, unreachable, empty and why), and what it
//!   offers to do (nothing with a list it could not have).
//! - `layout`: where things are on a terminal of a given size (paging and clicks; the views draw with it).
//! - `engines`: what the server can run (the catalog's marks), the install a deploy needs, its progress.
//! - `lists`: loading the lists, switching between them, the selection, the filter, copying.
//! - `connection`: signing in, retrying a lost server, switching server.
//! - `panes`: describe and logs: opening, scrolling, searching, following.
//! - `editors`: the spec and schedule editors and the deploy form, and the answers to their saves.
//! - `apps`: the OAuth apps and audit log views: the new-app form, the app actions, the secret shown once.
//! - `webhooks`: the webhooks view (its form and its actions) and a webhook's live deliveries, replays.
//! - `notifications`: following the user's notifications, the status line's notice.
//! - `servers`: reading the servers on the store every few seconds, for the status line.
//! - `confirm`: the dialog before an endpoint's, an app's or a webhook's action, and its answer.
//! - `command_line`: the `:` command line.
//! - `keys`: where a key or a keymap command goes.
//! - `update`: the one update function; the tick.

mod action;
mod analytics;
mod apps;
mod charts;
mod command_line;
mod confirm;
mod connection;
mod deliveries;
mod editors;
mod engines;
mod keys;
pub mod layout;
mod lists;
mod model;
mod notes;
mod notifications;
mod overlay;
mod panes;
mod rows;
mod servers;
mod update;
mod webhooks;

pub use action::{
    Action, CreatedApp, Key, LoadFailure, NotificationsFailure, Refusal, SavedWebhook,
    SignInFailure,
};
pub use charts::{
    Analytics, ChartRange, Charts, DecisionRow, Series, SPARKLINE_MIN_WIDTH, SPARKLINE_SPAN,
};
pub use command_line::shown_command;
pub use deliveries::{DeliveryRow, Standing};
pub use model::{
    Connection, DeliveriesFeed, NotificationsFeed, ServersFeed, State, View, LONG_POLL_WAIT,
    SERVERS_EVERY,
};
pub use overlay::{IssuedSecret, Overlay, Secret, SecretKind};
pub use rows::{
    clock, AppRow, AuditRow, CatalogRow, EndpointRow, EngineInstall, EngineMarks, NotificationRow,
    Recipe, RecipeRuns, ReplicaLoad, Runs, ServerRow, WebhookRow,
};
pub use update::update;

pub use crate::effects::{AppAction, Effect, EndpointAction, ExternalEdit, WebhookAction};

#[cfg(test)]
mod tests;
