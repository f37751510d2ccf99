//! The Prometheus text of the serving proxy's metrics, read from the routing table's counters.
//!
//! Requests by endpoint and status, a latency histogram, requests in flight and replicas, rendered in the
//! text exposition format.

use std::fmt::Write;

use super::stats::{Activity, Fleet, PickedBy, RouterFailure, BUCKETS};
use super::table::{Route, RouteTable};

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// One of an endpoint's gauges beside its requests in flight and ready replicas, as `/metrics` shows it
/// and the OTLP exporter sends it: its name, help and unit (UCUM), and its value (of the endpoint, and of
/// its fleet as the leader last published it; none where it is not known).
pub struct EndpointGauge {
    pub name: &'static str,
    pub help: &'static str,
    pub unit: &'static str,
    pub value: fn(&Activity, Option<&Fleet>) -> Option<f64>,
}

pub const GAUGES: [EndpointGauge; 5] = [
    EndpointGauge {
        name: "switchyard_endpoint_waiting_requests",
        help: "Requests held while the endpoint starts.",
        unit: "{request}",
        value: |a, _| Some(f64::from(a.waiting_now())),
    },
    EndpointGauge {
        name: "switchyard_endpoint_target_replicas",
        help: "Replicas the scaler wants (on the server that leads).",
        unit: "{replica}",
        value: |_, f| Some(f64::from(f?.target)),
    },
    EndpointGauge {
        name: "switchyard_endpoint_replica_cpu_percent",
        help: "Mean CPU use of a ready replica, percent of one core (on the server that leads).",
        unit: "%",
        value: |_, f| f?.cpu_percent,
    },
    EndpointGauge {
        name: "switchyard_endpoint_engine_queue",
        help: "Requests waiting in the engines, per replica, where they are read (on the server that leads).",
        unit: "{request}",
        value: |_, f| f?.queue,
    },
    EndpointGauge {
        name: "switchyard_endpoint_engine_kv_cache_percent",
        help: "The engines' KV-cache use, where it is read (on the server that leads).",
        unit: "%",
        value: |_, f| f?.kv_cache_percent,
    },
];

/// The table's figures at `now_ms` (Unix milliseconds).
pub fn render(table: &RouteTable, now_ms: i64) -> String {
    let mut routes: Vec<_> = table.routes().collect();
    routes.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let mut out = String::new();
    let labels = |r: &Route| {
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
            cumulative += s.bucket(i);
            let _ = writeln!(
                out,
                "switchyard_proxy_request_duration_seconds_bucket{{{},le=\"{le}\"}} {cumulative}",
                labels(r)
            );
        }
        let sum = s.sum_micros() as f64 / 1e6;
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
            r.activity.in_flight.get()
        );
    }
    out.push_str("# HELP switchyard_proxy_cache_hits_total Responses served from the response cache.\n# TYPE switchyard_proxy_cache_hits_total counter\n");
    for r in &routes {
        let _ = writeln!(
            out,
            "switchyard_proxy_cache_hits_total{{{}}} {}",
            labels(r),
            r.activity.stats.cache_hits()
        );
    }
    out.push_str("# HELP switchyard_proxy_picks_total Requests sent on to a replica, by what chose it: the endpoint's balancer, its custom router, or the balancer when the router failed or named none (fallback).\n# TYPE switchyard_proxy_picks_total counter\n");
    for r in &routes {
        for by in PickedBy::ALL {
            let n = r.activity.stats.picks(by);
            let by = by.as_str();
            let _ = writeln!(
                out,
                "switchyard_proxy_picks_total{{{},by=\"{by}\"}} {n}",
                labels(r)
            );
        }
    }
    out.push_str("# HELP switchyard_proxy_router_failures_total Requests an extProc custom router failed: no answer in time, a broken stream, or a replica named that is not ready (refused).\n# TYPE switchyard_proxy_router_failures_total counter\n");
    for r in routes.iter().filter(|r| r.ext_proc.is_some()) {
        for why in RouterFailure::ALL {
            let n = r.activity.stats.router_failures(why);
            let why = why.as_str();
            let _ = writeln!(
                out,
                "switchyard_proxy_router_failures_total{{{},why=\"{why}\"}} {n}",
                labels(r)
            );
        }
    }
    let fleets: Vec<Option<Fleet>> = routes.iter().map(|r| r.activity.fleet(now_ms)).collect();
    for g in &GAUGES {
        let (name, help) = (g.name, g.help);
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for (r, fleet) in routes.iter().zip(&fleets) {
            if let Some(v) = (g.value)(&r.activity, fleet.as_ref()) {
                let _ = writeln!(out, "{name}{{{}}} {v}", labels(r));
            }
        }
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
    use crate::routing::stats::EndpointStats;
    use std::time::Duration;

    #[test]
    fn buckets_are_cumulative_at_render() {
        let s = EndpointStats::default();
        s.record(200, Duration::from_micros(500));
        s.record(200, Duration::from_millis(30));
        s.record(503, Duration::from_secs(20));
        let m: Vec<(usize, u64)> = s.statuses().collect();
        assert_eq!(m, [(200, 2), (503, 1)]);
        assert_eq!(s.bucket(0), 1);
        assert_eq!(s.bucket(BUCKETS.len()), 1);
        assert_eq!(escape("a\"b\\"), "a\\\"b\\\\");
    }
}
