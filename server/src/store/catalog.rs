//! The catalog's items, each with its recipes; a recipe's public id is unique across the catalog.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::sql::SqlSession;
use super::{json_err, ts, unique_violation, StoreError, StoreResult};
use crate::model::catalog::CatalogEntry;

#[async_trait]
pub trait CatalogStore {
    async fn catalog_entries(&mut self) -> StoreResult<Vec<CatalogEntry>>;
    async fn catalog_entry(&mut self, repo_id: &str) -> StoreResult<Option<CatalogEntry>>;
    /// Adds the item, or replaces the one with the same repo id; true when it was added. A recipe id
    /// that another item uses is a conflict.
    async fn put_catalog_entry(
        &mut self,
        entry: &CatalogEntry,
        now: DateTime<Utc>,
    ) -> StoreResult<bool>;
    async fn delete_catalog_entry(&mut self, repo_id: &str) -> StoreResult<bool>;
    /// Claims the one-time catalog seed: true the first time in the store's life, so a catalog
    /// emptied later stays empty.
    async fn claim_catalog_seed(&mut self, now: DateTime<Utc>) -> StoreResult<bool>;
}

#[async_trait]
impl CatalogStore for SqlSession {
    async fn catalog_entries(&mut self) -> StoreResult<Vec<CatalogEntry>> {
        let rows: Vec<String> =
            sqlx::query_scalar("SELECT item FROM catalog_items ORDER BY repo_id")
                .fetch_all(self.db())
                .await?;
        rows.iter()
            .map(|s| serde_json::from_str::<CatalogEntry>(s).map_err(json_err))
            .collect()
    }

    async fn catalog_entry(&mut self, repo_id: &str) -> StoreResult<Option<CatalogEntry>> {
        let row: Option<String> =
            sqlx::query_scalar("SELECT item FROM catalog_items WHERE repo_id = $1")
                .bind(repo_id)
                .fetch_optional(self.db())
                .await?;
        row.map(|s| serde_json::from_str::<CatalogEntry>(&s).map_err(json_err))
            .transpose()
    }

    async fn put_catalog_entry(
        &mut self,
        entry: &CatalogEntry,
        now: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let json = serde_json::to_string(entry).map_err(json_err)?;
        let existed: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM catalog_items WHERE repo_id = $1")
                .bind(&entry.repo_id)
                .fetch_one(self.db())
                .await?;
        sqlx::query(
            "INSERT INTO catalog_items (repo_id, item, updated_at) VALUES ($1, $2, $3) \
             ON CONFLICT (repo_id) DO UPDATE SET item = excluded.item, updated_at = excluded.updated_at",
        )
        .bind(&entry.repo_id)
        .bind(&json)
        .bind(ts(now))
        .execute(self.db())
        .await?;
        sqlx::query("DELETE FROM catalog_recipes WHERE repo_id = $1")
            .bind(&entry.repo_id)
            .execute(self.db())
            .await?;
        for (i, recipe) in entry.recipes.iter().enumerate() {
            // Asked first for the message; the primary key is what holds against a concurrent writer
            // (on PostgreSQL a failed statement ends the transaction, so it cannot be asked after).
            let other: Option<String> = sqlx::query_scalar(
                "SELECT repo_id FROM catalog_recipes WHERE public_id = $1 AND repo_id <> $2",
            )
            .bind(&recipe.public_id)
            .bind(&entry.repo_id)
            .fetch_optional(self.db())
            .await?;
            if let Some(other) = other {
                return Err(StoreError::Conflict(format!(
                    "recipes[{i}].publicId {:?} is already used by {other}",
                    recipe.public_id
                )));
            }
            sqlx::query("INSERT INTO catalog_recipes (public_id, repo_id) VALUES ($1, $2)")
                .bind(&recipe.public_id)
                .bind(&entry.repo_id)
                .execute(self.db())
                .await
                .map_err(|e| match unique_violation(&e) {
                    Some(_) => StoreError::Conflict(format!(
                        "recipes[{i}].publicId {:?} is already in use",
                        recipe.public_id
                    )),
                    None => e.into(),
                })?;
        }
        Ok(existed == 0)
    }

    async fn delete_catalog_entry(&mut self, repo_id: &str) -> StoreResult<bool> {
        let res = sqlx::query("DELETE FROM catalog_items WHERE repo_id = $1")
            .bind(repo_id)
            .execute(self.db())
            .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn claim_catalog_seed(&mut self, now: DateTime<Utc>) -> StoreResult<bool> {
        Ok(sqlx::query(
            "INSERT INTO meta (key, value) VALUES ('catalog_seeded', $1) ON CONFLICT DO NOTHING",
        )
        .bind(ts(now))
        .execute(self.db())
        .await?
        .rows_affected()
            > 0)
    }
}
