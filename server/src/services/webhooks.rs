//! Webhook management: a user manages their own webhooks and those of the organizations they
//! administer, with the `webhooks` scope or an unrestricted token. The secret (`X-Webhook-Secret`) and
//! the signing keys (Standard Webhooks, rotated with a grace period) are sealed at rest.

use chrono::{DateTime, Duration, Utc};

use super::{Context, Error, Result};
use crate::auth::{Action, Principal, Resource};
use crate::crypto::random_id;
use crate::model::account::{Account, AccountKind, Role};
use crate::model::webhook::{
    check_domains, check_secret, check_url_shape, check_watched, normalize_domains, AttemptOut,
    Domain, WatchedKind, WebhookIn, WebhookOut, WebhookUpdate, MAX_PER_OWNER,
};
use crate::model::Issue;
use crate::signing::{KeyEntry, SigningKey};
use crate::store::{AttemptRecord, Session, WebhookRecord};

/// Signing keys one webhook keeps (the current one and those still in their grace period).
const MAX_KEYS: usize = 10;
/// The grace period of a rotated key when none is asked for.
pub const DEFAULT_GRACE: Duration = Duration::hours(24);
/// The longest grace period.
pub const MAX_GRACE: Duration = Duration::days(7);

/// The sealed key list opened.
pub fn open_keys(ctx: &Context, sealed: &str) -> Result<Vec<KeyEntry>> {
    let text = ctx
        .secrets
        .open(sealed)
        .map_err(|e| Error::Store(crate::store::StoreError::Backend(e.to_string())))?;
    serde_json::from_str(&text)
        .map_err(|e| Error::Store(crate::store::StoreError::Backend(e.to_string())))
}

fn seal_keys(ctx: &Context, keys: &[KeyEntry]) -> String {
    ctx.secrets
        .seal(&serde_json::to_string(keys).unwrap_or_else(|_| "[]".into()))
}

fn not_found(id: &str) -> Error {
    Error::NotFound(format!("webhook {id:?} not found"))
}

/// Managing webhooks takes the `webhooks` scope or an unrestricted token.
fn require_scope(who: &Principal) -> Result<()> {
    if who.scopes_allow(Resource::Webhooks, Action::Change) {
        return Ok(());
    }
    Err(Error::Forbidden(
        "managing webhooks needs a token with the `webhooks` scope".into(),
    ))
}

/// Whether the principal manages webhooks owned by `owner`: it is the user (with a token that reaches
/// the user's own namespace), or an admin of the organization (with a token that reaches it).
async fn manages(session: &mut dyn Session, who: &Principal, owner: &Account) -> Result<bool> {
    if owner.id == who.account.id {
        return Ok(who.personal);
    }
    Ok(owner.kind == AccountKind::Org
        && who.reaches_org(&owner.name)
        && session.role_in(&owner.name, &who.account.id).await? == Some(Role::Admin))
}

/// The webhook, when the principal manages it; 404 otherwise (another's webhook is not revealed).
async fn managed(ctx: &Context, who: &Principal, id: &str) -> Result<WebhookRecord> {
    let mut session = ctx.store.read().await?;
    Ok(managed_in(session.as_mut(), who, id).await?.0)
}

/// The webhook and its owner, read in `session` when the principal manages it. In a unit of work the
/// row is locked first, so a read-change-write of it is not lost to a concurrent one.
async fn managed_in(
    session: &mut dyn Session,
    who: &Principal,
    id: &str,
) -> Result<(WebhookRecord, Account)> {
    require_scope(who)?;
    session.lock_webhook(id).await?;
    let rec = session.webhook(id).await?.ok_or_else(|| not_found(id))?;
    let owner = session
        .account_by_id(&rec.owner_id)
        .await?
        .ok_or_else(|| not_found(id))?;
    match manages(session, who, &owner).await? {
        true => Ok((rec, owner)),
        false => Err(not_found(id)),
    }
}

/// The response form: the secret opened, the signing keys never shown.
pub fn render(ctx: &Context, rec: &WebhookRecord) -> WebhookOut {
    WebhookOut {
        id: rec.id.clone(),
        url: rec.url.clone(),
        watched: rec.watched.clone(),
        domains: rec.domains.clone(),
        secret: rec.secret.as_deref().and_then(|s| ctx.secrets.open(s).ok()),
        disabled: rec.disabled,
        job: None,
        owner: rec.owner.clone(),
        disabled_reason: rec.disabled_reason.clone(),
        last_attempt: rec.last_attempt.clone(),
        // A hold that ended stays in the row until the next one: only one still on is said.
        held_until: rec.held_until.filter(|t| *t > ctx.clock.now()),
        failing_since: rec.failing_since,
        created_at: rec.created_at,
        updated_at: rec.updated_at,
    }
}

/// An attempt as the activity view lists it; its payload as the webhook `webhook_id` was sent it (the
/// `webhook` member added, as the deliverer adds it).
pub fn render_attempt(a: AttemptRecord, webhook_id: &str) -> AttemptOut {
    let mut payload = a.payload;
    if let Some(p) = payload.as_object_mut() {
        p.insert(
            "webhook".into(),
            crate::model::webhook::webhook_member(webhook_id),
        );
    }
    AttemptOut {
        seq: a.seq,
        delivery_id: a.delivery_id,
        event_id: a.event_id,
        event: a.event,
        namespace: a.namespace,
        subject: a.subject,
        payload,
        attempt: a.number,
        at: a.started_at,
        status_code: a.status_code,
        duration_ms: a.duration_ms,
        error_class: a.error_class,
        error: a.error,
        response: a.response,
        next_attempt_at: a.next_attempt_at,
        manual: a.manual,
        state: a.state,
    }
}

/// The webhooks the principal manages.
pub async fn list(ctx: &Context, who: &Principal) -> Result<Vec<WebhookOut>> {
    require_scope(who)?;
    let mut session = ctx.store.read().await?;
    let all = session.webhooks_managed_by(&who.account.id).await?;
    // The store listed the user's own and those of the organizations they administer: what is left to
    // ask is what the token reaches (as `manages` does, without its queries).
    let reached = |rec: &WebhookRecord| match rec.owner_id == who.account.id {
        true => who.personal,
        false => who.reaches_org(&rec.owner),
    };
    Ok(all
        .iter()
        .filter(|rec| reached(rec))
        .map(|rec| render(ctx, rec))
        .collect())
}

pub async fn get(ctx: &Context, who: &Principal, id: &str) -> Result<WebhookOut> {
    Ok(render(ctx, &managed(ctx, who, id).await?))
}

/// Replays go only to an enabled webhook (checked in the replay's own unit of work).
fn enabled(rec: &WebhookRecord) -> Result<()> {
    match rec.disabled {
        true => Err(Error::BadRequest(
            "the webhook is disabled: enable it first".into(),
        )),
        false => Ok(()),
    }
}

/// Refuses what Switchyard does not do: jobs instead of a URL.
fn no_jobs(job: bool) -> Result<()> {
    match job {
        true => Err(Error::BadRequest(
            "Switchyard runs no jobs (`job`, `jobSourceId` and job `secrets` are the hub's): give \
             the webhook a `url`"
                .into(),
        )),
        false => Ok(()),
    }
}

/// Checks what a webhook will hold: shapes, a URL the outbound guard can ever fetch, watched
/// accounts that exist with that kind, and (for endpoint events) namespaces both the owner and the
/// caller's credential may read endpoints of.
async fn check(
    ctx: &Context,
    session: &mut dyn Session,
    who: &Principal,
    owner: &Account,
    rec: &WebhookRecord,
    secret: Option<&str>,
) -> Result<()> {
    let mut issues = Vec::new();
    check_watched(&rec.watched, &mut issues);
    check_domains(&rec.domains, &mut issues);
    check_url_shape(&rec.url, &mut issues);
    if let Some(secret) = secret {
        check_secret(secret, &mut issues);
    }
    // A missing URL is said by `check_url_shape`.
    let given = !rec.url.is_empty();
    if let Some(Err(e)) = given.then(|| ctx.outbound.check_url_static(&rec.url)) {
        issues.push(Issue::new("url", refused_url(&e)));
    }
    for (i, w) in rec.watched.iter().enumerate() {
        let kind = match w.kind {
            WatchedKind::User => AccountKind::User,
            WatchedKind::Org => AccountKind::Org,
            _ => continue,
        };
        let path = format!("watched[{i}].name");
        let account = session.account_by_name(&w.name).await?;
        match account {
            Some(a) if a.kind == kind => {
                if rec.domains.contains(&Domain::Endpoint)
                    && !sees_endpoints(ctx, session, who, owner, &a).await?
                {
                    issues.push(Issue::new(
                        path,
                        format!(
                            "the endpoints of {:?} are not visible to {:?}, so their events cannot be watched",
                            w.name, owner.name
                        ),
                    ));
                }
            }
            _ => issues.push(Issue::new(
                path,
                format!("no {} named {:?}", w.kind.as_str(), w.name),
            )),
        }
    }
    match issues.is_empty() {
        true => Ok(()),
        false => Err(Error::Invalid(issues)),
    }
}

/// Whether endpoint events of `ns` may be watched: the owner sees them as the outbox's fan-out decides
/// (the namespace itself, or an organization it belongs to), and the caller's credential may read
/// that namespace's endpoints (its scopes and the organizations it reaches).
async fn sees_endpoints(
    ctx: &Context,
    session: &mut dyn Session,
    who: &Principal,
    owner: &Account,
    ns: &Account,
) -> Result<bool> {
    let owner_sees = owner.id == ns.id
        || (ns.kind == AccountKind::Org && session.role_in(&ns.name, &owner.id).await?.is_some());
    let read = crate::auth::authorize(
        ctx.store.as_ref(),
        who,
        &ns.name,
        crate::auth::Resource::Endpoints,
        crate::auth::Action::Read,
    )
    .await;
    Ok(owner_sees && read.is_ok())
}

/// Creates a webhook; returns it and its first signing secret (`whsec_…`).
pub async fn create(
    ctx: &Context,
    who: &Principal,
    body: WebhookIn,
) -> Result<(WebhookOut, String)> {
    require_scope(who)?;
    no_jobs(body.job_source_id.is_some() || body.job.is_some())?;
    let now = ctx.clock.now();
    let mut unit = ctx.store.begin().await?;
    let owner = match &body.owner {
        None => who.account.clone(),
        Some(name) => unit
            .account_by_name(name)
            .await?
            .ok_or_else(|| Error::NotFound(format!("no user or organization named {name:?}")))?,
    };
    if !manages(unit.as_mut(), who, &owner).await? {
        return Err(Error::Forbidden(format!(
            "you may not create webhooks for {:?} (needs being it or an admin of the organization)",
            owner.name
        )));
    }
    if unit.count_webhooks_of(&owner.id).await? >= MAX_PER_OWNER as i64 {
        return Err(Error::Conflict(format!(
            "{:?} already has {MAX_PER_OWNER} webhooks, the most one owner may have",
            owner.name
        )));
    }
    let signing = SigningKey::generate();
    let rec = WebhookRecord {
        id: random_id(),
        owner_id: owner.id.clone(),
        owner: owner.name.clone(),
        // A missing one is said with the other issues (see `check`).
        url: body.url.unwrap_or_default(),
        watched: body.watched,
        domains: normalize_domains(body.domains.unwrap_or_else(|| vec![Domain::Repo])),
        secret: body
            .secret
            .as_deref()
            .filter(|s| !s.is_empty())
            .map(|s| ctx.secrets.seal(s)),
        signing_keys: seal_keys(
            ctx,
            &[KeyEntry {
                secret: signing.clone(),
                expires_at: None,
            }],
        ),
        disabled: false,
        disabled_reason: None,
        held_until: None,
        failing_since: None,
        created_by: who.account.id.clone(),
        created_at: now,
        updated_at: now,
        last_attempt: None,
    };
    check(
        ctx,
        unit.as_mut(),
        who,
        &owner,
        &rec,
        body.secret.as_deref(),
    )
    .await?;
    unit.create_webhook(&rec).await?;
    unit.commit().await?;
    tracing::info!(webhook = %rec.id, owner = %owner.name, by = %who.account.name, "webhook created");
    Ok((render(ctx, &rec), signing))
}

pub async fn update(
    ctx: &Context,
    who: &Principal,
    id: &str,
    body: WebhookUpdate,
) -> Result<WebhookOut> {
    no_jobs(body.job_source_id.is_some() || body.secrets.is_some())?;
    let mut unit = ctx.store.begin().await?;
    let (mut rec, owner) = managed_in(unit.as_mut(), who, id).await?;
    if !body.watched.is_empty() {
        rec.watched = body.watched;
    }
    if let Some(domains) = body.domains {
        rec.domains = normalize_domains(domains);
    }
    if let Some(url) = body.url {
        rec.url = url;
    }
    let secret = body.secret.as_deref();
    if let Some(secret) = secret {
        rec.secret = (!secret.is_empty()).then(|| ctx.secrets.seal(secret));
    }
    check(
        ctx,
        unit.as_mut(),
        who,
        &owner,
        &rec,
        secret.filter(|s| !s.is_empty()),
    )
    .await?;
    rec.updated_at = ctx.clock.now();
    unit.update_webhook(&rec).await?;
    unit.commit().await?;
    tracing::info!(webhook = %id, by = %who.account.name, "webhook updated");
    Ok(render(ctx, &rec))
}

/// Enables or disables; disabling cancels the pending deliveries (a replay brings them back).
pub async fn set_enabled(
    ctx: &Context,
    who: &Principal,
    id: &str,
    enabled: bool,
) -> Result<WebhookOut> {
    let mut unit = ctx.store.begin().await?;
    managed_in(unit.as_mut(), who, id).await?;
    let reason = (!enabled).then(|| format!("disabled by {}", who.account.name));
    unit.set_webhook_disabled(id, !enabled, reason.as_deref(), ctx.clock.now())
        .await?;
    let rec = unit.webhook(id).await?.ok_or_else(|| not_found(id))?;
    unit.commit().await?;
    tracing::info!(webhook = %id, enabled, by = %who.account.name, "webhook switched");
    Ok(render(ctx, &rec))
}

pub async fn delete(ctx: &Context, who: &Principal, id: &str) -> Result<()> {
    let mut unit = ctx.store.begin().await?;
    managed_in(unit.as_mut(), who, id).await?;
    unit.delete_webhook(id).await?;
    unit.commit().await?;
    tracing::info!(webhook = %id, by = %who.account.name, "webhook deleted");
    Ok(())
}

/// Most attempts one page lists.
pub const MAX_PAGE: i64 = 500;

/// 404 unless the principal manages the webhook.
pub async fn must_manage(ctx: &Context, who: &Principal, id: &str) -> Result<()> {
    managed(ctx, who, id).await.map(|_| ())
}

/// The activity of a webhook the caller was found to manage (see [`must_manage`]): attempts newest first,
/// those after `after` (to follow) or before `before` (to page).
pub async fn attempts_of_managed(
    ctx: &Context,
    id: &str,
    after: Option<i64>,
    before: Option<i64>,
    limit: Option<i64>,
) -> Result<Vec<AttemptOut>> {
    let limit = limit.unwrap_or(100).clamp(1, MAX_PAGE);
    let rows = ctx
        .store
        .read()
        .await?
        .attempts_of(id, after, before, limit)
        .await?;
    Ok(rows.into_iter().map(|a| render_attempt(a, id)).collect())
}

/// Sends one delivery's event again, now, once (a manual attempt schedules no retries). Its new id.
pub async fn replay(ctx: &Context, who: &Principal, id: &str, delivery: &str) -> Result<String> {
    let mut unit = ctx.store.begin().await?;
    enabled(&managed_in(unit.as_mut(), who, id).await?.0)?;
    let new = unit
        .replay_delivery(id, delivery, ctx.clock.now())
        .await?
        .ok_or_else(|| {
            Error::NotFound(format!(
                "delivery {delivery:?} not found for webhook {id:?}"
            ))
        })?;
    unit.commit().await?;
    Ok(new)
}

/// Sends again every failed or cancelled delivery created since `since`; how many.
pub async fn replay_failed(
    ctx: &Context,
    who: &Principal,
    id: &str,
    since: DateTime<Utc>,
) -> Result<u64> {
    let mut unit = ctx.store.begin().await?;
    enabled(&managed_in(unit.as_mut(), who, id).await?.0)?;
    let n = unit.replay_failed_since(id, since, ctx.clock.now()).await?;
    unit.commit().await?;
    Ok(n)
}

/// The current signing secret.
pub async fn signing_secret(ctx: &Context, who: &Principal, id: &str) -> Result<String> {
    let rec = managed(ctx, who, id).await?;
    open_keys(ctx, &rec.signing_keys)?
        .into_iter()
        .next()
        .map(|k| k.secret)
        .ok_or_else(|| {
            Error::Store(crate::store::StoreError::Backend(
                "webhook has no signing key".into(),
            ))
        })
}

/// A new signing secret; the previous ones keep signing for `grace` (default a day, at most a week).
pub async fn rotate_secret(
    ctx: &Context,
    who: &Principal,
    id: &str,
    grace: Option<Duration>,
) -> Result<String> {
    let grace = grace.unwrap_or(DEFAULT_GRACE);
    if grace < Duration::zero() || grace > MAX_GRACE {
        return Err(Error::Invalid(vec![Issue::new(
            "graceSeconds",
            format!("between 0 and {} seconds", MAX_GRACE.num_seconds()),
        )]));
    }
    let mut unit = ctx.store.begin().await?;
    let (mut rec, _) = managed_in(unit.as_mut(), who, id).await?;
    let now = ctx.clock.now();
    let fresh = SigningKey::generate();
    let mut keys = vec![KeyEntry {
        secret: fresh.clone(),
        expires_at: None,
    }];
    let until = now + grace;
    keys.extend(
        open_keys(ctx, &rec.signing_keys)?
            .into_iter()
            .filter(|k| k.expires_at.is_none_or(|t| t > now))
            .map(|k| KeyEntry {
                expires_at: Some(k.expires_at.map_or(until, |t| t.min(until))),
                ..k
            })
            .filter(|k| k.expires_at.is_some_and(|t| t > now)),
    );
    keys.truncate(MAX_KEYS);
    rec.signing_keys = seal_keys(ctx, &keys);
    rec.updated_at = now;
    unit.update_webhook(&rec).await?;
    unit.commit().await?;
    tracing::info!(webhook = %id, by = %who.account.name, grace_s = grace.num_seconds(), "webhook signing secret rotated");
    Ok(fresh)
}

/// Why a webhook's URL is refused. A special-use address (a receiver on this machine or the local network)
/// is the operator's to open: the message names the setting that does.
fn refused_url(e: &crate::outbound::OutboundError) -> String {
    match e {
        crate::outbound::OutboundError::Refused { host, range, .. } => {
            let block = match host.trim_matches(['[', ']']).parse::<std::net::IpAddr>() {
                Ok(std::net::IpAddr::V4(ip)) => format!("{ip}/32"),
                Ok(std::net::IpAddr::V6(ip)) => format!("{ip}/128"),
                Err(_) => "<the receiver's CIDR block>".to_string(),
            };
            format!(
                "{e}; webhooks are not sent to {range} addresses unless the server's operator allows it: \
                 [outbound] allow = [\"{block}\"] in the config file, or SWITCHYARD_OUTBOUND_ALLOW={block}"
            )
        }
        other => format!("{other}; webhooks are never sent there"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signing::signing_keys;

    #[test]
    fn expired_keys_stop_signing() {
        let now = Utc::now();
        let keys = [
            KeyEntry {
                secret: SigningKey::generate(),
                expires_at: None,
            },
            KeyEntry {
                secret: SigningKey::generate(),
                expires_at: Some(now + Duration::hours(1)),
            },
            KeyEntry {
                secret: SigningKey::generate(),
                expires_at: Some(now - Duration::seconds(1)),
            },
        ];
        assert_eq!(signing_keys(&keys, now).len(), 2);
        assert_eq!(signing_keys(&keys, now + Duration::hours(2)).len(), 1);
    }

    #[test]
    fn a_refused_local_receiver_names_the_setting_that_allows_it() {
        let refused = crate::outbound::OutboundError::Refused {
            host: "127.0.0.1".into(),
            address: std::net::IpAddr::from([127, 0, 0, 1]),
            range: "loopback",
        };
        let said = refused_url(&refused);
        assert!(
            said.contains("[outbound] allow = [\"127.0.0.1/32\"]"),
            "{said}"
        );
        assert!(
            said.contains("SWITCHYARD_OUTBOUND_ALLOW=127.0.0.1/32"),
            "{said}"
        );
        let named = crate::outbound::OutboundError::Refused {
            host: "hooks.internal".into(),
            address: std::net::IpAddr::from([10, 0, 0, 7]),
            range: "private",
        };
        let said = refused_url(&named);
        assert!(
            !said.contains("10.0.0.7"),
            "a resolved address is never shown: {said}"
        );
        assert!(said.contains("SWITCHYARD_OUTBOUND_ALLOW"), "{said}");
        let scheme = crate::outbound::OutboundError::Scheme("ftp".into());
        assert!(refused_url(&scheme).ends_with("webhooks are never sent there"));
    }
}
