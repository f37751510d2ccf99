//! `/api/v1/trusted-publishers/{namespace}`: the CI workflows a namespace lets sign in with their
//! provider's OIDC id token (keyless sign-in at `/oauth/token`), managed by its administrators.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{delete, get};
use axum::{Json, Router};

use super::super::admin::decode;
use super::super::error::ApiResult;
use super::super::extract::{JsonBody, PathParams};
use super::AppState;
use crate::auth::Principal;
use crate::model::oauth::TrustedPublisher;
use crate::services::publishers::{self, PublisherIn};

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/api/v1/trusted-publishers/{namespace}",
            get(list).post(create),
        )
        .route(
            "/api/v1/trusted-publishers/{namespace}/{id}",
            delete(remove),
        )
}

#[utoipa::path(get, path = "/api/v1/trusted-publishers/{namespace}", tag = "oauth",
    params(("namespace" = String, Path)),
    responses((status = 200, body = [TrustedPublisher]),
        (status = 403, description = "not the namespace or an admin of the organization")))]
pub async fn list(
    State(s): State<AppState>,
    who: Principal,
    PathParams(namespace): PathParams<String>,
) -> ApiResult<Json<Vec<TrustedPublisher>>> {
    Ok(Json(publishers::list(&s, &who, &namespace).await?))
}

#[utoipa::path(post, path = "/api/v1/trusted-publishers/{namespace}", tag = "oauth",
    params(("namespace" = String, Path)), request_body = PublisherIn,
    responses((status = 201, body = TrustedPublisher),
        (status = 400, description = "an issuer not in oauth.ci_issuers, or a bad audience, claims or scopes"),
        (status = 403, description = "not the namespace or an admin of the organization")))]
pub async fn create(
    State(s): State<AppState>,
    who: Principal,
    PathParams(namespace): PathParams<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<TrustedPublisher>)> {
    let issuers = &s.oauth.config.ci_issuers;
    let created = publishers::create(&s, &who, &namespace, issuers, decode(body)?).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

#[utoipa::path(delete, path = "/api/v1/trusted-publishers/{namespace}/{id}", tag = "oauth",
    params(("namespace" = String, Path), ("id" = String, Path)),
    responses((status = 204, description = "deleted: its workflows can no longer sign in"),
        (status = 404, description = "no such publisher in the namespace")))]
pub async fn remove(
    State(s): State<AppState>,
    who: Principal,
    PathParams((namespace, id)): PathParams<(String, String)>,
) -> ApiResult<StatusCode> {
    publishers::delete(&s, &who, &namespace, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
