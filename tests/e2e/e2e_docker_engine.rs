//! The Docker Engine going away while replicas run, and coming back: the server keeps serving its API, the
//! endpoint says what it waits for, and once the engine answers again its replicas are started again. This
//! stops and starts the engine `scripts/docker` started (`SWITCHYARD_TEST_DOCKERD`), so it takes the engine
//! alone (`docker_env_alone`): no other test uses the engine meanwhile.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;

use crate::common;
use common::docker::*;

fn engine_answers(host: &str) -> bool {
    Command::new("docker")
        .arg("version")
        .env("DOCKER_HOST", host)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The pid file named in the dockerd command line.
fn dockerd_pid(command: &str) -> String {
    let args: Vec<&str> = command.split_whitespace().collect();
    let at = args
        .iter()
        .position(|a| *a == "--pidfile")
        .expect("--pidfile");
    std::fs::read_to_string(args[at + 1])
        .expect("dockerd pid")
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_going_away_and_coming_back_is_waited_out() {
    let Some(docker) = docker_env_alone("the_engine_going_away_and_coming_back_is_waited_out")
    else {
        return;
    };
    let dockerd = std::env::var("SWITCHYARD_TEST_DOCKERD")
        .ok()
        .filter(|c| !c.is_empty());
    let what = "a dockerd of its own to stop and start (scripts/docker's)";
    let test = "the_engine_going_away_and_coming_back_is_waited_out";
    let Some(dockerd) = dockerd else {
        common::needs(false, test, what);
        return;
    };
    let Scene {
        dir,
        cli,
        tag,
        image,
        network,
    } = Scene::new(&docker, "engine-gone");
    let config = write_config(dir.path(), &docker, &network, "");
    let http = reqwest::Client::new();
    let mut r = serve_docker(&dir.path().join("data"), &config);
    let name = format!("steady-{tag}");
    create(
        &http,
        &r,
        &endpoint(
            &name,
            json!({"custom": {"url": image, "port": 8080}}),
            vec![],
        ),
    )
    .await;
    wait_for(&http, &r, &name, "running", ready(1)).await;
    assert_eq!(embed(&http, &r, &name).await, 200);
    let first = docker.containers(&cli, &name);
    assert_eq!(first.len(), 1);

    // The engine stops (and its containers with it).
    let pid = dockerd_pid(&dockerd);
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill")
        .success());
    for _ in 0..300 {
        if !engine_answers(&docker.host) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!engine_answers(&docker.host), "dockerd did not stop");
    let ep = wait_for(&http, &r, &name, "waiting for the engine", |ep| {
        ep["status"]["readyReplica"] == 0
            && ep["status"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("does not answer"))
    })
    .await;
    let message = ep["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&docker.host) && message.contains("retrying"),
        "{message}"
    );
    assert_ne!(ep["status"]["state"], "failed", "retrying can help: {ep}");
    assert!(
        r.server.child.try_wait().expect("server").is_none(),
        "the server stays up"
    );

    // The engine comes back: the endpoint serves again, from a new container, the old one gone.
    // In the background, outliving this test: scripts/docker stops it at the end of the run.
    let log = dir.path().join("dockerd.log");
    let started = Command::new("sh")
        .arg("-c")
        .arg(format!("{dockerd} >{} 2>&1 &", log.display()))
        .status()
        .expect("start dockerd");
    assert!(started.success());
    for _ in 0..600 {
        if engine_answers(&docker.host) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(engine_answers(&docker.host), "dockerd did not start again");
    serves(&http, &r, &name).await;
    let ep = wait_for(&http, &r, &name, "running again", ready(1)).await;
    assert!(ep["status"]["message"].is_null(), "{ep}");
    let mut now = docker.containers(&cli, &name);
    for _ in 0..100 {
        if now.len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        now = docker.containers(&cli, &name);
    }
    assert_eq!(now.len(), 1, "one container, the stopped one removed");
    assert_ne!(now[0]["Id"], first[0]["Id"]);
    assert_eq!(now[0]["State"]["Running"], true);

    tear_down(&http, r, &docker, &cli, &network, &[&name]).await;
}
