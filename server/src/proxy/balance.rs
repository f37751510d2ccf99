//! Replica choice: the load-balancing policies and the MCP session table.
//!
//! Policies: random, sticky (rendezvous hashing on the client, so a client keeps its replica while it lives
//! and few clients move when replicas come and go), least connections, and MCP sessions.

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

/// The replica with the fewest requests in flight; ties go to a random one of them.
pub fn least_connections(backends: &[Arc<Backend>]) -> Option<&Arc<Backend>> {
    let n = backends.len();
    if n <= 1 {
        return backends.first();
    }
    let start = rand::rng().random_range(0..n);
    (0..n)
        .map(|i| &backends[(start + i) % n])
        .min_by_key(|b| b.in_flight.get())
}

pub fn pick(
    policy: LoadBalancer,
    backends: &[Arc<Backend>],
    client: IpAddr,
) -> Option<&Arc<Backend>> {
    match policy {
        LoadBalancer::Random => random(backends),
        LoadBalancer::Sticky => sticky(backends, client),
        LoadBalancer::LeastConnections => least_connections(backends),
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
