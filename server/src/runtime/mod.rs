//! The endpoint runtime: the reconciler that keeps each endpoint's replicas matching its spec and state,
//! the scaler that decides how many it needs, the replica providers that run them, and the routing
//! table the serving proxy reads.
//!
//! Data flow: the reconciler reads every endpoint from the store each tick (or at once when kicked),
//! starts and stops replicas through a [`provider::ReplicaProvider`], writes status back, and publishes a
//! [`RouteTable`] on a watch channel. The proxy never waits for the reconciler: it reads the latest table,
//! and records activity (last request, requests in flight, wake-ups) in shared [`Activity`] counters.

pub mod launch;
pub mod local;
pub mod logs;
pub mod provider;
pub mod reconciler;
pub mod scaler;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use tokio::sync::{watch, Notify};

use crate::model::{Cidr, EndpointState, EndpointType, LoadBalancer};

/// Live counters of one endpoint, shared by the proxy (writer) and the reconciler (reader). They outlive
/// routing-table rebuilds.
#[derive(Debug, Default)]
pub struct Activity {
    /// Unix milliseconds of the last request that reached (or asked to wake) the endpoint.
    last_request_ms: AtomicI64,
    /// Requests in flight through the proxy.
    pub in_flight: AtomicU32,
    /// Set by a request to a scaled-to-zero endpoint; taken by the reconciler.
    wake: AtomicBool,
    /// Requests held while the endpoint wakes up.
    pub waiting: AtomicU32,
    pub stats: crate::proxy::metrics::EndpointStats,
}

impl Activity {
    pub fn touch(&self, now: DateTime<Utc>) {
        self.last_request_ms
            .fetch_max(now.timestamp_millis(), Ordering::Relaxed);
    }

    pub fn last_request(&self) -> Option<DateTime<Utc>> {
        match self.last_request_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => DateTime::from_timestamp_millis(ms),
        }
    }

    pub fn request_wake(&self) {
        self.wake.store(true, Ordering::Release);
    }

    pub fn take_wake(&self) -> bool {
        self.wake.swap(false, Ordering::AcqRel)
    }
}

/// A ready replica as the proxy sees it.
#[derive(Debug)]
pub struct Backend {
    pub replica_id: String,
    pub addr: SocketAddr,
    /// `addr` as a `Host` header, made once rather than per request.
    pub host: axum::http::HeaderValue,
    /// Requests in flight to this replica (least-connections balancing).
    pub in_flight: AtomicU32,
    /// The proxy's idle connections to it.
    pub pool: crate::proxy::upstream::Pool,
}

impl Backend {
    pub fn new(replica_id: String, addr: SocketAddr) -> Backend {
        Backend {
            // A socket address is always a valid header value.
            host: axum::http::HeaderValue::from_str(&addr.to_string())
                .unwrap_or_else(|_| axum::http::HeaderValue::from_static("127.0.0.1")),
            replica_id,
            addr,
            in_flight: AtomicU32::new(0),
            pool: Default::default(),
        }
    }

    /// Sends `req` (its URI a path) to this replica with the replica's own address as `Host`, as if called
    /// directly: see [`crate::proxy::upstream::send`].
    pub async fn send(
        &self,
        mut req: axum::http::Request<axum::body::Body>,
    ) -> Result<crate::proxy::upstream::Exchange, crate::proxy::upstream::Error> {
        req.headers_mut()
            .insert(axum::http::header::HOST, self.host.clone());
        crate::proxy::upstream::send(&self.pool, self.addr, req).await
    }

    /// A request of the server's own (a health check, a metrics scrape, the backend list for a custom
    /// router; its URI a path), on the same connections as traffic: the status and at most `limit` bytes
    /// of body, or `None` when no whole answer came within `timeout`.
    pub async fn call(
        &self,
        req: axum::http::Request<axum::body::Body>,
        limit: usize,
        timeout: std::time::Duration,
    ) -> Option<(axum::http::StatusCode, axum::body::Bytes)> {
        use http_body_util::BodyExt;
        let answer = async {
            let (resp, sender) = self.send(req).await.ok()?;
            let (parts, body) = resp.into_parts();
            let body = http_body_util::Limited::new(body, limit).collect().await;
            // Read in full: the connection can take the next request.
            self.pool.give_back(sender);
            Some((parts.status, body.ok()?.to_bytes()))
        };
        tokio::time::timeout(timeout, answer).await.ok().flatten()
    }
}

/// Everything the proxy needs to serve one endpoint.
#[derive(Debug)]
pub struct Route {
    pub id: String,
    /// The spec generation its replicas run (part of the response cache's key).
    pub generation: String,
    pub namespace: String,
    pub name: String,
    pub state: EndpointState,
    pub endpoint_type: EndpointType,
    /// `network.cidrBlock` on: callers must come from one of these.
    pub allow: Option<Vec<Cidr>>,
    pub load_balancer: LoadBalancer,
    /// `experimentalFeatures.mcpLb`: `Some(stateful)`.
    pub mcp_lb: Option<bool>,
    pub cache: bool,
    pub private_account: Option<String>,
    /// Custom domain and path prefix (`route`).
    pub domain: Option<(String, String)>,
    /// Ready replicas, in a stable order.
    pub backends: Vec<Arc<Backend>>,
    /// The custom-router sidecar every request goes through, once it knows the replicas.
    pub router: Option<Arc<Backend>>,
    pub activity: Arc<Activity>,
}

/// The published view of every endpoint, rebuilt by the reconciler when something changes.
#[derive(Debug, Default)]
pub struct RouteTable {
    /// Namespace → name → route (looked up without allocating).
    by_name: HashMap<String, HashMap<String, Arc<Route>>>,
    /// Domain → routes under it, longest path prefix first.
    by_domain: HashMap<String, Vec<Arc<Route>>>,
}

impl RouteTable {
    pub fn new(routes: Vec<Arc<Route>>) -> RouteTable {
        let mut table = RouteTable::default();
        for r in routes {
            if let Some((domain, _)) = &r.domain {
                table
                    .by_domain
                    .entry(crate::proxy::bare_host(domain))
                    .or_default()
                    .push(r.clone());
            }
            table
                .by_name
                .entry(r.namespace.clone())
                .or_default()
                .insert(r.name.clone(), r);
        }
        for routes in table.by_domain.values_mut() {
            routes.sort_by_key(|r| {
                std::cmp::Reverse(r.domain.as_ref().map(|(_, p)| p.len()).unwrap_or(0))
            });
        }
        table
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<&Arc<Route>> {
        self.by_name.get(namespace)?.get(name)
    }

    /// The endpoint serving `host` (bare: see [`crate::proxy::bare_host`]) + `path` through its custom
    /// domain, and the path left after its prefix.
    pub fn by_host<'p>(&self, host: &str, path: &'p str) -> Option<(&Arc<Route>, &'p str)> {
        let routes = self.by_domain.get(host)?;
        routes.iter().find_map(|r| {
            let (_, prefix) = r.domain.as_ref()?;
            let prefix = prefix.trim_end_matches('/');
            let rest = path.strip_prefix(prefix)?;
            (rest.is_empty() || rest.starts_with('/')).then_some((r, rest))
        })
    }

    pub fn has_domains(&self) -> bool {
        !self.by_domain.is_empty()
    }

    pub fn routes(&self) -> impl Iterator<Item = &Arc<Route>> {
        self.by_name.values().flat_map(|m| m.values())
    }
}

/// (namespace, name)
pub type EndpointKey = (String, String);

/// The handle the API and the proxy hold on the runtime.
#[derive(Clone)]
pub struct RuntimeHandle {
    pub table: watch::Receiver<Arc<RouteTable>>,
    kick: Arc<Notify>,
    activities: Arc<Mutex<HashMap<EndpointKey, Arc<Activity>>>>,
    pub logs: Arc<logs::LogStore>,
    /// Base of `status.url`.
    pub public_url: String,
    /// Its host, bare (see [`crate::proxy::bare_host`]): never an endpoint's custom domain.
    pub public_host: String,
    /// Flips to true when the server shuts down (ends log streams, stops the reconciler).
    stop: Arc<watch::Sender<bool>>,
}

impl RuntimeHandle {
    /// Asks the reconciler to look at the endpoints now rather than at its next tick.
    pub fn kick(&self) {
        self.kick.notify_one();
    }

    /// The activity counters of an endpoint, created on first use (they outlive table rebuilds).
    pub fn activity(&self, namespace: &str, name: &str) -> Arc<Activity> {
        let mut map = match self.activities.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        map.entry((namespace.to_string(), name.to_string()))
            .or_default()
            .clone()
    }

    fn forget_activity(&self, namespace: &str, name: &str) {
        if let Ok(mut map) = self.activities.lock() {
            map.remove(&(namespace.to_string(), name.to_string()));
        }
    }

    pub fn stopping(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    pub fn signal_stop(&self) {
        self.stop.send_replace(true);
    }

    /// Where an endpoint is served.
    pub fn endpoint_url(&self, namespace: &str, name: &str) -> String {
        format!("{}/endpoints/{namespace}/{name}", self.public_url)
    }
}

/// The host of the server's public URL, bare (see [`crate::proxy::bare_host`]); `None` unless `url` is an
/// http(s) URL with a host.
pub fn public_host(url: &str) -> Option<String> {
    let url = reqwest::Url::parse(url).ok()?;
    if !matches!(url.scheme(), "http" | "https") {
        return None;
    }
    url.host_str().map(crate::proxy::bare_host)
}

/// Creates the channel pair between the reconciler and its readers, for a server whose endpoints are served
/// under `public_url` (at `public_host`, see [`public_host`]).
pub fn handle(
    public_url: String,
    public_host: String,
    log_lines: usize,
) -> (RuntimeHandle, watch::Sender<Arc<RouteTable>>) {
    let (tx, rx) = watch::channel(Arc::new(RouteTable::default()));
    let handle = RuntimeHandle {
        table: rx,
        kick: Arc::new(Notify::new()),
        activities: Default::default(),
        logs: Arc::new(logs::LogStore::new(log_lines)),
        public_host,
        public_url: public_url.trim_end_matches('/').to_string(),
        stop: Arc::new(watch::channel(false).0),
    };
    (handle, tx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::upstream::stub::{replica, Close};
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    #[tokio::test]
    async fn own_calls_take_the_whole_answer_within_bounds() {
        let (addr, accepted) = replica(Close::Never).await;
        let backend = Backend::new("r1".into(), addr);
        let call = |path: &'static str, timeout_ms: u64| {
            let timeout = Duration::from_millis(timeout_ms);
            let req = axum::http::Request::get(path).body(Default::default());
            backend.call(req.unwrap(), 1024, timeout)
        };
        for _ in 0..3 {
            let (status, body) = call("/health", 5_000).await.expect("an answer");
            assert_eq!((status.as_u16(), &body[..]), (200, &b"ok"[..]));
        }
        // Each answer read in full: one connection served them all.
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        assert!(call("/big", 5_000).await.is_none(), "over the limit");
        assert!(call("/silent", 200).await.is_none(), "past the timeout");
    }
}
