//! The general path: every request can be served this way, through hyper's HTTP/1 server and client, with
//! the same steps and rules as the own path (`proxy/own/`): the endpoint resolved ([`super::resolve`]), who
//! may call ([`super::access`]), the response cache ([`Proxy::cache_lookup`], its body read by [`body`]), a
//! cold start woken or waited for ([`wake`]), a replica picked, the request sent ([`Proxy::outgoing`], by
//! [`super::forward`]'s rules), and the response relayed ([`relay`]). It serves what the own path leaves to
//! it: HTTP/1.0, chunked uploads, `Expect`, upgrades ([`tunnel`]), the API, a cold start, MCP sessions, a
//! custom router, heads the own path does not parse, the private entry point, and everything when
//! `proxy.own_path = false`. [`conn`] serves a connection with hyper; [`guard`] judges its heads first.

mod body;
pub(super) mod conn;
mod guard;
mod relay;
mod routed;
mod tunnel;
mod wake;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::request::Parts;
use axum::http::uri::PathAndQuery;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, Uri};
use axum::response::{IntoResponse, Response};
use hyper::body::Incoming;

use super::count::Counted;
use super::forward::{self, Message, X_FORWARDED_FOR};
use super::resolve::{endpoint_route, send_target};
use super::{
    cache, cached_response, checks_waited, http_status, replica_failed, stamp, unavailable, Proxy,
    X_REQUEST_ID,
};
use crate::auth::bearer_in;
use crate::error::ApiError;
use crate::routing::access::Asked;
use crate::routing::pace::{Broken, Paced, Passed, Side, Stalled};
use crate::routing::upstream::{into_body, Error, ToReplica};
use crate::routing::{Backend, PickedBy, Route};
use body::{read_for_cache, read_then_rest, Collected};
use relay::CacheAsk;
pub use relay::Passing;

const X_USE_CACHE: HeaderName = HeaderName::from_static("x-use-cache");
const MCP_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");

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
    pub(super) proxy: Proxy,
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

/// The replica a response came from and what chose it, for the access line.
#[derive(Clone)]
struct Picked(String, PickedBy);

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
    async fn serve(
        &self,
        route: Arc<Route>,
        target: PathAndQuery,
        peer: SocketAddr,
        mut req: axum::http::Request<ToReplica>,
    ) -> Reply {
        let started = Instant::now();
        let given = req.headers().get(&X_REQUEST_ID).cloned();
        // When the caller's upload ends (see `head_in_time`), wherever the body goes on from here.
        let uploading = match req.body_mut() {
            http_body_util::Either::Left(body) if !http_body::Body::is_end_stream(body) => {
                Some(body.passed())
            }
            _ => None,
        };
        let unread = |u: &Option<Passed>| u.as_ref().is_some_and(|u| u.ended().is_none());
        // What was asked, for the access line.
        let asked = self.routing.access.is_some().then(|| {
            let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
            (req.method().to_string(), target.to_string())
        });
        let resp = match self
            .serve_inner(&route, target, peer, req, uploading.clone())
            .await
        {
            Ok(mut passing) => {
                // The replica answered before all of the upload came.
                if unread(&uploading) {
                    forward::close_after(passing.headers_mut());
                }
                let picked = passing.extensions_mut().remove::<Picked>();
                if let (Some(Picked(replica, by)), Some((method, target))) = (picked, &asked) {
                    let asked = Asked { method, target };
                    let answered = (passing.status().as_u16(), started.elapsed());
                    self.access_line(&route, &replica, asked, answered, by);
                }
                passing
            }
            Err(mut answered) => {
                stamp(&mut answered, given.as_ref());
                // Refused, or failed, before all of the upload came.
                if unread(&uploading) {
                    forward::close_after(answered.headers_mut());
                }
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
    /// end. `target` is the path and query to send on; `uploading`, when the caller's upload ends; `Err` is an
    /// answer of the server's own.
    async fn serve_inner(
        &self,
        route: &Arc<Route>,
        target: PathAndQuery,
        peer: SocketAddr,
        mut req: axum::http::Request<ToReplica>,
        uploading: Option<Passed>,
    ) -> Result<Reply, Response> {
        let (client, access) = self.check_access(route, peer, req.headers()).await?;
        // A request to upgrade the connection (see `tunnel`) is never cached.
        let upgrade =
            tunnel::asked(req.headers()).map(|protocol| (protocol, hyper::upgrade::on(&mut req)));
        // The cache answers before anything wakes the endpoint.
        let use_cache = upgrade.is_none() && wants_cache(route, req.method(), req.headers());
        let (parts, body) = req.into_parts();
        let (body, cache_ask) = if use_cache {
            self.cache_lookup(route, &parts, body, &target, &access)
                .await?
        } else {
            (body, None)
        };
        // The route looked up for this request is still the latest unless the checks may have waited (see
        // `checks_waited`).
        let route = if checks_waited(route, use_cache) {
            self.current_route(route, &parts).await?
        } else {
            self.ready_route(route, &parts).await?
        };
        let mut guard = InFlight::enter(&route, self.clock.now_millis());
        let session = parts
            .headers
            .get(&MCP_SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let host = parts.headers.get(header::HOST).cloned();
        let mut out = self.outgoing(parts, target, body, peer);
        let caller = routed::Caller {
            session: session.as_deref(),
            client,
            host,
        };
        let mut choice = self.choose(&route, &mut out, caller).await?;
        let Some(backend) = choice.first() else {
            return Err(unavailable(
                "no replica is ready",
                Some(self.config.retry_after_s),
            ));
        };
        guard.add_replica(&backend);
        if let Some((protocol, caller)) = upgrade {
            let resp = self.send_upgrade(&route, &backend, out, protocol).await?;
            if resp.status() == axum::http::StatusCode::SWITCHING_PROTOCOLS {
                return Ok(tunnel::join(caller, resp, guard));
            }
            return Ok(self.respond(&route, &backend, session.as_deref(), resp, guard, None));
        }
        let (backend, mut resp) = self
            .send(&route, &mut choice, backend, out, &mut guard, uploading)
            .await?;
        if let Some(router) = choice.router.take() {
            // The router's accounting, and its changes to the response's fields; a router that fails here
            // leaves the response as it is.
            match router.response(resp.status(), resp.headers_mut()).await {
                Ok(None) => {}
                Ok(Some(answer)) => return Err(answer),
                Err(e) => {
                    tracing::warn!(endpoint = %route.name, "custom router did not take the response: {e}")
                }
            }
        }
        let mut reply = self.respond(&route, &backend, session.as_deref(), resp, guard, cache_ask);
        if self.routing.access.is_some() {
            let picked = Picked(backend.replica_id.clone(), choice.by);
            reply.extensions_mut().insert(picked);
        }
        Ok(reply)
    }

    /// Sends a request to upgrade the connection (`protocol`) to `backend`: its answer, a `101` or any other.
    async fn send_upgrade(
        &self,
        route: &Route,
        backend: &Backend,
        mut out: axum::http::Request<ToReplica>,
        protocol: HeaderValue,
    ) -> Result<axum::http::Response<Incoming>, Response> {
        tunnel::ask(out.headers_mut(), protocol);
        let limit = self.config.replica_timeout();
        match tokio::time::timeout(limit, backend.send_upgrade(out)).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => {
                tracing::warn!(endpoint = %route.name, replica = %backend.replica_id, error = %e, "replica did not answer");
                Err(replica_failed(false))
            }
            Err(_) => Err(replica_failed(true)),
        }
    }

    /// Sends `out` to `backend` and waits for the response's head (see [`head_in_time`]); a replica that
    /// could not be reached at all was sent nothing, and the next of `choice`, if any, is tried. Returns the
    /// replica that answered and its answer; `Err` is the answer of the server's own.
    async fn send(
        &self,
        route: &Route,
        choice: &mut routed::Choice,
        mut backend: Arc<Backend>,
        mut out: axum::http::Request<ToReplica>,
        guard: &mut InFlight,
        uploading: Option<Passed>,
    ) -> Result<(Arc<Backend>, axum::http::Response<Incoming>), Response> {
        let limit = self.config.replica_timeout();
        let sent = loop {
            let sent = head_in_time(backend.send(out), limit, uploading.clone()).await;
            if let Ok(Err(Error::Connect(e))) = &sent {
                if let Some((next, again)) = choice.next() {
                    tracing::warn!(endpoint = %route.name, replica = %backend.replica_id, error = %e, "replica could not be reached; trying the next the router named");
                    (backend, out) = (next, again);
                    guard.add_replica(&backend);
                    continue;
                }
            }
            break sent;
        };
        match sent {
            Ok(Ok((r, _))) if !http_status(&r.status()) => {
                tracing::warn!(endpoint = %route.name, replica = %backend.replica_id, status = r.status().as_u16(), "replica answered with no HTTP status");
                Err(replica_failed(false))
            }
            Ok(Ok((r, sender))) => {
                guard.connection = Some(sender);
                Ok((backend, r))
            }
            Ok(Err(e)) => {
                let stalled = Stalled::caused(&e);
                if stalled == Some(Side::Caller) {
                    return Err(forward::body_failed(true).into_response());
                }
                // The caller's upload was cut off or badly framed: its fault, not the replica's.
                if Broken::caused(&e) == Some(Side::Caller) {
                    tracing::debug!(endpoint = %route.name, error = %e, "request body could not be read");
                    return Err(forward::body_failed(false).into_response());
                }
                tracing::warn!(endpoint = %route.name, replica = %backend.replica_id, error = %e, "replica did not answer");
                Err(replica_failed(stalled.is_some()))
            }
            Err(_) => {
                tracing::warn!(endpoint = %route.name, replica = %backend.replica_id, "replica did not answer in time");
                Err(replica_failed(true))
            }
        }
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
        let announced = http_body::Body::size_hint(&body).lower();
        let Some(room) = forward::body_room(&self.bodies, self.body_limit, announced) else {
            return Ok((body, None));
        };
        let (bytes, room) = match read_for_cache(body, self.body_limit, room).await {
            Ok((Collected::Whole(b), room)) => (b, room),
            // Larger than a body the cache reads, or than the room left for bodies: it goes on uncached,
            // what was read of it first.
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
        asked: &axum::http::request::Parts,
    ) -> Result<Arc<Route>, Response> {
        let Some(latest) = self.latest(route) else {
            return Err(
                ApiError::NotFound(format!("endpoint {} was deleted", route.name)).into_response(),
            );
        };
        self.ready_route(&latest, asked).await
    }

    /// `route` as the latest table has it; `None` once it is gone.
    fn latest(&self, route: &Route) -> Option<Arc<Route>> {
        let table = self.routing.table.borrow();
        table.get(&route.namespace, &route.name).cloned()
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
        // The caller's headers go on as they are, less those that stay behind (see `forward::stays`).
        let mut headers = parts.headers;
        let prior = headers.get(&X_FORWARDED_FOR).cloned();
        forward::strip(&mut headers, Message::Request);
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
        let trusted = self.trusted(peer.ip());
        if let Some(v) = forward::forwarded_for_value(prior.as_ref(), trusted, peer.ip()) {
            headers.insert(X_FORWARDED_FOR, v);
        }
        let mut out = axum::http::Request::new(body);
        *out.method_mut() = parts.method;
        *out.uri_mut() = Uri::from(target);
        // The caller's Host was for us (it is stripped above): the replica sees its own.
        *out.headers_mut() = headers;
        out
    }
}

/// Whether the response cache is used: the route has it on, the method is one whose answer may be
/// kept (see [`cacheable_method`]), and the caller did not opt out (`X-Use-Cache: false`).
fn wants_cache(route: &Route, method: &Method, headers: &HeaderMap) -> bool {
    let use_cache = headers.get(&X_USE_CACHE).map(HeaderValue::as_bytes);
    super::wants_cache_by(route, method.as_str().as_bytes(), use_cache)
}
