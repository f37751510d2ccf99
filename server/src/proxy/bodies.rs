//! Room for request bodies read whole before they go on (a cached endpoint's body is part of the cache's
//! key): one bound for all connections at once (`proxy.body_buffer_bytes`). A body that finds no room goes
//! on to the replica as it comes, uncached, so slow or stalled uploads cannot pile up memory.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// The bytes held for bodies, and the bound.
pub struct Bodies {
    held: AtomicUsize,
    max: usize,
    /// Bodies that found no room and went on uncached.
    passed_uncached: AtomicU64,
}

/// Room taken for one body; given back when dropped.
pub struct Hold {
    pub(super) bodies: Arc<Bodies>,
    n: usize,
}

impl Bodies {
    pub fn new(max: usize) -> Bodies {
        Bodies {
            held: AtomicUsize::new(0),
            max,
            passed_uncached: AtomicU64::new(0),
        }
    }

    /// Room for `n` bytes, if there is.
    pub fn take(self: &Arc<Self>, n: usize) -> Option<Hold> {
        let mut hold = Hold {
            bodies: self.clone(),
            n: 0,
        };
        hold.grow(n).then_some(hold)
    }

    /// A body found no room: it went on uncached.
    pub fn passed_uncached(&self) {
        self.passed_uncached.fetch_add(1, Ordering::Relaxed);
    }

    /// Bytes held now, and bodies passed uncached so far.
    pub fn usage(&self) -> (usize, u64) {
        (
            self.held.load(Ordering::Relaxed),
            self.passed_uncached.load(Ordering::Relaxed),
        )
    }
}

impl Hold {
    /// The room this was taken from.
    pub fn bodies(&self) -> &Bodies {
        &self.bodies
    }

    /// The bytes it holds.
    pub fn held(&self) -> usize {
        self.n
    }

    /// `n` more bytes, if there is room for them; false (and nothing taken) when not.
    pub fn grow(&mut self, n: usize) -> bool {
        let bodies = &self.bodies;
        let taken = bodies
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(n).filter(|after| *after <= bodies.max)
            });
        if taken.is_ok() {
            self.n += n;
        }
        taken.is_ok()
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.bodies.held.fetch_sub(self.n, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_is_bounded_and_given_back() {
        let bodies = Arc::new(Bodies::new(100));
        let a = bodies.take(60).expect("room");
        assert!(bodies.take(50).is_none(), "past the bound");
        let mut b = bodies.take(30).expect("room");
        assert!(!b.grow(20), "past the bound");
        assert!(b.grow(10));
        assert_eq!(bodies.usage().0, 100);
        drop(a);
        assert_eq!(bodies.usage().0, 40);
        drop(b);
        assert_eq!(bodies.usage().0, 0);
    }
}
