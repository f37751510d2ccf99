//! Endpoint management under `/v2`, as the `huggingface_hub` client drives it: list, create, get,
//! update (deep partial), delete, pause, resume, scale-to-zero, and the hardware list.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};

use super::allow;
use super::error::{ApiError, ApiResult};
use super::extract::{JsonBody, PathParams};
use super::AppState;
use crate::auth::{Action, Principal};
use crate::hardware::HardwareList;
use crate::model::{EndpointOut, EndpointSpec, LifecycleAction};
use crate::services::endpoints as service;
pub use crate::services::endpoints::render;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v2/endpoint/{namespace}", get(list).post(create))
        .route(
            "/v2/endpoint/{namespace}/{name}",
            get(read).put(update).delete(remove),
        )
        .route("/v2/endpoint/{namespace}/{name}/pause", post(pause))
        .route("/v2/endpoint/{namespace}/{name}/resume", post(resume))
        .route(
            "/v2/endpoint/{namespace}/{name}/scale-to-zero",
            post(scale_to_zero),
        )
        .route("/v2/endpoint/{namespace}/{name}/logs", get(logs))
        .route("/v2/endpoint/{namespace}/{name}/replicas", get(replicas))
        .route("/v2/provider/{namespace}", get(hardware))
}

#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct EndpointListOut {
    pub items: Vec<EndpointOut>,
}

#[utoipa::path(get, path = "/v2/endpoint/{namespace}", tag = "endpoints",
    params(("namespace" = String, Path)),
    responses((status = 200, body = EndpointListOut), (status = 401), (status = 403)))]
pub async fn list(
    State(s): State<AppState>,
    who: Principal,
    PathParams(namespace): PathParams<String>,
) -> ApiResult<Json<EndpointListOut>> {
    allow(&s, &who, &namespace, Action::Read).await?;
    let items = service::list(&s, &namespace).await?;
    Ok(Json(EndpointListOut {
        items: items.iter().map(render).collect(),
    }))
}

#[utoipa::path(post, path = "/v2/endpoint/{namespace}", tag = "endpoints",
    params(("namespace" = String, Path)), request_body = EndpointSpec,
    responses((status = 200, body = EndpointOut), (status = 400), (status = 401), (status = 403), (status = 409)))]
pub async fn create(
    State(s): State<AppState>,
    who: Principal,
    PathParams(namespace): PathParams<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<EndpointOut>> {
    allow(&s, &who, &namespace, Action::Change).await?;
    let rec = service::create(&s, &who, &namespace, body).await?;
    Ok(Json(render(&rec)))
}

#[utoipa::path(get, path = "/v2/endpoint/{namespace}/{name}", tag = "endpoints",
    params(("namespace" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = EndpointOut), (status = 401), (status = 403), (status = 404)))]
pub async fn read(
    State(s): State<AppState>,
    who: Principal,
    PathParams((namespace, name)): PathParams<(String, String)>,
) -> ApiResult<Json<EndpointOut>> {
    allow(&s, &who, &namespace, Action::Read).await?;
    Ok(Json(render(&service::get(&s, &namespace, &name).await?)))
}

#[utoipa::path(put, path = "/v2/endpoint/{namespace}/{name}", tag = "endpoints",
    params(("namespace" = String, Path), ("name" = String, Path)),
    request_body(content = Object, description = "any part of the endpoint spec; nested objects are partial too"),
    responses((status = 200, body = EndpointOut), (status = 400), (status = 401), (status = 403), (status = 404)))]
pub async fn update(
    State(s): State<AppState>,
    who: Principal,
    PathParams((namespace, name)): PathParams<(String, String)>,
    JsonBody(patch): JsonBody,
) -> ApiResult<Json<EndpointOut>> {
    allow(&s, &who, &namespace, Action::Change).await?;
    let rec = service::update(&s, &who, &namespace, &name, patch).await?;
    Ok(Json(render(&rec)))
}

#[utoipa::path(delete, path = "/v2/endpoint/{namespace}/{name}", tag = "endpoints",
    params(("namespace" = String, Path), ("name" = String, Path)),
    responses((status = 204), (status = 401), (status = 403), (status = 404)))]
pub async fn remove(
    State(s): State<AppState>,
    who: Principal,
    PathParams((namespace, name)): PathParams<(String, String)>,
) -> ApiResult<StatusCode> {
    allow(&s, &who, &namespace, Action::Change).await?;
    service::delete(&s, &who, &namespace, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn lifecycle(
    s: AppState,
    who: Principal,
    namespace: String,
    name: String,
    action: LifecycleAction,
) -> ApiResult<Json<EndpointOut>> {
    allow(&s, &who, &namespace, Action::Change).await?;
    let rec = service::lifecycle(&s, &who, &namespace, &name, action).await?;
    Ok(Json(render(&rec)))
}

#[utoipa::path(post, path = "/v2/endpoint/{namespace}/{name}/pause", tag = "endpoints",
    params(("namespace" = String, Path), ("name" = String, Path)), responses((status = 200, body = EndpointOut)))]
pub async fn pause(
    State(s): State<AppState>,
    who: Principal,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> ApiResult<Json<EndpointOut>> {
    lifecycle(s, who, ns, name, LifecycleAction::Pause).await
}

#[utoipa::path(post, path = "/v2/endpoint/{namespace}/{name}/resume", tag = "endpoints",
    params(("namespace" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = EndpointOut), (status = 400, description = "already running")))]
pub async fn resume(
    State(s): State<AppState>,
    who: Principal,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> ApiResult<Json<EndpointOut>> {
    lifecycle(s, who, ns, name, LifecycleAction::Resume).await
}

#[utoipa::path(post, path = "/v2/endpoint/{namespace}/{name}/scale-to-zero", tag = "endpoints",
    params(("namespace" = String, Path), ("name" = String, Path)), responses((status = 200, body = EndpointOut)))]
pub async fn scale_to_zero(
    State(s): State<AppState>,
    who: Principal,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> ApiResult<Json<EndpointOut>> {
    lifecycle(s, who, ns, name, LifecycleAction::ScaleToZero).await
}

#[utoipa::path(get, path = "/v2/provider/{namespace}", tag = "endpoints",
    params(("namespace" = String, Path)), responses((status = 200, body = HardwareList)))]
pub async fn hardware(
    State(s): State<AppState>,
    who: Principal,
    PathParams(namespace): PathParams<String>,
) -> ApiResult<Json<HardwareList>> {
    allow(&s, &who, &namespace, Action::Read).await?;
    Ok(Json(
        crate::services::quotas::hardware_for(&s, &namespace).await?,
    ))
}

/// One ready replica as this server's proxy sees it.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaOut {
    pub id: String,
    /// Where the proxy reaches it (`ip:port`).
    pub address: String,
    /// Requests this server's proxy has in flight to it.
    pub in_flight: u32,
    /// Requests waiting in its engine that others sent, and its KV-cache use (0 to 1), as last read from its
    /// `/metrics` (by the balancer `least_load` or the scaler's `inferenceLoad`); null when not read lately.
    pub queue: Option<f64>,
    pub kv_cache: Option<f64>,
}

#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ReplicaListOut {
    pub items: Vec<ReplicaOut>,
}

#[utoipa::path(get, path = "/v2/endpoint/{namespace}/{name}/replicas", tag = "endpoints",
    params(("namespace" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = ReplicaListOut, description = "the ready replicas, with their load"),
        (status = 401), (status = 403), (status = 404)))]
pub async fn replicas(
    State(s): State<AppState>,
    who: Principal,
    PathParams((namespace, name)): PathParams<(String, String)>,
) -> ApiResult<Json<ReplicaListOut>> {
    allow(&s, &who, &namespace, Action::Read).await?;
    service::get(&s, &namespace, &name).await?;
    let table = s.runtime.table.borrow().clone();
    let now = s.clock.now_millis();
    let fresh = crate::proxy::balance::ENGINE_FIGURES_FRESH_MS;
    let backends = table.get(&namespace, &name).map(|r| r.backends.clone());
    let items = backends
        .unwrap_or_default()
        .iter()
        .map(|b| {
            let figures = b.engine.fresh(now, fresh);
            ReplicaOut {
                id: b.replica_id.clone(),
                address: b.addr.to_string(),
                in_flight: b.in_flight.get(),
                queue: figures.map(|f| f.0),
                kv_cache: figures.map(|f| f.1),
            }
        })
        .collect();
    Ok(Json(ReplicaListOut { items }))
}

/// Query of the logs route.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct LogsQuery {
    /// The last N lines (default 200, at most 10,000).
    pub tail: Option<usize>,
    /// Only lines from this time on (RFC 3339).
    pub since: Option<String>,
    /// Keep the response open and send new lines as they come.
    pub follow: Option<bool>,
}

#[utoipa::path(get, path = "/v2/endpoint/{namespace}/{name}/logs", tag = "endpoints",
    params(("namespace" = String, Path), ("name" = String, Path), LogsQuery),
    responses((status = 200, description = "replica output, one line each: time, replica, stream, text", content_type = "text/plain"),
        (status = 401), (status = 403), (status = 404)))]
pub async fn logs(
    State(s): State<AppState>,
    who: Principal,
    PathParams((namespace, name)): PathParams<(String, String)>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> ApiResult<axum::response::Response> {
    use axum::response::IntoResponse;
    allow(&s, &who, &namespace, Action::Read).await?;
    service::get(&s, &namespace, &name).await?;
    let q: LogsQuery = serde_urlencoded::from_str(query.as_deref().unwrap_or("")).map_err(|e| {
        ApiError::InvalidQuery {
            message: format!("invalid query: {e}"),
            details: serde_json::json!({ "query": e.to_string() }),
        }
    })?;
    let since = match &q.since {
        Some(t) => Some(
            chrono::DateTime::parse_from_rfc3339(t)
                .map_err(|e| ApiError::InvalidQuery {
                    message: format!("since: {e}"),
                    details: serde_json::json!({ "since": "an RFC 3339 time, e.g. 2026-11-22T10:00:00Z" }),
                })?
                .with_timezone(&chrono::Utc),
        ),
        None => None,
    };
    let tail = q.tail.unwrap_or(200).min(10_000);
    // Subscribe before reading, so no line falls between the two.
    let feed = s.runtime.logs.subscribe();
    let past: String = s
        .runtime
        .logs
        .read(&namespace, &name, since, Some(tail))
        .iter()
        .map(|l| l.render())
        .collect();
    let content_type = [(
        axum::http::header::CONTENT_TYPE,
        "text/plain; charset=utf-8",
    )];
    if q.follow != Some(true) {
        return Ok((content_type, past).into_response());
    }
    let key = (namespace, name);
    let stop = s.runtime.stopping();
    let live =
        futures_util::stream::unfold((feed, stop, key), |(mut feed, mut stop, key)| async move {
            loop {
                let got = tokio::select! {
                    got = feed.recv() => got,
                    _ = stop.wait_for(|s| *s) => return None,
                };
                match got {
                    Ok((k, line)) if k == key => {
                        return Some((
                            Ok::<_, std::convert::Infallible>(line.render()),
                            (feed, stop, key),
                        ))
                    }
                    Ok(_) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        return Some((
                            Ok(format!("… {n} lines skipped (reader too slow)\n")),
                            (feed, stop, key),
                        ))
                    }
                    Err(_) => return None,
                }
            }
        });
    let head = futures_util::stream::once(async move { Ok::<_, std::convert::Infallible>(past) });
    let body = axum::body::Body::from_stream(futures_util::StreamExt::chain(head, live));
    Ok((content_type, body).into_response())
}
