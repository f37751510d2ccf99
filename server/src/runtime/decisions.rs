//! The decisions the reconciler takes about an endpoint, put in words for the operator: each is made here
//! from what the reconciler knew when it took it, kept on the endpoint's run during the pass, and written
//! to the store with the pass's status (see [`write`]).

use chrono::{DateTime, Utc};

use super::scaler::{Bounds, Explained};
use crate::model::analytics::{Decision, DecisionKind};
use crate::model::{EndpointState, ScheduleEntry};
use crate::store::{Store, StoreResult};

fn decision(at: DateTime<Utc>, kind: DecisionKind, reason: String) -> Decision {
    Decision {
        at,
        kind,
        reason,
        from: None,
        to: None,
        measured: None,
    }
}

/// A figure as a reason shows it: up to two decimals, without trailing zeros.
fn figure(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The scaler moved an active endpoint's target from `from` to `to` replicas.
pub fn scaled(
    at: DateTime<Utc>,
    from: u32,
    to: u32,
    explained: Option<&Explained>,
    bounds: &Bounds,
) -> Option<Decision> {
    let up = match to.cmp(&from) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal => return None,
    };
    let measured = explained.and_then(|e| e.measured.clone());
    let by_measure = explained.is_some_and(|e| if up { e.wanted >= to } else { e.wanted <= to });
    let reason = match &measured {
        Some(m) if by_measure => format!(
            "{} {} is {} its threshold {}",
            m.measure,
            figure(m.value),
            if up { "above" } else { "below" },
            figure(m.threshold)
        ),
        _ if up => format!("the minimum in force is {}", bounds.min),
        _ => format!("the maximum in force is {}", bounds.max),
    };
    let kind = match up {
        true => DecisionKind::ScaledUp,
        false => DecisionKind::ScaledDown,
    };
    Some(Decision {
        from: Some(from),
        to: Some(to),
        measured: measured.filter(|_| by_measure),
        ..decision(at, kind, reason)
    })
}

/// The scaler wanted `wanted` replicas, but the namespace's quota leaves `cap`.
pub fn held_at_quota(at: DateTime<Utc>, wanted: u32, cap: u32) -> Decision {
    let reason = format!("wanted {wanted} replicas; the namespace's replica quota leaves it {cap}");
    Decision {
        to: Some(cap),
        ..decision(at, DecisionKind::HeldAtQuota, reason)
    }
}

/// Every replica retired: idle since `last_busy`, or no replica allowed.
pub fn to_zero(
    at: DateTime<Utc>,
    from: u32,
    last_busy: DateTime<Utc>,
    bounds: &Bounds,
    cap: u32,
) -> Decision {
    let reason = match bounds.scale_to_zero_after {
        Some(m) if bounds.max > 0 && cap > 0 => {
            let idle = (at - last_busy).num_seconds().max(0);
            format!("no request for {} (the timeout is {m} min)", span(idle))
        }
        _ if cap == 0 => "the namespace's replica quota leaves it no replicas".to_string(),
        _ => "the schedule in effect allows no replicas".to_string(),
    };
    Decision {
        from: Some(from),
        to: Some(0),
        ..decision(at, DecisionKind::ScaledToZero, reason)
    }
}

/// Seconds as a reason says them: `90 s`, `16 min`, `2 h 5 min`.
fn span(secs: i64) -> String {
    match secs {
        s if s < 120 => format!("{s} s"),
        s if s < 7200 => format!("{} min", s / 60),
        s => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

/// A scaled-to-zero endpoint started again: by the request `by` (on another server when unknown), or by
/// the schedule.
pub fn woken(at: DateTime<Utc>, to: u32, by_request: bool, by: Option<String>) -> Decision {
    let reason = match (by_request, by) {
        (true, Some(request)) => format!("woken by a request: {request}"),
        (true, None) => "woken by a request to another server".to_string(),
        (false, _) => "started by the schedule's minimum".to_string(),
    };
    Decision {
        from: Some(0),
        to: Some(to),
        ..decision(at, DecisionKind::Woken, reason)
    }
}

/// A schedule entry began (`None`: the last one ended, the endpoint's own bounds apply).
pub fn schedule(at: DateTime<Utc>, entry: Option<&ScheduleEntry>, own: &Bounds) -> Decision {
    let reason = match entry {
        Some(e) => format!(
            "the schedule entry at {} began: {} to {} replicas",
            e.at, e.min_replica, e.max_replica
        ),
        None => format!(
            "no schedule entry is in effect: the endpoint's own {} to {} replicas",
            own.min, own.max
        ),
    };
    decision(at, DecisionKind::Schedule, reason)
}

/// A replica exited or never got healthy (`why`); the next starts after `backoff`.
pub fn replica_exited(at: DateTime<Utc>, why: &str, backoff: std::time::Duration) -> Decision {
    let reason = match backoff.as_millis() {
        0 => format!("{why}; starting another"),
        ms => format!("{why}; starting another in {}", span_ms(ms)),
    };
    decision(at, DecisionKind::ReplicaExited, reason)
}

fn span_ms(ms: u128) -> String {
    match ms {
        ms if ms < 1000 => format!("{ms} ms"),
        ms => span(i64::try_from(ms / 1000).unwrap_or(i64::MAX)),
    }
}

/// Whether a pass whose status was not written decides `kind` again: the changes of state (see
/// [`transition`]), and waking and scaling to zero, which the stored state still asks for.
pub fn decided_again(kind: DecisionKind) -> bool {
    matches!(
        kind,
        DecisionKind::Updated
            | DecisionKind::Failed
            | DecisionKind::Woken
            | DecisionKind::ScaledToZero
    )
}

/// What a change of state says, when it is a decision of its own: an update rolled out, or the endpoint
/// failed (its message says why). Scaling to zero and waking are told where they are decided.
pub fn transition(
    at: DateTime<Utc>,
    from: EndpointState,
    to: EndpointState,
    message: Option<&str>,
    ready: u32,
) -> Option<Decision> {
    let why = message.unwrap_or("its replicas keep failing");
    match (from, to) {
        (EndpointState::Updating, EndpointState::Running) => {
            let replicas = if ready == 1 { "replica" } else { "replicas" };
            let reason =
                format!("the new spec serves on {ready} {replicas}; the old ones are retired");
            Some(decision(at, DecisionKind::Updated, reason))
        }
        (f, EndpointState::Failed | EndpointState::UpdateFailed) if f != to => {
            Some(decision(at, DecisionKind::Failed, why.to_string()))
        }
        _ => None,
    }
}

/// Writes the decisions of a pass, by endpoint id, in one unit of work.
pub async fn write(store: &dyn Store, decided: &[(String, Vec<Decision>)]) -> StoreResult<()> {
    if decided.iter().all(|(_, d)| d.is_empty()) {
        return Ok(());
    }
    let mut unit = store.begin().await?;
    for (endpoint_id, decisions) in decided {
        unit.add_decisions(endpoint_id, decisions).await?;
    }
    unit.commit().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::analytics::Measured;

    fn bounds(min: u32, max: u32) -> Bounds {
        Bounds {
            min,
            max,
            scale_to_zero_after: Some(15),
        }
    }

    #[test]
    fn a_scale_up_names_its_measure_or_the_minimum() {
        let at = DateTime::UNIX_EPOCH;
        let explained = Explained {
            measured: Some(Measured {
                measure: "pendingRequests".into(),
                value: 3.25,
                threshold: 1.5,
            }),
            wanted: 3,
        };
        let d = scaled(at, 1, 3, Some(&explained), &bounds(1, 4)).expect("a decision");
        assert_eq!(d.kind, DecisionKind::ScaledUp);
        assert_eq!(d.reason, "pendingRequests 3.25 is above its threshold 1.5");
        assert_eq!((d.from, d.to), (Some(1), Some(3)));
        let lifted = Explained {
            wanted: 1,
            ..explained
        };
        let d = scaled(at, 1, 2, Some(&lifted), &bounds(2, 4)).expect("a decision");
        assert_eq!(d.reason, "the minimum in force is 2");
        assert!(d.measured.is_none());
        assert!(scaled(at, 2, 2, None, &bounds(1, 4)).is_none());
    }

    #[test]
    fn a_schedule_entry_a_wake_up_and_an_exit_say_what_happened() {
        let at = DateTime::UNIX_EPOCH;
        let entry = ScheduleEntry {
            at: "08:00".into(),
            min_replica: 1,
            max_replica: 4,
            scale_to_zero_timeout: None,
        };
        let d = schedule(at, Some(&entry), &bounds(0, 2));
        assert_eq!(
            d.reason,
            "the schedule entry at 08:00 began: 1 to 4 replicas"
        );
        let d = schedule(at, None, &bounds(0, 2));
        assert_eq!(
            d.reason,
            "no schedule entry is in effect: the endpoint's own 0 to 2 replicas"
        );
        let d = woken(at, 1, true, Some("POST /endpoints/a/b/embed".into()));
        assert_eq!(d.reason, "woken by a request: POST /endpoints/a/b/embed");
        assert_eq!(
            woken(at, 1, true, None).reason,
            "woken by a request to another server"
        );
        assert_eq!(woken(at, 2, false, None).to, Some(2));
        let ms = std::time::Duration::from_millis;
        let d = replica_exited(at, "replica r exited: exit status: 3", ms(2000));
        assert_eq!(
            d.reason,
            "replica r exited: exit status: 3; starting another in 2 s"
        );
        let d = replica_exited(at, "x", ms(0));
        assert_eq!(d.reason, "x; starting another");
        let t = transition(at, EndpointState::Updating, EndpointState::Running, None, 1);
        assert_eq!(
            t.map(|d| d.reason),
            Some("the new spec serves on 1 replica; the old ones are retired".into())
        );
        assert!(transition(at, EndpointState::Running, EndpointState::Running, None, 1).is_none());
    }

    #[test]
    fn scaling_to_zero_says_how_long_it_was_idle() {
        let at = DateTime::UNIX_EPOCH + chrono::Duration::minutes(16);
        let d = to_zero(at, 1, DateTime::UNIX_EPOCH, &bounds(0, 1), 1);
        assert_eq!(d.reason, "no request for 16 min (the timeout is 15 min)");
        let d = to_zero(at, 1, DateTime::UNIX_EPOCH, &bounds(0, 1), 0);
        assert!(d.reason.contains("quota"), "{}", d.reason);
    }
}
