//! Several real servers on the test script's PostgreSQL, their replicas containers on its Docker Engine: the
//! containers outlive whichever server leads, so a rolling restart of the three servers under load fails no
//! request, and a leader killed with -9 leaves its container to the next leader, which adopts it as it is.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use crate::common;
use common::cluster::{postgres, Cluster};
use common::docker::{create_at, docker_env, endpoint, gone, remove_network, serves_at, Scene};

/// Requests sent round the servers that are up, one at a time, counting answers and failures.
struct Load {
    up: Arc<Mutex<Vec<String>>>,
    ok: Arc<AtomicUsize>,
    failed: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Load {
    fn start(urls: Vec<String>, name: String) -> Load {
        let up = Arc::new(Mutex::new(urls));
        let ok = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let task = {
            let (up, ok, failed, stop) = (up.clone(), ok.clone(), failed.clone(), stop.clone());
            tokio::spawn(async move {
                let http = reqwest::Client::new();
                let mut k = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let url = {
                        let up = up.lock().expect("up");
                        k += 1;
                        up.get(k % up.len().max(1)).cloned()
                    };
                    let Some(url) = url else {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    };
                    let res = http
                        .post(format!("{url}/endpoints/admin/{name}/embed"))
                        .json(&json!({"inputs": "x"}))
                        .send()
                        .await;
                    match res {
                        Ok(r) if r.status() == 200 => {
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(r) => failed
                            .lock()
                            .expect("failed")
                            .push(format!("{url}: {}", r.status())),
                        Err(e) => failed.lock().expect("failed").push(format!("{url}: {e}")),
                    }
                }
            })
        };
        Load {
            up,
            ok,
            failed,
            stop,
            task,
        }
    }

    /// Stops sending to `url`, and waits out a request already sent there.
    async fn leave(&self, url: &str) {
        self.up.lock().expect("up").retain(|u| u != url);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    fn join(&self, url: String) {
        self.up.lock().expect("up").push(url);
    }

    async fn finish(self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        let failed = self.failed.lock().expect("failed").clone();
        (self.ok.load(Ordering::Relaxed), failed)
    }
}

fn ids(docker: &common::docker::Docker, scene: &Scene, name: &str) -> Vec<String> {
    docker
        .containers(&scene.cli, name)
        .iter()
        .filter(|c| c["State"]["Running"] == true)
        .filter_map(|c| c["Id"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_outlive_a_rolling_restart_and_a_killed_leader() {
    let test = "containers_outlive_a_rolling_restart_and_a_killed_leader";
    let (Some(pg), Some(docker)) = (postgres(test), docker_env(test)) else {
        return;
    };
    let scene = Scene::new(&docker, "cluster");
    let config = format!(
        "[runtime]\ntick_ms = 100\nstop_grace_ms = 1000\nbackoff_initial_ms = 200\nprovider = \"docker\"\n\
         public_url = \"http://switchyard.example.test\"\n\n[runtime.docker]\nhost = \"{}\"\nnetwork = \"{}\"\n",
        docker.host, scene.network
    );
    let mut c = Cluster::start(&pg, 3, &config).await;
    let http = reqwest::Client::new();
    let name = format!("roll-{}", scene.tag);
    let mut body = endpoint(
        &name,
        json!({"custom": {"url": scene.image, "port": 8080}}),
        vec![],
    );
    body["compute"]["scaling"] = json!({"minReplica": 1, "maxReplica": 1});
    create_at(&http, c.nodes[1].url(), &c.token, &body).await;
    for i in 0..3 {
        serves_at(&http, c.nodes[i].url(), &name).await;
    }
    let first = ids(&docker, &scene, &name);
    assert_eq!(first.len(), 1, "{first:?}");

    // Each server in turn: out of the rotation, stopped, started again, back in. The leader among them hands
    // its lease over, and the next one adopts the container.
    let load = Load::start(
        (0..3).map(|i| c.nodes[i].url().to_string()).collect(),
        name.clone(),
    );
    for i in 0..3 {
        load.leave(c.nodes[i].url()).await;
        c.stop(i);
        c.up(i);
        serves_at(&http, c.nodes[i].url(), &name).await;
        load.join(c.nodes[i].url().to_string());
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            ids(&docker, &scene, &name),
            first,
            "the container was replaced"
        );
    }

    // kill -9 of the leader: the others serve on, and the next leader adopts the container.
    let leader = c.leader(&http, 0).await;
    load.leave(c.nodes[leader].url()).await;
    let ((_, before), _) = c.rows().await;
    c.kill(leader);
    let survivor = (0..3).find(|i| *i != leader).expect("a survivor");
    let next = c.leader(&http, survivor).await;
    assert_ne!(next, leader);
    // Its first pass records the replicas under its epoch: the container it found.
    for _ in 0..300 {
        let ((_, epoch), epochs) = c.rows().await;
        if epoch > before && !epochs.is_empty() && epochs.iter().all(|e| *e == epoch) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ((_, epoch), epochs) = c.rows().await;
    assert!(
        epoch > before && epochs == vec![epoch],
        "{epochs:?} under epoch {epoch}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (ok, failed) = load.finish().await;
    assert!(
        failed.is_empty(),
        "{} of {} requests failed: {failed:?}",
        failed.len(),
        ok + failed.len()
    );
    assert!(ok > 20, "only {ok} requests were answered");
    assert_eq!(
        ids(&docker, &scene, &name),
        first,
        "the container was replaced"
    );

    let deleted = http
        .delete(format!("{}/v2/endpoint/admin/{name}", c.nodes[next].url()))
        .bearer_auth(&c.token)
        .send()
        .await
        .expect("delete");
    assert!(deleted.status().is_success());
    assert!(
        gone(&docker, &scene.cli, &name).await,
        "containers left after delete"
    );
    drop(c);
    remove_network(&docker, &scene.network);
}
