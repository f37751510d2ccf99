//! Several servers on one store: their heartbeats, the leader's lease, the replicas the leader runs, the
//! traffic each server saw, and the wake-ups between them.
//!
//! Every time here comes from the database's clock (`db_now`), never a server's: servers whose clocks
//! disagree still agree on who leads. The lease's `epoch` is the fencing token: it grows each time the
//! lease changes hands or lapses, and every write made as leader checks it in its own transaction
//! ([`ClusterSession::hold_term`]), so a leader that was paused past its lease writes nothing once it wakes.
//! On PostgreSQL that check takes the lease row `FOR SHARE`: a new leader's takeover waits for the unit of
//! work to end, so no write made under the old epoch commits after the new one began.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::any::AnyRow;
use sqlx::Row;

use super::backend::Backend;
use super::sql::{SqlSession, SqlStore};
pub use super::topic::{Topic, CHANNEL};
use super::{parse_ts, req_ts, StoreError, StoreResult};

/// The lease's name in `leases`: one leader for the whole store.
const LEADER: &str = "leader";

/// Taken (with a lock number) before a row is numbered from a sequence that readers page by: the lock is
/// held until the transaction ends, so rows are numbered in the order they commit and a reader that saw
/// row `n` has seen every row before it. (PostgreSQL hands out sequence numbers at insert; without this a
/// row numbered early but committed late would be passed over by a reader already past it.)
pub(crate) const ORDER_BY_COMMIT: &str = "SELECT pg_advisory_xact_lock($1)";

/// A leader's term: who holds the lease, under which epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    pub holder: String,
    pub epoch: i64,
}

/// A server as it announces itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    pub id: String,
    pub address: String,
    pub public_url: String,
    pub version: String,
}

/// A server as the store knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerRow {
    pub info: ServerInfo,
    pub started_at: DateTime<Utc>,
    pub heartbeat_at: DateTime<Utc>,
    pub stopped_at: Option<DateTime<Utc>>,
    /// Whether it holds the lease now (by the database's clock).
    pub leader: bool,
}

/// A replica (or an endpoint's custom router) as the leader recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaRow {
    pub endpoint_id: String,
    pub replica_id: String,
    /// `replica` or `router`.
    pub role: String,
    pub url: String,
    /// The provider's name for it: a process id, a container id.
    pub handle: String,
    pub generation: String,
    /// `starting`, `ready` or `draining`.
    pub state: String,
}

/// What one server saw of one endpoint's traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Traffic {
    /// Unix milliseconds of the last request (0: none).
    pub last_request_ms: i64,
    pub in_flight: i64,
    /// A request asks the endpoint to wake up.
    pub wake: bool,
}

/// The database's clock, as the store's timestamps are written (RFC 3339, UTC, milliseconds).
fn db_now(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => {
            "to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
        }
        Backend::Sqlite => "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
    }
}

/// The database's clock shifted by parameter `$n` milliseconds (negative: earlier).
fn db_shifted(backend: Backend, n: u8) -> String {
    match backend {
        Backend::Postgres => format!(
            "to_char((clock_timestamp() + (${n}::float8 * interval '1 millisecond')) AT TIME ZONE 'UTC', \
             'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
        ),
        Backend::Sqlite => format!(
            "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('%+.3f seconds', ${n} / 1000.0))"
        ),
    }
}

/// The condition that the lease has not lapsed, where lapsing counts: on PostgreSQL. On SQLite one server
/// holds the store (its file lock), and a lease that lapsed while its writer stalled is still its own.
fn unexpired(backend: Backend) -> String {
    match backend {
        Backend::Postgres => format!(" AND expires_at >= {}", db_now(backend)),
        Backend::Sqlite => String::new(),
    }
}

fn ms(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn server_from(row: &AnyRow) -> StoreResult<ServerRow> {
    Ok(ServerRow {
        info: ServerInfo {
            id: row.try_get("id")?,
            address: row.try_get("address")?,
            public_url: row.try_get("public_url")?,
            version: row.try_get("version")?,
        },
        started_at: req_ts(row, "started_at")?,
        heartbeat_at: req_ts(row, "heartbeat_at")?,
        stopped_at: super::opt_ts(row, "stopped_at")?,
        leader: row.try_get::<i64, _>("leader")? != 0,
    })
}

fn replica_from(row: &AnyRow) -> StoreResult<ReplicaRow> {
    Ok(ReplicaRow {
        endpoint_id: row.try_get("endpoint_id")?,
        replica_id: row.try_get("replica_id")?,
        role: row.try_get("role")?,
        url: row.try_get("url")?,
        handle: row.try_get("handle")?,
        generation: row.try_get("generation")?,
        state: row.try_get("state")?,
    })
}

/// The store's side of several servers: statements that stand alone (each its own transaction).
#[async_trait]
pub trait ClusterStore {
    /// The store's own id, the same for every server on it.
    async fn store_id(&self) -> StoreResult<String>;
    /// Records the server as started now (a restart clears its `stopped_at`).
    async fn announce_server(&self, me: &ServerInfo) -> StoreResult<()>;
    /// The server's heartbeat, by the database's clock (its row made again if it went missing).
    async fn heartbeat(&self, me: &ServerInfo) -> StoreResult<()>;
    /// A clean stop: the server says it is gone.
    async fn server_stopped(&self, id: &str) -> StoreResult<()>;
    /// Every server that heartbeat within `within`, or stopped within it, and the database's time now.
    async fn servers(
        &self,
        within: std::time::Duration,
    ) -> StoreResult<(Vec<ServerRow>, DateTime<Utc>)>;
    /// Takes the lease for `holder` when it is free (lapsed, given up, or held by `holder` itself, which
    /// then restarted), for `ttl`. The new epoch, or `None` when another server holds it.
    async fn acquire_lease(
        &self,
        holder: &str,
        ttl: std::time::Duration,
    ) -> StoreResult<Option<i64>>;
    /// Extends the lease by `ttl` from now if `term` still holds it and it has not lapsed.
    async fn renew_lease(&self, term: &Term, ttl: std::time::Duration) -> StoreResult<bool>;
    /// Gives the lease up at once (a clean stop), so another server takes it without waiting for it to
    /// lapse.
    async fn resign_lease(&self, term: &Term) -> StoreResult<()>;
    /// Replaces the recorded replicas of each endpoint given (an empty list: none), if `term` still leads;
    /// [`StoreError::Fenced`] if it does not. Followers are told (`Topic::Routes`).
    async fn record_replicas(
        &self,
        term: &Term,
        endpoints: &[(String, Vec<ReplicaRow>)],
    ) -> StoreResult<()>;
    /// Every recorded replica.
    async fn replicas(&self) -> StoreResult<Vec<ReplicaRow>>;
    /// What `server` saw of each endpoint's traffic, replacing what it said before (endpoints left out are
    /// unchanged). Tells the leader when one asks to wake up.
    async fn report_traffic(&self, server: &str, seen: &[(String, Traffic)]) -> StoreResult<()>;
    /// What the other servers saw of each endpoint, summed (the latest request, requests in flight, a
    /// wake-up asked for), from reports newer than `fresh`. Wake-ups (every server's, this one's
    /// too) are taken: each is read once.
    async fn traffic_elsewhere(
        &self,
        server: &str,
        fresh: std::time::Duration,
    ) -> StoreResult<Vec<(String, Traffic)>>;
    /// Tells every server (PostgreSQL's `NOTIFY`; nothing on SQLite, which has one server).
    async fn announce(&self, topic: Topic) -> StoreResult<()>;
    /// Hears what the other servers announce, until dropped: the store's own signals (deliveries, mail,
    /// notices queued) are rung here, and `on` hears every topic. A lost connection is made again, and
    /// since what was said meanwhile is lost, `on` then hears every topic once. Returns at once on SQLite.
    async fn listen(&self, on: Arc<dyn Fn(Topic) + Send + Sync>);
}

#[async_trait]
impl ClusterStore for SqlStore {
    async fn store_id(&self) -> StoreResult<String> {
        Ok(
            sqlx::query_scalar("SELECT value FROM store_meta WHERE key = 'store_id'")
                .fetch_one(self.pool())
                .await?,
        )
    }

    async fn announce_server(&self, me: &ServerInfo) -> StoreResult<()> {
        self.upsert_server(
            me,
            "address = excluded.address, public_url = excluded.public_url, version = excluded.version, \
             started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at, stopped_at = NULL",
        )
        .await
    }

    async fn heartbeat(&self, me: &ServerInfo) -> StoreResult<()> {
        self.upsert_server(
            me,
            "heartbeat_at = excluded.heartbeat_at, stopped_at = NULL",
        )
        .await
    }

    async fn server_stopped(&self, id: &str) -> StoreResult<()> {
        let now = db_now(super::Store::backend(self));
        let _turn = self.writer_turn().await;
        sqlx::query(&format!(
            "UPDATE servers SET stopped_at = {now} WHERE id = $1"
        ))
        .bind(id)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    async fn servers(
        &self,
        within: std::time::Duration,
    ) -> StoreResult<(Vec<ServerRow>, DateTime<Utc>)> {
        let (now, since) = (
            db_now(super::Store::backend(self)),
            db_shifted(super::Store::backend(self), 1),
        );
        let mut conn = self.pool().acquire().await?;
        let now_s: String = sqlx::query_scalar(&format!("SELECT {now}"))
            .fetch_one(&mut *conn)
            .await?;
        let rows = sqlx::query(&format!(
            "SELECT s.id, s.address, s.public_url, s.version, s.started_at, s.heartbeat_at, \
             s.stopped_at, CASE WHEN l.holder IS NULL THEN 0 ELSE 1 END AS leader \
             FROM servers s LEFT JOIN leases l ON l.name = '{LEADER}' AND l.holder = s.id \
             AND l.expires_at > $2 \
             WHERE s.heartbeat_at > {since} OR s.stopped_at > {since} ORDER BY s.started_at, s.id"
        ))
        .bind(-ms(within))
        .bind(&now_s)
        .fetch_all(&mut *conn)
        .await?;
        let servers = rows.iter().map(server_from).collect::<StoreResult<_>>()?;
        Ok((servers, parse_ts(&now_s)?))
    }

    async fn acquire_lease(
        &self,
        holder: &str,
        ttl: std::time::Duration,
    ) -> StoreResult<Option<i64>> {
        let (now, later) = (
            db_now(super::Store::backend(self)),
            db_shifted(super::Store::backend(self), 2),
        );
        let _turn = self.writer_turn().await;
        let epoch: Option<i64> = sqlx::query_scalar(&format!(
            "INSERT INTO leases (name, holder, epoch, acquired_at, expires_at) \
             VALUES ('{LEADER}', $1, 1, {now}, {later}) ON CONFLICT (name) DO UPDATE SET \
             holder = excluded.holder, epoch = leases.epoch + 1, acquired_at = excluded.acquired_at, \
             expires_at = excluded.expires_at \
             WHERE leases.expires_at < excluded.acquired_at OR leases.holder = excluded.holder \
             RETURNING epoch"
        ))
        .bind(holder)
        .bind(ms(ttl))
        .fetch_optional(self.pool())
        .await?;
        Ok(epoch)
    }

    async fn renew_lease(&self, term: &Term, ttl: std::time::Duration) -> StoreResult<bool> {
        let backend = super::Store::backend(self);
        let (later, unexpired) = (db_shifted(backend, 3), unexpired(backend));
        let _turn = self.writer_turn().await;
        let done = sqlx::query(&format!(
            "UPDATE leases SET expires_at = {later} WHERE name = '{LEADER}' AND holder = $1 \
             AND epoch = $2{unexpired}"
        ))
        .bind(&term.holder)
        .bind(term.epoch)
        .bind(ms(ttl))
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn resign_lease(&self, term: &Term) -> StoreResult<()> {
        let _turn = self.writer_turn().await;
        sqlx::query(&format!(
            "UPDATE leases SET expires_at = acquired_at WHERE name = '{LEADER}' AND holder = $1 \
             AND epoch = $2"
        ))
        .bind(&term.holder)
        .bind(term.epoch)
        .execute(self.pool())
        .await?;
        drop(_turn);
        self.announce(Topic::Leader).await
    }

    async fn record_replicas(
        &self,
        term: &Term,
        endpoints: &[(String, Vec<ReplicaRow>)],
    ) -> StoreResult<()> {
        let mut unit = self.begin_sql().await?;
        unit.hold_term(term).await?;
        unit.replace_replicas(term, endpoints).await?;
        unit.tell(Topic::Routes).await?;
        super::Session::commit(Box::new(unit)).await
    }

    async fn replicas(&self) -> StoreResult<Vec<ReplicaRow>> {
        sqlx::query(
            "SELECT endpoint_id, replica_id, role, url, handle, generation, state FROM replicas \
             ORDER BY endpoint_id, replica_id",
        )
        .fetch_all(self.pool())
        .await?
        .iter()
        .map(replica_from)
        .collect()
    }

    async fn report_traffic(&self, server: &str, seen: &[(String, Traffic)]) -> StoreResult<()> {
        if seen.is_empty() {
            return Ok(());
        }
        let now = db_now(super::Store::backend(self));
        let upsert = format!(
            "INSERT INTO endpoint_traffic (server_id, endpoint_id, last_request_ms, in_flight, wake, \
             updated_at) VALUES ($1, $2, $3, $4, $5, {now}) \
             ON CONFLICT (server_id, endpoint_id) DO UPDATE SET \
             last_request_ms = excluded.last_request_ms, in_flight = excluded.in_flight, \
             wake = CASE WHEN excluded.wake = 1 THEN 1 ELSE endpoint_traffic.wake END, \
             updated_at = excluded.updated_at"
        );
        let mut unit = self.begin_sql().await?;
        let mut woke = false;
        for (endpoint, t) in seen {
            woke |= t.wake;
            sqlx::query(&upsert)
                .bind(server)
                .bind(endpoint)
                .bind(t.last_request_ms)
                .bind(t.in_flight)
                .bind(i64::from(t.wake))
                .execute(unit.db())
                .await?;
        }
        if woke {
            unit.tell(Topic::Wake).await?;
        }
        super::Session::commit(Box::new(unit)).await
    }

    async fn traffic_elsewhere(
        &self,
        server: &str,
        fresh: std::time::Duration,
    ) -> StoreResult<Vec<(String, Traffic)>> {
        let since = db_shifted(super::Store::backend(self), 2);
        let rows = {
            let _turn = self.writer_turn().await;
            sqlx::query(
                // Every server's, this one's too: it may have asked while it followed.
                "UPDATE endpoint_traffic SET wake = 0 WHERE wake = 1 RETURNING endpoint_id",
            )
            .fetch_all(self.pool())
            .await?
        };
        let mut sums: std::collections::BTreeMap<String, Traffic> = Default::default();
        for r in &rows {
            sums.entry(r.try_get("endpoint_id")?).or_default().wake = true;
        }
        let rows = sqlx::query(&format!(
            "SELECT endpoint_id, last_request_ms, in_flight FROM endpoint_traffic \
             WHERE server_id <> $1 AND updated_at > {since}"
        ))
        .bind(server)
        .bind(-ms(fresh))
        .fetch_all(self.pool())
        .await?;
        for r in &rows {
            let t = sums.entry(r.try_get("endpoint_id")?).or_default();
            t.last_request_ms = t.last_request_ms.max(r.try_get("last_request_ms")?);
            t.in_flight += r.try_get::<i64, _>("in_flight")?.max(0);
        }
        Ok(sums.into_iter().collect())
    }

    async fn listen(&self, on: Arc<dyn Fn(Topic) + Send + Sync>) {
        if super::Store::backend(self) != Backend::Postgres {
            return;
        }
        let hear = |topic: Topic| {
            self.ring(topic);
            on(topic);
        };
        let mut pause = std::time::Duration::from_millis(100);
        loop {
            let mut listener = match sqlx::postgres::PgListener::connect(&self.url()).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(error = %e, "could not listen to the other servers; retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_secs(5));
                    continue;
                }
            };
            if let Err(e) = listener.listen(CHANNEL).await {
                tracing::warn!(error = %e, "could not listen to the other servers; retrying");
                tokio::time::sleep(pause).await;
                continue;
            }
            pause = std::time::Duration::from_millis(100);
            // Whatever was said before this connection listened is lost: hear everything once.
            Topic::ALL.into_iter().for_each(hear);
            loop {
                match listener.try_recv().await {
                    Ok(Some(n)) => match Topic::parse(n.payload()) {
                        Some(topic) => hear(topic),
                        None => tracing::debug!(payload = n.payload(), "unknown notification"),
                    },
                    // The connection was lost: listen again on a new one, then hear everything.
                    Ok(None) => {
                        tracing::warn!("lost the other servers' notifications; listening again");
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "lost the other servers' notifications; listening again");
                        break;
                    }
                }
            }
        }
    }

    async fn announce(&self, topic: Topic) -> StoreResult<()> {
        if super::Store::backend(self) == Backend::Postgres {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(CHANNEL)
                .bind(topic.as_str())
                .execute(self.pool())
                .await?;
        }
        Ok(())
    }
}

impl SqlStore {
    /// Writes `me`'s row as started and beating now; an existing row takes the columns `update` sets.
    async fn upsert_server(&self, me: &ServerInfo, update: &str) -> StoreResult<()> {
        let now = db_now(super::Store::backend(self));
        let _turn = self.writer_turn().await;
        sqlx::query(&format!(
            "INSERT INTO servers (id, address, public_url, version, started_at, heartbeat_at, stopped_at) \
             VALUES ($1, $2, $3, $4, {now}, {now}, NULL) ON CONFLICT (id) DO UPDATE SET {update}"
        ))
        .bind(&me.id)
        .bind(&me.address)
        .bind(&me.public_url)
        .bind(&me.version)
        .execute(self.pool())
        .await?;
        Ok(())
    }
}

/// The part of several servers' work that runs inside a unit of work.
#[async_trait]
pub trait ClusterSession {
    /// Fails with [`StoreError::Fenced`] unless `term` holds the lease now; on PostgreSQL the lease row is
    /// then held (`FOR SHARE`) until the unit of work ends, so no other server takes it meanwhile.
    async fn hold_term(&mut self, term: &Term) -> StoreResult<()>;
    /// Tells every server at commit (PostgreSQL's `NOTIFY`, sent only if the unit commits).
    async fn tell(&mut self, topic: Topic) -> StoreResult<()>;
}

impl SqlSession {
    async fn replace_replicas(
        &mut self,
        term: &Term,
        endpoints: &[(String, Vec<ReplicaRow>)],
    ) -> StoreResult<()> {
        let now = db_now(self.backend);
        let insert = format!(
            "INSERT INTO replicas (endpoint_id, replica_id, role, url, handle, generation, state, epoch, \
             updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, {now})"
        );
        for (endpoint, rows) in endpoints {
            sqlx::query("DELETE FROM replicas WHERE endpoint_id = $1")
                .bind(endpoint)
                .execute(self.db())
                .await?;
            for r in rows {
                sqlx::query(&insert)
                    .bind(endpoint)
                    .bind(&r.replica_id)
                    .bind(&r.role)
                    .bind(&r.url)
                    .bind(&r.handle)
                    .bind(&r.generation)
                    .bind(&r.state)
                    .bind(term.epoch)
                    .execute(self.db())
                    .await?;
            }
        }
        Ok(())
    }
}

#[async_trait]
impl ClusterSession for SqlSession {
    async fn hold_term(&mut self, term: &Term) -> StoreResult<()> {
        let lock = match self.backend {
            Backend::Postgres => " FOR SHARE",
            Backend::Sqlite => "",
        };
        let held = sqlx::query(&format!(
            "SELECT epoch FROM leases WHERE name = '{LEADER}' AND holder = $1 AND epoch = $2{}{lock}",
            unexpired(self.backend)
        ))
        .bind(&term.holder)
        .bind(term.epoch)
        .fetch_optional(self.db())
        .await?;
        match held {
            Some(_) => Ok(()),
            None => Err(StoreError::Fenced),
        }
    }

    async fn tell(&mut self, topic: Topic) -> StoreResult<()> {
        if self.backend == Backend::Postgres {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(CHANNEL)
                .bind(topic.as_str())
                .execute(self.db())
                .await?;
        }
        Ok(())
    }
}
