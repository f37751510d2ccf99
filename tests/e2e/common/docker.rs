//! The Docker Engine and registries `scripts/docker` sets up, images of the test engine built and pushed to
//! them, and a server on the Docker provider: shared by the Docker end-to-end tests.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use serde_json::{json, Value};

use super::{engine_bin, serve_with, Server};

/// The engine and registries `scripts/docker` set up, and this test's use of the engine (until dropped).
pub struct Docker {
    pub host: String,
    pub registry: String,
    pub auth_registry: String,
    pub user: String,
    pub password: String,
    _engine: EngineUse,
}

/// The Docker tests are one test binary with the other end-to-end tests, run in parallel: the tests that run
/// containers share the engine, and the one that stops and starts it (`e2e_docker_engine`) takes it alone,
/// so that no other test finds it gone under it (each waits for the other).
static ENGINE: RwLock<()> = RwLock::new(());

enum EngineUse {
    Shared(RwLockReadGuard<'static, ()>),
    Alone(RwLockWriteGuard<'static, ()>),
}

/// The Docker setup, or `None` (with why) when there is none outside CI; the engine shared with the other
/// tests that run containers.
pub fn docker_env(test: &str) -> Option<Docker> {
    docker_env_as(test, false)
}

/// [`docker_env`], with the engine to this test alone (to stop and start it) once the tests sharing it are
/// done.
pub fn docker_env_alone(test: &str) -> Option<Docker> {
    docker_env_as(test, true)
}

fn docker_env_as(test: &str, alone: bool) -> Option<Docker> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let found = (|| {
        Some((
            var("SWITCHYARD_TEST_DOCKER_HOST")?,
            var("SWITCHYARD_TEST_REGISTRY")?,
            var("SWITCHYARD_TEST_AUTH_REGISTRY")?,
            var("SWITCHYARD_TEST_REGISTRY_USER")?,
            var("SWITCHYARD_TEST_REGISTRY_PASSWORD")?,
        ))
    })();
    let what = "a Docker Engine and registries (scripts/docker)";
    super::needs(found.is_some(), test, what);
    let (host, registry, auth_registry, user, password) = found?;
    // A test that failed holding the engine poisons the lock; the others still run.
    let engine = if alone {
        EngineUse::Alone(ENGINE.write().unwrap_or_else(PoisonError::into_inner))
    } else {
        EngineUse::Shared(ENGINE.read().unwrap_or_else(PoisonError::into_inner))
    };
    Some(Docker {
        host,
        registry,
        auth_registry,
        user,
        password,
        _engine: engine,
    })
}

impl Docker {
    /// Runs the docker CLI on the test engine, with `config` as its client config dir; returns stdout.
    pub fn run(&self, config: &Path, args: &[&str]) -> String {
        let out = Command::new("docker")
            .arg("--config")
            .arg(config)
            .args(args)
            .env("DOCKER_HOST", &self.host)
            .env("DOCKER_BUILDKIT", "0")
            .output()
            .expect("run docker");
        assert!(
            out.status.success(),
            "docker {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// What a container wrote on its stderr (the test engine says what it probed there).
    pub fn stderr_of(&self, container: &serde_json::Value) -> String {
        let id = container["Id"].as_str().expect("a container id");
        let out = Command::new("docker")
            .args(["logs", id])
            .env("DOCKER_HOST", &self.host)
            .output()
            .expect("docker logs");
        String::from_utf8_lossy(&out.stderr).to_string()
    }

    /// `docker inspect` of each container of the endpoint `name` (running or not; one removed between the
    /// listing and its inspection is left out).
    pub fn containers(&self, config: &Path, name: &str) -> Vec<Value> {
        let ids = self.run(
            config,
            &[
                "ps",
                "-aq",
                "--filter",
                &format!("label=dev.switchyard.endpoint={name}"),
            ],
        );
        ids.lines()
            .filter_map(|id| {
                let out = Command::new("docker")
                    .arg("--config")
                    .arg(config)
                    .args(["inspect", id])
                    .env("DOCKER_HOST", &self.host)
                    .output()
                    .expect("run docker");
                let all: Value = serde_json::from_slice(&out.stdout).ok()?;
                Some(all.get(0)?.clone())
            })
            .collect()
    }
}

/// Builds an image of the test engine (the binary and the libraries it links, on `scratch`), pushes it as
/// `reference` and removes it from the engine, so a replica of it must be pulled.
pub fn push_engine_image(docker: &Docker, config: &Path, reference: &str) {
    let ctx = tempfile::tempdir().expect("context");
    let root = ctx.path();
    std::fs::copy(engine_bin(), root.join("engine")).expect("copy engine");
    let ldd = Command::new("ldd").arg(engine_bin()).output().expect("ldd");
    for lib in String::from_utf8_lossy(&ldd.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
    {
        let to = root.join(lib.trim_start_matches('/'));
        std::fs::create_dir_all(to.parent().expect("lib dir")).expect("lib dir");
        std::fs::copy(lib, &to).expect("copy lib");
    }
    std::fs::write(
        root.join("Dockerfile"),
        "FROM scratch\nCOPY . /\nENTRYPOINT [\"/engine\", \"--host\", \"0.0.0.0\"]\n",
    )
    .expect("Dockerfile");
    let ctx_path = root.display().to_string();
    docker.run(config, &["build", "-q", "-t", reference, &ctx_path]);
    docker.run(config, &["push", reference]);
    docker.run(config, &["rmi", reference]);
}

pub fn suffix() -> String {
    format!("{:x}", rand_u32())
}

pub fn rand_u32() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    t ^ std::process::id().rotate_left(16)
}

/// A server on the Docker provider, with its admin token.
pub struct Running {
    pub server: Server,
    pub token: String,
}

pub fn serve_docker(data_dir: &Path, config: &Path) -> Running {
    let server = serve_with(data_dir, &["--config".as_ref(), config.as_os_str()]);
    let token = std::fs::read_to_string(data_dir.join("admin-token"))
        .expect("token")
        .trim()
        .to_string();
    Running { server, token }
}

/// A config for a server on the Docker provider; `extra` is appended (after `[runtime.docker]`); `top` goes
/// before `[runtime]` (other sections).
pub fn write_config(dir: &Path, docker: &Docker, network: &str, extra: &str) -> PathBuf {
    write_config_with(dir, docker, network, "", extra)
}

pub fn write_config_with(
    dir: &Path,
    docker: &Docker,
    network: &str,
    top: &str,
    extra: &str,
) -> PathBuf {
    let path = dir.join("config.toml");
    std::fs::write(
        &path,
        format!(
            "{top}\n[runtime]\ntick_ms = 100\nstop_grace_ms = 1000\nbackoff_initial_ms = 200\nprovider = \"docker\"\n\n\
             [runtime.docker]\nhost = \"{}\"\nnetwork = \"{network}\"\n{extra}",
            docker.host
        ),
    )
    .expect("config");
    path
}

pub fn endpoint(name: &str, image: Value, args: Vec<String>) -> Value {
    json!({
        "name": name, "type": "public",
        "provider": {"vendor": "aws", "region": "us-east-1"},
        "compute": {"accelerator": "cpu", "instanceType": "intel-icl", "instanceSize": "x2",
                    "scaling": {"minReplica": 1, "maxReplica": 2}},
        "model": {"repository": "test/engine", "framework": "custom", "image": image, "args": args},
        // The test engine needs no model; a test that mounts one says so.
        "experimentalFeatures": {"skipRepoDownload": true},
    })
}

pub async fn create(http: &reqwest::Client, r: &Running, body: &Value) {
    create_at(http, &r.server.url, &r.token, body).await
}

/// Creates an endpoint in the admin namespace through the server at `url`.
pub async fn create_at(http: &reqwest::Client, url: &str, token: &str, body: &Value) {
    let created = http
        .post(format!("{url}/v2/endpoint/admin"))
        .bearer_auth(token)
        .json(body)
        .send()
        .await
        .expect("create");
    assert_eq!(
        created.status(),
        200,
        "{}",
        created.text().await.unwrap_or_default()
    );
}

pub async fn get(http: &reqwest::Client, r: &Running, name: &str) -> Value {
    http.get(format!("{}/v2/endpoint/admin/{name}", r.server.url))
        .bearer_auth(&r.token)
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json")
}

/// Polls the endpoint until `done` holds of it; panics with its last state after two minutes.
pub async fn wait_for(
    http: &reqwest::Client,
    r: &Running,
    name: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let mut last = Value::Null;
    for _ in 0..1200 {
        last = get(http, r, name).await;
        if done(&last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{name} never became {what}: {}", last["status"]);
}

pub async fn embed(http: &reqwest::Client, r: &Running, name: &str) -> reqwest::StatusCode {
    http.post(format!("{}/endpoints/admin/{name}/embed", r.server.url))
        .json(&json!({"inputs": "x"}))
        .send()
        .await
        .expect("embed")
        .status()
}

/// Waits until a request through the proxy is answered 200 (the status read from the store may be the
/// previous server's).
pub async fn serves(http: &reqwest::Client, r: &Running, name: &str) {
    serves_at(http, &r.server.url, name).await
}

/// Waits until a request through the proxy of the server at `url` is answered 200.
pub async fn serves_at(http: &reqwest::Client, url: &str, name: &str) {
    for _ in 0..600 {
        let res = http
            .post(format!("{url}/endpoints/admin/{name}/embed"))
            .json(&json!({"inputs": "x"}))
            .send()
            .await;
        if res.is_ok_and(|r| r.status() == 200) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{name} is not served through {url}");
}

pub fn ready(n: u64) -> impl Fn(&Value) -> bool {
    move |ep| ep["status"]["state"] == "running" && ep["status"]["readyReplica"] == n
}

pub async fn update(http: &reqwest::Client, r: &Running, name: &str, body: Value) {
    let res = http
        .put(format!("{}/v2/endpoint/admin/{name}", r.server.url))
        .bearer_auth(&r.token)
        .json(&body)
        .send()
        .await
        .expect("update");
    assert_eq!(
        res.status(),
        200,
        "{}",
        res.text().await.unwrap_or_default()
    );
}

pub async fn post(http: &reqwest::Client, r: &Running, path: &str) {
    let res = http
        .post(format!("{}{path}", r.server.url))
        .bearer_auth(&r.token)
        .send()
        .await
        .expect("post");
    assert_eq!(
        res.status(),
        200,
        "{path}: {}",
        res.text().await.unwrap_or_default()
    );
}

/// Deletes the endpoint `name` through the API.
pub async fn delete_endpoint(http: &reqwest::Client, r: &Running, name: &str) {
    let res = http
        .delete(format!("{}/v2/endpoint/admin/{name}", r.server.url))
        .bearer_auth(&r.token)
        .send()
        .await
        .expect("delete");
    assert!(res.status().is_success(), "delete {name}: {}", res.status());
}

/// Waits (ten seconds at most) until the endpoint `name` has no container; whether it has none.
pub async fn gone(docker: &Docker, cli: &Path, name: &str) -> bool {
    for _ in 0..100 {
        if docker.containers(cli, name).is_empty() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    docker.containers(cli, name).is_empty()
}

/// The end of a test: its endpoints deleted (their containers gone, or it fails), its server stopped, its
/// network removed.
pub async fn tear_down(
    http: &reqwest::Client,
    r: Running,
    docker: &Docker,
    cli: &Path,
    network: &str,
    names: &[&str],
) {
    for name in names {
        delete_endpoint(http, &r, name).await;
        assert!(
            gone(docker, cli, name).await,
            "containers of {name} left after delete"
        );
    }
    drop(r);
    remove_network(docker, network);
}

/// Removes a test's networks (the admin namespace's bridge under `network`), once their containers are
/// gone; left alone if some are not.
pub fn remove_network(docker: &Docker, network: &str) {
    let _ = Command::new("docker")
        .args(["network", "rm", &format!("{network}-admin")])
        .env("DOCKER_HOST", &docker.host)
        .output();
}

/// One test's place on the engine: a scratch dir, a docker client config, a name suffix of its own, the test
/// engine's image pushed to the open registry as `switchyard-<what>-<tag>:v1`, and a network.
pub struct Scene {
    pub dir: tempfile::TempDir,
    pub cli: PathBuf,
    pub tag: String,
    pub image: String,
    pub network: String,
}

impl Scene {
    pub fn new(docker: &Docker, what: &str) -> Scene {
        let dir = tempfile::tempdir().expect("tempdir");
        let cli = dir.path().join("docker-cli");
        let tag = suffix();
        let image = format!("{}/switchyard-{what}-{tag}:v1", docker.registry);
        push_engine_image(docker, &cli, &image);
        let network = format!("switchyard-test-{tag}");
        Scene {
            dir,
            cli,
            tag,
            image,
            network,
        }
    }
}
