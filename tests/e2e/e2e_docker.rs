//! The real `switchyard` binary on a real Docker Engine (`[runtime] provider = "docker"`), with images the
//! test builds itself (`FROM scratch` with the workspace's test engine), pushed to registries on loopback
//! and removed from the engine, so the provider must pull them. `scripts/test` starts the engine and the
//! registries (`scripts/docker`); without them the tests say so, and fail under `CI`.

use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::common;
use common::docker::*;

/// A replica's container: pulled, confined, served through the proxy, scaled 1 → 2 → 0 and woken by a
/// held request; adopted as it is by a server restarted after a kill -9; gone with its volume on delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_replica_is_pulled_confined_served_scaled_adopted_and_deleted() {
    let Some(docker) =
        docker_env("a_container_replica_is_pulled_confined_served_scaled_adopted_and_deleted")
    else {
        return;
    };
    let Scene {
        dir,
        cli,
        tag,
        image,
        network,
    } = Scene::new(&docker, "test-engine");
    let data_dir = dir.path().join("data");
    // The model comes from a mirror directory, mounted read-only at /repository.
    let mirror = dir.path().join("mirror");
    std::fs::create_dir_all(mirror.join("test/engine")).expect("mirror");
    std::fs::write(
        mirror.join("test/engine/config.json"),
        "{\"mirrored\": true}",
    )
    .expect("mirror file");
    let models = format!("[models]\nmirror_dir = \"{}\"\n", mirror.display());
    let config = write_config_with(dir.path(), &docker, &network, &models, "");
    let http = reqwest::Client::new();
    let r = serve_docker(&data_dir, &config);
    let name = format!("box-{tag}");
    // The replica probes the server's files, and its model, from inside its container.
    let probes = ["secret.key", "admin-token", "."].map(|f| data_dir.join(f).display().to_string());
    let mut args: Vec<String> = probes
        .iter()
        .flat_map(|p| ["--probe".to_string(), p.clone()])
        .collect();
    args.extend(["--probe".to_string(), "/repository/config.json".to_string()]);
    let mut body = endpoint(&name, json!({"custom": {"url": image, "port": 8080}}), args);
    body["experimentalFeatures"] = json!({});
    create(&http, &r, &body).await;
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
    assert_eq!(host["NetworkMode"], json!(format!("{network}-admin")));
    assert!(
        host["PortBindings"]
            .as_object()
            .is_none_or(|p| p.is_empty()),
        "nothing published: {host}"
    );
    let mounts = c["Mounts"].as_array().expect("mounts");
    assert_eq!(
        mounts.len(),
        2,
        "its cache volume and its model: {mounts:?}"
    );
    let mount = |to: &str| {
        mounts
            .iter()
            .find(|m| m["Destination"] == to)
            .unwrap_or_else(|| panic!("{to}: {mounts:?}"))
    };
    assert_eq!(mount("/data")["Type"], "volume");
    let model = mount("/repository");
    assert_eq!(
        (model["Type"].as_str(), model["RW"].as_bool()),
        (Some("bind"), Some(false))
    );
    assert_eq!(
        model["Source"],
        json!(mirror.join("test/engine").display().to_string())
    );
    for m in mounts {
        let source = m["Source"].as_str().unwrap_or_default();
        assert!(
            !source.starts_with(&data_dir.display().to_string()),
            "the data dir mounted: {m}"
        );
    }
    let volume = mount("/data")["Name"]
        .as_str()
        .expect("volume name")
        .to_string();
    assert_eq!(c["Config"]["Labels"]["dev.switchyard.namespace"], "admin");
    let logs = docker.stderr_of(c);
    assert!(
        logs.lines()
            .any(|l| l == "probe /repository/config.json: read 18 bytes"),
        "the replica reads its model: {logs}"
    );
    for p in &probes {
        let line = logs
            .lines()
            .find(|l| l.starts_with(&format!("probe {p}:")))
            .unwrap_or_else(|| panic!("no probe of {p}: {logs}"));
        assert!(line.contains("No such file or directory"), "{line}");
    }

    // The replica's output is its logs in the API (as the console's `l` shows them).
    let api_logs = http
        .get(format!("{}/v2/endpoint/admin/{name}/logs", r.server.url))
        .bearer_auth(&r.token)
        .send()
        .await
        .expect("logs")
        .text()
        .await
        .expect("logs text");
    assert!(
        api_logs.contains("stderr: probe /repository/config.json: read 18 bytes"),
        "{api_logs}"
    );

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
    assert!(gone(&docker, &cli, &name).await, "no container at zero");
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
    delete_endpoint(&http, &r, &name).await;
    let volumes: Vec<String> = docker
        .containers(&cli, &name)
        .iter()
        .flat_map(|c| c["Mounts"].as_array().cloned().unwrap_or_default())
        .filter_map(|m| m["Name"].as_str().map(str::to_string))
        .chain([volume])
        .collect();
    assert!(
        gone(&docker, &cli, &name).await,
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
    remove_network(&docker, &network);
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

    // A container that exits at once: restarted with backoff, then failed, with its exit and last line.
    let crashing = format!("crashing-{tag}");
    let exits = vec!["--exit-immediately".to_string()];
    let image = json!({"custom": {"url": private, "port": 8080}});
    create(&http, &r, &endpoint(&crashing, image, exits)).await;
    let ep = wait_for(&http, &r, &crashing, "failed", |ep| {
        ep["status"]["state"] == "failed"
    })
    .await;
    let message = ep["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("exited (exit status 2)") && message.contains("told to fail at start"),
        "{message}"
    );
    assert!(
        gone(&docker, &cli, &crashing).await,
        "its containers are removed"
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
    // The image is on the engine now, pulled with that endpoint's credentials: another endpoint without
    // them does not get the engine's copy, its own pull is refused.
    let thief = format!("thief-{tag}");
    let bare = json!({"custom": {"url": private, "port": 8080}});
    create(&http, &r, &endpoint(&thief, bare, vec![])).await;
    let ep = wait_for(&http, &r, &thief, "failed", |ep| {
        ep["status"]["state"] == "failed"
    })
    .await;
    let message = ep["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.to_lowercase().contains("no basic auth credentials")
            || message.to_lowercase().contains("unauthorized"),
        "{message}"
    );
    assert!(docker.containers(&cli, &thief).is_empty());
    let (own, wrong) = (format!("own-{tag}"), format!("wrong-{tag}"));
    tear_down(&http, r, &docker, &cli, &network, &[&own, &wrong, &thief]).await;
}

/// A rolling update of a container endpoint under a steady stream of requests: the new containers serve
/// before the old ones stop, and not one request fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_of_containers_under_load_fails_no_request() {
    let Some(docker) = docker_env("a_rolling_update_of_containers_under_load_fails_no_request")
    else {
        return;
    };
    let Scene {
        dir,
        cli,
        tag,
        image,
        network,
    } = Scene::new(&docker, "rolling");
    let config = write_config(dir.path(), &docker, &network, "");
    let http = reqwest::Client::new();
    let r = serve_docker(&dir.path().join("data"), &config);
    let name = format!("rolling-{tag}");
    // Each request takes longer than a container's stop grace (1 s): a replica stopped with requests in
    // flight would cut them.
    let slow = vec!["--latency-ms".to_string(), "1500".to_string()];
    let mut body = endpoint(&name, json!({"custom": {"url": image, "port": 8080}}), slow);
    body["compute"]["scaling"] = json!({"minReplica": 2, "maxReplica": 2});
    create(&http, &r, &body).await;
    wait_for(&http, &r, &name, "running", ready(2)).await;
    let before: Vec<String> = docker
        .containers(&cli, &name)
        .iter()
        .map(|c| c["Id"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(before.len(), 2);

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = (0..4).map(|_| {
        let (http, stop) = (http.clone(), stop.clone());
        let url = format!("{}/endpoints/admin/{name}/embed", r.server.url);
        tokio::spawn(async move {
            let (mut ok, mut failed) = (0u32, Vec::new());
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                match http.post(&url).json(&json!({"inputs": "x"})).send().await {
                    Ok(res) if res.status() == 200 => ok += 1,
                    Ok(res) => failed.push(res.status().to_string()),
                    Err(e) => failed.push(e.to_string()),
                }
            }
            (ok, failed)
        })
    });
    let load: Vec<_> = load.collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A new generation: the model's environment changed.
    update(
        &http,
        &r,
        &name,
        json!({"model": {"env": {"GENERATION": "2"}}}),
    )
    .await;
    let new_ones = |containers: &[serde_json::Value]| {
        containers.len() == 2
            && containers.iter().all(|c| {
                let id = c["Id"].as_str().unwrap_or_default();
                !before.iter().any(|b| b == id)
                    && c["Config"]["Env"]
                        .as_array()
                        .is_some_and(|e| e.contains(&json!("GENERATION=2")))
            })
    };
    let mut rolled = false;
    for _ in 0..1200 {
        let ep = get(&http, &r, &name).await;
        if ep["status"]["state"] == "running" && new_ones(&docker.containers(&cli, &name)) {
            rolled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Release);
    let (mut ok, mut failed) = (0, Vec::new());
    for l in load {
        let (o, f) = l.await.expect("load task");
        ok += o;
        failed.extend(f);
    }
    assert!(
        rolled,
        "the update never rolled out: {:?}",
        get(&http, &r, &name).await["status"]
    );
    assert!(ok > 0, "no request was served");
    assert!(
        failed.is_empty(),
        "{} of {} requests failed: {:?}",
        failed.len(),
        ok as usize + failed.len(),
        &failed[..failed.len().min(5)]
    );
    tear_down(&http, r, &docker, &cli, &network, &[&name]).await;
}

/// What the loopback hub was asked: each request's path with its `Range` and `Authorization` headers.
type Asked = std::sync::Arc<std::sync::Mutex<Vec<(String, Option<String>, Option<String>)>>>;

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
const BIG: usize = 4 << 20;

/// A file of the loopback hub: `weights/model.bin` is BIG bytes of a pattern.
fn hub_file(name: &str) -> Option<Vec<u8>> {
    match name {
        "config.json" => Some(b"{\"hidden_size\": 8}".to_vec()),
        "weights/model.bin" => Some((0..BIG).map(|i| (i % 251) as u8).collect()),
        _ => None,
    }
}

/// A server that speaks the hub's file API on loopback: the revision's files, and each file (with `Range`),
/// the large one sent slowly (256 KiB every 50 ms) from behind a redirect, as the hub sends from its CDN.
async fn loopback_hub(token: &'static str, asked: Asked) -> String {
    use axum::body::Body;
    use axum::http::{header, Request, StatusCode};
    use axum::response::Response;
    let handler = move |req: Request<Body>| {
        let asked = asked.clone();
        async move {
            let path = req.uri().path().to_string();
            let h = |name: header::HeaderName| {
                req.headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
            };
            let (range, auth) = (h(header::RANGE), h(header::AUTHORIZATION));
            asked
                .lock()
                .expect("asked")
                .push((path.clone(), range.clone(), auth.clone()));
            let answer = |status: StatusCode, body: Body| {
                Response::builder()
                    .status(status)
                    .body(body)
                    .expect("response")
            };
            let hub = path.starts_with("/api/") || path.starts_with("/test/engine/resolve/");
            if hub && auth.as_deref() != Some(&format!("Bearer {token}")) {
                return answer(StatusCode::UNAUTHORIZED, Body::empty());
            }
            if path == "/api/models/test/engine/revision/main" {
                let about = json!({"sha": SHA, "siblings": [
                    {"rfilename": "config.json", "size": hub_file("config.json").map_or(0, |f| f.len())},
                    {"rfilename": "weights/model.bin", "size": BIG},
                ]});
                return answer(StatusCode::OK, Body::from(about.to_string()));
            }
            if let Some(file) = path.strip_prefix(&format!("/test/engine/resolve/{SHA}/")) {
                if file == "weights/model.bin" {
                    return Response::builder()
                        .status(StatusCode::FOUND)
                        .header(header::LOCATION, "/cdn/weights/model.bin")
                        .body(Body::empty())
                        .expect("redirect");
                }
                return match hub_file(file) {
                    Some(bytes) => answer(StatusCode::OK, Body::from(bytes)),
                    None => answer(StatusCode::NOT_FOUND, Body::empty()),
                };
            }
            if let Some(file) = path.strip_prefix("/cdn/") {
                let Some(bytes) = hub_file(file) else {
                    return answer(StatusCode::NOT_FOUND, Body::empty());
                };
                let from = range
                    .as_deref()
                    .and_then(|r| r.strip_prefix("bytes="))
                    .and_then(|r| r.strip_suffix('-'))
                    .and_then(|n| n.parse::<usize>().ok())
                    .unwrap_or(0)
                    .min(bytes.len());
                let rest = bytes[from..].to_vec();
                let chunks = futures_util::stream::unfold(0usize, move |at| {
                    let rest = rest.clone();
                    async move {
                        if at >= rest.len() {
                            return None;
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        let end = (at + (256 << 10)).min(rest.len());
                        let chunk = axum::body::Bytes::copy_from_slice(&rest[at..end]);
                        Some((Ok::<_, std::io::Error>(chunk), end))
                    }
                });
                let status = if from > 0 {
                    StatusCode::PARTIAL_CONTENT
                } else {
                    StatusCode::OK
                };
                return Response::builder()
                    .status(status)
                    .header(header::CONTENT_LENGTH, bytes.len() - from)
                    .body(Body::from_stream(chunks))
                    .expect("file");
            }
            answer(StatusCode::NOT_FOUND, Body::empty())
        }
    };
    let app = axum::Router::new().fallback(handler);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    url
}

/// The model fetched through the hub's file API (with the endpoint's HF_TOKEN, redirects followed), cut
/// short by a kill -9 of the server and resumed by the next one from where it stopped, then mounted at
/// `/repository` and read whole by the replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_is_fetched_from_the_hub_resumed_after_a_kill_and_mounted() {
    let Some(docker) =
        docker_env("the_model_is_fetched_from_the_hub_resumed_after_a_kill_and_mounted")
    else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let cli = dir.path().join("docker-cli");
    let tag = suffix();
    let image = format!("{}/switchyard-hub-{tag}:v1", docker.registry);
    push_engine_image(&docker, &cli, &image);
    let asked: Asked = Default::default();
    let hub = loopback_hub("hf_loopback_token", asked.clone()).await;
    let network = format!("switchyard-test-{tag}");
    let top = format!("[models]\nhub_url = \"{hub}\"\n\n[outbound]\nallow = [\"127.0.0.0/8\"]\n");
    let config = write_config_with(dir.path(), &docker, &network, &top, "");
    let data_dir = dir.path().join("data");
    let http = reqwest::Client::new();
    let r = serve_docker(&data_dir, &config);
    let name = format!("fetched-{tag}");
    let args = [
        "--probe",
        "/repository/weights/model.bin",
        "--probe",
        "/repository/config.json",
    ];
    let mut body = endpoint(
        &name,
        json!({"custom": {"url": image, "port": 8080}}),
        args.map(str::to_string).to_vec(),
    );
    body["experimentalFeatures"] = json!({});
    body["model"]["secrets"] = json!({"HF_TOKEN": "hf_loopback_token"});
    create(&http, &r, &body).await;

    // Part of the large file is on disk: the server is killed mid-download.
    let partial = data_dir.join(format!(
        "models/test/engine/{SHA}.partial/weights/model.bin"
    ));
    let mut seen = Vec::new();
    for _ in 0..1000 {
        let len = std::fs::metadata(&partial).map(|m| m.len()).unwrap_or(0);
        if len > 0 {
            let ep = get(&http, &r, &name).await;
            seen.push(
                ep["status"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut server = r.server;
    server.child.kill().expect("kill -9");
    server.child.wait().expect("wait");
    let cut = std::fs::metadata(&partial).map(|m| m.len()).unwrap_or(0) as usize;
    assert!(
        cut > 0 && cut < BIG,
        "killed mid-download: {cut} of {BIG} bytes"
    );
    assert!(
        seen.iter()
            .any(|m| m.contains("downloading test/engine@main")),
        "progress in the status: {seen:?}"
    );

    // The next server resumes it, and the replica reads the whole of it.
    let r = serve_docker(&data_dir, &config);
    serves(&http, &r, &name).await;
    let done = data_dir.join(format!("models/test/engine/{SHA}/weights/model.bin"));
    assert_eq!(
        std::fs::read(&done).expect("the fetched file"),
        hub_file("weights/model.bin").expect("file")
    );
    let asked = asked.lock().expect("asked").clone();
    let resumed = asked
        .iter()
        .filter(|(p, _, _)| p == "/cdn/weights/model.bin")
        .filter_map(|(_, range, _)| range.as_deref())
        .filter_map(|r| {
            r.strip_prefix("bytes=")?
                .strip_suffix('-')?
                .parse::<usize>()
                .ok()
        })
        .collect::<Vec<_>>();
    assert!(
        resumed.iter().any(|from| *from > 0 && *from <= cut),
        "a range request from where it stopped ({cut}): {asked:?}"
    );
    assert!(
        asked
            .iter()
            .filter(|(p, _, _)| p.starts_with("/cdn/"))
            .all(|(_, _, auth)| auth.is_some()),
        "the token goes along a redirect on the hub's own origin: {asked:?}"
    );
    let c = &docker.containers(&cli, &name)[0];
    let logs = docker.stderr_of(c);
    assert!(
        logs.lines()
            .any(|l| l == format!("probe /repository/weights/model.bin: read {BIG} bytes")),
        "{logs}"
    );
    assert!(
        logs.contains("probe /repository/config.json: read 18 bytes"),
        "{logs}"
    );
    // The copy was fetched with this endpoint's token: another endpoint of the same model without one
    // does not get it (the hub is asked, and refuses).
    let other = format!("tokenless-{tag}");
    let mut body = endpoint(
        &other,
        json!({"custom": {"url": image, "port": 8080}}),
        vec![],
    );
    body["experimentalFeatures"] = json!({});
    create(&http, &r, &body).await;
    let ep = wait_for(&http, &r, &other, "failed", |ep| {
        ep["status"]["state"] == "failed"
    })
    .await;
    let message = ep["status"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("401"), "{message}");
    assert!(docker.containers(&cli, &other).is_empty());
    tear_down(&http, r, &docker, &cli, &network, &[&name, &other]).await;
}

/// `switchyard engines image minilm` builds the built-in MiniLM engine as an image (debootstrap, its pinned
/// packages, imported into the engine: no registry) and registers it; the catalog's MiniLM CPU recipe then
/// deploys under the Docker provider and embeds with the real model, in a container of that image.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_built_in_engine_built_as_an_image_serves_its_catalog_recipe() {
    let Some(docker) = docker_env("a_built_in_engine_built_as_an_image_serves_its_catalog_recipe")
    else {
        return;
    };
    let test = "a_built_in_engine_built_as_an_image_serves_its_catalog_recipe";
    if !common::needs(common::is_root(), test, "root (debootstrap)") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let cli = dir.path().join("docker-cli");
    let tag = suffix();
    let network = format!("switchyard-test-{tag}");
    let config = write_config(dir.path(), &docker, &network, "");
    let data_dir = dir.path().join("data");
    let built = Command::new(common::BIN)
        .args(["engines", "image", "minilm", "--data-dir"])
        .arg(&data_dir)
        .arg("--config")
        .arg(&config)
        .output()
        .expect("switchyard engines image");
    let said = String::from_utf8_lossy(&built.stdout).to_string();
    assert!(
        built.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let image = said
        .split_whitespace()
        .find(|w| w.starts_with("switchyard/engine-minilm:"))
        .unwrap_or_else(|| panic!("the image named: {said}"))
        .to_string();
    docker.run(&cli, &["image", "inspect", &image]);

    let http = reqwest::Client::new();
    let r = serve_docker(&data_dir, &config);
    let name = format!("emb-{tag}");
    let deployed = http
        .post(format!(
            "{}/api/v1/catalog/recipe/all-minilm-l6-v2-cpu-tei/deploy",
            r.server.url
        ))
        .bearer_auth(&r.token)
        .json(&json!({"namespace": "admin", "config": {"name": name,
                      "scaling": {"minReplica": 1, "maxReplica": 1}}}))
        .send()
        .await
        .expect("deploy");
    assert!(
        deployed.status().is_success(),
        "{}",
        deployed.text().await.unwrap_or_default()
    );
    let mut answer = serde_json::Value::Null;
    for _ in 0..1800 {
        let res = http
            .post(format!("{}/endpoints/admin/{name}/embed", r.server.url))
            .bearer_auth(&r.token)
            .json(&json!({"inputs": "A cat sits on the mat"}))
            .send()
            .await
            .expect("embed");
        if res.status() == 200 {
            answer = res.json().await.expect("vectors");
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        answer[0].as_array().map(Vec::len),
        Some(384),
        "a MiniLM vector: {answer} ({})",
        get(&http, &r, &name).await["status"]
    );
    let containers = docker.containers(&cli, &name);
    assert_eq!(containers.len(), 1);
    assert_eq!(containers[0]["Config"]["Image"], json!(image));
    tear_down(&http, r, &docker, &cli, &network, &[&name]).await;
}

/// A custom router under the Docker provider: its sidecar is a container of the image configured for its tag,
/// on the replicas' bridge, told the replicas' addresses there; requests go through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_router_runs_as_a_container_beside_the_replicas() {
    let Some(docker) = docker_env("a_custom_router_runs_as_a_container_beside_the_replicas") else {
        return;
    };
    let Scene {
        dir,
        cli,
        tag,
        image,
        network,
    } = Scene::new(&docker, "router");
    let routers = format!(
        "\n[runtime.routers.test]\nimage = \"{image}\"\ncommand = [\"/engine\", \"--router\", \"--host\", \"0.0.0.0\", \"--port\", \"{{port}}\"]\n\
         \n[runtime.routers.picker]\nimage = \"{image}\"\ncommand = [\"/engine\", \"--ext-proc\", \"--host\", \"0.0.0.0\", \"--port\", \"{{port}}\", \"--grpc-port\", \"{{grpc_port}}\"]\n"
    );
    let config = write_config(dir.path(), &docker, &network, &routers);
    let http = reqwest::Client::new();
    let r = serve_docker(&dir.path().join("data"), &config);
    let name = format!("routed-{tag}");
    let mut body = endpoint(
        &name,
        json!({"custom": {"url": image, "port": 8080}}),
        vec![],
    );
    body["compute"]["scaling"] = json!({"minReplica": 2, "maxReplica": 2});
    body["customRouter"] = json!({"tag": "test", "port": 3000});
    create(&http, &r, &body).await;
    wait_for(&http, &r, &name, "running", ready(2)).await;
    let mut routed = None;
    for _ in 0..300 {
        let res = http
            .post(format!("{}/endpoints/admin/{name}/embed", r.server.url))
            .json(&json!({"inputs": "x"}))
            .send()
            .await
            .expect("embed");
        if res.status() == 200 {
            routed = res
                .headers()
                .get("x-routed-by")
                .map(|v| v.to_str().unwrap_or_default().to_string());
            if routed.is_some() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        routed.as_deref(),
        Some("test-router"),
        "requests go through the router"
    );
    let containers = docker.containers(&cli, &name);
    assert_eq!(containers.len(), 3, "two replicas and the router");
    let router = containers
        .iter()
        .find(|c| {
            c["Config"]["Labels"]["dev.switchyard.replica"]
                .as_str()
                .is_some_and(|r| r.contains("-router-"))
        })
        .expect("the router's container");
    assert_eq!(
        router["HostConfig"]["NetworkMode"],
        json!(format!("{network}-admin"))
    );
    assert_eq!(router["HostConfig"]["CapDrop"], json!(["ALL"]));

    // An extProc router's container serves gRPC on the spec's grpcPort, where the proxy asks it for each
    // request's replica: the one it names (by the address on the bridge it was told) gets the request.
    let picked = format!("picked-{tag}");
    let mut body = endpoint(
        &picked,
        json!({"custom": {"url": image, "port": 8080}}),
        vec![],
    );
    body["compute"]["scaling"] = json!({"minReplica": 2, "maxReplica": 2});
    body["customRouter"] =
        json!({"tag": "picker", "protocol": "extProc", "port": 3000, "grpcPort": 9002});
    create(&http, &r, &body).await;
    wait_for(&http, &r, &picked, "running", ready(2)).await;
    let mut seen = json!(null);
    for _ in 0..300 {
        let res = http
            .get(format!("{}/endpoints/admin/{picked}/seen/x", r.server.url))
            .header("x-pick", "1")
            .send()
            .await
            .expect("seen");
        if res.status() == 200 {
            let address = res.headers().get("x-replica-address").cloned();
            let body: serde_json::Value = res.json().await.expect("json");
            let named = body["headers"]["x-gateway-destination-endpoint"].clone();
            if named.is_string() && address.is_some() {
                seen = json!({"named": named, "answered": address.map(|a| a.to_str().unwrap_or_default().to_string())});
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        seen["named"].is_string(),
        "the processor named a replica: {seen}"
    );
    // The engine inside says its own address (port 8080 on the bridge): the one named.
    let named = seen["named"].as_str().unwrap_or_default();
    assert!(named.ends_with(":8080"), "{seen}");
    // The router goes with its endpoint.
    tear_down(&http, r, &docker, &cli, &network, &[&name, &picked]).await;
}

/// Each container's GPUs, as its process sees them (`NVIDIA_VISIBLE_DEVICES`, which the engine sets from the
/// device request; the test engine answers its own environment at `/env/NAME`), by container id; checked
/// against the device ids the container's request named.
async fn devices(
    http: &reqwest::Client,
    containers: &[serde_json::Value],
) -> Vec<(String, String)> {
    let mut ids = Vec::new();
    for c in containers {
        let asked = c["HostConfig"]["DeviceRequests"][0]["DeviceIDs"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|d| d.as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default();
        let ip = c["NetworkSettings"]["Networks"]
            .as_object()
            .and_then(|n| n.values().next())
            .and_then(|n| n["IPAddress"].as_str())
            .unwrap_or_default()
            .to_string();
        let seen = http
            .get(format!("http://{ip}:8080/env/NVIDIA_VISIBLE_DEVICES"))
            .send()
            .await
            .expect("the replica's environment")
            .text()
            .await
            .unwrap_or_default();
        assert_eq!(
            seen, asked,
            "the process sees the devices its request named"
        );
        ids.push((c["Id"].as_str().unwrap_or_default().to_string(), seen));
    }
    ids.sort();
    ids
}

/// GPU placement under the Docker provider, on this GPU-less machine with a declared inventory (two GPUs)
/// and the engine taking GPU device requests (scripts/docker stands a no-op hook in for the NVIDIA
/// Container Toolkit's): two replicas get different devices (`NVIDIA_VISIBLE_DEVICES`, as the engine sets
/// it from the request's device ids), a third waits and says for whom; a restarted server adopts the two
/// with their devices, so the third still waits; a device freed goes to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpus_are_placed_per_container_and_kept_by_adopted_ones() {
    let Some(docker) = docker_env("gpus_are_placed_per_container_and_kept_by_adopted_ones") else {
        return;
    };
    let hook = std::env::var_os("SWITCHYARD_TEST_GPU_HOOK").is_some();
    let what = "an engine that takes GPU device requests (scripts/docker's dockerd)";
    if !common::needs(
        hook,
        "gpus_are_placed_per_container_and_kept_by_adopted_ones",
        what,
    ) {
        return;
    }
    let Scene {
        dir,
        cli,
        tag,
        image,
        network,
    } = Scene::new(&docker, "gpu");
    let config = write_config(dir.path(), &docker, &network, "");
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(
        &config,
        text.replace("[runtime]\n", "[runtime]\ngpus = [\"0\", \"1\"]\n"),
    )
    .expect("gpus");
    let data_dir = dir.path().join("data");
    let http = reqwest::Client::new();
    let r = serve_docker(&data_dir, &config);
    let gpu = |name: &str, n: u32| {
        let mut body = endpoint(
            name,
            json!({"custom": {"url": image, "port": 8080}}),
            vec![],
        );
        body["compute"] = json!({"accelerator": "gpu", "instanceType": "nvidia-t4", "instanceSize": "x1",
                                 "scaling": {"minReplica": n, "maxReplica": n}});
        body
    };
    let (two, one) = (format!("two-{tag}"), format!("one-{tag}"));
    create(&http, &r, &gpu(&two, 2)).await;
    wait_for(&http, &r, &two, "running on two GPUs", ready(2)).await;
    let placed = devices(&http, &docker.containers(&cli, &two)).await;
    let mut seen: Vec<&str> = placed.iter().map(|(_, d)| d.as_str()).collect();
    seen.sort();
    assert_eq!(seen, ["0", "1"], "a device each: {placed:?}");

    create(&http, &r, &gpu(&one, 1)).await;
    let ep = wait_for(&http, &r, &one, "waiting", |ep| {
        ep["status"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("waiting for a free GPU"))
    })
    .await;
    assert_eq!(
        ep["status"]["message"],
        json!(format!(
            "waiting for a free GPU (2 of 2 held by admin/{two}, admin/{two})"
        ))
    );
    assert!(docker.containers(&cli, &one).is_empty());

    // kill -9 and a new server: the same containers, on the same devices; the third still waits.
    let mut server = r.server;
    server.child.kill().expect("kill -9");
    server.child.wait().expect("wait");
    let r = serve_docker(&data_dir, &config);
    serves(&http, &r, &two).await;
    assert_eq!(
        devices(&http, &docker.containers(&cli, &two)).await,
        placed,
        "adopted as they were"
    );
    let ep = wait_for(&http, &r, &one, "still waiting", |ep| {
        ep["status"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("waiting for a free GPU"))
    })
    .await;
    assert_eq!(ep["status"]["readyReplica"], 0);
    assert!(
        docker.containers(&cli, &one).is_empty(),
        "no device was free for it"
    );

    // One of the two goes: its device goes to the third.
    update(
        &http,
        &r,
        &two,
        json!({"compute": {"scaling": {"minReplica": 1, "maxReplica": 1}}}),
    )
    .await;
    wait_for(&http, &r, &one, "running on the freed GPU", ready(1)).await;
    let kept = devices(&http, &docker.containers(&cli, &two)).await;
    let got = devices(&http, &docker.containers(&cli, &one)).await;
    assert_eq!((kept.len(), got.len()), (1, 1));
    assert_ne!(kept[0].1, got[0].1, "never shared: {kept:?} {got:?}");
    tear_down(&http, r, &docker, &cli, &network, &[&two, &one]).await;
}
