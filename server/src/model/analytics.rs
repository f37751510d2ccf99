//! Endpoint analytics: what each server records of an endpoint in a time bucket ([`Sample`]), how the
//! samples of several servers and buckets add up into the points the API answers ([`AnalyticsPoint`]), and
//! the decisions the runtime took with their reasons ([`Decision`]).
//!
//! Counters (requests, latency, cache hits) add up across servers and buckets. Gauges are kept as a sum of
//! readings and their count: a server's mean over a bucket; the requests in flight and waiting of several
//! servers add up (each counts its own proxy's), while the fleet's figures (replicas, CPU, the engines'
//! queue and KV cache) are the leader's alone and are averaged.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Upper bounds of the latency buckets, in seconds (the last, +Inf, has none): `/metrics`' histogram and the
/// stored samples count requests in the same buckets.
pub const LATENCY_BOUNDS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// Latency buckets: one per bound, and +Inf.
pub const LATENCY_BUCKETS: usize = LATENCY_BOUNDS.len() + 1;

/// The fine resolution, in seconds, and the coarse one.
pub const FINE_STEP_S: i64 = 10;
pub const COARSE_STEP_S: i64 = 60;

/// The status class of a status code: 0 for 1xx, 1 for 2xx … 4 for 5xx; anything else (a request that got
/// no status) counts as 5xx.
pub fn status_class(status: u16) -> usize {
    match status {
        100..=599 => usize::from(status / 100 - 1),
        _ => 4,
    }
}

/// Readings of a gauge: their sum and count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Readings {
    pub sum: f64,
    pub n: u32,
}

impl Readings {
    pub fn add(&mut self, v: f64) {
        if v.is_finite() {
            self.sum += v;
            self.n = self.n.saturating_add(1);
        }
    }

    pub fn merge(&mut self, other: &Readings) {
        self.sum += other.sum;
        self.n = self.n.saturating_add(other.n);
    }

    pub fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / f64::from(self.n))
    }
}

/// What one server recorded of one endpoint in one bucket.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Sample {
    /// Requests by status class (1xx … 5xx, see [`status_class`]).
    pub statuses: [u64; 5],
    /// Requests by latency bucket (see [`LATENCY_BOUNDS`]).
    pub latency: [u64; LATENCY_BUCKETS],
    pub cache_hits: u64,
    /// Requests in flight through this server's proxy, and held for a cold start.
    pub in_flight: Readings,
    pub waiting: Readings,
    /// The fleet as the leader saw it: ready and target replicas, replica CPU (percent of one core), the
    /// engines' queue (requests waiting, per replica) and KV-cache use (percent).
    pub ready: Readings,
    pub target: Readings,
    pub cpu: Readings,
    pub queue: Readings,
    pub kv_cache: Readings,
}

impl Sample {
    /// Adds another bucket's (or the same bucket's, recorded later) sample of the same server.
    pub fn merge(&mut self, other: &Sample) {
        add_counts(&mut self.statuses, &other.statuses);
        add_counts(&mut self.latency, &other.latency);
        self.cache_hits = self.cache_hits.saturating_add(other.cache_hits);
        for (mine, theirs) in self.gauges_mut().into_iter().zip(other.gauges()) {
            mine.merge(theirs);
        }
    }

    fn gauges(&self) -> [&Readings; 7] {
        [
            &self.in_flight,
            &self.waiting,
            &self.ready,
            &self.target,
            &self.cpu,
            &self.queue,
            &self.kv_cache,
        ]
    }

    fn gauges_mut(&mut self) -> [&mut Readings; 7] {
        [
            &mut self.in_flight,
            &mut self.waiting,
            &mut self.ready,
            &mut self.target,
            &mut self.cpu,
            &mut self.queue,
            &mut self.kv_cache,
        ]
    }

    pub fn requests(&self) -> u64 {
        self.statuses.iter().fold(0, |n, c| n.saturating_add(*c))
    }
}

fn add_counts<const N: usize>(to: &mut [u64; N], from: &[u64; N]) {
    for (t, f) in to.iter_mut().zip(from) {
        *t = t.saturating_add(*f);
    }
}

/// The latency below which a fraction `q` of the requests counted in `latency` finished, in milliseconds:
/// interpolated within its bucket, as Prometheus' `histogram_quantile` does; the bound of the last finite
/// bucket for those past it.
pub fn quantile_ms(latency: &[u64; LATENCY_BUCKETS], q: f64) -> Option<f64> {
    let total = latency.iter().fold(0u64, |t, n| t.saturating_add(*n));
    if total == 0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * total as f64;
    let mut below = 0u64;
    for (i, n) in latency.iter().enumerate() {
        let upto = below.saturating_add(*n);
        if *n > 0 && upto as f64 >= rank {
            let Some(upper) = LATENCY_BOUNDS.get(i) else {
                return LATENCY_BOUNDS.last().map(|b| b * 1000.0);
            };
            let lower = if i == 0 { 0.0 } else { LATENCY_BOUNDS[i - 1] };
            let within = (rank - below as f64) / *n as f64;
            return Some((lower + (upper - lower) * within) * 1000.0);
        }
        below = upto;
    }
    LATENCY_BOUNDS.last().map(|b| b * 1000.0)
}

/// One point of an endpoint's series: what every server recorded in `[at, at + step)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnalyticsPoint {
    /// The start of the point's interval.
    #[serde(with = "crate::model::wire::rfc3339_z")]
    #[schema(value_type = String, format = DateTime)]
    pub at: DateTime<Utc>,
    /// Requests answered, all of them and by status class.
    pub requests: u64,
    pub status: StatusCounts,
    /// Requests per second over the part of the interval that has passed (the latest point's is partial).
    pub requests_per_second: f64,
    /// Requests answered with a 5xx (or with no answer).
    pub errors: u64,
    /// Time to the response's head, in milliseconds; null without requests.
    pub latency_ms: Option<Latency>,
    /// Mean requests in flight through the proxies (every server's added up), and held for a cold start.
    pub in_flight: Option<f64>,
    pub waiting: Option<f64>,
    /// Responses served from the response cache, as a share of the requests; null without requests.
    pub cache_hit_ratio: Option<f64>,
    /// Mean ready and target replicas.
    pub ready_replicas: Option<f64>,
    pub target_replicas: Option<f64>,
    /// Mean CPU use of a replica, percent of one core.
    pub cpu_percent: Option<f64>,
    /// The engines' own figures, where they are read (`least_load`, `inferenceLoad`): requests waiting per
    /// replica, and KV-cache use in percent.
    pub queue: Option<f64>,
    pub kv_cache_percent: Option<f64>,
}

/// Requests by status class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StatusCounts {
    #[serde(rename = "1xx")]
    pub informational: u64,
    #[serde(rename = "2xx")]
    pub success: u64,
    #[serde(rename = "3xx")]
    pub redirect: u64,
    #[serde(rename = "4xx")]
    pub client_error: u64,
    #[serde(rename = "5xx")]
    pub server_error: u64,
}

/// Latency percentiles, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Latency {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
}

/// The samples of one interval, as they are added up into a point: every server's samples of each bucket
/// first (their requests in flight add up; the fleet's figures are the leader's), then the buckets. A bucket
/// no server wrote was quiet: no request, none in flight, no replica (a server writes no row for such a
/// bucket), so the gauges' means are over the buckets that have passed, not over those written.
#[derive(Debug, Default)]
pub struct PointSum {
    /// The counters, and the readings of the figures only read where they can be (CPU, the engines').
    counts: Sample,
    /// Sums over the buckets of each bucket's value.
    in_flight: f64,
    waiting: f64,
    ready: f64,
    target: f64,
    /// Buckets with a sample.
    written: u32,
}

impl PointSum {
    /// Adds one bucket: every server's sample of it.
    pub fn add_bucket<'s>(&mut self, servers: impl Iterator<Item = &'s Sample>) {
        let (mut ready, mut target) = (Readings::default(), Readings::default());
        for s in servers {
            let counts = Sample {
                statuses: s.statuses,
                latency: s.latency,
                cache_hits: s.cache_hits,
                cpu: s.cpu,
                queue: s.queue,
                kv_cache: s.kv_cache,
                ..Sample::default()
            };
            self.counts.merge(&counts);
            self.in_flight += s.in_flight.mean().unwrap_or(0.0);
            self.waiting += s.waiting.mean().unwrap_or(0.0);
            ready.merge(&s.ready);
            target.merge(&s.target);
        }
        self.ready += ready.mean().unwrap_or(0.0);
        self.target += target.mean().unwrap_or(0.0);
        self.written = self.written.saturating_add(1);
    }

    /// The point at `at` of an interval of `buckets` buckets of `bucket_s` seconds, `passed` of which have
    /// ended (all of them but for the latest point). Its rate is over the time passed; with none passed and
    /// none written, it has no gauges.
    pub fn point(&self, at: DateTime<Utc>, bucket_s: i64, passed: u32) -> AnalyticsPoint {
        let c = &self.counts;
        let requests = c.requests();
        let passed = passed.max(self.written);
        let [informational, success, redirect, client_error, server_error] = c.statuses;
        let ratio = |n: u64| (requests > 0).then(|| n as f64 / requests as f64);
        let latency = (requests > 0).then(|| Latency {
            p50: quantile_ms(&c.latency, 0.5).unwrap_or(0.0),
            p95: quantile_ms(&c.latency, 0.95).unwrap_or(0.0),
            p99: quantile_ms(&c.latency, 0.99).unwrap_or(0.0),
        });
        let seconds = f64::from(passed) * bucket_s.max(1) as f64;
        let mean = |sum: f64| (passed > 0).then(|| sum / f64::from(passed));
        AnalyticsPoint {
            at,
            requests,
            status: StatusCounts {
                informational,
                success,
                redirect,
                client_error,
                server_error,
            },
            requests_per_second: if seconds > 0.0 {
                requests as f64 / seconds
            } else {
                0.0
            },
            errors: server_error,
            latency_ms: latency,
            in_flight: mean(self.in_flight),
            waiting: mean(self.waiting),
            cache_hit_ratio: ratio(c.cache_hits),
            ready_replicas: mean(self.ready),
            target_replicas: mean(self.target),
            cpu_percent: c.cpu.mean(),
            queue: c.queue.mean(),
            kv_cache_percent: c.kv_cache.mean(),
        }
    }
}

/// An endpoint's series over `[from, to)`, a point every `step` seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnalyticsOut {
    #[serde(with = "crate::model::wire::rfc3339_z")]
    #[schema(value_type = String, format = DateTime)]
    pub from: DateTime<Utc>,
    #[serde(with = "crate::model::wire::rfc3339_z")]
    #[schema(value_type = String, format = DateTime)]
    pub to: DateTime<Utc>,
    /// Seconds between points.
    pub step: i64,
    /// The stored resolution the points were made from, in seconds (10 or 60).
    pub resolution: i64,
    pub points: Vec<AnalyticsPoint>,
}

/// What the runtime decided about an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum DecisionKind {
    /// More replicas: a measure over its threshold, or the schedule's minimum.
    ScaledUp,
    ScaledDown,
    /// No replica left: idle past the timeout, or none allowed.
    ScaledToZero,
    /// Scaled to zero, and started again by a request or the schedule.
    Woken,
    /// A schedule entry began: its bounds apply.
    Schedule,
    /// The scaler wanted more replicas than the namespace's quota leaves.
    HeldAtQuota,
    /// A replica exited or never got healthy; it is started again after the backoff.
    ReplicaExited,
    /// A new spec's replicas all serve and the old ones are retired.
    Updated,
    /// The endpoint failed: its replicas keep failing, or it cannot start.
    Failed,
}

impl DecisionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionKind::ScaledUp => "scaledUp",
            DecisionKind::ScaledDown => "scaledDown",
            DecisionKind::ScaledToZero => "scaledToZero",
            DecisionKind::Woken => "woken",
            DecisionKind::Schedule => "schedule",
            DecisionKind::HeldAtQuota => "heldAtQuota",
            DecisionKind::ReplicaExited => "replicaExited",
            DecisionKind::Updated => "updated",
            DecisionKind::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<DecisionKind> {
        [
            DecisionKind::ScaledUp,
            DecisionKind::ScaledDown,
            DecisionKind::ScaledToZero,
            DecisionKind::Woken,
            DecisionKind::Schedule,
            DecisionKind::HeldAtQuota,
            DecisionKind::ReplicaExited,
            DecisionKind::Updated,
            DecisionKind::Failed,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

/// The measure a scaling decision was taken on: its value (averaged over the evaluation window) and its
/// threshold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Measured {
    /// `hardwareUsage`, `pendingRequests`, or the part of `inferenceLoad` nearer its threshold:
    /// `inferenceLoad.kvCacheUsage` or `inferenceLoad.requestsWaiting`.
    pub measure: String,
    pub value: f64,
    pub threshold: f64,
}

/// One decision, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    #[serde(with = "crate::model::wire::rfc3339_z")]
    #[schema(value_type = String, format = DateTime)]
    pub at: DateTime<Utc>,
    pub kind: DecisionKind,
    /// Why, in words.
    pub reason: String,
    /// Replicas wanted before and after, for scaling decisions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured: Option<Measured>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DecisionListOut {
    /// Newest first.
    pub items: Vec<Decision>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_classes() {
        assert_eq!(status_class(101), 0);
        assert_eq!(status_class(200), 1);
        assert_eq!(status_class(404), 3);
        assert_eq!(status_class(503), 4);
        assert_eq!(status_class(0), 4, "no answer is an error");
    }

    #[test]
    fn quantiles_interpolate_within_their_bucket() {
        let mut latency = [0u64; LATENCY_BUCKETS];
        // 100 requests between 25 and 50 ms.
        latency[5] = 100;
        let p50 = quantile_ms(&latency, 0.5).expect("a quantile");
        assert!((p50 - 37.5).abs() < 1e-9, "{p50}");
        latency[LATENCY_BUCKETS - 1] = 100;
        assert_eq!(
            quantile_ms(&latency, 0.99),
            Some(10_000.0),
            "past the last bound"
        );
        assert_eq!(quantile_ms(&[0; LATENCY_BUCKETS], 0.5), None);
    }

    #[test]
    fn servers_in_flight_add_up_and_the_fleet_is_averaged() {
        let mut a = Sample::default();
        a.statuses[1] = 8;
        a.in_flight.add(2.0);
        a.ready.add(3.0);
        let mut b = Sample::default();
        b.statuses[4] = 2;
        b.in_flight.add(1.0);
        b.in_flight.add(3.0);
        let mut sum = PointSum::default();
        sum.add_bucket([&a, &b].into_iter());
        let p = sum.point(DateTime::UNIX_EPOCH, 10, 1);
        assert_eq!((p.requests, p.errors, p.status.success), (10, 2, 8));
        assert_eq!(p.requests_per_second, 1.0);
        assert_eq!(p.in_flight, Some(4.0), "2 on one server, 2 on the other");
        assert_eq!(p.ready_replicas, Some(3.0));
        assert_eq!(p.cpu_percent, None);
        // Over three buckets, two of them quiet (no row written): the rate and the means are over all three.
        let p = sum.point(DateTime::UNIX_EPOCH, 10, 3);
        assert_eq!(p.ready_replicas, Some(1.0));
        assert!((p.requests_per_second - 10.0 / 30.0).abs() < 1e-9);
        // The latest point, none of its buckets over and none written: no gauges yet.
        let p = PointSum::default().point(DateTime::UNIX_EPOCH, 10, 0);
        assert_eq!((p.requests_per_second, p.ready_replicas), (0.0, None));
    }
}
