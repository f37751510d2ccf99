//! The replica a request goes to: the endpoint's balancer's pick, or its extProc router's
//! ([`super::super::ext_proc`]), which is asked with the request as the replica is to get it, its body read
//! whole. A router that names replicas gives a list to try in order: the next is tried when the one before
//! could not be reached at all (nothing was sent). A router that fails the request, or names none, leaves
//! it to the balancer, or (`fail_open` off) has it refused.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue, Method, Uri};
use axum::response::{IntoResponse, Response};

use super::super::bodies::Hold;
use super::super::ext_proc::{self, Failed, Outgoing, Settings, Told};
use super::super::{balance, forward, unavailable, Proxy};
use super::body::{read_for_cache, read_then_rest, Collected};
use crate::model::LoadBalancer;
use crate::routing::upstream::ToReplica;
use crate::routing::{Backend, ExtProcRoute, PickedBy, Route, RouterFailure};

/// The replicas a request may go to, in order, and what it takes to send it again.
pub(super) struct Choice {
    to: VecDeque<Arc<Backend>>,
    /// The request as sent, to send again to the next replica (only when there is one).
    again: Option<(Method, Uri, HeaderMap, Bytes)>,
    /// The room its body takes while it is held.
    _room: Option<Hold>,
    /// The router's stream, for the response's head.
    pub router: Option<ext_proc::Stream>,
    /// What chose the replicas.
    pub by: PickedBy,
}

impl Choice {
    /// One replica, or none, chosen `by` what.
    pub(super) fn one(to: Option<&Arc<Backend>>, by: PickedBy) -> Choice {
        Choice {
            to: to.cloned().into_iter().collect(),
            again: None,
            _room: None,
            router: None,
            by,
        }
    }

    /// The replica to send to first.
    pub(super) fn first(&mut self) -> Option<Arc<Backend>> {
        self.to.pop_front()
    }

    /// The next replica, with the request to send it, after the one before could not be reached.
    pub(super) fn next(&mut self) -> Option<(Arc<Backend>, axum::http::Request<ToReplica>)> {
        let (method, uri, headers, body) = self.again.clone()?;
        let replica = self.to.pop_front()?;
        let mut req = axum::http::Request::new(ToReplica::Right(Body::from(body)));
        *req.method_mut() = method;
        *req.uri_mut() = uri;
        *req.headers_mut() = headers;
        Some((replica, req))
    }
}

/// Who is calling, for the balancer.
pub(super) struct Caller<'a> {
    pub session: Option<&'a str>,
    pub client: IpAddr,
    /// The caller's `Host`, the router's `:authority`.
    pub host: Option<HeaderValue>,
}

impl Proxy {
    /// The replicas `out` (the request as the replica is to get it) may go to: for an extProc route, as its
    /// router says (`out` changed as it says); else the balancer's pick. `Err` is the answer already made.
    pub(super) async fn choose(
        &self,
        route: &Arc<Route>,
        out: &mut axum::http::Request<ToReplica>,
        caller: Caller<'_>,
    ) -> Result<Choice, Response> {
        let Some(ext) = &route.ext_proc else {
            return self.balanced(route, out, caller).await;
        };
        let settings = self.settings(ext);
        // The body, whole when it may be held so: the router may read and change it. A larger one goes on
        // as it comes, and the router sees the head alone.
        let had_length = out.headers().contains_key(header::CONTENT_LENGTH);
        let (mut body, room) = self.whole_body(out).await?.unzip();
        let affinity = body.as_ref().and_then(|b| self.affinity(route, b));
        let fallback = |by| self.pick_replica(route, caller.session, caller.client, affinity, by);
        let told = match ext.processor {
            None => Err(Failed::Broken("the router is not running".into())),
            Some(addr) => {
                let (mut method, mut path) = (out.method().clone(), path_of(out.uri()));
                let authority = caller.host.as_ref().and_then(|h| h.to_str().ok());
                let asking = Outgoing {
                    method: &mut method,
                    path: &mut path,
                    authority: authority.unwrap_or_default(),
                    headers: out.headers_mut(),
                    body: body.as_mut(),
                };
                let told = ext_proc::ask(addr, settings, asking).await;
                *out.method_mut() = method;
                *out.uri_mut() = Uri::from(path);
                told
            }
        };
        if let Some(b) = &body {
            set_body(out, b.clone(), had_length);
        }
        let mut choice = match told {
            Ok((told, stream)) => self.told(route, told, stream, fallback)?,
            Err(failed) => self.router_failed(route, settings, failed, fallback)?,
        };
        if choice.to.len() > 1 {
            let (m, u, h) = (
                out.method().clone(),
                out.uri().clone(),
                out.headers().clone(),
            );
            choice.again = body.map(|b| (m, u, h, b));
        }
        choice._room = room.flatten();
        Ok(choice)
    }

    /// What a router's answer makes of a request: its replicas, in order (only ready ones: an address that
    /// is not one is refused), the balancer's pick when it named none, or its immediate answer.
    #[allow(clippy::result_large_err)] // The answer goes back to the caller as it is, as every step's does.
    fn told<'r>(
        &self,
        route: &'r Route,
        told: Told,
        stream: ext_proc::Stream,
        fallback: impl FnOnce(PickedBy) -> Option<&'r Arc<Backend>>,
    ) -> Result<Choice, Response> {
        let stats = &route.activity.stats;
        let mut choice = match told {
            Told::Answer(answer) => return Err(answer),
            Told::Nothing => Choice::one(fallback(PickedBy::Fallback), PickedBy::Fallback),
            Told::To(named) => {
                let to = ready_named(route, &named);
                if to.is_empty() {
                    stats.router_failed(RouterFailure::Refused);
                    tracing::warn!(endpoint = %route.name, named = %named, "the custom router named no ready replica");
                    let why = format!("the custom router named {named}, which is not a ready replica of this endpoint");
                    return Err(unavailable(why, None));
                }
                stats.picked(PickedBy::Router);
                Choice {
                    to,
                    again: None,
                    _room: None,
                    router: None,
                    by: PickedBy::Router,
                }
            }
        };
        choice.router = Some(stream);
        Ok(choice)
    }

    /// The prompt prefix of `body` when the route balances by it (`least_load`).
    fn affinity(&self, route: &Route, body: &[u8]) -> Option<u64> {
        (route.load_balancer == LoadBalancer::LeastLoad)
            .then(|| balance::affinity_of(body))
            .flatten()
    }

    /// The balancer's pick for `out`: by `least_load`, with the prompt prefix of its body, read whole (see
    /// [`balance::affinity_of`]).
    async fn balanced(
        &self,
        route: &Route,
        out: &mut axum::http::Request<ToReplica>,
        caller: Caller<'_>,
    ) -> Result<Choice, Response> {
        let mut affinity = None;
        let mut room = None;
        if route.load_balancer == LoadBalancer::LeastLoad {
            let had_length = out.headers().contains_key(header::CONTENT_LENGTH);
            if let Some((body, held)) = self.whole_body(out).await? {
                affinity = self.affinity(route, &body);
                set_body(out, body, had_length);
                room = held;
            }
        }
        let by = PickedBy::Balancer;
        let to = self.pick_replica(route, caller.session, caller.client, affinity, by);
        let mut choice = Choice::one(to, by);
        choice._room = room;
        Ok(choice)
    }

    /// An endpoint's router settings over `[proxy]`'s.
    fn settings(&self, ext: &ExtProcRoute) -> Settings {
        let ms = ext
            .settings
            .timeout_ms
            .unwrap_or(self.config.ext_proc_timeout_ms);
        Settings {
            timeout: Duration::from_millis(ms.clamp(1, 600_000)),
            fail_open: ext
                .settings
                .fail_open
                .unwrap_or(self.config.ext_proc_fail_open),
            body: ext.settings.request_body,
            body_limit: self.body_limit,
        }
    }

    /// A request its router failed: counted, then the balancer's (`fail_open`) or refused.
    // The answer goes back to the caller as it is, as every step's does.
    #[allow(clippy::result_large_err)]
    fn router_failed<'r>(
        &self,
        route: &Route,
        settings: Settings,
        failed: Failed,
        by_balancer: impl FnOnce(PickedBy) -> Option<&'r Arc<Backend>>,
    ) -> Result<Choice, Response> {
        let why = match failed {
            Failed::Timeout => RouterFailure::Timeout,
            Failed::Broken(_) => RouterFailure::Error,
        };
        route.activity.stats.router_failed(why);
        tracing::warn!(endpoint = %route.name, fail_open = settings.fail_open, "custom router failed a request: {failed}");
        if settings.fail_open {
            Ok(Choice::one(
                by_balancer(PickedBy::Fallback),
                PickedBy::Fallback,
            ))
        } else {
            let why = format!("the custom router failed the request: {failed}");
            Err(unavailable(why, Some(self.config.retry_after_s)))
        }
    }

    /// `out`'s body read whole, with the room it takes; `None` (the body put back as it was) for one larger
    /// than a body read whole.
    async fn whole_body(
        &self,
        out: &mut axum::http::Request<ToReplica>,
    ) -> Result<Option<(Bytes, Option<Hold>)>, Response> {
        let body = std::mem::replace(out.body_mut(), ToReplica::Right(Body::empty()));
        if http_body::Body::is_end_stream(&body) {
            return Ok(Some((Bytes::new(), None)));
        }
        let announced = http_body::Body::size_hint(&body).lower();
        let Some(room) = forward::body_room(&self.bodies, self.body_limit, announced) else {
            *out.body_mut() = body;
            return Ok(None);
        };
        match read_for_cache(body, self.body_limit, room).await {
            Ok((Collected::Whole(b), room)) => Ok(Some((b, Some(room)))),
            Ok((Collected::Over(read, rest), _)) => {
                *out.body_mut() = ToReplica::Right(read_then_rest(read, rest));
                Ok(None)
            }
            Err(e) => Err(e.into_response()),
        }
    }
}

/// A URI's path and query (`/` when it has none).
fn path_of(uri: &Uri) -> axum::http::uri::PathAndQuery {
    uri.path_and_query()
        .cloned()
        .unwrap_or_else(|| axum::http::uri::PathAndQuery::from_static("/"))
}

/// `body` as `out`'s, of a known length: `Content-Length` says it unless the request had none and has no
/// body (a `GET`).
fn set_body(out: &mut axum::http::Request<ToReplica>, body: Bytes, had_length: bool) {
    let headers = out.headers_mut();
    headers.remove(header::TRANSFER_ENCODING);
    if had_length || !body.is_empty() {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    }
    *out.body_mut() = ToReplica::Right(Body::from(body));
}

/// The endpoint's ready replicas among those `named` (`ip:port`, comma-separated), in the order named;
/// an address that is not one of them is left out.
fn ready_named(route: &Route, named: &str) -> VecDeque<Arc<Backend>> {
    let mut to = VecDeque::new();
    for addr in named
        .split(',')
        .filter_map(|a| a.trim().parse::<SocketAddr>().ok())
    {
        let found = route.backends.iter().find(|b| b.addr == addr);
        if let Some(b) = found.filter(|b| !to.iter().any(|t: &Arc<Backend>| t.addr == b.addr)) {
            to.push_back(b.clone());
        }
    }
    to
}
