//! The `docker` replica provider: each replica is a container of the image its spec names, on a Docker
//! Engine ([`engine`]), confined ([`create`]), its image pulled first ([`pull`]).
//!
//! Replicas join their namespace's bridge (`<[runtime.docker] network>-<namespace>`, created when missing)
//! and are reached at their address on it, on the port their image's contract names; nothing is
//! published, and a replica cannot reach another namespace's. Each container
//! carries labels naming this server (its instance id), the endpoint, the replica and its spec generation.
//! A watcher lists this server's containers every second: it notes those that exited (the reconciler
//! restarts them with backoff), samples their CPU use, removes those nobody owns, and, when the engine stops
//! answering, reports the replicas lost so they are replaced once it is back. Containers outlive the server
//! unless `stop_on_shutdown`: the next server is handed those still running ([`ReplicaProvider::found`]).

pub mod build;
pub mod create;
pub mod engine;
pub mod pull;

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use bollard::auth::DockerCredentials;
use bollard::container::LogOutput;
use bollard::models::{ContainerSummary, ContainerSummaryStateEnum, NetworkCreateRequest};
use bollard::query_parameters::{
    CreateContainerOptions, ListContainersOptions, LogsOptions, RemoveContainerOptions,
    StatsOptions, StopContainerOptions,
};
use bollard::Docker;
use futures_util::StreamExt;

use self::engine::{describe, unreachable, Engine, CALL};
use self::pull::Pulls;
use super::logs::{LogStore, ReplicaOutput};
use super::provider::{
    Found, Kind, ProviderError, Readiness, ReplicaInfo, ReplicaPlan, ReplicaProvider,
    ReplicaStatus, Workload,
};
use super::repositories::{self, Repositories};
use crate::clock::Clock;
use crate::config::{DockerConfig, PullPolicy};

/// How often the watcher looks at this server's containers.
const WATCH: Duration = Duration::from_secs(1);

/// Watches in a row that found the engine gone before its replicas count as lost (a blip is not).
const LOST_AFTER: u32 = 3;

/// A replica this provider watches.
struct Tracked {
    /// Its container's id; empty while it is being created.
    container: String,
    /// When its container was known to exist: a listing begun before then may not show it yet.
    since: std::time::Instant,
    status: ReplicaStatus,
    cpu_seconds: Option<f64>,
}

struct Inner {
    engine: Engine,
    config: DockerConfig,
    /// This server's instance id, on every container it starts.
    instance: String,
    grace: Duration,
    logs: Arc<LogStore>,
    clock: Arc<dyn Clock>,
    pulls: Arc<Pulls>,
    repositories: Arc<Repositories>,
    replicas: Mutex<HashMap<String, Tracked>>,
    /// The networks made (or found) already, one per namespace.
    networks: Mutex<HashSet<String>>,
    /// Whether the next server's hand-over happened: from then on, containers of this instance that no
    /// replica is tracked for are removed.
    swept: AtomicBool,
    /// Watches in a row that could not reach the engine.
    unanswered: AtomicU32,
    stopping: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Containers being stopped (given their grace time), which the watcher leaves alone.
    leaving: Mutex<HashSet<String>>,
    /// With several servers, the term this provider acts in: containers no replica owns are removed
    /// only while it holds (another leader may have started them).
    term: Mutex<Option<super::leader::Lead>>,
}

pub struct DockerProvider {
    inner: Arc<Inner>,
    watcher: tokio::task::JoinHandle<()>,
}

impl Drop for DockerProvider {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

impl DockerProvider {
    /// A provider on the engine `config.host` names, for the server whose instance id is `instance`. It
    /// connects on first use: an engine that does not answer yet holds replicas back, not the server.
    pub fn new(
        config: DockerConfig,
        instance: String,
        grace: Duration,
        repositories: Arc<Repositories>,
        logs: Arc<LogStore>,
        clock: Arc<dyn Clock>,
    ) -> DockerProvider {
        let inner = Arc::new(Inner {
            engine: Engine::new(config.host.as_deref()),
            config,
            instance,
            grace,
            logs,
            clock,
            pulls: Arc::new(Pulls::default()),
            repositories,
            replicas: Mutex::new(HashMap::new()),
            networks: Mutex::new(HashSet::new()),
            swept: AtomicBool::new(false),
            term: Mutex::new(None),
            unanswered: AtomicU32::new(0),
            stopping: Mutex::new(Vec::new()),
            leaving: Mutex::new(HashSet::new()),
        });
        let watcher = tokio::spawn(watch(Arc::downgrade(&inner)));
        DockerProvider { inner, watcher }
    }

    /// The engine this provider uses.
    pub fn host(&self) -> &str {
        &self.inner.engine.host
    }
}

impl Inner {
    fn replicas(&self) -> std::sync::MutexGuard<'_, HashMap<String, Tracked>> {
        self.replicas.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The client, or why the engine cannot be used now.
    async fn docker(&self) -> Result<engine::Connected, String> {
        self.engine.connect().await
    }

    /// An error from a call: when it says the engine is gone, the connection is made again next time.
    async fn failed(&self, what: &str, e: &bollard::errors::Error) -> ProviderError {
        if unreachable(e) {
            self.engine.lost().await;
            ProviderError::Unavailable(self.engine.unanswered(&describe(e)))
        } else {
            ProviderError::Start(format!("{what}: {}", describe(e)))
        }
    }

    fn networks(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.networks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The bridge of a namespace's replicas, created when missing.
    async fn ensure_network(&self, docker: &Docker, name: &str) -> Result<(), ProviderError> {
        if self.networks().contains(name) {
            return Ok(());
        }
        let found = tokio::time::timeout(
            CALL,
            docker.inspect_network(
                name,
                None::<bollard::query_parameters::InspectNetworkOptions>,
            ),
        )
        .await;
        if !matches!(found, Ok(Ok(_))) {
            let request = NetworkCreateRequest {
                name: name.to_string(),
                driver: Some("bridge".into()),
                labels: Some(HashMap::from([(
                    create::INSTANCE.to_string(),
                    self.instance.clone(),
                )])),
                ..Default::default()
            };
            match tokio::time::timeout(CALL, docker.create_network(request)).await {
                Ok(Ok(_)) => tracing::info!(network = %name, "created the replicas' network"),
                Ok(Err(e)) if describe(&e).contains("already exists") => {}
                Ok(Err(e)) => {
                    return Err(self.failed(&format!("creating network {name}"), &e).await)
                }
                Err(_) => {
                    return Err(ProviderError::Unavailable(
                        self.engine.unanswered("no answer"),
                    ))
                }
            }
        }
        self.networks().insert(name.to_string());
        Ok(())
    }

    /// Credentials for pulling `image`: the spec's own, else the configured ones for its registry.
    fn credentials(
        &self,
        image: &str,
        own: Option<&(String, String)>,
    ) -> Option<DockerCredentials> {
        let registry = create::registry(image);
        let (username, password) = match own {
            Some((u, p)) => (u.clone(), p.clone()),
            None => {
                let login = self.config.registries.get(registry)?;
                (login.username.clone(), login.password.clone())
            }
        };
        Some(DockerCredentials {
            username: Some(username),
            password: Some(password),
            serveraddress: Some(registry.to_string()),
            ..Default::default()
        })
    }

    /// Creates and starts the container of `plan`; returns its id and address.
    async fn run(
        &self,
        docker: &engine::Connected,
        plan: &ReplicaPlan,
        container: &super::provider::ContainerPlan,
    ) -> Result<(String, SocketAddr), ProviderError> {
        let grace = i64::try_from(self.grace.as_secs().max(1)).unwrap_or(i64::MAX);
        let repository = match self.model_dir(plan, container) {
            Ok(dir) => dir,
            Err(Readiness::Failed(why)) => return Err(ProviderError::Start(why)),
            Err(Readiness::Waiting(why)) => return Err(ProviderError::Unavailable(why)),
            Err(Readiness::Ready) => None,
        };
        let body = create::body(
            plan,
            container,
            &self.config,
            &self.instance,
            docker.cpus,
            grace,
            repository.as_deref(),
        );
        let options = CreateContainerOptions {
            name: Some(create::name(&self.instance, plan)),
            ..Default::default()
        };
        let created =
            match tokio::time::timeout(CALL, docker.docker.create_container(Some(options), body))
                .await
            {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => {
                    let said = describe(&e).to_ascii_lowercase();
                    if said.contains("no such image") {
                        // Removed since it was pulled: pulled again at the next pass.
                        self.pulls.forget(&container.image);
                        return Err(ProviderError::Unavailable(format!(
                            "image {} is no longer on the Docker Engine; pulling it again",
                            container.image
                        )));
                    }
                    if said.contains("network") && said.contains("not found") {
                        // Removed since it was made: made again at the next pass.
                        let network = create::network(&self.config.network, &plan.namespace);
                        self.networks().remove(&network);
                        return Err(ProviderError::Unavailable(format!(
                            "the network {network} is gone from the Docker Engine; making it again"
                        )));
                    }
                    return Err(self
                        .failed(&format!("creating a container of {}", container.image), &e)
                        .await);
                }
                Err(_) => {
                    return Err(ProviderError::Unavailable(
                        self.engine.unanswered("no answer"),
                    ))
                }
            };
        let id = created.id;
        self.set_container(&plan.replica_id, &id);
        let started = tokio::time::timeout(
            CALL,
            docker.docker.start_container(
                &id,
                None::<bollard::query_parameters::StartContainerOptions>,
            ),
        )
        .await;
        let fail = match started {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(
                self.failed(&format!("starting a container of {}", container.image), &e)
                    .await,
            ),
            Err(_) => Some(ProviderError::Unavailable(
                self.engine.unanswered("no answer"),
            )),
        };
        if let Some(e) = fail {
            remove(&docker.docker, &id, Duration::ZERO).await;
            return Err(e);
        }
        let network = create::network(&self.config.network, &plan.namespace);
        let addr = match self.address(&docker.docker, &id, &network).await {
            Placed::At(ip) => SocketAddr::new(ip, container.port),
            // A container that exited at once has no address: the watcher reports how it ended (a port
            // nothing listens on, meanwhile).
            Placed::Exited => SocketAddr::new(IpAddr::from([127, 0, 0, 1]), 1),
            Placed::Unknown => {
                remove(&docker.docker, &id, Duration::ZERO).await;
                return Err(ProviderError::Unavailable(format!(
                    "the Docker Engine gave no address on {network} for a container of {}",
                    container.image
                )));
            }
        };
        Ok((id, addr))
    }

    /// The directory of the model `container` mounts (`None`: it mounts none), or what it waits for.
    fn model_dir(
        &self,
        plan: &ReplicaPlan,
        container: &super::provider::ContainerPlan,
    ) -> Result<Option<std::path::PathBuf>, Readiness> {
        let Some((repo, revision)) = &container.repository else {
            return Ok(None);
        };
        let token = plan.env.get("HF_TOKEN").map(String::as_str);
        match self.repositories.find(repo, revision, token) {
            repositories::Found::Here(dir) => Ok(Some(dir)),
            repositories::Found::Not(r) => Err(r),
        }
    }

    /// Where the container is on the replicas' network: asked up to three times (one answer lost is no
    /// reason to give up on a container that runs), and not again once it has stopped.
    async fn address(&self, docker: &Docker, id: &str, network: &str) -> Placed {
        for _ in 0..3 {
            let inspected = tokio::time::timeout(
                CALL,
                docker.inspect_container(
                    id,
                    None::<bollard::query_parameters::InspectContainerOptions>,
                ),
            )
            .await;
            if let Ok(Ok(c)) = inspected {
                if c.state.as_ref().and_then(|s| s.running) == Some(false) {
                    return Placed::Exited;
                }
                let ip = (c.network_settings.and_then(|n| n.networks))
                    .and_then(|n| n.get(network)?.ip_address.as_deref()?.parse().ok());
                if let Some(ip) = ip {
                    return Placed::At(ip);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Placed::Unknown
    }

    fn set_container(&self, replica: &str, container: &str) {
        if let Some(t) = self.replicas().get_mut(replica) {
            t.container = container.to_string();
            t.since = std::time::Instant::now();
        }
    }

    fn leaving(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.leaving.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Copies a container's output into the log store, from `tail` lines back.
    fn follow_logs(
        &self,
        docker: Docker,
        container: String,
        tracked: (String, String, String),
        tail: &str,
    ) {
        let (logs, clock) = (self.logs.clone(), self.clock.clone());
        let options = LogsOptions {
            follow: true,
            stdout: true,
            stderr: true,
            tail: tail.to_string(),
            ..Default::default()
        };
        tokio::spawn(async move {
            let mut out = ReplicaOutput::new(logs, clock, tracked);
            let mut stream = docker.logs(&container, Some(options));
            while let Some(Ok(chunk)) = stream.next().await {
                match chunk {
                    LogOutput::StdErr { message } => out.write("stderr", &message),
                    LogOutput::StdOut { message } | LogOutput::Console { message } => {
                        out.write("stdout", &message)
                    }
                    LogOutput::StdIn { .. } => {}
                }
            }
            out.finish();
        });
    }
}

/// Where a container just started is.
enum Placed {
    At(IpAddr),
    /// It stopped already.
    Exited,
    /// The engine did not say.
    Unknown,
}

/// Stops a container (SIGTERM, then SIGKILL after `grace`) and removes it with its volumes.
async fn remove(docker: &Docker, id: &str, grace: Duration) {
    if !grace.is_zero() {
        let t = i32::try_from(grace.as_secs().max(1)).unwrap_or(i32::MAX);
        let options = StopContainerOptions {
            t: Some(t),
            signal: None,
        };
        let _ = tokio::time::timeout(grace + CALL, docker.stop_container(id, Some(options))).await;
    }
    let options = RemoveContainerOptions {
        force: true,
        v: true,
        ..Default::default()
    };
    if let Ok(Err(e)) = tokio::time::timeout(CALL, docker.remove_container(id, Some(options))).await
    {
        if !describe(&e)
            .to_ascii_lowercase()
            .contains("no such container")
        {
            tracing::warn!(container = %id, error = %describe(&e), "removing a replica's container");
        }
    }
}

/// How an exited container ended, from its summary's status (`Exited (3) 2 seconds ago`).
fn exit_of(summary: &ContainerSummary) -> String {
    let status = summary.status.as_deref().unwrap_or_default();
    match status
        .split_once('(')
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(code, _)| code.trim())
    {
        Some(code) => format!("exit status {code}"),
        None => format!(
            "container {}",
            summary.state.map(|s| s.to_string()).unwrap_or_default()
        ),
    }
}

fn label<'a>(summary: &'a ContainerSummary, key: &str) -> Option<&'a str> {
    summary.labels.as_ref()?.get(key).map(String::as_str)
}

/// This server's containers (stopped ones too).
async fn ours(
    inner: &Inner,
    docker: &Docker,
) -> Result<Vec<ContainerSummary>, bollard::errors::Error> {
    let options = ListContainersOptions {
        all: true,
        filters: Some(HashMap::from([(
            "label".to_string(),
            vec![format!("{}={}", create::INSTANCE, inner.instance)],
        )])),
        ..Default::default()
    };
    match tokio::time::timeout(CALL, docker.list_containers(Some(options))).await {
        Ok(listed) => listed,
        Err(_) => Err(bollard::errors::Error::RequestTimeoutError),
    }
}

/// Every [`WATCH`]: notes how this server's containers are, until the provider is dropped.
async fn watch(inner: Weak<Inner>) {
    let mut tick = tokio::time::interval(WATCH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        if inner.replicas().is_empty() && !inner.swept.load(Ordering::Acquire) {
            continue;
        }
        let listed_at = std::time::Instant::now();
        let listed = match inner.docker().await {
            Ok(d) => ours(&inner, &d.docker).await.map(|l| (d, l)),
            Err(why) => Err(bollard::errors::Error::IOError {
                err: std::io::Error::other(why),
            }),
        };
        match listed {
            Ok((docker, list)) => {
                inner.unanswered.store(0, Ordering::Release);
                observe(&inner, &docker.docker, &list, listed_at).await;
            }
            Err(e) => {
                inner.engine.lost().await;
                let n = inner.unanswered.fetch_add(1, Ordering::AcqRel) + 1;
                if n >= LOST_AFTER {
                    let why = inner.engine.unanswered(&describe(&e));
                    for t in inner.replicas().values_mut() {
                        if t.status == ReplicaStatus::Running {
                            t.status = ReplicaStatus::Lost(why.clone());
                        }
                    }
                }
            }
        }
    }
}

/// Notes each tracked replica's state from `list`, samples the CPU of those that run, and removes this
/// server's containers no replica is tracked for.
/// `listed_at`: when the listing began (a container created after it is not in it).
async fn observe(
    inner: &Inner,
    docker: &Docker,
    list: &[ContainerSummary],
    listed_at: std::time::Instant,
) {
    let by_replica: HashMap<&str, &ContainerSummary> = list
        .iter()
        .filter_map(|c| Some((label(c, create::REPLICA)?, c)))
        .collect();
    let mut sample = Vec::new();
    {
        let mut replicas = inner.replicas();
        for (id, t) in replicas.iter_mut() {
            if t.container.is_empty() || matches!(t.status, ReplicaStatus::Exited(_)) {
                continue;
            }
            t.status = match by_replica.get(id.as_str()) {
                Some(c) if matches!(c.state, Some(ContainerSummaryStateEnum::RUNNING)) => {
                    sample.push((id.clone(), t.container.clone()));
                    match &t.status {
                        // Lost stays lost: the reconciler replaces it.
                        ReplicaStatus::Lost(why) => ReplicaStatus::Lost(why.clone()),
                        _ => ReplicaStatus::Running,
                    }
                }
                Some(c)
                    if matches!(
                        c.state,
                        Some(
                            ContainerSummaryStateEnum::CREATED
                                | ContainerSummaryStateEnum::RESTARTING
                        )
                    ) =>
                {
                    t.status.clone()
                }
                Some(c) => ReplicaStatus::Exited(exit_of(c)),
                None if t.since < listed_at => {
                    ReplicaStatus::Exited("its container was removed".into())
                }
                None => t.status.clone(),
            };
        }
    }
    let leads = inner
        .term
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .is_none_or(super::leader::Lead::valid);
    if inner.swept.load(Ordering::Acquire) && leads {
        let tracked: HashSet<String> = inner.replicas().keys().cloned().collect();
        let leaving = inner.leaving().clone();
        for c in list {
            let owned = label(c, create::REPLICA).is_some_and(|r| tracked.contains(r))
                || c.id.as_ref().is_some_and(|id| leaving.contains(id));
            if let (false, Some(id)) = (owned, c.id.as_deref()) {
                tracing::info!(container = %id, "removing a container of this server that no replica owns");
                remove(docker, id, Duration::ZERO).await;
            }
        }
    }
    let stats = sample.into_iter().map(|(replica, container)| async move {
        let options = StatsOptions {
            stream: false,
            one_shot: true,
        };
        let mut s = docker.stats(&container, Some(options));
        let got = tokio::time::timeout(CALL, s.next())
            .await
            .ok()
            .flatten()
            .and_then(Result::ok);
        let ns = got.and_then(|s| s.cpu_stats?.cpu_usage?.total_usage);
        (replica, ns)
    });
    for (replica, ns) in futures_util::future::join_all(stats).await {
        if let (Some(t), Some(ns)) = (inner.replicas().get_mut(&replica), ns) {
            t.cpu_seconds = Some(ns as f64 / 1e9);
        }
    }
}

#[async_trait]
impl ReplicaProvider for DockerProvider {
    fn kind(&self) -> Kind {
        Kind::Container
    }

    async fn prepare(&self, plan: &ReplicaPlan) -> Readiness {
        let Workload::Container(c) = &plan.workload else {
            return Readiness::Ready;
        };
        let inner = &self.inner;
        let docker = match inner.docker().await {
            Ok(d) => d,
            Err(why) => return Readiness::Waiting(format!("{why}; retrying")),
        };
        let image = self.image_readiness(&docker, c).await;
        let model = match inner.model_dir(plan, c) {
            Ok(_) => Readiness::Ready,
            Err(waiting) => waiting,
        };
        match (image, model) {
            (Readiness::Failed(why), _) | (_, Readiness::Failed(why)) => Readiness::Failed(why),
            (Readiness::Waiting(a), Readiness::Waiting(b)) => {
                Readiness::Waiting(format!("{a}; {b}"))
            }
            (Readiness::Waiting(why), _) | (_, Readiness::Waiting(why)) => Readiness::Waiting(why),
            (Readiness::Ready, Readiness::Ready) => Readiness::Ready,
        }
    }

    async fn start(&self, plan: &ReplicaPlan) -> Result<ReplicaInfo, ProviderError> {
        self.start_container(plan).await
    }

    fn status(&self, replica_id: &str) -> ReplicaStatus {
        self.status_of(replica_id)
    }

    fn cpu_seconds(&self, replica_id: &str) -> Option<f64> {
        self.inner.replicas().get(replica_id)?.cpu_seconds
    }

    async fn stop(&self, replica_id: &str) {
        self.stop_replica(replica_id).await
    }

    async fn found(&self) -> Result<Vec<Found>, String> {
        self.adoptable().await
    }

    async fn stop_all(&self) {
        self.shutdown().await
    }

    fn in_term(&self, lead: super::leader::Lead) {
        *self.inner.term.lock().unwrap_or_else(|e| e.into_inner()) = Some(lead);
    }

    async fn abandon(&self) {
        let n = {
            let mut replicas = self.inner.replicas();
            let n = replicas.len();
            replicas.clear();
            n
        };
        // Another server leads now: what runs is its to adopt, and nothing here sweeps it away.
        self.inner.swept.store(false, Ordering::Release);
        tracing::info!(
            replicas = n,
            "leaving the replicas' containers to the next leader"
        );
    }
}

impl DockerProvider {
    /// Whether the engine has the image of `c` (pulling it when the policy says).
    async fn image_readiness(
        &self,
        docker: &engine::Connected,
        c: &super::provider::ContainerPlan,
    ) -> Readiness {
        let inner = &self.inner;
        let always = inner.config.pull == PullPolicy::Always;
        let key = pull::key(&c.image, c.credentials.as_ref());
        if let Some(state) = inner.pulls.state(&key, &c.image, always) {
            return state;
        }
        // An image pulled with an endpoint's own credentials is that endpoint's: another one pulls it
        // with its own (or none) before using the engine's copy, so a refused pull is refused.
        let shared = c.credentials.is_none() && !inner.pulls.private(&c.image);
        if !always && shared {
            let here = tokio::time::timeout(CALL, docker.docker.inspect_image(&c.image)).await;
            match here {
                Ok(Ok(_)) => {
                    inner.pulls.have(&key);
                    return Readiness::Ready;
                }
                Ok(Err(e)) if unreachable(&e) => {
                    inner.engine.lost().await;
                    return Readiness::Waiting(format!("{}; retrying", inner.engine.unanswered(&describe(&e))));
                }
                Err(_) => return Readiness::Waiting(format!("{}; retrying", inner.engine.unanswered("no answer"))),
                Ok(Err(_)) if inner.config.pull == PullPolicy::Never => {
                    return Readiness::Failed(format!(
                        "image {} is not on the Docker Engine, and [runtime.docker] pull = \"never\"",
                        c.image
                    ))
                }
                Ok(Err(_)) => {}
            }
        }
        let credentials = inner.credentials(&c.image, c.credentials.as_ref());
        let own = c.credentials.is_some();
        let pulling = (key.as_str(), c.image.as_str());
        inner
            .pulls
            .begin(docker.docker.clone(), pulling, credentials, own)
    }

    async fn start_container(&self, plan: &ReplicaPlan) -> Result<ReplicaInfo, ProviderError> {
        let Workload::Container(container) = &plan.workload else {
            return Err(ProviderError::Start(
                "this server runs replicas as containers ([runtime] provider = \"docker\"); a custom router's command cannot run here".into(),
            ));
        };
        let inner = &self.inner;
        let docker = inner.docker().await.map_err(ProviderError::Unavailable)?;
        let network = create::network(&inner.config.network, &plan.namespace);
        inner.ensure_network(&docker.docker, &network).await?;
        // Tracked before it exists, so the watcher never takes it for someone else's.
        inner.replicas().insert(
            plan.replica_id.clone(),
            Tracked {
                container: String::new(),
                since: std::time::Instant::now(),
                status: ReplicaStatus::Running,
                cpu_seconds: None,
            },
        );
        match inner.run(&docker, plan, container).await {
            Ok((id, addr)) => {
                let who = (
                    plan.namespace.clone(),
                    plan.endpoint.clone(),
                    plan.replica_id.clone(),
                );
                inner.follow_logs(docker.docker, id.clone(), who, "all");
                Ok(ReplicaInfo {
                    replica_id: plan.replica_id.clone(),
                    addr,
                    handle: id,
                })
            }
            Err(e) => {
                inner.replicas().remove(&plan.replica_id);
                Err(e)
            }
        }
    }

    fn status_of(&self, replica_id: &str) -> ReplicaStatus {
        match self.inner.replicas().get(replica_id) {
            Some(t) => t.status.clone(),
            None => ReplicaStatus::Exited("unknown replica".into()),
        }
    }

    async fn stop_replica(&self, replica_id: &str) {
        let Some(t) = self.inner.replicas().remove(replica_id) else {
            return;
        };
        if t.container.is_empty() {
            return;
        }
        let (inner, grace) = (self.inner.clone(), self.inner.grace);
        // The watcher leaves it alone while it has its grace time.
        inner.leaving().insert(t.container.clone());
        let stopping = tokio::spawn(async move {
            match inner.docker().await {
                Ok(d) => remove(&d.docker, &t.container, grace).await,
                // Gone with the engine; the watcher removes what is left once it is back.
                Err(why) => tracing::warn!(container = %t.container, "{why}: not removed now"),
            }
            inner.leaving().remove(&t.container);
        });
        let mut all = self
            .inner
            .stopping
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        all.retain(|h| !h.is_finished());
        all.push(stopping);
    }

    /// This server's running containers, tracked from now on; `Err` when the engine cannot list them (the
    /// next server's adoption waits for it, and nothing is removed meanwhile).
    async fn adoptable(&self) -> Result<Vec<Found>, String> {
        let inner = &self.inner;
        let docker = inner.docker().await?;
        let list = match ours(inner, &docker.docker).await {
            Ok(list) => list,
            Err(e) => {
                inner.engine.lost().await;
                return Err(inner.engine.unanswered(&describe(&e)));
            }
        };
        let mut found = Vec::new();
        for c in &list {
            let running = matches!(c.state, Some(ContainerSummaryStateEnum::RUNNING));
            let (Some(id), Some(ns), Some(endpoint), Some(replica), Some(generation), Some(port)) = (
                c.id.clone(),
                label(c, create::NAMESPACE),
                label(c, create::ENDPOINT),
                label(c, create::REPLICA),
                label(c, create::GENERATION),
                label(c, create::PORT).and_then(|p| p.parse::<u16>().ok()),
            ) else {
                continue;
            };
            let ip = c
                .network_settings
                .as_ref()
                .and_then(|n| {
                    n.networks
                        .as_ref()?
                        .get(&create::network(&inner.config.network, ns))?
                        .ip_address
                        .clone()
                })
                .and_then(|ip| ip.parse::<IpAddr>().ok());
            let Some(ip) = ip.filter(|_| running) else {
                continue;
            };
            inner.replicas().insert(
                replica.to_string(),
                Tracked {
                    container: id.clone(),
                    since: std::time::Instant::now(),
                    status: ReplicaStatus::Running,
                    cpu_seconds: None,
                },
            );
            let who = (ns.to_string(), endpoint.to_string(), replica.to_string());
            inner.follow_logs(docker.docker.clone(), id.clone(), who, "100");
            let devices = label(c, create::DEVICES).unwrap_or_default();
            found.push(Found {
                info: ReplicaInfo {
                    replica_id: replica.to_string(),
                    addr: SocketAddr::new(ip, port),
                    handle: id,
                },
                namespace: ns.to_string(),
                endpoint: endpoint.to_string(),
                generation: generation.to_string(),
                devices: devices
                    .split(',')
                    .filter(|d| !d.is_empty())
                    .map(str::to_string)
                    .collect(),
            });
        }
        inner.swept.store(true, Ordering::Release);
        Ok(found)
    }

    async fn shutdown(&self) {
        if self.inner.config.stop_on_shutdown {
            let ids: Vec<String> = self.inner.replicas().keys().cloned().collect();
            for id in ids {
                self.stop_replica(&id).await;
            }
        } else {
            let n = self.inner.replicas().len();
            if n > 0 {
                tracing::info!(replicas = n, "leaving the replicas' containers running for the next server ([runtime.docker] stop_on_shutdown = false)");
            }
        }
        let stopping = std::mem::take(
            &mut *self
                .inner
                .stopping
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        futures_util::future::join_all(stopping).await;
    }
}
