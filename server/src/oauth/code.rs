//! The authorization-code flow: checking an authorization request (redirect URI per spec 5.5, PKCE
//! S256, scopes, duplicate parameters), keeping it immutable until the user answers, issuing a
//! single-use code bound to client, redirect URI and challenge, and redeeming it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::clients::Client;
use super::tokens::{mint, signed, Issue, TokenResponse};
use super::{new_secret, OAuthError, OAuthResult, Provider, CODE_PREFIX};
use crate::crypto::{constant_time_eq, hash_token, random_id};
use crate::model::account::{Account, Scope};
use crate::model::oauth::{
    parse_scopes, redirect_uri_allowed, valid_code_verifier, validate_code_challenge, Grant,
    GrantKind, OAuthApp,
};
use crate::store::{IssueRecord, NewCode, Spent, WebSession};

/// A checked authorization request, stored as is until the user answers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuthRequest {
    pub client_id: String,
    pub redirect_uri: String,
    pub scopes: Vec<Scope>,
    pub state: Option<String>,
    pub nonce: Option<String>,
    pub code_challenge: Option<String>,
    /// Organizations the app asked for (`orgIds`), pre-selected on the consent page.
    pub org_ids: Vec<String>,
    /// The hash of the browser session it belongs to.
    pub session: String,
    /// OpenID Connect's `prompt`: `none`, or any of `login`, `consent`, `select_account`.
    #[serde(default)]
    pub prompt: Vec<String>,
    /// OpenID Connect's `max_age`: the most seconds since the user signed in, else a new sign-in.
    #[serde(default)]
    pub max_age: Option<i64>,
    /// The user is to sign in before answering (`prompt=login`, or a sign-in older than `max_age`):
    /// only a sign-in ([`rebind`]) clears it, so the browser's older session cannot answer it.
    #[serde(default)]
    pub sign_in_first: bool,
}

impl AuthRequest {
    pub fn prompts(&self, what: &str) -> bool {
        self.prompt.iter().any(|p| p == what)
    }
}

/// Why an authorization request is refused, and how the user learns it.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// The client or redirect URI cannot be trusted: an error page, never a redirect.
    Page(String),
    /// Back to the app with `error`, `error_description`, `state` and `iss`.
    Redirect(String),
}

/// The redirect URI with `params` added to its query.
pub fn redirect_with(redirect_uri: &str, params: &[(&str, &str)]) -> String {
    let query = serde_urlencoded::to_string(params).unwrap_or_default();
    let sep = if redirect_uri.contains('?') { '&' } else { '?' };
    format!("{redirect_uri}{sep}{query}")
}

/// The error redirect for a request whose client and redirect URI checked out.
pub fn error_redirect(
    issuer: &str,
    redirect_uri: &str,
    state: Option<&str>,
    error: &str,
    description: &str,
) -> String {
    let mut params = vec![("error", error), ("error_description", description)];
    if let Some(s) = state {
        params.push(("state", s));
    }
    params.push(("iss", issuer));
    redirect_with(redirect_uri, &params)
}

/// Parameters that may appear once at most (RFC 6749 3.1).
const SINGLE: [&str; 12] = [
    "client_id",
    "redirect_uri",
    "response_type",
    "scope",
    "state",
    "nonce",
    "code_challenge",
    "code_challenge_method",
    "orgIds",
    "prompt",
    "response_mode",
    "max_age",
];

fn one<'a>(params: &'a [(String, String)], key: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

fn repeated(params: &[(String, String)]) -> Option<&'static str> {
    SINGLE
        .into_iter()
        .find(|key| params.iter().filter(|(k, _)| k == key).count() > 1)
}

/// Checks an authorization request's parameters; `session` is the hash of the browser session. The client
/// and its redirect URI first: until they check out, a refusal is a page of ours; after, it goes back to the
/// client's redirect URI (RFC 6749 §4.1.2.1).
pub async fn validate(
    p: &Provider,
    params: &[(String, String)],
    session: &str,
) -> Result<(AuthRequest, OAuthApp), Refusal> {
    let issuer = p.issuer().map_err(|e| Refusal::Page(e.description))?;
    let (app, redirect_uri) = client_of(p, params).await?;
    let state = one(params, "state");
    let refuse = |(error, description): Bad| {
        Refusal::Redirect(error_redirect(
            issuer,
            redirect_uri,
            state,
            error,
            &description,
        ))
    };
    response_asked(params).map_err(refuse)?;
    let scopes = scopes_of(params, &app).map_err(refuse)?;
    let code_challenge = pkce_of(params, &app).map_err(refuse)?;
    let prompt = prompt_of(params).map_err(refuse)?;
    let max_age = max_age_of(params).map_err(refuse)?;
    lengths_of(params).map_err(refuse)?;
    let org_ids = one(params, "orgIds")
        .map(|s| {
            s.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    Ok((
        AuthRequest {
            client_id: app.id.clone(),
            redirect_uri: redirect_uri.to_string(),
            scopes,
            state: state.map(str::to_string),
            nonce: one(params, "nonce").map(str::to_string),
            code_challenge,
            org_ids,
            session: session.to_string(),
            prompt,
            max_age,
            sign_in_first: false,
        },
        app,
    ))
}

/// A request refused back to the client: the error code and its description.
type Bad = (&'static str, String);

fn bad(error: &'static str, description: impl Into<String>) -> Bad {
    (error, description.into())
}

/// The app the request is for and the redirect URI it names, each given once, the URI one of the app's.
async fn client_of<'a>(
    p: &Provider,
    params: &'a [(String, String)],
) -> Result<(OAuthApp, &'a str), Refusal> {
    if let Some(key @ ("client_id" | "redirect_uri")) = repeated(params) {
        return Err(Refusal::Page(format!(
            "the parameter {key} appears more than once"
        )));
    }
    let client_id = one(params, "client_id")
        .ok_or_else(|| Refusal::Page("the request has no client_id".into()))?;
    let app = super::clients::app(p, client_id)
        .await
        .map_err(|e| Refusal::Page(e.description))?
        .map(|(app, _)| app)
        .ok_or_else(|| Refusal::Page(format!("there is no app with client_id {client_id:?}")))?;
    let redirect_uri = one(params, "redirect_uri")
        .ok_or_else(|| Refusal::Page("the request has no redirect_uri".into()))?;
    if !redirect_uri_allowed(&app.redirect_uris, redirect_uri) {
        return Err(Refusal::Page(format!(
            "{redirect_uri:?} is not a redirect URI registered for {:?}",
            app.name
        )));
    }
    Ok((app, redirect_uri))
}

/// What the request asks back, as this provider answers: each parameter once, a code, in the query, and no
/// request object.
fn response_asked(params: &[(String, String)]) -> Result<(), Bad> {
    if let Some(key) = repeated(params) {
        let said = format!("the parameter {key} appears more than once");
        return Err(bad("invalid_request", said));
    }
    match one(params, "response_type") {
        Some("code") => {}
        Some(_) => {
            let said = "only response_type=code is supported";
            return Err(bad("unsupported_response_type", said));
        }
        None => return Err(bad("invalid_request", "response_type is missing")),
    }
    if one(params, "response_mode").is_some_and(|m| m != "query") {
        return Err(bad(
            "invalid_request",
            "only response_mode=query is supported",
        ));
    }
    if one(params, "request").is_some() || one(params, "request_uri").is_some() {
        let said = "request objects are not supported";
        return Err(bad("request_not_supported", said));
    }
    Ok(())
}

/// State and nonce of a sane length.
fn lengths_of(params: &[(String, String)]) -> Result<(), Bad> {
    for (key, max) in [("state", 1024), ("nonce", 512)] {
        if one(params, key).is_some_and(|v| v.len() > max) {
            let said = format!("{key} is longer than {max} characters");
            return Err(bad("invalid_request", said));
        }
    }
    Ok(())
}

/// The scopes asked for (all of the app's when none are named): some, and each one the app may have.
fn scopes_of(params: &[(String, String)], app: &OAuthApp) -> Result<Vec<Scope>, Bad> {
    let scopes = match one(params, "scope") {
        Some(s) => parse_scopes(s).map_err(|e| bad("invalid_scope", e))?,
        None => app.scopes.clone(),
    };
    if let Some(s) = scopes.iter().find(|s| !app.scopes.contains(s)) {
        let said = format!("the app may not ask for the scope {:?}", s.as_str());
        return Err(bad("invalid_scope", said));
    }
    if scopes.is_empty() {
        return Err(bad("invalid_scope", "no scope requested"));
    }
    Ok(scopes)
}

/// The PKCE challenge: required of a public app, checked when given.
fn pkce_of(params: &[(String, String)], app: &OAuthApp) -> Result<Option<String>, Bad> {
    let method = one(params, "code_challenge_method");
    match one(params, "code_challenge") {
        Some(c) => {
            validate_code_challenge(c, method).map_err(|e| bad("invalid_request", e))?;
            Ok(Some(c.to_string()))
        }
        None if !app.has_secret => Err(bad(
            "invalid_request",
            "a public app must use PKCE (code_challenge with code_challenge_method=S256)",
        )),
        None if method.is_some() => Err(bad(
            "invalid_request",
            "code_challenge_method without code_challenge",
        )),
        None => Ok(None),
    }
}

/// The `prompt` values asked for: known ones, and `none` alone.
fn prompt_of(params: &[(String, String)]) -> Result<Vec<String>, Bad> {
    let prompt: Vec<String> = one(params, "prompt")
        .unwrap_or_default()
        .split(' ')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect();
    let known = ["none", "login", "consent", "select_account"];
    if let Some(wrong) = prompt.iter().find(|p| !known.contains(&p.as_str())) {
        return Err(bad(
            "invalid_request",
            format!("prompt {wrong:?} is not supported"),
        ));
    }
    if prompt.len() > 1 && prompt.iter().any(|p| p == "none") {
        return Err(bad("invalid_request", "prompt=none stands alone"));
    }
    Ok(prompt)
}

/// `max_age`, a whole number of seconds, when given.
fn max_age_of(params: &[(String, String)]) -> Result<Option<i64>, Bad> {
    match one(params, "max_age").map(str::parse::<i64>) {
        None => Ok(None),
        Some(Ok(secs)) if secs >= 0 => Ok(Some(secs)),
        Some(_) => Err(bad(
            "invalid_request",
            "max_age must be a whole number of seconds",
        )),
    }
}

/// How long a user has to answer an authorization request.
const REQUEST_TTL_S: i64 = 600;

/// Keeps the request until the user answers; returns its id (for the pages' forms).
pub async fn keep(p: &Provider, req: &AuthRequest) -> OAuthResult<String> {
    let id = new_secret("");
    let json = serde_json::to_string(req).map_err(|_| OAuthError::server_error())?;
    let expires = p.now() + chrono::Duration::seconds(REQUEST_TTL_S);
    let mut unit = p.store.begin().await?;
    unit.put_request(&hash_token(&id), &json, expires).await?;
    unit.commit().await?;
    Ok(id)
}

fn parse_request(
    json: &str,
    expires: DateTime<Utc>,
    now: DateTime<Utc>,
    session: &str,
) -> Option<AuthRequest> {
    let req: AuthRequest = serde_json::from_str(json).ok()?;
    (expires > now && constant_time_eq(req.session.as_bytes(), session.as_bytes())).then_some(req)
}

/// [`parse_request`], for a request the session may answer now: not one kept for a new sign-in
/// (`sign_in_first`, which only [`rebind`] clears).
fn answerable(
    json: &str,
    expires: DateTime<Utc>,
    now: DateTime<Utc>,
    session: &str,
) -> Option<AuthRequest> {
    parse_request(json, expires, now, session).filter(|r| !r.sign_in_first)
}

/// A kept request, if it is still pending, belongs to this browser session and may be answered by it.
pub async fn pending(p: &Provider, id: &str, session: &str) -> OAuthResult<Option<AuthRequest>> {
    let row = p.store.read().await?.request(&hash_token(id)).await?;
    Ok(row.and_then(|(json, exp)| answerable(&json, exp, p.now(), session)))
}

/// Moves a kept request to a new browser session (the session changes at sign-in).
pub async fn rebind(p: &Provider, id: &str, old: &str, new: &str) -> OAuthResult<Option<String>> {
    let mut unit = p.store.begin().await?;
    let Some((json, exp)) = unit.take_request(&hash_token(id)).await? else {
        return Ok(None);
    };
    let Some(mut req) = parse_request(&json, exp, p.now(), old) else {
        return Ok(None);
    };
    req.session = new.to_string();
    req.sign_in_first = false;
    let new_id = new_secret("");
    let json = serde_json::to_string(&req).map_err(|_| OAuthError::server_error())?;
    unit.put_request(&hash_token(&new_id), &json, exp).await?;
    unit.commit().await?;
    Ok(Some(new_id))
}

/// The organizations the user granted the app before, when that consent covers this request's scopes
/// and organizations: the user is not asked again.
pub async fn consented(
    p: &Provider,
    user: &Account,
    req: &AuthRequest,
) -> OAuthResult<Option<Vec<String>>> {
    let mut session = p.store.read().await?;
    let prior = session.consent(&user.id, &req.client_id).await?;
    let Some((_, orgs)) = prior.filter(|(scopes, orgs)| {
        req.scopes.iter().all(|s| scopes.contains(s))
            && req.org_ids.iter().all(|o| orgs.contains(o))
    }) else {
        return Ok(None);
    };
    if orgs.is_empty() {
        return Ok(Some(orgs));
    }
    // Organizations the user has left since are no longer theirs to grant: ask again.
    let member_of: Vec<String> = session
        .orgs_of(&user.id)
        .await?
        .into_iter()
        .map(|(o, _)| o.id)
        .collect();
    Ok(orgs.iter().all(|o| member_of.contains(o)).then_some(orgs))
}

/// Takes a kept request for its answer: it cannot be answered twice.
pub async fn take(p: &Provider, id: &str, session: &str) -> OAuthResult<Option<AuthRequest>> {
    let mut unit = p.store.begin().await?;
    let row = unit.take_request(&hash_token(id)).await?;
    unit.commit().await?;
    Ok(row.and_then(|(json, exp)| answerable(&json, exp, p.now(), session)))
}

/// The user's answer to a request: approve with these organizations (ids), or deny.
pub async fn answer(
    p: &Provider,
    user: &Account,
    signed_in: &WebSession,
    req: &AuthRequest,
    approve: Option<Vec<String>>,
) -> OAuthResult<String> {
    let issuer = p.issuer()?;
    let Some(org_ids) = approve else {
        return Ok(error_redirect(
            issuer,
            &req.redirect_uri,
            req.state.as_deref(),
            "access_denied",
            "the user declined",
        ));
    };
    let now = p.now();
    let mut unit = p.store.begin().await?;
    let member_of: Vec<String> = unit
        .orgs_of(&user.id)
        .await?
        .into_iter()
        .map(|(o, _)| o.id)
        .collect();
    if let Some(o) = org_ids.iter().find(|o| !member_of.contains(o)) {
        return Ok(error_redirect(
            issuer,
            &req.redirect_uri,
            req.state.as_deref(),
            "invalid_request",
            &format!("the user is not a member of the organization {o:?}"),
        ));
    }
    let grant = Grant {
        id: random_id(),
        app_id: Some(req.client_id.clone()),
        user_id: user.id.clone(),
        kind: GrantKind::Code,
        scopes: req.scopes.clone(),
        org_ids: org_ids.clone(),
        personal: true,
        nonce: req.nonce.clone(),
        // When the user signed in, not now: a client asking for a recent sign-in can tell.
        auth_time: signed_in.created_at,
        created_at: now,
        revoked_at: None,
    };
    unit.create_grant(&grant).await?;
    let code = new_secret(CODE_PREFIX);
    unit.add_code(&NewCode {
        code_hash: hash_token(&code),
        grant_id: grant.id.clone(),
        redirect_uri: req.redirect_uri.clone(),
        code_challenge: req.code_challenge.clone(),
        expires_at: now + Provider::secs(p.config.code_ttl_s.clamp(1, 60)),
    })
    .await?;
    unit.put_consent(&user.id, &req.client_id, &req.scopes, &org_ids, now)
        .await?;
    unit.commit().await?;
    let mut params = vec![("code", code.as_str())];
    if let Some(s) = &req.state {
        params.push(("state", s));
    }
    params.push(("iss", issuer));
    Ok(redirect_with(&req.redirect_uri, &params))
}

/// The S256 challenge of a verifier.
pub fn challenge_of(verifier: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// The authorization-code grant. A code presented a second time revokes what the first use issued.
pub async fn redeem(
    p: &Provider,
    client: &Client,
    code: &str,
    redirect_uri: Option<&str>,
    verifier: Option<&str>,
) -> OAuthResult<TokenResponse> {
    let now = p.now();
    let invalid = || OAuthError::invalid_grant("the code is invalid, expired or already used");
    if !code.starts_with(CODE_PREFIX) || code.len() > 128 {
        return Err(invalid());
    }
    // Spent in one statement, before anything else: of two concurrent redemptions one wins.
    let (grant_id, stored_redirect, challenge, expires) = match p
        .store
        .spend_code(&hash_token(code), now)
        .await?
    {
        Spent::Fresh {
            grant_id,
            redirect_uri,
            code_challenge,
            expires_at,
        } => (grant_id, redirect_uri, code_challenge, expires_at),
        Spent::Replayed { grant_id } => {
            let mut unit = p.store.begin().await?;
            unit.revoke_grant(&grant_id, now).await?;
            unit.commit().await?;
            crate::auth::revoke_everywhere(&p.revocations, p.store.as_ref()).await;
            tracing::warn!(grant = %grant_id, client = %client.app.id, "authorization code replayed: grant revoked");
            return Err(invalid());
        }
        Spent::Unknown => return Err(invalid()),
    };
    let grant = p.store.read().await?.grant(&grant_id).await?;
    let Some(grant) = grant.filter(|g| g.revoked_at.is_none() && expires > now) else {
        return Err(invalid());
    };
    if grant.app_id.as_deref() != Some(client.app.id.as_str()) {
        return Err(OAuthError::invalid_grant(
            "the code was issued to another client",
        ));
    }
    if redirect_uri != Some(stored_redirect.as_str()) {
        return Err(OAuthError::invalid_grant(
            "redirect_uri differs from the one of the authorization request",
        ));
    }
    check_pkce(challenge.as_deref(), verifier)?;
    let what = Issue {
        client_id: &client.app.id,
        access_ttl: Provider::secs(p.config.access_token_ttl_s),
        refresh: true,
        exchange: false,
    };
    let (resp, rows) = mint(p, &grant, what);
    let record = IssueRecord {
        grant: None,
        tokens: &rows,
        audit: None,
        now,
    };
    p.store.record_issue(&record).await?;
    signed(p, resp, &grant, &client.app.id, None).await
}

fn check_pkce(challenge: Option<&str>, verifier: Option<&str>) -> OAuthResult<()> {
    match (challenge, verifier) {
        (None, None) => Ok(()),
        (None, Some(_)) => Err(OAuthError::invalid_grant(
            "code_verifier sent, but the authorization request had no code_challenge",
        )),
        (Some(_), None) => Err(OAuthError::invalid_grant("code_verifier is missing")),
        (Some(c), Some(v)) => {
            if valid_code_verifier(v) && constant_time_eq(challenge_of(v).as_bytes(), c.as_bytes())
            {
                Ok(())
            } else {
                Err(OAuthError::invalid_grant(
                    "code_verifier does not match the code_challenge",
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkce_checks() {
        let v = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
        let c = challenge_of(v);
        assert_eq!(
            c, "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
            "RFC 7636 appendix B"
        );
        assert!(check_pkce(Some(&c), Some(v)).is_ok());
        assert!(check_pkce(Some(&c), Some(&v.replace('d', "e"))).is_err());
        assert!(check_pkce(Some(&c), None).is_err());
        assert!(
            check_pkce(None, Some(v)).is_err(),
            "no downgrade: a verifier needs a challenge"
        );
        assert!(check_pkce(None, None).is_ok());
    }

    #[test]
    fn redirects_carry_iss_and_state() {
        let url = error_redirect(
            "http://i",
            "http://localhost/cb?a=1",
            Some("s t"),
            "access_denied",
            "no",
        );
        assert_eq!(
            url,
            "http://localhost/cb?a=1&error=access_denied&error_description=no&state=s+t&iss=http%3A%2F%2Fi"
        );
    }

    #[test]
    fn repeated_parameters_are_found() {
        let p = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        assert_eq!(
            repeated(&p(&[("scope", "a"), ("scope", "b")])),
            Some("scope")
        );
        assert_eq!(repeated(&p(&[("scope", "a"), ("state", "b")])), None);
    }
}
