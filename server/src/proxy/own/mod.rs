//! The data plane's own HTTP/1.1 path, in nginx's way: a caller's connection and the replica connection
//! its request goes out on are driven by one task, which parses each head in place (`httparse`), writes the
//! head the other side gets straight from the bytes it read, and passes bodies through as they come.
//!
//! Against the general path (hyper's server and client, `proxy/general/`) it saves, on every request,
//! the header maps built and dropped on both sides, the hand-offs between the caller's task and the replica
//! connection's (a channel each way, and one for the response body), and their wake-ups: a request costs
//! about what a TCP relay costs, plus the parsing.
//!
//! It serves the usual request: HTTP/1.1, a body of known length (or none), for an endpoint that serves now
//! (public or authenticated, with or without CIDR rules and the response cache, any balancer). Anything
//! else, from the first request on a connection that is not one, is served by the general path, which is
//! handed the connection with what was read of it ([`Hand::Over`]): HTTP/1.0, chunked uploads,
//! `Expect`, upgrades, the API, a cold start, MCP sessions, a custom router, a head that does not parse, and
//! every error those answer. The rules are the same on both paths (`proxy/forward.rs`): the same hop-by-hop
//! headers stay behind, the replica sees the same request, the caller the same response, and the same
//! counters move.
//!
//! Its files, by concern: [`conn`] the caller's connection and its requests one after another; this file
//! which requests it takes ([`take`]) and the exchange; [`request`] the head the replica gets and the body read
//! for the cache; [`send`] sending it on a replica connection ([`upstream`]); [`response`] the answer's head,
//! and [`chunks`] its body; [`table`] the worker's routing table; [`sock`] and [`deadline`] the system calls and
//! the timer under them.

mod chunks;
mod conn;
mod deadline;
mod request;
mod response;
mod send;
mod sock;
mod table;
mod upstream;

use std::net::SocketAddr;
use std::time::Instant;

use axum::http::Method;
use axum::response::{IntoResponse, Response};
use bytes::Buf;

use super::bodies::Hold;
use super::count::Counted;
use super::edge::{self, Refusal};
use super::forward;
use super::http1::Framing;
use super::resolve::endpoint_route;
use super::{cache, cached_response, checks_waited, serving, Proxy};
use crate::auth::bearer;
use crate::model::{EndpointType, LoadBalancer};
use crate::routing::{PickedBy, Route, RouteTable};
use conn::{linger, write_answer};
use request::{key, read_whole_body, request_head, RequestFields};
use response::pass_response;
use send::{send_request, Unsent};

pub(super) use conn::serve_connection;
use conn::{Conn, Hand};
pub(super) use table::forget_table;
use table::table;

/// Whether a request target is in origin form and only of characters that any URI parser takes as they are
/// (RFC 3986's path and query characters): anything else goes to the general path, which checks it.
fn plain_target(target: &[u8]) -> bool {
    target.first() == Some(&b'/')
        && target
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?%".contains(b))
}

/// What this path needs to know of a request it takes.
struct Taken<'t> {
    route: &'t Route,
    /// Where the rest of the path (after the endpoint's part) starts in the target, or `None` when the
    /// path ends at the endpoint's part.
    rest_at: Option<usize>,
    framing: Framing,
    head_request: bool,
    /// An idempotent method: the request may go again when a kept connection fails under it.
    repeatable: bool,
}

/// Why this path did not take a request.
enum NotTaken {
    /// The general path is to take it (and the connection).
    Over,
    /// It is refused on any path (see [`edge::judge`]).
    Refused(Refusal),
}

/// Whether this path takes the request whose head is in `conn`, and what it needs of it.
fn take<'t>(proxy: &Proxy, conn: &Conn, table: &'t RouteTable) -> Result<Taken<'t>, NotTaken> {
    let (head, buf) = (&conn.head, &conn.buf[..]);
    let framing = Framing::of(head, buf);
    edge::judge(head, buf, &framing).map_err(NotTaken::Refused)?;
    if head.minor != 1 || head.method.in_(buf) == b"CONNECT" {
        return Err(NotTaken::Over);
    }
    let target = head.target.in_(buf);
    if !plain_target(target) || framing.encoded || framing.unusual {
        return Err(NotTaken::Over);
    }
    let target = std::str::from_utf8(target).map_err(|_| NotTaken::Over)?;
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    let host = head
        .get(buf, "host")
        .and_then(|h| std::str::from_utf8(h).ok());
    let found = endpoint_route(table, proxy, host, path).and_then(Result::ok);
    let (route, rest) = found.ok_or(NotTaken::Over)?;
    let usual = matches!(
        route.endpoint_type,
        EndpointType::Public | EndpointType::Authenticated
    );
    let routed = route.router.is_some() || route.ext_proc.is_some();
    // `least_load` reads a body's prompt for its prefix (see `balance::affinity_of`), on the general path.
    let prompt = route.load_balancer == LoadBalancer::LeastLoad && framing.length.unwrap_or(0) > 0;
    if !usual || !serving(route) || route.mcp_lb.is_some() || routed || prompt {
        return Err(NotTaken::Over);
    }
    let rest_at = (!rest.is_empty()).then(|| path.len() - rest.len());
    let method = head.method.in_(buf);
    let repeatable = Method::from_bytes(method).is_ok_and(|m| m.is_idempotent());
    Ok(Taken {
        route,
        rest_at,
        framing,
        head_request: method == b"HEAD",
        repeatable,
    })
}

/// Answers a request refused before it is read further (see [`edge::judge`]) in the spec's shape, and lets
/// the connection go.
async fn refuse(conn: &mut Conn, refusal: Refusal) -> Hand {
    let mut answer = refusal.answer();
    super::stamp(&mut answer, None);
    if write_answer(conn, answer, true, false).await {
        linger(conn).await;
    }
    Hand::Close
}

/// Serves the request whose head is in `conn`, if this path takes it (see [`Hand`]).
async fn serve_request(
    proxy: &Proxy,
    conn: &mut Conn,
    table: &RouteTable,
    peer: SocketAddr,
) -> Hand {
    let taken = match take(proxy, conn, table) {
        Ok(taken) => taken,
        Err(NotTaken::Over) => return Hand::Over,
        Err(NotTaken::Refused(refusal)) => return refuse(conn, refusal).await,
    };
    let started = Instant::now();
    conn.body_due = started + conn.timeouts.body;
    let length = usize::try_from(taken.framing.length.unwrap_or(0)).unwrap_or(usize::MAX);
    conn.pending = conn.head.len.saturating_add(length);
    conn.unread = false;
    let mut answer = match exchange(proxy, conn, peer, &taken, started).await {
        Ok(Exchanged::Passed(next)) if next && !taken.framing.close => return Hand::KeepAlive,
        Ok(Exchanged::Passed(_)) => {
            // Answered before all of the body came (the replica's early answer): the rest is let in and
            // dropped, for the caller to read the answer.
            if conn.unread {
                linger(conn).await;
            }
            return Hand::Close;
        }
        Ok(Exchanged::Gone) => return Hand::Close,
        Ok(Exchanged::Over) => return Hand::Over,
        Err(answer) => answer,
    };
    super::stamp(&mut answer, taken.framing.request_id.as_ref());
    let stats = &taken.route.activity.stats;
    stats.record(answer.status().as_u16(), started.elapsed());
    // The request is done with once all of it has been read: else the connection ends with the answer.
    let done = !conn.unread && (conn.pending == 0 || conn.buf.len() >= conn.pending);
    if done {
        conn.buf.advance(conn.pending);
        conn.pending = 0;
    }
    let close = taken.framing.close || !done;
    let written = write_answer(conn, answer, close, taken.head_request).await;
    if written && !done {
        linger(conn).await;
    }
    match written && !close {
        true => Hand::KeepAlive,
        false => Hand::Close,
    }
}

/// Who may call: the CIDR allow list and access by type. The account for an `authenticated` endpoint (a
/// part of the cache key), or the answer refusing the call.
async fn who_calls(
    proxy: &Proxy,
    conn: &Conn,
    peer: SocketAddr,
    route: &Route,
) -> Result<(std::net::IpAddr, String), Response> {
    let (head, buf) = (&conn.head, &conn.buf[..]);
    let forwarded = head
        .fields(buf)
        .filter(|(n, _)| n.eq_ignore_ascii_case(b"x-forwarded-for"))
        .map(|(_, v)| v);
    let client = proxy.client_ip_from(peer, forwarded);
    let token = head.get(buf, "authorization");
    let token = bearer(token.and_then(forward::visible));
    let access = proxy.admit(route, client, token).await?;
    Ok((client, access))
}

/// What came of a request this path took.
enum Exchanged {
    /// The replica's response went to the caller; whether the connection may take the next request.
    Passed(bool),
    /// The caller went away before the replica answered.
    Gone,
    /// The route changed while the checks waited (deleted, paused, scaled to zero): the general path
    /// serves the request, which is still whole in the buffer.
    Over,
}

/// The request's exchange with a replica, and the response passed on. `Err` is an answer of the server's
/// own, to be written.
async fn exchange(
    proxy: &Proxy,
    conn: &mut Conn,
    peer: SocketAddr,
    taken: &Taken<'_>,
    started: Instant,
) -> Result<Exchanged, Response> {
    let (client, access) = who_calls(proxy, conn, peer, taken.route).await?;
    let length = taken.framing.length.unwrap_or(0);
    let (cache_key, _room) = look_up(proxy, conn, taken, &access, length).await?.unzip();
    // The route as the latest table has it when the checks may have waited (as on the general path).
    let waited = checks_waited(taken.route, cache_key.is_some());
    let newer = waited.then(|| table(proxy));
    let route: &Route = match &newer {
        None => taken.route,
        Some(newer) => match newer.get(&taken.route.namespace, &taken.route.name) {
            Some(found) if serving(found) => found,
            _ => return Ok(Exchanged::Over),
        },
    };
    let mut count = Counted::enter(route, proxy.clock.now_millis());
    let Some(backend) = proxy.pick_replica(route, None, client, None, PickedBy::Balancer) else {
        return Err(super::unavailable(
            "no replica is ready",
            Some(proxy.config.retry_after_s),
        ));
    };
    count.add_replica(&**backend);
    request_head(proxy, conn, taken, backend, peer);
    // The request's head leaves the buffer once it is sent: a copy is kept for the answer's `Vary`.
    let cache_ask = cache_key.map(|key| (key, conn.buf[..conn.head.len].to_vec()));
    let limit = proxy.config.replica_timeout();
    // The request's start is the time now unless the checks may have waited (then read anew).
    let now = if waited { Instant::now() } else { started };
    let sent = send_request(conn, backend, length, taken.repeatable, limit, now);
    let sent = match sent.await {
        Ok(sent) => sent,
        Err(Unsent::CallerGone) => return Ok(Exchanged::Gone),
        Err(Unsent::CallerCut) => return Err(forward::body_failed(false).into_response()),
        Err(Unsent::CallerStalled) => return Err(forward::body_failed(true).into_response()),
        Err(Unsent::Replica(e)) => {
            tracing::warn!(endpoint = %route.name, replica = %backend.replica_id, error = %e, "replica did not answer");
            return Err(super::replica_failed(forward::timed_out(&e)));
        }
    };
    let mut upstream = sent.upstream;
    let passed =
        pass_response(proxy, conn, &mut upstream, taken, route, cache_ask, started).await?;
    conn.replica_timer = upstream.timer.take();
    if passed.reusable && sent.all {
        backend.pool.give_back_stream(upstream.io, upstream.used);
    }
    drop(count);
    // A body the replica answered before it had all of it: the rest is still on its way from the caller.
    Ok(Exchanged::Passed(passed.complete && sent.all))
}

/// The response cache, for an endpoint that has it (see [`super::wants_cache_by`]): reads the body (which
/// the key covers) when there is room for it, and looks the request up. The key to store the answer under
/// when the cache missed, with the room the body holds until the answer has passed; `None` when the request
/// goes on uncached; `Err` is the answer already made (a hit, or a body that could not be read).
async fn look_up(
    proxy: &Proxy,
    conn: &mut Conn,
    taken: &Taken<'_>,
    access: &str,
    length: u64,
) -> Result<Option<(cache::Key, Hold)>, Response> {
    let (method, use_cache) = (
        conn.head.method.in_(&conn.buf),
        conn.head.get(&conn.buf, "x-use-cache"),
    );
    if !super::wants_cache_by(taken.route, method, use_cache) {
        return Ok(None);
    }
    let Some(room) = forward::body_room(&proxy.bodies, proxy.body_limit, length) else {
        return Ok(None);
    };
    read_whole_body(conn, length).await?;
    let key = key(conn, taken, access);
    let fields = RequestFields(&conn.head, &conn.buf);
    if let Some(hit) = proxy.cache.get(&key, &fields, proxy.clock.now()) {
        taken.route.activity.stats.cache_hit();
        return Err(cached_response(hit, "HIT"));
    }
    Ok(Some((key, room)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_origin_targets_are_taken() {
        for good in [
            "/",
            "/endpoints/ns/ep/v1/chat?stream=true&x=%2F",
            "/a:b@c;d=e,f+g~h!$'()*",
        ] {
            assert!(plain_target(good.as_bytes()), "{good}");
        }
        for other in [
            "*",
            "http://h/x",
            "/a b",
            "/a\"b",
            "/a{b}",
            "/a\\b",
            "/a#b",
            "/é",
            "",
        ] {
            assert!(!plain_target(other.as_bytes()), "{other}");
        }
    }
}
