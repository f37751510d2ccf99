//! The serving proxy: the data plane that takes each request for an endpoint to one of its replicas.
//!
//! A request for `/endpoints/{ns}/{name}/…` (or for a custom domain + path prefix) goes: refuse a path with a
//! dot segment (`has_dot_segment`) → resolve the endpoint in the latest routing table → entry point check (private endpoints only on the private
//! listener) → CIDR allow list → access by type → response cache → wake a scaled-to-zero endpoint (503 +
//! Retry-After, or hold with `X-Scale-Up-Timeout`) → pick a replica → forward, streaming both ways → record
//! activity and metrics for the scaler and `/metrics`. Each is a step of `Proxy::serve_inner`:
//! `check_access`, `cache_lookup`, `current_route` (with `ready_route` and `hold` for a cold start),
//! `pick_replica`, `outgoing`, the send, and `respond`.
//!
//! On the data-plane workers the usual request takes the same steps on the proxy's own HTTP/1.1 path
//! ([`fast`]), which reads and writes the heads itself; the rest goes this general way, through hyper.

pub mod balance;
mod bodies;
pub mod cache;
mod deadline;
mod edge;
mod fast;
mod guard;
mod http1;
pub mod limit;
mod poll;
mod sock;
mod tunnel;
pub mod workers;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::ops::Deref;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::request::Parts;
use axum::http::uri::PathAndQuery;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use http_body_util::BodyExt;
use hyper::body::Incoming;

use crate::auth::{authenticate, authorize, bearer_in, Action, Resource, Revocations};
use crate::clock::Clock;
use crate::config::ProxyConfig;
use crate::error::ApiError;
use crate::model::{Cidr, EndpointState, EndpointType};
use crate::routing::pace::{Broken, Paced, Passed, Side, Stalled};
use crate::routing::upstream::{into_body, ToReplica};
use crate::routing::{
    bare_host, is_server_host, Activity, Backend, Route, RouteTable, RoutingHandle,
};
use crate::store::Store;
use cache::{Cached, ResponseCache};

/// The header a private link sets with the cloud account it connects (see `proxy.private_listen`).
pub const PRIVATE_ACCOUNT_HEADER: HeaderName = HeaderName::from_static("x-private-link-account");
// Names the proxy reads or writes on every request, made once: a name given as text is parsed at each use.
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_USE_CACHE: HeaderName = HeaderName::from_static("x-use-cache");
const X_CACHE: HeaderName = HeaderName::from_static("x-cache");
const MCP_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
const X_SCALE_UP_TIMEOUT: HeaderName = HeaderName::from_static("x-scale-up-timeout");
const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Headers that belong to one connection and are not forwarded (RFC 9110 §7.6.1, and the older
/// `Proxy-Connection`, which RFC 9113 §8.2.2 counts among them), beside those that the `Connection` header
/// names; `Connection` first. Both paths go by this list. A `static`: a `const` array of names would be
/// made, and dropped, at each use.
static HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// The token cache's key for a (token, namespace): one digest of both, so that a lookup allocates nothing
/// and no token is held in the clear.
fn token_key(token: &str, namespace: &str) -> [u8; 32] {
    crate::crypto::digest_of([token.as_bytes(), namespace.as_bytes()])
}

/// What the store said of a (token, namespace): the account id, or the refusal.
type TokenAnswer = Result<String, ApiError>;

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

/// The endpoint a request for `host` and `path` is for by its custom domain, and the rest of the path
/// after the route's prefix (see [`send_target`]).
fn by_host_route<'t, 'p>(
    table: &'t RouteTable,
    proxy: &Proxy,
    host: Option<&str>,
    path: &'p str,
) -> Option<(&'t Arc<Route>, &'p str)> {
    if !table.has_domains() {
        return None;
    }
    let host = bare_host(host.unwrap_or(""));
    if is_server_host(&host, &proxy.routing.public_host) {
        return None;
    }
    table.by_host(&host, path)
}

/// What a listener's own router is to [`Front`] (and to the data-plane workers): a service that answers
/// every request, cloned for each.
pub trait Inner:
    tower::Service<
        Request,
        Response = Response,
        Error = std::convert::Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + 'static
{
}

impl<S> Inner for S
where
    S: tower::Service<Request, Response = Response, Error = std::convert::Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
}

/// The front of a listener: requests for an endpoint (by custom domain, or under `/endpoints/`) go straight
/// to the proxy, before any routing; everything else goes on to `inner` (the API's router). Serving traffic
/// pays for no router and no middleware it does not use.
#[derive(Clone)]
pub struct Front<S> {
    proxy: Proxy,
    inner: S,
}

impl<S> Front<S> {
    pub fn new(proxy: Proxy, inner: S) -> Front<S> {
        Front { proxy, inner }
    }
}

impl<S: Inner> Front<S> {
    /// The answer to `req` from `peer`: the proxy's for an endpoint, else `inner`'s (which finds the peer in
    /// the request's `ConnectInfo`, as axum's extractors expect).
    ///
    /// Not boxed: a data-plane connection keeps one place for the future of the request it is answering
    /// (see [`workers`]), where it is made without an allocation of its own on every request.
    pub fn answer(
        &self,
        req: axum::http::Request<ToReplica>,
        peer: SocketAddr,
    ) -> impl std::future::Future<Output = Result<Reply, std::convert::Infallible>> + Send + 'static
    {
        use futures_util::future::Either;
        // The head met the edge's rules already (see `edge`): the own path's reader or the guard judged it.
        let target = endpoint_target(&self.proxy, &req);
        match target {
            Some(Ok((route, target))) => {
                let proxy = self.proxy.clone();
                Either::Left(async move { Ok(proxy.serve(route, target, peer, req).await) })
            }
            Some(Err(e)) => {
                let mut answer = e.into_response();
                stamp(&mut answer, req.headers().get(&X_REQUEST_ID));
                Either::Right(Either::Left(std::future::ready(Ok(reply(answer)))))
            }
            None => {
                let mut req = req.map(into_body);
                req.extensions_mut().insert(ConnectInfo(peer));
                let call = tower::ServiceExt::oneshot(self.inner.clone(), req);
                Either::Right(Either::Right(async move { call.await.map(reply) }))
            }
        }
    }
}

/// What the proxy answers with: a replica's response passing through ([`Passing`]), or an answer of the
/// server's own (an error, a cache hit, the API's).
pub type Reply = axum::http::Response<ReplyBody>;

/// The body of a [`Reply`]: a replica's response passing unboxed, as hyper gives it, or the server's own.
pub type ReplyBody = http_body_util::Either<Passing<Paced<Incoming>>, Body>;

/// An answer of the server's own as a [`Reply`].
fn reply(resp: Response) -> Reply {
    resp.map(ReplyBody::Right)
}

/// The endpoint a request is for (by custom domain, or under `/endpoints/`) and the path and query to send
/// on; `None` for a request that is not for an endpoint. A path with a dot segment is refused before it is
/// routed (see [`has_dot_segment`]): the path sent on must not be able to climb out of the endpoint's.
fn endpoint_target<B>(
    proxy: &Proxy,
    req: &axum::http::Request<B>,
) -> Option<Result<(Arc<Route>, PathAndQuery), ApiError>> {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().host());
    let table = proxy.routing.table.borrow();
    let found = endpoint_route(&table, proxy, host, req.uri().path())?;
    Some(found.and_then(|(route, rest)| Ok((route.clone(), send_target(req.uri(), rest)?))))
}

/// The endpoint in `table` a request for `host` and `path` is for (by custom domain, or under
/// `/endpoints/`), and the rest of the path (see [`send_target`]); `None` for a request that is not for an
/// endpoint.
fn endpoint_route<'t, 'p>(
    table: &'t RouteTable,
    proxy: &Proxy,
    host: Option<&str>,
    path: &'p str,
) -> Option<Result<(&'t Arc<Route>, &'p str), ApiError>> {
    let by_host = by_host_route(table, proxy, host, path);
    let by_path = path.strip_prefix("/endpoints/");
    if by_host.is_none() && by_path.is_none() {
        return None;
    }
    if has_dot_segment(path) {
        return Some(Err(ApiError::BadRequest(
            "the request path has a `.` or `..` segment (perhaps percent-encoded); send it normalized"
                .into(),
        )));
    }
    match (by_host, by_path) {
        (Some(found), _) => Some(Ok(found)),
        (None, Some(path)) => Some(by_path_route(table, path)),
        (None, None) => None,
    }
}

/// The path and query to send on: `rest` (the end of the request's path after the endpoint's part of it,
/// empty or from a `/`) and the request's query. Made in one piece, as the end of the request's own.
fn send_target(uri: &Uri, rest: &str) -> Result<PathAndQuery, ApiError> {
    let made = match (rest.is_empty(), uri.query()) {
        (true, None) => Ok(PathAndQuery::from_static("/")),
        (true, Some(q)) => PathAndQuery::try_from(format!("/?{q}")),
        (false, query) => {
            let whole = uri.path_and_query().map_or("", PathAndQuery::as_str);
            let tail = rest.len() + query.map_or(0, |q| q.len() + 1);
            match whole.get(whole.len().saturating_sub(tail)..) {
                Some(end) if end.len() == tail && end.starts_with(rest) => {
                    PathAndQuery::try_from(end)
                }
                // A path the URI spells otherwise than it reads it back (an empty one): made anew.
                _ => PathAndQuery::try_from(match query {
                    Some(q) => format!("{rest}?{q}"),
                    None => rest.to_string(),
                }),
            }
        }
    };
    made.map_err(|_| ApiError::BadRequest("invalid request path".into()))
}

/// What the bytes at `at` of a path stand for, for [`has_dot_segment`].
enum PathByte {
    Dot,
    /// The end of a segment: `/`, `\`, `;` (parameters follow), `%2F`, `%5C`, or the end of the path.
    End,
    Other,
}

/// The meaning of the bytes at `at` and how many they are: a `.` (also `%2E`), a segment's end, or other.
fn path_byte(bytes: &[u8], at: usize) -> (PathByte, usize) {
    match bytes.get(at) {
        None | Some(b'/' | b'\\' | b';') => (PathByte::End, 1),
        Some(b'.') => (PathByte::Dot, 1),
        Some(b'%') => match bytes.get(at + 1..at + 3) {
            Some([b'2', b'e' | b'E']) => (PathByte::Dot, 3),
            Some([b'2', b'f' | b'F'] | [b'5', b'c' | b'C']) => (PathByte::End, 3),
            _ => (PathByte::Other, 1),
        },
        Some(_) => (PathByte::Other, 1),
    }
}

/// Whether a path has a `.` or `..` segment that a server along the way may resolve: also percent-encoded
/// (`%2e%2e`, `.%2E`), between backslashes or encoded slashes (`%2f`, `%5c`), or before parameters (`..;x`).
/// One pass over the bytes, nothing allocated: it runs on every request for an endpoint.
fn has_dot_segment(path: &str) -> bool {
    let bytes = path.as_bytes();
    let (mut at, mut dots, mut only_dots) = (0, 0u32, true);
    while at <= bytes.len() {
        let (byte, width) = path_byte(bytes, at);
        match byte {
            PathByte::Dot => dots += 1,
            PathByte::Other => only_dots = false,
            PathByte::End if only_dots && (dots == 1 || dots == 2) => return true,
            PathByte::End => (dots, only_dots) = (0, true),
        }
        at += width;
    }
    false
}

/// The endpoint of `{namespace}/{name}/{rest…}` (the path after `/endpoints/`), and the rest of the path:
/// `/{rest…}`, or empty when the path ends at the name (see [`send_target`]).
fn by_path_route<'t, 'p>(
    table: &'t RouteTable,
    path: &'p str,
) -> Result<(&'t Arc<Route>, &'p str), ApiError> {
    let (ns, after) = path.split_once('/').unwrap_or((path, ""));
    let (name, rest) = match after.find('/') {
        Some(at) => after.split_at(at),
        None => (after, ""),
    };
    let route = table.get(ns, name);
    route
        .map(|r| (r, rest))
        .ok_or_else(|| ApiError::NotFound(format!("no endpoint {name:?} in namespace {ns:?}")))
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
    let mut text = crate::routing::metrics::render(&proxy.routing.table.borrow());
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

/// A replica's response body that stopped coming (`proxy.replica_timeout_s`).
const REPLICA_PAUSED: Stalled = Stalled {
    side: Side::Replica,
    what: "the endpoint's replica paused its response for too long",
};

/// `sending` (a request going out, and its response's head coming), given up `limit` after the later of
/// its start and the end of the caller's upload (`uploading`). While the upload goes on the time is not
/// the replica's: a caller that stops uploading is bounded by its own time (its body is [`Paced`]), a
/// replica that stops taking the upload by its connection's write limit.
async fn head_in_time<T>(
    sending: impl std::future::Future<Output = T>,
    limit: Duration,
    uploading: Option<Passed>,
) -> Result<T, tokio::time::error::Elapsed> {
    let mut sending = std::pin::pin!(sending);
    let started = tokio::time::Instant::now();
    loop {
        let ended = match &uploading {
            None => Some(started),
            Some(passed) => passed.ended().map(|at| at.max(started)),
        };
        match ended {
            Some(from) => return tokio::time::timeout_at(from + limit, sending.as_mut()).await,
            // Looked at again a time later; the upload's end does not wake this.
            None => match tokio::time::timeout(limit, sending.as_mut()).await {
                Err(_) => {}
                done => return done,
            },
        }
    }
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

/// One request held for a cold start, counted while it lives.
struct Held<'a>(&'a Activity);

impl<'a> Held<'a> {
    fn enter(activity: &'a Activity) -> Held<'a> {
        activity.waiting.fetch_add(1, Ordering::AcqRel);
        Held(activity)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A request counted on its route (for the scaler) and, once one is picked, its replica (for
/// `least_connections`) until dropped. `R` and `B` hold the two: shared where the count outlives the
/// request's own borrow of them (the general path's, dropped with the response body), borrowed on the own
/// path (whose request ends before its route could).
struct Counted<R: Deref<Target = Route>, B: Deref<Target = Backend>> {
    route: R,
    replica: Option<B>,
}

impl<R: Deref<Target = Route>, B: Deref<Target = Backend>> Counted<R, B> {
    /// A request counted on `route` (whose activity it touches) from now on.
    fn enter(route: R, now_ms: i64) -> Self {
        route.activity.touch(now_ms);
        route.activity.in_flight.up();
        Counted {
            route,
            replica: None,
        }
    }

    /// The request counted on `replica` too, from now on.
    fn add_replica(&mut self, replica: B) {
        replica.in_flight.up();
        self.replica = Some(replica);
    }
}

impl<R: Deref<Target = Route>, B: Deref<Target = Backend>> Drop for Counted<R, B> {
    fn drop(&mut self) {
        self.route.activity.in_flight.down();
        if let Some(b) = &self.replica {
            b.in_flight.down();
        }
    }
}

/// A request in flight on the general path: counted (see [`Counted`]) until its response has been passed
/// on, when the replica connection it used goes back to the replica's pool.
struct InFlight {
    count: Counted<Arc<Route>, Arc<Backend>>,
    connection: Option<hyper::client::conn::http1::SendRequest<ToReplica>>,
}

impl InFlight {
    /// A request counted on `route` from now on.
    fn enter(route: &Arc<Route>, now_ms: i64) -> InFlight {
        InFlight {
            count: Counted::enter(route.clone(), now_ms),
            connection: None,
        }
    }

    /// The request counted on `replica` too, from now on.
    fn add_replica(&mut self, replica: &Arc<Backend>) {
        self.count.add_replica(replica.clone());
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let (Some(b), Some(sender)) = (&self.count.replica, self.connection.take()) {
            b.pool.give_back(sender);
        }
    }
}

impl Proxy {
    /// The caller's address: the socket's, or, from a trusted proxy, the last untrusted hop of
    /// `X-Forwarded-For`.
    fn client_ip(&self, peer: SocketAddr, headers: &HeaderMap) -> IpAddr {
        let forwarded = headers.get_all(&X_FORWARDED_FOR).iter();
        self.client_ip_from(peer, forwarded.map(HeaderValue::as_bytes))
    }

    /// [`Self::client_ip`], from the values of the request's `X-Forwarded-For` headers.
    fn client_ip_from<'v>(
        &self,
        peer: SocketAddr,
        forwarded: impl Iterator<Item = &'v [u8]>,
    ) -> IpAddr {
        crate::model::cidr::client_ip(peer.ip(), forwarded, &self.trusted)
    }

    fn trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|c| c.contains(ip))
    }

    /// Who may call an `authenticated` endpoint: a token allowed to read the namespace's endpoints.
    /// Answers are remembered for `auth_cache_s` so the store is not asked on every request.
    async fn check_token(&self, namespace: &str, token: Option<&str>) -> Result<String, Response> {
        let Some(token) = token else {
            return Err(ApiError::Unauthorized(
                "this endpoint needs a bearer token (Authorization: Bearer …)".into(),
            )
            .into_response());
        };
        let key = token_key(token, namespace);
        let ttl = Duration::from_secs(self.config.auth_cache_s);
        let epoch = self.revocations.epoch();
        if let Some((at, given, answer)) = self.auth.lock().ok().and_then(|m| m.get(&key).cloned())
        {
            if at.elapsed() < ttl && given == epoch {
                return answer.map_err(IntoResponse::into_response);
            }
        }
        // Boxed: the store's call is the rare case, and would otherwise swell every request's future.
        let answer = Box::pin(self.token_answer(token, namespace)).await;
        // A store failure is not an answer to remember.
        if let Err(e @ ApiError::Internal(_)) = answer {
            return Err(e.into_response());
        }
        if let Ok(mut m) = self.auth.lock() {
            if m.len() > 100_000 {
                m.clear();
            }
            m.insert(key, (Instant::now(), epoch, answer.clone()));
        }
        answer.map_err(IntoResponse::into_response)
    }

    /// The store's answer for a (token, namespace): the account allowed to call, or the refusal. Asked on
    /// the control plane's runtime (see [`Self::on_control`]).
    async fn token_answer(&self, token: &str, namespace: &str) -> TokenAnswer {
        let (store, clock) = (self.store.clone(), self.clock.clone());
        let (token, namespace) = (token.to_string(), namespace.to_string());
        self.on_control(async move {
            let who = authenticate(store.as_ref(), Some(&token), clock.now()).await?;
            authorize(
                store.as_ref(),
                &who,
                &namespace,
                Resource::Inference,
                Action::Read,
            )
            .await?;
            Ok::<_, ApiError>(who.account.id)
        })
        .await
    }

    /// `work` run on the control plane's runtime when called on a data-plane worker (see [`workers`]): the
    /// store's connections belong to that runtime, and live as long as it does.
    async fn on_control(
        &self,
        work: impl std::future::Future<Output = TokenAnswer> + Send + 'static,
    ) -> TokenAnswer {
        match &self.control {
            Some(control) if workers::on_data_plane() => control
                .spawn(work)
                .await
                .unwrap_or_else(|_| Err(ApiError::Internal("the token check failed".into()))),
            _ => work.await,
        }
    }

    async fn serve(
        &self,
        route: Arc<Route>,
        target: PathAndQuery,
        peer: SocketAddr,
        req: axum::http::Request<ToReplica>,
    ) -> Reply {
        let started = Instant::now();
        let given = req.headers().get(&X_REQUEST_ID).cloned();
        let resp = match self.serve_inner(&route, target, peer, req).await {
            Ok(passing) => passing,
            Err(mut answered) => {
                stamp(&mut answered, given.as_ref());
                reply(answered)
            }
        };
        route
            .activity
            .stats
            .record(resp.status().as_u16(), started.elapsed());
        resp
    }

    /// One request, in steps: who may call ([`Self::check_access`]) → the response cache
    /// ([`Self::cache_lookup`]) → the route as it is now, woken if it must be ([`Self::current_route`]) →
    /// a replica ([`Self::pick_replica`]) → the request it gets ([`Self::outgoing`]) → the response on its
    /// way back ([`Self::respond`]). What is in flight is counted from the route's wake-up to the response's
    /// end. `target` is the path and query to send on; `Err` is an answer of the server's own.
    async fn serve_inner(
        &self,
        route: &Arc<Route>,
        target: PathAndQuery,
        peer: SocketAddr,
        mut req: axum::http::Request<ToReplica>,
    ) -> Result<Reply, Response> {
        let (client, access) = self.check_access(route, peer, req.headers()).await?;
        // A request to upgrade the connection (see `tunnel`) is never cached.
        let upgrade =
            tunnel::asked(req.headers()).map(|protocol| (protocol, hyper::upgrade::on(&mut req)));
        // The cache answers before anything wakes the endpoint.
        let use_cache = upgrade.is_none() && wants_cache(route, req.method(), req.headers());
        let (parts, mut body) = req.into_parts();
        // When the caller's upload ends (see `head_in_time`), wherever the body goes on from here.
        let uploading = match &mut body {
            http_body_util::Either::Left(body) if !http_body::Body::is_end_stream(body) => {
                Some(body.passed())
            }
            _ => None,
        };
        let (body, cache_ask) = if use_cache {
            self.cache_lookup(route, &parts, body, &target, &access)
                .await?
        } else {
            (body, None)
        };
        // Nothing was awaited on the plain path (`check_access` suspends only for an authenticated
        // endpoint's token, and the cache only to read a body): the route looked up for this request is
        // still the latest. A new await before this point must count in `waited`.
        let waited = use_cache || route.endpoint_type == EndpointType::Authenticated;
        let route = if waited {
            self.current_route(route, &parts.headers).await?
        } else {
            self.ready_route(route, &parts.headers).await?
        };
        let mut guard = InFlight::enter(&route, self.clock.now_millis());
        let session = parts
            .headers
            .get(&MCP_SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let backend = self.pick_replica(&route, session.as_deref(), client);
        let Some(backend) = backend.cloned() else {
            return Err(unavailable(
                "no replica is ready",
                Some(self.config.retry_after_s),
            ));
        };
        guard.add_replica(&backend);
        let mut out = self.outgoing(parts, target, body, peer);
        let limit = self.config.replica_timeout();
        if let Some((protocol, caller)) = upgrade {
            tunnel::ask(out.headers_mut(), protocol);
            let resp = match tokio::time::timeout(limit, backend.send_upgrade(out)).await {
                Ok(Ok(r)) if r.status() == axum::http::StatusCode::SWITCHING_PROTOCOLS => {
                    return Ok(tunnel::join(caller, r, guard))
                }
                Ok(Ok(r)) => r,
                Ok(Err(e)) => {
                    tracing::warn!(endpoint = %route.name, replica = %backend.replica_id, error = %e, "replica did not answer");
                    return Err(replica_failed(false));
                }
                Err(_) => return Err(replica_failed(true)),
            };
            return Ok(self.respond(&route, &backend, session.as_deref(), resp, guard, None));
        }
        let resp = match head_in_time(backend.send(out), limit, uploading).await {
            Ok(Ok((r, _))) if !http_status(&r.status()) => {
                tracing::warn!(endpoint = %route.name, replica = %backend.replica_id, status = r.status().as_u16(), "replica answered with no HTTP status");
                return Err(replica_failed(false));
            }
            Ok(Ok((r, sender))) => {
                guard.connection = Some(sender);
                r
            }
            Ok(Err(e)) => {
                let stalled = Stalled::caused(&e);
                if stalled == Some(Side::Caller) {
                    return Err(ApiError::body_stalled().into_response());
                }
                // The caller's upload was cut off or badly framed: its fault, not the replica's.
                if Broken::caused(&e) == Some(Side::Caller) {
                    tracing::debug!(endpoint = %route.name, error = %e, "request body could not be read");
                    return Err(unreadable().into_response());
                }
                tracing::warn!(endpoint = %route.name, replica = %backend.replica_id, error = %e, "replica did not answer");
                return Err(replica_failed(stalled.is_some()));
            }
            Err(_) => {
                tracing::warn!(endpoint = %route.name, replica = %backend.replica_id, "replica did not answer in time");
                return Err(replica_failed(true));
            }
        };
        Ok(self.respond(&route, &backend, session.as_deref(), resp, guard, cache_ask))
    }

    /// Who may call: the entry point (see [`Self::check_entry`]), the CIDR allow list, and access by type.
    /// Returns the caller's address, and for an `authenticated` endpoint its account (part of the cache key).
    async fn check_access(
        &self,
        route: &Route,
        peer: SocketAddr,
        headers: &HeaderMap,
    ) -> Result<(IpAddr, String), Response> {
        self.check_entry(route, headers)
            .map_err(IntoResponse::into_response)?;
        let client = self.client_ip(peer, headers);
        let access = self.admit(route, client, bearer_in(headers)).await?;
        Ok((client, access))
    }

    /// The CIDR allow list for `client`, and access by type with `token`: for an `authenticated` endpoint
    /// the caller's account (part of the cache key), else nothing.
    async fn admit(
        &self,
        route: &Route,
        client: IpAddr,
        token: Option<&str>,
    ) -> Result<String, Response> {
        if let Some(allow) = &route.allow {
            if !allow.iter().any(|c| c.contains(client)) {
                return Err(ApiError::Forbidden(format!(
                    "{client} is not in this endpoint's allowed CIDR blocks"
                ))
                .into_response());
            }
        }
        match route.endpoint_type {
            EndpointType::Authenticated => self.check_token(&route.namespace, token).await,
            EndpointType::Public | EndpointType::Private => Ok(String::new()),
        }
    }

    /// Entry point: private endpoints exist only on the private listener, and only for their account.
    fn check_entry(&self, route: &Route, headers: &HeaderMap) -> Result<(), ApiError> {
        let is_private = route.endpoint_type == EndpointType::Private;
        if is_private != self.private {
            return Err(ApiError::NotFound(format!(
                "no endpoint {:?} in namespace {:?}",
                route.name, route.namespace
            )));
        }
        if self.private {
            let account = headers
                .get(&PRIVATE_ACCOUNT_HEADER)
                .and_then(|v| v.to_str().ok());
            let allowed = match (&route.private_account, account) {
                (Some(want), Some(got)) => {
                    crate::crypto::constant_time_eq(want.as_bytes(), got.as_bytes())
                }
                _ => false,
            };
            if !allowed {
                return Err(ApiError::Forbidden(
                    "this private endpoint does not accept connections from that account".into(),
                ));
            }
        }
        Ok(())
    }

    /// The response cache (see [`wants_cache`]): reads the body, which the key covers, and looks the request
    /// up. Returns the body to send on and the key to store the response under; `Err` is the answer already
    /// made (a hit, or a body that could not be read).
    async fn cache_lookup(
        &self,
        route: &Route,
        parts: &Parts,
        body: ToReplica,
        target: &PathAndQuery,
        access: &str,
    ) -> Result<(ToReplica, Option<CacheAsk>), Response> {
        let Some(room) = self.bodies.take(0) else {
            return Ok((body, None));
        };
        let (bytes, room) = match read_body(body, self.body_limit, room).await {
            Ok((Collected::Whole(b), room)) => (b, room),
            // Larger than a body the cache reads, or than the room left for bodies: it goes on uncached,
            // as it comes (untouched when its announced length said so before any of it was read).
            Ok((Collected::Over(read, rest), _)) if read.is_empty() => return Ok((rest, None)),
            Ok((Collected::Over(read, rest), _)) => {
                return Ok((ToReplica::Right(read_then_rest(read, rest)), None))
            }
            Err(e) => return Err(e.into_response()),
        };
        let accept = parts
            .headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let key = cache::key(
            route,
            cache::Asked {
                method: parts.method.as_str(),
                path: target.path(),
                query: target.query().unwrap_or(""),
                accept,
                access,
                credentialed: cache::Fields::credentialed(&parts.headers),
                body: &bytes,
            },
        );
        if let Some(hit) = self.cache.get(&key, &parts.headers, self.clock.now()) {
            route.activity.stats.cache_hit();
            return Err(cached_response(hit, "HIT"));
        }
        // The request's fields go on to the replica: a copy is kept for the answer's `Vary`.
        let asked = CacheAsk {
            key,
            fields: parts.headers.clone(),
            _room: room,
        };
        Ok((ToReplica::Right(Body::from(bytes)), Some(asked)))
    }

    /// The route as the latest table has it (it may have changed while the token was checked or the body
    /// read), once it has a replica to send to (see [`Self::ready_route`]).
    async fn current_route(
        &self,
        route: &Route,
        headers: &HeaderMap,
    ) -> Result<Arc<Route>, Response> {
        let Some(latest) = self.latest(route) else {
            return Err(
                ApiError::NotFound(format!("endpoint {} was deleted", route.name)).into_response(),
            );
        };
        self.ready_route(&latest, headers).await
    }

    /// `route` as the latest table has it; `None` once it is gone.
    fn latest(&self, route: &Route) -> Option<Arc<Route>> {
        let table = self.routing.table.borrow();
        table.get(&route.namespace, &route.name).cloned()
    }

    /// The replica to send to: the custom router when there is one (it balances by itself), else the one
    /// that issued the caller's MCP session, or the route's balancer's pick.
    fn pick_replica<'r>(
        &self,
        route: &'r Route,
        session: Option<&str>,
        client: IpAddr,
    ) -> Option<&'r Arc<Backend>> {
        match (&route.router, route.mcp_lb) {
            // A custom router balances by itself.
            (Some(router), _) => Some(router),
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
                None => balance::pick(route.load_balancer, &route.backends, client),
            },
        }
    }

    /// The request as the replica gets it: `target` in origin form (the connection is the replica's
    /// already), `body`, and the caller's method and headers, less those that are not for the replica, with
    /// `X-Forwarded-For` naming the caller.
    fn outgoing(
        &self,
        parts: Parts,
        target: PathAndQuery,
        body: ToReplica,
        peer: SocketAddr,
    ) -> axum::http::Request<ToReplica> {
        // The caller's headers go on as they are, less the hop-by-hop ones, our token (it is for us, not
        // for the model's container), the private-link account and the names nginx drops.
        let mut headers = parts.headers;
        strip_hop_by_hop(&mut headers);
        headers.remove(header::AUTHORIZATION);
        headers.remove(&PRIVATE_ACCOUNT_HEADER);
        let dropped: Vec<HeaderName> = headers
            .keys()
            .filter(|n| edge::dropped_name(n.as_str().as_bytes()))
            .cloned()
            .collect();
        for name in dropped {
            headers.remove(name);
        }
        // A body of a length unknown ahead goes in chunks, whatever the method (hyper's client sends a
        // `GET` without a body unless told so).
        if !http_body::Body::is_end_stream(&body)
            && http_body::Body::size_hint(&body).exact().is_none()
        {
            headers.insert(
                header::TRANSFER_ENCODING,
                HeaderValue::from_static("chunked"),
            );
        }
        let forwarded = match headers.get(&X_FORWARDED_FOR).and_then(|v| v.to_str().ok()) {
            Some(prior) if self.trusted(peer.ip()) => {
                HeaderValue::from_str(&format!("{prior}, {}", peer.ip()))
            }
            _ => Ok(ip_value(peer.ip())),
        };
        if let Ok(v) = forwarded {
            headers.insert(X_FORWARDED_FOR, v);
        }
        let mut out = axum::http::Request::new(body);
        *out.method_mut() = parts.method;
        *out.uri_mut() = Uri::from(target);
        // The caller's Host was for us (it is stripped above): the replica sees its own.
        *out.headers_mut() = headers;
        out
    }

    /// The replica's response on its way to the caller, holding `guard` until it has passed: an MCP session
    /// it opened is remembered, its hop-by-hop headers stay behind, and when it may be cached (under
    /// `cache_ask`) it is copied as it passes.
    fn respond(
        &self,
        route: &Route,
        backend: &Backend,
        session: Option<&str>,
        resp: axum::http::Response<Incoming>,
        guard: InFlight,
        cache_ask: Option<CacheAsk>,
    ) -> Reply {
        let (rparts, rbody) = resp.into_parts();
        if stateful_session(route) && session.is_none() {
            if let Some(s) = rparts
                .headers
                .get(&MCP_SESSION_ID)
                .and_then(|v| v.to_str().ok())
            {
                self.sessions.remember(s, &backend.replica_id);
            }
        }
        let streaming = rparts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let status = rparts.status;
        let mut headers = rparts.headers;
        // A length beside a transfer coding is not the body's (RFC 9112 §6.3): the body goes on in chunks.
        if headers.contains_key(header::TRANSFER_ENCODING) {
            headers.remove(header::CONTENT_LENGTH);
        }
        strip_hop_by_hop(&mut headers);
        // A response that may be cached streams to the caller like any other, copied on its way, and is
        // stored once it has passed in full (and fits an entry).
        let fill = match (cache_ask, status.is_success(), streaming) {
            (Some(ask), true, false) => {
                let fields = headers
                    .iter()
                    .map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()));
                let known = http_body::Body::size_hint(&rbody).exact();
                let fill =
                    cache::Fill::new(&self.cache, ask.key, &ask.fields, status, fields, known);
                fill.map(|f| (f, self.clone()))
            }
            _ => None,
        };
        // A pause of the replica's for longer than its time ends the body in an error, which cuts the
        // caller's response short.
        let rbody = Passing {
            body: Paced::new(rbody, self.config.replica_timeout(), REPLICA_PAUSED),
            _guard: guard,
            fill,
        };
        let mut resp = Reply::new(ReplyBody::Left(rbody));
        *resp.status_mut() = status;
        *resp.headers_mut() = headers;
        if route.cache {
            resp.headers_mut()
                .insert(X_CACHE, HeaderValue::from_static("MISS"));
        }
        resp
    }

    /// The route once it has a replica to send to: wakes a scaled-to-zero endpoint, and holds the request
    /// when the caller asked to (`X-Scale-Up-Timeout: seconds`), in a bounded queue.
    async fn ready_route(
        &self,
        route: &Arc<Route>,
        headers: &HeaderMap,
    ) -> Result<Arc<Route>, Response> {
        match route.state {
            EndpointState::Paused => {
                return Err(unavailable(
                    format!(
                        "endpoint {} is paused; resume it to serve requests",
                        route.name
                    ),
                    None,
                ))
            }
            EndpointState::Failed => {
                return Err(unavailable(
                    format!("endpoint {} has failed; see its status message", route.name),
                    None,
                ))
            }
            _ if serving(route) => return Ok(route.clone()),
            _ => {}
        }
        let retry_after = self.config.retry_after_s;
        // A wait asked for badly is refused before it wakes anything.
        let wait = self
            .scale_up_wait(headers)
            .map_err(IntoResponse::into_response)?;
        route.activity.touch(self.clock.now_millis());
        // Also when the table shows it still up: it may be a tick old, and the endpoint just scaled to zero.
        // For an endpoint that is starting anyway the reconciler drops the flag.
        route.activity.request_wake();
        self.routing.kick();
        let Some(wait) = wait else {
            return Err(unavailable(
                format!("endpoint {} is starting; retry shortly", route.name),
                Some(retry_after),
            ));
        };
        // Boxed: a held request is the rare case (see `token_answer`'s call).
        Box::pin(self.hold(route, wait)).await
    }

    /// How long the caller asked to be held while the endpoint starts (`X-Scale-Up-Timeout: seconds`), up
    /// to `max_scale_up_wait_s`; `None` when it did not ask (or asked for none), 400 for a value that is
    /// not a number of seconds.
    fn scale_up_wait(&self, headers: &HeaderMap) -> Result<Option<Duration>, ApiError> {
        let Some(value) = headers.get(&X_SCALE_UP_TIMEOUT) else {
            return Ok(None);
        };
        let secs = value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<f64>().ok());
        let Some(secs) = secs.filter(|s| s.is_finite() && *s >= 0.0) else {
            let bad = "X-Scale-Up-Timeout must be a number of seconds";
            return Err(ApiError::BadRequest(bad.into()));
        };
        let most = self.config.max_scale_up_wait_s.min(86_400) as f64;
        Ok((secs > 0.0).then(|| Duration::from_secs_f64(secs.min(most))))
    }

    /// Holds the request, in a bounded queue, until the endpoint serves, or for `wait` at most; follows
    /// the route through each new table.
    async fn hold(&self, route: &Arc<Route>, wait: Duration) -> Result<Arc<Route>, Response> {
        let retry_after = self.config.retry_after_s;
        let activity = route.activity.clone();
        // Released however this ends, a caller that hangs up included.
        let _held = Held::enter(&activity);
        if activity.waiting.load(Ordering::Acquire) > self.config.cold_start_queue as u32 {
            return Err(unavailable(
                "too many requests are waiting for this endpoint to start",
                Some(retry_after),
            ));
        }
        let deadline = tokio::time::Instant::now() + wait;
        let mut table = self.routing.table.clone();
        let outcome = loop {
            let current = table
                .borrow_and_update()
                .get(&route.namespace, &route.name)
                .cloned();
            match current {
                None => {
                    break Err(
                        ApiError::NotFound(format!("endpoint {} was deleted", route.name))
                            .into_response(),
                    )
                }
                Some(r) if matches!(r.state, EndpointState::Paused | EndpointState::Failed) => {
                    break Err(unavailable(
                        format!("endpoint {} is {}", r.name, r.state),
                        None,
                    ))
                }
                Some(r) if serving(&r) => break Ok(r),
                // The table this request first saw may have been a tick old: wake whatever it is now.
                Some(r) if r.state == EndpointState::ScaledToZero => {
                    r.activity.request_wake();
                    self.routing.kick();
                }
                Some(_) => {}
            }
            // A closed channel (the server stopping) ends the wait like a timeout.
            if !matches!(
                tokio::time::timeout_at(deadline, table.changed()).await,
                Ok(Ok(()))
            ) {
                break Err(unavailable(
                    format!(
                        "endpoint {} did not start within {} s",
                        route.name,
                        wait.as_secs_f64()
                    ),
                    Some(retry_after),
                ));
            }
        };
        outcome
    }
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

/// A request body read for the cache: all of it, or (larger than the limit) what was read of it and the rest.
enum Collected<B> {
    Whole(axum::body::Bytes),
    Over(Vec<axum::body::Bytes>, B),
}

/// The whole request body, up to `limit` bytes: none to read when the body has ended already (a request
/// without one), read in place on a data-plane worker, else on a task of its own. A larger one is handed
/// back with what was read of it, to go on uncached.
///
/// hyper's body channel wakes the connection's task each time a chunk is taken from it. Read on that same
/// task of a multi-threaded runtime, the wake lands on the running task: tokio then queues it as a yield and
/// wakes an idle worker to help, a futex round trip and a thread woken for nothing on every request
/// (measured at 20–25 µs of CPU per request on two vCPUs). On a task of its own, the read wakes the
/// connection task in the ordinary way, through the worker's next-task slot. A data-plane worker's runtime
/// has no other worker to wake (see [`workers`]), and a task of its own would only cost its spawn.
///
/// The read ends as soon as the body says it has (a body of known length, once all of it has come) rather
/// than when the connection closes the channel: one hand-off fewer between the two tasks.
///
/// The task is aborted if the request is dropped first (the caller went away).
async fn read_body<B>(
    body: B,
    limit: usize,
    room: bodies::Hold,
) -> Result<(Collected<B>, bodies::Hold), ApiError>
where
    B: http_body::Body<Data = axum::body::Bytes> + Send + Unpin + 'static,
    B::Error: Into<axum::BoxError>,
{
    struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);
    impl<T> Drop for AbortOnDrop<T> {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    if http_body::Body::is_end_stream(&body) {
        return Ok((Collected::Whole(axum::body::Bytes::new()), room));
    }
    if workers::on_data_plane() {
        return collect(body, limit, room).await;
    }
    let mut read = AbortOnDrop(tokio::spawn(collect(body, limit, room)));
    match (&mut read.0).await {
        Ok(Ok(b)) => Ok(b),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(unreadable()),
    }
}

fn unreadable() -> ApiError {
    ApiError::BadRequest("the request body could not be read".into())
}

/// The data of `body` up to `limit` bytes, until the body ends or says it has, each piece in `room` (see
/// [`bodies`]): past the room left, what was read goes on with the rest, uncached. One chunk is kept as it
/// came.
async fn collect<B>(
    mut body: B,
    limit: usize,
    mut room: bodies::Hold,
) -> Result<(Collected<B>, bodies::Hold), ApiError>
where
    B: http_body::Body<Data = axum::body::Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    let announced = http_body::Body::size_hint(&body).lower();
    if announced > limit as u64 {
        return Ok((Collected::Over(Vec::new(), body), room));
    }
    // A length said ahead is room taken at once, before any of it is read.
    if !room.grow(announced as usize) {
        room.bodies().passed_uncached();
        return Ok((Collected::Over(Vec::new(), body), room));
    }
    let mut counted = announced as usize;
    let (mut chunks, mut len) = (Vec::new(), 0);
    while !http_body::Body::is_end_stream(&body) {
        let Some(frame) = body.frame().await else {
            break;
        };
        let frame = frame.map_err(|e| match Stalled::caused(&*e.into()) {
            Some(Side::Caller) => ApiError::body_stalled(),
            _ => unreadable(),
        })?;
        if let Ok(data) = frame.into_data() {
            len += data.len();
            chunks.push(data);
            if len > limit {
                return Ok((Collected::Over(chunks, body), room));
            }
            if len > counted {
                if !room.grow(len - counted) {
                    room.bodies().passed_uncached();
                    return Ok((Collected::Over(chunks, body), room));
                }
                counted = len;
            }
        }
    }
    let whole = match chunks.len() {
        0 | 1 => chunks.pop().unwrap_or_default(),
        _ => chunks.concat().into(),
    };
    Ok((Collected::Whole(whole), room))
}

/// What was read of a body, then the rest of it as it comes.
fn read_then_rest<B>(read: Vec<axum::body::Bytes>, rest: B) -> Body
where
    B: http_body::Body<Data = axum::body::Bytes> + Send + Unpin + 'static,
    B::Error: Into<axum::BoxError>,
{
    Body::new(ReadThenRest {
        read: read.into(),
        rest,
    })
}

struct ReadThenRest<B> {
    read: std::collections::VecDeque<axum::body::Bytes>,
    rest: B,
}

impl<B> http_body::Body for ReadThenRest<B>
where
    B: http_body::Body<Data = axum::body::Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = axum::body::Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        if let Some(data) = self.read.pop_front() {
            return std::task::Poll::Ready(Some(Ok(http_body::Frame::data(data))));
        }
        // A body that says it has ended may not answer again (hyper's, until its connection notices).
        if self.rest.is_end_stream() {
            return std::task::Poll::Ready(None);
        }
        std::pin::Pin::new(&mut self.rest)
            .poll_frame(cx)
            .map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.read.is_empty() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        let read = self.read.iter().map(|b| b.len() as u64).sum::<u64>();
        let rest = self.rest.size_hint();
        // The upper bound first: a lower one may not be set above it.
        let mut hint = http_body::SizeHint::new();
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper.saturating_add(read));
        }
        hint.set_lower(rest.lower().saturating_add(read));
        hint
    }
}

/// Whether the response cache is used: the route has it on, the method is one whose answer may be
/// kept (see [`cacheable_method`]), and the caller did not opt out (`X-Use-Cache: false`).
fn wants_cache(route: &Route, method: &Method, headers: &HeaderMap) -> bool {
    let use_cache = headers.get(&X_USE_CACHE).map(HeaderValue::as_bytes);
    wants_cache_by(route, method.as_str().as_bytes(), use_cache)
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

fn stateful_session(route: &Route) -> bool {
    route.mcp_lb == Some(true)
}

/// `ip` as a header value. The last one made on this thread is kept: traffic comes from few addresses
/// (a load balancer in front, or a handful of clients), and formatting one is a noticeable share of a
/// request's own work.
fn ip_value(ip: IpAddr) -> HeaderValue {
    with_ip_value(ip, HeaderValue::clone)
}

/// The text of `ip` (see [`ip_value`]), lent to `with`: nothing is cloned for it.
fn ip_text<T>(ip: IpAddr, with: impl FnOnce(&[u8]) -> T) -> T {
    with_ip_value(ip, |value| with(value.as_bytes()))
}

fn with_ip_value<T>(ip: IpAddr, with: impl FnOnce(&HeaderValue) -> T) -> T {
    thread_local! {
        static LAST: std::cell::RefCell<Option<(IpAddr, HeaderValue)>> =
            const { std::cell::RefCell::new(None) };
    }
    LAST.with_borrow_mut(|last| match last {
        Some((at, value)) if *at == ip => with(value),
        _ => {
            // An address's text is always a valid header value.
            let value = HeaderValue::from_str(&ip.to_string())
                .unwrap_or_else(|_| HeaderValue::from_static(""));
            with(&last.insert((ip, value)).1)
        }
    })
}

/// Removes what is for this hop only: `Host`, the hop-by-hop headers and those `Connection` names.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    headers.remove(header::HOST);
    // Which of them the message has, in one look at each name: most have none, or only `Connection`.
    let mut present = [false; HOP_BY_HOP.len()];
    for name in headers.keys() {
        if let Some(i) = HOP_BY_HOP.iter().position(|h| h == name) {
            present[i] = true;
        }
    }
    if present[0] {
        strip_connection_named(headers);
    }
    for (name, _) in HOP_BY_HOP.iter().zip(present).skip(1).filter(|(_, p)| *p) {
        headers.remove(name);
    }
}

/// Removes `Connection` and the headers it names. Its usual words (`keep-alive`, itself hop-by-hop, and
/// `close`) name nothing more to look for.
fn strip_connection_named(headers: &mut HeaderMap) {
    let header::Entry::Occupied(connection) = headers.entry(header::CONNECTION) else {
        return;
    };
    let (_, values) = connection.remove_entry_mult();
    let mut named = Vec::new();
    for value in values {
        let words = value.to_str().unwrap_or("").split(',').map(str::trim);
        let usual =
            |w: &&str| w.eq_ignore_ascii_case("keep-alive") || w.eq_ignore_ascii_case("close");
        // A word that is not a header name is no header here.
        let names = words
            .filter(|w| !usual(w))
            .map(|w| HeaderName::from_bytes(w.as_bytes()));
        named.extend(names.filter_map(Result::ok));
    }
    for name in named {
        headers.remove(name);
    }
}

fn cached_response(c: Cached, marker: &'static str) -> Response {
    let mut resp = Response::new(Body::from(c.body));
    *resp.status_mut() = c.status;
    *resp.headers_mut() = c.headers;
    resp.headers_mut().remove(header::CONTENT_LENGTH);
    resp.headers_mut()
        .insert(X_CACHE, HeaderValue::from_static(marker));
    resp
}

/// A request the cache missed: the key it was looked up by, and its fields (for the answer's `Vary`).
struct CacheAsk {
    key: cache::Key,
    fields: HeaderMap,
    /// The room its body holds (see [`bodies`]), until its answer comes.
    _room: bodies::Hold,
}

/// A replica's response body on its way to the caller. It holds the request's in-flight guard, so the count
/// drops (and the replica connection goes back to its pool) when the response is fully sent or dropped; and,
/// when the response may be cached, its fill (see [`cache::Fill`]), stored once the body has passed in full.
pub struct Passing<B> {
    body: B,
    _guard: InFlight,
    /// The fill, and the proxy whose cache it goes to.
    fill: Option<(cache::Fill, Proxy)>,
}

impl<B> Passing<B> {
    /// Stores the response, here on the connection's task. Not on a task of its own: spawned while the
    /// replica connection's task waits in the worker's next-task slot (the body just took a chunk from it),
    /// the new task pushes it out to the shared queue and tokio wakes the other worker for it, a context
    /// switch before the caller's answer is written that costs more than the store itself.
    fn store(&mut self) {
        if let Some((fill, proxy)) = self.fill.take() {
            fill.store(&proxy.cache, proxy.clock.now());
        }
    }
}

impl<B> http_body::Body for Passing<B>
where
    B: http_body::Body<Data = axum::body::Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = axum::body::Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        use std::task::Poll;
        let polled = std::pin::Pin::new(&mut self.body).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some((fill, _)), Some(data)) = (&mut self.fill, frame.data_ref()) {
                    if !fill.keep(data) {
                        self.fill = None;
                    }
                }
                // The server may not ask again once the body says it has ended.
                if self.body.is_end_stream() {
                    self.store();
                }
            }
            Poll::Ready(Some(Err(_))) => self.fill = None,
            Poll::Ready(None) => self.store(),
            Poll::Pending => {}
        }
        polled.map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_stay_behind() {
        let mut h = HeaderMap::new();
        for (name, value) in [
            ("connection", "keep-alive, X-Trace"),
            ("keep-alive", "timeout=5"),
            ("x-trace", "1"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("proxy-connection", "keep-alive"),
            ("host", "models.example.com"),
            ("content-type", "application/json"),
        ] {
            h.insert(name, HeaderValue::from_static(value));
        }
        strip_hop_by_hop(&mut h);
        let left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["content-type"]);
        // A replica's usual answer: `Connection` alone, in any case, naming only its usual words.
        let mut h = HeaderMap::new();
        h.append("connection", HeaderValue::from_static("Keep-Alive"));
        h.append("connection", HeaderValue::from_static("close, X-Hop"));
        h.insert("x-hop", HeaderValue::from_static("1"));
        h.insert("content-length", HeaderValue::from_static("3"));
        strip_hop_by_hop(&mut h);
        let left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["content-length"]);
    }

    /// A body of known length that hands out `chunks`, then, if asked again, never answers (as hyper's
    /// channel does until the connection has noticed the end).
    struct Known {
        chunks: Vec<&'static [u8]>,
        left: usize,
    }

    impl http_body::Body for Known {
        type Data = axum::body::Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
            if self.chunks.is_empty() {
                return std::task::Poll::Pending;
            }
            let chunk = self.chunks.remove(0);
            self.left -= chunk.len();
            std::task::Poll::Ready(Some(Ok(http_body::Frame::data(chunk.into()))))
        }

        fn is_end_stream(&self) -> bool {
            self.left == 0
        }

        fn size_hint(&self) -> http_body::SizeHint {
            http_body::SizeHint::with_exact(self.left as u64)
        }
    }

    fn known(chunks: &[&'static [u8]]) -> Body {
        let left = chunks.iter().map(|c| c.len()).sum();
        Body::new(Known {
            chunks: chunks.to_vec(),
            left,
        })
    }

    #[tokio::test]
    async fn a_body_read_ends_when_the_body_says_so() {
        let read = read_body(known(&[b"{\"inputs\":", b"\"x\"}"]), 1024, room(1 << 20));
        let read = tokio::time::timeout(Duration::from_secs(10), read).await;
        let (Collected::Whole(bytes), _) = read.expect("no wait past the last byte").expect("read")
        else {
            panic!("all of it fits")
        };
        assert_eq!(&bytes[..], br#"{"inputs":"x"}"#);
        // Too large, by its announced length or by what came: handed back whole, what was read first.
        let over = |c: (Collected<Body>, bodies::Hold)| match c.0 {
            Collected::Over(read, rest) => read_then_rest(read, rest),
            Collected::Whole(_) => panic!("over the limit"),
        };
        let announced = over(
            read_body(known(&[b"12345"]), 4, room(1 << 20))
                .await
                .expect("read"),
        );
        let bytes = announced.collect().await.expect("passed").to_bytes();
        assert_eq!(&bytes[..], b"12345");
        let parts = [Ok::<_, std::io::Error>("123"), Ok("45"), Ok("678")];
        let stream = futures_util::stream::iter(parts);
        let came = over(
            read_body(Body::from_stream(stream), 4, room(1 << 20))
                .await
                .expect("read"),
        );
        let bytes = came.collect().await.expect("passed").to_bytes();
        assert_eq!(&bytes[..], b"12345678");
        // Past the room left for bodies, the same: what was read goes on with the rest, uncached.
        let parts = [Ok::<_, std::io::Error>("12"), Ok("34"), Ok("56")];
        let stream = futures_util::stream::iter(parts);
        let room = room(3);
        let bodies = Arc::clone(&room.bodies);
        let came = over(
            read_body(Body::from_stream(stream), 1024, room)
                .await
                .expect("read"),
        );
        assert_eq!(bodies.usage(), (0, 1), "given back, and counted");
        let bytes = came.collect().await.expect("passed").to_bytes();
        assert_eq!(&bytes[..], b"123456");
    }

    /// Room for bodies, `max` bytes in all.
    fn room(max: usize) -> bodies::Hold {
        let bodies = Arc::new(bodies::Bodies::new(max));
        bodies.take(0).expect("room for nothing")
    }

    #[tokio::test]
    async fn a_dropped_request_stops_its_body_read() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(1);
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        let read = read_body(Body::from_stream(stream), 1024, room(1 << 20));
        // The body never ends: the read is still waiting when the request is given up.
        let waited = tokio::time::timeout(Duration::from_millis(50), read).await;
        assert!(waited.is_err(), "the body cannot have been read");
        // The reading task let go of the body, so its sender sees the channel closed.
        let closed = tokio::time::timeout(Duration::from_secs(10), tx.closed()).await;
        assert!(
            closed.is_ok(),
            "the body read went on after the request was dropped"
        );
    }

    #[test]
    fn dot_segments_are_found_in_every_spelling() {
        for bad in [
            "/endpoints/ns/ep/../../v2/endpoint/carol",
            "/endpoints/ns/ep/..",
            "/endpoints/ns/ep/.",
            "/endpoints/ns/ep/./embed",
            "/endpoints/ns/../ep/embed",
            "/endpoints/ns/ep/%2e%2e/x",
            "/endpoints/ns/ep/%2E%2E/x",
            "/endpoints/ns/ep/%2E./x",
            "/endpoints/ns/ep/.%2e",
            "/endpoints/ns/ep/%2e",
            "/endpoints/ns/ep/x%2f..%2fy",
            "/endpoints/ns/ep/..%2F..%2Fv2",
            "/endpoints/ns/ep/..%5cx",
            "/endpoints/ns/ep/..\\x",
            "/endpoints/ns/ep/..;x/y",
            "/emb/../../admin",
            "..",
        ] {
            assert!(has_dot_segment(bad), "{bad}");
        }
        for good in [
            "/endpoints/ns/ep/embed",
            "/endpoints/ns/ep/",
            "/endpoints/ns/ep//x",
            "/endpoints/ns/ep/.well-known/x",
            "/endpoints/ns/ep/...",
            "/endpoints/ns/ep/a..b",
            "/endpoints/ns/ep/..a",
            "/endpoints/ns/ep/v1.0/model",
            "/endpoints/ns/ep/%2e%2e%2e",
            "/endpoints/ns/ep/%2",
            "/endpoints/ns/ep/x%",
            "/endpoints/ns/ep/%41.",
            "",
            "/",
        ] {
            assert!(!has_dot_segment(good), "{good}");
        }
    }

    /// A route for `ns`/`name`, public, with no replica.
    fn route(ns: &str, name: &str) -> Arc<Route> {
        Arc::new(Route {
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
            activity: Default::default(),
        })
    }

    #[test]
    fn the_target_is_the_rest_of_the_path_and_the_query() {
        let table = RouteTable::new(vec![route("ns", "ep")]);
        let target = |uri: &str| {
            let uri: Uri = uri.parse().expect("uri");
            let path = uri
                .path()
                .strip_prefix("/endpoints/")
                .expect("an endpoint path");
            let (route, rest) = by_path_route(&table, path).expect("routed");
            assert_eq!((&route.namespace[..], &route.name[..]), ("ns", "ep"));
            send_target(&uri, rest)
                .expect("a target")
                .as_str()
                .to_string()
        };
        for (uri, sent) in [
            (
                "/endpoints/ns/ep/v1/chat?stream=1&x=%2F",
                "/v1/chat?stream=1&x=%2F",
            ),
            ("/endpoints/ns/ep/v1/chat", "/v1/chat"),
            ("/endpoints/ns/ep/", "/"),
            ("/endpoints/ns/ep", "/"),
            ("/endpoints/ns/ep?q=1", "/?q=1"),
            ("/endpoints/ns/ep/a?", "/a?"),
            (
                "http://models.example.com/endpoints/ns/ep/a//b?q",
                "/a//b?q",
            ),
        ] {
            assert_eq!(target(uri), sent, "{uri}");
        }
        for missing in ["ns/other/x", "other/ep", "ns", ""] {
            let Err(ApiError::NotFound(_)) = by_path_route(&table, missing) else {
                panic!("{missing:?} is no endpoint");
            };
        }
        // By custom domain: the rest after the route's prefix, and the query.
        let uri: Uri = "http://models.example.com/emb/v1?x=1".parse().expect("uri");
        assert_eq!(send_target(&uri, "/v1").expect("target"), "/v1?x=1");
        assert_eq!(send_target(&uri, "").expect("target"), "/?x=1");
    }

    #[test]
    fn token_answers_are_kept_apart() {
        let key = token_key("sy_abc", "acme");
        assert_eq!(key, token_key("sy_abc", "acme"));
        assert_ne!(key, token_key("sy_abc", "other"));
        assert_ne!(key, token_key("sy_abd", "acme"));
        // Where the token ends counts: ("sy_abca", "cme") is another pair.
        assert_ne!(key, token_key("sy_abca", "cme"));
    }

    #[test]
    fn forwarded_for_names_each_address() {
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "::1".parse().unwrap());
        assert_eq!(ip_value(a), "10.0.0.1");
        assert_eq!(ip_value(a), "10.0.0.1");
        assert_eq!(ip_value(b), "::1");
        assert_eq!(ip_value(a), "10.0.0.1");
    }
}
