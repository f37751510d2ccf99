//! Replica choice: the load-balancing policies and the MCP session table.
//!
//! Policies: random, sticky (rendezvous hashing on the client, so a client keeps its replica while it lives
//! and few clients move when replicas come and go), least connections, least load (the engines' own
//! figures), and MCP sessions.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use rand::Rng;

use crate::model::LoadBalancer;
use crate::routing::Backend;

/// Most MCP sessions remembered; the oldest half is dropped past this.
const MAX_SESSIONS: usize = 100_000;

pub fn random(backends: &[Arc<Backend>]) -> Option<&Arc<Backend>> {
    match backends.len() {
        0 => None,
        1 => backends.first(),
        n => backends.get(rand::rng().random_range(0..n)),
    }
}

/// The replica with the highest hash of (client, replica): removing a replica moves only its own clients.
pub fn sticky(backends: &[Arc<Backend>], client: IpAddr) -> Option<&Arc<Backend>> {
    backends.iter().max_by_key(|b| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        client.hash(&mut h);
        b.replica_id.hash(&mut h);
        h.finish()
    })
}

/// The replica with the least `load`; ties go to a random one of them (the look starts at a random one).
fn least_by(backends: &[Arc<Backend>], load: impl Fn(&Backend) -> f64) -> Option<&Arc<Backend>> {
    let n = backends.len();
    if n <= 1 {
        return backends.first();
    }
    let start = rand::rng().random_range(0..n);
    (0..n)
        .map(|i| &backends[(start + i) % n])
        .map(|b| (load(b), b))
        .min_by(|x, y| x.0.total_cmp(&y.0))
        .map(|(_, b)| b)
}

/// The replica with the fewest requests in flight; ties go to a random one of them.
pub fn least_connections(backends: &[Arc<Backend>]) -> Option<&Arc<Backend>> {
    least_by(backends, |b| f64::from(b.in_flight.get()))
}

/// How long an engine's figures count after they were read: a few of the runtime's reads (once a second);
/// older ones are a replica's that stopped answering `/metrics`, judged by in-flight counts alone.
pub const ENGINE_FIGURES_FRESH_MS: i64 = 5_000;

/// A replica's load for [`least_load`]: the requests the proxy has in flight to it, plus, when its engine's
/// figures are fresh, the requests waiting in it and its KV-cache use (a fraction: it tells apart replicas
/// whose queues are equal).
fn load_of(backend: &Backend, now_ms: i64) -> f64 {
    let in_flight = f64::from(backend.in_flight.get());
    match backend.engine.fresh(now_ms, ENGINE_FIGURES_FRESH_MS) {
        Some((waiting, kv)) => in_flight + waiting + kv,
        None => in_flight,
    }
}

/// The least loaded replica (see [`load_of`]) at `now_ms`; ties go to a random one of them.
pub fn least_load(backends: &[Arc<Backend>], now_ms: i64) -> Option<&Arc<Backend>> {
    least_by(backends, |b| load_of(b, now_ms))
}

/// The replica `policy` picks among `backends` for a caller at `client`, at `now_ms`.
pub fn pick(
    policy: LoadBalancer,
    backends: &[Arc<Backend>],
    client: IpAddr,
    now_ms: i64,
) -> Option<&Arc<Backend>> {
    match policy {
        LoadBalancer::Random => random(backends),
        LoadBalancer::Sticky => sticky(backends, client),
        LoadBalancer::LeastConnections => least_connections(backends),
        LoadBalancer::LeastLoad => least_load(backends, now_ms),
    }
}

/// MCP session id → the replica that issued it.
#[derive(Default)]
pub struct McpSessions(Mutex<HashMap<String, String>>);

impl McpSessions {
    pub fn replica_of(&self, session: &str) -> Option<String> {
        self.0.lock().ok()?.get(session).cloned()
    }

    pub fn remember(&self, session: &str, replica: &str) {
        if let Ok(mut map) = self.0.lock() {
            if map.len() >= MAX_SESSIONS {
                let drop: Vec<String> = map.keys().take(MAX_SESSIONS / 2).cloned().collect();
                for k in drop {
                    map.remove(&k);
                }
            }
            map.insert(session.to_string(), replica.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn backends(n: usize) -> Vec<Arc<Backend>> {
        (0..n)
            .map(|i| {
                Arc::new(Backend::new(
                    format!("r{i}"),
                    SocketAddr::from(([127, 0, 0, 1], 1000 + i as u16)),
                    crate::routing::upstream::default_write_limit(),
                ))
            })
            .collect()
    }

    #[test]
    fn least_load_goes_by_the_engines_figures_while_they_are_fresh() {
        let three = backends(3);
        let now = 1_000_000;
        // r0 has a queue, r1 a fuller KV cache than r2: r2 is the least loaded.
        three[0].engine.record(Some(4.0), Some(10.0), now);
        three[1].engine.record(Some(0.0), Some(90.0), now);
        three[2].engine.record(Some(0.0), Some(20.0), now);
        for _ in 0..50 {
            assert_eq!(least_load(&three, now).unwrap().replica_id, "r2");
        }
        // The proxy's own in-flight requests count too.
        three[2].in_flight.up();
        three[2].in_flight.up();
        for _ in 0..50 {
            assert_eq!(least_load(&three, now).unwrap().replica_id, "r1");
        }
        // Figures too old for r0: judged by in flight alone (none), it is the least loaded.
        let later = now + ENGINE_FIGURES_FRESH_MS + 1;
        three[1].engine.record(Some(0.0), Some(90.0), later);
        three[2].engine.record(Some(0.0), Some(20.0), later);
        for _ in 0..50 {
            assert_eq!(least_load(&three, later).unwrap().replica_id, "r0");
        }
    }

    #[test]
    fn least_load_without_figures_is_least_connections() {
        let two = backends(2);
        two[0].in_flight.up();
        for _ in 0..50 {
            assert_eq!(least_load(&two, 0).unwrap().replica_id, "r1");
        }
        // Equal: either, at random.
        two[1].in_flight.up();
        let picks: std::collections::HashSet<String> = (0..200)
            .map(|_| least_load(&two, 0).unwrap().replica_id.clone())
            .collect();
        assert_eq!(picks.len(), 2);
    }

    #[test]
    fn sticky_keeps_clients_and_moves_few() {
        let four = backends(4);
        let clients: Vec<IpAddr> = (0..1000)
            .map(|i| IpAddr::from([10, 0, (i / 256) as u8, (i % 256) as u8]))
            .collect();
        let before: Vec<String> = clients
            .iter()
            .map(|c| sticky(&four, *c).unwrap().replica_id.clone())
            .collect();
        // Same answer every time.
        for (c, b) in clients.iter().zip(&before) {
            assert_eq!(&sticky(&four, *c).unwrap().replica_id, b);
        }
        // Every replica gets a share.
        for r in &four {
            let share = before.iter().filter(|b| **b == r.replica_id).count();
            assert!(share > 150, "{} got {share}", r.replica_id);
        }
        // Removing r3 moves only r3's clients.
        let three = &four[..3];
        for (c, b) in clients.iter().zip(&before) {
            let now = &sticky(three, *c).unwrap().replica_id;
            if b != "r3" {
                assert_eq!(now, b);
            }
        }
    }

    #[test]
    fn least_connections_prefers_the_idle() {
        let bs = backends(3);
        bs[0].in_flight.set(5);
        bs[1].in_flight.set(1);
        bs[2].in_flight.set(3);
        for _ in 0..50 {
            assert_eq!(least_connections(&bs).unwrap().replica_id, "r1");
        }
        assert!(least_connections(&[]).is_none());
        assert!(random(&[]).is_none());
    }

    #[test]
    fn sessions_are_bounded() {
        let s = McpSessions::default();
        for i in 0..(MAX_SESSIONS + 10) {
            s.remember(&i.to_string(), "r");
        }
        assert!(s.0.lock().unwrap().len() <= MAX_SESSIONS);
        s.remember("x", "r9");
        assert_eq!(s.replica_of("x").as_deref(), Some("r9"));
    }
}
