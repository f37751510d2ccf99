//! Busy polling on the data-plane workers (`proxy.busy_poll_us`): for a short while after its last
//! request, a worker looks for events without going to sleep, so that a replica's answer or a caller's next
//! request is taken as it comes, not after the thread (and often its CPU) has been woken up for it.
//!
//! A thread asleep in `epoll_wait` is woken by the kernel when data comes. That costs microseconds on bare
//! metal (more from a deep idle state) and tens of them on a virtual machine, where waking an idle virtual
//! CPU is a round trip through the hypervisor; with one request in flight at a time, it is most of what a
//! proxy adds. So each worker has a poller task. While the worker had a request within the window, the
//! poller gives the CPU to any other thread that wants it (`sched_yield`) and then yields to the runtime,
//! and a current-thread runtime with a yielded task polls its event driver with a zero timeout instead of
//! sleeping; requests and their I/O run between the poller's turns as usual. When the CPU is wanted
//! elsewhere (a yield that gave it away for longer than [`CONTENDED`]: under load, the callers and the
//! replicas need it), the poller steps aside for [`BACK_OFF`], parked. Once nothing has happened for the
//! window it parks, and the worker sleeps as before until a request wakes it: an idle server does no work
//! for it.
//!
//! The cost is CPU, at most the window's worth after each request: a worker whose requests come one at a
//! time, back to back, keeps its core busy. That is the price of polling (as of the kernel's own
//! `net.core.busy_poll`, or a poll-mode server); `busy_poll_us = 0` turns it off.

use std::cell::Cell;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

/// A yield that kept the poller off the CPU for longer than this gave it to a thread that had work: the
/// machine is busy, and polling would take from that work.
const CONTENDED: Duration = Duration::from_micros(30);
/// How long the poller steps aside when the CPU is wanted elsewhere: it parks, and the requests in that time
/// do not wake it (no timer wakes it either).
const BACK_OFF: Duration = Duration::from_millis(2);

thread_local! {
    /// This worker's window; zero on any thread without a poller.
    static WINDOW: Cell<Duration> = const { Cell::new(Duration::ZERO) };
    /// When this worker last had a request.
    static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
    /// Until when the poller stays aside: the CPU was wanted elsewhere.
    static ASIDE_UNTIL: Cell<Option<Instant>> = const { Cell::new(None) };
    /// The poller, while it is parked.
    static PARKED: Cell<Option<Waker>> = const { Cell::new(None) };
}

/// Says that this worker has a request: it polls for at least its window from now before it sleeps.
/// Nothing on a thread without a poller.
pub(super) fn busy() {
    if WINDOW.get().is_zero() {
        return;
    }
    let now = Instant::now();
    LAST.set(Some(now));
    if stepped_aside(now) {
        return;
    }
    if let Some(poller) = PARKED.take() {
        poller.wake();
    }
}

/// Whether the poller is to stay aside at `now` (see [`BACK_OFF`]).
fn stepped_aside(now: Instant) -> bool {
    ASIDE_UNTIL.get().is_some_and(|until| now < until)
}

/// Whether this worker had a request within its window.
fn recent() -> bool {
    let window = WINDOW.get();
    LAST.get().is_some_and(|t| t.elapsed() < window)
}

/// The poller of this thread's worker (on a current-thread runtime) with `window`, until the runtime
/// ends. A zero window does nothing.
pub(super) async fn run(window: Duration) {
    if window.is_zero() {
        return;
    }
    WINDOW.set(window);
    loop {
        while recent() {
            let yielded = Instant::now();
            std::thread::yield_now();
            let back = Instant::now();
            if back - yielded > CONTENDED {
                ASIDE_UNTIL.set(Some(back + BACK_OFF));
                break;
            }
            tokio::task::yield_now().await;
        }
        parked().await;
    }
}

/// Resolves at the next [`busy`] that does not come while the poller stays aside.
async fn parked() {
    std::future::poll_fn(|cx| {
        if recent() && !stepped_aside(Instant::now()) {
            return Poll::Ready(());
        }
        PARKED.set(Some(cx.waker().clone()));
        Poll::Pending
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the poller is parked (waiting for a request).
    fn is_parked() -> bool {
        let waker = PARKED.take();
        let parked = waker.is_some();
        PARKED.set(waker);
        parked
    }

    #[test]
    fn polls_for_its_window_after_a_request_then_sleeps() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let window = Duration::from_millis(200);
            tokio::spawn(run(window));
            tokio::task::yield_now().await;
            assert!(is_parked(), "no request yet: the poller sleeps");
            busy();
            assert!(!is_parked(), "a request wakes the poller");
            // Other tasks run while it polls.
            let mut turns = 0;
            while recent() && turns < 3 {
                tokio::task::yield_now().await;
                turns += 1;
            }
            // Unless a busy machine gave its CPU to others for long enough that it stepped aside.
            let excused = ASIDE_UNTIL.get().is_some();
            assert!(
                !is_parked() || excused,
                "within its window the poller polls"
            );
            tokio::time::sleep(window * 4).await;
            assert!(
                is_parked(),
                "a window with no request: the poller sleeps again"
            );
            busy();
            assert!(!is_parked());
        });
    }

    #[test]
    fn a_poller_that_stepped_aside_is_not_woken_until_its_time_is_up() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            tokio::spawn(run(Duration::from_secs(60)));
            tokio::task::yield_now().await;
            assert!(is_parked());
            ASIDE_UNTIL.set(Some(Instant::now() + Duration::from_secs(3600)));
            busy();
            tokio::task::yield_now().await;
            assert!(is_parked(), "requests while it stays aside leave it parked");
            ASIDE_UNTIL.set(Some(Instant::now()));
            busy();
            assert!(!is_parked(), "the first request after its time wakes it");
        });
    }

    #[test]
    fn without_a_poller_a_request_marks_nothing() {
        busy();
        assert!(!recent());
        assert!(!is_parked());
    }
}
