//! The SQL store on sqlx's `Any` driver: the pool, the backend it speaks to, sessions and units of work.

use std::path::{Path, PathBuf};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{FutureExt, StreamExt, TryFutureExt, TryStreamExt};
use sqlx::any::{AnyPoolOptions, AnyQueryResult, AnyRow, AnyStatement, AnyTypeInfo};
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, AnyPool, Connection, Describe, Either, Execute, Executor};

use super::backend::{begin_statement, Backend};
use super::topic::{Topic, CHANNEL};
use super::{Session, Store, StoreError, StoreResult};

/// How hard SQLite syncs on commit. `Normal` in WAL mode keeps every committed write across a process
/// crash or kill; `Full` also across a power loss, at the cost of an fsync per commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Synchronous {
    Normal,
    Full,
}

/// Where a store lives: a SQLite file or a PostgreSQL database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    Sqlite(PathBuf),
    /// A `postgres://` (or `postgresql://`) URL, kept as given; it may hold a password, so it is
    /// never logged whole (see [`StoreUrl::redacted`]).
    Postgres(String),
}

impl StoreUrl {
    /// `postgres://…`, `postgresql://…`, `sqlite://PATH` or a plain path (a SQLite file).
    pub fn parse(s: &str) -> Result<StoreUrl, String> {
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            return Ok(StoreUrl::Postgres(s.to_string()));
        }
        // A `sqlite://` URL may carry options after `?`; the store sets its own.
        let path = match s.strip_prefix("sqlite://") {
            Some(rest) => rest.split('?').next().unwrap_or(rest),
            None => s,
        };
        if path.is_empty() || s.contains("://") && !s.starts_with("sqlite://") {
            return Err(format!(
                "{:?}: expected postgres://…, sqlite://PATH or a file path",
                redact(s)
            ));
        }
        // What `url()` escapes in a `sqlite://` URL comes back as it was.
        let path = match s.starts_with("sqlite://") {
            true => path
                .replace("%3F", "?")
                .replace("%23", "#")
                .replace("%25", "%"),
            false => path.to_string(),
        };
        Ok(StoreUrl::Sqlite(PathBuf::from(path)))
    }

    pub fn backend(&self) -> Backend {
        match self {
            StoreUrl::Sqlite(_) => Backend::Sqlite,
            StoreUrl::Postgres(_) => Backend::Postgres,
        }
    }

    /// The URL with any password replaced, fit for logs and error messages.
    pub fn redacted(&self) -> String {
        match self {
            StoreUrl::Sqlite(p) => format!("sqlite://{}", p.display()),
            StoreUrl::Postgres(u) => redact(u),
        }
    }

    /// The URL to connect with (it may hold a password: never log it).
    pub fn url(&self) -> String {
        match self {
            // sqlx percent-decodes the path and cuts it at `?`: escape what would be taken apart.
            StoreUrl::Sqlite(p) => {
                let path = p
                    .display()
                    .to_string()
                    .replace('%', "%25")
                    .replace('?', "%3F")
                    .replace('#', "%23");
                format!("sqlite://{path}?mode=rwc")
            }
            StoreUrl::Postgres(u) => u.clone(),
        }
    }
}

/// `scheme://user:secret@host…` → `scheme://user:***@host…`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (auth, host) = match rest.rsplit_once('@') {
        Some(parts) => parts,
        None => return url.to_string(),
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

#[derive(Clone)]
pub struct SqlStore {
    pool: AnyPool,
    backend: Backend,
    /// SQLite has one writer at a time. Units of work queue here, in the process, for their turn:
    /// SQLite's own wait (busy_timeout) sleeps in growing steps up to 100 ms, which under load turns
    /// a wait of microseconds into tens of milliseconds. Other processes still meet busy_timeout.
    writer: Arc<tokio::sync::Mutex<()>>,
    /// On SQLite, the task that commits concurrent batches of writes together (see `batch`).
    group: Arc<std::sync::OnceLock<super::batch::Group>>,
    /// Signalled when a unit of work that queued webhook deliveries commits.
    outbox: Arc<tokio::sync::Notify>,
    /// Signalled when a unit of work that queued mail commits.
    mail: Arc<tokio::sync::Notify>,
    /// Bumped when a unit of work that recorded notices commits.
    notices: Arc<tokio::sync::watch::Sender<u64>>,
    /// Where it connects (for a listener of its own, see `ClusterStore::listen`).
    url: StoreUrl,
}

impl SqlStore {
    /// Opens the store (creating a SQLite file if needed) and applies pending migrations.
    pub async fn open(url: &StoreUrl, sync: Synchronous) -> StoreResult<SqlStore> {
        sqlx::any::install_default_drivers();
        let backend = url.backend();
        let options = AnyPoolOptions::new().min_connections(1);
        let options = match backend {
            // A connection to a local file cannot have gone away: no ping (one more hop to the
            // connection's thread) before each use.
            Backend::Sqlite => options
                .test_before_acquire(false)
                .max_connections(8)
                .after_connect(move |conn, _| {
                    Box::pin(async move {
                        conn.execute(sqlite_pragmas(sync).as_str()).await?;
                        Ok(())
                    })
                }),
            // A restarted server leaves dead connections in the pool: one that sat idle for a
            // second is pinged before use. Under load none has, and none pays a round trip more.
            Backend::Postgres => options
                .max_connections(16)
                .test_before_acquire(false)
                .before_acquire(|conn, meta| {
                    Box::pin(async move {
                        if meta.idle_for > std::time::Duration::from_secs(1) {
                            conn.ping().await?;
                        }
                        Ok(true)
                    })
                }),
        };
        let pool = options
            .connect(&url.url())
            .await
            .map_err(|e| StoreError::Backend(format!("{}: {e}", url.redacted())))?;
        let store = SqlStore {
            pool,
            backend,
            writer: Arc::default(),
            group: Arc::default(),
            outbox: Arc::default(),
            mail: Arc::default(),
            notices: Arc::new(tokio::sync::watch::Sender::new(0)),
            url: url.clone(),
        };
        super::migrate::run(&store.pool, backend).await?;
        Ok(store)
    }

    pub(crate) fn pool(&self) -> &AnyPool {
        &self.pool
    }

    #[cfg(test)]
    pub(crate) fn writer(&self) -> &Arc<tokio::sync::Mutex<()>> {
        &self.writer
    }

    #[cfg(test)]
    pub(crate) fn group(&self) -> &std::sync::OnceLock<super::batch::Group> {
        &self.group
    }

    pub(crate) fn outbox_signal(&self) -> &tokio::sync::Notify {
        &self.outbox
    }

    pub(crate) fn mail_signal_ref(&self) -> &tokio::sync::Notify {
        &self.mail
    }

    pub(crate) fn notices_ref(&self) -> &tokio::sync::watch::Sender<u64> {
        &self.notices
    }

    pub(crate) fn url(&self) -> String {
        self.url.url()
    }

    /// Rings the signal of `topic`, as a commit here would (another server's commit, heard).
    pub(crate) fn ring(&self, topic: Topic) {
        match topic {
            Topic::Outbox => self.outbox.notify_one(),
            Topic::Mail => self.mail.notify_one(),
            Topic::Notices => self.notices.send_modify(|n| *n += 1),
            _ => {}
        }
    }

    /// What a new session signals when it commits.
    fn signals(&self) -> Signals {
        Signals {
            outbox: self.outbox.clone(),
            mail: self.mail.clone(),
            notices: self.notices.clone(),
        }
    }

    /// A unit of work, as its own type (see [`Store::begin`]).
    pub(crate) async fn begin_sql(&self) -> StoreResult<SqlSession> {
        let turn = self.writer_turn().await;
        let tx = self.pool.begin_with(begin_statement(self.backend)).await?;
        Ok(self.session(Conn::Unit(tx), turn))
    }

    /// A session on `conn`, holding the writer's `turn` when it has one.
    fn session(&self, conn: Conn, turn: Option<tokio::sync::OwnedMutexGuard<()>>) -> SqlSession {
        SqlSession {
            conn,
            backend: self.backend,
            _turn: turn,
            signals: self.signals(),
            queued: false,
            mailed: false,
            noticed: false,
            rerouted: false,
            deferred_notices: Vec::new(),
            failed: AtomicBool::new(false),
        }
    }

    /// Runs the statements in one transaction: all of them or none (see [`super::batch`]).
    pub(crate) async fn write_batch(&self, stmts: Vec<super::batch::Stmt>) -> StoreResult<()> {
        super::batch::write(&self.pool, self.backend, &self.group, &self.writer, stmts).await
    }

    /// The one writer's turn, on SQLite (`None` on PostgreSQL, which has many writers).
    pub(crate) async fn writer_turn(&self) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        match self.backend {
            Backend::Sqlite => Some(self.writer.clone().lock_owned().await),
            Backend::Postgres => None,
        }
    }
}

fn sqlite_pragmas(sync: Synchronous) -> String {
    let synchronous = match sync {
        Synchronous::Normal => "NORMAL",
        Synchronous::Full => "FULL",
    };
    format!(
        "PRAGMA journal_mode = WAL; PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 10000; \
         PRAGMA synchronous = {synchronous};"
    )
}

enum Conn {
    Plain(PoolConnection<Any>),
    Unit(sqlx::Transaction<'static, Any>),
}

/// A session on one pooled connection: a unit of work or plain reads.
pub struct SqlSession {
    conn: Conn,
    pub(crate) backend: Backend,
    /// A SQLite unit's turn as the writer, given back when the unit ends. Declared after `conn`, so
    /// the transaction ends (rolled back if not committed) before the next writer goes.
    _turn: Option<tokio::sync::OwnedMutexGuard<()>>,
    /// Woken once the unit commits: the delivery workers when it queued deliveries (`queued`), the
    /// mailer when it queued mail (`mailed`), notice followers when it recorded notices (`noticed`).
    signals: Signals,
    pub(crate) queued: bool,
    pub(crate) mailed: bool,
    pub(crate) noticed: bool,
    /// An endpoint (or a domain) changed: the other servers rebuild their routes at commit.
    pub(crate) rerouted: bool,
    /// Notices to write just before the commit (PostgreSQL; see `flush_notices`).
    pub(crate) deferred_notices: Vec<(super::NewNotice, String)>,
    /// A statement failed: the unit of work commits nothing. PostgreSQL aborts such a transaction by itself;
    /// SQLite keeps the statements before the failed one, and would commit half a change.
    failed: AtomicBool,
}

#[derive(Clone)]
struct Signals {
    outbox: Arc<tokio::sync::Notify>,
    mail: Arc<tokio::sync::Notify>,
    notices: Arc<tokio::sync::watch::Sender<u64>>,
}

impl SqlSession {
    /// Whether this session is a unit of work (not plain reads).
    pub(crate) fn in_unit(&self) -> bool {
        matches!(self.conn, Conn::Unit(_))
    }

    pub(crate) fn db(&mut self) -> Db<'_> {
        let conn: &mut AnyConnection = match &mut self.conn {
            Conn::Plain(c) => c,
            Conn::Unit(t) => t,
        };
        Db {
            conn,
            failed: &self.failed,
        }
    }
}

/// A session's connection, for one statement: a statement that fails is noted in the session.
#[derive(Debug)]
pub(crate) struct Db<'c> {
    conn: &'c mut AnyConnection,
    failed: &'c AtomicBool,
}

impl<'c> Executor<'c> for Db<'c> {
    type Database = Any;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<AnyQueryResult, AnyRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Any>,
    {
        let failed = self.failed;
        self.conn
            .fetch_many(query)
            .inspect_err(move |_| failed.store(true, Ordering::Relaxed))
            .boxed()
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<AnyRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Any>,
    {
        let failed = self.failed;
        self.conn
            .fetch_optional(query)
            .inspect_err(move |_| failed.store(true, Ordering::Relaxed))
            .boxed()
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [AnyTypeInfo],
    ) -> BoxFuture<'e, Result<AnyStatement<'q>, sqlx::Error>>
    where
        'c: 'e,
    {
        self.conn.prepare_with(sql, parameters)
    }

    fn describe<'e, 'q: 'e>(self, sql: &'q str) -> BoxFuture<'e, Result<Describe<Any>, sqlx::Error>>
    where
        'c: 'e,
    {
        self.conn.describe(sql)
    }
}

#[async_trait]
impl Session for SqlSession {
    async fn commit(mut self: Box<Self>) -> StoreResult<()> {
        if !self.failed.load(Ordering::Relaxed) {
            self.flush_notices().await?;
        }
        let SqlSession {
            conn,
            signals,
            queued,
            mailed,
            noticed,
            rerouted,
            _turn,
            failed,
            backend,
            ..
        } = *self;
        if let Conn::Unit(mut t) = conn {
            if backend == Backend::Postgres && !failed.load(Ordering::Relaxed) {
                // The other servers hear of it at commit (and not at all if it rolls back).
                let topics = [
                    (queued, Topic::Outbox),
                    (mailed, Topic::Mail),
                    (noticed, Topic::Notices),
                    (rerouted, Topic::Routes),
                ];
                for (_, topic) in topics.iter().filter(|(said, _)| *said) {
                    sqlx::query("SELECT pg_notify($1, $2)")
                        .bind(CHANNEL)
                        .bind(topic.as_str())
                        .execute(&mut *t)
                        .await?;
                }
            }
            if failed.into_inner() {
                t.rollback().await?;
                return Err(StoreError::Backend(
                    "a statement of this unit of work failed: it was rolled back, nothing committed"
                        .into(),
                ));
            }
            t.commit().await?;
        }
        drop(_turn);
        if queued {
            signals.outbox.notify_one();
        }
        if mailed {
            signals.mail.notify_one();
        }
        if noticed {
            signals.notices.send_modify(|n| *n += 1);
        }
        Ok(())
    }
}

#[async_trait]
impl Store for SqlStore {
    async fn begin(&self) -> StoreResult<Box<dyn Session>> {
        Ok(Box::new(self.begin_sql().await?))
    }

    async fn read(&self) -> StoreResult<Box<dyn Session>> {
        let conn = Conn::Plain(self.pool.acquire().await?);
        Ok(Box::new(self.session(conn, None)))
    }

    fn backend(&self) -> Backend {
        self.backend
    }

    async fn backup(&self, to: &Path) -> StoreResult<()> {
        if self.backend != Backend::Sqlite {
            return Err(StoreError::Backend(
                "online backup is for the SQLite store; back up PostgreSQL with pg_dump".into(),
            ));
        }
        if to.exists() {
            return Err(StoreError::Conflict(format!(
                "{} already exists; a backup goes to a new file",
                to.display()
            )));
        }
        // VACUUM INTO reads one snapshot of the database (a read transaction) while writers go on,
        // and writes a compact copy that is a complete database on its own.
        sqlx::query("VACUUM INTO $1")
            .bind(to.display().to_string())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn close(&self) {
        self.pool.close().await;
    }

    async fn record_issue(&self, rec: &super::IssueRecord<'_>) -> StoreResult<()> {
        self.record_issue_rows(rec).await
    }

    async fn spend_code(
        &self,
        hash: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> StoreResult<super::Spent> {
        self.spend_code_row(hash, now).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            StoreUrl::parse("/var/lib/sy/switchyard.db"),
            Ok(StoreUrl::Sqlite("/var/lib/sy/switchyard.db".into()))
        );
        assert_eq!(
            StoreUrl::parse("sqlite:///tmp/a.db"),
            Ok(StoreUrl::Sqlite("/tmp/a.db".into()))
        );
        let url = StoreUrl::Sqlite("/tmp/a b?.db".into());
        assert_eq!(StoreUrl::parse(&url.url()), Ok(url.clone()));
        let pg = StoreUrl::parse("postgres://sy:hunter2@db:5432/sy").expect("postgres");
        assert_eq!(pg.backend(), Backend::Postgres);
        assert_eq!(pg.redacted(), "postgres://sy:***@db:5432/sy");
        assert!(StoreUrl::parse("mysql://x").is_err());
        assert!(StoreUrl::parse("").is_err());
        let err = StoreUrl::parse("redis://u:pw@h").expect_err("unknown scheme");
        assert!(!err.contains("pw"), "{err}");
    }
}
