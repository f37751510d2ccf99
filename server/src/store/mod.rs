//! Persistence behind one trait that speaks in model types; SQLite now, other backends later.

mod sqlite;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

pub use sqlite::{SqliteStore, Synchronous};

use crate::model::account::{Account, AccountKind, Membership, Role, Scope, TokenInfo};
use crate::model::catalog::CatalogEntry;
use crate::model::{EndpointSpec, EndpointState};

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
    #[error("store failure: {0}")]
    Backend(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::Backend(e.to_string())
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// A new account to create.
#[derive(Debug, Clone)]
pub struct NewAccount {
    pub kind: AccountKind,
    pub name: String,
    pub fullname: String,
    pub email: Option<String>,
    pub is_admin: bool,
}

/// A token to record: only its hash is given to the store.
#[derive(Debug, Clone)]
pub struct NewToken {
    pub user_id: String,
    pub token_hash: String,
    pub display_name: String,
    pub scopes: Option<Vec<Scope>>,
    pub expires_at: Option<DateTime<Utc>>,
}

/// Who made a change, as shown in an endpoint's status.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Actor {
    pub id: String,
    pub name: String,
}

/// An endpoint as stored. The spec's secret values are ciphertext here.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointRecord {
    pub id: String,
    pub namespace: String,
    pub spec: EndpointSpec,
    pub state: EndpointState,
    pub message: Option<String>,
    pub url: Option<String>,
    pub ready_replica: u32,
    pub target_replica: u32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub created_by: Actor,
    pub updated_by: Actor,
    /// Bumped on every write; an update names the version it read.
    pub version: i64,
}

#[async_trait]
pub trait Store: Send + Sync + 'static {
    // Accounts
    async fn create_account(&self, new: NewAccount, now: DateTime<Utc>) -> StoreResult<Account>;
    async fn account_by_name(&self, name: &str) -> StoreResult<Option<Account>>;
    async fn list_accounts(&self, kind: AccountKind) -> StoreResult<Vec<Account>>;
    async fn count_accounts(&self) -> StoreResult<i64>;
    /// Adds a member, or changes the role of an existing one.
    async fn set_membership(
        &self,
        org: &str,
        user: &str,
        role: Role,
        now: DateTime<Utc>,
    ) -> StoreResult<Membership>;
    async fn remove_membership(&self, org: &str, user: &str) -> StoreResult<bool>;
    async fn list_members(&self, org: &str) -> StoreResult<Vec<Membership>>;
    /// Organizations the user belongs to, with the user's role in each.
    async fn orgs_of(&self, user_id: &str) -> StoreResult<Vec<(Account, Role)>>;
    /// The user's role in the organization, if a member.
    async fn role_in(&self, org: &str, user_id: &str) -> StoreResult<Option<Role>>;

    // Tokens
    async fn create_token(&self, new: NewToken, now: DateTime<Utc>) -> StoreResult<TokenInfo>;
    /// The token with this hash and its user.
    async fn token_by_hash(&self, hash: &str) -> StoreResult<Option<(TokenInfo, Account)>>;
    async fn list_tokens(&self, user: &str) -> StoreResult<Vec<TokenInfo>>;
    async fn delete_token(&self, id: &str) -> StoreResult<bool>;

    // Catalog
    async fn catalog_entries(&self) -> StoreResult<Vec<CatalogEntry>>;
    async fn put_catalog_entry(
        &self,
        entry: &CatalogEntry,
        now: DateTime<Utc>,
    ) -> StoreResult<bool>;
    async fn delete_catalog_entry(&self, repo_id: &str) -> StoreResult<bool>;
    /// Loads the seed once in the store's life: a catalog emptied later stays empty.
    async fn seed_catalog_once(
        &self,
        seed: &[CatalogEntry],
        now: DateTime<Utc>,
    ) -> StoreResult<bool>;

    // Endpoints
    async fn insert_endpoint(&self, rec: &EndpointRecord) -> StoreResult<()>;
    async fn endpoint(&self, namespace: &str, name: &str) -> StoreResult<Option<EndpointRecord>>;
    async fn endpoints_in(&self, namespace: &str) -> StoreResult<Vec<EndpointRecord>>;
    /// Every endpoint of every namespace (the reconciler's view).
    async fn all_endpoints(&self) -> StoreResult<Vec<EndpointRecord>>;
    /// Names in the namespace that start with `prefix` (to make a derived name unique).
    async fn endpoint_names_with_prefix(
        &self,
        namespace: &str,
        prefix: &str,
    ) -> StoreResult<Vec<String>>;
    /// Writes the record if its stored version is still `rec.version`; the stored version becomes `rec.version + 1`.
    async fn update_endpoint(&self, rec: &EndpointRecord) -> StoreResult<EndpointRecord>;
    async fn delete_endpoint(&self, namespace: &str, name: &str) -> StoreResult<bool>;
}
