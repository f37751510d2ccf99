//! Client metadata documents against a real server on loopback: the documents are served over HTTPS
//! by a local site with the test CA (`tests/data/outbound/`), reached as `cimd.test`, which the server
//! under test maps to 127.0.0.1 with `[outbound] resolve`, trusts with `[outbound] ca_file` and may
//! reach because `[outbound] allow` lets loopback through. The same client ids are refused by a
//! server without that allow list. Time is the server's injected clock, moved by the tests.

use crate::common;

use common::browser::{field, http, location, param, Browser};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use reqwest::StatusCode;
use serde_json::{json, Value};
use switchyard_server::clock::ManualClock;
use switchyard_server::config::OutboundConfig;
use switchyard_server::{Application, Config};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
const CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
const REDIRECT: &str = "http://127.0.0.1/callback";
const PASSWORD: &str = "correct horse battery";
const DOC: &str = "/.well-known/oauth-cimd";

fn data(file: &str) -> String {
    format!("{}/tests/data/outbound/{file}", env!("CARGO_MANIFEST_DIR"))
}

// ---------------------------------------------------------------------------------------------
// The client's site: HTTPS with the test CA, answers set per path, requests counted.

/// What the site answers on a path.
#[derive(Clone)]
enum Reply {
    Doc {
        status: u16,
        content_type: &'static str,
        cache_control: Option<&'static str>,
        body: String,
        /// Waits this long before answering (so concurrent requests overlap).
        delay: Duration,
    },
    /// These bytes exactly (a redirect, a lying `Content-Length`).
    Raw(String),
    /// A chunked body that never ends.
    Endless,
    /// Reads the request and never answers.
    Silent,
}

fn reply(body: &Value) -> Reply {
    Reply::Doc {
        status: 200,
        content_type: "application/json",
        cache_control: None,
        body: body.to_string(),
        delay: Duration::ZERO,
    }
}

impl Reply {
    fn status(mut self, code: u16) -> Reply {
        if let Reply::Doc { status, .. } = &mut self {
            *status = code;
        }
        self
    }

    fn content_type(mut self, ct: &'static str) -> Reply {
        if let Reply::Doc { content_type, .. } = &mut self {
            *content_type = ct;
        }
        self
    }

    fn cache(mut self, cc: &'static str) -> Reply {
        if let Reply::Doc { cache_control, .. } = &mut self {
            *cache_control = Some(cc);
        }
        self
    }

    fn delayed(mut self, by: Duration) -> Reply {
        if let Reply::Doc { delay, .. } = &mut self {
            *delay = by;
        }
        self
    }
}

struct Site {
    port: u16,
    routes: Mutex<HashMap<String, Reply>>,
    hits: Mutex<Vec<String>>,
}

impl Site {
    async fn start() -> Arc<Site> {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let site = Arc::new(Site {
            port: listener.local_addr().expect("addr").port(),
            routes: Mutex::new(HashMap::new()),
            hits: Mutex::new(Vec::new()),
        });
        let acceptor = tls_acceptor();
        let serving = site.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, site) = (acceptor.clone(), serving.clone());
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(tcp).await {
                        site.serve(tls).await;
                    }
                });
            }
        });
        site
    }

    fn url(&self, path: &str) -> String {
        format!("https://cimd.test:{}{path}", self.port)
    }

    fn set(&self, path: &str, reply: Reply) {
        self.routes.lock().unwrap().insert(path.to_string(), reply);
    }

    /// Requests for `path` so far.
    fn hits(&self, path: &str) -> usize {
        let hits = self.hits.lock().unwrap();
        hits.iter()
            .filter(|h| h.starts_with(&format!("GET {path} ")))
            .count()
    }

    fn total(&self) -> usize {
        self.hits.lock().unwrap().len()
    }

    async fn serve<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(&self, mut s: S) {
        let Some(head) = read_head(&mut s).await else {
            return;
        };
        self.hits.lock().unwrap().push(head.clone());
        let path = head.split(' ').nth(1).unwrap_or("").to_string();
        let reply = self.routes.lock().unwrap().get(&path).cloned();
        let reply = reply.unwrap_or(reply_text(404, "text/plain", "no such document"));
        answer(&mut s, reply).await;
    }
}

fn reply_text(status: u16, content_type: &'static str, body: &str) -> Reply {
    Reply::Doc {
        status,
        content_type,
        cache_control: None,
        body: body.to_string(),
        delay: Duration::ZERO,
    }
}

fn tls_acceptor() -> tokio_rustls::TlsAcceptor {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer> = CertificateDer::pem_file_iter(data("server.pem"))
        .expect("server.pem")
        .collect::<Result<_, _>>()
        .expect("certificates");
    let key = PrivateKeyDer::from_pem_file(data("server.key")).expect("server.key");
    let tls = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .expect("TLS config");
    tokio_rustls::TlsAcceptor::from(Arc::new(tls))
}

async fn read_head<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> Option<String> {
    let mut request = Vec::new();
    let mut buf = [0u8; 2048];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    Some(String::from_utf8_lossy(&request).into_owned())
}

async fn answer<S: tokio::io::AsyncWrite + Unpin>(s: &mut S, reply: Reply) {
    match reply {
        Reply::Doc {
            status,
            content_type,
            cache_control,
            body,
            delay,
        } => {
            tokio::time::sleep(delay).await;
            let cache = cache_control.map_or(String::new(), |c| format!("Cache-Control: {c}\r\n"));
            let text = format!(
                "HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\n{cache}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(text.as_bytes()).await;
            let _ = s.shutdown().await;
        }
        Reply::Raw(text) => {
            let _ = s.write_all(text.as_bytes()).await;
            let _ = s.shutdown().await;
        }
        Reply::Endless => {
            let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
            if s.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let chunk = format!("400\r\n{}\r\n", " ".repeat(0x400));
            while s.write_all(chunk.as_bytes()).await.is_ok() {}
        }
        Reply::Silent => std::future::pending().await,
    }
}

/// A document for `url` with these redirect URIs.
fn document(url: &str, name: &str) -> Value {
    json!({
        "client_id": url,
        "client_name": name,
        "client_uri": "https://bank.example/",
        "logo_uri": "https://bank.example/logo.png",
        "redirect_uris": [REDIRECT, "https://notebook.example/cb"],
        "token_endpoint_auth_method": "none",
    })
}

// ---------------------------------------------------------------------------------------------
// The server under test.

struct Env {
    url: String,
    clock: ManualClock,
    site: Arc<Site>,
    _dir: tempfile::TempDir,
}

/// What the tests give `[outbound]`: `cimd.test` is 127.0.0.1, the test CA is trusted, and loopback
/// is let through only when `allow_loopback`.
fn outbound(allow_loopback: bool) -> OutboundConfig {
    let mut o = OutboundConfig {
        ca_file: Some(data("ca.pem").into()),
        ..OutboundConfig::default()
    };
    o.resolve.insert("cimd.test".into(), "127.0.0.1".into());
    if allow_loopback {
        o.allow = vec!["127.0.0.0/8".into()];
    }
    o
}

/// A server with `outbound` and user `alice` (password set), and a site for documents.
async fn spawn(outbound: OutboundConfig) -> Env {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.store.data_dir = Some(dir.path().to_path_buf());
    config.store.url = common::test_store_url().await;
    config.server.listen = "127.0.0.1:0".parse().expect("addr");
    config.outbound = outbound;
    let clock = ManualClock::new(chrono::Utc::now());
    let app = Application::build_with_clock(&config, Arc::new(clock.clone()))
        .await
        .expect("build");
    let url = format!("http://{}", app.local_addr());
    tokio::spawn(app.run(std::future::pending()));
    let token = std::fs::read_to_string(dir.path().join("admin-token")).expect("admin token");
    let admin = switchyard_server::client::Client::new(&url, Some(token.trim().to_string()));
    let _: Value = admin
        .admin_create_user(
            &json!({"name": "alice", "email": "alice@example.com", "password": PASSWORD}),
        )
        .await
        .expect("user");
    Env {
        url,
        clock,
        site: Site::start().await,
        _dir: dir,
    }
}

async fn env() -> Env {
    spawn(outbound(true)).await
}

fn authorize_path(client_id: &str, redirect_uri: &str, extra: &[(&str, &str)]) -> String {
    let mut params = vec![
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", redirect_uri),
        ("scope", "openid profile read-endpoints"),
        ("state", "xyz"),
        ("nonce", "n-0S6"),
        ("code_challenge", CHALLENGE),
        ("code_challenge_method", "S256"),
    ];
    params.extend_from_slice(extra);
    format!(
        "/oauth/authorize?{}",
        serde_urlencoded::to_string(&params).expect("query")
    )
}

/// The sign-in page an authorization request for `client_id` shows.
async fn sign_in_page(env: &Env, client_id: &str) -> String {
    let resp = Browser::new(&env.url)
        .get(&authorize_path(client_id, REDIRECT, &[]))
        .await;
    let status = resp.status();
    let page = resp.text().await.expect("page");
    assert_eq!(status, StatusCode::OK, "{page}");
    page
}

/// An authorization request that must end on an error page, never a redirect; its text.
async fn error_page(env: &Env, client_id: &str, redirect_uri: &str) -> String {
    let resp = Browser::new(&env.url)
        .get(&authorize_path(client_id, redirect_uri, &[]))
        .await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{client_id}");
    assert!(resp.headers().get("location").is_none(), "{client_id}");
    let ct = resp.headers()["content-type"]
        .to_str()
        .expect("ct")
        .to_string();
    assert!(ct.starts_with("text/html"), "{ct}");
    resp.text().await.expect("page")
}

async fn token(env: &Env, form: &[(&str, &str)]) -> (StatusCode, Value) {
    let resp = http()
        .post(format!("{}/oauth/token", env.url))
        .form(form)
        .send()
        .await
        .expect("token request");
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

// ---------------------------------------------------------------------------------------------
// The tests.

#[tokio::test]
async fn discovery_says_documents_are_supported() {
    let env = env().await;
    let disc: Value = http()
        .get(format!(
            "{}/.well-known/oauth-authorization-server",
            env.url
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(disc["client_id_metadata_document_supported"], true);
}

#[tokio::test]
async fn client_ids_of_a_bad_form_are_refused_without_a_fetch() {
    let env = env().await;
    let site = &env.site;
    let good = site.url(DOC);
    site.set(DOC, reply(&document(&good, "Notebook")));
    let origin = site.url("");
    for (bad, why) in [
        (origin.replace("https://", "http://") + DOC, "no app"),
        (origin.clone(), "path"),
        (format!("{origin}/"), "path"),
        (format!("{origin}/./oauth-cimd"), ". or .."),
        (format!("{origin}/docs/../oauth-cimd"), ". or .."),
        (format!("{origin}/%2e%2e/oauth-cimd"), ". or .."),
        (format!("{good}#frag"), "fragment"),
        (
            origin.replace("https://", "https://user@") + DOC,
            "user information",
        ),
        (
            origin.replace("https://", "https://u:p@") + DOC,
            "user information",
        ),
        (format!("{good}?v=1"), "query"),
        (format!("{good}\\x"), "contains"),
        (format!("{origin}/{}", "a".repeat(600)), "longer"),
    ] {
        let page = error_page(&env, &bad, REDIRECT).await;
        assert!(page.contains(why), "{bad}: {page}");
    }
    assert_eq!(site.total(), 0, "nothing was fetched");
    // The good one is.
    assert!(sign_in_page(&env, &good).await.contains("Notebook"));
    assert_eq!(site.hits(DOC), 1);
}

#[tokio::test]
async fn without_the_loopback_allowance_the_same_client_id_is_refused() {
    let env = spawn(outbound(false)).await;
    let good = env.site.url(DOC);
    env.site.set(DOC, reply(&document(&good, "Notebook")));
    let page = error_page(&env, &good, REDIRECT).await;
    assert!(page.contains("loopback"), "{page}");
    for special in [
        "https://127.0.0.1/doc",
        "https://[::1]/doc",
        "https://10.0.0.1/doc",
        "https://172.16.0.1/doc",
        "https://192.168.1.1/doc",
        "https://169.254.169.254/doc",
        "https://100.64.0.1/doc",
        "https://0.0.0.0/doc",
        "https://[::ffff:127.0.0.1]/doc",
        "https://[fc00::1]/doc",
        "https://[fe80::1]/doc",
        "https://2130706433/doc",
        "https://0177.0.0.1/doc",
        "https://localhost/doc",
    ] {
        let page = error_page(&env, special, REDIRECT).await;
        assert!(page.contains("not fetched from"), "{special}: {page}");
    }
    assert_eq!(env.site.total(), 0, "the site was never reached");
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let env = env().await;
    let target = env.site.url(DOC);
    env.site.set(DOC, reply(&document(&target, "Notebook")));
    for (status, path) in [(301, "/r301"), (302, "/r302"), (307, "/r307")] {
        env.site.set(
            path,
            Reply::Raw(format!(
                "HTTP/1.1 {status} Moved\r\nLocation: {target}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )),
        );
        let page = error_page(&env, &env.site.url(path), REDIRECT).await;
        assert!(page.contains("redirect"), "{page}");
        assert_eq!(env.site.hits(path), 1);
    }
    assert_eq!(
        env.site.hits(DOC),
        0,
        "the redirect's target was never fetched"
    );
}

#[tokio::test]
async fn failures_are_not_cached_and_a_later_success_works() {
    let env = env().await;
    let url = env.site.url(DOC);
    let doc = reply(&document(&url, "Notebook")).cache("max-age=3600");
    env.site.set(DOC, reply_text(404, "text/plain", "not here"));
    assert!(error_page(&env, &url, REDIRECT)
        .await
        .contains("answered 404"));
    env.site.set(
        DOC,
        reply_text(500, "text/plain", "oops").cache("max-age=3600"),
    );
    assert!(error_page(&env, &url, REDIRECT)
        .await
        .contains("answered 500"));
    env.site.set(DOC, doc.clone().status(201));
    assert!(
        error_page(&env, &url, REDIRECT)
            .await
            .contains("answered 201"),
        "only 200 is success"
    );
    env.site.set(DOC, doc);
    assert!(sign_in_page(&env, &url).await.contains("Notebook"));
    assert!(sign_in_page(&env, &url).await.contains("Notebook"));
    assert_eq!(
        env.site.hits(DOC),
        4,
        "every failure fetched again; the success was cached"
    );
}

#[tokio::test]
async fn oversized_endless_and_slow_documents_fail() {
    let env = env().await;
    let big_url = env.site.url("/big");
    let mut big = document(&big_url, "Notebook");
    big["padding"] = json!("x".repeat(5200));
    env.site.set("/big", reply(&big));
    let page = error_page(&env, &big_url, REDIRECT).await;
    assert!(page.contains("larger than 5120 bytes"), "{page}");

    // A lying Content-Length, then more body than the cap.
    let lying = env.site.url("/lying");
    env.site.set(
        "/lying",
        Reply::Raw(format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{}",
            " ".repeat(6000)
        )),
    );
    assert!(error_page(&env, &lying, REDIRECT)
        .await
        .contains("larger than"));

    env.site.set("/endless", Reply::Endless);
    let page = error_page(&env, &env.site.url("/endless"), REDIRECT).await;
    assert!(page.contains("larger than 5120 bytes"), "{page}");

    env.site.set("/slow", Reply::Silent);
    let page = error_page(&env, &env.site.url("/slow"), REDIRECT).await;
    assert!(page.contains("did not answer in time"), "{page}");
}

#[tokio::test]
async fn documents_that_are_not_json_objects_of_the_right_type_fail() {
    let env = env().await;
    let site = &env.site;
    let cases: Vec<(&str, Reply, &str)> = vec![
        (
            "/html",
            reply_text(200, "application/json", "<html>hi</html>"),
            "not JSON",
        ),
        (
            "/array",
            reply(&json!([{"client_id": "x"}])),
            "not a JSON object",
        ),
        (
            "/text",
            reply(&document(&site.url("/text"), "N")).content_type("text/html"),
            "content type",
        ),
        (
            "/plain",
            reply(&document(&site.url("/plain"), "N")).content_type("text/plain; charset=utf-8"),
            "content type",
        ),
    ];
    for (path, r, why) in cases {
        site.set(path, r);
        let page = error_page(&env, &site.url(path), REDIRECT).await;
        assert!(page.contains(why), "{path}: {page}");
    }
    // application/*+json is JSON.
    let url = site.url("/vendor");
    site.set(
        "/vendor",
        reply(&document(&url, "Vendor")).content_type("application/oauth-client+json"),
    );
    assert!(sign_in_page(&env, &url).await.contains("Vendor"));
    // The request asked for JSON.
    let hits = site.hits.lock().unwrap().clone();
    assert!(hits
        .iter()
        .all(|h| h.to_lowercase().contains("accept: application/json")));
}

#[tokio::test]
async fn a_document_must_name_itself_exactly_and_have_no_secret() {
    let env = env().await;
    let site = &env.site;
    let url = site.url("/self");
    let port = site.port;
    let mut cases: Vec<(Value, &str)> = Vec::new();
    for other in [
        format!("{url}/"),
        url.replace("cimd.test", "CIMD.test"),
        url.replace("/self", "/SELF"),
        url.replace(&format!(":{port}"), ""),
        url.replace(&format!(":{port}"), ":443"),
    ] {
        let mut d = document(&url, "N");
        d["client_id"] = json!(other);
        cases.push((d, "its client_id is"));
    }
    let mut secret = document(&url, "N");
    secret["client_secret"] = json!("s3cret");
    cases.push((secret, "client_secret"));
    let mut basic = document(&url, "N");
    basic["token_endpoint_auth_method"] = json!("client_secret_basic");
    cases.push((basic, "client_secret_basic"));
    let mut no_name = document(&url, "N");
    no_name.as_object_mut().unwrap().remove("client_name");
    cases.push((no_name, "client_name"));
    for (doc, why) in cases {
        site.set("/self", reply(&doc));
        let page = error_page(&env, &url, REDIRECT).await;
        assert!(page.contains(why), "{doc}: {page}");
    }
    assert_eq!(site.hits("/self"), 8, "invalid documents are not cached");
}

#[tokio::test]
async fn redirect_uris_come_from_the_document_with_the_loopback_port_rule() {
    let env = env().await;
    let url = env.site.url(DOC);
    env.site.set(DOC, reply(&document(&url, "Notebook")));
    for bad in [
        "https://evil.example/cb",
        "https://notebook.example/cb/",
        "http://127.0.0.1:5555/callback/",
        "http://localhost:5555/callback",
        "http://127.0.0.2/callback",
        "https://notebook.example:443/cb",
    ] {
        let page = error_page(&env, &url, bad).await;
        assert!(page.contains("redirect URI"), "{bad}: {page}");
    }
    let mut b = Browser::new(&env.url);
    for good in [
        REDIRECT,
        "http://127.0.0.1:5555/callback",
        "https://notebook.example/cb",
    ] {
        let resp = b.get(&authorize_path(&url, good, &[])).await;
        assert_eq!(resp.status(), StatusCode::OK, "{good}");
    }
    assert_eq!(env.site.hits(DOC), 1);
}

async fn sign_in_and_approve(b: &mut Browser, page: &str) -> (String, String) {
    let resp = b
        .post(
            "/oauth/login",
            &[
                ("csrf", &field(page, "csrf")),
                ("next", &field(page, "next")),
                ("request", &field(page, "request")),
                ("user_code", &field(page, "user_code")),
                ("username", "alice"),
                ("password", PASSWORD),
            ],
        )
        .await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    let consent = b.get(&location(&resp)).await.text().await.expect("consent");
    let back = b
        .post(
            "/oauth/consent",
            &[
                ("csrf", &field(&consent, "csrf")),
                ("request", &field(&consent, "request")),
                ("decision", "approve"),
            ],
        )
        .await;
    assert_eq!(back.status(), StatusCode::SEE_OTHER);
    (consent, location(&back))
}

fn claims(id_token: &str) -> Value {
    let payload = id_token.split('.').nth(1).expect("payload");
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).expect("base64")).expect("json")
}

/// The browser leg for a document client: PKCE required, the document's name escaped, the consent
/// page showing the client id's host (not the host the document claims); the code.
async fn browser_leg(env: &Env, url: &str) -> String {
    let mut b = Browser::new(&env.url);
    // A public client must use PKCE: without it, an error back at the (valid) redirect URI.
    let no_pkce = authorize_path(url, REDIRECT, &[]).replace(
        &format!("&code_challenge={CHALLENGE}&code_challenge_method=S256"),
        "",
    );
    let to = location(&b.get(&no_pkce).await);
    assert_eq!(
        param(&to, "error").as_deref(),
        Some("invalid_request"),
        "{to}"
    );
    let page = b.get(&authorize_path(url, REDIRECT, &[])).await;
    let page = page.text().await.expect("sign-in page");
    assert!(
        page.contains("Notebook") && !page.contains("<b>Doc"),
        "escaped: {page}"
    );
    let (consent, back) = sign_in_and_approve(&mut b, &page).await;
    assert!(
        consent.contains("<span class=\"host\">cimd.test"),
        "{consent}"
    );
    assert!(
        !consent.contains("bank.example"),
        "the document's claim is not the host"
    );
    assert_eq!(param(&back, "iss").as_deref(), Some(env.url.as_str()));
    param(&back, "code").expect("code")
}

#[tokio::test]
async fn a_document_client_signs_in_with_pkce_and_no_secret() {
    let env = env().await;
    let url = env.site.url(DOC);
    env.site
        .set(DOC, reply(&document(&url, "Notebook <b>Doc</b>")));
    let code = browser_leg(&env, &url).await;
    let form = [
        ("grant_type", "authorization_code"),
        ("code", code.as_str()),
        ("redirect_uri", REDIRECT),
        ("client_id", url.as_str()),
        ("code_verifier", VERIFIER),
    ];
    let (status, tok) = token(&env, &form).await;
    assert_eq!(status, StatusCode::OK, "{tok}");
    assert_eq!(tok["scope"], "openid profile read-endpoints");
    assert_eq!(claims(tok["id_token"].as_str().unwrap())["aud"], url);
    let who: Value = http()
        .get(format!("{}/api/whoami-v2", env.url))
        .bearer_auth(tok["access_token"].as_str().unwrap())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(who["auth"]["app"]["clientId"], url);
    assert_eq!(who["auth"]["accessToken"]["displayName"], url);
    assert_eq!(
        env.site.hits(DOC),
        1,
        "the token endpoint used the cached document"
    );
    refresh_and_secrets(&env, &url, tok["refresh_token"].as_str().unwrap()).await;
}

/// The client authenticates with `none` only; a document that cannot be fetched any more means
/// `invalid_client` at the token endpoint.
async fn refresh_and_secrets(env: &Env, url: &str, refresh_token: &str) {
    let with_basic = http()
        .post(format!("{}/oauth/token", env.url))
        .basic_auth(url, Some("guessed"))
        .form(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(with_basic.status(), StatusCode::UNAUTHORIZED);
    let exchange = [
        (
            "grant_type",
            "urn:ietf:params:oauth:grant-type:token-exchange",
        ),
        ("subject_token", "alice@example.com"),
        ("subject_token_type", "urn:hub:token-type:user-email"),
        ("client_id", url),
    ];
    assert_eq!(token(env, &exchange).await.1["error"], "invalid_client");
    let refresh = [
        ("grant_type", "refresh_token"),
        ("refresh_token", refresh_token),
        ("client_id", url),
    ];
    let (status, tok) = token(env, &refresh).await;
    assert_eq!(status, StatusCode::OK, "{tok}");
    env.site.set(DOC, reply_text(404, "text/plain", "gone"));
    env.clock.advance(chrono::Duration::seconds(301));
    let refresh = [
        ("grant_type", "refresh_token"),
        ("refresh_token", tok["refresh_token"].as_str().unwrap()),
        ("client_id", url),
    ];
    let (status, err) = token(env, &refresh).await;
    assert_eq!(
        (status, err["error"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("invalid_client"))
    );
}

#[tokio::test]
async fn twenty_concurrent_first_requests_fetch_once() {
    let env = env().await;
    let url = env.site.url(DOC);
    env.site.set(
        DOC,
        reply(&document(&url, "Notebook")).delayed(Duration::from_millis(500)),
    );
    let mut all = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let (base, path) = (env.url.clone(), authorize_path(&url, REDIRECT, &[]));
        all.spawn(async move { Browser::new(&base).get(&path).await.status() });
    }
    while let Some(status) = all.join_next().await {
        assert_eq!(status.unwrap(), StatusCode::OK);
    }
    assert_eq!(env.site.hits(DOC), 1);
}

#[tokio::test]
async fn max_age_is_honoured_within_bounds() {
    let env = env().await;
    let url = env.site.url(DOC);
    env.site.set(
        DOC,
        reply(&document(&url, "First")).cache("public, max-age=120"),
    );
    assert!(sign_in_page(&env, &url).await.contains("First"));
    env.site
        .set(DOC, reply(&document(&url, "Second")).cache("max-age=1"));
    env.clock.advance(chrono::Duration::seconds(119));
    assert!(
        sign_in_page(&env, &url).await.contains("First"),
        "still fresh"
    );
    env.clock.advance(chrono::Duration::seconds(2));
    assert!(
        sign_in_page(&env, &url).await.contains("Second"),
        "picked up after expiry"
    );
    assert_eq!(env.site.hits(DOC), 2);

    // max-age=1 is held for the 30 s minimum.
    env.site.set(DOC, reply(&document(&url, "Third")));
    env.clock.advance(chrono::Duration::seconds(29));
    assert!(sign_in_page(&env, &url).await.contains("Second"));
    env.clock.advance(chrono::Duration::seconds(2));
    assert!(sign_in_page(&env, &url).await.contains("Third"));
    assert_eq!(env.site.hits(DOC), 3);
}
