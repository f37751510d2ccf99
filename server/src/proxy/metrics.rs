//! Prometheus metrics of the serving proxy: requests by endpoint and status, a latency histogram,
//! requests in flight and replicas, rendered in the text exposition format.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::runtime::RouteTable;

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
    buckets: [AtomicU64; BUCKETS.len() + 1],
    sum_micros: AtomicU64,
    cache_hits: AtomicU64,
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
    fn statuses(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.by_status
            .iter()
            .enumerate()
            .map(|(s, n)| (s, n.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

pub fn render(table: &RouteTable) -> String {
    let mut routes: Vec<_> = table.routes().collect();
    routes.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let mut out = String::new();
    let labels = |r: &crate::runtime::Route| {
        format!(
            "namespace=\"{}\",endpoint=\"{}\"",
            escape(&r.namespace),
            escape(&r.name)
        )
    };
    out.push_str("# HELP switchyard_proxy_requests_total Requests served by the proxy, by endpoint and status.\n# TYPE switchyard_proxy_requests_total counter\n");
    for r in &routes {
        {
            for (status, n) in r.activity.stats.statuses() {
                let _ = writeln!(
                    out,
                    "switchyard_proxy_requests_total{{{},status=\"{status}\"}} {n}",
                    labels(r)
                );
            }
        }
    }
    out.push_str("# HELP switchyard_proxy_request_duration_seconds Time from request to response headers.\n# TYPE switchyard_proxy_request_duration_seconds histogram\n");
    for r in &routes {
        let s = &r.activity.stats;
        let mut cumulative = 0;
        for (i, le) in BUCKETS
            .iter()
            .map(|b| b.to_string())
            .chain(["+Inf".to_string()])
            .enumerate()
        {
            cumulative += s.buckets[i].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "switchyard_proxy_request_duration_seconds_bucket{{{},le=\"{le}\"}} {cumulative}",
                labels(r)
            );
        }
        let sum = s.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(
            out,
            "switchyard_proxy_request_duration_seconds_sum{{{}}} {sum}",
            labels(r)
        );
        let _ = writeln!(
            out,
            "switchyard_proxy_request_duration_seconds_count{{{}}} {cumulative}",
            labels(r)
        );
    }
    out.push_str("# HELP switchyard_proxy_pending_requests Requests in flight through the proxy.\n# TYPE switchyard_proxy_pending_requests gauge\n");
    for r in &routes {
        let _ = writeln!(
            out,
            "switchyard_proxy_pending_requests{{{}}} {}",
            labels(r),
            r.activity.in_flight.load(Ordering::Relaxed)
        );
    }
    out.push_str("# HELP switchyard_proxy_cache_hits_total Responses served from the response cache.\n# TYPE switchyard_proxy_cache_hits_total counter\n");
    for r in &routes {
        let _ = writeln!(
            out,
            "switchyard_proxy_cache_hits_total{{{}}} {}",
            labels(r),
            r.activity.stats.cache_hits.load(Ordering::Relaxed)
        );
    }
    out.push_str("# HELP switchyard_endpoint_ready_replicas Replicas that answer their health route.\n# TYPE switchyard_endpoint_ready_replicas gauge\n");
    for r in &routes {
        let _ = writeln!(
            out,
            "switchyard_endpoint_ready_replicas{{{},state=\"{}\"}} {}",
            labels(r),
            r.state,
            r.backends.len()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_at_render() {
        let s = EndpointStats::default();
        s.record(200, Duration::from_micros(500));
        s.record(200, Duration::from_millis(30));
        s.record(503, Duration::from_secs(20));
        let m: Vec<(usize, u64)> = s.statuses().collect();
        assert_eq!(m, [(200, 2), (503, 1)]);
        assert_eq!(s.buckets[0].load(Ordering::Relaxed), 1);
        assert_eq!(s.buckets[BUCKETS.len()].load(Ordering::Relaxed), 1);
        assert_eq!(escape("a\"b\\"), "a\\\"b\\\\");
    }
}
