//! The delivery workers: they claim due deliveries from the store (the outbox's fan-out wrote them in
//! the same transaction as the change), POST each through the SSRF-guarded outbound client with the
//! hub's `X-Webhook-Secret` and Standard Webhooks signatures, and record every attempt.
//!
//! - A claim carries a fresh token and a lease; an outcome is recorded only while the claim is still
//!   the worker's, so a worker that stalled past its lease cannot overwrite the one that took over.
//! - Retries follow `[webhooks] retry_schedule` with ±20 % jitter; a 429 or 503 with `Retry-After`
//!   waits at least that long and holds the whole webhook; a redirect is a failure; 410 Gone disables
//!   the webhook; a webhook with no success for `disable_after` is disabled when a delivery runs out.
//! - Per webhook: a concurrency cap, an optional rate, and a circuit breaker that, after
//!   `breaker_failures` failures in a row, holds its deliveries (spending no attempt) for
//!   `breaker_hold`, then lets one probe through. A slow receiver fills only its own slots.
//! - Wake-ups: the store signals when a unit of work queued deliveries; otherwise the worker sleeps
//!   until the next one falls due (at most a second, for other servers' writes).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use rand::Rng;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use tokio::sync::{watch, Notify, Semaphore};

use crate::clock::Clock;
use crate::config::WebhookSettings;
use crate::crypto::{random_id, SecretBox};
use crate::model::webhook::webhook_member;
use crate::outbound::{FetchOptions, Outbound, OutboundError};
use crate::signing::signature_header;
use crate::store::{Backend, Claimed, Outcome, Store};

/// Deliveries claimed in one go.
const CLAIM_BATCH: usize = 64;
/// The longest sleep between looks at the queue: other servers' writes show up within it.
const BACKSTOP: Duration = Duration::from_secs(1);
/// What an attempt keeps of the answer.
const RESPONSE_KEPT: usize = 1024;
/// The longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);
/// How long claimed deliveries may wait behind their webhook's cap, in multiples of the cap.
const WINDOW: usize = 2;
/// Webhooks with pending deliveries looked at in one round while some lane is full.
const SCAN_WEBHOOKS: i64 = 1024;
/// A claimed delivery that waited longer than this for its lane checks its claim before sending (the
/// webhook may have been disabled meanwhile).
const RECHECK_AFTER: Duration = Duration::from_millis(200);

/// What a worker needs.
pub struct Deliverer {
    pub store: Arc<dyn Store>,
    pub outbound: Arc<Outbound>,
    pub clock: Arc<dyn Clock>,
    pub secrets: SecretBox,
    pub settings: WebhookSettings,
    /// Bumped after each recorded attempt.
    pub activity: Arc<watch::Sender<u64>>,
    /// This server's id (kept in its data dir): every claim token starts with it, so after a crash
    /// the server takes back its own claims at once, without waiting for their leases.
    pub node: String,
}

/// A webhook's state in this worker: its slots, its rate and its breaker.
struct Lane {
    slots: Arc<Semaphore>,
    /// Deliveries of it claimed and not yet done here.
    claimed: usize,
    failures_in_a_row: u32,
    /// Set while the breaker is open: until then nothing goes; after it, one probe at a time until
    /// one succeeds.
    open_until: Option<Instant>,
    probe_in_flight: bool,
    /// Token bucket: when the next attempt may start.
    next_start: Instant,
}

/// How soon a delivery waiting for one of its webhook's send slots held by other servers first asks again
/// (then less and less often, up to ten times this).
const SLOT_POLL: Duration = Duration::from_millis(20);

/// The worker's shared state.
struct Shared {
    d: Deliverer,
    /// Whether other servers send too (the store is PostgreSQL): each webhook's concurrency and rate are
    /// then kept in the store, for all of them; alone, the lanes keep them.
    across: bool,
    lanes: Mutex<HashMap<String, Lane>>,
    in_flight: std::sync::atomic::AtomicUsize,
    done: Notify,
}

impl Deliverer {
    /// Runs until `stop` turns true: then claims no more, lets attempts in flight finish (up to the
    /// timeout) and gives back what it claimed but did not send.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let shared = Arc::new(Shared {
            across: self.store.backend() == Backend::Postgres,
            d: self,
            lanes: Mutex::new(HashMap::new()),
            in_flight: Default::default(),
            done: Notify::new(),
        });
        shared.recover().await;
        tokio::spawn(maintain(shared.clone(), stop.clone()));
        loop {
            if *stop.borrow() {
                break;
            }
            let (claimed, held_back) = shared.claim_round().await;
            if claimed >= CLAIM_BATCH {
                continue;
            }
            // What is due but was not claimed waits on a lane (this server's cap, a full lane, an
            // open breaker): it goes when an attempt ends. Otherwise the next time something falls
            // due or a hold ends.
            let waiting = held_back || shared.full();
            let wait = shared.until_next_due().await;
            let outbox = shared.d.store.outbox();
            tokio::select! {
                _ = outbox.notified() => {}
                _ = shared.done.notified(), if waiting => {}
                _ = tokio::time::sleep(wait) => {}
                _ = stop.changed() => {}
            }
        }
        let deadline = Instant::now() + shared.d.settings.timeout + Duration::from_secs(1);
        while shared.in_flight() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let now = shared.d.clock.now();
        let mine = format!("{}:", shared.d.node);
        if let Err(e) = shared.d.store.release_claims_starting(&mine, now).await {
            tracing::warn!(error = %e, "webhook claims not given back; they return when their lease ends");
        }
    }
}

/// Leases that ran out, and pruning of old activity, on their own timers.
async fn maintain(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let lease_check = (shared.d.settings.lease / 4).max(Duration::from_millis(100));
    let mut last_prune: Option<Instant> = None;
    loop {
        let now = shared.d.clock.now();
        match shared.d.store.release_expired_leases(now).await {
            Ok(n) if n > 0 => {
                tracing::warn!(
                    deliveries = n,
                    "webhook deliveries whose worker stopped answering are due again"
                );
                shared.d.store.outbox().notify_one();
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "webhook leases not checked"),
        }
        // Hourly; more often when activity is kept for less than a few hours.
        let prune_every = (shared.d.settings.retention / 4)
            .clamp(Duration::from_millis(200), Duration::from_secs(3600));
        if last_prune.is_none_or(|t| t.elapsed() > prune_every) {
            last_prune = Some(Instant::now());
            let before =
                now - chrono::Duration::from_std(shared.d.settings.retention).unwrap_or_default();
            match shared.d.store.prune_deliveries(before).await {
                Ok(n) if n > 0 => tracing::info!(deliveries = n, "old webhook activity pruned"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "webhook activity not pruned"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(lease_check) => {}
            _ = stop.changed() => return,
        }
    }
}

impl Shared {
    fn in_flight(&self) -> usize {
        self.in_flight.load(std::sync::atomic::Ordering::Acquire)
    }

    fn full(&self) -> bool {
        self.in_flight() >= self.d.settings.max_in_flight
    }

    /// What this server's previous run claimed and did not finish (it is gone) is due again at once:
    /// a restart resumes at once, not after the leases. On SQLite one process owns the store, so that
    /// is everything still `sending`; on PostgreSQL, the claims whose token carries this server's id
    /// (other servers' claims wait for their leases).
    async fn recover(&self) {
        let mine = match self.d.store.backend() {
            Backend::Sqlite => String::new(),
            Backend::Postgres => format!("{}:", self.d.node),
        };
        let now = self.d.clock.now();
        match self.d.store.release_claims_starting(&mine, now).await {
            Ok(n) if n > 0 => tracing::info!(
                deliveries = n,
                "webhook deliveries interrupted by the last stop are due again"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "interrupted webhook deliveries not recovered"),
        }
    }

    /// How long to sleep before looking again: until the next delivery falls due, at most [`BACKSTOP`].
    async fn until_next_due(&self) -> Duration {
        match self.d.store.next_due(self.d.clock.now()).await {
            Ok(Some(at)) => (at - self.d.clock.now())
                .to_std()
                .unwrap_or(Duration::ZERO)
                .clamp(Duration::from_millis(1), BACKSTOP),
            Ok(None) => BACKSTOP,
            Err(e) => {
                tracing::warn!(error = %e, "webhook queue not read");
                BACKSTOP
            }
        }
    }

    /// Claims what fits: oldest first across webhooks while no lane is full; once one is, webhook by
    /// webhook among those with deliveries due, the full ones left out. How many it claimed, and
    /// whether full lanes were left out.
    async fn claim_round(self: &Arc<Self>) -> (usize, bool) {
        let free = self
            .d
            .settings
            .max_in_flight
            .saturating_sub(self.in_flight());
        if free == 0 {
            return (0, true);
        }
        let full = self.saturated();
        if full.is_empty() {
            return (self.claim_some(free.min(CLAIM_BATCH), None).await, false);
        }
        let due = match self
            .d
            .store
            .due_webhooks(self.d.clock.now(), SCAN_WEBHOOKS)
            .await
        {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(error = %e, "webhook queue not read");
                return (0, true);
            }
        };
        let mut claimed = 0;
        let open = due.iter().filter(|w| !full.contains(*w)).take(CLAIM_BATCH);
        for webhook in open {
            let room = self.room(webhook).min(free.saturating_sub(claimed));
            if room == 0 {
                continue;
            }
            claimed += self.claim_some(room, Some(webhook)).await;
        }
        (claimed, true)
    }

    /// How many more deliveries of `webhook` this server takes now.
    fn room(&self, webhook: &str) -> usize {
        let window = self.d.settings.concurrency * WINDOW;
        let lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        window.saturating_sub(lanes.get(webhook).map_or(0, |l| l.claimed))
    }

    /// Claims up to `limit` (of `only`, when given) and starts sending them; how many it claimed.
    async fn claim_some(self: &Arc<Self>, limit: usize, only: Option<&str>) -> usize {
        let token = format!("{}:{}", self.d.node, random_id());
        let now = self.d.clock.now();
        let lease = chrono::Duration::from_std(self.d.settings.lease).unwrap_or_default();
        let claimed = match self
            .d
            .store
            .claim_deliveries(&token, now, now + lease, limit as i64, only)
            .await
        {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "webhook deliveries not claimed");
                return 0;
            }
        };
        if claimed.is_empty() {
            return 0;
        }
        let deadline = Instant::now() + self.d.settings.lease;
        let n = claimed.len();
        for c in claimed {
            self.in_flight
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            let slots = self.enter(&c.webhook_id);
            let me = self.clone();
            let token = token.clone();
            tokio::spawn(async move {
                me.attempt(c, token, slots, deadline).await;
                me.in_flight
                    .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
                me.done.notify_one();
            });
        }
        n
    }

    /// Counts a claimed delivery in its webhook's lane; the lane's slots.
    fn enter(&self, webhook: &str) -> Arc<Semaphore> {
        let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        let cap = self.d.settings.concurrency;
        let lane = lanes.entry(webhook.to_string()).or_insert_with(|| Lane {
            slots: Arc::new(Semaphore::new(cap)),
            claimed: 0,
            failures_in_a_row: 0,
            open_until: None,
            probe_in_flight: false,
            next_start: Instant::now(),
        });
        lane.claimed += 1;
        lane.slots.clone()
    }

    fn leave(&self, webhook: &str) {
        let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(lane) = lanes.get_mut(webhook) {
            lane.claimed = lane.claimed.saturating_sub(1);
            // An idle lane goes, unless it still holds a breaker or a rate limit's next start.
            let idle = lane.claimed == 0
                && lane.failures_in_a_row == 0
                && lane.open_until.is_none()
                && lane.next_start <= Instant::now();
            if idle {
                lanes.remove(webhook);
            }
        }
    }

    /// The wait the rate limit asks before the next attempt to `webhook` (and books that start): in the
    /// store when other servers send too, else in its lane.
    async fn rate_wait(&self, webhook: &str) -> Duration {
        let rate = self.d.settings.rate_limit;
        if rate == 0 {
            return Duration::ZERO;
        }
        let step = Duration::from_secs(1) / rate;
        if self.across {
            let now = self.d.clock.now();
            return match self.d.store.book_send(webhook, now, step).await {
                Ok(start) => (start - now).to_std().unwrap_or(Duration::ZERO),
                Err(e) => {
                    tracing::warn!(error = %e, "webhook rate not booked; waiting one step");
                    step
                }
            };
        }
        let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        let Some(lane) = lanes.get_mut(webhook) else {
            return Duration::ZERO;
        };
        let now = Instant::now();
        let start = lane.next_start.max(now);
        lane.next_start = start + step;
        start - now
    }

    /// Whether this delivery may go now: not while the breaker is open; once its hold is over, one
    /// probe at a time until one succeeds.
    fn may_go(&self, webhook: &str) -> bool {
        let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        let Some(lane) = lanes.get_mut(webhook) else {
            return true;
        };
        match lane.open_until {
            None => true,
            Some(t) if Instant::now() < t || lane.probe_in_flight => false,
            Some(_) => {
                lane.probe_in_flight = true;
                true
            }
        }
    }

    /// Webhooks with as many deliveries claimed here as their window holds: not claimed for now.
    fn saturated(&self) -> Vec<String> {
        let window = self.d.settings.concurrency * WINDOW;
        let lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        lanes
            .iter()
            .filter(|(_, l)| {
                l.claimed >= window
                    || l.probe_in_flight
                    || l.open_until.is_some_and(|t| Instant::now() < t)
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    async fn attempt(&self, c: Claimed, token: String, slots: Arc<Semaphore>, deadline: Instant) {
        let webhook = c.webhook_id.clone();
        let claimed_at = Instant::now();
        let permit = slots.acquire_owned().await;
        // Not enough lease left to finish: leave it to be claimed again rather than risk two sends.
        let late =
            || Instant::now() + self.d.settings.timeout + crate::config::LEASE_MARGIN > deadline;
        if late() || permit.is_err() || !self.may_go(&webhook) {
            self.put_back(&c, &token).await;
        } else if !self.take_slot(&c, deadline, &late).await {
            self.end_probe(&webhook);
            self.put_back(&c, &token).await;
        } else {
            let rate = self.rate_wait(&webhook).await;
            if !rate.is_zero() {
                tokio::time::sleep(rate).await;
            }
            if claimed_at.elapsed() > RECHECK_AFTER && !self.still_mine(&c, &token).await {
                // Disabled, or taken over, while it waited: nothing to send.
                self.end_probe(&webhook);
            } else if late() {
                self.end_probe(&webhook);
                self.put_back(&c, &token).await;
            } else {
                let sent = self.send(&c).await;
                self.settle(&c, &token, sent).await;
            }
            self.give_slot(&c).await;
        }
        drop(permit);
        self.leave(&webhook);
    }

    /// When other servers send too: waits for one of the webhook's send slots, which every server shares,
    /// while the claim's lease leaves time to send; whether it got one. Alone, the lane's slots are all.
    async fn take_slot(&self, c: &Claimed, deadline: Instant, late: &impl Fn() -> bool) -> bool {
        if !self.across {
            return true;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let until = self.d.clock.now() + chrono::Duration::from_std(left).unwrap_or_default();
        let cap = i64::try_from(self.d.settings.concurrency).unwrap_or(i64::MAX);
        let mut pause = SLOT_POLL;
        loop {
            let now = self.d.clock.now();
            match self
                .d
                .store
                .take_send_slot(&c.webhook_id, &c.id, cap, now, until)
                .await
            {
                Ok(true) => return true,
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "webhook send slot not taken; asking again"),
            }
            if late() {
                return false;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(SLOT_POLL * 10);
        }
    }

    /// Gives the send slot [`Self::take_slot`] took back.
    async fn give_slot(&self, c: &Claimed) {
        if self.across {
            if let Err(e) = self.d.store.give_send_slot(&c.webhook_id, &c.id).await {
                tracing::warn!(error = %e, "webhook send slot not given back; it lapses with the lease");
            }
        }
    }

    async fn still_mine(&self, c: &Claimed, token: &str) -> bool {
        self.d
            .store
            .still_claimed(&c.id, token)
            .await
            .unwrap_or(true)
    }

    /// Lets the next probe of an open breaker go (this one ended without an outcome).
    fn end_probe(&self, webhook: &str) {
        let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(lane) = lanes.get_mut(webhook) {
            lane.probe_in_flight = false;
        }
    }

    /// Gives a claimed delivery back untouched (no attempt spent).
    async fn put_back(&self, c: &Claimed, token: &str) {
        let at = self.d.clock.now() + chrono::Duration::milliseconds(100);
        if let Err(e) = self.d.store.postpone(&c.id, token, at).await {
            tracing::warn!(delivery = %c.id, error = %e, "webhook delivery not given back; it returns when its lease ends");
        }
    }

    /// One HTTP attempt.
    async fn send(&self, c: &Claimed) -> Sent {
        let started_at = self.d.clock.now();
        let t0 = Instant::now();
        let body = body_of(c);
        let headers = match self.headers(c, &body, started_at) {
            Ok(h) => h,
            Err(why) => {
                return Sent {
                    started_at,
                    duration: t0.elapsed(),
                    result: Err(Failure::internal(why)),
                }
            }
        };
        let options = FetchOptions {
            connect_timeout: self.d.settings.timeout.min(Duration::from_secs(10)),
            timeout: self.d.settings.timeout,
            max_bytes: RESPONSE_KEPT,
            truncate: true,
            headers,
        };
        let result = self.d.outbound.post(&c.url, body, &options).await;
        Sent {
            started_at,
            duration: t0.elapsed(),
            result: result.map_err(Failure::from),
        }
    }

    fn headers(&self, c: &Claimed, body: &[u8], at: DateTime<Utc>) -> Result<HeaderMap, String> {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(sealed) = &c.secret {
            let secret = self.d.secrets.open(sealed).map_err(|e| e.to_string())?;
            let value =
                HeaderValue::from_str(&secret).map_err(|_| "the secret is not a header value")?;
            h.insert(HeaderName::from_static("x-webhook-secret"), value);
        }
        let keys_text = self
            .d
            .secrets
            .open(&c.signing_keys)
            .map_err(|e| e.to_string())?;
        let entries: Vec<crate::signing::KeyEntry> =
            serde_json::from_str(&keys_text).map_err(|e| e.to_string())?;
        let keys = crate::signing::signing_keys(&entries, at);
        let ts = at.timestamp();
        let value = |s: String| HeaderValue::from_str(&s).map_err(|e| e.to_string());
        h.insert(
            HeaderName::from_static("webhook-id"),
            value(c.event_id.clone())?,
        );
        h.insert(
            HeaderName::from_static("webhook-timestamp"),
            value(ts.to_string())?,
        );
        if !keys.is_empty() {
            let sig = signature_header(&keys, &c.event_id, ts, body);
            h.insert(HeaderName::from_static("webhook-signature"), value(sig)?);
        }
        Ok(h)
    }

    /// Records the attempt and decides what follows.
    async fn settle(&self, c: &Claimed, token: &str, sent: Sent) {
        let now = self.d.clock.now();
        let (status, answer, failure) = match &sent.result {
            Ok(f) if f.status.is_success() => (Some(f.status.as_u16()), Some(&f.body), None),
            Ok(f) => (
                Some(f.status.as_u16()),
                Some(&f.body),
                Some(Failure::status(f.status.as_u16(), &f.headers)),
            ),
            Err(fail) => (fail.status, None, Some(fail.clone())),
        };
        let gone = status == Some(410);
        let (state, next_attempt_at) = self.next_step(c, failure.as_ref(), gone, now);
        let outcome = Outcome {
            delivery_id: c.id.clone(),
            webhook_id: c.webhook_id.clone(),
            claim_token: token.to_string(),
            number: c.attempts + 1,
            started_at: sent.started_at,
            duration_ms: sent.duration.as_millis() as i64,
            status_code: status.map(i64::from),
            error_class: failure.as_ref().map(|f| f.class.to_string()),
            error: failure.as_ref().map(|f| f.message.clone()),
            response: answer.map(|b| String::from_utf8_lossy(b).into_owned()),
            next_attempt_at,
            state,
            manual: c.manual,
            now,
        };
        if let Err(e) = self.d.store.record_outcome(&outcome).await {
            tracing::warn!(delivery = %c.id, error = %e, "webhook attempt not recorded; the delivery returns when its lease ends");
            self.end_probe(&c.webhook_id);
            return;
        }
        self.d.activity.send_modify(|n| *n += 1);
        match &failure {
            None => self.succeeded(&c.webhook_id),
            Some(fail) => self.after_failure(c, fail, gone, state, now).await,
        }
    }

    /// The delivery's state after this attempt, and when it goes again: a failure is retried on the
    /// schedule (at least `Retry-After` later) unless the receiver is gone, the attempt was a replay,
    /// or the schedule is spent.
    fn next_step(
        &self,
        c: &Claimed,
        failure: Option<&Failure>,
        gone: bool,
        now: DateTime<Utc>,
    ) -> (&'static str, Option<DateTime<Utc>>) {
        let Some(fail) = failure else {
            return ("succeeded", None);
        };
        if gone || c.manual {
            return ("failed", None);
        }
        let Some(delay) = self.d.settings.retry_schedule.get(c.attempts as usize) else {
            return ("failed", None);
        };
        let mut wait = jitter(*delay);
        if let Some(after) = fail.retry_after {
            wait = wait.max(after.min(MAX_RETRY_AFTER));
        }
        let at = now + chrono::Duration::from_std(wait).unwrap_or_default();
        ("pending", Some(at))
    }

    /// What a failure does to the webhook: 410 disables it, a spent schedule may, `Retry-After` holds
    /// it, and enough failures in a row open its breaker.
    async fn after_failure(
        &self,
        c: &Claimed,
        fail: &Failure,
        gone: bool,
        state: &str,
        now: DateTime<Utc>,
    ) {
        tracing::debug!(delivery = %c.id, class = fail.class, error = %fail.message, "webhook attempt failed");
        if gone {
            let at = crate::model::wire::rfc3339_z::format(&now);
            self.disable(
                &c.webhook_id,
                &format!("the receiver answered 410 Gone at {at}"),
            )
            .await;
        } else if state == "failed" && !c.manual {
            self.exhausted(&c.webhook_id, now).await;
        }
        if let Some(after) = fail.retry_after {
            self.hold(&c.webhook_id, now, after.min(MAX_RETRY_AFTER))
                .await;
        }
        self.failed(&c.webhook_id, now).await;
    }

    fn succeeded(&self, webhook: &str) {
        let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(lane) = lanes.get_mut(webhook) {
            if lane.open_until.is_some() {
                tracing::info!(webhook, "webhook receiver answers again: circuit closed");
            }
            lane.failures_in_a_row = 0;
            lane.open_until = None;
            lane.probe_in_flight = false;
        }
    }

    /// Counts a failure; enough in a row open the breaker: the webhook's deliveries are held.
    async fn failed(&self, webhook: &str, now: DateTime<Utc>) {
        let open = {
            let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
            let Some(lane) = lanes.get_mut(webhook) else {
                return;
            };
            lane.failures_in_a_row += 1;
            lane.probe_in_flight = false;
            let open = lane.open_until.is_some()
                || lane.failures_in_a_row >= self.d.settings.breaker_failures;
            if open {
                lane.open_until = Some(Instant::now() + self.d.settings.breaker_hold);
            }
            open
        };
        if open {
            tracing::warn!(
                webhook,
                hold_s = self.d.settings.breaker_hold.as_secs_f64(),
                "webhook receiver failing: circuit open, deliveries held"
            );
            self.hold(webhook, now, self.d.settings.breaker_hold).await;
        }
    }

    async fn hold(&self, webhook: &str, now: DateTime<Utc>, wait: Duration) {
        let until = now + chrono::Duration::from_std(wait).unwrap_or_default();
        if let Err(e) = self.d.store.hold_webhook(webhook, until).await {
            tracing::warn!(webhook, error = %e, "webhook not held");
        }
    }

    /// A delivery ran out of attempts: a webhook failing for `disable_after` without a success is
    /// disabled.
    async fn exhausted(&self, webhook: &str, now: DateTime<Utc>) {
        let since = match self.d.store.read().await {
            Ok(mut s) => match s.webhook(webhook).await {
                Ok(Some(w)) => w.failing_since,
                _ => None,
            },
            Err(_) => None,
        };
        let limit = chrono::Duration::from_std(self.d.settings.disable_after).unwrap_or_default();
        if let Some(since) = since.filter(|s| now - *s >= limit) {
            let reason = format!(
                "no delivery succeeded since {}: disabled after {} without a success",
                crate::model::wire::rfc3339_z::format(&since),
                humane(self.d.settings.disable_after)
            );
            self.disable(webhook, &reason).await;
        }
    }

    /// Disables a webhook and tells its owner why, in one unit of work.
    async fn disable(&self, webhook: &str, reason: &str) {
        let done = async {
            let now = self.d.clock.now();
            let mut unit = self.d.store.begin().await?;
            let Some(w) = unit.webhook(webhook).await? else {
                return Ok(());
            };
            // Told once: attempts in flight that all met the 410 find it disabled already.
            if unit
                .set_webhook_disabled(webhook, true, Some(reason), now)
                .await?
            {
                let notice =
                    crate::services::notices::webhook_disabled(&w.owner, webhook, &w.url, reason);
                unit.notify(&notice, now).await?;
            }
            unit.commit().await
        };
        match done.await {
            Ok(()) => tracing::warn!(webhook, reason, "webhook disabled"),
            Err(e) => tracing::error!(webhook, error = %e, "webhook not disabled"),
        }
    }
}

/// A span in words, for reasons people read.
fn humane(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        _ if s >= 86_400 && s.is_multiple_of(86_400) => format!("{} days", s / 86_400),
        _ if s >= 3_600 => format!("{} hours", s / 3_600),
        _ => format!("{s} seconds"),
    }
}

/// The delay varied by ±20 %.
fn jitter(d: Duration) -> Duration {
    d.mul_f64(rand::rng().random_range(0.8..=1.2))
}

/// The stored payload with the `webhook` member added: `{…, "webhook": {"id", "version"}}`.
fn body_of(c: &Claimed) -> Bytes {
    let trimmed = c.payload.trim_end();
    let inner = trimmed.strip_suffix('}').unwrap_or(trimmed);
    let sep = if inner.trim_end().ends_with('{') {
        ""
    } else {
        ","
    };
    Bytes::from(format!(
        "{inner}{sep}\"webhook\":{}}}",
        webhook_member(&c.webhook_id)
    ))
}

/// An attempt as made: when, how long, and the answer or why there was none.
struct Sent {
    started_at: DateTime<Utc>,
    duration: Duration,
    result: Result<crate::outbound::Fetched, Failure>,
}

/// Why an attempt failed, in the activity view's words.
#[derive(Debug, Clone)]
struct Failure {
    class: &'static str,
    message: String,
    status: Option<u16>,
    retry_after: Option<Duration>,
}

impl Failure {
    fn internal(message: String) -> Failure {
        Failure {
            class: "internal",
            message,
            status: None,
            retry_after: None,
        }
    }

    /// A non-2xx answer; 429 and 503 may say when to come back.
    fn status(code: u16, headers: &HeaderMap) -> Failure {
        let retry_after = matches!(code, 429 | 503)
            .then(|| {
                headers
                    .get(RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(retry_after)
            })
            .flatten();
        Failure {
            class: "status",
            message: format!("the receiver answered {code}"),
            status: Some(code),
            retry_after,
        }
    }
}

impl From<OutboundError> for Failure {
    fn from(e: OutboundError) -> Failure {
        let (class, status) = match &e {
            OutboundError::BadUrl(_) | OutboundError::Scheme(_) | OutboundError::NoHost => {
                ("url", None)
            }
            OutboundError::Refused { .. } => ("refused", None),
            OutboundError::Resolve { .. } => ("dns", None),
            OutboundError::Connect { .. } => ("connect", None),
            OutboundError::Timeout { .. } => ("timeout", None),
            OutboundError::Redirected { status, .. } => ("redirect", Some(status.as_u16())),
            OutboundError::TooLarge { .. }
            | OutboundError::Http { .. }
            | OutboundError::Sink { .. } => ("http", None),
        };
        Failure {
            class,
            message: e.to_string(),
            status,
            retry_after: None,
        }
    }
}

/// `Retry-After`: seconds, or an HTTP date.
fn retry_after(v: &str) -> Option<Duration> {
    if let Ok(s) = v.trim().parse::<u64>() {
        return Some(Duration::from_secs(s));
    }
    let at = DateTime::parse_from_rfc2822(v.trim()).ok()?;
    (at.with_timezone(&Utc) - Utc::now()).to_std().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claimed(payload: &str) -> Claimed {
        Claimed {
            id: "d".into(),
            webhook_id: "wh1".into(),
            event_id: "e".into(),
            payload: payload.into(),
            attempts: 0,
            manual: false,
            url: "http://x".into(),
            secret: None,
            signing_keys: String::new(),
        }
    }

    #[test]
    fn the_webhook_member_is_added_to_the_payload() {
        let body = body_of(&claimed(r#"{"id":"e","event":{"action":"create"}}"#));
        let v: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(v["webhook"], serde_json::json!({"id": "wh1", "version": 3}));
        assert_eq!(v["event"]["action"], "create");
        let empty: serde_json::Value =
            serde_json::from_slice(&body_of(&claimed("{}"))).expect("json");
        assert_eq!(empty["webhook"]["version"], 3);
    }

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        assert_eq!(retry_after("2"), Some(Duration::from_secs(2)));
        let later = (Utc::now() + chrono::Duration::seconds(30)).to_rfc2822();
        let d = retry_after(&later).expect("date");
        assert!(
            d <= Duration::from_secs(30) && d >= Duration::from_secs(28),
            "{d:?}"
        );
        assert_eq!(retry_after("soon"), None);
    }

    #[test]
    fn jitter_stays_within_a_fifth() {
        for _ in 0..100 {
            let j = jitter(Duration::from_secs(10));
            assert!(
                j >= Duration::from_secs(8) && j <= Duration::from_secs(12),
                "{j:?}"
            );
        }
    }
}
