//! Keyless sign-in from CI (spec 4.5, RFC 8693 with an id token as the subject): a workflow presents
//! its CI provider's OIDC id token and the namespace (`resource`), with no client credentials. The
//! token is believed only when it comes from an issuer of `oauth.ci_issuers`, is signed (RS256 or
//! ES256) by a key of that issuer's discovered JWKS, is within its times (60 s leeway), was never
//! presented before (`jti`), and matches a trusted publisher of the namespace: `aud` and every listed
//! claim compared exactly. The access token acts as the publisher's creator, in that namespace only,
//! with the publisher's scopes, for at most an hour and no longer than the id token; no refresh token.
//!
//! Nothing of the token is logged or echoed: refusals say which check failed.

pub mod issuers;
pub mod jws;

use chrono::{DateTime, Duration, TimeZone, Utc};
use serde_json::{json, Map, Value};

use super::tokens::{issue, Issue, TokenResponse};
use super::{OAuthError, OAuthResult, Provider};
use crate::crypto::random_id;
use crate::model::account::{Account, AccountKind, Scope};
use crate::model::oauth::{
    parse_scopes, scope_string, AuditEntry, Grant, GrantKind, TrustedPublisher,
};
use crate::services::publishers::administers;
use jws::Jws;

/// Clock skew allowed on `exp`, `nbf` and `iat`.
pub const LEEWAY_S: i64 = 60;
/// The longest an access token issued here lasts.
pub const MAX_TTL_S: i64 = 3600;
/// The longest `jti` kept.
const MAX_JTI_CHARS: usize = 256;

pub const AUDIT_ACTION: &str = "oauth.ci_sign_in";

fn refused(why: impl Into<String>) -> OAuthError {
    OAuthError::invalid_grant(why)
}

/// What was checked of the token before the publishers are asked.
struct Verified {
    issuer: String,
    jti: String,
    /// `exp`: the access token never outlives it, and the `jti` is kept until then.
    expires: DateTime<Utc>,
    claims: Map<String, Value>,
}

/// Exchanges a CI id token for an access token to `namespace`.
pub async fn sign_in(
    p: &Provider,
    token: &str,
    namespace: Option<&str>,
    scope: Option<&str>,
) -> OAuthResult<TokenResponse> {
    let namespace = namespace.filter(|n| !n.is_empty()).ok_or_else(|| {
        OAuthError::invalid_request("resource is missing: the namespace to sign in to")
    })?;
    if namespace.chars().count() > 100 {
        return Err(OAuthError::invalid_request("resource is not a namespace"));
    }
    let result = verify(p, token).await;
    let verified = result.inspect_err(|e| {
        tracing::info!(namespace, reason = %e.description, "ci sign-in refused");
    })?;
    let found = publisher(p, namespace, &verified).await;
    let (ns, mut publisher) = found.inspect_err(|e| {
        tracing::info!(namespace, reason = %e.description, "ci sign-in refused");
    })?;
    // A narrower scope asked for is what the token gets (checked before the id token is spent).
    publisher.scopes = narrowed(&publisher.scopes, scope)?;
    grant(p, &ns, &publisher, &verified).await
}

/// The scopes asked for (`scope`, space-separated), which must be some of the publisher's; all of
/// them when none are asked for.
fn narrowed(of: &[Scope], scope: Option<&str>) -> OAuthResult<Vec<Scope>> {
    let Some(asked) = scope.filter(|s| !s.trim().is_empty()) else {
        return Ok(of.to_vec());
    };
    match parse_scopes(asked) {
        Ok(v) if v.iter().all(|s| of.contains(s)) => Ok(v),
        _ => Err(OAuthError::invalid_scope(
            "the scope is not within the trusted publisher's scopes",
        )),
    }
}

/// The token's signature, issuer, times and `jti`: everything that does not depend on the namespace.
async fn verify(p: &Provider, token: &str) -> OAuthResult<Verified> {
    let jws = jws::parse(token).map_err(refused)?;
    let issuer = match jws.claims.get("iss") {
        Some(Value::String(i)) if p.config.ci_issuers.contains(i) => i.clone(),
        Some(Value::String(_)) => {
            return Err(refused(
                "the id token's issuer (iss) is not one of this server's CI issuers",
            ))
        }
        _ => return Err(refused("the id token has no issuer (iss)")),
    };
    check_signature(p, &jws, &issuer).await?;
    let expires = check_times(&jws.claims, p.now())?;
    let jti = match jws.claims.get("jti") {
        Some(Value::String(j)) if !j.is_empty() && j.chars().count() <= MAX_JTI_CHARS => j.clone(),
        _ => return Err(refused("the id token has no usable token id (jti)")),
    };
    Ok(Verified {
        issuer,
        jti,
        expires,
        claims: jws.claims,
    })
}

/// Verifies the signature with the issuer's keys: those with the token's `kid` (or every key of the
/// token's algorithm when it names none).
async fn check_signature(p: &Provider, jws: &Jws<'_>, issuer: &str) -> OAuthResult<()> {
    let kid = jws.kid.as_deref();
    let set = p
        .ci_keys
        .keys(&p.outbound, issuer, kid, p.now())
        .await
        .map_err(refused)?;
    let candidates: Vec<_> = set
        .keys
        .iter()
        .filter(|k| k.alg() == jws.alg && kid.is_none_or(|id| k.kid.as_deref() == Some(id)))
        .collect();
    if candidates.is_empty() {
        return Err(refused(
            "no key of the issuer matches the id token's key id (kid) and algorithm",
        ));
    }
    if candidates.iter().any(|k| jws.verify(k)) {
        Ok(())
    } else {
        Err(refused("the id token's signature does not verify"))
    }
}

fn time_claim(claims: &Map<String, Value>, name: &str) -> OAuthResult<Option<DateTime<Utc>>> {
    let Some(v) = claims.get(name) else {
        return Ok(None);
    };
    v.as_i64()
        .or_else(|| v.as_f64().filter(|f| f.is_finite()).map(|f| f as i64))
        .and_then(|s| Utc.timestamp_opt(s, 0).single())
        .map(Some)
        .ok_or_else(|| refused(format!("the id token's {name} is not a time")))
}

/// `exp` (required) not passed, `nbf` and `iat` (required) not in the future, each with the leeway.
fn check_times(claims: &Map<String, Value>, now: DateTime<Utc>) -> OAuthResult<DateTime<Utc>> {
    let leeway = Duration::seconds(LEEWAY_S);
    let exp =
        time_claim(claims, "exp")?.ok_or_else(|| refused("the id token has no expiry (exp)"))?;
    if exp + leeway <= now {
        return Err(refused("the id token has expired (exp)"));
    }
    if time_claim(claims, "nbf")?.is_some_and(|nbf| nbf > now + leeway) {
        return Err(refused("the id token is not valid yet (nbf)"));
    }
    match time_claim(claims, "iat")? {
        None => Err(refused("the id token has no issue time (iat)")),
        Some(iat) if iat > now + leeway => {
            Err(refused("the id token was issued in the future (iat)"))
        }
        Some(_) => Ok(exp),
    }
}

/// Whether the token's `aud` is the publisher's audience: the string itself, or a list of just it.
fn audience_matches(claims: &Map<String, Value>, audience: &str) -> bool {
    match claims.get("aud") {
        Some(Value::String(a)) => a == audience,
        Some(Value::Array(list)) => list.len() == 1 && list[0].as_str() == Some(audience),
        _ => false,
    }
}

/// Whether every claim the publisher lists is in the token as exactly that string.
fn claims_match(claims: &Map<String, Value>, publisher: &TrustedPublisher) -> bool {
    publisher
        .claims
        .iter()
        .all(|(name, want)| claims.get(name).and_then(Value::as_str) == Some(want.as_str()))
}

/// The namespace and the first of its publishers (for the token's issuer) that the token matches.
async fn publisher(
    p: &Provider,
    namespace: &str,
    token: &Verified,
) -> OAuthResult<(Account, TrustedPublisher)> {
    let none = || {
        refused(format!(
            "{namespace:?} has no trusted publisher for this issuer"
        ))
    };
    let mut session = p.store.read().await?;
    let ns = session.account_by_name(namespace).await?.ok_or_else(none)?;
    let candidates: Vec<TrustedPublisher> = session
        .publishers_of(&ns.id)
        .await?
        .into_iter()
        .filter(|tp| tp.issuer == token.issuer)
        .collect();
    if candidates.is_empty() {
        return Err(none());
    }
    let for_us: Vec<&TrustedPublisher> = candidates
        .iter()
        .filter(|tp| audience_matches(&token.claims, &tp.audience))
        .collect();
    if for_us.is_empty() {
        return Err(refused(format!(
            "the id token's audience (aud) is not the one {namespace:?}'s trusted publishers expect"
        )));
    }
    let matched = for_us
        .into_iter()
        .find(|tp| claims_match(&token.claims, tp));
    let tp = matched.ok_or_else(|| {
        refused(format!(
            "the id token's claims do not match a trusted publisher of {namespace:?} \
             (every listed claim is compared exactly)"
        ))
    })?;
    Ok((ns, tp.clone()))
}

/// Spends the `jti` and issues the token, in one unit of work: a replay, even a concurrent one,
/// gets nothing.
async fn grant(
    p: &Provider,
    ns: &Account,
    publisher: &TrustedPublisher,
    token: &Verified,
) -> OAuthResult<TokenResponse> {
    let now = p.now();
    let mut unit = p.store.begin().await?;
    let creator = unit.account_by_id(&publisher.created_by_id).await?;
    let acting = match creator {
        Some(u) if administers(unit.as_mut(), &u, ns).await? => u,
        _ => {
            return Err(refused(format!(
                "the user who registered this trusted publisher can no longer act for {:?}",
                ns.name
            )))
        }
    };
    let kept_until = token.expires + Duration::seconds(LEEWAY_S);
    if !unit
        .spend_token_id(&token.issuer, &token.jti, kept_until, now)
        .await?
    {
        return Err(refused(
            "the id token was already used (its jti was seen before)",
        ));
    }
    let grant = ci_grant(ns, &acting, publisher, now);
    unit.create_grant(&grant).await?;
    let ttl = (token.expires - now).num_seconds().clamp(1, MAX_TTL_S);
    let what = Issue {
        client_id: &publisher.id,
        access_ttl: Duration::seconds(ttl),
        refresh: false,
        exchange: true,
    };
    let resp = issue(p, unit.as_mut(), &grant, what).await?;
    if ns.kind == AccountKind::Org {
        unit.add_audit(&ns.id, &audit_entry(p, publisher, &acting, &grant))
            .await?;
    }
    unit.commit().await?;
    tracing::info!(publisher = %publisher.id, namespace = %ns.name, user = %acting.name,
        grant = %grant.id, expires_in = ttl, "ci sign-in");
    Ok(resp)
}

/// What the token may do: the publisher's scopes, as its creator, in the namespace only (the
/// organization, or the creator's own namespace).
fn ci_grant(
    ns: &Account,
    acting: &Account,
    publisher: &TrustedPublisher,
    now: DateTime<Utc>,
) -> Grant {
    Grant {
        id: random_id(),
        app_id: None,
        user_id: acting.id.clone(),
        kind: GrantKind::Ci,
        scopes: publisher.scopes.clone(),
        org_ids: match ns.kind {
            AccountKind::Org => vec![ns.id.clone()],
            AccountKind::User => Vec::new(),
        },
        personal: ns.id == acting.id,
        nonce: None,
        auth_time: now,
        created_at: now,
        revoked_at: None,
    }
}

fn audit_entry(
    p: &Provider,
    publisher: &TrustedPublisher,
    user: &Account,
    grant: &Grant,
) -> AuditEntry {
    AuditEntry {
        id: random_id(),
        at: p.now(),
        action: AUDIT_ACTION.into(),
        outcome: "success".into(),
        actor: json!({"publisher": {"id": publisher.id, "issuer": publisher.issuer}}),
        detail: json!({
            "user": user.name,
            "claims": publisher.claims,
            "scope": scope_string(&grant.scopes),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn times_have_a_minute_of_leeway() {
        let now = Utc.timestamp_opt(1_800_000_000, 0).single().unwrap();
        let t = now.timestamp();
        let ok = claims(json!({"exp": t + 300, "iat": t, "nbf": t}));
        assert_eq!(check_times(&ok, now).unwrap().timestamp(), t + 300);
        assert!(check_times(&claims(json!({"exp": t - 30, "iat": t - 600})), now).is_ok());
        for (bad, check) in [
            (json!({"exp": t - 61, "iat": t - 600}), "(exp)"),
            (json!({"iat": t}), "(exp)"),
            (json!({"exp": t + 300}), "(iat)"),
            (json!({"exp": t + 300, "iat": t + 61}), "(iat)"),
            (json!({"exp": t + 300, "iat": t, "nbf": t + 61}), "(nbf)"),
            (json!({"exp": "soon", "iat": t}), "exp"),
        ] {
            let e = check_times(&claims(bad.clone()), now).unwrap_err();
            assert!(e.description.contains(check), "{bad}: {}", e.description);
        }
    }

    #[test]
    fn audience_and_claims_compare_exactly() {
        assert!(audience_matches(
            &claims(json!({"aud": "https://sy"})),
            "https://sy"
        ));
        assert!(audience_matches(
            &claims(json!({"aud": ["https://sy"]})),
            "https://sy"
        ));
        assert!(!audience_matches(
            &claims(json!({"aud": ["https://sy", "x"]})),
            "https://sy"
        ));
        assert!(!audience_matches(
            &claims(json!({"aud": "https://sy/"})),
            "https://sy"
        ));
        assert!(!audience_matches(&claims(json!({})), "https://sy"));
        let tp = TrustedPublisher {
            id: "tp".into(),
            namespace: "acme".into(),
            namespace_id: "n".into(),
            issuer: "https://ci".into(),
            audience: "a".into(),
            claims: [("repository".to_string(), "acme/*".to_string())].into(),
            scopes: vec![],
            created_by: "u".into(),
            created_by_id: "u".into(),
            created_at: Utc::now(),
        };
        assert!(claims_match(&claims(json!({"repository": "acme/*"})), &tp));
        assert!(!claims_match(
            &claims(json!({"repository": "acme/app"})),
            &tp
        ));
        assert!(!claims_match(
            &claims(json!({"repository": ["acme/*"]})),
            &tp
        ));
        assert!(!claims_match(&claims(json!({})), &tp));
    }
}
