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
/// figures are fresh, the requests waiting in it that others sent (see [`crate::routing::EngineFigures::record`])
/// and its KV-cache use (a fraction: it tells apart replicas whose queues are equal).
fn load_of(backend: &Backend, now_ms: i64) -> f64 {
    let in_flight = f64::from(backend.in_flight.get());
    match backend.engine.fresh(now_ms, ENGINE_FIGURES_FRESH_MS) {
        Some((waiting, kv)) => in_flight + waiting + kv,
        None => in_flight,
    }
}

/// Prompts that share their first this many bytes share a replica under [`least_load`] (prefix affinity):
/// what is usually a system prompt and the conversation's start, which the engine's prefix cache keeps.
pub const AFFINITY_PREFIX: usize = 256;

/// How much more loaded (see [`load_of`]) than the least loaded replica a prompt's own replica may be and
/// still take it: past that, the prompt goes to the least loaded, where its prefix is computed again.
pub const AFFINITY_SLACK: f64 = 2.0;

/// The least loaded replica (see [`load_of`]) at `now_ms`; ties go to a random one of them. A request
/// with a prompt prefix (`affinity`, see [`affinity_of`]) goes to that prefix's replica (the same for every
/// server: rendezvous hashing over the replicas' ids) while its load is within [`AFFINITY_SLACK`] of the
/// least.
pub fn least_load(
    backends: &[Arc<Backend>],
    now_ms: i64,
    affinity: Option<u64>,
) -> Option<&Arc<Backend>> {
    let least = least_by(backends, |b| load_of(b, now_ms))?;
    let Some(key) = affinity else {
        return Some(least);
    };
    let home = backends
        .iter()
        .max_by_key(|b| mix(key ^ fnv1a(b.replica_id.as_bytes())))?;
    let near = load_of(home, now_ms) <= load_of(least, now_ms) + AFFINITY_SLACK;
    Some(if near { home } else { least })
}

/// FNV-1a, 64 bits: a hash that is the same in every process (the std hasher's keys are not promised).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// splitmix64's finalizer: spreads a combined key over the whole range.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The prompt prefix of an inference request's JSON body, hashed: the first [`AFFINITY_PREFIX`] bytes of
/// its prompt (`prompt`, the `messages`' contents in order as OpenAI's chat API has them, or TEI's and
/// TGI's `inputs`); `None` for a body that is not one, or a prompt shorter than that.
pub fn affinity_of(body: &[u8]) -> Option<u64> {
    let json: serde_json::Value = serde_json::from_slice(body).ok()?;
    let mut prompt = String::new();
    let mut add = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => prompt.push_str(s),
        serde_json::Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.as_str().or_else(|| p.get("text")?.as_str()))
            .for_each(|t| prompt.push_str(t)),
        _ => {}
    };
    if let Some(messages) = json.get("messages").and_then(|m| m.as_array()) {
        messages
            .iter()
            .filter_map(|m| m.get("content"))
            .for_each(&mut add);
    } else if let Some(p) = json.get("prompt").or_else(|| json.get("inputs")) {
        add(p);
    }
    let prefix = prompt.as_bytes().get(..AFFINITY_PREFIX)?;
    Some(fnv1a(prefix))
}

/// The replica `policy` picks among `backends` for a caller at `client`, at `now_ms`; `affinity` is the
/// request's prompt prefix, for `least_load`.
pub fn pick(
    policy: LoadBalancer,
    backends: &[Arc<Backend>],
    client: IpAddr,
    now_ms: i64,
    affinity: Option<u64>,
) -> Option<&Arc<Backend>> {
    match policy {
        LoadBalancer::Random => random(backends),
        LoadBalancer::Sticky => sticky(backends, client),
        LoadBalancer::LeastConnections => least_connections(backends),
        LoadBalancer::LeastLoad => least_load(backends, now_ms, affinity),
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
    fn a_prompt_prefix_keeps_its_replica_while_that_is_not_much_busier() {
        let three = backends(3);
        let long = "You are a helpful assistant. ".repeat(20);
        let chat = |turn: &str| {
            let body = serde_json::json!({"messages": [
                {"role": "system", "content": long},
                {"role": "user", "content": turn},
            ]});
            affinity_of(body.to_string().as_bytes())
        };
        let (first, second) = (chat("hello"), chat("and then?"));
        assert!(
            first.is_some() && first == second,
            "one conversation, one prefix"
        );
        assert_eq!(affinity_of(br#"{"prompt": "short"}"#), None);
        assert_eq!(affinity_of(b"not json"), None);
        let home = least_load(&three, 0, first).unwrap().replica_id.clone();
        for _ in 0..20 {
            assert_eq!(least_load(&three, 0, second).unwrap().replica_id, home);
        }
        // Within the slack it stays; past it, the least loaded takes it.
        let home_backend = three.iter().find(|b| b.replica_id == home).unwrap();
        home_backend.in_flight.up();
        home_backend.in_flight.up();
        assert_eq!(least_load(&three, 0, first).unwrap().replica_id, home);
        home_backend.in_flight.up();
        assert_ne!(least_load(&three, 0, first).unwrap().replica_id, home);
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
            assert_eq!(least_load(&three, now, None).unwrap().replica_id, "r2");
        }
        // The proxy's own in-flight requests count too.
        three[2].in_flight.up();
        three[2].in_flight.up();
        for _ in 0..50 {
            assert_eq!(least_load(&three, now, None).unwrap().replica_id, "r1");
        }
        // Figures too old for r0: judged by in flight alone (none), it is the least loaded.
        let later = now + ENGINE_FIGURES_FRESH_MS + 1;
        three[1].engine.record(Some(0.0), Some(90.0), later);
        three[2].engine.record(Some(0.0), Some(20.0), later);
        for _ in 0..50 {
            assert_eq!(least_load(&three, later, None).unwrap().replica_id, "r0");
        }
    }

    #[test]
    fn least_load_without_figures_is_least_connections() {
        let two = backends(2);
        two[0].in_flight.up();
        for _ in 0..50 {
            assert_eq!(least_load(&two, 0, None).unwrap().replica_id, "r1");
        }
        // Equal: either, at random.
        two[1].in_flight.up();
        let picks: std::collections::HashSet<String> = (0..200)
            .map(|_| least_load(&two, 0, None).unwrap().replica_id.clone())
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
