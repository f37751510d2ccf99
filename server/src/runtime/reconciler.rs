//! The reconciler: it brings each endpoint's replicas, status and route in line with its spec and state.
//!
//! Each tick, for every endpoint, it compares what runs with what the spec, the state and the scaler ask
//! for; starts, stops and replaces replicas; writes status; publishes the routing table.
//!
//! Per endpoint, in order: observe replicas (exited? healthy yet? too slow to start?) → decide the state
//! (paused and failed hold nothing; scaledToZero wakes on a request or a schedule minimum; active states
//! scale to zero when idle, else the scaler sets the target) → roll replicas of the current spec
//! generation up to the target, and stop the old generation only once the new one is all ready, so no
//! request is dropped → write status if it changed. Each is a step of its own: `Steps::observe` and
//! `stop_drained`, `decide_target`, `roll_out`, `sync_router` and `next_status` within `reconcile`; then
//! the tick's `write_status`, and `publish` of the routes.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use super::decisions;
use super::devices::{Devices, Lease};
use super::engine_load::{self, EngineLoad};
use super::launch::{self, Launch};
use super::leader::Lead;
use super::provider::{
    Found, Kind, ProviderError, Readiness, ReplicaInfo, ReplicaPlan, ReplicaProvider,
    ReplicaStatus, Resources, Workload,
};
use super::routes::{Publisher, ROLE_EXT_PROC, ROLE_ROUTER};
use super::scaler::{
    bounds_at, idle_expired, minute_of_day, Bounds, LoadSample, Scaler, ScalerSettings,
};
use super::RuntimeHandle;
use crate::clock::Clock;
use crate::config::{QuotaConfig, RuntimeConfig};
use crate::crypto::{hex, random_id, SecretBox};
use crate::engines::{self, Engines};
use crate::model::analytics::Decision;
use crate::model::{
    can_transition, CustomRouter, EndpointSpec, EndpointState, LoadBalancer, Measure,
    RouterProtocol,
};
use crate::routing::{Activity, Backend, Fleet, Route, RouteTable};
use crate::services::quotas::Limits;
use crate::store::cluster::ReplicaRow;
use crate::store::{Backend as StoreBackend, EndpointRecord, QuotaOverride, Store, StoreError};

/// How long a health check, metrics scrape or custom-router update may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

struct ReplicaRun {
    generation: String,
    info: ReplicaInfo,
    backend: Arc<Backend>,
    health_route: String,
    ready: bool,
    started_at: DateTime<Utc>,
    /// CPU seconds at a wall-clock instant: CPU use is physical, so it is timed by the real clock, not the
    /// injected one.
    cpu_mark: Option<(std::time::Instant, f64)>,
    cpu_percent: Option<f64>,
    /// Taken out of the routing table at this (wall-clock) instant; stopped once its requests finished.
    draining: Option<std::time::Instant>,
    /// The GPUs it holds (see [`Devices`]), given back when the replica is forgotten.
    _devices: Option<Lease>,
}

impl ReplicaRun {
    /// Ready and still in the routing table.
    fn serving(&self) -> bool {
        self.ready && self.draining.is_none()
    }
}

/// A replica an earlier server left running, with the GPUs held for it until it is adopted or stopped.
struct Left {
    found: Found,
    devices: Option<Lease>,
}

/// What a start (of a replica, or of a custom router) came to, when it could start at all.
enum Started<T> {
    Up(T),
    /// Not yet: the text says what it waits for (its image's pull, its provider's engine).
    Waiting(String),
}

/// How recent another server's report of an endpoint's traffic must be to count.
const TRAFFIC_FRESH: Duration = Duration::from_secs(10);

/// Longest time setting honoured (ten years), so no setting can overflow the clock arithmetic.
const MAX_SECONDS: u64 = 10 * 365 * 86_400;

/// Shortest span a replica's CPU use is measured over.
const CPU_SAMPLE: Duration = Duration::from_secs(1);

/// The reconciler's pace while replicas start or drain.
const FAST_TICK: Duration = Duration::from_millis(25);

/// Longest a retired replica is kept for its in-flight requests.
const MAX_DRAIN: Duration = Duration::from_secs(30);

/// A custom-router sidecar and what it was last told.
struct RouterRun {
    spec: CustomRouter,
    /// Its HTTP port: where it is told the replicas (and, protocol `http`, where requests go).
    backend: Arc<Backend>,
    /// Its gRPC service, protocol `extProc`: where the proxy asks it for each request's replica, once
    /// it takes connections (`grpc_ready`).
    grpc: Option<Arc<Backend>>,
    grpc_ready: bool,
    /// The replica URLs it acknowledged; `None` until the first announcement succeeds.
    announced: Option<Vec<String>>,
}

struct EndpointRun {
    router: Option<RouterRun>,
    /// The schedule entry (its `at`) in effect at the last tick; `None` before the first.
    entry: Option<Option<String>>,
    namespace: String,
    name: String,
    replicas: Vec<ReplicaRun>,
    activity: Arc<Activity>,
    scaler: Scaler,
    target: u32,
    /// When replicas exited or failed to start, within the crash window.
    crashes: VecDeque<DateTime<Utc>>,
    last_exit: Option<String>,
    backoff: Duration,
    next_start_at: Option<DateTime<Utc>>,
    /// The spec generation that could not roll out (`updateFailed`), and the last one that did.
    failed_generation: Option<String>,
    good: Option<(String, EndpointSpec)>,
    /// Idle time counts from here when no request came since.
    since: DateTime<Utc>,
    /// Why a replica it wants has not started: too few GPUs free (see [`Devices`]), its image being pulled,
    /// its provider's engine away.
    waiting: Option<String>,
    /// Whether what it waits for is GPUs: the old generation's replicas then make room.
    short_of_devices: bool,
    /// What was decided in this pass, with the reasons (see [`decisions`]).
    decisions: Vec<Decision>,
    /// The engines' requests waiting and KV-cache use (percent) the scaler last read, when it read them.
    engine_load: (Option<f64>, Option<f64>),
    /// The replicas the namespace's quota held the endpoint at, while it does.
    held_at: Option<u32>,
}

/// The status fields the reconciler owns.
#[derive(Debug, Clone, PartialEq)]
struct Observed {
    state: EndpointState,
    message: Option<String>,
    url: Option<String>,
    ready: u32,
    target: u32,
}

pub struct Reconciler {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    secrets: SecretBox,
    provider: Arc<dyn ReplicaProvider>,
    config: RuntimeConfig,
    /// Which launcher starts an engine image.
    engines: Arc<Engines>,
    /// The GPUs replicas are placed on, and the compute list that says how many each instance has.
    devices: Arc<Devices>,
    hardware: Option<Arc<crate::hardware::HardwareList>>,
    settings: ScalerSettings,
    handle: RuntimeHandle,
    table: Publisher,
    runs: HashMap<String, EndpointRun>,
    /// The term this reconciler acts in, when it leads servers on one store: its writes are fenced by it,
    /// and it stops once the term is over. `None`: a reconciler run alone (tests).
    lead: Option<Lead>,
    /// The replicas as last recorded in the store, by endpoint (for the other servers' proxies); `None`
    /// until read from the store at the term's first tick.
    recorded: Option<HashMap<String, Vec<ReplicaRow>>>,
    /// Set when a write made as leader was refused: the term is over.
    fenced: std::sync::atomic::AtomicBool,
    /// Whether other servers on the store were running at the last full pass (their proxies route too).
    others: bool,
    /// The endpoints as last read from the store, with the reconciler's own writes applied since; `None`
    /// when they must be read again. The quick ticks between two full ones go by these: everything else
    /// that changes an endpoint kicks the reconciler, and a kicked tick reads the store.
    records: Option<Vec<EndpointRecord>>,
    /// What a namespace may run at once: the configured replica quota, or an administrator's override
    /// (read again with the records).
    quotas: QuotaConfig,
    quota_overrides: HashMap<String, QuotaOverride>,
    /// Custom domain → the namespace it belongs to: only that namespace's routes under it are served.
    domains: HashMap<String, String>,
    /// How long a write to a replica may wait on it (`proxy.replica_timeout_s`).
    replica_timeout: std::time::Duration,
    /// Replicas an earlier server left running, by endpoint, until the first tick adopts or stops them;
    /// `None` once it did.
    found: Option<HashMap<(String, String), Vec<Left>>>,
}

/// What identifies the replicas a spec needs: a change here means new replicas; a change elsewhere
/// (scaling, network, type) does not.
pub fn generation(spec: &EndpointSpec) -> String {
    let mut key = serde_json::json!({
        "model": spec.model,
        "accelerator": spec.compute.accelerator,
        "instanceType": spec.compute.instance_type,
        "instanceSize": spec.compute.instance_size,
    });
    if spec.experimental_features.skip_repo_download == Some(true) {
        // A container then mounts no model and its engine is not pointed at one. (Only when set, so the
        // generations of every other spec stay as they were.)
        key["skipRepoDownload"] = serde_json::Value::Bool(true);
    }
    hex(&Sha256::digest(key.to_string().as_bytes())[..8])
}

fn ms(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

impl Reconciler {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        secrets: SecretBox,
        provider: Arc<dyn ReplicaProvider>,
        config: RuntimeConfig,
        handle: RuntimeHandle,
        table: impl Into<Arc<watch::Sender<Arc<RouteTable>>>>,
    ) -> Reconciler {
        let settings = ScalerSettings::from_config(&config.scaling);
        // No engines dir (not absolute): the configured launchers and PATH only.
        let engines = Arc::new(Engines::new(PathBuf::new(), config.launchers.clone()));
        Reconciler {
            store,
            clock,
            secrets,
            provider,
            engines,
            devices: Devices::new(Vec::new(), Duration::ZERO),
            hardware: None,
            config,
            settings,
            handle,
            table: Publisher::new(table.into()),
            runs: HashMap::new(),
            lead: None,
            recorded: None,
            fenced: Default::default(),
            others: false,
            records: None,
            quotas: QuotaConfig::default(),
            quota_overrides: HashMap::new(),
            domains: HashMap::new(),
            replica_timeout: crate::routing::upstream::default_write_limit(),
            found: Some(HashMap::new()),
        }
    }

    /// The engines replicas start with (the server's; by default the configured launchers and `PATH`).
    pub fn with_engines(mut self, engines: Arc<Engines>) -> Reconciler {
        self.engines = engines;
        self
    }

    /// The GPUs replicas are placed on, and the compute list that says how many each instance has.
    pub fn with_devices(
        mut self,
        devices: Arc<Devices>,
        hardware: Arc<crate::hardware::HardwareList>,
    ) -> Reconciler {
        self.devices = devices;
        self.hardware = Some(hardware);
        self
    }

    /// How long a write to a replica may wait on it (`proxy.replica_timeout_s`; see [`Backend::new`]).
    pub fn with_replica_timeout(mut self, timeout: std::time::Duration) -> Reconciler {
        self.replica_timeout = timeout;
        self
    }

    /// The quotas the runtime holds namespaces to (the configured defaults; overrides come from the store).
    pub fn with_quotas(mut self, quotas: QuotaConfig) -> Reconciler {
        self.quotas = quotas;
        self
    }

    /// Acts in `lead`'s term: its writes are fenced by the term, it records its replicas for the other
    /// servers, counts their traffic with its own, and [`Self::serve_until`] ends once the term is over.
    pub fn with_lead(mut self, lead: Lead) -> Reconciler {
        self.lead = Some(lead);
        self
    }

    /// Whether it may act: its term (if it has one) is not over.
    fn leads(&self) -> bool {
        !self.fenced.load(std::sync::atomic::Ordering::Relaxed)
            && self.lead.as_ref().is_none_or(Lead::valid)
    }

    /// How many replicas the namespace may run at once.
    fn replica_quota(&self, namespace: &str) -> u32 {
        let set = self
            .quota_overrides
            .get(namespace)
            .copied()
            .unwrap_or_default();
        Limits::of(&self.quotas, set).replicas
    }

    /// Every endpoint, with the quota overrides, from the store.
    async fn read_all(&mut self) -> Result<Vec<EndpointRecord>, StoreError> {
        let mut session = self.store.read().await?;
        self.quota_overrides = session.namespace_quotas().await?.into_iter().collect();
        let all = session.all_endpoints().await?;
        // After the endpoints: a route's claim commits with its endpoint, so none read is missing one.
        let claims = session.domain_claims().await?.into_iter();
        self.domains = claims.map(|c| (c.domain, c.namespace)).collect();
        drop(session);
        self.hear_elsewhere(&all).await;
        Ok(all)
    }

    /// Counts what the other servers' proxies saw of each endpoint with this server's own: their latest
    /// request, their requests in flight, and the wake-ups they ask for; and notes whether other servers
    /// run at all.
    async fn hear_elsewhere(&mut self, records: &[EndpointRecord]) {
        // On SQLite this server is the only one.
        let Some(lead) = self
            .lead
            .as_ref()
            .filter(|_| self.store.backend() == StoreBackend::Postgres)
        else {
            return;
        };
        let others = match self.store.servers(crate::services::servers::ALIVE).await {
            Ok((servers, _)) => servers
                .iter()
                .any(|s| s.info.id != lead.term.holder && s.stopped_at.is_none()),
            Err(_) => true,
        };
        self.others = others;
        let Some(lead) = self.lead.as_ref() else {
            return;
        };
        let heard = match self
            .store
            .traffic_elsewhere(&lead.term.holder, TRAFFIC_FRESH)
            .await
        {
            Ok(heard) => heard.into_iter().collect::<HashMap<_, _>>(),
            Err(e) => {
                tracing::warn!(error = %e, "could not read the other servers' traffic");
                return;
            }
        };
        for rec in records {
            let t = heard.get(&rec.id).copied().unwrap_or_default();
            let in_flight = u32::try_from(t.in_flight).unwrap_or(u32::MAX);
            // Another server's clock running ahead must not keep an endpoint busy for ever.
            let last = t.last_request_ms.min(self.clock.now_millis());
            self.handle
                .activity(&rec.id, &rec.namespace, &rec.spec.name)
                .heard(last, in_flight, t.wake);
        }
    }

    /// Records each endpoint's replicas (and custom router) in the store, where they changed, for the
    /// other servers' proxies and for the next leader.
    async fn record_replicas(&mut self, records: &[EndpointRecord]) {
        let Some(lead) = &self.lead else {
            return;
        };
        let (mut recorded, first) = match self.recorded.take() {
            Some(r) => (r, false),
            // What the last leader recorded: what it ran that this term does not is cleared, and what it
            // does is written again, under this term.
            None => match self.store.replicas().await {
                Ok(rows) => {
                    let by = rows.into_iter().fold(HashMap::new(), |mut by, r| {
                        by.entry(r.endpoint_id.clone())
                            .or_insert_with(Vec::new)
                            .push(r);
                        by
                    });
                    (by, true)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not read the recorded replicas");
                    return;
                }
            },
        };
        let mut now: HashMap<String, Vec<ReplicaRow>> = HashMap::new();
        for rec in records {
            if let Some(run) = self.runs.get(&rec.id) {
                now.insert(rec.id.clone(), replica_rows(&rec.id, run));
            }
        }
        let mut changes: Vec<(String, Vec<ReplicaRow>)> = now
            .iter()
            .filter(|(id, rows)| match recorded.get(*id) {
                Some(r) => first || r != *rows,
                None => !rows.is_empty(),
            })
            .map(|(id, rows)| (id.clone(), rows.clone()))
            .collect();
        changes.extend(
            recorded
                .keys()
                .filter(|id| !now.contains_key(*id))
                .map(|id| (id.clone(), Vec::new())),
        );
        if changes.is_empty() {
            self.recorded = Some(recorded);
            return;
        }
        match self.store.record_replicas(&lead.term, &changes).await {
            Ok(()) => {
                recorded = now.into_iter().filter(|(_, r)| !r.is_empty()).collect();
            }
            Err(StoreError::Fenced) => self.lose_term(),
            Err(e) => tracing::warn!(error = %e, "could not record the replicas; retrying"),
        }
        self.recorded = Some(recorded);
    }

    /// A write made as leader was refused: the term is over, and this reconciler stops.
    fn lose_term(&self) {
        tracing::warn!("a write as leader was refused: another server leads now");
        self.fenced
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Ticks until `shutdown` flips to true, then stops every replica.
    pub async fn run(mut self, shutdown: watch::Receiver<bool>) {
        self.serve_until(shutdown).await;
        self.provider.stop_all().await;
        tracing::info!("replicas stopped");
    }

    /// Ticks until `over` flips to true or its term (see [`Self::with_lead`]) is over.
    pub async fn serve_until(&mut self, mut over: watch::Receiver<bool>) {
        let tick = Duration::from_millis(self.config.tick_ms.max(10));
        let kick = self.handle.kicks();
        let mut read_at = Instant::now();
        loop {
            if *over.borrow() || !self.leads() {
                break;
            }
            // A full tick reads every endpoint from the store; the quick ones in between, while replicas
            // start or drain, go by what the reconciler holds.
            if read_at.elapsed() >= tick {
                self.records = None;
            }
            if self.records.is_none() {
                read_at = Instant::now();
            }
            if let Err(e) = self.tick().await {
                tracing::warn!(error = %e, "reconcile tick failed; retrying");
            }
            // While replicas start or drain, look again soon: a cold start should not wait a whole tick.
            let busy = self
                .runs
                .values()
                .flat_map(|r| &r.replicas)
                .any(|r| !r.ready || r.draining.is_some());
            let mut pause = if busy { tick.min(FAST_TICK) } else { tick };
            if self.lead.is_some() {
                // Wakes in time to see that its term is over.
                pause = pause.min(super::leader::MARGIN);
            }
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                // An endpoint was created, changed or deleted, or a request asks to wake one.
                _ = kick.notified() => self.records = None,
                _ = over.changed() => {}
            }
        }
    }

    /// One pass over every endpoint: those held (see `records`), or else read from the store.
    pub async fn tick(&mut self) -> Result<(), StoreError> {
        if !self.leads() {
            return Ok(());
        }
        let records = match self.records.take() {
            Some(held) => held,
            None => self.read_all().await?,
        };
        let now = self.clock.now();
        if self.found.as_ref().is_some_and(|f| f.is_empty()) {
            let found = match self.provider.found().await {
                Ok(found) => found,
                Err(why) => {
                    // Nothing starts before the replicas an earlier server left are known: they may be
                    // running, holding GPUs and serving. Tried again at the next tick.
                    tracing::warn!("{why}: waiting to adopt what an earlier server left");
                    self.records = Some(records);
                    return Ok(());
                }
            };
            for f in found {
                let key = (f.namespace.clone(), f.endpoint.clone());
                // Its GPUs are held for it before any endpoint starts a replica this tick.
                let devices = (!f.devices.is_empty())
                    .then(|| self.devices.claim(&f.devices, &f.namespace, &f.endpoint));
                let left = Left { found: f, devices };
                let all = self.found.get_or_insert_default();
                all.entry(key).or_default().push(left);
            }
        }
        self.forget_deleted(&records).await;
        let mut routes = Vec::with_capacity(records.len());
        let mut held = Vec::with_capacity(records.len());
        let mut all_written = true;
        let mut decided_all = Vec::new();
        // Replicas each namespace's endpoints were given this pass: the scaler never goes over the
        // namespace's quota, even one an administrator lowered below what its endpoints ask for.
        let mut running: HashMap<String, u32> = HashMap::new();
        for rec in records {
            if !self.leads() {
                // The term ended mid-pass: nothing more is started or written under it (but what was
                // decided for the statuses it wrote is said).
                self.write_decisions(decided_all).await;
                return Ok(());
            }
            let gen = generation(&rec.spec);
            let used = running.get(&rec.namespace).copied().unwrap_or(0);
            let cap = self.replica_quota(&rec.namespace).saturating_sub(used);
            let observed = self.reconcile(&rec, &gen, now, cap).await;
            *running.entry(rec.namespace.clone()).or_default() += observed.target;
            let waking = rec.state == EndpointState::ScaledToZero
                && observed.state == EndpointState::Initializing;
            let decided = self.publish_fleet(&rec, &observed, now);
            let rec = match self.write_status(rec, observed).await {
                Ok(written) => {
                    decided_all.push((written.id.clone(), decided));
                    written
                }
                Err(rec) => {
                    // Kept for the next pass whose status is written, which finds the change of state
                    // again itself.
                    self.keep_decisions(&rec.id, decided);
                    all_written = false;
                    if waking {
                        // The wake-up was taken but not recorded: keep it for the next tick.
                        self.handle
                            .activity(&rec.id, &rec.namespace, &rec.spec.name)
                            .request_wake();
                    }
                    rec
                }
            };
            if let Some(route) = self.route(&rec, gen) {
                routes.push(route);
            }
            held.push(rec);
        }
        self.table.publish(routes);
        self.write_decisions(decided_all).await;
        self.record_replicas(&held).await;
        if self.leads() {
            self.stop_unadopted().await;
        }
        // What the store holds now, unless a write failed: then the next tick reads it again.
        self.records = all_written.then_some(held);
        Ok(())
    }

    /// After the first tick: the replicas an earlier server left that no endpoint adopted stop.
    async fn stop_unadopted(&mut self) {
        let Some(left) = self.found.take() else {
            return;
        };
        for Left { found: f, devices } in left.into_values().flatten() {
            tracing::info!(namespace = %f.namespace, endpoint = %f.endpoint, replica = %f.info.replica_id, "stopping a replica an earlier server left that its endpoint no longer wants");
            self.provider.stop(&f.info.replica_id).await;
            // Given back once it had its stop's grace time.
            drop(devices);
        }
    }

    /// Stops the replicas and router of every endpoint not in `records` (deleted), and forgets it.
    async fn forget_deleted(&mut self, records: &[EndpointRecord]) {
        let live: HashSet<&str> = records.iter().map(|r| r.id.as_str()).collect();
        let gone: Vec<String> = self
            .runs
            .keys()
            .filter(|id| !live.contains(id.as_str()))
            .cloned()
            .collect();
        for id in gone {
            if let Some(mut run) = self.runs.remove(&id) {
                stop_all(&mut run, self.provider.as_ref()).await;
                stop_router(&mut run, self.provider.as_ref()).await;
                self.handle.forget_activity(&id, &run.namespace, &run.name);
                self.handle.logs.forget(&run.namespace, &run.name);
            }
        }
    }

    /// What the proxy needs of the endpoint, `gen` being its spec's [`generation`].
    fn route(&self, rec: &EndpointRecord, gen: String) -> Option<Arc<Route>> {
        let run = self.runs.get(&rec.id)?;
        // With an http custom router, nothing is served until it knows the replicas; an extProc one is
        // asked once it takes connections.
        let router = run.router.as_ref().and_then(|r| match &r.grpc {
            Some(grpc) => r
                .grpc_ready
                .then(|| (grpc.clone(), RouterProtocol::ExtProc)),
            None => r
                .announced
                .is_some()
                .then(|| (r.backend.clone(), RouterProtocol::Http)),
        });
        let backends = run
            .replicas
            .iter()
            .filter(|r| r.serving())
            .map(|r| r.backend.clone())
            .collect();
        Some(super::routes::route_of(
            rec,
            gen,
            &self.domains,
            backends,
            router,
            run.activity.clone(),
        ))
    }

    /// Publishes the endpoint's fleet for the analytics recorder, and hands over what the pass decided (with
    /// the change of state, when it is a decision of its own).
    fn publish_fleet(
        &mut self,
        rec: &EndpointRecord,
        o: &Observed,
        now: DateTime<Utc>,
    ) -> Vec<Decision> {
        let Some(run) = self.runs.get_mut(&rec.id) else {
            return Vec::new();
        };
        let cpus: Vec<f64> = run
            .replicas
            .iter()
            .filter(|r| r.serving())
            .filter_map(|r| r.cpu_percent)
            .collect();
        let engine_read = o.ready > 0;
        run.activity.set_fleet(Fleet {
            at_ms: now.timestamp_millis(),
            ready: o.ready,
            target: o.target,
            cpu_percent: (!cpus.is_empty()).then(|| cpus.iter().sum::<f64>() / cpus.len() as f64),
            queue: run.engine_load.0.filter(|_| engine_read),
            kv_cache_percent: run.engine_load.1.filter(|_| engine_read),
        });
        let mut decided = std::mem::take(&mut run.decisions);
        let message = o.message.as_deref();
        decided.extend(decisions::transition(
            now, rec.state, o.state, message, o.ready,
        ));
        decided
    }

    /// Records the decisions of the endpoints whose status a pass wrote; kept for the next pass when they
    /// could not be recorded.
    async fn write_decisions(&mut self, decided: Vec<(String, Vec<Decision>)>) {
        if let Err(e) = decisions::write(self.store.as_ref(), &decided).await {
            tracing::warn!(error = %e, "could not record the endpoints' decisions; trying again");
            for (id, mut kept) in decided {
                if let Some(run) = self.runs.get_mut(&id) {
                    kept.append(&mut run.decisions);
                    run.decisions = kept;
                }
            }
        }
    }

    /// Puts back what a pass decided whose status was not written, less what the next pass decides again
    /// (see [`decisions::decided_again`]).
    fn keep_decisions(&mut self, id: &str, decided: Vec<Decision>) {
        if let Some(run) = self.runs.get_mut(id) {
            let from_state = |d: &Decision| decisions::decided_again(d.kind);
            let mut kept: Vec<Decision> = decided.into_iter().filter(|d| !from_state(d)).collect();
            kept.append(&mut run.decisions);
            run.decisions = kept;
        }
    }

    /// Writes what changed. Returns the endpoint as stored after it (`rec` itself when nothing changed), or
    /// `rec` as an error when the write did not happen (refused or stale).
    async fn write_status(
        &self,
        rec: EndpointRecord,
        o: Observed,
    ) -> Result<EndpointRecord, EndpointRecord> {
        let current = Observed {
            state: rec.state,
            message: rec.message.clone(),
            url: rec.url.clone(),
            ready: rec.ready_replica,
            target: rec.target_replica,
        };
        if o == current {
            return Ok(rec);
        }
        if !can_transition(rec.state, o.state) {
            tracing::error!(from = %rec.state, to = %o.state, "reconciler asked for a transition it may not make");
            return Err(rec);
        }
        let mut next = rec.clone();
        next.state = o.state;
        next.message = o.message;
        next.url = o.url;
        next.ready_replica = o.ready;
        next.target_replica = o.target;
        next.updated_at = self.clock.now();
        match crate::services::endpoints::write_status(
            self.store.as_ref(),
            rec.state,
            &next,
            &self.handle.public_url,
            self.lead.as_ref().map(|l| &l.term),
        )
        .await
        {
            Ok(written) => {
                if rec.state != o.state {
                    tracing::info!(namespace = %rec.namespace, endpoint = %rec.spec.name, from = %rec.state, to = %o.state, "endpoint state");
                }
                Ok(written)
            }
            Err(StoreError::Fenced) => {
                self.lose_term();
                Err(rec)
            }
            // Changed by a user in between: the next tick sees the new record.
            Err(StoreError::Stale) => {
                self.handle.kick();
                Err(rec)
            }
            Err(e) => {
                tracing::warn!(error = %e, "writing endpoint status");
                Err(rec)
            }
        }
    }

    /// One endpoint's pass, in steps: observe its replicas, decide the target from its state, roll replicas of
    /// the generation to serve up to it, keep its custom router in step, and say what its status should be
    /// (written by [`Self::write_status`]).
    async fn reconcile(
        &mut self,
        rec: &EndpointRecord,
        gen: &str,
        now: DateTime<Utc>,
        cap: u32,
    ) -> Observed {
        let steps = Steps {
            provider: self.provider.as_ref(),
            config: &self.config,
            engines: &self.engines,
            devices: &self.devices,
            hardware: self.hardware.as_deref(),
            settings: &self.settings,
            secrets: &self.secrets,
            handle: &self.handle,
            replica_timeout: self.replica_timeout,
            // Other servers' proxies drop a draining replica once they read it recorded: within their poll,
            // give or take a report.
            settle_floor: match self.others {
                true => super::routes::FOLLOW_POLL * 2,
                false => Duration::ZERO,
            },
        };
        let found = &mut self.found;
        let run = self.runs.entry(rec.id.clone()).or_insert_with(|| {
            let mut run = steps.new_run(rec, now);
            let key = (rec.namespace.clone(), rec.spec.name.clone());
            if let Some(left) = found.as_mut().and_then(|f| f.remove(&key)) {
                let (adopted, rest) = steps.adopt(&mut run, rec, gen, left, now);
                if let Some(f) = found.as_mut().filter(|_| !rest.is_empty()) {
                    f.insert(key, rest);
                }
                tracing::info!(namespace = %rec.namespace, endpoint = %rec.spec.name, adopted, "replicas adopted");
            }
            run
        });
        steps.observe(run, now).await;
        let url = Some(steps.handle.endpoint_url(&rec.namespace, &rec.spec.name));
        let out = Observed {
            state: rec.state,
            message: rec.message.clone(),
            url,
            ready: 0,
            target: 0,
        };
        steps.stop_drained(run).await;
        let pass = Pass {
            rec,
            gen,
            now,
            failed_update: rec.state == EndpointState::UpdateFailed
                && run.failed_generation.as_deref() == Some(gen),
            cap,
        };
        let out = match steps.decide_target(run, &pass, out).await {
            ControlFlow::Continue(out) => out,
            ControlFlow::Break(done) => return done,
        };
        let serve_gen = match steps.roll_out(run, &pass).await {
            Ok(serve_gen) => serve_gen,
            Err((why, keep_old)) => {
                return give_up(run, steps.provider, gen, why, keep_old, out).await
            }
        };
        if let Err(why) = sync_router(&steps, rec, run, now).await {
            return give_up(run, steps.provider, gen, why, false, out).await;
        }
        next_status(run, &pass, &serve_gen, out)
    }
}

/// What the steps of a pass use of the reconciler: all of it but the endpoints' runs, which they are given
/// one at a time.
struct Steps<'a> {
    provider: &'a dyn ReplicaProvider,
    config: &'a RuntimeConfig,
    engines: &'a Engines,
    devices: &'a Arc<Devices>,
    hardware: Option<&'a crate::hardware::HardwareList>,
    settings: &'a ScalerSettings,
    secrets: &'a SecretBox,
    handle: &'a RuntimeHandle,
    /// How long a write to a replica (or a custom router) may wait on it.
    replica_timeout: std::time::Duration,
    /// The least time a retired replica is kept out of every routing table before it stops.
    settle_floor: Duration,
}

/// The endpoint a pass is for.
struct Pass<'a> {
    rec: &'a EndpointRecord,
    /// Its spec's [`generation`].
    gen: &'a str,
    now: DateTime<Utc>,
    /// This spec already failed to roll out: the previous generation goes on serving.
    failed_update: bool,
    /// Replicas the namespace's quota leaves for this endpoint in this pass.
    cap: u32,
}

impl Steps<'_> {
    /// The run of an endpoint new to the reconciler.
    fn new_run(&self, rec: &EndpointRecord, now: DateTime<Utc>) -> EndpointRun {
        EndpointRun {
            router: None,
            entry: None,
            namespace: rec.namespace.clone(),
            name: rec.spec.name.clone(),
            replicas: Vec::new(),
            // Looked up (a lock and a map key) only for an endpoint new to the reconciler.
            activity: self
                .handle
                .activity(&rec.id, &rec.namespace, &rec.spec.name),
            scaler: Scaler::default(),
            target: 0,
            crashes: VecDeque::new(),
            last_exit: None,
            backoff: Duration::from_millis(self.config.backoff_initial_ms),
            next_start_at: None,
            failed_generation: None,
            good: None,
            since: now,
            waiting: None,
            short_of_devices: false,
            decisions: Vec::new(),
            engine_load: (None, None),
            held_at: None,
        }
    }

    /// Takes over the replicas an earlier server left for this endpoint that run its spec's generation, as
    /// they are (same process or container, no restart; ready at their first health check), with the GPUs
    /// they were given. Returns how many, and the rest (to be stopped).
    fn adopt(
        &self,
        run: &mut EndpointRun,
        rec: &EndpointRecord,
        gen: &str,
        left: Vec<Left>,
        now: DateTime<Utc>,
    ) -> (usize, Vec<Left>) {
        let wanted = rec.state.is_active() && rec.state != EndpointState::Pending;
        let (mine, rest): (Vec<Left>, Vec<Left>) = left
            .into_iter()
            .partition(|l| wanted && l.found.generation == gen);
        let adopted = mine.len();
        for Left { found: f, devices } in mine {
            run.replicas.push(ReplicaRun {
                generation: f.generation,
                backend: Arc::new(Backend::new(
                    f.info.replica_id.clone(),
                    f.info.addr,
                    self.replica_timeout,
                )),
                info: f.info,
                health_route: rec.spec.health_route(),
                ready: false,
                started_at: now,
                cpu_mark: None,
                cpu_percent: None,
                draining: None,
                _devices: devices,
            });
        }
        run.target = adopted as u32;
        (adopted, rest)
    }

    /// Looks at the replicas (see [`observe`]) and forgets the crashes older than the crash window.
    async fn observe(&self, run: &mut EndpointRun, now: DateTime<Utc>) {
        observe(run, self.provider, self.handle, self.config, now).await;
        let window = chrono::Duration::seconds(self.config.crash_window_s.min(MAX_SECONDS) as i64);
        while run.crashes.front().is_some_and(|t| *t + window < now) {
            run.crashes.pop_front();
        }
    }

    /// Retired replicas whose requests are done (or that had long enough) stop now. They left the routing
    /// table at least two ticks ago, so no new request can be on its way to them.
    /// With a custom router, its requests count, and it must already have been told the replica is gone.
    async fn stop_drained(&self, run: &mut EndpointRun) {
        let settle =
            Duration::from_millis(self.config.tick_ms.clamp(10, 60_000) * 2).max(self.settle_floor);
        let router_idle = match &run.router {
            None => true,
            Some(r) => {
                r.announced.as_ref() == Some(&serving_urls(run)) && r.backend.in_flight.get() == 0
            }
        };
        stop_where(run, self.provider, |r| {
            r.draining.is_some_and(|t| {
                (t.elapsed() >= settle && router_idle && r.backend.in_flight.get() == 0)
                    || t.elapsed() >= MAX_DRAIN
            })
        })
        .await;
    }

    /// Sets the replica target from the endpoint's state. `Break` with the status when the pass ends here
    /// (nothing is to run, or the endpoint was given up or scaled to zero); else `Continue` to roll out.
    async fn decide_target(
        &self,
        run: &mut EndpointRun,
        pass: &Pass<'_>,
        out: Observed,
    ) -> ControlFlow<Observed, Observed> {
        // The namespace's replica quota bounds the scaler like the spec does: with no room left, the
        // endpoint neither wakes nor keeps replicas.
        let mut bounds = bounds_at(&pass.rec.spec.compute.scaling, pass.now);
        bounds.max = bounds.max.min(pass.cap);
        bounds.min = bounds.min.min(pass.cap);
        let entry_began = schedule_began(run, pass.rec, pass.now);
        if let Some(waiting) = self.waiting_for_engine(run, pass.rec) {
            // Nothing can start before the engine is in; it starts on the first pass after that.
            let mut out = out;
            out.state = EndpointState::Pending;
            out.message = Some(waiting);
            run.crashes.clear();
            run.target = 0;
            return ControlFlow::Break(out);
        }
        match pass.rec.state {
            EndpointState::Failed if self.engine_came(pass.rec) => {
                let mut out = out;
                out.state = EndpointState::Initializing;
                out.message = Some("its engine is installed now: starting".into());
                run.crashes.clear();
                run.since = pass.now;
                self.scale(run, pass, EndpointState::Initializing, &bounds, out)
                    .await
            }
            EndpointState::Paused | EndpointState::Failed => {
                // Out of the routing table first, so no request is sent to a replica being stopped.
                retire_all(run, self.provider).await;
                stop_router(run, self.provider).await;
                run.scaler.reset();
                run.target = 0;
                ControlFlow::Break(out)
            }
            EndpointState::ScaledToZero => {
                self.wake_or_hold(run, pass, &bounds, entry_began, out)
                    .await
            }
            state => self.scale(run, pass, state, &bounds, out).await,
        }
    }

    /// Why an endpoint that has no replica yet waits: its engine is being installed (see
    /// [`Engines::waiting_for`]). A failed endpoint waits only when it failed for want of that engine.
    fn waiting_for_engine(&self, run: &EndpointRun, rec: &EndpointRecord) -> Option<String> {
        if self.provider.kind() != Kind::Process {
            // Containers run the image the spec names: no engine is installed here.
            return None;
        }
        let waits = match rec.state {
            EndpointState::Pending | EndpointState::Initializing => run.replicas.is_empty(),
            EndpointState::Failed => rec.message.as_deref().is_some_and(engines::is_missing),
            _ => false,
        };
        waits.then(|| self.engines.waiting_for(&rec.spec)).flatten()
    }

    /// Whether a failed endpoint failed for want of an engine that is here now.
    fn engine_came(&self, rec: &EndpointRecord) -> bool {
        self.provider.kind() == Kind::Process
            && rec.message.as_deref().is_some_and(engines::is_missing)
            && self.engines.resolve_spec(&rec.spec).is_ok()
    }

    /// A scaled-to-zero endpoint starts when a request asked it to, or when a schedule entry with a minimum
    /// began; else it holds nothing.
    async fn wake_or_hold(
        &self,
        run: &mut EndpointRun,
        pass: &Pass<'_>,
        bounds: &Bounds,
        entry_began: bool,
        mut out: Observed,
    ) -> ControlFlow<Observed, Observed> {
        let woken = run.activity.take_wake();
        if (woken || (entry_began && bounds.min > 0)) && bounds.max > 0 {
            out.state = EndpointState::Initializing;
            out.message = Some(if woken {
                "woken by a request".to_string()
            } else {
                "started by the schedule".to_string()
            });
            run.since = pass.now;
            run.target = bounds.min.max(1).min(bounds.max.max(1));
            // Kept until the endpoint is up (see `scale`): a pass whose status is not written wakes it again.
            let by = woken.then(|| run.activity.woken_by_request()).flatten();
            let d = decisions::woken(pass.now, run.target, woken, by);
            run.decisions.push(d);
            ControlFlow::Continue(out)
        } else {
            retire_all(run, self.provider).await;
            stop_router(run, self.provider).await;
            run.target = 0;
            ControlFlow::Break(out)
        }
    }

    /// An endpoint that is up or on its way (`state`): given up past `max_crashes`, scaled to zero when idle,
    /// else the scaler sets the target.
    async fn scale(
        &self,
        run: &mut EndpointRun,
        pass: &Pass<'_>,
        state: EndpointState,
        bounds: &Bounds,
        out: Observed,
    ) -> ControlFlow<Observed, Observed> {
        // A request to an endpoint that is already up is no wake-up.
        run.activity.take_wake();
        run.activity.forget_woken_by();
        if state == EndpointState::Pending {
            // Created or resumed: idle time counts from now, not from requests before a pause.
            run.since = pass.now;
        }
        if run.crashes.len() >= self.config.max_crashes.max(1) as usize {
            run.crashes.clear();
            let why = run
                .last_exit
                .clone()
                .unwrap_or_else(|| "replicas keep failing".into());
            let keep_old = !pass.failed_update
                && matches!(state, EndpointState::Updating | EndpointState::UpdateFailed);
            let out = give_up(run, self.provider, pass.gen, why, keep_old, out).await;
            return ControlFlow::Break(out);
        }
        let last = last_busy(run, pass.now);
        let settled = matches!(state, EndpointState::Running | EndpointState::UpdateFailed);
        if (settled && idle_expired(bounds, last, pass.now)) || bounds.max == 0 {
            return ControlFlow::Break(self.scale_to_zero(run, bounds, pass, out).await);
        }
        let measure = pass.rec.spec.compute.scaling.measure.as_ref();
        let features = &pass.rec.spec.experimental_features;
        let by_engine = features.effective_load_balancer() == LoadBalancer::LeastLoad;
        let sample = load_sample(run, measure, by_engine, pass.now).await;
        run.engine_load = (sample.requests_waiting, sample.kv_cache_usage);
        run.scaler.observe(pass.now, sample);
        let before = run.target;
        run.target =
            run.scaler
                .desired(pass.now, run.target.max(1), bounds, measure, self.settings);
        self.explain_target(run, pass, bounds, before);
        ControlFlow::Continue(out)
    }

    /// The decisions in a new target: scaled (an active endpoint's, not its first), or held at the
    /// namespace's quota (once while it holds).
    fn explain_target(&self, run: &mut EndpointRun, pass: &Pass<'_>, bounds: &Bounds, before: u32) {
        let explained = run.scaler.explained();
        if before > 0 {
            let d = decisions::scaled(pass.now, before, run.target, explained, bounds);
            run.decisions.extend(d);
        }
        // What the spec and the load ask for, before the quota: the scaler's count within the spec's bounds.
        let own = bounds_at(&pass.rec.spec.compute.scaling, pass.now);
        let wanted = explained.map_or(0, |e| e.wanted).clamp(own.min, own.max);
        let held = (wanted > pass.cap).then_some(pass.cap);
        if let Some(cap) = held.filter(|cap| run.held_at != Some(*cap)) {
            let d = decisions::held_at_quota(pass.now, wanted, cap);
            run.decisions.push(d);
        }
        run.held_at = held;
    }

    /// Retires every replica of an endpoint that was idle long enough, or that the schedule in effect
    /// allows none.
    async fn scale_to_zero(
        &self,
        run: &mut EndpointRun,
        bounds: &Bounds,
        pass: &Pass<'_>,
        mut out: Observed,
    ) -> Observed {
        let last = last_busy(run, pass.now);
        // The target as stored: a pass whose status was not written has already set its own to 0.
        let from = run.target.max(pass.rec.target_replica);
        let d = decisions::to_zero(pass.now, from, last, bounds, pass.cap);
        run.decisions.push(d);
        retire_all(run, self.provider).await;
        run.scaler.reset();
        run.target = 0;
        out.state = EndpointState::ScaledToZero;
        out.message = Some(match bounds.scale_to_zero_after {
            Some(m) if bounds.max > 0 => {
                format!("scaled to zero after {m} min without requests")
            }
            _ if pass.cap == 0 => {
                "the namespace's replica quota leaves no replicas for it".to_string()
            }
            _ => "the schedule in effect allows no replicas".to_string(),
        });
        out
    }

    /// Rolls replicas of the generation to serve up to the target, and retires the other generations once
    /// it is all up. Returns that generation, or why the spec cannot run and whether the previous generation
    /// may go on serving.
    async fn roll_out(
        &self,
        run: &mut EndpointRun,
        pass: &Pass<'_>,
    ) -> Result<String, (String, bool)> {
        let (serve_gen, serve_spec) = serving_generation(run, pass);
        let target = run.target as usize;
        self.shed_surplus(run, &serve_gen, target).await;
        let started = self
            .start_missing(run, pass, &serve_gen, &serve_spec, target)
            .await;
        if run.waiting.is_some() && run.short_of_devices {
            // Too few GPUs for a new replica beside the old generation's: those make room (an update on a
            // server with no GPU to spare has a gap rather than none at all).
            retire_where(run, self.provider, |r| r.generation != serve_gen).await;
        }
        if let Err(why) = started {
            // Cannot start at all: retrying will not help.
            let keep_old = serve_gen == pass.gen
                && matches!(
                    pass.rec.state,
                    EndpointState::Updating | EndpointState::UpdateFailed
                );
            return Err((why, keep_old));
        }
        self.retire_old_generations(run, pass, &serve_gen, target)
            .await;
        Ok(serve_gen)
    }

    /// Surplus replicas of `serve_gen` over `target`: not-ready ones stop at once, ready ones drain; the
    /// newest go first.
    async fn shed_surplus(&self, run: &mut EndpointRun, serve_gen: &str, target: usize) {
        loop {
            let mine: Vec<usize> = (0..run.replicas.len())
                .filter(|i| {
                    run.replicas[*i].generation == serve_gen && run.replicas[*i].draining.is_none()
                })
                .collect();
            if mine.len() <= target {
                break;
            }
            let Some(victim) = mine
                .iter()
                .copied()
                .max_by_key(|i| (!run.replicas[*i].ready, run.replicas[*i].started_at))
            else {
                break;
            };
            if run.replicas[victim].ready {
                run.replicas[victim].draining = Some(std::time::Instant::now());
            } else {
                let r = run.replicas.remove(victim);
                self.provider.stop(&r.info.replica_id).await;
            }
        }
    }

    /// Starts replicas of `serve_gen` (running `spec`) up to `target`, once the crash backoff is over; one
    /// that waits for GPUs leaves why in `run.waiting`. `Err` says why one cannot start at all.
    async fn start_missing(
        &self,
        run: &mut EndpointRun,
        pass: &Pass<'_>,
        serve_gen: &str,
        spec: &EndpointSpec,
        target: usize,
    ) -> Result<(), String> {
        let have = run
            .replicas
            .iter()
            .filter(|r| r.generation == serve_gen && r.draining.is_none())
            .count();
        run.waiting = None;
        run.short_of_devices = false;
        if have < target && run.next_start_at.is_none_or(|t| t <= pass.now) {
            for _ in have..target {
                let devices = match self.devices_for(pass, spec) {
                    Ok(devices) => devices,
                    Err(waiting) => {
                        run.waiting = Some(waiting);
                        run.short_of_devices = true;
                        break;
                    }
                };
                match self.start_replica(pass, serve_gen, spec, devices).await? {
                    Started::Up(replica) => run.replicas.push(*replica),
                    Started::Waiting(waiting) => {
                        run.waiting = Some(waiting);
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    /// The GPUs a replica of `spec` is given: as many as its instance has, when it is GPU compute and this
    /// server places replicas on GPUs; `Err` says what it waits for when too few are free.
    fn devices_for(&self, pass: &Pass<'_>, spec: &EndpointSpec) -> Result<Option<Lease>, String> {
        let compute = &spec.compute;
        let gpu = matches!(compute.accelerator.as_str(), "gpu" | "zero_gpu");
        if !gpu || self.devices.count() == 0 {
            return Ok(None);
        }
        let wanted = self
            .compute_of(spec)
            .map_or(1, |c| c.num_accelerators.max(1));
        let (namespace, name) = (&pass.rec.namespace, &pass.rec.spec.name);
        self.devices.take(wanted, namespace, name).map(Some)
    }

    /// The hardware entry of the spec's compute, when the server has the list.
    fn compute_of(&self, spec: &EndpointSpec) -> Option<&crate::hardware::Compute> {
        let compute = &spec.compute;
        let (vendor, region) = (&spec.provider.vendor, &spec.provider.region);
        let placement = self.hardware?.find(
            vendor,
            region,
            compute.accelerator.as_str(),
            &compute.instance_type,
            &compute.instance_size,
        )?;
        Some(placement.compute)
    }

    /// What a replica of `spec` may use: its compute's CPUs and memory, and the GPUs it was given.
    fn resources_for(&self, spec: &EndpointSpec, devices: Option<&Lease>) -> Resources {
        let compute = self.compute_of(spec);
        Resources {
            cpus: compute.and_then(|c| c.num_cpus).map(f64::from),
            memory_bytes: compute
                .map(|c| c.memory_gb)
                .filter(|gb| gb.is_finite() && *gb > 0.0)
                .map(|gb| (gb * (1u64 << 30) as f64) as u64),
            devices: devices.map(|l| l.ids().to_vec()).unwrap_or_default(),
        }
    }

    /// Starts one replica of `serve_gen`, running `spec`, on `devices` (its own GPUs, when it has any), once
    /// its provider is ready for it (its image pulled).
    async fn start_replica(
        &self,
        pass: &Pass<'_>,
        serve_gen: &str,
        spec: &EndpointSpec,
        devices: Option<Lease>,
    ) -> Result<Started<Box<ReplicaRun>>, String> {
        let rec = pass.rec;
        let Launch { plan, health_route } =
            self.plan_replica(pass, serve_gen, spec, devices.as_ref())?;
        let info = match bring_up(self.provider, &plan).await? {
            Started::Up(info) => info,
            Started::Waiting(why) => {
                if let Some(lease) = devices {
                    lease.unused();
                }
                return Ok(Started::Waiting(why));
            }
        };
        tracing::info!(namespace = %rec.namespace, endpoint = %rec.spec.name, replica = %info.replica_id, addr = %info.addr, "replica started");
        Ok(Started::Up(Box::new(ReplicaRun {
            generation: serve_gen.to_string(),
            backend: Arc::new(Backend::new(
                info.replica_id.clone(),
                info.addr,
                self.replica_timeout,
            )),
            info,
            health_route,
            ready: false,
            started_at: pass.now,
            cpu_mark: None,
            cpu_percent: None,
            draining: None,
            _devices: devices,
        })))
    }

    /// The plan of a new replica of `serve_gen` running `spec`, on `devices` (its own GPUs, when it has any).
    fn plan_replica(
        &self,
        pass: &Pass<'_>,
        serve_gen: &str,
        spec: &EndpointSpec,
        devices: Option<&Lease>,
    ) -> Result<Launch, String> {
        let rec = pass.rec;
        let replica_id = format!("{}-{}", rec.spec.name, &random_id()[..8]);
        let mut launch = launch::plan(
            self.engines,
            self.secrets,
            &rec.namespace,
            spec,
            &replica_id,
            self.provider.kind(),
        )
        .map_err(|e| e.0)?;
        let plan = &mut launch.plan;
        plan.generation = serve_gen.to_string();
        plan.resources = self.resources_for(spec, devices);
        let gpu = matches!(spec.compute.accelerator.as_str(), "gpu" | "zero_gpu");
        if gpu && devices.is_none() && matches!(plan.workload, Workload::Container(_)) {
            // A container is given only the devices placed for it: with none known, it would run without.
            return Err(format!(
                "{} {} needs GPUs, and this server knows of none (runtime.gpus, or nvidia-smi): not started without",
                spec.compute.instance_type, spec.compute.instance_size
            ));
        }
        if let (Some(lease), Workload::Process { .. }) = (devices, &plan.workload) {
            // Placed: the process sees its own devices, whatever its spec's environment said. (A container
            // is given only its own.)
            plan.env
                .insert("CUDA_VISIBLE_DEVICES".into(), lease.ids().join(","));
        }
        Ok(launch)
    }

    /// Once `target` replicas of `serve_gen` serve, the other generations' replicas retire; when that is
    /// the spec's own generation, it is the last good one.
    async fn retire_old_generations(
        &self,
        run: &mut EndpointRun,
        pass: &Pass<'_>,
        serve_gen: &str,
        target: usize,
    ) {
        let ready_new = run
            .replicas
            .iter()
            .filter(|r| r.generation == serve_gen && r.serving())
            .count();
        if ready_new >= target && target > 0 {
            retire_where(run, self.provider, |r| r.generation != serve_gen).await;
            if serve_gen == pass.gen {
                run.good = Some((pass.gen.to_string(), pass.rec.spec.clone()));
                run.failed_generation = None;
            }
        }
    }
}

/// Whether a schedule entry took effect since the last tick; notes the one in effect now. A schedule entry
/// taking effect is an event: it starts a scaled-to-zero endpoint once, when it begins (spec part 3), not
/// at every tick it lasts.
/// What the store records of an endpoint's replicas and custom router.
fn replica_rows(endpoint_id: &str, run: &EndpointRun) -> Vec<ReplicaRow> {
    let row =
        |role: &str, id: &str, backend: &Backend, handle: &str, generation: &str, state: &str| {
            ReplicaRow {
                endpoint_id: endpoint_id.to_string(),
                replica_id: id.to_string(),
                role: role.to_string(),
                url: backend.addr.to_string(),
                handle: handle.to_string(),
                generation: generation.to_string(),
                state: state.to_string(),
            }
        };
    let mut rows: Vec<ReplicaRow> = run
        .replicas
        .iter()
        .map(|r| {
            let state = match (r.ready, r.draining.is_some()) {
                (_, true) => "draining",
                (true, false) => "ready",
                (false, false) => "starting",
            };
            let id = &r.info.replica_id;
            row(
                "replica",
                id,
                &r.backend,
                &r.info.handle,
                &r.generation,
                state,
            )
        })
        .collect();
    if let Some(router) = &run.router {
        let state = if router.announced.is_some() {
            "ready"
        } else {
            "starting"
        };
        // A follower needs an extProc router's gRPC address (role `ext-proc`), and an http one's own.
        let (role, b, state) = match &router.grpc {
            Some(grpc) => {
                let state = if router.grpc_ready {
                    "ready"
                } else {
                    "starting"
                };
                (ROLE_EXT_PROC, grpc, state)
            }
            None => (ROLE_ROUTER, &router.backend, state),
        };
        rows.push(row(role, &b.replica_id, b, &b.replica_id, "", state));
    }
    rows
}

fn schedule_began(run: &mut EndpointRun, rec: &EndpointRecord, now: DateTime<Utc>) -> bool {
    let entry = rec
        .spec
        .compute
        .scaling
        .entry_in_effect(minute_of_day(now))
        .map(|e| e.at.clone());
    let began = run.entry.as_ref().is_some_and(|before| *before != entry);
    if began {
        let scaling = &rec.spec.compute.scaling;
        let own = Bounds {
            min: scaling.min_replica,
            max: scaling.max_replica,
            scale_to_zero_after: None,
        };
        let in_effect = scaling.entry_in_effect(minute_of_day(now));
        run.decisions
            .push(decisions::schedule(now, in_effect, &own));
    }
    run.entry = Some(entry);
    began
}

/// When the endpoint was last busy, for its idle time: its last request (none before `since`), or now
/// while a request is still running.
fn last_busy(run: &EndpointRun, now: DateTime<Utc>) -> DateTime<Utc> {
    // A request still running (a long stream) keeps the endpoint busy.
    if run.activity.in_flight_everywhere() > 0 {
        now
    } else {
        run.activity
            .last_request()
            .map_or(run.since, |t| t.max(run.since))
    }
}

/// The generation to roll replicas of, and its spec: the spec's own, or the last good one while the spec
/// has failed to roll out.
fn serving_generation(run: &EndpointRun, pass: &Pass<'_>) -> (String, EndpointSpec) {
    match (&run.good, pass.failed_update) {
        (Some((g, s)), true) => (g.clone(), s.clone()),
        _ => (pass.gen.to_string(), pass.rec.spec.clone()),
    }
}

/// The status after a roll-out: the next state, one step per tick, and its message.
fn next_status(run: &EndpointRun, pass: &Pass<'_>, serve_gen: &str, mut out: Observed) -> Observed {
    let ready = run.replicas.iter().filter(|r| r.serving()).count();
    let others = run.replicas.iter().any(|r| r.generation != serve_gen);
    // One step per tick: a state just entered (a wake-up) is left at the next tick at the earliest.
    out.state = match out.state {
        s if s != pass.rec.state => s,
        EndpointState::Pending => EndpointState::Initializing,
        EndpointState::Initializing if ready > 0 && !others => EndpointState::Running,
        EndpointState::Running if others => EndpointState::Updating,
        EndpointState::Updating if !others && ready > 0 => EndpointState::Running,
        EndpointState::UpdateFailed if !pass.failed_update => EndpointState::Updating,
        s => s,
    };
    // A replica waiting for GPUs: with none running yet, the endpoint is pending until one is free.
    if let Some(waiting) = &run.waiting {
        if run.replicas.is_empty() && can_transition(out.state, EndpointState::Pending) {
            out.state = EndpointState::Pending;
        }
        out.message = Some(waiting.clone());
        return finish(out, run);
    }
    out.message = match out.state {
        EndpointState::Running | EndpointState::Updating | EndpointState::Initializing
            if !run.crashes.is_empty() =>
        {
            run.last_exit.as_ref().map(|m| {
                format!(
                    "restarting a replica ({} exits lately): {m}",
                    run.crashes.len()
                )
            })
        }
        EndpointState::Running | EndpointState::Updating => None,
        EndpointState::Initializing if ready == 0 => {
            Some(format!("starting {} replica(s)", run.target))
        }
        _ => out.message,
    };
    finish(out, run)
}

/// The replicas that take requests, as a custom router is told them.
fn serving_urls(run: &EndpointRun) -> Vec<String> {
    let serving = run.replicas.iter().filter(|r| r.serving());
    serving.map(|r| format!("http://{}", r.info.addr)).collect()
}

/// Keeps the endpoint's custom-router sidecar running (restarted when its spec changes or it exits)
/// and tells it the ready replicas whenever they change. `Err` when it cannot run here at all.
async fn sync_router(
    steps: &Steps<'_>,
    rec: &EndpointRecord,
    run: &mut EndpointRun,
    now: DateTime<Utc>,
) -> Result<(), String> {
    let (provider, config) = (steps.provider, steps.config);
    let Some(spec) = &rec.spec.custom_router else {
        stop_router(run, provider).await;
        return Ok(());
    };
    if let Some(r) = &run.router {
        match provider.status(&r.backend.replica_id) {
            ReplicaStatus::Exited(how) => {
                // A crash like a replica's: counted, and restarted after the backoff.
                let why = format!("custom router {} exited ({how})", r.backend.replica_id);
                stop_router(run, provider).await;
                record_crash(run, config, now, why);
            }
            // Its engine went away: replaced once it is back, as a replica is.
            ReplicaStatus::Lost(_) => stop_router(run, provider).await,
            ReplicaStatus::Running if r.spec != *spec => stop_router(run, provider).await,
            ReplicaStatus::Running => {}
        }
    }
    if run.router.is_none() && run.next_start_at.is_none_or(|t| t <= now) {
        let started = start_router(provider, config, rec, spec, steps.replica_timeout);
        match started.await? {
            Started::Up(router) => run.router = Some(router),
            Started::Waiting(why) => run.waiting = Some(format!("custom router: {why}")),
        }
    }
    announce_backends(run).await;
    if let Some(r) = run.router.as_mut() {
        r.grpc_ready = r.grpc_ready || listening(r.grpc.as_deref()).await;
    }
    Ok(())
}

/// Whether an extProc router's gRPC service takes connections.
async fn listening(grpc: Option<&Backend>) -> bool {
    let Some(b) = grpc else { return false };
    let connect = crate::routing::upstream::connect_stream(b.addr);
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, connect).await,
        Ok(Ok(_))
    )
}

/// Starts the custom-router sidecar `spec` asks for, with the launcher configured for its tag.
async fn start_router(
    provider: &dyn ReplicaProvider,
    config: &RuntimeConfig,
    rec: &EndpointRecord,
    spec: &CustomRouter,
    write_limit: std::time::Duration,
) -> Result<Started<RouterRun>, String> {
    let launcher = config
        .routers
        .get(&spec.tag)
        .filter(|l| !l.command.is_empty() || l.image.is_some())
        .ok_or_else(|| {
            format!(
                "no custom router is configured for tag {:?} on this server (runtime.routers.{})",
                spec.tag, spec.tag
            )
        })?;
    let replica_id = format!("{}-router-{}", rec.spec.name, &random_id()[..8]);
    let grpc_port = grpc_port(provider.kind(), spec)?;
    let (workload, args) = router_workload(provider.kind(), launcher, spec, grpc_port)?;
    let plan = ReplicaPlan {
        namespace: rec.namespace.clone(),
        endpoint: rec.spec.name.clone(),
        replica_id,
        generation: String::new(),
        workload,
        args,
        env: launcher
            .env
            .iter()
            .chain(&spec.env)
            .map(|(k, v)| (k.clone(), v.clone()))
            .chain(grpc_port.map(|p| ("GRPC_PORT".to_string(), p.to_string())))
            .collect(),
        resources: Resources::default(),
    };
    let info = match bring_up(provider, &plan).await {
        Ok(Started::Up(info)) => info,
        Ok(Started::Waiting(why)) => return Ok(Started::Waiting(why)),
        Err(why) => return Err(format!("custom router: {why}")),
    };
    tracing::info!(endpoint = %rec.spec.name, router = %info.replica_id, addr = %info.addr, "custom router started");
    let grpc = grpc_port.map(|port| {
        let addr = std::net::SocketAddr::new(info.addr.ip(), port);
        Arc::new(Backend::new(info.replica_id.clone(), addr, write_limit))
    });
    Ok(Started::Up(RouterRun {
        spec: spec.clone(),
        backend: Arc::new(Backend::new(info.replica_id, info.addr, write_limit)),
        grpc,
        grpc_ready: false,
        announced: None,
    }))
}

/// Starts `plan` once its provider is ready for it (its image pulled, its model fetched): the replica's
/// address, or what it waits for; `Err` when it cannot start at all (retrying cannot help).
async fn bring_up(
    provider: &dyn ReplicaProvider,
    plan: &ReplicaPlan,
) -> Result<Started<ReplicaInfo>, String> {
    match provider.prepare(plan).await {
        Readiness::Ready => {}
        Readiness::Waiting(why) => return Ok(Started::Waiting(why)),
        Readiness::Failed(why) => return Err(why),
    }
    match provider.start(plan).await {
        Ok(info) => Ok(Started::Up(info)),
        Err(ProviderError::Unavailable(why)) => Ok(Started::Waiting(format!("{why}; retrying"))),
        Err(ProviderError::Start(why)) => Err(why),
    }
}

/// The port an extProc router serves gRPC on (`None` for an http router): as a process, a free one of this
/// machine's; in a container, the spec's `grpcPort`. It is given as `{grpc_port}` in the launcher's
/// command and as `GRPC_PORT` in the environment.
fn grpc_port(kind: Kind, spec: &CustomRouter) -> Result<Option<u16>, String> {
    if spec.protocol != RouterProtocol::ExtProc {
        return Ok(None);
    }
    match kind {
        Kind::Process => super::local::free_port()
            .map(Some)
            .map_err(|e| format!("custom router: no free port for its gRPC service: {e}")),
        Kind::Container => Ok(Some(spec.grpc_port)),
    }
}

/// What a custom router runs: its launcher's command as a process, or under a container provider its
/// image (the command, when set, as its entrypoint), listening on the spec's port (and an extProc router's
/// gRPC service on `grpc_port`).
fn router_workload(
    kind: Kind,
    launcher: &crate::config::Launcher,
    spec: &CustomRouter,
    grpc_port: Option<u16>,
) -> Result<(Workload, Vec<String>), String> {
    let grpc = grpc_port.map(|p| p.to_string()).unwrap_or_default();
    let mut command = launcher
        .command
        .iter()
        .map(|a| a.replace("{grpc_port}", &grpc));
    match kind {
        Kind::Process => {
            let program = command.next().unwrap_or_default();
            Ok((Workload::Process { program }, command.collect()))
        }
        Kind::Container => {
            let image = launcher.image.clone().filter(|i| !i.trim().is_empty()).ok_or_else(|| {
                format!(
                    "custom router {:?} has no image for this server's containers (runtime.routers.{}.image)",
                    spec.tag, spec.tag
                )
            })?;
            let port = spec.port.to_string();
            let entrypoint: Vec<String> = command.map(|a| a.replace("{port}", &port)).collect();
            let workload = Workload::Container(super::provider::ContainerPlan {
                image,
                entrypoint: (!entrypoint.is_empty()).then_some(entrypoint),
                port: spec.port,
                credentials: None,
                repository: None,
            });
            Ok((workload, Vec::new()))
        }
    }
}

/// Tells the custom router the replicas that serve, when they changed since it last acknowledged them.
async fn announce_backends(run: &mut EndpointRun) {
    let backends = serving_urls(run);
    let Some(router) = run.router.as_mut() else {
        return;
    };
    if router.announced.as_ref() != Some(&backends) {
        let body = serde_json::json!({ "backends": backends }).to_string();
        let req = axum::http::Request::post("/_custom_router/set-backends")
            .header(axum::http::header::CONTENT_TYPE, "application/json")
            .body(body.into());
        // The sidecar may still be starting: not told now, told at a later tick.
        if let Ok(req) = req {
            let told = router.backend.call(req, 64 * 1024, PROBE_TIMEOUT).await;
            if told.is_some_and(|(status, _)| status.is_success()) {
                router.announced = Some(backends);
            }
        }
    }
}

async fn stop_router(run: &mut EndpointRun, provider: &dyn ReplicaProvider) {
    if let Some(r) = run.router.take() {
        provider.stop(&r.backend.replica_id).await;
    }
}

fn finish(mut out: Observed, run: &EndpointRun) -> Observed {
    out.ready = run.replicas.iter().filter(|r| r.serving()).count() as u32;
    out.target = run.target;
    out
}

/// The spec cannot run: keep serving with the previous generation (`updateFailed`) when `keep_old` allows and
/// it is up, else stop everything (`failed`). `why` becomes the status message.
async fn give_up(
    run: &mut EndpointRun,
    provider: &dyn ReplicaProvider,
    gen: &str,
    why: String,
    keep_old: bool,
    mut out: Observed,
) -> Observed {
    let old_ready = run.replicas.iter().any(|r| r.ready && r.generation != gen);
    if keep_old && old_ready {
        // The new generation's ready replicas may be serving.
        retire_where(run, provider, |r| r.generation == gen).await;
        run.failed_generation = Some(gen.to_string());
        out.state = EndpointState::UpdateFailed;
        out.message = Some(format!(
            "update failed, previous replicas still serve: {why}"
        ));
    } else {
        stop_all(run, provider).await;
        stop_router(run, provider).await;
        out.state = EndpointState::Failed;
        out.message = Some(why);
        run.target = 0;
    }
    finish(out, run)
}

async fn stop_all(run: &mut EndpointRun, provider: &dyn ReplicaProvider) {
    for r in run.replicas.drain(..) {
        provider.stop(&r.info.replica_id).await;
    }
}

/// Scale to zero without dropping a request (see [`retire_where`]).
async fn retire_all(run: &mut EndpointRun, provider: &dyn ReplicaProvider) {
    retire_where(run, provider, |_| true).await;
}

/// Retires the replicas that `which` picks without dropping a request: ready ones leave the routing table
/// and stop once their requests are done; the others stop now.
async fn retire_where(
    run: &mut EndpointRun,
    provider: &dyn ReplicaProvider,
    which: impl Fn(&ReplicaRun) -> bool,
) {
    stop_where(run, provider, |r| which(r) && !r.ready).await;
    for r in run.replicas.iter_mut().filter(|r| which(r)) {
        r.draining.get_or_insert_with(std::time::Instant::now);
    }
}

/// Stops and forgets the replicas that `which` picks.
async fn stop_where(
    run: &mut EndpointRun,
    provider: &dyn ReplicaProvider,
    which: impl Fn(&ReplicaRun) -> bool,
) {
    let (gone, kept): (Vec<ReplicaRun>, Vec<ReplicaRun>) = std::mem::take(&mut run.replicas)
        .into_iter()
        .partition(|r| which(r));
    run.replicas = kept;
    for r in gone {
        provider.stop(&r.info.replica_id).await;
    }
}

/// Notes exited replicas (a crash: backoff before the next start), promotes healthy ones to ready, fails
/// those too slow to start, and samples CPU.
async fn observe(
    run: &mut EndpointRun,
    provider: &dyn ReplicaProvider,
    handle: &RuntimeHandle,
    config: &RuntimeConfig,
    now: DateTime<Utc>,
) {
    let start_timeout = chrono::Duration::seconds(config.start_timeout_s.min(MAX_SECONDS) as i64);
    let mut failed: Vec<(String, String)> = Vec::new();
    let checks = run.replicas.iter().filter(|r| !r.ready).map(|r| {
        let id = r.info.replica_id.clone();
        async move { (id, healthy(&r.backend, &r.health_route).await) }
    });
    let results: HashMap<String, bool> = futures_util::future::join_all(checks)
        .await
        .into_iter()
        .collect();
    let mut lost: Vec<(String, String)> = Vec::new();
    for r in run.replicas.iter_mut() {
        let id = &r.info.replica_id;
        match provider.status(id) {
            ReplicaStatus::Lost(why) => {
                lost.push((id.clone(), why));
                continue;
            }
            ReplicaStatus::Exited(how) => {
                let last = handle
                    .logs
                    .last_line(&run.namespace, &run.name, id)
                    .map(|l| format!("; last output: {l}"))
                    .unwrap_or_default();
                failed.push((id.clone(), format!("replica {id} exited ({how}){last}")));
                continue;
            }
            ReplicaStatus::Running => {}
        }
        if !r.ready {
            if results.get(id).copied().unwrap_or(false) {
                r.ready = true;
                tracing::info!(replica = %id, "replica ready");
            } else if r.started_at + start_timeout < now {
                failed.push((
                    id.clone(),
                    format!(
                        "replica {id} did not answer {} within {} s",
                        r.health_route, config.start_timeout_s
                    ),
                ));
            }
        }
        if let Some(cpu) = provider.cpu_seconds(id) {
            sample_cpu(r, cpu);
        }
    }
    for (id, why) in failed {
        provider.stop(&id).await;
        run.replicas.retain(|r| r.info.replica_id != id);
        record_crash(run, config, now, why);
    }
    // Not a crash: replaced once the provider's engine is back.
    for (id, why) in lost {
        tracing::warn!(namespace = %run.namespace, endpoint = %run.name, replica = %id, "replica lost: {why}");
        provider.stop(&id).await;
        run.replicas.retain(|r| r.info.replica_id != id);
    }
    // A replica that is up resets the backoff.
    if !run.replicas.is_empty() && run.replicas.iter().all(|r| r.ready) {
        run.backoff = Duration::from_millis(config.backoff_initial_ms);
    }
}

/// Takes the replica's CPU time so far (`cpu` seconds): its CPU use is the rate since the last sample.
fn sample_cpu(r: &mut ReplicaRun, cpu: f64) {
    // /proc counts in clock ticks (10 ms): measure over at least a second so the figure means something.
    match r.cpu_mark {
        Some((at, before)) if at.elapsed() >= CPU_SAMPLE => {
            let wall = at.elapsed().as_secs_f64();
            r.cpu_percent = Some(((cpu - before) / wall * 100.0).max(0.0));
            r.cpu_mark = Some((std::time::Instant::now(), cpu));
        }
        Some(_) => {}
        None => r.cpu_mark = Some((std::time::Instant::now(), cpu)),
    }
}

/// A replica or router that exited or never got healthy: counted for `max_crashes`, and the next start waits
/// for the backoff, which doubles up to `backoff_max_ms`.
fn record_crash(run: &mut EndpointRun, config: &RuntimeConfig, now: DateTime<Utc>, why: String) {
    tracing::warn!(namespace = %run.namespace, endpoint = %run.name, "{why}");
    run.crashes.push_back(now);
    run.decisions
        .push(decisions::replica_exited(now, &why, run.backoff));
    run.last_exit = Some(why);
    run.next_start_at = Some(now.checked_add_signed(ms(run.backoff)).unwrap_or(now));
    let max = Duration::from_millis(config.backoff_max_ms.clamp(1, 86_400_000));
    run.backoff = run.backoff.saturating_mul(2).min(max);
}

/// Whether the replica's health route answers 200.
async fn healthy(backend: &Backend, route: &str) -> bool {
    let Ok(req) = axum::http::Request::get(route).body(Default::default()) else {
        return false;
    };
    let answer = backend.call(req, 64 * 1024, PROBE_TIMEOUT).await;
    answer.is_some_and(|(status, _)| status == StatusCode::OK)
}

/// The endpoint's load now, for the scaler. The engines' own figures are read from each ready replica's
/// `/metrics` when the scaler scales on them (`inferenceLoad`) or the proxy balances by them (`least_load`,
/// `by_engine`): once a tick, and recorded on each replica's backend, so that both read the same figures.
async fn load_sample(
    run: &EndpointRun,
    measure: Option<&Measure>,
    by_engine: bool,
    now: DateTime<Utc>,
) -> LoadSample {
    let ready: Vec<&ReplicaRun> = run.replicas.iter().filter(|r| r.serving()).collect();
    let cpus: Vec<f64> = ready.iter().filter_map(|r| r.cpu_percent).collect();
    let mut sample = LoadSample {
        replicas: ready.len() as u32,
        cpu_percent: (!cpus.is_empty()).then(|| cpus.iter().sum::<f64>() / cpus.len() as f64),
        pending_requests: f64::from(run.activity.in_flight_everywhere()),
        kv_cache_usage: None,
        requests_waiting: None,
    };
    let scales_on_engine = matches!(measure, Some(Measure::InferenceLoad(_)));
    if !(scales_on_engine || by_engine) || ready.is_empty() {
        return sample;
    }
    let backends = ready.iter().map(|r| &r.backend);
    let got = engine_load::read_into(backends, now.timestamp_millis()).await;
    let mean = |f: fn(&EngineLoad) -> Option<f64>| {
        let v: Vec<f64> = got.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    sample.kv_cache_usage = mean(|l| l.kv_cache_percent);
    sample.requests_waiting = mean(|l| l.waiting);
    sample
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_ignores_scaling_and_access() {
        let body = serde_json::json!({
            "name": "ep", "type": "public",
            "provider": {"vendor": "local", "region": "here"},
            "compute": {"accelerator": "cpu", "instanceType": "x", "instanceSize": "s",
                        "scaling": {"minReplica": 0, "maxReplica": 1}},
            "model": {"repository": "org/model", "framework": "pytorch", "image": {"hub": {}}},
        });
        let a = EndpointSpec::parse(&body).unwrap();
        let mut b = a.clone();
        b.compute.scaling.max_replica = 4;
        b.endpoint_type = crate::model::EndpointType::Authenticated;
        assert_eq!(generation(&a), generation(&b));
        b.model.env.insert("X".into(), "1".into());
        assert_ne!(generation(&a), generation(&b));
        let mut c = a.clone();
        c.experimental_features.skip_repo_download = Some(true);
        assert_ne!(
            generation(&a),
            generation(&c),
            "a container without its model is another"
        );
    }
}
