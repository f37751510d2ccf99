//! The OAuth provider's records and rules that need no I/O: apps, grants, redirect-URI matching
//! (spec 5.5), scope lists, PKCE (S256 only) and device user codes.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::account::Scope;

/// A third-party app registered by a user or an organization. The id is its `client_id`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OAuthApp {
    /// The `client_id`.
    pub id: String,
    /// The namespace (user or organization) that owns the app.
    pub owner: String,
    #[serde(skip)]
    pub owner_id: String,
    pub name: String,
    pub homepage_url: Option<String>,
    pub logo_url: Option<String>,
    pub redirect_uris: Vec<String>,
    /// The scopes the app may ask for.
    pub scopes: Vec<Scope>,
    /// Whether the app has a secret (a confidential client); without one it is public.
    pub has_secret: bool,
    /// Bound to its owning organization with the `token-exchange` privilege.
    pub token_exchange: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// How a grant came about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GrantKind {
    /// Authorization code, in a browser.
    Code,
    /// Device authorization.
    Device,
    /// An organization's token exchange.
    Exchange,
    /// Keyless sign-in from CI.
    Ci,
}

impl GrantKind {
    pub fn as_str(self) -> &'static str {
        match self {
            GrantKind::Code => "code",
            GrantKind::Device => "device",
            GrantKind::Exchange => "exchange",
            GrantKind::Ci => "ci",
        }
    }

    pub fn parse(s: &str) -> Option<GrantKind> {
        [
            GrantKind::Code,
            GrantKind::Device,
            GrantKind::Exchange,
            GrantKind::Ci,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

/// What a user let an app do. Every code and token belongs to one grant; revoking it ends them all.
#[derive(Debug, Clone, PartialEq)]
pub struct Grant {
    pub id: String,
    pub app_id: Option<String>,
    pub user_id: String,
    pub kind: GrantKind,
    pub scopes: Vec<Scope>,
    /// Ids of the organizations the grant reaches.
    pub org_ids: Vec<String>,
    /// Whether the grant reaches the user's own namespace (an organization's exchanged token does not).
    pub personal: bool,
    pub nonce: Option<String>,
    pub auth_time: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    Access,
    Refresh,
}

impl TokenKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenKind::Access => "access",
            TokenKind::Refresh => "refresh",
        }
    }
}

/// An issued access or refresh token, as stored (by hash).
#[derive(Debug, Clone, PartialEq)]
pub struct IssuedToken {
    pub kind: TokenKind,
    pub expires_at: DateTime<Utc>,
    pub used_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// One row of an organization's audit log.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    pub id: String,
    pub at: DateTime<Utc>,
    /// What happened, e.g. `oauth.token_exchange`.
    pub action: String,
    /// `success`, or the OAuth error code of a refusal.
    pub outcome: String,
    /// Who acted: the app and the subject.
    #[schema(value_type = Object)]
    pub actor: serde_json::Value,
    #[schema(value_type = Object)]
    pub detail: serde_json::Value,
}

/// A space-separated scope list: every name must be a known scope; duplicates are dropped.
pub fn parse_scopes(s: &str) -> Result<Vec<Scope>, String> {
    let mut out = Vec::new();
    for name in s.split(' ').filter(|n| !n.is_empty()) {
        let scope = Scope::parse(name).ok_or_else(|| format!("unknown scope {name:?}"))?;
        if !out.contains(&scope) {
            out.push(scope);
        }
    }
    Ok(out)
}

pub fn scope_string(scopes: &[Scope]) -> String {
    scopes
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

/// What a scope lets an app do, in words for the consent page.
pub fn scope_words(scope: Scope) -> &'static str {
    match scope {
        Scope::Openid => "Sign you in (an ID token)",
        Scope::Profile => "See your name and profile picture",
        Scope::Email => "See your email address",
        Scope::ReadBilling => "See whether a payment method is set up",
        Scope::ReadMemberships => "See your organizations and your role in each",
        Scope::ReadRepos => "Read your personal repositories",
        Scope::GatedRepos => "Read public gated repositories you were granted",
        Scope::ContributeRepos => "Create repositories and use those it created",
        Scope::WriteRepos => "Read and write your personal repositories",
        Scope::ManageRepos => "Fully manage your personal repositories",
        Scope::ReadCollections => "Read your collections",
        Scope::WriteCollections => "Read, write, create and delete your collections",
        Scope::InferenceApi => "Make inference requests on your behalf",
        Scope::ReadEndpoints => "See your inference endpoints and call them",
        Scope::WriteEndpoints => "Create, change and delete your inference endpoints",
        Scope::Jobs => "Run jobs",
        Scope::Webhooks => "Manage your webhooks",
        Scope::WriteDiscussions => "Open and take part in discussions",
    }
}

/// The parts of a URI that redirect matching compares, split without any normalization.
#[derive(Debug, PartialEq)]
struct UriParts<'a> {
    scheme: &'a str,
    userinfo: Option<&'a str>,
    host: &'a str,
    port: Option<&'a str>,
    /// Path and query, exactly as written.
    rest: &'a str,
}

/// The scheme of an absolute URI without a fragment or blanks, if it is one.
fn scheme_of(uri: &str) -> Option<&str> {
    if uri.contains('#') || uri.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return None;
    }
    let (scheme, _) = uri.split_once(':')?;
    let valid = scheme
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    valid.then_some(scheme)
}

fn split_uri(uri: &str) -> Option<UriParts<'_>> {
    let scheme = scheme_of(uri)?;
    let after = uri[scheme.len()..].strip_prefix("://")?;
    let auth_end = after.find(['/', '?']).unwrap_or(after.len());
    let (authority, rest) = after.split_at(auth_end);
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let (host, port) = if let Some(stripped) = hostport.strip_prefix('[') {
        let (h, tail) = stripped.split_once(']')?;
        let port = match tail {
            "" => None,
            t => Some(t.strip_prefix(':')?),
        };
        (&hostport[..h.len() + 2], port)
    } else {
        match hostport.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    // A port is one a socket can have: digits, at most 65535.
    let bad_port = |p: &str| !p.bytes().all(|b| b.is_ascii_digit()) || p.parse::<u16>().is_err();
    if host.is_empty() || port.is_some_and(bad_port) {
        return None;
    }
    Some(UriParts {
        scheme,
        userinfo,
        host,
        port,
        rest,
    })
}

/// The loopback hosts that get any port (spec 5.5), each matched only by itself.
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// Whether a redirect URI in a request is allowed by the registered ones (spec 5.5): equal as strings,
/// or, for `http` on a loopback host, equal in every part but the port.
pub fn redirect_uri_allowed(registered: &[String], requested: &str) -> bool {
    if registered.iter().any(|r| r == requested) {
        return scheme_of(requested).is_some();
    }
    let Some(req) = split_uri(requested) else {
        return false;
    };
    if req.scheme != "http" || !LOOPBACK_HOSTS.contains(&req.host) || req.userinfo.is_some() {
        return false;
    }
    registered.iter().filter_map(|r| split_uri(r)).any(|reg| {
        reg.scheme == "http"
            && reg.userinfo.is_none()
            && reg.host == req.host
            && reg.rest == req.rest
    })
}

/// A URI an app may register as a redirect: absolute, no fragment, and `https`, `http` on a loopback
/// host, or a custom (app) scheme.
pub fn validate_redirect_uri(uri: &str) -> Result<(), String> {
    if uri.len() > 2000 {
        return Err("a redirect URI is at most 2000 characters".into());
    }
    let scheme = scheme_of(uri)
        .ok_or_else(|| format!("{uri:?} is not an absolute URI without a fragment"))?;
    if ["javascript", "data", "file", "vbscript", "blob"]
        .contains(&scheme.to_ascii_lowercase().as_str())
    {
        return Err(format!("{uri:?}: a {scheme}: URI cannot be a redirect URI"));
    }
    if scheme != "http" && scheme != "https" {
        // An app's own scheme (RFC 8252 7.1): matched exactly, nothing more to check.
        return Ok(());
    }
    let parts = split_uri(uri).ok_or_else(|| format!("{uri:?} has no host"))?;
    if parts.scheme == "http" && !LOOPBACK_HOSTS.contains(&parts.host) {
        return Err(format!(
            "{uri:?}: plain http is only allowed on localhost, 127.0.0.1 or [::1]; use https"
        ));
    }
    if parts.userinfo.is_some() {
        return Err(format!("{uri:?}: a redirect URI has no user information"));
    }
    Ok(())
}

/// The characters of a PKCE verifier (RFC 7636 `unreserved`).
fn pkce_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~".contains(&b)
}

/// A code challenge as sent: S256 only, 43 characters of base64url.
pub fn validate_code_challenge(challenge: &str, method: Option<&str>) -> Result<(), String> {
    match method {
        Some("S256") => {}
        Some(other) => {
            return Err(format!(
                "code_challenge_method {other:?} is not supported; use S256"
            ))
        }
        None => return Err("code_challenge_method is required (S256)".into()),
    }
    let ok = challenge.len() == 43
        && challenge
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err("code_challenge must be the base64url SHA-256 of the verifier (43 characters)".into())
    }
}

/// A code verifier's form: 43 to 128 unreserved characters.
pub fn valid_code_verifier(verifier: &str) -> bool {
    (43..=128).contains(&verifier.len()) && verifier.bytes().all(pkce_char)
}

/// The alphabet of device user codes: 20 consonants, no vowels (no words), none easily confused.
pub const USER_CODE_ALPHABET: &[u8; 20] = b"BCDFGHJKLMNPQRSTVWXZ";

/// A user code as typed, in its canonical form (upper case, no dashes or spaces), if it can be one.
pub fn normalize_user_code(typed: &str) -> Option<String> {
    let code: String = typed
        .chars()
        .filter(|c| *c != '-' && !c.is_whitespace())
        .map(|c| c.to_ascii_uppercase())
        .collect();
    (code.len() == 8 && code.bytes().all(|b| USER_CODE_ALPHABET.contains(&b))).then_some(code)
}

/// A canonical user code as shown: `XXXX-XXXX`.
pub fn display_user_code(code: &str) -> String {
    if code.len() == 8 {
        format!("{}-{}", &code[..4], &code[4..])
    } else {
        code.to_string()
    }
}

/// A CI workflow that may sign in to a namespace with its provider's OIDC id token (keyless sign-in):
/// tokens from `issuer` for `audience` whose claims hold exactly these values get `scopes` there.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrustedPublisher {
    pub id: String,
    /// The namespace (user or organization) the workflow signs in to.
    pub namespace: String,
    #[serde(skip)]
    pub namespace_id: String,
    /// The CI provider's `iss`, one of the server's `oauth.ci_issuers`.
    pub issuer: String,
    /// The `aud` the id token must carry, exactly.
    pub audience: String,
    /// Claims the id token must carry with exactly these string values (no patterns, no prefixes).
    pub claims: BTreeMap<String, String>,
    /// What the issued token may do.
    pub scopes: Vec<Scope>,
    /// The user who registered the publisher: the issued tokens act as this user, within the namespace.
    pub created_by: String,
    #[serde(skip)]
    pub created_by_id: String,
    pub created_at: DateTime<Utc>,
}

/// Claims checked on their own (issuer, audience, times, replay): a publisher does not list them.
pub const REGISTERED_CLAIMS: [&str; 6] = ["iss", "aud", "exp", "nbf", "iat", "jti"];

/// Scopes about the user's identity, which a workflow's token has no use for (it gets no ID token).
const IDENTITY_SCOPES: [Scope; 3] = [Scope::Openid, Scope::Profile, Scope::Email];

/// Checks a publisher's audience, claims and scopes (its issuer is checked against the configuration).
pub fn check_publisher(
    audience: &str,
    claims: &BTreeMap<String, String>,
    scopes: &[Scope],
) -> Result<(), String> {
    if audience.is_empty() || audience.chars().count() > 1000 {
        return Err("audience must be 1 to 1000 characters".into());
    }
    if claims.is_empty() || claims.len() > 20 {
        return Err("claims: 1 to 20 claims the id token must carry (e.g. repository, ref)".into());
    }
    for (name, value) in claims {
        if name.is_empty() || name.chars().count() > 100 {
            return Err("claims: a claim name is 1 to 100 characters".into());
        }
        if REGISTERED_CLAIMS.contains(&name.as_str()) {
            return Err(format!(
                "claims: {name:?} is checked on its own (issuer, audience, times, replay)"
            ));
        }
        if value.is_empty() || value.chars().count() > 1000 {
            return Err(format!(
                "claims: the value of {name:?} must be 1 to 1000 characters"
            ));
        }
    }
    if scopes.is_empty() {
        return Err("scopes: at least one scope".into());
    }
    if let Some(s) = scopes.iter().find(|s| IDENTITY_SCOPES.contains(s)) {
        return Err(format!(
            "scopes: {} is about a user's identity; a workflow's token has no use for it",
            s.as_str()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(uris: &[&str]) -> Vec<String> {
        uris.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn redirect_exact_and_loopback_rule() {
        let r = reg(&[
            "https://app.example/cb",
            "http://localhost/callback",
            "http://127.0.0.1:8000/cb?x=1",
            "com.example.app:/oauth",
        ]);
        assert!(redirect_uri_allowed(&r, "https://app.example/cb"));
        assert!(redirect_uri_allowed(&r, "com.example.app:/oauth"));
        assert!(!redirect_uri_allowed(&r, "com.example.app:/oauth2"));
        assert!(redirect_uri_allowed(&r, "http://localhost:5555/callback"));
        assert!(redirect_uri_allowed(&r, "http://localhost/callback"));
        assert!(redirect_uri_allowed(&r, "http://127.0.0.1:9/cb?x=1"));
        assert!(redirect_uri_allowed(&r, "http://127.0.0.1/cb?x=1"));
        assert!(redirect_uri_allowed(&r, "http://127.0.0.1:65535/cb?x=1"));
        for no_port in ["65536", "99999999999999999999", "+80", "-1", "8080a", ""] {
            let uri = format!("http://127.0.0.1:{no_port}/cb?x=1");
            assert!(!redirect_uri_allowed(&r, &uri), "{uri}");
        }
        for bad in [
            "https://app.example/cb/",
            "https://app.example:443/cb",
            "https://APP.example/cb",
            "https://app.example/cb?x",
            "https://app.example/cb#f",
            "https://app.example/%63b",
            "http://127.0.0.1:5555/callback",
            "http://[::1]:5555/callback",
            "http://127.0.0.2/cb?x=1",
            "http://localhost.evil.com/callback",
            "http://[::ffff:127.0.0.1]/cb?x=1",
            "https://localhost:1/callback",
            "http://a@localhost/callback",
            "http://localhost:5555/callback/",
            "http://localhost:5555/Callback",
            "http://127.0.0.1:8000/cb?x=2",
            "http://localhost:/callback",
            "http://localhost:99x/callback",
        ] {
            assert!(!redirect_uri_allowed(&r, bad), "{bad} was allowed");
        }
    }

    #[test]
    fn custom_schemes_match_exactly() {
        let r = reg(&["com.example.app://oauth/cb"]);
        assert!(redirect_uri_allowed(&r, "com.example.app://oauth/cb"));
        assert!(!redirect_uri_allowed(&r, "com.example.app://oauth/cb2"));
    }

    #[test]
    fn registered_uris_are_checked() {
        assert!(validate_redirect_uri("https://app.example/cb").is_ok());
        assert!(validate_redirect_uri("http://localhost/cb").is_ok());
        assert!(validate_redirect_uri("http://[::1]:8080/cb").is_ok());
        assert!(validate_redirect_uri("myapp://cb").is_ok());
        assert!(validate_redirect_uri("javascript:alert(1)").is_err());
        assert!(validate_redirect_uri("DATA:text/html,x").is_err());
        assert!(validate_redirect_uri("http://app.example/cb").is_err());
        assert!(validate_redirect_uri("https://app.example/cb#x").is_err());
        assert!(validate_redirect_uri("/relative").is_err());
        assert!(validate_redirect_uri("https://u:p@app.example/cb").is_err());
    }

    #[test]
    fn pkce_is_s256_only() {
        let good = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
        assert!(validate_code_challenge(good, Some("S256")).is_ok());
        assert!(validate_code_challenge(good, Some("plain")).is_err());
        assert!(validate_code_challenge(good, None).is_err());
        assert!(validate_code_challenge("short", Some("S256")).is_err());
        assert!(validate_code_challenge(&format!("{}=", &good[..42]), Some("S256")).is_err());
        assert!(valid_code_verifier(&"a".repeat(43)));
        assert!(!valid_code_verifier(&"a".repeat(42)));
        assert!(!valid_code_verifier(&"a".repeat(129)));
        assert!(!valid_code_verifier(&format!("{}+", "a".repeat(43))));
    }

    #[test]
    fn user_codes_ignore_case_and_dashes() {
        assert_eq!(
            normalize_user_code("bcdf-ghjk").as_deref(),
            Some("BCDFGHJK")
        );
        assert_eq!(
            normalize_user_code(" BCDF GHJK ").as_deref(),
            Some("BCDFGHJK")
        );
        assert_eq!(
            normalize_user_code("BCDF-GHJA"),
            None,
            "vowels are not in the alphabet"
        );
        assert_eq!(normalize_user_code("BCDF-GHJ"), None);
        assert_eq!(display_user_code("BCDFGHJK"), "BCDF-GHJK");
    }

    #[test]
    fn scope_lists() {
        assert_eq!(
            parse_scopes("openid  profile openid").unwrap(),
            vec![Scope::Openid, Scope::Profile]
        );
        assert!(parse_scopes("openid admin").is_err());
        assert_eq!(scope_string(&[Scope::Openid, Scope::Email]), "openid email");
    }

    #[test]
    fn publishers_need_an_audience_claims_and_scopes_for_resources() {
        let claims: BTreeMap<String, String> =
            [("repository".to_string(), "acme/app".to_string())].into();
        let scopes = [Scope::ReadEndpoints];
        assert!(check_publisher("https://sy.example", &claims, &scopes).is_ok());
        assert!(check_publisher("", &claims, &scopes).is_err());
        assert!(check_publisher("a", &BTreeMap::new(), &scopes).is_err());
        assert!(check_publisher("a", &claims, &[]).is_err());
        let err = check_publisher("a", &claims, &[Scope::Openid]).unwrap_err();
        assert!(err.contains("openid"), "{err}");
        let aud: BTreeMap<String, String> = [("aud".to_string(), "x".to_string())].into();
        assert!(check_publisher("a", &aud, &scopes).is_err());
        let empty: BTreeMap<String, String> = [("ref".to_string(), String::new())].into();
        assert!(check_publisher("a", &empty, &scopes).is_err());
    }
}
