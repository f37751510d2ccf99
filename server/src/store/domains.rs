//! Custom domains and the namespace each belongs to. A domain is claimed by the first endpoint that routes
//! it, or assigned by an administrator; the primary key makes one claim win when two race.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::Row;

use super::sql::SqlSession;
use super::{parse_ts, ts, StoreResult};

/// A domain and the namespace it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainClaim {
    /// Lowercase, without a trailing dot (as routes compare it).
    pub domain: String,
    pub namespace: String,
    /// The administrator who assigned it; `None` when an endpoint of the namespace claimed it.
    pub assigned_by: Option<String>,
    pub created_at: DateTime<Utc>,
}

#[async_trait]
pub trait DomainStore {
    /// The namespace `domain` belongs to: `namespace` when it belonged to none (it is claimed for it now).
    async fn claim_domain(
        &mut self,
        domain: &str,
        namespace: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<String>;
    /// Every claimed domain, in order.
    async fn domain_claims(&mut self) -> StoreResult<Vec<DomainClaim>>;
    /// Gives `domain` to `namespace`, whoever had it.
    async fn assign_domain(
        &mut self,
        domain: &str,
        namespace: &str,
        by: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<()>;
    /// Lets `domain` go; false when nobody had it.
    async fn release_domain(&mut self, domain: &str) -> StoreResult<bool>;
    /// Lets every domain of `namespace` go (it is being deleted).
    async fn release_domains_of(&mut self, namespace: &str) -> StoreResult<()>;
    /// The endpoints routed under `domain`, as (namespace, name).
    async fn endpoints_on_domain(&mut self, domain: &str) -> StoreResult<Vec<(String, String)>>;
}

#[async_trait]
impl DomainStore for SqlSession {
    async fn claim_domain(
        &mut self,
        domain: &str,
        namespace: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<String> {
        // One statement that takes the row (a new one, or the holder's, locked for the unit of work): no
        // release or assignment can slip between reading the holder and the endpoint that relies on it.
        Ok(sqlx::query_scalar(
            "INSERT INTO domains (domain, namespace, assigned_by, created_at) VALUES ($1, $2, NULL, $3) \
             ON CONFLICT (domain) DO UPDATE SET domain = excluded.domain RETURNING namespace",
        )
        .bind(domain)
        .bind(namespace)
        .bind(ts(now))
        .fetch_one(self.db())
        .await?)
    }

    async fn domain_claims(&mut self) -> StoreResult<Vec<DomainClaim>> {
        let rows = sqlx::query(
            "SELECT domain, namespace, assigned_by, created_at FROM domains ORDER BY domain",
        )
        .fetch_all(self.db())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(DomainClaim {
                    domain: r.try_get("domain")?,
                    namespace: r.try_get("namespace")?,
                    assigned_by: r.try_get("assigned_by")?,
                    created_at: parse_ts(&r.try_get::<String, _>("created_at")?)?,
                })
            })
            .collect()
    }

    async fn assign_domain(
        &mut self,
        domain: &str,
        namespace: &str,
        by: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO domains (domain, namespace, assigned_by, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (domain) DO UPDATE SET namespace = excluded.namespace, \
             assigned_by = excluded.assigned_by, created_at = excluded.created_at",
        )
        .bind(domain)
        .bind(namespace)
        .bind(by)
        .bind(ts(now))
        .execute(self.db())
        .await?;
        self.rerouted = true;
        Ok(())
    }

    async fn release_domain(&mut self, domain: &str) -> StoreResult<bool> {
        let gone = sqlx::query("DELETE FROM domains WHERE domain = $1")
            .bind(domain)
            .execute(self.db())
            .await?;
        self.rerouted |= gone.rows_affected() > 0;
        Ok(gone.rows_affected() > 0)
    }

    async fn release_domains_of(&mut self, namespace: &str) -> StoreResult<()> {
        sqlx::query("DELETE FROM domains WHERE lower(namespace) = lower($1)")
            .bind(namespace)
            .execute(self.db())
            .await?;
        Ok(())
    }

    async fn endpoints_on_domain(&mut self, domain: &str) -> StoreResult<Vec<(String, String)>> {
        let rows = sqlx::query(
            "SELECT namespace, name FROM endpoints WHERE route_host = $1 ORDER BY namespace, name",
        )
        .bind(domain)
        .fetch_all(self.db())
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("namespace")?, r.try_get("name")?)))
            .collect()
    }
}
