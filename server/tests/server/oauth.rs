//! The OAuth provider against a real server on loopback: the browser side driven as a browser would
//! (cookies, forms with their CSRF tokens, redirects read and not followed), the app side as a client.

use crate::common;

use common::browser::{field, http, location, param, Browser};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use common::TestServer;
use p256::ecdsa::signature::Verifier;
use p256::ecdsa::{Signature, VerifyingKey};
use reqwest::StatusCode;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
const CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
const REDIRECT: &str = "http://127.0.0.1/callback";
const PASSWORD: &str = "correct horse battery";

struct Setup {
    server: TestServer,
    client_id: String,
    secret: String,
}

/// A server with user `alice` (password set, member of org `acme`) and her confidential app.
async fn setup() -> Setup {
    setup_with(|_| {}).await
}

/// [`setup`] on a server whose configuration `configure` changes.
async fn setup_with(configure: impl FnOnce(&mut switchyard_server::Config)) -> Setup {
    let server = common::spawn_with(configure).await;
    let _: Value = server
        .admin
        .admin_create_user(
            &json!({"name": "alice", "email": "Alice@Example.com", "password": PASSWORD}),
        )
        .await
        .expect("user");
    let _: Value = server.admin.admin_create_org("acme").await.expect("org");
    let _: Value = server
        .admin
        .admin_set_member("acme", "alice", "write")
        .await
        .expect("member");
    let alice = server.token_for("alice", None).await;
    let app: Value = alice
        .create_oauth_app(&json!({
            "name": "Notebook <b>App</b>",
            "homepageUrl": "https://notebook.example/home",
            "redirectUris": [REDIRECT],
            "scopes": ["openid", "profile", "email", "read-endpoints", "read-memberships"],
        }))
        .await
        .expect("app");
    Setup {
        client_id: app["app"]["id"].as_str().expect("id").to_string(),
        secret: app["clientSecret"].as_str().expect("secret").to_string(),
        server,
    }
}

fn authorize_path(client_id: &str, extra: &[(&str, &str)]) -> String {
    let mut params = vec![
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", REDIRECT),
        ("scope", "openid profile email read-endpoints"),
        ("state", "st<ate>"),
        ("nonce", "n-0S6_WzA2Mj"),
        ("code_challenge", CHALLENGE),
        ("code_challenge_method", "S256"),
    ];
    params.extend_from_slice(extra);
    format!(
        "/oauth/authorize?{}",
        serde_urlencoded::to_string(&params).expect("query")
    )
}

/// Signs in on the sign-in page the authorize request showed; returns the consent page.
async fn sign_in(b: &mut Browser, page: String, password: &str) -> reqwest::Response {
    let resp = b
        .post(
            "/oauth/login",
            &[
                ("csrf", &field(&page, "csrf")),
                ("next", &field(&page, "next")),
                ("request", &field(&page, "request")),
                ("user_code", &field(&page, "user_code")),
                ("username", "alice"),
                ("password", password),
            ],
        )
        .await;
    if resp.status() != StatusCode::SEE_OTHER {
        return resp;
    }
    let next = location(&resp);
    b.get(&next).await
}

/// A device authorization of the app started: its user code.
async fn device_user_code(s: &Setup) -> String {
    let start: Value = http()
        .post(format!("{}/oauth/device", s.server.url))
        .basic_auth(&s.client_id, Some(&s.secret))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    start["user_code"].as_str().unwrap().to_string()
}

/// `alice` signed in on the device page in `b`: the code form's CSRF token.
async fn device_entry(b: &mut Browser) -> String {
    let page = b.get("/oauth/device").await.text().await.unwrap();
    let entry = sign_in(b, page, PASSWORD).await.text().await.unwrap();
    field(&entry, "csrf")
}

/// A user code typed on the device page of `b` (its form's `csrf`).
async fn verify_code(b: &mut Browser, csrf: &str, code: &str) -> reqwest::Response {
    b.post(
        "/oauth/device/verify",
        &[("csrf", csrf), ("user_code", code)],
    )
    .await
}

/// The whole browser leg: authorize, sign in, approve; the redirect back to the app.
async fn browser_code(s: &Setup, extra: &[(&str, &str)], orgs: &[&str]) -> String {
    browser_leg(s, &authorize_path(&s.client_id, extra), orgs).await
}

/// The browser leg from an authorization request's path and query.
async fn browser_leg(s: &Setup, authorize: &str, orgs: &[&str]) -> String {
    let mut b = Browser::new(&s.server.url);
    let page = b.get(authorize).await;
    assert_eq!(page.status(), StatusCode::OK);
    let page = page.text().await.expect("sign-in page");
    assert!(page.contains("Notebook"), "{page}");
    assert!(
        !page.contains("<b>App"),
        "the app's name is escaped: {page}"
    );
    let consent = sign_in(&mut b, page, PASSWORD).await;
    assert_eq!(consent.status(), StatusCode::OK);
    let consent = consent.text().await.expect("consent page");
    // Where the code goes, not the homepage the app's owner typed.
    assert!(consent.contains("127.0.0.1"), "{consent}");
    assert!(!consent.contains("notebook.example"), "{consent}");
    assert!(consent.contains("See your email address"), "{consent}");
    let mut form = vec![
        ("csrf", field(&consent, "csrf")),
        ("request", field(&consent, "request")),
        ("decision", "approve".to_string()),
    ];
    for o in orgs {
        form.push(("org", o.to_string()));
    }
    let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let back = b.post("/oauth/consent", &form).await;
    assert_eq!(back.status(), StatusCode::SEE_OTHER);
    location(&back)
}

async fn token_request(s: &Setup, form: &[(&str, &str)], basic: bool) -> reqwest::Response {
    let mut req = http()
        .post(format!("{}/oauth/token", s.server.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(serde_urlencoded::to_string(form).expect("form"));
    if basic {
        req = req.basic_auth(&s.client_id, Some(&s.secret));
    }
    req.send().await.expect("token request")
}

async fn redeem(s: &Setup, code: &str) -> reqwest::Response {
    let form = [
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", REDIRECT),
        ("code_verifier", VERIFIER),
    ];
    token_request(s, &form, true).await
}

fn verify_id_token(jwks: &Value, token: &str) -> Value {
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3);
    let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).unwrap()).unwrap();
    assert_eq!(header["alg"], "ES256");
    let key = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kid"] == header["kid"])
        .expect("the token's key is in the JWKS");
    let mut sec1 = vec![4u8];
    sec1.extend(URL_SAFE_NO_PAD.decode(key["x"].as_str().unwrap()).unwrap());
    sec1.extend(URL_SAFE_NO_PAD.decode(key["y"].as_str().unwrap()).unwrap());
    let verifying = VerifyingKey::from_sec1_bytes(&sec1).expect("P-256 key");
    let sig = Signature::from_slice(&URL_SAFE_NO_PAD.decode(parts[2]).unwrap()).unwrap();
    verifying
        .verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &sig)
        .expect("signature verifies");
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap()
}

/// How long before its ID token was made (`iat − auth_time`) the user signed in, the token verified
/// against the server's JWKS; `i64::MIN` when either claim is missing.
async fn sign_in_lead(s: &Setup, tok: &Value) -> i64 {
    let (_, jwks) = get_json(&format!("{}/oauth/jwks", s.server.url), None).await;
    let claims = verify_id_token(&jwks, tok["id_token"].as_str().expect("an ID token"));
    let (auth_time, iat) = (claims["auth_time"].as_i64(), claims["iat"].as_i64());
    auth_time.zip(iat).map_or(i64::MIN, |(a, i)| i - a)
}

async fn get_json(url: &str, bearer: Option<&str>) -> (StatusCode, Value) {
    let mut req = http().get(url);
    if let Some(t) = bearer {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.expect("get");
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn code_flow_with_pkce_issues_verifiable_tokens() {
    let s = setup().await;
    let (status, disc) = get_json(
        &format!("{}/.well-known/openid-configuration", s.server.url),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(disc["issuer"], s.server.url);
    assert_eq!(disc["code_challenge_methods_supported"], json!(["S256"]));
    let (_, jwks) = get_json(disc["jwks_uri"].as_str().unwrap(), None).await;

    let acme_id = {
        let alice = s.server.token_for("alice", None).await;
        let who: Value = alice.whoami().await.unwrap();
        who["orgs"][0]["id"].as_str().unwrap().to_string()
    };
    let back = browser_code(&s, &[], &[&acme_id]).await;
    assert!(back.starts_with(REDIRECT), "{back}");
    assert_eq!(param(&back, "state").as_deref(), Some("st<ate>"));
    assert_eq!(param(&back, "iss").as_deref(), Some(s.server.url.as_str()));
    let code = param(&back, "code").expect("code");

    let resp = redeem(&s, &code).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["cache-control"], "no-store");
    let tok: Value = resp.json().await.unwrap();
    assert_eq!(tok["token_type"], "bearer");
    assert_eq!(tok["scope"], "openid profile email read-endpoints");
    let access = tok["access_token"].as_str().unwrap();
    let claims = verify_id_token(&jwks, tok["id_token"].as_str().unwrap());
    assert_eq!(claims["iss"], s.server.url);
    assert_eq!(claims["aud"], s.client_id);
    assert_eq!(claims["nonce"], "n-0S6_WzA2Mj");
    assert_eq!(claims["preferred_username"], "alice");
    assert_eq!(claims["email"], "Alice@Example.com");
    assert_eq!(claims["orgs"][0]["preferred_username"], "acme");
    let expected_at_hash = URL_SAFE_NO_PAD.encode(&Sha256::digest(access.as_bytes())[..16]);
    assert_eq!(claims["at_hash"], expected_at_hash);

    // The access token works where a personal token does, within its scopes and organizations.
    let (status, who) = get_json(&format!("{}/api/whoami-v2", s.server.url), Some(access)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(who["auth"]["type"], "oauth");
    assert_eq!(who["auth"]["app"]["clientId"], s.client_id);
    assert_eq!(
        who["orgs"],
        json!([]),
        "no read-memberships scope: no organizations listed"
    );
    let (status, _) = get_json(&format!("{}/v2/endpoint/acme", s.server.url), Some(access)).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "read-endpoints reaches a granted org"
    );
    let create = http()
        .post(format!("{}/v2/endpoint/alice", s.server.url))
        .bearer_auth(access)
        .json(&common::endpoint_body("nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        create.status(),
        StatusCode::FORBIDDEN,
        "no write-endpoints scope"
    );

    let userinfo = format!("{}/oauth/userinfo", s.server.url);
    let (status, info) = get_json(&userinfo, Some(access)).await;
    assert_eq!(status, StatusCode::OK);
    // Without any credential: the challenge alone, no error code (RFC 6750 §3.1); with a bad one, both.
    for (bearer, challenge) in [
        (None, "Bearer realm=\"switchyard\""),
        (
            Some("nope"),
            "Bearer realm=\"switchyard\", error=\"invalid_token\"",
        ),
    ] {
        let mut req = http().get(&userinfo);
        if let Some(t) = bearer {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.expect("userinfo");
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(resp.headers()["www-authenticate"], challenge);
    }
    assert_eq!(info["sub"], claims["sub"]);
    assert_eq!(
        info["organizations"][0]["sub"], acme_id,
        "the granted organization"
    );
    assert!(
        info["organizations"][0].get("roleInOrg").is_none(),
        "roles need read-memberships"
    );

    // The code is single use: a replay is refused and revokes what the first use issued.
    let replay = redeem(&s, &code).await;
    assert_eq!(replay.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        replay.json::<Value>().await.unwrap()["error"],
        "invalid_grant"
    );
    let (status, _) = get_json(&format!("{}/api/whoami-v2", s.server.url), Some(access)).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "the replay revoked the first tokens"
    );
}

#[tokio::test]
async fn refresh_tokens_rotate_and_reuse_revokes_the_family() {
    let s = setup().await;
    let back = browser_code(&s, &[], &[]).await;
    let tok: Value = redeem(&s, &param(&back, "code").unwrap())
        .await
        .json()
        .await
        .unwrap();
    let first = tok["refresh_token"].as_str().unwrap().to_string();
    let refresh = |rt: String| {
        let s = &s;
        async move {
            let form = [
                ("grant_type", "refresh_token"),
                ("refresh_token", rt.as_str()),
            ];
            token_request(s, &form, true).await
        }
    };
    let resp = refresh(first.clone()).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let second: Value = resp.json().await.unwrap();
    let second_rt = second["refresh_token"].as_str().unwrap().to_string();
    assert_ne!(second_rt, first, "rotated");
    let access = second["access_token"].as_str().unwrap().to_string();
    let (status, _) = get_json(&format!("{}/api/whoami-v2", s.server.url), Some(&access)).await;
    assert_eq!(status, StatusCode::OK);

    let used: Value = http()
        .post(format!("{}/oauth/introspect", s.server.url))
        .basic_auth(&s.client_id, Some(&s.secret))
        .form(&[("token", first.as_str())])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        used["active"], false,
        "a rotated refresh token is no longer active"
    );
    let reuse = refresh(first).await;
    assert_eq!(reuse.status(), StatusCode::BAD_REQUEST);
    let (status, _) = get_json(&format!("{}/api/whoami-v2", s.server.url), Some(&access)).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "reuse revoked the family's access token"
    );
    assert_eq!(
        refresh(second_rt).await.status(),
        StatusCode::BAD_REQUEST,
        "and its refresh token"
    );

    // Without the client's credentials, nothing is issued.
    let no_auth = token_request(
        &s,
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", "syr_x"),
            ("client_id", &s.client_id),
        ],
        false,
    )
    .await;
    assert_eq!(no_auth.status(), StatusCode::UNAUTHORIZED);
    assert!(no_auth.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .starts_with("Basic"));
}

#[tokio::test]
async fn bad_clients_and_redirects_get_an_error_page_never_a_redirect() {
    let s = setup().await;
    let mut b = Browser::new(&s.server.url);
    for bad in [
        "http://127.0.0.2/callback",
        "http://localhost/callback",
        "https://127.0.0.1/callback",
        "http://127.0.0.1/callback/",
        "http://127.0.0.1/callback?x=1",
        "http://a@127.0.0.1/callback",
        "http://127.0.0.1/callback#f",
    ] {
        let path = authorize_path(&s.client_id, &[]).replace(
            &serde_urlencoded::to_string([("redirect_uri", REDIRECT)]).unwrap(),
            &serde_urlencoded::to_string([("redirect_uri", bad)]).unwrap(),
        );
        let resp = b.get(&path).await;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{bad}");
        assert!(resp.headers().get("location").is_none(), "{bad}");
        assert!(resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html"));
    }
    // Any port on the registered loopback host is fine.
    let path = authorize_path(&s.client_id, &[])
        .replace("127.0.0.1%2Fcallback", "127.0.0.1%3A5555%2Fcallback");
    assert_eq!(b.get(&path).await.status(), StatusCode::OK);

    let unknown = b.get(&authorize_path("app_nobody", &[])).await;
    assert_eq!(unknown.status(), StatusCode::BAD_REQUEST);
    assert!(unknown.headers().get("location").is_none());
    let twice = format!(
        "{}&redirect_uri=http%3A%2F%2Fevil.example%2F",
        authorize_path(&s.client_id, &[])
    );
    let resp = b.get(&twice).await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert!(resp.headers().get("location").is_none());
}

#[tokio::test]
async fn pkce_downgrades_and_bad_requests_redirect_with_an_error_and_iss() {
    let s = setup().await;
    let mut b = Browser::new(&s.server.url);
    let cases: Vec<(String, &str)> = vec![
        (
            authorize_path(&s.client_id, &[]).replace("S256", "plain"),
            "invalid_request",
        ),
        (
            authorize_path(&s.client_id, &[]).replace("&code_challenge_method=S256", ""),
            "invalid_request",
        ),
        (
            authorize_path(&s.client_id, &[]).replace("response_type=code", "response_type=token"),
            "unsupported_response_type",
        ),
        (
            authorize_path(&s.client_id, &[]).replace("read-endpoints", "write-endpoints"),
            "invalid_scope",
        ),
        (
            format!("{}&scope=openid", authorize_path(&s.client_id, &[])),
            "invalid_request",
        ),
    ];
    for (path, error) in cases {
        let resp = b.get(&path).await;
        assert_eq!(resp.status(), StatusCode::SEE_OTHER, "{path}");
        let to = location(&resp);
        assert!(to.starts_with(REDIRECT), "{to}");
        assert_eq!(param(&to, "error").as_deref(), Some(error), "{path}");
        assert_eq!(param(&to, "iss").as_deref(), Some(s.server.url.as_str()));
        assert_eq!(param(&to, "state").as_deref(), Some("st<ate>"));
        assert!(param(&to, "code").is_none());
    }
    // A public app must use PKCE.
    let alice = s.server.token_for("alice", None).await;
    let public: Value = alice
        .create_oauth_app(&json!({"name": "cli", "public": true, "redirectUris": [REDIRECT], "scopes": ["openid"]}))
        .await
        .unwrap();
    assert!(public.get("clientSecret").is_none());
    let id = public["app"]["id"].as_str().unwrap();
    let no_pkce = authorize_path(id, &[])
        .replace(
            &format!("&code_challenge={CHALLENGE}&code_challenge_method=S256"),
            "",
        )
        .replace("openid+profile+email+read-endpoints", "openid");
    let to = location(&b.get(&no_pkce).await);
    assert_eq!(
        param(&to, "error").as_deref(),
        Some("invalid_request"),
        "{to}"
    );

    // A wrong verifier spends the code and issues nothing.
    let back = browser_code(&s, &[], &[]).await;
    let code = param(&back, "code").unwrap();
    let wrong = [
        ("grant_type", "authorization_code"),
        ("code", code.as_str()),
        ("redirect_uri", REDIRECT),
        ("code_verifier", &"x".repeat(43)),
    ];
    let resp = token_request(&s, &wrong, true).await;
    assert_eq!(
        resp.json::<Value>().await.unwrap()["error"],
        "invalid_grant"
    );
    assert_eq!(
        redeem(&s, &code).await.status(),
        StatusCode::BAD_REQUEST,
        "spent"
    );
}

#[tokio::test]
async fn a_returning_user_is_not_asked_again_and_wrong_passwords_are_refused() {
    let s = setup().await;
    let mut b = Browser::new(&s.server.url);
    let page = b
        .get(&authorize_path(&s.client_id, &[]))
        .await
        .text()
        .await
        .unwrap();
    let refused = sign_in(&mut b, page, "wrong password!").await;
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    let page = refused.text().await.unwrap();
    assert!(page.contains("Wrong username or password"));
    let consent = sign_in(&mut b, page, PASSWORD).await.text().await.unwrap();
    // A form without the session's CSRF token is refused.
    let forged = b
        .post(
            "/oauth/consent",
            &[
                ("csrf", "forged"),
                ("request", &field(&consent, "request")),
                ("decision", "approve"),
            ],
        )
        .await;
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    let approve = [
        ("csrf", field(&consent, "csrf")),
        ("request", field(&consent, "request")),
        ("decision", "approve".into()),
    ];
    let approve: Vec<(&str, &str)> = approve.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let first = b.post("/oauth/consent", &approve).await;
    assert!(param(&location(&first), "code").is_some());
    assert_eq!(
        b.post("/oauth/consent", &approve).await.status(),
        StatusCode::FORBIDDEN,
        "answered once"
    );
    // Same scopes again: straight back to the app with a code.
    let again = b.get(&authorize_path(&s.client_id, &[])).await;
    assert_eq!(again.status(), StatusCode::SEE_OTHER);
    assert!(param(&location(&again), "code").is_some());
}

#[tokio::test]
async fn device_flow_polls_until_the_user_approves() {
    let s = setup().await;
    // The app has a secret: it must send it on both of the flow's requests (RFC 8628 §3.1, §3.4).
    let bare = http()
        .post(format!("{}/oauth/device", s.server.url))
        .form(&[("client_id", s.client_id.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        bare.json::<Value>().await.unwrap()["error"],
        "invalid_client"
    );
    let start = http()
        .post(format!("{}/oauth/device", s.server.url))
        .basic_auth(&s.client_id, Some(&s.secret))
        .form(&[("scope", "openid read-endpoints")])
        .send()
        .await
        .unwrap();
    assert_eq!(start.status(), StatusCode::OK);
    let d: Value = start.json().await.unwrap();
    let user_code = d["user_code"].as_str().unwrap().to_string();
    assert_eq!(user_code.len(), 9);
    assert!(d["verification_uri_complete"]
        .as_str()
        .unwrap()
        .contains(&user_code));
    let device_code = d["device_code"].as_str().unwrap().to_string();
    let poll = || {
        let s = &s;
        let dc = device_code.clone();
        async move {
            let form = [
                ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"),
                ("device_code", dc.as_str()),
            ];
            let resp = token_request(s, &form, true).await;
            (resp.status(), resp.json::<Value>().await.unwrap())
        }
    };
    assert_eq!(poll().await.1["error"], "authorization_pending");
    let no_secret = [
        ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"),
        ("device_code", device_code.as_str()),
        ("client_id", s.client_id.as_str()),
    ];
    let refused = token_request(&s, &no_secret, false).await;
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        refused.json::<Value>().await.unwrap()["error"],
        "invalid_client"
    );
    assert_eq!(
        poll().await.1["error"],
        "slow_down",
        "polled faster than the interval"
    );

    let mut b = Browser::new(&s.server.url);
    let csrf = device_entry(&mut b).await;
    let wrong = verify_code(&mut b, &csrf, "BBBB-BBBB").await;
    assert_eq!(wrong.status(), StatusCode::BAD_REQUEST);
    let confirm = b
        .post(
            "/oauth/device/verify",
            &[
                ("csrf", &csrf),
                ("user_code", &user_code.to_lowercase().replace('-', "")),
            ],
        )
        .await
        .text()
        .await
        .unwrap();
    assert!(confirm.contains("Notebook"), "{confirm}");
    let done = b
        .post(
            "/oauth/device/decide",
            &[
                ("csrf", &csrf),
                ("user_code", &field(&confirm, "user_code")),
                ("decision", "approve"),
            ],
        )
        .await;
    assert_eq!(done.status(), StatusCode::OK);
    // Wait out the (slowed) interval on the server's clock: the test cannot skip it.
    tokio::time::sleep(std::time::Duration::from_secs(11)).await;
    let (status, tok) = poll().await;
    assert_eq!(status, StatusCode::OK, "{tok}");
    assert_eq!(tok["scope"], "openid read-endpoints");
    // The ID token's auth_time is when the user signed in to approve, over 10 s before it was made.
    let lead = sign_in_lead(&s, &tok).await;
    assert!(lead >= 10, "signed in {lead} s before the token");
    tokio::time::sleep(std::time::Duration::from_secs(11)).await;
    assert_eq!(
        poll().await.1["error"],
        "invalid_grant",
        "a device code is used once"
    );
}

#[tokio::test]
async fn organization_token_exchange_reaches_only_the_organization_and_is_audited() {
    let s = setup().await;
    let _: Value = s
        .server
        .admin
        .admin_create_user(&json!({"name": "bob", "email": "bob@example.com"}))
        .await
        .unwrap();
    let app: Value = s
        .server
        .admin
        .create_oauth_app(&json!({"owner": "acme", "name": "acme backend", "scopes": ["openid", "read-endpoints", "write-endpoints"], "tokenExchange": true}))
        .await
        .unwrap();
    let ex = Setup {
        server: s.server,
        client_id: app["app"]["id"].as_str().unwrap().into(),
        secret: app["clientSecret"].as_str().unwrap().into(),
    };
    let exchange = |email: &'static str, scope: Option<&'static str>, basic: bool| {
        let ex = &ex;
        async move {
            let mut form = vec![
                (
                    "grant_type",
                    "urn:ietf:params:oauth:grant-type:token-exchange",
                ),
                ("subject_token", email),
                ("subject_token_type", "urn:hub:token-type:user-email"),
            ];
            if let Some(sc) = scope {
                form.push(("scope", sc));
            }
            if !basic {
                form.push(("client_id", ex.client_id.as_str()));
            }
            let resp = token_request(ex, &form, basic).await;
            (resp.status(), resp.json::<Value>().await.unwrap())
        }
    };
    let (status, tok) = exchange("ALICE@example.com", None, true).await;
    assert_eq!(status, StatusCode::OK, "{tok}");
    assert_eq!(
        tok["issued_token_type"],
        "urn:ietf:params:oauth:token-type:access_token"
    );
    assert_eq!(tok["expires_in"], 28800);
    assert!(tok.get("refresh_token").is_none());
    assert!(tok["id_token"].is_string());
    let access = tok["access_token"].as_str().unwrap();
    let (status, _) = get_json(&format!("{}/v2/endpoint/acme", ex.server.url), Some(access)).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = get_json(
        &format!("{}/v2/endpoint/alice", ex.server.url),
        Some(access),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "never the user's own namespace"
    );

    let (status, e) = exchange("bob@example.com", None, true).await;
    assert_eq!(
        (status, e["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_grant"))
    );
    let (_, e2) = exchange("nobody@example.com", None, true).await;
    assert_eq!(
        e2, e,
        "a non-member and an unknown email get the same answer"
    );
    let (_, e) = exchange("alice@example.com", Some("openid email"), true).await;
    assert_eq!(e["error"], "invalid_scope");
    let (status, e) = exchange("alice@example.com", None, false).await;
    assert_eq!(
        (status, e["error"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("invalid_client"))
    );
    // The user's own app is not bound to an organization.
    let own = Setup {
        server: ex.server,
        client_id: s.client_id,
        secret: s.secret,
    };
    let form = [
        (
            "grant_type",
            "urn:ietf:params:oauth:grant-type:token-exchange",
        ),
        ("subject_token", "alice@example.com"),
        ("subject_token_type", "urn:hub:token-type:user-email"),
    ];
    let resp = token_request(&own, &form, true).await;
    assert_eq!(
        resp.json::<Value>().await.unwrap()["error"],
        "invalid_client"
    );

    let log: Vec<Value> = own.server.admin.audit_log("acme").await.unwrap();
    let outcomes: Vec<&str> = log.iter().map(|e| e["outcome"].as_str().unwrap()).collect();
    assert_eq!(
        outcomes.iter().filter(|o| **o == "success").count(),
        1,
        "{log:?}"
    );
    assert_eq!(
        outcomes.iter().filter(|o| **o == "invalid_grant").count(),
        2
    );
    assert_eq!(
        outcomes.iter().filter(|o| **o == "invalid_scope").count(),
        1
    );
    assert_eq!(
        outcomes.iter().filter(|o| **o == "invalid_client").count(),
        1,
        "a refusal before the app proved itself is audited too"
    );
    let alice = own.server.token_for("alice", None).await;
    let denied = alice.audit_log::<Value>("acme").await.unwrap_err();
    assert_eq!(
        denied.status(),
        Some(StatusCode::FORBIDDEN),
        "a writer is not an org admin"
    );
}

#[tokio::test]
async fn apps_secrets_revocation_and_introspection() {
    let s = setup().await;
    let alice = s.server.token_for("alice", None).await;
    let bob = s.server.user("bobby", None).await;
    let err = bob
        .update_oauth_app::<Value>(&s.client_id, &json!({"name": "mine"}))
        .await
        .unwrap_err();
    assert_eq!(
        err.status(),
        Some(StatusCode::NOT_FOUND),
        "someone else's app is not shown"
    );
    let bad = alice
        .create_oauth_app::<Value>(&json!({"name": " ", "scopes": [],
            "redirectUris": ["https://ok.example/cb", "http://evil.example/cb"]}))
        .await
        .unwrap_err();
    assert_eq!(bad.status(), Some(StatusCode::BAD_REQUEST));
    let switchyard_server::client::ClientError::Api { body, .. } = bad else {
        panic!("{bad:?}")
    };
    let paths: Vec<&str> = body["issues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        ["name", "redirectUris[1]", "scopes"],
        "every issue at once: {body}"
    );
    let te = alice
        .create_oauth_app::<Value>(
            &json!({"name": "x", "owner": "acme", "scopes": ["openid"], "tokenExchange": true}),
        )
        .await
        .unwrap_err();
    assert_eq!(
        te.status(),
        Some(StatusCode::FORBIDDEN),
        "only instance admins grant token exchange"
    );

    let back = browser_code(&s, &[], &[]).await;
    let tok: Value = redeem(&s, &param(&back, "code").unwrap())
        .await
        .json()
        .await
        .unwrap();
    let access = tok["access_token"].as_str().unwrap().to_string();
    let introspect = |token: String, secret: String| {
        let s = &s;
        async move {
            http()
                .post(format!("{}/oauth/introspect", s.server.url))
                .basic_auth(&s.client_id, Some(secret))
                .form(&[("token", token)])
                .send()
                .await
                .unwrap()
        }
    };
    let info: Value = introspect(access.clone(), s.secret.clone())
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(info["active"], true);
    assert_eq!(info["username"], "alice");
    assert_eq!(info["token_type"], "bearer", "RFC 6749's type: {info}");
    assert_eq!(info["token_use"], "access_token");
    let wrong = introspect(access.clone(), "sys_wrong".into()).await;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);

    let revoked = http()
        .post(format!("{}/oauth/revoke", s.server.url))
        .basic_auth(&s.client_id, Some(&s.secret))
        .form(&[("token", tok["refresh_token"].as_str().unwrap())])
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), StatusCode::OK);
    let info: Value = introspect(access.clone(), s.secret.clone())
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        info["active"], false,
        "revoking the refresh token ended the grant"
    );

    // A rotated secret replaces the old one; a deleted one makes the app public.
    let rotated: Value = alice.oauth_app_secret(&s.client_id, true).await.unwrap();
    let new_secret = rotated["clientSecret"].as_str().unwrap().to_string();
    assert_eq!(
        introspect(access.clone(), s.secret.clone()).await.status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        introspect(access.clone(), new_secret).await.status(),
        StatusCode::OK
    );
    let public: Value = alice.oauth_app_secret(&s.client_id, false).await.unwrap();
    assert_eq!(public["app"]["hasSecret"], false);

    // Nothing usable is at rest: the store holds hashes of secrets and tokens.
    let db = s.server.db().await;
    let hashes: Vec<(String,)> = sqlx::query_as("SELECT token_hash FROM oauth_tokens")
        .fetch_all(&db)
        .await
        .unwrap();
    assert!(hashes
        .iter()
        .all(|(h,)| h.len() == 64 && !h.starts_with("sy")));
    let keys: Vec<(String,)> = sqlx::query_as("SELECT private_key FROM signing_keys")
        .fetch_all(&db)
        .await
        .unwrap();
    assert!(
        keys.iter().all(|(k,)| k.starts_with("enc:")),
        "signing keys are sealed"
    );
}

/// A second, independent relying party: the `openidconnect` crate discovers the provider, builds the
/// authorization request (PKCE S256, nonce), exchanges the code and verifies the ID token's signature,
/// claims and `at_hash` against the JWKS.
#[tokio::test]
async fn the_openidconnect_crate_signs_a_user_in() {
    use openidconnect::core::{CoreClient, CoreProviderMetadata, CoreResponseType};
    use openidconnect::{
        AccessTokenHash, AuthenticationFlow, AuthorizationCode, ClientId, ClientSecret, CsrfToken,
        IssuerUrl, Nonce, OAuth2TokenResponse, PkceCodeChallenge, RedirectUrl, Scope as OidcScope,
        TokenResponse,
    };
    let s = setup().await;
    let http = http();
    let issuer = IssuerUrl::new(s.server.url.clone()).unwrap();
    let meta = CoreProviderMetadata::discover_async(issuer, &http)
        .await
        .expect("discovery");
    let client = CoreClient::from_provider_metadata(
        meta,
        ClientId::new(s.client_id.clone()),
        Some(ClientSecret::new(s.secret.clone())),
    )
    .set_redirect_uri(RedirectUrl::new(REDIRECT.into()).unwrap());
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let (url, state, nonce) = client
        .authorize_url(
            AuthenticationFlow::<CoreResponseType>::AuthorizationCode,
            CsrfToken::new_random,
            Nonce::new_random,
        )
        .add_scope(OidcScope::new("profile".into()))
        .add_scope(OidcScope::new("email".into()))
        .set_pkce_challenge(challenge)
        .url();
    let path = &url.as_str()[s.server.url.len()..];
    let back = browser_leg(&s, path, &[]).await;
    assert_eq!(
        param(&back, "state").as_deref(),
        Some(state.secret().as_str())
    );
    let code = param(&back, "code").expect("code");
    let token = client
        .exchange_code(AuthorizationCode::new(code))
        .expect("token endpoint")
        .set_pkce_verifier(verifier)
        .request_async(&http)
        .await
        .expect("code exchange");
    let id_token = token.id_token().expect("an ID token");
    let verifier = client.id_token_verifier();
    let claims = id_token
        .claims(&verifier, &nonce)
        .expect("ID token verifies");
    assert_eq!(
        claims.preferred_username().map(|u| u.as_str()),
        Some("alice")
    );
    assert_eq!(
        claims.email().map(|e| e.as_str()),
        Some("Alice@Example.com")
    );
    let expected = AccessTokenHash::from_token(
        token.access_token(),
        id_token.signing_alg().unwrap(),
        id_token.signing_key(&verifier).unwrap(),
    )
    .unwrap();
    assert_eq!(claims.access_token_hash(), Some(&expected));
    // A nonce other than the one sent is refused.
    assert!(id_token
        .claims(&verifier, &Nonce::new("other".into()))
        .is_err());
}

/// 20 codes, each redeemed twice at once from tasks of a multi-threaded runtime (the server's own threads
/// among them): of each pair one at most gets tokens, and the store never holds two issues' tokens for a
/// code. The second presentation is a replay: it revokes what the first issued (RFC 6749 §4.1.2), so when
/// both are done the code has left no token that works. (The revocation can even land before the first
/// presentation has read its grant, and then neither gets tokens.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_concurrent_redemptions_of_one_code_issue_once() {
    let s = std::sync::Arc::new(setup().await);
    // The first code through the consent page; then, consent given, each authorization request goes straight
    // back to the app with a new code.
    let mut codes = vec![param(&browser_code(&s, &[], &[]).await, "code").unwrap()];
    let mut b = Browser::new(&s.server.url);
    let page = b.get(&authorize_path(&s.client_id, &[])).await;
    let page = page.text().await.unwrap();
    let back = sign_in(&mut b, page, PASSWORD).await;
    assert_eq!(back.status(), StatusCode::SEE_OTHER, "consent remembered");
    codes.push(param(&location(&back), "code").unwrap());
    while codes.len() < 20 {
        let back = b.get(&authorize_path(&s.client_id, &[])).await;
        assert_eq!(back.status(), StatusCode::SEE_OTHER, "consent remembered");
        codes.push(param(&location(&back), "code").unwrap());
    }
    let pairs: Vec<_> = codes
        .iter()
        .map(|code| {
            [0, 1].map(|_| {
                let (s, code) = (s.clone(), code.clone());
                tokio::spawn(async move {
                    let resp = redeem(&s, &code).await;
                    let status = resp.status();
                    (status, resp.json::<Value>().await.unwrap_or(Value::Null))
                })
            })
        })
        .collect();
    let mut issued = Vec::new();
    for (code, pair) in codes.iter().zip(pairs) {
        let mut answers = Vec::new();
        for task in pair {
            answers.push(task.await.unwrap());
        }
        let ok: Vec<&Value> = answers
            .iter()
            .filter(|(status, _)| *status == StatusCode::OK)
            .map(|(_, body)| body)
            .collect();
        assert!(ok.len() <= 1, "code {code} issued twice: {answers:?}");
        assert!(
            answers
                .iter()
                .all(|(status, _)| [StatusCode::OK, StatusCode::BAD_REQUEST].contains(status)),
            "{answers:?}"
        );
        issued.extend(ok.into_iter().cloned());
    }
    assert!(!issued.is_empty(), "no code was redeemed at all");
    // In the store: at most one access and one refresh token for each code's grant, and every grant revoked.
    let db = s.server.db().await;
    let per_grant: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT g.id, t.kind, COUNT(*) FROM oauth_tokens t JOIN oauth_grants g ON g.id = t.grant_id \
         WHERE g.kind = 'code' GROUP BY g.id, t.kind",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    assert!(per_grant.iter().all(|(_, _, n)| *n == 1), "{per_grant:?}");
    let (grants, live): (i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), COUNT(*) - COUNT(revoked_at) FROM oauth_grants WHERE kind = 'code'",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    assert_eq!(
        (grants, live),
        (20, 0),
        "one grant per code, each revoked by its replay"
    );
    // And what the first presentation got no longer works.
    let userinfo = format!("{}/oauth/userinfo", s.server.url);
    for tokens in issued {
        let access = tokens["access_token"].as_str().expect("an access token");
        let (status, info) = get_json(&userinfo, Some(access)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{info}");
    }
}

#[tokio::test]
async fn a_request_belongs_to_the_browser_that_made_it_and_unknown_orgs_are_refused() {
    let s = setup().await;
    let mut b = Browser::new(&s.server.url);
    let page = b
        .get(&authorize_path(&s.client_id, &[]))
        .await
        .text()
        .await
        .unwrap();
    let consent = sign_in(&mut b, page, PASSWORD).await.text().await.unwrap();
    // Another signed-in browser cannot answer it, even with its own CSRF token.
    let mut other = Browser::new(&s.server.url);
    let page = other
        .get(&authorize_path(&s.client_id, &[]))
        .await
        .text()
        .await
        .unwrap();
    let theirs = sign_in(&mut other, page, PASSWORD)
        .await
        .text()
        .await
        .unwrap();
    let stolen = other
        .post(
            "/oauth/consent",
            &[
                ("csrf", &field(&theirs, "csrf")),
                ("request", &field(&consent, "request")),
                ("decision", "approve"),
            ],
        )
        .await;
    assert_eq!(stolen.status(), StatusCode::FORBIDDEN);
    assert!(stolen.headers().get("location").is_none());
    // orgIds naming an organization the user is not in: an error page, nothing issued.
    let resp = b
        .get(&authorize_path(&s.client_id, &[("orgIds", "not-an-org")]))
        .await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert!(resp.headers().get("location").is_none());
}

#[tokio::test]
async fn wrong_user_codes_are_attempt_limited() {
    let s = setup().await;
    let mut b = Browser::new(&s.server.url);
    let csrf = device_entry(&mut b).await;
    for _ in 0..5 {
        let r = verify_code(&mut b, &csrf, "BBBB-BBBB").await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    }
    let right = &device_user_code(&s).await;
    let r = verify_code(&mut b, &csrf, right).await;
    assert_eq!(
        r.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "even the right code, after five wrong ones"
    );
}

#[tokio::test]
async fn taking_a_scope_away_from_an_app_ends_its_grants() {
    let s = setup().await;
    let back = browser_code(&s, &[], &[]).await;
    let tok: Value = redeem(&s, &param(&back, "code").unwrap())
        .await
        .json()
        .await
        .unwrap();
    let access = tok["access_token"].as_str().unwrap();
    let whoami = format!("{}/api/whoami-v2", s.server.url);
    assert_eq!(get_json(&whoami, Some(access)).await.0, StatusCode::OK);
    let alice = s.server.token_for("alice", None).await;
    let _: Value = alice
        .update_oauth_app(&s.client_id, &json!({"name": "Renamed"}))
        .await
        .unwrap();
    assert_eq!(
        get_json(&whoami, Some(access)).await.0,
        StatusCode::OK,
        "a rename keeps grants"
    );
    let _: Value = alice
        .update_oauth_app(&s.client_id, &json!({"scopes": ["openid", "profile"]}))
        .await
        .unwrap();
    assert_eq!(
        get_json(&whoami, Some(access)).await.0,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn prompt_none_consent_and_login_and_the_form_post() {
    let s = setup().await;
    let mut b = Browser::new(&s.server.url);
    // Nobody signed in: prompt=none goes back at once with login_required.
    let none = b
        .get(&authorize_path(&s.client_id, &[("prompt", "none")]))
        .await;
    let to = location(&none);
    assert_eq!(
        param(&to, "error").as_deref(),
        Some("login_required"),
        "{to}"
    );
    assert_eq!(param(&to, "iss").as_deref(), Some(s.server.url.as_str()));
    // Signed in, not yet consented: consent_required.
    let page = b
        .get(&authorize_path(&s.client_id, &[]))
        .await
        .text()
        .await
        .unwrap();
    let consent = sign_in(&mut b, page, PASSWORD).await.text().await.unwrap();
    let to = location(
        &b.get(&authorize_path(&s.client_id, &[("prompt", "none")]))
            .await,
    );
    assert_eq!(
        param(&to, "error").as_deref(),
        Some("consent_required"),
        "{to}"
    );
    let approve = [
        ("csrf", field(&consent, "csrf")),
        ("request", field(&consent, "request")),
        ("decision", "approve".into()),
    ];
    let approve: Vec<(&str, &str)> = approve.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(
        b.post("/oauth/consent", &approve).await.status(),
        StatusCode::SEE_OTHER
    );
    // Consented: prompt=none gets a code; prompt=consent asks again; prompt=login signs in again.
    let to = location(
        &b.get(&authorize_path(&s.client_id, &[("prompt", "none")]))
            .await,
    );
    assert!(param(&to, "code").is_some(), "{to}");
    // A sign-in older than `max_age` needs another; the ID token's auth_time is the sign-in's, not the
    // code's.
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    let stale = b
        .get(&authorize_path(
            &s.client_id,
            &[("prompt", "none"), ("max_age", "1")],
        ))
        .await;
    let stale = location(&stale);
    assert_eq!(
        param(&stale, "error").as_deref(),
        Some("login_required"),
        "{stale}"
    );
    // The request kept for that sign-in cannot be answered by the old session.
    let page = b
        .get(&authorize_path(&s.client_id, &[("max_age", "1")]))
        .await
        .text()
        .await
        .unwrap();
    assert!(page.contains("name=\"password\""), "a sign-in: {page}");
    let kept = field(&page, "request");
    let old_session = b.get(&format!("/oauth/consent?request={kept}")).await;
    assert_eq!(old_session.status(), StatusCode::FORBIDDEN);
    let bad_age = b
        .get(&authorize_path(&s.client_id, &[("max_age", "soon")]))
        .await;
    assert_eq!(
        param(&location(&bad_age), "error").as_deref(),
        Some("invalid_request")
    );
    let recent = b
        .get(&authorize_path(
            &s.client_id,
            &[("prompt", "none"), ("max_age", "600")],
        ))
        .await;
    let code = param(&location(&recent), "code").expect("a code within max_age");
    let tok: Value = redeem(&s, &code).await.json().await.unwrap();
    let lead = sign_in_lead(&s, &tok).await;
    assert!(
        lead >= 2,
        "signed in {lead} s before the token, not over 2 s"
    );
    let again = b
        .get(&authorize_path(&s.client_id, &[("prompt", "consent")]))
        .await;
    assert_eq!(again.status(), StatusCode::OK);
    assert!(again.text().await.unwrap().contains("decision"));
    let login = b
        .get(&authorize_path(&s.client_id, &[("prompt", "login")]))
        .await;
    assert!(login.text().await.unwrap().contains("name=\"password\""));
    let bad = b
        .get(&authorize_path(&s.client_id, &[("prompt", "none consent")]))
        .await;
    assert_eq!(
        param(&location(&bad), "error").as_deref(),
        Some("invalid_request")
    );
    // The same request as a form POST.
    let query = authorize_path(&s.client_id, &[]);
    let fields: Vec<(String, String)> =
        serde_urlencoded::from_str(query.split_once('?').unwrap().1).unwrap();
    let fields: Vec<(&str, &str)> = fields
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let posted = b.post("/oauth/authorize", &fields).await;
    assert!(param(&location(&posted), "code").is_some());
}

#[tokio::test]
async fn wrong_passwords_slow_the_guesser_and_never_the_owner() {
    // Browsers come through a proxy on loopback, which names their addresses.
    let s = setup_with(|c| c.proxy.trusted_proxies = vec!["127.0.0.1/32".into()]).await;
    let sign_in_page = |from: &str| {
        let mut b = Browser::new(&s.server.url);
        b.forwarded_for = Some(from.to_string());
        let path = authorize_path(&s.client_id, &[]);
        async move {
            let page = b.get(&path).await.text().await.unwrap();
            (b, page)
        }
    };
    let (mut guesser, mut page) = sign_in_page("203.0.113.9").await;
    for _ in 0..5 {
        let refused = sign_in(&mut guesser, page, "wrong password!").await;
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
        page = refused.text().await.unwrap();
    }
    // Past the free ones, the guesser waits, even with the right password.
    let held = sign_in(&mut guesser, page, PASSWORD).await;
    assert_eq!(held.status(), StatusCode::TOO_MANY_REQUESTS);
    let text = held.text().await.unwrap();
    assert!(text.contains("Try again in 1 seconds"), "{text}");
    // The owner, from an address of her own, is not slowed by it.
    let (mut owner, page) = sign_in_page("198.51.100.7").await;
    let consent = sign_in(&mut owner, page, PASSWORD).await;
    assert_eq!(consent.status(), StatusCode::OK);
    assert!(consent.text().await.unwrap().contains("Notebook"));
}

#[tokio::test]
async fn a_fresh_sign_in_does_not_reset_the_wrong_code_limit() {
    // Each session comes from an address of its own (through a proxy on loopback that names them), so
    // no address reaches its own limit: what stops the fifth session is the account's count.
    let s = setup_with(|c| c.proxy.trusted_proxies = vec!["127.0.0.1/32".into()]).await;
    let session = |n: usize| {
        let mut b = Browser::new(&s.server.url);
        b.forwarded_for = Some(format!("203.0.113.{}", n + 1));
        b
    };
    // Four browser sessions of five wrong codes each: each session's own limit, and the account's.
    for n in 0..4 {
        let mut b = session(n);
        let csrf = device_entry(&mut b).await;
        for _ in 0..5 {
            let status = verify_code(&mut b, &csrf, "BBBB-BBBB").await.status();
            assert_eq!(status, StatusCode::BAD_REQUEST, "session {n}");
        }
    }
    let right = &device_user_code(&s).await;
    let mut b = session(4);
    let csrf = device_entry(&mut b).await;
    let r = verify_code(&mut b, &csrf, right).await;
    assert_eq!(
        r.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "a new session starts where the account stands"
    );
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("Too many wrong codes were typed"));
}
