//! The analytics recorder: every server, for every endpoint its proxy routes, turns the proxy's counters
//! into samples of 10 s and 1 min in the store, and prunes what is past its time (see [`crate::model::analytics`]). The serving path does
//! nothing more than count, as it does for `/metrics`; this task reads the counters, takes differences, and
//! reads the gauges (requests in flight, held for a cold start, and the fleet the leader published) at each
//! poll. A bucket is written once the clock has left it, with the counts since the last write.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::RuntimeHandle;
use crate::clock::Clock;
use crate::config::AnalyticsConfig;
use crate::model::analytics::{Sample, COARSE_STEP_S, FINE_STEP_S};
use crate::routing::Route;
use crate::store::{SeriesRow, Store, StoreResult};

/// How often old samples and decisions are pruned, in seconds.
const PRUNE_EVERY_S: i64 = 600;

/// What the recorder holds of one endpoint.
#[derive(Debug, Default)]
struct Track {
    /// The counters at the last write.
    counted: Sample,
    /// The gauges read in the bucket being filled.
    readings: Sample,
    /// The minute being filled, and what it holds so far.
    minute: Option<(i64, Sample)>,
    /// Whether it was written since this server started: the first write goes on from what an earlier
    /// run of this server stored of the same bucket and minute (a restart within them).
    written: bool,
}

pub struct Recorder {
    store: Arc<dyn Store>,
    handle: RuntimeHandle,
    clock: Arc<dyn Clock>,
    /// This server's id: the samples it writes are its own.
    me: String,
    config: AnalyticsConfig,
    /// By endpoint id.
    tracks: HashMap<String, Track>,
    /// The 10-second bucket being filled (its start, Unix seconds).
    bucket: Option<i64>,
    /// The [`PRUNE_EVERY_S`] period old samples were last pruned in.
    pruned: Option<i64>,
}

/// The start of the `step`-second bucket `at_s` (Unix seconds) falls in.
pub fn bucket_of(at_s: i64, step: i64) -> i64 {
    at_s.div_euclid(step) * step
}

impl Recorder {
    pub fn new(
        store: Arc<dyn Store>,
        handle: RuntimeHandle,
        clock: Arc<dyn Clock>,
        me: String,
        config: AnalyticsConfig,
    ) -> Recorder {
        Recorder {
            store,
            handle,
            clock,
            me,
            config,
            tracks: HashMap::new(),
            bucket: None,
            pruned: None,
        }
    }

    /// Polls every `every` until `stop` flips; a last write on the way out.
    pub async fn run(mut self, every: Duration, mut stop: watch::Receiver<bool>) {
        loop {
            if let Err(e) = self.poll().await {
                tracing::warn!(error = %e, "could not record the endpoints' analytics; retrying");
            }
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        if let Some(bucket) = self.bucket.filter(|_| self.config.enabled) {
            if let Err(e) = self.write(bucket).await {
                tracing::warn!(error = %e, "could not record the endpoints' last analytics");
            }
        }
    }

    /// Writes the bucket the clock has left, if it has, then reads the gauges into the one it is in. With
    /// recording off, only prunes (what was recorded before, and the decisions).
    pub async fn poll(&mut self) -> StoreResult<()> {
        let now_ms = self.clock.now_millis();
        let now_bucket = bucket_of(now_ms.div_euclid(1000), FINE_STEP_S);
        let written = match self.bucket {
            Some(b) if b < now_bucket && self.config.enabled => self.write(b).await,
            _ => Ok(()),
        };
        if written.is_ok() {
            self.bucket = Some(now_bucket);
        }
        if let Err(e) = self.prune(now_bucket).await {
            tracing::warn!(error = %e, "could not prune the endpoints' analytics; retrying");
        }
        if self.config.enabled {
            let table = self.handle.table.borrow().clone();
            for route in table.routes() {
                let track = self.tracks.entry(route.id.clone()).or_default();
                read_gauges(route, &mut track.readings, now_ms);
            }
        }
        written
    }

    /// Writes what each endpoint counted since the last write, with the gauges read meanwhile, as its
    /// sample of `bucket` and into its minute.
    async fn write(&mut self, bucket: i64) -> StoreResult<()> {
        let table = self.handle.table.borrow().clone();
        let routed: HashMap<&str, &Arc<Route>> =
            table.routes().map(|r| (r.id.as_str(), r)).collect();
        // An endpoint no longer routed (deleted) is forgotten.
        self.tracks.retain(|id, _| routed.contains_key(id.as_str()));
        let minute = bucket_of(bucket, COARSE_STEP_S);
        let mut rows = Vec::new();
        let mut taken = Vec::new();
        for (id, route) in &routed {
            let track = self.tracks.entry(id.to_string()).or_default();
            let counted = route.activity.stats.counted();
            let mut sample = since(&counted, &track.counted);
            sample.merge(&track.readings);
            let (mut in_bucket, mut in_minute) = match (&track.minute, track.written) {
                (Some((m, s)), _) if *m == minute => (Sample::default(), s.clone()),
                (_, true) => Default::default(),
                // The first write since this server started: an earlier run may have written some of
                // this bucket and minute.
                (_, false) => (
                    self.stored(id, FINE_STEP_S, bucket).await?,
                    self.stored(id, COARSE_STEP_S, minute).await?,
                ),
            };
            in_bucket.merge(&sample);
            in_minute.merge(&sample);
            taken.push((id.to_string(), counted, in_minute.clone()));
            if quiet(&in_bucket) && quiet(&in_minute) {
                continue;
            }
            rows.push(self.row(id, FINE_STEP_S, bucket, in_bucket));
            rows.push(self.row(id, COARSE_STEP_S, minute, in_minute));
        }
        if !rows.is_empty() {
            let mut unit = self.store.begin().await?;
            unit.put_samples(&rows).await?;
            unit.commit().await?;
        }
        // Only once written: a failed write leaves the counts for the next one.
        for (id, counted, in_minute) in taken {
            let track = self.tracks.entry(id).or_default();
            track.counted = counted;
            track.readings = Sample::default();
            track.minute = Some((minute, in_minute));
            track.written = true;
        }
        Ok(())
    }

    /// What this server stored of endpoint `id`'s bucket (of `step` seconds) starting at `bucket`.
    async fn stored(&self, id: &str, step: i64, bucket: i64) -> StoreResult<Sample> {
        let mut read = self.store.read().await?;
        let stored = read.sample_of(id, step, bucket, &self.me).await?;
        Ok(stored.unwrap_or_default())
    }

    fn row(&self, id: &str, step: i64, bucket: i64, sample: Sample) -> SeriesRow {
        SeriesRow {
            endpoint_id: id.to_string(),
            step,
            bucket,
            server_id: self.me.clone(),
            sample,
        }
    }

    /// Once every [`PRUNE_EVERY_S`]: samples and decisions past their time are forgotten.
    async fn prune(&mut self, now_bucket: i64) -> StoreResult<()> {
        let due = bucket_of(now_bucket, PRUNE_EVERY_S);
        if self.pruned == Some(due) {
            return Ok(());
        }
        let secs = |s: u64| i64::try_from(s).unwrap_or(i64::MAX);
        let fine_before = now_bucket.saturating_sub(secs(self.config.keep_10s_s));
        let coarse_before = now_bucket.saturating_sub(secs(self.config.keep_1m_s));
        let mut unit = self.store.begin().await?;
        unit.prune_samples(FINE_STEP_S, fine_before).await?;
        unit.prune_samples(COARSE_STEP_S, coarse_before).await?;
        if let Some(at) = chrono::DateTime::from_timestamp(coarse_before, 0) {
            unit.prune_decisions(at).await?;
        }
        unit.commit().await?;
        self.pruned = Some(due);
        Ok(())
    }
}

/// The gauges of `route` now: requests in flight and waiting on this server, and the fleet when the leader
/// published it lately.
fn read_gauges(route: &Route, into: &mut Sample, now_ms: i64) {
    let a = &route.activity;
    into.in_flight.add(f64::from(a.in_flight.get()));
    into.waiting.add(f64::from(a.waiting_now()));
    if let Some(fleet) = a.fleet(now_ms) {
        into.ready.add(f64::from(fleet.ready));
        into.target.add(f64::from(fleet.target));
        for (readings, value) in [
            (&mut into.cpu, fleet.cpu_percent),
            (&mut into.queue, fleet.queue),
            (&mut into.kv_cache, fleet.kv_cache_percent),
        ] {
            if let Some(v) = value {
                readings.add(v);
            }
        }
    }
}

/// The counts of `now` less those of `before`; all of `now` should the counters ever have started over
/// (each endpoint id has counters of its own: see `RuntimeHandle::activity`).
fn since(now: &Sample, before: &Sample) -> Sample {
    let restarted = now
        .statuses
        .iter()
        .zip(&before.statuses)
        .any(|(n, b)| n < b);
    if restarted {
        return now.clone();
    }
    let mut d = Sample {
        cache_hits: now.cache_hits.saturating_sub(before.cache_hits),
        ..Sample::default()
    };
    for (d, (n, b)) in d
        .statuses
        .iter_mut()
        .zip(now.statuses.iter().zip(&before.statuses))
    {
        *d = n - b;
    }
    for (d, (n, b)) in d
        .latency
        .iter_mut()
        .zip(now.latency.iter().zip(&before.latency))
    {
        *d = n.saturating_sub(*b);
    }
    d
}

/// Nothing worth a row: no request, nothing in flight or waiting, and no replica.
fn quiet(s: &Sample) -> bool {
    s.requests() == 0
        && s.in_flight.sum == 0.0
        && s.waiting.sum == 0.0
        && s.ready.sum == 0.0
        && s.target.sum == 0.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::routing::RouteTable;
    use crate::store::{SqlStore, StoreUrl, Synchronous};

    /// A recorder of `node-a` on `store`, its table holding one endpoint counted by `activity`.
    fn recorder(
        store: &Arc<SqlStore>,
        clock: &ManualClock,
        activity: Arc<crate::routing::Activity>,
    ) -> Recorder {
        let (handle, tx) = super::super::handle("http://x".into(), "x".into(), 10);
        let route = Route::bare("ns", "ep", activity);
        tx.send_replace(Arc::new(RouteTable::new(vec![Arc::new(route)])));
        let clock: Arc<dyn Clock> = Arc::new(clock.clone());
        let store: Arc<dyn Store> = store.clone();
        Recorder::new(
            store,
            handle,
            clock,
            "node-a".into(),
            AnalyticsConfig::default(),
        )
    }

    async fn requests(store: &SqlStore, step: i64, bucket: i64) -> u64 {
        let mut read = store.read().await.expect("read");
        let rows = read
            .samples("ns-ep", step, bucket, bucket + 1)
            .await
            .expect("rows");
        rows.iter().map(|r| r.sample.requests()).sum()
    }

    #[tokio::test]
    async fn a_restart_within_a_bucket_goes_on_from_what_was_written() {
        let dir = tempfile::tempdir().expect("dir");
        let url = StoreUrl::parse(&dir.path().join("s.db").display().to_string()).expect("url");
        let store = Arc::new(
            SqlStore::open(&url, Synchronous::Normal)
                .await
                .expect("store"),
        );
        let minute = 1_700_000_040;
        let at = |s: i64| chrono::DateTime::from_timestamp(s, 0).expect("time");
        let clock = ManualClock::new(at(minute + 1));
        let ok = std::time::Duration::from_millis(1);

        // Three requests, then the last write of a server that stops within its bucket.
        let first = Arc::new(crate::routing::Activity::default());
        let mut before = recorder(&store, &clock, first.clone());
        before.poll().await.expect("poll");
        for _ in 0..3 {
            first.stats.record(200, ok);
        }
        before.write(minute).await.expect("last write");
        assert_eq!(requests(&store, FINE_STEP_S, minute).await, 3);

        // Started again (its counters from zero) within the same bucket: two more.
        let again = Arc::new(crate::routing::Activity::default());
        let mut after = recorder(&store, &clock, again.clone());
        after.poll().await.expect("poll");
        again.stats.record(200, ok);
        again.stats.record(503, ok);
        clock.set(at(minute + 10));
        after.poll().await.expect("poll");
        assert_eq!(
            requests(&store, FINE_STEP_S, minute).await,
            5,
            "the bucket goes on"
        );
        assert_eq!(
            requests(&store, COARSE_STEP_S, minute).await,
            5,
            "and so does the minute"
        );

        // The next bucket is its own; the minute adds it.
        again.stats.record(200, ok);
        clock.set(at(minute + 20));
        after.poll().await.expect("poll");
        assert_eq!(requests(&store, FINE_STEP_S, minute + 10).await, 1);
        assert_eq!(requests(&store, COARSE_STEP_S, minute).await, 6);
    }

    #[test]
    fn buckets_start_on_their_step() {
        assert_eq!(bucket_of(1_700_000_017, 10), 1_700_000_010);
        assert_eq!(bucket_of(1_700_000_017, 60), 1_699_999_980);
        assert_eq!(bucket_of(-1, 10), -10);
    }

    #[test]
    fn counts_are_differences_unless_the_counters_started_over() {
        let mut before = Sample::default();
        before.statuses[1] = 5;
        before.latency[0] = 5;
        let mut now = before.clone();
        now.statuses[1] = 8;
        now.latency[0] = 8;
        now.cache_hits = 2;
        let d = since(&now, &before);
        assert_eq!((d.statuses[1], d.latency[0], d.cache_hits), (3, 3, 2));
        let mut fresh = Sample::default();
        fresh.statuses[1] = 1;
        assert_eq!(since(&fresh, &before).statuses[1], 1);
    }
}
