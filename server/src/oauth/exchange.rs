//! An organization's token exchange (RFC 8693, spec 5.11): an org-bound app with the `token-exchange`
//! privilege names a member by email and gets a token that reaches only the organization. Every
//! exchange, granted or refused, is a row in the organization's audit log.

use chrono::Duration;
use serde_json::json;

use super::clients::Client;
use super::tokens::{mint, signed, Issue, TokenResponse};
use super::{OAuthError, OAuthResult, Provider};
use crate::crypto::random_id;
use crate::model::account::{AccountKind, Scope};
use crate::model::oauth::{parse_scopes, AuditEntry, Grant, GrantKind};
use crate::store::IssueRecord;

/// `subject_token_type` of a member named by email.
pub const USER_EMAIL: &str = "urn:hub:token-type:user-email";
/// `subject_token_type` of a CI provider's OIDC id token.
pub const ID_TOKEN: &str = "urn:ietf:params:oauth:token-type:id_token";

/// Exchanged tokens last 8 hours unless the organization set otherwise, and never more than 30 days.
pub const DEFAULT_TTL_S: i64 = 8 * 3600;
pub const MAX_TTL_S: i64 = 30 * 24 * 3600;

pub const AUDIT_ACTION: &str = "oauth.token_exchange";

/// Exchanges a member's email for an organization-scoped token.
pub async fn by_email(
    p: &Provider,
    client: &Client,
    email: &str,
    scope: Option<&str>,
) -> OAuthResult<TokenResponse> {
    let app = &client.app;
    // Everything is read first; the unit of work below only writes (the store has one writer).
    let mut session = p.store.read().await?;
    let owner = session.org_for_exchange(&app.owner_id).await?;
    let org = match owner {
        Some((o, ttl)) if o.kind == AccountKind::Org && app.token_exchange => (o, ttl),
        Some((o, _)) if o.kind == AccountKind::Org => {
            drop(session);
            let e =
                OAuthError::invalid_client("this app does not hold the token-exchange privilege");
            audit(p, &o.id, client, email, scope, None, e.code).await?;
            return Err(e);
        }
        _ => {
            return Err(OAuthError::invalid_client(
                "this app is not bound to an organization",
            ))
        }
    };
    let asked = match scope {
        Some(s) => match parse_scopes(s) {
            Ok(v) if v.iter().all(|x| app.scopes.contains(x)) && !v.is_empty() => v,
            _ => {
                drop(session);
                let e = OAuthError::invalid_scope("the scope is not within the app's scopes");
                audit(p, &org.0.id, client, email, scope, None, e.code).await?;
                return Err(e);
            }
        },
        None => app.scopes.clone(),
    };
    let member = session.member_by_email(&org.0.id, email.trim()).await?;
    let Some((user, role)) = member.filter(|(u, _)| u.disabled_at.is_none()) else {
        drop(session);
        let e = OAuthError::invalid_grant("no member of the organization has this email");
        audit(p, &org.0.id, client, email, scope, None, e.code).await?;
        return Err(e);
    };
    // The member's role bounds what the token may do: a reader's token cannot change endpoints.
    let scopes: Vec<Scope> = asked
        .into_iter()
        .filter(|s| *s != Scope::WriteEndpoints || role.can_change_endpoints())
        .collect();
    let ttl = org.1.unwrap_or(DEFAULT_TTL_S).clamp(60, MAX_TTL_S);
    let org = org.0;
    let now = p.now();
    let grant = Grant {
        id: random_id(),
        app_id: Some(app.id.clone()),
        user_id: user.id.clone(),
        kind: GrantKind::Exchange,
        scopes,
        org_ids: vec![org.id.clone()],
        personal: false,
        nonce: None,
        auth_time: now,
        created_at: now,
        revoked_at: None,
    };
    drop(session);
    let what = Issue {
        client_id: &app.id,
        access_ttl: Duration::seconds(ttl),
        refresh: false,
        exchange: true,
    };
    let (resp, rows) = mint(p, &grant, what);
    let audit = entry(
        p,
        client,
        email,
        Some(&resp.scope),
        Some(&user.name),
        "success",
    );
    // The grant, its token and the audit row: one transaction (on SQLite, one round trip).
    let record = IssueRecord {
        grant: Some(&grant),
        tokens: &rows,
        audit: Some((&org.id, &audit)),
        now,
    };
    p.store.record_issue(&record).await?;
    let subject = (user, vec![(org, role)]);
    signed(p, resp, &grant, &app.id, Some(subject)).await
}

fn entry(
    p: &Provider,
    client: &Client,
    email: &str,
    scope: Option<&str>,
    user: Option<&str>,
    outcome: &str,
) -> AuditEntry {
    AuditEntry {
        id: random_id(),
        at: p.now(),
        action: AUDIT_ACTION.into(),
        outcome: outcome.into(),
        actor: json!({"app": {"id": client.app.id, "name": client.app.name}}),
        detail: json!({
            "subjectEmail": email.chars().take(320).collect::<String>(),
            "user": user,
            "scope": scope.map(|s| s.chars().take(1000).collect::<String>()),
        }),
    }
}

/// Records a refused exchange in the organization's audit log, in a unit of work of its own.
async fn audit(
    p: &Provider,
    org_id: &str,
    client: &Client,
    email: &str,
    scope: Option<&str>,
    user: Option<&str>,
    outcome: &str,
) -> OAuthResult<()> {
    let mut unit = p.store.begin().await?;
    unit.add_audit(org_id, &entry(p, client, email, scope, user, outcome))
        .await?;
    unit.commit().await?;
    Ok(())
}

/// Records, in its organization's audit log, an exchange refused before the app was known to be who
/// it said (a wrong secret, no HTTP Basic, a malformed request) when `client_id` names an app an
/// organization owns.
pub async fn refused_early(
    p: &Provider,
    client_id: Option<&str>,
    email: Option<&str>,
    scope: Option<&str>,
    outcome: &str,
) {
    let Some(id) = client_id else {
        return;
    };
    let recorded = async {
        let Some((app, _)) = super::clients::app(p, id).await? else {
            return Ok(());
        };
        let owner = p.store.read().await?.account_by_id(&app.owner_id).await?;
        let Some(org) = owner.filter(|o| o.kind == AccountKind::Org) else {
            return Ok(());
        };
        let client = Client {
            app,
            authenticated: false,
        };
        audit(
            p,
            &org.id,
            &client,
            email.unwrap_or_default(),
            scope,
            None,
            outcome,
        )
        .await
    };
    if let Err(e) = recorded.await {
        tracing::warn!(error = %e, "oauth: a refused exchange could not be audited");
    }
}
