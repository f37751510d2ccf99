//! The OAuth provider over HTTP: discovery, JWKS, the token, device, userinfo, revocation and
//! introspection endpoints (here), the browser pages ([`pages`]), app management ([`apps`]) and
//! trusted publishers for keyless sign-in from CI ([`publishers`]).
//! Token-endpoint answers are JSON with `Cache-Control: no-store`; errors are `{"error",
//! "error_description"}` with the RFC's status codes.

pub mod apps;
mod pages;
pub mod publishers;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use super::AppState;
use crate::auth::{bearer_in, Credential};
use crate::oauth::clients::{self, SecretRule};
use crate::oauth::{ci, code, device, exchange, tokens, OAuthError, OAuthResult};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/.well-known/openid-configuration", get(discovery))
        .route("/.well-known/oauth-authorization-server", get(as_metadata))
        .route("/oauth/jwks", get(jwks))
        .route("/oauth/token", post(token))
        .route(
            "/oauth/device",
            post(device_authorization).get(pages::device_page),
        )
        .route("/oauth/userinfo", get(userinfo).post(userinfo))
        .route("/oauth/revoke", post(revoke))
        .route("/oauth/introspect", post(introspect))
        .merge(pages::router())
        .merge(apps::router())
        .merge(publishers::router())
}

/// Documents every app may read: JSON, cacheable briefly, readable cross-origin.
fn public_json(body: Bytes) -> Response {
    let mut resp = (StatusCode::OK, body).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    // A rotated-in key is published longer than this before it signs (`keys::PUBLISHED_AHEAD`).
    const _: () = assert!(crate::oauth::keys::JWKS_MAX_AGE_S == 300);
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    resp
}

async fn discovery(State(s): State<AppState>) -> Response {
    match s.oauth.issuer() {
        Ok(_) => public_json(s.oauth.discovery()),
        Err(e) => e.into_response(),
    }
}

async fn as_metadata(State(s): State<AppState>) -> Response {
    match s.oauth.issuer() {
        Ok(_) => public_json(s.oauth.as_metadata()),
        Err(e) => e.into_response(),
    }
}

async fn jwks(State(s): State<AppState>) -> Response {
    match s.oauth.keys().await {
        Ok(k) => public_json(k.jwks()),
        Err(e) => e.into_response(),
    }
}

/// More parameters than any request of ours has: refused before they cost anything.
const MAX_PARAMS: usize = 64;

/// A JSON object's members in order, repeats kept (a map would keep only the last of two `code`s).
struct JsonPairs(Vec<(String, serde_json::Value)>);

impl<'de> serde::Deserialize<'de> for JsonPairs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = JsonPairs;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<JsonPairs, A::Error> {
                let mut pairs = Vec::new();
                while let Some(pair) = m.next_entry()? {
                    if pairs.len() > MAX_PARAMS {
                        return Err(serde::de::Error::custom("too many members"));
                    }
                    pairs.push(pair);
                }
                Ok(JsonPairs(pairs))
            }
        }
        d.deserialize_map(Visit)
    }
}

/// A form body (`application/x-www-form-urlencoded`), every parameter at most once.
pub(crate) struct Form(Vec<(String, String)>);

impl Form {
    fn parse(body: &[u8]) -> OAuthResult<Form> {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(body)
            .map_err(|_| OAuthError::invalid_request("the body is not a valid form"))?;
        Form::once_each(pairs)
    }

    /// The pairs, when no name appears twice (RFC 6749 3.1) and there are not absurdly many.
    fn once_each(pairs: Vec<(String, String)>) -> OAuthResult<Form> {
        if pairs.len() > MAX_PARAMS {
            return Err(OAuthError::invalid_request("too many parameters"));
        }
        let mut seen = std::collections::HashSet::with_capacity(pairs.len());
        if let Some((k, _)) = pairs.iter().find(|(k, _)| !seen.insert(k.as_str())) {
            return Err(OAuthError::invalid_request(format!(
                "the parameter {k} appears more than once"
            )));
        }
        Ok(Form(pairs))
    }

    /// The body as a form, or as a JSON object of strings (some CI clients send JSON).
    fn parse_any(headers: &HeaderMap, body: &[u8]) -> OAuthResult<Form> {
        let json = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("application/json"));
        if !json {
            return Form::parse(body);
        }
        let JsonPairs(pairs) = serde_json::from_slice(body)
            .map_err(|_| OAuthError::invalid_request("the body is not a JSON object"))?;
        let pairs = pairs
            .into_iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => Ok((k, s)),
                _ => Err(OAuthError::invalid_request(format!("{k} must be a string"))),
            })
            .collect::<OAuthResult<_>>()?;
        Form::once_each(pairs)
    }

    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn need(&self, key: &str) -> OAuthResult<&str> {
        self.get(key)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| OAuthError::invalid_request(format!("{key} is missing")))
    }
}

fn basic(headers: &HeaderMap) -> OAuthResult<Option<clients::Basic>> {
    clients::parse_basic(
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
    )
}

/// The client of a form request: Basic credentials, else the form's `client_id` (a `client_secret`
/// in the form is refused).
async fn client_of(
    p: &crate::oauth::Provider,
    basic: Option<clients::Basic>,
    form: &Form,
    rule: SecretRule,
) -> OAuthResult<clients::Client> {
    let secret_in_form = form.get("client_secret").is_some();
    clients::authenticate(p, basic, form.get("client_id"), secret_in_form, rule).await
}

/// A JSON answer that must never be cached.
fn no_store_json<T: serde::Serialize>(body: &T) -> Response {
    let mut resp = Json(body).into_response();
    crate::oauth::no_store(&mut resp);
    resp
}

fn answer<T: serde::Serialize>(r: OAuthResult<T>) -> Response {
    match r {
        Ok(body) => no_store_json(&body),
        Err(e) => e.into_response(),
    }
}

async fn token(State(s): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    answer(token_grant(&s, &headers, &body).await)
}

async fn token_grant(
    s: &AppState,
    headers: &HeaderMap,
    body: &[u8],
) -> OAuthResult<tokens::TokenResponse> {
    let p = &s.oauth;
    p.issuer()?;
    let form = Form::parse_any(headers, body)?;
    let basic = basic(headers)?;
    let client = |rule| client_of(p, basic.clone(), &form, rule);
    match form.need("grant_type")? {
        crate::oauth::GRANT_CODE => {
            let c = client(SecretRule::Required).await?;
            let code = form.need("code")?;
            code::redeem(
                p,
                &c,
                code,
                form.get("redirect_uri"),
                form.get("code_verifier"),
            )
            .await
        }
        crate::oauth::GRANT_REFRESH => {
            let c = client(SecretRule::Required).await?;
            tokens::refresh(p, &c, form.need("refresh_token")?, form.get("scope")).await
        }
        crate::oauth::GRANT_DEVICE => {
            let c = client(SecretRule::Required).await?;
            device::poll(p, &c, form.need("device_code")?).await
        }
        crate::oauth::GRANT_EXCHANGE => match form.need("subject_token_type")? {
            exchange::USER_EMAIL => {
                let authenticated = async {
                    let c = client(SecretRule::BasicOnly).await?;
                    Ok::<_, OAuthError>((c, form.need("subject_token")?))
                };
                match authenticated.await {
                    Ok((c, email)) => exchange::by_email(p, &c, email, form.get("scope")).await,
                    Err(e) => {
                        let id = basic
                            .as_ref()
                            .map(|b| b.client_id.as_str())
                            .or(form.get("client_id"));
                        let (email, scope) = (form.get("subject_token"), form.get("scope"));
                        exchange::refused_early(p, id, email, scope, e.code).await;
                        Err(e)
                    }
                }
            }
            exchange::ID_TOKEN if p.config.ci_issuers.is_empty() => {
                Err(OAuthError::invalid_request(
                    "keyless sign-in with a CI id token is not enabled on this server",
                ))
            }
            // Keyless sign-in from CI: no client needs to authenticate (the id token and the trusted
            // publishers of `resource` decide), but credentials that are sent must be right.
            exchange::ID_TOKEN => {
                if basic.is_some() {
                    client(SecretRule::BasicOnly).await?;
                }
                let (token, resource) = (form.need("subject_token")?, form.get("resource"));
                ci::sign_in(p, token, resource, form.get("scope")).await
            }
            other => Err(OAuthError::invalid_request(format!(
                "subject_token_type {other:?} is not supported"
            ))),
        },
        other => Err(OAuthError::new(
            "unsupported_grant_type",
            format!("grant_type {other:?} is not supported"),
        )),
    }
}

async fn device_authorization(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let p = &s.oauth;
    let result = async {
        p.issuer()?;
        let form = Form::parse(&body)?;
        let c = client_of(p, basic(&headers)?, &form, SecretRule::Required).await?;
        device::start(p, &c, form.get("scope")).await
    }
    .await;
    answer(result)
}

/// A bearer error as RFC 6750 wants it: the status and `WWW-Authenticate: Bearer error=…`; to a
/// request that sent no credential at all (`sent: false`), the challenge alone, with no error code
/// (§3.1).
fn bearer_error(code: &'static str, description: &str, sent: bool) -> Response {
    let mut resp = OAuthError::new(code, description).into_response();
    let challenge = match sent {
        true => format!("Bearer realm=\"switchyard\", error=\"{code}\""),
        false => "Bearer realm=\"switchyard\"".to_string(),
    };
    if let Ok(v) = HeaderValue::from_str(&challenge) {
        resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    resp
}

async fn userinfo(State(s): State<AppState>, headers: HeaderMap) -> Response {
    let p = &s.oauth;
    let Ok(issuer) = p.issuer() else {
        return OAuthError::server_error().into_response();
    };
    let token = bearer_in(&headers);
    let Some(sent) = token else {
        let needs = "userinfo needs an OAuth access token (Authorization: Bearer …)";
        return bearer_error("invalid_token", needs, false);
    };
    let who = match crate::auth::authenticate(s.store.as_ref(), Some(sent), p.now()).await {
        Ok(w) => w,
        Err(_) => {
            let expired = "the access token is invalid or expired";
            return bearer_error("invalid_token", expired, true);
        }
    };
    if !matches!(who.credential, Credential::OAuth(_)) {
        return bearer_error(
            "invalid_token",
            "userinfo takes an OAuth access token",
            true,
        );
    }
    let scopes = who.scopes.clone().unwrap_or_default();
    if !scopes.contains(&crate::model::account::Scope::Openid) {
        return bearer_error(
            "insufficient_scope",
            "userinfo needs the openid scope",
            true,
        );
    }
    let result = async {
        let orgs = p
            .store
            .read()
            .await?
            .orgs_of(&who.account.id)
            .await?
            .into_iter()
            .filter(|(o, _)| who.reaches_org(&o.name))
            .collect();
        let subject = (who.account.clone(), orgs);
        let claims = tokens::user_claims(issuer, &subject, &scopes, "organizations");
        Ok::<_, OAuthError>(serde_json::Value::Object(claims))
    }
    .await;
    answer(result)
}

async fn revoke(State(s): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let p = &s.oauth;
    let result = async {
        p.issuer()?;
        let form = Form::parse(&body)?;
        let c = client_of(p, basic(&headers)?, &form, SecretRule::Required).await?;
        tokens::revoke(p, &c, form.need("token")?).await?;
        Ok(serde_json::json!({}))
    }
    .await;
    answer(result)
}

/// Introspection takes the app's own credentials (HTTP Basic; only its tokens are described) or an
/// instance administrator's unrestricted token (every token).
async fn introspect(State(s): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let p = &s.oauth;
    let result = async {
        p.issuer()?;
        let form = Form::parse(&body)?;
        let app_id = match basic(&headers)? {
            Some(b) => {
                let c =
                    clients::authenticate(p, Some(b), None, false, SecretRule::BasicOnly).await?;
                Some(c.app.id)
            }
            None => {
                let who = crate::auth::authenticate(s.store.as_ref(), bearer_in(&headers), p.now())
                    .await
                    .map_err(|_| OAuthError::invalid_client("authenticate with HTTP Basic"))?;
                who.require_instance_admin().map_err(|_| {
                    OAuthError::invalid_client(
                        "introspection takes the app's credentials or an administrator's token",
                    )
                })?;
                None
            }
        };
        tokens::introspect(p, app_id.as_deref(), form.need("token")?).await
    }
    .await;
    answer(result)
}
