//! Connections to replicas, for traffic and the server's own calls: HTTP/1.1 on loopback, kept and reused.
//!
//! Leaner than a general-purpose client on the hot path: a replica's idle connections sit in its own
//! [`Pool`] (no lookup by host), a request takes one that is ready (never one still busy with an earlier
//! exchange, e.g. an upload the replica answered early), and the connection goes back when the response has
//! been passed on in full. Connections idle for [`IDLE_TIMEOUT`] are closed, before a replica's own keep-alive
//! timeout would close them under a request; a pooled connection the replica closed all the same is noticed
//! before anything was sent, and the request goes out on a new one.
//!
//! Each data-plane worker (one event loop per core, see `proxy::workers`) keeps its own idle connections in a
//! slot of the pool: a connection is driven by the event loop that made it, so a request never wakes another
//! thread through its replica connection. Other threads (the control plane's health checks and scrapes) share
//! slot 0.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::pace::{Paced, PacedWrites, Side, Stalled};
use super::per_worker::PerWorker;

/// A replica that took nothing of what was written to it in time.
const NOT_READING: Stalled = Stalled {
    side: Side::Replica,
    what: "the endpoint's replica took nothing of the request in time",
};

/// Idle connections kept per replica; more are closed when they come back.
const IDLE_PER_REPLICA: usize = 256;
/// Below the common keep-alive timeouts of model servers (uvicorn's is 5 s).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(4);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

type Idle = Mutex<Vec<(Instant, SendRequest<ToReplica>)>>;

/// A request body on its way to a replica: a caller's, passed on as it comes (the proxy's usual case, with
/// nothing boxed; its pauses bounded), or one the server made.
pub type ToReplica = http_body_util::Either<Paced<Incoming>, Body>;

/// A body that is either passed on unboxed or one of the server's own, as the one body type the server's
/// handlers use (boxed only when it is not one already).
pub fn into_body<L>(body: http_body_util::Either<L, Body>) -> Body
where
    L: http_body::Body<Data = axum::body::Bytes> + Send + 'static,
    L::Error: Into<axum::BoxError>,
{
    match body {
        http_body_util::Either::Left(passed) => Body::new(passed),
        http_body_util::Either::Right(own) => own,
    }
}

/// Idle connections the data plane's own HTTP/1.1 path drives itself (see `proxy::fast`).
type IdleStreams = Mutex<Vec<(Instant, TcpStream)>>;

/// A replica's idle connections, each with the time it came back, in a slot per data-plane worker (and
/// slot 0 for every other thread): hyper's, and those of the data plane's own path.
pub struct Pool {
    slots: PerWorker<Idle>,
    streams: PerWorker<IdleStreams>,
    /// How long a write on one of hyper's connections may wait on the replica (see [`Pool::new`]).
    write_limit: Duration,
}

/// The default of [`Pool::new`]'s `write_limit`: `proxy.replica_timeout_s`'s.
pub fn default_write_limit() -> Duration {
    crate::config::ProxyConfig::default().replica_timeout()
}

impl Default for Pool {
    fn default() -> Pool {
        Pool::new(default_write_limit())
    }
}

impl Pool {
    /// An empty pool, whose connections made for hyper fail a write that waits on the replica (one that
    /// stopped reading, say, after it answered before the upload ended) for longer than `write_limit`.
    pub fn new(write_limit: Duration) -> Pool {
        Pool {
            slots: PerWorker::default(),
            streams: PerWorker::default(),
            write_limit,
        }
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let idle: usize = self
            .slots
            .all()
            .map(|s| s.lock().map(|i| i.len()).unwrap_or(0))
            .sum();
        f.debug_struct("Pool").field("idle", &idle).finish()
    }
}

impl Pool {
    fn slot(&self) -> &Idle {
        self.slots.mine()
    }

    /// This thread's slot of raw replica streams (see [`Self::slot`]).
    fn stream_slot(&self) -> &IdleStreams {
        self.streams.mine()
    }

    /// The most recently used idle connection of this thread's slot that the replica has not closed
    /// (as far as the event loop has seen); those long idle at `now` (a time the caller read just before)
    /// are dropped on the way.
    pub fn take_stream(&self, now: Instant) -> Option<TcpStream> {
        let mut idle = self.stream_slot().lock().ok()?;
        drop_expired(&mut idle, now);
        while let Some((_, stream)) = idle.pop() {
            if !closed(&stream) {
                return Some(stream);
            }
        }
        None
    }

    /// A connection whose exchange ended cleanly, for the next request of this thread's slot; `used` is a
    /// time read no later than its last use (its idle age is then never judged younger than it is). Long-idle
    /// ones go here too, so that a replica this worker no longer sends to holds no sockets for long.
    pub fn give_back_stream(&self, stream: TcpStream, used: Instant) {
        if let Ok(mut idle) = self.stream_slot().lock() {
            drop_expired(&mut idle, used);
            // In the order they came back, as `drop_expired` reads them: one used after the last is not
            // stamped before it.
            let used = idle.last().map_or(used, |(last, _)| used.max(*last));
            if idle.len() < IDLE_PER_REPLICA {
                idle.push((used, stream));
            }
        }
    }

    /// The most recently used connection of this thread's slot that is ready for a request. Long-idle ones
    /// (at the front: they came back first) and closed ones met on the way are dropped; busy ones stay for
    /// later. The usual case looks at one connection, however many are idle.
    fn take(&self) -> Option<SendRequest<ToReplica>> {
        let mut idle = self.slot().lock().ok()?;
        drop_expired(&mut idle, Instant::now());
        let mut busy = Vec::new();
        let mut found = None;
        while let Some((at, sender)) = idle.pop() {
            if sender.is_closed() {
                continue;
            }
            if sender.is_ready() {
                found = Some(sender);
                break;
            }
            busy.push((at, sender));
        }
        idle.extend(busy.into_iter().rev());
        found
    }

    /// A connection whose response was passed on (it may still be finishing its request's upload).
    pub fn give_back(&self, sender: SendRequest<ToReplica>) {
        if sender.is_closed() {
            return;
        }
        if let Ok(mut idle) = self.slot().lock() {
            if idle.len() < IDLE_PER_REPLICA {
                idle.push((Instant::now(), sender));
            }
        }
    }
}

#[derive(Debug)]
pub enum Error {
    Connect(std::io::Error),
    Http(hyper::Error),
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Connect(e) => Some(e),
            Error::Http(e) => Some(e),
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Connect(e) => write!(f, "connecting: {e}"),
            Error::Http(e) => write!(f, "{e}"),
        }
    }
}

/// Drops the connections idle for [`IDLE_TIMEOUT`] or more: those at the front, which came back first.
fn drop_expired<T>(idle: &mut Vec<(Instant, T)>, now: Instant) {
    let expired = idle
        .iter()
        .take_while(|(at, _)| now.duration_since(*at) >= IDLE_TIMEOUT)
        .count();
    idle.drain(..expired);
}

/// Whether the replica closed an idle connection (or wrote on it out of turn), by what the event loop has
/// seen of it: nothing to read is an idle connection's state, found without a system call unless the event
/// loop says there is something; then a read tells.
fn closed(stream: &TcpStream) -> bool {
    // Asked through the stream's own reader slot, which its next read takes over, rather than a waiter put
    // on its list and taken off again.
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match stream.poll_read_ready(&mut cx) {
        std::task::Poll::Pending => false,
        std::task::Poll::Ready(Ok(())) => {
            let mut byte = [0u8; 1];
            !matches!(stream.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
        }
        std::task::Poll::Ready(Err(_)) => true,
    }
}

/// A new connection to the replica at `addr`, without delay on small writes.
pub async fn connect_stream(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
    stream.set_nodelay(true)?;
    Ok(stream)
}

async fn connect(addr: SocketAddr, write_limit: Duration) -> Result<SendRequest<ToReplica>, Error> {
    let stream = connect_stream(addr).await.map_err(Error::Connect)?;
    let stream = PacedWrites::new(stream, write_limit, NOT_READING);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(Error::Http)?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "replica connection ended");
        }
    });
    Ok(sender)
}

/// Sends a request to upgrade the connection (see `proxy::tunnel`) to the replica at `addr`, on a
/// connection of its own, which becomes the tunnel if the replica agrees (`hyper::upgrade::on` its answer).
pub async fn send_upgrade(
    addr: SocketAddr,
    req: Request<ToReplica>,
) -> Result<Response<Incoming>, Error> {
    let stream = connect_stream(addr).await.map_err(Error::Connect)?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(Error::Http)?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "replica connection ended");
        }
    });
    sender.send_request(req).await.map_err(Error::Http)
}

/// A replica's response, and the connection it came on: given back to the pool once the response has been
/// read in full.
pub type Exchange = (Response<Incoming>, SendRequest<ToReplica>);

/// Sends `req` (origin-form URI) to the replica at `addr`, on an idle connection of `pool` or a new one.
/// Returns the response and the connection, to be given back once the response has been read in full.
pub async fn send(
    pool: &Pool,
    addr: SocketAddr,
    req: Request<ToReplica>,
) -> Result<Exchange, Error> {
    let mut req = req;
    // A pooled connection may have been closed by the replica since: when nothing was sent, the request
    // comes back and goes out on a new connection.
    if let Some(mut sender) = pool.take() {
        match sender.try_send_request(req).await {
            Ok(resp) => return Ok((resp, sender)),
            Err(mut e) => match e.take_message() {
                Some(back) => req = back,
                None => return Err(Error::Http(e.into_error())),
            },
        }
    }
    // Boxed: a new connection is the rare case, and its handshake would otherwise swell every request's
    // future.
    let mut sender = Box::pin(connect(addr, pool.write_limit)).await?;
    sender.ready().await.map_err(Error::Http)?;
    let resp = sender.send_request(req).await.map_err(Error::Http)?;
    Ok((resp, sender))
}

/// A replica stub for tests: HTTP/1.1 on loopback, counting the connections it accepted.
#[cfg(test)]
pub(crate) mod stub {
    use std::net::SocketAddr;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[derive(Clone, Copy, PartialEq)]
    pub enum Close {
        Never,
        /// After one answer, saying so (`connection: close`).
        Said,
        /// After one answer, without a word (like an idle timeout on the replica's side).
        Silently,
    }

    /// Answers `ok` to every request (which must have no body), but `/big` with 2 KiB and `/silent` never;
    /// closes its connections as `close` says.
    pub async fn replica(close: Close) -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 1024];
                    loop {
                        // Requests here have no body: the head's end is the request's end.
                        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                            match conn.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        let path = String::from_utf8_lossy(&buf)
                            .split(' ')
                            .nth(1)
                            .unwrap_or("")
                            .to_string();
                        buf.clear();
                        let body = match path.as_str() {
                            "/silent" => {
                                tokio::time::sleep(Duration::from_secs(60)).await;
                                return;
                            }
                            "/big" => "x".repeat(2048),
                            _ => "ok".to_string(),
                        };
                        let head = if close == Close::Said {
                            "connection: close\r\n"
                        } else {
                            ""
                        };
                        let len = body.len();
                        let answer =
                            format!("HTTP/1.1 200 OK\r\n{head}content-length: {len}\r\n\r\n{body}");
                        if conn.write_all(answer.as_bytes()).await.is_err() || close != Close::Never
                        {
                            return;
                        }
                    }
                });
            }
        });
        (addr, accepted)
    }
}

#[cfg(test)]
mod tests {
    use super::stub::{replica, Close};
    use super::*;
    use http_body_util::BodyExt;
    use std::sync::atomic::Ordering;

    async fn get(pool: &Pool, addr: SocketAddr) -> String {
        let req = Request::builder()
            .uri("/x")
            .header("host", "replica")
            .body(Body::empty())
            .unwrap();
        let (resp, sender) = send(pool, addr, req.map(ToReplica::Right))
            .await
            .expect("answer");
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        pool.give_back(sender);
        String::from_utf8_lossy(&body).into_owned()
    }

    /// A raw stream is judged by the time it was given back with (no later than its last use), not by when
    /// it came back: one stamped as long idle is not taken again; one stamped within the time is.
    #[tokio::test]
    async fn pooled_streams_are_judged_by_their_last_use() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let accepting = tokio::spawn(async move {
            let mut kept = Vec::new();
            while let Ok((s, _)) = listener.accept().await {
                kept.push(s);
            }
        });
        let pool = Pool::default();
        let now = Instant::now();
        let stale = connect_stream(addr).await.expect("connect");
        pool.give_back_stream(stale, now - IDLE_TIMEOUT);
        assert!(pool.take_stream(now).is_none(), "long idle by its stamp");
        let fresh = connect_stream(addr).await.expect("connect");
        let port = fresh.local_addr().expect("addr").port();
        pool.give_back_stream(fresh, now - IDLE_TIMEOUT / 2);
        let taken = pool.take_stream(now).expect("within the time");
        assert_eq!(taken.local_addr().expect("addr").port(), port);
        accepting.abort();
    }

    #[tokio::test]
    async fn connections_are_reused() {
        let (addr, accepted) = replica(Close::Never).await;
        let pool = Pool::default();
        for _ in 0..5 {
            assert_eq!(get(&pool, addr).await, "ok");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_closed_connection_is_replaced() {
        let (addr, accepted) = replica(Close::Said).await;
        let pool = Pool::default();
        for _ in 0..3 {
            assert_eq!(get(&pool, addr).await, "ok");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 3);
        // Closed without a word: a pooled connection may look open when taken; the request is not lost.
        let (addr, accepted) = replica(Close::Silently).await;
        for _ in 0..20 {
            assert_eq!(get(&pool, addr).await, "ok");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 20);
    }

    #[tokio::test]
    async fn a_connection_still_uploading_is_not_taken() {
        let (addr, accepted) = replica(Close::Never).await;
        let pool = Pool::default();
        // An upload that never ends; the replica answers after the head, before the body.
        let (_keep_open, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(1);
        let body = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        let req = Request::builder()
            .method("POST")
            .uri("/upload")
            .header("host", "replica")
            .body(Body::from_stream(body))
            .unwrap();
        let (resp, sender) = send(&pool, addr, req.map(ToReplica::Right))
            .await
            .expect("early answer");
        resp.into_body().collect().await.unwrap();
        pool.give_back(sender);
        // The next request does not wait behind the upload: it gets a connection of its own.
        let answer = tokio::time::timeout(Duration::from_secs(5), get(&pool, addr)).await;
        assert_eq!(answer.expect("no wait"), "ok");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_replica_that_is_gone_is_an_error() {
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let req = Request::builder().uri("/").body(Body::empty()).unwrap();
        let err = send(&Pool::default(), addr, req.map(ToReplica::Right))
            .await
            .expect_err("refused");
        assert!(matches!(err, Error::Connect(_)), "{err}");
    }
}
