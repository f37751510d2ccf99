//! The data plane's own HTTP/1.1 path, in nginx's way: a caller's connection and the replica connection
//! its request goes out on are driven by one task, which parses each head in place (`httparse`), writes the
//! head the other side gets straight from the bytes it read, and passes bodies through as they come.
//!
//! Against the general path (hyper's server and client, see [`super::workers`]) it saves, on every request,
//! the header maps built and dropped on both sides, the hand-offs between the caller's task and the replica
//! connection's (a channel each way, and one for the response body), and their wake-ups: a request costs
//! about what a TCP relay costs, plus the parsing.
//!
//! It serves the usual request: HTTP/1.1, a body of known length (or none), for an endpoint that serves now
//! (public or authenticated, with or without CIDR rules and the response cache, any balancer). Anything
//! else, from the first request on a connection that is not one, is served by the general path, which is
//! handed the connection with what was read of it ([`Hand::Over`]): HTTP/1.0, chunked uploads,
//! `Expect`, upgrades, the API, a cold start, MCP sessions, a custom router, a head that does not parse, and
//! every error those answer. The rules are the same on both paths: the same hop-by-hop headers stay
//! behind, the replica sees the same request, the caller the same response, and the same counters move.

use std::io::Write as _;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::{Buf, BytesMut};
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::cache::{self, keep, Fill};
use super::deadline::Deadline;
use super::edge::{self, Refusal};
use super::http1::{
    self, date, field, length_field, status_line, words, Chunks, Framing, Head, Parsed, HEAD_MAX,
    LINE_MAX, RESPONSE_HEAD_MAX,
};
use super::{balance, cached_response, endpoint_route, serving, sock, Counted, Proxy};
use crate::auth::bearer;
use crate::config::ClientTimeouts;
use crate::error::ApiError;
use crate::model::EndpointType;
use crate::routing::pace::{Side, Stalled};
use crate::routing::{upstream, Backend, Route, RouteTable};

/// Most buffer a connection keeps between requests.
const KEPT_MAX: usize = 64 * 1024;
/// `super::HOP_BY_HOP` as bytes: the names compared here as they come, with no `HeaderName` looked up.
const HOP_BY_HOP: [&[u8]; 9] = [
    b"connection",
    b"keep-alive",
    b"proxy-authenticate",
    b"proxy-authorization",
    b"proxy-connection",
    b"te",
    b"trailer",
    b"transfer-encoding",
    b"upgrade",
];

/// Whether a field is for this hop only, or for this server only, and is not passed on: the hop-by-hop
/// fields (see `HOP_BY_HOP`), `Host`, and those the message's `Connection` names (looked for when `named`,
/// see [`Framing::names`]); and, in a request, the caller's token, the private link's account,
/// `X-Forwarded-For` (written anew) and the fields nginx drops (see [`edge::dropped_name`]).
fn stays(name: &[u8], head: &Head, buf: &[u8], request: bool, named: bool) -> bool {
    let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
    let listed = HOP_BY_HOP.iter().any(|h| is(h))
        || is(b"host")
        || request
            && (is(b"authorization")
                || is(b"x-forwarded-for")
                || is(b"x-private-link-account")
                || edge::dropped_name(name));
    listed
        || named
            && head
                .fields(buf)
                .filter(|(n, _)| n.eq_ignore_ascii_case(b"connection"))
                .any(|(_, v)| words(v).any(is))
}

/// A field's value as text, as the general path takes it (`HeaderValue::to_str`): visible ASCII and tabs
/// only, else none.
fn visible(value: &[u8]) -> Option<&str> {
    let plain = value
        .iter()
        .all(|b| *b == b'\t' || (b' '..=b'~').contains(b));
    plain.then(|| std::str::from_utf8(value).ok()).flatten()
}

/// Whether a request target is in origin form and only of characters that any URI parser takes as they are
/// (RFC 3986's path and query characters): anything else goes to the general path, which checks it.
fn plain_target(target: &[u8]) -> bool {
    target.first() == Some(&b'/')
        && target
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?%".contains(b))
}

/// One caller's connection on this path.
pub(super) struct Conn {
    pub(super) io: TcpStream,
    timeouts: ClientTimeouts,
    /// What the caller sent that is not handled yet: a head being read, body bytes, the next request.
    pub(super) buf: BytesMut,
    /// What the replica sent of the current exchange.
    rbuf: BytesMut,
    /// Each head written, made here.
    out: Vec<u8>,
    head: Head,
    rhead: Head,
    /// Bytes of the current request (head and body) still in `buf`: none once it has been sent on.
    pending: usize,
    /// Part of the current request's body was not read: the replica answered first.
    unread: bool,
    /// The timer of the waits on replicas (see [`Upstream::timer`]), between exchanges.
    replica_timer: Option<Deadline>,
    /// When the current request's body must have come whole (`proxy.body_timeout_s` from its head).
    body_due: Instant,
}

/// What became of a caller's connection after a request.
pub(super) enum Hand {
    /// Answered; the next request may come.
    KeepAlive,
    /// Closed, or to be.
    Close,
    /// Not for this path: the general path takes the connection as it is, the head unread.
    Over,
}

impl Conn {
    pub(super) fn new(io: TcpStream, timeouts: ClientTimeouts) -> Conn {
        Conn {
            io,
            timeouts,
            buf: BytesMut::with_capacity(8192),
            rbuf: BytesMut::with_capacity(8192),
            out: Vec::with_capacity(1024),
            head: Head::default(),
            rhead: Head::default(),
            pending: 0,
            unread: false,
            replica_timer: None,
            body_due: Instant::now(),
        }
    }

    /// How long the next wait for the request's body may last: the caller's time, within what is left of
    /// the body's whole time; `None` once that has run out.
    fn body_wait(&self) -> Option<Duration> {
        let left = self.body_due.saturating_duration_since(Instant::now());
        (!left.is_zero()).then(|| self.timeouts.caller.min(left))
    }

    /// Reads until a request head has come whole. Otherwise what becomes of the connection: `Over` for a
    /// head this path does not parse (or one longer than [`HEAD_MAX`]), `Close` when the caller closed (or
    /// failed) first, or let the time run out (`timer`, set here to the idle time while nothing of the head
    /// has come, then to the header time).
    pub(super) async fn read_head(&mut self, timer: &mut Deadline) -> Result<(), Hand> {
        let timeouts = self.timeouts;
        // What a large request (a cached endpoint's whole body) left behind is not kept for the next.
        if self.buf.is_empty() && self.buf.capacity() > KEPT_MAX {
            self.buf = BytesMut::with_capacity(8192);
        }
        if self.out.capacity() > KEPT_MAX {
            self.out = Vec::with_capacity(1024);
        }
        if self.rbuf.capacity() > KEPT_MAX {
            self.rbuf = BytesMut::with_capacity(8192);
        }
        let mut idle = self.buf.is_empty();
        let wait = if idle { timeouts.idle } else { timeouts.header };
        timer.set(tokio::time::Instant::now() + wait);
        loop {
            if !self.buf.is_empty() {
                match self.head.request(&self.buf) {
                    Parsed::Complete => return Ok(()),
                    Parsed::Partial if self.buf.len() < HEAD_MAX => {}
                    Parsed::Malformed => return Err(refuse(self, edge::MALFORMED).await),
                    _ => return Err(Hand::Over),
                }
                if idle {
                    idle = false;
                    timer.set(tokio::time::Instant::now() + timeouts.header);
                }
            }
            self.buf.reserve(4096);
            let read = tokio::select! {
                biased;
                read = sock::read_buf(&self.io, &mut self.buf) => read,
                () = timer.passed() => return Err(Hand::Close),
            };
            match read {
                Ok(0) if self.buf.is_empty() => return Err(Hand::Close),
                // Cut off mid-head: the general path answers what it can.
                Ok(0) => return Err(Hand::Over),
                Ok(_) => {}
                Err(_) => return Err(Hand::Close),
            }
        }
    }
}

/// The routing table for a request. A data-plane worker keeps the latest one it has seen, taken anew only
/// when the runtime has published one since (and let go when the worker goes idle, see [`forget_table`]),
/// in a holder of its own: its requests look their routes up without the channel's lock, and count a
/// reference on that holder alone rather than on the table and the route. The channel's lock and those
/// counts would be written by every worker on every request, each write taking their cache line from the
/// other cores; the holder's count stays on its worker's. Elsewhere, the table as published.
pub(super) fn table(proxy: &Proxy) -> Arc<Held> {
    latest_table(&proxy.routing.table)
}

fn latest_table(published: &watch::Receiver<Arc<RouteTable>>) -> Arc<Held> {
    if !upstream::on_worker() {
        return Arc::new(Held(published.borrow().clone()));
    }
    SEEN.with_borrow_mut(|seen| {
        let seen = match seen {
            Some(s) if s.published.same_channel(published) => s,
            _ => seen.insert(Seen {
                published: published.clone(),
                table: None,
            }),
        };
        match &seen.table {
            Some(table) if !seen.published.has_changed().unwrap_or(false) => table.clone(),
            _ => {
                let table = Arc::new(Held(seen.published.borrow_and_update().clone()));
                seen.table.insert(table).clone()
            }
        }
    })
}

/// Lets go of the table this worker saw last: called as the worker goes to sleep, so that an idle server
/// holds no table (nor the replicas and connections in it) after a newer one came.
pub(super) fn forget_table() {
    SEEN.with_borrow_mut(|seen| {
        if let Some(seen) = seen {
            seen.table = None;
        }
    });
}

/// A worker's latest routing table in its holder (see [`table`]), and the channel it came from.
struct Seen {
    published: watch::Receiver<Arc<RouteTable>>,
    table: Option<Arc<Held>>,
}

/// A routing table as a worker holds it (see [`table`]): a reference counted on this holder is one
/// counted on the worker's own cache line.
pub(super) struct Held(Arc<RouteTable>);

impl std::ops::Deref for Held {
    type Target = RouteTable;

    fn deref(&self) -> &RouteTable {
        &self.0
    }
}

thread_local! {
    static SEEN: std::cell::RefCell<Option<Seen>> = const { std::cell::RefCell::new(None) };
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
    if !usual || !serving(route) || route.mcp_lb.is_some() || route.router.is_some() {
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
pub(super) async fn serve(
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

/// Before a connection whose request was not read in full is closed: says that nothing more will be
/// written, and takes (and drops) what the caller still sends for a moment, so that the answer is read
/// rather than lost to a reset.
async fn linger(conn: &mut Conn) {
    let _ = conn.io.shutdown().await;
    let drain = async {
        let mut left = 1 << 20;
        let mut scrap = vec![0u8; 16 * 1024];
        while left > 0 {
            match conn.io.read(&mut scrap).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left -= n.min(left),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
}

/// Who may call: the CIDR allow list and access by type. The account for an `authenticated` endpoint (a
/// part of the cache key), or the answer refusing the call.
async fn admit(
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
    let token = bearer(token.and_then(visible));
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
    let (client, access) = admit(proxy, conn, peer, taken.route).await?;
    let length = taken.framing.length.unwrap_or(0);
    let (method, use_cache) = (
        conn.head.method.in_(&conn.buf),
        conn.head.get(&conn.buf, "x-use-cache"),
    );
    // A body larger than the cache reads goes on uncached, as it comes; so does one that finds no room
    // among the bodies read whole at once (see `bodies`).
    let fits = length <= proxy.body_limit as u64;
    let use_cache = fits && super::wants_cache_by(taken.route, method, use_cache);
    let room = use_cache
        .then(|| {
            proxy
                .bodies
                .take(usize::try_from(length).unwrap_or(usize::MAX))
        })
        .flatten();
    if use_cache && room.is_none() {
        proxy.bodies.passed_uncached();
    }
    let use_cache = room.is_some();
    // The cache's key covers the body: all of it is read first.
    if use_cache {
        read_body(conn, length).await?;
    }
    let cache_key = use_cache.then(|| key(conn, taken, &access));
    if let Some(key) = &cache_key {
        let fields = RequestFields(&conn.head, &conn.buf);
        if let Some(hit) = proxy.cache.get(key, &fields, proxy.clock.now()) {
            taken.route.activity.stats.cache_hit();
            return Err(cached_response(hit, "HIT"));
        }
    }
    // The route as the latest table has it when the checks may have waited (as on the general path).
    let waited = use_cache || taken.route.endpoint_type == EndpointType::Authenticated;
    let newer = waited.then(|| table(proxy));
    let route: &Route = match &newer {
        None => taken.route,
        Some(newer) => match newer.get(&taken.route.namespace, &taken.route.name) {
            Some(found) if serving(found) => found,
            _ => return Ok(Exchanged::Over),
        },
    };
    let mut count = Counted::enter(route, proxy.clock.now_millis());
    let Some(backend) = balance::pick(route.load_balancer, &route.backends, client) else {
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
        Err(Unsent::CallerStalled) => return Err(ApiError::body_stalled().into_response()),
        Err(Unsent::Replica(e)) => {
            tracing::warn!(endpoint = %route.name, replica = %backend.replica_id, error = %e, "replica did not answer");
            return Err(super::replica_failed(timed_out(&e)));
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

/// Reads the rest of a body of `length` bytes (one the cache reads: at most `server.body_limit`) into the
/// buffer, after the head.
async fn read_body(conn: &mut Conn, length: u64) -> Result<(), Response> {
    let whole = conn
        .head
        .len
        .saturating_add(usize::try_from(length).unwrap_or(usize::MAX));
    while conn.buf.len() < whole {
        let Some(wait) = conn.body_wait() else {
            return Err(ApiError::body_stalled().into_response());
        };
        // Room as the body comes, not all it announced at once.
        conn.buf.reserve((whole - conn.buf.len()).min(64 * 1024));
        let read = sock::read_buf(&conn.io, &mut conn.buf);
        match bounded(wait, Side::Caller, read).await {
            Err(e) if timed_out(&e) => return Err(ApiError::body_stalled().into_response()),
            Ok(0) | Err(_) => return Err(super::unreadable().into_response()),
            Ok(_) => {}
        }
    }
    Ok(())
}

/// The cache key of a request whose body is at hand (see `Proxy::cache_lookup`).
fn key(conn: &Conn, taken: &Taken<'_>, access: &str) -> cache::Key {
    let (head, buf) = (&conn.head, &conn.buf[..]);
    fn text(b: &[u8]) -> &str {
        std::str::from_utf8(b).unwrap_or("")
    }
    let accept = head.get(buf, "accept").and_then(visible).unwrap_or("");
    let target = text(head.target.in_(buf));
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let rest = taken.rest_at.map_or("/", |at| &path[at..]);
    let body_at = head.len;
    let body = &buf[body_at..body_at + taken.framing.length.unwrap_or(0) as usize];
    cache::key(
        taken.route,
        cache::Asked {
            method: text(head.method.in_(buf)),
            path: rest,
            query,
            accept,
            access,
            credentialed: cache::Fields::credentialed(&RequestFields(head, buf)),
            body,
        },
    )
}

/// A request's fields in its head, as the cache reads them.
struct RequestFields<'a>(&'a Head, &'a [u8]);

impl cache::Fields for RequestFields<'_> {
    fn each(&self, name: &[u8], with: &mut dyn FnMut(&[u8])) {
        let RequestFields(head, buf) = self;
        head.fields(buf)
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .for_each(|(_, v)| with(v));
    }
}

/// Writes the head the replica gets into `conn.out`: the caller's method, the rest of the path and the
/// query, the caller's fields less those that stay (see [`stays`]), the replica's own `Host` and
/// `X-Forwarded-For` naming the caller.
fn request_head(
    proxy: &Proxy,
    conn: &mut Conn,
    taken: &Taken<'_>,
    backend: &Backend,
    peer: SocketAddr,
) {
    let (head, buf, out) = (&conn.head, &conn.buf[..], &mut conn.out);
    out.clear();
    out.extend_from_slice(head.method.in_(buf));
    out.push(b' ');
    let target = head.target.in_(buf);
    match taken.rest_at {
        Some(at) => out.extend_from_slice(&target[at..]),
        None => {
            out.push(b'/');
            if let Some(q) = target.iter().position(|b| *b == b'?') {
                out.extend_from_slice(&target[q..]);
            }
        }
    }
    out.extend_from_slice(b" HTTP/1.1\r\n");
    // The body's length is written once, from what the head said (never dropped by a `Connection`).
    let named = taken.framing.names;
    for (name, value) in head.fields(buf) {
        let ours = name.eq_ignore_ascii_case(b"content-length");
        if !(ours || stays(name, head, buf, true, named)) {
            field(out, name, value);
        }
    }
    if let Some(n) = taken.framing.length {
        length_field(out, n);
    }
    field(out, b"host", backend.host.as_bytes());
    out.extend_from_slice(b"x-forwarded-for: ");
    let prior = head.get(buf, "x-forwarded-for").and_then(visible);
    if let (Some(prior), true) = (prior, proxy.trusted(peer.ip())) {
        out.extend_from_slice(prior.as_bytes());
        out.extend_from_slice(b", ");
    }
    super::ip_text(peer.ip(), |text| out.extend_from_slice(text));
    out.extend_from_slice(b"\r\n\r\n");
}

/// A request sent: the replica connection, and whether all of the body went (the replica may answer
/// before it has taken all of it).
struct Sent {
    upstream: Upstream,
    all: bool,
}

/// Why a request could not be sent and answered.
enum Unsent {
    /// The caller went away first (which the general path notices too): nobody waits for an answer, and
    /// the replica is freed of the request.
    CallerGone,
    /// The caller's body stopped coming for the caller's time (`proxy.caller_timeout_s`).
    CallerStalled,
    /// The replica could not be reached, or closed without answering, or said nothing in time
    /// ([`timed_out`]).
    Replica(std::io::Error),
}

/// A connection to a replica, every wait on which ends after `limit` (`proxy.replica_timeout_s`) with a
/// [`Stalled`] error: a replica that keeps its caller waiting without a word does so for no longer.
struct Upstream {
    io: TcpStream,
    limit: Duration,
    /// The time of a wait on it, made at the first wait of the caller's connection and set again for each.
    timer: Option<Deadline>,
    /// When the latest wait on it began: no later than its last use.
    used: Instant,
}

impl Upstream {
    async fn read_buf(&mut self, buf: &mut BytesMut) -> std::io::Result<usize> {
        self.read_since(buf, None).await
    }

    /// [`Self::read_buf`], whose wait began at `now` when that is given (a time read just before).
    async fn read_since(
        &mut self,
        buf: &mut BytesMut,
        now: Option<Instant>,
    ) -> std::io::Result<usize> {
        use futures_util::FutureExt;
        let mut read = std::pin::pin!(sock::read_buf(&self.io, buf));
        if let Some(done) = read.as_mut().now_or_never() {
            return done;
        }
        self.used = now.unwrap_or_else(Instant::now);
        let deadline = tokio::time::Instant::from_std(self.used + self.limit);
        // One timer for all of a connection's waits: set later each time, it stays where the event loop
        // keeps it rather than being put there and taken out again for each.
        let timer = match &mut self.timer {
            Some(timer) => {
                timer.set(deadline);
                timer
            }
            None => self.timer.insert(Deadline::at(deadline)),
        };
        tokio::select! {
            biased;
            read = read => read,
            () = timer.passed() => Err(REPLICA_STALLED.io()),
        }
    }

    async fn write_all(&mut self, data: &[u8]) -> std::io::Result<()> {
        write_each(&mut self.io, self.limit, Side::Replica, data).await
    }
}

/// A wait on the caller on this path that went on for its time (`proxy.caller_timeout_s`).
const CALLER_STALLED: Stalled = Stalled {
    side: Side::Caller,
    what: "the caller kept the proxy waiting for too long",
};
/// A wait on a replica that went on for its time (`proxy.replica_timeout_s`).
const REPLICA_STALLED: Stalled = Stalled {
    side: Side::Replica,
    what: "the endpoint's replica kept the proxy waiting for too long",
};

/// `io`, a wait on `side`, given up after `limit` with a [`Stalled`] error (see [`timed_out`]). Many waits
/// end at once (a write, a body that came with its head): the timer is made only for one that does not.
async fn bounded<T>(
    limit: Duration,
    side: Side,
    io: impl std::future::Future<Output = std::io::Result<T>>,
) -> std::io::Result<T> {
    use futures_util::FutureExt;
    let mut io = std::pin::pin!(io);
    if let Some(done) = io.as_mut().now_or_never() {
        return done;
    }
    let stalled = match side {
        Side::Caller => CALLER_STALLED,
        Side::Replica => REPLICA_STALLED,
    };
    tokio::time::timeout(limit, io)
        .await
        .unwrap_or_else(|_| Err(stalled.io()))
}

/// Writes `data` to the caller: false when that failed, or when the caller took none of it for the
/// caller's time (`proxy.caller_timeout_s`).
async fn to_caller(io: &mut TcpStream, timeouts: ClientTimeouts, data: &[u8]) -> bool {
    write_each(io, timeouts.caller, Side::Caller, data)
        .await
        .is_ok()
}

/// Writes all of `data` to `side`, each write bounded by `limit` (a slow reader that keeps taking is not
/// cut off).
async fn write_each(
    io: &mut TcpStream,
    limit: Duration,
    side: Side,
    mut data: &[u8],
) -> std::io::Result<()> {
    while !data.is_empty() {
        match bounded(limit, side, sock::write(io, data)).await? {
            0 => return Err(std::io::ErrorKind::WriteZero.into()),
            n => data = &data[n..],
        }
    }
    Ok(())
}

/// Whether `e` is one of this path's times run out ([`bounded`]), and not a failure of the system's (a
/// connect's own timeout is a 502, as on the general path). A replica's is not sent again.
fn timed_out(e: &std::io::Error) -> bool {
    e.get_ref().is_some_and(|e| e.is::<Stalled>())
}

impl From<std::io::Error> for Unsent {
    fn from(e: std::io::Error) -> Unsent {
        Unsent::Replica(e)
    }
}

/// Sends the head in `conn.out` and the body (`length` bytes: what came with the head, then the rest as it
/// comes) on a connection to `backend`, and waits for the replica's first bytes (into `conn.rbuf`).
///
/// A pooled connection may have been closed by the replica meanwhile. When the write fails, nothing reached
/// it, and the request goes again on a new connection. When the replica closes without a word after the
/// write, it may have been closing as the request came, or have taken it and failed: only a `repeatable`
/// request (an idempotent method) goes again, as with nginx. Either way only a request whose body is all
/// at hand. `limit` is the replica's time; `now`, a time read just before (for the pool's idle ones).
async fn send_request(
    conn: &mut Conn,
    backend: &Backend,
    length: u64,
    repeatable: bool,
    limit: Duration,
    now: Instant,
) -> Result<Sent, Unsent> {
    let body_at = conn.head.len;
    let at_hand = (conn.buf.len() - body_at).min(usize::try_from(length).unwrap_or(usize::MAX));
    conn.out
        .extend_from_slice(&conn.buf[body_at..body_at + at_hand]);
    let whole = at_hand as u64 == length;
    // A caller's end seen while its request waits is its hang-up, unless more of its requests came
    // already (pipelined, then half-closed): those are answered first.
    let watch = conn.buf.len() == body_at + at_hand;
    let mut pooled = backend.pool.take_stream(now);
    loop {
        let (io, reused) = match pooled.take() {
            Some(s) => (s, true),
            None => (
                Box::pin(upstream::connect_stream(backend.addr)).await?,
                false,
            ),
        };
        let mut upstream = Upstream {
            io,
            limit,
            timer: conn.replica_timer.take(),
            used: now,
        };
        conn.rbuf.clear();
        match upstream.write_all(&conn.out).await {
            Ok(()) => {}
            Err(e) if reused && whole && !timed_out(&e) => continue,
            Err(e) => return Err(Unsent::Replica(e)),
        }
        let all = whole || stream_body(conn, &mut upstream, length - at_hand as u64).await?;
        conn.unread = !all;
        // The wait for the answer began at `now`, as far as the replica's time and the pool go, unless a
        // connect or the body's coming took time since.
        let began = (whole && reused).then_some(now);
        match conn.first_bytes(&mut upstream, watch, began).await {
            Ok(()) => {
                conn.buf.advance(body_at + at_hand);
                conn.pending = 0;
                return Ok(Sent { upstream, all });
            }
            Err(Unsent::Replica(e)) if reused && whole && repeatable && !timed_out(&e) => continue,
            Err(e) => return Err(e),
        }
    }
}

impl Conn {
    /// Reads the replica's first bytes into `rbuf` (unless some came already, while the body went): an
    /// error when it closed or failed first, or when the caller hung up first (looked for when `watch`).
    /// `began`: when the wait began, if a time was read just before.
    async fn first_bytes(
        &mut self,
        upstream: &mut Upstream,
        watch: bool,
        began: Option<Instant>,
    ) -> Result<(), Unsent> {
        if !self.rbuf.is_empty() {
            return Ok(());
        }
        self.rbuf.reserve(8192);
        let mut watching = watch;
        loop {
            tokio::select! {
                biased;
                read = upstream.read_since(&mut self.rbuf, began) => {
                    return match read? {
                        0 => Err(Unsent::Replica(std::io::ErrorKind::UnexpectedEof.into())),
                        _ => Ok(()),
                    };
                }
                gone = hung_up(&self.io), if watching => {
                    if gone {
                        return Err(Unsent::CallerGone);
                    }
                    // The caller's next request came early: it waits in the socket.
                    watching = false;
                }
            }
        }
    }
}

/// Waits until `io` has something to read: true when that is its end (or an error).
async fn hung_up(io: &TcpStream) -> bool {
    let mut byte = [MaybeUninit::uninit(); 1];
    let mut byte = tokio::io::ReadBuf::uninit(&mut byte);
    // Through the stream's reader slot (nothing else reads it meanwhile), not a waiter on its list.
    let peeked = std::future::poll_fn(|cx| io.poll_peek(cx, &mut byte)).await;
    matches!(peeked, Ok(0) | Err(_))
}

/// Passes `left` more body bytes from the caller to the replica as they come. Whether all went: not when
/// the replica gave its final answer (or closed) first, whose answer is then passed on as usual. What the
/// replica sends meanwhile is read into `conn.rbuf`; an informational answer (`100 Continue`) there does not
/// stop the upload.
async fn stream_body(
    conn: &mut Conn,
    upstream: &mut Upstream,
    mut left: u64,
) -> Result<bool, Unsent> {
    let mut chunk = vec![0u8; 16 * 1024];
    let limit = upstream.limit;
    let (mut from_replica, mut to_replica) = upstream.io.split();
    while left > 0 {
        let want = chunk.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let Some(wait) = conn.body_wait() else {
            return Err(Unsent::CallerStalled);
        };
        let read = tokio::select! {
            biased;
            answered = replica_spoke(&mut from_replica, &mut conn.rbuf, &mut conn.rhead) => {
                if answered {
                    return Ok(false);
                }
                continue;
            }
            read = bounded(wait, Side::Caller, conn.io.read(&mut chunk[..want])) => read,
        };
        let n = match read {
            Err(e) if timed_out(&e) => return Err(Unsent::CallerStalled),
            Ok(0) | Err(_) => return Err(Unsent::CallerGone),
            Ok(n) => n,
        };
        let write = to_replica.write_all(&chunk[..n]);
        let mut write = std::pin::pin!(bounded(limit, Side::Replica, write));
        loop {
            tokio::select! {
                biased;
                answered = replica_spoke(&mut from_replica, &mut conn.rbuf, &mut conn.rhead) => {
                    if answered {
                        return Ok(false);
                    }
                }
                wrote = &mut write => match wrote {
                    Ok(()) => break,
                    Err(e) if timed_out(&e) => return Err(Unsent::Replica(e)),
                    Err(_) => return Ok(false),
                },
            }
        }
        left -= n as u64;
    }
    Ok(true)
}

/// Reads what the replica sent while the body goes (into `rbuf`): true once that is more than
/// informational answers (which are dropped, as when they come after the body), or the replica's end.
async fn replica_spoke(
    from_replica: &mut tokio::net::tcp::ReadHalf<'_>,
    rbuf: &mut BytesMut,
    rhead: &mut Head,
) -> bool {
    rbuf.reserve(4096);
    match from_replica.read_buf(rbuf).await {
        Ok(0) | Err(_) => return true,
        Ok(_) => {}
    }
    // A head still coming (or nothing after the informational ones): the body goes on.
    !matches!(past_informational(rhead, rbuf), Parsed::Partial if rbuf.len() < RESPONSE_HEAD_MAX)
}

/// Parses the response head at the start of `rbuf`, dropping informational ones (100, 103: the replica's
/// business, never passed on) until one that is not, or until what is left is partial.
fn past_informational(rhead: &mut Head, rbuf: &mut BytesMut) -> Parsed {
    loop {
        match rhead.response(rbuf) {
            Parsed::Complete if (100..200).contains(&rhead.status) && rhead.status != 101 => {
                rbuf.advance(rhead.len);
            }
            parsed => return parsed,
        }
    }
}

/// How a response's body ends.
enum Ends {
    /// After this many bytes.
    Length(u64),
    /// At its last chunk.
    Chunked,
    /// When the replica closes.
    Close,
}

/// A response passed on.
struct Passed {
    /// Whether the caller got all of it.
    complete: bool,
    /// Whether the replica connection may take another request: all of the response was read, and nothing
    /// more.
    reusable: bool,
}

/// Reads the replica's response head (its first bytes are in `conn.rbuf`), writes the caller's, and passes
/// the body on, copied to the cache on its way when it may be cached (`cache_ask`: the key the request was
/// looked up by, and a copy of its head).
async fn pass_response(
    proxy: &Proxy,
    conn: &mut Conn,
    upstream: &mut Upstream,
    taken: &Taken<'_>,
    route: &Route,
    cache_ask: Option<(cache::Key, Vec<u8>)>,
    started: Instant,
) -> Result<Passed, Response> {
    let bad = || super::replica_failed(false);
    read_response_head(conn, upstream)
        .await
        .map_err(|e| super::replica_failed(timed_out(&e)))?;
    let status = StatusCode::from_u16(conn.rhead.status)
        .ok()
        .filter(super::http_status)
        .ok_or_else(bad)?;
    let framing = Framing::of(&conn.rhead, &conn.rbuf);
    let no_body = taken.head_request || matches!(status.as_u16(), 204 | 304);
    let ends = if no_body {
        Ends::Length(0)
    } else if framing.encoded {
        if framing.chunked {
            Ends::Chunked
        } else {
            Ends::Close
        }
    } else if framing.bad_length {
        return Err(bad());
    } else {
        framing.length.map_or(Ends::Close, Ends::Length)
    };
    // Counted once the replica has answered, as on the general path.
    let stats = &taken.route.activity.stats;
    stats.record(status.as_u16(), started.elapsed());
    let mut fill = match cache_ask {
        Some((key, asked)) if status.is_success() && !event_stream(&conn.rhead, &conn.rbuf) => {
            let (head, buf) = (&conn.rhead, &conn.rbuf[..]);
            let fields = head.fields(buf);
            let kept = fields.filter(|(name, _)| !stays(name, head, buf, false, framing.names));
            let known = match ends {
                Ends::Length(n) => Some(n),
                _ => None,
            };
            let asked = RequestFields(&conn.head, &asked);
            Fill::new(&proxy.cache, key, &asked, status, kept, known)
        }
        _ => None,
    };
    // The length the caller is told: the body's, or for a body not sent (HEAD, 304) the replica's.
    let length = match ends {
        Ends::Length(n) if !no_body => Some(n),
        _ if no_body && status != StatusCode::NO_CONTENT && !framing.bad_length => framing.length,
        _ => None,
    };
    // The connection ends after the answer when the caller asked, or when its body was not all read.
    let close = taken.framing.close || conn.unread;
    response_head(conn, route, status, &ends, length, close, framing.names);
    conn.rbuf.advance(conn.rhead.len);
    let complete = match ends {
        Ends::Length(n) => pass_length(conn, upstream, n, &mut fill).await,
        Ends::Chunked => pass_chunked(conn, upstream, &mut fill).await,
        Ends::Close => pass_until_close(conn, upstream, &mut fill).await,
    };
    if let (Some(f), true) = (fill, complete) {
        f.store(&proxy.cache, proxy.clock.now());
    }
    let keeps = conn.rhead.minor == 1 && !framing.close && !matches!(ends, Ends::Close);
    Ok(Passed {
        complete,
        reusable: complete && keeps && conn.rbuf.is_empty(),
    })
}

/// Reads until the replica's final response head has come whole (see [`past_informational`]). An error for
/// anything else: the replica's end or failure, its time run out, or a head that is not a final response.
async fn read_response_head(conn: &mut Conn, upstream: &mut Upstream) -> std::io::Result<()> {
    use std::io::ErrorKind::{InvalidData, UnexpectedEof};
    loop {
        match past_informational(&mut conn.rhead, &mut conn.rbuf) {
            // Nothing below 100, and no upgrade was asked for.
            Parsed::Complete if conn.rhead.status < 100 || conn.rhead.status == 101 => {
                return Err(InvalidData.into())
            }
            Parsed::Complete => return Ok(()),
            Parsed::Partial if conn.rbuf.len() < RESPONSE_HEAD_MAX => {}
            _ => return Err(InvalidData.into()),
        }
        conn.rbuf.reserve(8192);
        if upstream.read_buf(&mut conn.rbuf).await? == 0 {
            return Err(UnexpectedEof.into());
        }
    }
}

fn event_stream(head: &Head, buf: &[u8]) -> bool {
    head.get(buf, "content-type")
        .is_some_and(|v| v.starts_with(b"text/event-stream"))
}

/// Writes the caller's response head into `conn.out`: the status, the replica's fields less those that
/// stay (its framing fields too: the framing is this path's, `length` or chunks), `Date` when the replica
/// gave none, `X-Cache` on an endpoint with the cache (in place of any the replica gave), and
/// `Connection: close` when the caller asked for it.
fn response_head(
    conn: &mut Conn,
    route: &Route,
    status: StatusCode,
    ends: &Ends,
    length: Option<u64>,
    close: bool,
    named: bool,
) {
    let (head, buf, out) = (&conn.rhead, &conn.rbuf[..], &mut conn.out);
    out.clear();
    status_line(out, status);
    let mut dated = false;
    for (name, value) in head.fields(buf) {
        let ours = name.eq_ignore_ascii_case(b"content-length")
            || route.cache && name.eq_ignore_ascii_case(b"x-cache");
        if !(ours || stays(name, head, buf, false, named)) {
            dated |= name.eq_ignore_ascii_case(b"date");
            field(out, name, value);
        }
    }
    if !dated {
        date(out);
    }
    match (ends, length) {
        (_, Some(n)) => length_field(out, n),
        (Ends::Length(_), None) => {}
        _ => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
    }
    if route.cache {
        out.extend_from_slice(b"x-cache: MISS\r\n");
    }
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// Writes the head in `conn.out` with the first `first` bytes of `conn.rbuf` (taken from it) in one write.
async fn write_head_with(conn: &mut Conn, first: usize) -> bool {
    conn.out.extend_from_slice(&conn.rbuf[..first]);
    conn.rbuf.advance(first);
    to_caller(&mut conn.io, conn.timeouts, &conn.out).await
}

/// Passes a body of `n` bytes. Whether all of it went.
async fn pass_length(
    conn: &mut Conn,
    upstream: &mut Upstream,
    n: u64,
    fill: &mut Option<Fill>,
) -> bool {
    let first = conn
        .rbuf
        .len()
        .min(usize::try_from(n).unwrap_or(usize::MAX));
    keep(fill, &conn.rbuf[..first]);
    if !write_head_with(conn, first).await {
        return false;
    }
    let mut left = n - first as u64;
    while left > 0 {
        conn.rbuf.clear();
        conn.rbuf.reserve(16 * 1024);
        match upstream.read_buf(&mut conn.rbuf).await {
            Ok(0) | Err(_) => return false,
            Ok(_) => {}
        }
        let take = conn
            .rbuf
            .len()
            .min(usize::try_from(left).unwrap_or(usize::MAX));
        keep(fill, &conn.rbuf[..take]);
        if !to_caller(&mut conn.io, conn.timeouts, &conn.rbuf[..take]).await {
            return false;
        }
        conn.rbuf.advance(take);
        left -= take as u64;
    }
    true
}

/// Appends `data` as one chunk.
fn chunk(out: &mut Vec<u8>, data: &[u8]) {
    if !data.is_empty() {
        let _ = write!(out, "{:x}\r\n", data.len());
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    }
}

/// Passes a chunked body on in chunks of this path's own making (the replica's extensions and trailers
/// stay behind, as on the general path), until its last chunk. Whether all of it went.
async fn pass_chunked(conn: &mut Conn, upstream: &mut Upstream, fill: &mut Option<Fill>) -> bool {
    let mut scan = Chunks::Size;
    let mut data = Vec::new();
    loop {
        data.clear();
        let Ok(used) = scan.advance(&conn.rbuf, &mut data) else {
            return false;
        };
        // `conn.out` holds the head before the first write, and is this round's chunks after it.
        for &(at, len) in &data {
            keep(fill, &conn.rbuf[at..at + len]);
            chunk(&mut conn.out, &conn.rbuf[at..at + len]);
        }
        conn.rbuf.advance(used);
        let done = matches!(scan, Chunks::Done);
        if done {
            conn.out.extend_from_slice(b"0\r\n\r\n");
        }
        if !conn.out.is_empty() && !to_caller(&mut conn.io, conn.timeouts, &conn.out).await {
            return false;
        }
        conn.out.clear();
        if done {
            return true;
        }
        if conn.rbuf.len() > LINE_MAX {
            return false;
        }
        conn.rbuf.reserve(16 * 1024);
        match upstream.read_buf(&mut conn.rbuf).await {
            Ok(0) | Err(_) => return false,
            Ok(_) => {}
        }
    }
}

/// Passes a body that ends when the replica closes, in chunks. Whether all of it went.
async fn pass_until_close(
    conn: &mut Conn,
    upstream: &mut Upstream,
    fill: &mut Option<Fill>,
) -> bool {
    loop {
        keep(fill, &conn.rbuf);
        chunk(&mut conn.out, &conn.rbuf);
        conn.rbuf.clear();
        if !to_caller(&mut conn.io, conn.timeouts, &conn.out).await {
            return false;
        }
        conn.out.clear();
        conn.rbuf.reserve(16 * 1024);
        match upstream.read_buf(&mut conn.rbuf).await {
            Ok(0) => return to_caller(&mut conn.io, conn.timeouts, b"0\r\n\r\n").await,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
}

/// Writes an answer of the server's own. Whether it went.
async fn write_answer(conn: &mut Conn, answer: Response, close: bool, head_request: bool) -> bool {
    let (parts, body) = answer.into_parts();
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    };
    conn.out.clear();
    http1::answer(&mut conn.out, &parts, &body, close, head_request);
    to_caller(&mut conn.io, conn.timeouts, &conn.out).await
}

#[cfg(test)]
mod tests {
    use super::super::http1::tests::request;
    use super::*;

    #[test]
    fn values_are_text_as_on_the_general_path() {
        for v in [&b"text/html, */*;q=0.8"[..], b"a\tb", b""] {
            let general = axum::http::HeaderValue::from_bytes(v).ok();
            assert_eq!(visible(v), general.as_ref().and_then(|h| h.to_str().ok()));
        }
        assert_eq!(visible("caf\u{e9}".as_bytes()), None);
        assert_eq!(visible(b"a\x7fb"), None);
    }

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

    #[test]
    fn fields_for_this_hop_stay_behind() {
        let (head, buf) = request(
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, X-Trace\r\nX-Trace: 1\r\nTE: trailers\r\n\
             Authorization: Bearer t\r\nX-Forwarded-For: 1.2.3.4\r\nX-Private-Link-Account: 9\r\n\
             Proxy-Connection: close\r\nAccept: */*\r\n\r\n",
        );
        let passed = |request| -> Vec<String> {
            let names = head.fields(&buf).map(|(n, _)| n);
            let named = Framing::of(&head, &buf).names;
            let passed = names.filter(|n| !stays(n, &head, &buf, request, named));
            passed
                .map(|n| String::from_utf8_lossy(n).into_owned())
                .collect()
        };
        assert_eq!(passed(true), ["Accept"]);
        // A response keeps what is only a request's to lose.
        assert_eq!(
            passed(false),
            [
                "Authorization",
                "X-Forwarded-For",
                "X-Private-Link-Account",
                "Accept"
            ]
        );
    }

    #[test]
    fn a_worker_keeps_its_table_until_a_newer_one_comes_or_it_sleeps() {
        std::thread::spawn(|| {
            upstream::enter_worker(0);
            let (tx, rx) = watch::channel(Arc::new(RouteTable::default()));
            let first = latest_table(&rx);
            let again = latest_table(&rx);
            assert!(
                Arc::ptr_eq(&first, &again),
                "the same holder while nothing was published"
            );
            assert!(Arc::ptr_eq(&first.0, &rx.borrow()));
            tx.send_replace(Arc::new(RouteTable::default()));
            let newer = latest_table(&rx);
            assert!(
                !Arc::ptr_eq(&first.0, &newer.0),
                "the table published since"
            );
            assert!(Arc::ptr_eq(&newer.0, &rx.borrow()));
            forget_table();
            assert_eq!(
                Arc::strong_count(&newer),
                1,
                "let go of as the worker sleeps"
            );
            let (_other_tx, other_rx) = watch::channel(Arc::new(RouteTable::default()));
            let other = latest_table(&other_rx);
            assert!(
                Arc::ptr_eq(&other.0, &other_rx.borrow()),
                "another server's channel"
            );
        })
        .join()
        .expect("worker thread");
    }

    #[test]
    fn hop_by_hop_names_are_the_general_paths() {
        let general: Vec<&[u8]> = super::super::HOP_BY_HOP
            .iter()
            .map(|h| h.as_str().as_bytes())
            .collect();
        assert_eq!(general, HOP_BY_HOP);
    }
}
