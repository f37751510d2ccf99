//! A real server on 127.0.0.1:0 with its own data dir, and clients for it.

#![allow(dead_code)]

pub mod browser;

use std::path::PathBuf;

use serde_json::{json, Value};
use switchyard_server::client::Client;
use switchyard_server::{Application, Config};

pub struct TestServer {
    pub url: String,
    /// The server's store, to look at (or break) what it stored.
    pub store_url: String,
    pub admin: Client,
    pub data_dir: PathBuf,
    _dir: tempfile::TempDir,
}

/// The test engine, built with the workspace (`cargo test --workspace` builds every member's binaries).
pub fn engine_bin() -> String {
    let exe = std::env::current_exe().expect("test exe");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let bin = dir.join("switchyard-test-engine");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --workspace` first",
        bin.display()
    );
    bin.display().to_string()
}

/// The PostgreSQL server the store tests may use (`SWITCHYARD_TEST_POSTGRES`, a URL whose user may
/// create databases); `./scripts/test` starts one and sets it.
/// In CI (`CI` set) it must be there: the PostgreSQL half of a test never passes by being skipped.
pub fn postgres_admin_url() -> Option<String> {
    let url = std::env::var("SWITCHYARD_TEST_POSTGRES")
        .ok()
        .filter(|u| !u.is_empty());
    assert!(
        url.is_some() || std::env::var_os("CI").is_none(),
        "CI runs the store's tests on PostgreSQL too: ./scripts/test sets SWITCHYARD_TEST_POSTGRES"
    );
    url
}

/// Whether this process runs as root, which `what` needs. In CI (`CI` set) it must: `.ci/run` runs the suite
/// as root, and a test that needs root never passes there by being skipped. Elsewhere it says it skipped.
pub fn runs_as_root(what: &str) -> bool {
    // SAFETY: geteuid only reads the calling process's effective user id; it cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root || std::env::var_os("CI").is_none(),
        "{what} needs root, and CI runs the suite as root"
    );
    if !root {
        eprintln!("skipped: {what} needs root");
    }
    root
}

/// A new, empty PostgreSQL database on the test server, by URL.
pub async fn fresh_postgres(admin_url: &str) -> String {
    use sqlx::Executor;
    sqlx::any::install_default_drivers();
    let name = format!(
        "sy_{}",
        switchyard_server::crypto::random_id().to_lowercase()
    );
    let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(admin_url)
        .await
        .expect("connect to the test PostgreSQL");
    conn.execute(format!("CREATE DATABASE {name}").as_str())
        .await
        .expect("create a test database");
    let base = admin_url.rsplit_once('/').map_or(admin_url, |(b, _)| b);
    format!("{base}/{name}")
}

/// The store a test server uses: a fresh PostgreSQL database when `SWITCHYARD_TEST_STORE=postgres`
/// (the suite's second pass), else the SQLite file in the data dir.
pub async fn test_store_url() -> Option<String> {
    if std::env::var("SWITCHYARD_TEST_STORE").as_deref() != Ok("postgres") {
        return None;
    }
    let admin = postgres_admin_url()
        .expect("SWITCHYARD_TEST_STORE=postgres needs SWITCHYARD_TEST_POSTGRES");
    Some(fresh_postgres(&admin).await)
}

pub async fn spawn() -> TestServer {
    spawn_with(|_| {}).await
}

/// A server whose config the test changes first (after the data dir, store and listener are set).
pub async fn spawn_with(configure: impl FnOnce(&mut Config)) -> TestServer {
    spawn_with_clock(
        configure,
        std::sync::Arc::new(switchyard_server::clock::SystemClock),
    )
    .await
}

/// [`spawn_with`] on a clock of the test's (a `ManualClock` it moves).
pub async fn spawn_with_clock(
    configure: impl FnOnce(&mut Config),
    clock: std::sync::Arc<dyn switchyard_server::clock::Clock>,
) -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.store.data_dir = Some(dir.path().to_path_buf());
    config.store.url = test_store_url().await;
    config.server.listen = "127.0.0.1:0".parse().expect("addr");
    // Managed images start the test engine, told to stay unhealthy: these tests see endpoints that exist
    // and start, never a `failed` one for want of a launcher.
    config.runtime.launchers.insert(
        "hub".into(),
        switchyard_server::config::Launcher {
            command: vec![
                engine_bin(),
                "--port".into(),
                "{port}".into(),
                "--fail-health".into(),
            ],
            ..Default::default()
        },
    );
    // `SWITCHYARD_TEST_OWN_PATH=false` (the proxy's tests' second pass) sends every request through the
    // proxy's general path; a test that sets `proxy.own_path` itself has its way.
    config.proxy.own_path = std::env::var("SWITCHYARD_TEST_OWN_PATH").as_deref() != Ok("false");
    configure(&mut config);
    let app = Application::build_with_clock(&config, clock)
        .await
        .expect("build");
    let url = format!("http://{}", app.local_addr());
    tokio::spawn(app.run(std::future::pending()));
    let token = std::fs::read_to_string(dir.path().join("admin-token")).expect("admin token");
    TestServer {
        admin: Client::new(&url, Some(token.trim().to_string())),
        store_url: config.store_url().expect("store url").url(),
        url,
        data_dir: dir.path().to_path_buf(),
        _dir: dir,
    }
}

impl TestServer {
    /// A second connection to the server's own store, to look at (or break) what it stored.
    pub async fn db(&self) -> sqlx::AnyPool {
        sqlx::any::install_default_drivers();
        sqlx::AnyPool::connect(&self.store_url)
            .await
            .expect("open the store")
    }

    /// The server's store, opened beside it.
    pub async fn store(&self) -> switchyard_server::store::SqlStore {
        let url = switchyard_server::store::StoreUrl::parse(&self.store_url).expect("store url");
        switchyard_server::store::SqlStore::open(
            &url,
            switchyard_server::store::Synchronous::Normal,
        )
        .await
        .expect("open the store")
    }

    pub fn anonymous(&self) -> Client {
        Client::new(&self.url, None)
    }

    /// A new user with an unrestricted token, or one restricted to `scopes`.
    pub async fn user(&self, name: &str, scopes: Option<&[&str]>) -> Client {
        let _: Value = self
            .admin
            .admin_create_user(&json!({ "name": name }))
            .await
            .expect("create user");
        self.token_for(name, scopes).await
    }

    pub async fn token_for(&self, name: &str, scopes: Option<&[&str]>) -> Client {
        let body = match scopes {
            Some(s) => json!({ "scopes": s }),
            None => json!({}),
        };
        let token = self
            .admin
            .admin_create_token(name, &body)
            .await
            .expect("token");
        Client::new(&self.url, Some(token))
    }
}

/// A valid endpoint body in the shape the Python client sends.
pub fn endpoint_body(name: &str) -> Value {
    json!({
        "compute": {
            "accelerator": "cpu",
            "instanceSize": "x2",
            "instanceType": "intel-icl",
            "scaling": { "maxReplica": 2, "minReplica": 0, "scaleToZeroTimeout": null }
        },
        "model": {
            "framework": "pytorch",
            "repository": "sentence-transformers/all-MiniLM-L6-v2",
            "revision": null,
            "task": "sentence-embeddings",
            "image": { "huggingface": {} }
        },
        "name": name,
        "provider": { "region": "us-east-1", "vendor": "aws" },
        "type": "authenticated"
    })
}
