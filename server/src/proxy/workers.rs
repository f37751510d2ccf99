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
//! Each connection is served by the proxy's own HTTP/1.1 path ([`own`]) for as long as its requests are
//! the usual ones (unless `proxy.own_path = false`), then by hyper's HTTP/1 server directly ([`general`]),
//! its requests handed to
//! [`Front::answer`] with the peer's address: no per-request service clone and no extension map to carry
//! the address, which `axum::serve` would add to every request.
//!
//! The control plane keeps the runtime the server was started on: requests that are not for an endpoint
//! (the API, `/metrics`) are handed to it by [`OnRuntime`], and so is the proxy's own use of the store (see
//! `Proxy::on_control`), whose connections belong to that runtime.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use axum::serve::ListenerExt;
use tokio::net::{TcpListener, TcpSocket};
use tokio::runtime::Handle;
use tokio::sync::watch;

use super::general::{self, Front, Inner};
use super::stop::until;
use super::{limit, own, poll};
use crate::error::ApiError;
use crate::routing::worker;

/// How many data-plane workers serve the public listener: one per core.
pub fn count() -> usize {
    worker::worker_slots()
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
    worker::enter_worker(i);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_park(own::forget_table)
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

/// One client connection: its requests served by the own HTTP/1.1 path (see [`own`]) while it takes them;
/// from the first one it does not take on, by the general path ([`general`]), which is handed the
/// connection with what was read of it. The private entry point's connections, and every connection when
/// `proxy.own_path = false`, are the general path's from the start. On `stop` the connection finishes the
/// request it is answering and closes. `room` is its place among the listener's connections, held as long
/// as its socket is; `_open` counts it among the listener's open ones.
async fn connection<S>(
    io: tokio::net::TcpStream,
    peer: SocketAddr,
    app: Front<S>,
    stop: watch::Receiver<bool>,
    _open: watch::Receiver<()>,
    room: limit::Open,
) where
    S: Inner,
{
    let own_path = !app.proxy.private && app.proxy.config.own_path;
    let (read, io) = match own_path {
        false => (bytes::BytesMut::new(), io),
        true => match own::serve_connection(io, &app.proxy, peer, &stop).await {
            Some(handed_over) => handed_over,
            None => return,
        },
    };
    general::conn::serve_connection(io, read, peer, app, stop, room).await;
}
