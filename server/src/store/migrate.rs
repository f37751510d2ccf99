//! Embedded migrations, one list per backend, applied in order at open and recorded with a checksum.

use sha2::{Digest, Sha256};
use sqlx::AnyConnection;
use sqlx::AnyPool;

use super::backend::{begin_statement, Backend};
use super::{ts, StoreError, StoreResult};

pub(crate) struct Migration {
    pub version: i64,
    pub name: &'static str,
    pub sql: &'static str,
}

const SQLITE: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sql: include_str!("../../migrations/sqlite/0001_initial.sql"),
    },
    Migration {
        version: 2,
        name: "outbox and constraints",
        sql: include_str!("../../migrations/sqlite/0002_outbox_and_constraints.sql"),
    },
    Migration {
        version: 3,
        name: "names without case, disabling, quotas",
        sql: include_str!("../../migrations/sqlite/0003_names_quotas_disabling.sql"),
    },
    Migration {
        version: 4,
        name: "oauth provider",
        sql: include_str!("../../migrations/sqlite/0004_oauth.sql"),
    },
    Migration {
        version: 5,
        name: "trusted publishers",
        sql: include_str!("../../migrations/sqlite/0005_trusted_publishers.sql"),
    },
    Migration {
        version: 6,
        name: "webhooks",
        sql: include_str!("../../migrations/sqlite/0006_webhooks.sql"),
    },
    Migration {
        version: 7,
        name: "notifications",
        sql: include_str!("../../migrations/sqlite/0007_notifications.sql"),
    },
    Migration {
        version: 8,
        name: "device auth time",
        sql: include_str!("../../migrations/sqlite/0008_device_auth_time.sql"),
    },
    Migration {
        version: 9,
        name: "custom domains",
        sql: include_str!("../../migrations/sqlite/0009_domains.sql"),
    },
    Migration {
        version: 10,
        name: "several servers",
        sql: include_str!("../../migrations/sqlite/0010_cluster.sql"),
    },
    Migration {
        version: 11,
        name: "endpoint analytics",
        sql: include_str!("../../migrations/sqlite/0011_analytics.sql"),
    },
];

const POSTGRES: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sql: include_str!("../../migrations/postgres/0001_initial.sql"),
    },
    Migration {
        version: 2,
        name: "oauth provider",
        sql: include_str!("../../migrations/postgres/0002_oauth.sql"),
    },
    Migration {
        version: 3,
        name: "trusted publishers",
        sql: include_str!("../../migrations/postgres/0003_trusted_publishers.sql"),
    },
    Migration {
        version: 4,
        name: "webhooks",
        sql: include_str!("../../migrations/postgres/0004_webhooks.sql"),
    },
    Migration {
        version: 5,
        name: "notifications",
        sql: include_str!("../../migrations/postgres/0005_notifications.sql"),
    },
    Migration {
        version: 6,
        name: "device auth time",
        sql: include_str!("../../migrations/postgres/0006_device_auth_time.sql"),
    },
    Migration {
        version: 7,
        name: "custom domains",
        sql: include_str!("../../migrations/postgres/0007_domains.sql"),
    },
    Migration {
        version: 8,
        name: "several servers",
        sql: include_str!("../../migrations/postgres/0008_cluster.sql"),
    },
    Migration {
        version: 9,
        name: "endpoint analytics",
        sql: include_str!("../../migrations/postgres/0009_analytics.sql"),
    },
];

pub(crate) fn migrations(backend: Backend) -> &'static [Migration] {
    match backend {
        Backend::Sqlite => SQLITE,
        Backend::Postgres => POSTGRES,
    }
}

fn checksum(sql: &str) -> String {
    Sha256::digest(sql.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Any number, the same in every build: the PostgreSQL advisory lock that serializes migrations.
const PG_MIGRATION_LOCK: i64 = 0x5357_5943_4844;

/// Applies what has not run yet, in one transaction: two processes opening one new store (a server
/// and `switchyard admin`) never both migrate, and a failed migration leaves the schema as it was.
pub(crate) async fn run(pool: &AnyPool, backend: Backend) -> StoreResult<()> {
    let mut tx = pool.begin_with(begin_statement(backend)).await?;
    if backend == Backend::Postgres {
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(PG_MIGRATION_LOCK)
            .execute(&mut *tx)
            .await?;
    }
    apply(&mut tx, backend).await?;
    tx.commit().await?;
    Ok(())
}

async fn apply(conn: &mut AnyConnection, backend: Backend) -> StoreResult<()> {
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
            version     BIGINT PRIMARY KEY,
            name        TEXT NOT NULL,
            checksum    TEXT NOT NULL,
            applied_at  TEXT NOT NULL
        )",
    )
    .execute(&mut *conn)
    .await?;
    let known = migrations(backend);
    if backend == Backend::Sqlite {
        adopt_user_version(conn, known).await?;
    }
    let applied: Vec<(i64, String)> =
        sqlx::query_as("SELECT version, checksum FROM schema_migrations ORDER BY version")
            .fetch_all(&mut *conn)
            .await?;
    for (version, sum) in &applied {
        match known.iter().find(|m| m.version == *version) {
            None => {
                return Err(StoreError::Backend(format!(
                    "the store has migration {version}, newer than this build knows ({}); upgrade switchyard",
                    known.len()
                )))
            }
            Some(m) if checksum(m.sql) != *sum => {
                return Err(StoreError::Backend(format!(
                    "migration {version} ({}) differs from the one applied to this store",
                    m.name
                )))
            }
            Some(_) => {}
        }
    }
    for m in known
        .iter()
        .filter(|m| !applied.iter().any(|(v, _)| *v == m.version))
    {
        sqlx::raw_sql(m.sql)
            .execute(&mut *conn)
            .await
            .map_err(|e| {
                StoreError::Backend(format!("migration {} ({}): {e}", m.version, m.name))
            })?;
        record(conn, m).await?;
        tracing::info!(
            backend = backend.as_str(),
            version = m.version,
            name = m.name,
            "store migrated"
        );
    }
    Ok(())
}

async fn record(conn: &mut AnyConnection, m: &Migration) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO schema_migrations (version, name, checksum, applied_at) VALUES ($1, $2, $3, $4)",
    )
    .bind(m.version)
    .bind(m.name)
    .bind(checksum(m.sql))
    .bind(ts(chrono::Utc::now()))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Stores made before the migrations table counted their migrations in `PRAGMA user_version`:
/// those are recorded as applied, once.
async fn adopt_user_version(conn: &mut AnyConnection, known: &[Migration]) -> StoreResult<()> {
    let recorded: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM schema_migrations")
        .fetch_one(&mut *conn)
        .await?;
    if recorded > 0 {
        return Ok(());
    }
    let legacy: i64 = sqlx::query_scalar("PRAGMA user_version")
        .fetch_one(&mut *conn)
        .await?;
    for m in known.iter().filter(|m| m.version <= legacy) {
        record(conn, m).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_dense_and_ordered() {
        for backend in [Backend::Sqlite, Backend::Postgres] {
            for (i, m) in migrations(backend).iter().enumerate() {
                assert_eq!(m.version, i as i64 + 1, "{} {}", backend.as_str(), m.name);
            }
        }
    }
}
