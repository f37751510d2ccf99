//! Endpoint operations: create, update (deep partial), delete, lifecycle actions and the runtime's
//! status writes, each with its event in the same unit of work; the policies they apply (host code,
//! response cache, compute, custom routes) and sealing of secrets.

use serde_json::{json, Value};

use super::policy::{check_cache, check_host_code, check_server_set};
use super::{Context, Error, Result};
use crate::auth::Principal;
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

/// An endpoint event: the endpoint as the API shows it (secrets redacted), plus `extra`; webhooks get
/// it in the hub's payload form, with links under `base` (the server's public URL).
fn event(kind: EventKind, rec: &EndpointRecord, extra: Value, base: &str) -> NewEvent {
    let endpoint = serde_json::to_value(render(rec)).unwrap_or_default();
    let hook = crate::model::webhook::endpoint_payload(kind, &endpoint, &extra, base);
    let mut payload = json!({ "endpoint": endpoint });
    if let (Some(p), Value::Object(extra)) = (payload.as_object_mut(), extra) {
        p.extend(extra);
    }
    NewEvent {
        kind,
        namespace: rec.namespace.clone(),
        subject: rec.spec.name.clone(),
        payload,
        hook: Some(hook),
    }
}

/// The state-change event, when `before` and `after` differ in state.
fn status_event(before: EndpointState, after: &EndpointRecord, base: &str) -> Option<NewEvent> {
    (before != after.state).then(|| {
        event(
            EventKind::EndpointStatus,
            after,
            json!({
                "previousState": before.as_str(),
                "state": after.state.as_str(),
                "message": after.message,
            }),
            base,
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
    super::domains::check_route(ctx, &spec)?;
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
    super::domains::claim_route(unit.as_mut(), namespace, &rec.spec, now).await?;
    unit.insert_endpoint(&rec).await?;
    unit.append_event(
        event(EventKind::EndpointCreated, &rec, json!({}), &ctx.public_url),
        now,
    )
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
            super::domains::check_route(ctx, &spec)?;
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
    gone(unit.as_mut(), &rec, ctx.clock.now(), &ctx.public_url).await?;
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
    base: &str,
) -> StoreResult<usize> {
    let all = unit.endpoints_in(namespace).await?;
    for rec in &all {
        unit.delete_endpoint(namespace, &rec.spec.name).await?;
        gone(unit, rec, now, base).await?;
    }
    Ok(all.len())
}

/// The deletion's event and its notice.
async fn gone(
    unit: &mut dyn Session,
    rec: &EndpointRecord,
    now: chrono::DateTime<chrono::Utc>,
    base: &str,
) -> StoreResult<()> {
    unit.append_event(event(EventKind::EndpointDeleted, rec, json!({}), base), now)
        .await?;
    if let Some(n) = super::notices::endpoint_notice(rec.state, rec, true, base) {
        unit.notify(&n, now).await?;
    }
    Ok(())
}

/// A state change's event and, when it needs a person, its notice.
async fn moved(
    unit: &mut dyn Session,
    before: EndpointState,
    saved: &EndpointRecord,
    base: &str,
) -> StoreResult<()> {
    if let Some(ev) = status_event(before, saved, base) {
        unit.append_event(ev, saved.updated_at).await?;
        if let Some(n) = super::notices::endpoint_notice(before, saved, false, base) {
            unit.notify(&n, saved.updated_at).await?;
        }
    }
    Ok(())
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
        if rec.spec.route != before.spec.route {
            super::domains::claim_route(unit.as_mut(), namespace, &rec.spec, ctx.clock.now())
                .await?;
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
                event(
                    EventKind::EndpointUpdated,
                    &saved,
                    json!({}),
                    &ctx.public_url,
                ),
                rec.updated_at,
            )
            .await?;
        }
        moved(unit.as_mut(), before.state, &saved, &ctx.public_url).await?;
        unit.commit().await?;
        (ctx.on_change)();
        return Ok(saved);
    }
    Err(StoreError::Stale.into())
}

/// The runtime's write of an endpoint's status (`next` carries the version it read), with the
/// state-change event when the state moved (links in its payload under `base`, the public URL).
/// `Stale` when the endpoint changed since it was read.
pub async fn write_status(
    store: &dyn Store,
    before: EndpointState,
    next: &EndpointRecord,
    base: &str,
    term: Option<&crate::store::cluster::Term>,
) -> StoreResult<EndpointRecord> {
    let mut unit: Box<dyn Session> = store.begin().await?;
    if let Some(term) = term {
        unit.hold_term(term).await?;
    }
    let saved = unit.update_endpoint(next).await?;
    moved(unit.as_mut(), before, &saved, base).await?;
    unit.commit().await?;
    Ok(saved)
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
    if let Some(why) = hardware.cannot_run(c.accelerator.as_str()) {
        return Err(Error::Invalid(vec![Issue::new(
            "compute",
            format!("{why}; GET /v2/provider/{namespace} lists what it runs"),
        )]));
    }
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
