//! The forwarding rules, one of each, for both ways a request is served (the own path, `proxy/own/`, and
//! the general path through hyper, `proxy/general/`):
//!
//! - which fields of a message stay behind: [`stays`], over the bytes of a field's name, which the general
//!   path's header maps go through too ([`strip`]). The hop-by-hop fields and those `Connection` names are
//!   stripped here, and nowhere else;
//! - the `X-Forwarded-For` a replica gets ([`forwarded_for`]), and a field's value read as text ([`visible`]);
//! - how long one wait on the caller or a replica may last, and the [`Stalled`] it ends with ([`bounded`] for
//!   one wait; [`crate::routing::pace`] bounds each pause of a body the same way);
//! - the room a request body read whole for the cache takes ([`body_room`]), and how a failed read is
//!   answered ([`body_failed`]);
//! - which response is copied to the cache as it passes, and the copy's life ([`fill_for`], [`Copying`]).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use chrono::{DateTime, Utc};

use super::bodies::{Bodies, Hold};
use super::cache::{self, Fill, ResponseCache};
use super::edge;
use super::http1::{names_nothing, words};
use crate::error::ApiError;
use crate::routing::pace::{Side, Stalled};

pub(super) const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// Fields that belong to one connection and are not forwarded (RFC 9110 §7.6.1, and the older
/// `Proxy-Connection`, which RFC 9113 §8.2.2 counts among them), beside those that the `Connection` field
/// names. Compared as bytes, as they come: no `HeaderName` is looked up for them.
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

/// Which message a field is in: a request loses more on its way than a response.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Message {
    Request,
    Response,
}

/// Whether a field is for this hop only, or for this server only, and is not passed on: the hop-by-hop
/// fields, `Host` (the replica gets its own), and those the message's `Connection` fields name
/// (`connection`: their values, `None` when they name nothing but their usual words, see
/// [`super::http1::Framing::names`]); and, in a request, the caller's token (it is for us, not for the model's
/// container), the private link's account, `X-Forwarded-For` (written anew, see [`forwarded_for`]) and the
/// fields nginx drops (see [`edge::dropped_name`]).
pub(super) fn stays<'v>(
    name: &[u8],
    message: Message,
    connection: Option<impl Iterator<Item = &'v [u8]>>,
) -> bool {
    let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
    let listed = HOP_BY_HOP.iter().any(|h| is(h))
        || is(b"host")
        || message == Message::Request
            && (is(b"authorization")
                || is(b"x-forwarded-for")
                || is(b"x-private-link-account")
                || edge::dropped_name(name));
    listed || connection.is_some_and(|mut values| values.any(|v| words(v).any(is)))
}

/// Removes from a header map (the general path's) the fields that stay behind (see [`stays`]).
pub(super) fn strip(headers: &mut HeaderMap, message: Message) {
    let named = headers
        .get_all(header::CONNECTION)
        .iter()
        .any(|v| words(v.as_bytes()).any(|w| !names_nothing(w)));
    let connection = || {
        let values = headers.get_all(header::CONNECTION).iter();
        named.then(|| values.map(HeaderValue::as_bytes))
    };
    let gone: Vec<HeaderName> = headers
        .keys()
        .filter(|n| stays(n.as_str().as_bytes(), message, connection()))
        .cloned()
        .collect();
    for name in gone {
        headers.remove(name);
    }
}

/// A field's value as text, as the general path takes it (`HeaderValue::to_str`): visible ASCII and tabs
/// only, else none.
pub(super) fn visible(value: &[u8]) -> Option<&str> {
    let plain = value
        .iter()
        .all(|b| *b == b'\t' || (b' '..=b'~').contains(b));
    plain.then(|| std::str::from_utf8(value).ok()).flatten()
}

/// The `X-Forwarded-For` the replica gets, lent to `with` as bytes: the caller's address, after the
/// caller's own field (`prior`, its first) only when the caller is a trusted proxy (`peer_trusted`, see
/// `proxy.trusted_proxies`); else the caller's field is not believed, and not passed on.
pub(super) fn forwarded_for<T>(
    prior: Option<&[u8]>,
    peer_trusted: bool,
    peer: IpAddr,
    with: impl FnOnce(&[u8]) -> T,
) -> T {
    match prior.and_then(visible).filter(|_| peer_trusted) {
        Some(prior) => ip_text(peer, |ip| with(&[prior.as_bytes(), b", ", ip].concat())),
        None => ip_text(peer, with),
    }
}

/// [`forwarded_for`] as a header value; the caller's address alone is not made anew (see [`ip_value`]).
pub(super) fn forwarded_for_value(
    prior: Option<&HeaderValue>,
    peer_trusted: bool,
    peer: IpAddr,
) -> Option<HeaderValue> {
    match prior.filter(|_| peer_trusted) {
        None => Some(ip_value(peer)),
        Some(prior) => forwarded_for(Some(prior.as_bytes()), true, peer, |v| {
            HeaderValue::from_bytes(v).ok()
        }),
    }
}

/// `ip` as a header value. The last one made on this thread is kept: traffic comes from few addresses
/// (a load balancer in front, or a handful of clients), and formatting one is a noticeable share of a
/// request's own work.
fn ip_value(ip: IpAddr) -> HeaderValue {
    with_ip_value(ip, HeaderValue::clone)
}

/// The text of `ip` (see [`ip_value`]), lent to `with`: nothing is cloned for it.
fn ip_text<T>(ip: IpAddr, with: impl FnOnce(&[u8]) -> T) -> T {
    with_ip_value(ip, |value| with(value.as_bytes()))
}

fn with_ip_value<T>(ip: IpAddr, with: impl FnOnce(&HeaderValue) -> T) -> T {
    thread_local! {
        static LAST: std::cell::RefCell<Option<(IpAddr, HeaderValue)>> =
            const { std::cell::RefCell::new(None) };
    }
    LAST.with_borrow_mut(|last| match last {
        Some((at, value)) if *at == ip => with(value),
        _ => {
            // An address's text is always a valid header value.
            let value = HeaderValue::from_str(&ip.to_string())
                .unwrap_or_else(|_| HeaderValue::from_static(""));
            with(&last.insert((ip, value)).1)
        }
    })
}

/// A wait on the caller that went on for the caller's time (`proxy.caller_timeout_s`).
pub(super) const CALLER_STALLED: Stalled = Stalled {
    side: Side::Caller,
    what: "the caller kept the proxy waiting for too long",
};
/// A caller's request body that stopped coming (`proxy.caller_timeout_s`), or did not come whole in time
/// (`proxy.body_timeout_s`).
pub(super) const BODY_STALLED: Stalled = Stalled {
    side: Side::Caller,
    what: "the caller paused its request body for too long",
};
/// A caller that took nothing of its answer (`proxy.caller_timeout_s`).
pub(super) const ANSWER_NOT_TAKEN: Stalled = Stalled {
    side: Side::Caller,
    what: "the caller took nothing of its answer in time",
};
/// A wait on a replica that went on for the replica's time (`proxy.replica_timeout_s`).
pub(super) const REPLICA_STALLED: Stalled = Stalled {
    side: Side::Replica,
    what: "the endpoint's replica kept the proxy waiting for too long",
};
/// A replica's response body that stopped coming (`proxy.replica_timeout_s`).
pub(super) const REPLICA_PAUSED: Stalled = Stalled {
    side: Side::Replica,
    what: "the endpoint's replica paused its response for too long",
};

/// `io`, a wait on `side`, given up after `limit` with a [`Stalled`] error (see [`timed_out`]). Many waits
/// end at once (a write, a body that came with its head): the timer is made only for one that does not.
pub(super) async fn bounded<T>(
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

/// Whether `e` is one of the proxy's times run out (see [`bounded`]), and not a failure of the system's (a
/// connect's own timeout is a 502). A request whose replica's time ran out is not sent again.
pub(super) fn timed_out(e: &std::io::Error) -> bool {
    e.get_ref().is_some_and(|e| e.is::<Stalled>())
}

/// Room to read a request body whole for the cache (its key covers the body), for the `announced` bytes
/// its head said (more is taken as it comes, see [`Hold::grow`]); `None` when it goes on uncached, as it
/// comes: longer than `limit` (`server.body_limit`), or finding no room among the bodies read whole at
/// once (counted, see [`Bodies::passed_uncached`]).
pub(super) fn body_room(bodies: &Arc<Bodies>, limit: usize, announced: u64) -> Option<Hold> {
    if announced > limit as u64 {
        return None;
    }
    let room = bodies.take(usize::try_from(announced).unwrap_or(usize::MAX));
    if room.is_none() {
        bodies.passed_uncached();
    }
    room
}

/// The answer to a request whose body could not be read whole: 408 when the caller let its time run out
/// (`stalled`), else 400.
pub(super) fn body_failed(stalled: bool) -> ApiError {
    match stalled {
        true => ApiError::body_stalled(),
        false => unreadable(),
    }
}

/// An answer given before the request's body was read in full (a refusal or failure of the server's own, or
/// a replica that answered early) ends the connection, and says so: the rest of the body could not be told
/// from a next request. The own path writes the field as it writes such an answer; the general path's
/// answers get it here.
pub(super) fn close_after(headers: &mut HeaderMap) {
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
}

/// A request body cut off or badly framed.
pub(super) fn unreadable() -> ApiError {
    ApiError::BadRequest("the request body could not be read".into())
}

/// Whether a response of `content_type` is an event stream: passed on as it comes, never kept.
pub(super) fn event_stream(content_type: Option<&[u8]>) -> bool {
    content_type.is_some_and(|v| v.starts_with(b"text/event-stream"))
}

/// The copy for the cache of a response of `status` and `content_type`, with `fields` as they go to the
/// caller, to a request the cache missed (looked up under `key`, with `asked` fields): only a success that is
/// not an event stream is copied, and only when it may be kept for others (see [`Fill::new`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn fill_for<'a>(
    cache: &ResponseCache,
    key: cache::Key,
    asked: &dyn cache::Fields,
    status: StatusCode,
    content_type: Option<&[u8]>,
    fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    known: Option<u64>,
) -> Copying {
    let keeps = status.is_success() && !event_stream(content_type);
    Copying(
        keeps
            .then(|| Fill::new(cache, key, asked, status, fields, known))
            .flatten(),
    )
}

/// A response's copy for the cache while it passes (see [`fill_for`]), the same on both paths: each piece
/// copied as it goes, dropped once the response outgrows an entry or breaks off, stored once all of it has
/// passed.
#[derive(Default)]
pub(super) struct Copying(Option<Fill>);

impl Copying {
    /// Copies the next piece of the body.
    pub(super) fn piece(&mut self, data: &[u8]) {
        cache::keep(&mut self.0, data);
    }

    /// The response broke off: it is not kept.
    pub(super) fn broke(&mut self) {
        self.0 = None;
    }

    /// All of the response has passed: stored (once; later calls do nothing).
    pub(super) fn passed(&mut self, cache: &ResponseCache, now: DateTime<Utc>) {
        if let Some(fill) = self.0.take() {
            fill.store(cache, now);
        }
    }

    /// Whether there is still a copy being made.
    pub(super) fn copying(&self) -> bool {
        self.0.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::super::http1::tests::request;
    use super::super::http1::Framing;
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

    const HEAD: &str = "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, X-Trace\r\nX-Trace: 1\r\n\
        TE: trailers\r\nAuthorization: Bearer t\r\nX-Forwarded-For: 1.2.3.4\r\nX-Private-Link-Account: 9\r\n\
        Proxy-Connection: close\r\nAccept: */*\r\n\r\n";

    /// What passes of [`HEAD`] as `message`, read as bytes (the own path).
    fn passed_as_bytes(message: Message) -> Vec<String> {
        let (head, buf) = request(HEAD);
        let named = Framing::of(&head, &buf).names;
        let names = head.fields(&buf).map(|(n, _)| n);
        let passed = names.filter(|n| !stays(n, message, head.connection(&buf, named)));
        passed
            .map(|n| String::from_utf8_lossy(n).to_lowercase())
            .collect()
    }

    /// What passes of [`HEAD`] as `message`, read into a header map (the general path).
    fn passed_as_map(message: Message) -> Vec<String> {
        let (head, buf) = request(HEAD);
        let mut map = HeaderMap::new();
        for (n, v) in head.fields(&buf) {
            let name = HeaderName::from_bytes(n).expect("a name");
            map.append(name, HeaderValue::from_bytes(v).expect("a value"));
        }
        strip(&mut map, message);
        // A map's order is its own: compared in the head's.
        let order = |n: &String| HEAD.to_lowercase().find(&format!("\n{n}:"));
        let mut left: Vec<String> = map.keys().map(|n| n.as_str().to_string()).collect();
        left.sort_by_key(order);
        left
    }

    #[test]
    fn fields_for_this_hop_stay_behind_on_both_paths() {
        assert_eq!(passed_as_bytes(Message::Request), ["accept"]);
        // A response keeps what is only a request's to lose.
        let response = [
            "authorization",
            "x-forwarded-for",
            "x-private-link-account",
            "accept",
        ];
        assert_eq!(passed_as_bytes(Message::Response), response);
        assert_eq!(passed_as_map(Message::Request), ["accept"]);
        assert_eq!(passed_as_map(Message::Response), response);
        // A replica's usual answer: `Connection` alone, in any case, naming only its usual words.
        let mut h = HeaderMap::new();
        h.append("connection", HeaderValue::from_static("Keep-Alive"));
        h.append("connection", HeaderValue::from_static("close, X-Hop"));
        h.insert("x-hop", HeaderValue::from_static("1"));
        h.insert("content-length", HeaderValue::from_static("3"));
        strip(&mut h, Message::Response);
        let left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["content-length"]);
    }

    #[test]
    fn a_body_read_whole_takes_room_within_the_limit() {
        let bodies = Arc::new(Bodies::new(10));
        // Over the limit: uncached, and not counted as finding no room.
        assert!(body_room(&bodies, 4, 5).is_none());
        assert_eq!(bodies.usage(), (0, 0));
        let room = body_room(&bodies, 100, 8).expect("room for 8 of 10");
        assert_eq!(bodies.usage(), (8, 0));
        // No room left: uncached, and counted.
        assert!(body_room(&bodies, 100, 3).is_none());
        assert_eq!(bodies.usage(), (8, 1));
        drop(room);
        assert_eq!(bodies.usage(), (0, 1), "given back");
    }

    #[test]
    fn forwarded_for_names_each_address() {
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "::1".parse().unwrap());
        assert_eq!(ip_value(a), "10.0.0.1");
        assert_eq!(ip_value(a), "10.0.0.1");
        assert_eq!(ip_value(b), "::1");
        assert_eq!(ip_value(a), "10.0.0.1");
        let prior = HeaderValue::from_static("1.2.3.4");
        let value = |trusted| forwarded_for_value(Some(&prior), trusted, a);
        assert_eq!(value(true).expect("a value"), "1.2.3.4, 10.0.0.1");
        assert_eq!(value(false).expect("a value"), "10.0.0.1");
        let bytes = forwarded_for(Some(b"1.2.3.4"), true, a, <[u8]>::to_vec);
        assert_eq!(bytes, b"1.2.3.4, 10.0.0.1");
        let untrusted = forwarded_for(Some(b"1.2.3.4"), false, a, <[u8]>::to_vec);
        assert_eq!(untrusted, b"10.0.0.1");
    }
}
