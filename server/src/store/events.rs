//! The outbox: one row per change, appended in the change's own unit of work and read in order.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::any::AnyRow;
use sqlx::Row;

use super::sql::SqlSession;
use super::{json_err, parse_ts, ts, StoreResult};
use crate::crypto::random_id;
use crate::model::event::EventKind;

/// A change to record, in the words of what changed.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub kind: EventKind,
    /// The namespace that owns the subject (an endpoint's namespace, a catalog item's author).
    pub namespace: String,
    /// What changed: an endpoint's name, a catalog item's repo id.
    pub subject: String,
    pub payload: serde_json::Value,
    /// What webhooks are sent (the hub's payload v3, but for `id` and `webhook`); `None`: no
    /// webhook hears of it.
    pub hook: Option<serde_json::Value>,
}

/// An event as stored: `seq` orders the outbox; `id` is stable for consumers.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub seq: i64,
    pub id: String,
    pub kind: EventKind,
    pub namespace: String,
    pub subject: String,
    pub payload: serde_json::Value,
    pub created_at: DateTime<Utc>,
}

#[async_trait]
pub trait EventStore {
    /// Appends an event; in a unit of work it commits with the change or not at all.
    async fn append_event(&mut self, event: NewEvent, now: DateTime<Utc>) -> StoreResult<Event>;
    /// Events after `seq`, oldest first, at most `limit`.
    async fn events_after(&mut self, seq: i64, limit: i64) -> StoreResult<Vec<Event>>;
}

fn event_from(row: &AnyRow) -> StoreResult<Event> {
    let kind: String = row.try_get("kind")?;
    let payload: String = row.try_get("payload")?;
    Ok(Event {
        seq: row.try_get("seq")?,
        id: row.try_get("id")?,
        kind: EventKind::parse(&kind).ok_or_else(|| {
            super::StoreError::Backend(format!("unknown event kind {kind:?} in store"))
        })?,
        namespace: row.try_get("namespace")?,
        subject: row.try_get("subject")?,
        payload: serde_json::from_str(&payload).map_err(json_err)?,
        created_at: parse_ts(&row.try_get::<String, _>("created_at")?)?,
    })
}

#[async_trait]
impl EventStore for SqlSession {
    async fn append_event(&mut self, event: NewEvent, now: DateTime<Utc>) -> StoreResult<Event> {
        let id = random_id();
        let payload = serde_json::to_string(&event.payload).map_err(json_err)?;
        let hook = match &event.hook {
            Some(serde_json::Value::Object(fields)) => {
                let mut with_id = serde_json::Map::with_capacity(fields.len() + 1);
                with_id.insert("id".into(), serde_json::Value::String(id.clone()));
                with_id.extend(fields.clone());
                Some(serde_json::to_string(&with_id).map_err(json_err)?)
            }
            _ => None,
        };
        let seq: i64 = sqlx::query_scalar(
            "INSERT INTO events (id, kind, namespace, subject, payload, created_at, hook_payload) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING seq",
        )
        .bind(&id)
        .bind(event.kind.as_str())
        .bind(&event.namespace)
        .bind(&event.subject)
        .bind(payload)
        .bind(ts(now))
        .bind(&hook)
        .fetch_one(self.db())
        .await?;
        if hook.is_some() {
            let domain = crate::model::webhook::Domain::of(event.kind);
            self.fan_out(&id, seq, domain, &event.namespace, &event.subject, now)
                .await?;
        }
        Ok(Event {
            seq,
            id,
            kind: event.kind,
            namespace: event.namespace,
            subject: event.subject,
            payload: event.payload,
            created_at: super::parse_ts(&ts(now))?,
        })
    }

    async fn events_after(&mut self, seq: i64, limit: i64) -> StoreResult<Vec<Event>> {
        let rows = sqlx::query(
            "SELECT seq, id, kind, namespace, subject, payload, created_at FROM events \
             WHERE seq > $1 ORDER BY seq LIMIT $2",
        )
        .bind(seq)
        .bind(limit)
        .fetch_all(self.db())
        .await?;
        rows.iter().map(event_from).collect()
    }
}
