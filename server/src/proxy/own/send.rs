//! Sending a request to a replica on the own path: a pooled or new connection, the head and the body as it
//! comes (the replica may answer first), and the wait for the replica's first bytes, each wait within the
//! replica's or the caller's time.

use std::mem::MaybeUninit;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::super::forward::{bounded, timed_out};
use super::super::http1::{past_informational, Head, Parsed, RESPONSE_HEAD_MAX};
use super::conn::Conn;
use super::upstream::Upstream;
use crate::routing::pace::Side;
use crate::routing::{upstream, Backend};

/// A request sent: the replica connection, and whether all of the body went (the replica may answer
/// before it has taken all of it).
pub(super) struct Sent {
    pub(super) upstream: Upstream,
    pub(super) all: bool,
}

/// Why a request could not be sent and answered.
pub(super) enum Unsent {
    /// The caller went away first (which the general path notices too): nobody waits for an answer, and
    /// the replica is freed of the request.
    CallerGone,
    /// The caller's body ended before its length did (the caller stopped sending): answered 400, as on the
    /// general path.
    CallerCut,
    /// The caller's body stopped coming for the caller's time (`proxy.caller_timeout_s`).
    CallerStalled,
    /// The replica could not be reached, or closed without answering, or said nothing in time
    /// ([`timed_out`]).
    Replica(std::io::Error),
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
pub(super) async fn send_request(
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
            Ok(0) => return Err(Unsent::CallerCut),
            Err(_) => return Err(Unsent::CallerGone),
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
