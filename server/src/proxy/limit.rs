//! The bound on a listener's open connections (`proxy.max_connections`). A connection is counted from its
//! accept to its end. At the bound, the listener asks the connections that have waited at least
//! [`SHED_AFTER`] for their next request to close (on hyper's path: that have had nothing from the caller
//! for that long, closed once their requests are answered), as nginx drains its idle keep-alive
//! connections when it runs out, and accepts nothing more until one has closed: each of the listener's
//! workers holds the one connection it accepted last until there is room for it, and the rest wait in the
//! kernel's backlog rather than each holding buffers here. No request going is cut for room.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::{watch, Notify};

/// How long a connection must have waited for its next request to be closed for room: one that has just
/// been answered, or has just connected, is about to be used.
pub const SHED_AFTER: Duration = Duration::from_secs(1);

/// One listener's connections.
pub struct Limit {
    open: AtomicUsize,
    max: usize,
    /// Bumped to ask idle connections to make room (see [`Squeezes`]).
    squeeze: watch::Sender<u64>,
    /// A connection closed.
    freed: Notify,
    /// Idle connections closed to make room.
    shed: AtomicU64,
    /// Times the listener found itself at the bound.
    full: AtomicU64,
}

/// A connection counted open; counted closed when dropped.
pub struct Open(Arc<Limit>);

impl Limit {
    pub fn new(max: usize) -> Arc<Limit> {
        Arc::new(Limit {
            open: AtomicUsize::new(0),
            max: max.max(1),
            squeeze: watch::Sender::new(0),
            freed: Notify::new(),
            shed: AtomicU64::new(0),
            full: AtomicU64::new(0),
        })
    }

    /// A place for one more connection, if there is: counted open until the place is dropped.
    pub fn reserve(self: &Arc<Self>) -> Option<Open> {
        let max = self.max;
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Open(self.clone()))
    }

    /// At the bound: idle connections are asked to close; resolves once some connection has closed (or a
    /// moment has passed, to ask again).
    pub async fn make_room(&self) {
        self.full.fetch_add(1, Ordering::Relaxed);
        let freed = self.freed.notified();
        tokio::pin!(freed);
        freed.as_mut().enable();
        self.squeeze.send_modify(|n| *n += 1);
        let _ = tokio::time::timeout(Duration::from_millis(100), freed).await;
    }

    /// The listener's asks to make room, for one connection to follow.
    pub fn squeezes(&self) -> Squeezes {
        Squeezes {
            probe: self.squeeze.subscribe(),
            wait: None,
        }
    }

    /// An idle connection closed to make room.
    pub fn shed(&self) {
        self.shed.fetch_add(1, Ordering::Relaxed);
    }

    /// Open connections, the bound, idle ones closed to make room, and times the bound was met.
    pub fn usage(&self) -> (usize, usize, u64, u64) {
        (
            self.open.load(Ordering::Relaxed),
            self.max,
            self.shed.load(Ordering::Relaxed),
            self.full.load(Ordering::Relaxed),
        )
    }
}

/// The listener's asks to make room, as one connection follows them: [`Squeezes::asked`] resolves at the
/// next. Polling it while nothing was asked is one atomic load: it waits on the channel's list only once
/// per ask, not each time the connection waits for a request.
pub struct Squeezes {
    probe: watch::Receiver<u64>,
    wait: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

impl Squeezes {
    /// Resolves at the next ask to make room.
    pub fn asked(&mut self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| self.poll_next(cx))
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.wait.is_some() && matches!(self.probe.has_changed(), Ok(false)) {
            return Poll::Pending;
        }
        let probe = &mut self.probe;
        let wait = self.wait.get_or_insert_with(|| {
            let mut rx = probe.clone();
            Box::pin(async move {
                let _ = rx.changed().await;
            })
        });
        match wait.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.probe.borrow_and_update();
                self.wait = None;
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
        self.0.freed.notify_waiters();
        CLOSED.fetch_add(1, Ordering::Relaxed);
    }
}

/// Connections closed in this process, on every listener.
static CLOSED: AtomicU64 = AtomicU64::new(0);

/// Gives the memory that closed connections freed back to the system until `stop`: the C library's
/// allocator keeps the small buffers of thousands of closed connections in its arenas (measured: 3,000 idle
/// connections took 40 MB that stayed after they closed). Every 5 s, once 256 or more connections have
/// closed since it last did, it asks the allocator to let go of what it holds free.
pub async fn give_back_memory(mut stop: watch::Receiver<bool>) {
    const EVERY: Duration = Duration::from_secs(5);
    const AFTER: u64 = 256;
    let mut trimmed_at = CLOSED.load(Ordering::Relaxed);
    loop {
        tokio::select! {
            () = tokio::time::sleep(EVERY) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let closed = CLOSED.load(Ordering::Relaxed);
        if closed.wrapping_sub(trimmed_at) >= AFTER {
            trimmed_at = closed;
            trim();
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    // SAFETY: malloc_trim only walks the allocator's own arenas, under their locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Other C libraries give freed memory back by themselves, or have no such call.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_bound_holds_and_an_idle_connection_makes_room() {
        let limit = Limit::new(2);
        let a = limit.reserve().expect("room");
        let _b = limit.reserve().expect("room");
        assert!(limit.reserve().is_none(), "at the bound");
        // The idle connection `a` closes when asked; the listener then finds room.
        let mut squeezes = limit.squeezes();
        let idle = {
            let limit = limit.clone();
            tokio::spawn(async move {
                squeezes.asked().await;
                limit.shed();
                drop(a);
                // Asked once: nothing more comes until the listener asks again.
                let again = tokio::time::timeout(Duration::from_millis(20), squeezes.asked());
                assert!(again.await.is_err());
            })
        };
        tokio::task::yield_now().await;
        limit.make_room().await;
        assert!(limit.reserve().is_some(), "room made");
        idle.await.expect("idle");
        let (open, max, shed, full) = limit.usage();
        assert_eq!((open, max, shed, full), (1, 2, 1, 1));
    }
}
