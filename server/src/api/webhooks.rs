//! `/api/settings/webhooks`: webhook management as the hub's client calls it (a bare array for the
//! list, `{"webhook": …}` for one, update by POST), plus the activity of a webhook, replays and
//! signing-secret rotation.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;

use super::admin::decode;
use super::error::{ApiError, ApiResult};
use super::extract::{JsonBody, OptionalJsonBody, PathParams, QueryPairs};
use super::AppState;
use crate::auth::Principal;
use crate::model::webhook::{AttemptOut, WebhookIn, WebhookOut, WebhookUpdate};
use crate::services::webhooks;

/// Longest a `wait` on the activity holds the request.
const MAX_WAIT: Duration = Duration::from_secs(30);

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/settings/webhooks", get(list).post(create))
        .route(
            "/api/settings/webhooks/{id}",
            get(get_one).post(update).delete(remove),
        )
        .route("/api/settings/webhooks/{id}/enable", post(enable))
        .route("/api/settings/webhooks/{id}/disable", post(disable))
        .route("/api/settings/webhooks/{id}/deliveries", get(deliveries))
        .route(
            "/api/settings/webhooks/{id}/deliveries/{delivery}/replay",
            post(replay),
        )
        .route("/api/settings/webhooks/{id}/replay", post(replay_failed))
        .route(
            "/api/settings/webhooks/{id}/signing-secret",
            get(signing_secret),
        )
        .route("/api/settings/webhooks/{id}/rotate-secret", post(rotate))
}

/// `{"webhook": …}`, as the hub answers for one webhook.
#[derive(Serialize, ToSchema)]
pub struct WebhookEnvelope {
    pub webhook: WebhookOut,
}

/// A created webhook and its signing secret (Standard Webhooks, `whsec_…`).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedWebhook {
    pub webhook: WebhookOut,
    pub signing_secret: String,
}

#[derive(Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SigningSecret {
    pub signing_secret: String,
}

#[derive(Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RotateIn {
    /// How long the previous secrets keep signing (default 86400, at most 604800).
    pub grace_seconds: Option<i64>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayIn {
    /// Every failed or cancelled delivery created since then goes again.
    #[serde(with = "crate::model::wire::rfc3339_z")]
    #[schema(value_type = String)]
    pub since: DateTime<Utc>,
}

#[utoipa::path(get, path = "/api/settings/webhooks", tag = "webhooks",
    responses((status = 200, body = [WebhookOut], description = "the caller's webhooks and those of organizations they administer")))]
pub async fn list(State(s): State<AppState>, who: Principal) -> ApiResult<Json<Vec<WebhookOut>>> {
    Ok(Json(webhooks::list(&s, &who).await?))
}

#[utoipa::path(post, path = "/api/settings/webhooks", tag = "webhooks", request_body = WebhookIn,
    responses((status = 200, body = CreatedWebhook),
        (status = 400, description = "bad watched items, domains, URL (one the outbound guard refuses) or secret")))]
pub async fn create(
    State(s): State<AppState>,
    who: Principal,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<CreatedWebhook>> {
    let (webhook, signing_secret) = webhooks::create(&s, &who, decode(body)?).await?;
    Ok(Json(CreatedWebhook {
        webhook,
        signing_secret,
    }))
}

#[utoipa::path(get, path = "/api/settings/webhooks/{id}", tag = "webhooks",
    params(("id" = String, Path)), responses((status = 200, body = WebhookEnvelope), (status = 404)))]
pub async fn get_one(
    State(s): State<AppState>,
    who: Principal,
    PathParams(id): PathParams<String>,
) -> ApiResult<Json<WebhookEnvelope>> {
    let webhook = webhooks::get(&s, &who, &id).await?;
    Ok(Json(WebhookEnvelope { webhook }))
}

#[utoipa::path(post, path = "/api/settings/webhooks/{id}", tag = "webhooks",
    params(("id" = String, Path)), request_body = WebhookUpdate,
    responses((status = 200, body = WebhookEnvelope), (status = 400), (status = 404)))]
pub async fn update(
    State(s): State<AppState>,
    who: Principal,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<WebhookEnvelope>> {
    let webhook = webhooks::update(&s, &who, &id, decode(body)?).await?;
    Ok(Json(WebhookEnvelope { webhook }))
}

#[utoipa::path(post, path = "/api/settings/webhooks/{id}/enable", tag = "webhooks",
    params(("id" = String, Path)), responses((status = 200, body = WebhookEnvelope)))]
pub async fn enable(
    State(s): State<AppState>,
    who: Principal,
    PathParams(id): PathParams<String>,
) -> ApiResult<Json<WebhookEnvelope>> {
    let webhook = webhooks::set_enabled(&s, &who, &id, true).await?;
    Ok(Json(WebhookEnvelope { webhook }))
}

#[utoipa::path(post, path = "/api/settings/webhooks/{id}/disable", tag = "webhooks",
    params(("id" = String, Path)),
    responses((status = 200, body = WebhookEnvelope, description = "disabled; pending deliveries cancelled")))]
pub async fn disable(
    State(s): State<AppState>,
    who: Principal,
    PathParams(id): PathParams<String>,
) -> ApiResult<Json<WebhookEnvelope>> {
    let webhook = webhooks::set_enabled(&s, &who, &id, false).await?;
    Ok(Json(WebhookEnvelope { webhook }))
}

#[utoipa::path(delete, path = "/api/settings/webhooks/{id}", tag = "webhooks",
    params(("id" = String, Path)), responses((status = 200), (status = 404)))]
pub async fn remove(
    State(s): State<AppState>,
    who: Principal,
    PathParams(id): PathParams<String>,
) -> ApiResult<Json<Value>> {
    webhooks::delete(&s, &who, &id).await?;
    Ok(Json(json!({})))
}

/// `after`, `before`, `limit` and `wait` (seconds) of the activity query.
struct ActivityQuery {
    after: Option<i64>,
    before: Option<i64>,
    limit: Option<i64>,
    wait: Duration,
}

fn activity_query(pairs: Vec<(String, String)>) -> ApiResult<ActivityQuery> {
    let mut q = ActivityQuery {
        after: None,
        before: None,
        limit: None,
        wait: Duration::ZERO,
    };
    for (key, value) in pairs {
        let bad = || ApiError::InvalidQuery {
            message: format!("{key} must be a whole number"),
            details: json!({ key.clone(): value.clone() }),
        };
        let n = value.parse::<i64>().map_err(|_| bad())?;
        match key.as_str() {
            "after" => q.after = Some(n),
            "before" => q.before = Some(n),
            "limit" => q.limit = Some(n),
            "wait" => q.wait = Duration::from_secs(n.clamp(0, MAX_WAIT.as_secs() as i64) as u64),
            _ => {
                return Err(ApiError::InvalidQuery {
                    message: format!("unknown query parameter {key:?}"),
                    details: json!({ "allowed": ["after", "before", "limit", "wait"] }),
                })
            }
        }
    }
    Ok(q)
}

#[utoipa::path(get, path = "/api/settings/webhooks/{id}/deliveries", tag = "webhooks",
    params(("id" = String, Path),
        ("after" = Option<i64>, Query, description = "only attempts with a greater seq (to follow)"),
        ("before" = Option<i64>, Query, description = "only attempts with a smaller seq (to page back)"),
        ("limit" = Option<i64>, Query, description = "at most this many (default 100, at most 500)"),
        ("wait" = Option<i64>, Query, description = "with `after`: hold up to this many seconds (at most 30) until an attempt comes")),
    responses((status = 200, body = [AttemptOut], description = "attempts, newest first")))]
pub async fn deliveries(
    State(s): State<AppState>,
    who: Principal,
    PathParams(id): PathParams<String>,
    QueryPairs(pairs): QueryPairs,
) -> ApiResult<Json<Vec<AttemptOut>>> {
    let q = activity_query(pairs)?;
    let wait = if q.after.is_some() {
        q.wait
    } else {
        Duration::ZERO
    };
    // Who manages it is asked once; a follower reads again at each recorded attempt.
    webhooks::must_manage(&s, &who, &id).await?;
    let page = super::held(
        wait,
        s.activity.subscribe(),
        s.runtime.stopping(),
        || async { Ok(webhooks::attempts_of_managed(&s, &id, q.after, q.before, q.limit).await?) },
    )
    .await?;
    Ok(Json(page))
}

#[utoipa::path(post, path = "/api/settings/webhooks/{id}/deliveries/{delivery}/replay", tag = "webhooks",
    params(("id" = String, Path), ("delivery" = String, Path)),
    responses((status = 202, description = "queued: `{\"deliveryId\"}` of the new, manual delivery")))]
pub async fn replay(
    State(s): State<AppState>,
    who: Principal,
    PathParams((id, delivery)): PathParams<(String, String)>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let new = webhooks::replay(&s, &who, &id, &delivery).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({ "deliveryId": new }))))
}

#[utoipa::path(post, path = "/api/settings/webhooks/{id}/replay", tag = "webhooks",
    params(("id" = String, Path)), request_body = ReplayIn,
    responses((status = 202, description = "`{\"replayed\": n}`: failed and cancelled deliveries since then, due again")))]
pub async fn replay_failed(
    State(s): State<AppState>,
    who: Principal,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let body: ReplayIn = decode(body)?;
    let n = webhooks::replay_failed(&s, &who, &id, body.since).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({ "replayed": n }))))
}

#[utoipa::path(get, path = "/api/settings/webhooks/{id}/signing-secret", tag = "webhooks",
    params(("id" = String, Path)), responses((status = 200, body = SigningSecret)))]
pub async fn signing_secret(
    State(s): State<AppState>,
    who: Principal,
    PathParams(id): PathParams<String>,
) -> ApiResult<Json<SigningSecret>> {
    let signing_secret = webhooks::signing_secret(&s, &who, &id).await?;
    Ok(Json(SigningSecret { signing_secret }))
}

#[utoipa::path(post, path = "/api/settings/webhooks/{id}/rotate-secret", tag = "webhooks",
    params(("id" = String, Path)), request_body = RotateIn,
    responses((status = 200, body = SigningSecret, description = "the new secret; the previous ones sign too until their grace period ends")))]
pub async fn rotate(
    State(s): State<AppState>,
    who: Principal,
    PathParams(id): PathParams<String>,
    OptionalJsonBody(body): OptionalJsonBody,
) -> ApiResult<Json<SigningSecret>> {
    // The body is optional: its one field has a default.
    let body: RotateIn = body.map(decode).transpose()?.unwrap_or_default();
    let grace = match body.grace_seconds {
        None => None,
        Some(g) => Some(chrono::Duration::try_seconds(g).ok_or_else(|| {
            ApiError::invalid_body(vec![crate::model::Issue::new(
                "graceSeconds",
                "out of range",
            )])
        })?),
    };
    let signing_secret = webhooks::rotate_secret(&s, &who, &id, grace).await?;
    Ok(Json(SigningSecret { signing_secret }))
}
