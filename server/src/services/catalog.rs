//! Catalog operations: deploy a plan (a model's or one recipe's), add, replace and remove items, and
//! the one-time seed; each item change has its `repo.*` event in the same unit of work.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use super::endpoints::insert_new;
use super::{Context, Error, Result};
use crate::auth::Principal;
use crate::deploy::{apply_config, base_spec, derive_name, name_prefix, Plan};
use crate::model::catalog::CatalogEntry;
use crate::model::event::EventKind;
use crate::model::webhook::repo_payloads;
use crate::model::{EndpointSpec, Issue};
use crate::store::{EndpointRecord, NewEvent, Session, StoreError};

/// Builds the spec for a plan with the deploy `config` applied, and creates the endpoint. A name given
/// in `config` that is taken is a 409; a derived name is made unique instead.
pub async fn deploy(
    ctx: &Context,
    who: &Principal,
    namespace: &str,
    plan: &Plan<'_>,
    config: Option<&Value>,
) -> Result<EndpointRecord> {
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
                let taken: HashSet<String> = ctx
                    .store
                    .read()
                    .await?
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
            Error::Invalid(
                issues
                    .into_iter()
                    .map(|mut i: Issue| {
                        i.path = i.path.replace("compute.scaling", "config.scaling");
                        i
                    })
                    .collect(),
            )
        })?;
        match insert_new(ctx, who, namespace, spec).await {
            Ok(rec) => {
                tracing::info!(namespace, endpoint = %name, recipe = %plan.recipe.public_id, "deployed from catalog");
                return Ok(rec);
            }
            Err(Error::Conflict(m)) if given_name.is_some() => return Err(Error::Conflict(m)),
            // Someone took the derived name in between: derive again.
            Err(Error::Conflict(_)) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(StoreError::Conflict(format!(
        "could not find a free endpoint name in {namespace:?}"
    ))
    .into())
}

/// The owner of a catalog item's events: the author part of its repo id.
fn owner(repo_id: &str) -> String {
    repo_id.split('/').next().unwrap_or(repo_id).to_string()
}

/// The events of a catalog change: one per payload webhooks get for it (see
/// [`repo_payloads`]; links under `base`, the public URL); with no `base`, one event no webhook hears.
fn item_events(
    kind: EventKind,
    entry: &CatalogEntry,
    previous: Option<&CatalogEntry>,
    base: Option<&str>,
) -> Vec<NewEvent> {
    let payload = json!({ "repoId": entry.repo_id, "item": entry, "previous": previous });
    let hooks = match base {
        Some(base) => repo_payloads(kind, entry, previous, base)
            .into_iter()
            .map(Some)
            .collect(),
        None => vec![None],
    };
    hooks
        .into_iter()
        .map(|hook| NewEvent {
            kind,
            namespace: owner(&entry.repo_id),
            subject: entry.repo_id.clone(),
            payload: payload.clone(),
            hook,
        })
        .collect()
}

/// Adds an item, or replaces the one with the same repo id; true when it was added.
pub async fn put_item(ctx: &Context, entry: &CatalogEntry) -> Result<bool> {
    let issues: Vec<Issue> = entry
        .problems()
        .into_iter()
        .map(|(p, m)| Issue::new(p, m))
        .collect();
    if !issues.is_empty() {
        return Err(Error::Invalid(issues));
    }
    let now = ctx.clock.now();
    let mut unit = ctx.store.begin().await?;
    let previous = unit.catalog_entry(&entry.repo_id).await?;
    let added = unit.put_catalog_entry(entry, now).await?;
    let kind = if added {
        EventKind::RepoCreated
    } else {
        EventKind::RepoUpdated
    };
    if previous.as_ref() != Some(entry) {
        for event in item_events(kind, entry, previous.as_ref(), Some(&ctx.public_url)) {
            unit.append_event(event, now).await?;
        }
    }
    unit.commit().await?;
    reload(ctx).await;
    Ok(added)
}

/// Removes an item; 404 when there is none.
pub async fn delete_item(ctx: &Context, repo_id: &str) -> Result<()> {
    let now = ctx.clock.now();
    let mut unit = ctx.store.begin().await?;
    let entry = unit
        .catalog_entry(repo_id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no catalog item {repo_id:?}")))?;
    unit.delete_catalog_entry(repo_id).await?;
    for event in item_events(EventKind::RepoDeleted, &entry, None, Some(&ctx.public_url)) {
        unit.append_event(event, now).await?;
    }
    unit.commit().await?;
    reload(ctx).await;
    Ok(())
}

/// The listing follows the store; a failed reload empties it until the next use loads it again.
async fn reload(ctx: &Context) {
    if let Err(e) = ctx.catalog.reload(ctx.store.as_ref()).await {
        tracing::warn!(error = %e, "catalog not reloaded after a change");
    }
}

/// Loads the seed the first time the store is opened (never again: a catalog emptied later stays
/// empty); true when it did.
pub async fn seed_once(
    store: &dyn crate::store::Store,
    seed: &[CatalogEntry],
    now: DateTime<Utc>,
) -> Result<bool> {
    let mut unit: Box<dyn Session> = store.begin().await?;
    if !unit.claim_catalog_seed(now).await? {
        return Ok(false);
    }
    for entry in seed {
        unit.put_catalog_entry(entry, now).await?;
        // No webhook exists yet when the seed goes in.
        for event in item_events(EventKind::RepoCreated, entry, None, None) {
            unit.append_event(event, now).await?;
        }
    }
    unit.commit().await?;
    Ok(true)
}
