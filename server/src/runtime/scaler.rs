//! The scaling engine: the bounds in force, idleness, and how many replicas an endpoint needs.
//!
//! Its decisions are pure functions of the time they are given: the bounds a schedule puts in force
//! ([`bounds_at`]), when an idle endpoint scales to zero ([`idle_expired`]), and how many replicas its load
//! asks for ([`Scaler::desired`]). No I/O, no clock, no sleeping: the reconciler samples the load each
//! tick, passes `now`, and acts on the answers.
//!
//! # How the replica count is decided
//!
//! The design is the Kubernetes Horizontal Pod Autoscaler's (HPA), applied to one endpoint:
//!
//! 1. **Measure.** The reconciler [observes](Scaler::observe) one [`LoadSample`] per tick. A sample taken
//!    while replicas were ready gives a per-replica load: `hardwareUsage` (and no measure at all) reads the
//!    mean CPU use, `pendingRequests` the requests in flight divided by the ready replicas, `inferenceLoad`
//!    the engines' KV-cache use and queue length.
//! 2. **Average.** The loads of the samples in the [evaluation window](ScalerSettings::evaluation_window)
//!    are averaged and divided by the measure's threshold: the *ratio* (1.0 = exactly at the threshold).
//!    `inferenceLoad` takes the larger of its two ratios. No sample in the window, or none with a metric
//!    the measure needs (an engine that exports none): hold the current count.
//! 3. **Recommend.** Within the [tolerance](ScalerSettings::tolerance) of 1.0: the current count.
//!    Otherwise `ceil(ready × ratio)`, the count that brings the load back to the threshold; when every
//!    wanted replica is ready that is `ceil(current × ratio)`. While some wanted replicas are not ready
//!    (starting: a model can take minutes to load), they count as idle when scaling up and as loaded at
//!    the threshold when scaling down, and a result that then points the other way keeps the current
//!    count. So the scaler waits for the replicas it has already asked for instead of asking for more on
//!    every tick (HPA's treatment of unready pods).
//! 4. **Stabilize.** Every recommendation is remembered. A scale-up goes only as far as the *lowest*
//!    recommendation of the last [`scale_up_stabilization`](ScalerSettings::scale_up_stabilization), a
//!    scale-down only as far as the *highest* of the last
//!    [`scale_down_stabilization`](ScalerSettings::scale_down_stabilization): a spike or a dip must last
//!    that long before it moves the count, and a load that swings back and forth moves it in neither
//!    direction. A new or [reset](Scaler::reset) scaler counts the current count as its first
//!    recommendation, so after a restart or a wake-up it too waits out both windows.
//! 5. **Clamp** to the [`Bounds`] in force, after stabilization: a maximum lowered or a minimum raised by
//!    a schedule entry takes effect at once. An active endpoint keeps at least one replica; scaling to
//!    zero is [`idle_expired`]'s decision, never the load's.
//!
//! Memory per endpoint is bounded: samples older than the evaluation window and recommendations older
//! than their stabilization window are dropped, a recommendation that can no longer be the extreme of its
//! window is dropped at once, and both are capped in number whatever the tick rate ([`MAX_SAMPLES`]).
//! Time is expected to move forward; if the clock is set back, the samples "from the future" are left
//! out of averages and the memory stays bounded.

use std::collections::VecDeque;

use chrono::{DateTime, Duration, Timelike, Utc};

use crate::config::ScalingConfig;
use crate::model::analytics::Measured;
use crate::model::{Measure, Scaling};

/// Most load samples a [`Scaler`] keeps (the newest): far more than a window holds at a sane tick rate
/// (60 at one tick a second and the default window), so it only bounds memory against runaway ticking.
pub const MAX_SAMPLES: usize = 1024;
/// Most recommendations kept per stabilization direction; reached only by pathological input.
const MAX_RECOMMENDATIONS: usize = 1024;
/// A threshold below this counts as this: a threshold of 0 means "any load is too much", not a division
/// by zero.
const MIN_THRESHOLD: f64 = 1e-6;
/// Taken off a replica count before rounding up, so floating-point noise (`6.000000000000001`) does not
/// add a replica.
const ROUNDING_SLACK: f64 = 1e-9;

/// The minute of the UTC day (0..1440) `now` falls in, as schedule entries count them.
pub fn minute_of_day(now: DateTime<Utc>) -> u16 {
    // At most 23 * 60 + 59 = 1439.
    (now.hour() * 60 + now.minute()) as u16
}

/// The bounds in force at a given time: the schedule entry in effect replaces `minReplica`,
/// `maxReplica` and `scaleToZeroTimeout` (UTC, wrapping around midnight); outside entries (no schedule)
/// the endpoint's own values apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub min: u32,
    pub max: u32,
    /// Minutes of inactivity before scaling to zero; `None` = never (min > 0).
    pub scale_to_zero_after: Option<u32>,
}

/// The [`Bounds`] in force at `now`.
pub fn bounds_at(scaling: &Scaling, now: DateTime<Utc>) -> Bounds {
    match scaling.entry_in_effect(minute_of_day(now)) {
        Some(entry) => Bounds {
            min: entry.min_replica,
            max: entry.max_replica,
            scale_to_zero_after: entry.effective_scale_to_zero_timeout(),
        },
        None => Bounds {
            min: scaling.min_replica,
            max: scaling.max_replica,
            scale_to_zero_after: scaling.effective_scale_to_zero_timeout(),
        },
    }
}

/// Whether an endpoint whose last request was at `last_activity` should scale to zero at `now`: only when
/// `bounds.min` is 0, once it has been idle for at least the timeout (a timeout of 0 minutes means as
/// soon as it is idle). A request in flight is activity: the caller passes `now` as `last_activity`
/// while one is (or does not ask). A `last_activity` after `now` is never idle.
pub fn idle_expired(bounds: &Bounds, last_activity: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    if bounds.min > 0 {
        return false;
    }
    match bounds.scale_to_zero_after {
        Some(minutes) => now - last_activity >= Duration::minutes(i64::from(minutes)),
        None => false,
    }
}

/// One observation of an endpoint's load, taken by the reconciler each tick.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LoadSample {
    /// Ready replicas when sampled. A sample with none carries no per-replica load (it is skipped in
    /// averages), but the latest sample's count is the capacity the decision builds on.
    pub replicas: u32,
    /// Mean replica CPU use, percent of one instance (0-100); `None` if unknown.
    pub cpu_percent: Option<f64>,
    /// Requests in flight at the proxy for the endpoint (total, not per replica).
    pub pending_requests: f64,
    /// Mean KV-cache use across replicas, percent 0-100; `None` if the engine exports none.
    pub kv_cache_usage: Option<f64>,
    /// Mean across replicas of the requests waiting in the engine queue; `None` if the engine exports none.
    pub requests_waiting: Option<f64>,
}

/// How the scaler decides; the `scaling` section of the runtime configuration ([`ScalingConfig`]).
/// Every value is safe: a negative window counts as 0, a negative or non-finite tolerance as 0, and a
/// threshold of 0 or less as "any load is above it".
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScalerSettings {
    /// Load samples are averaged over this window before each decision. Default 60 s: long enough to
    /// smooth the tick-to-tick noise of CPU use and request counts, short enough to react within a
    /// minute (the window Hugging Face Inference Endpoints average utilization over). 0: only the samples
    /// taken at the instant of the decision.
    pub evaluation_window: Duration,
    /// A scale-up goes only to the lowest count recommended within this window, so the load must stay
    /// high this long before replicas are added. Default 30 s: a replica of a model server costs minutes
    /// to start and is then kept for at least the scale-down window, so a spike of a tick or two should
    /// not buy one; 30 s still reacts well before a new replica could be ready (Kubernetes' HPA uses 0
    /// for pods that start in seconds).
    pub scale_up_stabilization: Duration,
    /// A scale-down goes only to the highest count recommended within this window, so the load must
    /// stay low this long before replicas are removed. Default 300 s, as in Kubernetes' HPA and Hugging
    /// Face Inference Endpoints: removing a replica that is needed again a minute later means a cold start.
    pub scale_down_stabilization: Duration,
    /// No change while the measure is within this fraction of its threshold (ratio in
    /// `[1 - tolerance, 1 + tolerance]`). Default 0.1, as in Kubernetes' HPA.
    pub tolerance: f64,
    /// `hardwareUsage` threshold, percent CPU, for `hardwareUsage: null` and for endpoints with no
    /// measure. Default 80, the utilization at which Hugging Face Inference Endpoints add a replica.
    pub default_hardware_threshold: f64,
    /// `pendingRequests` threshold, requests in flight per ready replica, for `pendingRequests: null`.
    /// Default 1.5, Hugging Face Inference Endpoints' value for the same measure ("more than 1.5 pending
    /// requests per replica"), so a null threshold means what the compatible API's users expect.
    pub default_pending_threshold: f64,
}

impl Default for ScalerSettings {
    fn default() -> Self {
        ScalerSettings::from_config(&ScalingConfig::default())
    }
}

impl ScalerSettings {
    /// The settings a configuration file asks for (windows in whole seconds).
    pub fn from_config(config: &ScalingConfig) -> ScalerSettings {
        ScalerSettings {
            evaluation_window: seconds(config.evaluation_window_s),
            scale_up_stabilization: seconds(config.scale_up_stabilization_s),
            scale_down_stabilization: seconds(config.scale_down_stabilization_s),
            tolerance: config.tolerance,
            default_hardware_threshold: config.default_hardware_threshold,
            default_pending_threshold: config.default_pending_threshold,
        }
    }
}

fn seconds(s: u64) -> Duration {
    i64::try_from(s)
        .ok()
        .and_then(Duration::try_seconds)
        .unwrap_or(Duration::MAX)
}

/// Per-endpoint memory of the scaler: the recent load samples and recommendations.
#[derive(Debug, Clone, Default)]
pub struct Scaler {
    /// In the order observed.
    samples: VecDeque<(DateTime<Utc>, LoadSample)>,
    /// The evaluation window of the last decision, so [`Scaler::observe`] drops what none will read.
    window: Option<Duration>,
    /// Recommendations that can still be the lowest of the scale-up window: counts strictly increase from
    /// front to back, so the front is the lowest (a recommendation with a newer one at or below it can
    /// never be the lowest again).
    lows: VecDeque<Recommendation>,
    /// Likewise for the highest of the scale-down window: counts strictly decrease from front to back.
    highs: VecDeque<Recommendation>,
    /// Whether the count found at the first decision has been recorded as a recommendation.
    seeded: bool,
    /// What the last decision went by.
    explained: Option<Explained>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Recommendation {
    at: DateTime<Utc>,
    replicas: u32,
}

/// The averaged load, relative to the threshold, and the replicas it was measured on.
#[derive(Debug, Clone)]
struct Load {
    ratio: f64,
    ready: u32,
    /// The measure itself.
    measured: Measured,
}

/// What the last decision ([`Scaler::desired`]) went by: the measure, and the count the scaler wanted
/// before the bounds in force.
#[derive(Debug, Clone, PartialEq)]
pub struct Explained {
    pub measured: Option<Measured>,
    pub wanted: u32,
}

impl Scaler {
    /// Records the load sampled at `now`.
    pub fn observe(&mut self, now: DateTime<Utc>, sample: LoadSample) {
        let window = self
            .window
            .unwrap_or_else(|| ScalerSettings::default().evaluation_window);
        let from = cutoff(now, window);
        self.samples.retain(|(at, _)| *at > from);
        self.samples.push_back((now, sample));
        if self.samples.len() > MAX_SAMPLES {
            self.samples.pop_front();
        }
    }

    /// The replica count wanted at `now`, for an endpoint that is active (not scaled to zero, not
    /// paused): always within `[max(bounds.min, 1), bounds.max]`, and 0 if `bounds.max` is 0.
    /// `current` = replicas currently wanted/running (0 counts as 1). See the module documentation for
    /// the steps.
    pub fn desired(
        &mut self,
        now: DateTime<Utc>,
        current: u32,
        bounds: &Bounds,
        measure: Option<&Measure>,
        settings: &ScalerSettings,
    ) -> u32 {
        if bounds.max == 0 {
            return 0;
        }
        // A window of 0 (or less) still holds the samples taken at `now`.
        let window = settings.evaluation_window.max(Duration::nanoseconds(1));
        self.window = Some(window);
        let from = cutoff(now, window);
        self.samples.retain(|(at, _)| *at > from);

        let current = current.max(1);
        let load = self.load(now, measure, settings);
        let wanted = match &load {
            Some(load) => {
                let raw = recommend(load, current, settings.tolerance);
                self.stabilize(now, current, raw, settings)
            }
            None => current,
        };
        self.explained = Some(Explained {
            measured: load.map(|l| l.measured),
            wanted,
        });
        wanted.clamp(bounds.min.clamp(1, bounds.max), bounds.max)
    }

    /// What the last decision went by; `None` before one (or after [`Self::reset`]).
    pub fn explained(&self) -> Option<&Explained> {
        self.explained.as_ref()
    }

    /// Forgets samples and recommendations (after scaling to zero or a pause): the next decision starts
    /// over, as a new scaler's would.
    pub fn reset(&mut self) {
        self.samples.clear();
        self.lows.clear();
        self.highs.clear();
        self.seeded = false;
        self.explained = None;
    }

    /// The measure's averaged load over the samples in the window, or `None` when there is nothing to
    /// decide on.
    fn load(
        &self,
        now: DateTime<Utc>,
        measure: Option<&Measure>,
        settings: &ScalerSettings,
    ) -> Option<Load> {
        let samples: Vec<&LoadSample> = self
            .samples
            .iter()
            .filter(|(at, _)| *at <= now)
            .map(|(_, s)| s)
            .collect();
        let ready = samples.last()?.replicas;
        let measured = || samples.iter().filter(|s| s.replicas > 0);
        let cpu = || mean(measured().filter_map(|s| s.cpu_percent));
        let against = |measure, value: f64, limit: f64| {
            let threshold = threshold(limit);
            Some(Load {
                ratio: value / threshold,
                ready,
                measured: Measured {
                    measure: String::from(measure),
                    value,
                    threshold,
                },
            })
        };
        match measure {
            None => against("hardwareUsage", cpu()?, settings.default_hardware_threshold),
            Some(Measure::HardwareUsage(t)) => against(
                "hardwareUsage",
                cpu()?,
                t.unwrap_or(settings.default_hardware_threshold),
            ),
            Some(Measure::PendingRequests(t)) => {
                let per_replica = measured().map(|s| s.pending_requests / f64::from(s.replicas));
                let limit = t.unwrap_or(settings.default_pending_threshold);
                against("pendingRequests", mean(per_replica)?, limit)
            }
            Some(Measure::InferenceLoad(limits)) => {
                let kv = mean(measured().filter_map(|s| s.kv_cache_usage))
                    .and_then(|m| against("inferenceLoad.kvCacheUsage", m, limits.kv_cache_usage));
                let waiting = mean(measured().filter_map(|s| s.requests_waiting)).and_then(|m| {
                    against("inferenceLoad.requestsWaiting", m, limits.requests_waiting)
                });
                // The measure nearer its threshold decides.
                match (kv, waiting) {
                    (Some(kv), Some(waiting)) if waiting.ratio > kv.ratio => Some(waiting),
                    (Some(kv), _) => Some(kv),
                    (None, waiting) => waiting,
                }
            }
        }
    }

    /// Records `raw` and brings `current` within the lowest recommendation of the scale-up window and
    /// the highest of the scale-down window.
    fn stabilize(
        &mut self,
        now: DateTime<Utc>,
        current: u32,
        raw: u32,
        settings: &ScalerSettings,
    ) -> u32 {
        let up = non_negative(settings.scale_up_stabilization);
        let down = non_negative(settings.scale_down_stabilization);
        let (up_from, down_from) = (cutoff(now, up), cutoff(now, down));
        self.lows.retain(|r| r.at > up_from);
        self.highs.retain(|r| r.at > down_from);
        if !self.seeded {
            // No history yet: the count found is taken as recommended until now, so a first decision
            // after a restart or a wake-up waits out the windows like any other change.
            self.seeded = true;
            let found = Recommendation {
                at: now,
                replicas: current,
            };
            if up > Duration::zero() {
                push_low(&mut self.lows, found);
            }
            if down > Duration::zero() {
                push_high(&mut self.highs, found);
            }
        }
        let rec = Recommendation {
            at: now,
            replicas: raw,
        };
        push_low(&mut self.lows, rec);
        push_high(&mut self.highs, rec);
        let lowest = self.lows.front().map_or(raw, |r| r.replicas);
        let highest = self.highs.front().map_or(raw, |r| r.replicas);
        current.max(lowest).min(highest)
    }
}

fn push_low(lows: &mut VecDeque<Recommendation>, rec: Recommendation) {
    while lows.back().is_some_and(|r| r.replicas >= rec.replicas) {
        lows.pop_back();
    }
    lows.push_back(rec);
    if lows.len() > MAX_RECOMMENDATIONS {
        lows.pop_front();
    }
}

fn push_high(highs: &mut VecDeque<Recommendation>, rec: Recommendation) {
    while highs.back().is_some_and(|r| r.replicas <= rec.replicas) {
        highs.pop_back();
    }
    highs.push_back(rec);
    if highs.len() > MAX_RECOMMENDATIONS {
        highs.pop_front();
    }
}

/// The unstabilized recommendation for a load, given the `current` (at least 1) wanted replicas.
fn recommend(load: &Load, current: u32, tolerance: f64) -> u32 {
    let tolerance = if tolerance.is_finite() {
        tolerance.max(0.0)
    } else {
        0.0
    };
    let within = |ratio: f64| (ratio - 1.0).abs() <= tolerance;
    let (ratio, ready) = (load.ratio, load.ready);
    if ready >= current {
        return if within(ratio) {
            current
        } else {
            replicas_for(ratio * f64::from(ready))
        };
    }
    // Some wanted replicas are not ready: they take no load yet. Scaling up, count them as idle (the
    // load spread over every wanted replica); scaling down, as loaded at the threshold (they have not
    // shown they are not needed). If that turns the decision around, wait for them.
    let (ready, wanted) = (f64::from(ready), f64::from(current));
    let (adjusted, same_direction) = if ratio > 1.0 {
        let adjusted = ratio * ready / wanted;
        (adjusted, adjusted > 1.0)
    } else {
        let adjusted = (ratio * ready + (wanted - ready)) / wanted;
        (adjusted, adjusted < 1.0)
    };
    if !same_direction || within(adjusted) {
        current
    } else {
        replicas_for(adjusted * wanted)
    }
}

/// The whole number of replicas that carries `load` replicas' worth of work at the threshold.
fn replicas_for(load: f64) -> u32 {
    let replicas = (load - ROUNDING_SLACK).ceil();
    if replicas > 0.0 {
        // `as` saturates at u32::MAX; the bounds clamp it afterwards.
        replicas as u32
    } else {
        0
    }
}

/// The mean of the finite, non-negative values, or `None` if there are none.
fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values
        .filter(|v| v.is_finite() && *v >= 0.0)
        .fold((0.0, 0u32), |(sum, n), v| (sum + v, n + 1));
    (n > 0).then(|| sum / f64::from(n))
}

fn threshold(configured: f64) -> f64 {
    // `max` also turns NaN into MIN_THRESHOLD.
    configured.max(MIN_THRESHOLD)
}

fn non_negative(d: Duration) -> Duration {
    d.max(Duration::zero())
}

/// The instant a window of `window` ending at `now` starts after (the window is `(cutoff, now]`).
fn cutoff(now: DateTime<Utc>, window: Duration) -> DateTime<Utc> {
    now.checked_sub_signed(non_negative(window))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::model::{InferenceLoad, ScheduleEntry};

    fn t(h: u32, m: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2025, 3, 14, h, m, s).unwrap()
    }

    fn secs(n: i64) -> Duration {
        Duration::seconds(n)
    }

    fn scaling(
        min: u32,
        max: u32,
        timeout: Option<u32>,
        schedule: Option<Vec<ScheduleEntry>>,
    ) -> Scaling {
        Scaling {
            min_replica: min,
            max_replica: max,
            measure: None,
            scale_to_zero_timeout: timeout,
            schedule,
        }
    }

    fn entry(at: &str, min: u32, max: u32, timeout: Option<u32>) -> ScheduleEntry {
        ScheduleEntry {
            at: at.to_string(),
            min_replica: min,
            max_replica: max,
            scale_to_zero_timeout: timeout,
        }
    }

    fn bounds(min: u32, max: u32) -> Bounds {
        Bounds {
            min,
            max,
            scale_to_zero_after: (min == 0).then_some(15),
        }
    }

    fn cpu(replicas: u32, percent: f64) -> LoadSample {
        LoadSample {
            replicas,
            cpu_percent: Some(percent),
            ..Default::default()
        }
    }

    fn pending(replicas: u32, in_flight: f64) -> LoadSample {
        LoadSample {
            replicas,
            pending_requests: in_flight,
            ..Default::default()
        }
    }

    fn engine(replicas: u32, kv: Option<f64>, waiting: Option<f64>) -> LoadSample {
        LoadSample {
            replicas,
            kv_cache_usage: kv,
            requests_waiting: waiting,
            ..Default::default()
        }
    }

    /// No stabilization: a single decision shows the arithmetic of a recommendation.
    fn instant() -> ScalerSettings {
        ScalerSettings {
            scale_up_stabilization: Duration::zero(),
            scale_down_stabilization: Duration::zero(),
            ..Default::default()
        }
    }

    /// With ticks 10 s apart, each decision sees only its own sample: isolates stabilization.
    fn ten_second_window() -> ScalerSettings {
        ScalerSettings {
            evaluation_window: secs(10),
            ..Default::default()
        }
    }

    fn decide_with(
        settings: &ScalerSettings,
        sample: LoadSample,
        current: u32,
        measure: Option<Measure>,
    ) -> u32 {
        let mut scaler = Scaler::default();
        let now = t(12, 0, 0);
        scaler.observe(now, sample);
        scaler.desired(now, current, &bounds(1, 100), measure.as_ref(), settings)
    }

    fn decide(sample: LoadSample, current: u32, measure: Option<Measure>) -> u32 {
        decide_with(&instant(), sample, current, measure)
    }

    /// Drives one scaler tick by tick; what it decides is the next tick's current count.
    struct Sim {
        scaler: Scaler,
        settings: ScalerSettings,
        bounds: Bounds,
        start: DateTime<Utc>,
        current: u32,
    }

    impl Sim {
        fn new(current: u32, settings: ScalerSettings) -> Sim {
            Sim {
                scaler: Scaler::default(),
                settings,
                bounds: bounds(1, 10),
                start: t(12, 0, 0),
                current,
            }
        }

        /// Observes `sample` `secs` after the start and decides (measure: CPU at the default threshold).
        fn tick(&mut self, secs: i64, sample: LoadSample) -> u32 {
            let now = self.start + Duration::seconds(secs);
            self.scaler.observe(now, sample);
            self.current =
                self.scaler
                    .desired(now, self.current, &self.bounds, None, &self.settings);
            self.current
        }
    }

    #[test]
    fn minute_of_day_counts_utc_minutes() {
        assert_eq!(minute_of_day(t(0, 0, 0)), 0);
        assert_eq!(minute_of_day(t(0, 0, 59)), 0);
        assert_eq!(minute_of_day(t(8, 0, 0)), 480);
        assert_eq!(minute_of_day(t(23, 59, 59)), 1439);
    }

    #[test]
    fn bounds_without_schedule_are_the_endpoint_values() {
        let b = bounds_at(&scaling(0, 4, None, None), t(9, 0, 0));
        assert_eq!(
            b,
            Bounds {
                min: 0,
                max: 4,
                scale_to_zero_after: Some(15)
            }
        );
        let b = bounds_at(&scaling(0, 3, Some(30), Some(vec![])), t(9, 0, 0));
        assert_eq!(
            b,
            Bounds {
                min: 0,
                max: 3,
                scale_to_zero_after: Some(30)
            },
            "an empty schedule is no schedule"
        );
        let b = bounds_at(&scaling(2, 5, None, None), t(9, 0, 0));
        assert_eq!(
            b,
            Bounds {
                min: 2,
                max: 5,
                scale_to_zero_after: None
            }
        );
    }

    #[test]
    fn a_schedule_entry_applies_from_its_start_minute() {
        let s = scaling(
            1,
            8,
            None,
            Some(vec![
                entry("08:00", 2, 4, None),
                entry("20:00", 0, 1, Some(5)),
            ]),
        );
        let day = Bounds {
            min: 2,
            max: 4,
            scale_to_zero_after: None,
        };
        let night = Bounds {
            min: 0,
            max: 1,
            scale_to_zero_after: Some(5),
        };
        assert_eq!(bounds_at(&s, t(7, 59, 0)), night, "one minute before");
        assert_eq!(bounds_at(&s, t(7, 59, 59)), night, "one second before");
        assert_eq!(bounds_at(&s, t(8, 0, 0)), day, "exactly at the start");
        assert_eq!(bounds_at(&s, t(19, 59, 0)), day);
        assert_eq!(bounds_at(&s, t(20, 0, 0)), night);
    }

    #[test]
    fn a_schedule_wraps_around_midnight() {
        let s = scaling(
            2,
            5,
            None,
            Some(vec![entry("22:00", 0, 1, None), entry("06:00", 1, 3, None)]),
        );
        let late = Bounds {
            min: 0,
            max: 1,
            scale_to_zero_after: Some(15),
        };
        let early = Bounds {
            min: 1,
            max: 3,
            scale_to_zero_after: None,
        };
        for at in [
            t(22, 0, 0),
            t(23, 59, 0),
            t(0, 0, 0),
            t(2, 0, 0),
            t(5, 59, 0),
        ] {
            assert_eq!(bounds_at(&s, at), late, "at {at}");
        }
        assert_eq!(bounds_at(&s, t(6, 0, 0)), early);
        assert_eq!(bounds_at(&s, t(21, 59, 0)), early);
    }

    #[test]
    fn an_entry_timeout_defaults_to_15_and_is_none_when_the_entry_keeps_replicas() {
        let s = scaling(
            0,
            4,
            Some(30),
            Some(vec![
                entry("00:00", 0, 2, None),
                entry("08:00", 1, 4, None),
                entry("18:00", 0, 4, Some(5)),
            ]),
        );
        assert_eq!(
            bounds_at(&s, t(1, 0, 0)).scale_to_zero_after,
            Some(15),
            "the entry's null timeout is the default, not the endpoint's 30"
        );
        assert_eq!(bounds_at(&s, t(9, 0, 0)).scale_to_zero_after, None);
        assert_eq!(bounds_at(&s, t(19, 0, 0)).scale_to_zero_after, Some(5));
    }

    #[test]
    fn idle_expires_exactly_at_the_timeout() {
        let b = bounds_at(&scaling(0, 2, None, None), t(12, 0, 0));
        let last = t(12, 0, 0);
        assert!(!idle_expired(&b, last, t(12, 14, 59)), "one second before");
        assert!(
            idle_expired(&b, last, t(12, 15, 0)),
            "exactly at 15 minutes"
        );
        assert!(idle_expired(&b, last, t(13, 0, 0)));
    }

    #[test]
    fn a_newer_request_restarts_the_timeout() {
        let b = bounds(0, 2);
        assert!(idle_expired(&b, t(12, 0, 0), t(12, 15, 0)));
        assert!(!idle_expired(&b, t(12, 10, 0), t(12, 15, 0)));
        assert!(!idle_expired(&b, t(12, 10, 0), t(12, 24, 59)));
        assert!(idle_expired(&b, t(12, 10, 0), t(12, 25, 0)));
    }

    #[test]
    fn an_endpoint_with_a_minimum_is_never_idle() {
        let b = bounds_at(&scaling(1, 2, None, None), t(12, 0, 0));
        assert!(!idle_expired(&b, t(12, 0, 0), t(23, 0, 0)));
        let inconsistent = Bounds {
            min: 1,
            max: 2,
            scale_to_zero_after: Some(15),
        };
        assert!(!idle_expired(&inconsistent, t(12, 0, 0), t(23, 0, 0)));
    }

    #[test]
    fn a_zero_timeout_scales_to_zero_as_soon_as_idle() {
        let b = Bounds {
            min: 0,
            max: 2,
            scale_to_zero_after: Some(0),
        };
        assert!(idle_expired(&b, t(12, 0, 0), t(12, 0, 0)));
        assert!(
            !idle_expired(&b, t(12, 0, 1), t(12, 0, 0)),
            "activity after now"
        );
    }

    #[test]
    fn a_schedule_entry_timeout_governs_idleness() {
        let s = scaling(1, 4, None, Some(vec![entry("20:00", 0, 1, Some(5))]));
        let night = bounds_at(&s, t(21, 0, 0));
        assert!(!idle_expired(&night, t(21, 0, 0), t(21, 4, 59)));
        assert!(idle_expired(&night, t(21, 0, 0), t(21, 5, 0)));
    }

    #[test]
    fn high_cpu_scales_up() {
        assert_eq!(decide(cpu(2, 100.0), 2, None), 3, "no measure: 80%");
        assert_eq!(
            decide(cpu(2, 100.0), 2, Some(Measure::HardwareUsage(None))),
            3,
            "null: 80%"
        );
        assert_eq!(
            decide(cpu(2, 100.0), 2, Some(Measure::HardwareUsage(Some(50.0)))),
            4
        );
        assert_eq!(decide(cpu(4, 96.0), 4, None), 5);
        assert_eq!(
            decide(cpu(5, 96.0), 5, None),
            6,
            "ratio 1.2 × 5 is 6, not 7"
        );
    }

    #[test]
    fn a_scale_up_waits_for_the_up_window() {
        let mut sim = Sim::new(2, ten_second_window());
        for s in [0, 10, 20] {
            assert_eq!(sim.tick(s, cpu(2, 100.0)), 2, "at {s}s");
        }
        assert_eq!(sim.tick(30, cpu(2, 100.0)), 3);
    }

    #[test]
    fn a_spike_must_persist_to_scale_up() {
        let mut sim = Sim::new(4, ten_second_window());
        for s in (0..=60).step_by(10) {
            assert_eq!(sim.tick(s, cpu(4, 80.0)), 4);
        }
        assert_eq!(sim.tick(70, cpu(4, 100.0)), 4);
        assert_eq!(sim.tick(80, cpu(4, 100.0)), 4);
        assert_eq!(sim.tick(90, cpu(4, 100.0)), 5, "high for 30 s");

        let mut sim = Sim::new(4, ten_second_window());
        for s in (0..=60).step_by(10) {
            sim.tick(s, cpu(4, 80.0));
        }
        assert_eq!(sim.tick(70, cpu(4, 100.0)), 4);
        for s in (80..=600).step_by(10) {
            assert_eq!(sim.tick(s, cpu(4, 80.0)), 4, "a one-tick spike, at {s}s");
        }
    }

    #[test]
    fn within_tolerance_the_count_holds() {
        assert_eq!(decide(cpu(10, 87.0), 10, None), 10, "ratio 1.0875");
        assert_eq!(decide(cpu(10, 73.0), 10, None), 10, "ratio 0.9125");
        assert_eq!(decide(cpu(10, 90.0), 10, None), 12, "ratio 1.125");
        assert_eq!(decide(cpu(10, 70.0), 10, None), 9, "ratio 0.875");
        let exact = ScalerSettings {
            tolerance: 0.0,
            ..instant()
        };
        assert_eq!(decide_with(&exact, cpu(10, 87.0), 10, None), 11);
        assert_eq!(decide_with(&exact, cpu(10, 73.0), 10, None), 10);
        assert_eq!(decide_with(&exact, cpu(10, 71.0), 10, None), 9);
    }

    #[test]
    fn a_scale_down_waits_for_the_down_window() {
        let mut sim = Sim::new(4, ten_second_window());
        for s in (0..=100).step_by(10) {
            assert_eq!(sim.tick(s, cpu(4, 80.0)), 4);
        }
        for s in (110..=390).step_by(10) {
            assert_eq!(sim.tick(s, cpu(4, 20.0)), 4, "at {s}s");
        }
        assert_eq!(sim.tick(399, cpu(4, 20.0)), 4, "299 s after the last 4");
        assert_eq!(sim.tick(400, cpu(4, 20.0)), 1, "300 s after the last 4");
    }

    #[test]
    fn a_flapping_load_does_not_flap_the_count() {
        let mut sim = Sim::new(4, ten_second_window());
        for i in 0..360 {
            let load = if i % 2 == 0 { 100.0 } else { 20.0 };
            assert_eq!(sim.tick(i * 10, cpu(4, load)), 4, "tick {i}");
        }

        // A minute busy, a minute quiet, for an hour: a demand of 4 replicas at 100%, then of 0.8.
        let mut sim = Sim::new(4, ten_second_window());
        let mut counts = vec![4];
        for i in 0..360 {
            let demand = if (i / 6) % 2 == 0 { 400.0 } else { 80.0 };
            let current = sim.current;
            let count = sim.tick(i * 10, cpu(current, demand / f64::from(current)));
            if counts.last() != Some(&count) {
                counts.push(count);
            }
        }
        assert_eq!(counts, [4, 5], "one scale-up, no scale-down");
    }

    #[test]
    fn the_bounds_apply_after_stabilization() {
        let s = scaling(
            1,
            6,
            None,
            Some(vec![entry("08:00", 3, 6, None), entry("20:00", 1, 2, None)]),
        );
        let settings = ScalerSettings::default();

        // A busy evening climbs to the maximum; at 20:00 the maximum drops to 2 at once.
        let (mut scaler, mut current, mut now) = (Scaler::default(), 3, t(19, 50, 0));
        while now < t(20, 0, 0) {
            scaler.observe(now, cpu(current, 100.0));
            current = scaler.desired(now, current, &bounds_at(&s, now), None, &settings);
            now += secs(10);
        }
        assert_eq!(current, 6);
        scaler.observe(now, cpu(6, 100.0));
        let mut unscheduled = scaler.clone();
        assert_eq!(
            unscheduled.desired(now, 6, &bounds(3, 6), None, &settings),
            6,
            "the load alone keeps 6"
        );
        assert_eq!(
            scaler.desired(now, 6, &bounds_at(&s, now), None, &settings),
            2
        );

        // A quiet night at 1 replica; at 08:00 the minimum rises to 3 at once.
        let (mut scaler, mut current, mut now) = (Scaler::default(), 2, t(7, 50, 0));
        while now < t(8, 0, 0) {
            scaler.observe(now, cpu(current, 10.0));
            current = scaler.desired(now, current, &bounds_at(&s, now), None, &settings);
            now += secs(10);
        }
        assert_eq!(current, 1);
        scaler.observe(now, cpu(1, 10.0));
        let mut unscheduled = scaler.clone();
        assert_eq!(
            unscheduled.desired(now, 1, &bounds(1, 2), None, &settings),
            1
        );
        assert_eq!(
            scaler.desired(now, 1, &bounds_at(&s, now), None, &settings),
            3
        );
    }

    #[test]
    fn the_count_stays_within_the_bounds() {
        assert_eq!(
            decide_with(&instant(), cpu(4, 100.0), 4, None),
            5,
            "unclamped"
        );
        let mut scaler = Scaler::default();
        let now = t(12, 0, 0);
        scaler.observe(now, cpu(4, 100.0));
        assert_eq!(scaler.desired(now, 4, &bounds(1, 4), None, &instant()), 4);
        assert_eq!(
            scaler.desired(now, 7, &bounds(1, 5), None, &instant()),
            5,
            "a current count above the maximum"
        );
        let mut idle = Scaler::default();
        idle.observe(now, cpu(4, 0.0));
        assert_eq!(idle.desired(now, 4, &bounds(2, 5), None, &instant()), 2);
    }

    #[test]
    fn a_maximum_of_zero_means_zero() {
        let mut scaler = Scaler::default();
        let now = t(12, 0, 0);
        assert_eq!(scaler.desired(now, 3, &bounds(0, 0), None, &instant()), 0);
        scaler.observe(now, cpu(3, 100.0));
        assert_eq!(scaler.desired(now, 3, &bounds(0, 0), None, &instant()), 0);
    }

    #[test]
    fn an_active_endpoint_keeps_one_replica() {
        let mut scaler = Scaler::default();
        let now = t(12, 0, 0);
        assert_eq!(
            scaler.desired(now, 0, &bounds(0, 4), None, &instant()),
            1,
            "no samples"
        );
        scaler.observe(now, cpu(1, 0.0));
        assert_eq!(
            scaler.desired(now, 1, &bounds(0, 4), None, &instant()),
            1,
            "no load"
        );
        let mut busy = Scaler::default();
        busy.observe(now, cpu(1, 100.0));
        assert_eq!(
            busy.desired(now, 0, &bounds(0, 4), None, &instant()),
            2,
            "a current count of 0 counts as 1"
        );
    }

    #[test]
    fn without_samples_in_the_window_the_count_holds() {
        let now = t(12, 0, 0);
        let mut scaler = Scaler::default();
        assert_eq!(scaler.desired(now, 3, &bounds(1, 10), None, &instant()), 3);
        scaler.observe(now - secs(120), cpu(3, 100.0));
        assert_eq!(scaler.desired(now, 3, &bounds(1, 10), None, &instant()), 3);
        scaler.observe(now, cpu(3, 100.0));
        assert_eq!(
            scaler.desired(now, 3, &bounds(1, 10), None, &instant()),
            4,
            "a sample in the window moves it"
        );
    }

    #[test]
    fn pending_requests_are_counted_per_replica() {
        let pending_measure = |t: Option<f64>| Some(Measure::PendingRequests(t));
        assert_eq!(
            decide(pending(2, 6.0), 2, pending_measure(None)),
            4,
            "3 per replica against the default 1.5"
        );
        assert_eq!(decide(pending(2, 6.0), 2, pending_measure(Some(3.0))), 2);
        assert_eq!(decide(pending(2, 6.0), 2, pending_measure(Some(1.0))), 6);
        assert_eq!(
            decide(pending(4, 6.0), 4, pending_measure(None)),
            4,
            "1.5 per replica"
        );
        let busy_cpu = LoadSample {
            cpu_percent: Some(100.0),
            ..pending(4, 0.0)
        };
        assert_eq!(
            decide(busy_cpu, 4, pending_measure(None)),
            1,
            "CPU does not count"
        );
        let configured = ScalerSettings {
            default_pending_threshold: 3.0,
            ..instant()
        };
        assert_eq!(
            decide_with(&configured, pending(2, 6.0), 2, pending_measure(None)),
            2
        );
    }

    #[test]
    fn replicas_still_starting_are_waited_for() {
        // 4 wanted, 2 ready. Scaling up, the 2 starting count as idle:
        assert_eq!(decide(cpu(2, 100.0), 4, None), 4, "not 5");
        assert_eq!(
            decide(pending(2, 12.0), 4, Some(Measure::PendingRequests(None))),
            8,
            "12 / 1.5, not 16"
        );
        // scaling down, as loaded at the threshold:
        assert_eq!(decide(cpu(2, 40.0), 4, None), 3, "not 2");
        // none ready:
        assert_eq!(decide(LoadSample::default(), 4, None), 4);

        // Ten minutes of slow starts do not compound into more and more replicas.
        let mut sim = Sim::new(4, ScalerSettings::default());
        for s in (0..600).step_by(10) {
            assert_eq!(sim.tick(s, cpu(2, 100.0)), 4, "at {s}s");
        }
        for s in [600, 610] {
            assert_eq!(sim.tick(s, cpu(4, 100.0)), 4, "at {s}s");
        }
        assert_eq!(
            sim.tick(620, cpu(4, 100.0)),
            5,
            "once all are ready and busy"
        );
    }

    #[test]
    fn inference_load_scales_on_either_signal() {
        let default = || Some(Measure::InferenceLoad(InferenceLoad::default()));
        assert_eq!(
            decide(engine(5, Some(96.0), Some(0.0)), 5, default()),
            6,
            "KV cache"
        );
        assert_eq!(
            decide(engine(2, Some(10.0), Some(10.0)), 2, default()),
            4,
            "queue"
        );
        assert_eq!(decide(engine(5, Some(96.0), None), 5, default()), 6);
        assert_eq!(decide(engine(2, None, Some(10.0)), 2, default()), 4);
        assert_eq!(
            decide(engine(4, Some(20.0), Some(1.25)), 4, default()),
            1,
            "both low"
        );
        let custom = Some(Measure::InferenceLoad(InferenceLoad {
            kv_cache_usage: 50.0,
            requests_waiting: 20.0,
        }));
        assert_eq!(decide(engine(2, Some(75.0), Some(10.0)), 2, custom), 3);
    }

    #[test]
    fn inference_load_without_engine_metrics_holds() {
        let measure = Measure::InferenceLoad(InferenceLoad::default());
        let now = t(12, 0, 0);
        let mut scaler = Scaler::default();
        let silent = LoadSample {
            cpu_percent: Some(100.0),
            pending_requests: 50.0,
            ..engine(3, None, None)
        };
        scaler.observe(now, silent);
        assert_eq!(
            scaler.desired(now, 3, &bounds(1, 10), Some(&measure), &instant()),
            3
        );
        assert!(
            scaler.lows.is_empty() && scaler.highs.is_empty(),
            "nothing recommended"
        );
    }

    #[test]
    fn the_window_averages_recent_samples_only() {
        let now = t(12, 0, 0);
        let decide_at = |samples: &[(i64, f64)], settings: &ScalerSettings| {
            let mut scaler = Scaler::default();
            for (ago, load) in samples {
                scaler.observe(now - secs(*ago), cpu(4, *load));
            }
            let count = scaler.desired(now, 4, &bounds(1, 10), None, settings);
            (count, scaler.samples.len())
        };
        assert_eq!(
            decide_at(&[(30, 100.0), (0, 60.0)], &instant()),
            (4, 2),
            "mean 80"
        );
        assert_eq!(
            decide_at(&[(60, 100.0), (0, 20.0)], &instant()),
            (1, 1),
            "exactly one window old: out"
        );
        assert_eq!(
            decide_at(&[(59, 100.0), (0, 20.0)], &instant()),
            (3, 2),
            "mean 60"
        );
        let longer = ScalerSettings {
            evaluation_window: secs(120),
            ..instant()
        };
        let mut scaler = Scaler::default();
        scaler.desired(now - secs(1), 4, &bounds(1, 10), None, &longer);
        scaler.observe(now - secs(90), cpu(4, 100.0));
        scaler.observe(now, cpu(4, 20.0));
        assert_eq!(
            scaler.desired(now, 4, &bounds(1, 10), None, &longer),
            3,
            "a configured window of 120 s"
        );
    }

    #[test]
    fn memory_stays_bounded() {
        let start = t(0, 0, 0);
        let settings = ScalerSettings::default();
        let (mut scaler, mut current, mut seed) = (Scaler::default(), 3u32, 42u64);
        for i in 0..100_000 {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let load = ((seed >> 33) % 200) as f64;
            let now = start + secs(i);
            scaler.observe(now, cpu(current, load));
            current = scaler.desired(now, current, &bounds(1, 50), None, &settings);
            assert!((1..=50).contains(&current));
        }
        assert_eq!(scaler.samples.len(), 60, "one a second for 60 s");
        assert!(scaler.lows.len() <= 30, "{}", scaler.lows.len());
        assert!(scaler.highs.len() <= 300, "{}", scaler.highs.len());

        let mut observer = Scaler::default();
        for i in 0..100_000 {
            observer.observe(start + secs(i), cpu(1, 50.0));
        }
        assert_eq!(
            observer.samples.len(),
            60,
            "the default window before any decision"
        );
        observer.desired(
            start + secs(100_000),
            1,
            &bounds(1, 2),
            None,
            &ten_second_window(),
        );
        for i in 100_000..100_100 {
            observer.observe(start + secs(i), cpu(1, 50.0));
        }
        assert_eq!(
            observer.samples.len(),
            10,
            "the window of the last decision"
        );

        let mut frozen = Scaler::default();
        for i in 0..100_000 {
            frozen.observe(start, cpu(2, if i % 2 == 0 { 100.0 } else { 10.0 }));
            if i % 100 == 0 {
                frozen.desired(start, 2, &bounds(1, 10), None, &settings);
            }
        }
        assert_eq!(
            frozen.samples.len(),
            MAX_SAMPLES,
            "a clock that never moves"
        );
        assert!(frozen.lows.len() <= 2 && frozen.highs.len() <= 2);
    }

    #[test]
    fn reset_starts_over() {
        let mut sim = Sim::new(4, ten_second_window());
        for s in (0..=100).step_by(10) {
            sim.tick(s, cpu(4, 80.0));
        }
        assert_eq!(sim.tick(110, cpu(4, 20.0)), 4);
        sim.scaler.reset();
        assert!(sim.scaler.samples.is_empty());
        assert!(sim.scaler.lows.is_empty() && sim.scaler.highs.is_empty());
        let now = sim.start + secs(115);
        assert_eq!(
            sim.scaler
                .desired(now, 4, &bounds(1, 10), None, &sim.settings),
            4,
            "nothing to average"
        );
        // The 300 s count from the first decision after the reset (120 s), not from the last 4 (100 s).
        for s in (120..=410).step_by(10) {
            assert_eq!(sim.tick(s, cpu(4, 20.0)), 4, "at {s}s");
        }
        assert_eq!(sim.tick(420, cpu(4, 20.0)), 1);
    }

    #[test]
    fn settings_defaults_and_config() {
        let d = ScalerSettings::default();
        assert_eq!(d.evaluation_window, secs(60));
        assert_eq!(d.scale_up_stabilization, secs(30));
        assert_eq!(d.scale_down_stabilization, secs(300));
        assert_eq!(d.tolerance, 0.1);
        assert_eq!(d.default_hardware_threshold, 80.0);
        assert_eq!(d.default_pending_threshold, 1.5);

        let config = ScalingConfig {
            evaluation_window_s: 20,
            scale_up_stabilization_s: 0,
            scale_down_stabilization_s: u64::MAX,
            tolerance: 0.2,
            default_hardware_threshold: 70.0,
            default_pending_threshold: 4.0,
        };
        let s = ScalerSettings::from_config(&config);
        assert_eq!(s.evaluation_window, secs(20));
        assert_eq!(s.scale_up_stabilization, Duration::zero());
        assert_eq!(s.scale_down_stabilization, Duration::MAX);
        assert_eq!(
            (
                s.tolerance,
                s.default_hardware_threshold,
                s.default_pending_threshold
            ),
            (0.2, 70.0, 4.0)
        );
        // An endless window is safe to decide with.
        let mut scaler = Scaler::default();
        scaler.observe(t(12, 0, 0), cpu(2, 100.0));
        assert_eq!(scaler.desired(t(12, 0, 0), 2, &bounds(1, 10), None, &s), 3);
    }

    #[test]
    fn odd_settings_and_thresholds_are_safe() {
        let odd = ScalerSettings {
            evaluation_window: secs(-5),
            scale_up_stabilization: secs(-5),
            scale_down_stabilization: secs(-5),
            tolerance: f64::NAN,
            default_hardware_threshold: 0.0,
            default_pending_threshold: -1.0,
        };
        let now = t(12, 0, 0);
        let mut scaler = Scaler::default();
        scaler.observe(now, cpu(2, 1.0));
        assert_eq!(
            scaler.desired(now, 2, &bounds(1, 10), None, &odd),
            10,
            "a threshold of 0: any load is too much"
        );
        let mut scaler = Scaler::default();
        scaler.observe(now, cpu(2, 0.0));
        assert_eq!(scaler.desired(now, 2, &bounds(1, 10), None, &odd), 1);
        assert_eq!(
            decide(
                cpu(2, f64::NAN),
                2,
                Some(Measure::HardwareUsage(Some(80.0)))
            ),
            2,
            "a NaN reading is no reading"
        );
    }
}
