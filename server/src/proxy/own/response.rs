//! The replica's response on the own path: its head read (informational ones dropped), the caller's head
//! written with the fields that stay behind left out, and the body passed on in its framing (see
//! [`super::chunks`]), copied to the cache on its way when it may be kept.

use std::time::Instant;

use axum::http::StatusCode;
use axum::response::Response;
use bytes::Buf;

use super::super::forward::{self, Copying, Message};
use super::super::http1::{
    date, field, length_field, past_informational, status_line, Framing, Parsed, RESPONSE_HEAD_MAX,
};
use super::super::Proxy;
use super::super::{cache, http_status, replica_failed};
use super::chunks::{pass_chunked, pass_length, pass_until_close};
use super::conn::Conn;
use super::request::RequestFields;
use super::upstream::Upstream;
use super::Taken;
use crate::routing::Route;

/// How a response's body ends.
enum Ends {
    /// After this many bytes.
    Length(u64),
    /// At its last chunk.
    Chunked,
    /// When the replica closes.
    Close,
}

/// How a response's body ends, by its head's framing (see [`Framing`]); none when `no_body` (an answer to
/// `HEAD`, a 204 or 304). `None` for a length that is not one: no answer to pass on.
fn ends_of(framing: &Framing, no_body: bool) -> Option<Ends> {
    Some(if no_body {
        Ends::Length(0)
    } else if framing.encoded {
        match framing.chunked {
            true => Ends::Chunked,
            false => Ends::Close,
        }
    } else if framing.bad_length {
        return None;
    } else {
        framing.length.map_or(Ends::Close, Ends::Length)
    })
}

/// A response passed on.
pub(super) struct Passed {
    /// Whether the caller got all of it.
    pub(super) complete: bool,
    /// Whether the replica connection may take another request: all of the response was read, and nothing
    /// more.
    pub(super) reusable: bool,
}

/// Reads the replica's response head (its first bytes are in `conn.rbuf`), writes the caller's, and passes
/// the body on, copied to the cache on its way when it may be cached (`cache_ask`: the key the request was
/// looked up by, and a copy of its head).
pub(super) async fn pass_response(
    proxy: &Proxy,
    conn: &mut Conn,
    upstream: &mut Upstream,
    taken: &Taken<'_>,
    route: &Route,
    cache_ask: Option<(cache::Key, Vec<u8>)>,
    started: Instant,
) -> Result<Passed, Response> {
    let bad = || replica_failed(false);
    read_response_head(conn, upstream)
        .await
        .map_err(|e| replica_failed(forward::timed_out(&e)))?;
    let status = StatusCode::from_u16(conn.rhead.status)
        .ok()
        .filter(http_status)
        .ok_or_else(bad)?;
    let framing = Framing::of(&conn.rhead, &conn.rbuf);
    let no_body = taken.head_request || matches!(status.as_u16(), 204 | 304);
    let ends = ends_of(&framing, no_body).ok_or_else(bad)?;
    // Counted once the replica has answered, as on the general path.
    let stats = &taken.route.activity.stats;
    stats.record(status.as_u16(), started.elapsed());
    let mut copy = match cache_ask {
        Some((key, asked)) => {
            let (head, buf) = (&conn.rhead, &conn.rbuf[..]);
            let fields = head.fields(buf);
            let named = framing.names;
            let kept = fields.filter(|(name, _)| {
                !forward::stays(name, Message::Response, head.connection(buf, named))
            });
            let known = match ends {
                Ends::Length(n) => Some(n),
                _ => None,
            };
            let asked = RequestFields(&conn.head, &asked);
            let content_type = head.get(buf, "content-type");
            forward::fill_for(&proxy.cache, key, &asked, status, content_type, kept, known)
        }
        None => Copying::default(),
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
        Ends::Length(n) => pass_length(conn, upstream, n, &mut copy).await,
        Ends::Chunked => pass_chunked(conn, upstream, &mut copy).await,
        Ends::Close => pass_until_close(conn, upstream, &mut copy).await,
    };
    if complete {
        copy.passed(&proxy.cache, proxy.clock.now());
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
        if !(ours || forward::stays(name, Message::Response, head.connection(buf, named))) {
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
