//! Trusted publishers (keyless sign-in from CI): a namespace's administrator names the CI workflows
//! whose OIDC id tokens may sign in there (issuer, audience, exact claim values) and what they may do.
//! The tokens issued act as the administrator who registered the publisher, within that namespace only.

use std::collections::BTreeMap;

use serde::Deserialize;
use utoipa::ToSchema;

use super::{Context, Error, Result};
use crate::auth::{Credential, Principal};
use crate::crypto::random_id;
use crate::model::account::{Account, AccountKind, Role, Scope};
use crate::model::oauth::{check_publisher, TrustedPublisher};
use crate::store::{Session, StoreResult};

/// Publishers one namespace may hold.
pub const MAX_PER_NAMESPACE: usize = 50;

const ID_PREFIX: &str = "tp_";

/// A publisher to register.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PublisherIn {
    /// The CI provider's issuer, exactly as its tokens say it; one of the server's `oauth.ci_issuers`.
    pub issuer: String,
    /// The `aud` the id token must carry, exactly (the workflow asks its provider for it).
    pub audience: String,
    /// Claims the id token must carry with exactly these values, e.g. `{"repository": "acme/app",
    /// "ref": "refs/heads/main"}`. No patterns: `acme/*` matches only the string `acme/*`.
    pub claims: BTreeMap<String, String>,
    /// What the issued token may do, e.g. `["read-endpoints", "write-endpoints"]`.
    pub scopes: Vec<Scope>,
}

/// Whether `user` administers `namespace`: it is the user itself, or an organization where the user
/// is an admin. An instance administrator is not one by office: the tokens act as the registering
/// user, who must be able to act there.
pub async fn administers(
    session: &mut dyn Session,
    user: &Account,
    namespace: &Account,
) -> StoreResult<bool> {
    if user.disabled_at.is_some() {
        return Ok(false);
    }
    if namespace.id == user.id {
        return Ok(true);
    }
    Ok(namespace.kind == AccountKind::Org
        && session.role_in(&namespace.name, &user.id).await? == Some(Role::Admin))
}

/// The namespace, when the principal administers it with an unrestricted personal token.
async fn administered(ctx: &Context, who: &Principal, namespace: &str) -> Result<Account> {
    let personal = matches!(who.credential, Credential::PersonalToken(_)) && who.scopes.is_none();
    if !personal {
        return Err(Error::Forbidden(
            "managing trusted publishers needs an unrestricted personal token".into(),
        ));
    }
    let mut session = ctx.store.read().await?;
    let account = session
        .account_by_name(namespace)
        .await?
        .ok_or_else(|| Error::NotFound(format!("namespace {namespace:?} not found")))?;
    if administers(session.as_mut(), &who.account, &account).await? {
        return Ok(account);
    }
    Err(Error::Forbidden(format!(
        "you may not manage the trusted publishers of {namespace:?} \
         (needs being it or an admin of the organization)"
    )))
}

/// The publishers of a namespace the principal administers.
pub async fn list(
    ctx: &Context,
    who: &Principal,
    namespace: &str,
) -> Result<Vec<TrustedPublisher>> {
    let account = administered(ctx, who, namespace).await?;
    Ok(ctx.store.read().await?.publishers_of(&account.id).await?)
}

/// Registers a publisher; the tokens it gets act as the principal's user. `ci_issuers` is the
/// server's allow-list (`oauth.ci_issuers`).
pub async fn create(
    ctx: &Context,
    who: &Principal,
    namespace: &str,
    ci_issuers: &[String],
    input: PublisherIn,
) -> Result<TrustedPublisher> {
    let account = administered(ctx, who, namespace).await?;
    if !ci_issuers.contains(&input.issuer) {
        return Err(Error::BadRequest(format!(
            "issuer {:?} is not one of this server's CI issuers (oauth.ci_issuers: {})",
            input.issuer,
            if ci_issuers.is_empty() {
                "none; keyless sign-in is off".to_string()
            } else {
                ci_issuers.join(", ")
            }
        )));
    }
    check_publisher(&input.audience, &input.claims, &input.scopes).map_err(Error::BadRequest)?;
    let publisher = TrustedPublisher {
        id: format!("{ID_PREFIX}{}", random_id()),
        namespace: account.name.clone(),
        namespace_id: account.id.clone(),
        issuer: input.issuer,
        audience: input.audience,
        claims: input.claims,
        scopes: input.scopes,
        created_by: who.account.name.clone(),
        created_by_id: who.account.id.clone(),
        created_at: ctx.clock.now(),
    };
    let mut unit = ctx.store.begin().await?;
    if unit.publishers_of(&account.id).await?.len() >= MAX_PER_NAMESPACE {
        return Err(Error::BadRequest(format!(
            "{namespace:?} already has {MAX_PER_NAMESPACE} trusted publishers; delete one first"
        )));
    }
    unit.create_publisher(&publisher).await?;
    unit.commit().await?;
    tracing::info!(publisher = %publisher.id, namespace = %publisher.namespace,
        issuer = %publisher.issuer, by = %publisher.created_by, "trusted publisher registered");
    Ok(publisher)
}

/// Deletes a publisher: its workflows can no longer sign in (tokens already issued run out within
/// the hour).
pub async fn delete(ctx: &Context, who: &Principal, namespace: &str, id: &str) -> Result<()> {
    let account = administered(ctx, who, namespace).await?;
    let mut unit = ctx.store.begin().await?;
    if !unit.delete_publisher(&account.id, id).await? {
        return Err(Error::NotFound(format!(
            "trusted publisher {id:?} of {namespace:?} not found"
        )));
    }
    unit.commit().await?;
    tracing::info!(publisher = %id, namespace = %namespace, "trusted publisher deleted");
    Ok(())
}
