//! How fast the sign-in pages let anyone guess, kept in this server's memory.
//!
//! Passwords ([`Passwords`]): each (name, address) may be wrong [`FREE_PASSWORDS`] times; after that each
//! further try waits twice as long as the last since the last wrong one (1 s, 2 s, 4 s, … up to 15 minutes).
//! No one else's mistakes slow an owner down. A name that gets more than [`NAME_CEILING`] wrong passwords
//! within [`WINDOW`] from all addresses together is closed to addresses it never signed in from until the
//! window has passed; an address it signed in from before (within 30 days) still gets in.
//!
//! Device codes ([`Codes`]): wrong user codes are counted per account, per address and in all, within
//! [`WINDOW`]: past [`CODES_PER_ACCOUNT`], [`CODES_PER_ADDRESS`] or [`CODES_IN_ALL`], codes are refused until
//! the window has passed. A user code is 8 letters of 20: in all, a guess lands about once in 25 million
//! windows.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long mistakes are remembered.
pub const WINDOW: Duration = Duration::from_secs(15 * 60);
/// Wrong passwords a (name, address) may make before it is slowed down.
pub const FREE_PASSWORDS: u32 = 5;
/// Longest wait between two tries of a (name, address).
pub const MAX_WAIT: Duration = WINDOW;
/// Wrong passwords for one name, from everywhere, past which only addresses it signed in from may try.
pub const NAME_CEILING: u32 = 50;
/// How long an address a name signed in from stays known for it.
pub const KNOWN_FOR: Duration = Duration::from_secs(30 * 86_400);
/// Wrong user codes within [`WINDOW`], by account, by address and in all.
pub const CODES_PER_ACCOUNT: u32 = 20;
pub const CODES_PER_ADDRESS: u32 = 20;
pub const CODES_IN_ALL: u32 = 1_000;
/// Most keys each table keeps; past it, the stale ones go (and then the oldest).
const MAX_KEYS: usize = 10_000;

/// Mistakes of one key: how many within the window, since when, and the last one.
#[derive(Clone, Copy)]
struct Strikes {
    count: u32,
    since: Instant,
    last: Instant,
}

/// Strikes by key, forgotten a window after they began.
struct Table<K>(Mutex<HashMap<K, Strikes>>);

impl<K: Hash + Eq + Clone> Table<K> {
    fn new() -> Table<K> {
        Table(Mutex::new(HashMap::new()))
    }

    /// The key's strikes in the window running at `now`.
    fn get(&self, key: &K, now: Instant) -> Option<Strikes> {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.get(key)
            .copied()
            .filter(|s| now.duration_since(s.since) < WINDOW)
    }

    fn strike(&self, key: K, now: Instant) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_KEYS && !map.contains_key(&key) {
            map.retain(|_, s| now.duration_since(s.since) < WINDOW);
            if map.len() >= MAX_KEYS {
                if let Some(oldest) = map
                    .iter()
                    .min_by_key(|(_, s)| s.last)
                    .map(|(k, _)| k.clone())
                {
                    map.remove(&oldest);
                }
            }
        }
        let s = map.entry(key).or_insert(Strikes {
            count: 0,
            since: now,
            last: now,
        });
        if now.duration_since(s.since) >= WINDOW {
            *s = Strikes {
                count: 0,
                since: now,
                last: now,
            };
        }
        s.count += 1;
        s.last = now;
    }

    fn clear(&self, key: &K) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
    }
}

/// A name as the tables keep it: lowercase, its first 64 characters.
fn name_key(name: &str) -> String {
    name.chars().take(64).collect::<String>().to_lowercase()
}

/// Wrong passwords (see the module's doc).
pub struct Passwords {
    by_pair: Table<(String, IpAddr)>,
    by_name: Table<String>,
    known: Mutex<HashMap<(String, IpAddr), Instant>>,
}

impl Default for Passwords {
    fn default() -> Passwords {
        Passwords {
            by_pair: Table::new(),
            by_name: Table::new(),
            known: Mutex::new(HashMap::new()),
        }
    }
}

impl Passwords {
    /// How long `name` must wait before it may try again from `from`, when it must.
    pub fn refused(&self, name: &str, from: IpAddr, now: Instant) -> Option<Duration> {
        let name = name_key(name);
        if let Some(s) = self.by_pair.get(&(name.clone(), from), now) {
            if s.count >= FREE_PASSWORDS {
                let doubled = Duration::from_secs(1u64 << (s.count - FREE_PASSWORDS).min(20));
                let wait = doubled.min(MAX_WAIT);
                let left = (s.last + wait).saturating_duration_since(now);
                if !left.is_zero() {
                    return Some(left);
                }
            }
        }
        let crowded = self
            .by_name
            .get(&name, now)
            .filter(|s| s.count >= NAME_CEILING);
        match crowded {
            Some(s) if !self.known(&name, from, now) => {
                Some((s.since + WINDOW).saturating_duration_since(now))
            }
            _ => None,
        }
    }

    pub fn failed(&self, name: &str, from: IpAddr, now: Instant) {
        let name = name_key(name);
        self.by_pair.strike((name.clone(), from), now);
        self.by_name.strike(name, now);
    }

    /// The owner got in from `from`: its own mistakes there are forgotten, and the address is known.
    pub fn succeeded(&self, name: &str, from: IpAddr, now: Instant) {
        let name = name_key(name);
        self.by_pair.clear(&(name.clone(), from));
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if known.len() >= MAX_KEYS {
            known.retain(|_, at| now.duration_since(*at) < KNOWN_FOR);
        }
        if known.len() < MAX_KEYS {
            known.insert((name, from), now);
        }
    }

    fn known(&self, name: &str, from: IpAddr, now: Instant) -> bool {
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        known
            .get(&(name.to_string(), from))
            .is_some_and(|at| now.duration_since(*at) < KNOWN_FOR)
    }
}

/// Wrong device user codes (see the module's doc).
pub struct Codes {
    by_account: Table<String>,
    by_address: Table<IpAddr>,
    all: Table<()>,
}

impl Default for Codes {
    fn default() -> Codes {
        Codes {
            by_account: Table::new(),
            by_address: Table::new(),
            all: Table::new(),
        }
    }
}

impl Codes {
    /// How long codes from `account` at `from` are refused, when they are.
    pub fn refused(&self, account: &str, from: IpAddr, now: Instant) -> Option<Duration> {
        let over = |s: Option<Strikes>, limit: u32| s.filter(|s| s.count >= limit);
        [
            over(
                self.by_account.get(&account.to_string(), now),
                CODES_PER_ACCOUNT,
            ),
            over(self.by_address.get(&from, now), CODES_PER_ADDRESS),
            over(self.all.get(&(), now), CODES_IN_ALL),
        ]
        .into_iter()
        .flatten()
        .map(|s| (s.since + WINDOW).saturating_duration_since(now))
        .max()
    }

    pub fn failed(&self, account: &str, from: IpAddr, now: Instant) {
        self.by_account.strike(account.to_string(), now);
        self.by_address.strike(from, now);
        self.all.strike((), now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn wrong_passwords_slow_their_own_address_and_never_the_owner() {
        let p = Passwords::default();
        let t0 = Instant::now();
        let owner = ip(1);
        p.succeeded("alice", owner, t0);
        let guesser = ip(2);
        for _ in 0..FREE_PASSWORDS {
            assert_eq!(p.refused("alice", guesser, t0), None);
            p.failed("alice", guesser, t0);
        }
        // Past the free ones: 1 s, then 2 s, then 4 s after each wrong try.
        assert_eq!(
            p.refused("Alice", guesser, t0),
            Some(Duration::from_secs(1))
        );
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(p.refused("alice", guesser, t1), None);
        p.failed("alice", guesser, t1);
        assert_eq!(
            p.refused("alice", guesser, t1),
            Some(Duration::from_secs(2))
        );
        // Another address, and the owner's, are not slowed by it.
        assert_eq!(p.refused("alice", ip(3), t1), None);
        assert_eq!(p.refused("alice", owner, t1), None);
        // Many addresses together close the name to new ones, never to the owner's.
        for n in 0..NAME_CEILING {
            p.failed(
                "alice",
                IpAddr::from([10, 1, (n / 200) as u8, (n % 200) as u8]),
                t1,
            );
        }
        assert!(p.refused("alice", ip(4), t1).is_some(), "a new address");
        assert_eq!(p.refused("alice", owner, t1), None, "the owner's address");
        // A window later, everything is forgotten.
        let later = t1 + WINDOW;
        assert_eq!(p.refused("alice", ip(4), later), None);
        assert_eq!(p.refused("alice", guesser, later), None);
    }

    #[test]
    fn wrong_codes_are_counted_by_account_by_address_and_in_all() {
        let c = Codes::default();
        let t0 = Instant::now();
        for n in 0..CODES_PER_ACCOUNT {
            assert_eq!(c.refused("u1", ip(n as u8), t0), None);
            c.failed("u1", ip(n as u8), t0);
        }
        assert_eq!(c.refused("u1", ip(200), t0), Some(WINDOW), "by account");
        assert_eq!(c.refused("u2", ip(200), t0), None);
        for n in 0..CODES_PER_ADDRESS {
            c.failed(&format!("a{n}"), ip(250), t0);
        }
        assert!(c.refused("u3", ip(250), t0).is_some(), "by address");
        for n in 0..CODES_IN_ALL {
            c.failed(
                &format!("b{n}"),
                IpAddr::from([10, 2, (n / 250) as u8, (n % 250) as u8]),
                t0,
            );
        }
        assert!(c.refused("fresh", ip(199), t0).is_some(), "in all");
        assert_eq!(c.refused("fresh", ip(199), t0 + WINDOW), None);
    }
}
