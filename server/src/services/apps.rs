//! OAuth apps ("account settings"): a user, or an administrator of an organization, registers apps that
//! sign users in with Switchyard. A secret is shown once and kept as its SHA-256; an app without one
//! is public (PKCE only).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{Context, Error, Result};
use crate::auth::{Credential, Principal};
use crate::crypto::{hash_token, random_id};
use crate::model::account::{Account, AccountKind, Role, Scope};
use crate::model::oauth::{validate_redirect_uri, OAuthApp};
use crate::model::Issue;
use crate::store::Store;

/// Prefixes of generated client ids and secrets.
const CLIENT_ID_PREFIX: &str = "app_";
const SECRET_PREFIX: &str = "sys_";

/// What makes an app (create), or what changes in it (update: absent fields stay).
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppIn {
    /// The owning namespace (the caller or an organization they administer). Default: the caller.
    pub owner: Option<String>,
    pub name: Option<String>,
    pub homepage_url: Option<String>,
    pub logo_url: Option<String>,
    pub redirect_uris: Option<Vec<String>>,
    pub scopes: Option<Vec<Scope>>,
    /// A public app has no secret (PKCE and device flow only). Create only.
    #[serde(default)]
    pub public: bool,
    /// Bind the app to its owning organization with the `token-exchange` privilege (instance
    /// administrators only).
    pub token_exchange: Option<bool>,
}

/// An app, with its secret when one was just made (shown this once).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppOut {
    pub app: OAuthApp,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
}

fn invalid(m: impl Into<String>) -> Error {
    Error::BadRequest(m.into())
}

fn url_ok(url: &str) -> bool {
    (url.starts_with("https://") || url.starts_with("http://"))
        && url.len() <= 2000
        && !url.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// Checks the fields an app carries, whatever set them: every problem at once, each under its field.
fn check(app: &OAuthApp) -> Result<()> {
    let mut issues = Vec::new();
    let name = app.name.trim();
    if name.is_empty() || name.chars().count() > 100 {
        issues.push(Issue::new("name", "must be 1 to 100 characters"));
    }
    for (field, url) in [
        ("homepageUrl", &app.homepage_url),
        ("logoUrl", &app.logo_url),
    ] {
        if url.as_deref().is_some_and(|u| !url_ok(u)) {
            issues.push(Issue::new(field, "must be an http(s) URL"));
        }
    }
    if app.redirect_uris.len() > 20 {
        issues.push(Issue::new("redirectUris", "at most 20 redirect URIs"));
    }
    for (i, uri) in app.redirect_uris.iter().enumerate().take(20) {
        if let Err(e) = validate_redirect_uri(uri) {
            issues.push(Issue::new(format!("redirectUris[{i}]"), e));
        }
    }
    if app.scopes.is_empty() {
        issues.push(Issue::new("scopes", "an app needs at least one scope"));
    }
    if issues.is_empty() {
        Ok(())
    } else {
        Err(Error::Invalid(issues))
    }
}

/// Whether the principal manages the namespace's apps: its own, an organization it administers, or
/// any for an instance administrator. App management takes an unrestricted personal token.
async fn managed_owner(store: &dyn Store, who: &Principal, owner: &str) -> Result<Account> {
    let personal = matches!(who.credential, Credential::PersonalToken(_)) && who.scopes.is_none();
    if !personal {
        return Err(Error::Forbidden(
            "managing OAuth apps needs an unrestricted personal token".into(),
        ));
    }
    let mut session = store.read().await?;
    let account = session
        .account_by_name(owner)
        .await?
        .ok_or_else(|| Error::NotFound(format!("namespace {owner:?} not found")))?;
    if account.id == who.account.id || who.is_admin() {
        return Ok(account);
    }
    if account.kind == AccountKind::Org
        && session.role_in(owner, &who.account.id).await? == Some(Role::Admin)
    {
        return Ok(account);
    }
    Err(Error::Forbidden(format!(
        "you may not manage the apps of {owner:?} (needs being it or an admin of the organization)"
    )))
}

fn new_secret() -> String {
    let mut s = crate::crypto::new_token();
    s.replace_range(..crate::crypto::TOKEN_PREFIX.len(), SECRET_PREFIX);
    s
}

/// Registers an app for the principal.
pub async fn create(ctx: &Context, who: &Principal, input: AppIn) -> Result<AppOut> {
    let owner_name = input
        .owner
        .clone()
        .unwrap_or_else(|| who.account.name.clone());
    let owner = managed_owner(ctx.store.as_ref(), who, &owner_name).await?;
    if input.token_exchange == Some(true) && !(who.is_admin() && who.scopes.is_none()) {
        return Err(Error::Forbidden(
            "only an instance administrator grants the token-exchange privilege".into(),
        ));
    }
    register(ctx, &owner, input).await
}

/// Registers an app for the instance administrator at the shell (`switchyard admin app create`).
pub async fn create_as_admin(ctx: &Context, input: AppIn) -> Result<AppOut> {
    let owner_name = input
        .owner
        .clone()
        .ok_or_else(|| invalid("an owner namespace is needed"))?;
    let owner = ctx
        .store
        .read()
        .await?
        .account_by_name(&owner_name)
        .await?
        .ok_or_else(|| Error::NotFound(format!("namespace {owner_name:?} not found")))?;
    register(ctx, &owner, input).await
}

async fn register(ctx: &Context, owner: &Account, input: AppIn) -> Result<AppOut> {
    let token_exchange = input.token_exchange.unwrap_or(false);
    if token_exchange && owner.kind != AccountKind::Org {
        return Err(invalid(
            "the token-exchange privilege binds an app to an organization: the owner must be one",
        ));
    }
    let now = ctx.clock.now();
    let app = OAuthApp {
        id: format!("{CLIENT_ID_PREFIX}{}", random_id()),
        owner: owner.name.clone(),
        owner_id: owner.id.clone(),
        name: input.name.clone().unwrap_or_default(),
        homepage_url: input.homepage_url.clone(),
        logo_url: input.logo_url.clone(),
        redirect_uris: input.redirect_uris.clone().unwrap_or_default(),
        scopes: input.scopes.clone().unwrap_or_default(),
        has_secret: !input.public,
        token_exchange,
        created_at: now,
        updated_at: now,
    };
    check(&app)?;
    let secret = (!input.public).then(new_secret);
    let mut unit = ctx.store.begin().await?;
    unit.create_app(&app, secret.as_deref().map(hash_token).as_deref())
        .await?;
    unit.commit().await?;
    tracing::info!(app = %app.id, owner = %app.owner, "oauth app created");
    Ok(AppOut {
        app,
        client_secret: secret,
    })
}

fn not_found(id: &str) -> Error {
    Error::NotFound(format!("app {id:?} not found"))
}

async fn app_by_id(ctx: &Context, id: &str) -> Result<OAuthApp> {
    let found = ctx.store.read().await?.app(id).await?;
    found.map(|(app, _)| app).ok_or_else(|| not_found(id))
}

/// An app the principal manages.
pub async fn get(ctx: &Context, who: &Principal, id: &str) -> Result<OAuthApp> {
    let app = app_by_id(ctx, id).await?;
    match managed_owner(ctx.store.as_ref(), who, &app.owner).await {
        Ok(_) => Ok(app),
        // Someone else's app is not shown to exist.
        Err(Error::Forbidden(_)) => Err(not_found(id)),
        Err(e) => Err(e),
    }
}

/// The apps of a namespace the principal manages (default: its own).
pub async fn list(ctx: &Context, who: &Principal, owner: Option<&str>) -> Result<Vec<OAuthApp>> {
    let owner = owner.unwrap_or(&who.account.name);
    let account = managed_owner(ctx.store.as_ref(), who, owner).await?;
    Ok(ctx.store.read().await?.apps_of(&account.id).await?)
}

/// The apps of a namespace, for the instance administrator at the shell.
pub async fn list_as_admin(ctx: &Context, owner: &str) -> Result<Vec<OAuthApp>> {
    let mut session = ctx.store.read().await?;
    let account = session
        .account_by_name(owner)
        .await?
        .ok_or_else(|| Error::NotFound(format!("namespace {owner:?} not found")))?;
    Ok(session.apps_of(&account.id).await?)
}

/// Changes the fields given.
pub async fn update(ctx: &Context, who: &Principal, id: &str, input: AppIn) -> Result<OAuthApp> {
    let mut app = get(ctx, who, id).await?;
    let before = app.clone();
    if input.owner.is_some() || input.public {
        return Err(invalid(
            "owner and public cannot change; to make an app public, delete its secret",
        ));
    }
    if let Some(te) = input.token_exchange {
        if te != app.token_exchange && !(who.is_admin() && who.scopes.is_none()) {
            return Err(Error::Forbidden(
                "only an instance administrator changes the token-exchange privilege".into(),
            ));
        }
        app.token_exchange = te;
    }
    if let Some(n) = input.name {
        app.name = n;
    }
    if input.homepage_url.is_some() {
        app.homepage_url = input.homepage_url;
    }
    if input.logo_url.is_some() {
        app.logo_url = input.logo_url;
    }
    if let Some(r) = input.redirect_uris {
        app.redirect_uris = r;
    }
    if let Some(s) = input.scopes {
        app.scopes = s;
    }
    app.updated_at = ctx.clock.now();
    check(&app)?;
    let mut unit = ctx.store.begin().await?;
    if !unit.update_app(&app).await? {
        return Err(not_found(id));
    }
    // A privilege or a scope taken away ends what was granted with it (grants hold their scopes).
    let lost_exchange = before.token_exchange && !app.token_exchange;
    let lost_scope = before.scopes.iter().any(|s| !app.scopes.contains(s));
    if lost_exchange || lost_scope {
        let n = unit.revoke_app_grants(id, app.updated_at).await?;
        tracing::info!(app = %id, grants = n, "oauth app narrowed: its grants were revoked");
    }
    unit.commit().await?;
    // Cached client records (the token endpoint's) are read again.
    crate::auth::revoke_everywhere(&ctx.revocations, ctx.store.as_ref()).await;
    Ok(app)
}

/// Makes a new secret (the old one stops working at once), or deletes it (`rotate` false): the app is
/// then public.
pub async fn set_secret(ctx: &Context, who: &Principal, id: &str, rotate: bool) -> Result<AppOut> {
    let app = get(ctx, who, id).await?;
    set_secret_of(ctx, app, rotate).await
}

/// [`set_secret`] for the instance administrator at the shell.
pub async fn set_secret_as_admin(ctx: &Context, id: &str, rotate: bool) -> Result<AppOut> {
    let app = app_by_id(ctx, id).await?;
    set_secret_of(ctx, app, rotate).await
}

async fn set_secret_of(ctx: &Context, mut app: OAuthApp, rotate: bool) -> Result<AppOut> {
    let id = app.id.clone();
    let secret = rotate.then(new_secret);
    let now = ctx.clock.now();
    let mut unit = ctx.store.begin().await?;
    unit.set_app_secret(&id, secret.as_deref().map(hash_token).as_deref(), now)
        .await?;
    unit.commit().await?;
    // The old secret stops working at once: cached client records are read again.
    crate::auth::revoke_everywhere(&ctx.revocations, ctx.store.as_ref()).await;
    app.has_secret = secret.is_some();
    app.updated_at = now;
    tracing::info!(app = %id, rotated = rotate, "oauth app secret changed");
    Ok(AppOut {
        app,
        client_secret: secret,
    })
}

/// Deletes an app with every grant and token it holds.
pub async fn delete(ctx: &Context, who: &Principal, id: &str) -> Result<()> {
    get(ctx, who, id).await?;
    delete_by_id(ctx, id).await
}

/// [`delete`] for the instance administrator at the shell.
pub async fn delete_as_admin(ctx: &Context, id: &str) -> Result<()> {
    app_by_id(ctx, id).await?;
    delete_by_id(ctx, id).await
}

async fn delete_by_id(ctx: &Context, id: &str) -> Result<()> {
    let mut unit = ctx.store.begin().await?;
    unit.delete_app(id).await?;
    unit.commit().await?;
    crate::auth::revoke_everywhere(&ctx.revocations, ctx.store.as_ref()).await;
    tracing::info!(app = %id, "oauth app deleted");
    Ok(())
}

/// The longest an organization may let exchanged tokens live: 30 days.
pub const MAX_EXCHANGE_TTL: chrono::Duration = chrono::Duration::days(30);

/// Sets how long the organization's exchanged tokens live (`None`: the default, 8 hours).
pub async fn set_exchange_ttl(
    ctx: &Context,
    org: &str,
    ttl: Option<chrono::Duration>,
) -> Result<()> {
    if let Some(t) = ttl {
        if t < chrono::Duration::minutes(1) || t > MAX_EXCHANGE_TTL {
            return Err(invalid("an exchanged token lives from 1 minute to 30 days"));
        }
    }
    let mut unit = ctx.store.begin().await?;
    let account = unit
        .account_by_name(org)
        .await?
        .filter(|a| a.kind == AccountKind::Org)
        .ok_or_else(|| Error::NotFound(format!("organization {org:?} not found")))?;
    unit.set_exchange_ttl(&account.id, ttl.map(|t| t.num_seconds()))
        .await?;
    unit.commit().await?;
    Ok(())
}
