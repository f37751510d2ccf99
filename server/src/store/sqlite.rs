//! The SQLite store: one file in WAL mode, migrations embedded and applied at open.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{Row, SqlitePool};

use super::{Actor, EndpointRecord, NewAccount, NewToken, Store, StoreError, StoreResult};
use crate::crypto::random_id;
use crate::model::account::{Account, AccountKind, Membership, Role, Scope, TokenInfo};
use crate::model::catalog::CatalogEntry;
use crate::model::{EndpointSpec, EndpointState};

/// Embedded migrations, applied in order; `PRAGMA user_version` records how many ran.
const MIGRATIONS: &[&str] = &[include_str!("../../migrations/sqlite/0001_initial.sql")];

/// How hard SQLite syncs on commit. `Normal` in WAL mode keeps every committed write across a process
/// crash or kill; `Full` also across a power loss, at the cost of an fsync per commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Synchronous {
    Normal,
    Full,
}

#[derive(Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    /// Opens (creating if needed) the database file and applies pending migrations.
    pub async fn open(path: &Path, sync: Synchronous) -> StoreResult<SqliteStore> {
        let opts = SqliteConnectOptions::from_str("sqlite://")
            .map_err(StoreError::from)?
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10))
            .synchronous(match sync {
                Synchronous::Normal => SqliteSynchronous::Normal,
                Synchronous::Full => SqliteSynchronous::Full,
            });
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .min_connections(1)
            .connect_with(opts)
            .await?;
        let store = SqliteStore { pool };
        store.migrate().await?;
        Ok(store)
    }

    async fn migrate(&self) -> StoreResult<()> {
        // BEGIN IMMEDIATE takes the write lock before the version is read, so two processes
        // opening one new file (a server and `switchyard admin`) never both migrate.
        let mut conn = self.pool.acquire().await?;
        sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?;
        let result = Self::apply_migrations(&mut conn).await;
        let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
        sqlx::query(end).execute(&mut *conn).await?;
        result
    }

    async fn apply_migrations(conn: &mut sqlx::SqliteConnection) -> StoreResult<()> {
        let done: i64 = sqlx::query_scalar("PRAGMA user_version")
            .fetch_one(&mut *conn)
            .await?;
        let done = usize::try_from(done).unwrap_or(0);
        if done > MIGRATIONS.len() {
            return Err(StoreError::Backend(format!(
                "the database is at schema version {done}, newer than this build knows ({}); upgrade switchyard",
                MIGRATIONS.len()
            )));
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(done) {
            sqlx::raw_sql(sql).execute(&mut *conn).await?;
            sqlx::query(&format!("PRAGMA user_version = {}", i + 1))
                .execute(&mut *conn)
                .await?;
        }
        Ok(())
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }
}

fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn parse_ts(s: &str) -> StoreResult<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| StoreError::Backend(format!("bad timestamp {s:?} in store: {e}")))
}

fn json_err(e: serde_json::Error) -> StoreError {
    StoreError::Backend(format!("bad JSON in store: {e}"))
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
}

const ACCOUNT_COLS: &str = "id, kind, name, fullname, email, is_admin, created_at";

fn account_from(row: &SqliteRow) -> StoreResult<Account> {
    let kind: String = row.try_get("kind")?;
    Ok(Account {
        id: row.try_get("id")?,
        kind: if kind == "org" {
            AccountKind::Org
        } else {
            AccountKind::User
        },
        name: row.try_get("name")?,
        fullname: row.try_get("fullname")?,
        email: row.try_get("email")?,
        is_admin: row.try_get::<i64, _>("is_admin")? != 0,
        created_at: parse_ts(&row.try_get::<String, _>("created_at")?)?,
    })
}

fn role_from(s: &str) -> StoreResult<Role> {
    Role::parse(s).ok_or_else(|| StoreError::Backend(format!("unknown role {s:?} in store")))
}

fn token_from(row: &SqliteRow, user: &str) -> StoreResult<TokenInfo> {
    let scopes: Option<String> = row.try_get("scopes")?;
    let scopes = match scopes {
        Some(s) => Some(serde_json::from_str::<Vec<Scope>>(&s).map_err(json_err)?),
        None => None,
    };
    let expires: Option<String> = row.try_get("expires_at")?;
    Ok(TokenInfo {
        id: row.try_get("id")?,
        user: user.to_string(),
        display_name: row.try_get("display_name")?,
        scopes,
        expires_at: expires.as_deref().map(parse_ts).transpose()?,
        created_at: parse_ts(&row.try_get::<String, _>("created_at")?)?,
    })
}

const ENDPOINT_COLS: &str =
    "id, namespace, spec, state, message, url, ready_replica, target_replica, \
     created_at, updated_at, created_by, updated_by, version";

fn endpoint_from(row: &SqliteRow) -> StoreResult<EndpointRecord> {
    let spec: String = row.try_get("spec")?;
    let state: String = row.try_get("state")?;
    let created_by: String = row.try_get("created_by")?;
    let updated_by: String = row.try_get("updated_by")?;
    Ok(EndpointRecord {
        id: row.try_get("id")?,
        namespace: row.try_get("namespace")?,
        spec: serde_json::from_str::<EndpointSpec>(&spec).map_err(json_err)?,
        state: serde_json::from_value::<EndpointState>(serde_json::Value::String(state))
            .map_err(json_err)?,
        message: row.try_get("message")?,
        url: row.try_get("url")?,
        ready_replica: u32::try_from(row.try_get::<i64, _>("ready_replica")?).unwrap_or(0),
        target_replica: u32::try_from(row.try_get::<i64, _>("target_replica")?).unwrap_or(0),
        created_at: parse_ts(&row.try_get::<String, _>("created_at")?)?,
        updated_at: parse_ts(&row.try_get::<String, _>("updated_at")?)?,
        created_by: serde_json::from_str::<Actor>(&created_by).map_err(json_err)?,
        updated_by: serde_json::from_str::<Actor>(&updated_by).map_err(json_err)?,
        version: row.try_get("version")?,
    })
}

fn state_str(s: EndpointState) -> StoreResult<String> {
    match serde_json::to_value(s).map_err(json_err)? {
        serde_json::Value::String(s) => Ok(s),
        other => Err(StoreError::Backend(format!("state serialized as {other}"))),
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn create_account(&self, new: NewAccount, now: DateTime<Utc>) -> StoreResult<Account> {
        let id = random_id();
        let res = sqlx::query(
            "INSERT INTO accounts (id, kind, name, fullname, email, is_admin, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&id)
        .bind(new.kind.as_str())
        .bind(&new.name)
        .bind(&new.fullname)
        .bind(&new.email)
        .bind(i64::from(new.is_admin))
        .bind(ts(now))
        .execute(&self.pool)
        .await;
        match res {
            Ok(_) => Ok(Account {
                id,
                kind: new.kind,
                name: new.name,
                fullname: new.fullname,
                email: new.email,
                is_admin: new.is_admin,
                created_at: parse_ts(&ts(now))?,
            }),
            Err(e) if is_unique_violation(&e) => Err(StoreError::Conflict(format!(
                "the name {:?} is already taken by a user or an organization",
                new.name
            ))),
            Err(e) => Err(e.into()),
        }
    }

    async fn account_by_name(&self, name: &str) -> StoreResult<Option<Account>> {
        let row = sqlx::query(&format!(
            "SELECT {ACCOUNT_COLS} FROM accounts WHERE name = ?"
        ))
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(account_from).transpose()
    }

    async fn list_accounts(&self, kind: AccountKind) -> StoreResult<Vec<Account>> {
        let rows = sqlx::query(&format!(
            "SELECT {ACCOUNT_COLS} FROM accounts WHERE kind = ? ORDER BY name"
        ))
        .bind(kind.as_str())
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(account_from).collect()
    }

    async fn count_accounts(&self) -> StoreResult<i64> {
        Ok(sqlx::query_scalar("SELECT COUNT(*) FROM accounts")
            .fetch_one(&self.pool)
            .await?)
    }

    async fn set_membership(
        &self,
        org: &str,
        user: &str,
        role: Role,
        now: DateTime<Utc>,
    ) -> StoreResult<Membership> {
        let mut tx = self.pool.begin().await?;
        let org_id: Option<String> =
            sqlx::query_scalar("SELECT id FROM accounts WHERE name = ? AND kind = 'org'")
                .bind(org)
                .fetch_optional(&mut *tx)
                .await?;
        let org_id =
            org_id.ok_or_else(|| StoreError::NotFound(format!("no organization {org:?}")))?;
        let user_id: Option<String> =
            sqlx::query_scalar("SELECT id FROM accounts WHERE name = ? AND kind = 'user'")
                .bind(user)
                .fetch_optional(&mut *tx)
                .await?;
        let user_id = user_id.ok_or_else(|| StoreError::NotFound(format!("no user {user:?}")))?;
        sqlx::query(
            "INSERT INTO memberships (org_id, user_id, role, created_at) VALUES (?, ?, ?, ?) \
             ON CONFLICT (org_id, user_id) DO UPDATE SET role = excluded.role",
        )
        .bind(&org_id)
        .bind(&user_id)
        .bind(role.as_str())
        .bind(ts(now))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Membership {
            org: org.to_string(),
            user: user.to_string(),
            role,
        })
    }

    async fn remove_membership(&self, org: &str, user: &str) -> StoreResult<bool> {
        let res = sqlx::query(
            "DELETE FROM memberships WHERE org_id = (SELECT id FROM accounts WHERE name = ? AND kind = 'org') \
             AND user_id = (SELECT id FROM accounts WHERE name = ? AND kind = 'user')",
        )
        .bind(org)
        .bind(user)
        .execute(&self.pool)
        .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn list_members(&self, org: &str) -> StoreResult<Vec<Membership>> {
        let rows = sqlx::query(
            "SELECT u.name AS user_name, m.role AS role FROM memberships m \
             JOIN accounts o ON o.id = m.org_id JOIN accounts u ON u.id = m.user_id \
             WHERE o.name = ? AND o.kind = 'org' ORDER BY u.name",
        )
        .bind(org)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(Membership {
                    org: org.to_string(),
                    user: r.try_get("user_name")?,
                    role: role_from(&r.try_get::<String, _>("role")?)?,
                })
            })
            .collect()
    }

    async fn orgs_of(&self, user_id: &str) -> StoreResult<Vec<(Account, Role)>> {
        let rows = sqlx::query(
            "SELECT o.id, o.kind, o.name, o.fullname, o.email, o.is_admin, o.created_at, m.role AS role \
             FROM memberships m JOIN accounts o ON o.id = m.org_id WHERE m.user_id = ? ORDER BY o.name",
        )
        .bind(user_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    account_from(r)?,
                    role_from(&r.try_get::<String, _>("role")?)?,
                ))
            })
            .collect()
    }

    async fn role_in(&self, org: &str, user_id: &str) -> StoreResult<Option<Role>> {
        let role: Option<String> = sqlx::query_scalar(
            "SELECT m.role FROM memberships m JOIN accounts o ON o.id = m.org_id \
             WHERE o.name = ? AND o.kind = 'org' AND m.user_id = ?",
        )
        .bind(org)
        .bind(user_id)
        .fetch_optional(&self.pool)
        .await?;
        role.as_deref().map(role_from).transpose()
    }

    async fn create_token(&self, new: NewToken, now: DateTime<Utc>) -> StoreResult<TokenInfo> {
        let id = random_id();
        let scopes = new
            .scopes
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(json_err)?;
        let user: Option<String> =
            sqlx::query_scalar("SELECT name FROM accounts WHERE id = ? AND kind = 'user'")
                .bind(&new.user_id)
                .fetch_optional(&self.pool)
                .await?;
        let user = user.ok_or_else(|| StoreError::NotFound("no such user".into()))?;
        sqlx::query(
            "INSERT INTO tokens (id, user_id, token_hash, display_name, scopes, expires_at, created_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&id)
        .bind(&new.user_id)
        .bind(&new.token_hash)
        .bind(&new.display_name)
        .bind(&scopes)
        .bind(new.expires_at.map(ts))
        .bind(ts(now))
        .execute(&self.pool)
        .await?;
        Ok(TokenInfo {
            id,
            user,
            display_name: new.display_name,
            scopes: new.scopes,
            expires_at: new.expires_at.map(|t| parse_ts(&ts(t))).transpose()?,
            created_at: parse_ts(&ts(now))?,
        })
    }

    async fn token_by_hash(&self, hash: &str) -> StoreResult<Option<(TokenInfo, Account)>> {
        let row = sqlx::query(
            "SELECT t.id AS tid, t.display_name, t.scopes, t.expires_at, t.created_at AS tcreated, \
             a.id, a.kind, a.name, a.fullname, a.email, a.is_admin, a.created_at \
             FROM tokens t JOIN accounts a ON a.id = t.user_id WHERE t.token_hash = ?",
        )
        .bind(hash)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let account = account_from(&row)?;
        let scopes: Option<String> = row.try_get("scopes")?;
        let expires: Option<String> = row.try_get("expires_at")?;
        let token = TokenInfo {
            id: row.try_get("tid")?,
            user: account.name.clone(),
            display_name: row.try_get("display_name")?,
            scopes: scopes
                .map(|s| serde_json::from_str::<Vec<Scope>>(&s))
                .transpose()
                .map_err(json_err)?,
            expires_at: expires.as_deref().map(parse_ts).transpose()?,
            created_at: parse_ts(&row.try_get::<String, _>("tcreated")?)?,
        };
        Ok(Some((token, account)))
    }

    async fn list_tokens(&self, user: &str) -> StoreResult<Vec<TokenInfo>> {
        let rows = sqlx::query(
            "SELECT t.id, t.display_name, t.scopes, t.expires_at, t.created_at FROM tokens t \
             JOIN accounts a ON a.id = t.user_id WHERE a.name = ? ORDER BY t.created_at, t.id",
        )
        .bind(user)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(|r| token_from(r, user)).collect()
    }

    async fn delete_token(&self, id: &str) -> StoreResult<bool> {
        let res = sqlx::query("DELETE FROM tokens WHERE id = ?")
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn catalog_entries(&self) -> StoreResult<Vec<CatalogEntry>> {
        let rows: Vec<String> =
            sqlx::query_scalar("SELECT item FROM catalog_items ORDER BY repo_id")
                .fetch_all(&self.pool)
                .await?;
        rows.iter()
            .map(|s| serde_json::from_str::<CatalogEntry>(s).map_err(json_err))
            .collect()
    }

    async fn put_catalog_entry(
        &self,
        entry: &CatalogEntry,
        now: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let json = serde_json::to_string(entry).map_err(json_err)?;
        let mut tx = self.pool.begin().await?;
        let existed: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM catalog_items WHERE repo_id = ?")
                .bind(&entry.repo_id)
                .fetch_optional(&mut *tx)
                .await?;
        sqlx::query(
            "INSERT INTO catalog_items (repo_id, item, updated_at) VALUES (?, ?, ?) \
             ON CONFLICT (repo_id) DO UPDATE SET item = excluded.item, updated_at = excluded.updated_at",
        )
        .bind(&entry.repo_id)
        .bind(&json)
        .bind(ts(now))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(existed.is_none())
    }

    async fn delete_catalog_entry(&self, repo_id: &str) -> StoreResult<bool> {
        let res = sqlx::query("DELETE FROM catalog_items WHERE repo_id = ?")
            .bind(repo_id)
            .execute(&self.pool)
            .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn seed_catalog_once(
        &self,
        seed: &[CatalogEntry],
        now: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let mut tx = self.pool.begin().await?;
        let claimed =
            sqlx::query("INSERT OR IGNORE INTO meta (key, value) VALUES ('catalog_seeded', ?)")
                .bind(ts(now))
                .execute(&mut *tx)
                .await?
                .rows_affected()
                > 0;
        if claimed {
            for entry in seed {
                let json = serde_json::to_string(entry).map_err(json_err)?;
                sqlx::query("INSERT OR REPLACE INTO catalog_items (repo_id, item, updated_at) VALUES (?, ?, ?)")
                    .bind(&entry.repo_id)
                    .bind(&json)
                    .bind(ts(now))
                    .execute(&mut *tx)
                    .await?;
            }
        }
        tx.commit().await?;
        Ok(claimed)
    }

    async fn insert_endpoint(&self, rec: &EndpointRecord) -> StoreResult<()> {
        let res = sqlx::query(&format!(
            "INSERT INTO endpoints (name, {ENDPOINT_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        ))
        .bind(&rec.spec.name)
        .bind(&rec.id)
        .bind(&rec.namespace)
        .bind(serde_json::to_string(&rec.spec).map_err(json_err)?)
        .bind(state_str(rec.state)?)
        .bind(&rec.message)
        .bind(&rec.url)
        .bind(i64::from(rec.ready_replica))
        .bind(i64::from(rec.target_replica))
        .bind(ts(rec.created_at))
        .bind(ts(rec.updated_at))
        .bind(serde_json::to_string(&rec.created_by).map_err(json_err)?)
        .bind(serde_json::to_string(&rec.updated_by).map_err(json_err)?)
        .bind(rec.version)
        .execute(&self.pool)
        .await;
        match res {
            Ok(_) => Ok(()),
            Err(e) if is_unique_violation(&e) => Err(StoreError::Conflict(format!(
                "an endpoint named {:?} already exists in namespace {:?}",
                rec.spec.name, rec.namespace
            ))),
            Err(e) => Err(e.into()),
        }
    }

    async fn endpoint(&self, namespace: &str, name: &str) -> StoreResult<Option<EndpointRecord>> {
        let row = sqlx::query(&format!(
            "SELECT {ENDPOINT_COLS} FROM endpoints WHERE namespace = ? AND name = ?"
        ))
        .bind(namespace)
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(endpoint_from).transpose()
    }

    async fn endpoints_in(&self, namespace: &str) -> StoreResult<Vec<EndpointRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {ENDPOINT_COLS} FROM endpoints WHERE namespace = ? ORDER BY name"
        ))
        .bind(namespace)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(endpoint_from).collect()
    }

    async fn all_endpoints(&self) -> StoreResult<Vec<EndpointRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {ENDPOINT_COLS} FROM endpoints ORDER BY namespace, name"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(endpoint_from).collect()
    }

    async fn endpoint_names_with_prefix(
        &self,
        namespace: &str,
        prefix: &str,
    ) -> StoreResult<Vec<String>> {
        // substr rather than LIKE: names may contain nothing LIKE treats specially today, but this needs no escaping.
        Ok(sqlx::query_scalar(
            "SELECT name FROM endpoints WHERE namespace = ? AND substr(name, 1, ?) = ?",
        )
        .bind(namespace)
        .bind(i64::try_from(prefix.len()).unwrap_or(i64::MAX))
        .bind(prefix)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn update_endpoint(&self, rec: &EndpointRecord) -> StoreResult<EndpointRecord> {
        let res = sqlx::query(
            "UPDATE endpoints SET spec = ?, state = ?, message = ?, url = ?, ready_replica = ?, target_replica = ?, \
             updated_at = ?, updated_by = ?, version = version + 1 WHERE id = ? AND version = ?",
        )
        .bind(serde_json::to_string(&rec.spec).map_err(json_err)?)
        .bind(state_str(rec.state)?)
        .bind(&rec.message)
        .bind(&rec.url)
        .bind(i64::from(rec.ready_replica))
        .bind(i64::from(rec.target_replica))
        .bind(ts(rec.updated_at))
        .bind(serde_json::to_string(&rec.updated_by).map_err(json_err)?)
        .bind(&rec.id)
        .bind(rec.version)
        .execute(&self.pool)
        .await?;
        if res.rows_affected() == 0 {
            return Err(StoreError::Stale);
        }
        let mut out = rec.clone();
        out.version += 1;
        Ok(out)
    }

    async fn delete_endpoint(&self, namespace: &str, name: &str) -> StoreResult<bool> {
        let res = sqlx::query("DELETE FROM endpoints WHERE namespace = ? AND name = ?")
            .bind(namespace)
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(res.rows_affected() > 0)
    }
}
