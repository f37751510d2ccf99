//! A caller's connection on the own path: its buffers and heads, reading a request head within its times,
//! writing to the caller within the caller's time, answers of the server's own, and letting a connection go
//! so that its answer is read. [`serve_connection`] drives the connection's requests until the general path is
//! to take it on.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::response::Response;
use bytes::BytesMut;
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::super::edge;
use super::super::forward::bounded;
use super::super::http1::{self, Head, Parsed, HEAD_MAX};
use super::super::stop::until;
use super::super::{limit, poll, Proxy};
use super::deadline::Deadline;
use super::{refuse, sock};
use crate::config::ClientTimeouts;
use crate::routing::pace::Side;

/// Most buffer a connection keeps between requests.
const KEPT_MAX: usize = 64 * 1024;

/// One caller's connection on this path.
pub(super) struct Conn {
    pub(super) io: TcpStream,
    pub(super) timeouts: ClientTimeouts,
    /// What the caller sent that is not handled yet: a head being read, body bytes, the next request.
    pub(super) buf: BytesMut,
    /// What the replica sent of the current exchange.
    pub(super) rbuf: BytesMut,
    /// Each head written, made here.
    pub(super) out: Vec<u8>,
    pub(super) head: Head,
    pub(super) rhead: Head,
    /// Bytes of the current request (head and body) still in `buf`: none once it has been sent on.
    pub(super) pending: usize,
    /// Part of the current request's body was not read: the replica answered first.
    pub(super) unread: bool,
    /// The timer of the waits on replicas (see [`Upstream::timer`]), between exchanges.
    pub(super) replica_timer: Option<Deadline>,
    /// When the current request's body must have come whole (`proxy.body_timeout_s` from its head).
    pub(super) body_due: Instant,
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
    pub(super) fn body_wait(&self) -> Option<Duration> {
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

/// Before a connection whose request was not read in full is closed: says that nothing more will be
/// written, and takes (and drops) what the caller still sends for a moment, so that the answer is read
/// rather than lost to a reset.
pub(super) async fn linger(conn: &mut Conn) {
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

/// Writes `data` to the caller: false when that failed, or when the caller took none of it for the
/// caller's time (`proxy.caller_timeout_s`).
pub(super) async fn to_caller(io: &mut TcpStream, timeouts: ClientTimeouts, data: &[u8]) -> bool {
    write_each(io, timeouts.caller, Side::Caller, data)
        .await
        .is_ok()
}

/// Writes all of `data` to `side`, each write bounded by `limit` (a slow reader that keeps taking is not
/// cut off).
pub(super) async fn write_each(
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

/// Writes an answer of the server's own. Whether it went.
pub(super) async fn write_answer(
    conn: &mut Conn,
    answer: Response,
    close: bool,
    head_request: bool,
) -> bool {
    let (parts, body) = answer.into_parts();
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    };
    conn.out.clear();
    http1::answer(&mut conn.out, &parts, &body, close, head_request);
    to_caller(&mut conn.io, conn.timeouts, &conn.out).await
}

/// Serves a caller's connection on the own path while it takes its requests. The connection's socket and
/// what was read of it, when the general path is to take it on from its first request that this path did
/// not take; `None` when the connection has ended (or is to).
pub(in crate::proxy) async fn serve_connection(
    io: TcpStream,
    proxy: &Proxy,
    peer: SocketAddr,
    stop: &watch::Receiver<bool>,
) -> Option<(BytesMut, TcpStream)> {
    let mut conn = Conn::new(io, proxy.config.client_timeouts());
    match serve_requests(&mut conn, proxy, peer, stop).await {
        true => Some((conn.buf, conn.io)),
        false => None,
    }
}

/// The connection's requests, one after another (see [`serve_connection`]): true when the general path is
/// to take the connection on.
async fn serve_requests(
    conn: &mut Conn,
    proxy: &Proxy,
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
                let table = super::table(proxy);
                super::serve_request(proxy, conn, &table, peer).await
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
