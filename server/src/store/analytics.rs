//! Endpoint analytics: each server's samples of each endpoint per time bucket (`endpoint_series`), and the
//! runtime's decisions (`endpoint_decisions`). A server writes only its own samples, so a row has one writer
//! and several servers' rows add up when read.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::Row;

use super::sql::SqlSession;
use super::{json, json_col, req_ts, ts, StoreResult};
use crate::model::analytics::{Decision, DecisionKind, Measured, Sample};

/// One server's sample of one endpoint in one bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesRow {
    pub endpoint_id: String,
    /// The bucket's length in seconds.
    pub step: i64,
    /// Its start, Unix seconds.
    pub bucket: i64,
    pub server_id: String,
    pub sample: Sample,
}

/// What a decision records beside its kind and reason.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Detail {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    from: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    to: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    measured: Option<Measured>,
}

#[async_trait]
pub trait AnalyticsStore {
    /// Writes each row, in place of what its server wrote of that bucket before.
    async fn put_samples(&mut self, rows: &[SeriesRow]) -> StoreResult<()>;
    /// What `server_id` wrote of a bucket, if anything.
    async fn sample_of(
        &mut self,
        endpoint_id: &str,
        step: i64,
        bucket: i64,
        server_id: &str,
    ) -> StoreResult<Option<Sample>>;
    /// Every server's samples of an endpoint at `step` with a bucket in `[from, to)` (Unix seconds), in
    /// bucket order.
    async fn samples(
        &mut self,
        endpoint_id: &str,
        step: i64,
        from: i64,
        to: i64,
    ) -> StoreResult<Vec<SeriesRow>>;
    /// Forgets the samples at `step` of buckets before `before` (Unix seconds).
    async fn prune_samples(&mut self, step: i64, before: i64) -> StoreResult<u64>;
    async fn add_decisions(&mut self, endpoint_id: &str, decisions: &[Decision])
        -> StoreResult<()>;
    /// An endpoint's decisions at or after `since`, newest first, `limit` at most.
    async fn decisions(
        &mut self,
        endpoint_id: &str,
        since: DateTime<Utc>,
        limit: u32,
    ) -> StoreResult<Vec<Decision>>;
    /// Forgets decisions taken before `before`.
    async fn prune_decisions(&mut self, before: DateTime<Utc>) -> StoreResult<u64>;
}

#[async_trait]
impl AnalyticsStore for SqlSession {
    async fn put_samples(&mut self, rows: &[SeriesRow]) -> StoreResult<()> {
        for r in rows {
            sqlx::query(
                "INSERT INTO endpoint_series (endpoint_id, step, bucket, server_id, sample) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (endpoint_id, step, bucket, server_id) \
                 DO UPDATE SET sample = excluded.sample",
            )
            .bind(&r.endpoint_id)
            .bind(r.step)
            .bind(r.bucket)
            .bind(&r.server_id)
            .bind(json(&r.sample)?)
            .execute(self.db())
            .await?;
        }
        Ok(())
    }

    async fn sample_of(
        &mut self,
        endpoint_id: &str,
        step: i64,
        bucket: i64,
        server_id: &str,
    ) -> StoreResult<Option<Sample>> {
        let row = sqlx::query(
            "SELECT sample FROM endpoint_series \
             WHERE endpoint_id = $1 AND step = $2 AND bucket = $3 AND server_id = $4",
        )
        .bind(endpoint_id)
        .bind(step)
        .bind(bucket)
        .bind(server_id)
        .fetch_optional(self.db())
        .await?;
        row.map(|r| json_col(&r, "sample")).transpose()
    }

    async fn samples(
        &mut self,
        endpoint_id: &str,
        step: i64,
        from: i64,
        to: i64,
    ) -> StoreResult<Vec<SeriesRow>> {
        let rows = sqlx::query(
            "SELECT bucket, server_id, sample FROM endpoint_series \
             WHERE endpoint_id = $1 AND step = $2 AND bucket >= $3 AND bucket < $4 \
             ORDER BY bucket, server_id",
        )
        .bind(endpoint_id)
        .bind(step)
        .bind(from)
        .bind(to)
        .fetch_all(self.db())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(SeriesRow {
                    endpoint_id: endpoint_id.to_string(),
                    step,
                    bucket: r.try_get("bucket")?,
                    server_id: r.try_get("server_id")?,
                    sample: json_col(r, "sample")?,
                })
            })
            .collect()
    }

    async fn prune_samples(&mut self, step: i64, before: i64) -> StoreResult<u64> {
        let res = sqlx::query("DELETE FROM endpoint_series WHERE step = $1 AND bucket < $2")
            .bind(step)
            .bind(before)
            .execute(self.db())
            .await?;
        Ok(res.rows_affected())
    }

    async fn add_decisions(
        &mut self,
        endpoint_id: &str,
        decisions: &[Decision],
    ) -> StoreResult<()> {
        for d in decisions {
            let detail = Detail {
                from: d.from,
                to: d.to,
                measured: d.measured.clone(),
            };
            sqlx::query(
                "INSERT INTO endpoint_decisions (endpoint_id, at, kind, reason, detail) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(endpoint_id)
            .bind(ts(d.at))
            .bind(d.kind.as_str())
            .bind(&d.reason)
            .bind(json(&detail)?)
            .execute(self.db())
            .await?;
        }
        Ok(())
    }

    async fn decisions(
        &mut self,
        endpoint_id: &str,
        since: DateTime<Utc>,
        limit: u32,
    ) -> StoreResult<Vec<Decision>> {
        let rows = sqlx::query(
            "SELECT at, kind, reason, detail FROM endpoint_decisions \
             WHERE endpoint_id = $1 AND at >= $2 ORDER BY seq DESC LIMIT $3",
        )
        .bind(endpoint_id)
        .bind(ts(since))
        .bind(i64::from(limit))
        .fetch_all(self.db())
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let kind: String = r.try_get("kind")?;
            // A kind a newer server wrote that this one does not know is left out.
            let Some(kind) = DecisionKind::parse(&kind) else {
                continue;
            };
            let detail: Detail = json_col(r, "detail")?;
            out.push(Decision {
                at: req_ts(r, "at")?,
                kind,
                reason: r.try_get("reason")?,
                from: detail.from,
                to: detail.to,
                measured: detail.measured,
            });
        }
        Ok(out)
    }

    async fn prune_decisions(&mut self, before: DateTime<Utc>) -> StoreResult<u64> {
        let res = sqlx::query("DELETE FROM endpoint_decisions WHERE at < $1")
            .bind(ts(before))
            .execute(self.db())
            .await?;
        Ok(res.rows_affected())
    }
}
