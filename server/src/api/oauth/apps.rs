//! `/api/v1/oauth/apps`: the caller's OAuth apps (or an organization's, for its administrators), and
//! `/api/v1/organizations/{org}/audit-log`.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use utoipa::IntoParams;

use super::super::admin::decode;
use super::super::error::{ApiError, ApiResult};
use super::super::extract::{JsonBody, PathParams};
use super::AppState;
use crate::auth::{Credential, Principal};
use crate::model::account::{AccountKind, Role};
use crate::model::oauth::{AuditEntry, OAuthApp};
use crate::services::apps::{self, AppIn, AppOut};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/oauth/apps", get(list).post(create))
        .route(
            "/api/v1/oauth/apps/{id}",
            get(show).patch(update).delete(remove),
        )
        .route(
            "/api/v1/oauth/apps/{id}/secret",
            post(rotate_secret).delete(delete_secret),
        )
        .route("/api/v1/organizations/{org}/audit-log", get(audit_log))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct OwnerQuery {
    /// The namespace whose apps to list (default: the caller).
    pub owner: Option<String>,
}

#[utoipa::path(get, path = "/api/v1/oauth/apps", tag = "oauth", params(OwnerQuery),
    responses((status = 200, body = [OAuthApp]), (status = 403, description = "not your namespace")))]
pub async fn list(
    State(s): State<AppState>,
    who: Principal,
    Query(q): Query<OwnerQuery>,
) -> ApiResult<Json<Vec<OAuthApp>>> {
    Ok(Json(apps::list(&s, &who, q.owner.as_deref()).await?))
}

#[utoipa::path(post, path = "/api/v1/oauth/apps", tag = "oauth", request_body = AppIn,
    responses((status = 201, body = AppOut, description = "the app, with its secret shown this once")))]
pub async fn create(
    State(s): State<AppState>,
    who: Principal,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<AppOut>)> {
    Ok((
        StatusCode::CREATED,
        Json(apps::create(&s, &who, decode(body)?).await?),
    ))
}

#[utoipa::path(get, path = "/api/v1/oauth/apps/{id}", tag = "oauth", params(("id" = String, Path)),
    responses((status = 200, body = OAuthApp), (status = 404, description = "no such app of yours")))]
pub async fn show(
    State(s): State<AppState>,
    who: Principal,
    PathParams(id): PathParams<String>,
) -> ApiResult<Json<OAuthApp>> {
    Ok(Json(apps::get(&s, &who, &id).await?))
}

#[utoipa::path(patch, path = "/api/v1/oauth/apps/{id}", tag = "oauth", request_body = AppIn,
    params(("id" = String, Path)),
    responses((status = 200, body = OAuthApp)))]
pub async fn update(
    State(s): State<AppState>,
    who: Principal,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<OAuthApp>> {
    Ok(Json(apps::update(&s, &who, &id, decode(body)?).await?))
}

#[utoipa::path(delete, path = "/api/v1/oauth/apps/{id}", tag = "oauth", params(("id" = String, Path)),
    responses((status = 204, description = "deleted, with every token it held")))]
pub async fn remove(
    State(s): State<AppState>,
    who: Principal,
    PathParams(id): PathParams<String>,
) -> ApiResult<StatusCode> {
    apps::delete(&s, &who, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/api/v1/oauth/apps/{id}/secret", tag = "oauth", params(("id" = String, Path)),
    responses((status = 200, body = AppOut, description = "a new secret, shown this once; the old one stops working")))]
pub async fn rotate_secret(
    State(s): State<AppState>,
    who: Principal,
    PathParams(id): PathParams<String>,
) -> ApiResult<Json<AppOut>> {
    Ok(Json(apps::set_secret(&s, &who, &id, true).await?))
}

#[utoipa::path(delete, path = "/api/v1/oauth/apps/{id}/secret", tag = "oauth", params(("id" = String, Path)),
    responses((status = 200, body = AppOut, description = "the app, now public")))]
pub async fn delete_secret(
    State(s): State<AppState>,
    who: Principal,
    PathParams(id): PathParams<String>,
) -> ApiResult<Json<AppOut>> {
    Ok(Json(apps::set_secret(&s, &who, &id, false).await?))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// At most this many entries, newest first (default 100, at most 1000).
    pub limit: Option<u32>,
}

#[utoipa::path(get, path = "/api/v1/organizations/{org}/audit-log", tag = "oauth",
    params(("org" = String, Path), AuditQuery),
    responses((status = 200, body = [AuditEntry]), (status = 403, description = "not an admin of the organization")))]
pub async fn audit_log(
    State(s): State<AppState>,
    who: Principal,
    PathParams(org): PathParams<String>,
    Query(q): Query<AuditQuery>,
) -> ApiResult<Json<Vec<AuditEntry>>> {
    let mut session = s.store.read().await?;
    let account = session
        .account_by_name(&org)
        .await?
        .filter(|a| a.kind == AccountKind::Org)
        .ok_or_else(|| ApiError::NotFound(format!("organization {org:?} not found")))?;
    // The log holds members' emails: it takes an unrestricted personal token, never an app's.
    if !matches!(who.credential, Credential::PersonalToken(_)) || who.scopes.is_some() {
        return Err(ApiError::Forbidden(
            "the audit log takes an unrestricted personal token".into(),
        ));
    }
    let unrestricted_admin = who.is_admin();
    let org_admin =
        who.reaches_org(&org) && session.role_in(&org, &who.account.id).await? == Some(Role::Admin);
    if !(unrestricted_admin || org_admin) {
        return Err(ApiError::Forbidden(format!(
            "the audit log of {org:?} is for its administrators"
        )));
    }
    let limit = i64::from(q.limit.unwrap_or(100).clamp(1, 1000));
    Ok(Json(session.audit_log(&account.id, limit).await?))
}
