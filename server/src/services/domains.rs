//! Custom domains. A domain belongs to one namespace: the first endpoint that routes it claims it for its
//! namespace (in the unit of work that stores the endpoint), or an instance administrator assigns it; only
//! that namespace's endpoints may route paths under it. The server's own names (its public host, localhost
//! and its forms, IP addresses) belong to no one: no endpoint can catch requests meant for the API.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{Context, Error, Result};
use crate::model::{bare_host, is_server_host, EndpointSpec, Issue};
use crate::store::{DomainClaim, Session};

/// A domain as the admin API shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DomainOut {
    pub domain: String,
    /// The namespace whose endpoints may route under it.
    pub namespace: String,
    /// The administrator who assigned it; null when the namespace's first endpoint on it claimed it.
    pub assigned_by: Option<String>,
    pub created_at: DateTime<Utc>,
}

impl From<DomainClaim> for DomainOut {
    fn from(c: DomainClaim) -> DomainOut {
        DomainOut {
            domain: c.domain,
            namespace: c.namespace,
            assigned_by: c.assigned_by,
            created_at: c.created_at,
        }
    }
}

const NOT_OURS: &str =
    "must be a domain of its own, not this server's address, an IP address or localhost";

/// A custom route's domain must be a name of its own (see [`is_server_host`]). Whose it is, is
/// [`claim_route`]'s.
pub fn check_route(ctx: &Context, spec: &EndpointSpec) -> Result<()> {
    let Some(route) = &spec.route else {
        return Ok(());
    };
    let (domain, _) = route.key();
    if is_server_host(&domain, &ctx.public_host) {
        return Err(Error::Invalid(vec![Issue::new("route.domain", NOT_OURS)]));
    }
    Ok(())
}

/// In the unit of work that stores an endpoint of `namespace` with `spec`: its route's domain is claimed
/// for the namespace when nobody had it, and refused (409) when it belongs to another.
pub async fn claim_route(
    unit: &mut dyn Session,
    namespace: &str,
    spec: &EndpointSpec,
    now: DateTime<Utc>,
) -> Result<()> {
    let Some(route) = &spec.route else {
        return Ok(());
    };
    let (domain, _) = route.key();
    let holder = unit.claim_domain(&domain, namespace, now).await?;
    if !holder.eq_ignore_ascii_case(namespace) {
        return Err(Error::Conflict(format!(
            "the domain {domain} belongs to another namespace: only its endpoints may route under it \
             (an instance administrator assigns domains: switchyard admin domain assign)"
        )));
    }
    Ok(())
}

/// Every claimed domain.
pub async fn list(ctx: &Context) -> Result<Vec<DomainOut>> {
    let claims = ctx.store.read().await?.domain_claims().await?;
    Ok(claims.into_iter().map(DomainOut::from).collect())
}

/// A domain as routes compare it, if it may be anyone's: a DNS name of its own.
fn assignable(ctx: &Context, domain: &str) -> Result<String> {
    let domain = bare_host(domain);
    let valid = crate::model::endpoint::is_dns_hostname(&domain);
    if !valid || is_server_host(&domain, &ctx.public_host) {
        let why = if valid {
            NOT_OURS
        } else {
            "must be a DNS host name such as `api.example.com`"
        };
        return Err(Error::Invalid(vec![Issue::new("domain", why)]));
    }
    Ok(domain)
}

/// Refused (409) while endpoints of namespaces other than `keep` route under `domain`.
async fn unrouted(unit: &mut dyn Session, domain: &str, keep: Option<&str>) -> Result<()> {
    let routing: Vec<String> = unit
        .endpoints_on_domain(domain)
        .await?
        .into_iter()
        .filter(|(ns, _)| keep.is_none_or(|k| !k.eq_ignore_ascii_case(ns)))
        .map(|(ns, name)| format!("{ns}/{name}"))
        .collect();
    match routing.is_empty() {
        true => Ok(()),
        false => Err(Error::Conflict(format!(
            "endpoints still route under {domain}: {}; change their routes or delete them first",
            routing.join(", ")
        ))),
    }
}

/// Gives `domain` to `namespace` (an existing user or organization), by the administrator `by`: refused
/// while another namespace's endpoints route under it.
pub async fn assign(ctx: &Context, by: &str, domain: &str, namespace: &str) -> Result<DomainOut> {
    let domain = assignable(ctx, domain)?;
    let mut unit = ctx.store.begin().await?;
    let Some(account) = unit.account_by_name(namespace).await? else {
        return Err(Error::NotFound(format!(
            "no user or organization {namespace:?}"
        )));
    };
    let now = ctx.clock.now();
    // The row first (written, so held until the unit ends), then the check: an endpoint another namespace
    // stores meanwhile waits on the row and then finds it taken.
    unit.assign_domain(&domain, &account.name, by, now).await?;
    unrouted(unit.as_mut(), &domain, Some(&account.name)).await?;
    unit.commit().await?;
    (ctx.on_change)();
    tracing::info!(%domain, namespace = %account.name, by, "domain assigned");
    Ok(DomainOut {
        domain,
        namespace: account.name,
        assigned_by: Some(by.to_string()),
        created_at: now,
    })
}

/// Lets `domain` go (the next endpoint to route it claims it): refused while endpoints route under it.
pub async fn release(ctx: &Context, by: &str, domain: &str) -> Result<()> {
    let domain = bare_host(domain);
    let mut unit = ctx.store.begin().await?;
    // The row first (deleted, so held until the unit ends), then the check, as in `assign`.
    if !unit.release_domain(&domain).await? {
        return Err(Error::NotFound(format!("no one holds the domain {domain}")));
    }
    unrouted(unit.as_mut(), &domain, None).await?;
    unit.commit().await?;
    (ctx.on_change)();
    tracing::info!(%domain, by, "domain released");
    Ok(())
}
