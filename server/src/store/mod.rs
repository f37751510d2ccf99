//! Persistence: one module per area (accounts, endpoint analytics, catalog, custom domains, endpoints, events, OAuth, trusted
//! publishers, quotas) behind traits that speak in model types, and units of work in which several writes commit
//! together or not at all.
//!
//! One SQL implementation ([`SqlStore`], on sqlx's `Any` driver) runs on two backends: the embedded
//! SQLite file (the default) and PostgreSQL (`store.url = "postgres://…"`). Each backend keeps its own
//! migrations (`server/migrations/{sqlite,postgres}`), applied in order at open; the SQL in the area
//! modules is written once, in the subset both speak (`$N` parameters, `ON CONFLICT`, `RETURNING`).
//! Uniqueness lives in the schema: a broken rule comes back as [`StoreError::Conflict`].

mod accounts;
mod analytics;
mod backend;
mod batch;
mod catalog;
pub mod cluster;
pub mod copy;
mod domains;
mod endpoints;
mod events;
mod migrate;
mod notifications;
mod oauth;
mod publishers;
mod quotas;
mod sql;
mod topic;
mod webhooks;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

pub use accounts::{AccountStore, NewAccount, NewToken};
pub use analytics::{AnalyticsStore, SeriesRow};
pub use backend::Backend;
pub use catalog::CatalogStore;
pub use domains::{DomainClaim, DomainStore};
pub use endpoints::{Actor, EndpointRecord, EndpointStore};
pub use events::{Event, EventStore, NewEvent};
pub use notifications::{Mail, MailQueue, NewNotice, Notice, NotificationStore};
pub use oauth::{
    DeviceAuth, DeviceStatus, IssueRecord, NewCode, NewTokenRow, OAuthStore, SigningKeyRow, Spent,
    WebSession,
};
pub use publishers::PublisherStore;
pub use quotas::{QuotaOverride, QuotaStore};
pub use sql::{SqlStore, StoreUrl, Synchronous};
pub use webhooks::{AttemptRecord, Claimed, DeliveryQueue, Outcome, WebhookRecord, WebhookStore};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A uniqueness rule was broken; the message says which.
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    NotFound(String),
    /// The row changed since it was read (optimistic concurrency).
    #[error("the record was changed concurrently; retry")]
    Stale,
    /// A write made as leader, by a server that no longer holds the lease.
    #[error("this server no longer leads (its lease lapsed or passed to another server)")]
    Fenced,
    #[error("store failure: {0}")]
    Backend(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::Backend(e.to_string())
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// File name of the SQLite database inside the data dir, when `store.url` does not name a store.
pub const DB_FILE: &str = "switchyard.db";

/// A session on the store: every area's operations, on one connection. From [`Store::begin`] it is a
/// unit of work (nothing is visible to others until [`Session::commit`]; dropped, it rolls back); from
/// [`Store::read`] each statement stands alone, which is what a plain read wants.
#[async_trait]
pub trait Session:
    AccountStore
    + AnalyticsStore
    + CatalogStore
    + DomainStore
    + EndpointStore
    + EventStore
    + OAuthStore
    + PublisherStore
    + QuotaStore
    + WebhookStore
    + NotificationStore
    + cluster::ClusterSession
    + Send
{
    /// Makes the unit of work's writes durable and visible, all of them or none.
    async fn commit(self: Box<Self>) -> StoreResult<()>;
}

#[async_trait]
pub trait Store: DeliveryQueue + MailQueue + cluster::ClusterStore + Send + Sync + 'static {
    /// A unit of work: writes through it commit together. On SQLite it holds the write lock from the
    /// start (so a read-then-write never fails to upgrade); on PostgreSQL it is a read-committed
    /// transaction, with versions and constraints guarding the rows it changes.
    async fn begin(&self) -> StoreResult<Box<dyn Session>>;
    /// A session for reads, each statement on its own.
    async fn read(&self) -> StoreResult<Box<dyn Session>>;
    fn backend(&self) -> Backend;
    /// A consistent copy of the whole store in a new file, taken while it serves (SQLite only).
    async fn backup(&self, to: &std::path::Path) -> StoreResult<()>;
    async fn close(&self);
    /// Records what a token request issued (a new grant, its tokens, an audit row) in one
    /// transaction; on SQLite the whole transaction is one round trip.
    async fn record_issue(&self, rec: &IssueRecord<'_>) -> StoreResult<()>;
    /// Spends an authorization code in one statement: of two concurrent redemptions exactly one
    /// finds it `Fresh`.
    async fn spend_code(&self, hash: &str, now: DateTime<Utc>) -> StoreResult<Spent>;
}

/// A timestamp as every backend stores it: RFC 3339 in UTC with milliseconds, so text order is time order.
pub(crate) fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

pub(crate) fn parse_ts(s: &str) -> StoreResult<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| StoreError::Backend(format!("bad timestamp {s:?} in store: {e}")))
}

pub(crate) fn json_err(e: serde_json::Error) -> StoreError {
    StoreError::Backend(format!("bad JSON in store: {e}"))
}

/// A value as the JSON text a column holds.
pub(crate) fn json<T: serde::Serialize + ?Sized>(v: &T) -> StoreResult<String> {
    serde_json::to_string(v).map_err(json_err)
}

/// The timestamp in column `col` of `row`.
pub(crate) fn req_ts(row: &sqlx::any::AnyRow, col: &str) -> StoreResult<DateTime<Utc>> {
    use sqlx::Row;
    parse_ts(&row.try_get::<String, _>(col)?)
}

/// The value of the JSON text in column `col` of `row`.
pub(crate) fn json_col<T: serde::de::DeserializeOwned>(
    row: &sqlx::any::AnyRow,
    col: &str,
) -> StoreResult<T> {
    use sqlx::Row;
    serde_json::from_str(&row.try_get::<String, _>(col)?).map_err(json_err)
}

/// The timestamp in column `col` of `row`, if it holds one.
pub(crate) fn opt_ts(row: &sqlx::any::AnyRow, col: &str) -> StoreResult<Option<DateTime<Utc>>> {
    use sqlx::Row;
    row.try_get::<Option<String>, _>(col)?
        .as_deref()
        .map(parse_ts)
        .transpose()
}

/// The unique index or constraint a failed write broke, when it broke one.
pub(crate) fn unique_violation(e: &sqlx::Error) -> Option<String> {
    match e {
        sqlx::Error::Database(d) if d.is_unique_violation() => Some(
            d.constraint()
                .map(str::to_string)
                .unwrap_or_else(|| d.message().to_string()),
        ),
        _ => None,
    }
}
