//! Keyless sign-in from CI against a real server on loopback, with a CI issuer the test runs beside it
//! (discovery and JWKS; ES256 and RS256 keys made here). Every refusal is checked to have issued nothing.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use common::TestServer;
use reqwest::StatusCode;
use rsa::signature::{SignatureEncoding, Signer};
use rsa::traits::PublicKeyParts;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use switchyard_server::client::Client;

const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ID_TOKEN: &str = "urn:ietf:params:oauth:token-type:id_token";
const REPO: &str = "acme/app";
const MAIN: &str = "refs/heads/main";

fn b64(v: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(v)
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

fn random_id() -> String {
    switchyard_server::crypto::random_id()
}

/// rand 0.9's OS-seeded generator, for the rand_core 0.6 that `rsa` takes.
struct Rng06;

impl rsa::rand_core::RngCore for Rng06 {
    fn next_u32(&mut self) -> u32 {
        rand::RngCore::next_u32(&mut rand::rng())
    }
    fn next_u64(&mut self) -> u64 {
        rand::RngCore::next_u64(&mut rand::rng())
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        rand::RngCore::fill_bytes(&mut rand::rng(), dest)
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rsa::rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

impl rsa::rand_core::CryptoRng for Rng06 {}

/// One RSA key for the whole run: making one takes a moment.
fn rsa_key() -> rsa::RsaPrivateKey {
    static KEY: OnceLock<rsa::RsaPrivateKey> = OnceLock::new();
    KEY.get_or_init(|| rsa::RsaPrivateKey::new(&mut Rng06, 2048).expect("rsa key"))
        .clone()
}

#[derive(Clone)]
enum Private {
    Es(p256::ecdsa::SigningKey),
    Rs(Box<rsa::RsaPrivateKey>),
}

/// A signing key of the CI issuer (or of someone pretending to be it).
#[derive(Clone)]
struct Key {
    kid: String,
    private: Private,
}

impl Key {
    fn es256(kid: &str) -> Key {
        let mut bytes = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut bytes);
        let k = p256::ecdsa::SigningKey::from_bytes(&bytes.into()).expect("p256 key");
        Key {
            kid: kid.into(),
            private: Private::Es(k),
        }
    }

    fn rs256(kid: &str) -> Key {
        Key {
            kid: kid.into(),
            private: Private::Rs(Box::new(rsa_key())),
        }
    }

    fn alg(&self) -> &'static str {
        match self.private {
            Private::Es(_) => "ES256",
            Private::Rs(_) => "RS256",
        }
    }

    fn jwk(&self) -> Value {
        match &self.private {
            Private::Es(k) => {
                let p = k.verifying_key().to_encoded_point(false);
                json!({"kty": "EC", "crv": "P-256", "kid": self.kid, "use": "sig", "alg": "ES256",
                    "x": b64(p.x().expect("x")), "y": b64(p.y().expect("y"))})
            }
            Private::Rs(k) => json!({"kty": "RSA", "kid": self.kid, "use": "sig", "alg": "RS256",
                "n": b64(&k.n().to_bytes_be()), "e": b64(&k.e().to_bytes_be())}),
        }
    }

    fn sign(&self, input: &[u8]) -> Vec<u8> {
        match &self.private {
            Private::Es(k) => {
                let s: p256::ecdsa::Signature = k.sign(input);
                s.to_bytes().to_vec()
            }
            Private::Rs(k) => {
                let signer =
                    rsa::pkcs1v15::SigningKey::<rsa::sha2::Sha256>::new(k.as_ref().clone());
                signer.sign(input).to_vec()
            }
        }
    }

    /// A token with this key's `alg` and `kid`.
    fn mint(&self, claims: &Value) -> String {
        let header = json!({"alg": self.alg(), "kid": self.kid, "typ": "JWT"});
        jwt(&header, claims, |m| self.sign(m))
    }
}

fn jwt(header: &Value, claims: &Value, sign: impl FnOnce(&[u8]) -> Vec<u8>) -> String {
    let input = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    );
    let sig = sign(input.as_bytes());
    format!("{input}.{}", b64(&sig))
}

fn hmac_sha256(key: &[u8], msg: &[u8]) -> Vec<u8> {
    let mut k = if key.len() > 64 {
        Sha256::digest(key).to_vec()
    } else {
        key.to_vec()
    };
    k.resize(64, 0);
    let pad = |x: u8| k.iter().map(|b| b ^ x).collect::<Vec<u8>>();
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(msg)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .to_vec()
}

/// A CI issuer on loopback: discovery and JWKS, counting how often each is fetched.
struct Issuer {
    url: String,
    keys: Arc<Mutex<Vec<Value>>>,
    discovery_hits: Arc<AtomicUsize>,
    jwks_hits: Arc<AtomicUsize>,
}

#[derive(Clone)]
struct IssuerState {
    url: String,
    keys: Arc<Mutex<Vec<Value>>>,
    discovery_hits: Arc<AtomicUsize>,
    jwks_hits: Arc<AtomicUsize>,
}

async fn discovery(State(s): State<IssuerState>) -> Json<Value> {
    s.discovery_hits.fetch_add(1, Ordering::SeqCst);
    Json(
        json!({"issuer": s.url, "jwks_uri": format!("{}/jwks", s.url),
        "id_token_signing_alg_values_supported": ["RS256", "ES256"]}),
    )
}

async fn jwks(State(s): State<IssuerState>) -> Json<Value> {
    s.jwks_hits.fetch_add(1, Ordering::SeqCst);
    Json(json!({"keys": *s.keys.lock().expect("keys")}))
}

impl Issuer {
    async fn start(keys: &[&Key]) -> Issuer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let state = IssuerState {
            url: url.clone(),
            keys: Arc::new(Mutex::new(keys.iter().map(|k| k.jwk()).collect())),
            discovery_hits: Arc::default(),
            jwks_hits: Arc::default(),
        };
        let app = Router::new()
            .route("/.well-known/openid-configuration", get(discovery))
            .route("/jwks", get(jwks))
            .with_state(state.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Issuer {
            url,
            keys: state.keys,
            discovery_hits: state.discovery_hits,
            jwks_hits: state.jwks_hits,
        }
    }

    fn add_key(&self, key: &Key) {
        self.keys.lock().expect("keys").push(key.jwk());
    }

    fn jwks_hits(&self) -> usize {
        self.jwks_hits.load(Ordering::SeqCst)
    }

    /// A workflow's id token for `aud`, valid for five minutes, with the repository and ref given.
    fn claims(&self, aud: &str, repository: &str, git_ref: &str) -> Value {
        let t = now();
        json!({
            "iss": self.url, "aud": aud, "sub": format!("repo:{repository}:ref:{git_ref}"),
            "repository": repository, "ref": git_ref, "workflow": "deploy",
            "jti": random_id(), "iat": t, "nbf": t, "exp": t + 300,
        })
    }
}

struct Setup {
    server: TestServer,
    issuer: Issuer,
    es: Key,
    rs: Key,
    /// alice: an admin of `acme`, which trusts `acme/app` on `main` (read and write endpoints) and
    /// `acme/*` literally (read only).
    alice: Client,
}

async fn setup() -> Setup {
    setup_on(Arc::new(switchyard_server::clock::SystemClock)).await
}

/// [`setup`] with the server on `clock`.
async fn setup_on(clock: Arc<dyn switchyard_server::clock::Clock>) -> Setup {
    let (es, rs) = (Key::es256("es-1"), Key::rs256("rs-1"));
    let issuer = Issuer::start(&[&es, &rs]).await;
    // A second allowed issuer that no test token names: nothing is ever fetched from it.
    let issuers = vec![
        issuer.url.clone(),
        "https://token.actions.githubusercontent.com".to_string(),
    ];
    let server = common::spawn_with_clock(
        |c| {
            c.outbound.allow = vec!["127.0.0.0/8".into()];
            c.oauth.ci_issuers = issuers;
        },
        clock,
    )
    .await;
    let alice = server.user("alice", None).await;
    let _: Value = server.admin.admin_create_org("acme").await.expect("org");
    let _: Value = server.admin.admin_create_org("other").await.expect("org");
    let _: Value = server
        .admin
        .admin_set_member("acme", "alice", "admin")
        .await
        .expect("member");
    let _: Value = server
        .admin
        .admin_set_member("other", "alice", "admin")
        .await
        .expect("member");
    let aud = server.url.clone();
    register(
        &alice,
        "acme",
        &issuer.url,
        &aud,
        json!({"repository": REPO, "ref": MAIN}),
        json!(["read-endpoints", "write-endpoints"]),
    )
    .await;
    register(
        &alice,
        "acme",
        &issuer.url,
        &aud,
        json!({"repository": "acme/*"}),
        json!(["read-endpoints"]),
    )
    .await;
    Setup {
        server,
        issuer,
        es,
        rs,
        alice,
    }
}

async fn register(
    who: &Client,
    ns: &str,
    issuer: &str,
    aud: &str,
    claims: Value,
    scopes: Value,
) -> Value {
    who.create_trusted_publisher(
        ns,
        &json!({"issuer": issuer, "audience": aud, "claims": claims, "scopes": scopes}),
    )
    .await
    .expect("register a trusted publisher")
}

/// POSTs the token exchange, as a form or (as some CI clients do) as JSON.
async fn exchange(
    server: &str,
    token: &str,
    resource: Option<&str>,
    as_json: bool,
) -> (StatusCode, Value) {
    let mut fields = vec![
        ("grant_type", TOKEN_EXCHANGE),
        ("subject_token_type", ID_TOKEN),
        ("subject_token", token),
    ];
    if let Some(r) = resource {
        fields.push(("resource", r));
    }
    let req = reqwest::Client::new().post(format!("{server}/oauth/token"));
    let req = if as_json {
        let body: serde_json::Map<String, Value> = fields
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        req.json(&body)
    } else {
        req.header("content-type", "application/x-www-form-urlencoded")
            .body(serde_urlencoded::to_string(&fields).expect("form"))
    };
    let resp = req.send().await.expect("token request");
    let status = resp.status();
    let cache = resp.headers().get("cache-control").cloned();
    assert_eq!(
        cache.as_ref().and_then(|v| v.to_str().ok()),
        Some("no-store")
    );
    (status, resp.json().await.expect("json"))
}

/// How many CI grants and tokens the store holds.
async fn issued(server: &TestServer) -> (i64, i64) {
    let db = server.db().await;
    let grants: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM oauth_grants WHERE kind = 'ci'")
        .fetch_one(&db)
        .await
        .expect("count grants");
    let tokens: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM oauth_tokens t JOIN oauth_grants g ON g.id = t.grant_id WHERE g.kind = 'ci'",
    )
    .fetch_one(&db)
    .await
    .expect("count tokens");
    (grants, tokens)
}

/// Asserts an `invalid_grant` naming `check`, with nothing issued and the token not echoed.
async fn refused(s: &Setup, token: &str, resource: &str, check: &str) {
    let before = issued(&s.server).await;
    let (status, body) = exchange(&s.server.url, token, Some(resource), false).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{check}: {body}");
    assert_eq!(body["error"], "invalid_grant", "{check}: {body}");
    let why = body["error_description"].as_str().expect("description");
    assert!(why.contains(check), "expected {check:?} in {why:?}");
    for part in token.split('.').filter(|p| p.len() > 8) {
        assert!(
            !body.to_string().contains(part),
            "the token is echoed: {body}"
        );
    }
    assert!(body.get("access_token").is_none());
    assert_eq!(
        issued(&s.server).await,
        before,
        "{check}: something was issued"
    );
}

#[tokio::test]
async fn a_workflow_signs_in_to_its_namespace_only() {
    let s = setup().await;
    let claims = s.issuer.claims(&s.server.url, REPO, MAIN);
    let (status, tok) = exchange(&s.server.url, &s.es.mint(&claims), Some("acme"), false).await;
    assert_eq!(status, StatusCode::OK, "{tok}");
    assert_eq!(tok["token_type"], "bearer");
    assert_eq!(
        tok["issued_token_type"],
        "urn:ietf:params:oauth:token-type:access_token"
    );
    assert_eq!(tok["scope"], "read-endpoints write-endpoints");
    assert!(tok.get("refresh_token").is_none() && tok.get("id_token").is_none());
    let ttl = tok["expires_in"].as_i64().expect("expires_in");
    assert!(ttl > 200 && ttl <= 300, "never past the id token: {ttl}");
    assert_eq!(issued(&s.server).await, (1, 1));

    let ci = s
        .server
        .anonymous()
        .with_token(tok["access_token"].as_str().map(String::from));
    let listed: Value = ci.list_endpoints("acme").await.expect("list in acme");
    assert!(listed["items"].is_array(), "{listed}");
    let created: Value = ci
        .create_endpoint("acme", &common::endpoint_body("from-ci"))
        .await
        .expect("write-endpoints lets it deploy");
    assert_eq!(created["name"], "from-ci");
    for elsewhere in ["alice", "other"] {
        let e = ci.list_endpoints::<Value>(elsewhere).await.unwrap_err();
        assert_eq!(e.status(), Some(StatusCode::FORBIDDEN), "{elsewhere}");
    }
    let me: Value = ci.whoami().await.expect("whoami");
    assert_eq!(me["name"], "alice");
    assert_eq!(me["auth"]["type"], "oauth");
    assert_eq!(me["auth"]["app"]["grant"], "ci");
    assert_eq!(
        me["auth"]["accessToken"]["scopes"],
        json!(["read-endpoints", "write-endpoints"])
    );
    // Without read-memberships the token's organizations are not listed (it still reaches acme).
    assert_eq!(me["orgs"], json!([]));

    // The literal `acme/*` publisher matches only that string: read-only there.
    let literal = s.issuer.claims(&s.server.url, "acme/*", "refs/heads/dev");
    let (status, tok) = exchange(&s.server.url, &s.rs.mint(&literal), Some("acme"), true).await;
    assert_eq!(
        (status, tok["scope"].as_str()),
        (StatusCode::OK, Some("read-endpoints")),
        "{tok}"
    );
    let e = deploy_in_acme(&s, &tok).await.unwrap_err();
    assert_eq!(
        e.status(),
        Some(StatusCode::FORBIDDEN),
        "read-endpoints cannot deploy"
    );

    let log: Vec<Value> = s.alice.audit_log("acme").await.expect("audit log");
    let signins = log
        .iter()
        .filter(|e| e["action"] == "oauth.ci_sign_in")
        .count();
    assert_eq!(signins, 2, "{log:?}");
}

#[tokio::test]
async fn a_workflow_may_ask_for_less_and_sent_client_credentials_must_be_right() {
    let s = setup().await;
    let token = s.es.mint(&s.issuer.claims(&s.server.url, REPO, MAIN));
    let post = |scope: &str, basic: bool| {
        let fields = [
            ("grant_type", TOKEN_EXCHANGE),
            ("subject_token_type", ID_TOKEN),
            ("subject_token", token.as_str()),
            ("resource", "acme"),
            ("scope", scope),
        ];
        let mut req = reqwest::Client::new()
            .post(format!("{}/oauth/token", s.server.url))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(serde_urlencoded::to_string(fields).expect("form"));
        if basic {
            req = req.basic_auth("app_nobody", Some("sys_wrong"));
        }
        async move {
            let resp = req.send().await.expect("token request");
            (resp.status(), resp.json::<Value>().await.expect("json"))
        }
    };
    let (status, body) = post("read-endpoints", true).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["error"], "invalid_client");
    let (status, body) = post("read-endpoints webhooks", false).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"], "invalid_scope");
    assert_eq!(issued(&s.server).await, (0, 0));
    // Neither spent the id token: asked for less, it signs in with that.
    let (status, tok) = post("read-endpoints", false).await;
    assert_eq!(status, StatusCode::OK, "{tok}");
    assert_eq!(tok["scope"], "read-endpoints");
    let e = deploy_in_acme(&s, &tok).await.unwrap_err();
    assert_eq!(e.status(), Some(StatusCode::FORBIDDEN));
}

/// An attempt to deploy in `acme` with the access token of a token response.
async fn deploy_in_acme(s: &Setup, tok: &Value) -> switchyard_server::client::ClientResult<Value> {
    let ci = s
        .server
        .anonymous()
        .with_token(tok["access_token"].as_str().map(String::from));
    ci.create_endpoint::<Value>("acme", &common::endpoint_body("nope"))
        .await
}

#[tokio::test]
async fn a_personal_namespace_gets_a_personal_token_by_json_body() {
    let s = setup().await;
    register(
        &s.alice,
        "alice",
        &s.issuer.url,
        "switchyard",
        json!({"repository": "alice/tools"}),
        json!(["read-endpoints"]),
    )
    .await;
    let claims = s.issuer.claims("switchyard", "alice/tools", MAIN);
    let (status, tok) = exchange(&s.server.url, &s.rs.mint(&claims), Some("alice"), true).await;
    assert_eq!(status, StatusCode::OK, "{tok}");
    let ci = s
        .server
        .anonymous()
        .with_token(tok["access_token"].as_str().map(String::from));
    let _: Value = ci.list_endpoints("alice").await.expect("her own namespace");
    let e = ci.list_endpoints::<Value>("acme").await.unwrap_err();
    assert_eq!(
        e.status(),
        Some(StatusCode::FORBIDDEN),
        "not her organizations"
    );
    // Another namespace's name does not borrow alice's publisher.
    let claims = s.issuer.claims("switchyard", "alice/tools", MAIN);
    refused(&s, &s.rs.mint(&claims), "acme", "audience").await;
}

#[tokio::test]
async fn tokens_that_fail_a_check_get_nothing() {
    let s = setup().await;
    let aud = s.server.url.clone();
    let good = || s.issuer.claims(&aud, REPO, MAIN);
    let with = |k: &str, v: Value| {
        let mut c = good();
        c[k] = v;
        c
    };

    // Issuer: a key the server would accept, but the token names another issuer.
    refused(
        &s,
        &s.es.mint(&with("iss", json!("https://ci.evil.example"))),
        "acme",
        "issuer (iss)",
    )
    .await;
    refused(
        &s,
        &s.es.mint(&with("aud", json!("https://elsewhere.example"))),
        "acme",
        "audience (aud)",
    )
    .await;
    refused(
        &s,
        &s.es.mint(&with(
            "aud",
            json!([aud.clone(), "https://elsewhere.example"]),
        )),
        "acme",
        "audience (aud)",
    )
    .await;
    let t = now();
    refused(
        &s,
        &s.es.mint(&with("exp", json!(t - 120))),
        "acme",
        "expired (exp)",
    )
    .await;
    refused(
        &s,
        &s.es.mint(&with("nbf", json!(t + 600))),
        "acme",
        "not valid yet (nbf)",
    )
    .await;
    refused(
        &s,
        &s.es.mint(&with("iat", json!(t + 600))),
        "acme",
        "(iat)",
    )
    .await;
    refused(
        &s,
        &s.es.mint(&with("ref", json!("refs/heads/dev"))),
        "acme",
        "claims",
    )
    .await;
    refused(
        &s,
        &s.es.mint(&with("repository", json!("acme/app-evil"))),
        "acme",
        "claims",
    )
    .await;
    refused(
        &s,
        &s.es.mint(&with("repository", json!("acme/ap"))),
        "acme",
        "claims",
    )
    .await;
    refused(
        &s,
        &s.es.mint(&with("repository", json!("ACME/APP"))),
        "acme",
        "claims",
    )
    .await;
    let mut no_jti = good();
    no_jti.as_object_mut().map(|o| o.remove("jti"));
    refused(&s, &s.es.mint(&no_jti), "acme", "(jti)").await;
    refused(&s, &s.es.mint(&good()), "nobody", "no trusted publisher").await;
    refused(&s, &s.es.mint(&good()), "other", "no trusted publisher").await;

    // Algorithms: none, and HS256 keyed with the issuer's public key.
    let none = jwt(&json!({"alg": "none", "kid": "es-1"}), &good(), |_| {
        Vec::new()
    });
    refused(&s, &none, "acme", "algorithm (alg)").await;
    let public = s.rs.jwk().to_string();
    let hs = jwt(&json!({"alg": "HS256", "kid": "rs-1"}), &good(), |m| {
        hmac_sha256(public.as_bytes(), m)
    });
    refused(&s, &hs, "acme", "algorithm (alg)").await;
    let n = s.rs.jwk()["n"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_default();
    let hs = jwt(&json!({"alg": "HS256", "kid": "rs-1"}), &good(), |m| {
        hmac_sha256(n.as_bytes(), m)
    });
    refused(&s, &hs, "acme", "algorithm (alg)").await;
    // An ES256 header over an RS256 key's kid, and a signature over other claims.
    let crossed = jwt(&json!({"alg": "ES256", "kid": "rs-1"}), &good(), |m| {
        s.es.sign(m)
    });
    refused(&s, &crossed, "acme", "key id (kid)").await;
    let real = s.es.mint(&good());
    let other = s.es.mint(&with("repository", json!("acme/*")));
    let forged = format!(
        "{}.{}",
        real.rsplit_once('.').unwrap().0,
        other.rsplit_once('.').unwrap().1
    );
    refused(&s, &forged, "acme", "signature").await;

    // Keys named in the header are never fetched nor used: jku/x5u to an attacker's JWKS, an
    // embedded jwk, all with the issuer's kid.
    let attacker = Key::es256("es-1");
    let evil = Issuer::start(&[&attacker]).await;
    let header = json!({"alg": "ES256", "kid": "es-1", "jku": format!("{}/jwks", evil.url),
        "x5u": format!("{}/jwks", evil.url), "jwk": attacker.jwk()});
    let t = jwt(&header, &good(), |m| attacker.sign(m));
    refused(&s, &t, "acme", "signature").await;
    assert_eq!(evil.jwks_hits(), 0, "the jku was fetched");

    // Missing parameters are invalid requests.
    let (status, e) = exchange(&s.server.url, &s.es.mint(&good()), None, false).await;
    assert_eq!(
        (status, e["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_request")),
        "{e}"
    );
    assert!(
        e["error_description"]
            .as_str()
            .unwrap_or("")
            .contains("resource"),
        "{e}"
    );
    let (status, e) = exchange(&s.server.url, "", Some("acme"), false).await;
    assert_eq!(
        (status, e["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_request")),
        "{e}"
    );
    refused(&s, "not-a-jwt", "acme", "not a signed JWT").await;
    assert_eq!(issued(&s.server).await, (0, 0));

    // A replay of a token that worked: refused until it expires, under any signature.
    let claims = good();
    let once = s.es.mint(&claims);
    let (status, tok) = exchange(&s.server.url, &once, Some("acme"), false).await;
    assert_eq!(status, StatusCode::OK, "{tok}");
    refused(&s, &once, "acme", "already used (its jti").await;
    refused(&s, &s.rs.mint(&claims), "acme", "already used").await;
}

#[tokio::test]
async fn an_unknown_kid_refetches_the_keys_at_most_once_a_minute() {
    let clock = switchyard_server::clock::ManualClock::new(chrono::Utc::now());
    let s = setup_on(Arc::new(clock.clone())).await;
    let claims = || s.issuer.claims(&s.server.url, REPO, MAIN);
    let (status, tok) = exchange(&s.server.url, &s.es.mint(&claims()), Some("acme"), false).await;
    assert_eq!(status, StatusCode::OK, "{tok}");
    assert_eq!(
        (
            s.issuer.discovery_hits.load(Ordering::SeqCst),
            s.issuer.jwks_hits()
        ),
        (1, 1)
    );
    // A rotated-in key is found by one refetch.
    let rotated = Key::es256("es-2");
    s.issuer.add_key(&rotated);
    let (status, tok) =
        exchange(&s.server.url, &rotated.mint(&claims()), Some("acme"), false).await;
    assert_eq!(status, StatusCode::OK, "{tok}");
    assert_eq!(s.issuer.jwks_hits(), 2);
    // Made-up kids within the minute fetch nothing more.
    for kid in ["nope-1", "nope-2", "nope-3"] {
        refused(&s, &Key::es256(kid).mint(&claims()), "acme", "key id (kid)").await;
    }
    assert_eq!(s.issuer.jwks_hits(), 2);
    // Past the minute (on the server's clock), the next unknown kid refetches, once; the key set itself
    // is still fresh, so discovery is not asked again.
    clock.advance(chrono::Duration::seconds(61));
    let later = || {
        let t = switchyard_server::clock::Clock::now(&clock).timestamp();
        let mut c = claims();
        c["iat"] = json!(t);
        c["nbf"] = json!(t);
        c["exp"] = json!(t + 300);
        c
    };
    refused(
        &s,
        &Key::es256("nope-4").mint(&later()),
        "acme",
        "key id (kid)",
    )
    .await;
    assert_eq!(
        s.issuer.jwks_hits(),
        3,
        "one refetch once the minute is over"
    );
    refused(
        &s,
        &Key::es256("nope-5").mint(&later()),
        "acme",
        "key id (kid)",
    )
    .await;
    assert_eq!(s.issuer.jwks_hits(), 3, "and then none for another minute");
    assert_eq!(s.issuer.discovery_hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_first_unknown_kid_refetches_once_and_is_still_refused() {
    let s = setup().await;
    let claims = || s.issuer.claims(&s.server.url, REPO, MAIN);
    let (status, _) = exchange(&s.server.url, &s.es.mint(&claims()), Some("acme"), false).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(s.issuer.jwks_hits(), 1);
    refused(
        &s,
        &Key::es256("stranger").mint(&claims()),
        "acme",
        "key id (kid)",
    )
    .await;
    assert_eq!(s.issuer.jwks_hits(), 2, "one refetch for the unknown kid");
    refused(
        &s,
        &Key::es256("stranger-2").mint(&claims()),
        "acme",
        "key id (kid)",
    )
    .await;
    assert_eq!(
        s.issuer.jwks_hits(),
        2,
        "no second refetch within the minute"
    );
}

#[tokio::test]
async fn only_namespace_admins_register_publishers_of_allowed_issuers() {
    let s = setup().await;
    let body = |issuer: &str| json!({"issuer": issuer, "audience": "a", "claims": {"repository": REPO}, "scopes": ["read-endpoints"]});
    let _: Value = s
        .server
        .admin
        .admin_create_user(&json!({"name": "bob"}))
        .await
        .expect("bob");
    let _: Value = s
        .server
        .admin
        .admin_set_member("acme", "bob", "write")
        .await
        .expect("member");
    let bob = s.server.token_for("bob", None).await;
    let e = bob
        .create_trusted_publisher::<Value>("acme", &body(&s.issuer.url))
        .await
        .unwrap_err();
    assert_eq!(
        e.status(),
        Some(StatusCode::FORBIDDEN),
        "a writer is not an admin"
    );
    let e = bob.trusted_publishers::<Value>("acme").await.unwrap_err();
    assert_eq!(e.status(), Some(StatusCode::FORBIDDEN));
    let e = bob
        .create_trusted_publisher::<Value>("alice", &body(&s.issuer.url))
        .await
        .unwrap_err();
    assert_eq!(
        e.status(),
        Some(StatusCode::FORBIDDEN),
        "someone else's namespace"
    );
    let e = s
        .server
        .admin
        .create_trusted_publisher::<Value>("acme", &body(&s.issuer.url))
        .await
        .unwrap_err();
    assert_eq!(
        e.status(),
        Some(StatusCode::FORBIDDEN),
        "an instance admin is not acme's admin"
    );
    let scoped = s
        .server
        .token_for("alice", Some(&["write-endpoints"]))
        .await;
    let e = scoped
        .create_trusted_publisher::<Value>("acme", &body(&s.issuer.url))
        .await
        .unwrap_err();
    assert_eq!(
        e.status(),
        Some(StatusCode::FORBIDDEN),
        "a restricted token"
    );

    let e = s
        .alice
        .create_trusted_publisher::<Value>("acme", &body("https://ci.evil.example"))
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(StatusCode::BAD_REQUEST));
    assert!(e.to_string().contains("oauth.ci_issuers"), "{e}");
    let mut openid = body(&s.issuer.url);
    openid["scopes"] = json!(["openid"]);
    let e = s
        .alice
        .create_trusted_publisher::<Value>("acme", &openid)
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(StatusCode::BAD_REQUEST));
    let mut no_claims = body(&s.issuer.url);
    no_claims["claims"] = json!({});
    let e = s
        .alice
        .create_trusted_publisher::<Value>("acme", &no_claims)
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(StatusCode::BAD_REQUEST));

    let listed: Vec<Value> = s.alice.trusted_publishers("acme").await.expect("list");
    assert_eq!(listed.len(), 2);
    let main = listed
        .iter()
        .find(|p| p["claims"].get("ref").is_some())
        .expect("the main-branch publisher");
    assert_eq!(main["claims"], json!({"ref": MAIN, "repository": REPO}));
    assert_eq!(
        (main["createdBy"].as_str(), main["namespace"].as_str()),
        (Some("alice"), Some("acme"))
    );
    assert_eq!(main["issuer"], s.issuer.url);
    // Deleting a publisher ends its sign-ins; a stranger cannot delete.
    let id = main["id"].as_str().expect("id");
    let e = bob.delete_trusted_publisher("acme", id).await.unwrap_err();
    assert_eq!(e.status(), Some(StatusCode::FORBIDDEN));
    s.alice
        .delete_trusted_publisher("acme", id)
        .await
        .expect("delete");
    let claims = s.issuer.claims(&s.server.url, REPO, MAIN);
    refused(&s, &s.es.mint(&claims), "acme", "claims").await;
    // A creator who is no longer an admin of the organization can no longer lend it to a workflow.
    let _: Value = s
        .server
        .admin
        .admin_set_member("acme", "alice", "read")
        .await
        .expect("demote");
    let claims = s.issuer.claims(&s.server.url, "acme/*", MAIN);
    refused(&s, &s.es.mint(&claims), "acme", "can no longer act").await;
}
