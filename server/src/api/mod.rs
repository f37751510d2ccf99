//! The HTTP API: one router per area, the shared state, and the layers every response passes through.

pub mod accounts;
pub mod admin;
pub mod analytics;
pub mod catalog;
pub mod endpoints;
pub mod engines;
pub use crate::error;
pub mod extract;
pub mod notifications;
pub mod oauth;
pub mod openapi;
pub mod webhooks;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use crate::services::Context;
use error::{header_safe, ApiError};
use tracing::Instrument;

/// Everything a handler may use. Cheap to clone.
#[derive(Clone)]
pub struct AppState(pub Arc<AppInner>);

/// The services' context (store, clock, catalog, …; reached through `Deref`) and what only HTTP needs.
pub struct AppInner {
    pub services: Context,
    /// Replica logs and the shutdown signal, for the log routes.
    pub runtime: crate::runtime::RuntimeHandle,
    pub body_limit: usize,
    /// The OAuth / OpenID Connect provider.
    pub oauth: Arc<crate::oauth::Provider>,
}

impl std::ops::Deref for AppState {
    type Target = AppInner;
    fn deref(&self) -> &AppInner {
        &self.0
    }
}

impl std::ops::Deref for AppInner {
    type Target = Context;
    fn deref(&self) -> &Context {
        &self.services
    }
}

/// The whole public API, with its layers.
pub fn router(state: AppState) -> Router {
    let body_limit = state.body_limit;
    Router::new()
        .route("/health", get(health))
        .merge(catalog::router())
        .merge(engines::router())
        .merge(endpoints::router())
        .merge(analytics::router())
        .merge(accounts::router())
        .merge(admin::router())
        .merge(oauth::router())
        .merge(openapi::router())
        .merge(webhooks::router())
        .merge(notifications::router())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(middleware::from_fn(response_contract))
        .with_state(state)
}

/// Checks that the caller may `action` the namespace's endpoints (the `/v2` API and deploys).
pub(crate) async fn allow(
    s: &AppState,
    who: &crate::auth::Principal,
    namespace: &str,
    action: crate::auth::Action,
) -> Result<(), ApiError> {
    crate::auth::authorize(
        s.store.as_ref(),
        who,
        namespace,
        crate::auth::Resource::Endpoints,
        action,
    )
    .await?;
    Ok(())
}

/// A long poll: `fetch`'s answer at once when it has something (or `wait` is zero); otherwise the
/// request is held until `seen` changes (then `fetch` is asked again), `wait` runs out or the server
/// begins to stop (`stopping`), which answers what there is at once so that no held request holds up the
/// server's stop.
pub(crate) async fn held<T, F, Fut>(
    wait: std::time::Duration,
    mut seen: tokio::sync::watch::Receiver<u64>,
    mut stopping: tokio::sync::watch::Receiver<bool>,
    mut fetch: F,
) -> Result<Vec<T>, ApiError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Vec<T>, ApiError>>,
{
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let page = fetch().await?;
        if !page.is_empty() || tokio::time::Instant::now() >= deadline || *stopping.borrow() {
            return Ok(page);
        }
        tokio::select! {
            changed = tokio::time::timeout_at(deadline, seen.changed()) => {
                if !matches!(changed, Ok(Ok(()))) {
                    return Ok(page);
                }
            }
            _ = stopping.wait_for(|s| *s) => return Ok(page),
        }
    }
}

async fn health() -> Json<serde_json::Value> {
    Json(serde_json::json!({"status": "ok"}))
}

async fn not_found(State(_): State<AppState>) -> ApiError {
    ApiError::NotFound("no such route".into())
}

async fn method_not_allowed(State(_): State<AppState>) -> ApiError {
    ApiError::MethodNotAllowed
}

/// Gives every response an `x-request-id` (the caller's, when it is a sane one) and makes sure every
/// error is a JSON object with `error` plus an `X-Error-Message` header, whichever layer produced it.
async fn response_contract(req: Request, next: Next) -> Response {
    let request_id = crate::error::request_id(req.headers().get("x-request-id"));
    // Every log line of the request, a 5xx cause included, carries the id the caller sees.
    let span = tracing::info_span!("request", id = %request_id, method = %req.method(), path = %req.uri().path());
    let mut resp = next.run(req).instrument(span).await;
    let status = resp.status();
    // JSON errors stand as they are, and so do the OAuth provider's HTML error pages.
    let shaped = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/html"));
    if (status.is_client_error() || status.is_server_error()) && !shaped {
        resp = rejection_to_json(status);
    }
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}

/// A framework-produced error (a rejected extractor, a timeout) in our error shape.
fn rejection_to_json(status: StatusCode) -> Response {
    let message = status.canonical_reason().unwrap_or("error").to_lowercase();
    let mut resp = (status, Json(serde_json::json!({ "error": message }))).into_response();
    resp.headers_mut()
        .insert("x-error-message", header_safe(&message));
    resp
}
