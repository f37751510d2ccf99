//! `/api/v1/notifications`: the caller's notices (endpoint state changes that need someone, webhooks the
//! server disabled), as a page to poll or hold (`after` + `wait`), or as a stream of server-sent events.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::routing::get;
use axum::{Json, Router};
use futures_util::stream::Stream;
use serde_json::json;

use super::error::{ApiError, ApiResult};
use super::extract::QueryPairs;
use super::AppState;
use crate::auth::Principal;
use crate::model::notice::NoticeOut;
use crate::store::Notice;

/// Longest a `wait` holds the request.
const MAX_WAIT: u64 = 30;
/// Most notices one page holds.
const MAX_PAGE: i64 = 500;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/notifications", get(list))
        .route("/api/v1/notifications/stream", get(stream))
}

fn render(n: Notice) -> NoticeOut {
    NoticeOut {
        seq: n.seq,
        at: n.created_at,
        kind: n.kind,
        namespace: n.namespace,
        subject: n.subject,
        title: n.title,
        message: n.message,
    }
}

/// `after`, `limit`, `wait`.
fn query(pairs: Vec<(String, String)>) -> ApiResult<(Option<i64>, i64, u64)> {
    let (mut after, mut limit, mut wait) = (None, 50, 0);
    for (key, value) in pairs {
        let n = value.parse::<i64>().map_err(|_| ApiError::InvalidQuery {
            message: format!("{key} must be a whole number"),
            details: json!({ key.clone(): value.clone() }),
        })?;
        match key.as_str() {
            "after" => after = Some(n),
            "limit" => limit = n.clamp(1, MAX_PAGE),
            "wait" => wait = n.clamp(0, MAX_WAIT as i64) as u64,
            _ => {
                return Err(ApiError::InvalidQuery {
                    message: format!("unknown query parameter {key:?}"),
                    details: json!({ "allowed": ["after", "limit", "wait"] }),
                })
            }
        }
    }
    Ok((after, limit, wait))
}

/// The caller's notices after `after` that its credential may see, and the last seq read.
async fn page(
    s: &AppState,
    who: &Principal,
    after: Option<i64>,
    limit: i64,
) -> ApiResult<(Vec<NoticeOut>, Option<i64>)> {
    let mut session = s.store.read().await?;
    let rows = session.notices_of(&who.account.id, after, limit).await?;
    let last = rows.last().map(|n| n.seq);
    let shown = rows.into_iter().filter(|n| may_see(who, n)).map(render);
    Ok((shown.collect(), last))
}

/// A notice is shown to a credential that could read what it is about: endpoints (`read-endpoints`)
/// or webhooks (`webhooks`), in a namespace it reaches (the user's own, or a granted organization).
fn may_see(who: &Principal, n: &Notice) -> bool {
    use crate::auth::{Action, Resource};
    let resource = match n.kind.starts_with("webhook.") {
        true => Resource::Webhooks,
        false => Resource::Endpoints,
    };
    let scoped = who.scopes_allow(resource, Action::Read);
    let reached = match n.namespace == who.account.name {
        true => who.personal,
        false => who.reaches_org(&n.namespace),
    };
    scoped && reached
}

#[utoipa::path(get, path = "/api/v1/notifications", tag = "accounts",
    params(("after" = Option<i64>, Query, description = "only notices with a greater seq (to follow)"),
        ("limit" = Option<i64>, Query, description = "at most this many (default 50, at most 500)"),
        ("wait" = Option<i64>, Query, description = "with `after`: hold up to this many seconds (at most 30) until one comes")),
    responses((status = 200, body = [NoticeOut], description = "the caller's notices, oldest first; without `after`, the latest")))]
pub async fn list(
    State(s): State<AppState>,
    who: Principal,
    QueryPairs(pairs): QueryPairs,
) -> ApiResult<Json<Vec<NoticeOut>>> {
    let (after, limit, wait) = query(pairs)?;
    let wait = Duration::from_secs(if after.is_some() { wait } else { 0 });
    let notices = super::held(wait, s.store.notices(), s.runtime.stopping(), || async {
        Ok(page(&s, &who, after, limit).await?.0)
    })
    .await?;
    Ok(Json(notices))
}

#[utoipa::path(get, path = "/api/v1/notifications/stream", tag = "accounts",
    params(("after" = Option<i64>, Query, description = "start after this seq (default: only new ones)"),
        ("Last-Event-ID" = Option<i64>, Header, description = "the last event's id a reconnecting client saw: start after it (over `after`)")),
    responses((status = 200, content_type = "text/event-stream",
        description = "server-sent events: one `notice` event per notice (data: the notice as JSON, id: its seq)")))]
pub async fn stream(
    State(s): State<AppState>,
    who: Principal,
    headers: HeaderMap,
    QueryPairs(pairs): QueryPairs,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    let (after, _, _) = query(pairs)?;
    // A client that reconnects (an `EventSource`) says where it was; that is newer than the URL's `after`.
    let start = match last_event_id(&headers)?.or(after) {
        Some(a) => a,
        None => page(&s, &who, None, 1).await?.1.unwrap_or(0),
    };
    let follow = Follow {
        seen: s.store.notices(),
        stopping: s.runtime.stopping(),
        s,
        who,
        cursor: start,
        queue: std::collections::VecDeque::new(),
    };
    let events = futures_util::stream::unfold(follow, |mut f| async move {
        let n = f.next().await?;
        let data = serde_json::to_string(&n).unwrap_or_default();
        let event = Event::default()
            .event("notice")
            .id(n.seq.to_string())
            .data(data);
        Some((Ok(event), f))
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}

/// The `Last-Event-ID` a reconnecting client sends: the seq of the last notice it had.
fn last_event_id(headers: &HeaderMap) -> ApiResult<Option<i64>> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or("").trim();
    match text.parse::<i64>() {
        Ok(seq) => Ok(Some(seq)),
        // An empty one is a client that has seen no event yet.
        Err(_) if text.is_empty() => Ok(None),
        Err(_) => Err(ApiError::BadRequest(
            "Last-Event-ID must be the id of a notice event (a whole number)".into(),
        )),
    }
}

/// A follower of one user's notices.
struct Follow {
    s: AppState,
    who: Principal,
    cursor: i64,
    queue: std::collections::VecDeque<NoticeOut>,
    seen: tokio::sync::watch::Receiver<u64>,
    stopping: tokio::sync::watch::Receiver<bool>,
}

impl Follow {
    /// The next notice, waiting for it; `None` once the server stops.
    async fn next(&mut self) -> Option<NoticeOut> {
        loop {
            if let Some(n) = self.queue.pop_front() {
                return Some(n);
            }
            if *self.stopping.borrow() {
                return None;
            }
            if let Ok((shown, Some(last))) =
                page(&self.s, &self.who, Some(self.cursor), MAX_PAGE).await
            {
                // Past what this credential may not see, too.
                self.cursor = last;
                self.queue.extend(shown);
                continue;
            }
            tokio::select! {
                _ = self.seen.changed() => {}
                _ = self.stopping.changed() => {}
                _ = tokio::time::sleep(Duration::from_secs(15)) => {}
            }
        }
    }
}
