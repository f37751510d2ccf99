//! Accounts: users, organizations, memberships and personal access tokens.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::any::AnyRow;
use sqlx::Row;

use super::sql::SqlSession;
use super::{json_err, parse_ts, ts, unique_violation, StoreError, StoreResult};
use crate::crypto::random_id;
use crate::model::account::{Account, AccountKind, Membership, Role, Scope, TokenInfo};

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

#[async_trait]
pub trait AccountStore {
    async fn create_account(&mut self, new: NewAccount, now: DateTime<Utc>)
        -> StoreResult<Account>;
    async fn account_by_name(&mut self, name: &str) -> StoreResult<Option<Account>>;
    async fn account_by_id(&mut self, id: &str) -> StoreResult<Option<Account>>;
    async fn list_accounts(&mut self, kind: AccountKind) -> StoreResult<Vec<Account>>;
    async fn count_accounts(&mut self) -> StoreResult<i64>;
    /// Removes the account with its memberships and tokens; false when there was none.
    async fn delete_account(&mut self, name: &str) -> StoreResult<bool>;
    /// Disables (`Some(when)`) or enables (`None`) the account; false when there is none.
    async fn set_account_disabled(
        &mut self,
        name: &str,
        at: Option<DateTime<Utc>>,
    ) -> StoreResult<bool>;
    /// Sets (`Some`) or clears (`None`) a user's password hash; false when there is no such user.
    async fn set_password_hash(&mut self, name: &str, hash: Option<&str>) -> StoreResult<bool>;
    /// The account a name signs in as, with its password hash: the account of exactly that name, else
    /// the one whose name differs only in case.
    async fn password_hash_of(
        &mut self,
        name: &str,
    ) -> StoreResult<Option<(Account, Option<String>)>>;
    /// Accounts whose names differ only in case from an older account's (from before names were
    /// unique without regard to case): they keep working but should be renamed or deleted.
    async fn name_clashes(&mut self) -> StoreResult<Vec<String>>;
    /// Adds a member, or changes the role of an existing one.
    async fn set_membership(
        &mut self,
        org: &str,
        user: &str,
        role: Role,
        now: DateTime<Utc>,
    ) -> StoreResult<Membership>;
    async fn remove_membership(&mut self, org: &str, user: &str) -> StoreResult<bool>;
    async fn list_members(&mut self, org: &str) -> StoreResult<Vec<Membership>>;
    /// Organizations the user belongs to, with the user's role in each.
    async fn orgs_of(&mut self, user_id: &str) -> StoreResult<Vec<(Account, Role)>>;
    /// The user's role in the organization, if a member.
    async fn role_in(&mut self, org: &str, user_id: &str) -> StoreResult<Option<Role>>;

    async fn create_token(&mut self, new: NewToken, now: DateTime<Utc>) -> StoreResult<TokenInfo>;
    /// The token with this hash and its user.
    async fn token_by_hash(&mut self, hash: &str) -> StoreResult<Option<(TokenInfo, Account)>>;
    async fn list_tokens(&mut self, user: &str) -> StoreResult<Vec<TokenInfo>>;
    async fn delete_token(&mut self, id: &str) -> StoreResult<bool>;
}

pub(super) const ACCOUNT_COLS: &str =
    "id, kind, name, fullname, email, is_admin, created_at, disabled_at";

pub(super) fn account_from(row: &AnyRow) -> StoreResult<Account> {
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
        disabled_at: row
            .try_get::<Option<String>, _>("disabled_at")?
            .as_deref()
            .map(parse_ts)
            .transpose()?,
    })
}

pub(super) fn role_from(s: &str) -> StoreResult<Role> {
    Role::parse(s).ok_or_else(|| StoreError::Backend(format!("unknown role {s:?} in store")))
}

fn scopes_from(s: Option<String>) -> StoreResult<Option<Vec<Scope>>> {
    s.map(|s| serde_json::from_str::<Vec<Scope>>(&s))
        .transpose()
        .map_err(json_err)
}

fn token_from(row: &AnyRow, id_col: &str, created_col: &str, user: &str) -> StoreResult<TokenInfo> {
    let expires: Option<String> = row.try_get("expires_at")?;
    Ok(TokenInfo {
        id: row.try_get(id_col)?,
        user: user.to_string(),
        display_name: row.try_get("display_name")?,
        scopes: scopes_from(row.try_get("scopes")?)?,
        expires_at: expires.as_deref().map(parse_ts).transpose()?,
        created_at: parse_ts(&row.try_get::<String, _>(created_col)?)?,
    })
}

async fn id_of(s: &mut SqlSession, name: &str, kind: AccountKind) -> StoreResult<Option<String>> {
    Ok(
        sqlx::query_scalar("SELECT id FROM accounts WHERE name = $1 AND kind = $2")
            .bind(name)
            .bind(kind.as_str())
            .fetch_optional(s.db())
            .await?,
    )
}

#[async_trait]
impl AccountStore for SqlSession {
    async fn create_account(
        &mut self,
        new: NewAccount,
        now: DateTime<Utc>,
    ) -> StoreResult<Account> {
        let id = random_id();
        let res = sqlx::query(
            "INSERT INTO accounts (id, kind, name, fullname, email, is_admin, created_at, name_key) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(&id)
        .bind(new.kind.as_str())
        .bind(&new.name)
        .bind(&new.fullname)
        .bind(&new.email)
        .bind(i64::from(new.is_admin))
        .bind(ts(now))
        .bind(new.name.to_ascii_lowercase())
        .execute(self.db())
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
                disabled_at: None,
            }),
            Err(e) if unique_violation(&e).is_some() => Err(StoreError::Conflict(format!(
                "the name {:?} is already taken by a user or an organization (names are unique \
                 without regard to case)",
                new.name
            ))),
            Err(e) => Err(e.into()),
        }
    }

    async fn account_by_name(&mut self, name: &str) -> StoreResult<Option<Account>> {
        let row = sqlx::query(&format!(
            "SELECT {ACCOUNT_COLS} FROM accounts WHERE name = $1"
        ))
        .bind(name)
        .fetch_optional(self.db())
        .await?;
        row.as_ref().map(account_from).transpose()
    }

    async fn account_by_id(&mut self, id: &str) -> StoreResult<Option<Account>> {
        let row = sqlx::query(&format!(
            "SELECT {ACCOUNT_COLS} FROM accounts WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(self.db())
        .await?;
        row.as_ref().map(account_from).transpose()
    }

    async fn list_accounts(&mut self, kind: AccountKind) -> StoreResult<Vec<Account>> {
        let rows = sqlx::query(&format!(
            "SELECT {ACCOUNT_COLS} FROM accounts WHERE kind = $1 ORDER BY name"
        ))
        .bind(kind.as_str())
        .fetch_all(self.db())
        .await?;
        rows.iter().map(account_from).collect()
    }

    async fn count_accounts(&mut self) -> StoreResult<i64> {
        Ok(sqlx::query_scalar("SELECT COUNT(*) FROM accounts")
            .fetch_one(self.db())
            .await?)
    }

    async fn delete_account(&mut self, name: &str) -> StoreResult<bool> {
        // Memberships (both ways) and tokens go with it: their foreign keys cascade.
        let res = sqlx::query("DELETE FROM accounts WHERE name = $1")
            .bind(name)
            .execute(self.db())
            .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn set_account_disabled(
        &mut self,
        name: &str,
        at: Option<DateTime<Utc>>,
    ) -> StoreResult<bool> {
        let res = sqlx::query("UPDATE accounts SET disabled_at = $1 WHERE name = $2")
            .bind(at.map(ts))
            .bind(name)
            .execute(self.db())
            .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn set_password_hash(&mut self, name: &str, hash: Option<&str>) -> StoreResult<bool> {
        let res =
            sqlx::query("UPDATE accounts SET password_hash = $1 WHERE name = $2 AND kind = 'user'")
                .bind(hash)
                .bind(name)
                .execute(self.db())
                .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn password_hash_of(
        &mut self,
        name: &str,
    ) -> StoreResult<Option<(Account, Option<String>)>> {
        // `name_key` is the name in lowercase (names are ASCII), except for an account whose name
        // clashes with an older one's: that one is found by its exact name only.
        let row = sqlx::query(&format!(
            "SELECT {ACCOUNT_COLS}, password_hash FROM accounts WHERE name = $1 OR name_key = $2 \
             ORDER BY CASE WHEN name = $3 THEN 0 ELSE 1 END LIMIT 1"
        ))
        .bind(name)
        .bind(name.to_ascii_lowercase())
        .bind(name)
        .fetch_optional(self.db())
        .await?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some((account_from(&row)?, row.try_get("password_hash")?)))
    }

    async fn name_clashes(&mut self) -> StoreResult<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT name FROM accounts WHERE name_key <> lower(name) ORDER BY name",
        )
        .fetch_all(self.db())
        .await?)
    }

    async fn set_membership(
        &mut self,
        org: &str,
        user: &str,
        role: Role,
        now: DateTime<Utc>,
    ) -> StoreResult<Membership> {
        let org_id = id_of(self, org, AccountKind::Org)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("no organization {org:?}")))?;
        let user_id = id_of(self, user, AccountKind::User)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("no user {user:?}")))?;
        sqlx::query(
            "INSERT INTO memberships (org_id, user_id, role, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (org_id, user_id) DO UPDATE SET role = excluded.role",
        )
        .bind(&org_id)
        .bind(&user_id)
        .bind(role.as_str())
        .bind(ts(now))
        .execute(self.db())
        .await?;
        Ok(Membership {
            org: org.to_string(),
            user: user.to_string(),
            role,
        })
    }

    async fn remove_membership(&mut self, org: &str, user: &str) -> StoreResult<bool> {
        let res = sqlx::query(
            "DELETE FROM memberships \
             WHERE org_id = (SELECT id FROM accounts WHERE name = $1 AND kind = 'org') \
             AND user_id = (SELECT id FROM accounts WHERE name = $2 AND kind = 'user')",
        )
        .bind(org)
        .bind(user)
        .execute(self.db())
        .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn list_members(&mut self, org: &str) -> StoreResult<Vec<Membership>> {
        let rows = sqlx::query(
            "SELECT u.name AS user_name, m.role AS role FROM memberships m \
             JOIN accounts o ON o.id = m.org_id JOIN accounts u ON u.id = m.user_id \
             WHERE o.name = $1 AND o.kind = 'org' ORDER BY u.name",
        )
        .bind(org)
        .fetch_all(self.db())
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

    async fn orgs_of(&mut self, user_id: &str) -> StoreResult<Vec<(Account, Role)>> {
        let rows = sqlx::query(
            "SELECT o.id, o.kind, o.name, o.fullname, o.email, o.is_admin, o.created_at, o.disabled_at, \
             m.role AS role \
             FROM memberships m JOIN accounts o ON o.id = m.org_id WHERE m.user_id = $1 ORDER BY o.name",
        )
        .bind(user_id)
        .fetch_all(self.db())
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

    async fn role_in(&mut self, org: &str, user_id: &str) -> StoreResult<Option<Role>> {
        let role: Option<String> = sqlx::query_scalar(
            "SELECT m.role FROM memberships m JOIN accounts o ON o.id = m.org_id \
             WHERE o.name = $1 AND o.kind = 'org' AND m.user_id = $2",
        )
        .bind(org)
        .bind(user_id)
        .fetch_optional(self.db())
        .await?;
        role.as_deref().map(role_from).transpose()
    }

    async fn create_token(&mut self, new: NewToken, now: DateTime<Utc>) -> StoreResult<TokenInfo> {
        let id = random_id();
        let scopes = new
            .scopes
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(json_err)?;
        let user: Option<String> =
            sqlx::query_scalar("SELECT name FROM accounts WHERE id = $1 AND kind = 'user'")
                .bind(&new.user_id)
                .fetch_optional(self.db())
                .await?;
        let user = user.ok_or_else(|| StoreError::NotFound("no such user".into()))?;
        sqlx::query(
            "INSERT INTO tokens (id, user_id, token_hash, display_name, scopes, expires_at, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&id)
        .bind(&new.user_id)
        .bind(&new.token_hash)
        .bind(&new.display_name)
        .bind(&scopes)
        .bind(new.expires_at.map(ts))
        .bind(ts(now))
        .execute(self.db())
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

    async fn token_by_hash(&mut self, hash: &str) -> StoreResult<Option<(TokenInfo, Account)>> {
        let row = sqlx::query(
            "SELECT t.id AS tid, t.display_name, t.scopes, t.expires_at, t.created_at AS tcreated, \
             a.id, a.kind, a.name, a.fullname, a.email, a.is_admin, a.created_at, a.disabled_at \
             FROM tokens t JOIN accounts a ON a.id = t.user_id WHERE t.token_hash = $1",
        )
        .bind(hash)
        .fetch_optional(self.db())
        .await?;
        let Some(row) = row else { return Ok(None) };
        let account = account_from(&row)?;
        let token = token_from(&row, "tid", "tcreated", &account.name)?;
        Ok(Some((token, account)))
    }

    async fn list_tokens(&mut self, user: &str) -> StoreResult<Vec<TokenInfo>> {
        let rows = sqlx::query(
            "SELECT t.id, t.display_name, t.scopes, t.expires_at, t.created_at FROM tokens t \
             JOIN accounts a ON a.id = t.user_id WHERE a.name = $1 ORDER BY t.created_at, t.id",
        )
        .bind(user)
        .fetch_all(self.db())
        .await?;
        rows.iter()
            .map(|r| token_from(r, "id", "created_at", user))
            .collect()
    }

    async fn delete_token(&mut self, id: &str) -> StoreResult<bool> {
        let res = sqlx::query("DELETE FROM tokens WHERE id = $1")
            .bind(id)
            .execute(self.db())
            .await?;
        Ok(res.rows_affected() > 0)
    }
}
