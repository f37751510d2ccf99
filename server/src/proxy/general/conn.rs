//! A caller's connection on the general path, served by hyper's HTTP/1 server, each request answered by
//! [`Front::answer`] with the peer's address at hand; its heads judged first ([`super::guard`]), its writes
//! and the request bodies bounded by the caller's time.

use std::net::SocketAddr;

use bytes::BytesMut;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::watch;

use super::super::forward::{ANSWER_NOT_TAKEN, BODY_STALLED};
use super::super::stop::until;
use super::super::{limit, poll};
use super::guard::{Guard, LastRead};
use super::{Front, Inner};
use crate::config::ClientTimeouts;
use crate::routing::pace::{Paced, PacedWrites};
use crate::routing::upstream::ToReplica;

/// Serves a caller's connection on the general path, from the bytes of it already read (`read`: none, or
/// what the own path read before it handed the connection over), until it ends. `room` is its place among
/// the listener's connections, held as long as its socket is.
pub(in crate::proxy) async fn serve_connection<S>(
    io: tokio::net::TcpStream,
    read: BytesMut,
    peer: SocketAddr,
    app: Front<S>,
    stop: watch::Receiver<bool>,
    room: limit::Open,
) where
    S: Inner,
{
    let timeouts = app.proxy.config.client_timeouts();
    // A write that waits on the caller for longer than its time fails, which ends the connection.
    let last_read = LastRead::default();
    // The place goes with the socket: an upgraded connection outlives hyper's serving of it.
    let guard = Guard::new(io, read, last_read.clone()).holding(room);
    let io = PacedWrites::new(guard, timeouts.caller, ANSWER_NOT_TAKEN);
    general(io, peer, app, timeouts, stop, last_read).await;
}

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
