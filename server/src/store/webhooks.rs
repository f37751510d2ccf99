//! Webhooks, the watches the outbox fans events out by, and the deliveries table, which is both the
//! delivery queue and the activity view: a delivery is `pending` (due at `next_attempt_at`), `sending`
//! (claimed by a worker until `lease_until`, under a claim token), or done (`succeeded`, `failed`,
//! `cancelled`); every attempt is a row of `delivery_attempts`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::any::AnyRow;
use sqlx::Row;

use super::backend::Backend;
use super::batch::{Stmt, Val};
use super::sql::{SqlSession, SqlStore};
use super::{json, json_err, opt_ts, parse_ts, req_ts, ts, StoreResult};
use crate::model::webhook::{Domain, LastAttempt, Watched};

/// SQL: cancels the deliveries still to send (pending, or claimed and sending) that the `WHERE` clause
/// this is followed by picks; `$2` is the time.
macro_rules! cancel_deliveries {
    () => {
        "UPDATE deliveries SET state = 'cancelled', next_attempt_at = NULL, claim_token = NULL, \
         lease_until = NULL, updated_at = $2 WHERE state IN ('pending', 'sending') AND "
    };
}

/// SQL: the owner of the webhook `$w` (a table alias) is disabled: its webhooks send nothing.
macro_rules! owner_disabled {
    ($w:literal) => {
        concat!(
            "EXISTS (SELECT 1 FROM accounts o WHERE o.id = ",
            $w,
            ".owner_id AND o.disabled_at IS NOT NULL)"
        )
    };
}

/// A webhook as stored; `secret` and `signing_keys` are sealed.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookRecord {
    pub id: String,
    pub owner_id: String,
    /// The owner's name (read only: filled from the accounts table).
    pub owner: String,
    pub url: String,
    pub watched: Vec<Watched>,
    pub domains: Vec<Domain>,
    pub secret: Option<String>,
    pub signing_keys: String,
    pub disabled: bool,
    pub disabled_reason: Option<String>,
    pub held_until: Option<DateTime<Utc>>,
    pub failing_since: Option<DateTime<Utc>>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Read only: the newest attempt.
    pub last_attempt: Option<LastAttempt>,
}

/// One attempt, as the activity view lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRecord {
    pub seq: i64,
    pub delivery_id: String,
    pub event_id: String,
    /// The payload's `event` member (`action`, `scope`).
    pub event: serde_json::Value,
    /// The event's namespace and subject (what changed).
    pub namespace: String,
    pub subject: String,
    /// The payload as stored: what is sent, but the `webhook` member.
    pub payload: serde_json::Value,
    pub number: i64,
    pub started_at: DateTime<Utc>,
    pub duration_ms: i64,
    pub status_code: Option<i64>,
    pub error_class: Option<String>,
    pub error: Option<String>,
    pub response: Option<String>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub manual: bool,
    /// The delivery's state now.
    pub state: String,
}

/// A delivery a worker claimed, with what it needs to send it.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub id: String,
    pub webhook_id: String,
    pub event_id: String,
    /// The event's payload with its `id`, but without the `webhook` member.
    pub payload: String,
    /// Attempts made before this one.
    pub attempts: i64,
    pub manual: bool,
    pub url: String,
    pub secret: Option<String>,
    pub signing_keys: String,
}

/// How an attempt ended, to record.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub delivery_id: String,
    pub webhook_id: String,
    pub claim_token: String,
    pub number: i64,
    pub started_at: DateTime<Utc>,
    pub duration_ms: i64,
    pub status_code: Option<i64>,
    pub error_class: Option<String>,
    pub error: Option<String>,
    pub response: Option<String>,
    /// `Some(at)`: pending again, due then; `None`: done in `state`.
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub state: &'static str,
    pub manual: bool,
    pub now: DateTime<Utc>,
}

#[async_trait]
pub trait WebhookStore {
    async fn create_webhook(&mut self, w: &WebhookRecord) -> StoreResult<()>;
    async fn webhook(&mut self, id: &str) -> StoreResult<Option<WebhookRecord>>;
    /// The webhooks a user manages: their own and those of organizations they administer.
    async fn webhooks_managed_by(&mut self, user_id: &str) -> StoreResult<Vec<WebhookRecord>>;
    async fn count_webhooks_of(&mut self, owner_id: &str) -> StoreResult<i64>;
    /// Writes the changeable fields and the watches.
    async fn update_webhook(&mut self, w: &WebhookRecord) -> StoreResult<()>;
    async fn delete_webhook(&mut self, id: &str) -> StoreResult<bool>;
    /// Disables (cancelling its pending deliveries) or enables a webhook; false when it already was.
    async fn set_webhook_disabled(
        &mut self,
        id: &str,
        disabled: bool,
        reason: Option<&str>,
        now: DateTime<Utc>,
    ) -> StoreResult<bool>;
    /// Cancels what the webhooks of the account `owner_id` still had to send (it was disabled).
    async fn cancel_deliveries_of_owner(
        &mut self,
        owner_id: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<()>;
    /// Locks the webhook's row for the rest of the unit of work (PostgreSQL; on SQLite the unit
    /// already holds the only write lock), so a read-change-write of it is not lost to another. Plain
    /// reads take no lock.
    async fn lock_webhook(&mut self, id: &str) -> StoreResult<()>;
    /// Attempts of a webhook, newest first: those with `seq` above `after` (or below `before`).
    async fn attempts_of(
        &mut self,
        webhook_id: &str,
        after: Option<i64>,
        before: Option<i64>,
        limit: i64,
    ) -> StoreResult<Vec<AttemptRecord>>;
    /// A new manual delivery of the event of `delivery_id`, due now; its id, or None when the
    /// delivery is not the webhook's.
    async fn replay_delivery(
        &mut self,
        webhook_id: &str,
        delivery_id: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<String>>;
    /// Failed or cancelled deliveries since `since` made due again; how many.
    async fn replay_failed_since(
        &mut self,
        webhook_id: &str,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<u64>;
}

const COLS: &str = "w.id, w.owner_id, o.name AS owner, w.url, w.watched, w.domains, w.secret, \
    w.signing_keys, w.disabled, w.disabled_reason, w.held_until, w.failing_since, w.created_by, \
    w.created_at, w.updated_at, \
    (SELECT a.started_at || '|' || COALESCE(CAST(a.status_code AS TEXT), '') || '|' || \
     COALESCE(a.error_class, '') FROM delivery_attempts a WHERE a.webhook_id = w.id \
     ORDER BY a.seq DESC LIMIT 1) AS last_attempt";

/// `started|status|class`, as the list query folds the newest attempt.
fn last_attempt(folded: Option<String>) -> StoreResult<Option<LastAttempt>> {
    let Some(folded) = folded else {
        return Ok(None);
    };
    let mut parts = folded.splitn(3, '|');
    let at = parse_ts(parts.next().unwrap_or_default())?;
    let status_code = parts.next().and_then(|s| s.parse::<u16>().ok());
    let error_class = parts.next().filter(|s| !s.is_empty()).map(str::to_string);
    Ok(Some(LastAttempt {
        at,
        ok: error_class.is_none() && status_code.is_some_and(|s| (200..300).contains(&s)),
        status_code,
        error_class,
    }))
}

fn webhook_from(row: &AnyRow) -> StoreResult<WebhookRecord> {
    let watched: String = row.try_get("watched")?;
    let domains: String = row.try_get("domains")?;
    Ok(WebhookRecord {
        id: row.try_get("id")?,
        owner_id: row.try_get("owner_id")?,
        owner: row.try_get("owner")?,
        url: row.try_get("url")?,
        watched: serde_json::from_str(&watched).map_err(json_err)?,
        domains: serde_json::from_str(&domains).map_err(json_err)?,
        secret: row.try_get("secret")?,
        signing_keys: row.try_get("signing_keys")?,
        disabled: row.try_get::<i64, _>("disabled")? != 0,
        disabled_reason: row.try_get("disabled_reason")?,
        held_until: opt_ts(row, "held_until")?,
        failing_since: opt_ts(row, "failing_since")?,
        created_by: row.try_get("created_by")?,
        created_at: req_ts(row, "created_at")?,
        updated_at: req_ts(row, "updated_at")?,
        last_attempt: last_attempt(row.try_get("last_attempt")?)?,
    })
}

fn attempt_from(row: &AnyRow) -> StoreResult<AttemptRecord> {
    let payload: Option<String> = row.try_get("hook_payload")?;
    let payload = payload
        .and_then(|p| serde_json::from_str::<serde_json::Value>(&p).ok())
        .unwrap_or(serde_json::Value::Null);
    Ok(AttemptRecord {
        seq: row.try_get("seq")?,
        delivery_id: row.try_get("delivery_id")?,
        event_id: row.try_get("event_id")?,
        event: payload.get("event").cloned().unwrap_or_default(),
        namespace: row.try_get("namespace")?,
        subject: row.try_get("subject")?,
        payload,
        number: row.try_get("number")?,
        started_at: req_ts(row, "started_at")?,
        duration_ms: row.try_get("duration_ms")?,
        status_code: row.try_get("status_code")?,
        error_class: row.try_get("error_class")?,
        error: row.try_get("error")?,
        response: row.try_get("response")?,
        next_attempt_at: opt_ts(row, "next_attempt_at")?,
        manual: row.try_get::<i64, _>("manual")? != 0,
        state: row.try_get("state")?,
    })
}

impl SqlSession {
    async fn write_watches(&mut self, w: &WebhookRecord) -> StoreResult<()> {
        sqlx::query("DELETE FROM webhook_watches WHERE webhook_id = $1")
            .bind(&w.id)
            .execute(self.db())
            .await?;
        let mut seen = std::collections::BTreeSet::new();
        for watch in &w.watched {
            for domain in &w.domains {
                let key = (watch.kind.as_str(), watch.name.as_str(), domain.as_str());
                if !seen.insert(key) {
                    continue;
                }
                sqlx::query(
                    "INSERT INTO webhook_watches (webhook_id, kind, name, domain) \
                     VALUES ($1, $2, $3, $4)",
                )
                .bind(&w.id)
                .bind(key.0)
                .bind(key.1)
                .bind(key.2)
                .execute(self.db())
                .await?;
            }
        }
        Ok(())
    }

    /// Fans an event out: one pending delivery, due now, for each enabled webhook that watches it and
    /// whose owner is not disabled. Endpoint events go only to webhooks whose owner may see the
    /// namespace's endpoints (the namespace itself, or a member of that organization).
    pub(super) async fn fan_out(
        &mut self,
        event_id: &str,
        seq: i64,
        domain: Domain,
        namespace: &str,
        subject: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        let now = ts(now);
        let done = sqlx::query(concat!(
            "INSERT INTO deliveries (id, webhook_id, event_seq, state, attempts, next_attempt_at, \
             manual, created_at, updated_at) \
             SELECT $1 || '-' || w.id, w.id, $2, 'pending', 0, $3, 0, $3, $3 FROM webhooks w \
             WHERE w.disabled = 0 AND NOT ",
            owner_disabled!("w"),
            " AND w.id IN (SELECT k.webhook_id FROM webhook_watches k \
               WHERE k.domain = $4 AND k.name IN ($5, $6) \
                 AND ((k.kind IN ('user', 'org') AND k.name = $5) \
                   OR (k.kind = 'model' AND k.name = $6))) \
             AND ($4 <> 'endpoint' OR EXISTS (SELECT 1 FROM accounts a WHERE a.name = $5 \
               AND (a.id = w.owner_id OR EXISTS (SELECT 1 FROM memberships m \
                 WHERE m.org_id = a.id AND m.user_id = w.owner_id))))"
        ))
        .bind(event_id)
        .bind(seq)
        .bind(&now)
        .bind(domain.as_str())
        .bind(namespace)
        .bind(subject)
        .execute(self.db())
        .await?;
        // The workers are woken only when something was queued for them.
        self.queued |= done.rows_affected() > 0;
        Ok(())
    }
}

#[async_trait]
impl WebhookStore for SqlSession {
    async fn create_webhook(&mut self, w: &WebhookRecord) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO webhooks (id, owner_id, url, watched, domains, secret, signing_keys, \
             disabled, disabled_reason, created_by, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(&w.id)
        .bind(&w.owner_id)
        .bind(&w.url)
        .bind(json(&w.watched)?)
        .bind(json(&w.domains)?)
        .bind(&w.secret)
        .bind(&w.signing_keys)
        .bind(i64::from(w.disabled))
        .bind(&w.disabled_reason)
        .bind(&w.created_by)
        .bind(ts(w.created_at))
        .bind(ts(w.updated_at))
        .execute(self.db())
        .await?;
        self.write_watches(w).await
    }

    async fn webhook(&mut self, id: &str) -> StoreResult<Option<WebhookRecord>> {
        let sql = format!(
            "SELECT {COLS} FROM webhooks w JOIN accounts o ON o.id = w.owner_id WHERE w.id = $1"
        );
        sqlx::query(&sql)
            .bind(id)
            .fetch_optional(self.db())
            .await?
            .as_ref()
            .map(webhook_from)
            .transpose()
    }

    async fn webhooks_managed_by(&mut self, user_id: &str) -> StoreResult<Vec<WebhookRecord>> {
        let sql = format!(
            "SELECT {COLS} FROM webhooks w JOIN accounts o ON o.id = w.owner_id \
             WHERE w.owner_id = $1 OR w.owner_id IN (SELECT m.org_id FROM memberships m \
               WHERE m.user_id = $1 AND m.role = 'admin') \
             ORDER BY w.created_at, w.id"
        );
        sqlx::query(&sql)
            .bind(user_id)
            .fetch_all(self.db())
            .await?
            .iter()
            .map(webhook_from)
            .collect()
    }

    async fn count_webhooks_of(&mut self, owner_id: &str) -> StoreResult<i64> {
        Ok(
            sqlx::query_scalar("SELECT COUNT(*) FROM webhooks WHERE owner_id = $1")
                .bind(owner_id)
                .fetch_one(self.db())
                .await?,
        )
    }

    async fn update_webhook(&mut self, w: &WebhookRecord) -> StoreResult<()> {
        sqlx::query(
            "UPDATE webhooks SET url = $2, watched = $3, domains = $4, secret = $5, \
             signing_keys = $6, updated_at = $7 WHERE id = $1",
        )
        .bind(&w.id)
        .bind(&w.url)
        .bind(json(&w.watched)?)
        .bind(json(&w.domains)?)
        .bind(&w.secret)
        .bind(&w.signing_keys)
        .bind(ts(w.updated_at))
        .execute(self.db())
        .await?;
        self.write_watches(w).await
    }

    async fn delete_webhook(&mut self, id: &str) -> StoreResult<bool> {
        // The webhook's row first, as a send slot's taker locks it.
        self.lock_webhook(id).await?;
        for table in ["webhook_sends", "webhook_pace"] {
            sqlx::query(&format!("DELETE FROM {table} WHERE webhook_id = $1"))
                .bind(id)
                .execute(self.db())
                .await?;
        }
        let done = sqlx::query("DELETE FROM webhooks WHERE id = $1")
            .bind(id)
            .execute(self.db())
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn set_webhook_disabled(
        &mut self,
        id: &str,
        disabled: bool,
        reason: Option<&str>,
        now: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let now = ts(now);
        let changed = sqlx::query(
            "UPDATE webhooks SET disabled = $2, disabled_reason = $3, held_until = NULL, \
             failing_since = NULL, updated_at = $4 WHERE id = $1 AND disabled <> $2",
        )
        .bind(id)
        .bind(i64::from(disabled))
        .bind(reason)
        .bind(&now)
        .execute(self.db())
        .await?
        .rows_affected()
            > 0;
        if disabled {
            sqlx::query(concat!(cancel_deliveries!(), "webhook_id = $1"))
                .bind(id)
                .bind(&now)
                .execute(self.db())
                .await?;
        }
        Ok(changed)
    }

    async fn cancel_deliveries_of_owner(
        &mut self,
        owner_id: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        sqlx::query(concat!(
            cancel_deliveries!(),
            "webhook_id IN (SELECT id FROM webhooks WHERE owner_id = $1)"
        ))
        .bind(owner_id)
        .bind(ts(now))
        .execute(self.db())
        .await?;
        Ok(())
    }

    async fn lock_webhook(&mut self, id: &str) -> StoreResult<()> {
        if self.backend == Backend::Postgres && self.in_unit() {
            sqlx::query("SELECT id FROM webhooks WHERE id = $1 FOR UPDATE")
                .bind(id)
                .fetch_optional(self.db())
                .await?;
        }
        Ok(())
    }

    async fn attempts_of(
        &mut self,
        webhook_id: &str,
        after: Option<i64>,
        before: Option<i64>,
        limit: i64,
    ) -> StoreResult<Vec<AttemptRecord>> {
        sqlx::query(
            "SELECT a.seq, a.delivery_id, e.id AS event_id, e.namespace, e.subject, e.hook_payload, \
             a.number, a.started_at, a.duration_ms, a.status_code, a.error_class, a.error, a.response, \
             CASE WHEN d.state = 'cancelled' THEN NULL ELSE a.next_attempt_at END \
             AS next_attempt_at, a.manual, d.state \
             FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id \
             JOIN events e ON e.seq = d.event_seq \
             WHERE a.webhook_id = $1 AND a.seq > $2 AND a.seq < $3 \
             ORDER BY CASE WHEN $2 > 0 THEN a.seq ELSE -a.seq END LIMIT $4",
        )
        .bind(webhook_id)
        .bind(after.unwrap_or(0))
        .bind(before.unwrap_or(i64::MAX))
        .bind(limit)
        .fetch_all(self.db())
        .await?
        .iter()
        .map(attempt_from)
        .collect::<StoreResult<Vec<_>>>()
        .map(|mut page| {
            // After a cursor: the oldest attempts past it (none skipped), shown newest first too.
            if after.is_some() {
                page.reverse();
            }
            page
        })
    }

    async fn replay_delivery(
        &mut self,
        webhook_id: &str,
        delivery_id: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<String>> {
        let id = format!("{delivery_id}-r{}", crate::crypto::random_id());
        let now = ts(now);
        let done = sqlx::query(
            "INSERT INTO deliveries (id, webhook_id, event_seq, state, attempts, next_attempt_at, \
             manual, created_at, updated_at) \
             SELECT $1, d.webhook_id, d.event_seq, 'pending', 0, $2, 1, $2, $2 FROM deliveries d \
             WHERE d.id = $3 AND d.webhook_id = $4",
        )
        .bind(&id)
        .bind(&now)
        .bind(delivery_id)
        .bind(webhook_id)
        .execute(self.db())
        .await?;
        self.queued |= done.rows_affected() > 0;
        Ok((done.rows_affected() > 0).then_some(id))
    }

    async fn replay_failed_since(
        &mut self,
        webhook_id: &str,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        let done = sqlx::query(
            "UPDATE deliveries SET state = 'pending', next_attempt_at = $3, manual = 1, \
             updated_at = $3 WHERE webhook_id = $1 AND state IN ('failed', 'cancelled') \
             AND created_at >= $2",
        )
        .bind(webhook_id)
        .bind(ts(since))
        .bind(ts(now))
        .execute(self.db())
        .await?;
        self.queued |= done.rows_affected() > 0;
        Ok(done.rows_affected())
    }
}

/// The workers' side: claiming, recording outcomes, leases and pruning. Not in units of work: each
/// is one statement, or one batch through the group committer.
#[async_trait]
pub trait DeliveryQueue {
    /// Claims up to `limit` due deliveries of webhooks not held (of webhook `only`, when given), oldest
    /// first, for `token` until `lease_until`.
    async fn claim_deliveries(
        &self,
        token: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        limit: i64,
        only: Option<&str>,
    ) -> StoreResult<Vec<Claimed>>;
    /// The webhooks with deliveries due (not held, not disabled) among the first `limit` that have any
    /// pending, found by skipping through the index one webhook at a time (a backlog of one webhook
    /// is not read row by row).
    async fn due_webhooks(&self, now: DateTime<Utc>, limit: i64) -> StoreResult<Vec<String>>;
    /// Whether the delivery is still claimed with `token` (not cancelled, not taken over).
    async fn still_claimed(&self, id: &str, token: &str) -> StoreResult<bool>;
    /// Gives one claimed delivery back, due at `at`, no attempt spent (only while the claim is the
    /// caller's).
    async fn postpone(&self, id: &str, token: &str, at: DateTime<Utc>) -> StoreResult<()>;
    /// Records an attempt and moves its delivery on, in one transaction, only while the claim is
    /// still the caller's: a worker whose lease was taken over records nothing.
    async fn record_outcome(&self, o: &Outcome) -> StoreResult<()>;
    /// Gives up claims whose lease ran out by `now` (a worker died or stalled): due again now.
    async fn release_expired_leases(&self, now: DateTime<Utc>) -> StoreResult<u64>;
    /// Gives back every claim whose token starts with `prefix` (a server's id: its own claims when it
    /// stops, its previous run's when it starts; `""`: every claim), due again now, no attempt spent.
    async fn release_claims_starting(&self, prefix: &str, now: DateTime<Utc>) -> StoreResult<u64>;
    /// The next time after `now` something may become claimable: a pending delivery falls due, or a
    /// webhook's hold ends. (What is due already but was not claimed waits on a lane, not a time.)
    async fn next_due(&self, now: DateTime<Utc>) -> StoreResult<Option<DateTime<Utc>>>;
    /// Holds a webhook's deliveries until `until` (the circuit breaker, a Retry-After); a longer hold
    /// already in place stays.
    async fn hold_webhook(&self, id: &str, until: DateTime<Utc>) -> StoreResult<()>;
    /// Lets a held webhook's deliveries go now.
    async fn release_webhook(&self, id: &str) -> StoreResult<()>;
    /// Deletes what is older than `before`: finished deliveries (their attempts with them), the
    /// webhook events no delivery refers to any more, notices, and sent or failed mail. In batches,
    /// each its own turn as the writer, so others write in between. How many deliveries went.
    async fn prune_deliveries(&self, before: DateTime<Utc>) -> StoreResult<u64>;
    /// Deliveries by state, for metrics and the bench.
    async fn delivery_counts(&self) -> StoreResult<Vec<(String, i64)>>;
    /// Wakes the delivery workers after a unit of work queued deliveries.
    fn outbox(&self) -> &tokio::sync::Notify;
    /// Takes one of webhook `webhook`'s `cap` send slots for delivery `delivery`, until `until` (its
    /// claim's lease), if one is free: several servers then send no more at once than the webhook allows.
    async fn take_send_slot(
        &self,
        webhook: &str,
        delivery: &str,
        cap: i64,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> StoreResult<bool>;
    /// Gives a send slot back.
    async fn give_send_slot(&self, webhook: &str, delivery: &str) -> StoreResult<()>;
    /// Books the next start the webhook's rate allows (one every `step`, from `now` at the earliest), for
    /// whichever server sends; the start booked.
    async fn book_send(
        &self,
        webhook: &str,
        now: DateTime<Utc>,
        step: std::time::Duration,
    ) -> StoreResult<DateTime<Utc>>;
}

#[async_trait]
impl DeliveryQueue for SqlStore {
    fn outbox(&self) -> &tokio::sync::Notify {
        self.outbox_signal()
    }

    async fn take_send_slot(
        &self,
        webhook: &str,
        delivery: &str,
        cap: i64,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let mut unit = self.begin_sql().await?;
        if unit.backend == Backend::Postgres {
            // One taker at a time per webhook (the order record_outcome locks in: webhook first).
            sqlx::query("SELECT id FROM webhooks WHERE id = $1 FOR UPDATE")
                .bind(webhook)
                .execute(unit.db())
                .await?;
        }
        sqlx::query("DELETE FROM webhook_sends WHERE webhook_id = $1 AND held_until < $2")
            .bind(webhook)
            .bind(ts(now))
            .execute(unit.db())
            .await?;
        let taken = sqlx::query(
            "INSERT INTO webhook_sends (webhook_id, delivery_id, held_until) SELECT $1, $2, $3 \
             WHERE (SELECT count(*) FROM webhook_sends WHERE webhook_id = $1 AND delivery_id <> $2) < $4 \
             ON CONFLICT (webhook_id, delivery_id) DO UPDATE SET held_until = excluded.held_until",
        )
        .bind(webhook)
        .bind(delivery)
        .bind(ts(until))
        .bind(cap)
        .execute(unit.db())
        .await?
        .rows_affected()
            == 1;
        super::Session::commit(Box::new(unit)).await?;
        Ok(taken)
    }

    async fn give_send_slot(&self, webhook: &str, delivery: &str) -> StoreResult<()> {
        let _turn = self.writer_turn().await;
        sqlx::query("DELETE FROM webhook_sends WHERE webhook_id = $1 AND delivery_id = $2")
            .bind(webhook)
            .bind(delivery)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    async fn book_send(
        &self,
        webhook: &str,
        now: DateTime<Utc>,
        step: std::time::Duration,
    ) -> StoreResult<DateTime<Utc>> {
        let mut unit = self.begin_sql().await?;
        let lock = match unit.backend {
            Backend::Postgres => " FOR UPDATE",
            Backend::Sqlite => "",
        };
        sqlx::query(
            "INSERT INTO webhook_pace (webhook_id, next_start) VALUES ($1, $2) \
             ON CONFLICT (webhook_id) DO NOTHING",
        )
        .bind(webhook)
        .bind(ts(now))
        .execute(unit.db())
        .await?;
        let next: String = sqlx::query_scalar(&format!(
            "SELECT next_start FROM webhook_pace WHERE webhook_id = $1{lock}"
        ))
        .bind(webhook)
        .fetch_one(unit.db())
        .await?;
        let start = parse_ts(&next)?.max(now);
        let step = chrono::Duration::from_std(step).unwrap_or_default();
        sqlx::query("UPDATE webhook_pace SET next_start = $2 WHERE webhook_id = $1")
            .bind(webhook)
            .bind(ts(start + step))
            .execute(unit.db())
            .await?;
        super::Session::commit(Box::new(unit)).await?;
        Ok(start)
    }

    async fn claim_deliveries(
        &self,
        token: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        limit: i64,
        only: Option<&str>,
    ) -> StoreResult<Vec<Claimed>> {
        let lock = match super::Store::backend(self) {
            Backend::Sqlite => "",
            Backend::Postgres => " FOR UPDATE SKIP LOCKED",
        };
        let only_sql = match only {
            Some(_) => " AND d.webhook_id = $5",
            None => "",
        };
        let claim = format!(
            "UPDATE deliveries SET state = 'sending', claim_token = $1, lease_until = $2, \
             updated_at = $3 WHERE id IN (SELECT d.id FROM deliveries d \
               WHERE d.state = 'pending' AND d.next_attempt_at <= $3{only_sql} \
               AND NOT EXISTS (SELECT 1 FROM webhooks w WHERE w.id = d.webhook_id \
                 AND (w.held_until > $3 OR w.disabled <> 0 OR {owner_disabled})) \
               ORDER BY d.next_attempt_at LIMIT $4{lock})",
            owner_disabled = owner_disabled!("w"),
        );
        let now_s = ts(now);
        let claimed = {
            let _turn = self.writer_turn().await;
            let mut q = sqlx::query(&claim)
                .bind(token)
                .bind(ts(lease_until))
                .bind(&now_s)
                .bind(limit);
            if let Some(w) = only {
                q = q.bind(w);
            }
            q.execute(self.pool()).await?.rows_affected()
        };
        if claimed == 0 {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(
            "SELECT d.id, d.webhook_id, e.id AS event_id, e.hook_payload, d.attempts, d.manual, \
             w.url, w.secret, w.signing_keys \
             FROM deliveries d JOIN webhooks w ON w.id = d.webhook_id \
             JOIN events e ON e.seq = d.event_seq \
             WHERE d.claim_token = $1 AND d.state = 'sending'",
        )
        .bind(token)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|row| {
                Ok(Claimed {
                    id: row.try_get("id")?,
                    webhook_id: row.try_get("webhook_id")?,
                    event_id: row.try_get("event_id")?,
                    payload: row
                        .try_get::<Option<String>, _>("hook_payload")?
                        .unwrap_or_else(|| "{}".into()),
                    attempts: row.try_get("attempts")?,
                    manual: row.try_get::<i64, _>("manual")? != 0,
                    url: row.try_get("url")?,
                    secret: row.try_get("secret")?,
                    signing_keys: row.try_get("signing_keys")?,
                })
            })
            .collect()
    }

    async fn due_webhooks(&self, now: DateTime<Utc>, limit: i64) -> StoreResult<Vec<String>> {
        // A loose index scan: each step seeks the next webhook id in `deliveries_pending_by_webhook`.
        let rows: Vec<Option<String>> = sqlx::query_scalar(concat!(
            "WITH RECURSIVE hooks(w, n) AS ( \
               SELECT (SELECT MIN(webhook_id) FROM deliveries WHERE state = 'pending'), 0 \
               UNION ALL \
               SELECT (SELECT MIN(webhook_id) FROM deliveries WHERE state = 'pending' \
                 AND webhook_id > hooks.w), n + 1 \
               FROM hooks WHERE w IS NOT NULL AND n < $2) \
             SELECT h.w FROM hooks h WHERE h.w IS NOT NULL \
               AND EXISTS (SELECT 1 FROM deliveries d WHERE d.webhook_id = h.w \
                 AND d.state = 'pending' AND d.next_attempt_at <= $1) \
               AND NOT EXISTS (SELECT 1 FROM webhooks x WHERE x.id = h.w \
                 AND (x.held_until > $1 OR x.disabled <> 0 OR ",
            owner_disabled!("x"),
            "))"
        ))
        .bind(ts(now))
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().flatten().collect())
    }

    async fn still_claimed(&self, id: &str, token: &str) -> StoreResult<bool> {
        let found: Option<i64> = sqlx::query_scalar(
            "SELECT 1 FROM deliveries WHERE id = $1 AND claim_token = $2 AND state = 'sending'",
        )
        .bind(id)
        .bind(token)
        .fetch_optional(self.pool())
        .await?;
        Ok(found.is_some())
    }

    async fn postpone(&self, id: &str, token: &str, at: DateTime<Utc>) -> StoreResult<()> {
        self.write_batch(vec![(
            "UPDATE deliveries SET state = 'pending', next_attempt_at = $3, claim_token = NULL, \
             lease_until = NULL, updated_at = $3 WHERE id = $1 AND claim_token = $2 \
             AND state = 'sending'",
            vec![Val::from(id), Val::from(token), Val::from(ts(at))],
        )])
        .await
    }

    async fn record_outcome(&self, o: &Outcome) -> StoreResult<()> {
        let mut stmts = outcome_statements(o);
        if super::Store::backend(self) == Backend::Postgres {
            // Rows are locked webhook first, then its deliveries, as a disable or a replay takes them
            // (`lock_webhook`): the outcome touches both, and the other order deadlocks against those.
            stmts.insert(
                0,
                (
                    "SELECT id FROM webhooks WHERE id = $1 FOR UPDATE",
                    vec![Val::from(o.webhook_id.as_str())],
                ),
            );
            // Attempts are numbered (`seq`) at insert, and a reader pages by that number: numbered in
            // commit order, no page can pass over an attempt that commits late.
            stmts.insert(
                1,
                (
                    super::cluster::ORDER_BY_COMMIT,
                    vec![Val::Int(ATTEMPTS_ORDER)],
                ),
            );
            stmts.push((
                "SELECT pg_notify($1, $2)",
                vec![
                    Val::from(super::cluster::CHANNEL),
                    Val::from(super::cluster::Topic::Attempts.as_str()),
                ],
            ));
        }
        self.write_batch(stmts).await
    }

    async fn release_expired_leases(&self, now: DateTime<Utc>) -> StoreResult<u64> {
        self.give_back("lease_until < $1", ts(now), now).await
    }

    async fn release_claims_starting(&self, prefix: &str, now: DateTime<Utc>) -> StoreResult<u64> {
        let mine = "substr(claim_token, 1, length($1)) = $1";
        self.give_back(mine, prefix.to_string(), now).await
    }

    async fn next_due(&self, now: DateTime<Utc>) -> StoreResult<Option<DateTime<Utc>>> {
        let now = ts(now);
        let due: Option<String> = sqlx::query_scalar(
            "SELECT MIN(next_attempt_at) FROM deliveries WHERE state = 'pending' \
             AND next_attempt_at > $1",
        )
        .bind(&now)
        .fetch_one(self.pool())
        .await?;
        let hold_ends: Option<String> =
            sqlx::query_scalar("SELECT MIN(held_until) FROM webhooks WHERE held_until > $1")
                .bind(&now)
                .fetch_one(self.pool())
                .await?;
        let times = [due, hold_ends]
            .into_iter()
            .flatten()
            .map(|t| parse_ts(&t))
            .collect::<StoreResult<Vec<_>>>()?;
        Ok(times.into_iter().min())
    }

    async fn hold_webhook(&self, id: &str, until: DateTime<Utc>) -> StoreResult<()> {
        self.write_batch(vec![(
            "UPDATE webhooks SET held_until = $2 WHERE id = $1 \
             AND (held_until IS NULL OR held_until < $2)",
            vec![Val::from(id), Val::from(ts(until))],
        )])
        .await
    }

    async fn release_webhook(&self, id: &str) -> StoreResult<()> {
        self.write_batch(vec![(
            "UPDATE webhooks SET held_until = NULL WHERE id = $1",
            vec![Val::from(id)],
        )])
        .await
    }

    async fn prune_deliveries(&self, before: DateTime<Utc>) -> StoreResult<u64> {
        let before = ts(before);
        let gone = self
            .delete_in_batches(
                "DELETE FROM deliveries WHERE id IN (SELECT id FROM deliveries \
                 WHERE state IN ('succeeded', 'failed', 'cancelled') AND updated_at < $1 LIMIT 1000)",
                &before,
            )
            .await?;
        // Only webhook events: other readers of the outbox keep theirs.
        self.delete_in_batches(
            "DELETE FROM events WHERE seq IN (SELECT e.seq FROM events e WHERE e.created_at < $1 \
             AND e.hook_payload IS NOT NULL AND NOT EXISTS \
             (SELECT 1 FROM deliveries d WHERE d.event_seq = e.seq) LIMIT 1000)",
            &before,
        )
        .await?;
        self.delete_in_batches(
            "DELETE FROM notifications WHERE seq IN (SELECT seq FROM notifications \
             WHERE created_at < $1 LIMIT 1000)",
            &before,
        )
        .await?;
        self.delete_in_batches(
            "DELETE FROM emails WHERE id IN (SELECT id FROM emails \
             WHERE state IN ('sent', 'failed') AND updated_at < $1 LIMIT 1000)",
            &before,
        )
        .await?;
        Ok(gone)
    }

    async fn delivery_counts(&self) -> StoreResult<Vec<(String, i64)>> {
        let rows = sqlx::query("SELECT state, COUNT(*) AS n FROM deliveries GROUP BY state")
            .fetch_all(self.pool())
            .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("state")?, r.try_get("n")?)))
            .collect()
    }
}

/// The delivery moved on only while the claim is the caller's; then the attempt and the webhook's
/// failing streak, each only if that move happened (the delivery's new attempt count and time are
/// the mark it left), so a stale worker changes nothing.
impl SqlStore {
    /// Puts the claimed deliveries that match `condition` (on `$1`, bound to `arg`) back to pending,
    /// due at `now`, no attempt spent.
    async fn give_back(
        &self,
        condition: &str,
        arg: String,
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        let sql = format!(
            "UPDATE deliveries SET state = 'pending', next_attempt_at = $2, claim_token = NULL, \
             lease_until = NULL, updated_at = $2 WHERE state = 'sending' AND {condition}"
        );
        let _turn = self.writer_turn().await;
        Ok(sqlx::query(&sql)
            .bind(arg)
            .bind(ts(now))
            .execute(self.pool())
            .await?
            .rows_affected())
    }

    /// Runs `sql` (a `DELETE` of at most 1,000 rows older than `$1`) until it deletes fewer.
    async fn delete_in_batches(&self, sql: &str, before: &str) -> StoreResult<u64> {
        let mut gone = 0;
        loop {
            let n = {
                let _turn = self.writer_turn().await;
                sqlx::query(sql)
                    .bind(before)
                    .execute(self.pool())
                    .await?
                    .rows_affected()
            };
            gone += n;
            if n < 1000 {
                return Ok(gone);
            }
        }
    }
}

/// The lock that numbers delivery attempts in commit order (see [`super::cluster::ORDER_BY_COMMIT`]).
const ATTEMPTS_ORDER: i64 = 0x5357_4154_5450;

fn outcome_statements(o: &Outcome) -> Vec<Stmt> {
    let now = ts(o.now);
    let next = o.next_attempt_at.map(ts);
    let state = if next.is_some() { "pending" } else { o.state };
    let delivery: Stmt = (
        "UPDATE deliveries SET state = $3, attempts = $6, next_attempt_at = $4, \
         claim_token = NULL, lease_until = NULL, updated_at = $5 \
         WHERE id = $1 AND claim_token = $2 AND state = 'sending' AND attempts = $6 - 1",
        vec![
            Val::from(o.delivery_id.as_str()),
            Val::from(o.claim_token.as_str()),
            Val::from(state),
            Val::from(next.clone()),
            Val::from(now.clone()),
            Val::Int(o.number),
        ],
    );
    let attempt: Stmt = (
        "INSERT INTO delivery_attempts (delivery_id, webhook_id, number, started_at, duration_ms, \
         status_code, error_class, error, response, next_attempt_at, manual) \
         SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 WHERE EXISTS \
         (SELECT 1 FROM deliveries WHERE id = $1 AND attempts = $3 AND updated_at = $12 \
           AND claim_token IS NULL)",
        vec![
            Val::from(o.delivery_id.as_str()),
            Val::from(o.webhook_id.as_str()),
            Val::Int(o.number),
            Val::from(ts(o.started_at)),
            Val::Int(o.duration_ms),
            Val::OptInt(o.status_code),
            Val::from(o.error_class.clone()),
            Val::from(o.error.clone()),
            Val::from(o.response.clone()),
            Val::from(next),
            Val::Int(i64::from(o.manual)),
            Val::from(now.clone()),
        ],
    );
    let streak = if o.state == "succeeded" {
        "UPDATE webhooks SET failing_since = NULL WHERE id = $1 AND failing_since IS NOT NULL \
         AND EXISTS (SELECT 1 FROM deliveries WHERE id = $3 AND attempts = $4 \
           AND updated_at = $2 AND claim_token IS NULL)"
    } else {
        "UPDATE webhooks SET failing_since = $2 WHERE id = $1 AND failing_since IS NULL \
         AND EXISTS (SELECT 1 FROM deliveries WHERE id = $3 AND attempts = $4 \
           AND updated_at = $2 AND claim_token IS NULL)"
    };
    let webhook: Stmt = (
        streak,
        vec![
            Val::from(o.webhook_id.as_str()),
            Val::from(now),
            Val::from(o.delivery_id.as_str()),
            Val::Int(o.number),
        ],
    );
    vec![delivery, attempt, webhook]
}
