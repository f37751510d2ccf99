//! The provider's browser pages: sign-in, consent, device verification, and error pages. Rendered with
//! auto-escaping templates; every form carries the session's CSRF token and POSTs are also checked for
//! a foreign `Origin`. The session cookie is `HttpOnly`, `SameSite=Lax`, `Secure` under an https
//! issuer, and holds only a random id: the flow's state stays on the server.

use askama::Template;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use super::{AppState, Form};
use crate::crypto::{constant_time_eq, hash_token};
use crate::model::account::{Account, Scope};
use crate::model::oauth::{scope_words, OAuthApp};
use crate::oauth::code::{self, AuthRequest, Refusal};
use crate::oauth::{device, new_secret, OAuthError, Provider};
use crate::store::WebSession;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/oauth/authorize", get(authorize).post(authorize_form))
        .route("/oauth/login", post(login))
        .route("/oauth/consent", get(consent_page).post(consent))
        .route("/oauth/device/verify", post(device_verify))
        .route("/oauth/device/decide", post(device_decide))
}

const COOKIE: &str = "sy_session";

#[derive(Template)]
#[template(path = "oauth/signin.html")]
struct SignIn<'a> {
    /// Where to go after signing in: `authorize` (with `request`) or `device` (with `user_code`).
    next: &'a str,
    app_name: Option<&'a str>,
    error: Option<&'a str>,
    csrf: &'a str,
    request: &'a str,
    user_code: &'a str,
}

#[derive(Template)]
#[template(path = "oauth/consent.html")]
struct Consent<'a> {
    app_name: &'a str,
    app_host: Option<&'a str>,
    user: &'a str,
    /// (scope, what it allows)
    scopes: Vec<(&'static str, &'static str)>,
    /// (org id, name, pre-selected)
    orgs: Vec<(String, String, bool)>,
    action: &'a str,
    csrf: &'a str,
    request: &'a str,
    user_code: &'a str,
}

#[derive(Template)]
#[template(path = "oauth/device.html")]
struct DeviceEntry<'a> {
    user: &'a str,
    error: Option<&'a str>,
    csrf: &'a str,
    user_code: &'a str,
}

#[derive(Template)]
#[template(path = "oauth/message.html")]
struct Message<'a> {
    title: &'a str,
    message: &'a str,
    ok: bool,
}

/// A rendered page with the headers every page gets: not cached, not framed, no referrer to other sites.
fn page(
    status: StatusCode,
    html: Result<String, askama::Error>,
    cookie: Option<HeaderValue>,
) -> Response {
    let mut resp = match html {
        Ok(body) => (status, Html(body)).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "oauth: page failed to render");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                Html("<h1>Error</h1>".to_string()),
            )
                .into_response()
        }
    };
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' https:; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    // `same-origin`, not `no-referrer`: under `no-referrer` browsers send `Origin: null` on our own form
    // POSTs, which the Origin check must refuse. Other sites (the app included) still get no referrer.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    if let Some(c) = cookie {
        h.insert(header::SET_COOKIE, c);
    }
    resp
}

fn message(status: StatusCode, title: &str, text: &str, ok: bool) -> Response {
    page(
        status,
        Message {
            title,
            message: text,
            ok,
        }
        .render(),
        None,
    )
}

fn error_page(text: &str) -> Response {
    message(
        StatusCode::BAD_REQUEST,
        "This request cannot go on",
        text,
        false,
    )
}

fn oauth_error_page(e: OAuthError) -> Response {
    let status = if e.code == "server_error" {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::BAD_REQUEST
    };
    message(status, "Something went wrong", &e.description, false)
}

/// A redirect after a form (303: the browser follows with GET).
fn see_other(location: &str, cookie: Option<HeaderValue>) -> Response {
    let mut resp = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(location) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(c) = cookie {
        resp.headers_mut().insert(header::SET_COOKIE, c);
    }
    resp
}

/// The browser's session: the id's hash, the stored session, and the cookie to set if it is new.
struct Browser {
    hash: String,
    session: WebSession,
    set_cookie: Option<HeaderValue>,
}

fn cookie_of(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v)
        .filter(|v| v.len() <= 128)
}

fn session_cookie(p: &Provider, value: &str) -> Option<HeaderValue> {
    let secure = p.issuer.as_deref().is_ok_and(|i| i.starts_with("https://"));
    HeaderValue::from_str(&format!(
        "{COOKIE}={value}; Path=/oauth; HttpOnly; SameSite=Lax; Max-Age={}{}",
        p.config.session_ttl_s,
        if secure { "; Secure" } else { "" }
    ))
    .ok()
}

/// Starts a session for this browser (signed in as `user`, or not yet).
async fn new_session(p: &Provider, user_id: Option<String>) -> Result<Browser, OAuthError> {
    let id = new_secret("");
    let session = WebSession {
        user_id,
        csrf: new_secret(""),
        failed_codes: 0,
        expires_at: p.now() + Provider::secs(p.config.session_ttl_s),
        created_at: p.now(),
    };
    let hash = hash_token(&id);
    let mut unit = p.store.begin().await?;
    unit.create_session(&hash, &session).await?;
    unit.commit().await?;
    Ok(Browser {
        hash,
        session,
        set_cookie: session_cookie(p, &id),
    })
}

/// The browser's current session, if its cookie names a live one.
async fn current(p: &Provider, headers: &HeaderMap) -> Result<Option<Browser>, OAuthError> {
    let Some(id) = cookie_of(headers) else {
        return Ok(None);
    };
    let hash = hash_token(id);
    let session = p.store.read().await?.session(&hash).await?;
    Ok(session
        .filter(|s| s.expires_at > p.now())
        .map(|session| Browser {
            hash,
            session,
            set_cookie: None,
        }))
}

async fn browser(p: &Provider, headers: &HeaderMap) -> Result<Browser, OAuthError> {
    match current(p, headers).await? {
        Some(b) => Ok(b),
        None => new_session(p, None).await,
    }
}

/// The signed-in user of a session, if it is still allowed in.
async fn user_of(p: &Provider, b: &Browser) -> Result<Option<Account>, OAuthError> {
    let Some(id) = &b.session.user_id else {
        return Ok(None);
    };
    let account = p.store.read().await?.account_by_id(id).await?;
    Ok(account.filter(|a| a.disabled_at.is_none()))
}

/// A POST from one of our forms: the session's CSRF token, and no foreign `Origin`.
fn form_checks(p: &Provider, headers: &HeaderMap, b: &Browser, form: &Form) -> bool {
    let token_ok = form
        .get("csrf")
        .is_some_and(|t| constant_time_eq(t.as_bytes(), b.session.csrf.as_bytes()));
    let origin_ok = match headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
        None => true,
        Some(origin) => p.issuer.as_deref().is_ok_and(|issuer| {
            let own = issuer
                .find("://")
                .and_then(|i| issuer[i + 3..].find('/').map(|j| &issuer[..i + 3 + j]))
                .unwrap_or(issuer);
            origin == own
        }),
    };
    token_ok && origin_ok
}

fn forbidden() -> Response {
    message(
        StatusCode::FORBIDDEN,
        "This form has expired",
        "Go back to the app and start again.",
        false,
    )
}

async fn authorize(
    State(s): State<AppState>,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
) -> Response {
    match serde_urlencoded::from_str(q.as_deref().unwrap_or_default()) {
        Ok(params) => authorize_with(&s, &headers, params).await,
        Err(_) => error_page("the request's parameters cannot be read"),
    }
}

/// The authorization request sent as a form (OpenID Connect Core 3.1.2.1).
async fn authorize_form(State(s): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    match serde_urlencoded::from_bytes(&body) {
        Ok(params) => authorize_with(&s, &headers, params).await,
        Err(_) => error_page("the request's parameters cannot be read"),
    }
}

async fn authorize_with(
    s: &AppState,
    headers: &HeaderMap,
    params: Vec<(String, String)>,
) -> Response {
    let p = &s.oauth;
    // Checked before any session is made: a refused request writes nothing.
    let (mut req, app) = match code::validate(p, &params, "").await {
        Ok(v) => v,
        Err(Refusal::Page(text)) => return error_page(&text),
        Err(Refusal::Redirect(url)) => return see_other(&url, None),
    };
    let b = match browser(p, headers).await {
        Ok(b) => b,
        Err(e) => return oauth_error_page(e),
    };
    req.session = b.hash.clone();
    let result = async {
        // `prompt=login` asks for a sign-in even when this browser has one, and `max_age` one when the
        // browser's is older than that.
        let signed_in_for = (p.now() - b.session.created_at).num_seconds();
        let stale = req.max_age.is_some_and(|max| signed_in_for > max);
        req.sign_in_first = req.prompts("login") || stale;
        let user = match req.sign_in_first {
            true => None,
            false => user_of(p, &b).await?,
        };
        // A returning user is not asked again, by a confidential app (RFC 8252 8.6: a public app's
        // redirect, a loopback port or an app scheme, may be anyone's), unless `prompt=consent`.
        let reuse = app.has_secret && !req.prompts("consent");
        let prior = match (&user, reuse) {
            (Some(user), true) => code::consented(p, user, &req).await?,
            _ => None,
        };
        if let (Some(user), Some(orgs)) = (&user, prior) {
            let url = code::answer(p, user, &b.session, &req, Some(orgs)).await?;
            return Ok(see_other(&url, b.set_cookie.clone()));
        }
        if req.prompts("none") {
            let error = if user.is_none() {
                "login_required"
            } else {
                "consent_required"
            };
            let issuer = p.issuer()?;
            let url = code::error_redirect(
                issuer,
                &req.redirect_uri,
                req.state.as_deref(),
                error,
                "prompt=none",
            );
            return Ok(see_other(&url, b.set_cookie.clone()));
        }
        let id = code::keep(p, &req).await?;
        Ok(match user {
            None => sign_in_page(
                &b,
                "authorize",
                Some(&app.name),
                None,
                &id,
                "",
                StatusCode::OK,
            ),
            Some(user) => consent_for_request(p, &b, &user, &req, &app, &id).await?,
        })
    }
    .await;
    result.unwrap_or_else(oauth_error_page)
}

#[allow(clippy::too_many_arguments)]
fn sign_in_page(
    b: &Browser,
    next: &str,
    app_name: Option<&str>,
    error: Option<&str>,
    request: &str,
    user_code: &str,
    status: StatusCode,
) -> Response {
    let html = SignIn {
        next,
        app_name,
        error,
        csrf: &b.session.csrf,
        request,
        user_code,
    }
    .render();
    page(status, html, b.set_cookie.clone())
}

/// The organizations a user may grant, with those asked for pre-selected.
async fn org_choices(
    p: &Provider,
    user: &Account,
    asked: &[String],
) -> Result<Vec<(String, String, bool)>, OAuthError> {
    Ok(p.store
        .read()
        .await?
        .orgs_of(&user.id)
        .await?
        .into_iter()
        .map(|(o, _)| {
            let pre = asked.contains(&o.id);
            (o.id, o.name, pre)
        })
        .collect())
}

fn scope_lines(scopes: &[Scope]) -> Vec<(&'static str, &'static str)> {
    scopes
        .iter()
        .map(|s| (s.as_str(), scope_words(*s)))
        .collect()
}

async fn consent_for_request(
    p: &Provider,
    b: &Browser,
    user: &Account,
    req: &AuthRequest,
    app: &OAuthApp,
    request_id: &str,
) -> Result<Response, OAuthError> {
    let orgs = org_choices(p, user, &req.org_ids).await?;
    if let Some(missing) = req
        .org_ids
        .iter()
        .find(|o| !orgs.iter().any(|(id, _, _)| id == *o))
    {
        return Ok(error_page(&format!(
            "the app asks for the organization {missing:?}, which you are not a member of"
        )));
    }
    let host = crate::oauth::clients::shown_host(app, Some(&req.redirect_uri));
    let html = Consent {
        app_name: &app.name,
        app_host: host.as_deref(),
        user: &user.name,
        scopes: scope_lines(&req.scopes),
        orgs,
        action: "/oauth/consent",
        csrf: &b.session.csrf,
        request: request_id,
        user_code: "",
    }
    .render();
    Ok(page(StatusCode::OK, html, b.set_cookie.clone()))
}

/// The caller's address, for the throttles: the socket's, or a trusted proxy's `X-Forwarded-For`.
fn caller(p: &Provider, peer: std::net::SocketAddr, headers: &HeaderMap) -> std::net::IpAddr {
    let forwarded = headers
        .get_all("x-forwarded-for")
        .iter()
        .map(HeaderValue::as_bytes);
    crate::model::cidr::client_ip(peer.ip(), forwarded, &p.trusted_proxies)
}

/// Refused for now: how long to wait, said on the page.
fn wait_said(wait: std::time::Duration) -> String {
    match wait.as_secs() {
        s if s < 60 => format!("{} seconds", s.max(1)),
        s => format!("{} minutes", s.div_ceil(60)),
    }
}

async fn login(
    State(s): State<AppState>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let p = &s.oauth;
    let from = caller(p, peer, &headers);
    let Ok(form) = Form::parse(&body) else {
        return error_page("the form cannot be read");
    };
    let result = async {
        let Some(b) = current(p, &headers).await? else {
            return Ok(forbidden());
        };
        if !form_checks(p, &headers, &b, &form) {
            return Ok(forbidden());
        }
        let request = form.get("request").unwrap_or_default();
        let user_code = form.get("user_code").unwrap_or_default();
        let name = form.get("username").unwrap_or_default().trim();
        let password = form.get("password").unwrap_or_default();
        let next = form.get("next").unwrap_or_default();
        if let Err(wait) = p.passwords.attempt(name, from, std::time::Instant::now()) {
            let error = format!(
                "Too many wrong passwords for this name. Try again in {}.",
                wait_said(wait)
            );
            let status = StatusCode::TOO_MANY_REQUESTS;
            let page = sign_in_page(&b, next, None, Some(&error), request, user_code, status);
            return Ok(page);
        }
        let user = crate::services::accounts::check_password(s.store.as_ref(), name, password)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "oauth: password check failed");
                OAuthError::server_error()
            })?;
        let Some(user) = user else {
            tracing::info!("oauth: sign-in refused (wrong name or password)");
            let error = Some("Wrong username or password.");
            let status = StatusCode::UNAUTHORIZED;
            return Ok(sign_in_page(
                &b, next, None, error, request, user_code, status,
            ));
        };
        p.passwords.succeeded(name, from, std::time::Instant::now());
        // A new session id at sign-in: an id planted before cannot ride along.
        let fresh = new_session(p, Some(user.id.clone())).await?;
        let mut unit = p.store.begin().await?;
        unit.delete_session(&b.hash).await?;
        unit.commit().await?;
        tracing::info!(user = %user.name, "oauth: signed in");
        if form.get("next") == Some("device") {
            let query = serde_urlencoded::to_string([("user_code", user_code)]).unwrap_or_default();
            return Ok(see_other(
                &format!("/oauth/device?{query}"),
                fresh.set_cookie,
            ));
        }
        match code::rebind(p, request, &b.hash, &fresh.hash).await? {
            Some(id) => {
                let query = serde_urlencoded::to_string([("request", id)]).unwrap_or_default();
                Ok(see_other(
                    &format!("/oauth/consent?{query}"),
                    fresh.set_cookie,
                ))
            }
            None => Ok(page(
                StatusCode::OK,
                Message {
                    title: "Signed in",
                    message: "You are signed in. Go back to the app to continue.",
                    ok: true,
                }
                .render(),
                fresh.set_cookie,
            )),
        }
    }
    .await;
    result.unwrap_or_else(oauth_error_page)
}

/// The consent page of a kept request (after sign-in).
async fn consent_page(
    State(s): State<AppState>,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
) -> Response {
    let p = &s.oauth;
    let id = query_param(q.as_deref(), "request");
    let id = id.as_str();
    let result = async {
        let Some(b) = current(p, &headers).await? else {
            return Ok(forbidden());
        };
        let (Some(user), Some(req)) = (user_of(p, &b).await?, code::pending(p, id, &b.hash).await?)
        else {
            return Ok(forbidden());
        };
        let Some((app, _)) = crate::oauth::clients::app(p, &req.client_id).await? else {
            return Ok(error_page("the app no longer exists"));
        };
        let reuse = app.has_secret && !req.prompts("consent");
        let prior = match reuse {
            true => code::consented(p, &user, &req).await?,
            false => None,
        };
        if let Some(orgs) = prior {
            let Some(req) = code::take(p, id, &b.hash).await? else {
                return Ok(forbidden());
            };
            let url = code::answer(p, &user, &b.session, &req, Some(orgs)).await?;
            return Ok(see_other(&url, None));
        }
        consent_for_request(p, &b, &user, &req, &app, id).await
    }
    .await;
    result.unwrap_or_else(oauth_error_page)
}

/// One parameter of a page's query string (empty when absent or unreadable).
fn query_param(query: Option<&str>, key: &str) -> String {
    serde_urlencoded::from_str::<Vec<(String, String)>>(query.unwrap_or_default())
        .unwrap_or_default()
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
        .unwrap_or_default()
}

/// Forms that may repeat one field (`org`, at most 100 kept): the rest must still appear once.
fn form_with_orgs(body: &[u8]) -> Option<(Form, Vec<String>)> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(body).ok()?;
    let (orgs, rest): (Vec<_>, Vec<_>) = pairs.into_iter().partition(|(k, _)| k == "org");
    let orgs = orgs.into_iter().map(|(_, v)| v).take(100).collect();
    Some((Form::once_each(rest).ok()?, orgs))
}

async fn consent(State(s): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let p = &s.oauth;
    let Some((form, orgs)) = form_with_orgs(&body) else {
        return error_page("the form cannot be read");
    };
    let result = async {
        let Some(b) = current(p, &headers).await? else {
            return Ok(forbidden());
        };
        let Some(user) = user_of(p, &b).await? else {
            return Ok(forbidden());
        };
        if !form_checks(p, &headers, &b, &form) {
            return Ok(forbidden());
        }
        let id = form.get("request").unwrap_or_default();
        // Taken, not read: one answer per request, and nothing in the form can change it.
        let Some(req) = code::take(p, id, &b.hash).await? else {
            return Ok(forbidden());
        };
        let approve = (form.get("decision") == Some("approve")).then_some(orgs);
        let url = code::answer(p, &user, &b.session, &req, approve).await?;
        Ok(see_other(&url, None))
    }
    .await;
    result.unwrap_or_else(oauth_error_page)
}

/// `GET /oauth/device`: the verification page (sign-in first when needed).
pub async fn device_page(
    State(s): State<AppState>,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
) -> Response {
    let p = &s.oauth;
    let typed: String = query_param(q.as_deref(), "user_code")
        .chars()
        .take(32)
        .collect();
    let result = async {
        let b = browser(p, &headers).await?;
        let Some(user) = user_of(p, &b).await? else {
            return Ok(sign_in_page(
                &b,
                "device",
                None,
                None,
                "",
                &typed,
                StatusCode::OK,
            ));
        };
        Ok(device_entry(&b, &user, None, &typed, StatusCode::OK))
    }
    .await;
    result.unwrap_or_else(oauth_error_page)
}

fn device_entry(
    b: &Browser,
    user: &Account,
    error: Option<&str>,
    code: &str,
    status: StatusCode,
) -> Response {
    let html = DeviceEntry {
        user: &user.name,
        error,
        csrf: &b.session.csrf,
        user_code: code,
    }
    .render();
    page(status, html, b.set_cookie.clone())
}

/// A wrong user code, counted for the browser session (the account and the address count every code typed:
/// see [`device_form`]).
async fn count_wrong_code(p: &Provider, b: &Browser) -> Result<(), OAuthError> {
    let mut unit = p.store.begin().await?;
    unit.failed_user_code(&b.hash).await?;
    unit.commit().await?;
    Ok(())
}

/// A signed-in browser posting one of the device forms, with its checks passed and the code it carries
/// counted for its account and address (see [`crate::oauth::throttle::Codes`]).
async fn device_form(
    p: &Provider,
    headers: &HeaderMap,
    form: &Form,
    from: std::net::IpAddr,
) -> Result<Result<(Browser, Account), Response>, OAuthError> {
    let Some(b) = current(p, headers).await? else {
        return Ok(Err(forbidden()));
    };
    let Some(user) = user_of(p, &b).await? else {
        return Ok(Err(forbidden()));
    };
    if !form_checks(p, headers, &b, form) {
        return Ok(Err(forbidden()));
    }
    if b.session.failed_codes >= i64::from(p.config.device_code_attempts) {
        return Ok(Err(message(
            StatusCode::TOO_MANY_REQUESTS,
            "Too many attempts",
            "Too many wrong codes were typed in this browser. Sign in again later.",
            false,
        )));
    }
    if let Err(wait) = p.codes.attempt(&user.id, from, std::time::Instant::now()) {
        let said = format!(
            "Too many wrong codes were typed. Try again in {}.",
            wait_said(wait)
        );
        return Ok(Err(message(
            StatusCode::TOO_MANY_REQUESTS,
            "Too many attempts",
            &said,
            false,
        )));
    }
    Ok(Ok((b, user)))
}

async fn device_verify(
    State(s): State<AppState>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let p = &s.oauth;
    let from = caller(p, peer, &headers);
    let Ok(form) = Form::parse(&body) else {
        return error_page("the form cannot be read");
    };
    let result = async {
        let (b, user) = match device_form(p, &headers, &form, from).await? {
            Ok(v) => v,
            Err(resp) => return Ok(resp),
        };
        let typed = form.get("user_code").unwrap_or_default();
        let Some(found) = device::find(p, typed).await? else {
            count_wrong_code(p, &b).await?;
            let error = Some("That code is not valid or has expired. Check your device.");
            return Ok(device_entry(&b, &user, error, "", StatusCode::BAD_REQUEST));
        };
        let orgs = org_choices(p, &user, &[]).await?;
        let html = Consent {
            app_name: &found.app_name,
            app_host: found.app_host.as_deref(),
            user: &user.name,
            scopes: scope_lines(&found.auth.scopes),
            orgs,
            action: "/oauth/device/decide",
            csrf: &b.session.csrf,
            request: "",
            user_code: typed,
        }
        .render();
        Ok(page(StatusCode::OK, html, None))
    }
    .await;
    result.unwrap_or_else(oauth_error_page)
}

async fn device_decide(
    State(s): State<AppState>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let p = &s.oauth;
    let from = caller(p, peer, &headers);
    let Some((form, orgs)) = form_with_orgs(&body) else {
        return error_page("the form cannot be read");
    };
    let result = async {
        let (b, user) = match device_form(p, &headers, &form, from).await? {
            Ok(v) => v,
            Err(resp) => return Ok(resp),
        };
        let typed = form.get("user_code").unwrap_or_default();
        let Some(found) = device::find(p, typed).await? else {
            // A guess here counts as one on the code form: the attempt limit holds on both.
            count_wrong_code(p, &b).await?;
            return Ok(error_page("That code is not valid or has expired."));
        };
        let approve = (form.get("decision") == Some("approve")).then_some(orgs);
        let approved = approve.is_some();
        if !device::answer(p, &user, &b.session, &found.auth.device_hash, approve).await? {
            return Ok(error_page("That code was already answered."));
        }
        Ok(if approved {
            message(
                StatusCode::OK,
                "Device connected",
                "You can go back to your device.",
                true,
            )
        } else {
            message(
                StatusCode::OK,
                "Request denied",
                "The device was not connected.",
                false,
            )
        })
    }
    .await;
    result.unwrap_or_else(oauth_error_page)
}
