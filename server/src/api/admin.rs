//! Instance administration over HTTP, the same operations as `switchyard admin`: users, organizations,
//! memberships, tokens, quotas, custom domains and the catalog. Every route needs an administrator's unrestricted token.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{delete, get, post, put};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::error::{ApiError, ApiResult};
use super::extract::{JsonBody, PathParams};
use super::AppState;
use crate::auth::Principal;
use crate::model::account::{Account, AccountKind, Membership, Role, Scope, TokenInfo};
use crate::model::catalog::CatalogEntry;
use crate::model::Issue;
use crate::passwords::PasswordError;
use crate::services::accounts::{self, AccountError};
use crate::services::domains::{self, DomainOut};
use crate::services::quotas::{self, QuotaOut, QuotaOverrideOut};
use crate::services::servers::ServerOut;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/admin/users", get(list_users).post(create_user))
        .route("/api/v1/admin/users/{user}", delete(delete_user))
        .route("/api/v1/admin/users/{user}/disable", post(disable_user))
        .route("/api/v1/admin/users/{user}/enable", post(enable_user))
        .route("/api/v1/admin/users/{user}/password", put(set_password))
        .route("/api/v1/admin/orgs", get(list_orgs).post(create_org))
        .route("/api/v1/admin/orgs/{org}", delete(delete_org))
        .route(
            "/api/v1/admin/quotas/{namespace}",
            get(show_quota).put(set_quota),
        )
        .route("/api/v1/admin/orgs/{org}/members", get(list_members))
        .route(
            "/api/v1/admin/orgs/{org}/members/{user}",
            put(set_member).delete(remove_member),
        )
        .route(
            "/api/v1/admin/users/{user}/tokens",
            get(list_tokens).post(create_token),
        )
        .route("/api/v1/admin/tokens/{id}", delete(delete_token))
        .route(
            "/api/v1/admin/catalog/items",
            get(list_catalog).post(put_catalog_item),
        )
        .route(
            "/api/v1/admin/catalog/items/{author}/{model}",
            delete(delete_catalog_item),
        )
        .route("/api/v1/admin/catalog/reload", post(reload_catalog))
        .route("/api/v1/admin/domains", get(list_domains))
        .route("/api/v1/admin/servers", get(list_servers))
        .route(
            "/api/v1/admin/domains/{domain}",
            put(assign_domain).delete(release_domain),
        )
}

/// Admin bodies decode with the model's strict decoder, so their issues read like every other body's.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(body: serde_json::Value) -> ApiResult<T> {
    crate::model::issue::decode(&body).map_err(|issue| ApiError::invalid_body(vec![issue]))
}

impl From<AccountError> for ApiError {
    fn from(e: AccountError) -> Self {
        match e {
            AccountError::Invalid(m) => ApiError::BadRequest(m),
            // Every body that carries a password carries it as `password`.
            AccountError::Password(PasswordError::Hash(m)) => ApiError::internal("password", m),
            AccountError::Password(rule) => {
                ApiError::invalid_body(vec![Issue::new("password", rule.to_string())])
            }
            AccountError::Store(s) => s.into(),
        }
    }
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UserIn {
    pub name: String,
    #[serde(default)]
    pub email: Option<String>,
    /// Make the user an instance administrator.
    #[serde(default)]
    pub admin: bool,
    /// The user's password (8 characters to 1024 bytes); absent for a user who cannot sign in with one.
    #[serde(default)]
    pub password: Option<String>,
}

impl std::fmt::Debug for UserIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserIn")
            .field("name", &self.name)
            .field("email", &self.email)
            .field("admin", &self.admin)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PasswordIn {
    /// 8 characters to 1024 bytes.
    pub password: String,
}

impl std::fmt::Debug for PasswordIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PasswordIn { password: <redacted> }")
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OrgIn {
    pub name: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemberIn {
    pub role: Role,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TokenIn {
    #[serde(default)]
    pub display_name: Option<String>,
    /// Restrict the token to these scopes; absent for an unrestricted token.
    #[serde(default)]
    pub scopes: Option<Vec<Scope>>,
    /// Lifetime such as `12h`, `30d`; absent for a token that does not expire.
    #[serde(default)]
    pub expires_in: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TokenCreatedOut {
    /// The token itself. Shown once; only its hash is kept.
    pub token: String,
    pub info: TokenInfo,
}

#[utoipa::path(get, path = "/api/v1/admin/users", tag = "admin", responses((status = 200, body = [Account])))]
pub async fn list_users(
    State(s): State<AppState>,
    who: Principal,
) -> ApiResult<Json<Vec<Account>>> {
    who.require_instance_admin()?;
    Ok(Json(
        accounts::list_accounts(s.store.as_ref(), AccountKind::User).await?,
    ))
}

#[utoipa::path(post, path = "/api/v1/admin/users", tag = "admin", request_body = UserIn,
    responses((status = 201, body = Account), (status = 400, description = "an invalid name, email or password"),
        (status = 409, description = "name taken")))]
pub async fn create_user(
    State(s): State<AppState>,
    who: Principal,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<Account>)> {
    who.require_instance_admin()?;
    let u: UserIn = decode(body)?;
    let a = accounts::create_account(
        s.store.as_ref(),
        AccountKind::User,
        &u.name,
        u.email,
        u.admin,
        u.password.as_deref(),
        s.clock.now(),
    )
    .await?;
    tracing::info!(user = %a.name, by = %who.account.name, password = u.password.is_some(), "user created");
    Ok((StatusCode::CREATED, Json(a)))
}

#[utoipa::path(get, path = "/api/v1/admin/orgs", tag = "admin", responses((status = 200, body = [Account])))]
pub async fn list_orgs(State(s): State<AppState>, who: Principal) -> ApiResult<Json<Vec<Account>>> {
    who.require_instance_admin()?;
    Ok(Json(
        accounts::list_accounts(s.store.as_ref(), AccountKind::Org).await?,
    ))
}

#[utoipa::path(post, path = "/api/v1/admin/orgs", tag = "admin", request_body = OrgIn,
    responses((status = 201, body = Account)))]
pub async fn create_org(
    State(s): State<AppState>,
    who: Principal,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<Account>)> {
    who.require_instance_admin()?;
    let o: OrgIn = decode(body)?;
    let a = accounts::create_account(
        s.store.as_ref(),
        AccountKind::Org,
        &o.name,
        None,
        false,
        None,
        s.clock.now(),
    )
    .await?;
    tracing::info!(org = %a.name, by = %who.account.name, "organization created");
    Ok((StatusCode::CREATED, Json(a)))
}

/// What a deletion took with it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeletedOut {
    /// Endpoints deleted with the account (their replicas stop).
    pub endpoints_deleted: usize,
}

#[utoipa::path(delete, path = "/api/v1/admin/users/{user}", tag = "admin",
    params(("user" = String, Path)),
    responses((status = 200, body = DeletedOut, description = "deleted with its endpoints, tokens and memberships"),
        (status = 400, description = "the last enabled administrator"), (status = 404)))]
pub async fn delete_user(
    State(s): State<AppState>,
    who: Principal,
    PathParams(user): PathParams<String>,
) -> ApiResult<Json<DeletedOut>> {
    who.require_instance_admin()?;
    let n = accounts::delete_account(&s, &user, AccountKind::User).await?;
    Ok(Json(DeletedOut {
        endpoints_deleted: n,
    }))
}

#[utoipa::path(delete, path = "/api/v1/admin/orgs/{org}", tag = "admin",
    params(("org" = String, Path)),
    responses((status = 200, body = DeletedOut, description = "deleted with its endpoints and memberships"), (status = 404)))]
pub async fn delete_org(
    State(s): State<AppState>,
    who: Principal,
    PathParams(org): PathParams<String>,
) -> ApiResult<Json<DeletedOut>> {
    who.require_instance_admin()?;
    let n = accounts::delete_account(&s, &org, AccountKind::Org).await?;
    Ok(Json(DeletedOut {
        endpoints_deleted: n,
    }))
}

#[utoipa::path(post, path = "/api/v1/admin/users/{user}/disable", tag = "admin",
    params(("user" = String, Path)),
    responses((status = 200, body = Account, description = "every token of the user is refused from now on; its endpoints go on serving")))]
pub async fn disable_user(
    State(s): State<AppState>,
    who: Principal,
    PathParams(user): PathParams<String>,
) -> ApiResult<Json<Account>> {
    who.require_instance_admin()?;
    Ok(Json(accounts::set_disabled(&s, &user, true).await?))
}

#[utoipa::path(post, path = "/api/v1/admin/users/{user}/enable", tag = "admin",
    params(("user" = String, Path)), responses((status = 200, body = Account)))]
pub async fn enable_user(
    State(s): State<AppState>,
    who: Principal,
    PathParams(user): PathParams<String>,
) -> ApiResult<Json<Account>> {
    who.require_instance_admin()?;
    Ok(Json(accounts::set_disabled(&s, &user, false).await?))
}

/// Sets a user's password; its tokens are unaffected.
#[utoipa::path(put, path = "/api/v1/admin/users/{user}/password", tag = "admin", request_body = PasswordIn,
    params(("user" = String, Path)),
    responses((status = 204, description = "set"), (status = 400, description = "a password that breaks the rules"),
        (status = 404, description = "no such user")))]
pub async fn set_password(
    State(s): State<AppState>,
    who: Principal,
    PathParams(user): PathParams<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<StatusCode> {
    who.require_instance_admin()?;
    let p: PasswordIn = decode(body)?;
    accounts::set_password(s.store.as_ref(), &user, &p.password).await?;
    tracing::info!(user = %user, by = %who.account.name, "password set");
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/api/v1/admin/quotas/{namespace}", tag = "admin",
    params(("namespace" = String, Path)), responses((status = 200, body = QuotaOut)))]
pub async fn show_quota(
    State(s): State<AppState>,
    who: Principal,
    PathParams(namespace): PathParams<String>,
) -> ApiResult<Json<QuotaOut>> {
    who.require_instance_admin()?;
    Ok(Json(quotas::show(&s, &namespace).await?))
}

/// Sets the namespace's own limits; a null (or absent) value goes back to the server's default.
#[utoipa::path(put, path = "/api/v1/admin/quotas/{namespace}", tag = "admin", request_body = QuotaOverrideOut,
    params(("namespace" = String, Path)), responses((status = 200, body = QuotaOut), (status = 404)))]
pub async fn set_quota(
    State(s): State<AppState>,
    who: Principal,
    PathParams(namespace): PathParams<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<QuotaOut>> {
    who.require_instance_admin()?;
    let set: QuotaOverrideOut = decode(body)?;
    let out = quotas::set(&s, &namespace, set).await?;
    tracing::info!(namespace = %namespace, by = %who.account.name, "quota set");
    Ok(Json(out))
}

#[utoipa::path(get, path = "/api/v1/admin/orgs/{org}/members", tag = "admin",
    params(("org" = String, Path)), responses((status = 200, body = [Membership])))]
pub async fn list_members(
    State(s): State<AppState>,
    who: Principal,
    PathParams(org): PathParams<String>,
) -> ApiResult<Json<Vec<Membership>>> {
    who.require_instance_admin()?;
    Ok(Json(accounts::list_members(s.store.as_ref(), &org).await?))
}

#[utoipa::path(put, path = "/api/v1/admin/orgs/{org}/members/{user}", tag = "admin", request_body = MemberIn,
    params(("org" = String, Path), ("user" = String, Path)), responses((status = 200, body = Membership)))]
pub async fn set_member(
    State(s): State<AppState>,
    who: Principal,
    PathParams((org, user)): PathParams<(String, String)>,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<Membership>> {
    who.require_instance_admin()?;
    let m: MemberIn = decode(body)?;
    Ok(Json(
        accounts::add_member(s.store.as_ref(), &org, &user, m.role, s.clock.now()).await?,
    ))
}

#[utoipa::path(delete, path = "/api/v1/admin/orgs/{org}/members/{user}", tag = "admin",
    params(("org" = String, Path), ("user" = String, Path)), responses((status = 204)))]
pub async fn remove_member(
    State(s): State<AppState>,
    who: Principal,
    PathParams((org, user)): PathParams<(String, String)>,
) -> ApiResult<StatusCode> {
    who.require_instance_admin()?;
    accounts::remove_member(&s, &org, &user).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/api/v1/admin/users/{user}/tokens", tag = "admin",
    params(("user" = String, Path)), responses((status = 200, body = [TokenInfo])))]
pub async fn list_tokens(
    State(s): State<AppState>,
    who: Principal,
    PathParams(user): PathParams<String>,
) -> ApiResult<Json<Vec<TokenInfo>>> {
    who.require_instance_admin()?;
    Ok(Json(accounts::list_tokens(s.store.as_ref(), &user).await?))
}

#[utoipa::path(post, path = "/api/v1/admin/users/{user}/tokens", tag = "admin", request_body = TokenIn,
    params(("user" = String, Path)), responses((status = 201, body = TokenCreatedOut)))]
pub async fn create_token(
    State(s): State<AppState>,
    who: Principal,
    PathParams(user): PathParams<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<TokenCreatedOut>)> {
    who.require_instance_admin()?;
    let t: TokenIn = decode(body)?;
    let expires_in = t
        .expires_in
        .as_deref()
        .map(accounts::parse_duration)
        .transpose()
        .map_err(|m| ApiError::invalid_body(vec![Issue::new("expiresIn", m)]))?;
    let (token, info) = accounts::issue_token(
        s.store.as_ref(),
        &user,
        t.display_name,
        t.scopes,
        expires_in,
        s.clock.now(),
    )
    .await?;
    tracing::info!(user = %user, token_id = %info.id, by = %who.account.name, "token issued");
    Ok((StatusCode::CREATED, Json(TokenCreatedOut { token, info })))
}

#[utoipa::path(delete, path = "/api/v1/admin/tokens/{id}", tag = "admin",
    params(("id" = String, Path)), responses((status = 204)))]
pub async fn delete_token(
    State(s): State<AppState>,
    who: Principal,
    PathParams(id): PathParams<String>,
) -> ApiResult<StatusCode> {
    who.require_instance_admin()?;
    accounts::revoke_token(&s, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/api/v1/admin/catalog/items", tag = "admin",
    responses((status = 200, description = "every item with its recipes' memory needs", body = [CatalogEntry])))]
pub async fn list_catalog(
    State(s): State<AppState>,
    who: Principal,
) -> ApiResult<Json<Vec<CatalogEntry>>> {
    who.require_instance_admin()?;
    let idx = s.catalog.get(s.store.as_ref()).await?;
    Ok(Json(idx.entries().cloned().collect()))
}

/// Adds an item, or replaces the item with the same `repoId`.
#[utoipa::path(post, path = "/api/v1/admin/catalog/items", tag = "admin", request_body = CatalogEntry,
    responses((status = 201, description = "added", body = CatalogEntry), (status = 200, description = "replaced", body = CatalogEntry)))]
pub async fn put_catalog_item(
    State(s): State<AppState>,
    who: Principal,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<CatalogEntry>)> {
    who.require_instance_admin()?;
    let entry: CatalogEntry = decode(body)?;
    let added = crate::services::catalog::put_item(&s, &entry).await?;
    tracing::info!(repo = %entry.repo_id, added, by = %who.account.name, "catalog item saved");
    Ok((
        if added {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        },
        Json(entry),
    ))
}

#[utoipa::path(delete, path = "/api/v1/admin/catalog/items/{author}/{model}", tag = "admin",
    params(("author" = String, Path), ("model" = String, Path)), responses((status = 204)))]
pub async fn delete_catalog_item(
    State(s): State<AppState>,
    who: Principal,
    PathParams((author, model)): PathParams<(String, String)>,
) -> ApiResult<StatusCode> {
    who.require_instance_admin()?;
    let repo_id = format!("{author}/{model}");
    crate::services::catalog::delete_item(&s, &repo_id).await?;
    tracing::info!(repo = %repo_id, by = %who.account.name, "catalog item removed");
    Ok(StatusCode::NO_CONTENT)
}

/// Re-reads the catalog from the store (after `switchyard admin catalog …` changed it from the shell).
#[utoipa::path(post, path = "/api/v1/admin/catalog/reload", tag = "admin", responses((status = 204)))]
pub async fn reload_catalog(State(s): State<AppState>, who: Principal) -> ApiResult<StatusCode> {
    who.require_instance_admin()?;
    s.catalog.reload(s.store.as_ref()).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/api/v1/admin/domains", tag = "admin",
    responses((status = 200, body = [DomainOut], description = "every claimed custom domain and its namespace")))]
pub async fn list_domains(
    State(s): State<AppState>,
    who: Principal,
) -> ApiResult<Json<Vec<DomainOut>>> {
    who.require_instance_admin()?;
    Ok(Json(domains::list(&s).await?))
}

#[utoipa::path(get, path = "/api/v1/admin/servers", tag = "admin",
    responses((status = 200, body = [ServerOut], description = "the servers on this store (seen in the last day), which one leads, and which stopped answering")))]
pub async fn list_servers(
    State(s): State<AppState>,
    who: Principal,
) -> ApiResult<Json<Vec<ServerOut>>> {
    who.require_instance_admin()?;
    Ok(Json(crate::services::servers::list(&s).await?))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DomainIn {
    /// The user or organization whose endpoints may route under the domain.
    pub namespace: String,
}

/// Gives a custom domain to a namespace (after its owner proved it theirs): only that namespace's
/// endpoints may route under it from then on.
#[utoipa::path(put, path = "/api/v1/admin/domains/{domain}", tag = "admin", request_body = DomainIn,
    params(("domain" = String, Path)),
    responses((status = 200, body = DomainOut), (status = 400, description = "not a domain anyone may hold"),
        (status = 404, description = "no such namespace"),
        (status = 409, description = "another namespace's endpoints route under it")))]
pub async fn assign_domain(
    State(s): State<AppState>,
    who: Principal,
    PathParams(domain): PathParams<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<DomainOut>> {
    who.require_instance_admin()?;
    let set: DomainIn = decode(body)?;
    let out = domains::assign(&s, &who.account.name, &domain, &set.namespace).await?;
    Ok(Json(out))
}

/// Lets a custom domain go: the next endpoint to route under it claims it for its namespace.
#[utoipa::path(delete, path = "/api/v1/admin/domains/{domain}", tag = "admin",
    params(("domain" = String, Path)),
    responses((status = 204), (status = 404, description = "no one holds it"),
        (status = 409, description = "endpoints still route under it")))]
pub async fn release_domain(
    State(s): State<AppState>,
    who: Principal,
    PathParams(domain): PathParams<String>,
) -> ApiResult<StatusCode> {
    who.require_instance_admin()?;
    domains::release(&s, &who.account.name, &domain).await?;
    Ok(StatusCode::NO_CONTENT)
}
