//! The data plane's shape: one event loop per core, each owning the connections it accepts.
//!
//! The public listener is a set of `SO_REUSEPORT` sockets on one address, one per worker; each worker is a
//! thread with a current-thread runtime that accepts on its own socket and serves those connections to the
//! end, with its own connections to replicas (a slot of each replica's pool, see
//! [`crate::routing::upstream`]). A request is read, forwarded, answered and passed back on one thread: no
//! wake-up crosses to another, and no idle thread is woken to help (nginx's shape). A worker with few
//! requests in flight polls for a moment after each before it sleeps ([`super::poll`]), so that the answer
//! it waits for needs no wake-up either.
//!
//! Each connection is served by the proxy's own HTTP/1.1 path ([`fast`]) for as long as its requests are
//! the usual ones, then by hyper's HTTP/1 server directly ([`general`]), its requests handed to
//! [`Front::answer`] with the peer's address: no per-request service clone and no extension map to carry
//! the address, which `axum::serve` would add to every request.
//!
//! The control plane keeps the runtime the server was started on: requests that are not for an endpoint
//! (the API, `/metrics`) are handed to it by [`OnRuntime`], and so is the proxy's own use of the store (see
//! `Proxy::on_control`), whose connections belong to that runtime.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::task::Poll;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use axum::serve::ListenerExt;
use tokio::net::{TcpListener, TcpSocket};
use tokio::runtime::Handle;
use tokio::sync::watch;

use hyper_util::rt::{TokioIo, TokioTimer};

use super::deadline::Deadline;
use super::fast::{self, Hand};
use super::guard::{Guard, LastRead};
use super::limit;
use super::poll;
use super::{Front, Inner};
use crate::config::ClientTimeouts;
use crate::error::ApiError;
use crate::routing::pace::{Paced, PacedWrites, Side, Stalled};
use crate::routing::upstream::{self, ToReplica};

/// Whether this thread is a data-plane worker's.
pub fn on_data_plane() -> bool {
    upstream::on_worker()
}

/// How many data-plane workers serve the public listener: one per core.
pub fn count() -> usize {
    upstream::worker_slots()
}

/// A listening socket on `addr` that other sockets may share (`SO_REUSEPORT`), each taking its share of the
/// connections.
pub fn bind_shared(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.set_reuseport(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// The first socket of a shared listener on `addr` (see [`bind_shared`]). A port that anything else holds,
/// a server sharing it too included, is refused: the address is first bound alone, then at once again to
/// be shared (its port found, when `addr` asks for any).
pub fn bind_first(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let alone = std::net::TcpListener::bind(addr)?;
    let addr = alone.local_addr()?;
    drop(alone);
    bind_shared(addr)
}

/// A service run on another runtime: each call is spawned there and its response awaited here.
#[derive(Clone)]
pub struct OnRuntime<S> {
    handle: Handle,
    inner: S,
}

impl<S> OnRuntime<S> {
    pub fn new(handle: Handle, inner: S) -> OnRuntime<S> {
        OnRuntime { handle, inner }
    }
}

impl<S: Inner> tower::Service<Request> for OnRuntime<S> {
    type Response = Response;
    type Error = Infallible;
    type Future = futures_util::future::BoxFuture<'static, Result<Response, Infallible>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let call = tower::ServiceExt::oneshot(self.inner.clone(), req);
        let task = self.handle.spawn(call);
        Box::pin(async move {
            Ok(match task.await {
                Ok(Ok(resp)) => resp,
                Ok(Err(never)) => match never {},
                Err(_) => ApiError::Internal("the request's handler failed".into()).into_response(),
            })
        })
    }
}

/// Serves `app` on `first` and on `count() - 1` more sockets bound beside it (see [`bind_shared`]), a
/// worker thread each, until `stop` turns true and their connections have closed, or `abort` turns true.
/// Resolves when every worker has stopped, with the first error. A socket that cannot be added leaves fewer
/// workers, said in the log.
pub fn serve<S>(
    first: TcpListener,
    app: Front<S>,
    stop: watch::Receiver<bool>,
    abort: watch::Receiver<bool>,
) -> impl Future<Output = std::io::Result<()>>
where
    S: Inner,
{
    let addr = first.local_addr();
    let mut listeners = vec![first.into_std()];
    if let Ok(addr) = addr {
        for _ in 1..count() {
            match bind_shared(addr).and_then(TcpListener::into_std) {
                Ok(l) => listeners.push(Ok(l)),
                Err(e) => {
                    tracing::warn!(error = %e, %addr, "no more data-plane workers: the listener's address is not shared");
                    break;
                }
            }
        }
    }
    let done: Vec<_> = listeners
        .into_iter()
        .enumerate()
        .map(|(i, listener)| {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let (app, stop, abort) = (app.clone(), stop.clone(), abort.clone());
            let work = move || {
                let served = listener.and_then(|l| worker(i, l, app, stop, abort));
                let _ = tx.send(served);
            };
            let spawned = std::thread::Builder::new()
                .name(format!("proxy-{i}"))
                .spawn(work);
            (spawned, rx)
        })
        .collect();
    async move {
        let mut result = Ok(());
        for (spawned, rx) in done {
            let served = match spawned {
                Ok(_) => rx
                    .await
                    .unwrap_or_else(|_| Err(std::io::Error::other("worker panicked"))),
                Err(e) => Err(e),
            };
            if let (Ok(()), Err(e)) = (&result, served) {
                result = Err(e);
            }
        }
        result
    }
}

/// Responses go out as soon as they are written: with Nagle's algorithm a response whose head and body
/// are written apart waits for the client's delayed ACK (about 40 ms).
fn no_delay(tcp: &mut tokio::net::TcpStream) {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(error = %e, "TCP_NODELAY not set");
    }
}

/// Resolves once `rx` has turned true (or its sender is gone).
///
/// Its first poll puts the task's waker on the channel's list, where it stays good for the task's life;
/// after that it looks again only once the channel has had a new value. A connection polls it while it
/// waits for each request, and the waiting future itself would take the list's lock on every poll to
/// renew the waker.
fn until(rx: watch::Receiver<bool>) -> impl Future<Output = ()> {
    let probe = rx.clone();
    let mut wait = Box::pin(async move {
        let mut rx = rx;
        let _ = rx.wait_for(|s| *s).await;
    });
    let mut polled = false;
    std::future::poll_fn(move |cx| {
        if polled && matches!(probe.has_changed(), Ok(false)) {
            return Poll::Pending;
        }
        polled = true;
        wait.as_mut().poll(cx)
    })
}

/// One worker: a current-thread runtime serving `listener` until `stop` (gracefully) or `abort`.
fn worker<S>(
    i: usize,
    listener: std::net::TcpListener,
    app: Front<S>,
    stop: watch::Receiver<bool>,
    mut abort: watch::Receiver<bool>,
) -> std::io::Result<()>
where
    S: Inner,
{
    upstream::enter_worker(i);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_park(fast::forget_table)
        .build()?;
    runtime.block_on(async move {
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        tokio::spawn(poll::run(app.proxy.config.busy_poll()));
        tokio::select! {
            () = accept_until(listener, app, stop) => Ok(()),
            _ = abort.wait_for(|s| *s) => Ok(()),
        }
    })
}

/// Accepts connections and serves each on a task of its own until `stop`; then lets those connections
/// finish what they are answering and close (see [`connection`]), and resolves once they have.
pub async fn accept_until<S>(listener: TcpListener, app: Front<S>, stop: watch::Receiver<bool>)
where
    S: Inner,
{
    let mut listener = listener.tap_io(no_delay);
    // Each connection's task holds a receiver: the sender sees them all gone once every one has ended.
    let (open_tx, open_rx) = watch::channel(());
    let stopping = until(stop.clone());
    tokio::pin!(stopping);
    let connections = app.proxy.connections.clone();
    loop {
        let (io, peer) = tokio::select! {
            accepted = axum::serve::Listener::accept(&mut listener) => accepted,
            () = &mut stopping => break,
        };
        // Its place (see `limit`): at the bound, idle connections make room while this one waits, and
        // nothing more is accepted here meanwhile (the rest wait in the kernel's backlog). The place is taken
        // only once a connection is at hand: the listener's sockets are one per worker, and a place held
        // while waiting on one socket could be the one a connection queued at another needs.
        let room = loop {
            if let Some(room) = connections.reserve() {
                break Some(room);
            }
            tokio::select! {
                () = connections.make_room() => {}
                () = &mut stopping => break None,
            }
        };
        let Some(room) = room else { break };
        tokio::spawn(connection(
            io,
            peer,
            app.clone(),
            stop.clone(),
            open_rx.clone(),
            room,
        ));
    }
    drop((listener, open_rx));
    open_tx.closed().await;
}

/// One client connection: its requests served by the data plane's own HTTP/1.1 path (see [`fast`]) while
/// it takes them; from the first one it does not take on, by hyper's server ([`general`]), which is handed
/// the connection with what was read of it. On `stop` the connection finishes the request it is answering
/// and closes. `room` is its place among the listener's connections, held as long as its socket is.
async fn connection<S>(
    io: tokio::net::TcpStream,
    peer: SocketAddr,
    app: Front<S>,
    stop: watch::Receiver<bool>,
    open: watch::Receiver<()>,
    room: limit::Open,
) where
    S: Inner,
{
    // The private entry point's requests are all the general path's (the own path serves the public
    // endpoints only).
    let timeouts = app.proxy.config.client_timeouts();
    let (read, io) = match app.proxy.private {
        true => (bytes::BytesMut::new(), io),
        false => {
            let mut conn = fast::Conn::new(io, timeouts);
            if !own_path(&mut conn, &app.proxy, peer, &stop).await {
                return;
            }
            (conn.buf, conn.io)
        }
    };
    // A write that waits on the caller for longer than its time fails, which ends the connection.
    let last_read = LastRead::default();
    // The place goes with the socket: an upgraded connection outlives hyper's serving of it.
    let guard = Guard::new(io, read, last_read.clone()).holding(room);
    let io = PacedWrites::new(guard, timeouts.caller, ANSWER_NOT_TAKEN);
    general(io, peer, app, timeouts, stop, open, last_read).await;
}

/// Serves the connection's requests on the proxy's own path while it takes them. True when the general path
/// is to take the connection on from its first request that this path did not take; false when the
/// connection has ended (or is to).
async fn own_path(
    conn: &mut fast::Conn,
    proxy: &super::Proxy,
    peer: SocketAddr,
    stop: &watch::Receiver<bool>,
) -> bool {
    let stopping = until(stop.clone());
    tokio::pin!(stopping);
    // One timer for the connection's life on this path, set again for each head (see `Conn::read_head`).
    let idle = proxy.config.client_timeouts().idle;
    let mut timer = Deadline::at(tokio::time::Instant::now() + idle);
    let mut squeezes = proxy.connections.squeezes();
    let mut waiting = std::time::Instant::now();
    loop {
        let read = tokio::select! {
            // The head first: no random draw for the order, and a stop is only looked at while waiting.
            biased;
            read = conn.read_head(&mut timer) => read,
            () = &mut stopping => return false,
            // At the listener's bound: a connection that has waited long for its next request makes room.
            () = squeezes.asked(), if conn.buf.is_empty() => {
                if conn.buf.is_empty() && waiting.elapsed() >= limit::SHED_AFTER {
                    proxy.connections.shed();
                    return false;
                }
                continue;
            }
        };
        let hand = match read {
            Ok(()) => {
                let _flight = poll::in_flight();
                let table = fast::table(proxy);
                fast::serve(proxy, conn, &table, peer).await
            }
            Err(hand) => hand,
        };
        waiting = std::time::Instant::now();
        match hand {
            Hand::KeepAlive if !*stop.borrow() => {}
            Hand::KeepAlive | Hand::Close => return false,
            Hand::Over => return true,
        }
    }
}

/// A caller's request body that stopped coming (`proxy.caller_timeout_s`), or did not come whole in time
/// (`proxy.body_timeout_s`).
const BODY_STALLED: Stalled = Stalled {
    side: Side::Caller,
    what: "the caller paused its request body for too long",
};
/// A caller that took nothing of its answer (`proxy.caller_timeout_s`).
const ANSWER_NOT_TAKEN: Stalled = Stalled {
    side: Side::Caller,
    what: "the caller took nothing of its answer in time",
};

/// A client connection served by hyper's HTTP/1 server, each request answered by [`Front::answer`] with
/// the peer's address at hand (no per-request extension to carry it). On `stop`, or when the listener is at
/// its bound and the caller has sent nothing for a while (`last_read`), the connection finishes the request
/// it is answering and closes.
async fn general<S>(
    io: PacedWrites<Guard<tokio::net::TcpStream>>,
    peer: SocketAddr,
    app: Front<S>,
    timeouts: ClientTimeouts,
    stop: watch::Receiver<bool>,
    _open: watch::Receiver<()>,
    last_read: LastRead,
) where
    S: Inner,
{
    let proxy = app.proxy.clone();
    let mut squeezes = proxy.connections.squeezes();
    // hyper's one timeout runs from when it waits for a head, the next request's on a kept connection too:
    // an idle connection here closes after `proxy.header_timeout_s`.
    let ClientTimeouts {
        header,
        caller,
        body: whole,
        ..
    } = timeouts;
    // A request body waited for longer than the caller's time ends in an error: the proxy answers 408.
    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        poll::busy();
        app.answer(
            req.map(|body| ToReplica::Left(Paced::new(body, caller, BODY_STALLED).within(whole))),
            peer,
        )
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header)
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    tokio::pin!(conn);
    let stopping = until(stop);
    tokio::pin!(stopping);
    let mut stopped = false;
    loop {
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(e) = served {
                    tracing::trace!(error = %e, "connection ended");
                }
                return;
            }
            () = &mut stopping, if !stopped => {
                stopped = true;
                conn.as_mut().graceful_shutdown();
            }
            // At the listener's bound, a connection the caller has sent nothing on for a while closes: at
            // once when no request is going, else once its requests are answered.
            () = squeezes.asked(), if !stopped => {
                if last_read.since() >= limit::SHED_AFTER {
                    stopped = true;
                    proxy.connections.shed();
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}
