//! The OAuth provider's records: apps, grants with their codes and tokens, device authorizations,
//! pending authorization requests, browser sessions, consents, signing keys and organizations' audit
//! logs. Bearer strings arrive here already hashed.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::any::AnyRow;
use sqlx::Row;

use super::accounts::{account_from, role_from, ACCOUNT_COLS};
use super::batch::{bind_all, Stmt};
use super::sql::{SqlSession, SqlStore};
use super::{json, json_col, json_err, opt_ts, req_ts, ts, StoreError, StoreResult};
use crate::model::account::{Account, Role, Scope};
use crate::model::oauth::{AuditEntry, Grant, GrantKind, IssuedToken, OAuthApp, TokenKind};

/// An authorization code to record.
#[derive(Debug, Clone)]
pub struct NewCode {
    pub code_hash: String,
    pub grant_id: String,
    pub redirect_uri: String,
    pub code_challenge: Option<String>,
    pub expires_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceStatus {
    Pending,
    Approved,
    Denied,
    Used,
}

impl DeviceStatus {
    fn as_str(self) -> &'static str {
        match self {
            DeviceStatus::Pending => "pending",
            DeviceStatus::Approved => "approved",
            DeviceStatus::Denied => "denied",
            DeviceStatus::Used => "used",
        }
    }

    fn parse(s: &str) -> StoreResult<DeviceStatus> {
        Ok(match s {
            "pending" => DeviceStatus::Pending,
            "approved" => DeviceStatus::Approved,
            "denied" => DeviceStatus::Denied,
            "used" => DeviceStatus::Used,
            other => {
                return Err(StoreError::Backend(format!(
                    "unknown device status {other:?} in store"
                )))
            }
        })
    }
}

/// A device authorization (RFC 8628).
#[derive(Debug, Clone)]
pub struct DeviceAuth {
    pub device_hash: String,
    pub user_code_hash: String,
    pub app_id: String,
    pub scopes: Vec<Scope>,
    pub status: DeviceStatus,
    pub user_id: Option<String>,
    pub org_ids: Vec<String>,
    pub interval_s: i64,
    pub last_poll_at: Option<DateTime<Utc>>,
    pub expires_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    /// When the user who approved it signed in.
    pub auth_time: Option<DateTime<Utc>>,
}

/// A browser session of the sign-in pages.
#[derive(Debug, Clone)]
pub struct WebSession {
    pub user_id: Option<String>,
    pub csrf: String,
    pub failed_codes: i64,
    pub expires_at: DateTime<Utc>,
    /// When it began: a session is made anew at each sign-in, so for one with a user, when the user
    /// signed in (OpenID Connect's `auth_time`).
    pub created_at: DateTime<Utc>,
}

/// An ID-token signing key, its private half sealed.
#[derive(Debug, Clone)]
pub struct SigningKeyRow {
    pub kid: String,
    pub alg: String,
    pub private_key: String,
    pub public_jwk: String,
    pub created_at: DateTime<Utc>,
    pub retired_at: Option<DateTime<Utc>>,
}

#[async_trait]
pub trait OAuthStore {
    /// Records a new app; `secret_hash` is the SHA-256 of its secret (none: a public app).
    async fn create_app(&mut self, app: &OAuthApp, secret_hash: Option<&str>) -> StoreResult<()>;
    /// The app and the hash of its secret.
    async fn app(&mut self, id: &str) -> StoreResult<Option<(OAuthApp, Option<String>)>>;
    async fn apps_of(&mut self, owner_id: &str) -> StoreResult<Vec<OAuthApp>>;
    /// Writes the app's name, URLs, redirect URIs, scopes and privilege; false when it is gone.
    async fn update_app(&mut self, app: &OAuthApp) -> StoreResult<bool>;
    async fn set_app_secret(
        &mut self,
        id: &str,
        secret_hash: Option<&str>,
        now: DateTime<Utc>,
    ) -> StoreResult<bool>;
    async fn delete_app(&mut self, id: &str) -> StoreResult<bool>;

    async fn create_grant(&mut self, grant: &Grant) -> StoreResult<()>;
    async fn grant(&mut self, id: &str) -> StoreResult<Option<Grant>>;
    /// Ends every grant of the app (its tokens stop working).
    async fn revoke_app_grants(&mut self, app_id: &str, now: DateTime<Utc>) -> StoreResult<u64>;
    /// Ends the grant: none of its codes or tokens is accepted any more.
    async fn revoke_grant(&mut self, id: &str, now: DateTime<Utc>) -> StoreResult<()>;
    async fn add_token(
        &mut self,
        hash: &str,
        grant_id: &str,
        kind: TokenKind,
        expires_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<()>;
    /// The token with this hash and its grant (revoked grants included: the caller decides).
    async fn token(&mut self, hash: &str) -> StoreResult<Option<(IssuedToken, Grant)>>;
    /// [`OAuthStore::token`] with the grant's user, in one statement.
    async fn token_with_user(
        &mut self,
        hash: &str,
    ) -> StoreResult<Option<(IssuedToken, Grant, Account)>>;
    /// Marks a refresh token used, once: false when it already was (a reuse).
    async fn use_refresh_token(&mut self, hash: &str, now: DateTime<Utc>) -> StoreResult<bool>;
    async fn delete_oauth_token(&mut self, hash: &str) -> StoreResult<bool>;

    async fn add_code(&mut self, code: &NewCode) -> StoreResult<()>;

    async fn add_device(&mut self, device: &DeviceAuth) -> StoreResult<()>;
    async fn device(&mut self, device_hash: &str) -> StoreResult<Option<DeviceAuth>>;
    async fn device_by_user_code(
        &mut self,
        user_code_hash: &str,
    ) -> StoreResult<Option<DeviceAuth>>;
    /// Approves (with the user and organizations) or denies a pending authorization; false when it
    /// was no longer pending.
    /// Approves (by this user, signed in at that time, for these organizations) or denies a pending
    /// authorization: false when it was not pending.
    async fn decide_device(
        &mut self,
        device_hash: &str,
        approve: Option<(&str, DateTime<Utc>, &[String])>,
    ) -> StoreResult<bool>;
    /// Records a poll and the interval the client must keep from now on.
    async fn polled_device(
        &mut self,
        device_hash: &str,
        now: DateTime<Utc>,
        interval_s: i64,
    ) -> StoreResult<()>;
    /// Turns an approved authorization into used, once: false when it was not approved.
    async fn finish_device(&mut self, device_hash: &str) -> StoreResult<bool>;

    async fn put_request(
        &mut self,
        id_hash: &str,
        request: &str,
        expires_at: DateTime<Utc>,
    ) -> StoreResult<()>;
    async fn request(&mut self, id_hash: &str) -> StoreResult<Option<(String, DateTime<Utc>)>>;
    /// Removes the request, returning it: a request is answered once.
    async fn take_request(&mut self, id_hash: &str)
        -> StoreResult<Option<(String, DateTime<Utc>)>>;

    async fn create_session(&mut self, hash: &str, session: &WebSession) -> StoreResult<()>;
    async fn session(&mut self, hash: &str) -> StoreResult<Option<WebSession>>;
    async fn delete_session(&mut self, hash: &str) -> StoreResult<()>;
    /// Counts a wrong user code typed in this session; returns the count.
    async fn failed_user_code(&mut self, hash: &str) -> StoreResult<i64>;

    /// What the user already let the app do: scopes and organization ids.
    async fn consent(
        &mut self,
        user_id: &str,
        app_id: &str,
    ) -> StoreResult<Option<(Vec<Scope>, Vec<String>)>>;
    async fn put_consent(
        &mut self,
        user_id: &str,
        app_id: &str,
        scopes: &[Scope],
        org_ids: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<()>;

    async fn signing_keys(&mut self) -> StoreResult<Vec<SigningKeyRow>>;
    async fn add_signing_key(&mut self, key: &SigningKeyRow) -> StoreResult<()>;
    /// Retires every current key: the next added one signs.
    async fn retire_signing_keys(&mut self, now: DateTime<Utc>) -> StoreResult<()>;
    /// Forgets keys retired before `before` (their tokens have expired).
    async fn drop_retired_keys(&mut self, before: DateTime<Utc>) -> StoreResult<u64>;

    async fn add_audit(&mut self, org_id: &str, entry: &AuditEntry) -> StoreResult<()>;
    /// The organization's audit log, newest first.
    async fn audit_log(&mut self, org_id: &str, limit: i64) -> StoreResult<Vec<AuditEntry>>;
    /// The enabled or disabled user with this email (any case) who is a member of the organization,
    /// with the role there.
    async fn member_by_email(
        &mut self,
        org_id: &str,
        email: &str,
    ) -> StoreResult<Option<(Account, Role)>>;
    /// The account by id with its exchanged-token lifetime in seconds (an organization's, if it set one).
    async fn org_for_exchange(&mut self, id: &str) -> StoreResult<Option<(Account, Option<i64>)>>;
    async fn set_exchange_ttl(&mut self, org_id: &str, seconds: Option<i64>) -> StoreResult<bool>;

    /// Deletes expired flow state and tokens; returns how many rows went.
    async fn prune_oauth(&mut self, now: DateTime<Utc>) -> StoreResult<u64>;
}

fn strings_from(s: &str) -> StoreResult<Vec<String>> {
    serde_json::from_str(s).map_err(json_err)
}

fn scopes_from(s: &str) -> StoreResult<Vec<Scope>> {
    serde_json::from_str(s).map_err(json_err)
}

const APP_COLS: &str = "a.id, a.owner_id, o.name AS owner, a.name, a.homepage_url, a.logo_url, \
     a.redirect_uris, a.scopes, a.secret_hash, a.token_exchange, a.created_at, a.updated_at";

fn app_from(row: &AnyRow) -> StoreResult<(OAuthApp, Option<String>)> {
    let secret: Option<String> = row.try_get("secret_hash")?;
    Ok((
        OAuthApp {
            id: row.try_get("id")?,
            owner: row.try_get("owner")?,
            owner_id: row.try_get("owner_id")?,
            name: row.try_get("name")?,
            homepage_url: row.try_get("homepage_url")?,
            logo_url: row.try_get("logo_url")?,
            redirect_uris: strings_from(&row.try_get::<String, _>("redirect_uris")?)?,
            scopes: scopes_from(&row.try_get::<String, _>("scopes")?)?,
            has_secret: secret.is_some(),
            token_exchange: row.try_get::<i64, _>("token_exchange")? != 0,
            created_at: req_ts(row, "created_at")?,
            updated_at: req_ts(row, "updated_at")?,
        },
        secret,
    ))
}

const GRANT_COLS: &str = "g.id AS g_id, g.app_id, g.user_id, g.kind AS g_kind, g.scopes AS g_scopes, \
     g.org_ids AS g_org_ids, g.personal, g.nonce, g.auth_time, g.created_at AS g_created_at, g.revoked_at";

fn grant_from(row: &AnyRow) -> StoreResult<Grant> {
    let kind: String = row.try_get("g_kind")?;
    Ok(Grant {
        id: row.try_get("g_id")?,
        app_id: row.try_get("app_id")?,
        user_id: row.try_get("user_id")?,
        kind: GrantKind::parse(&kind)
            .ok_or_else(|| StoreError::Backend(format!("unknown grant kind {kind:?}")))?,
        scopes: scopes_from(&row.try_get::<String, _>("g_scopes")?)?,
        org_ids: strings_from(&row.try_get::<String, _>("g_org_ids")?)?,
        personal: row.try_get::<i64, _>("personal")? != 0,
        nonce: row.try_get("nonce")?,
        auth_time: req_ts(row, "auth_time")?,
        created_at: req_ts(row, "g_created_at")?,
        revoked_at: opt_ts(row, "revoked_at")?,
    })
}

/// An issued token from a row whose token columns carry `prefix`.
fn issued_from(row: &AnyRow, prefix: &str) -> StoreResult<IssuedToken> {
    let kind = match row
        .try_get::<String, _>(format!("{prefix}kind").as_str())?
        .as_str()
    {
        "access" => TokenKind::Access,
        _ => TokenKind::Refresh,
    };
    Ok(IssuedToken {
        kind,
        expires_at: req_ts(row, &format!("{prefix}expires_at"))?,
        used_at: opt_ts(row, &format!("{prefix}used_at"))?,
        created_at: req_ts(row, &format!("{prefix}created_at"))?,
    })
}

fn device_from(row: &AnyRow) -> StoreResult<DeviceAuth> {
    let org_ids: Option<String> = row.try_get("org_ids")?;
    Ok(DeviceAuth {
        device_hash: row.try_get("device_hash")?,
        user_code_hash: row.try_get("user_code_hash")?,
        app_id: row.try_get("app_id")?,
        scopes: scopes_from(&row.try_get::<String, _>("scopes")?)?,
        status: DeviceStatus::parse(&row.try_get::<String, _>("status")?)?,
        user_id: row.try_get("user_id")?,
        org_ids: org_ids
            .as_deref()
            .map(strings_from)
            .transpose()?
            .unwrap_or_default(),
        interval_s: row.try_get("interval_s")?,
        last_poll_at: opt_ts(row, "last_poll_at")?,
        expires_at: req_ts(row, "expires_at")?,
        created_at: req_ts(row, "created_at")?,
        auth_time: opt_ts(row, "auth_time")?,
    })
}

fn audit_from(row: &AnyRow) -> StoreResult<AuditEntry> {
    Ok(AuditEntry {
        id: row.try_get("id")?,
        at: req_ts(row, "at")?,
        action: row.try_get("action")?,
        outcome: row.try_get("outcome")?,
        actor: json_col(row, "actor")?,
        detail: json_col(row, "detail")?,
    })
}

const GRANT_INSERT: &str =
    "INSERT INTO oauth_grants (id, app_id, user_id, kind, scopes, org_ids, personal, nonce, \
     auth_time, created_at, revoked_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";
const TOKEN_INSERT: &str =
    "INSERT INTO oauth_tokens (token_hash, grant_id, kind, expires_at, created_at) \
     VALUES ($1, $2, $3, $4, $5)";
const AUDIT_INSERT: &str =
    "INSERT INTO audit_log (id, org_id, at, action, outcome, actor, detail) \
     VALUES ($1, $2, $3, $4, $5, $6, $7)";

fn grant_row(g: &Grant) -> StoreResult<Stmt> {
    Ok((
        GRANT_INSERT,
        vec![
            g.id.clone().into(),
            g.app_id.clone().into(),
            g.user_id.clone().into(),
            g.kind.as_str().into(),
            json(&g.scopes)?.into(),
            json(&g.org_ids)?.into(),
            i64::from(g.personal).into(),
            g.nonce.clone().into(),
            ts(g.auth_time).into(),
            ts(g.created_at).into(),
            g.revoked_at.map(ts).into(),
        ],
    ))
}

fn token_row(t: &NewTokenRow, now: DateTime<Utc>) -> Stmt {
    (
        TOKEN_INSERT,
        vec![
            t.hash.clone().into(),
            t.grant_id.clone().into(),
            t.kind.as_str().into(),
            ts(t.expires_at).into(),
            ts(now).into(),
        ],
    )
}

fn audit_row(org_id: &str, e: &AuditEntry) -> StoreResult<Stmt> {
    Ok((
        AUDIT_INSERT,
        vec![
            e.id.clone().into(),
            org_id.into(),
            ts(e.at).into(),
            e.action.clone().into(),
            e.outcome.clone().into(),
            json(&e.actor)?.into(),
            json(&e.detail)?.into(),
        ],
    ))
}

/// A token to record, by hash.
#[derive(Debug, Clone)]
pub struct NewTokenRow {
    pub hash: String,
    pub grant_id: String,
    pub kind: TokenKind,
    pub expires_at: DateTime<Utc>,
}

/// What a token request issued: a new grant (or none, for one that exists), its tokens, and an
/// organization's audit row.
#[derive(Debug)]
pub struct IssueRecord<'a> {
    pub grant: Option<&'a Grant>,
    pub tokens: &'a [NewTokenRow],
    pub audit: Option<(&'a str, &'a AuditEntry)>,
    pub now: DateTime<Utc>,
}

/// A code presented at the token endpoint, once spent.
#[derive(Debug)]
pub enum Spent {
    /// First use: the code is now spent.
    Fresh {
        grant_id: String,
        redirect_uri: String,
        code_challenge: Option<String>,
        expires_at: DateTime<Utc>,
    },
    /// Used before: whatever it issued must be revoked.
    Replayed {
        grant_id: String,
    },
    Unknown,
}

impl SqlStore {
    pub(super) async fn record_issue_rows(&self, rec: &IssueRecord<'_>) -> StoreResult<()> {
        let mut stmts = Vec::new();
        if let Some(g) = rec.grant {
            stmts.push(grant_row(g)?);
        }
        stmts.extend(rec.tokens.iter().map(|t| token_row(t, rec.now)));
        if let Some((org, e)) = rec.audit {
            stmts.push(audit_row(org, e)?);
        }
        self.write_batch(stmts).await
    }

    pub(super) async fn spend_code_row(
        &self,
        hash: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Spent> {
        let turn = self.writer_turn().await;
        let row = sqlx::query(
            "UPDATE oauth_codes SET used_at = $2 WHERE code_hash = $1 AND used_at IS NULL \
             RETURNING grant_id, redirect_uri, code_challenge, expires_at",
        )
        .bind(hash)
        .bind(ts(now))
        .fetch_optional(self.pool())
        .await?;
        drop(turn);
        if let Some(r) = row {
            return Ok(Spent::Fresh {
                grant_id: r.try_get("grant_id")?,
                redirect_uri: r.try_get("redirect_uri")?,
                code_challenge: r.try_get("code_challenge")?,
                expires_at: req_ts(&r, "expires_at")?,
            });
        }
        let grant: Option<String> =
            sqlx::query_scalar("SELECT grant_id FROM oauth_codes WHERE code_hash = $1")
                .bind(hash)
                .fetch_optional(self.pool())
                .await?;
        Ok(match grant {
            Some(grant_id) => Spent::Replayed { grant_id },
            None => Spent::Unknown,
        })
    }
}

async fn run(s: &mut SqlSession, (sql, vals): Stmt) -> StoreResult<()> {
    bind_all(sqlx::query(sql), vals).execute(s.db()).await?;
    Ok(())
}

#[async_trait]
impl OAuthStore for SqlSession {
    async fn create_app(&mut self, app: &OAuthApp, secret_hash: Option<&str>) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO oauth_apps (id, owner_id, name, homepage_url, logo_url, redirect_uris, scopes, \
             secret_hash, token_exchange, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        )
        .bind(&app.id)
        .bind(&app.owner_id)
        .bind(&app.name)
        .bind(&app.homepage_url)
        .bind(&app.logo_url)
        .bind(json(&app.redirect_uris)?)
        .bind(json(&app.scopes)?)
        .bind(secret_hash)
        .bind(i64::from(app.token_exchange))
        .bind(ts(app.created_at))
        .bind(ts(app.updated_at))
        .execute(self.db())
        .await?;
        Ok(())
    }

    async fn app(&mut self, id: &str) -> StoreResult<Option<(OAuthApp, Option<String>)>> {
        let sql = format!(
            "SELECT {APP_COLS} FROM oauth_apps a JOIN accounts o ON o.id = a.owner_id WHERE a.id = $1"
        );
        sqlx::query(&sql)
            .bind(id)
            .fetch_optional(self.db())
            .await?
            .as_ref()
            .map(app_from)
            .transpose()
    }

    async fn apps_of(&mut self, owner_id: &str) -> StoreResult<Vec<OAuthApp>> {
        let sql = format!(
            "SELECT {APP_COLS} FROM oauth_apps a JOIN accounts o ON o.id = a.owner_id \
             WHERE a.owner_id = $1 ORDER BY a.name, a.id"
        );
        sqlx::query(&sql)
            .bind(owner_id)
            .fetch_all(self.db())
            .await?
            .iter()
            .map(|r| app_from(r).map(|(a, _)| a))
            .collect()
    }

    async fn update_app(&mut self, app: &OAuthApp) -> StoreResult<bool> {
        let res = sqlx::query(
            "UPDATE oauth_apps SET name = $2, homepage_url = $3, logo_url = $4, redirect_uris = $5, \
             scopes = $6, token_exchange = $7, updated_at = $8 WHERE id = $1",
        )
        .bind(&app.id)
        .bind(&app.name)
        .bind(&app.homepage_url)
        .bind(&app.logo_url)
        .bind(json(&app.redirect_uris)?)
        .bind(json(&app.scopes)?)
        .bind(i64::from(app.token_exchange))
        .bind(ts(app.updated_at))
        .execute(self.db())
        .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn set_app_secret(
        &mut self,
        id: &str,
        secret_hash: Option<&str>,
        now: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let res =
            sqlx::query("UPDATE oauth_apps SET secret_hash = $2, updated_at = $3 WHERE id = $1")
                .bind(id)
                .bind(secret_hash)
                .bind(ts(now))
                .execute(self.db())
                .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn delete_app(&mut self, id: &str) -> StoreResult<bool> {
        for sql in [
            "DELETE FROM oauth_grants WHERE app_id = $1",
            "DELETE FROM oauth_devices WHERE app_id = $1",
            "DELETE FROM oauth_consents WHERE app_id = $1",
        ] {
            sqlx::query(sql).bind(id).execute(self.db()).await?;
        }
        let res = sqlx::query("DELETE FROM oauth_apps WHERE id = $1")
            .bind(id)
            .execute(self.db())
            .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn create_grant(&mut self, g: &Grant) -> StoreResult<()> {
        let row = grant_row(g)?;
        run(self, row).await
    }

    async fn grant(&mut self, id: &str) -> StoreResult<Option<Grant>> {
        let sql = format!("SELECT {GRANT_COLS} FROM oauth_grants g WHERE g.id = $1");
        sqlx::query(&sql)
            .bind(id)
            .fetch_optional(self.db())
            .await?
            .as_ref()
            .map(grant_from)
            .transpose()
    }

    async fn revoke_app_grants(&mut self, app_id: &str, now: DateTime<Utc>) -> StoreResult<u64> {
        sqlx::query(
            "DELETE FROM oauth_tokens WHERE grant_id IN (SELECT id FROM oauth_grants WHERE app_id = $1)",
        )
        .bind(app_id)
        .execute(self.db())
        .await?;
        let res = sqlx::query(
            "UPDATE oauth_grants SET revoked_at = $2 WHERE app_id = $1 AND revoked_at IS NULL",
        )
        .bind(app_id)
        .bind(ts(now))
        .execute(self.db())
        .await?;
        Ok(res.rows_affected())
    }

    async fn revoke_grant(&mut self, id: &str, now: DateTime<Utc>) -> StoreResult<()> {
        sqlx::query("UPDATE oauth_grants SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL")
            .bind(id)
            .bind(ts(now))
            .execute(self.db())
            .await?;
        sqlx::query("DELETE FROM oauth_tokens WHERE grant_id = $1")
            .bind(id)
            .execute(self.db())
            .await?;
        Ok(())
    }

    async fn add_token(
        &mut self,
        hash: &str,
        grant_id: &str,
        kind: TokenKind,
        expires_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        let t = NewTokenRow {
            hash: hash.to_string(),
            grant_id: grant_id.to_string(),
            kind,
            expires_at,
        };
        run(self, token_row(&t, now)).await
    }

    async fn token(&mut self, hash: &str) -> StoreResult<Option<(IssuedToken, Grant)>> {
        let sql = format!(
            "SELECT t.kind, t.expires_at, t.used_at, t.created_at, {GRANT_COLS} \
             FROM oauth_tokens t JOIN oauth_grants g ON g.id = t.grant_id WHERE t.token_hash = $1"
        );
        let Some(row) = sqlx::query(&sql)
            .bind(hash)
            .fetch_optional(self.db())
            .await?
        else {
            return Ok(None);
        };
        let kind = match row.try_get::<String, _>("kind")?.as_str() {
            "access" => TokenKind::Access,
            _ => TokenKind::Refresh,
        };
        Ok(Some((
            IssuedToken {
                kind,
                expires_at: req_ts(&row, "expires_at")?,
                used_at: opt_ts(&row, "used_at")?,
                created_at: req_ts(&row, "created_at")?,
            },
            grant_from(&row)?,
        )))
    }

    async fn token_with_user(
        &mut self,
        hash: &str,
    ) -> StoreResult<Option<(IssuedToken, Grant, Account)>> {
        let cols = ACCOUNT_COLS
            .split(", ")
            .map(|c| format!("a.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "SELECT t.kind AS t_kind, t.expires_at AS t_expires_at, t.used_at AS t_used_at, \
             t.created_at AS t_created_at, {GRANT_COLS}, {cols} \
             FROM oauth_tokens t JOIN oauth_grants g ON g.id = t.grant_id \
             JOIN accounts a ON a.id = g.user_id WHERE t.token_hash = $1"
        );
        let Some(row) = sqlx::query(&sql)
            .bind(hash)
            .fetch_optional(self.db())
            .await?
        else {
            return Ok(None);
        };
        let issued = issued_from(&row, "t_")?;
        Ok(Some((issued, grant_from(&row)?, account_from(&row)?)))
    }

    async fn use_refresh_token(&mut self, hash: &str, now: DateTime<Utc>) -> StoreResult<bool> {
        let res = sqlx::query(
            "UPDATE oauth_tokens SET used_at = $2 \
             WHERE token_hash = $1 AND kind = 'refresh' AND used_at IS NULL",
        )
        .bind(hash)
        .bind(ts(now))
        .execute(self.db())
        .await?;
        Ok(res.rows_affected() == 1)
    }

    async fn delete_oauth_token(&mut self, hash: &str) -> StoreResult<bool> {
        let res = sqlx::query("DELETE FROM oauth_tokens WHERE token_hash = $1")
            .bind(hash)
            .execute(self.db())
            .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn add_code(&mut self, c: &NewCode) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO oauth_codes (code_hash, grant_id, redirect_uri, code_challenge, expires_at) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&c.code_hash)
        .bind(&c.grant_id)
        .bind(&c.redirect_uri)
        .bind(&c.code_challenge)
        .bind(ts(c.expires_at))
        .execute(self.db())
        .await?;
        Ok(())
    }

    async fn add_device(&mut self, d: &DeviceAuth) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO oauth_devices (device_hash, user_code_hash, app_id, scopes, status, user_id, \
             org_ids, interval_s, last_poll_at, expires_at, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        )
        .bind(&d.device_hash)
        .bind(&d.user_code_hash)
        .bind(&d.app_id)
        .bind(json(&d.scopes)?)
        .bind(d.status.as_str())
        .bind(&d.user_id)
        .bind(json(&d.org_ids)?)
        .bind(d.interval_s)
        .bind(d.last_poll_at.map(ts))
        .bind(ts(d.expires_at))
        .bind(ts(d.created_at))
        .execute(self.db())
        .await
        .map_err(|e| match super::unique_violation(&e) {
            Some(_) => StoreError::Conflict("user code taken".into()),
            None => e.into(),
        })?;
        Ok(())
    }

    async fn device(&mut self, device_hash: &str) -> StoreResult<Option<DeviceAuth>> {
        sqlx::query("SELECT * FROM oauth_devices WHERE device_hash = $1")
            .bind(device_hash)
            .fetch_optional(self.db())
            .await?
            .as_ref()
            .map(device_from)
            .transpose()
    }

    async fn device_by_user_code(
        &mut self,
        user_code_hash: &str,
    ) -> StoreResult<Option<DeviceAuth>> {
        sqlx::query("SELECT * FROM oauth_devices WHERE user_code_hash = $1")
            .bind(user_code_hash)
            .fetch_optional(self.db())
            .await?
            .as_ref()
            .map(device_from)
            .transpose()
    }

    async fn decide_device(
        &mut self,
        device_hash: &str,
        approve: Option<(&str, DateTime<Utc>, &[String])>,
    ) -> StoreResult<bool> {
        let (status, user, orgs, auth_time) = match approve {
            Some((user, at, orgs)) => (
                DeviceStatus::Approved,
                Some(user),
                Some(json(orgs)?),
                Some(ts(at)),
            ),
            None => (DeviceStatus::Denied, None, None, None),
        };
        let res = sqlx::query(
            "UPDATE oauth_devices SET status = $2, user_id = $3, org_ids = $4, auth_time = $5 \
             WHERE device_hash = $1 AND status = 'pending'",
        )
        .bind(device_hash)
        .bind(status.as_str())
        .bind(user)
        .bind(orgs)
        .bind(auth_time)
        .execute(self.db())
        .await?;
        Ok(res.rows_affected() == 1)
    }

    async fn polled_device(
        &mut self,
        device_hash: &str,
        now: DateTime<Utc>,
        interval_s: i64,
    ) -> StoreResult<()> {
        sqlx::query(
            "UPDATE oauth_devices SET last_poll_at = $2, interval_s = $3 WHERE device_hash = $1",
        )
        .bind(device_hash)
        .bind(ts(now))
        .bind(interval_s)
        .execute(self.db())
        .await?;
        Ok(())
    }

    async fn finish_device(&mut self, device_hash: &str) -> StoreResult<bool> {
        let res = sqlx::query(
            "UPDATE oauth_devices SET status = 'used' WHERE device_hash = $1 AND status = 'approved'",
        )
        .bind(device_hash)
        .execute(self.db())
        .await?;
        Ok(res.rows_affected() == 1)
    }

    async fn put_request(
        &mut self,
        id_hash: &str,
        request: &str,
        expires_at: DateTime<Utc>,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO oauth_requests (id_hash, request, expires_at) VALUES ($1, $2, $3)",
        )
        .bind(id_hash)
        .bind(request)
        .bind(ts(expires_at))
        .execute(self.db())
        .await?;
        Ok(())
    }

    async fn request(&mut self, id_hash: &str) -> StoreResult<Option<(String, DateTime<Utc>)>> {
        let row = sqlx::query("SELECT request, expires_at FROM oauth_requests WHERE id_hash = $1")
            .bind(id_hash)
            .fetch_optional(self.db())
            .await?;
        row.map(|r| Ok((r.try_get("request")?, req_ts(&r, "expires_at")?)))
            .transpose()
    }

    async fn take_request(
        &mut self,
        id_hash: &str,
    ) -> StoreResult<Option<(String, DateTime<Utc>)>> {
        let row = sqlx::query(
            "DELETE FROM oauth_requests WHERE id_hash = $1 RETURNING request, expires_at",
        )
        .bind(id_hash)
        .fetch_optional(self.db())
        .await?;
        row.map(|r| Ok((r.try_get("request")?, req_ts(&r, "expires_at")?)))
            .transpose()
    }

    async fn create_session(&mut self, hash: &str, s: &WebSession) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO web_sessions (session_hash, user_id, csrf, failed_codes, expires_at, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(hash)
        .bind(&s.user_id)
        .bind(&s.csrf)
        .bind(s.failed_codes)
        .bind(ts(s.expires_at))
        .bind(ts(s.created_at))
        .execute(self.db())
        .await?;
        Ok(())
    }

    async fn session(&mut self, hash: &str) -> StoreResult<Option<WebSession>> {
        let row = sqlx::query(
            "SELECT user_id, csrf, failed_codes, expires_at, created_at FROM web_sessions \
             WHERE session_hash = $1",
        )
        .bind(hash)
        .fetch_optional(self.db())
        .await?;
        row.map(|r| {
            Ok(WebSession {
                user_id: r.try_get("user_id")?,
                csrf: r.try_get("csrf")?,
                failed_codes: r.try_get("failed_codes")?,
                expires_at: req_ts(&r, "expires_at")?,
                created_at: req_ts(&r, "created_at")?,
            })
        })
        .transpose()
    }

    async fn delete_session(&mut self, hash: &str) -> StoreResult<()> {
        sqlx::query("DELETE FROM web_sessions WHERE session_hash = $1")
            .bind(hash)
            .execute(self.db())
            .await?;
        Ok(())
    }

    async fn failed_user_code(&mut self, hash: &str) -> StoreResult<i64> {
        let n: Option<i64> = sqlx::query_scalar(
            "UPDATE web_sessions SET failed_codes = failed_codes + 1 WHERE session_hash = $1 \
             RETURNING failed_codes",
        )
        .bind(hash)
        .fetch_optional(self.db())
        .await?;
        Ok(n.unwrap_or(i64::MAX))
    }

    async fn consent(
        &mut self,
        user_id: &str,
        app_id: &str,
    ) -> StoreResult<Option<(Vec<Scope>, Vec<String>)>> {
        let row = sqlx::query(
            "SELECT scopes, org_ids FROM oauth_consents WHERE user_id = $1 AND app_id = $2",
        )
        .bind(user_id)
        .bind(app_id)
        .fetch_optional(self.db())
        .await?;
        row.map(|r| {
            Ok((
                scopes_from(&r.try_get::<String, _>("scopes")?)?,
                strings_from(&r.try_get::<String, _>("org_ids")?)?,
            ))
        })
        .transpose()
    }

    async fn put_consent(
        &mut self,
        user_id: &str,
        app_id: &str,
        scopes: &[Scope],
        org_ids: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO oauth_consents (user_id, app_id, scopes, org_ids, updated_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (user_id, app_id) DO UPDATE SET \
             scopes = excluded.scopes, org_ids = excluded.org_ids, updated_at = excluded.updated_at",
        )
        .bind(user_id)
        .bind(app_id)
        .bind(json(scopes)?)
        .bind(json(org_ids)?)
        .bind(ts(now))
        .execute(self.db())
        .await?;
        Ok(())
    }

    async fn signing_keys(&mut self) -> StoreResult<Vec<SigningKeyRow>> {
        sqlx::query("SELECT * FROM signing_keys ORDER BY created_at DESC, kid")
            .fetch_all(self.db())
            .await?
            .iter()
            .map(|r| {
                Ok(SigningKeyRow {
                    kid: r.try_get("kid")?,
                    alg: r.try_get("alg")?,
                    private_key: r.try_get("private_key")?,
                    public_jwk: r.try_get("public_jwk")?,
                    created_at: req_ts(r, "created_at")?,
                    retired_at: opt_ts(r, "retired_at")?,
                })
            })
            .collect()
    }

    async fn add_signing_key(&mut self, k: &SigningKeyRow) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO signing_keys (kid, alg, private_key, public_jwk, created_at, retired_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&k.kid)
        .bind(&k.alg)
        .bind(&k.private_key)
        .bind(&k.public_jwk)
        .bind(ts(k.created_at))
        .bind(k.retired_at.map(ts))
        .execute(self.db())
        .await?;
        Ok(())
    }

    async fn retire_signing_keys(&mut self, now: DateTime<Utc>) -> StoreResult<()> {
        sqlx::query("UPDATE signing_keys SET retired_at = $1 WHERE retired_at IS NULL")
            .bind(ts(now))
            .execute(self.db())
            .await?;
        Ok(())
    }

    async fn drop_retired_keys(&mut self, before: DateTime<Utc>) -> StoreResult<u64> {
        let res = sqlx::query(
            "DELETE FROM signing_keys WHERE retired_at IS NOT NULL AND retired_at < $1",
        )
        .bind(ts(before))
        .execute(self.db())
        .await?;
        Ok(res.rows_affected())
    }

    async fn add_audit(&mut self, org_id: &str, e: &AuditEntry) -> StoreResult<()> {
        let row = audit_row(org_id, e)?;
        run(self, row).await
    }

    async fn audit_log(&mut self, org_id: &str, limit: i64) -> StoreResult<Vec<AuditEntry>> {
        sqlx::query(
            "SELECT id, at, action, outcome, actor, detail FROM audit_log WHERE org_id = $1 \
             ORDER BY at DESC, id DESC LIMIT $2",
        )
        .bind(org_id)
        .bind(limit)
        .fetch_all(self.db())
        .await?
        .iter()
        .map(audit_from)
        .collect()
    }

    async fn member_by_email(
        &mut self,
        org_id: &str,
        email: &str,
    ) -> StoreResult<Option<(Account, Role)>> {
        let cols = ACCOUNT_COLS
            .split(", ")
            .map(|c| format!("a.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "SELECT {cols}, m.role FROM accounts a JOIN memberships m ON m.user_id = a.id \
             WHERE m.org_id = $1 AND a.kind = 'user' AND lower(a.email) = lower($2) \
             ORDER BY a.created_at LIMIT 1"
        );
        let row = sqlx::query(&sql)
            .bind(org_id)
            .bind(email)
            .fetch_optional(self.db())
            .await?;
        row.map(|r| {
            Ok((
                account_from(&r)?,
                role_from(&r.try_get::<String, _>("role")?)?,
            ))
        })
        .transpose()
    }

    async fn org_for_exchange(&mut self, id: &str) -> StoreResult<Option<(Account, Option<i64>)>> {
        let sql = format!("SELECT {ACCOUNT_COLS}, exchange_ttl_s FROM accounts WHERE id = $1");
        let row = sqlx::query(&sql).bind(id).fetch_optional(self.db()).await?;
        row.map(|r| Ok((account_from(&r)?, r.try_get("exchange_ttl_s")?)))
            .transpose()
    }

    async fn set_exchange_ttl(&mut self, org_id: &str, seconds: Option<i64>) -> StoreResult<bool> {
        let res =
            sqlx::query("UPDATE accounts SET exchange_ttl_s = $2 WHERE id = $1 AND kind = 'org'")
                .bind(org_id)
                .bind(seconds)
                .execute(self.db())
                .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn prune_oauth(&mut self, now: DateTime<Utc>) -> StoreResult<u64> {
        // Codes and device authorizations stay a day past expiry: a late poll still hears
        // `expired_token`, and a code replayed late still revokes what it issued.
        let (now, grace) = (ts(now), ts(now - chrono::Duration::days(1)));
        let mut n = 0;
        for (sql, before) in [
            ("DELETE FROM oauth_codes WHERE expires_at < $1", &grace),
            ("DELETE FROM oauth_devices WHERE expires_at < $1", &grace),
            ("DELETE FROM oauth_requests WHERE expires_at < $1", &now),
            ("DELETE FROM web_sessions WHERE expires_at < $1", &now),
            ("DELETE FROM oauth_tokens WHERE expires_at < $1", &now),
        ] {
            n += sqlx::query(sql)
                .bind(before)
                .execute(self.db())
                .await?
                .rows_affected();
        }
        Ok(n)
    }
}
