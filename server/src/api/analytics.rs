//! `/api/v1/endpoints/{namespace}/{name}/analytics` and `…/decisions`: what happened to an endpoint over
//! time, with the endpoint's read permission.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use super::allow;
use super::error::{ApiError, ApiResult};
use super::extract::{PathParams, QueryPairs};
use super::AppState;
use crate::auth::{Action, Principal};
use crate::model::analytics::{AnalyticsOut, DecisionListOut};
use crate::services::analytics::{self as service, Asked};

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/api/v1/endpoints/{namespace}/{name}/analytics",
            get(analytics),
        )
        .route(
            "/api/v1/endpoints/{namespace}/{name}/decisions",
            get(decisions),
        )
}

/// The query's pairs by the names `allowed`; another name, or one given twice, is a 400.
fn named<const N: usize>(
    pairs: Vec<(String, String)>,
    allowed: [&str; N],
) -> ApiResult<[Option<String>; N]> {
    let mut out: [Option<String>; N] = std::array::from_fn(|_| None);
    for (key, value) in pairs {
        let Some(i) = allowed.iter().position(|a| *a == key) else {
            return Err(ApiError::InvalidQuery {
                message: format!("unknown query parameter {key:?}"),
                details: json!({ "allowed": allowed.as_slice() }),
            });
        };
        if out[i].replace(value).is_some() {
            return Err(ApiError::InvalidQuery {
                message: format!("query parameter {key:?} given twice"),
                details: json!({ "parameter": key }),
            });
        }
    }
    Ok(out)
}

#[utoipa::path(get, path = "/api/v1/endpoints/{namespace}/{name}/analytics", tag = "endpoints",
    params(("namespace" = String, Path), ("name" = String, Path),
        ("from" = Option<String>, Query, description = "start (RFC 3339 or Unix seconds); default an hour before `to`"),
        ("to" = Option<String>, Query, description = "end (RFC 3339 or Unix seconds); default now"),
        ("step" = Option<String>, Query, description = "seconds between points (or with s, m, h, d): a multiple of the resolution, 10 s within the last `analytics.keep_10s_s`, else 60 s; default about 120 points, at most 2000")),
    responses((status = 200, body = AnalyticsOut, description = "the endpoint's series, every server's samples added up"),
        (status = 400), (status = 401), (status = 403), (status = 404)))]
pub async fn analytics(
    State(s): State<AppState>,
    who: Principal,
    PathParams((namespace, name)): PathParams<(String, String)>,
    QueryPairs(pairs): QueryPairs,
) -> ApiResult<Json<AnalyticsOut>> {
    allow(&s, &who, &namespace, Action::Read).await?;
    let [from, to, step] = named(pairs, ["from", "to", "step"])?;
    let asked = Asked { from, to, step };
    Ok(Json(service::series(&s, &namespace, &name, &asked).await?))
}

#[utoipa::path(get, path = "/api/v1/endpoints/{namespace}/{name}/decisions", tag = "endpoints",
    params(("namespace" = String, Path), ("name" = String, Path),
        ("since" = Option<String>, Query, description = "only decisions at or after this time (RFC 3339 or Unix seconds)"),
        ("limit" = Option<u32>, Query, description = "at most this many (default 100, 1 to 1000)")),
    responses((status = 200, body = DecisionListOut, description = "what the runtime decided and why, newest first"),
        (status = 400), (status = 401), (status = 403), (status = 404)))]
pub async fn decisions(
    State(s): State<AppState>,
    who: Principal,
    PathParams((namespace, name)): PathParams<(String, String)>,
    QueryPairs(pairs): QueryPairs,
) -> ApiResult<Json<DecisionListOut>> {
    allow(&s, &who, &namespace, Action::Read).await?;
    let [since, limit] = named(pairs, ["since", "limit"])?;
    let limit = match limit {
        Some(v) => Some(v.parse::<u32>().map_err(|_| ApiError::InvalidQuery {
            message: "limit must be a whole number".into(),
            details: json!({ "limit": v }),
        })?),
        None => None,
    };
    let items = service::decisions(&s, &namespace, &name, since.as_deref(), limit).await?;
    Ok(Json(DecisionListOut { items }))
}
