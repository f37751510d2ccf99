//! Endpoint management under `/v2`, as the `huggingface_hub` client drives it: list, create, get,
//! update (deep partial), delete, pause, resume, scale-to-zero, and the hardware list.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::Value;

use super::error::{ApiError, ApiResult};
use super::extract::{JsonBody, PathParams};
use super::AppState;
use crate::auth::{authorize, Access, Principal};
use crate::config::CustomCommands;
use crate::crypto::random_id;
use crate::hardware::HardwareList;
use crate::model::status::strip_response_fields;
use crate::model::{EndpointOut, EndpointSpec, EndpointState, Issue, LifecycleAction, ModelImage};
use crate::store::{Actor, EndpointRecord, StoreError};

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
        .route("/v2/provider/{namespace}", get(hardware))
}

/// The response cache is restricted to instance administrators (spec 2.7): enabling it (on create, or
/// turning it on in an update) needs one.
fn check_cache(
    who: &Principal,
    spec: &EndpointSpec,
    before: Option<&EndpointSpec>,
) -> ApiResult<()> {
    let on =
        |s: &EndpointSpec| s.cache_http_responses || s.experimental_features.cache_http_responses;
    if on(spec) && !before.is_some_and(on) && !who.is_admin() {
        return Err(ApiError::Forbidden(
            "the response cache (cacheHttpResponses) can only be enabled by an instance administrator".into(),
        ));
    }
    Ok(())
}

/// Environment variables that change what a program runs (a preload, a startup script, a search path).
/// Setting them is code execution on the host, like a custom command.
fn runs_code(var: &str) -> bool {
    const EXACT: [&str; 11] = [
        "PATH",
        "BASH_ENV",
        "ENV",
        "BROWSER",
        "NODE_OPTIONS",
        "PERL5OPT",
        "PERL5LIB",
        "RUBYOPT",
        "RUBYLIB",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
    ];
    let upper = var.to_ascii_uppercase();
    EXACT.contains(&upper.as_str()) || upper.starts_with("LD_") || upper.starts_with("PYTHON")
}

/// What a spec makes the host run beyond the configured launchers: a `custom` image's command (with
/// its args), or variables that change what a launcher runs. `None` when nothing.
fn host_code(spec: &EndpointSpec) -> Option<String> {
    let model = &spec.model;
    if matches!(model.image, ModelImage::Custom(_))
        && model.command.as_ref().is_some_and(|c| !c.is_empty())
    {
        return Some("custom images run model.command on the server's host".into());
    }
    let var = model
        .env
        .keys()
        .chain(model.secrets.0.keys())
        .find(|k| runs_code(k))?;
    Some(format!(
        "the variable {var} changes what the engine runs on the server's host"
    ))
}

/// Code execution on the host is for the principals the config allows (`runtime.custom_commands`,
/// `runtime.custom_command_users`). Checked when the spec asks for it and it changed.
fn check_host_code(
    s: &AppState,
    who: &Principal,
    spec: &EndpointSpec,
    before: Option<&EndpointSpec>,
) -> ApiResult<()> {
    let Some(why) = host_code(spec) else {
        return Ok(());
    };
    let same = before.is_some_and(|b| {
        b.model.command == spec.model.command
            && b.model.args == spec.model.args
            && b.model.image == spec.model.image
            && b.model.env == spec.model.env
            && b.model.secrets == spec.model.secrets
    });
    if same {
        return Ok(());
    }
    let config = &s.runtime_config;
    let allowed = match config.custom_commands {
        CustomCommands::Everyone => true,
        CustomCommands::Admins => who.is_admin(),
        CustomCommands::Nobody => false,
    } || (config.custom_commands != CustomCommands::Nobody
        && config.custom_command_users.contains(&who.account.name));
    if allowed {
        Ok(())
    } else {
        Err(ApiError::Forbidden(format!(
            "{why}; this server allows that only to the principals in runtime.custom_commands"
        )))
    }
}

/// A custom domain serves one endpoint: it must be a name (not an address or localhost) and its
/// domain and path must not be another endpoint's.
async fn check_route(s: &AppState, namespace: &str, spec: &EndpointSpec) -> ApiResult<()> {
    let Some(route) = &spec.route else {
        return Ok(());
    };
    let domain = crate::routing::bare_host(&route.domain);
    if crate::routing::is_server_host(&domain, &s.runtime.public_host) {
        return Err(ApiError::invalid_body(vec![Issue::new(
            "route.domain",
            "must be a domain of its own, not this server's address, an IP address or localhost",
        )]));
    }
    let path = route.path.trim_end_matches('/');
    let taken = s.store.all_endpoints().await?.into_iter().any(|other| {
        !(other.namespace == namespace && other.spec.name == spec.name)
            && other.spec.route.as_ref().is_some_and(|r| {
                crate::routing::bare_host(&r.domain) == domain
                    && r.path.trim_end_matches('/') == path
            })
    });
    if taken {
        return Err(ApiError::Conflict(format!(
            "{}{} already routes to another endpoint",
            route.domain, route.path
        )));
    }
    Ok(())
}

#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct EndpointListOut {
    pub items: Vec<EndpointOut>,
}

/// Replaces every secret value given in a spec or patch by its ciphertext, before anything else sees it.
/// Nulls stay null (on update they mean "keep the stored value"). The custom image's registry
/// password is a secret too. A value equal to what `stored` already holds keeps its ciphertext, so
/// sending a secret again is not a change.
pub fn seal_secrets(state: &AppState, body: &mut Value, stored: Option<&EndpointSpec>) {
    let seal = |plain: &str, old: Option<&str>| -> String {
        match old {
            Some(sealed) if state.secrets.open(sealed).is_ok_and(|p| p == plain) => {
                sealed.to_string()
            }
            _ => state.secrets.seal(plain),
        }
    };
    if let Some(Value::Object(secrets)) = body.pointer_mut("/model/secrets") {
        for (k, v) in secrets.iter_mut() {
            if let Value::String(plain) = v {
                *plain = seal(plain, stored.and_then(|s| s.model.secrets.get(k)));
            }
        }
    }
    if let Some(Value::String(plain)) = body.pointer_mut("/model/image/custom/credentials/password")
    {
        let old = stored.and_then(|s| match &s.model.image {
            ModelImage::Custom(c) => c.credentials.as_ref().and_then(|c| c.password.as_deref()),
            _ => None,
        });
        *plain = seal(plain, old);
    }
}

/// Checks the spec's compute against the hardware list and records its id. Unknown compute is a 400;
/// compute that exists but is unavailable is a 409.
fn resolve_compute(
    hardware: &HardwareList,
    spec: &mut EndpointSpec,
    namespace: &str,
) -> ApiResult<()> {
    let c = &spec.compute;
    let found = hardware.find(
        &spec.provider.vendor,
        &spec.provider.region,
        c.accelerator.as_str(),
        &c.instance_type,
        &c.instance_size,
    );
    match found {
        None => Err(ApiError::invalid_body(vec![Issue::new(
            "compute",
            format!(
                "no {} instance {} {} in {}/{}; GET /v2/provider/{namespace} lists what exists",
                c.accelerator.as_str(),
                c.instance_type,
                c.instance_size,
                spec.provider.vendor,
                spec.provider.region
            ),
        )])),
        Some(p) if !p.compute.is_available() => Err(ApiError::Conflict(format!(
            "no compatible compute found: {} is currently unavailable",
            p.compute.id
        ))),
        Some(p) => {
            spec.compute.id = Some(p.compute.id.clone());
            Ok(())
        }
    }
}

/// Stores a new endpoint (already parsed, secrets sealed) in `pending`.
pub async fn insert_new(
    state: &AppState,
    who: &Principal,
    namespace: &str,
    mut spec: EndpointSpec,
) -> ApiResult<EndpointRecord> {
    resolve_compute(&state.hardware, &mut spec, namespace)?;
    let now = state.clock.now();
    let actor = Actor {
        id: who.account.id.clone(),
        name: who.account.name.clone(),
    };
    let rec = EndpointRecord {
        id: random_id(),
        namespace: namespace.to_string(),
        spec,
        state: EndpointState::Pending,
        message: None,
        url: None,
        ready_replica: 0,
        target_replica: 0,
        created_at: now,
        updated_at: now,
        created_by: actor.clone(),
        updated_by: actor,
        version: 1,
    };
    state.store.insert_endpoint(&rec).await?;
    // However it was created (here or by a deploy from the catalog), the reconciler starts on it now.
    state.runtime.kick();
    tracing::info!(namespace, endpoint = %rec.spec.name, by = %who.account.name, "endpoint created");
    Ok(rec)
}

/// The response form of a stored endpoint: secrets redacted, status attached.
pub fn render(rec: &EndpointRecord) -> EndpointOut {
    EndpointOut::new(
        rec.spec.redacted(),
        crate::model::EndpointStatus {
            state: rec.state,
            created_at: rec.created_at,
            updated_at: rec.updated_at,
            ready_replica: rec.ready_replica,
            target_replica: rec.target_replica,
            message: rec.message.clone(),
            url: rec.url.clone(),
            created_by: crate::model::ActorOut {
                id: rec.created_by.id.clone(),
                name: rec.created_by.name.clone(),
            },
            updated_by: crate::model::ActorOut {
                id: rec.updated_by.id.clone(),
                name: rec.updated_by.name.clone(),
            },
        },
    )
}

async fn load(state: &AppState, namespace: &str, name: &str) -> ApiResult<EndpointRecord> {
    state.store.endpoint(namespace, name).await?.ok_or_else(|| {
        ApiError::NotFound(format!(
            "endpoint {name:?} not found in namespace {namespace:?}"
        ))
    })
}

#[utoipa::path(get, path = "/v2/endpoint/{namespace}", tag = "endpoints",
    params(("namespace" = String, Path)),
    responses((status = 200, body = EndpointListOut), (status = 401), (status = 403)))]
pub async fn list(
    State(s): State<AppState>,
    who: Principal,
    PathParams(namespace): PathParams<String>,
) -> ApiResult<Json<EndpointListOut>> {
    authorize(s.store.as_ref(), &who, &namespace, Access::Read).await?;
    let items = s.store.endpoints_in(&namespace).await?;
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
    JsonBody(mut body): JsonBody,
) -> ApiResult<Json<EndpointOut>> {
    authorize(s.store.as_ref(), &who, &namespace, Access::Change).await?;
    if let Some(Value::Object(secrets)) = body.pointer("/model/secrets") {
        let empty: Vec<Issue> = secrets
            .iter()
            .filter(|(_, v)| v.is_null())
            .map(|(k, _)| Issue::new(format!("model.secrets.{k}"), "a new secret needs a value"))
            .collect();
        if !empty.is_empty() {
            return Err(ApiError::invalid_body(empty));
        }
    }
    strip_response_fields(&mut body);
    seal_secrets(&s, &mut body, None);
    let spec = EndpointSpec::parse(&body).map_err(ApiError::invalid_body)?;
    check_host_code(&s, &who, &spec, None)?;
    check_cache(&who, &spec, None)?;
    check_route(&s, &namespace, &spec).await?;
    let rec = insert_new(&s, &who, &namespace, spec).await?;
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
    authorize(s.store.as_ref(), &who, &namespace, Access::Read).await?;
    Ok(Json(render(&load(&s, &namespace, &name).await?)))
}

/// Retries a read-modify-write a few times when another request changed the endpoint in between.
async fn modify<F>(
    s: &AppState,
    who: &Principal,
    namespace: &str,
    name: &str,
    mut change: F,
) -> ApiResult<EndpointRecord>
where
    F: FnMut(&mut EndpointRecord) -> ApiResult<()>,
{
    for _ in 0..5 {
        let mut rec = load(s, namespace, name).await?;
        change(&mut rec)?;
        rec.updated_at = s.clock.now();
        rec.updated_by = Actor {
            id: who.account.id.clone(),
            name: who.account.name.clone(),
        };
        match s.store.update_endpoint(&rec).await {
            Ok(saved) => return Ok(saved),
            Err(StoreError::Stale) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(StoreError::Stale.into())
}

#[utoipa::path(put, path = "/v2/endpoint/{namespace}/{name}", tag = "endpoints",
    params(("namespace" = String, Path), ("name" = String, Path)),
    request_body(content = Object, description = "any part of the endpoint spec; nested objects are partial too"),
    responses((status = 200, body = EndpointOut), (status = 400), (status = 401), (status = 403), (status = 404)))]
pub async fn update(
    State(s): State<AppState>,
    who: Principal,
    PathParams((namespace, name)): PathParams<(String, String)>,
    JsonBody(mut patch): JsonBody,
) -> ApiResult<Json<EndpointOut>> {
    authorize(s.store.as_ref(), &who, &namespace, Access::Change).await?;
    strip_response_fields(&mut patch);
    // A new custom domain is checked against the other endpoints before anything is written.
    let current = load(&s, &namespace, &name).await?;
    if let Ok(preview) = current.spec.apply_update(&patch) {
        if preview.route != current.spec.route {
            check_route(&s, &namespace, &preview).await?;
        }
    }
    let hardware = s.hardware.clone();
    let rec = modify(&s, &who, &namespace, &name, |rec| {
        let mut patch = patch.clone();
        seal_secrets(&s, &mut patch, Some(&rec.spec));
        let mut spec = rec
            .spec
            .apply_update(&patch)
            .map_err(ApiError::invalid_body)?;
        check_host_code(&s, &who, &spec, Some(&rec.spec))?;
        check_cache(&who, &spec, Some(&rec.spec))?;
        // Compute is checked against the hardware list only when it changes: an update of anything else
        // must not fail because the endpoint's instance type has since become unavailable.
        spec.compute.id = rec.spec.compute.id.clone();
        let (new, old) = (&spec.compute, &rec.spec.compute);
        let moved = spec.provider != rec.spec.provider
            || new.accelerator != old.accelerator
            || new.instance_type != old.instance_type
            || new.instance_size != old.instance_size;
        if moved {
            resolve_compute(&hardware, &mut spec, &namespace)?;
        }
        if spec != rec.spec {
            rec.state = rec
                .state
                .on_action(LifecycleAction::Update)
                .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        }
        rec.spec = spec;
        Ok(())
    })
    .await?;
    s.runtime.kick();
    tracing::info!(namespace, endpoint = %name, by = %who.account.name, "endpoint updated");
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
    authorize(s.store.as_ref(), &who, &namespace, Access::Change).await?;
    if s.store.delete_endpoint(&namespace, &name).await? {
        s.runtime.kick();
        tracing::info!(namespace, endpoint = %name, by = %who.account.name, "endpoint deleted");
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!(
            "endpoint {name:?} not found in namespace {namespace:?}"
        )))
    }
}

async fn lifecycle(
    s: AppState,
    who: Principal,
    namespace: String,
    name: String,
    action: LifecycleAction,
) -> ApiResult<Json<EndpointOut>> {
    authorize(s.store.as_ref(), &who, &namespace, Access::Change).await?;
    let by = who.account.name.clone();
    let rec = modify(&s, &who, &namespace, &name, |rec| {
        rec.state = rec
            .state
            .on_action(action)
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        rec.message = match action {
            LifecycleAction::Pause => Some(format!("paused by {by}")),
            LifecycleAction::ScaleToZero => Some(format!("scaled to zero by {by}")),
            _ => None,
        };
        if matches!(
            action,
            LifecycleAction::Pause | LifecycleAction::ScaleToZero
        ) {
            rec.ready_replica = 0;
            rec.target_replica = 0;
        }
        Ok(())
    })
    .await?;
    s.runtime.kick();
    tracing::info!(namespace, endpoint = %name, by = %who.account.name, ?action, "endpoint lifecycle action");
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
    authorize(s.store.as_ref(), &who, &namespace, Access::Read).await?;
    Ok(Json((*s.hardware).clone()))
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
    authorize(s.store.as_ref(), &who, &namespace, Access::Read).await?;
    load(&s, &namespace, &name).await?;
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
