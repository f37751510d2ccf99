//! Tokens for a grant: opaque access and refresh tokens (hashed at rest) and signed ID tokens; refresh
//! rotation with reuse detection; revocation (RFC 7009) and introspection (RFC 7662); the claims
//! that ID tokens and userinfo share.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::Duration;
use serde::Serialize;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::clients::Client;
use super::{new_secret, OAuthError, OAuthResult, Provider, ACCESS_PREFIX, REFRESH_PREFIX};
use crate::crypto::hash_token;
use crate::model::account::{Account, Role, Scope};
use crate::model::oauth::{parse_scopes, scope_string, Grant, TokenKind};
use crate::store::{NewTokenRow, Session};

/// The token endpoint's answer.
#[derive(Debug, Clone, Serialize)]
pub struct TokenResponse {
    pub access_token: String,
    pub token_type: &'static str,
    pub expires_in: i64,
    pub scope: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id_token: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issued_token_type: Option<&'static str>,
}

pub const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

/// What to issue for a grant.
#[derive(Debug, Clone, Copy)]
pub struct Issue<'a> {
    /// The audience of the ID token (the app's client id).
    pub client_id: &'a str,
    pub access_ttl: Duration,
    pub refresh: bool,
    /// Whether to say `issued_token_type` (token exchange).
    pub exchange: bool,
}

/// `at_hash`: the left half of the access token's SHA-256, base64url.
pub fn at_hash(access_token: &str) -> String {
    let digest = Sha256::digest(access_token.as_bytes());
    URL_SAFE_NO_PAD.encode(&digest[..16])
}

/// The user and the organizations (with the user's role) that claims are about.
pub type Subject = (Account, Vec<(Account, Role)>);

/// Claims about the user that the scopes allow: profile, email, and the organizations given (under
/// `orgs_key`: `orgs` in ID tokens, `organizations` in userinfo; roles only with `read-memberships`).
pub fn user_claims(
    issuer: &str,
    (user, orgs): &Subject,
    scopes: &[Scope],
    orgs_key: &str,
) -> Map<String, Value> {
    let mut claims = Map::new();
    claims.insert("sub".into(), json!(user.id));
    if scopes.contains(&Scope::Profile) {
        claims.insert("name".into(), json!(user.fullname));
        claims.insert("preferred_username".into(), json!(user.name));
        claims.insert(
            "picture".into(),
            json!(format!("{issuer}/avatars/{}", user.name)),
        );
        claims.insert("profile".into(), json!(format!("{issuer}/{}", user.name)));
    }
    if scopes.contains(&Scope::Email) {
        claims.insert("email".into(), json!(user.email));
        claims.insert("email_verified".into(), json!(user.email.is_some()));
    }
    let roles = scopes.contains(&Scope::ReadMemberships);
    let orgs: Vec<Value> = orgs
        .iter()
        .map(|(o, role)| {
            let mut org = json!({
                "sub": o.id,
                "name": o.fullname,
                "preferred_username": o.name,
                "picture": format!("{issuer}/avatars/{}", o.name),
            });
            if roles {
                org["roleInOrg"] = json!(role.as_str());
            }
            org
        })
        .collect();
    claims.insert(orgs_key.into(), Value::Array(orgs));
    claims
}

/// The grant's user and its granted organizations, from the store (no query for organizations when
/// the grant has none).
pub async fn subject_of(unit: &mut dyn Session, grant: &Grant) -> OAuthResult<Subject> {
    let user = unit
        .account_by_id(&grant.user_id)
        .await?
        .ok_or_else(|| OAuthError::invalid_grant("the user no longer exists"))?;
    let orgs = if grant.org_ids.is_empty() {
        Vec::new()
    } else {
        unit.orgs_of(&user.id)
            .await?
            .into_iter()
            .filter(|(o, _)| grant.org_ids.contains(&o.id))
            .collect()
    };
    Ok((user, orgs))
}

/// New tokens for the grant, and their rows to record (by hash). The ID token comes after they are
/// recorded, from [`signed`]: signing and its reads need not hold the store's write turn.
pub fn mint(p: &Provider, grant: &Grant, what: Issue<'_>) -> (TokenResponse, Vec<NewTokenRow>) {
    let now = p.now();
    let access_token = new_secret(ACCESS_PREFIX);
    let mut rows = vec![NewTokenRow {
        hash: hash_token(&access_token),
        grant_id: grant.id.clone(),
        kind: TokenKind::Access,
        expires_at: now + what.access_ttl,
    }];
    let refresh_token = what.refresh.then(|| {
        let t = new_secret(REFRESH_PREFIX);
        rows.push(NewTokenRow {
            hash: hash_token(&t),
            grant_id: grant.id.clone(),
            kind: TokenKind::Refresh,
            expires_at: now + Provider::secs(p.config.refresh_token_ttl_s),
        });
        t
    });
    let resp = TokenResponse {
        expires_in: what.access_ttl.num_seconds(),
        access_token,
        token_type: "bearer",
        scope: scope_string(&grant.scopes),
        refresh_token,
        id_token: None,
        issued_token_type: what.exchange.then_some(ACCESS_TOKEN_TYPE),
    };
    (resp, rows)
}

/// [`mint`], with the rows recorded in the caller's unit of work.
pub async fn issue(
    p: &Provider,
    unit: &mut dyn Session,
    grant: &Grant,
    what: Issue<'_>,
) -> OAuthResult<TokenResponse> {
    let now = p.now();
    let (resp, rows) = mint(p, grant, what);
    for r in rows {
        unit.add_token(&r.hash, &r.grant_id, r.kind, r.expires_at, now)
            .await?;
    }
    Ok(resp)
}

/// The usual answer for a user's grant to a client: an access token and a refresh token recorded in
/// `unit`, which is then committed, and the ID token.
pub async fn issue_and_commit(
    p: &Provider,
    mut unit: Box<dyn Session>,
    grant: &Grant,
    client_id: &str,
) -> OAuthResult<TokenResponse> {
    let what = Issue {
        client_id,
        access_ttl: Provider::secs(p.config.access_token_ttl_s),
        refresh: true,
        exchange: false,
    };
    let resp = issue(p, unit.as_mut(), grant, what).await?;
    unit.commit().await?;
    signed(p, resp, grant, client_id, None).await
}

/// The answer with its ID token, when `openid` was granted; called once the tokens are committed.
/// `known`: the subject when the caller has it already (else it is read).
pub async fn signed(
    p: &Provider,
    mut resp: TokenResponse,
    grant: &Grant,
    client_id: &str,
    known: Option<Subject>,
) -> OAuthResult<TokenResponse> {
    if grant.scopes.contains(&Scope::Openid) {
        let subject = match known {
            Some(s) => s,
            None => subject_of(p.store.read().await?.as_mut(), grant).await?,
        };
        let token = id_token(p, &subject, grant, client_id, &resp.access_token).await?;
        resp.id_token = Some(token);
    }
    Ok(resp)
}

async fn id_token(
    p: &Provider,
    subject: &Subject,
    grant: &Grant,
    client_id: &str,
    access_token: &str,
) -> OAuthResult<String> {
    let now = p.now();
    let issuer = p.issuer()?;
    let mut claims = user_claims(issuer, subject, &grant.scopes, "orgs");
    let exp = now + Provider::secs(p.config.id_token_ttl_s);
    for (k, v) in [
        ("iss", json!(issuer)),
        ("aud", json!(client_id)),
        ("iat", json!(now.timestamp())),
        ("exp", json!(exp.timestamp())),
        ("auth_time", json!(grant.auth_time.timestamp())),
        ("at_hash", json!(at_hash(access_token))),
    ] {
        claims.insert(k.into(), v);
    }
    if let Some(nonce) = &grant.nonce {
        claims.insert("nonce".into(), json!(nonce));
    }
    Ok(p.keys().await?.sign(&Value::Object(claims)))
}

/// The refresh-token grant: the presented token is spent and a new pair issued. A token presented
/// twice was stolen or replayed: the whole grant is revoked.
pub async fn refresh(
    p: &Provider,
    client: &Client,
    token: &str,
    scope: Option<&str>,
) -> OAuthResult<TokenResponse> {
    let now = p.now();
    let invalid = || OAuthError::invalid_grant("the refresh token is invalid, expired or revoked");
    if !token.starts_with(REFRESH_PREFIX) || token.len() > 128 {
        return Err(invalid());
    }
    let hash = hash_token(token);
    let mut unit = p.store.begin().await?;
    let (issued, grant) = unit.token(&hash).await?.ok_or_else(invalid)?;
    if issued.kind != TokenKind::Refresh
        || grant.app_id.as_deref() != Some(client.app.id.as_str())
        || grant.revoked_at.is_some()
        || issued.expires_at <= now
    {
        return Err(invalid());
    }
    if !unit.use_refresh_token(&hash, now).await? {
        unit.revoke_grant(&grant.id, now).await?;
        unit.commit().await?;
        crate::auth::revoke_everywhere(&p.revocations, p.store.as_ref()).await;
        tracing::warn!(grant = %grant.id, client = %client.app.id, "refresh token reused: grant revoked");
        return Err(OAuthError::invalid_grant(
            "the refresh token was already used; every token of this grant is now revoked",
        ));
    }
    if let Some(scope) = scope {
        let asked = parse_scopes(scope).map_err(OAuthError::invalid_scope)?;
        // Tokens carry their grant's scopes: a refresh can neither widen nor narrow them.
        if asked.len() != grant.scopes.len() || asked.iter().any(|s| !grant.scopes.contains(s)) {
            return Err(OAuthError::invalid_scope(
                "a refresh keeps the grant's scopes: send the same scope or none",
            ));
        }
    }
    let user = unit.account_by_id(&grant.user_id).await?;
    if user.is_none_or(|u| u.disabled_at.is_some()) {
        return Err(invalid());
    }
    issue_and_commit(p, unit, &grant, &client.app.id).await
}

/// RFC 7009: ends a token the client holds. A refresh token ends its whole grant. Unknown tokens,
/// and tokens of other clients, are ignored (the answer is the same).
pub async fn revoke(p: &Provider, client: &Client, token: &str) -> OAuthResult<()> {
    if token.len() > 128 {
        return Ok(());
    }
    let hash = hash_token(token);
    let mut unit = p.store.begin().await?;
    let Some((issued, grant)) = unit.token(&hash).await? else {
        return Ok(());
    };
    if grant.app_id.as_deref() != Some(client.app.id.as_str()) {
        return Ok(());
    }
    match issued.kind {
        TokenKind::Refresh => unit.revoke_grant(&grant.id, p.now()).await?,
        TokenKind::Access => {
            unit.delete_oauth_token(&hash).await?;
        }
    }
    unit.commit().await?;
    crate::auth::revoke_everywhere(&p.revocations, p.store.as_ref()).await;
    Ok(())
}

/// RFC 7662: what a token is, for the app it was issued to (or an instance administrator).
pub async fn introspect(p: &Provider, app_id: Option<&str>, token: &str) -> OAuthResult<Value> {
    let inactive = json!({"active": false});
    if token.len() > 128 {
        return Ok(inactive);
    }
    let now = p.now();
    let found = p
        .store
        .read()
        .await?
        .token_with_user(&hash_token(token))
        .await?;
    let Some((issued, grant, user)) = found else {
        return Ok(inactive);
    };
    let mine = app_id.is_none_or(|id| grant.app_id.as_deref() == Some(id));
    // A used refresh token has been rotated away: presenting it again would end its grant.
    let spent = issued.used_at.is_some();
    let ended =
        grant.revoked_at.is_some() || issued.expires_at <= now || user.disabled_at.is_some();
    if !mine || spent || ended {
        return Ok(inactive);
    }
    let mut info = json!({
        "active": true,
        "scope": scope_string(&grant.scopes),
        "client_id": grant.app_id,
        "username": user.name,
        "sub": user.id,
        "token_use": format!("{}_token", issued.kind.as_str()),
        "exp": issued.expires_at.timestamp(),
        "iat": issued.created_at.timestamp(),
        "iss": p.issuer()?,
    });
    // `token_type` is RFC 6749's, which only an access token has (RFC 7662 §2.2); which kind of token
    // it is, is `token_use` (as Hydra says it).
    if issued.kind == TokenKind::Access {
        info["token_type"] = json!("bearer");
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_hash_is_the_left_half_of_sha256() {
        // OpenID Connect Core's example shape: 16 bytes, base64url without padding.
        let h = at_hash("jHkWEdUXMU1BwAsC4vtUsZwnNCKxXndSg");
        assert_eq!(h.len(), 22);
        assert!(!h.contains('='));
        assert_ne!(at_hash("a"), at_hash("b"));
    }
}
