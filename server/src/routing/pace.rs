//! Bounds on pauses: how long a body, or a connection's writes, may wait on the other side with nothing
//! moving. What counts is each wait, not the whole: a stream may take as long as it likes in all.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// How long a wait may last: since when it has, and a timer for when that runs out (made the first time
/// something has to wait, and set again only after it moved).
struct Pause {
    limit: Duration,
    since: Option<Instant>,
    timer: Option<Pin<Box<Sleep>>>,
}

impl Pause {
    fn new(limit: Duration) -> Pause {
        Pause {
            limit,
            since: None,
            timer: None,
        }
    }

    /// Something moved: the next wait starts anew.
    fn moved(&mut self) {
        self.since = None;
    }

    /// Whether the wait going on (begun at the first call since the last move) has lasted too long; else
    /// the task is woken when it may have.
    fn over(&mut self, cx: &mut Context<'_>) -> bool {
        use std::future::Future;
        let due = *self.since.get_or_insert_with(Instant::now) + self.limit;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
        if timer.deadline() != due {
            timer.as_mut().reset(due);
        }
        timer.as_mut().poll(cx).is_ready()
    }

    /// `polled` as the pause lets it be: `stalled()` once the wait going on has lasted too long.
    fn pace<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<T>,
        stalled: impl FnOnce() -> T,
    ) -> Poll<T> {
        match polled {
            Poll::Pending if self.over(cx) => Poll::Ready(stalled()),
            Poll::Pending => Poll::Pending,
            done => {
                self.moved();
                done
            }
        }
    }
}

/// Who kept the proxy waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The caller (`proxy.caller_timeout_s`).
    Caller,
    /// The replica (`proxy.replica_timeout_s`).
    Replica,
}

/// A wait that went on for too long: on whom, and what it was.
#[derive(Clone, Copy, Debug)]
pub struct Stalled {
    pub side: Side,
    pub what: &'static str,
}

impl std::fmt::Display for Stalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.what)
    }
}

impl std::error::Error for Stalled {}

/// The first `T` in `e`'s chain of causes (`e` included), an I/O error's inner error included:
/// `io::Error::source` skips that one.
fn in_chain<'e, T: std::error::Error + 'static>(
    e: &'e (dyn std::error::Error + 'static),
) -> Option<&'e T> {
    std::iter::successors(Some(e), |e| e.source()).find_map(|e| {
        let inner = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref());
        let inner = inner.and_then(|i| i.downcast_ref::<T>());
        e.downcast_ref::<T>().or(inner)
    })
}

impl Stalled {
    /// On whom the wait that caused `e` was, when a [`Stalled`] did.
    pub fn caused(e: &(dyn std::error::Error + 'static)) -> Option<Side> {
        in_chain::<Stalled>(e).map(|s| s.side)
    }

    /// As an I/O error.
    pub fn io(self) -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::TimedOut, self)
    }
}

/// A [`Paced`] body that failed of itself (not by pausing): a caller's upload cut off or badly framed,
/// or a replica's answer so; on whose side it was.
#[derive(Debug)]
pub struct Broken {
    pub side: Side,
    source: axum::BoxError,
}

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let whose = match self.side {
            Side::Caller => "the request body",
            Side::Replica => "the replica's response body",
        };
        write!(f, "{whose} could not be read: {}", self.source)
    }
}

impl std::error::Error for Broken {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

impl Broken {
    /// Whose body failed, when a [`Broken`] caused `e`.
    pub fn caused(e: &(dyn std::error::Error + 'static)) -> Option<Side> {
        in_chain::<Broken>(e).map(|b| b.side)
    }
}

/// A body whose every wait for its next frame is bounded by a [`Pause`]: one that lasts too long ends the
/// body in a [`Stalled`] error. A wait starts when a frame is asked for and does not come at once; time in
/// which the reader asks for none (it is busy, or waits on its own peer) before that does not count.
pub struct Paced<B> {
    body: B,
    pause: Pause,
    stalled: Stalled,
    passed: Option<Passed>,
    /// When the whole body must have come, and the timer for it (see [`Paced::within`]).
    due: Option<(Instant, Option<Pin<Box<Sleep>>>)>,
}

/// When a [`Paced`] body ended (its last frame passed), for whoever waits on the body's far side
/// meanwhile (the body itself having gone to the one who reads it).
#[derive(Clone)]
pub struct Passed {
    since: Instant,
    /// Nanoseconds after `since` at which the body ended; 0 while it goes on.
    ended: Arc<AtomicU64>,
}

impl Passed {
    fn new() -> Passed {
        Passed {
            since: Instant::now(),
            ended: Arc::new(AtomicU64::new(0)),
        }
    }

    fn end(&self) {
        let at = u64::try_from(self.since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.ended.store(at.max(1), Ordering::Relaxed);
    }

    /// When the body ended, if it has.
    pub fn ended(&self) -> Option<Instant> {
        match self.ended.load(Ordering::Relaxed) {
            0 => None,
            at => Some(self.since + Duration::from_nanos(at)),
        }
    }
}

impl<B> Paced<B> {
    /// `body`, each wait of which is bounded by `limit`; `stalled` is the error when one is not.
    pub fn new(body: B, limit: Duration, stalled: Stalled) -> Paced<B> {
        Paced {
            body,
            pause: Pause::new(limit),
            stalled,
            passed: None,
            due: None,
        }
    }

    /// The body must also have come whole within `whole` from now, however steadily its frames come: past
    /// it, it ends in the same [`Stalled`] error.
    pub fn within(mut self, whole: Duration) -> Paced<B> {
        self.due = Some((Instant::now() + whole, None));
        self
    }

    /// Whether the whole body's time ran out; else, while it waits, the task is woken when it does.
    fn overdue(&mut self, cx: &mut Context<'_>, waiting: bool) -> bool {
        use std::future::Future;
        let Some((due, timer)) = &mut self.due else {
            return false;
        };
        if Instant::now() >= *due {
            return true;
        }
        if waiting {
            let timer = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(*due)));
            return timer.as_mut().poll(cx).is_ready();
        }
        false
    }

    /// When the body ends, once it has (see [`Passed`]).
    pub fn passed(&mut self) -> Passed {
        self.passed.get_or_insert_with(Passed::new).clone()
    }
}

impl<B> http_body::Body for Paced<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let side = self.stalled.side;
        let polled = Pin::new(&mut self.body).poll_frame(cx).map_err(|e| {
            let source = e.into();
            Box::new(Broken { side, source }) as axum::BoxError
        });
        if let (Poll::Ready(frame), Some(passed)) = (&polled, &self.passed) {
            // The end, or the last frame of a body that knows its length.
            let ended = match frame {
                None => true,
                Some(Ok(_)) => self.body.is_end_stream(),
                Some(Err(_)) => false,
            };
            if ended {
                passed.end();
            }
        }
        let stalled = self.stalled;
        let more = !matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_))));
        if more && !self.body.is_end_stream() && self.overdue(cx, polled.is_pending()) {
            return Poll::Ready(Some(Err(Box::new(stalled) as axum::BoxError)));
        }
        self.pause.pace(cx, polled, || {
            Some(Err(Box::new(stalled) as axum::BoxError))
        })
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A connection whose every write is bounded by a [`Pause`]: one that waits on the other side for too
/// long fails with `stalled` (as an I/O error), which ends the connection.
pub struct PacedWrites<IO> {
    io: IO,
    pause: Pause,
    stalled: Stalled,
}

impl<IO> PacedWrites<IO> {
    pub fn new(io: IO, limit: Duration, stalled: Stalled) -> PacedWrites<IO> {
        PacedWrites {
            io,
            pause: Pause::new(limit),
            stalled,
        }
    }

    /// A write's outcome, as the pause lets it be.
    fn paced<T>(
        &mut self,
        cx: &mut Context<'_>,
        wrote: Poll<std::io::Result<T>>,
    ) -> Poll<std::io::Result<T>> {
        let stalled = self.stalled;
        self.pause.pace(cx, wrote, || Err(stalled.io()))
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for PacedWrites<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for PacedWrites<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let wrote = Pin::new(&mut self.io).poll_write(cx, buf);
        self.paced(cx, wrote)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let wrote = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.paced(cx, wrote)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    /// Paced like a write: a shutdown may write what is left to say (see `proxy::guard`), to a caller
    /// that takes nothing.
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let done = Pin::new(&mut self.io).poll_shutdown(cx);
        self.paced(cx, done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test(start_paused = true)]
    async fn each_wait_is_bounded_and_not_the_whole() {
        let (mut feed, fed) = channel();
        let stalled = Stalled {
            side: Side::Replica,
            what: "stalled",
        };
        let mut body = Paced::new(fed, Duration::from_secs(10), stalled);
        let passed = body.passed();
        // Three frames 8 s apart: 24 s in all, no wait over 10 s.
        let feeding = tokio::spawn(async move {
            for part in ["a", "b", "c"] {
                tokio::time::sleep(Duration::from_secs(8)).await;
                feed.send(part).await;
            }
            // Then nothing, for longer than the bound.
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop(feed);
        });
        for part in ["a", "b", "c"] {
            let frame = body.frame().await.expect("a frame").expect("not stalled");
            assert_eq!(frame.into_data().ok().as_deref(), Some(part.as_bytes()));
        }
        assert_eq!(passed.ended(), None, "the body goes on");
        let started = Instant::now();
        let err = body.frame().await.expect("an end").expect_err("stalled");
        assert_eq!(Stalled::caused(&*err), Some(Side::Replica), "{err}");
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        feeding.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn the_end_is_kept_for_whoever_waits_meanwhile() {
        let (mut feed, fed) = channel();
        let stalled = Stalled {
            side: Side::Caller,
            what: "stalled",
        };
        let mut body = Paced::new(fed, Duration::from_secs(10), stalled);
        let passed = body.passed();
        let begun = Instant::now();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            feed.send("a").await;
        });
        assert!(body.frame().await.expect("a frame").is_ok());
        assert_eq!(passed.ended(), None);
        assert!(body.frame().await.is_none(), "the end");
        assert_eq!(passed.ended(), Some(begun + Duration::from_secs(3)));
    }

    #[test]
    fn a_stall_is_found_whoever_wraps_it() {
        #[derive(Debug)]
        struct Around(std::io::Error);
        impl std::fmt::Display for Around {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("around")
            }
        }
        impl std::error::Error for Around {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let stalled = Stalled {
            side: Side::Caller,
            what: "stalled",
        };
        // As an I/O error, whose `source` is not the error it carries; and under another error.
        assert_eq!(Stalled::caused(&stalled.io()), Some(Side::Caller));
        assert_eq!(Stalled::caused(&Around(stalled.io())), Some(Side::Caller));
        let other = std::io::Error::from(std::io::ErrorKind::TimedOut);
        assert_eq!(Stalled::caused(&Around(other)), None);
    }

    /// A body fed from a channel, frame by frame.
    struct Fed(tokio::sync::mpsc::Receiver<&'static str>);

    struct Feed(tokio::sync::mpsc::Sender<&'static str>);

    impl Feed {
        async fn send(&mut self, part: &'static str) {
            let _ = self.0.send(part).await;
        }
    }

    fn channel() -> (Feed, Fed) {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        (Feed(tx), Fed(rx))
    }

    impl http_body::Body for Fed {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
            self.0.poll_recv(cx).map(|part| {
                part.map(|p| Ok(http_body::Frame::data(Bytes::from_static(p.as_bytes()))))
            })
        }
    }
}
