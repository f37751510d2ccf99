//! The response cache: successful, non-streaming responses, keyed by endpoint, method, path, query, body
//! and the caller's access; 60 minutes to live, reset on each hit; bounded in bytes (least recently used
//! entries go first, found in O(log n) through a use-ordered index).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use chrono::{DateTime, Duration, Utc};

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
    /// Position in the use order: higher is more recent.
    used: u64,
    size: usize,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<Key, Entry>,
    /// `used` → key, oldest first.
    order: BTreeMap<u64, Key>,
    next_use: u64,
    bytes: usize,
}

impl Inner {
    fn remove(&mut self, key: &Key) {
        if let Some(e) = self.entries.remove(key) {
            self.order.remove(&e.used);
            self.bytes -= e.size;
        }
    }

    fn touch(&mut self, key: &Key) {
        self.next_use += 1;
        let used = self.next_use;
        if let Some(e) = self.entries.get_mut(key) {
            self.order.remove(&e.used);
            e.used = used;
            self.order.insert(used, *key);
        }
    }
}

/// What an entry costs beside its body and headers (key, expiry, map slots), and what each header costs
/// beside its name and value: estimates, so that the byte bound stays near the memory actually held.
const PER_ENTRY: usize = 160;
const PER_HEADER: usize = 48;

/// The headers with their values copied into one buffer of their own. Values parsed from a connection are
/// slices of that connection's read buffer: a stored entry holding them would keep the whole buffer (several
/// kilobytes) alive as long as the entry lives, uncounted by the byte bound.
fn compact(headers: &HeaderMap) -> HeaderMap {
    let mut all = Vec::with_capacity(headers.values().map(HeaderValue::len).sum());
    for v in headers.values() {
        all.extend_from_slice(v.as_bytes());
    }
    let all = Bytes::from(all);
    let mut out = HeaderMap::with_capacity(headers.len());
    let mut at = 0;
    for (name, v) in headers {
        let end = at + v.len();
        // The same bytes as a value that was valid: this does not fail.
        if let Ok(mut value) = HeaderValue::from_maybe_shared(all.slice(at..end)) {
            value.set_sensitive(v.is_sensitive());
            out.append(name.clone(), value);
        }
        at = end;
    }
    out
}

pub struct ResponseCache {
    max_bytes: usize,
    pub max_entry: usize,
    inner: Mutex<Inner>,
}

/// The cache key. `endpoint` names what answers (endpoint id, spec generation, accepted type); `access`
/// separates callers who may see different things (their account for authenticated endpoints).
pub fn key(
    endpoint: &[&str],
    method: &str,
    path: &str,
    query: &str,
    access: &str,
    body: &[u8],
) -> Key {
    let parts = endpoint
        .iter()
        .copied()
        .chain([method, path, query, access]);
    crate::crypto::digest_of(parts.map(str::as_bytes).chain([body]))
}

impl ResponseCache {
    pub fn new(max_bytes: usize, max_entry: usize) -> ResponseCache {
        ResponseCache {
            max_bytes,
            max_entry: max_entry.min(max_bytes),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// A live entry; a hit pushes its expiry 60 minutes from now.
    pub fn get(&self, key: &Key, now: DateTime<Utc>) -> Option<Cached> {
        let mut inner = self.inner.lock().ok()?;
        let entry = inner.entries.get_mut(key)?;
        if entry.expires <= now {
            inner.remove(key);
            return None;
        }
        entry.expires = now + Duration::minutes(TTL_MINUTES);
        let value = entry.value.clone();
        inner.touch(key);
        Some(value)
    }

    /// Stores `value` with its headers copied to storage of their own (see [`compact`]), unless it is larger
    /// than an entry may be; older entries go first to make room.
    pub fn put(&self, key: Key, mut value: Cached, now: DateTime<Utc>) {
        let size = value.body.len()
            + value
                .headers
                .iter()
                .map(|(k, v)| k.as_str().len() + v.len() + PER_HEADER)
                .sum::<usize>()
            + PER_ENTRY;
        if size > self.max_entry {
            return;
        }
        value.headers = compact(&value.headers);
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        inner.remove(&key);
        // Least recently used first (expired entries are among them: nothing refreshes those).
        while inner.bytes + size > self.max_bytes {
            let Some((_, oldest)) = inner.order.pop_first() else {
                break;
            };
            if let Some(e) = inner.entries.remove(&oldest) {
                inner.bytes -= e.size;
            }
        }
        inner.next_use += 1;
        let used = inner.next_use;
        inner.bytes += size;
        inner.order.insert(used, key);
        inner.entries.insert(
            key,
            Entry {
                value,
                expires: now + Duration::minutes(TTL_MINUTES),
                used,
                size,
            },
        );
    }

    /// Entries and bytes held.
    pub fn usage(&self) -> (usize, usize) {
        self.inner
            .lock()
            .map(|g| (g.entries.len(), g.bytes))
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
        let k = key(&["ep"], "POST", "/embed", "", "", b"{}");
        c.put(k, value(10), t0);
        assert!(c.get(&k, t0 + Duration::minutes(59)).is_some());
        // 59 + 59 minutes: alive only because the first hit reset the TTL.
        assert!(c.get(&k, t0 + Duration::minutes(118)).is_some());
        assert!(c.get(&k, t0 + Duration::minutes(118 + 61)).is_none());
        assert_eq!(c.usage(), (0, 0));
    }

    #[test]
    fn keys_separate_everything_that_matters() {
        let base = key(&["ep", "g1"], "POST", "/embed", "a=1", "u1", b"{}");
        // Each one part changed: endpoint, generation, method, query, access, body.
        let others = [
            key(&["ep2", "g1"], "POST", "/embed", "a=1", "u1", b"{}"),
            key(&["ep", "g2"], "POST", "/embed", "a=1", "u1", b"{}"),
            key(&["ep", "g1"], "GET", "/embed", "a=1", "u1", b"{}"),
            key(&["ep", "g1"], "POST", "/embed", "a=2", "u1", b"{}"),
            key(&["ep", "g1"], "POST", "/embed", "a=1", "u2", b"{}"),
            key(&["ep", "g1"], "POST", "/embed", "a=1", "u1", b"{ }"),
        ];
        for (i, other) in others.iter().enumerate() {
            assert_ne!(base, *other, "variant {i}");
        }
        // Field boundaries count: ("ab","c") differs from ("a","bc").
        assert_ne!(
            key(&["ab"], "c", "", "", "", b""),
            key(&["a"], "bc", "", "", "", b"")
        );
    }

    #[test]
    fn stored_headers_do_not_hold_the_read_buffer() {
        // As a connection parses them: values are slices of the buffer the response was read into.
        let buffer = Bytes::from(format!("{:<8192}", "application/json;secret;a;b"));
        let slice = |r: std::ops::Range<usize>| HeaderValue::from_maybe_shared(buffer.slice(r));
        let mut headers = HeaderMap::new();
        headers.insert("content-type", slice(0..16).unwrap());
        let mut secret = slice(17..23).unwrap();
        secret.set_sensitive(true);
        headers.insert("x-secret", secret);
        headers.append("vary", slice(24..25).unwrap());
        headers.append("vary", slice(26..27).unwrap());
        let c = ResponseCache::new(100_000, 10_000);
        let t0 = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap();
        let k = key(&["ep"], "GET", "/", "", "", b"");
        let mut v = value(3);
        v.headers = headers.clone();
        c.put(k, v, t0);
        let stored = c.get(&k, t0).expect("stored").headers;
        assert_eq!(stored, headers);
        assert!(stored["x-secret"].is_sensitive());
        let held = buffer.as_ptr_range();
        for v in stored.values() {
            assert!(
                !held.contains(&v.as_bytes().as_ptr()),
                "{v:?} is in the read buffer"
            );
        }
    }

    #[test]
    fn bounded_in_bytes_least_recently_used_first() {
        let c = ResponseCache::new(1_000, 400);
        let t0 = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap();
        let keys: Vec<Key> = (0..5)
            .map(|i| key(&["ep"], "GET", &i.to_string(), "", "", b""))
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
        c.put(key(&["big"], "", "", "", "", b""), value(500), t0);
        assert!(c.get(&key(&["big"], "", "", "", "", b""), t0).is_none());
    }
}
