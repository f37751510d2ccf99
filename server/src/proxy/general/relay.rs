//! A replica's response on the general path on its way to the caller: the fields that stay behind left
//! out (by the rules of [`super::super::forward`]), an MCP session it opened remembered, its pauses bounded,
//! and, when it may be cached, copied as it passes and stored once it has.

use axum::http::{header, HeaderMap, HeaderValue};
use hyper::body::Incoming;

use super::super::forward::{self, Copying, Message, REPLICA_PAUSED};
use super::super::{bodies, cache, stateful_session, Proxy, X_CACHE};
use super::{InFlight, Reply, ReplyBody, MCP_SESSION_ID};
use crate::routing::pace::Paced;
use crate::routing::{Backend, Route};

impl Proxy {
    /// The replica's response on its way to the caller, holding `guard` until it has passed: an MCP session
    /// it opened is remembered, its hop-by-hop headers stay behind, and when it may be cached (under
    /// `cache_ask`) it is copied as it passes.
    pub(super) fn respond(
        &self,
        route: &Route,
        backend: &Backend,
        session: Option<&str>,
        resp: axum::http::Response<Incoming>,
        guard: InFlight,
        cache_ask: Option<CacheAsk>,
    ) -> Reply {
        let (rparts, rbody) = resp.into_parts();
        if stateful_session(route) && session.is_none() {
            if let Some(s) = rparts
                .headers
                .get(&MCP_SESSION_ID)
                .and_then(|v| v.to_str().ok())
            {
                self.sessions.remember(s, &backend.replica_id);
            }
        }
        let status = rparts.status;
        let mut headers = rparts.headers;
        // A length beside a transfer coding is not the body's (RFC 9112 §6.3): the body goes on in chunks.
        if headers.contains_key(header::TRANSFER_ENCODING) {
            headers.remove(header::CONTENT_LENGTH);
        }
        forward::strip(&mut headers, Message::Response);
        // A response that may be cached streams to the caller like any other, copied on its way, and is
        // stored once it has passed in full (and fits an entry).
        let mut copy = match cache_ask {
            Some(ask) => {
                let fields = headers
                    .iter()
                    .map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()));
                let known = http_body::Body::size_hint(&rbody).exact();
                let content_type = headers.get(header::CONTENT_TYPE).map(HeaderValue::as_bytes);
                let asked = &ask.fields;
                forward::fill_for(
                    &self.cache,
                    ask.key,
                    asked,
                    status,
                    content_type,
                    fields,
                    known,
                )
            }
            None => Copying::default(),
        };
        let mut cache = copy.copying().then(|| self.clone());
        // A response with no body to pass (an answer to `HEAD`, a 204): stored now, as nothing will ask
        // for its body.
        if http_body::Body::is_end_stream(&rbody) {
            if let Some(proxy) = cache.take() {
                copy.passed(&proxy.cache, proxy.clock.now());
            }
        }
        // A pause of the replica's for longer than its time ends the body in an error, which cuts the
        // caller's response short.
        let rbody = Passing {
            body: Paced::new(rbody, self.config.replica_timeout(), REPLICA_PAUSED),
            _guard: guard,
            copy,
            cache,
        };
        let mut resp = Reply::new(ReplyBody::Left(rbody));
        *resp.status_mut() = status;
        *resp.headers_mut() = headers;
        if route.cache {
            resp.headers_mut()
                .insert(X_CACHE, HeaderValue::from_static("MISS"));
        }
        resp
    }
}

/// A request the cache missed: the key it was looked up by, and its fields (for the answer's `Vary`).
pub(super) struct CacheAsk {
    pub(super) key: cache::Key,
    pub(super) fields: HeaderMap,
    /// The room its body holds (see [`bodies`]), until its answer comes.
    pub(super) _room: bodies::Hold,
}

/// A replica's response body on its way to the caller. It holds the request's in-flight guard, so the count
/// drops (and the replica connection goes back to its pool) when the response is fully sent or dropped; and,
/// when the response may be cached, its fill (see [`cache::Fill`]), stored once the body has passed in full.
pub struct Passing<B> {
    body: B,
    _guard: InFlight,
    /// The copy for the cache, and (while there is one) the proxy whose cache it goes to.
    copy: Copying,
    cache: Option<Proxy>,
}

impl<B> Passing<B> {
    /// Stores the response, here on the connection's task. Not on a task of its own: spawned while the
    /// replica connection's task waits in the worker's next-task slot (the body just took a chunk from it),
    /// the new task pushes it out to the shared queue and tokio wakes the other worker for it, a context
    /// switch before the caller's answer is written that costs more than the store itself.
    fn store(&mut self) {
        if let Some(proxy) = self.cache.take() {
            self.copy.passed(&proxy.cache, proxy.clock.now());
        }
    }
}

impl<B> http_body::Body for Passing<B>
where
    B: http_body::Body<Data = axum::body::Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = axum::body::Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        use std::task::Poll;
        let polled = std::pin::Pin::new(&mut self.body).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.copy.piece(data);
                }
                // The server may not ask again once the body says it has ended, nor after its trailers
                // (which come last, and stay behind).
                if self.body.is_end_stream() || frame.is_trailers() {
                    self.store();
                }
            }
            Poll::Ready(Some(Err(_))) => self.copy.broke(),
            Poll::Ready(None) => self.store(),
            Poll::Pending => {}
        }
        polled.map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
