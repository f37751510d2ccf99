//! The catalog API (service spec 4.1–4.4): list with filters, deploy a model or one recipe.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::Value;

use super::allow;
use super::error::{ApiError, ApiResult};
use super::extract::{JsonBody, PathParams, QueryPairs};
use super::AppState;
use crate::auth::{Action, Principal};
use crate::deploy::{plan_model, plan_recipe, Plan, PlanError};
use crate::model::catalog::CatalogQuery;
use crate::model::{DeployModelIn, DeployRecipeIn, EndpointOut};
use crate::services::endpoints::render;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/catalog/list", get(list))
        .route(
            "/api/v1/catalog/model/{author}/{model}/deploy",
            post(deploy_model),
        )
        .route(
            "/api/v1/catalog/recipe/{public_id}/deploy",
            post(deploy_recipe),
        )
}

#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct DeployOut {
    pub endpoint: EndpointOut,
}

#[utoipa::path(get, path = "/api/v1/catalog/list", tag = "catalog", operation_id = "listCatalogItems",
    params(
        ("accelerator" = Option<String>, Query, description = "cpu, gpu or neuron"),
        ("engine" = Option<String>, Query, description = "llamacpp, tei, vllm or sglang"),
        ("license" = Option<String>, Query),
        ("limit" = Option<u64>, Query, description = "greater than 0, at most 9007199254740991"),
        ("search" = Option<String>, Query, description = "case-insensitive, over model name, author and repo id"),
        ("task" = Option<String>, Query),
    ),
    responses(
        (status = 200, body = crate::model::catalog::CatalogListOut),
        (status = 400, description = "invalid query parameters: {details, error}"),
        (status = 500, description = "server error while loading catalog items: {error}"),
    ))]
pub async fn list(State(s): State<AppState>, QueryPairs(pairs): QueryPairs) -> ApiResult<Response> {
    let query = CatalogQuery::parse(&pairs).map_err(|bad| {
        let names: Vec<&str> = bad.keys().map(String::as_str).collect();
        ApiError::InvalidQuery {
            message: format!("invalid query parameters: {}", names.join(", ")),
            details: serde_json::to_value(&bad).unwrap_or(Value::Null),
        }
    })?;
    let index = s
        .catalog
        .get(s.store.as_ref())
        .await
        .map_err(|e| ApiError::internal("loading catalog items", e))?;
    let body = index.list_json(&query);
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

fn plan_error(e: PlanError) -> ApiError {
    match e {
        PlanError::NoRecipe(m) => ApiError::NotFound(m),
        PlanError::NoCompute(m) => ApiError::Conflict(m),
    }
}

#[utoipa::path(post, path = "/api/v1/catalog/model/{author}/{model}/deploy", tag = "catalog", operation_id = "deployCatalogModel",
    params(("author" = String, Path), ("model" = String, Path)), request_body = DeployModelIn,
    responses(
        (status = 200, body = DeployOut),
        (status = 400, description = "invalid request body: {error, issues}"),
        (status = 401, description = "missing or invalid bearer token"),
        (status = 404, description = "catalog item, recipe or model not found"),
        (status = 409, description = "no compatible compute, or the name is taken"),
    ),
    security(("bearer" = [])))]
pub async fn deploy_model(
    State(s): State<AppState>,
    who: Principal,
    PathParams((author, model)): PathParams<(String, String)>,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<DeployOut>> {
    let input = DeployModelIn::parse(&body).map_err(ApiError::invalid_body)?;
    allow(&s, &who, &input.namespace, Action::Change).await?;
    let index = s.catalog.get(s.store.as_ref()).await?;
    let repo_id = format!("{author}/{model}");
    let entry = index
        .by_repo_id(&repo_id)
        .ok_or_else(|| ApiError::NotFound(format!("model {repo_id:?} is not in the catalog")))?;
    let plan = plan_model(
        entry,
        input.accelerator,
        input.gguf_file.as_deref(),
        &s.hardware,
    )
    .map_err(plan_error)?;
    deploy(&s, &who, &input.namespace, &plan, body.get("config")).await
}

#[utoipa::path(post, path = "/api/v1/catalog/recipe/{public_id}/deploy", tag = "catalog", operation_id = "deployCatalogRecipe",
    params(("public_id" = String, Path, description = "the recipe's publicId")), request_body = DeployRecipeIn,
    responses(
        (status = 200, body = DeployOut),
        (status = 400, description = "invalid request body: {error, issues}"),
        (status = 401, description = "missing or invalid bearer token"),
        (status = 404, description = "recipe not found"),
        (status = 409, description = "no compatible compute, or the name is taken"),
    ),
    security(("bearer" = [])))]
pub async fn deploy_recipe(
    State(s): State<AppState>,
    who: Principal,
    PathParams(public_id): PathParams<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<DeployOut>> {
    let input = DeployRecipeIn::parse(&body).map_err(ApiError::invalid_body)?;
    allow(&s, &who, &input.namespace, Action::Change).await?;
    let index = s.catalog.get(s.store.as_ref()).await?;
    let (entry, j) = index
        .by_recipe_id(&public_id)
        .ok_or_else(|| ApiError::NotFound(format!("recipe {public_id:?} not found")))?;
    let plan = plan_recipe(entry, &entry.recipes[j], &s.hardware).map_err(plan_error)?;
    deploy(&s, &who, &input.namespace, &plan, body.get("config")).await
}

/// Deploys the plan and renders the new endpoint.
async fn deploy(
    s: &AppState,
    who: &Principal,
    namespace: &str,
    plan: &Plan<'_>,
    config: Option<&Value>,
) -> ApiResult<Json<DeployOut>> {
    let rec = crate::services::catalog::deploy(s, who, namespace, plan, config).await?;
    Ok(Json(DeployOut {
        endpoint: render(&rec),
    }))
}
