//! Copies a whole store to another (SQLite ⇄ PostgreSQL), table by table, in one transaction on each.

use futures_util::TryStreamExt;
use sqlx::any::AnyRow;
use sqlx::Row;

use super::backend::Backend;
use super::sql::SqlStore;
use super::{Store, StoreError, StoreResult};

#[derive(Clone, Copy)]
enum Col {
    /// Text, or NULL.
    Text,
    Int,
    OptInt,
}

/// A table to copy: its name, the order to read it in, and its columns.
type Table = (&'static str, &'static str, &'static [(&'static str, Col)]);

/// Every table with its columns, parents before children. `events` is copied in `seq` order without
/// its `seq`: the target numbers them anew, in the same order. Short-lived flow state (codes, device
/// authorizations, pending authorization requests, browser sessions) is not copied: it expires in minutes.
const TABLES: &[Table] = &[
    (
        "accounts",
        "id",
        &[
            ("id", Col::Text),
            ("kind", Col::Text),
            ("name", Col::Text),
            ("fullname", Col::Text),
            ("email", Col::Text),
            ("is_admin", Col::Int),
            ("created_at", Col::Text),
            ("name_key", Col::Text),
            ("disabled_at", Col::Text),
            ("password_hash", Col::Text),
            ("exchange_ttl_s", Col::OptInt),
        ],
    ),
    (
        "memberships",
        "org_id, user_id",
        &[
            ("org_id", Col::Text),
            ("user_id", Col::Text),
            ("role", Col::Text),
            ("created_at", Col::Text),
        ],
    ),
    (
        "tokens",
        "id",
        &[
            ("id", Col::Text),
            ("user_id", Col::Text),
            ("token_hash", Col::Text),
            ("display_name", Col::Text),
            ("scopes", Col::Text),
            ("expires_at", Col::Text),
            ("created_at", Col::Text),
        ],
    ),
    (
        "catalog_items",
        "repo_id",
        &[
            ("repo_id", Col::Text),
            ("item", Col::Text),
            ("updated_at", Col::Text),
        ],
    ),
    (
        "catalog_recipes",
        "public_id",
        &[("public_id", Col::Text), ("repo_id", Col::Text)],
    ),
    (
        "endpoints",
        "id",
        &[
            ("id", Col::Text),
            ("namespace", Col::Text),
            ("name", Col::Text),
            ("spec", Col::Text),
            ("state", Col::Text),
            ("message", Col::Text),
            ("url", Col::Text),
            ("ready_replica", Col::Int),
            ("target_replica", Col::Int),
            ("created_at", Col::Text),
            ("updated_at", Col::Text),
            ("created_by", Col::Text),
            ("updated_by", Col::Text),
            ("version", Col::Int),
            ("route_host", Col::Text),
            ("route_path", Col::Text),
        ],
    ),
    ("meta", "key", &[("key", Col::Text), ("value", Col::Text)]),
    (
        "domains",
        "domain",
        &[
            ("domain", Col::Text),
            ("namespace", Col::Text),
            ("assigned_by", Col::Text),
            ("created_at", Col::Text),
        ],
    ),
    (
        "namespace_quotas",
        "namespace",
        &[
            ("namespace", Col::Text),
            ("endpoints", Col::OptInt),
            ("replicas", Col::OptInt),
            ("updated_at", Col::Text),
        ],
    ),
    (
        "events",
        "seq",
        &[
            ("id", Col::Text),
            ("kind", Col::Text),
            ("namespace", Col::Text),
            ("subject", Col::Text),
            ("payload", Col::Text),
            ("created_at", Col::Text),
            ("hook_payload", Col::Text),
        ],
    ),
    (
        "oauth_apps",
        "id",
        &[
            ("id", Col::Text),
            ("owner_id", Col::Text),
            ("name", Col::Text),
            ("homepage_url", Col::Text),
            ("logo_url", Col::Text),
            ("redirect_uris", Col::Text),
            ("scopes", Col::Text),
            ("secret_hash", Col::Text),
            ("token_exchange", Col::Int),
            ("created_at", Col::Text),
            ("updated_at", Col::Text),
        ],
    ),
    (
        "oauth_grants",
        "id",
        &[
            ("id", Col::Text),
            ("app_id", Col::Text),
            ("user_id", Col::Text),
            ("kind", Col::Text),
            ("scopes", Col::Text),
            ("org_ids", Col::Text),
            ("personal", Col::Int),
            ("nonce", Col::Text),
            ("auth_time", Col::Text),
            ("created_at", Col::Text),
            ("revoked_at", Col::Text),
        ],
    ),
    (
        "oauth_tokens",
        "token_hash",
        &[
            ("token_hash", Col::Text),
            ("grant_id", Col::Text),
            ("kind", Col::Text),
            ("expires_at", Col::Text),
            ("used_at", Col::Text),
            ("created_at", Col::Text),
        ],
    ),
    (
        "oauth_consents",
        "user_id, app_id",
        &[
            ("user_id", Col::Text),
            ("app_id", Col::Text),
            ("scopes", Col::Text),
            ("org_ids", Col::Text),
            ("updated_at", Col::Text),
        ],
    ),
    (
        "signing_keys",
        "kid",
        &[
            ("kid", Col::Text),
            ("alg", Col::Text),
            ("private_key", Col::Text),
            ("public_jwk", Col::Text),
            ("created_at", Col::Text),
            ("retired_at", Col::Text),
        ],
    ),
    (
        "audit_log",
        "id",
        &[
            ("id", Col::Text),
            ("org_id", Col::Text),
            ("at", Col::Text),
            ("action", Col::Text),
            ("outcome", Col::Text),
            ("actor", Col::Text),
            ("detail", Col::Text),
        ],
    ),
    (
        "trusted_publishers",
        "id",
        &[
            ("id", Col::Text),
            ("namespace_id", Col::Text),
            ("issuer", Col::Text),
            ("audience", Col::Text),
            ("claims", Col::Text),
            ("scopes", Col::Text),
            ("created_by", Col::Text),
            ("created_at", Col::Text),
        ],
    ),
    // Webhooks and what they watch go along; their delivery queue and activity do not (they name
    // events by `seq`, which the target numbers anew): let deliveries drain before a copy.
    (
        "webhooks",
        "id",
        &[
            ("id", Col::Text),
            ("owner_id", Col::Text),
            ("url", Col::Text),
            ("watched", Col::Text),
            ("domains", Col::Text),
            ("secret", Col::Text),
            ("signing_keys", Col::Text),
            ("disabled", Col::Int),
            ("disabled_reason", Col::Text),
            ("held_until", Col::Text),
            ("failing_since", Col::Text),
            ("created_by", Col::Text),
            ("created_at", Col::Text),
            ("updated_at", Col::Text),
        ],
    ),
    (
        "webhook_watches",
        "webhook_id, domain, name, kind",
        &[
            ("webhook_id", Col::Text),
            ("kind", Col::Text),
            ("name", Col::Text),
            ("domain", Col::Text),
        ],
    ),
    // Notices keep their order (numbered anew, like events); mail not yet sent goes along.
    (
        "notifications",
        "seq",
        &[
            ("user_id", Col::Text),
            ("kind", Col::Text),
            ("namespace", Col::Text),
            ("subject", Col::Text),
            ("title", Col::Text),
            ("message", Col::Text),
            ("created_at", Col::Text),
        ],
    ),
    (
        "emails",
        "id",
        &[
            ("id", Col::Text),
            ("to_addr", Col::Text),
            ("subject", Col::Text),
            ("body", Col::Text),
            ("state", Col::Text),
            ("attempts", Col::Int),
            ("next_attempt_at", Col::Text),
            ("lease_until", Col::Text),
            ("claim_token", Col::Text),
            ("last_error", Col::Text),
            ("created_at", Col::Text),
            ("updated_at", Col::Text),
        ],
    ),
    // Spent CI id tokens go along: a token exchanged before the copy stays refused after it.
    (
        "ci_token_ids",
        "issuer, jti",
        &[
            ("issuer", Col::Text),
            ("jti", Col::Text),
            ("expires_at", Col::Text),
        ],
    ),
    (
        "endpoint_series",
        "endpoint_id, step, bucket, server_id",
        &[
            ("endpoint_id", Col::Text),
            ("step", Col::Int),
            ("bucket", Col::Int),
            ("server_id", Col::Text),
            ("sample", Col::Text),
        ],
    ),
    (
        "endpoint_decisions",
        "seq",
        &[
            ("endpoint_id", Col::Text),
            ("at", Col::Text),
            ("kind", Col::Text),
            ("reason", Col::Text),
            ("detail", Col::Text),
        ],
    ),
];

/// A read transaction that sees one snapshot of every table.
fn snapshot(backend: Backend) -> &'static str {
    match backend {
        // In WAL mode a deferred read transaction keeps the snapshot of its first read.
        Backend::Sqlite => "BEGIN",
        Backend::Postgres => "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
    }
}

/// What was copied: each table with its row count, equal on both sides.
pub type CopyReport = Vec<(&'static str, i64)>;

/// Copies every row of `from` into `to`, which must be empty (its schema migrated, no rows). The
/// target commits only if every table's count then matches the source's.
pub async fn copy_store(from: &SqlStore, to: &SqlStore) -> StoreResult<CopyReport> {
    let mut source = from
        .pool()
        .begin_with(snapshot(Store::backend(from)))
        .await?;
    let mut target = to
        .pool()
        .begin_with(super::backend::begin_statement(Store::backend(to)))
        .await?;
    for (table, _, _) in TABLES {
        let n = count(&mut target, table).await?;
        if n > 0 {
            return Err(StoreError::Conflict(format!(
                "the target store is not empty ({table} has {n} rows); copy into a new store"
            )));
        }
    }
    let mut report = Vec::new();
    for (table, order, cols) in TABLES {
        copy_table(&mut source, &mut target, table, order, cols).await?;
        let (have, copied) = (
            count(&mut source, table).await?,
            count(&mut target, table).await?,
        );
        if have != copied {
            return Err(StoreError::Backend(format!(
                "{table}: {have} rows in the source, {copied} copied; nothing was committed"
            )));
        }
        report.push((*table, copied));
    }
    target.commit().await?;
    Ok(report)
}

async fn count(conn: &mut sqlx::AnyConnection, table: &str) -> StoreResult<i64> {
    Ok(sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
        .fetch_one(conn)
        .await?)
}

async fn copy_table(
    source: &mut sqlx::AnyConnection,
    target: &mut sqlx::AnyConnection,
    table: &str,
    order: &str,
    cols: &[(&str, Col)],
) -> StoreResult<()> {
    let names: Vec<&str> = cols.iter().map(|(n, _)| *n).collect();
    let params: Vec<String> = (1..=cols.len()).map(|i| format!("${i}")).collect();
    let select = format!("SELECT {} FROM {table} ORDER BY {order}", names.join(", "));
    let insert = format!(
        "INSERT INTO {table} ({}) VALUES ({})",
        names.join(", "),
        params.join(", ")
    );
    let mut rows = sqlx::query(&select).fetch(source);
    while let Some(row) = rows.try_next().await? {
        bind_row(sqlx::query(&insert), &row, cols)?
            .execute(&mut *target)
            .await?;
    }
    Ok(())
}

fn bind_row<'q>(
    mut q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    row: &AnyRow,
    cols: &[(&str, Col)],
) -> StoreResult<sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>> {
    for (name, col) in cols {
        q = match col {
            Col::Text => q.bind(row.try_get::<Option<String>, _>(*name)?),
            Col::Int => q.bind(row.try_get::<i64, _>(*name)?),
            Col::OptInt => q.bind(row.try_get::<Option<i64>, _>(*name)?),
        };
    }
    Ok(q)
}
