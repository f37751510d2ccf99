//! A transaction of several writes sent as one: on SQLite, `BEGIN IMMEDIATE; …; COMMIT` goes to the
//! database in one round trip, so the one writer's turn lasts one hop instead of one per statement
//! (the OAuth token endpoint's bottleneck); on PostgreSQL the statements run in an ordinary
//! transaction. Each statement is written with its own `$1…$n`; they are renumbered when joined.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use sqlx::any::AnyArguments;
use sqlx::query::Query;
use sqlx::{Any, AnyPool};
use tokio::sync::{mpsc, oneshot};

use super::backend::Backend;
use super::{StoreError, StoreResult};

/// A value bound into a statement.
#[derive(Debug, Clone)]
pub(crate) enum Val {
    Text(Option<String>),
    Int(i64),
    OptInt(Option<i64>),
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
            Val::OptInt(n) => q.bind(n),
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

/// Runs the statements in one transaction on `pool`: all of them or none. On SQLite, through the store's
/// committer (`group`, started on first use, taking the store's `writer` lock for its turns).
pub(crate) async fn write(
    pool: &AnyPool,
    backend: Backend,
    group: &OnceLock<Group>,
    writer: &Arc<tokio::sync::Mutex<()>>,
    stmts: Vec<Stmt>,
) -> StoreResult<()> {
    match backend {
        Backend::Sqlite => sqlite_batch(pool, group, writer, stmts).await,
        Backend::Postgres if stmts.iter().all(|(s, _)| is_insert(s)) => {
            // Inserts chained as one statement: one round trip, atomic like any statement.
            let (sql, vals) = chained(stmts);
            bind_all(sqlx::query(&sql), vals).execute(pool).await?;
            Ok(())
        }
        Backend::Postgres => {
            let mut tx = pool.begin().await?;
            for (sql, vals) in stmts {
                bind_all(sqlx::query(sql), vals).execute(&mut *tx).await?;
            }
            Ok(tx.commit().await?)
        }
    }
}

/// On SQLite, batches from concurrent requests are committed together: one transaction, one round trip
/// and one WAL append for all of them (group commit). Each caller still learns its own outcome, and a batch
/// is acknowledged only once its transaction has committed.
async fn sqlite_batch(
    pool: &AnyPool,
    group: &OnceLock<Group>,
    writer: &Arc<tokio::sync::Mutex<()>>,
    stmts: Vec<Stmt>,
) -> StoreResult<()> {
    let group = group.get_or_init(|| Group::start(pool, writer));
    let (done, outcome) = oneshot::channel();
    match group.jobs.send(Job { stmts, done }) {
        Ok(()) => outcome
            .await
            .unwrap_or_else(|_| Err(StoreError::Backend("the store is closing".into()))),
        // The committer is gone (its runtime ended): commit this batch alone.
        Err(mpsc::error::SendError(job)) => {
            let _turn = writer.lock().await;
            commit(pool, job.stmts.iter(), true).await
        }
    }
}

fn is_insert(sql: &str) -> bool {
    sql.trim_start().starts_with("INSERT ")
}

/// PostgreSQL: `WITH s0 AS (INSERT …), s1 AS (INSERT …) INSERT …`. The inserts cannot see each
/// other's rows, but foreign keys are checked when the whole statement ends, so a token may name
/// the grant inserted beside it.
fn chained(stmts: Vec<Stmt>) -> (String, Vec<Val>) {
    let mut sql = String::new();
    let mut vals = Vec::new();
    let last = stmts.len() - 1;
    for (i, (s, v)) in stmts.into_iter().enumerate() {
        let s = renumber(s, vals.len());
        if i == last {
            if i > 0 {
                sql.push(' ');
            }
            sql.push_str(&s);
        } else {
            sql.push_str(if i == 0 { "WITH " } else { ", " });
            sql.push_str(&format!("s{i} AS ({s})"));
        }
        vals.extend(v);
    }
    (sql, vals)
}

/// A caller's batch waiting for the committer.
pub(crate) struct Job {
    stmts: Vec<Stmt>,
    done: oneshot::Sender<StoreResult<()>>,
}

/// The committer's queue.
pub(crate) struct Group {
    jobs: mpsc::UnboundedSender<Job>,
    /// Transactions the committer has committed (fewer than the batches when they were grouped);
    /// the tests read it to see that batches were grouped.
    #[cfg_attr(not(test), allow(dead_code))]
    commits: Arc<AtomicUsize>,
}

/// Most batches one transaction takes.
const GROUP_MAX: usize = 32;

impl Group {
    fn start(pool: &AnyPool, writer: &Arc<tokio::sync::Mutex<()>>) -> Group {
        let (jobs, queue) = mpsc::unbounded_channel();
        let commits = Arc::new(AtomicUsize::new(0));
        // The task holds the pool and the writer lock, not the queue's sender: it ends when the
        // last handle of the store is dropped.
        tokio::spawn(committer(
            pool.clone(),
            writer.clone(),
            queue,
            commits.clone(),
        ));
        Group { jobs, commits }
    }

    #[cfg(test)]
    pub(crate) fn commits(&self) -> usize {
        self.commits.load(Ordering::Relaxed)
    }
}

async fn committer(
    pool: AnyPool,
    writer: Arc<tokio::sync::Mutex<()>>,
    mut queue: mpsc::UnboundedReceiver<Job>,
    commits: Arc<AtomicUsize>,
) {
    let mut jobs = Vec::with_capacity(GROUP_MAX);
    while queue.recv_many(&mut jobs, GROUP_MAX).await > 0 {
        let turn = writer.lock().await;
        let all = jobs.iter().flat_map(|j| j.stmts.iter());
        let outcomes: Vec<StoreResult<()>> = match commit(&pool, all, jobs.len() == 1).await {
            Ok(()) => {
                commits.fetch_add(1, Ordering::Relaxed);
                jobs.iter().map(|_| Ok(())).collect()
            }
            Err(e) if jobs.len() == 1 => vec![Err(e)],
            // One of them failed and took the others with it: each alone, for its own outcome.
            Err(_) => {
                let mut each = Vec::with_capacity(jobs.len());
                for job in &jobs {
                    let alone = commit(&pool, job.stmts.iter(), true).await;
                    commits.fetch_add(usize::from(alone.is_ok()), Ordering::Relaxed);
                    each.push(alone);
                }
                each
            }
        };
        drop(turn);
        for (job, outcome) in jobs.drain(..).zip(outcomes) {
            let _ = job.done.send(outcome);
        }
    }
}

/// Runs the statements as one transaction in one round trip. Only one caller's batch is kept among
/// the connection's prepared statements: a text combining several is seen once.
async fn commit(
    pool: &AnyPool,
    stmts: impl Iterator<Item = &Stmt>,
    persistent: bool,
) -> StoreResult<()> {
    let mut sql = String::from("BEGIN IMMEDIATE; ");
    let mut vals = Vec::new();
    for (s, v) in stmts {
        sql.push_str(&renumber(s, vals.len()));
        sql.push_str("; ");
        vals.extend(v.iter().cloned());
    }
    sql.push_str("COMMIT");
    let mut conn = pool.acquire().await?;
    let query = bind_all(sqlx::query(&sql), vals).persistent(persistent);
    let done = query.execute(&mut *conn).await;
    if let Err(e) = done {
        // A statement failed inside the transaction: end it before the connection goes back.
        let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
        return Err(e.into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{SqlStore, Store};

    fn code_grant(
        id: &str,
        user_id: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> crate::model::oauth::Grant {
        crate::model::oauth::Grant {
            id: id.into(),
            app_id: Some("app".into()),
            user_id: user_id.into(),
            kind: crate::model::oauth::GrantKind::Code,
            scopes: vec![],
            org_ids: vec![],
            personal: true,
            nonce: None,
            auth_time: now,
            created_at: now,
            revoked_at: None,
        }
    }

    /// A SQLite store in a temp dir with one user.
    async fn store_with_user() -> (tempfile::TempDir, SqlStore, crate::model::account::Account) {
        use crate::model::account::AccountKind;
        use crate::store::{NewAccount, StoreUrl, Synchronous};
        let dir = tempfile::tempdir().unwrap();
        let url = StoreUrl::parse(&dir.path().join("b.db").display().to_string()).unwrap();
        let store = SqlStore::open(&url, Synchronous::Normal).await.unwrap();
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
                chrono::Utc::now(),
            )
            .await
            .unwrap();
        unit.commit().await.unwrap();
        (dir, store, user)
    }

    #[tokio::test]
    async fn a_failing_statement_leaves_nothing_and_the_connection_usable() {
        use crate::model::oauth::TokenKind;
        use crate::store::{IssueRecord, NewTokenRow};
        let (_dir, store, user) = store_with_user().await;
        let now = chrono::Utc::now();
        let grant = code_grant("g1", &user.id, now);
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_batches_commit_together_and_fail_alone() {
        use crate::model::oauth::TokenKind;
        use crate::store::{IssueRecord, NewTokenRow};
        let (_dir, store, user) = store_with_user().await;
        let now = chrono::Utc::now();
        let grant = |i: usize| code_grant(&format!("g{i}"), &user.id, now);
        // 40 good batches queued while the writer is busy: fewer transactions than batches.
        let busy = store.writer().clone().lock_owned().await;
        let mut tasks = Vec::new();
        for i in 100..140 {
            let (store, grant) = (store.clone(), grant(i));
            tasks.push(tokio::spawn(async move {
                let rec = IssueRecord {
                    grant: Some(&grant),
                    tokens: &[],
                    audit: None,
                    now,
                };
                store.record_issue(&rec).await
            }));
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        drop(busy);
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        let commits = store.group().get().map(|g| g.commits()).unwrap_or(0);
        assert!((1..40).contains(&commits), "{commits} transactions");
        // 40 batches at once; number 7 repeats a token hash and must fail without the others.
        let mut tasks = Vec::new();
        for i in 0..40 {
            let (store, grant) = (store.clone(), grant(i));
            tasks.push(tokio::spawn(async move {
                let hash = |n: usize| NewTokenRow {
                    hash: format!("h{n}"),
                    grant_id: grant.id.clone(),
                    kind: TokenKind::Access,
                    expires_at: now,
                };
                let tokens = if i == 7 {
                    vec![hash(1000), hash(1000)]
                } else {
                    vec![hash(i)]
                };
                let rec = IssueRecord {
                    grant: Some(&grant),
                    tokens: &tokens,
                    audit: None,
                    now,
                };
                store.record_issue(&rec).await
            }));
        }
        for (i, task) in tasks.into_iter().enumerate() {
            let outcome = task.await.unwrap();
            assert_eq!(outcome.is_err(), i == 7, "batch {i}: {outcome:?}");
        }
        let mut read = store.read().await.unwrap();
        for i in 0..40 {
            let stored = read.grant(&format!("g{i}")).await.unwrap();
            assert_eq!(stored.is_some(), i != 7, "grant {i}");
        }
        assert!(read.token("h1000").await.unwrap().is_none());
        assert!(read.grant("g139").await.unwrap().is_some());
    }

    #[test]
    fn inserts_chain_into_one_statement() {
        let stmts: Vec<Stmt> = vec![
            ("INSERT INTO a (x) VALUES ($1)", vec![Val::Int(1)]),
            (
                "INSERT INTO b (x, y) VALUES ($1, $2)",
                vec![Val::Int(2), Val::Int(3)],
            ),
            ("INSERT INTO c (x) VALUES ($1)", vec![Val::Int(4)]),
        ];
        let (sql, vals) = chained(stmts);
        assert_eq!(
            sql,
            "WITH s0 AS (INSERT INTO a (x) VALUES ($1)), s1 AS (INSERT INTO b (x, y) VALUES ($2, $3)) \
             INSERT INTO c (x) VALUES ($4)"
        );
        assert_eq!(vals.len(), 4);
        let (one, _) = chained(vec![("INSERT INTO a (x) VALUES ($1)", vec![Val::Int(1)])]);
        assert_eq!(one, "INSERT INTO a (x) VALUES ($1)");
        assert!(!is_insert("UPDATE a SET x = 1"));
    }

    #[test]
    fn renumbering() {
        assert_eq!(renumber("VALUES ($1, $2, $10)", 3), "VALUES ($4, $5, $13)");
        assert_eq!(renumber("a $ b", 2), "a $ b");
    }
}
