//! Notifications for people: rows in each recipient's stream and mails in the queue, written in the
//! unit of work of the change that caused them. The recipients of a namespace's notices are the user
//! it is, or the admins of the organization it is.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::any::AnyRow;
use sqlx::Row;

use super::backend::Backend;
use super::batch::Val;
use super::sql::{SqlSession, SqlStore};
use super::{req_ts, ts, StoreResult};

/// A notice to record for the people of `namespace`.
#[derive(Debug, Clone, PartialEq)]
pub struct NewNotice {
    /// e.g. `endpoint.running`, `endpoint.failed`, `webhook.disabled`.
    pub kind: String,
    pub namespace: String,
    /// What it is about: an endpoint's name, a webhook's id.
    pub subject: String,
    pub title: String,
    pub message: Option<String>,
    /// Into the recipients' streams.
    pub push: bool,
    /// Mailed to the recipients that have an address: (subject line, body).
    pub email: Option<(String, String)>,
}

/// A notice as a recipient's stream holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    pub seq: i64,
    pub kind: String,
    pub namespace: String,
    pub subject: String,
    pub title: String,
    pub message: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// A mail the mailer claimed.
#[derive(Debug, Clone, PartialEq)]
pub struct Mail {
    pub id: String,
    pub to: String,
    pub subject: String,
    pub body: String,
    pub attempts: i64,
    /// The claim this mailer holds on it.
    pub claim_token: String,
}

#[async_trait]
pub trait NotificationStore {
    /// Records a notice for the namespace's people (pushed, mailed or both).
    async fn notify(&mut self, notice: &NewNotice, now: DateTime<Utc>) -> StoreResult<()>;
    /// A user's notices after `after` (oldest first), at most `limit`; without `after`, the latest
    /// `limit`.
    async fn notices_of(
        &mut self,
        user_id: &str,
        after: Option<i64>,
        limit: i64,
    ) -> StoreResult<Vec<Notice>>;
}

/// The recipients of a namespace's notices: the user, or the organization's admins.
const RECIPIENTS: &str = "SELECT a.id, a.email FROM accounts a WHERE a.disabled_at IS NULL AND \
     ((a.name = $1 AND a.kind = 'user') OR a.id IN (SELECT m.user_id FROM memberships m \
       JOIN accounts o ON o.id = m.org_id WHERE o.name = $1 AND m.role = 'admin'))";

fn notice_from(row: &AnyRow) -> StoreResult<Notice> {
    Ok(Notice {
        seq: row.try_get("seq")?,
        kind: row.try_get("kind")?,
        namespace: row.try_get("namespace")?,
        subject: row.try_get("subject")?,
        title: row.try_get("title")?,
        message: row.try_get("message")?,
        created_at: req_ts(row, "created_at")?,
    })
}

/// The lock that numbers notices in commit order.
const NOTICES_ORDER: i64 = 0x5357_4e4f_5443;

impl SqlSession {
    /// Writes the notices a unit of work deferred (PostgreSQL), under the lock that numbers them in commit
    /// order (see `cluster::ORDER_BY_COMMIT`). Called last before the commit, so a unit waiting for that
    /// lock takes no other lock after it: no cycle with the row locks units take before.
    pub(crate) async fn flush_notices(&mut self) -> StoreResult<()> {
        if self.deferred_notices.is_empty() {
            return Ok(());
        }
        sqlx::query(super::cluster::ORDER_BY_COMMIT)
            .bind(NOTICES_ORDER)
            .execute(self.db())
            .await?;
        for (n, now) in std::mem::take(&mut self.deferred_notices) {
            self.push_notice(&n, &now).await?;
        }
        Ok(())
    }

    /// Puts a notice into its recipients' streams.
    async fn push_notice(&mut self, n: &NewNotice, now: &str) -> StoreResult<()> {
        let sql = format!(
            "INSERT INTO notifications (user_id, kind, namespace, subject, title, message, \
             created_at) SELECT r.id, $2, $1, $3, $4, $5, $6 FROM ({RECIPIENTS}) r"
        );
        sqlx::query(&sql)
            .bind(&n.namespace)
            .bind(&n.kind)
            .bind(&n.subject)
            .bind(&n.title)
            .bind(&n.message)
            .bind(now)
            .execute(self.db())
            .await?;
        self.noticed = true;
        Ok(())
    }
}

#[async_trait]
impl NotificationStore for SqlSession {
    async fn notify(&mut self, n: &NewNotice, now: DateTime<Utc>) -> StoreResult<()> {
        let now = ts(now);
        if n.push && self.backend == super::Backend::Postgres && self.in_unit() {
            // Numbered in commit order, so a reader paging by `seq` passes over none: written when the
            // unit commits, after the lock that orders them (see `flush_notices`).
            self.deferred_notices.push((n.clone(), now.clone()));
        } else if n.push {
            self.push_notice(n, &now).await?;
        }
        if let Some((subject, body)) = &n.email {
            let sql = format!(
                "INSERT INTO emails (id, to_addr, subject, body, state, attempts, next_attempt_at, \
                 created_at, updated_at) SELECT $2 || '-' || r.id, r.email, $3, $4, 'pending', 0, \
                 $5, $5, $5 FROM ({RECIPIENTS}) r WHERE r.email IS NOT NULL AND r.email <> ''"
            );
            let done = sqlx::query(&sql)
                .bind(&n.namespace)
                .bind(crate::crypto::random_id())
                .bind(subject)
                .bind(body)
                .bind(&now)
                .execute(self.db())
                .await?;
            self.mailed |= done.rows_affected() > 0;
        }
        Ok(())
    }

    async fn notices_of(
        &mut self,
        user_id: &str,
        after: Option<i64>,
        limit: i64,
    ) -> StoreResult<Vec<Notice>> {
        const COLS: &str = "seq, kind, namespace, subject, title, message, created_at";
        let rows = match after {
            Some(after) => {
                sqlx::query(&format!(
                    "SELECT {COLS} FROM notifications WHERE user_id = $1 AND seq > $2 \
                     ORDER BY seq LIMIT $3"
                ))
                .bind(user_id)
                .bind(after)
                .bind(limit)
                .fetch_all(self.db())
                .await?
            }
            None => {
                sqlx::query(&format!(
                    "SELECT {COLS} FROM (SELECT {COLS} FROM notifications WHERE user_id = $1 \
                     ORDER BY seq DESC LIMIT $2) latest ORDER BY seq"
                ))
                .bind(user_id)
                .bind(limit)
                .fetch_all(self.db())
                .await?
            }
        };
        rows.iter().map(notice_from).collect()
    }
}

/// The mailer's side of the queue.
#[async_trait]
pub trait MailQueue {
    /// Claims up to `limit` due mails until `lease_until` (a mailer that dies leaves them to the next).
    async fn claim_mails(
        &self,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        limit: i64,
    ) -> StoreResult<Vec<Mail>>;
    /// Sent (`next` None and no error), failed for good (`next` None, an error), or due again at
    /// `next`; only while `claim_token` is still the mail's (a mailer whose lease ran out records
    /// nothing).
    async fn finish_mail(
        &self,
        id: &str,
        claim_token: &str,
        error: Option<&str>,
        next: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> StoreResult<()>;
    /// Signalled when a unit of work queued mail.
    fn mail_signal(&self) -> &tokio::sync::Notify;
    /// Bumped when a unit of work recorded notices: the streams' followers wait on it.
    fn notices(&self) -> tokio::sync::watch::Receiver<u64>;
}

#[async_trait]
impl MailQueue for SqlStore {
    async fn claim_mails(
        &self,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        limit: i64,
    ) -> StoreResult<Vec<Mail>> {
        let lock = match super::Store::backend(self) {
            Backend::Sqlite => "",
            Backend::Postgres => " FOR UPDATE SKIP LOCKED",
        };
        let token = crate::crypto::random_id();
        let now = ts(now);
        // Leases that ran out count as due: the mailer that held them is gone.
        let claim = format!(
            "UPDATE emails SET state = 'sending', lease_until = $2, claim_token = $4, updated_at = $1 \
             WHERE id IN (SELECT id FROM emails WHERE (state = 'pending' AND next_attempt_at <= $1) \
               OR (state = 'sending' AND lease_until < $1) ORDER BY created_at LIMIT $3{lock})"
        );
        {
            let _turn = self.writer_turn().await;
            sqlx::query(&claim)
                .bind(&now)
                .bind(ts(lease_until))
                .bind(limit)
                .bind(&token)
                .execute(self.pool())
                .await?;
        }
        let rows = sqlx::query(
            "SELECT id, to_addr, subject, body, attempts FROM emails WHERE state = 'sending' \
             AND claim_token = $1",
        )
        .bind(&token)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(Mail {
                    id: r.try_get("id")?,
                    to: r.try_get("to_addr")?,
                    subject: r.try_get("subject")?,
                    body: r.try_get("body")?,
                    attempts: r.try_get("attempts")?,
                    claim_token: token.clone(),
                })
            })
            .collect()
    }

    async fn finish_mail(
        &self,
        id: &str,
        claim_token: &str,
        error: Option<&str>,
        next: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        let state = match (error, next) {
            (_, Some(_)) => "pending",
            (None, None) => "sent",
            (Some(_), None) => "failed",
        };
        self.write_batch(vec![(
            "UPDATE emails SET state = $2, attempts = attempts + 1, next_attempt_at = $3, \
             lease_until = NULL, claim_token = NULL, last_error = $4, updated_at = $5 \
             WHERE id = $1 AND claim_token = $6",
            vec![
                Val::from(id),
                Val::from(state),
                Val::from(next.map(ts)),
                Val::from(error.map(str::to_string)),
                Val::from(ts(now)),
                Val::from(claim_token),
            ],
        )])
        .await
    }

    fn mail_signal(&self) -> &tokio::sync::Notify {
        self.mail_signal_ref()
    }

    fn notices(&self) -> tokio::sync::watch::Receiver<u64> {
        self.notices_ref().subscribe()
    }
}
