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
//! sleeping; requests and their I/O run between the poller's turns as usual. Once nothing has happened for
//! the window it parks, and the worker sleeps as before until a request wakes it: an idle server does no
//! work for it.
//!
//! Polling only pays while a CPU would otherwise sit idle. A worker with more than [`FEW`] requests in
//! flight does not poll: its next event comes soon anyway, and so many requests at once mean a loaded
//! machine. When the CPU is wanted elsewhere (a yield that gave it to another thread for longer than
//! [`CONTENDED`]: under load, the callers and the replicas need it) the poller steps aside, asleep on a
//! timer, for [`BACK_OFF`]; for twice as long each time it is wanted again soon after, up to
//! [`MAX_BACK_OFF`]. A loaded machine so sees the poller about ten times a second, and the worker serves its
//! connections as it would without one: a spinning thread would also keep its CPU from taking over work
//! queued on the others.
//!
//! The cost is CPU, at most the window's worth after each request: a worker whose requests come one at a
//! time, back to back, keeps its core busy. That is the price of polling (as of the kernel's own
//! `net.core.busy_poll`, or a poll-mode server); `busy_poll_us = 0` turns it off.

use std::cell::Cell;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

/// A yield that kept the poller off the CPU for longer than this, and in which another thread ran, gave
/// the CPU to a thread that had work: the machine is busy, and polling would take from that work. A thread
/// of the request's own round (the replica answering it, the caller sending its next one), woken onto the
/// poller's CPU, holds it for tens of microseconds and sleeps again: polling is what serves it next. A
/// thread with work of its own keeps the CPU for its time slice, which the scheduler makes 0.7 ms or more.
const CONTENDED: Duration = Duration::from_micros(250);
/// How long the poller first steps aside when the CPU is wanted elsewhere. Requests in that time do not
/// wake it; its timer does.
const BACK_OFF: Duration = Duration::from_millis(2);
/// With more requests than this in flight on a worker, its poller sleeps: the next event comes soon anyway
/// (another request's), and a loaded machine's CPUs are wanted for the callers and the replicas.
const FEW: u32 = 2;
/// The longest the poller steps aside, on a machine whose CPUs are wanted each time it comes back.
const MAX_BACK_OFF: Duration = Duration::from_millis(100);

thread_local! {
    /// Whether this thread's worker has a poller (`busy_poll_us` above zero).
    static POLLER: Cell<bool> = const { Cell::new(false) };
    /// Requests in flight on this worker's own path (see [`in_flight`]).
    static IN_FLIGHT: Cell<u32> = const { Cell::new(0) };
    /// Requests this worker has had (counted by [`busy`]; the poller reads the clock, `busy` does not).
    static REQUESTS: Cell<u64> = const { Cell::new(0) };
    /// The poller, while it is parked waiting for a request (not while it steps aside).
    static PARKED: Cell<Option<Waker>> = const { Cell::new(None) };
    /// Until when the poller steps aside, while it does.
    static ASIDE_UNTIL: Cell<Option<Instant>> = const { Cell::new(None) };
    /// Makes the poller's next yield count as contended.
    #[cfg(test)]
    static CONTEND: Cell<bool> = const { Cell::new(false) };
    /// While set, no yield counts as contended (unless [`CONTEND`] says so): a test's poller is not put
    /// aside by whatever else the machine runs.
    #[cfg(test)]
    static CALM: Cell<bool> = const { Cell::new(false) };
}

/// Says that this worker has a request: it polls for at least its window from now before it sleeps (unless
/// it steps aside, or has more than [`FEW`] requests in flight). Nothing on a thread without a poller.
pub(super) fn busy() {
    if !POLLER.get() {
        return;
    }
    REQUESTS.set(REQUESTS.get().wrapping_add(1));
    if IN_FLIGHT.get() <= FEW {
        if let Some(poller) = PARKED.take() {
            poller.wake();
        }
    }
}

/// A request in flight on this worker from now until the guard is dropped (see [`FEW`]), and [`busy`] as
/// it begins and ends.
pub(super) fn in_flight() -> Flight {
    IN_FLIGHT.set(IN_FLIGHT.get().saturating_add(1));
    busy();
    Flight(())
}

/// See [`in_flight`].
pub(super) struct Flight(());

impl Drop for Flight {
    fn drop(&mut self) {
        IN_FLIGHT.set(IN_FLIGHT.get().saturating_sub(1));
        busy();
    }
}

/// The poller of this thread's worker (on a current-thread runtime) with `window`, until the runtime
/// ends. A zero window does nothing.
pub(super) async fn run(window: Duration) {
    if window.is_zero() {
        return;
    }
    run_with(window, Aside::default()).await
}

/// [`run`], stepping aside as `aside` says.
async fn run_with(window: Duration, mut aside: Aside) {
    POLLER.set(true);
    loop {
        parked(REQUESTS.get()).await;
        poll_while_busy(window, &mut aside).await;
    }
}

/// Polls until a whole `window` has passed without a request (stepping aside when the CPU is wanted, see
/// [`Aside`]), or until more than [`FEW`] requests are in flight.
async fn poll_while_busy(window: Duration, aside: &mut Aside) {
    let (mut seen, mut last) = (REQUESTS.get(), Instant::now());
    let mut switches = switched_out();
    loop {
        if IN_FLIGHT.get() > FEW {
            return;
        }
        let yielded = Instant::now();
        std::thread::yield_now();
        let back = Instant::now();
        // Asked only of a long yield (a system call, a few times a second at most).
        let moved = || {
            let now = switched_out();
            let before = std::mem::replace(&mut switches, now);
            now == u64::MAX || now != before
        };
        if contended(back - yielded, moved) {
            let until = aside.step(back);
            ASIDE_UNTIL.set(Some(until));
            tokio::time::sleep_until(until.into()).await;
            ASIDE_UNTIL.set(None);
            // Back to polling only if requests came meanwhile.
            if REQUESTS.get() == seen {
                return;
            }
            (seen, last) = (REQUESTS.get(), Instant::now());
            continue;
        }
        match REQUESTS.get() {
            now if now != seen => (seen, last) = (now, back),
            _ if back - last >= window => return,
            _ => {}
        }
        tokio::task::yield_now().await;
    }
}

/// Whether a yield that kept the poller off the CPU for `off` says the CPU is wanted elsewhere: when
/// another thread ran meanwhile (`moved`, asked only of a long yield: whether the poller's thread was
/// switched out since the last look). A long
/// yield in which none did was the hypervisor's (another guest's turn on the host's CPU) or an
/// interrupt's: on a virtual machine that happens a hundred times a second on an idle CPU, and stepping
/// aside for it would leave a lone caller without the poller much of the time.
fn contended(off: Duration, moved: impl FnOnce() -> bool) -> bool {
    #[cfg(test)]
    if CONTEND.take() {
        return true;
    }
    #[cfg(test)]
    if CALM.get() {
        return false;
    }
    off > CONTENDED && moved()
}

/// How many times this thread has been switched out so far (voluntarily or not), or `u64::MAX` if that
/// cannot be told (every long yield then counts).
#[cfg(target_os = "linux")]
fn switched_out() -> u64 {
    // SAFETY: `rusage` is plain data, for which all zeroes is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes only the struct it is given.
    match unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) } {
        0 => (usage.ru_nvcsw as u64).wrapping_add(usage.ru_nivcsw as u64),
        _ => u64::MAX,
    }
}

/// [`switched_out`] where a thread's own usage cannot be read (`RUSAGE_THREAD` is Linux's): never told.
#[cfg(not(target_os = "linux"))]
fn switched_out() -> u64 {
    u64::MAX
}

/// How long the poller steps aside each time: [`BACK_OFF`], doubled (up to [`MAX_BACK_OFF`]) each time the
/// CPU is wanted again within as long as the last step aside lasted.
#[derive(Default)]
struct Aside {
    last: Duration,
    ended: Option<Instant>,
}

impl Aside {
    /// Steps aside from `now`: until when.
    fn step(&mut self, now: Instant) -> Instant {
        let again = self
            .ended
            .is_some_and(|ended| now.saturating_duration_since(ended) < self.last);
        self.last = match again {
            true => (self.last * 2).min(MAX_BACK_OFF),
            false => BACK_OFF,
        };
        let until = now + self.last;
        self.ended = Some(until);
        until
    }
}

/// Resolves at the first [`busy`] after `seen` requests.
async fn parked(seen: u64) {
    std::future::poll_fn(|cx| {
        if REQUESTS.get() != seen {
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

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    #[test]
    fn a_long_yield_is_contention_only_when_another_thread_ran() {
        let long = CONTENDED * 2;
        assert!(contended(long, || true));
        assert!(
            !contended(long, || false),
            "the hypervisor's pause, or an interrupt's"
        );
        assert!(!contended(CONTENDED / 2, || true));
        assert!(
            !contended(CONTENDED / 2, || panic!("asked of a short yield")),
            "a short yield makes no system call"
        );
    }

    #[test]
    fn a_thread_that_sleeps_is_counted_switched_out() {
        let before = switched_out();
        std::thread::sleep(Duration::from_millis(2));
        let after = switched_out();
        assert_ne!(after, u64::MAX, "getrusage answers on Linux");
        assert!(after > before, "{before} → {after}");
    }

    #[test]
    fn polls_for_its_window_after_a_request_and_steps_aside_when_the_cpu_is_wanted() {
        runtime().block_on(async {
            // No yield is contended but the one the test makes so, and the window outlasts any pause.
            CALM.set(true);
            tokio::spawn(run(Duration::from_secs(60)));
            tokio::task::yield_now().await;
            assert!(is_parked(), "no request yet: the poller sleeps");
            busy();
            assert!(!is_parked(), "a request wakes the poller");
            // Other tasks run while it polls.
            for _ in 0..3 {
                tokio::task::yield_now().await;
            }
            assert!(!is_parked(), "within its window the poller polls");
            assert_eq!(ASIDE_UNTIL.get(), None, "and does not step aside");
            // A yield that finds the CPU wanted elsewhere: it steps aside (asleep on its timer, not parked).
            CONTEND.set(true);
            tokio::task::yield_now().await;
            assert!(
                ASIDE_UNTIL.get().is_some(),
                "a contended yield: it steps aside"
            );
            assert!(
                !is_parked(),
                "aside is not parked: a request does not wake it"
            );
        });
    }

    #[test]
    fn after_a_window_with_no_request_the_poller_sleeps_again() {
        runtime().block_on(async {
            CALM.set(true);
            let window = Duration::from_millis(20);
            tokio::spawn(run(window));
            tokio::task::yield_now().await;
            busy();
            assert!(!is_parked(), "a request wakes the poller");
            // It polls, and parks once a whole window went by without a request (bounded: a hang fails).
            for _ in 0..500 {
                if is_parked() {
                    break;
                }
                tokio::time::sleep(window).await;
            }
            assert!(
                is_parked(),
                "a window with no request: the poller sleeps again"
            );
            assert_eq!(ASIDE_UNTIL.get(), None, "it never stepped aside");
            busy();
            assert!(!is_parked(), "and the next request wakes it");
        });
    }

    /// A poller that steps aside for [`MAX_BACK_OFF`] at its first contended yield: long enough that no
    /// pause of a busy test machine ends it early.
    fn long_aside() -> Aside {
        Aside {
            last: MAX_BACK_OFF,
            ended: Some(Instant::now()),
        }
    }

    /// A poller woken by a request whose first yield is contended: until when it steps aside.
    async fn stepped_aside() -> Instant {
        tokio::spawn(run_with(Duration::from_secs(60), long_aside()));
        tokio::task::yield_now().await;
        busy();
        CONTEND.set(true);
        tokio::task::yield_now().await;
        ASIDE_UNTIL
            .get()
            .expect("a contended yield: the poller steps aside")
    }

    #[test]
    fn a_poller_that_stepped_aside_is_not_woken_until_its_time_is_up() {
        runtime().block_on(async {
            let until = stepped_aside().await;
            assert!(until > Instant::now());
            busy();
            tokio::task::yield_now().await;
            assert!(!is_parked(), "requests while it stays aside do not wake it");
            assert_eq!(ASIDE_UNTIL.get(), Some(until), "it stays aside");
            tokio::time::sleep_until((until + BACK_OFF).into()).await;
            let again = ASIDE_UNTIL.get();
            assert!(
                again.is_none_or(|again| again > until),
                "its time is up (a busy machine may have put it aside anew)"
            );
            assert!(!is_parked(), "requests came meanwhile: it polls again");
        });
    }

    #[test]
    fn a_poller_aside_with_no_request_meanwhile_sleeps_after() {
        runtime().block_on(async {
            let until = stepped_aside().await;
            tokio::time::sleep_until((until + BACK_OFF).into()).await;
            // A test machine paused past both timers may run this task first: the poller gets its turn.
            for _ in 0..50 {
                if is_parked() {
                    break;
                }
                tokio::time::sleep(BACK_OFF).await;
            }
            assert!(is_parked(), "no request while aside: it sleeps until one");
        });
    }

    #[test]
    fn with_more_than_a_few_requests_in_flight_the_poller_sleeps() {
        runtime().block_on(async {
            tokio::spawn(run(Duration::from_secs(60)));
            tokio::task::yield_now().await;
            let mut flights: Vec<Flight> = (0..=FEW).map(|_| in_flight()).collect();
            tokio::task::yield_now().await;
            tokio::task::yield_now().await;
            assert!(is_parked(), "more than a few in flight: the poller sleeps");
            busy();
            assert!(is_parked(), "and requests meanwhile do not wake it");
            drop(flights.pop());
            assert!(!is_parked(), "back to a few in flight: it polls again");
            drop(flights);
            assert_eq!(IN_FLIGHT.get(), 0, "each request ends once");
        });
    }

    #[test]
    fn stepping_aside_again_soon_after_doubles_up_to_the_most() {
        let mut aside = Aside::default();
        let t0 = Instant::now();
        let first = aside.step(t0);
        assert_eq!(first - t0, BACK_OFF);
        // Wanted again just after it came back: twice as long, and so on up to the most.
        let mut at = first + Duration::from_micros(100);
        let mut lengths = Vec::new();
        for _ in 0..10 {
            let until = aside.step(at);
            lengths.push(until - at);
            at = until + Duration::from_micros(100);
        }
        assert_eq!(lengths[0], BACK_OFF * 2);
        assert_eq!(lengths[1], BACK_OFF * 4);
        assert_eq!(*lengths.last().expect("lengths"), MAX_BACK_OFF);
        assert!(lengths.iter().all(|l| *l <= MAX_BACK_OFF));
        // A calm spell longer than the last step aside: back to the first length.
        let calm = at + MAX_BACK_OFF * 2;
        assert_eq!(aside.step(calm) - calm, BACK_OFF);
    }

    #[test]
    fn without_a_poller_a_request_marks_nothing() {
        busy();
        assert_eq!(REQUESTS.get(), 0);
        assert!(!is_parked());
    }
}
