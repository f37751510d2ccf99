//! `[telemetry] otlp_url`: the endpoints' figures pushed to an OpenTelemetry collector over OTLP/HTTP
//! (protobuf), the same ones `/metrics` shows: requests by status, the latency histogram, cache hits
//! (cumulative, each endpoint's since the exporter first saw it), and the gauges (in flight, waiting for a cold start, and the
//! fleet the leader sees). Sent through the outbound guard like every request to the outside.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, HeaderMap, HeaderValue};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, Gauge, Histogram, HistogramDataPoint,
    Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use tokio::sync::watch;

use crate::clock::Clock;
use crate::model::analytics::LATENCY_BOUNDS;
use crate::outbound::{FetchOptions, Outbound};
use crate::routing::metrics::GAUGES;
use crate::routing::{Route, RouteTable};

fn text(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

fn metric(name: &str, description: &str, unit: &str, data: metric::Data) -> Metric {
    Metric {
        name: name.into(),
        description: description.into(),
        unit: unit.into(),
        data: Some(data),
        ..Default::default()
    }
}

/// When the figures were taken, and since when each endpoint's cumulative ones count (Unix nanoseconds, by
/// endpoint id): since the exporter first saw it.
#[derive(Debug, Clone)]
pub struct Times {
    pub starts: HashMap<String, u64>,
    pub now_ns: u64,
}

impl Times {
    /// Sees the endpoints of `table` at `now_ns`: those new since the last time count from now (an
    /// endpoint's counters start with it), those there at the exporter's first push from `start_ns`.
    pub fn see(&mut self, table: &RouteTable, start_ns: u64, now_ns: u64, first: bool) {
        let ids: std::collections::HashSet<&str> = table.routes().map(|r| r.id.as_str()).collect();
        self.starts.retain(|id, _| ids.contains(id.as_str()));
        for id in ids {
            let from = if first { start_ns } else { now_ns };
            self.starts.entry(id.to_string()).or_insert(from);
        }
        self.now_ns = now_ns;
    }

    fn start_of(&self, id: &str) -> u64 {
        self.starts.get(id).copied().unwrap_or(self.now_ns)
    }
}

/// The endpoints of `table` as one export request.
pub fn export(
    table: &RouteTable,
    times: &Times,
    now_ms: i64,
    server: &str,
) -> ExportMetricsServiceRequest {
    let mut routes: Vec<&Arc<Route>> = table.routes().collect();
    routes.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let labels = |r: &Route| vec![text("namespace", &r.namespace), text("endpoint", &r.name)];
    let number =
        |attributes: Vec<KeyValue>, start: u64, value: number_data_point::Value| NumberDataPoint {
            attributes,
            start_time_unix_nano: start,
            time_unix_nano: times.now_ns,
            value: Some(value),
            ..Default::default()
        };
    let cumulative = |points: Vec<NumberDataPoint>| {
        metric::Data::Sum(Sum {
            data_points: points,
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: true,
        })
    };
    let int = |n: u64| number_data_point::Value::AsInt(i64::try_from(n).unwrap_or(i64::MAX));
    let mut requests = Vec::new();
    let mut durations = Vec::new();
    let mut hits = Vec::new();
    let (mut in_flight, mut ready) = (Vec::new(), Vec::new());
    let mut gauges: [Vec<NumberDataPoint>; GAUGES.len()] = Default::default();
    for r in &routes {
        let start = times.start_of(&r.id);
        let counted = r.activity.stats.counted_by_status();
        for (status, n) in counted.statuses {
            let mut attributes = labels(r);
            attributes.push(text("status", &status.to_string()));
            requests.push(number(attributes, start, int(n)));
        }
        let count = counted
            .latency
            .iter()
            .fold(0u64, |t, n| t.saturating_add(*n));
        durations.push(HistogramDataPoint {
            attributes: labels(r),
            start_time_unix_nano: start,
            time_unix_nano: times.now_ns,
            count,
            sum: Some(counted.sum_seconds),
            bucket_counts: counted.latency.to_vec(),
            explicit_bounds: LATENCY_BOUNDS.to_vec(),
            ..Default::default()
        });
        hits.push(number(labels(r), start, int(counted.cache_hits)));
        let gauge = |v: f64| number(labels(r), 0, number_data_point::Value::AsDouble(v));
        in_flight.push(gauge(f64::from(r.activity.in_flight.get())));
        ready.push(gauge(r.backends.len() as f64));
        let fleet = r.activity.fleet(now_ms);
        for (points, g) in gauges.iter_mut().zip(&GAUGES) {
            points.extend((g.value)(&r.activity, fleet.as_ref()).map(gauge));
        }
    }
    let gauge = |points| {
        metric::Data::Gauge(Gauge {
            data_points: points,
        })
    };
    let mut metrics = vec![
        metric(
            "switchyard_proxy_requests",
            "Requests served by the proxy, by endpoint and status.",
            "{request}",
            cumulative(requests),
        ),
        metric(
            "switchyard_proxy_request_duration",
            "Time from request to response headers.",
            "s",
            metric::Data::Histogram(Histogram {
                data_points: durations,
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
            }),
        ),
        metric(
            "switchyard_proxy_cache_hits",
            "Responses served from the response cache.",
            "{request}",
            cumulative(hits),
        ),
        metric(
            "switchyard_proxy_pending_requests",
            "Requests in flight through this server's proxy.",
            "{request}",
            gauge(in_flight),
        ),
        metric(
            "switchyard_endpoint_ready_replicas",
            "Replicas that answer their health route.",
            "{replica}",
            gauge(ready),
        ),
    ];
    for (g, points) in GAUGES.iter().zip(gauges) {
        metrics.push(metric(g.name, g.help, g.unit, gauge(points)));
    }
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![
                    text("service.name", "switchyard"),
                    text("service.instance.id", server),
                    text("service.version", env!("CARGO_PKG_VERSION")),
                ],
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "switchyard".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                metrics,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

/// The pushing task's parts.
pub struct Exporter {
    pub url: String,
    pub every: Duration,
    pub outbound: Arc<Outbound>,
    pub table: watch::Receiver<Arc<RouteTable>>,
    pub clock: Arc<dyn Clock>,
    pub server: String,
}

fn nanos(ms: i64) -> u64 {
    u64::try_from(ms).unwrap_or(0).saturating_mul(1_000_000)
}

impl Exporter {
    /// Pushes every `every` until `stop` flips. A collector that fails or refuses is warned of and tried
    /// again at the next push (the figures are cumulative: nothing is lost in between).
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let start_ns = nanos(self.clock.now_millis());
        let mut times = Times {
            starts: HashMap::new(),
            now_ns: start_ns,
        };
        let mut first = true;
        let mut headers = HeaderMap::new();
        let protobuf = HeaderValue::from_static("application/x-protobuf");
        headers.insert(header::CONTENT_TYPE, protobuf);
        let options = FetchOptions {
            headers,
            ..FetchOptions::default()
        };
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.every) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
            let now_ms = self.clock.now_millis();
            let body = {
                let table = self.table.borrow().clone();
                times.see(&table, start_ns, nanos(now_ms), first);
                first = false;
                export(&table, &times, now_ms, &self.server).encode_to_vec()
            };
            match self.outbound.post(&self.url, body.into(), &options).await {
                Ok(answer) if answer.status.is_success() => {}
                Ok(answer) => {
                    tracing::warn!(status = %answer.status, "the OpenTelemetry collector refused the figures")
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not push the figures to the OpenTelemetry collector")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_table_still_says_who_it_is() {
        let times = Times {
            starts: HashMap::new(),
            now_ns: 2,
        };
        let req = export(&RouteTable::default(), &times, 0, "node-1");
        let bytes = req.encode_to_vec();
        let back = ExportMetricsServiceRequest::decode(bytes.as_slice()).expect("decodes");
        let resource = back.resource_metrics[0]
            .resource
            .as_ref()
            .expect("resource");
        assert!(resource
            .attributes
            .iter()
            .any(|kv| kv.key == "service.instance.id"));
        assert_eq!(back.resource_metrics[0].scope_metrics[0].metrics.len(), 10);
    }
}
