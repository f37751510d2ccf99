//! The OAuth 2.0 / OpenID Connect provider: what happens behind `/oauth/*` and the discovery documents,
//! without HTTP. The API's `oauth` module parses requests, renders pages and calls these.
//!
//! - [`keys`]: ES256 signing keys, sealed at rest, and the JWKS.
//! - [`clients`]: who is asking: registered apps, HTTP Basic client authentication.
//! - [`cimd`]: clients named by the URL of their metadata document, fetched and cached.
//! - [`tokens`]: issuing access, refresh and ID tokens for a grant; refresh rotation; revocation and
//!   introspection.
//! - [`code`]: authorization requests, consent and codes (PKCE S256), code redemption.
//! - [`device`]: device authorization (RFC 8628).
//! - [`exchange`]: an organization's token exchange (RFC 8693) with its audit log.
//! - [`ci`]: keyless sign-in from CI: a CI provider's id token exchanged for a namespace's token, as a
//!   trusted publisher of the namespace allows.
//!
//! Every bearer string (code, token, device code) is 256 random bits, kept only as its SHA-256.

pub mod ci;
pub mod cimd;
pub mod clients;
pub mod code;
pub mod device;
pub mod exchange;
pub mod keys;
pub mod throttle;
pub mod tokens;

use std::sync::{Arc, RwLock};

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;

use crate::clock::Clock;
use crate::config::OAuthConfig;
use crate::crypto::SecretBox;
use crate::model::account::Scope;
use crate::store::{Store, StoreError};
use keys::KeySet;

/// An OAuth error answer: `{"error", "error_description"}` with the RFC's status code.
#[derive(Debug, Clone, PartialEq)]
pub struct OAuthError {
    pub code: &'static str,
    pub description: String,
}

impl OAuthError {
    pub fn new(code: &'static str, description: impl Into<String>) -> OAuthError {
        OAuthError {
            code,
            description: description.into(),
        }
    }

    pub fn invalid_request(d: impl Into<String>) -> OAuthError {
        OAuthError::new("invalid_request", d)
    }

    pub fn invalid_client(d: impl Into<String>) -> OAuthError {
        OAuthError::new("invalid_client", d)
    }

    pub fn invalid_grant(d: impl Into<String>) -> OAuthError {
        OAuthError::new("invalid_grant", d)
    }

    pub fn invalid_scope(d: impl Into<String>) -> OAuthError {
        OAuthError::new("invalid_scope", d)
    }

    pub fn server_error() -> OAuthError {
        OAuthError::new("server_error", "the server failed; try again")
    }

    pub fn status(&self) -> StatusCode {
        match self.code {
            "invalid_client" | "invalid_token" => StatusCode::UNAUTHORIZED,
            "insufficient_scope" => StatusCode::FORBIDDEN,
            "server_error" => StatusCode::INTERNAL_SERVER_ERROR,
            "temporarily_unavailable" => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::BAD_REQUEST,
        }
    }
}

impl From<StoreError> for OAuthError {
    fn from(e: StoreError) -> Self {
        tracing::error!(error = %e, "oauth: store failure");
        OAuthError::server_error()
    }
}

impl std::fmt::Display for OAuthError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.description)
    }
}

/// Headers every token-endpoint answer carries: nothing in it may be cached.
pub fn no_store(resp: &mut Response) {
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
}

impl IntoResponse for OAuthError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"error": self.code, "error_description": self.description});
        let mut resp = (self.status(), axum::Json(body)).into_response();
        no_store(&mut resp);
        if self.code == "invalid_client" {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"switchyard\""),
            );
        }
        let message =
            crate::model::wire::header_text(&format!("{}: {}", self.code, self.description));
        if let Ok(v) = HeaderValue::from_str(&message) {
            resp.headers_mut().insert("x-error-message", v);
        }
        resp
    }
}

pub type OAuthResult<T> = Result<T, OAuthError>;

/// A new bearer string: 256 random bits behind a prefix naming its kind.
pub fn new_secret(prefix: &str) -> String {
    let mut b = [0u8; 32];
    rand::rng().fill_bytes(&mut b);
    format!("{prefix}{}", URL_SAFE_NO_PAD.encode(b))
}

/// Prefixes of the provider's bearer strings.
pub const ACCESS_PREFIX: &str = "syo_";
pub const REFRESH_PREFIX: &str = "syr_";
pub const CODE_PREFIX: &str = "syc_";
pub const DEVICE_PREFIX: &str = "syd_";

/// The issuer an `[oauth]` config and the public URL make, or why the provider must stay off.
pub fn issuer_for(config: &OAuthConfig, public_url: &str) -> Result<String, String> {
    let issuer = config
        .issuer
        .as_deref()
        .unwrap_or(public_url)
        .trim_end_matches('/')
        .to_string();
    let Some((scheme, rest)) = issuer.split_once("://") else {
        return Err(format!("oauth.issuer {issuer:?} is not an absolute URL"));
    };
    if issuer.contains(['?', '#']) {
        return Err(format!("oauth.issuer {issuer:?} has a query or fragment"));
    }
    match scheme {
        "https" => Ok(issuer),
        "http" => {
            if crate::config::is_loopback_host(rest.split('/').next().unwrap_or("")) {
                Ok(issuer)
            } else {
                Err(format!(
                    "the OAuth issuer {issuer:?} is plain http on a host other than loopback; \
                     set oauth.issuer (or runtime.public_url) to an https URL"
                ))
            }
        }
        _ => Err(format!("oauth.issuer {issuer:?} must be https")),
    }
}

/// The provider: its issuer, settings, keys and the prebuilt discovery documents.
pub struct Provider {
    /// The issuer, or why the provider is off.
    pub issuer: Result<String, String>,
    pub config: OAuthConfig,
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    pub secrets: SecretBox,
    pub revocations: Arc<crate::auth::Revocations>,
    /// The SSRF-guarded client for every fetch the provider makes (metadata documents, CI issuers' keys).
    pub outbound: Arc<crate::outbound::Outbound>,
    /// Client metadata documents fetched, cached within bounds.
    pub documents: cimd::Documents,
    /// Registered apps as recently read.
    pub registered: clients::Registered,
    /// Recent wrong passwords and user codes, for the sign-in pages' throttles (see [`throttle`]).
    pub passwords: throttle::Passwords,
    pub codes: throttle::Codes,
    /// Peers whose `X-Forwarded-For` is believed (`proxy.trusted_proxies`), for the throttles' addresses.
    pub trusted_proxies: Vec<crate::model::Cidr>,
    /// The CI issuers' keys, as last fetched.
    pub ci_keys: ci::issuers::IssuerKeys,
    keys: RwLock<Option<Arc<KeySet>>>,
    discovery: axum::body::Bytes,
    as_metadata: axum::body::Bytes,
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Provider({:?})", self.issuer)
    }
}

/// The grant types the token endpoint takes.
pub const GRANT_CODE: &str = "authorization_code";
pub const GRANT_REFRESH: &str = "refresh_token";
pub const GRANT_DEVICE: &str = "urn:ietf:params:oauth:grant-type:device_code";
pub const GRANT_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";

fn discovery_documents(issuer: &str) -> (Vec<u8>, Vec<u8>) {
    let scopes: Vec<&str> = Scope::ALL.iter().map(|s| s.as_str()).collect();
    let mut doc = serde_json::json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}/oauth/authorize"),
        "token_endpoint": format!("{issuer}/oauth/token"),
        "device_authorization_endpoint": format!("{issuer}/oauth/device"),
        "userinfo_endpoint": format!("{issuer}/oauth/userinfo"),
        "jwks_uri": format!("{issuer}/oauth/jwks"),
        "revocation_endpoint": format!("{issuer}/oauth/revoke"),
        "introspection_endpoint": format!("{issuer}/oauth/introspect"),
        "scopes_supported": scopes,
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": [GRANT_CODE, GRANT_REFRESH, GRANT_DEVICE, GRANT_EXCHANGE],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": [keys::ALG],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "none"],
        "revocation_endpoint_auth_methods_supported": ["client_secret_basic", "none"],
        "introspection_endpoint_auth_methods_supported": ["client_secret_basic", "bearer"],
        "code_challenge_methods_supported": ["S256"],
        "claims_supported": ["sub", "iss", "aud", "exp", "iat", "auth_time", "nonce", "at_hash",
            "name", "preferred_username", "picture", "profile", "email", "email_verified", "orgs"],
        "authorization_response_iss_parameter_supported": true,
        "client_id_metadata_document_supported": true,
        "ui_locales_supported": ["en"],
    });
    let oidc = serde_json::to_vec(&doc).unwrap_or_default();
    if let Some(o) = doc.as_object_mut() {
        o.remove("userinfo_endpoint");
        o.remove("subject_types_supported");
        o.remove("id_token_signing_alg_values_supported");
        o.remove("claims_supported");
    }
    (oidc, serde_json::to_vec(&doc).unwrap_or_default())
}

impl Provider {
    pub fn new(
        config: OAuthConfig,
        public_url: &str,
        ctx: &crate::services::Context,
        trusted_proxies: Vec<crate::model::Cidr>,
    ) -> Provider {
        let issuer = issuer_for(&config, public_url);
        let (discovery, as_metadata) = match &issuer {
            Ok(i) => discovery_documents(i),
            Err(_) => (Vec::new(), Vec::new()),
        };
        Provider {
            issuer,
            config,
            store: ctx.store.clone(),
            clock: ctx.clock.clone(),
            secrets: ctx.secrets.clone(),
            revocations: ctx.revocations.clone(),
            outbound: ctx.outbound.clone(),
            documents: cimd::Documents::default(),
            registered: clients::Registered::default(),
            passwords: throttle::Passwords::default(),
            codes: throttle::Codes::default(),
            trusted_proxies,
            ci_keys: ci::issuers::IssuerKeys::default(),
            keys: RwLock::new(None),
            discovery: discovery.into(),
            as_metadata: as_metadata.into(),
        }
    }

    /// The issuer, or `temporarily_unavailable` saying why the provider is off.
    pub fn issuer(&self) -> OAuthResult<&str> {
        self.issuer
            .as_deref()
            .map_err(|why| OAuthError::new("temporarily_unavailable", why.clone()))
    }

    pub fn discovery(&self) -> axum::body::Bytes {
        self.discovery.clone()
    }

    pub fn as_metadata(&self) -> axum::body::Bytes {
        self.as_metadata.clone()
    }

    /// (Re)loads the signing keys from the store, creating the first one; called at start and after a
    /// rotation (a server picks up a rotation made by another process on its next reload).
    pub async fn reload_keys(&self) -> Result<(), keys::KeyError> {
        let set = KeySet::load(self.store.as_ref(), &self.secrets, self.clock.now()).await?;
        if let Ok(mut k) = self.keys.write() {
            *k = Some(Arc::new(set));
        }
        Ok(())
    }

    /// The signing keys, loading them on first use.
    pub async fn keys(&self) -> OAuthResult<Arc<KeySet>> {
        if let Some(k) = self.keys.read().ok().and_then(|k| k.clone()) {
            return Ok(k);
        }
        self.reload_keys().await.map_err(|e| {
            tracing::error!(error = %e, "oauth: signing keys unavailable");
            OAuthError::server_error()
        })?;
        self.keys
            .read()
            .ok()
            .and_then(|k| k.clone())
            .ok_or_else(OAuthError::server_error)
    }

    /// Every minute until `stop`: picks up signing keys rotated by another process and deletes expired
    /// codes, device authorizations, requests, sessions and tokens.
    pub async fn maintain(self: Arc<Self>, stop: impl std::future::Future<Output = ()>) {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(60));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => return,
                _ = tick.tick() => {}
            }
            if let Err(e) = self.reload_keys().await {
                tracing::warn!(error = %e, "oauth: signing keys not reloaded");
            }
            match self.prune().await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(rows = n, "oauth: expired flow state pruned"),
                Err(e) => tracing::warn!(error = %e, "oauth: pruning failed"),
            }
        }
    }

    async fn prune(&self) -> Result<u64, StoreError> {
        let mut unit = self.store.begin().await?;
        let n = unit.prune_oauth(self.now()).await?;
        unit.commit().await?;
        Ok(n)
    }

    pub fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.clock.now()
    }

    pub fn secs(s: u64) -> chrono::Duration {
        chrono::Duration::seconds(i64::try_from(s).unwrap_or(i64::MAX / 1000))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issuers_are_https_except_on_loopback() {
        let c = OAuthConfig::default();
        assert_eq!(
            issuer_for(&c, "http://127.0.0.1:8080/").unwrap(),
            "http://127.0.0.1:8080"
        );
        assert!(issuer_for(&c, "http://localhost:1").is_ok());
        assert!(issuer_for(&c, "http://[::1]:1").is_ok());
        assert!(issuer_for(&c, "https://sy.example").is_ok());
        assert!(issuer_for(&c, "http://sy.example").is_err());
        assert!(issuer_for(&c, "http://0.0.0.0:8080").is_err());
        assert!(issuer_for(&c, "http://localhost.evil:80").is_err());
        let set = OAuthConfig {
            issuer: Some("https://id.example/".into()),
            ..OAuthConfig::default()
        };
        assert_eq!(
            issuer_for(&set, "http://10.0.0.1").unwrap(),
            "https://id.example"
        );
    }

    #[test]
    fn discovery_is_honest() {
        let (oidc, asm) = discovery_documents("https://sy.example");
        let oidc: serde_json::Value = serde_json::from_slice(&oidc).unwrap();
        assert_eq!(
            oidc["code_challenge_methods_supported"],
            serde_json::json!(["S256"])
        );
        assert_eq!(oidc["jwks_uri"], "https://sy.example/oauth/jwks");
        assert_eq!(oidc["authorization_response_iss_parameter_supported"], true);
        assert_eq!(oidc["client_id_metadata_document_supported"], true);
        let asm: serde_json::Value = serde_json::from_slice(&asm).unwrap();
        assert_eq!(asm["issuer"], "https://sy.example");
        assert!(asm.get("userinfo_endpoint").is_none());
        assert_eq!(asm["client_id_metadata_document_supported"], true);
    }
}
