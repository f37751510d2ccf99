//! Device authorization (RFC 8628): a device gets a device code and a short user code; the user types
//! the user code on the verification page and approves; the device polls the token endpoint.

use chrono::Duration;
use rand::Rng;
use serde::Serialize;

use super::clients::Client;
use super::tokens::{issue_and_commit, TokenResponse};
use super::{new_secret, OAuthError, OAuthResult, Provider, DEVICE_PREFIX};
use crate::crypto::{hash_token, random_id};
use crate::model::account::{Account, Scope};
use crate::model::oauth::{
    display_user_code, normalize_user_code, parse_scopes, Grant, GrantKind, USER_CODE_ALPHABET,
};
use crate::store::{DeviceAuth, DeviceStatus, StoreError, WebSession};

/// The device authorization response.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceResponse {
    pub device_code: String,
    pub user_code: String,
    pub verification_uri: String,
    pub verification_uri_complete: String,
    pub expires_in: i64,
    pub interval: i64,
}

fn new_user_code() -> String {
    let mut rng = rand::rng();
    (0..8)
        .map(|_| USER_CODE_ALPHABET[rng.random_range(0..USER_CODE_ALPHABET.len())] as char)
        .collect()
}

/// The scopes a device asks for: within the app's, all of them when it names none.
fn device_scopes(client: &Client, scope: Option<&str>) -> OAuthResult<Vec<Scope>> {
    let scopes = match scope {
        Some(s) => parse_scopes(s).map_err(OAuthError::invalid_scope)?,
        None => client.app.scopes.clone(),
    };
    if let Some(s) = scopes.iter().find(|s| !client.app.scopes.contains(s)) {
        return Err(OAuthError::invalid_scope(format!(
            "the app may not ask for the scope {:?}",
            s.as_str()
        )));
    }
    Ok(scopes)
}

/// Starts a device authorization.
pub async fn start(
    p: &Provider,
    client: &Client,
    scope: Option<&str>,
) -> OAuthResult<DeviceResponse> {
    let issuer = p.issuer()?;
    let scopes = device_scopes(client, scope)?;
    let now = p.now();
    // At most 15 minutes (RFC 8628 5.2), polled no more than once a second.
    let ttl = Provider::secs(p.config.device_code_ttl_s.clamp(1, 900));
    let interval = i64::try_from(p.config.device_interval_s.clamp(1, 60)).unwrap_or(5);
    // A user code is 8 of 20 letters (about 34.5 bits); should one be taken, draw again.
    for _ in 0..5 {
        let device_code = new_secret(DEVICE_PREFIX);
        let user_code = new_user_code();
        let auth = DeviceAuth {
            device_hash: hash_token(&device_code),
            user_code_hash: hash_token(&user_code),
            app_id: client.app.id.clone(),
            scopes: scopes.clone(),
            status: DeviceStatus::Pending,
            user_id: None,
            org_ids: Vec::new(),
            interval_s: interval,
            last_poll_at: None,
            expires_at: now + ttl,
            created_at: now,
            auth_time: None,
        };
        let mut unit = p.store.begin().await?;
        match unit.add_device(&auth).await {
            Ok(()) => {}
            Err(StoreError::Conflict(_)) => continue,
            Err(e) => return Err(e.into()),
        }
        unit.commit().await?;
        let shown = display_user_code(&user_code);
        return Ok(DeviceResponse {
            verification_uri: format!("{issuer}/oauth/device"),
            verification_uri_complete: format!("{issuer}/oauth/device?user_code={shown}"),
            device_code,
            user_code: shown,
            expires_in: ttl.num_seconds(),
            interval,
        });
    }
    Err(OAuthError::server_error())
}

/// A pending device authorization found by the code a user typed, with its app's name.
#[derive(Debug, Clone)]
pub struct PendingDevice {
    pub auth: DeviceAuth,
    pub app_name: String,
    pub app_host: Option<String>,
}

/// Looks up a typed user code. `None` when it is malformed, unknown, expired or already answered.
pub async fn find(p: &Provider, typed: &str) -> OAuthResult<Option<PendingDevice>> {
    let Some(code) = normalize_user_code(typed) else {
        return Ok(None);
    };
    let found = p
        .store
        .read()
        .await?
        .device_by_user_code(&hash_token(&code))
        .await?;
    let Some(auth) = found else {
        return Ok(None);
    };
    if auth.status != DeviceStatus::Pending || auth.expires_at <= p.now() {
        return Ok(None);
    }
    let Some((app, _)) = super::clients::app(p, &auth.app_id).await? else {
        return Ok(None);
    };
    Ok(Some(PendingDevice {
        auth,
        app_host: super::clients::shown_host(&app, None),
        app_name: app.name,
    }))
}

/// The user's answer on the verification page: approve with these organizations, or deny.
pub async fn answer(
    p: &Provider,
    user: &Account,
    signed_in: &WebSession,
    device_hash: &str,
    approve: Option<Vec<String>>,
) -> OAuthResult<bool> {
    let mut unit = p.store.begin().await?;
    if let Some(orgs) = &approve {
        let member_of: Vec<String> = unit
            .orgs_of(&user.id)
            .await?
            .into_iter()
            .map(|(o, _)| o.id)
            .collect();
        if orgs.iter().any(|o| !member_of.contains(o)) {
            return Err(OAuthError::invalid_request(
                "you are not a member of one of the organizations",
            ));
        }
    }
    let decided = unit
        .decide_device(
            device_hash,
            approve
                .as_ref()
                .map(|o| (user.id.as_str(), signed_in.created_at, o.as_slice())),
        )
        .await?;
    unit.commit().await?;
    Ok(decided)
}

/// The device-code grant: the device polls until the user answered.
pub async fn poll(p: &Provider, client: &Client, device_code: &str) -> OAuthResult<TokenResponse> {
    let now = p.now();
    let invalid = || OAuthError::invalid_grant("unknown device_code");
    if !device_code.starts_with(DEVICE_PREFIX) || device_code.len() > 128 {
        return Err(invalid());
    }
    let hash = hash_token(device_code);
    let mut unit = p.store.begin().await?;
    let auth = unit.device(&hash).await?.ok_or_else(invalid)?;
    if auth.app_id != client.app.id {
        return Err(invalid());
    }
    if auth.expires_at <= now {
        return Err(OAuthError::new(
            "expired_token",
            "the device code has expired; start again",
        ));
    }
    let too_soon = auth
        .last_poll_at
        .is_some_and(|t| now < t + Duration::seconds(auth.interval_s));
    let interval = if too_soon {
        auth.interval_s + 5
    } else {
        auth.interval_s
    };
    unit.polled_device(&hash, now, interval).await?;
    match auth.status {
        _ if too_soon => {
            unit.commit().await?;
            Err(OAuthError::new(
                "slow_down",
                format!("poll at most every {interval} seconds"),
            ))
        }
        DeviceStatus::Pending => {
            unit.commit().await?;
            Err(OAuthError::new(
                "authorization_pending",
                "the user has not answered yet",
            ))
        }
        DeviceStatus::Denied => {
            unit.commit().await?;
            Err(OAuthError::new("access_denied", "the user declined"))
        }
        DeviceStatus::Used => {
            unit.commit().await?;
            Err(OAuthError::invalid_grant(
                "the device code was already used",
            ))
        }
        DeviceStatus::Approved => finish(p, unit, client, auth).await,
    }
}

async fn finish(
    p: &Provider,
    mut unit: Box<dyn crate::store::Session>,
    client: &Client,
    auth: DeviceAuth,
) -> OAuthResult<TokenResponse> {
    let now = p.now();
    if !unit.finish_device(&auth.device_hash).await? {
        return Err(OAuthError::invalid_grant(
            "the device code was already used",
        ));
    }
    let user_id = auth.user_id.clone().ok_or_else(OAuthError::server_error)?;
    let grant = Grant {
        id: random_id(),
        app_id: Some(client.app.id.clone()),
        user_id,
        kind: GrantKind::Device,
        scopes: auth.scopes.clone(),
        org_ids: auth.org_ids.clone(),
        personal: true,
        nonce: None,
        // When the user who approved signed in (older rows have none: then, now).
        auth_time: auth.auth_time.unwrap_or(now),
        created_at: now,
        revoked_at: None,
    };
    unit.create_grant(&grant).await?;
    issue_and_commit(p, unit, &grant, &client.app.id).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_codes_use_the_alphabet() {
        for _ in 0..100 {
            let c = new_user_code();
            assert_eq!(
                normalize_user_code(&c.to_lowercase()).as_deref(),
                Some(c.as_str())
            );
        }
    }
}
