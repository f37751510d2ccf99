//! Who is asking: the registered app behind a `client_id`, and HTTP Basic client authentication
//! (RFC 6749 2.3.1). Secrets are compared by their SHA-256, in constant time.

use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;

use super::{cimd, OAuthError, OAuthResult, Provider};
use crate::crypto::{constant_time_eq, hash_token};
use crate::model::oauth::OAuthApp;

/// Credentials from an `Authorization: Basic` header: client id and secret, each form-url-decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct Basic {
    pub client_id: String,
    pub secret: String,
}

/// The Basic credentials of a header value; `Ok(None)` when the request has none.
pub fn parse_basic(header: Option<&str>) -> OAuthResult<Option<Basic>> {
    let Some(value) = header else {
        return Ok(None);
    };
    let bad = || OAuthError::invalid_client("malformed HTTP Basic credentials");
    let (scheme, encoded) = value.trim().split_once(' ').ok_or_else(bad)?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return Ok(None);
    }
    let decoded = STANDARD.decode(encoded.trim()).map_err(|_| bad())?;
    let decoded = String::from_utf8(decoded).map_err(|_| bad())?;
    let (id, secret) = decoded.split_once(':').ok_or_else(bad)?;
    let unescape = |s: &str| -> OAuthResult<String> {
        let pairs: Vec<(String, String)> =
            serde_urlencoded::from_str(&format!("v={}", s.replace('&', "%26").replace('=', "%3D")))
                .map_err(|_| bad())?;
        pairs.into_iter().next().map(|(_, v)| v).ok_or_else(bad)
    };
    Ok(Some(Basic {
        client_id: unescape(id)?,
        secret: unescape(secret)?,
    }))
}

/// An app that asked, and whether it proved its secret.
#[derive(Debug, Clone)]
pub struct Client {
    pub app: OAuthApp,
    pub authenticated: bool,
}

/// What the endpoint asks of the client.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SecretRule {
    /// An app with a secret must send it (code, refresh and device grants, device requests,
    /// introspection); a public app has none to send.
    Required,
    /// Only Basic will do (token exchange).
    BasicOnly,
}

/// The client `switchyard login` signs in as: public, device flow only, any scope.
pub const CLI_CLIENT_ID: &str = "switchyard-cli";

fn cli_app(p: &Provider) -> OAuthApp {
    let now = p.now();
    OAuthApp {
        id: CLI_CLIENT_ID.into(),
        owner: String::new(),
        owner_id: String::new(),
        name: "Switchyard CLI and console".into(),
        homepage_url: p.issuer.as_ref().ok().cloned(),
        logo_url: None,
        redirect_uris: Vec::new(),
        scopes: crate::model::account::Scope::ALL.to_vec(),
        has_secret: false,
        token_exchange: false,
        created_at: now,
        updated_at: now,
    }
}

/// The app by client id, with its secret's hash: a registered app, or the public client an `https`
/// client id's metadata document describes (`invalid_client` when that document cannot be used).
pub async fn app(p: &Provider, client_id: &str) -> OAuthResult<Option<(OAuthApp, Option<String>)>> {
    if client_id == CLI_CLIENT_ID {
        return Ok(Some((cli_app(p), None)));
    }
    if cimd::is_document_url(client_id) {
        let app = p
            .documents
            .app(&p.outbound, p.clock.as_ref(), client_id)
            .await
            .map_err(|e| OAuthError::invalid_client(e.to_string()))?;
        return Ok(Some((app, None)));
    }
    if client_id.is_empty() || client_id.len() > 256 {
        return Ok(None);
    }
    let epoch = p.revocations.epoch();
    if let Some(hit) = p.registered.get(client_id, epoch, Instant::now()) {
        return Ok(hit);
    }
    let found = p.store.read().await?.app(client_id).await?;
    p.registered
        .put(client_id, epoch, Instant::now(), found.clone());
    Ok(found)
}

/// Registered apps as recently read, with their secrets' hashes, for [`REGISTERED_TTL`]: the token
/// endpoint does not read the app again for every request. A change made through this server (a new
/// secret, a deleted app) bumps the revocation epoch and empties it at once; one made by another
/// process (`switchyard admin app …`, another replica) is seen within the TTL.
#[derive(Debug, Default)]
pub struct Registered(std::sync::Mutex<RegisteredInner>);

#[derive(Debug, Default)]
struct RegisteredInner {
    epoch: u64,
    apps: std::collections::HashMap<String, (Instant, Found)>,
}

/// How long a registered app's record is trusted without reading it again.
pub const REGISTERED_TTL: Duration = Duration::from_secs(2);
const REGISTERED_MAX: usize = 1024;

type Found = Option<(OAuthApp, Option<String>)>;

impl Registered {
    fn get(&self, id: &str, epoch: u64, now: Instant) -> Option<Found> {
        let inner = self.0.lock().ok()?;
        if inner.epoch != epoch {
            return None;
        }
        let (at, found) = inner.apps.get(id)?;
        (now.duration_since(*at) < REGISTERED_TTL).then(|| found.clone())
    }

    fn put(&self, id: &str, epoch: u64, now: Instant, found: Found) {
        let Ok(mut inner) = self.0.lock() else {
            return;
        };
        if inner.epoch != epoch || inner.apps.len() >= REGISTERED_MAX {
            inner.apps.clear();
            inner.epoch = epoch;
        }
        inner.apps.insert(id.to_string(), (now, found));
    }
}

/// Where the app lives, as the consent page shows it: the host (and a port other than the default)
/// of a metadata document's URL, which the document cannot change, else of the app's homepage.
///
/// For a registered app the homepage is only what its owner typed; where a code will go is the
/// request's redirect URI, so that is shown when there is one (`redirect_uri`).
pub fn shown_host(app: &OAuthApp, redirect_uri: Option<&str>) -> Option<String> {
    let url = match cimd::is_document_url(&app.id) {
        true => Some(app.id.as_str()),
        false => redirect_uri.or(app.homepage_url.as_deref()),
    };
    let url = url::Url::parse(url?).ok()?;
    let host = url.host_str().filter(|h| !h.is_empty())?;
    Some(match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    })
}

/// Authenticates the client of a token-endpoint style request: `basic` from the header, `client_id`
/// and whether a `client_secret` came in the form.
pub async fn authenticate(
    p: &Provider,
    basic: Option<Basic>,
    form_client_id: Option<&str>,
    form_has_secret: bool,
    rule: SecretRule,
) -> OAuthResult<Client> {
    if form_has_secret {
        return Err(OAuthError::invalid_client(
            "send the client secret with HTTP Basic, not in the form",
        ));
    }
    let unknown = || OAuthError::invalid_client("unknown client or wrong secret");
    if let Some(b) = basic {
        if form_client_id.is_some_and(|id| id != b.client_id) {
            return Err(OAuthError::invalid_request(
                "client_id in the form differs from the HTTP Basic one",
            ));
        }
        let (app, hash) = app(p, &b.client_id).await?.ok_or_else(unknown)?;
        let hash = hash.ok_or_else(unknown)?;
        if !constant_time_eq(hash_token(&b.secret).as_bytes(), hash.as_bytes()) {
            return Err(unknown());
        }
        return Ok(Client {
            app,
            authenticated: true,
        });
    }
    if rule == SecretRule::BasicOnly {
        return Err(OAuthError::invalid_client(
            "this grant needs the client to authenticate with HTTP Basic",
        ));
    }
    let id = form_client_id.ok_or_else(|| OAuthError::invalid_client("client_id is missing"))?;
    let (app, hash) = app(p, id).await?.ok_or_else(unknown)?;
    if hash.is_some() && rule == SecretRule::Required {
        return Err(OAuthError::invalid_client(
            "this app has a secret: authenticate with HTTP Basic",
        ));
    }
    Ok(Client {
        app,
        authenticated: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials() {
        let h = format!("Basic {}", STANDARD.encode("app_1:s%3Ac+ret"));
        let b = parse_basic(Some(&h)).unwrap().unwrap();
        assert_eq!(b.client_id, "app_1");
        assert_eq!(b.secret, "s:c ret");
        assert_eq!(parse_basic(None).unwrap(), None);
        assert_eq!(parse_basic(Some("Bearer x")).unwrap(), None);
        assert!(parse_basic(Some("Basic !!!")).is_err());
        let no_colon = format!("Basic {}", STANDARD.encode("app_1"));
        assert!(parse_basic(Some(&no_colon)).is_err());
    }

    #[test]
    fn the_host_shown_for_a_document_client_is_its_url_s() {
        let mut app = crate::oauth::cimd::ClientDocument {
            client_id: "https://app.example:8443/.well-known/oauth-cimd".into(),
            client_name: "App".into(),
            redirect_uris: vec!["https://app.example/cb".into()],
            logo_uri: None,
            client_uri: Some("https://bank.example/".into()),
        }
        .app(chrono::Utc::now());
        assert_eq!(
            shown_host(&app, Some("https://x.example/cb")).as_deref(),
            Some("app.example:8443")
        );
        app.id = "app_1".into();
        assert_eq!(shown_host(&app, None).as_deref(), Some("bank.example"));
        let to = Some("https://cb.example/cb");
        assert_eq!(
            shown_host(&app, to).as_deref(),
            Some("cb.example"),
            "where the code goes"
        );
        app.homepage_url = Some("https://u@bank.example:443/x".into());
        assert_eq!(shown_host(&app, None).as_deref(), Some("bank.example"));
        app.homepage_url = Some("nope".into());
        assert_eq!(shown_host(&app, None), None);
        app.homepage_url = None;
        assert_eq!(shown_host(&app, None), None);
    }
}
