//! Endpoints: spec, status and who changed them, with a version for optimistic concurrency.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::any::AnyRow;
use sqlx::Row;

use super::sql::SqlSession;
use super::{json_err, parse_ts, ts, unique_violation, StoreError, StoreResult};
use crate::model::{EndpointSpec, EndpointState};

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
pub trait EndpointStore {
    /// Stores a new endpoint. Its name in the namespace, and its custom domain and path, must be free.
    async fn insert_endpoint(&mut self, rec: &EndpointRecord) -> StoreResult<()>;
    async fn endpoint(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> StoreResult<Option<EndpointRecord>>;
    async fn endpoints_in(&mut self, namespace: &str) -> StoreResult<Vec<EndpointRecord>>;
    /// Every endpoint of every namespace (the reconciler's view).
    async fn all_endpoints(&mut self) -> StoreResult<Vec<EndpointRecord>>;
    /// Names in the namespace that start with `prefix` (to make a derived name unique).
    async fn endpoint_names_with_prefix(
        &mut self,
        namespace: &str,
        prefix: &str,
    ) -> StoreResult<Vec<String>>;
    /// Writes the record if its stored version is still `rec.version`; the stored version becomes
    /// `rec.version + 1`.
    async fn update_endpoint(&mut self, rec: &EndpointRecord) -> StoreResult<EndpointRecord>;
    async fn delete_endpoint(&mut self, namespace: &str, name: &str) -> StoreResult<bool>;
}

const ENDPOINT_COLS: &str =
    "id, namespace, spec, state, message, url, ready_replica, target_replica, \
     created_at, updated_at, created_by, updated_by, version";

fn endpoint_from(row: &AnyRow) -> StoreResult<EndpointRecord> {
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

/// The custom route's key columns: what the unique index compares.
fn route_key(spec: &EndpointSpec) -> (Option<String>, Option<String>) {
    match &spec.route {
        Some(r) => {
            let (host, path) = r.key();
            (Some(host), Some(path))
        }
        None => (None, None),
    }
}

/// A broken uniqueness rule in the endpoint's words: its name, or its custom route.
fn conflict(rec: &EndpointRecord, constraint: &str) -> StoreError {
    match &rec.spec.route {
        Some(r) if constraint.contains("route") => StoreError::Conflict(format!(
            "{}{} already routes to another endpoint",
            r.domain, r.path
        )),
        _ => StoreError::Conflict(format!(
            "an endpoint named {:?} already exists in namespace {:?}",
            rec.spec.name, rec.namespace
        )),
    }
}

#[async_trait]
impl EndpointStore for SqlSession {
    async fn insert_endpoint(&mut self, rec: &EndpointRecord) -> StoreResult<()> {
        let (route_host, route_path) = route_key(&rec.spec);
        let res = sqlx::query(&format!(
            "INSERT INTO endpoints (name, route_host, route_path, {ENDPOINT_COLS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)"
        ))
        .bind(&rec.spec.name)
        .bind(route_host)
        .bind(route_path)
        .bind(&rec.id)
        .bind(&rec.namespace)
        .bind(serde_json::to_string(&rec.spec).map_err(json_err)?)
        .bind(rec.state.as_str())
        .bind(&rec.message)
        .bind(&rec.url)
        .bind(i64::from(rec.ready_replica))
        .bind(i64::from(rec.target_replica))
        .bind(ts(rec.created_at))
        .bind(ts(rec.updated_at))
        .bind(serde_json::to_string(&rec.created_by).map_err(json_err)?)
        .bind(serde_json::to_string(&rec.updated_by).map_err(json_err)?)
        .bind(rec.version)
        .execute(self.db())
        .await;
        match res {
            Ok(_) => {
                self.rerouted = true;
                Ok(())
            }
            Err(e) => match unique_violation(&e) {
                Some(constraint) => Err(conflict(rec, &constraint)),
                None => Err(e.into()),
            },
        }
    }

    async fn endpoint(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> StoreResult<Option<EndpointRecord>> {
        let row = sqlx::query(&format!(
            "SELECT {ENDPOINT_COLS} FROM endpoints WHERE namespace = $1 AND name = $2"
        ))
        .bind(namespace)
        .bind(name)
        .fetch_optional(self.db())
        .await?;
        row.as_ref().map(endpoint_from).transpose()
    }

    async fn endpoints_in(&mut self, namespace: &str) -> StoreResult<Vec<EndpointRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {ENDPOINT_COLS} FROM endpoints WHERE namespace = $1 ORDER BY name"
        ))
        .bind(namespace)
        .fetch_all(self.db())
        .await?;
        rows.iter().map(endpoint_from).collect()
    }

    async fn all_endpoints(&mut self) -> StoreResult<Vec<EndpointRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {ENDPOINT_COLS} FROM endpoints ORDER BY namespace, name"
        ))
        .fetch_all(self.db())
        .await?;
        rows.iter().map(endpoint_from).collect()
    }

    async fn endpoint_names_with_prefix(
        &mut self,
        namespace: &str,
        prefix: &str,
    ) -> StoreResult<Vec<String>> {
        // substr rather than LIKE: nothing to escape. length() counts characters on both backends.
        Ok(sqlx::query_scalar(
            "SELECT name FROM endpoints WHERE namespace = $1 AND substr(name, 1, length($2)) = $2",
        )
        .bind(namespace)
        .bind(prefix)
        .fetch_all(self.db())
        .await?)
    }

    async fn update_endpoint(&mut self, rec: &EndpointRecord) -> StoreResult<EndpointRecord> {
        let (route_host, route_path) = route_key(&rec.spec);
        let res = sqlx::query(
            "UPDATE endpoints SET spec = $1, state = $2, message = $3, url = $4, ready_replica = $5, \
             target_replica = $6, updated_at = $7, updated_by = $8, route_host = $9, route_path = $10, \
             version = version + 1 WHERE id = $11 AND version = $12",
        )
        .bind(serde_json::to_string(&rec.spec).map_err(json_err)?)
        .bind(rec.state.as_str())
        .bind(&rec.message)
        .bind(&rec.url)
        .bind(i64::from(rec.ready_replica))
        .bind(i64::from(rec.target_replica))
        .bind(ts(rec.updated_at))
        .bind(serde_json::to_string(&rec.updated_by).map_err(json_err)?)
        .bind(route_host)
        .bind(route_path)
        .bind(&rec.id)
        .bind(rec.version)
        .execute(self.db())
        .await
        .map_err(|e| match unique_violation(&e) {
            Some(constraint) => conflict(rec, &constraint),
            None => e.into(),
        })?;
        if res.rows_affected() == 0 {
            return Err(StoreError::Stale);
        }
        self.rerouted = true;
        let mut out = rec.clone();
        out.version += 1;
        Ok(out)
    }

    async fn delete_endpoint(&mut self, namespace: &str, name: &str) -> StoreResult<bool> {
        let res = sqlx::query("DELETE FROM endpoints WHERE namespace = $1 AND name = $2")
            .bind(namespace)
            .bind(name)
            .execute(self.db())
            .await?;
        self.rerouted |= res.rows_affected() > 0;
        Ok(res.rows_affected() > 0)
    }
}
