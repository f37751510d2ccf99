//! The replica provider interface: what the reconciler asks of whatever runs replicas.
//!
//! Get ready for a plan (pull its image), start a replica from it, tell whether it still runs, report its CPU
//! use, stop it, and list what runs already (a provider whose replicas outlive the server hands them over to
//! the next one). The `local` provider runs child processes, the `docker` provider containers; a Kubernetes
//! provider would implement the same trait with pods.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use async_trait::async_trait;

/// What a replica runs: a program on this machine, or a container image.
#[derive(Debug, Clone, PartialEq)]
pub enum Workload {
    /// The program and its arguments, with every placeholder but `{port}` filled in (the provider chooses
    /// the port).
    Process {
        program: String,
    },
    Container(ContainerPlan),
}

/// A container's image, entrypoint and port (arguments and environment are the plan's).
#[derive(Clone, PartialEq)]
pub struct ContainerPlan {
    pub image: String,
    /// Replaces the image's entrypoint (`model.command`).
    pub entrypoint: Option<Vec<String>>,
    /// The port the engine listens on inside the container.
    pub port: u16,
    /// `user:password` for the pull, from the spec (`custom.credentials`).
    pub credentials: Option<(String, String)>,
    /// The model repository and revision mounted at `/repository` (none with `skipRepoDownload`).
    pub repository: Option<(String, String)>,
}

impl std::fmt::Debug for ContainerPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContainerPlan")
            .field("image", &self.image)
            .field("entrypoint", &self.entrypoint)
            .field("port", &self.port)
            .field("credentials", &self.credentials.as_ref().map(|(u, _)| u))
            .field("repository", &self.repository)
            .finish()
    }
}

/// What a replica may use of the machine: its compute's CPUs and memory, and the GPUs it was given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resources {
    pub cpus: Option<f64>,
    pub memory_bytes: Option<u64>,
    /// Device ids as CUDA numbers them (see [`super::devices`]).
    pub devices: Vec<String>,
}

/// One replica to start.
#[derive(Clone, PartialEq)]
pub struct ReplicaPlan {
    pub namespace: String,
    pub endpoint: String,
    pub replica_id: String,
    /// The spec generation it runs (see [`super::reconciler::generation`]): what an adopted replica is
    /// matched against.
    pub generation: String,
    pub workload: Workload,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub resources: Resources,
}

impl std::fmt::Debug for ReplicaPlan {
    // The environment holds decrypted secrets: show only its keys.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaPlan")
            .field("replica_id", &self.replica_id)
            .field("workload", &self.workload)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("resources", &self.resources)
            .finish()
    }
}

/// A started replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaInfo {
    pub replica_id: String,
    pub addr: SocketAddr,
    /// The process id, or a container's id.
    pub handle: String,
}

/// A replica an earlier server started that runs still, as the provider found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub info: ReplicaInfo,
    pub namespace: String,
    pub endpoint: String,
    pub generation: String,
    /// The GPUs it was given.
    pub devices: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicaStatus {
    Running,
    /// The process ended; the text says how (`exit status 3`, `killed by signal 9`).
    Exited(String),
    /// The provider lost sight of it (its engine went away): it is replaced, without counting as a crash.
    Lost(String),
}

/// Whether a plan can start now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    /// Not yet (an image is being pulled, the engine does not answer); the text says what it waits for.
    Waiting(String),
    /// Never: retrying cannot help (the image does not exist, the registry refused the credentials).
    Failed(String),
}

#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The replica could not be started at all (missing program, no port): retrying will not help.
    #[error("{0}")]
    Start(String),
    /// Not now (the engine does not answer): the next pass tries again.
    #[error("{0}")]
    Unavailable(String),
}

/// What runs replicas: processes (`local`) or containers (`docker`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Process,
    Container,
}

#[async_trait]
pub trait ReplicaProvider: Send + Sync + 'static {
    fn kind(&self) -> Kind;
    /// Whether `plan` can start now; begins what it needs first (a pull) and says how far that got.
    async fn prepare(&self, _plan: &ReplicaPlan) -> Readiness {
        Readiness::Ready
    }
    async fn start(&self, plan: &ReplicaPlan) -> Result<ReplicaInfo, ProviderError>;
    fn status(&self, replica_id: &str) -> ReplicaStatus;
    /// CPU seconds used by the replica so far, when the provider can tell.
    fn cpu_seconds(&self, replica_id: &str) -> Option<f64>;
    /// Stops the replica (gracefully, then by force) and forgets it.
    async fn stop(&self, replica_id: &str);
    /// The replicas an earlier server left running, now this provider's to watch and stop (none for
    /// processes, which die with their server); `Err` when it cannot tell yet (its engine does not answer).
    async fn found(&self) -> Result<Vec<Found>, String> {
        Ok(Vec::new())
    }
    /// Called on shutdown: stops every replica, or leaves them running for the next server when the
    /// provider keeps them across restarts.
    async fn stop_all(&self);
    /// Called when this server stops leading while it runs on: lets go of every replica for the next
    /// leader. Processes die with their server and stop here (the next leader starts its own); a
    /// provider whose replicas outlive their server forgets them, for the next leader to adopt.
    async fn abandon(&self) {
        self.stop_all().await
    }
    /// The term the next replicas are started and watched in: a provider that acts on its own (removing
    /// containers no replica owns) does so only while the term holds. Not called for a provider run alone.
    fn in_term(&self, _lead: super::leader::Lead) {}
}
