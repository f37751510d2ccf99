//! Endpoint operations: create, update (deep partial), delete, lifecycle actions and the runtime's
//! status writes, each with its event in the same unit of work; the policies they apply (host code,
//! response cache, compute, custom routes) and sealing of secrets.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::{Context, Error, Result};
use crate::auth::Principal;
use crate::config::{CustomCommands, RuntimeConfig};
use crate::crypto::random_id;
use crate::hardware::HardwareList;
use crate::model::event::EventKind;
use crate::model::status::strip_response_fields;
use crate::model::{EndpointOut, EndpointSpec, EndpointState, Issue, LifecycleAction, ModelImage};
use crate::store::{Actor, EndpointRecord, NewEvent, Session, Store, StoreError, StoreResult};

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

fn not_found(namespace: &str, name: &str) -> Error {
    Error::NotFound(format!(
        "endpoint {name:?} not found in namespace {namespace:?}"
    ))
}

fn actor(who: &Principal) -> Actor {
    Actor {
        id: who.account.id.clone(),
        name: who.account.name.clone(),
    }
}

/// An endpoint event: the endpoint as the API shows it (secrets redacted), plus `extra`.
fn event(kind: EventKind, rec: &EndpointRecord, extra: Value) -> NewEvent {
    let mut payload = json!({ "endpoint": render(rec) });
    if let (Some(p), Value::Object(extra)) = (payload.as_object_mut(), extra) {
        p.extend(extra);
    }
    NewEvent {
        kind,
        namespace: rec.namespace.clone(),
        subject: rec.spec.name.clone(),
        payload,
    }
}

/// The state-change event, when `before` and `after` differ in state.
fn status_event(before: EndpointState, after: &EndpointRecord) -> Option<NewEvent> {
    (before != after.state).then(|| {
        event(
            EventKind::EndpointStatus,
            after,
            json!({
                "previousState": before.as_str(),
                "state": after.state.as_str(),
                "message": after.message,
            }),
        )
    })
}

pub async fn get(ctx: &Context, namespace: &str, name: &str) -> Result<EndpointRecord> {
    ctx.store
        .read()
        .await?
        .endpoint(namespace, name)
        .await?
        .ok_or_else(|| not_found(namespace, name))
}

pub async fn list(ctx: &Context, namespace: &str) -> Result<Vec<EndpointRecord>> {
    Ok(ctx.store.read().await?.endpoints_in(namespace).await?)
}

/// Creates an endpoint from a submitted spec (the API's create body).
pub async fn create(
    ctx: &Context,
    who: &Principal,
    namespace: &str,
    mut body: Value,
) -> Result<EndpointRecord> {
    if let Some(Value::Object(secrets)) = body.pointer("/model/secrets") {
        let empty: Vec<Issue> = secrets
            .iter()
            .filter(|(_, v)| v.is_null())
            .map(|(k, _)| Issue::new(format!("model.secrets.{k}"), "a new secret needs a value"))
            .collect();
        if !empty.is_empty() {
            return Err(Error::Invalid(empty));
        }
    }
    strip_response_fields(&mut body);
    seal_secrets(ctx, &mut body, None);
    let spec = EndpointSpec::parse(&body).map_err(Error::Invalid)?;
    insert_new(ctx, who, namespace, spec).await
}

/// Stores a new endpoint (already parsed, secrets sealed) in `pending`, after the policies allow it.
pub async fn insert_new(
    ctx: &Context,
    who: &Principal,
    namespace: &str,
    mut spec: EndpointSpec,
) -> Result<EndpointRecord> {
    check_server_set(&spec, None)?;
    check_host_code(ctx, who, &spec, None)?;
    check_cache(who, &spec, None)?;
    check_route(ctx, &spec)?;
    resolve_compute(&ctx.hardware, &mut spec, namespace)?;
    let now = ctx.clock.now();
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
        created_by: actor(who),
        updated_by: actor(who),
        version: 1,
    };
    let mut unit = ctx.store.begin().await?;
    super::quotas::check(unit.as_mut(), ctx, namespace, None, &rec.spec).await?;
    unit.insert_endpoint(&rec).await?;
    unit.append_event(event(EventKind::EndpointCreated, &rec, json!({})), now)
        .await?;
    unit.commit().await?;
    // However it was created (through the API or a deploy from the catalog), the runtime starts on it now.
    (ctx.on_change)();
    tracing::info!(namespace, endpoint = %rec.spec.name, by = %who.account.name, "endpoint created");
    Ok(rec)
}

/// Applies a deep partial update.
pub async fn update(
    ctx: &Context,
    who: &Principal,
    namespace: &str,
    name: &str,
    mut patch: Value,
) -> Result<EndpointRecord> {
    strip_response_fields(&mut patch);
    let rec = modify(ctx, who, namespace, name, |rec| {
        let mut patch = patch.clone();
        seal_secrets(ctx, &mut patch, Some(&rec.spec));
        let mut spec = rec.spec.apply_update(&patch).map_err(Error::Invalid)?;
        check_server_set(&spec, Some(&rec.spec))?;
        check_host_code(ctx, who, &spec, Some(&rec.spec))?;
        check_cache(who, &spec, Some(&rec.spec))?;
        if spec.route != rec.spec.route {
            check_route(ctx, &spec)?;
        }
        // Compute is checked against the hardware list only when it changes: an update of anything else
        // must not fail because the endpoint's instance type has since become unavailable.
        spec.compute.id = rec.spec.compute.id.clone();
        let (new, old) = (&spec.compute, &rec.spec.compute);
        let moved = spec.provider != rec.spec.provider
            || new.accelerator != old.accelerator
            || new.instance_type != old.instance_type
            || new.instance_size != old.instance_size;
        if moved {
            resolve_compute(&ctx.hardware, &mut spec, namespace)?;
        }
        if spec != rec.spec {
            rec.state = rec
                .state
                .on_action(LifecycleAction::Update)
                .map_err(|e| Error::BadRequest(e.to_string()))?;
        }
        rec.spec = spec;
        Ok(())
    })
    .await?;
    tracing::info!(namespace, endpoint = %name, by = %who.account.name, "endpoint updated");
    Ok(rec)
}

/// Pause, resume or scale to zero.
pub async fn lifecycle(
    ctx: &Context,
    who: &Principal,
    namespace: &str,
    name: &str,
    action: LifecycleAction,
) -> Result<EndpointRecord> {
    let by = who.account.name.clone();
    let rec = modify(ctx, who, namespace, name, |rec| {
        rec.state = rec
            .state
            .on_action(action)
            .map_err(|e| Error::BadRequest(e.to_string()))?;
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
    tracing::info!(namespace, endpoint = %name, by = %who.account.name, ?action, "endpoint lifecycle action");
    Ok(rec)
}

pub async fn delete(ctx: &Context, who: &Principal, namespace: &str, name: &str) -> Result<()> {
    let mut unit = ctx.store.begin().await?;
    let rec = unit
        .endpoint(namespace, name)
        .await?
        .ok_or_else(|| not_found(namespace, name))?;
    unit.delete_endpoint(namespace, name).await?;
    unit.append_event(
        event(EventKind::EndpointDeleted, &rec, json!({})),
        ctx.clock.now(),
    )
    .await?;
    unit.commit().await?;
    (ctx.on_change)();
    tracing::info!(namespace, endpoint = %name, by = %who.account.name, "endpoint deleted");
    Ok(())
}

/// Deletes every endpoint of a namespace (its account is going away), each with its event, in the
/// caller's unit of work; the runtime stops their replicas once it commits. Returns how many.
pub(super) async fn delete_all_in(
    unit: &mut dyn Session,
    namespace: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> StoreResult<usize> {
    let all = unit.endpoints_in(namespace).await?;
    for rec in &all {
        unit.delete_endpoint(namespace, &rec.spec.name).await?;
        unit.append_event(event(EventKind::EndpointDeleted, rec, json!({})), now)
            .await?;
    }
    Ok(all.len())
}

/// Read, change and write in one unit of work with its events; retried a few times when another
/// writer changed the endpoint in between (the version check).
async fn modify<F>(
    ctx: &Context,
    who: &Principal,
    namespace: &str,
    name: &str,
    mut change: F,
) -> Result<EndpointRecord>
where
    F: FnMut(&mut EndpointRecord) -> Result<()>,
{
    for _ in 0..5 {
        let mut unit = ctx.store.begin().await?;
        let before = unit
            .endpoint(namespace, name)
            .await?
            .ok_or_else(|| not_found(namespace, name))?;
        let mut rec = before.clone();
        change(&mut rec)?;
        if rec.spec != before.spec {
            super::quotas::check(unit.as_mut(), ctx, namespace, Some(&before), &rec.spec).await?;
        }
        rec.updated_at = ctx.clock.now();
        rec.updated_by = actor(who);
        let saved = match unit.update_endpoint(&rec).await {
            Ok(saved) => saved,
            Err(StoreError::Stale) => continue,
            Err(e) => return Err(e.into()),
        };
        if saved.spec != before.spec {
            unit.append_event(
                event(EventKind::EndpointUpdated, &saved, json!({})),
                rec.updated_at,
            )
            .await?;
        }
        if let Some(ev) = status_event(before.state, &saved) {
            unit.append_event(ev, rec.updated_at).await?;
        }
        unit.commit().await?;
        (ctx.on_change)();
        return Ok(saved);
    }
    Err(StoreError::Stale.into())
}

/// The runtime's write of an endpoint's status (`next` carries the version it read), with the
/// state-change event when the state moved. `Stale` when the endpoint changed since it was read.
pub async fn write_status(
    store: &dyn Store,
    before: EndpointState,
    next: &EndpointRecord,
) -> StoreResult<EndpointRecord> {
    let mut unit: Box<dyn Session> = store.begin().await?;
    let saved = unit.update_endpoint(next).await?;
    if let Some(ev) = status_event(before, &saved) {
        unit.append_event(ev, saved.updated_at).await?;
    }
    unit.commit().await?;
    Ok(saved)
}

/// The response cache is restricted to instance administrators (spec 2.7): enabling it (on create, or
/// turning it on in an update) needs one.
fn check_cache(who: &Principal, spec: &EndpointSpec, before: Option<&EndpointSpec>) -> Result<()> {
    let on =
        |s: &EndpointSpec| s.cache_http_responses || s.experimental_features.cache_http_responses;
    if on(spec) && !before.is_some_and(on) && !who.is_admin() {
        return Err(Error::Forbidden(
            "the response cache (cacheHttpResponses) can only be enabled by an instance administrator".into(),
        ));
    }
    Ok(())
}

/// Environment variables that change what a program runs (a preload, a startup script, a search path).
/// Setting them is code execution on the host, like a custom command, whatever the allowlists say.
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

/// Variables the server sets for every replica and router (its port, its id): nobody sets them in a spec.
const SET_BY_SERVER: [&str; 2] = ["PORT", "REPLICA_ID"];

/// The replica's own directories, set by the server: moving them (to where a program finds files it
/// loads at start) takes the same permission as running code.
const REPLICA_PLACES: [&str; 2] = ["HOME", "TMPDIR"];

/// Whether `name` is in an allowlist of exact names and prefixes ending in `*`.
fn listed(list: &[String], name: &str) -> bool {
    list.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => p == name,
    })
}

/// The first of `args` not allowed by a launcher's `flags`: each flag (its name before `=`) must be
/// listed, and a bare value may only follow a listed flag given without `=`.
fn refused_arg<'a>(flags: &[String], args: &'a [String]) -> Option<&'a str> {
    let mut value_may_follow = false;
    for arg in args {
        if arg.starts_with('-') {
            let name = arg.split_once('=').map_or(arg.as_str(), |(n, _)| n);
            if !flags.iter().any(|f| f == name) {
                return Some(arg);
            }
            value_may_follow = !arg.contains('=');
        } else if std::mem::take(&mut value_may_follow) {
            continue;
        } else {
            return Some(arg);
        }
    }
    None
}

/// The names in `now` that are new or hold another value than in `before`.
fn changed<'a, V: PartialEq>(
    now: &'a BTreeMap<String, V>,
    before: Option<&'a BTreeMap<String, V>>,
) -> impl Iterator<Item = &'a String> {
    now.iter()
        .filter(move |(k, v)| before.and_then(|b| b.get(*k)) != Some(*v))
        .map(|(k, _)| k)
}

/// Why setting `var` for a program needs the custom-commands permission, if it does. `allowed` is the
/// launcher's own allowlist, named by `setting`.
fn var_needs(
    config: &RuntimeConfig,
    allowed: &[String],
    setting: &str,
    var: &str,
) -> Option<String> {
    if runs_code(var) {
        return Some(format!(
            "the variable {var} changes what the engine runs on the server's host"
        ));
    }
    if REPLICA_PLACES.contains(&var) {
        return Some(format!(
            "the variable {var} is set by the server for every replica"
        ));
    }
    if listed(&config.tenant_env, var) || listed(allowed, var) {
        return None;
    }
    let lists = match setting {
        "" => "runtime.tenant_env".to_string(),
        s => format!("runtime.tenant_env, {s}"),
    };
    Some(format!(
        "the variable {var} is not one tenants may set ({lists})"
    ))
}

/// What a spec makes the host run beyond what the configured launchers let a tenant ask for: a
/// `custom` image's command, a variable outside the allowlists, an argument its launcher does not
/// allow, a variable of its router outside the router's allowlist. `None` when nothing. Only what
/// changed since `before` counts (everything, when the image's kind or the router's tag changed).
fn host_code(
    config: &RuntimeConfig,
    spec: &EndpointSpec,
    before: Option<&EndpointSpec>,
) -> Option<String> {
    let (model, old) = (&spec.model, before.map(|b| &b.model));
    let custom = matches!(model.image, ModelImage::Custom(_));
    if custom && model.command.as_ref().is_some_and(|c| !c.is_empty()) {
        let same = old.is_some_and(|o| {
            o.command == model.command
                && o.args == model.args
                && o.image == model.image
                && o.env == model.env
                && o.secrets == model.secrets
        });
        if !same {
            return Some("custom images run model.command on the server's host".into());
        }
    }
    let key = model.image.key();
    let launcher = config.launchers.get(key).filter(|_| !custom);
    let old = old.filter(|o| o.image.key() == key);
    let setting = match launcher {
        Some(_) => format!("runtime.launchers.{key}.tenant_env"),
        None => String::new(),
    };
    let allowed = launcher.map_or(&[][..], |l| &l.tenant_env);
    let vars = changed(&model.env, old.map(|o| &o.env))
        .chain(changed(&model.secrets.0, old.map(|o| &o.secrets.0)));
    for var in vars {
        if let Some(why) = var_needs(config, allowed, &setting, var) {
            return Some(why);
        }
    }
    // A custom image's args are part of its command, covered above.
    if !custom && old.is_none_or(|o| o.args != model.args) {
        let flags = launcher.map_or(&[][..], |l| &l.tenant_args);
        if let Some(arg) = refused_arg(flags, model.args.as_deref().unwrap_or_default()) {
            return Some(format!(
                "the argument {arg:?} is not one tenants may pass to {key} images \
                 (runtime.launchers.{key}.tenant_args)"
            ));
        }
    }
    router_code(config, spec, before)
}

/// The part of [`host_code`] about the custom router: its variables, against the router's allowlist.
fn router_code(
    config: &RuntimeConfig,
    spec: &EndpointSpec,
    before: Option<&EndpointSpec>,
) -> Option<String> {
    let router = spec.custom_router.as_ref()?;
    let old = before
        .and_then(|b| b.custom_router.as_ref())
        .filter(|o| o.tag == router.tag);
    let tag = &router.tag;
    let allowed = config.routers.get(tag).map_or(&[][..], |l| &l.tenant_env);
    let setting = format!("runtime.routers.{tag:?}.tenant_env");
    changed(&router.env, old.map(|o| &o.env))
        .find_map(|var| var_needs(config, allowed, &setting, var))
}

/// Whether `who` may run code on the host: the principals `runtime.custom_commands` and
/// `runtime.custom_command_users` allow.
fn runs_host_code(config: &RuntimeConfig, who: &Principal) -> bool {
    let by_role = match config.custom_commands {
        CustomCommands::Everyone => true,
        CustomCommands::Admins => who.is_admin(),
        CustomCommands::Nobody => false,
    };
    by_role
        || (config.custom_commands != CustomCommands::Nobody
            && config.custom_command_users.contains(&who.account.name))
}

/// Code execution on the host, and anything a launcher does not let tenants set or pass, is for the
/// principals the config allows. Checked for what changed since `before`.
fn check_host_code(
    ctx: &Context,
    who: &Principal,
    spec: &EndpointSpec,
    before: Option<&EndpointSpec>,
) -> Result<()> {
    let config = &ctx.runtime_config;
    match host_code(config, spec, before) {
        Some(why) if !runs_host_code(config, who) => Err(Error::Forbidden(format!(
            "{why}; this server allows that only to the principals in runtime.custom_commands"
        ))),
        _ => Ok(()),
    }
}

/// `PORT` and `REPLICA_ID` are the server's to set: a spec that sets them (in `model.env`,
/// `model.secrets` or `customRouter.env`) is invalid, whoever sends it. Checked for what changed.
fn check_server_set(spec: &EndpointSpec, before: Option<&EndpointSpec>) -> Result<()> {
    let (model, old) = (&spec.model, before.map(|b| &b.model));
    let router = spec.custom_router.as_ref().map(|r| &r.env);
    let old_router = before
        .and_then(|b| b.custom_router.as_ref())
        .map(|r| &r.env);
    let named = changed(&model.env, old.map(|o| &o.env))
        .map(|k| ("model.env", k))
        .chain(changed(&model.secrets.0, old.map(|o| &o.secrets.0)).map(|k| ("model.secrets", k)))
        .chain(
            router
                .into_iter()
                .flat_map(|r| changed(r, old_router))
                .map(|k| ("customRouter.env", k)),
        );
    let issues: Vec<Issue> = named
        .filter(|(_, k)| SET_BY_SERVER.contains(&k.as_str()))
        .map(|(field, k)| {
            Issue::new(
                format!("{field}.{k}"),
                format!("{k} is set by the server for every replica; a spec cannot set it"),
            )
        })
        .collect();
    if issues.is_empty() {
        Ok(())
    } else {
        Err(Error::Invalid(issues))
    }
}

/// A custom domain must be a name of its own (not an address, localhost or this server). That no
/// other endpoint has the same domain and path is the store's unique index.
fn check_route(ctx: &Context, spec: &EndpointSpec) -> Result<()> {
    let Some(route) = &spec.route else {
        return Ok(());
    };
    let (domain, _) = route.key();
    if crate::model::is_server_host(&domain, &ctx.public_host) {
        return Err(Error::Invalid(vec![Issue::new(
            "route.domain",
            "must be a domain of its own, not this server's address, an IP address or localhost",
        )]));
    }
    Ok(())
}

/// Replaces every secret value given in a spec or patch by its ciphertext, before anything else sees it.
/// Nulls stay null (on update they mean "keep the stored value"). The custom image's registry
/// password is a secret too. A value equal to what `stored` already holds keeps its ciphertext, so
/// sending a secret again is not a change.
fn seal_secrets(ctx: &Context, body: &mut Value, stored: Option<&EndpointSpec>) {
    let seal = |plain: &str, old: Option<&str>| -> String {
        match old {
            Some(sealed) if ctx.secrets.open(sealed).is_ok_and(|p| p == plain) => {
                sealed.to_string()
            }
            _ => ctx.secrets.seal(plain),
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
) -> Result<()> {
    let c = &spec.compute;
    let found = hardware.find(
        &spec.provider.vendor,
        &spec.provider.region,
        c.accelerator.as_str(),
        &c.instance_type,
        &c.instance_size,
    );
    match found {
        None => Err(Error::Invalid(vec![Issue::new(
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
        Some(p) if !p.compute.is_available() => Err(Error::Conflict(format!(
            "no compatible compute found: {} is currently unavailable",
            p.compute.id
        ))),
        Some(p) => {
            spec.compute.id = Some(p.compute.id.clone());
            Ok(())
        }
    }
}
