//! How fast the sign-in pages let anyone guess, kept in this server's memory.
//!
//! Passwords ([`Passwords`]): each (name, address) may be wrong [`FREE_PASSWORDS`] times; after that each
//! further try waits twice as long as the last since the last wrong one (1 s, 2 s, 4 s, … up to 15 minutes;
//! mistakes are forgotten a window after the last one).
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

/// Mistakes of one key: how many, and the last one (they are forgotten a window after it).
#[derive(Clone, Copy)]
struct Strikes {
    count: u32,
    last: Instant,
}

/// Strikes by key. A key's strikes are forgotten [`WINDOW`] after its last one, so a steady guesser never
/// starts over. The table is bounded: when it is full, the stale keys go, then the least-struck one under
/// `keep` (a key at its limit is never dropped to make room, so flooding the table with new keys frees no
/// one); a table full of keys at their limits takes no new key, and the caller refuses it.
struct Table<K> {
    map: HashMap<K, Strikes>,
    /// Strikes from which a key is kept however full the table is.
    keep: u32,
}

impl<K: Hash + Eq + Clone> Table<K> {
    fn new(keep: u32) -> Table<K> {
        Table {
            map: HashMap::new(),
            keep,
        }
    }

    /// The key's strikes, unless they are forgotten by `now`.
    fn get(&self, key: &K, now: Instant) -> Option<Strikes> {
        self.map
            .get(key)
            .copied()
            .filter(|s| now.duration_since(s.last) < WINDOW)
    }

    /// One more strike for `key`; false when the table has no room for it.
    fn strike(&mut self, key: K, now: Instant) -> bool {
        if self.map.len() >= MAX_KEYS && !self.map.contains_key(&key) {
            self.map.retain(|_, s| now.duration_since(s.last) < WINDOW);
            if self.map.len() >= MAX_KEYS {
                let keep = self.keep;
                let least = self
                    .map
                    .iter()
                    .filter(|(_, s)| s.count < keep)
                    .min_by_key(|(_, s)| (s.count, s.last))
                    .map(|(k, _)| k.clone());
                match least {
                    Some(k) => {
                        self.map.remove(&k);
                    }
                    None => return false,
                }
            }
        }
        let s = self.map.entry(key).or_insert(Strikes {
            count: 0,
            last: now,
        });
        if now.duration_since(s.last) >= WINDOW {
            s.count = 0;
        }
        s.count += 1;
        s.last = now;
        true
    }

    /// Takes one strike back (the try it stood for succeeded).
    fn unstrike(&mut self, key: &K) {
        if let Some(s) = self.map.get_mut(key) {
            s.count = s.count.saturating_sub(1);
        }
    }

    fn clear(&mut self, key: &K) {
        self.map.remove(key);
    }
}

/// How long the table says to wait when it had no room to count a try: the whole window.
const NO_ROOM: Duration = WINDOW;

/// A name as the tables keep it: lowercase, its first 64 characters.
fn name_key(name: &str) -> String {
    name.chars().take(64).collect::<String>().to_lowercase()
}

/// Wrong passwords (see the module's doc). Each try is counted as wrong when it begins, under the same lock
/// as the check, so tries sent at once cannot all pass one check; one that turns out right is taken back.
pub struct Passwords(Mutex<PasswordState>);

struct PasswordState {
    by_pair: Table<(String, IpAddr)>,
    by_name: Table<String>,
    known: HashMap<(String, IpAddr), Instant>,
}

impl Default for Passwords {
    fn default() -> Passwords {
        Passwords(Mutex::new(PasswordState {
            by_pair: Table::new(FREE_PASSWORDS),
            by_name: Table::new(NAME_CEILING),
            known: HashMap::new(),
        }))
    }
}

impl Passwords {
    /// A try of `name`'s password from `from`: counted (as wrong until [`Passwords::succeeded`] says
    /// otherwise), or `Err` with how long to wait before the next may begin.
    pub fn attempt(&self, name: &str, from: IpAddr, now: Instant) -> Result<(), Duration> {
        let name = name_key(name);
        let mut state = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let pair = (name.clone(), from);
        if let Some(s) = state.by_pair.get(&pair, now) {
            if s.count >= FREE_PASSWORDS {
                let doubled = Duration::from_secs(1u64 << (s.count - FREE_PASSWORDS).min(20));
                let left = (s.last + doubled.min(MAX_WAIT)).saturating_duration_since(now);
                if !left.is_zero() {
                    return Err(left);
                }
            }
        }
        let crowded = state
            .by_name
            .get(&name, now)
            .filter(|s| s.count >= NAME_CEILING);
        if let Some(s) = crowded {
            if !state.known(&name, from, now) {
                return Err((s.last + WINDOW).saturating_duration_since(now));
            }
        }
        if !state.by_pair.strike(pair, now) || !state.by_name.strike(name, now) {
            return Err(NO_ROOM);
        }
        Ok(())
    }

    /// The owner got in from `from`: its tries there are forgotten, this one taken back from the name's,
    /// and the address is known.
    pub fn succeeded(&self, name: &str, from: IpAddr, now: Instant) {
        let name = name_key(name);
        let mut state = self.0.lock().unwrap_or_else(|e| e.into_inner());
        state.by_pair.clear(&(name.clone(), from));
        state.by_name.unstrike(&name);
        if state.known.len() >= MAX_KEYS {
            state
                .known
                .retain(|_, at| now.duration_since(*at) < KNOWN_FOR);
        }
        if state.known.len() < MAX_KEYS {
            state.known.insert((name, from), now);
        }
    }
}

impl PasswordState {
    fn known(&self, name: &str, from: IpAddr, now: Instant) -> bool {
        self.known
            .get(&(name.to_string(), from))
            .is_some_and(|at| now.duration_since(*at) < KNOWN_FOR)
    }
}

/// Device user codes typed (see the module's doc). Each try is counted when it begins, under the same lock
/// as the check; a right code ends the flow, so the one it counts does not matter.
pub struct Codes(Mutex<CodeState>);

struct CodeState {
    by_account: Table<String>,
    by_address: Table<IpAddr>,
    all: Table<()>,
}

impl Default for Codes {
    fn default() -> Codes {
        Codes(Mutex::new(CodeState {
            by_account: Table::new(CODES_PER_ACCOUNT),
            by_address: Table::new(CODES_PER_ADDRESS),
            all: Table::new(CODES_IN_ALL),
        }))
    }
}

impl Codes {
    /// A code typed by `account` at `from`: counted, or `Err` with how long codes are refused.
    pub fn attempt(&self, account: &str, from: IpAddr, now: Instant) -> Result<(), Duration> {
        let mut state = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let over = |s: Option<Strikes>, limit: u32| s.filter(|s| s.count >= limit);
        let account = account.to_string();
        let refused = [
            over(state.by_account.get(&account, now), CODES_PER_ACCOUNT),
            over(state.by_address.get(&from, now), CODES_PER_ADDRESS),
            over(state.all.get(&(), now), CODES_IN_ALL),
        ]
        .into_iter()
        .flatten()
        .map(|s| (s.last + WINDOW).saturating_duration_since(now))
        .max();
        if let Some(wait) = refused {
            return Err(wait);
        }
        let counted = state.by_account.strike(account, now)
            && state.by_address.strike(from, now)
            && state.all.strike((), now);
        match counted {
            true => Ok(()),
            false => Err(NO_ROOM),
        }
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
        p.attempt("alice", owner, t0).expect("the owner tries");
        p.succeeded("alice", owner, t0);
        let guesser = ip(2);
        for _ in 0..FREE_PASSWORDS {
            p.attempt("alice", guesser, t0).expect("a free try");
        }
        // Past the free ones: 1 s, then 2 s after each wrong try; tries sent at once are refused together.
        assert_eq!(p.attempt("Alice", guesser, t0), Err(Duration::from_secs(1)));
        assert_eq!(p.attempt("alice", guesser, t0), Err(Duration::from_secs(1)));
        let t1 = t0 + Duration::from_secs(1);
        p.attempt("alice", guesser, t1).expect("after the wait");
        assert_eq!(p.attempt("alice", guesser, t1), Err(Duration::from_secs(2)));
        // The waits go on doubling: forgotten only a window after the last try.
        let mut t = t1;
        for n in 1..10 {
            t += Duration::from_secs(1 << n);
            p.attempt("alice", guesser, t).expect("after the wait");
        }
        assert_eq!(
            p.attempt("alice", guesser, t),
            Err(MAX_WAIT),
            "at most the window"
        );
        // Another address, and the owner's, are not slowed by it.
        assert_eq!(p.attempt("alice", ip(3), t), Ok(()));
        p.attempt("alice", owner, t).expect("the owner");
        p.succeeded("alice", owner, t);
        // Many addresses together close the name to new ones, never to the owner's.
        for n in 0..NAME_CEILING {
            let _ = p.attempt(
                "alice",
                IpAddr::from([10, 1, (n / 200) as u8, (n % 200) as u8]),
                t,
            );
        }
        assert!(p.attempt("alice", ip(4), t).is_err(), "a new address");
        assert_eq!(p.attempt("alice", owner, t), Ok(()), "the owner's address");
        // A window after the last try, everything is forgotten.
        let later = t + WINDOW;
        assert_eq!(p.attempt("alice", ip(4), later), Ok(()));
        assert_eq!(p.attempt("alice", guesser, later), Ok(()));
    }

    #[test]
    fn a_flood_of_new_keys_frees_no_one_at_a_limit() {
        let p = Passwords::default();
        let t0 = Instant::now();
        let guesser = ip(9);
        for _ in 0..FREE_PASSWORDS {
            p.attempt("alice", guesser, t0).expect("a free try");
        }
        for n in 0..(MAX_KEYS as u32 + 10) {
            let _ = p.attempt(&format!("made-up-{n}"), guesser, t0);
        }
        assert!(p.attempt("alice", guesser, t0).is_err(), "still held");
    }

    #[test]
    fn codes_are_counted_by_account_by_address_and_in_all() {
        let c = Codes::default();
        let t0 = Instant::now();
        for n in 0..CODES_PER_ACCOUNT {
            c.attempt("u1", ip(n as u8), t0).expect("under the limit");
        }
        assert_eq!(c.attempt("u1", ip(200), t0), Err(WINDOW), "by account");
        assert_eq!(c.attempt("u2", ip(200), t0), Ok(()));
        for n in 0..CODES_PER_ADDRESS {
            let _ = c.attempt(&format!("a{n}"), ip(250), t0);
        }
        assert!(c.attempt("u3", ip(250), t0).is_err(), "by address");
        for n in 0..CODES_IN_ALL {
            let _ = c.attempt(
                &format!("b{n}"),
                IpAddr::from([10, 2, (n / 250) as u8, (n % 250) as u8]),
                t0,
            );
        }
        assert!(c.attempt("fresh", ip(199), t0).is_err(), "in all");
        assert_eq!(c.attempt("fresh", ip(199), t0 + WINDOW), Ok(()));
    }
}
