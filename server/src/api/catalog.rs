//! The catalog API (service spec 4.1–4.4): list with filters, deploy a model or one recipe.

use std::collections::HashSet;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Map, Value};

use super::endpoints::{insert_new, render};
use super::error::{ApiError, ApiResult};
use super::extract::{JsonBody, PathParams, QueryPairs};
use super::AppState;
use crate::auth::{authorize, Access, Principal};
use crate::deploy::{
    apply_config, base_spec, derive_name, name_prefix, plan_model, plan_recipe, Plan, PlanError,
};
use crate::model::catalog::CatalogQuery;
use crate::model::{DeployModelIn, DeployRecipeIn, EndpointOut, EndpointSpec};
use crate::store::StoreError;

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
    authorize(s.store.as_ref(), &who, &input.namespace, Access::Change).await?;
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
    authorize(s.store.as_ref(), &who, &input.namespace, Access::Change).await?;
    let index = s.catalog.get(s.store.as_ref()).await?;
    let (entry, j) = index
        .by_recipe_id(&public_id)
        .ok_or_else(|| ApiError::NotFound(format!("recipe {public_id:?} not found")))?;
    let plan = plan_recipe(entry, &entry.recipes[j], &s.hardware).map_err(plan_error)?;
    deploy(&s, &who, &input.namespace, &plan, body.get("config")).await
}

/// Builds the spec for a plan with the deploy `config` applied, and stores it. A name given in
/// `config` that is taken is a 409; a derived name is made unique instead.
async fn deploy(
    s: &AppState,
    who: &Principal,
    namespace: &str,
    plan: &Plan<'_>,
    config: Option<&Value>,
) -> ApiResult<Json<DeployOut>> {
    let empty = Map::new();
    let config = config.and_then(Value::as_object).unwrap_or(&empty);
    let given_name = config
        .get("name")
        .and_then(Value::as_str)
        .map(str::to_string);
    for _ in 0..5 {
        let name = match &given_name {
            Some(n) => n.clone(),
            None => {
                let taken: HashSet<String> = s
                    .store
                    .endpoint_names_with_prefix(namespace, &name_prefix(&plan.entry.model_name))
                    .await?
                    .into_iter()
                    .collect();
                derive_name(&plan.entry.model_name, &taken)
            }
        };
        let mut spec = base_spec(plan, &name);
        apply_config(&mut spec, config);
        let spec = EndpointSpec::parse(&spec).map_err(|issues| {
            // Issues in the built spec can only come from the config overrides: name them as such.
            ApiError::invalid_body(
                issues
                    .into_iter()
                    .map(|mut i| {
                        i.path = i.path.replace("compute.scaling", "config.scaling");
                        i
                    })
                    .collect(),
            )
        })?;
        match insert_new(s, who, namespace, spec).await {
            Ok(rec) => {
                tracing::info!(namespace, endpoint = %name, recipe = %plan.recipe.public_id, "deployed from catalog");
                return Ok(Json(DeployOut {
                    endpoint: render(&rec),
                }));
            }
            Err(ApiError::Conflict(m)) if given_name.is_some() => {
                return Err(ApiError::Conflict(m))
            }
            // Someone took the derived name in between: derive again.
            Err(ApiError::Conflict(_)) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(StoreError::Conflict(format!(
        "could not find a free endpoint name in {namespace:?}"
    ))
    .into())
}
