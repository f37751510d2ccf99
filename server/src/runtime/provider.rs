//! The replica provider interface: what the reconciler asks of whatever runs replicas.
//!
//! Start one from a plan, tell whether it still runs, report its CPU use, stop it. The `local` provider
//! runs child processes; a Kubernetes provider would implement the same trait with pods.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use async_trait::async_trait;

/// One replica to start: the command line and environment with every placeholder but `{port}` filled in
/// (the provider chooses the port).
#[derive(Clone, PartialEq)]
pub struct ReplicaPlan {
    pub namespace: String,
    pub endpoint: String,
    pub replica_id: String,
    pub program: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
}

impl std::fmt::Debug for ReplicaPlan {
    // The environment holds decrypted secrets: show only its keys.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaPlan")
            .field("replica_id", &self.replica_id)
            .field("program", &self.program)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// A started replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaInfo {
    pub replica_id: String,
    pub addr: SocketAddr,
    pub pid: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicaStatus {
    Running,
    /// The process ended; the text says how (`exit status 3`, `killed by signal 9`).
    Exited(String),
}

#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The replica could not be started at all (missing program, no port): retrying will not help.
    #[error("{0}")]
    Start(String),
}

#[async_trait]
pub trait ReplicaProvider: Send + Sync + 'static {
    async fn start(&self, plan: &ReplicaPlan) -> Result<ReplicaInfo, ProviderError>;
    fn status(&self, replica_id: &str) -> ReplicaStatus;
    /// CPU seconds used by the replica so far, when the provider can tell.
    fn cpu_seconds(&self, replica_id: &str) -> Option<f64>;
    /// Stops the replica (gracefully, then by force) and forgets it.
    async fn stop(&self, replica_id: &str);
    /// Stops every replica; called on shutdown.
    async fn stop_all(&self);
}
