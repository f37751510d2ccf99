//! Per-namespace quota overrides set by administrators, and the locks that serialize checked writes.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::Row;

use super::backend::Backend;
use super::sql::SqlSession;
use super::{ts, StoreResult};

/// What an administrator set for a namespace; `None` keeps the configured default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuotaOverride {
    pub endpoints: Option<u32>,
    pub replicas: Option<u32>,
}

#[async_trait]
pub trait QuotaStore {
    async fn namespace_quota(&mut self, namespace: &str) -> StoreResult<QuotaOverride>;
    /// Every namespace with an override.
    async fn namespace_quotas(&mut self) -> StoreResult<Vec<(String, QuotaOverride)>>;
    async fn set_namespace_quota(
        &mut self,
        namespace: &str,
        quota: QuotaOverride,
        now: DateTime<Utc>,
    ) -> StoreResult<()>;
    /// Holds the lock named `key` until the unit of work ends, so two writers never both pass a check
    /// (a quota, the last administrator) that only one of them fits. SQLite's units of work already run
    /// one at a time; PostgreSQL takes an advisory lock.
    async fn lock(&mut self, key: &str) -> StoreResult<()>;
}

fn count(v: Option<i64>) -> Option<u32> {
    v.and_then(|n| u32::try_from(n).ok())
}

#[async_trait]
impl QuotaStore for SqlSession {
    async fn namespace_quota(&mut self, namespace: &str) -> StoreResult<QuotaOverride> {
        let row =
            sqlx::query("SELECT endpoints, replicas FROM namespace_quotas WHERE namespace = $1")
                .bind(namespace)
                .fetch_optional(self.db())
                .await?;
        Ok(match row {
            Some(r) => QuotaOverride {
                endpoints: count(r.try_get("endpoints")?),
                replicas: count(r.try_get("replicas")?),
            },
            None => QuotaOverride::default(),
        })
    }

    async fn namespace_quotas(&mut self) -> StoreResult<Vec<(String, QuotaOverride)>> {
        let rows = sqlx::query(
            "SELECT namespace, endpoints, replicas FROM namespace_quotas ORDER BY namespace",
        )
        .fetch_all(self.db())
        .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("namespace")?,
                    QuotaOverride {
                        endpoints: count(r.try_get("endpoints")?),
                        replicas: count(r.try_get("replicas")?),
                    },
                ))
            })
            .collect()
    }

    async fn set_namespace_quota(
        &mut self,
        namespace: &str,
        quota: QuotaOverride,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        if quota == QuotaOverride::default() {
            sqlx::query("DELETE FROM namespace_quotas WHERE namespace = $1")
                .bind(namespace)
                .execute(self.db())
                .await?;
            return Ok(());
        }
        sqlx::query(
            "INSERT INTO namespace_quotas (namespace, endpoints, replicas, updated_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (namespace) DO UPDATE SET \
             endpoints = excluded.endpoints, replicas = excluded.replicas, updated_at = excluded.updated_at",
        )
        .bind(namespace)
        .bind(quota.endpoints.map(i64::from))
        .bind(quota.replicas.map(i64::from))
        .bind(ts(now))
        .execute(self.db())
        .await?;
        Ok(())
    }

    async fn lock(&mut self, key: &str) -> StoreResult<()> {
        if self.backend == Backend::Postgres {
            sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
                .bind(key)
                .execute(self.db())
                .await?;
        }
        Ok(())
    }
}
