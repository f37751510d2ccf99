//! Trusted publishers (keyless sign-in from CI) and the id tokens already exchanged.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::any::AnyRow;
use sqlx::Row;

use super::sql::SqlSession;
use super::{json_err, parse_ts, ts, StoreResult};
use crate::model::oauth::TrustedPublisher;

#[async_trait]
pub trait PublisherStore {
    async fn create_publisher(&mut self, p: &TrustedPublisher) -> StoreResult<()>;
    /// A namespace's publishers, oldest first.
    async fn publishers_of(&mut self, namespace_id: &str) -> StoreResult<Vec<TrustedPublisher>>;
    async fn delete_publisher(&mut self, namespace_id: &str, id: &str) -> StoreResult<bool>;
    /// Records an id token's `jti` until `expires_at`: false when it was already recorded (a
    /// replay). Rows of expired tokens are pruned on the way.
    async fn spend_token_id(
        &mut self,
        issuer: &str,
        jti: &str,
        expires_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<bool>;
}

const COLS: &str = "p.id, p.namespace_id, n.name AS namespace, p.issuer, p.audience, p.claims, \
     p.scopes, p.created_by AS created_by_id, c.name AS created_by, p.created_at";

fn publisher_from(row: &AnyRow) -> StoreResult<TrustedPublisher> {
    let claims: String = row.try_get("claims")?;
    let scopes: String = row.try_get("scopes")?;
    Ok(TrustedPublisher {
        id: row.try_get("id")?,
        namespace: row.try_get("namespace")?,
        namespace_id: row.try_get("namespace_id")?,
        issuer: row.try_get("issuer")?,
        audience: row.try_get("audience")?,
        claims: serde_json::from_str(&claims).map_err(json_err)?,
        scopes: serde_json::from_str(&scopes).map_err(json_err)?,
        created_by: row.try_get("created_by")?,
        created_by_id: row.try_get("created_by_id")?,
        created_at: parse_ts(&row.try_get::<String, _>("created_at")?)?,
    })
}

#[async_trait]
impl PublisherStore for SqlSession {
    async fn create_publisher(&mut self, p: &TrustedPublisher) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO trusted_publishers (id, namespace_id, issuer, audience, claims, scopes, \
             created_by, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(&p.id)
        .bind(&p.namespace_id)
        .bind(&p.issuer)
        .bind(&p.audience)
        .bind(serde_json::to_string(&p.claims).map_err(json_err)?)
        .bind(serde_json::to_string(&p.scopes).map_err(json_err)?)
        .bind(&p.created_by_id)
        .bind(ts(p.created_at))
        .execute(self.db())
        .await?;
        Ok(())
    }

    async fn publishers_of(&mut self, namespace_id: &str) -> StoreResult<Vec<TrustedPublisher>> {
        let sql = format!(
            "SELECT {COLS} FROM trusted_publishers p JOIN accounts n ON n.id = p.namespace_id \
             JOIN accounts c ON c.id = p.created_by WHERE p.namespace_id = $1 \
             ORDER BY p.created_at, p.id"
        );
        sqlx::query(&sql)
            .bind(namespace_id)
            .fetch_all(self.db())
            .await?
            .iter()
            .map(publisher_from)
            .collect()
    }

    async fn delete_publisher(&mut self, namespace_id: &str, id: &str) -> StoreResult<bool> {
        let res = sqlx::query("DELETE FROM trusted_publishers WHERE namespace_id = $1 AND id = $2")
            .bind(namespace_id)
            .bind(id)
            .execute(self.db())
            .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn spend_token_id(
        &mut self,
        issuer: &str,
        jti: &str,
        expires_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<bool> {
        sqlx::query("DELETE FROM ci_token_ids WHERE expires_at < $1")
            .bind(ts(now))
            .execute(self.db())
            .await?;
        let res = sqlx::query(
            "INSERT INTO ci_token_ids (issuer, jti, expires_at) VALUES ($1, $2, $3) \
             ON CONFLICT (issuer, jti) DO NOTHING",
        )
        .bind(issuer)
        .bind(jti)
        .bind(ts(expires_at))
        .execute(self.db())
        .await?;
        Ok(res.rows_affected() == 1)
    }
}
