//! The routing table: each endpoint's route (what the proxy needs to serve it), by name and by domain.

use std::collections::HashMap;
use std::sync::Arc;

use super::backend::Backend;
use super::host::bare_host;
use super::stats::Activity;
use crate::model::{Cidr, EndpointState, EndpointType, ExtProcSettings, LoadBalancer};

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
    /// The custom-router sidecar (protocol `http`) every request goes through, once it knows the replicas.
    pub router: Option<Arc<Backend>>,
    /// The custom router (protocol `extProc`) that names each request's replica.
    pub ext_proc: Option<ExtProcRoute>,
    pub activity: Arc<Activity>,
}

#[cfg(test)]
impl Route {
    /// A public, running route of `ns/name` (its id `ns-name`) with no replica, counted by `activity`.
    pub(crate) fn bare(ns: &str, name: &str, activity: Arc<Activity>) -> Route {
        Route {
            id: format!("{ns}-{name}"),
            generation: "1".into(),
            namespace: ns.into(),
            name: name.into(),
            state: EndpointState::Running,
            endpoint_type: EndpointType::Public,
            allow: None,
            load_balancer: Default::default(),
            mcp_lb: None,
            cache: false,
            private_account: None,
            domain: None,
            backends: Vec::new(),
            router: None,
            ext_proc: None,
            activity,
        }
    }
}

/// An extProc custom router: the address of its gRPC service once it runs, and how it is spoken to.
#[derive(Debug, Clone)]
pub struct ExtProcRoute {
    pub processor: Option<std::net::SocketAddr>,
    pub settings: ExtProcSettings,
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
                    .entry(bare_host(domain))
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

    /// The endpoint serving `host` (bare: see [`bare_host`]) + `path` through its custom domain, and the
    /// path left after its prefix.
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
