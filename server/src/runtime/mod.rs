//! The endpoint runtime: it runs each endpoint's replicas to match its spec and state, and publishes routes.
//!
//! The reconciler does that work at each tick, the scaler decides how many replicas an endpoint needs, and
//! the replica providers run them, away from the server's files ([`isolation`]).
//!
//! Data flow: the reconciler reads every endpoint from the store each tick (or at once when kicked),
//! starts and stops replicas through a [`provider::ReplicaProvider`], writes status back, and publishes a
//! [`RouteTable`] on a watch channel. The proxy never waits for the reconciler: it reads the latest table
//! (through [`crate::routing`], which both sides import), and records activity (last request, requests in
//! flight, wake-ups) in shared [`Activity`] counters.

pub mod analytics;
pub mod cluster;
pub mod decisions;
pub mod devices;
pub mod docker;
pub mod engine_load;
pub mod isolation;
pub mod launch;
pub mod leader;
pub mod local;
pub mod logs;
pub mod provider;
pub mod reconciler;
pub mod repositories;
pub mod retry;
pub mod routes;
pub mod scaler;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::routing::{self, Activity, RouteTable, RoutingHandle};

/// (namespace, name)
pub type EndpointKey = (String, String);

/// An endpoint's counters, with the id of the endpoint they count for.
type Counted = (String, Arc<Activity>);

/// The handle the API holds on the runtime. It derefs to the [`RoutingHandle`] it holds (the latest table,
/// [`RoutingHandle::kick`], the public host), which is what the proxy is given of it.
#[derive(Clone)]
pub struct RuntimeHandle {
    routing: RoutingHandle,
    /// By name, with the id of the endpoint they count for.
    activities: Arc<Mutex<HashMap<EndpointKey, Counted>>>,
    pub logs: Arc<logs::LogStore>,
    /// Base of `status.url`.
    pub public_url: String,
    /// Flips to true when the server shuts down (ends log streams, stops the reconciler).
    stop: Arc<watch::Sender<bool>>,
}

impl std::ops::Deref for RuntimeHandle {
    type Target = RoutingHandle;
    fn deref(&self) -> &RoutingHandle {
        &self.routing
    }
}

/// The part of the runtime's handle a reader of the routing table holds.
impl From<RuntimeHandle> for RoutingHandle {
    fn from(handle: RuntimeHandle) -> RoutingHandle {
        handle.routing
    }
}

impl RuntimeHandle {
    /// The activity counters of the endpoint `id` (named `namespace/name`), created on first use (they
    /// outlive table rebuilds). An endpoint made again under the same name starts from new counters, on
    /// every server, however soon after the deletion it comes.
    pub fn activity(&self, id: &str, namespace: &str, name: &str) -> Arc<Activity> {
        let mut map = match self.activities.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        let entry = map
            .entry((namespace.to_string(), name.to_string()))
            .or_insert_with(|| (id.to_string(), Arc::default()));
        if entry.0 != id {
            *entry = (id.to_string(), Arc::default());
        }
        entry.1.clone()
    }

    /// Forgets the counters of the deleted endpoint `id` (not those of one made since under its name).
    fn forget_activity(&self, id: &str, namespace: &str, name: &str) {
        if let Ok(mut map) = self.activities.lock() {
            let key = (namespace.to_string(), name.to_string());
            if map.get(&key).is_some_and(|(of, _)| of == id) {
                map.remove(&key);
            }
        }
    }

    pub fn stopping(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    pub fn signal_stop(&self) {
        self.stop.send_replace(true);
    }

    /// Has the proxy write access lines (see [`routing::access`]), which a task of this runtime puts in
    /// the replicas' logs (stream `access`), timed by `clock`.
    pub fn write_access_lines(&mut self, clock: Arc<dyn crate::clock::Clock>) {
        let (log, mut lines) = routing::AccessLog::new();
        self.routing.access = Some(log);
        let logs = self.logs.clone();
        tokio::spawn(async move {
            while let Some(l) = lines.recv().await {
                let line = logs::LogLine {
                    at: clock.now(),
                    replica: l.replica,
                    stream: "access",
                    line: l.line,
                };
                logs.push(&l.namespace, &l.endpoint, line);
            }
        });
    }

    /// Where an endpoint is served.
    pub fn endpoint_url(&self, namespace: &str, name: &str) -> String {
        format!("{}/endpoints/{namespace}/{name}", self.public_url)
    }
}

/// Creates the channel pair between the reconciler and its readers, for a server whose endpoints are served
/// under `public_url` (at `public_host`, see [`routing::public_host`]).
pub fn handle(
    public_url: String,
    public_host: String,
    log_lines: usize,
) -> (RuntimeHandle, watch::Sender<Arc<RouteTable>>) {
    let (routing, tx) = routing::channel(public_host);
    let handle = RuntimeHandle {
        routing,
        activities: Default::default(),
        logs: Arc::new(logs::LogStore::new(log_lines)),
        public_url: public_url.trim_end_matches('/').to_string(),
        stop: Arc::new(watch::channel(false).0),
    };
    (handle, tx)
}
