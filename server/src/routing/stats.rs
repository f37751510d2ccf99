//! The live counters of each endpoint: its activity for the reconciler, its traffic stats for `/metrics`.
//!
//! [`Activity`] (last request, requests in flight, wake-up asked, requests held) is what the reconciler
//! and the scaler read; [`EndpointStats`] (requests by status, latency) is what `/metrics` renders.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};

/// Live counters of one endpoint, shared by the proxy (writer) and the reconciler (reader). They outlive
/// routing-table rebuilds.
#[derive(Debug, Default)]
pub struct Activity {
    /// Unix milliseconds of the last request that reached (or asked to wake) the endpoint.
    last_request_ms: AtomicI64,
    /// Requests in flight through the proxy.
    pub in_flight: AtomicU32,
    /// Set by a request to a scaled-to-zero endpoint; taken by the reconciler.
    wake: AtomicBool,
    /// Requests held while the endpoint wakes up.
    pub waiting: AtomicU32,
    pub stats: EndpointStats,
}

impl Activity {
    pub fn touch(&self, now: DateTime<Utc>) {
        self.last_request_ms
            .fetch_max(now.timestamp_millis(), Ordering::Relaxed);
    }

    pub fn last_request(&self) -> Option<DateTime<Utc>> {
        match self.last_request_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => DateTime::from_timestamp_millis(ms),
        }
    }

    pub fn request_wake(&self) {
        self.wake.store(true, Ordering::Release);
    }

    pub fn take_wake(&self) -> bool {
        self.wake.swap(false, Ordering::AcqRel)
    }
}

/// Upper bounds of the latency buckets, in seconds.
pub const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// Status codes counted one by one; anything outside 100..600 is counted as 0 (unknown).
const STATUSES: usize = 600;

#[derive(Debug)]
pub struct EndpointStats {
    /// One counter per status code: a request only adds to an atomic, no lock.
    by_status: Box<[AtomicU64]>,
    /// Each request counts once, in its own bucket (the last slot is +Inf); cumulative sums are made when
    /// rendering.
    pub(super) buckets: [AtomicU64; BUCKETS.len() + 1],
    pub(super) sum_micros: AtomicU64,
    pub(super) cache_hits: AtomicU64,
}

impl Default for EndpointStats {
    fn default() -> Self {
        EndpointStats {
            by_status: (0..STATUSES).map(|_| AtomicU64::new(0)).collect(),
            buckets: Default::default(),
            sum_micros: AtomicU64::new(0),
            cache_hits: AtomicU64::new(0),
        }
    }
}

impl EndpointStats {
    pub fn record(&self, status: u16, took: Duration) {
        let slot = if (100..STATUSES as u16).contains(&status) {
            status as usize
        } else {
            0
        };
        self.by_status[slot].fetch_add(1, Ordering::Relaxed);
        let secs = took.as_secs_f64();
        let bucket = BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(BUCKETS.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    }

    pub fn cache_hit(&self) {
        self.cache_hits.fetch_add(1, Ordering::Relaxed);
    }

    /// (status, count) for every status seen.
    pub(super) fn statuses(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.by_status
            .iter()
            .enumerate()
            .map(|(s, n)| (s, n.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
    }
}
