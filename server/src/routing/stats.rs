//! The live counters of each endpoint: its activity for the reconciler, its traffic stats for `/metrics`.
//!
//! [`Activity`] (last request, requests in flight, wake-up asked, requests held) is what the reconciler
//! and the scaler read; [`EndpointStats`] (requests by status, latency) is what `/metrics` renders.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::per_worker::{Gauge, PerWorker};
use crate::model::analytics::{status_class, Sample, LATENCY_BUCKETS};

/// Live counters of one endpoint, shared by the proxy (writer) and the reconciler (reader). They outlive
/// routing-table rebuilds.
#[derive(Debug, Default)]
pub struct Activity {
    /// Unix milliseconds of the last request that reached (or asked to wake) the endpoint.
    last_request_ms: AtomicI64,
    /// Requests in flight through the proxy.
    pub in_flight: Gauge,
    /// Set by a request to a scaled-to-zero endpoint; taken by the reconciler.
    wake: AtomicBool,
    /// Requests held while the endpoint wakes up.
    pub waiting: AtomicU32,
    /// Requests in flight through the other servers' proxies, as they last reported (several servers on
    /// one store: the leader's scaler counts them with its own).
    elsewhere_in_flight: AtomicU32,
    pub stats: EndpointStats,
    /// The fleet as the leader's reconciler last saw it, for the analytics recorder.
    fleet: Mutex<Option<Fleet>>,
    /// The request that last asked the endpoint to wake (`GET /path`), for the decision's reason.
    woken_by: Mutex<Option<String>>,
}

/// An endpoint's replicas as the leader's reconciler saw them at `at_ms` (Unix milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Fleet {
    pub at_ms: i64,
    pub ready: u32,
    pub target: u32,
    /// Mean CPU use of a ready replica, percent of one core.
    pub cpu_percent: Option<f64>,
    /// The engines' requests waiting (mean per replica) and KV-cache use (percent), where they are read.
    pub queue: Option<f64>,
    pub kv_cache_percent: Option<f64>,
}

/// An endpoint's counters, added up over the workers.
#[derive(Debug, Clone, PartialEq)]
pub struct Counted {
    /// (status, requests) for every status seen; 0 for none.
    pub statuses: Vec<(usize, u64)>,
    /// Requests by latency bucket (see [`BUCKETS`]), the last +Inf.
    pub latency: [u64; LATENCY_BUCKETS],
    pub sum_seconds: f64,
    pub cache_hits: u64,
}

/// Fleet figures older than this are not read.
const FLEET_FRESH_MS: i64 = 30_000;

/// Longest a request path kept as the reason of a wake-up.
const WOKEN_BY_MAX: usize = 200;

impl Activity {
    /// Records a request at `ms` (Unix milliseconds, see `Clock::now_millis`).
    pub fn touch(&self, ms: i64) {
        // Written once per millisecond at most: requests within one only read it, and the cache line stays
        // shared between the cores instead of moving to each request's.
        if self.last_request_ms.load(Ordering::Relaxed) < ms {
            self.last_request_ms.fetch_max(ms, Ordering::Relaxed);
        }
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

    /// Says which request asks the endpoint to wake (see [`Self::take_woken_by`]).
    pub fn woken_by(&self, mut request: String) {
        if request.len() > WOKEN_BY_MAX {
            let mut cut = WOKEN_BY_MAX;
            while !request.is_char_boundary(cut) {
                cut -= 1;
            }
            request.truncate(cut);
            request.push('…');
        }
        *lock(&self.woken_by) = Some(request);
    }

    /// The request that last asked the endpoint to wake on this server, if one did.
    pub fn woken_by_request(&self) -> Option<String> {
        lock(&self.woken_by).clone()
    }

    /// Forgets the request that asked the endpoint to wake (it is up, or the wake-up went to the leader).
    pub fn forget_woken_by(&self) {
        lock(&self.woken_by).take();
    }

    /// Publishes the fleet's figures (the leader's reconciler, each pass).
    pub fn set_fleet(&self, fleet: Fleet) {
        *lock(&self.fleet) = Some(fleet);
    }

    /// The fleet's figures at `now_ms`, when published within [`FLEET_FRESH_MS`] of it (a leader that
    /// stepped down publishes no more).
    pub fn fleet(&self, now_ms: i64) -> Option<Fleet> {
        lock(&self.fleet).filter(|f| f.at_ms >= now_ms - FLEET_FRESH_MS)
    }

    /// Requests held now while the endpoint starts.
    pub fn waiting_now(&self) -> u32 {
        self.waiting.load(Ordering::Relaxed)
    }

    /// What the other servers reported: their latest request (Unix milliseconds, 0 for none), their
    /// requests in flight, and whether one asked the endpoint to wake.
    pub fn heard(&self, last_request_ms: i64, in_flight: u32, wake: bool) {
        if last_request_ms > 0 {
            self.touch(last_request_ms);
        }
        self.elsewhere_in_flight.store(in_flight, Ordering::Relaxed);
        if wake {
            self.request_wake();
        }
    }

    /// Requests in flight through this server's proxy and, as last reported, the others'.
    pub fn in_flight_everywhere(&self) -> u32 {
        self.in_flight
            .get()
            .saturating_add(self.elsewhere_in_flight.load(Ordering::Relaxed))
    }

    /// Unix milliseconds of the last request (0: none).
    pub fn last_request_ms(&self) -> i64 {
        self.last_request_ms.load(Ordering::Relaxed)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Upper bounds of the latency buckets, in seconds.
pub use crate::model::analytics::LATENCY_BOUNDS as BUCKETS;

/// Status codes counted one by one; anything outside 100..600 is counted as 0 (unknown).
const STATUSES: usize = 600;

/// Why a request went to the replica it went to: the endpoint's balancer, its custom router's choice, or
/// the balancer because its router failed the request or named none (a fallback).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PickedBy {
    Balancer,
    Router,
    Fallback,
}

impl PickedBy {
    pub const ALL: [PickedBy; 3] = [PickedBy::Balancer, PickedBy::Router, PickedBy::Fallback];

    pub fn as_str(self) -> &'static str {
        match self {
            PickedBy::Balancer => "balancer",
            PickedBy::Router => "router",
            PickedBy::Fallback => "fallback",
        }
    }
}

/// How an extProc custom router failed a request: no answer in time, a broken stream, or a replica named
/// that is not one of the endpoint's ready replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouterFailure {
    Timeout,
    Error,
    Refused,
}

impl RouterFailure {
    pub const ALL: [RouterFailure; 3] = [
        RouterFailure::Timeout,
        RouterFailure::Error,
        RouterFailure::Refused,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RouterFailure::Timeout => "timeout",
            RouterFailure::Error => "error",
            RouterFailure::Refused => "refused",
        }
    }
}

/// An endpoint's traffic counters, in a shard per data-plane worker (and one for every other thread):
/// each worker adds to its own, so no counter's cache line travels between cores on every request. They
/// are summed when read.
#[derive(Debug, Default)]
pub struct EndpointStats {
    shards: PerWorker<Shard>,
}

/// One thread's share of [`EndpointStats`].
#[derive(Debug)]
struct Shard {
    /// One counter per status code: a request only adds to an atomic, no lock. Made at the shard's first
    /// request: most endpoints see traffic on few workers, and a many-core host keeps a shard per core.
    by_status: OnceLock<Box<[AtomicU64]>>,
    /// Each request counts once, in its own bucket (the last slot is +Inf); cumulative sums are made when
    /// rendering.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    sum_micros: AtomicU64,
    cache_hits: AtomicU64,
    /// Requests sent on, by [`PickedBy`].
    picks: [AtomicU64; 3],
    /// Requests an extProc router failed, by [`RouterFailure`].
    router_failures: [AtomicU64; 3],
}

impl Default for Shard {
    fn default() -> Self {
        Shard {
            by_status: OnceLock::new(),
            buckets: Default::default(),
            sum_micros: AtomicU64::new(0),
            cache_hits: AtomicU64::new(0),
            picks: Default::default(),
            router_failures: Default::default(),
        }
    }
}

impl EndpointStats {
    /// This thread's shard.
    fn mine(&self) -> &Shard {
        self.shards.mine()
    }

    fn sum(&self, counter: impl Fn(&Shard) -> &AtomicU64) -> u64 {
        let counts = self
            .shards
            .all()
            .map(|s| counter(s).load(Ordering::Relaxed));
        counts.sum()
    }

    /// Requests counted in latency bucket `i` (`BUCKETS.len()` for +Inf).
    pub(super) fn bucket(&self, i: usize) -> u64 {
        self.sum(|s| &s.buckets[i])
    }

    pub(super) fn sum_micros(&self) -> u64 {
        self.sum(|s| &s.sum_micros)
    }

    pub(super) fn cache_hits(&self) -> u64 {
        self.sum(|s| &s.cache_hits)
    }

    pub fn record(&self, status: u16, took: Duration) {
        let slot = if (100..STATUSES as u16).contains(&status) {
            status as usize
        } else {
            0
        };
        let mine = self.mine();
        let by_status = mine
            .by_status
            .get_or_init(|| (0..STATUSES).map(|_| AtomicU64::new(0)).collect());
        by_status[slot].fetch_add(1, Ordering::Relaxed);
        let secs = took.as_secs_f64();
        let bucket = BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(BUCKETS.len());
        mine.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        mine.sum_micros
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    }

    pub fn cache_hit(&self) {
        self.mine().cache_hits.fetch_add(1, Ordering::Relaxed);
    }

    /// A request sent on to the replica `by` chose.
    pub fn picked(&self, by: PickedBy) {
        self.mine().picks[by as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn picks(&self, by: PickedBy) -> u64 {
        self.sum(|s| &s.picks[by as usize])
    }

    /// A request the endpoint's extProc router failed.
    pub fn router_failed(&self, why: RouterFailure) {
        self.mine().router_failures[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn router_failures(&self, why: RouterFailure) -> u64 {
        self.sum(|s| &s.router_failures[why as usize])
    }

    /// Everything counted so far, by status code.
    pub fn counted_by_status(&self) -> Counted {
        let mut latency = [0; LATENCY_BUCKETS];
        for (i, n) in latency.iter_mut().enumerate() {
            *n = self.bucket(i);
        }
        Counted {
            statuses: self.statuses().collect(),
            latency,
            sum_seconds: self.sum_micros() as f64 / 1e6,
            cache_hits: self.cache_hits(),
        }
    }

    /// Everything counted so far, as an analytics sample's counters (the recorder takes differences).
    pub fn counted(&self) -> Sample {
        let counted = self.counted_by_status();
        let mut sample = Sample {
            latency: counted.latency,
            cache_hits: counted.cache_hits,
            ..Sample::default()
        };
        for (status, n) in counted.statuses {
            let class = status_class(u16::try_from(status).unwrap_or(0));
            sample.statuses[class] += n;
        }
        sample
    }

    /// (status, count) for every status seen.
    pub(super) fn statuses(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        let mut counts = vec![0u64; STATUSES];
        for by_status in self.shards.all().filter_map(|s| s.by_status.get()) {
            for (count, n) in counts.iter_mut().zip(by_status.iter()) {
                *count += n.load(Ordering::Relaxed);
            }
        }
        counts.into_iter().enumerate().filter(|(_, n)| *n > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_every_worker_add_up() {
        let stats = std::sync::Arc::new(EndpointStats::default());
        let on_worker = stats.clone();
        std::thread::spawn(move || {
            crate::routing::worker::enter_worker(0);
            on_worker.record(200, Duration::from_micros(500));
            on_worker.cache_hit();
        })
        .join()
        .expect("worker thread");
        stats.record(200, Duration::from_millis(30));
        stats.record(404, Duration::from_micros(700));
        let counted: Vec<(usize, u64)> = stats.statuses().collect();
        assert_eq!(counted, [(200, 2), (404, 1)]);
        assert_eq!((stats.bucket(0), stats.cache_hits()), (2, 1));
        assert_eq!(stats.sum_micros(), 500 + 30_000 + 700);
    }
}
