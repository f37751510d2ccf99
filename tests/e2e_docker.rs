//! The real `switchyard` binary on a real Docker Engine (`[runtime] provider = "docker"`), with images the
//! test builds itself (`FROM scratch` with the workspace's test engine), pushed to registries on loopback
//! and removed from the engine, so the provider must pull them. `scripts/test` starts the engine and the
//! registries (`scripts/docker`); without them the tests say so, and fail under `CI`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

mod common;
use common::{serve_with, Server};

/// The engine and registries `scripts/docker` set up.
struct Docker {
    host: String,
    registry: String,
    auth_registry: String,
    user: String,
    password: String,
}

/// The Docker setup, or `None` (with why) when there is none outside CI.
fn docker_env(test: &str) -> Option<Docker> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let found = (|| {
        Some(Docker {
            host: var("SWITCHYARD_TEST_DOCKER_HOST")?,
            registry: var("SWITCHYARD_TEST_REGISTRY")?,
            auth_registry: var("SWITCHYARD_TEST_AUTH_REGISTRY")?,
            user: var("SWITCHYARD_TEST_REGISTRY_USER")?,
            password: var("SWITCHYARD_TEST_REGISTRY_PASSWORD")?,
        })
    })();
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{test} needs a Docker Engine and registries: ./scripts/test sets them up (scripts/docker)"
        );
        eprintln!("{test}: skipped, no Docker Engine (run ./scripts/test, which starts one)");
    }
    found
}

impl Docker {
    /// Runs the docker CLI on the test engine, with `config` as its client config dir; returns stdout.
    fn run(&self, config: &Path, args: &[&str]) -> String {
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

    /// `docker inspect` of each container of the endpoint `name` (running or not).
    fn containers(&self, config: &Path, name: &str) -> Vec<Value> {
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
            .map(|id| {
                let text = self.run(config, &["inspect", id]);
                let all: Value = serde_json::from_str(&text).expect("inspect json");
                all[0].clone()
            })
            .collect()
    }
}

fn engine_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let bin = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("switchyard-test-engine");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --workspace` first",
        bin.display()
    );
    bin
}

/// Builds an image of the test engine (the binary and the libraries it links, on `scratch`), pushes it as
/// `reference` and removes it from the engine, so a replica of it must be pulled.
fn push_engine_image(docker: &Docker, config: &Path, reference: &str) {
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

fn suffix() -> String {
    format!("{:x}", rand_u32())
}

fn rand_u32() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    t ^ std::process::id().rotate_left(16)
}

/// A server on the Docker provider, with its admin token.
struct Running {
    server: Server,
    token: String,
}

fn serve_docker(data_dir: &Path, config: &Path) -> Running {
    let server = serve_with(data_dir, &["--config".as_ref(), config.as_os_str()]);
    let token = std::fs::read_to_string(data_dir.join("admin-token"))
        .expect("token")
        .trim()
        .to_string();
    Running { server, token }
}

fn write_config(dir: &Path, docker: &Docker, network: &str, extra: &str) -> PathBuf {
    let path = dir.join("config.toml");
    std::fs::write(
        &path,
        format!(
            "[runtime]\ntick_ms = 100\nstop_grace_ms = 1000\nbackoff_initial_ms = 200\nprovider = \"docker\"\n\n\
             [runtime.docker]\nhost = \"{}\"\nnetwork = \"{network}\"\n{extra}",
            docker.host
        ),
    )
    .expect("config");
    path
}

fn endpoint(name: &str, image: Value, args: Vec<String>) -> Value {
    json!({
        "name": name, "type": "public",
        "provider": {"vendor": "aws", "region": "us-east-1"},
        "compute": {"accelerator": "cpu", "instanceType": "intel-icl", "instanceSize": "x2",
                    "scaling": {"minReplica": 1, "maxReplica": 2}},
        "model": {"repository": "test/engine", "framework": "custom", "image": image, "args": args},
    })
}

async fn create(http: &reqwest::Client, r: &Running, body: &Value) {
    let created = http
        .post(format!("{}/v2/endpoint/admin", r.server.url))
        .bearer_auth(&r.token)
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

async fn get(http: &reqwest::Client, r: &Running, name: &str) -> Value {
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
async fn wait_for(
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

async fn embed(http: &reqwest::Client, r: &Running, name: &str) -> reqwest::StatusCode {
    http.post(format!("{}/endpoints/admin/{name}/embed", r.server.url))
        .json(&json!({"inputs": "x"}))
        .send()
        .await
        .expect("embed")
        .status()
}

/// Waits until a request through the proxy is answered 200 (the status read from the store may be the
/// previous server's).
async fn serves(http: &reqwest::Client, r: &Running, name: &str) {
    for _ in 0..600 {
        if embed(http, r, name).await == 200 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{name} never served");
}

fn ready(n: u64) -> impl Fn(&Value) -> bool {
    move |ep| ep["status"]["state"] == "running" && ep["status"]["readyReplica"] == n
}

async fn update(http: &reqwest::Client, r: &Running, name: &str, body: Value) {
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

async fn post(http: &reqwest::Client, r: &Running, path: &str) {
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

/// A replica's container: pulled, confined, served through the proxy, scaled 1 → 2 → 0 and woken by a
/// held request; adopted as it is by a server restarted after a kill -9; gone with its volume on delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_replica_is_pulled_confined_served_scaled_adopted_and_deleted() {
    let Some(docker) =
        docker_env("a_container_replica_is_pulled_confined_served_scaled_adopted_and_deleted")
    else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let cli = dir.path().join("docker-cli");
    let tag = suffix();
    let image = format!("{}/switchyard-test-engine-{tag}:v1", docker.registry);
    push_engine_image(&docker, &cli, &image);
    let data_dir = dir.path().join("data");
    let network = format!("switchyard-test-{tag}");
    let config = write_config(dir.path(), &docker, &network, "");
    let http = reqwest::Client::new();
    let r = serve_docker(&data_dir, &config);
    let name = format!("box-{tag}");
    // The replica probes the server's files from inside its container.
    let probes = ["secret.key", "admin-token", "."].map(|f| data_dir.join(f).display().to_string());
    let args: Vec<String> = probes
        .iter()
        .flat_map(|p| ["--probe".to_string(), p.clone()])
        .collect();
    create(
        &http,
        &r,
        &endpoint(&name, json!({"custom": {"url": image, "port": 8080}}), args),
    )
    .await;
    wait_for(&http, &r, &name, "running", ready(1)).await;
    assert_eq!(embed(&http, &r, &name).await, 200);

    // Confined, labelled, limited, reached on the bridge, nothing of the server's mounted.
    let first = docker.containers(&cli, &name);
    assert_eq!(first.len(), 1, "one container");
    let c = &first[0];
    let host = &c["HostConfig"];
    assert_eq!(host["CapDrop"], json!(["ALL"]));
    assert_eq!(host["SecurityOpt"], json!(["no-new-privileges"]));
    assert_eq!(host["ReadonlyRootfs"], true);
    assert!(host["Tmpfs"]["/tmp"].is_string(), "{host}");
    assert!(host["PidsLimit"].as_i64().is_some_and(|n| n > 0), "{host}");
    assert!(host["NanoCpus"].as_i64().is_some_and(|n| n > 0), "{host}");
    assert!(host["Memory"].as_i64().is_some_and(|n| n > 0), "{host}");
    assert_eq!(host["NetworkMode"], json!(network));
    assert!(
        host["PortBindings"]
            .as_object()
            .is_none_or(|p| p.is_empty()),
        "nothing published: {host}"
    );
    let mounts = c["Mounts"].as_array().expect("mounts");
    assert_eq!(mounts.len(), 1, "only its cache volume: {mounts:?}");
    assert_eq!(
        (
            mounts[0]["Type"].as_str(),
            mounts[0]["Destination"].as_str()
        ),
        (Some("volume"), Some("/data"))
    );
    let volume = mounts[0]["Name"].as_str().expect("volume name").to_string();
    assert_eq!(c["Config"]["Labels"]["dev.switchyard.namespace"], "admin");
    let logs = Command::new("docker")
        .args(["logs", c["Id"].as_str().expect("id")])
        .env("DOCKER_HOST", &docker.host)
        .output()
        .expect("docker logs");
    // The engine says what it probed on its stderr.
    let logs = String::from_utf8_lossy(&logs.stderr).to_string();
    for p in &probes {
        let line = logs
            .lines()
            .find(|l| l.starts_with(&format!("probe {p}:")))
            .unwrap_or_else(|| panic!("no probe of {p}: {logs}"));
        assert!(line.contains("No such file or directory"), "{line}");
    }

    // kill -9 of the server: the container runs on, and the next server adopts it as it is.
    let mut server = r.server;
    server.child.kill().expect("kill -9");
    server.child.wait().expect("wait");
    let id = c["Id"].as_str().expect("id").to_string();
    let started_at = c["State"]["StartedAt"].clone();
    let r = serve_docker(&data_dir, &config);
    serves(&http, &r, &name).await;
    let adopted = docker.containers(&cli, &name);
    assert_eq!(adopted.len(), 1, "adopted, not replaced");
    assert_eq!(adopted[0]["Id"], json!(id));
    assert_eq!(
        adopted[0]["State"]["StartedAt"], started_at,
        "never restarted"
    );

    // 1 → 2 → 0, and a request held through the wake-up.
    update(
        &http,
        &r,
        &name,
        json!({"compute": {"scaling": {"minReplica": 2, "maxReplica": 2}}}),
    )
    .await;
    wait_for(&http, &r, &name, "two replicas", ready(2)).await;
    assert_eq!(docker.containers(&cli, &name).len(), 2);
    update(
        &http,
        &r,
        &name,
        json!({"compute": {"scaling": {"minReplica": 0, "maxReplica": 2}}}),
    )
    .await;
    post(
        &http,
        &r,
        &format!("/v2/endpoint/admin/{name}/scale-to-zero"),
    )
    .await;
    wait_for(&http, &r, &name, "scaled to zero", |ep| {
        ep["status"]["state"] == "scaledToZero"
    })
    .await;
    for _ in 0..100 {
        if docker.containers(&cli, &name).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        docker.containers(&cli, &name).is_empty(),
        "no container at zero"
    );
    let woken = http
        .post(format!("{}/endpoints/admin/{name}/embed", r.server.url))
        .header("X-Scale-Up-Timeout", "120")
        .json(&json!({"inputs": "x"}))
        .send()
        .await
        .expect("embed");
    assert_eq!(woken.status(), 200, "held until woken");
    assert_eq!(docker.containers(&cli, &name).len(), 1);

    // Delete: no container and no volume left.
    let res = http
        .delete(format!("{}/v2/endpoint/admin/{name}", r.server.url))
        .bearer_auth(&r.token)
        .send()
        .await
        .expect("delete");
    assert!(res.status().is_success(), "{}", res.status());
    let volumes: Vec<String> = docker
        .containers(&cli, &name)
        .iter()
        .flat_map(|c| c["Mounts"].as_array().cloned().unwrap_or_default())
        .filter_map(|m| m["Name"].as_str().map(str::to_string))
        .chain([volume])
        .collect();
    for _ in 0..100 {
        if docker.containers(&cli, &name).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        docker.containers(&cli, &name).is_empty(),
        "containers left after delete"
    );
    let left = docker.run(&cli, &["volume", "ls", "-q"]);
    for v in &volumes {
        assert!(
            !left.lines().any(|l| l == v),
            "volume {v} left after delete"
        );
    }
    drop(r);
    docker.run(&cli, &["network", "rm", &network]);
}

/// A tag that does not exist fails the endpoint naming it; a registry that wants credentials is pulled from
/// with the spec's own or the configured ones, and refuses wrong ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_tags_fail_and_private_registries_take_credentials() {
    let Some(docker) = docker_env("missing_tags_fail_and_private_registries_take_credentials")
    else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let cli = dir.path().join("docker-cli");
    let tag = suffix();
    let private = format!("{}/switchyard-private-{tag}:v1", docker.auth_registry);
    docker.run(
        &cli,
        &[
            "login",
            "-u",
            &docker.user,
            "-p",
            &docker.password,
            &docker.auth_registry,
        ],
    );
    push_engine_image(&docker, &cli, &private);
    let network = format!("switchyard-test-{tag}");
    let extra = format!(
        "\n[runtime.docker.registries.\"{}\"]\nusername = \"{}\"\npassword = \"{}\"\n",
        docker.auth_registry, docker.user, docker.password
    );
    let configured = write_config(dir.path(), &docker, &network, &extra);
    let http = reqwest::Client::new();
    let r = serve_docker(&dir.path().join("data"), &configured);

    let missing = format!("{}/switchyard-test-engine-{tag}:nope", docker.registry);
    create(
        &http,
        &r,
        &endpoint(
            &format!("missing-{tag}"),
            json!({"custom": {"url": missing, "port": 8080}}),
            vec![],
        ),
    )
    .await;
    let ep = wait_for(&http, &r, &format!("missing-{tag}"), "failed", |ep| {
        ep["status"]["state"] == "failed"
    })
    .await;
    let message = ep["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&missing) && message.contains("not found"),
        "{message}"
    );

    // The configured credentials for the registry.
    create(
        &http,
        &r,
        &endpoint(
            &format!("configured-{tag}"),
            json!({"custom": {"url": private, "port": 8080}}),
            vec![],
        ),
    )
    .await;
    wait_for(&http, &r, &format!("configured-{tag}"), "running", ready(1)).await;
    assert_eq!(embed(&http, &r, &format!("configured-{tag}")).await, 200);
    drop(r);
    for c in docker.containers(&cli, &format!("configured-{tag}")) {
        docker.run(&cli, &["rm", "-f", "-v", c["Id"].as_str().expect("id")]);
    }
    docker.run(&cli, &["rmi", &private]);

    // The spec's own, on a server with none configured; wrong ones are refused, and nothing leaks them.
    std::fs::create_dir_all(dir.path().join("plain")).expect("dir");
    let plain = write_config(&dir.path().join("plain"), &docker, &network, "");
    let r = serve_docker(&dir.path().join("data2"), &plain);
    let own = |password: &str| {
        json!({"custom": {"url": private, "port": 8080,
               "credentials": {"username": docker.user, "password": password}}})
    };
    create(
        &http,
        &r,
        &endpoint(&format!("wrong-{tag}"), own("not-the-password"), vec![]),
    )
    .await;
    let ep = wait_for(&http, &r, &format!("wrong-{tag}"), "failed", |ep| {
        ep["status"]["state"] == "failed"
    })
    .await;
    let message = ep["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&private) && message.to_lowercase().contains("unauthorized"),
        "{message}"
    );
    assert!(!message.contains("not-the-password"), "{message}");
    create(
        &http,
        &r,
        &endpoint(&format!("own-{tag}"), own(&docker.password), vec![]),
    )
    .await;
    wait_for(&http, &r, &format!("own-{tag}"), "running", ready(1)).await;
    assert_eq!(embed(&http, &r, &format!("own-{tag}")).await, 200);
    for name in ["own", "wrong"].map(|n| format!("{n}-{tag}")) {
        let res = http
            .delete(format!("{}/v2/endpoint/admin/{name}", r.server.url))
            .bearer_auth(&r.token)
            .send()
            .await
            .expect("delete");
        assert!(res.status().is_success(), "{}", res.status());
    }
    for _ in 0..100 {
        if docker.containers(&cli, &format!("own-{tag}")).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(docker.containers(&cli, &format!("own-{tag}")).is_empty());
    drop(r);
    let _ = Command::new("docker")
        .args(["network", "rm", &network])
        .env("DOCKER_HOST", &docker.host)
        .output();
}
