//! OAuth provider benchmark (not a test), beside `GET /health` measured in the same run on the same
//! server (real HTTP on loopback), on the embedded SQLite store and then on PostgreSQL (Debian's, started for
//! the run by `scripts/postgres` unless `SWITCHYARD_TEST_POSTGRES` names one): discovery and JWKS, introspection, the
//! organization token exchange (each writing its grant, token and audit row), and code redemption
//! (each spending a code and issuing an access token, a refresh token and a signed ID token).
//!
//! Run: `cargo bench -p switchyard-server --bench oauth`. `BENCH_SECONDS` sets the time per scenario
//! (default 3); `BENCH_CONNS` the connections (default 16); `BENCH_ONLY=exchange` stops after the token
//! exchange (for profiling it).

// A benchmark or a test may unwrap: a failed one is a failed run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/mod.rs"]
mod common;

use std::sync::Arc;

use common::{header, measure, row, tool, wrk, Figures, Postgres, Wrk};
use serde_json::{json, Value};
use switchyard_server::crypto::{hash_token, random_id};
use switchyard_server::model::account::Scope;
use switchyard_server::model::oauth::{Grant, GrantKind};
use switchyard_server::store::{NewCode, SqlStore, Store, StoreUrl, Synchronous};
use switchyard_server::{Application, Config};

struct Server {
    url: String,
    token: String,
    store_url: String,
    _dir: tempfile::TempDir,
}

/// A server on the embedded SQLite store, or on the PostgreSQL database `store_url`.
async fn start(store_url: Option<String>) -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.store.data_dir = Some(dir.path().to_path_buf());
    config.store.url = store_url;
    config.server.listen = "127.0.0.1:0".parse().expect("addr");
    let app = Application::build(&config).await.expect("build");
    let url = format!("http://{}", app.local_addr());
    tokio::spawn(app.run(std::future::pending()));
    let token = std::fs::read_to_string(dir.path().join("admin-token")).expect("token");
    Server {
        url,
        token: token.trim().to_string(),
        store_url: config.store_url().expect("store url").url(),
        _dir: dir,
    }
}

async fn call(
    http: &reqwest::Client,
    s: &Server,
    method: reqwest::Method,
    path: &str,
    body: Value,
) -> Value {
    let resp = http
        .request(method, format!("{}{path}", s.url))
        .bearer_auth(&s.token)
        .json(&body)
        .send()
        .await
        .expect("setup request");
    assert!(resp.status().is_success(), "{path}: {}", resp.status());
    resp.json().await.unwrap_or(Value::Null)
}

/// `alice` (a member of `acme`), an exchange app bound to `acme`, and alice's confidential app.
async fn accounts(http: &reqwest::Client, s: &Server) -> ((String, String), (String, String)) {
    use reqwest::Method;
    call(
        http,
        s,
        Method::POST,
        "/api/v1/admin/users",
        json!({"name": "alice", "email": "alice@example.com"}),
    )
    .await;
    call(
        http,
        s,
        Method::POST,
        "/api/v1/admin/orgs",
        json!({"name": "acme"}),
    )
    .await;
    call(
        http,
        s,
        Method::PUT,
        "/api/v1/admin/orgs/acme/members/alice",
        json!({"role": "write"}),
    )
    .await;
    let app = |owner: &str, te: bool| {
        json!({"owner": owner, "name": format!("{owner} app"), "redirectUris": ["https://app.example/cb"],
               "scopes": ["openid", "profile", "read-endpoints"], "tokenExchange": te})
    };
    let pair = |v: Value| {
        (
            v["app"]["id"].as_str().expect("id").to_string(),
            v["clientSecret"].as_str().expect("secret").to_string(),
        )
    };
    let exchange = pair(
        call(
            http,
            s,
            Method::POST,
            "/api/v1/oauth/apps",
            app("acme", true),
        )
        .await,
    );
    let web = pair(
        call(
            http,
            s,
            Method::POST,
            "/api/v1/oauth/apps",
            app("admin", false),
        )
        .await,
    );
    (exchange, web)
}

/// `n` authorization codes for the app, written straight into the server's store (as consent would).
async fn codes(s: &Server, app_id: &str, n: usize) -> Vec<String> {
    let url = StoreUrl::parse(&s.store_url).expect("store url");
    let store = SqlStore::open(&url, Synchronous::Normal)
        .await
        .expect("store");
    let user = store
        .read()
        .await
        .expect("read")
        .account_by_name("admin")
        .await
        .expect("admin")
        .expect("admin");
    let now = chrono::Utc::now();
    let mut unit = store.begin().await.expect("begin");
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let grant = Grant {
            id: random_id(),
            app_id: Some(app_id.to_string()),
            user_id: user.id.clone(),
            kind: GrantKind::Code,
            scopes: vec![Scope::Openid, Scope::Profile],
            org_ids: Vec::new(),
            personal: true,
            nonce: Some("n".into()),
            auth_time: now,
            created_at: now,
            revoked_at: None,
        };
        unit.create_grant(&grant).await.expect("grant");
        let code = switchyard_server::oauth::new_secret(switchyard_server::oauth::CODE_PREFIX);
        unit.add_code(&NewCode {
            code_hash: hash_token(&code),
            grant_id: grant.id,
            redirect_uri: "https://app.example/cb".into(),
            code_challenge: None,
            expires_at: now + chrono::Duration::minutes(10),
        })
        .await
        .expect("code");
        out.push(code);
    }
    unit.commit().await.expect("commit");
    out
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "MISS"
    }
}

/// The same scenarios with wrk as the load generator (a C event loop: far less of the two cores than
/// the Rust client above, and how the reference figures were taken): `/health`, the exchange,
/// introspection and code redemption, at the same connections.
struct WrkRun<'a> {
    bin: &'a std::path::Path,
    s: &'a Server,
    conns: usize,
    seconds: f64,
}

fn basic(id: &str, secret: &str) -> String {
    use base64::Engine;
    let pair = format!("{id}:{secret}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

/// A wrk script that POSTs `body` (or, with `codes`, one code of the file per request).
fn post_script(
    dir: &std::path::Path,
    auth: &str,
    body: &str,
    codes: Option<&std::path::Path>,
) -> std::path::PathBuf {
    let head = format!(
        "local h = {{[\"Content-Type\"] = \"application/x-www-form-urlencoded\", [\"Authorization\"] = \"{auth}\"}}\n"
    );
    let script = match codes {
        None => format!("{head}request = function() return wrk.format(\"POST\", nil, h, \"{body}\") end\n"),
        Some(file) => format!(
            "{head}local codes = {{}}\nfor line in io.lines(\"{}\") do codes[#codes + 1] = line end\n\
             local i = 0\nrequest = function()\n  i = i % #codes + 1\n  \
             return wrk.format(\"POST\", nil, h, \"{body}&code=\" .. codes[i])\nend\n",
            file.display()
        ),
    };
    let path = dir.join(format!(
        "post-{}.lua",
        switchyard_server::crypto::random_id()
    ));
    std::fs::write(&path, script).expect("wrk script");
    path
}

impl WrkRun<'_> {
    fn run(&self, path: &str, script: Option<&std::path::Path>) -> Wrk {
        let url = format!("{}{path}", self.s.url);
        let secs = self.seconds.ceil().max(1.0) as u64;
        tokio::task::block_in_place(|| wrk(self.bin, &url, self.conns, secs, None, script))
    }

    fn row(name: &str, w: &Wrk, base: &Wrk) {
        let errs = common::errors_note(w.errors);
        println!(
            "{name:<44} {:>3} {:>10.0} {:>9.3} {:>9.3}  {:>6.1}% of /health{errs}",
            "wrk",
            w.rps,
            w.p50 / 1e3,
            w.p99 / 1e3,
            100.0 * w.rps / base.rps
        );
    }

    async fn token_endpoint(&self, ex_id: &str, ex_secret: &str, web_id: &str, web_secret: &str) {
        let dir = tempfile::tempdir().expect("tempdir");
        println!(
            "\nThe same with wrk as the load generator (1 thread, {} connections):",
            self.conns
        );
        let health = self.run("/health", None);
        println!(
            "{:<44} {:>3} {:>10.0} {:>9.3} {:>9.3}",
            "GET /health (baseline)",
            "wrk",
            health.rps,
            health.p50 / 1e3,
            health.p99 / 1e3
        );
        let ex_body = "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Atoken-exchange\
            &subject_token=alice%40example.com&subject_token_type=urn%3Ahub%3Atoken-type%3Auser-email";
        let ex = post_script(dir.path(), &basic(ex_id, ex_secret), ex_body, None);
        let exchange = self.run("/oauth/token", Some(&ex));
        Self::row("token exchange", &exchange, &health);
        let n = (self.seconds.ceil() as usize * 8000).max(8000);
        let codes = codes(self.s, web_id, n).await;
        let file = dir.path().join("codes.txt");
        std::fs::write(&file, codes.join("\n")).expect("codes");
        let body = "grant_type=authorization_code&redirect_uri=https%3A%2F%2Fapp.example%2Fcb";
        let red = post_script(dir.path(), &basic(web_id, web_secret), body, Some(&file));
        let redemption = self.run("/oauth/token", Some(&red));
        Self::row("code redemption", &redemption, &health);
        println!(
            "  with wrk: token exchange {:.0}/s (target >= 3,000/s) {}; code redemption {:.0}/s (target >= 2,000/s) {}",
            exchange.rps, verdict(exchange.rps >= 3000.0), redemption.rps, verdict(redemption.rps >= 2000.0)
        );
    }
}

/// What one backend did.
struct Results {
    health: Figures,
    disc: Figures,
    jwks: Figures,
    ex: Figures,
    intro: Figures,
    red: Figures,
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let env = |k: &str, d: f64| common::env_number(k).unwrap_or(d);
    let seconds = env("BENCH_SECONDS", 3.0);
    let conns = env("BENCH_CONNS", 16.0) as usize;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()
        .expect("client");
    println!(
        "{conns} connections, {seconds} s per scenario; the load generator shares the 2 cores."
    );
    println!("SQLite: a file in a temp dir (WAL, synchronous = normal). PostgreSQL 15 on loopback, default settings (fsync at each commit).");
    let sqlite = backend("SQLite", &http, seconds, conns, None).await;
    let pg = Postgres::start();
    let postgres = backend(
        "PostgreSQL",
        &http,
        seconds,
        conns,
        Some(pg.database().await),
    )
    .await;
    goals("SQLite (the default)", &sqlite);
    goals("PostgreSQL", &postgres);
}

async fn backend(
    name: &str,
    http: &reqwest::Client,
    seconds: f64,
    conns: usize,
    store_url: Option<String>,
) -> Results {
    let http = http.clone();
    let s = start(store_url).await;
    let ((ex_id, ex_secret), (web_id, web_secret)) = accounts(&http, &s).await;
    header(&format!("{name}: the OAuth provider beside GET /health"));
    let get = |path: &str| {
        let (http, url) = (http.clone(), format!("{}{path}", s.url));
        move |_: usize| http.get(&url)
    };
    let health = measure(conns, seconds, get("/health")).await;
    row("GET /health (baseline)", conns, &health, None);
    let disc = measure(conns, seconds, get("/.well-known/openid-configuration")).await;
    row("discovery", conns, &disc, Some(&health));
    let jwks = measure(conns, seconds, get("/oauth/jwks")).await;
    row("JWKS", conns, &jwks, Some(&health));

    let token_url = format!("{}/oauth/token", s.url);
    let exchange = {
        let (http, url, id, secret) = (
            http.clone(),
            token_url.clone(),
            ex_id.clone(),
            ex_secret.clone(),
        );
        move |_: usize| {
            http.post(&url).basic_auth(&id, Some(&secret)).form(&[
                (
                    "grant_type",
                    "urn:ietf:params:oauth:grant-type:token-exchange",
                ),
                ("subject_token", "alice@example.com"),
                ("subject_token_type", "urn:hub:token-type:user-email"),
            ])
        }
    };
    let ex = measure(conns, seconds, exchange.clone()).await;
    row(
        "token exchange (+ grant, token, audit row)",
        conns,
        &ex,
        Some(&health),
    );

    if std::env::var("BENCH_ONLY").as_deref() == Ok("exchange") {
        std::process::exit(0);
    }
    let issued: Value = exchange(0)
        .send()
        .await
        .expect("exchange")
        .json()
        .await
        .expect("json");
    let access = issued["access_token"].as_str().expect("token").to_string();
    let introspect = {
        let (http, url) = (http.clone(), format!("{}/oauth/introspect", s.url));
        let (id, secret) = (ex_id.clone(), ex_secret.clone());
        move |_: usize| {
            http.post(&url)
                .basic_auth(&id, Some(&secret))
                .form(&[("token", access.as_str())])
        }
    };
    let intro = measure(conns, seconds, introspect).await;
    row("introspection", conns, &intro, Some(&health));

    let n = ((seconds * 6000.0) as usize).max(2000) + 64;
    let codes = Arc::new(codes(&s, &web_id, n).await);
    let redeem = {
        let (http, url, codes) = (http.clone(), token_url.clone(), codes.clone());
        let (web_id, web_secret) = (web_id.clone(), web_secret.clone());
        move |i: usize| {
            // The warm-up (i = usize::MAX - 1) spends the last code; a run that got that far
            // has run out and counts replays as errors.
            let code = codes[i.min(codes.len() - 1)].clone();
            http.post(&url)
                .basic_auth(&web_id, Some(&web_secret))
                .form(&[
                    ("grant_type", "authorization_code"),
                    ("code", code.as_str()),
                    ("redirect_uri", "https://app.example/cb"),
                ])
        }
    };
    let red = measure(conns, seconds, redeem).await;
    row(
        "code redemption (+ ES256 ID token)",
        conns,
        &red,
        Some(&health),
    );

    if let Some(bin) = tool("wrk", "wrk") {
        let w = WrkRun {
            bin: &bin,
            s: &s,
            conns,
            seconds,
        };
        w.token_endpoint(&ex_id, &ex_secret, &web_id, &web_secret)
            .await;
    }
    Results {
        health,
        disc,
        jwks,
        ex,
        intro,
        red,
    }
}

fn goals(name: &str, r: &Results) {
    let share = |f: &Figures| f.rps / r.health.rps;
    let (disc, jwks, intro, ex, red) = (&r.disc, &r.jwks, &r.intro, &r.ex, &r.red);
    println!("\nGoals on {name} (2-core machine):");

    println!(
        "  discovery {:.2}x /health, JWKS {:.2}x (target >= 0.8x)  {}",
        share(disc),
        share(jwks),
        verdict(share(disc) >= 0.8 && share(jwks) >= 0.8)
    );
    println!(
        "  introspection {:.0}/s (target >= 8,000/s)  {}",
        intro.rps,
        verdict(intro.rps >= 8000.0)
    );
    println!("  token exchange {:.0}/s (target >= 3,000/s; node-oidc-provider's client credentials, in memory, did 3,300/s on this kind of machine)  {}", ex.rps, verdict(ex.rps >= 3000.0));
    println!(
        "  code redemption {:.0}/s (target >= 2,000/s)  {}",
        red.rps,
        verdict(red.rps >= 2000.0)
    );
}
