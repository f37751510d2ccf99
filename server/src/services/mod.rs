//! The operations on endpoints, the catalog and accounts, called by the API, the deploy path, the CLI
//! and the reconciler. Each change runs in one unit of work and appends its event to the outbox there,
//! so a change and its event commit together or not at all. Handlers parse, call one of these and
//! render; nothing here knows HTTP.

pub mod accounts;
pub mod analytics;
pub mod apps;
pub mod catalog;
pub mod domains;
pub mod endpoints;
pub mod notices;
mod policy;
pub mod publishers;
pub mod quotas;
pub mod servers;
pub mod webhooks;

use std::sync::Arc;

use crate::catalog::CatalogCache;
use crate::clock::Clock;
use crate::config::{QuotaConfig, RuntimeConfig};
use crate::crypto::SecretBox;
use crate::hardware::HardwareList;
use crate::model::Issue;
use crate::store::{Store, StoreError};

/// What the operations work with.
pub struct Context {
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    /// Seals endpoint secrets before they are stored.
    pub secrets: SecretBox,
    /// The catalog as listed; rebuilt after every catalog change.
    pub catalog: CatalogCache,
    pub hardware: Arc<HardwareList>,
    /// Who may make the host run code of their choosing (`runtime.custom_commands`).
    pub runtime_config: RuntimeConfig,
    /// What a namespace may hold unless an administrator set otherwise.
    pub quotas: QuotaConfig,
    /// How long the endpoints' analytics are kept: which resolution answers a range.
    pub analytics: crate::config::AnalyticsConfig,
    /// The server's own host (bare): no endpoint's custom domain may take it.
    pub public_host: String,
    /// The server's public base URL (no trailing slash): links in webhook payloads start here.
    pub public_url: String,
    /// Bumped when a credential loses rights, so no cached answer outlives it.
    pub revocations: Arc<crate::auth::Revocations>,
    /// Called after an endpoint change commits, so the runtime acts on it at once.
    pub on_change: Arc<dyn Fn() + Send + Sync>,
    /// The engines this server can start (configured, installed in the data dir, or on `PATH`).
    pub engines: Arc<crate::engines::Engines>,
    /// Every request to the outside goes through it (client metadata documents, CI issuers' keys,
    /// webhooks), so none reaches a special-use address that `[outbound] allow` does not list.
    pub outbound: Arc<crate::outbound::Outbound>,
    /// Bumped each time a delivery attempt is recorded: the activity view's followers wait on it.
    pub activity: Arc<tokio::sync::watch::Sender<u64>>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The input breaks the model's rules; each issue names its field.
    #[error("invalid input")]
    Invalid(Vec<Issue>),
    /// Well-formed, but not allowed now (e.g. resuming a running endpoint).
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Conflict(m) => Error::Conflict(m),
            StoreError::NotFound(m) => Error::NotFound(m),
            other => Error::Store(other),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
