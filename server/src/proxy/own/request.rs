//! The request as the replica gets it on the own path: its head written from the caller's bytes (the fields
//! that stay behind and `X-Forwarded-For` by the rules of [`super::super::forward`]), and for a cached endpoint
//! the body read whole and the cache key made of it.

use std::net::SocketAddr;

use axum::response::{IntoResponse, Response};

use super::super::cache;
use super::super::forward::{self, bounded, timed_out, Message};
use super::super::http1::{field, length_field, Head};
use super::super::Proxy;
use super::conn::Conn;
use super::{sock, Taken};
use crate::routing::pace::Side;
use crate::routing::Backend;

/// Reads the rest of a body of `length` bytes (one the cache reads: at most `server.body_limit`) into the
/// buffer, after the head.
pub(super) async fn read_whole_body(conn: &mut Conn, length: u64) -> Result<(), Response> {
    let whole = conn
        .head
        .len
        .saturating_add(usize::try_from(length).unwrap_or(usize::MAX));
    while conn.buf.len() < whole {
        let Some(wait) = conn.body_wait() else {
            return Err(forward::body_failed(true).into_response());
        };
        // Room as the body comes, not all it announced at once.
        conn.buf.reserve((whole - conn.buf.len()).min(64 * 1024));
        let read = sock::read_buf(&conn.io, &mut conn.buf);
        match bounded(wait, Side::Caller, read).await {
            Err(e) => return Err(forward::body_failed(timed_out(&e)).into_response()),
            Ok(0) => return Err(forward::body_failed(false).into_response()),
            Ok(_) => {}
        }
    }
    Ok(())
}

/// The cache key of a request whose body is at hand (see `Proxy::cache_lookup`).
pub(super) fn key(conn: &Conn, taken: &Taken<'_>, access: &str) -> cache::Key {
    let (head, buf) = (&conn.head, &conn.buf[..]);
    fn text(b: &[u8]) -> &str {
        std::str::from_utf8(b).unwrap_or("")
    }
    let accept = head
        .get(buf, "accept")
        .and_then(forward::visible)
        .unwrap_or("");
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
pub(super) struct RequestFields<'a>(pub(super) &'a Head, pub(super) &'a [u8]);

impl cache::Fields for RequestFields<'_> {
    fn each(&self, name: &[u8], with: &mut dyn FnMut(&[u8])) {
        let RequestFields(head, buf) = self;
        head.fields(buf)
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .for_each(|(_, v)| with(v));
    }
}

/// Writes the head the replica gets into `conn.out`: the caller's method, the rest of the path and the
/// query, the caller's fields less those that stay (see [`forward::stays`]), the replica's own `Host` and
/// `X-Forwarded-For` naming the caller.
pub(super) fn request_head(
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
        if !(ours || forward::stays(name, Message::Request, head.connection(buf, named))) {
            field(out, name, value);
        }
    }
    if let Some(n) = taken.framing.length {
        length_field(out, n);
    }
    field(out, b"host", backend.host.as_bytes());
    let prior = head.get(buf, "x-forwarded-for");
    let trusted = proxy.trusted(peer.ip());
    forward::forwarded_for(prior, trusted, peer.ip(), |v| {
        field(out, b"x-forwarded-for", v)
    });
    out.extend_from_slice(b"\r\n");
}
