//! The engines this server can run: which there are, which catalog recipes can run here, and (for an
//! administrator) installing and removing the built-in ones, as `switchyard engines` does on the shell.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::Serialize;

use super::error::{ApiError, ApiResult};
use super::extract::PathParams;
use super::AppState;
use crate::auth::Principal;
use crate::engines::install::{self, InstallError};
use crate::engines::{EngineInfo, Engines, InstallGuard, OnDisk, Source};
use crate::hardware::HardwareList;
use crate::model::catalog::{CatalogEntry, RecipeEntry};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/engines", get(list))
        .route("/api/v1/admin/engines/{name}/install", post(start_install))
        .route("/api/v1/admin/engines/{name}", delete(remove))
}

/// Whether one catalog recipe can run on this server, and with what.
#[derive(Debug, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecipeRuns {
    pub runs: bool,
    /// What starts it: `config`, `installed` or `path`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<&'static str>,
    /// The engine (built-in name or program) that starts it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// The built-in engine that would run it once installed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub install: Option<String>,
    /// Why it cannot run here, and what would change that.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// What it lacks here: `compute` (this server runs no replicas of its accelerator) or `engine`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lacks: Option<&'static str>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnginesOut {
    #[schema(value_type = Vec<Object>)]
    pub engines: Vec<EngineInfo>,
    /// Every catalog recipe by `publicId`.
    pub recipes: BTreeMap<String, RecipeRuns>,
}

/// Whether `recipe` of `entry` runs here: on compute this server has, with an engine it has.
fn recipe_runs(
    engines: &Engines,
    disk: &OnDisk,
    hardware: &HardwareList,
    entry: &CatalogEntry,
    recipe: &RecipeEntry,
) -> RecipeRuns {
    let key = crate::deploy::image_key(recipe.engine_type);
    let accelerator = recipe.accelerator.as_str();
    if let Some(why) = hardware.cannot_run(accelerator) {
        return RecipeRuns {
            runs: false,
            source: None,
            engine: None,
            install: None,
            message: Some(why),
            lacks: Some("compute"),
        };
    }
    match engines.resolve_in(disk, key, &entry.repo_id, accelerator) {
        Ok(r) => {
            let (source, engine) = match r.source {
                Source::Config => ("config", format!("runtime.launchers.{key}")),
                Source::Installed { engine } => ("installed", engine),
                Source::Path { program } => ("path", program),
            };
            RecipeRuns {
                runs: true,
                source: Some(source),
                engine: Some(engine),
                install: None,
                message: None,
                lacks: None,
            }
        }
        Err(m) => RecipeRuns {
            runs: false,
            source: None,
            engine: None,
            install: m.install.map(str::to_string),
            message: Some(m.message),
            lacks: Some("engine"),
        },
    }
}

/// The engines, and which catalog recipes can run here. Any signed-in caller.
#[utoipa::path(get, path = "/api/v1/engines", tag = "engines",
    responses((status = 200, body = EnginesOut), (status = 401)))]
pub async fn list(State(s): State<AppState>, who: Principal) -> ApiResult<Json<EnginesOut>> {
    let catalog = s.catalog.get(s.store.as_ref()).await?;
    let (engines, hardware) = (s.engines.clone(), s.hardware.clone());
    let mut out = tokio::task::spawn_blocking(move || {
        // The engines dir and PATH are read once for the whole catalog.
        let disk = engines.read();
        let recipes = catalog
            .entries()
            .flat_map(|e| e.recipes.iter().map(move |r| (e, r)))
            .map(|(e, r)| {
                let runs = recipe_runs(&engines, &disk, &hardware, e, r);
                (r.public_id.clone(), runs)
            })
            .collect();
        EnginesOut {
            engines: engines.list_in(&disk),
            recipes,
        }
    })
    .await
    .map_err(|e| ApiError::internal("listing engines", e))?;
    if who.require_instance_admin().is_err() {
        // The server's paths and pip's words are for its administrators.
        for e in &mut out.engines {
            e.program = None;
            if let Some(error) = e.install.as_mut().and_then(|i| i.error.as_mut()) {
                *error = "the install failed (an administrator sees why)".into();
            }
        }
    }
    Ok(Json(out))
}

fn refusal(e: InstallError) -> ApiError {
    match e {
        InstallError::Unknown(_) | InstallError::NotInstalled(_) => {
            ApiError::NotFound(e.to_string())
        }
        InstallError::Busy(_) => ApiError::Conflict(e.to_string()),
        other => ApiError::Internal(other.to_string()),
    }
}

/// Starts installing a built-in engine on the server (202); `GET /api/v1/engines` shows its progress,
/// and endpoints that failed for want of it start once it is in.
#[utoipa::path(post, path = "/api/v1/admin/engines/{name}/install", tag = "engines",
    params(("name" = String, Path, description = "a built-in engine: minilm, smollm")),
    responses((status = 202), (status = 404), (status = 409)))]
pub async fn start_install(
    State(s): State<AppState>,
    who: Principal,
    PathParams(name): PathParams<String>,
) -> ApiResult<(StatusCode, Json<serde_json::Value>)> {
    who.require_instance_admin()?;
    let Some(engine) = crate::engines::builtin(&name) else {
        return Err(refusal(InstallError::Unknown(name)));
    };
    let Some(guard) = s.engines.begin_install(engine.name) else {
        return Err(refusal(InstallError::Busy(name)));
    };
    tracing::info!(engine = engine.name, by = %who.account.name, "engine install started");
    let kick = s.on_change.clone();
    tokio::task::spawn_blocking(move || run_install(guard, engine.name, kick));
    Ok((
        StatusCode::ACCEPTED,
        Json(serde_json::json!({"name": engine.name, "install": {"running": true}})),
    ))
}

/// Installs `name`, recording how it goes; then the runtime looks again at what waits for it.
fn run_install(guard: InstallGuard, name: &str, kick: std::sync::Arc<dyn Fn() + Send + Sync>) {
    let outcome = install::install(guard.engines().dir(), name, &mut |percent, step| {
        guard.progress(percent, step)
    });
    match &outcome {
        Ok(_) => tracing::info!(engine = name, "engine installed"),
        Err(e) => tracing::warn!(engine = name, error = %e, "engine install failed"),
    }
    guard.end(outcome.map(|_| ()).map_err(|e| e.to_string()));
    kick();
}

/// Removes an installed built-in engine. Replicas running it go on until they stop; new ones cannot start.
#[utoipa::path(delete, path = "/api/v1/admin/engines/{name}", tag = "engines",
    params(("name" = String, Path, description = "a built-in engine: minilm, smollm")),
    responses((status = 204), (status = 404), (status = 409)))]
pub async fn remove(
    State(s): State<AppState>,
    who: Principal,
    PathParams(name): PathParams<String>,
) -> ApiResult<StatusCode> {
    who.require_instance_admin()?;
    if s.engines.installing(&name) {
        return Err(refusal(InstallError::Busy(name)));
    }
    let (dir, removing) = (s.engines.dir().to_path_buf(), name.clone());
    tokio::task::spawn_blocking(move || install::remove(&dir, &removing))
        .await
        .map_err(|e| ApiError::internal("removing an engine", e))?
        .map_err(refusal)?;
    tracing::info!(engine = %name, by = %who.account.name, "engine removed");
    Ok(StatusCode::NO_CONTENT)
}
