//! The response cache: successful, non-streaming responses, keyed by endpoint, method, path, query, body
//! and the caller's access; 60 minutes to live, reset on each hit; bounded in bytes (least recently used
//! entries go first).

use std::collections::HashMap;
use std::sync::Mutex;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use chrono::{DateTime, Duration, Utc};
use sha2::{Digest, Sha256};

pub const TTL_MINUTES: i64 = 60;

pub type Key = [u8; 32];

#[derive(Clone)]
pub struct Cached {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

struct Entry {
    value: Cached,
    expires: DateTime<Utc>,
    last_used: DateTime<Utc>,
    size: usize,
}

pub struct ResponseCache {
    max_bytes: usize,
    pub max_entry: usize,
    inner: Mutex<(HashMap<Key, Entry>, usize)>,
}

/// The cache key. `access` separates callers who may see different things (their account for
/// authenticated endpoints).
pub fn key(
    endpoint_id: &str,
    method: &str,
    path: &str,
    query: &str,
    access: &str,
    body: &[u8],
) -> Key {
    let mut h = Sha256::new();
    for part in [endpoint_id, method, path, query, access] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.update(body);
    h.finalize().into()
}

impl ResponseCache {
    pub fn new(max_bytes: usize, max_entry: usize) -> ResponseCache {
        ResponseCache {
            max_bytes,
            max_entry: max_entry.min(max_bytes),
            inner: Mutex::new((HashMap::new(), 0)),
        }
    }

    /// A live entry; a hit pushes its expiry 60 minutes from now.
    pub fn get(&self, key: &Key, now: DateTime<Utc>) -> Option<Cached> {
        let mut guard = self.inner.lock().ok()?;
        let (map, bytes) = &mut *guard;
        let entry = map.get_mut(key)?;
        if entry.expires <= now {
            let size = entry.size;
            map.remove(key);
            *bytes -= size;
            return None;
        }
        entry.expires = now + Duration::minutes(TTL_MINUTES);
        entry.last_used = now;
        Some(entry.value.clone())
    }

    pub fn put(&self, key: Key, value: Cached, now: DateTime<Utc>) {
        let size = value.body.len()
            + value
                .headers
                .iter()
                .map(|(k, v)| k.as_str().len() + v.len())
                .sum::<usize>()
            + 64;
        if size > self.max_entry {
            return;
        }
        let Ok(mut guard) = self.inner.lock() else {
            return;
        };
        let (map, bytes) = &mut *guard;
        if let Some(old) = map.remove(&key) {
            *bytes -= old.size;
        }
        while *bytes + size > self.max_bytes {
            // Expired first, else the least recently used.
            let victim = map
                .iter()
                .min_by_key(|(_, e)| (e.expires > now, e.last_used))
                .map(|(k, _)| *k);
            match victim.and_then(|k| map.remove(&k)) {
                Some(e) => *bytes -= e.size,
                None => break,
            }
        }
        *bytes += size;
        map.insert(
            key,
            Entry {
                value,
                expires: now + Duration::minutes(TTL_MINUTES),
                last_used: now,
                size,
            },
        );
    }

    /// Entries and bytes held.
    pub fn usage(&self) -> (usize, usize) {
        self.inner
            .lock()
            .map(|g| (g.0.len(), g.1))
            .unwrap_or((0, 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn value(n: usize) -> Cached {
        Cached {
            status: StatusCode::OK,
            headers: HeaderMap::new(),
            body: Bytes::from(vec![b'x'; n]),
        }
    }

    #[test]
    fn ttl_resets_on_each_hit() {
        let c = ResponseCache::new(10_000, 1_000);
        let t0 = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap();
        let k = key("ep", "POST", "/embed", "", "", b"{}");
        c.put(k, value(10), t0);
        assert!(c.get(&k, t0 + Duration::minutes(59)).is_some());
        // 59 + 59 minutes: alive only because the first hit reset the TTL.
        assert!(c.get(&k, t0 + Duration::minutes(118)).is_some());
        assert!(c.get(&k, t0 + Duration::minutes(118 + 61)).is_none());
        assert_eq!(c.usage(), (0, 0));
    }

    #[test]
    fn keys_separate_everything_that_matters() {
        let base = key("ep", "POST", "/embed", "a=1", "u1", b"{}");
        assert_ne!(base, key("ep2", "POST", "/embed", "a=1", "u1", b"{}"));
        assert_ne!(base, key("ep", "GET", "/embed", "a=1", "u1", b"{}"));
        assert_ne!(base, key("ep", "POST", "/embed", "a=2", "u1", b"{}"));
        assert_ne!(base, key("ep", "POST", "/embed", "a=1", "u2", b"{}"));
        assert_ne!(base, key("ep", "POST", "/embed", "a=1", "u1", b"{ }"));
        // Field boundaries count: ("ab","c") differs from ("a","bc").
        assert_ne!(
            key("ab", "c", "", "", "", b""),
            key("a", "bc", "", "", "", b"")
        );
    }

    #[test]
    fn bounded_in_bytes_least_recently_used_first() {
        let c = ResponseCache::new(1_000, 400);
        let t0 = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap();
        let keys: Vec<Key> = (0..5)
            .map(|i| key("ep", "GET", &i.to_string(), "", "", b""))
            .collect();
        for (i, k) in keys.iter().enumerate() {
            c.put(*k, value(200), t0 + Duration::seconds(i as i64));
            // Keep the first one in use.
            c.get(&keys[0], t0 + Duration::seconds(i as i64));
        }
        let (n, bytes) = c.usage();
        assert!(bytes <= 1_000 && n < 5, "{n} entries, {bytes} bytes");
        assert!(c.get(&keys[0], t0 + Duration::seconds(10)).is_some());
        assert!(c.get(&keys[1], t0 + Duration::seconds(10)).is_none());
        c.put(key("big", "", "", "", "", b""), value(500), t0);
        assert!(c.get(&key("big", "", "", "", "", b""), t0).is_none());
    }
}
