//! An endpoint's analytics as the API answers them: its series over a range, a point every `step`, made
//! from the stored samples of every server (see [`crate::model::analytics`]), and its decisions.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::{endpoints, Context, Error, Result};
use crate::model::analytics::{
    AnalyticsOut, Decision, PointSum, Sample, COARSE_STEP_S, FINE_STEP_S,
};

/// Most points one answer holds.
pub const MAX_POINTS: i64 = 2000;

/// Points an answer without `step` aims at.
const DEFAULT_POINTS: i64 = 120;

/// Decisions one answer holds unless asked for fewer, and at most.
pub const DEFAULT_DECISIONS: u32 = 100;
pub const MAX_DECISIONS: u32 = 1000;

/// What the caller asked for, as given (see [`range`]).
#[derive(Debug, Default, Clone)]
pub struct Asked {
    pub from: Option<String>,
    pub to: Option<String>,
    pub step: Option<String>,
}

/// The range to answer: `[from, to)` in Unix seconds, the step, and the stored resolution it is made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub from: i64,
    pub to: i64,
    pub step: i64,
    pub resolution: i64,
}

/// The latest time a query may name: the end of the year 9999, in Unix seconds.
const LAST_INSTANT: i64 = 253_402_300_799;

/// The longest step, in seconds (about a year).
const MAX_STEP: i64 = 366 * 86_400;

/// A time as the query gives it: RFC 3339, or Unix seconds; from 1970 to the end of 9999.
fn instant(name: &str, v: &str) -> Result<i64> {
    let secs = match v.trim().parse::<i64>() {
        Ok(secs) => Some(secs),
        Err(_) => DateTime::parse_from_rfc3339(v.trim())
            .ok()
            .map(|t| t.timestamp()),
    };
    secs.filter(|s| (0..=LAST_INSTANT).contains(s))
        .ok_or_else(|| {
            Error::BadRequest(format!(
                "{name} must be an RFC 3339 time or Unix seconds, from 1970 to 9999, not {v:?}"
            ))
        })
}

/// A step as the query gives it: seconds, or a number with `s`, `m`, `h` or `d`.
fn seconds(v: &str) -> Result<i64> {
    let v = v.trim();
    let (digits, unit) = match v.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&v[..i], c),
        _ => (v, 's'),
    };
    let per = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => 0,
    };
    let n = digits.parse::<i64>().ok().filter(|n| *n > 0 && per > 0);
    let step = n.and_then(|n| n.checked_mul(per));
    step.filter(|s| *s <= MAX_STEP).ok_or_else(|| {
        Error::BadRequest(format!(
            "step must be a number of seconds (or with s, m, h or d) up to {MAX_STEP}, not {v:?}"
        ))
    })
}

/// The range `asked` names at `now`: by default the last hour. The 10-second samples answer a range they
/// still cover (`analytics.keep_10s_s`), the minute samples any other; the step is a whole number of the
/// resolution's buckets (by default one that gives about [`DEFAULT_POINTS`] points), and the range is
/// widened to whole steps.
pub fn range(asked: &Asked, now: DateTime<Utc>, keep_fine_s: u64) -> Result<Range> {
    let now_s = now.timestamp();
    let to = match &asked.to {
        Some(v) => instant("to", v)?,
        None => now_s,
    };
    let from = match &asked.from {
        Some(v) => instant("from", v)?,
        None => (to - 3600).max(0),
    };
    if from >= to {
        return Err(Error::BadRequest("from must be before to".into()));
    }
    let keep_fine = i64::try_from(keep_fine_s).unwrap_or(i64::MAX);
    let resolution = match from >= now_s.saturating_sub(keep_fine) {
        true => FINE_STEP_S,
        false => COARSE_STEP_S,
    };
    let step = match &asked.step {
        Some(v) => seconds(v)?,
        None => {
            let wanted = ((to - from) / DEFAULT_POINTS).max(resolution);
            // Whole buckets of the resolution.
            (wanted + resolution - 1) / resolution * resolution
        }
    };
    if step % resolution != 0 {
        return Err(Error::BadRequest(format!(
            "step must be a multiple of {resolution} s for this range (the samples it is made from)"
        )));
    }
    let from = from.div_euclid(step) * step;
    let to = (to + step - 1).div_euclid(step) * step;
    if (to - from) / step > MAX_POINTS {
        return Err(Error::BadRequest(format!(
            "at most {MAX_POINTS} points: a larger step, or a shorter range"
        )));
    }
    Ok(Range {
        from,
        to,
        step,
        resolution,
    })
}

/// The endpoint's series over the range `asked` names.
pub async fn series(
    ctx: &Context,
    namespace: &str,
    name: &str,
    asked: &Asked,
) -> Result<AnalyticsOut> {
    let rec = endpoints::get(ctx, namespace, name).await?;
    let r = range(asked, ctx.clock.now(), ctx.analytics.keep_10s_s)?;
    let rows = ctx
        .store
        .read()
        .await?
        .samples(&rec.id, r.resolution, r.from, r.to)
        .await?;
    // Bucket → every server's sample of it.
    let mut buckets: BTreeMap<i64, Vec<Sample>> = BTreeMap::new();
    for row in rows {
        buckets.entry(row.bucket).or_default().push(row.sample);
    }
    Ok(points(&buckets, r, ctx.clock.now().timestamp()))
}

/// The points of range `r` from the samples of its buckets, at `now` (Unix seconds): a bucket that has
/// not ended by then is not yet written.
pub fn points(buckets: &BTreeMap<i64, Vec<Sample>>, r: Range, now: i64) -> AnalyticsOut {
    let at = |s: i64| DateTime::from_timestamp(s, 0).unwrap_or(DateTime::UNIX_EPOCH);
    let in_step = r.step / r.resolution;
    let mut out = Vec::new();
    let mut start = r.from;
    while start < r.to {
        let mut sum = PointSum::default();
        for samples in buckets.range(start..start + r.step).map(|(_, s)| s) {
            sum.add_bucket(samples.iter());
        }
        let passed = ((now - start) / r.resolution).clamp(0, in_step);
        let passed = u32::try_from(passed).unwrap_or(u32::MAX);
        out.push(sum.point(at(start), r.resolution, passed));
        start += r.step;
    }
    AnalyticsOut {
        from: at(r.from),
        to: at(r.to),
        step: r.step,
        resolution: r.resolution,
        points: out,
    }
}

/// The endpoint's decisions, newest first: `limit` of them (by default [`DEFAULT_DECISIONS`]), those since
/// `since` (RFC 3339 or Unix seconds) when given.
pub async fn decisions(
    ctx: &Context,
    namespace: &str,
    name: &str,
    since: Option<&str>,
    limit: Option<u32>,
) -> Result<Vec<Decision>> {
    let rec = endpoints::get(ctx, namespace, name).await?;
    let since = match since {
        Some(v) => instant("since", v)?,
        None => 0,
    };
    let since = DateTime::from_timestamp(since, 0).unwrap_or(DateTime::UNIX_EPOCH);
    let limit = match limit {
        Some(n) if (1..=MAX_DECISIONS).contains(&n) => n,
        Some(_) => {
            return Err(Error::BadRequest(format!(
                "limit must be between 1 and {MAX_DECISIONS}"
            )))
        }
        None => DEFAULT_DECISIONS,
    };
    let mut read = ctx.store.read().await?;
    Ok(read.decisions(&rec.id, since, limit).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(from: Option<&str>, to: Option<&str>, step: Option<&str>) -> Asked {
        Asked {
            from: from.map(String::from),
            to: to.map(String::from),
            step: step.map(String::from),
        }
    }

    #[test]
    fn the_last_hour_by_default_from_the_fine_samples() {
        let now = DateTime::from_timestamp(1_700_000_005, 0).expect("time");
        let r = range(&Asked::default(), now, 3600).expect("range");
        assert_eq!(r.resolution, 10);
        assert_eq!(r.step, 30, "about 120 points");
        assert_eq!((r.from % 30, r.to % 30), (0, 0));
        assert!(r.from <= 1_700_000_005 - 3600 && r.to >= 1_700_000_005);
    }

    #[test]
    fn older_ranges_come_from_the_minutes_and_bad_ones_are_refused() {
        let now = DateTime::from_timestamp(1_700_000_000, 0).expect("time");
        let day = range(&asked(Some("1699913600"), None, None), now, 3600).expect("range");
        assert_eq!((day.resolution, day.step), (60, 720));
        let r = range(
            &asked(Some("2023-11-13T22:00:00Z"), None, Some("5m")),
            now,
            3600,
        );
        assert_eq!(r.expect("range").step, 300);
        for (bad, says) in [
            (asked(None, None, Some("7s")), "multiple of 10"),
            (asked(None, None, Some("soon")), "step must be"),
            (asked(Some("yesterday"), None, None), "from must be"),
            (
                asked(Some("1700000000"), Some("1699990000"), None),
                "before",
            ),
            (asked(Some("0"), None, Some("60")), "at most"),
            (asked(Some("-9223372036854775808"), None, None), "from 1970"),
            (asked(None, Some("99999999999999"), None), "to must be"),
            (asked(None, None, Some("9999999999d")), "step must be"),
        ] {
            let e = range(&bad, now, 3600).expect_err("refused");
            assert!(e.to_string().contains(says), "{e} for {bad:?}");
        }
    }

    #[test]
    fn points_cover_the_range_and_add_up_the_servers() {
        let mut a = Sample::default();
        a.statuses[1] = 10;
        let mut b = Sample::default();
        b.statuses[4] = 5;
        let buckets = BTreeMap::from([(100, vec![a.clone(), b]), (110, vec![a])]);
        let r = Range {
            from: 90,
            to: 130,
            step: 20,
            resolution: 10,
        };
        let out = points(&buckets, r, 1_000);
        let counts: Vec<(u64, u64)> = out.points.iter().map(|p| (p.requests, p.errors)).collect();
        assert_eq!(counts, [(15, 5), (10, 0)]);
        assert_eq!(out.points[0].requests_per_second, 0.75);
    }
}
