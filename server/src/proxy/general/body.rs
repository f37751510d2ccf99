//! The body of a request on the general path read whole for the cache (its key covers the body), within
//! the room the rules of [`super::super::forward`] give it; a body too large goes on uncached, what was read
//! of it first.

use axum::body::Body;
use http_body_util::BodyExt;

use super::super::bodies;
use super::super::forward;
use crate::error::ApiError;
use crate::routing::pace::{Side, Stalled};
use crate::routing::worker;

/// A request body read for the cache: all of it, or (larger than the limit) what was read of it and the rest.
pub(super) enum Collected<B> {
    Whole(axum::body::Bytes),
    Over(Vec<axum::body::Bytes>, B),
}

/// The whole request body, up to `limit` bytes, in `room` (see [`forward::body_room`]): none to read when the body has ended already (a request
/// without one), read in place on a data-plane worker, else on a task of its own. A larger one is handed
/// back with what was read of it, to go on uncached.
///
/// hyper's body channel wakes the connection's task each time a chunk is taken from it. Read on that same
/// task of a multi-threaded runtime, the wake lands on the running task: tokio then queues it as a yield and
/// wakes an idle worker to help, a futex round trip and a thread woken for nothing on every request
/// (measured at 20–25 µs of CPU per request on two vCPUs). On a task of its own, the read wakes the
/// connection task in the ordinary way, through the worker's next-task slot. A data-plane worker's runtime
/// has no other worker to wake (see `proxy::workers`), and a task of its own would only cost its spawn.
///
/// The read ends as soon as the body says it has (a body of known length, once all of it has come) rather
/// than when the connection closes the channel: one hand-off fewer between the two tasks.
///
/// The task is aborted if the request is dropped first (the caller went away).
pub(super) async fn read_for_cache<B>(
    body: B,
    limit: usize,
    room: bodies::Hold,
) -> Result<(Collected<B>, bodies::Hold), ApiError>
where
    B: http_body::Body<Data = axum::body::Bytes> + Send + Unpin + 'static,
    B::Error: Into<axum::BoxError>,
{
    struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);
    impl<T> Drop for AbortOnDrop<T> {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    if http_body::Body::is_end_stream(&body) {
        return Ok((Collected::Whole(axum::body::Bytes::new()), room));
    }
    if worker::on_worker() {
        return collect(body, limit, room).await;
    }
    let mut read = AbortOnDrop(tokio::spawn(collect(body, limit, room)));
    match (&mut read.0).await {
        Ok(Ok(b)) => Ok(b),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(forward::unreadable()),
    }
}

/// The data of `body` up to `limit` bytes, until the body ends or says it has, each piece in `room` (see
/// [`bodies`]): past the room left, what was read goes on with the rest, uncached. One chunk is kept as it
/// came.
async fn collect<B>(
    mut body: B,
    limit: usize,
    mut room: bodies::Hold,
) -> Result<(Collected<B>, bodies::Hold), ApiError>
where
    B: http_body::Body<Data = axum::body::Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    // The room holds what the body's length said ahead (see `forward::body_room`): more is taken as it comes.
    let mut counted = room.held();
    let (mut chunks, mut len) = (Vec::new(), 0);
    while !http_body::Body::is_end_stream(&body) {
        let Some(frame) = body.frame().await else {
            break;
        };
        let stalled = |e: B::Error| Stalled::caused(&*e.into()) == Some(Side::Caller);
        let frame = frame.map_err(|e| forward::body_failed(stalled(e)))?;
        if let Ok(data) = frame.into_data() {
            len += data.len();
            chunks.push(data);
            if len > limit {
                return Ok((Collected::Over(chunks, body), room));
            }
            if len > counted {
                if !room.grow(len - counted) {
                    room.bodies().passed_uncached();
                    return Ok((Collected::Over(chunks, body), room));
                }
                counted = len;
            }
        }
    }
    let whole = match chunks.len() {
        0 | 1 => chunks.pop().unwrap_or_default(),
        _ => chunks.concat().into(),
    };
    Ok((Collected::Whole(whole), room))
}

/// What was read of a body, then the rest of it as it comes.
pub(super) fn read_then_rest<B>(read: Vec<axum::body::Bytes>, rest: B) -> Body
where
    B: http_body::Body<Data = axum::body::Bytes> + Send + Unpin + 'static,
    B::Error: Into<axum::BoxError>,
{
    Body::new(ReadThenRest {
        read: read.into(),
        rest,
    })
}

struct ReadThenRest<B> {
    read: std::collections::VecDeque<axum::body::Bytes>,
    rest: B,
}

impl<B> http_body::Body for ReadThenRest<B>
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
        if let Some(data) = self.read.pop_front() {
            return std::task::Poll::Ready(Some(Ok(http_body::Frame::data(data))));
        }
        // A body that says it has ended may not answer again (hyper's, until its connection notices).
        if self.rest.is_end_stream() {
            return std::task::Poll::Ready(None);
        }
        std::pin::Pin::new(&mut self.rest)
            .poll_frame(cx)
            .map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.read.is_empty() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        let read = self.read.iter().map(|b| b.len() as u64).sum::<u64>();
        let rest = self.rest.size_hint();
        // The upper bound first: a lower one may not be set above it.
        let mut hint = http_body::SizeHint::new();
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper.saturating_add(read));
        }
        hint.set_lower(rest.lower().saturating_add(read));
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    /// A body of known length that hands out `chunks`, then, if asked again, never answers (as hyper's
    /// channel does until the connection has noticed the end).
    struct Known {
        chunks: Vec<&'static [u8]>,
        left: usize,
    }

    impl http_body::Body for Known {
        type Data = axum::body::Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
            if self.chunks.is_empty() {
                return std::task::Poll::Pending;
            }
            let chunk = self.chunks.remove(0);
            self.left -= chunk.len();
            std::task::Poll::Ready(Some(Ok(http_body::Frame::data(chunk.into()))))
        }

        fn is_end_stream(&self) -> bool {
            self.left == 0
        }

        fn size_hint(&self) -> http_body::SizeHint {
            http_body::SizeHint::with_exact(self.left as u64)
        }
    }

    fn known(chunks: &[&'static [u8]]) -> Body {
        let left = chunks.iter().map(|c| c.len()).sum();
        Body::new(Known {
            chunks: chunks.to_vec(),
            left,
        })
    }

    #[tokio::test]
    async fn a_body_read_ends_when_the_body_says_so() {
        let read = read_for_cache(known(&[b"{\"inputs\":", b"\"x\"}"]), 1024, room(1 << 20));
        let read = tokio::time::timeout(Duration::from_secs(10), read).await;
        let (Collected::Whole(bytes), _) = read.expect("no wait past the last byte").expect("read")
        else {
            panic!("all of it fits")
        };
        assert_eq!(&bytes[..], br#"{"inputs":"x"}"#);
        // Too large, by its announced length or by what came: handed back whole, what was read first.
        let over = |c: (Collected<Body>, bodies::Hold)| match c.0 {
            Collected::Over(read, rest) => read_then_rest(read, rest),
            Collected::Whole(_) => panic!("over the limit"),
        };
        let announced = over(
            read_for_cache(known(&[b"12345"]), 4, room(1 << 20))
                .await
                .expect("read"),
        );
        let bytes = announced.collect().await.expect("passed").to_bytes();
        assert_eq!(&bytes[..], b"12345");
        let parts = [Ok::<_, std::io::Error>("123"), Ok("45"), Ok("678")];
        let stream = futures_util::stream::iter(parts);
        let came = over(
            read_for_cache(Body::from_stream(stream), 4, room(1 << 20))
                .await
                .expect("read"),
        );
        let bytes = came.collect().await.expect("passed").to_bytes();
        assert_eq!(&bytes[..], b"12345678");
        // Past the room left for bodies, the same: what was read goes on with the rest, uncached.
        let parts = [Ok::<_, std::io::Error>("12"), Ok("34"), Ok("56")];
        let stream = futures_util::stream::iter(parts);
        let room = room(3);
        let bodies = Arc::clone(&room.bodies);
        let came = over(
            read_for_cache(Body::from_stream(stream), 1024, room)
                .await
                .expect("read"),
        );
        assert_eq!(bodies.usage(), (0, 1), "given back, and counted");
        let bytes = came.collect().await.expect("passed").to_bytes();
        assert_eq!(&bytes[..], b"123456");
    }

    /// Room for bodies, `max` bytes in all.
    fn room(max: usize) -> bodies::Hold {
        let bodies = Arc::new(bodies::Bodies::new(max));
        bodies.take(0).expect("room for nothing")
    }

    #[tokio::test]
    async fn a_dropped_request_stops_its_body_read() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(1);
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        let read = read_for_cache(Body::from_stream(stream), 1024, room(1 << 20));
        // The body never ends: the read is still waiting when the request is given up.
        let waited = tokio::time::timeout(Duration::from_millis(50), read).await;
        assert!(waited.is_err(), "the body cannot have been read");
        // The reading task let go of the body, so its sender sees the channel closed.
        let closed = tokio::time::timeout(Duration::from_secs(10), tx.closed()).await;
        assert!(
            closed.is_ok(),
            "the body read went on after the request was dropped"
        );
    }
}
