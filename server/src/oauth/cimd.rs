//! Client metadata documents (spec 5.6; draft-ietf-oauth-client-id-metadata-document): a `client_id`
//! that is an `https` URL names a JSON document describing the client. It is fetched through the
//! guarded outbound client (only 200, no redirects, 5 KB, short timeouts), must name itself by exact
//! string comparison, and makes a public client (PKCE, auth method `none`). Valid documents are kept
//! in a small in-memory cache for their `max-age` within bounds; errors never are. Concurrent first
//! requests for one URL wait for a single fetch.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::header::{HeaderMap, CACHE_CONTROL, CONTENT_TYPE};
use serde_json::{Map, Value};
use tokio::sync::OnceCell;

use crate::clock::Clock;
use crate::model::account::Scope;
use crate::model::oauth::{validate_redirect_uri, OAuthApp};
use crate::outbound::{FetchOptions, Outbound};

/// The longest client_id URL fetched.
pub const MAX_URL_LEN: usize = 512;
/// The largest document read (the draft's recommended cap).
pub const MAX_DOCUMENT_BYTES: usize = 5120;
/// The whole fetch, and each connection attempt: a sign-in page must not hang on a slow client site.
const FETCH_TIMEOUT: Duration = Duration::from_millis(2500);
const CONNECT_TIMEOUT: Duration = Duration::from_millis(2000);
/// How long a valid document is kept: its `max-age`, within these bounds, or the default.
pub const MIN_CACHE_S: i64 = 30;
pub const MAX_CACHE_S: i64 = 24 * 3600;
pub const DEFAULT_CACHE_S: i64 = 300;
/// Documents kept at most; the oldest goes first.
pub const CACHE_ENTRIES: usize = 100;
/// Limits on what a document may say.
const MAX_NAME_CHARS: usize = 100;
const MAX_REDIRECT_URIS: usize = 20;
const MAX_URI_LEN: usize = 2000;

/// Whether a client_id is a document URL rather than a registered app's id.
pub fn is_document_url(client_id: &str) -> bool {
    client_id.starts_with("https://")
}

/// Why a document URL cannot be used. The messages may be shown to the user on an error page.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CimdError {
    #[error("the client_id {url:?} is not a usable client metadata document URL: {why}")]
    BadUrl { url: String, why: String },
    #[error("the client metadata document {url:?} could not be fetched: {why}")]
    Fetch { url: String, why: String },
    #[error("the client metadata document {url:?} is not valid: {why}")]
    Invalid { url: String, why: String },
}

/// A client_id URL of an acceptable form (see [`DocumentUrl::parse`]).
#[derive(Debug, Clone, PartialEq)]
pub struct DocumentUrl(String);

impl DocumentUrl {
    /// `https`, a host, a path other than `/` without `.` or `..` segments (also percent-encoded),
    /// no user information, query or fragment, printable ASCII only, at most [`MAX_URL_LEN`].
    pub fn parse(text: &str) -> Result<DocumentUrl, String> {
        if text.len() > MAX_URL_LEN {
            return Err(format!("longer than {MAX_URL_LEN} characters"));
        }
        if let Some(c) = text.chars().find(|c| !c.is_ascii_graphic() || *c == '\\') {
            return Err(format!("it contains {c:?}"));
        }
        let rest = text.strip_prefix("https://").ok_or("it is not https")?;
        if text.contains('#') {
            return Err("it has a fragment".into());
        }
        if text.contains('?') {
            return Err("it has a query".into());
        }
        let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
        check_authority(authority)?;
        check_path(path)?;
        let parsed = url::Url::parse(text).map_err(|e| e.to_string())?;
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err("it has no host".into());
        }
        Ok(DocumentUrl(text.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn check_authority(authority: &str) -> Result<(), String> {
    if authority.contains('@') {
        return Err("it has user information".into());
    }
    if authority.is_empty() {
        return Err("it has no host".into());
    }
    Ok(())
}

fn check_path(path: &str) -> Result<(), String> {
    if path.is_empty() || path == "/" {
        return Err("it needs a path other than /".into());
    }
    let dot = |segment: &str| {
        let decoded = segment.to_ascii_lowercase().replace("%2e", ".");
        decoded == "." || decoded == ".."
    };
    if path.split('/').any(dot) {
        return Err("it has a . or .. path segment".into());
    }
    Ok(())
}

/// What a document says, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientDocument {
    pub client_id: String,
    pub client_name: String,
    pub redirect_uris: Vec<String>,
    pub logo_uri: Option<String>,
    pub client_uri: Option<String>,
}

impl ClientDocument {
    /// The document fetched from `url`: a JSON object naming itself `url` exactly, with a name and
    /// redirect URIs, and no shared secret (auth method `none`, or none given).
    pub fn parse(url: &str, body: &[u8]) -> Result<ClientDocument, String> {
        let value: Value = serde_json::from_slice(body).map_err(|_| "it is not JSON")?;
        let Value::Object(doc) = value else {
            return Err("it is not a JSON object".into());
        };
        match doc.get("client_id") {
            Some(Value::String(id)) if id == url => {}
            Some(Value::String(id)) => return Err(format!("its client_id is {id:?}, not the URL")),
            _ => return Err("it has no client_id string".into()),
        }
        check_public(&doc)?;
        Ok(ClientDocument {
            client_id: url.to_string(),
            client_name: client_name(&doc)?,
            redirect_uris: redirect_uris(&doc)?,
            logo_uri: https_uri(&doc, "logo_uri")?,
            client_uri: https_uri(&doc, "client_uri")?,
        })
    }

    /// The client as an app: public, any scope but never token exchange, owned by no namespace.
    pub fn app(&self, fetched_at: DateTime<Utc>) -> OAuthApp {
        OAuthApp {
            id: self.client_id.clone(),
            owner: String::new(),
            owner_id: String::new(),
            name: self.client_name.clone(),
            homepage_url: self.client_uri.clone(),
            logo_url: self.logo_uri.clone(),
            redirect_uris: self.redirect_uris.clone(),
            scopes: Scope::ALL.to_vec(),
            has_secret: false,
            token_exchange: false,
            created_at: fetched_at,
            updated_at: fetched_at,
        }
    }
}

/// No shared secret of any kind: only `none` (or no method at all).
fn check_public(doc: &Map<String, Value>) -> Result<(), String> {
    if let Some(key) = doc.keys().find(|k| k.starts_with("client_secret")) {
        return Err(format!("it has {key}: these clients have no shared secret"));
    }
    match doc.get("token_endpoint_auth_method") {
        None => Ok(()),
        Some(Value::String(m)) if m == "none" => Ok(()),
        Some(other) => Err(format!(
            "token_endpoint_auth_method is {other}; only \"none\" is accepted"
        )),
    }
}

fn string<'a>(doc: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, String> {
    match doc.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("{key} is not a string")),
    }
}

fn client_name(doc: &Map<String, Value>) -> Result<String, String> {
    let name = string(doc, "client_name")?
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .ok_or("it has no client_name")?;
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(format!(
            "client_name is longer than {MAX_NAME_CHARS} characters"
        ));
    }
    if name.chars().any(char::is_control) {
        return Err("client_name contains control characters".into());
    }
    Ok(name.to_string())
}

fn redirect_uris(doc: &Map<String, Value>) -> Result<Vec<String>, String> {
    let Some(Value::Array(list)) = doc.get("redirect_uris") else {
        return Err("redirect_uris is not an array".into());
    };
    if list.is_empty() || list.len() > MAX_REDIRECT_URIS {
        return Err(format!(
            "redirect_uris must list 1 to {MAX_REDIRECT_URIS} URIs"
        ));
    }
    list.iter()
        .map(|v| {
            let uri = v.as_str().ok_or("redirect_uris holds a non-string")?;
            validate_redirect_uri(uri)?;
            Ok(uri.to_string())
        })
        .collect()
}

/// An optional `https` URI (a logo, a home page): shown, never fetched.
fn https_uri(doc: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    let Some(uri) = string(doc, key)? else {
        return Ok(None);
    };
    let https = url::Url::parse(uri)
        .is_ok_and(|u| u.scheme() == "https" && u.host_str().is_some_and(|h| !h.is_empty()));
    if uri.len() > MAX_URI_LEN || !https {
        return Err(format!("{key} is not an https URL"));
    }
    Ok(Some(uri.to_string()))
}

/// `application/json` or `application/<something>+json`, with any parameters.
fn json_media_type(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let media = value.split(';').next().unwrap_or("").trim();
    let media = media.to_ascii_lowercase();
    media == "application/json"
        || media
            .strip_prefix("application/")
            .is_some_and(|sub| sub.len() > 5 && sub.ends_with("+json"))
}

/// How long a document may be kept: `max-age` within [[`MIN_CACHE_S`], [`MAX_CACHE_S`]];
/// `no-store`/`no-cache` count as 0 (so the minimum); no header, the default.
pub fn cache_seconds(headers: &HeaderMap) -> i64 {
    let directives: Vec<String> = headers
        .get_all(CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|d| d.trim().to_ascii_lowercase())
        .collect();
    let max_age = directives.iter().find_map(|d| {
        let value = d.strip_prefix("max-age")?.trim_start().strip_prefix('=')?;
        value.trim().trim_matches('"').parse::<i64>().ok()
    });
    let uncached = directives
        .iter()
        .any(|d| d == "no-store" || d == "no-cache");
    let seconds = match (uncached, max_age) {
        (true, _) => 0,
        (false, Some(s)) => s,
        (false, None) => DEFAULT_CACHE_S,
    };
    seconds.clamp(MIN_CACHE_S, MAX_CACHE_S)
}

/// A valid document as an app, and until when it may be used without fetching again.
#[derive(Debug, Clone)]
struct Cached {
    app: OAuthApp,
    fetched: DateTime<Utc>,
    expires: DateTime<Utc>,
}

type Flight = Arc<OnceCell<Result<Cached, CimdError>>>;

#[derive(Default)]
struct State {
    cache: HashMap<String, Cached>,
    /// Fetches under way, by URL: later requests wait for the same one.
    in_flight: HashMap<String, Flight>,
}

/// What the cache has for a URL.
enum Found {
    Fresh(Box<OAuthApp>),
    Fetching(Flight),
}

/// The documents known to this server: a bounded cache and the fetches under way.
#[derive(Default)]
pub struct Documents {
    state: Mutex<State>,
}

impl Documents {
    /// The app a document URL describes: from the cache while fresh, else fetched (once, however
    /// many ask at the same time) and checked.
    pub async fn app(
        &self,
        outbound: &Outbound,
        clock: &dyn Clock,
        client_id: &str,
    ) -> Result<OAuthApp, CimdError> {
        let url = DocumentUrl::parse(client_id).map_err(|why| CimdError::BadUrl {
            url: client_id.to_string(),
            why,
        })?;
        let flight = match self.find(url.as_str(), clock.now()) {
            Found::Fresh(app) => return Ok(*app),
            Found::Fetching(flight) => flight,
        };
        let result = flight
            .get_or_init(|| fetch(outbound, clock, &url))
            .await
            .clone();
        self.settle(url.as_str(), &flight, &result);
        result.map(|c| c.app)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn find(&self, url: &str, now: DateTime<Utc>) -> Found {
        let mut state = self.lock();
        match state.cache.get(url) {
            Some(c) if c.expires > now => return Found::Fresh(Box::new(c.app.clone())),
            Some(_) => {
                state.cache.remove(url);
            }
            None => {}
        }
        let flight = state.in_flight.entry(url.to_string()).or_default();
        if flight.initialized() {
            // Settled already by whoever fetched it; a new fetch starts.
            *flight = Flight::default();
        }
        Found::Fetching(flight.clone())
    }

    /// Ends a fetch: the first waiter back takes it off the list and, when valid, keeps it.
    fn settle(&self, url: &str, flight: &Flight, result: &Result<Cached, CimdError>) {
        let mut state = self.lock();
        if !state
            .in_flight
            .get(url)
            .is_some_and(|f| Arc::ptr_eq(f, flight))
        {
            return;
        }
        state.in_flight.remove(url);
        if let Ok(cached) = result {
            keep(&mut state.cache, url, cached.clone());
        }
    }

    /// How many documents are cached (for tests).
    pub fn cached(&self) -> usize {
        self.lock().cache.len()
    }
}

/// Adds a document, making room first: expired ones go, then the oldest.
fn keep(cache: &mut HashMap<String, Cached>, url: &str, cached: Cached) {
    if !cache.contains_key(url) && cache.len() >= CACHE_ENTRIES {
        let now = cached.fetched;
        cache.retain(|_, c| c.expires > now);
        if cache.len() >= CACHE_ENTRIES {
            let oldest = cache
                .iter()
                .min_by_key(|(_, c)| c.fetched)
                .map(|(u, _)| u.clone());
            if let Some(oldest) = oldest {
                cache.remove(&oldest);
            }
        }
    }
    cache.insert(url.to_string(), cached);
}

async fn fetch(
    outbound: &Outbound,
    clock: &dyn Clock,
    url: &DocumentUrl,
) -> Result<Cached, CimdError> {
    let result = fetch_checked(outbound, url).await;
    if let Err(e) = &result {
        tracing::info!(error = %e, "oauth: client metadata document refused");
    }
    let (doc, headers) = result?;
    let fetched = clock.now();
    Ok(Cached {
        app: doc.app(fetched),
        fetched,
        expires: fetched + chrono::Duration::seconds(cache_seconds(&headers)),
    })
}

async fn fetch_checked(
    outbound: &Outbound,
    url: &DocumentUrl,
) -> Result<(ClientDocument, HeaderMap), CimdError> {
    let options = FetchOptions {
        connect_timeout: CONNECT_TIMEOUT,
        timeout: FETCH_TIMEOUT,
        max_bytes: MAX_DOCUMENT_BYTES,
        ..FetchOptions::default()
    }
    .accept("application/json");
    let failed = |why: String| CimdError::Fetch {
        url: url.as_str().to_string(),
        why,
    };
    let fetched = outbound
        .get(url.as_str(), &options)
        .await
        .map_err(|e| failed(e.to_string()))?;
    if fetched.status.as_u16() != 200 {
        return Err(failed(format!("it answered {}", fetched.status)));
    }
    let invalid = |why: String| CimdError::Invalid {
        url: url.as_str().to_string(),
        why,
    };
    if !json_media_type(&fetched.headers) {
        return Err(invalid("its content type is not application/json".into()));
    }
    let doc = ClientDocument::parse(url.as_str(), &fetched.body).map_err(invalid)?;
    Ok((doc, fetched.headers))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    const URL: &str = "https://app.example/.well-known/oauth-cimd";

    #[test]
    fn document_urls_of_an_acceptable_form() {
        for good in [
            URL,
            "https://app.example/client.json",
            "https://app.example:8443/a/b",
            "https://app.example/a/.x/..y",
        ] {
            assert!(DocumentUrl::parse(good).is_ok(), "{good}");
        }
        for (bad, why) in [
            ("http://app.example/client.json", "https"),
            ("https://app.example", "path"),
            ("https://app.example/", "path"),
            ("https://app.example/./client.json", ". or .."),
            ("https://app.example/a/../client.json", ". or .."),
            ("https://app.example/a/..", ". or .."),
            ("https://app.example/%2e%2e/client.json", ". or .."),
            ("https://app.example/%2E/client.json", ". or .."),
            ("https://app.example/.%2e/x", ". or .."),
            ("https://app.example/client.json#f", "fragment"),
            ("https://app.example/client.json#", "fragment"),
            ("https://user@app.example/client.json", "user"),
            ("https://u:p@app.example/client.json", "user"),
            ("https://app.example/client.json?x=1", "query"),
            ("https://app.example/client.json?", "query"),
            ("https://app.example/client json", "' '"),
            ("https://app.example/a\\b", "'\\\\'"),
            ("https://app.example/a\tb", "'\\t'"),
            ("https://app.example/a\u{0}b", "'\\0'"),
            ("https://app.exämple/a", "'ä'"),
            ("https:///client.json", "host"),
            ("https://:443/client.json", "host"),
        ] {
            let err = DocumentUrl::parse(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
        let long = format!("https://app.example/{}", "a".repeat(MAX_URL_LEN));
        assert!(DocumentUrl::parse(&long).unwrap_err().contains("longer"));
        assert!(is_document_url(URL));
        assert!(!is_document_url("app_123"));
        assert!(!is_document_url("http://app.example/x"));
    }

    fn doc(extra: Value) -> Vec<u8> {
        let mut d = serde_json::json!({
            "client_id": URL,
            "client_name": "Notebook",
            "redirect_uris": ["https://app.example/cb", "http://127.0.0.1/callback"],
        });
        if let (Some(d), Value::Object(extra)) = (d.as_object_mut(), extra) {
            d.extend(extra);
        }
        serde_json::to_vec(&d).unwrap()
    }

    #[test]
    fn a_valid_document_makes_a_public_client() {
        let body = doc(serde_json::json!({
            "token_endpoint_auth_method": "none",
            "logo_uri": "https://app.example/logo.png",
            "client_uri": "https://app.example/",
        }));
        let d = ClientDocument::parse(URL, &body).unwrap();
        assert_eq!(d.client_name, "Notebook");
        let app = d.app(Utc::now());
        assert_eq!(app.id, URL);
        assert_eq!(app.homepage_url.as_deref(), Some("https://app.example/"));
        assert_eq!(
            app.logo_url.as_deref(),
            Some("https://app.example/logo.png")
        );
        assert!(!app.has_secret && !app.token_exchange);
        assert_eq!(app.scopes, Scope::ALL.to_vec());
        assert!(app.owner.is_empty());
        // No auth method given is `none`.
        assert!(ClientDocument::parse(URL, &doc(serde_json::json!({}))).is_ok());
    }

    /// The standard document with `extra` merged in must be refused, saying `why`.
    fn refused(extra: Value, why: &str) {
        let body = doc(extra);
        let err = ClientDocument::parse(URL, &body).unwrap_err();
        assert!(
            err.contains(why),
            "{}: {err}",
            String::from_utf8_lossy(&body)
        );
    }

    #[test]
    fn a_document_names_itself_exactly_and_has_no_secret() {
        use serde_json::json;
        refused(json!({"client_id": format!("{URL}/")}), "client_id");
        refused(json!({"client_id": URL.to_uppercase()}), "client_id");
        let with_port = URL.replace(".example/", ".example:443/");
        refused(json!({ "client_id": with_port }), "client_id");
        refused(json!({"client_id": 1}), "client_id");
        refused(json!({"client_secret": "s"}), "client_secret");
        refused(json!({"client_secret_expires_at": 0}), "client_secret");
        let method = |m: &str| json!({ "token_endpoint_auth_method": m });
        refused(method("client_secret_basic"), "client_secret_basic");
        refused(method("client_secret_post"), "token_endpoint_auth_method");
        refused(method("private_key_jwt"), "token_endpoint_auth_method");
        let mut without = serde_json::from_slice::<Value>(&doc(Value::Null)).unwrap();
        without.as_object_mut().unwrap().remove("client_id");
        let err = ClientDocument::parse(URL, &serde_json::to_vec(&without).unwrap()).unwrap_err();
        assert!(err.contains("no client_id"), "{err}");
        for (body, why) in [
            (&b"[1, 2]"[..], "not a JSON object"),
            (b"<html>", "not JSON"),
        ] {
            assert!(ClientDocument::parse(URL, body).unwrap_err().contains(why));
        }
    }

    #[test]
    fn a_document_s_fields_are_checked() {
        use serde_json::json;
        refused(json!({"client_name": ""}), "client_name");
        refused(json!({"client_name": null}), "client_name");
        refused(json!({"client_name": "x".repeat(101)}), "client_name");
        refused(json!({"client_name": "a\nb"}), "client_name");
        refused(
            json!({"redirect_uris": "https://app.example/cb"}),
            "redirect_uris",
        );
        refused(json!({"redirect_uris": []}), "redirect_uris");
        refused(json!({"redirect_uris": [1]}), "redirect_uris");
        refused(
            json!({"redirect_uris": ["http://app.example/cb"]}),
            "plain http",
        );
        refused(
            json!({"redirect_uris": ["https://app.example/cb#x"]}),
            "fragment",
        );
        refused(json!({"logo_uri": "http://app.example/l.png"}), "logo_uri");
        refused(json!({"client_uri": "javascript:alert(1)"}), "client_uri");
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn media_types() {
        for good in [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON",
            "application/oauth-client+json",
        ] {
            assert!(
                json_media_type(&headers(&[("content-type", good)])),
                "{good}"
            );
        }
        for bad in [
            "text/html",
            "text/json",
            "application/+json",
            "application/jsonp",
        ] {
            assert!(
                !json_media_type(&headers(&[("content-type", bad)])),
                "{bad}"
            );
        }
        assert!(!json_media_type(&HeaderMap::new()));
    }

    #[test]
    fn cache_lifetimes_are_bounded() {
        let secs = |pairs| cache_seconds(&headers(pairs));
        assert_eq!(secs(&[]), DEFAULT_CACHE_S);
        assert_eq!(secs(&[("cache-control", "public, max-age=600")]), 600);
        assert_eq!(secs(&[("cache-control", "max-age=1")]), MIN_CACHE_S);
        assert_eq!(secs(&[("cache-control", "max-age=99999999")]), MAX_CACHE_S);
        assert_eq!(secs(&[("cache-control", "max-age=-5")]), MIN_CACHE_S);
        assert_eq!(secs(&[("cache-control", "no-store")]), MIN_CACHE_S);
        assert_eq!(
            secs(&[("cache-control", "max-age=nonsense")]),
            DEFAULT_CACHE_S
        );
        assert_eq!(
            secs(&[
                ("cache-control", "public"),
                ("cache-control", "max-age=120")
            ]),
            120
        );
    }

    fn cached(url: &str, fetched: DateTime<Utc>, ttl: i64) -> Cached {
        let mut app = ClientDocument::parse(URL, &doc(Value::Null))
            .unwrap()
            .app(fetched);
        app.id = url.to_string();
        Cached {
            app,
            fetched,
            expires: fetched + chrono::Duration::seconds(ttl),
        }
    }

    #[test]
    fn the_cache_is_bounded_and_drops_the_oldest() {
        let t0 = Utc::now();
        let mut cache = HashMap::new();
        for i in 0..CACHE_ENTRIES {
            let at = t0 + chrono::Duration::seconds(i as i64);
            keep(&mut cache, &format!("u{i}"), cached("x", at, 3600));
        }
        assert_eq!(cache.len(), CACHE_ENTRIES);
        let later = t0 + chrono::Duration::seconds(1000);
        keep(&mut cache, "new", cached("new", later, 3600));
        assert_eq!(cache.len(), CACHE_ENTRIES);
        assert!(!cache.contains_key("u0"), "the oldest went");
        assert!(cache.contains_key("u1") && cache.contains_key("new"));
        // Replacing an entry makes no room.
        keep(&mut cache, "u5", cached("u5", later, 3600));
        assert!(cache.contains_key("u1"));
    }

    #[test]
    fn a_settled_fetch_is_kept_only_when_valid() {
        let docs = Documents::default();
        let now = Utc::now();
        let Found::Fetching(flight) = docs.find(URL, now) else {
            panic!("nothing cached yet");
        };
        let Found::Fetching(same) = docs.find(URL, now) else {
            panic!("still fetching");
        };
        assert!(Arc::ptr_eq(&flight, &same), "one fetch for both");
        let failed = Err(CimdError::Fetch {
            url: URL.into(),
            why: "404".into(),
        });
        docs.settle(URL, &flight, &failed);
        assert_eq!(docs.cached(), 0, "errors are not cached");
        let Found::Fetching(next) = docs.find(URL, now) else {
            panic!("fetched again");
        };
        assert!(!Arc::ptr_eq(&flight, &next));
        docs.settle(URL, &next, &Ok(cached(URL, now, 60)));
        assert!(matches!(docs.find(URL, now), Found::Fresh(_)));
        let expired = now + chrono::Duration::seconds(61);
        assert!(matches!(docs.find(URL, expired), Found::Fetching(_)));
        assert_eq!(docs.cached(), 0, "an expired document is dropped");
    }
}
