//! Leadership among servers on one store: one leader runs the reconciler, the scaler and the schedules.
//!
//! The lease is a row in the store (see [`crate::store::cluster`]), timed by the database's clock and
//! renewed every [`RENEW_EVERY`] for [`LEASE_TTL`]. A leader that cannot renew stops acting as leader
//! [`MARGIN`] before its lease could have lapsed, by its own monotonic clock (which runs on while the
//! process is stopped, so a leader woken from `SIGSTOP` sees at once that its time is up). Every write made
//! as leader checks the lease's epoch in its own transaction, so a leader that missed its step-down still
//! writes nothing. A follower takes the lease once it lapsed: a leader's death is followed by a new
//! leader within `LEASE_TTL + RENEW_EVERY` (8 s), and a clean stop gives the lease up at once.
//!
//! The same loop keeps the server's heartbeat row, which `admin servers` lists.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};

use crate::store::cluster::{ServerInfo, Term};
use crate::store::Store;

/// How long a lease lasts from its last renewal, by the database's clock.
pub const LEASE_TTL: Duration = Duration::from_secs(6);
/// How often the leader renews (a third of the lease) and followers try for it.
pub const RENEW_EVERY: Duration = Duration::from_secs(2);
/// How long before its lease could have lapsed a leader that could not renew stops acting.
pub const MARGIN: Duration = Duration::from_secs(1);

/// A term this server leads, and until when (its own monotonic clock) it may act on it.
#[derive(Debug, Clone)]
pub struct Lead {
    pub term: Term,
    until: Arc<Mutex<Instant>>,
}

impl Lead {
    fn new(term: Term, until: Instant) -> Lead {
        Lead {
            term,
            until: Arc::new(Mutex::new(until)),
        }
    }

    fn until(&self) -> Instant {
        *self.until.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn extend(&self, to: Instant) {
        *self.until.lock().unwrap_or_else(|p| p.into_inner()) = to;
    }

    /// Whether the lease certainly still holds: side effects outside the store (starting a replica) are
    /// made only then.
    pub fn valid(&self) -> bool {
        Instant::now() < self.until()
    }
}

/// What a server knows of its own leadership: `Some` while it leads.
pub type Leadership = watch::Receiver<Option<Lead>>;

/// Keeps the server's heartbeat and its part in the election, until `stop` flips; then gives up the lease
/// and marks the server stopped. `wake` rings when another server gave the lease up (try for it now).
pub async fn run(
    store: Arc<dyn Store>,
    me: ServerInfo,
    lead: watch::Sender<Option<Lead>>,
    wake: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
) {
    if let Err(e) = store.announce_server(&me).await {
        tracing::warn!(error = %e, "could not record this server in the store; retrying");
    }
    warn_of_public_urls(store.as_ref(), &me).await;
    loop {
        if *stop.borrow() {
            break;
        }
        elect(store.as_ref(), &me.id, &lead).await;
        if let Err(e) = store.heartbeat(&me).await {
            tracing::warn!(error = %e, "heartbeat not written");
        }
        // Wakes in time to step down before the lease could lapse, even with every renewal failing.
        let pause = match lead.borrow().as_ref() {
            Some(l) => RENEW_EVERY.min(l.until().saturating_duration_since(Instant::now())),
            None => RENEW_EVERY,
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = wake.notified() => {}
            _ = stop.changed() => {}
        }
    }
    let held = lead.send_replace(None);
    if let Some(l) = held {
        if let Err(e) = store.resign_lease(&l.term).await {
            tracing::warn!(error = %e, "could not give the lease up; it lapses in {} s", LEASE_TTL.as_secs());
        }
    }
    if let Err(e) = store.server_stopped(&me.id).await {
        tracing::warn!(error = %e, "could not record this server's stop");
    }
}

/// Warns when the servers on this store announce different public URLs, or one on loopback: endpoints'
/// `status.url` is the public URL, which must be the same from every server and reachable by callers.
async fn warn_of_public_urls(store: &dyn Store, me: &ServerInfo) {
    let Ok((servers, _)) = store.servers(crate::services::servers::ALIVE).await else {
        return;
    };
    let others: Vec<_> = servers
        .iter()
        .filter(|s| s.info.id != me.id && s.stopped_at.is_none())
        .collect();
    if others.is_empty() {
        return;
    }
    for other in others.iter().filter(|s| s.info.public_url != me.public_url) {
        tracing::warn!(
            this = %me.public_url,
            other = %other.info.public_url,
            server = %other.info.address,
            "servers on this store announce different public URLs: set runtime.public_url to the one \
             address in front of them all, the same on every server"
        );
    }
    if crate::routing::is_loopback_url(&me.public_url) {
        tracing::warn!(
            public_url = %me.public_url,
            "this server's public URL is on loopback while other servers share its store: set \
             runtime.public_url to the address callers reach them all by"
        );
    }
}

/// How far ahead a server alone on its store (SQLite, held by its file lock) may act: it never steps down.
const ALONE: Duration = Duration::from_secs(100 * 365 * 86_400);

/// One round: the leader renews (or steps down), a follower tries to take the lease. On SQLite the one
/// server takes the lease and keeps it whatever its renewals do (a stalled writer is no rival).
async fn elect(store: &dyn Store, me: &str, lead: &watch::Sender<Option<Lead>>) {
    let held = lead.borrow().clone();
    let asked = Instant::now();
    let alone = store.backend() == crate::store::Backend::Sqlite;
    let until = match alone {
        true => asked + ALONE,
        false => asked + LEASE_TTL - MARGIN,
    };
    match held {
        Some(l) if alone => {
            if let Err(e) = store.renew_lease(&l.term, LEASE_TTL).await {
                tracing::debug!(error = %e, "lease not renewed");
            }
        }
        Some(l) if !l.valid() => step_down(lead, &l, "its lease ran out before it could renew it"),
        Some(l) => match store.renew_lease(&l.term, LEASE_TTL).await {
            Ok(true) => l.extend(until),
            Ok(false) => step_down(lead, &l, "another server holds the lease"),
            Err(e) if !l.valid() => step_down(lead, &l, &format!("the store did not answer ({e})")),
            Err(e) => tracing::warn!(error = %e, "lease not renewed; trying again"),
        },
        None => match store.acquire_lease(me, LEASE_TTL).await {
            Ok(Some(epoch)) => {
                let term = Term {
                    holder: me.to_string(),
                    epoch,
                };
                tracing::info!(epoch, "this server leads");
                lead.send_replace(Some(Lead::new(term, until)));
            }
            Ok(None) => {}
            Err(e) => tracing::debug!(error = %e, "could not try for the lease"),
        },
    }
}

fn step_down(lead: &watch::Sender<Option<Lead>>, l: &Lead, why: &str) {
    tracing::warn!(epoch = l.term.epoch, "this server no longer leads: {why}");
    // Over at once for whoever holds a copy of it: no replica starts or stops under it any more.
    l.extend(Instant::now());
    lead.send_replace(None);
}
