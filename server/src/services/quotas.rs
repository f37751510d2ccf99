//! Quotas: how many endpoints and replicas a namespace may hold (configured, or an administrator's
//! override), and how many accelerators of each instance type (the hardware list's `maxAccelerators`).
//! Checked inside the unit of work that writes the endpoint, under the namespace's lock.

use std::collections::HashMap;

use super::{Context, Error, Result};
use crate::config::QuotaConfig;
use crate::hardware::{HardwareList, Placement, Quota};
use crate::model::EndpointSpec;
use crate::store::{EndpointRecord, QuotaOverride, Session};

/// A namespace's limits in effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Limits {
    pub endpoints: u32,
    pub replicas: u32,
}

impl Limits {
    pub fn of(config: &QuotaConfig, set: QuotaOverride) -> Limits {
        Limits {
            endpoints: set.endpoints.unwrap_or(config.endpoints),
            replicas: set.replicas.unwrap_or(config.replicas),
        }
    }
}

/// An instance type, as quotas count it: all sizes of one type in one region share its accelerators.
type InstanceType = (String, String, String);

fn instance_type(spec: &EndpointSpec) -> InstanceType {
    (
        spec.provider.vendor.clone(),
        spec.provider.region.clone(),
        spec.compute.instance_type.clone(),
    )
}

/// Where the hardware list puts the spec's compute.
fn placement<'h>(hardware: &'h HardwareList, spec: &EndpointSpec) -> Option<Placement<'h>> {
    let c = &spec.compute;
    hardware.find(
        &spec.provider.vendor,
        &spec.provider.region,
        c.accelerator.as_str(),
        &c.instance_type,
        &c.instance_size,
    )
}

/// Accelerators a spec may hold at once: its `maxReplica` times its instance's accelerators.
fn accelerators(hardware: &HardwareList, spec: &EndpointSpec) -> u32 {
    placement(hardware, spec)
        .map_or(0, |p| p.compute.num_accelerators)
        .saturating_mul(spec.compute.scaling.max_replica)
}

/// The type's quota, from the hardware list.
fn type_quota(hardware: &HardwareList, spec: &EndpointSpec) -> Option<Quota> {
    placement(hardware, spec).map(|p| p.compute.quota.clone())
}

/// What the namespace's endpoints other than `except` hold.
struct Usage {
    endpoints: u32,
    replicas: u32,
    accelerators: HashMap<InstanceType, u32>,
}

fn usage(hardware: &HardwareList, endpoints: &[EndpointRecord], except: Option<&str>) -> Usage {
    let mut u = Usage {
        endpoints: 0,
        replicas: 0,
        accelerators: HashMap::new(),
    };
    for e in endpoints.iter().filter(|e| Some(e.id.as_str()) != except) {
        u.endpoints += 1;
        u.replicas = u
            .replicas
            .saturating_add(e.spec.compute.scaling.max_replica);
        *u.accelerators.entry(instance_type(&e.spec)).or_default() +=
            accelerators(hardware, &e.spec);
    }
    u
}

fn exceeded(message: String) -> Error {
    Error::Forbidden(format!("quota exceeded: {message}"))
}

/// Checks that `after` (a new endpoint when `before` is none) fits the namespace's quotas, in the unit
/// of work that will write it. Only what grows is checked: an update that holds no more than before
/// passes even where an administrator has since lowered the quota.
pub async fn check(
    unit: &mut dyn Session,
    ctx: &Context,
    namespace: &str,
    before: Option<&EndpointRecord>,
    after: &EndpointSpec,
) -> Result<()> {
    unit.lock(&format!("quota:{namespace}")).await?;
    let limits = Limits::of(&ctx.quotas, unit.namespace_quota(namespace).await?);
    let all = unit.endpoints_in(namespace).await?;
    let used = usage(&ctx.hardware, &all, before.map(|b| b.id.as_str()));
    let raise = "an administrator can raise it (switchyard admin quota set)";
    if before.is_none() && used.endpoints >= limits.endpoints {
        return Err(exceeded(format!(
            "namespace {namespace:?} has {} endpoints, its quota; {raise}",
            used.endpoints
        )));
    }
    let max = after.compute.scaling.max_replica;
    let grew = before.is_none_or(|b| max > b.spec.compute.scaling.max_replica);
    if grew && used.replicas.saturating_add(max) > limits.replicas {
        return Err(exceeded(format!(
            "maxReplica {max} would bring namespace {namespace:?} to {} replicas, over its quota of {}; {raise}",
            used.replicas.saturating_add(max),
            limits.replicas
        )));
    }
    check_instance_type(ctx, namespace, &used, before, after)
}

fn check_instance_type(
    ctx: &Context,
    namespace: &str,
    used: &Usage,
    before: Option<&EndpointRecord>,
    after: &EndpointSpec,
) -> Result<()> {
    let Some(quota) = type_quota(&ctx.hardware, after) else {
        return Ok(());
    };
    let kind = instance_type(after);
    let wants = accelerators(&ctx.hardware, after);
    let held = before
        .filter(|b| instance_type(&b.spec) == kind)
        .map_or(0, |b| accelerators(&ctx.hardware, &b.spec));
    let total = used
        .accelerators
        .get(&kind)
        .copied()
        .unwrap_or(0)
        .saturating_add(wants);
    if wants > held && total > quota.max_accelerators {
        return Err(exceeded(format!(
            "{} replicas of {} {} would hold {total} accelerators of that type in namespace {namespace:?}, \
             over its quota of {}",
            after.compute.scaling.max_replica,
            after.compute.instance_type,
            after.compute.instance_size,
            quota.max_accelerators
        )));
    }
    Ok(())
}

/// The hardware list as a namespace sees it: each instance's `usedAccelerators` counts what the
/// namespace's endpoints hold of its type.
pub async fn hardware_for(ctx: &Context, namespace: &str) -> Result<HardwareList> {
    let endpoints = ctx.store.read().await?.endpoints_in(namespace).await?;
    let used = usage(&ctx.hardware, &endpoints, None);
    let mut list = (*ctx.hardware).clone();
    for vendor in &mut list.vendors {
        for region in &mut vendor.regions {
            for compute in &mut region.computes {
                let kind = (
                    vendor.name.clone(),
                    region.name.clone(),
                    compute.instance_type.clone(),
                );
                compute.quota.used_accelerators =
                    used.accelerators.get(&kind).copied().unwrap_or(0);
            }
        }
    }
    Ok(list)
}

/// A namespace's limits in effect and what it holds.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuotaOut {
    pub namespace: String,
    pub limits: Limits,
    /// The administrator's own values, where set (the rest is the server's configured default).
    pub overrides: QuotaOverrideOut,
    pub used: Limits,
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QuotaOverrideOut {
    #[serde(default)]
    pub endpoints: Option<u32>,
    #[serde(default)]
    pub replicas: Option<u32>,
}

pub async fn show(ctx: &Context, namespace: &str) -> Result<QuotaOut> {
    let mut session = ctx.store.read().await?;
    let set = session.namespace_quota(namespace).await?;
    let endpoints = session.endpoints_in(namespace).await?;
    let used = usage(&ctx.hardware, &endpoints, None);
    Ok(QuotaOut {
        namespace: namespace.to_string(),
        limits: Limits::of(&ctx.quotas, set),
        overrides: QuotaOverrideOut {
            endpoints: set.endpoints,
            replicas: set.replicas,
        },
        used: Limits {
            endpoints: used.endpoints,
            replicas: used.replicas,
        },
    })
}

/// Sets (or, with both `None`, removes) a namespace's override; the namespace must exist.
pub async fn set(ctx: &Context, namespace: &str, set: QuotaOverrideOut) -> Result<QuotaOut> {
    let mut unit = ctx.store.begin().await?;
    if unit.account_by_name(namespace).await?.is_none() {
        return Err(Error::NotFound(format!(
            "namespace {namespace:?} not found"
        )));
    }
    let value = QuotaOverride {
        endpoints: set.endpoints,
        replicas: set.replicas,
    };
    unit.set_namespace_quota(namespace, value, ctx.clock.now())
        .await?;
    unit.commit().await?;
    // The runtime applies a lowered replica quota on its next pass.
    (ctx.on_change)();
    show(ctx, namespace).await
}
