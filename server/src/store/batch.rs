//! A transaction of several writes sent as one: on SQLite, `BEGIN IMMEDIATE; …; COMMIT` goes to the
//! database in one round trip, so the one writer's turn lasts one hop instead of one per statement
//! (the OAuth token endpoint's bottleneck); on PostgreSQL the statements run in an ordinary
//! transaction. Each statement is written with its own `$1…$n`; they are renumbered when joined.

use sqlx::any::AnyArguments;
use sqlx::query::Query;
use sqlx::Any;

use super::sql::{Backend, SqlStore};
use super::{Store, StoreResult};

/// A value bound into a statement.
#[derive(Debug, Clone)]
pub(crate) enum Val {
    Text(Option<String>),
    Int(i64),
}

impl From<&str> for Val {
    fn from(s: &str) -> Val {
        Val::Text(Some(s.to_string()))
    }
}

impl From<String> for Val {
    fn from(s: String) -> Val {
        Val::Text(Some(s))
    }
}

impl From<Option<String>> for Val {
    fn from(s: Option<String>) -> Val {
        Val::Text(s)
    }
}

impl From<i64> for Val {
    fn from(n: i64) -> Val {
        Val::Int(n)
    }
}

/// One statement and its values, in order of `$1…$n`.
pub(crate) type Stmt = (&'static str, Vec<Val>);

pub(crate) fn bind_all<'q>(
    mut q: Query<'q, Any, AnyArguments<'q>>,
    vals: Vec<Val>,
) -> Query<'q, Any, AnyArguments<'q>> {
    for v in vals {
        q = match v {
            Val::Text(t) => q.bind(t),
            Val::Int(n) => q.bind(n),
        };
    }
    q
}

/// `sql` with every `$n` made `$(n + offset)`.
fn renumber(sql: &str, offset: usize) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c != '$' {
            continue;
        }
        let mut digits = String::new();
        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            digits.push(*d);
            chars.next();
        }
        match digits.parse::<usize>() {
            Ok(n) => out.push_str(&(n + offset).to_string()),
            Err(_) => out.push_str(&digits),
        }
    }
    out
}

impl SqlStore {
    /// Runs the statements in one transaction: all of them or none.
    pub(crate) async fn write_batch(&self, stmts: Vec<Stmt>) -> StoreResult<()> {
        match self.backend() {
            Backend::Sqlite => self.sqlite_batch(stmts).await,
            Backend::Postgres => {
                let mut tx = self.pool().begin().await?;
                for (sql, vals) in stmts {
                    bind_all(sqlx::query(sql), vals).execute(&mut *tx).await?;
                }
                Ok(tx.commit().await?)
            }
        }
    }

    async fn sqlite_batch(&self, stmts: Vec<Stmt>) -> StoreResult<()> {
        let mut sql = String::from("BEGIN IMMEDIATE; ");
        let mut vals = Vec::new();
        for (s, v) in stmts {
            sql.push_str(&renumber(s, vals.len()));
            sql.push_str("; ");
            vals.extend(v);
        }
        sql.push_str("COMMIT");
        let _turn = self.writer_turn().await;
        let mut conn = self.pool().acquire().await?;
        let done = bind_all(sqlx::query(&sql), vals).execute(&mut *conn).await;
        if let Err(e) = done {
            // A statement failed inside the transaction: end it before the connection goes back.
            let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
            return Err(e.into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failing_statement_leaves_nothing_and_the_connection_usable() {
        use crate::model::account::AccountKind;
        use crate::model::oauth::{Grant, GrantKind, TokenKind};
        use crate::store::{IssueRecord, NewAccount, NewTokenRow, SqlStore, StoreUrl, Synchronous};
        let dir = tempfile::tempdir().unwrap();
        let url = StoreUrl::parse(&dir.path().join("b.db").display().to_string()).unwrap();
        let store = SqlStore::open(&url, Synchronous::Normal).await.unwrap();
        let now = chrono::Utc::now();
        let mut unit = store.begin().await.unwrap();
        let user = unit
            .create_account(
                NewAccount {
                    kind: AccountKind::User,
                    name: "u1".into(),
                    fullname: "U".into(),
                    email: None,
                    is_admin: false,
                },
                now,
            )
            .await
            .unwrap();
        unit.commit().await.unwrap();
        let grant = Grant {
            id: "g1".into(),
            app_id: Some("app".into()),
            user_id: user.id,
            kind: GrantKind::Code,
            scopes: vec![],
            org_ids: vec![],
            personal: true,
            nonce: None,
            auth_time: now,
            created_at: now,
            revoked_at: None,
        };
        let row = |hash: &str| NewTokenRow {
            hash: hash.into(),
            grant_id: "g1".into(),
            kind: TokenKind::Access,
            expires_at: now,
        };
        // The second token has the first's hash: the whole transaction fails, the grant included.
        let twice = [row("h1"), row("h1")];
        let rec = IssueRecord {
            grant: Some(&grant),
            tokens: &twice,
            audit: None,
            now,
        };
        assert!(store.record_issue(&rec).await.is_err());
        assert!(store
            .read()
            .await
            .unwrap()
            .grant("g1")
            .await
            .unwrap()
            .is_none());
        // And the store goes on: the same grant with distinct tokens commits.
        let ok = [row("h1"), row("h2")];
        let rec = IssueRecord {
            grant: Some(&grant),
            tokens: &ok,
            audit: None,
            now,
        };
        store.record_issue(&rec).await.unwrap();
        let mut read = store.read().await.unwrap();
        assert!(read.grant("g1").await.unwrap().is_some());
        assert!(read.token("h2").await.unwrap().is_some());
    }

    #[test]
    fn renumbering() {
        assert_eq!(renumber("VALUES ($1, $2, $10)", 3), "VALUES ($4, $5, $13)");
        assert_eq!(renumber("a $ b", 2), "a $ b");
    }
}
