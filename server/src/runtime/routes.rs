//! Routes from endpoints, and their publication: one rule for the leader's reconciler (which builds them
//! from the replicas it runs) and for a follower (which builds them from the replicas the leader recorded).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::model::{EndpointType, ExtProcSettings, RouterProtocol};
use crate::routing::{Activity, Backend, ExtProcRoute, Route, RouteTable};
use crate::store::EndpointRecord;

/// The recorded role of an http custom router, and of an extProc one (its gRPC address).
pub const ROLE_ROUTER: &str = "router";
pub const ROLE_EXT_PROC: &str = "ext-proc";

/// How often a follower reads the store when nothing woke it (the backstop for a missed `NOTIFY`).
pub const FOLLOW_POLL: Duration = Duration::from_secs(1);

/// The route of `rec` (its spec's generation `gen`), served by `backends` (its ready replicas) through
/// `router` (its custom router: an `http` one once it knows the replicas, an `extProc` one at its gRPC
/// address once it runs). `domains` maps each custom domain to the
/// namespace it belongs to: a route is served under its domain only when that is its namespace's.
pub fn route_of(
    rec: &EndpointRecord,
    gen: String,
    domains: &HashMap<String, String>,
    backends: Vec<Arc<Backend>>,
    router: Option<(Arc<Backend>, RouterProtocol)>,
    activity: Arc<Activity>,
) -> Arc<Route> {
    let spec = &rec.spec;
    // A router that speaks another protocol than the spec's is one on its way out.
    let wanted = spec.custom_router.as_ref().map(|r| r.protocol);
    let router = router.filter(|(_, p)| Some(*p) == wanted).map(|(b, _)| b);
    let features = &spec.experimental_features;
    let ext_proc = spec
        .custom_router
        .as_ref()
        .filter(|r| r.protocol == RouterProtocol::ExtProc)
        .map(|r| ExtProcRoute {
            processor: router.as_ref().map(|b| b.addr),
            // The spec was checked when it was written.
            settings: ExtProcSettings::of(&r.env).unwrap_or_default(),
        });
    // With an http custom router, nothing is served until it knows the replicas; an extProc one only names
    // a replica, and a request it fails goes on as `[proxy]` says.
    let routed = spec.custom_router.is_none() || ext_proc.is_some() || router.is_some();
    Arc::new(Route {
        router: if ext_proc.is_some() { None } else { router },
        ext_proc,
        generation: gen,
        id: rec.id.clone(),
        namespace: rec.namespace.clone(),
        name: spec.name.clone(),
        state: rec.state,
        endpoint_type: spec.endpoint_type,
        allow: spec.network.as_ref().and_then(|n| n.allow_list()),
        load_balancer: features.effective_load_balancer(),
        mcp_lb: features.mcp_lb.as_ref().map(|m| m.stateful),
        cache: spec.cache_http_responses || features.cache_http_responses,
        private_account: (spec.endpoint_type == EndpointType::Private)
            .then(|| spec.private_service.as_ref().map(|p| p.account_id.clone()))
            .flatten(),
        // Only under a domain of its namespace's (older stores may hold routes made before domains were
        // claimed).
        domain: spec
            .route
            .as_ref()
            .filter(|r| {
                let holder = domains.get(&r.key().0);
                holder.is_some_and(|ns| ns.eq_ignore_ascii_case(&rec.namespace))
            })
            .map(|r| (r.domain.clone(), r.path.clone())),
        backends: if routed { backends } else { Vec::new() },
        activity,
    })
}

/// Where routing tables are published, and what the last one held.
pub struct Publisher {
    table: Arc<watch::Sender<Arc<RouteTable>>>,
    published: String,
}

impl Publisher {
    pub fn new(table: Arc<watch::Sender<Arc<RouteTable>>>) -> Publisher {
        Publisher {
            table,
            published: String::new(),
        }
    }

    /// Forgets what was published last: the next table goes out whatever it holds (another publisher
    /// may have published since).
    pub fn forget(&mut self) {
        self.published.clear();
    }

    /// Publishes the routes as the new table, unless nothing the proxy uses changed.
    pub fn publish(&mut self, routes: Vec<Arc<Route>>) {
        let signature: String = routes
            .iter()
            .map(|r| {
                let ids: Vec<&str> = r.backends.iter().map(|b| b.replica_id.as_str()).collect();
                let router = r.router.as_ref().map(|b| b.replica_id.as_str());
                let ext_proc = r.ext_proc.as_ref().map(|e| (e.processor, e.settings));
                format!(
                    "{}:{}:{}:{:?}:{router:?}:{ext_proc:?};",
                    r.id,
                    r.state,
                    ids.join(","),
                    r.domain
                )
            })
            .collect();
        // Spec-only changes (type, CIDR, balancer) must reach the proxy too.
        let signature = format!(
            "{signature}|{:?}",
            routes
                .iter()
                .map(|r| (
                    r.endpoint_type,
                    &r.allow,
                    r.load_balancer,
                    r.mcp_lb,
                    r.cache,
                    &r.private_account
                ))
                .collect::<Vec<_>>()
        );
        if signature != self.published {
            self.published = signature;
            self.table.send_replace(Arc::new(RouteTable::new(routes)));
        }
    }
}
