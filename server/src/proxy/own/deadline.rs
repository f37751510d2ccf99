//! A timer for waits that are each given a time, one after another on one connection (its next request
//! head, the replica's answer to each request).
//!
//! Each wait's deadline is later than the last one's, so moving it only notes the new time: the timer the
//! event loop holds stays where it was, and when it goes off before the time now noted it is set again
//! for that time. Setting a tokio `Sleep` again on every request is a trip through the timer's
//! arithmetic and a reference count taken and dropped; this is a comparison and a store. A deadline
//! moved earlier sets the timer at once.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::time::{Instant, Sleep};

/// A timer whose deadline is set for each wait (see the module's doc).
pub(super) struct Deadline {
    timer: Pin<Box<Sleep>>,
    /// When the current wait's time runs out: never before the timer's own deadline.
    due: Instant,
}

impl Deadline {
    pub(super) fn at(due: Instant) -> Deadline {
        Deadline {
            timer: Box::pin(tokio::time::sleep_until(due)),
            due,
        }
    }

    /// The wait from now on ends at `due`.
    pub(super) fn set(&mut self, due: Instant) {
        if due < self.timer.deadline() {
            self.timer.as_mut().reset(due);
        }
        self.due = due;
    }

    /// Ready once the time set last has come.
    pub(super) fn poll_passed(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            ready!(self.timer.as_mut().poll(cx));
            if self.timer.deadline() >= self.due {
                return Poll::Ready(());
            }
            // Gone off for a wait that has since been given a later time.
            self.timer.as_mut().reset(self.due);
        }
    }

    /// Resolves once the time set last has come.
    pub(super) async fn passed(&mut self) {
        poll_fn(|cx| self.poll_passed(cx)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ready(d: &mut Deadline) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        d.poll_passed(&mut cx).is_ready()
    }

    #[tokio::test(start_paused = true)]
    async fn a_later_time_holds_it_back_past_the_first() {
        let start = Instant::now();
        let mut d = Deadline::at(start + Duration::from_millis(100));
        d.set(start + Duration::from_millis(300));
        tokio::time::advance(Duration::from_millis(150)).await;
        assert!(
            !ready(&mut d),
            "the first time came, but a later one was set"
        );
        tokio::time::advance(Duration::from_millis(149)).await;
        assert!(!ready(&mut d));
        d.passed().await;
        assert!(Instant::now() >= start + Duration::from_millis(300));
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_time_is_kept() {
        let start = Instant::now();
        let mut d = Deadline::at(start + Duration::from_secs(60));
        d.set(start + Duration::from_millis(10));
        d.passed().await;
        let waited = Instant::now() - start;
        assert!(waited >= Duration::from_millis(10), "{waited:?}");
        assert!(waited < Duration::from_secs(1), "{waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn set_again_after_it_went_off_it_waits_anew() {
        let start = Instant::now();
        let mut d = Deadline::at(start + Duration::from_millis(10));
        d.passed().await;
        d.set(Instant::now() + Duration::from_millis(50));
        assert!(
            !ready(&mut d),
            "the time passed before was taken for the new wait's"
        );
        d.passed().await;
        assert!(Instant::now() >= start + Duration::from_millis(60));
    }
}
