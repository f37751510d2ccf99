//! Who is calling (bearer tokens to principals) and what they may do in which namespace.

pub mod accounts;

use chrono::{DateTime, Utc};

use crate::api::error::ApiError;
use crate::crypto::{hash_token, TOKEN_PREFIX};
use crate::model::account::{Account, AccountKind, Scope, TokenInfo};
use crate::store::Store;

/// The caller, once its token checked out.
#[derive(Debug, Clone)]
pub struct Principal {
    pub account: Account,
    pub token: TokenInfo,
}

/// What a request does to a namespace's endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Change,
}

impl Principal {
    pub fn is_admin(&self) -> bool {
        self.account.is_admin
    }

    /// Whether the token's scopes (if it is restricted) allow this access to endpoints.
    pub fn token_allows_endpoints(&self, access: Access) -> bool {
        match &self.token.scopes {
            None => true,
            Some(scopes) => match access {
                Access::Change => scopes.contains(&Scope::WriteEndpoints),
                Access::Read => {
                    scopes.contains(&Scope::WriteEndpoints)
                        || scopes.contains(&Scope::ReadEndpoints)
                }
            },
        }
    }

    /// Instance administration takes an admin's unrestricted token.
    pub fn require_instance_admin(&self) -> Result<(), ApiError> {
        if self.is_admin() && self.token.scopes.is_none() {
            Ok(())
        } else {
            Err(ApiError::Forbidden(
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
) -> Result<Principal, ApiError> {
    let token = token.ok_or_else(|| {
        ApiError::Unauthorized("missing bearer token (Authorization: Bearer …)".into())
    })?;
    let invalid = || ApiError::Unauthorized("invalid or expired token".into());
    // Cheap rejection of what cannot be one of our tokens, before any store access.
    if !token.starts_with(TOKEN_PREFIX) || token.len() > 128 {
        return Err(invalid());
    }
    // Looked up by its SHA-256: the secret is never compared byte by byte, so response time says nothing
    // about how much of a guessed token was right.
    let hash = hash_token(token);
    let (info, account) = store.token_by_hash(&hash).await?.ok_or_else(invalid)?;
    if info.expires_at.is_some_and(|t| t <= now) || account.kind != AccountKind::User {
        return Err(invalid());
    }
    Ok(Principal {
        account,
        token: info,
    })
}

/// Checks that the principal may read or change endpoints in `namespace`, and returns the namespace's
/// account. 403 when it may not; 404 when an administrator names a namespace that does not exist.
pub async fn authorize(
    store: &dyn Store,
    who: &Principal,
    namespace: &str,
    access: Access,
) -> Result<Account, ApiError> {
    if !who.token_allows_endpoints(access) {
        let needed = match access {
            Access::Read => "read-endpoints or write-endpoints",
            Access::Change => "write-endpoints",
        };
        return Err(ApiError::Forbidden(format!(
            "this token lacks the scope {needed}"
        )));
    }
    if namespace == who.account.name {
        return Ok(who.account.clone());
    }
    let denied =
        || ApiError::Forbidden(format!("you do not have access to namespace {namespace:?}"));
    let target = store.account_by_name(namespace).await?;
    if who.is_admin() {
        return target
            .ok_or_else(|| ApiError::NotFound(format!("namespace {namespace:?} not found")));
    }
    let target = match target {
        Some(t) if t.kind == AccountKind::Org => t,
        _ => return Err(denied()),
    };
    match store.role_in(namespace, &who.account.id).await? {
        Some(role) if access == Access::Read || role.can_change_endpoints() => Ok(target),
        Some(role) => Err(ApiError::Forbidden(format!(
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
            },
            token: TokenInfo {
                id: "t".into(),
                user: "alice".into(),
                display_name: "t".into(),
                scopes,
                expires_at: None,
                created_at: now,
            },
        }
    }

    #[test]
    fn scopes_gate_endpoint_access() {
        let full = principal(None);
        assert!(full.token_allows_endpoints(Access::Change));
        let read = principal(Some(vec![Scope::ReadEndpoints]));
        assert!(read.token_allows_endpoints(Access::Read));
        assert!(!read.token_allows_endpoints(Access::Change));
        let write = principal(Some(vec![Scope::WriteEndpoints]));
        assert!(write.token_allows_endpoints(Access::Read));
        assert!(write.token_allows_endpoints(Access::Change));
        let other = principal(Some(vec![Scope::Openid, Scope::Webhooks]));
        assert!(!other.token_allows_endpoints(Access::Read));
    }
}
