//! Several real `switchyard serve` processes on one PostgreSQL database (the test script's), each with a
//! data dir of its own and one secrets key: started, stopped, killed and paused as an operator's machines
//! would be. Shared by the several-servers end-to-end tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sqlx::Row;

use super::{serve_logged, Server};

/// The test script's PostgreSQL (`SWITCHYARD_TEST_POSTGRES`), or `None` (with why) when there is none
/// outside CI.
pub fn postgres(test: &str) -> Option<String> {
    let url = std::env::var("SWITCHYARD_TEST_POSTGRES")
        .ok()
        .filter(|u| !u.is_empty());
    super::needs(url.is_some(), test, "PostgreSQL (scripts/postgres)");
    url
}

/// A new, empty database on the test PostgreSQL, by URL.
pub async fn fresh_database(admin_url: &str) -> String {
    use sqlx::Executor;
    sqlx::any::install_default_drivers();
    let name = format!("sy_cluster_{:x}", super::docker::rand_u32());
    let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(admin_url)
        .await
        .expect("connect to the test PostgreSQL");
    conn.execute(format!("CREATE DATABASE {name}").as_str())
        .await
        .expect("create a test database");
    let base = admin_url.rsplit_once('/').map_or(admin_url, |(b, _)| b);
    format!("{base}/{name}")
}

/// One server of the cluster: its data dir, its log, and the process while it runs.
pub struct Node {
    pub dir: PathBuf,
    pub log: PathBuf,
    pub server: Option<Server>,
}

impl Node {
    pub fn url(&self) -> &str {
        &self.server.as_ref().expect("a running server").url
    }

    pub fn pid(&self) -> String {
        self.server
            .as_ref()
            .expect("a running server")
            .child
            .id()
            .to_string()
    }

    /// What the server logged so far.
    pub fn logged(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Servers on one PostgreSQL database.
pub struct Cluster {
    pub root: tempfile::TempDir,
    pub store: String,
    pub key: String,
    pub config: PathBuf,
    pub nodes: Vec<Node>,
    pub token: String,
    /// Extra environment for every server.
    pub env: Vec<(String, String)>,
}

impl Cluster {
    /// `n` servers on a new database of `admin_url`, with `config` as their config file; the first one
    /// starts alone (it creates the administrator), the others after it.
    pub async fn start(admin_url: &str, n: usize, config: &str) -> Cluster {
        Cluster::start_with(admin_url, n, config, Vec::new()).await
    }

    pub async fn start_with(
        admin_url: &str,
        n: usize,
        config: &str,
        env: Vec<(String, String)>,
    ) -> Cluster {
        let root = tempfile::tempdir().expect("tempdir");
        let config_path = root.path().join("config.toml");
        std::fs::write(&config_path, config).expect("config");
        let key = {
            use std::io::Read;
            let mut bytes = [0u8; 32];
            std::fs::File::open("/dev/urandom")
                .and_then(|mut f| f.read_exact(&mut bytes))
                .expect("random key");
            base64(&bytes)
        };
        let mut cluster = Cluster {
            store: fresh_database(admin_url).await,
            key,
            config: config_path,
            nodes: Vec::new(),
            token: String::new(),
            root,
            env,
        };
        for i in 0..n {
            let dir = cluster.root.path().join(format!("server{i}"));
            let log = cluster.root.path().join(format!("server{i}.log"));
            cluster.nodes.push(Node {
                dir,
                log,
                server: None,
            });
            cluster.up(i);
            if i == 0 {
                let token = std::fs::read_to_string(cluster.nodes[0].dir.join("admin-token"));
                cluster.token = token.expect("admin token").trim().to_string();
            }
        }
        cluster
    }

    /// Starts server `i` (again), on its own data dir; its log is appended to.
    pub fn up(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .expect("log file");
        let (store, key, env) = (&self.store, &self.key, &self.env);
        let config = self.config.as_os_str();
        let errors = log.try_clone().expect("log file");
        let configure = |cmd: &mut Command| {
            cmd.env("SWITCHYARD_STORE_URL", store)
                .env("SWITCHYARD_SECRETS_KEY", key)
                .env("SWITCHYARD_LOG", "info")
                .envs(env.iter().map(|(k, v)| (k, v)))
                .stderr(Stdio::from(errors));
        };
        let extra = ["--config".as_ref(), config];
        node.server = Some(serve_logged(&node.dir, &extra, configure, Some(log)));
    }

    /// `kill -9` of server `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut s) = self.nodes[i].server.take() {
            let _ = s.child.kill();
            let _ = s.child.wait();
        }
    }

    /// A clean stop of server `i` (SIGTERM), waited for.
    pub fn stop(&mut self, i: usize) {
        if let Some(mut s) = self.nodes[i].server.take() {
            signal(&s.child.id().to_string(), "TERM");
            let exit = s.child.wait().expect("wait");
            assert!(exit.success(), "server {i} stopped with {exit:?}");
        }
    }

    /// The running servers' indexes.
    pub fn running(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|i| self.nodes[*i].server.is_some())
            .collect()
    }

    /// `GET /api/v1/admin/servers` through server `i`.
    pub async fn servers(&self, http: &reqwest::Client, i: usize) -> Vec<Value> {
        let listed: Value = http
            .get(format!("{}/api/v1/admin/servers", self.nodes[i].url()))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("servers")
            .json()
            .await
            .expect("servers json");
        listed.as_array().cloned().unwrap_or_default()
    }

    /// The index of the server that leads, as server `through` sees it, once one does.
    pub async fn leader(&self, http: &reqwest::Client, through: usize) -> usize {
        for _ in 0..600 {
            let listed = self.servers(http, through).await;
            let lead = listed.iter().find(|s| s["leader"] == true);
            if let Some(addr) = lead.and_then(|s| s["address"].as_str()) {
                if let Some(i) = self.index_of(addr) {
                    return i;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no server leads");
    }

    /// The running server listening on `addr`.
    pub fn index_of(&self, addr: &str) -> Option<usize> {
        let url = format!("http://{addr}");
        self.running()
            .into_iter()
            .find(|i| self.nodes[*i].url() == url)
    }

    /// The store's lease (holder, epoch) and every recorded replica's epoch.
    pub async fn rows(&self) -> ((String, i64), Vec<i64>) {
        sqlx::any::install_default_drivers();
        let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(&self.store)
            .await
            .expect("connect to the cluster's store");
        let lease = sqlx::query("SELECT holder, epoch FROM leases WHERE name = 'leader'")
            .fetch_one(&mut conn)
            .await
            .expect("the lease");
        let epochs = sqlx::query("SELECT epoch FROM replicas")
            .fetch_all(&mut conn)
            .await
            .expect("the replicas");
        (
            (lease.get("holder"), lease.get("epoch")),
            epochs.iter().map(|r| r.get("epoch")).collect(),
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // What each server said, for whoever reads the failure.
            for (i, node) in self.nodes.iter().enumerate() {
                let log = node.logged();
                let tail: Vec<&str> = log.lines().rev().take(60).collect();
                eprintln!("--- server {i}'s last log lines:");
                tail.iter().rev().for_each(|l| eprintln!("{l}"));
            }
        }
        for i in 0..self.nodes.len() {
            // A paused server cannot die of a SIGKILL it never runs to: wake it first.
            if let Some(s) = &self.nodes[i].server {
                signal(&s.child.id().to_string(), "CONT");
            }
            self.kill(i);
        }
    }
}

/// Sends `SIG<name>` to `pid`.
pub fn signal(pid: &str, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), pid])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{name} {pid}");
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (k, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if k <= chunk.len() {
                out.push(ABC[((n >> shift) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The process ids in a data dir's replica pid files that are alive (not zombies), of the endpoint `name`'s
/// replicas (their ids begin with it).
pub fn live_replicas(data_dir: &Path, name: &str) -> Vec<String> {
    let prefix = format!("{name}-");
    std::fs::read_dir(data_dir.join("replicas").join("pids"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                .map(|p| p.trim().to_string())
                .filter(|p| alive(p))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether process `pid` runs (and is not a zombie).
pub fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit(')').next().unwrap_or("").split_whitespace().next() != Some("Z"))
        .unwrap_or(false)
}

/// A webhook receiver on loopback (`url`): it answers each POST after `pause`, counting what it was sent
/// (`got`) and the most requests it had in hand at once (`most`).
pub struct Receiver {
    pub url: String,
    pub got: Arc<AtomicUsize>,
    pub most: Arc<AtomicUsize>,
}

pub async fn receiver(pause: Duration) -> Receiver {
    let (got, most, now) = (
        Arc::default(),
        Arc::default(),
        Arc::new(AtomicUsize::new(0)),
    );
    let app = {
        let (got, most): (Arc<AtomicUsize>, Arc<AtomicUsize>) =
            (Arc::clone(&got), Arc::clone(&most));
        axum::Router::new().route(
            "/hook",
            axum::routing::post(move || {
                let (now, most, got) = (now.clone(), most.clone(), got.clone());
                async move {
                    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(n, Ordering::SeqCst);
                    tokio::time::sleep(pause).await;
                    now.fetch_sub(1, Ordering::SeqCst);
                    got.fetch_add(1, Ordering::SeqCst);
                    "ok"
                }
            }),
        )
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    Receiver {
        url: format!("http://{addr}/hook"),
        got,
        most,
    }
}
