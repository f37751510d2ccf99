//! Who is calling and what they may do: bearer tokens resolve to a [`Principal`] (the user, the
//! credential used, its scopes and the organizations it may reach), and one [`authorize`] decides
//! every access to a namespace's resources, for the API and the proxy alike.

use chrono::{DateTime, Utc};

use crate::crypto::{hash_token, TOKEN_PREFIX};
use crate::model::account::{Account, AccountKind, Scope, TokenInfo};
use crate::model::oauth::{GrantKind, TokenKind};
use crate::store::{Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// No credential, or one that is unknown or expired (401).
    #[error("{0}")]
    Unauthorized(String),
    /// A valid credential that may not do this (403).
    #[error("{0}")]
    Forbidden(String),
    /// An administrator named a namespace that does not exist (404).
    #[error("{0}")]
    NotFound(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Bumped whenever a credential may have lost rights (a token revoked, an account disabled or deleted,
/// a membership removed): answers cached before (the proxy's) no longer stand.
#[derive(Debug, Default)]
pub struct Revocations(std::sync::atomic::AtomicU64);

impl Revocations {
    pub fn epoch(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Drops this server's cached answers (see [`revoke_everywhere`] for every server's).
    pub fn revoke(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Drops the cached answers of this server and, through the store, of every other server on it (they
/// hear it at once: PostgreSQL's `NOTIFY`). Called after a revocation commits.
pub async fn revoke_everywhere(revocations: &Revocations, store: &dyn crate::store::Store) {
    revocations.revoke();
    if let Err(e) = store.announce(crate::store::cluster::Topic::Revoke).await {
        tracing::warn!(error = %e, "could not tell the other servers of a revocation; their caches keep it until they expire");
    }
}

/// The credential a request came with.
#[derive(Debug, Clone)]
pub enum Credential {
    /// A personal access token (`sy_…`), created by the user or an administrator.
    PersonalToken(TokenInfo),
    /// An OAuth access token (`syo_…`) issued to an app.
    OAuth(OAuthToken),
}

/// What is known of an OAuth access token: the app it was issued to and how.
#[derive(Debug, Clone)]
pub struct OAuthToken {
    pub app_id: Option<String>,
    pub app_name: Option<String>,
    pub grant_id: String,
    pub kind: GrantKind,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// Which of the user's organizations a credential may reach.
#[derive(Debug, Clone, PartialEq)]
pub enum OrgReach {
    /// Every organization the user belongs to, with the user's role there.
    Memberships,
    /// Only these (by name), as granted to an app; never more than the user's memberships.
    Only(Vec<String>),
}

/// The caller, once its credential checked out.
#[derive(Debug, Clone)]
pub struct Principal {
    pub account: Account,
    pub credential: Credential,
    /// What the credential is restricted to; `None` is unrestricted.
    pub scopes: Option<Vec<Scope>>,
    pub orgs: OrgReach,
    /// Whether the credential reaches the user's own namespace (an organization's exchanged token
    /// does not).
    pub personal: bool,
}

/// What a request touches in a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// The endpoint management API (`/v2/endpoint/…`, deploys, the hardware list).
    Endpoints,
    /// An `authenticated` endpoint's traffic, through the proxy.
    Inference,
    /// Webhooks (`/api/settings/webhooks`) and their notices.
    Webhooks,
}

/// What a request does to the resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Read,
    Change,
}

impl Principal {
    pub fn is_admin(&self) -> bool {
        self.account.is_admin
    }

    /// The scopes that allow `action` on `resource`, any one of which a restricted credential needs.
    fn scopes_for(resource: Resource, action: Action) -> &'static [Scope] {
        match (resource, action) {
            (Resource::Endpoints, Action::Read) => &[Scope::ReadEndpoints, Scope::WriteEndpoints],
            // Calling an endpoint is an inference request on the user's behalf.
            (Resource::Inference, _) => &[
                Scope::ReadEndpoints,
                Scope::WriteEndpoints,
                Scope::InferenceApi,
            ],
            (Resource::Endpoints, Action::Change) => &[Scope::WriteEndpoints],
            (Resource::Webhooks, _) => &[Scope::Webhooks],
        }
    }

    /// Whether the credential's scopes (if it is restricted) allow `action` on `resource`.
    pub fn scopes_allow(&self, resource: Resource, action: Action) -> bool {
        match &self.scopes {
            None => true,
            Some(have) => Self::scopes_for(resource, action)
                .iter()
                .any(|s| have.contains(s)),
        }
    }

    /// Whether the credential may reach the organization at all (before roles are asked).
    pub fn reaches_org(&self, org: &str) -> bool {
        match &self.orgs {
            OrgReach::Memberships => true,
            OrgReach::Only(names) => names.iter().any(|n| n == org),
        }
    }

    /// Instance administration takes an admin's unrestricted personal token.
    pub fn require_instance_admin(&self) -> Result<(), AuthError> {
        let personal = matches!(self.credential, Credential::PersonalToken(_));
        if self.is_admin() && personal && self.scopes.is_none() {
            Ok(())
        } else {
            Err(AuthError::Forbidden(
                "this operation needs an instance administrator's unrestricted token".into(),
            ))
        }
    }
}

/// The bearer token of a request's `Authorization` header, if it has one.
pub fn bearer_in(headers: &axum::http::HeaderMap) -> Option<&str> {
    bearer(
        headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
    )
}

/// The token in an `Authorization: Bearer …` header value, if there is one.
pub fn bearer(header: Option<&str>) -> Option<&str> {
    let value = header?.trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// Resolves a bearer token to its principal: 401 when missing, unknown or expired.
pub async fn authenticate(
    store: &dyn Store,
    token: Option<&str>,
    now: DateTime<Utc>,
) -> Result<Principal, AuthError> {
    let token = token.ok_or_else(|| {
        AuthError::Unauthorized("missing bearer token (Authorization: Bearer …)".into())
    })?;
    let invalid = || AuthError::Unauthorized("invalid or expired token".into());
    // Cheap rejection of what cannot be one of our tokens, before any store access.
    if token.len() > 128 {
        return Err(invalid());
    }
    if token.starts_with(OAUTH_ACCESS_PREFIX) {
        return oauth_principal(store, token, now)
            .await?
            .ok_or_else(invalid);
    }
    if !token.starts_with(TOKEN_PREFIX) {
        return Err(invalid());
    }
    // Looked up by its SHA-256: the secret is never compared byte by byte, so response time says nothing
    // about how much of a guessed token was right.
    let hash = hash_token(token);
    let (info, account) = store
        .read()
        .await?
        .token_by_hash(&hash)
        .await?
        .ok_or_else(invalid)?;
    if info.expires_at.is_some_and(|t| t <= now)
        || account.kind != AccountKind::User
        || account.disabled_at.is_some()
    {
        return Err(invalid());
    }
    Ok(Principal {
        account,
        scopes: info.scopes.clone(),
        credential: Credential::PersonalToken(info),
        orgs: OrgReach::Memberships,
        personal: true,
    })
}

/// Prefix of the OAuth provider's access tokens.
pub const OAUTH_ACCESS_PREFIX: &str = "syo_";

/// The principal of an OAuth access token: its grant's scopes and organizations only.
async fn oauth_principal(
    store: &dyn Store,
    token: &str,
    now: DateTime<Utc>,
) -> Result<Option<Principal>, AuthError> {
    let mut session = store.read().await?;
    let Some((issued, grant, account)) = session.token_with_user(&hash_token(token)).await? else {
        return Ok(None);
    };
    if issued.kind != TokenKind::Access || issued.expires_at <= now || grant.revoked_at.is_some() {
        return Ok(None);
    }
    if account.kind != AccountKind::User || account.disabled_at.is_some() {
        return Ok(None);
    }
    let orgs = session
        .orgs_of(&account.id)
        .await?
        .into_iter()
        .filter(|(o, _)| grant.org_ids.contains(&o.id))
        .map(|(o, _)| o.name)
        .collect();
    // A client named by its metadata document's URL has no row: that URL names it here (the document
    // is not fetched to check a bearer token).
    let app_name = match &grant.app_id {
        Some(id) => session
            .app(id)
            .await?
            .map(|(a, _)| a.name)
            .or_else(|| id.starts_with("https://").then(|| id.clone())),
        None => None,
    };
    Ok(Some(Principal {
        account,
        scopes: Some(grant.scopes.clone()),
        orgs: OrgReach::Only(orgs),
        personal: grant.personal,
        credential: Credential::OAuth(OAuthToken {
            app_id: grant.app_id,
            app_name,
            grant_id: grant.id,
            kind: grant.kind,
            created_at: issued.created_at,
            expires_at: issued.expires_at,
        }),
    }))
}

/// Checks that the principal may do `action` on `resource` in `namespace`, and returns the namespace's
/// account. 403 when it may not; 404 when an administrator names a namespace that does not exist.
pub async fn authorize(
    store: &dyn Store,
    who: &Principal,
    namespace: &str,
    resource: Resource,
    action: Action,
) -> Result<Account, AuthError> {
    if !who.scopes_allow(resource, action) {
        let needed: Vec<&str> = Principal::scopes_for(resource, action)
            .iter()
            .map(|s| s.as_str())
            .collect();
        return Err(AuthError::Forbidden(format!(
            "this token lacks the scope {}",
            needed.join(" or ")
        )));
    }
    if namespace == who.account.name && who.personal {
        return Ok(who.account.clone());
    }
    let denied =
        || AuthError::Forbidden(format!("you do not have access to namespace {namespace:?}"));
    let mut session = store.read().await?;
    let target = session.account_by_name(namespace).await?;
    if who.is_admin() && who.orgs == OrgReach::Memberships {
        return target
            .ok_or_else(|| AuthError::NotFound(format!("namespace {namespace:?} not found")));
    }
    let target = match target {
        Some(t) if t.kind == AccountKind::Org && who.reaches_org(namespace) => t,
        _ => return Err(denied()),
    };
    match session.role_in(namespace, &who.account.id).await? {
        Some(role) if action == Action::Read || role.can_change_endpoints() => Ok(target),
        Some(role) => Err(AuthError::Forbidden(format!(
            "your role {:?} in {namespace:?} does not allow changing endpoints (needs write or admin)",
            role.as_str()
        ))),
        None => Err(denied()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_parsing() {
        assert_eq!(bearer(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some("bearer   abc ")), Some("abc"));
        assert_eq!(bearer(Some("Basic abc")), None);
        assert_eq!(bearer(Some("Bearer ")), None);
        assert_eq!(bearer(Some("Bearerabc")), None);
        assert_eq!(bearer(None), None);
    }

    fn principal(scopes: Option<Vec<Scope>>) -> Principal {
        let now = Utc::now();
        Principal {
            account: Account {
                id: "u".into(),
                kind: AccountKind::User,
                name: "alice".into(),
                fullname: "Alice".into(),
                email: None,
                is_admin: false,
                created_at: now,
                disabled_at: None,
            },
            scopes: scopes.clone(),
            credential: Credential::PersonalToken(TokenInfo {
                id: "t".into(),
                user: "alice".into(),
                display_name: "t".into(),
                scopes,
                expires_at: None,
                created_at: now,
            }),
            orgs: OrgReach::Memberships,
            personal: true,
        }
    }

    #[test]
    fn scopes_gate_endpoint_access() {
        let full = principal(None);
        assert!(full.scopes_allow(Resource::Endpoints, Action::Change));
        let read = principal(Some(vec![Scope::ReadEndpoints]));
        assert!(read.scopes_allow(Resource::Endpoints, Action::Read));
        assert!(!read.scopes_allow(Resource::Endpoints, Action::Change));
        let write = principal(Some(vec![Scope::WriteEndpoints]));
        assert!(write.scopes_allow(Resource::Endpoints, Action::Read));
        assert!(write.scopes_allow(Resource::Endpoints, Action::Change));
        let other = principal(Some(vec![Scope::Openid, Scope::Webhooks]));
        assert!(!other.scopes_allow(Resource::Endpoints, Action::Read));
    }
}
