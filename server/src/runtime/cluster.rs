//! A server among several on one store: it runs the reconciler while it leads, and follows the store
//! between its terms.
//!
//! Leading ([`super::leader`]), it runs a [`Reconciler`] for the term, which records the replicas it runs
//! in the store. When the term ends without a shutdown (its lease passed to another server), the provider
//! lets go of its replicas ([`ReplicaProvider::abandon`]: containers stay for the next leader to adopt;
//! local processes stop, since the next leader starts its own) and the server follows.
//!
//! Following, a [`Follower`] builds the routing table from the store (endpoints, domains and the replicas
//! the leader recorded), again at each wake-up (`NOTIFY`, see [`super::listen`]) and every second, and
//! reports what this server's proxy sees of each endpoint's traffic, so the leader scales on the sum and
//! wakes an endpoint a request here asked for.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::engine_load::{self, FOLLOW_READ};
use super::leader::{Lead, Leadership};
use super::provider::{
    Found, Kind, ProviderError, Readiness, ReplicaInfo, ReplicaPlan, ReplicaProvider, ReplicaStatus,
};
use super::reconciler::{generation, Reconciler};
use super::routes::{route_of, Publisher, FOLLOW_POLL, ROLE_EXT_PROC, ROLE_ROUTER};
use super::RuntimeHandle;
use crate::clock::Clock;
use crate::model::{LoadBalancer, RouterProtocol};
use crate::routing::{Backend, RouteTable};
use crate::store::cluster::{ReplicaRow, Traffic};
use crate::store::{Store, StoreResult};

/// The least time between two reads of the routes by a follower.
const FOLLOW_PAUSE: Duration = Duration::from_millis(50);

/// How often an unchanged report of an endpoint's traffic is written again (so it stays fresh).
const REPORT_AGAIN: Duration = Duration::from_secs(4);

/// Builds the routing table from the store, and reports this server's traffic to it.
pub struct Follower {
    store: Arc<dyn Store>,
    handle: RuntimeHandle,
    pub(crate) table: Publisher,
    me: String,
    /// Backends by replica id and address, kept across tables (their pools of connections with them).
    backends: HashMap<(String, SocketAddr), Arc<Backend>>,
    write_limit: Duration,
    /// What was last reported of each endpoint, and when.
    reported: HashMap<String, (Traffic, Instant)>,
    /// The clock the engines' figures are timed by (the proxy judges their age by it), and when they were
    /// last read here.
    clock: Arc<dyn Clock>,
    engines_read: Option<Instant>,
}

impl Follower {
    pub fn new(
        store: Arc<dyn Store>,
        handle: RuntimeHandle,
        table: Arc<watch::Sender<Arc<RouteTable>>>,
        me: String,
        write_limit: Duration,
        clock: Arc<dyn Clock>,
    ) -> Follower {
        Follower {
            store,
            handle,
            table: Publisher::new(table),
            me,
            backends: HashMap::new(),
            write_limit,
            reported: HashMap::new(),
            clock,
            engines_read: None,
        }
    }

    /// Publishes the routing table the store describes now.
    pub async fn refresh(&mut self) -> StoreResult<()> {
        let (records, domains) = {
            let mut session = self.store.read().await?;
            let records = session.all_endpoints().await?;
            let claims = session.domain_claims().await?.into_iter();
            let domains: HashMap<String, String> =
                claims.map(|c| (c.domain, c.namespace)).collect();
            (records, domains)
        };
        let mut by_endpoint: HashMap<String, Vec<ReplicaRow>> = HashMap::new();
        for row in self.store.replicas().await? {
            by_endpoint
                .entry(row.endpoint_id.clone())
                .or_default()
                .push(row);
        }
        let mut kept = HashMap::with_capacity(self.backends.len());
        let mut routes = Vec::with_capacity(records.len());
        for rec in &records {
            let rows = by_endpoint.remove(&rec.id).unwrap_or_default();
            let mut backends = Vec::new();
            let mut router = None;
            for row in rows.iter().filter(|r| r.state == "ready") {
                let Ok(addr) = row.url.parse::<SocketAddr>() else {
                    tracing::warn!(replica = %row.replica_id, url = %row.url, "a recorded replica's address is not one");
                    continue;
                };
                let key = (row.replica_id.clone(), addr);
                let backend = self.backends.remove(&key).unwrap_or_else(|| {
                    Arc::new(Backend::new(row.replica_id.clone(), addr, self.write_limit))
                });
                kept.insert(key, backend.clone());
                match row.role.as_str() {
                    ROLE_ROUTER => router = Some((backend, RouterProtocol::Http)),
                    ROLE_EXT_PROC => router = Some((backend, RouterProtocol::ExtProc)),
                    _ => backends.push(backend),
                }
            }
            let activity = self
                .handle
                .activity(&rec.id, &rec.namespace, &rec.spec.name);
            let gen = generation(&rec.spec);
            routes.push(route_of(rec, gen, &domains, backends, router, activity));
        }
        self.backends = kept;
        // The replicas `least_load` balances over, whose engines' figures this server reads itself.
        let balanced: Vec<Arc<Backend>> = routes
            .iter()
            .filter(|r| r.load_balancer == LoadBalancer::LeastLoad)
            .flat_map(|r| r.backends.iter().cloned())
            .collect();
        self.table.publish(routes);
        self.read_engines(balanced);
        Ok(())
    }

    /// Reads the engines' figures of `balanced` (see [`engine_load`]), at most once a [`FOLLOW_READ`], on a
    /// task of its own: a replica slow to answer `/metrics` holds up no route update or report.
    fn read_engines(&mut self, balanced: Vec<Arc<Backend>>) {
        let due = self.engines_read.is_none_or(|t| t.elapsed() >= FOLLOW_READ);
        if balanced.is_empty() || !due {
            return;
        }
        self.engines_read = Some(Instant::now());
        let now_ms = self.clock.now_millis();
        tokio::spawn(async move { engine_load::read_into(balanced.iter(), now_ms).await });
    }

    /// Writes what this server's proxy saw of each endpoint since the last report: its latest request,
    /// requests in flight, and a wake-up a request asked for (taken here: the leader wakes it).
    pub async fn report(&mut self) -> StoreResult<()> {
        let table = self.handle.table.borrow().clone();
        let mut seen = Vec::new();
        let mut taken = Vec::new();
        for route in table.routes() {
            let a = &route.activity;
            let wake = a.take_wake();
            // The leader decides the wake-up; which request asked stays here, and is no guide later.
            a.forget_woken_by();
            if wake {
                taken.push(route.activity.clone());
            }
            let t = Traffic {
                last_request_ms: a.last_request_ms(),
                in_flight: i64::from(a.in_flight.get()),
                wake,
            };
            let stale = self
                .reported
                .get(&route.id)
                .is_none_or(|(last, at)| *last != t || at.elapsed() >= REPORT_AGAIN);
            // A server that never saw a request says nothing.
            if stale && (t != Traffic::default() || self.reported.contains_key(&route.id)) {
                seen.push((route.id.clone(), t));
            }
        }
        if let Err(e) = self.store.report_traffic(&self.me, &seen).await {
            // The wake-ups are asked again at the next report.
            for a in taken {
                a.request_wake();
            }
            return Err(e);
        }
        let now = Instant::now();
        for (id, t) in seen {
            self.reported
                .insert(id, (Traffic { wake: false, ..t }, now));
        }
        Ok(())
    }
}

/// A provider as a term's reconciler sees it: nothing starts or stops once the term is over (a tick that
/// outlived its term, the lease lapsed while a call waited), whatever the reconciler was in the middle of.
pub struct InTerm {
    inner: Arc<dyn ReplicaProvider>,
    lead: Lead,
}

impl InTerm {
    pub fn new(inner: Arc<dyn ReplicaProvider>, lead: Lead) -> InTerm {
        InTerm { inner, lead }
    }
}

#[async_trait::async_trait]
impl ReplicaProvider for InTerm {
    fn kind(&self) -> Kind {
        self.inner.kind()
    }

    async fn prepare(&self, plan: &ReplicaPlan) -> Readiness {
        self.inner.prepare(plan).await
    }

    async fn start(&self, plan: &ReplicaPlan) -> Result<ReplicaInfo, ProviderError> {
        if !self.lead.valid() {
            let over = "this server no longer leads; the next leader starts it";
            return Err(ProviderError::Unavailable(over.into()));
        }
        self.inner.start(plan).await
    }

    fn status(&self, replica_id: &str) -> ReplicaStatus {
        self.inner.status(replica_id)
    }

    fn cpu_seconds(&self, replica_id: &str) -> Option<f64> {
        self.inner.cpu_seconds(replica_id)
    }

    async fn stop(&self, replica_id: &str) {
        if self.lead.valid() {
            self.inner.stop(replica_id).await
        }
    }

    async fn found(&self) -> Result<Vec<Found>, String> {
        self.inner.found().await
    }

    async fn stop_all(&self) {
        self.inner.stop_all().await
    }

    async fn abandon(&self) {
        self.inner.abandon().await
    }
}

/// Runs this server's part until `stop` flips: the reconciler (made by `lead_with` for each term) while
/// it leads, the follower between terms. At the end, every replica it runs stops.
pub async fn serve(
    lead_with: impl Fn(Lead) -> Reconciler,
    mut leadership: Leadership,
    provider: Arc<dyn ReplicaProvider>,
    mut follower: Follower,
    handle: RuntimeHandle,
    mut stop: watch::Receiver<bool>,
) {
    let kick = handle.kicks();
    loop {
        if *stop.borrow() {
            break;
        }
        let lead = leadership.borrow_and_update().clone();
        if let Some(lead) = lead {
            provider.in_term(lead.clone());
            lead_term(lead_with(lead.clone()), &lead, &leadership, &stop).await;
            if *stop.borrow() {
                break;
            }
            tracing::info!(
                epoch = lead.term.epoch,
                "term over: letting go of the replicas and following"
            );
            provider.abandon().await;
            until_the_election_agrees(&lead, &mut leadership, &mut stop).await;
            // What the follower published before this term is no guide to what the proxy holds now.
            follower.table.forget();
            continue;
        }
        if let Err(e) = follower.report().await {
            tracing::warn!(error = %e, "could not report this server's traffic");
        }
        if let Err(e) = follower.refresh().await {
            tracing::warn!(error = %e, "could not read the routes from the store");
        }
        // Notices that come meanwhile are taken together at the next read: a burst of changes costs a
        // read per pause, not one per change.
        tokio::time::sleep(FOLLOW_PAUSE).await;
        tokio::select! {
            _ = tokio::time::sleep(FOLLOW_POLL) => {}
            _ = kick.notified() => {}
            _ = leadership.changed() => {}
            _ = stop.changed() => {}
        }
    }
    provider.stop_all().await;
    tracing::info!("replicas stopped");
}

/// After a term that ended on a refused write while the election still shows it: waits until the
/// election sees it over too (its next renewal fails), rather than start the same term again. A lease that
/// keeps being renewed for a whole lease's time is taken as still held.
async fn until_the_election_agrees(
    lead: &Lead,
    leadership: &mut Leadership,
    stop: &mut watch::Receiver<bool>,
) {
    let same = |l: &Leadership| {
        l.borrow()
            .as_ref()
            .is_some_and(|now| now.term.epoch == lead.term.epoch)
    };
    let deadline = tokio::time::Instant::now() + super::leader::LEASE_TTL;
    while same(leadership) && !*stop.borrow() {
        tokio::select! {
            _ = leadership.changed() => {}
            _ = stop.changed() => {}
            _ = tokio::time::sleep_until(deadline) => return,
        }
    }
}

/// Runs `reconciler` for `lead`'s term: until the leadership changes, or `stop` flips.
async fn lead_term(
    mut reconciler: Reconciler,
    lead: &Lead,
    leadership: &Leadership,
    stop: &watch::Receiver<bool>,
) {
    let (over, over_rx) = watch::channel(false);
    let epoch = lead.term.epoch;
    let (mut leadership, mut stop) = (leadership.clone(), stop.clone());
    let watching = tokio::spawn(async move {
        loop {
            let same = leadership
                .borrow_and_update()
                .as_ref()
                .is_some_and(|l| l.term.epoch == epoch);
            if !same || *stop.borrow_and_update() {
                break;
            }
            tokio::select! {
                r = leadership.changed() => if r.is_err() { break },
                r = stop.changed() => if r.is_err() { break },
            }
        }
        over.send_replace(true);
    });
    reconciler.serve_until(over_rx).await;
    watching.abort();
}
