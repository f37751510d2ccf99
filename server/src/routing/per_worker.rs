//! State kept once per data-plane worker (and once for every other thread), each copy on cache lines of
//! its own.
//!
//! Two workers writing to one cache line take it from each other's core on every write, and the next
//! read there waits for it: a shared counter touched by every request costs each one a trip between the
//! cores. A worker here writes only its own copy; readers (the scaler, `/metrics`, the balancer) add the
//! copies up.

use std::sync::atomic::{AtomicU32, Ordering};

use super::worker::{slot, worker_slots};

/// One `T` per data-plane worker, and one for every other thread (see [`worker::slot`]).
///
/// [`worker::slot`]: super::worker::slot
pub struct PerWorker<T> {
    copies: Box<[Padded<T>]>,
}

/// Aligned so that no two copies share a cache line (nor the line the hardware fetches beside it).
#[repr(align(128))]
struct Padded<T>(T);

impl<T: Default> Default for PerWorker<T> {
    fn default() -> Self {
        PerWorker {
            copies: (0..=worker_slots()).map(|_| Padded(T::default())).collect(),
        }
    }
}

impl<T> PerWorker<T> {
    /// This thread's copy.
    pub fn mine(&self) -> &T {
        &self.copies[slot().min(self.copies.len() - 1)].0
    }

    /// Every copy, for a reader to add up.
    pub fn all(&self) -> impl Iterator<Item = &T> {
        self.copies.iter().map(|c| &c.0)
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for PerWorker<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.all()).finish()
    }
}

/// A count of things under way (requests in flight), kept per worker: each adds to and takes from its own
/// copy. One may end on another thread than it began on; a copy then wraps below zero, and the sum (taken
/// wrapping) is still the count. The copies are read one after another, not at one instant: a reader that
/// sees such an end before its beginning reads the sum below zero, which it takes as none.
#[derive(Debug, Default)]
pub struct Gauge(PerWorker<AtomicU32>);

impl Gauge {
    pub fn up(&self) {
        self.0.mine().fetch_add(1, Ordering::Relaxed);
    }

    pub fn down(&self) {
        self.0.mine().fetch_sub(1, Ordering::Relaxed);
    }

    /// The count now: what began and has not ended, on every thread.
    pub fn get(&self) -> u32 {
        // Below zero, as an `i32`: an end seen before its beginning.
        u32::try_from(self.sum() as i32).unwrap_or(0)
    }

    /// The copies added up, wrapping.
    fn sum(&self) -> u32 {
        self.0
            .all()
            .fold(0u32, |sum, c| sum.wrapping_add(c.load(Ordering::Relaxed)))
    }

    /// Sets the count to `n` (this thread's copy takes the difference).
    #[cfg(test)]
    pub fn set(&self, n: u32) {
        let others = self
            .sum()
            .wrapping_sub(self.0.mine().load(Ordering::Relaxed));
        self.0
            .mine()
            .store(n.wrapping_sub(others), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_are_apart() {
        let p: PerWorker<AtomicU32> = PerWorker::default();
        let at: Vec<usize> = p.all().map(|c| c as *const _ as usize).collect();
        assert!(at.len() >= 2);
        for pair in at.windows(2) {
            assert!(pair[1] - pair[0] >= 128, "{at:?}");
        }
    }

    #[test]
    fn a_count_ended_on_another_thread_still_adds_up() {
        let g = std::sync::Arc::new(Gauge::default());
        g.up();
        g.up();
        let other = std::sync::Arc::clone(&g);
        std::thread::spawn(move || {
            crate::routing::worker::enter_worker(0);
            other.down();
            other.down();
            other.up();
        })
        .join()
        .expect("thread");
        assert_eq!(g.get(), 1);
        g.down();
        assert_eq!(g.get(), 0);
        g.down();
        assert_eq!(
            g.get(),
            0,
            "an end read before its beginning is none, not 4 billion"
        );
        g.up();
        g.set(7);
        assert_eq!(g.get(), 7);
    }
}
