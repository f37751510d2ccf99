//! An endpoint's traffic and decisions over time as the console keeps them: what the API answers
//! (`/api/v1/endpoints/{namespace}/{name}/analytics` and `…/decisions`), in the shapes the charts draw, and
//! the list's sparklines. Plain data; `analytics` holds what changes it. The server's samples come every 10 s
//! (every minute for ranges past the last hour), so loads are asked once a period, a little after it ends.

use std::collections::HashMap;

use chrono::{DateTime, Duration, Utc};
use serde_json::Value;

pub use crate::effects::ChartRange;
use crate::effects::Effect;

/// Seconds after a bucket ends that its sample is asked for: every server writes it within about a second
/// of its end.
pub const LAG_S: i64 = 3;

/// The period of `every_s` seconds `now` falls in, [`LAG_S`] late: loads are asked once a period.
pub fn period(now: DateTime<Utc>, every_s: i64) -> i64 {
    (now.timestamp() - LAG_S).div_euclid(every_s.max(1))
}

/// Seconds between the list's sparklines' loads (their points are a minute apart).
pub const SPARKLINE_EVERY_S: i64 = 60;

/// One decision as describe lists it and the charts mark it.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionRow {
    pub at: DateTime<Utc>,
    pub kind: String,
    pub reason: String,
    pub from: Option<u64>,
    pub to: Option<u64>,
}

impl DecisionRow {
    /// The mark on the charts' time axis: one character, told apart without colour.
    pub fn mark(&self) -> char {
        match self.kind.as_str() {
            "scaledUp" => '↑',
            "scaledDown" => '↓',
            "scaledToZero" => '0',
            "woken" => 'W',
            "schedule" => 'S',
            "heldAtQuota" => 'Q',
            "replicaExited" => 'X',
            "updated" => 'U',
            "failed" => 'F',
            _ => '*',
        }
    }

    /// `↑ 12:01:10 scaled up 1→2: pendingRequests 3.2 is above its threshold 1.5`
    pub fn line(&self) -> String {
        let what = match self.kind.as_str() {
            "scaledUp" => "scaled up",
            "scaledDown" => "scaled down",
            "scaledToZero" => "scaled to zero",
            "woken" => "woken",
            "schedule" => "schedule",
            "heldAtQuota" => "held at quota",
            "replicaExited" => "replica exited",
            "updated" => "updated",
            "failed" => "failed",
            other => other,
        };
        let counts = match (self.from, self.to) {
            (Some(f), Some(t)) => format!(" {f}→{t}"),
            _ => String::new(),
        };
        let at = self.at.format("%m-%d %H:%M:%S");
        format!("{} {at} {what}{counts}: {}", self.mark(), self.reason)
    }
}

/// An endpoint's series as the charts draw them: one value a point (`None` where nothing was recorded).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Series {
    pub requests_per_second: Vec<f64>,
    pub p95_ms: Vec<Option<f64>>,
    pub errors: Vec<f64>,
    pub replicas: Vec<Option<f64>>,
}

/// What the charts of one endpoint show.
#[derive(Debug, Clone, PartialEq)]
pub struct Analytics {
    pub namespace: String,
    pub name: String,
    pub range: ChartRange,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub series: Series,
    /// Newest first.
    pub decisions: Vec<DecisionRow>,
}

fn time(v: &Value) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(v.as_str()?)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

impl Series {
    /// The points of an analytics answer (`{"points": [...]}`).
    pub fn from_json(v: &Value) -> Series {
        let mut s = Series::default();
        for p in v["points"].as_array().into_iter().flatten() {
            s.requests_per_second
                .push(p["requestsPerSecond"].as_f64().unwrap_or(0.0));
            s.p95_ms.push(p["latencyMs"]["p95"].as_f64());
            s.errors.push(p["errors"].as_f64().unwrap_or(0.0));
            s.replicas.push(p["readyReplicas"].as_f64());
        }
        s
    }
}

impl DecisionRow {
    /// The rows of a decisions answer (`{"items": [...]}`).
    pub fn list_from_json(v: &Value) -> Vec<DecisionRow> {
        let items = v["items"].as_array().into_iter().flatten();
        items
            .filter_map(|d| {
                Some(DecisionRow {
                    at: time(&d["at"])?,
                    kind: d["kind"].as_str().unwrap_or("").to_string(),
                    reason: d["reason"].as_str().unwrap_or("").to_string(),
                    from: d["from"].as_u64(),
                    to: d["to"].as_u64(),
                })
            })
            .collect()
    }
}

impl Analytics {
    /// From the two answers of a load for `range`.
    pub fn from_json(
        namespace: String,
        name: String,
        range: ChartRange,
        series: &Value,
        decisions: &Value,
    ) -> Analytics {
        Analytics {
            namespace,
            name,
            range,
            from: time(&series["from"]).unwrap_or_default(),
            to: time(&series["to"]).unwrap_or_default(),
            series: Series::from_json(series),
            decisions: DecisionRow::list_from_json(decisions),
        }
    }

    /// The decisions within the charts' time, newest first.
    pub fn in_range(&self) -> impl Iterator<Item = &DecisionRow> {
        self.decisions
            .iter()
            .filter(|d| d.at >= self.from && d.at < self.to)
    }
}

/// The time a sparkline covers.
pub const SPARKLINE_SPAN: Duration = Duration::minutes(30);

/// The endpoints list has a requests column from this width on.
pub const SPARKLINE_MIN_WIDTH: u16 = 100;

/// The charts' state: the range shown, what was loaded, and the requests sparklines of the list.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Charts {
    pub range: ChartRange,
    /// The endpoint described, as last loaded (or why it was not).
    pub shown: Option<Result<Analytics, (String, String, String)>>,
    /// The period a describe load was last asked in (see [`period`]).
    pub(super) asked: Option<i64>,
    /// Requests per second of each endpoint in the list, over the last 30 minutes.
    pub sparklines: HashMap<(String, String), Vec<f64>>,
    pub(super) sparklines_asked: Option<i64>,
    /// A sparklines load is under way: no other is asked until it answers.
    pub(super) sparklines_loading: bool,
}

impl Charts {
    /// The load of `namespace/name`'s charts over the range shown, at `now`.
    pub(super) fn load(&mut self, now: DateTime<Utc>, namespace: String, name: String) -> Effect {
        self.asked = Some(period(now, self.range.every_s()));
        Effect::LoadAnalytics {
            namespace,
            name,
            range: self.range,
            from: now - self.range.span(),
        }
    }

    /// The charts of the endpoint `namespace/name`, when loaded; or why they could not be.
    pub fn of(&self, namespace: &str, name: &str) -> Option<Result<&Analytics, &str>> {
        match self.shown.as_ref()? {
            Ok(a) if a.namespace == namespace && a.name == name => Some(Ok(a)),
            Err((ns, n, e)) if ns == namespace && n == name => Some(Err(e.as_str())),
            _ => None,
        }
    }

    /// The decisions part of an endpoint's description.
    pub(super) fn decisions_text(&self, namespace: &str, name: &str) -> String {
        match self.of(namespace, name) {
            None => "(reading…)\n".to_string(),
            Some(Err(e)) => format!("(not read: {e})\n"),
            Some(Ok(a)) if a.decisions.is_empty() => "(none recorded)\n".to_string(),
            Some(Ok(a)) => a.decisions.iter().map(|d| d.line() + "\n").collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ranges_cycle_and_decisions_read() {
        assert_eq!(ChartRange::Week.next(), ChartRange::Minutes15);
        assert_eq!(ChartRange::Hour.next(), ChartRange::Day);
        let rows = DecisionRow::list_from_json(&json!({"items": [
            {"at": "2026-12-06T10:00:05Z", "kind": "scaledUp", "reason": "the minimum in force is 2", "from": 1, "to": 2},
            {"at": "not a time", "kind": "woken", "reason": "x"},
        ]}));
        assert_eq!(rows.len(), 1);
        assert_eq!(
            rows[0].line(),
            "↑ 12-06 10:00:05 scaled up 1→2: the minimum in force is 2"
        );
    }
}
