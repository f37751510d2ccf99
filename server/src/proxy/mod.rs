//! The serving proxy: the data plane that takes each request for an endpoint to one of its replicas.
//!
//! A request for `/endpoints/{ns}/{name}/…` (or for a custom domain + path prefix) goes: resolve the endpoint
//! in the latest routing table, refusing a path with a dot segment ([`resolve`]) → who may call: the entry
//! point, the CIDR allow list, access by type ([`access`]) → the response cache → wake a scaled-to-zero
//! endpoint (503 + Retry-After, or hold with `X-Scale-Up-Timeout`) → pick a replica ([`Proxy::pick_replica`],
//! [`balance`]) → forward, streaming both ways, by one set of rules ([`forward`]) → count what is in flight
//! and record the answer for the scaler and `/metrics` ([`count`]).
//!
//! Two paths take those steps, and neither imports the other:
//! - [`own`]: the proxy's own HTTP/1.1 path, on the data-plane workers, for the usual request; it reads and
//!   writes heads itself, in place;
//! - [`general`]: through hyper, for every request; the own path hands it a connection from the first
//!   request it does not take (and `proxy.own_path = false` sends every connection there).
//!
//! [`workers`] runs the data plane, one event loop per core, and gives each connection to the paths in turn.
//! What the two share lives here and in the files beside it: this file keeps [`Proxy`] and the small rules
//! both apply (whether a route serves, the cache's use, the answers of the server's own).

mod access;
pub mod balance;
mod bodies;
pub mod cache;
mod count;
mod edge;
mod ext_proc;
mod forward;
mod general;
mod http1;
pub mod limit;
mod own;
mod poll;
mod resolve;
mod stop;
pub mod workers;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::auth::{authenticate, bearer_in, Revocations};
use crate::clock::Clock;
use crate::config::ProxyConfig;
use crate::error::ApiError;
use crate::model::{Cidr, EndpointState, EndpointType};
use crate::routing::access::Asked;
use crate::routing::{Backend, PickedBy, Route, RoutingHandle};
use crate::store::Store;
use access::TokenAnswer;
use cache::{Cached, ResponseCache};
pub use general::{Front, Inner, Passing, Reply, ReplyBody};

/// The header a private link sets with the cloud account it connects (see `proxy.private_listen`).
pub const PRIVATE_ACCOUNT_HEADER: HeaderName = HeaderName::from_static("x-private-link-account");
// Names the proxy reads or writes on every request, made once: a name given as text is parsed at each use.
const X_CACHE: HeaderName = HeaderName::from_static("x-cache");
const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

pub struct ProxyInner {
    pub routing: RoutingHandle,
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    pub config: ProxyConfig,
    trusted: Vec<Cidr>,
    pub cache: ResponseCache,
    /// Token answers by [`token_key`].
    /// Answers by token and namespace, with when they were given and the revocation epoch then.
    auth: Mutex<HashMap<[u8; 32], (Instant, u64, TokenAnswer)>>,
    revocations: Arc<Revocations>,
    sessions: balance::McpSessions,
    body_limit: usize,
    /// Room for bodies read whole (see [`bodies`]).
    bodies: Arc<bodies::Bodies>,
    /// The control plane's runtime (the one the proxy was made on): the store is used there.
    control: Option<tokio::runtime::Handle>,
}

/// The proxy as one listener serves it: the public one, or the private entry point.
#[derive(Clone)]
pub struct Proxy {
    inner: Arc<ProxyInner>,
    private: bool,
    /// The listener's open connections (see [`limit`]).
    connections: Arc<limit::Limit>,
}

impl std::ops::Deref for Proxy {
    type Target = ProxyInner;
    fn deref(&self) -> &ProxyInner {
        &self.inner
    }
}

impl Proxy {
    /// A proxy reading the routing table `routing` gives (a runtime's handle will do).
    pub fn new(
        routing: impl Into<RoutingHandle>,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        config: ProxyConfig,
        body_limit: usize,
        revocations: Arc<Revocations>,
    ) -> Result<Proxy, String> {
        let trusted = config.trusted_cidrs()?;
        let routing = routing.into();
        let config_max_connections = config.max_connections;
        Ok(Proxy {
            inner: Arc::new(ProxyInner {
                routing,
                store,
                clock,
                cache: ResponseCache::new(config.cache_max_bytes, config.cache_max_entry_bytes),
                bodies: Arc::new(bodies::Bodies::new(config.body_buffer_bytes)),
                config,
                trusted,
                auth: Mutex::new(HashMap::new()),
                revocations,
                sessions: Default::default(),
                body_limit,
                control: tokio::runtime::Handle::try_current().ok(),
            }),
            private: false,
            connections: limit::Limit::new(config_max_connections),
        })
    }

    /// The same proxy for the private entry point.
    pub fn private(&self) -> Proxy {
        Proxy {
            inner: self.inner.clone(),
            private: true,
            connections: limit::Limit::new(self.config.max_connections),
        }
    }
}

/// The proxy's own page: `/metrics` (endpoints themselves are served by [`Front`], before routing).
pub fn router(proxy: Proxy) -> Router {
    Router::new()
        .route("/metrics", get(metrics_page))
        .with_state(proxy)
}

/// The private entry point: its endpoints by path and by custom domain, nothing else.
pub fn private_front(proxy: Proxy) -> Front<Router> {
    let inner = Router::new().fallback(|| async { ApiError::NotFound("no such endpoint".into()) });
    Front::new(proxy.private(), inner)
}

async fn metrics_page(State(proxy): State<Proxy>, headers: HeaderMap) -> Response {
    if !proxy.config.public_metrics {
        let token = bearer_in(&headers);
        let who = match authenticate(proxy.store.as_ref(), token, proxy.clock.now()).await {
            Ok(w) => w,
            Err(e) => return ApiError::from(e).into_response(),
        };
        if let Err(e) = who.require_instance_admin() {
            return ApiError::from(e).into_response();
        }
    }
    let mut text =
        crate::routing::metrics::render(&proxy.routing.table.borrow(), proxy.clock.now_millis());
    let (held, uncached) = proxy.bodies.usage();
    text.push_str(&format!(
        "# HELP switchyard_proxy_body_buffer_bytes Bytes of request bodies held to be read whole.\n\
         # TYPE switchyard_proxy_body_buffer_bytes gauge\n\
         switchyard_proxy_body_buffer_bytes {held}\n\
         # HELP switchyard_proxy_bodies_uncached_total Bodies that found no room to be read whole and went on uncached.\n\
         # TYPE switchyard_proxy_bodies_uncached_total counter\n\
         switchyard_proxy_bodies_uncached_total {uncached}\n"
    ));
    let (open, max, shed, full) = proxy.connections.usage();
    text.push_str(&format!(
        "# HELP switchyard_proxy_connections_open Callers' connections open on the listener.\n\
         # TYPE switchyard_proxy_connections_open gauge\n\
         switchyard_proxy_connections_open {open}\n\
         # HELP switchyard_proxy_connections_max The listener's bound (proxy.max_connections).\n\
         # TYPE switchyard_proxy_connections_max gauge\n\
         switchyard_proxy_connections_max {max}\n\
         # HELP switchyard_proxy_connections_shed_total Idle connections closed to make room at the bound.\n\
         # TYPE switchyard_proxy_connections_shed_total counter\n\
         switchyard_proxy_connections_shed_total {shed}\n\
         # HELP switchyard_proxy_connections_full_total Times the listener was at its bound and stopped accepting.\n\
         # TYPE switchyard_proxy_connections_full_total counter\n\
         switchyard_proxy_connections_full_total {full}\n"
    ));
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// HTTP's status codes end at 599 (RFC 9110 §15): a replica's 600–999 is not an answer (502).
fn http_status(status: &axum::http::StatusCode) -> bool {
    status.as_u16() <= 599
}

/// Gives an answer of the proxy's own (an error, a cache hit) an `x-request-id`, as the API's have, for
/// a caller to quote: the one the caller sent (`given`), if sane. What a replica answers carries what the
/// replica gave.
fn stamp(answer: &mut Response, given: Option<&HeaderValue>) {
    if let Ok(id) = HeaderValue::from_str(&crate::error::request_id(given)) {
        answer.headers_mut().insert("x-request-id", id);
    }
}

/// The answer when a replica failed before its response's head came: 504 when its time ran out
/// (`proxy.replica_timeout_s`), else 502.
fn replica_failed(timed_out: bool) -> Response {
    match timed_out {
        true => ApiError::GatewayTimeout("the endpoint's replica did not answer in time".into()),
        false => ApiError::BadGateway("the endpoint's replica did not answer".into()),
    }
    .into_response()
}

fn unavailable(message: impl Into<String>, retry_after: Option<u32>) -> Response {
    ApiError::Unavailable {
        message: message.into(),
        retry_after,
    }
    .into_response()
}

impl Proxy {
    /// The replica to send to: the custom router when there is one (it balances by itself), else the one
    /// that issued the caller's MCP session, or the route's balancer's pick (`affinity`: the request's prompt
    /// prefix, see [`balance::affinity_of`]); counted as picked `by` (the balancer, or a fallback from an
    /// extProc router).
    fn pick_replica<'r>(
        &self,
        route: &'r Route,
        session: Option<&str>,
        client: IpAddr,
        affinity: Option<u64>,
        by: PickedBy,
    ) -> Option<&'r Arc<Backend>> {
        let stats = &route.activity.stats;
        match (&route.router, route.mcp_lb) {
            // A custom router balances by itself.
            (Some(router), _) => {
                stats.picked(PickedBy::Router);
                Some(router)
            }
            (None, mcp) => match mcp {
                Some(stateful) => {
                    let known = if stateful {
                        session.and_then(|s| self.sessions.replica_of(s))
                    } else {
                        None
                    };
                    known
                        .and_then(|id| route.backends.iter().find(|b| b.replica_id == id))
                        .or_else(|| balance::least_connections(&route.backends))
                }
                None => {
                    let now = self.clock.now_millis();
                    balance::pick(route.load_balancer, &route.backends, client, now, affinity)
                }
            }
            .inspect(|_| stats.picked(by)),
        }
    }
}

impl Proxy {
    /// The access line of a request `replica` answered, when they are written (see
    /// [`crate::routing::access`]).
    fn access_line(
        &self,
        route: &Route,
        replica: &str,
        asked: Asked<'_>,
        (status, took): (u16, Duration),
        by: PickedBy,
    ) {
        if let Some(log) = &self.routing.access {
            let at = (route.namespace.as_str(), route.name.as_str());
            log.write(at, replica, asked, (status, took), by);
        }
    }
}

/// Whether the route looked up for a request may have changed by the time it is sent: only when the checks
/// awaited something (an `authenticated` endpoint's token, or a body read for the cache, `use_cache`). On the
/// plain path nothing was awaited, and the route is still the latest; a new await before the send must
/// count here.
fn checks_waited(route: &Route, use_cache: bool) -> bool {
    use_cache || route.endpoint_type == EndpointType::Authenticated
}

/// Whether requests may go to the route's replicas now. A scaled-to-zero endpoint's replicas may still be
/// listed for a moment after it was scaled down; they are on their way out.
fn serving(route: &Route) -> bool {
    !route.backends.is_empty()
        && !matches!(
            route.state,
            EndpointState::Paused | EndpointState::Failed | EndpointState::ScaledToZero
        )
}

/// [`wants_cache`], by the method's name and the value of the request's `X-Use-Cache`.
fn wants_cache_by(route: &Route, method: &[u8], use_cache: Option<&[u8]>) -> bool {
    route.cache
        && cacheable_method(method)
        && use_cache.is_none_or(|v| !v.trim_ascii().eq_ignore_ascii_case(b"false"))
}

/// Reads, and the inference calls that are POSTs (the body is part of the key): `GET`, `HEAD`, `POST`.
/// A `PUT`, `PATCH`, `DELETE` or any other method always reaches a replica, for its effect.
fn cacheable_method(method: &[u8]) -> bool {
    matches!(method, b"GET" | b"HEAD" | b"POST")
}

/// Whether the route's MCP sessions stay on the replica that opened them.
fn stateful_session(route: &Route) -> bool {
    route.mcp_lb == Some(true)
}

/// A cached answer as the caller gets it, marked `X-Cache: {marker}`.
fn cached_response(c: Cached, marker: &'static str) -> Response {
    let mut resp = Response::new(Body::from(c.body));
    *resp.status_mut() = c.status;
    *resp.headers_mut() = c.headers;
    resp.headers_mut().remove(header::CONTENT_LENGTH);
    resp.headers_mut()
        .insert(X_CACHE, HeaderValue::from_static(marker));
    resp
}
