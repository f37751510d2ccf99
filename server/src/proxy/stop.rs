//! A listener's stop, as its connections wait on it (see [`until`]).

use std::future::Future;
use std::task::Poll;

use tokio::sync::watch;

/// Resolves once `rx` has turned true (or its sender is gone).
///
/// Its first poll puts the task's waker on the channel's list, where it stays good for the task's life;
/// after that it looks again only once the channel has had a new value. A connection polls it while it
/// waits for each request, and the waiting future itself would take the list's lock on every poll to
/// renew the waker.
pub(super) fn until(rx: watch::Receiver<bool>) -> impl Future<Output = ()> {
    let probe = rx.clone();
    let mut wait = Box::pin(async move {
        let mut rx = rx;
        let _ = rx.wait_for(|s| *s).await;
    });
    let mut polled = false;
    std::future::poll_fn(move |cx| {
        if polled && matches!(probe.has_changed(), Ok(false)) {
            return Poll::Pending;
        }
        polled = true;
        wait.as_mut().poll(cx)
    })
}
