//! The proxy's response cache.
//!
//! It holds successful, non-streaming responses, keyed by endpoint, method, path, query, body and the
//! caller's access; 60 minutes to live, reset on each hit; bounded in bytes (least recently used entries go
//! first, found in O(log n) through a use-ordered index).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
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
    status: StatusCode,
    /// Headers and body, packed by [`pack`].
    data: Bytes,
    expires: DateTime<Utc>,
    size: usize,
}

/// One shard: entries in use order in a B-tree (oldest first), found by key through the map. The map holds
/// only positions, so growing it moves a few bytes per entry, not whole entries.
#[derive(Default)]
struct Shard {
    /// Key → position in `order`.
    at: HashMap<Key, u64>,
    /// Position (higher is more recently used) → entry.
    order: BTreeMap<u64, (Key, Entry)>,
    next_use: u64,
    bytes: usize,
}

impl Shard {
    fn remove(&mut self, key: &Key) -> Option<Entry> {
        let used = self.at.remove(key)?;
        let (_, entry) = self.order.remove(&used)?;
        self.bytes -= entry.size;
        Some(entry)
    }

    /// Drops the least recently used entry; false when there is none.
    fn evict_oldest(&mut self) -> bool {
        let Some((_, (oldest, entry))) = self.order.pop_first() else {
            return false;
        };
        self.at.remove(&oldest);
        self.bytes -= entry.size;
        true
    }

    /// Puts `entry` in as the most recently used.
    fn push(&mut self, key: Key, entry: Entry) {
        self.next_use += 1;
        let used = self.next_use;
        self.bytes += entry.size;
        self.at.insert(key, used);
        self.order.insert(used, (key, entry));
    }
}

/// What an entry costs beside its packed headers and body (key, status, expiry, tree and map slots, the
/// allocator's and the tables' slack): an estimate, so that the byte bound stays near the memory actually
/// held. Measured: 200,000 entries of four headers and a 22-byte body held 413 bytes each, counted as 424.
const PER_ENTRY: usize = 256;
/// Bytes [`pack`] adds to each header: the two lengths and the sensitivity flag.
const PER_HEADER: usize = 9;

/// A response's headers and body packed in one buffer of its own: each header as its name's length and its
/// value's (u32, little-endian), whether it is sensitive (one byte), name and value; then the body, and its
/// length (u64, little-endian).
///
/// Of its own: header values and body chunks parsed from a connection are slices of that connection's read
/// buffer, and an entry holding them would keep the whole buffer (several kilobytes) alive, uncounted by the
/// byte bound. In one buffer: one allocation per entry, and a few hundred bytes less than a header map.
fn pack(headers: &HeaderMap, chunks: &[Bytes]) -> Bytes {
    let body_len = chunks.iter().map(Bytes::len).sum::<usize>();
    let mut packing = Packing {
        data: Vec::with_capacity(packed_len(headers, body_len)),
        body_at: 0,
    };
    for (name, value) in headers {
        packing.header(
            name.as_str().as_bytes(),
            value.as_bytes(),
            value.is_sensitive(),
        );
    }
    packing.body_at = packing.data.len();
    chunks.iter().for_each(|c| packing.body(c));
    packing.finish()
}

/// A response packed as [`pack`] packs it, as it passes: its headers ([`Packing::new`]), then its body
/// ([`Packing::body`]), in the one buffer the entry keeps.
pub struct Packing {
    data: Vec<u8>,
    body_at: usize,
}

impl Packing {
    /// The headers (name, value), none of them sensitive: a response's as it came from a replica.
    pub fn new<'a>(headers: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Packing {
        let mut packing = Packing {
            data: Vec::with_capacity(512),
            body_at: 0,
        };
        headers.for_each(|(name, value)| packing.header(name, value, false));
        packing.body_at = packing.data.len();
        packing
    }

    fn header(&mut self, name: &[u8], value: &[u8], sensitive: bool) {
        let data = &mut self.data;
        data.extend_from_slice(&(name.len() as u32).to_le_bytes());
        data.extend_from_slice(&(value.len() as u32).to_le_bytes());
        data.push(u8::from(sensitive));
        data.extend_from_slice(name);
        data.extend_from_slice(value);
    }

    /// The next piece of the body.
    pub fn body(&mut self, piece: &[u8]) {
        self.data.extend_from_slice(piece);
    }

    /// Bytes of body so far.
    pub fn body_len(&self) -> usize {
        self.data.len() - self.body_at
    }

    fn finish(mut self) -> Bytes {
        // The body's length last: the headers end where the body begins.
        let body_len = self.body_len() as u64;
        self.data.extend_from_slice(&body_len.to_le_bytes());
        // What the entry holds is what it is counted as.
        self.data.shrink_to_fit();
        self.data.into()
    }
}

/// The length of what [`pack`] makes of `headers` and a body of `body_len` bytes.
fn packed_len(headers: &HeaderMap, body_len: usize) -> usize {
    let each = |(k, v): (&HeaderName, &HeaderValue)| k.as_str().len() + v.len() + PER_HEADER;
    headers.iter().map(each).sum::<usize>() + body_len + 8
}

/// The headers and body that [`pack`] packed (values and body share its buffer).
fn unpack(status: StatusCode, data: &Bytes) -> Cached {
    let end = data.len().saturating_sub(8);
    let body_len = data
        .get(end..)
        .and_then(|b| b.try_into().ok())
        .map_or(0, |b| u64::from_le_bytes(b) as usize);
    let body_at = end.saturating_sub(body_len);
    let mut headers = HeaderMap::new();
    let mut at = 0;
    let u32_at = |at: usize| {
        data.get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .map(|b| u32::from_le_bytes(b) as usize)
    };
    while at < body_at {
        let (Some(n), Some(v)) = (u32_at(at), u32_at(at + 4)) else {
            break;
        };
        let sensitive = data.get(at + 8) == Some(&1);
        let name_at = at + PER_HEADER;
        let value_at = name_at + n;
        at = value_at + v;
        // What `pack` wrote from a valid name and value: these do not fail.
        let name = data.get(name_at..value_at).map(HeaderName::from_bytes);
        let value =
            (at <= body_at).then(|| HeaderValue::from_maybe_shared(data.slice(value_at..at)));
        if let (Some(Ok(name)), Some(Ok(mut value))) = (name, value) {
            value.set_sensitive(sensitive);
            headers.append(name, value);
        }
    }
    Cached {
        status,
        headers,
        body: data.slice(body_at..end),
    }
}

pub struct ResponseCache {
    /// Per shard.
    max_bytes: usize,
    pub max_entry: usize,
    /// A power of two: a key's shard is picked by a mask of its last byte.
    shards: Vec<Mutex<Shard>>,
}

/// Most shards a cache is split into: fewer callers wait on one lock, and a growing map pauses its shard
/// alone, for a sixteenth of the time.
const MAX_SHARDS: usize = 16;

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
    /// At most `max_bytes` in all, `max_entry` per response. Split in shards (least recently used first
    /// within each) when each still holds at least four of the largest responses.
    pub fn new(max_bytes: usize, max_entry: usize) -> ResponseCache {
        let max_entry = max_entry.min(max_bytes);
        let fits = max_bytes / max_entry.max(1) / 4;
        let n = 1 << fits.clamp(1, MAX_SHARDS).ilog2();
        ResponseCache {
            max_bytes: max_bytes / n,
            max_entry,
            shards: (0..n).map(|_| Mutex::default()).collect(),
        }
    }

    fn shard(&self, key: &Key) -> Option<std::sync::MutexGuard<'_, Shard>> {
        let i = usize::from(key[31]) & (self.shards.len() - 1);
        self.shards[i].lock().ok()
    }

    /// A live entry; a hit pushes its expiry 60 minutes from now.
    pub fn get(&self, key: &Key, now: DateTime<Utc>) -> Option<Cached> {
        let (status, data) = {
            let mut shard = self.shard(key)?;
            let mut entry = shard.remove(key)?;
            if entry.expires <= now {
                return None;
            }
            entry.expires = now + Duration::minutes(TTL_MINUTES);
            let found = (entry.status, entry.data.clone());
            shard.push(*key, entry);
            found
        };
        Some(unpack(status, &data))
    }

    /// Stores a response of `status` and `headers` whose body came in `chunks`, copied to storage of its
    /// own (see [`pack`]), unless it is larger than an entry may be; older entries go first to make room.
    pub fn put(
        &self,
        key: Key,
        status: StatusCode,
        headers: &HeaderMap,
        chunks: &[Bytes],
        now: DateTime<Utc>,
    ) {
        let body_len = chunks.iter().map(Bytes::len).sum::<usize>();
        let size = packed_len(headers, body_len) + PER_ENTRY;
        if size > self.max_entry {
            return;
        }
        self.store(key, status, pack(headers, chunks), size, now);
    }

    /// Puts `data` (packed headers and body, `size` bytes counted) in as the most recently used entry.
    fn store(&self, key: Key, status: StatusCode, data: Bytes, size: usize, now: DateTime<Utc>) {
        let Some(mut shard) = self.shard(&key) else {
            return;
        };
        shard.remove(&key);
        // Least recently used first (expired entries are among them: nothing refreshes those).
        while shard.bytes + size > self.max_bytes && shard.evict_oldest() {}
        let expires = now + Duration::minutes(TTL_MINUTES);
        shard.push(
            key,
            Entry {
                status,
                data,
                expires,
                size,
            },
        );
    }

    /// Stores a response of `status` packed as it passed (see [`Packing`]), unless it is larger than an
    /// entry may be; older entries go first to make room.
    pub fn put_packed(&self, key: Key, status: StatusCode, packing: Packing, now: DateTime<Utc>) {
        let size = packing.data.len() + 8 + PER_ENTRY;
        if size > self.max_entry {
            return;
        }
        self.store(key, status, packing.finish(), size, now);
    }

    /// Entries and bytes held.
    pub fn usage(&self) -> (usize, usize) {
        let shards = self.shards.iter().filter_map(|s| s.lock().ok());
        shards.fold((0, 0), |(n, b), s| (n + s.at.len(), b + s.bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    /// Stores an answer of `n` bytes (in two chunks, as a body may come) under `k`.
    fn put(c: &ResponseCache, k: Key, n: usize, t: DateTime<Utc>) {
        let body = Bytes::from(vec![b'x'; n]);
        let chunks = [body.slice(..n / 2), body.slice(n / 2..)];
        c.put(k, StatusCode::OK, &HeaderMap::new(), &chunks, t);
    }

    #[test]
    fn ttl_resets_on_each_hit() {
        let c = ResponseCache::new(10_000, 1_000);
        let t0 = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap();
        let k = key(&["ep"], "POST", "/embed", "", "", b"{}");
        put(&c, k, 10, t0);
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
    fn an_entry_does_not_hold_the_read_buffer() {
        // As a connection parses them: header values and body chunks are slices of the buffer the response
        // was read into.
        let buffer = Bytes::from(format!("{:<8192}", "application/json;secret;a;b;{}"));
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
        let chunks = [buffer.slice(28..29), buffer.slice(29..30)];
        c.put(k, StatusCode::CREATED, &headers, &chunks, t0);
        let stored = c.get(&k, t0).expect("stored");
        assert_eq!(stored.status, StatusCode::CREATED);
        assert_eq!(stored.headers, headers);
        assert_eq!(&stored.body[..], b"{}");
        assert!(stored.headers["x-secret"].is_sensitive());
        let held = buffer.as_ptr_range();
        let body = stored.body.as_ptr();
        let values = stored.headers.values().map(|v| v.as_bytes().as_ptr());
        for at in values.chain([body]) {
            assert!(!held.contains(&at), "a stored part is in the read buffer");
        }
    }

    #[test]
    fn packed_entries_come_back_whole() {
        let round_trip = |pairs: &[(&str, &str)], chunks: &[&str]| {
            let mut headers = HeaderMap::new();
            for (k, v) in pairs {
                let name = HeaderName::from_bytes(k.as_bytes()).unwrap();
                headers.append(name, HeaderValue::from_str(v).unwrap());
            }
            let chunks: Vec<Bytes> = chunks.iter().map(|c| Bytes::from(c.to_string())).collect();
            let packed = pack(&headers, &chunks);
            let body_len = chunks.iter().map(Bytes::len).sum();
            assert_eq!(packed.len(), packed_len(&headers, body_len));
            let back = unpack(StatusCode::ACCEPTED, &packed);
            assert_eq!(back.status, StatusCode::ACCEPTED);
            assert_eq!(back.headers, headers);
            assert_eq!(back.body, chunks.concat());
        };
        round_trip(&[], &[]);
        round_trip(&[], &["no headers"]);
        let long = "v".repeat(70_000);
        let pairs = [
            ("vary", "a"),
            ("vary", "b"),
            ("x-long", &long),
            ("x-empty", ""),
        ];
        round_trip(&pairs, &["{\"inputs\"", ":\"x\"}"]);
    }

    #[test]
    fn shards_keep_the_bound_together() {
        // Room for 16 shards of 4 largest entries each: split, and still bounded in all.
        let c = ResponseCache::new(64_000, 1_000);
        assert_eq!(c.shards.len(), 16);
        let t0 = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap();
        let keys: Vec<Key> = (0..2_000)
            .map(|i| key(&["ep"], "GET", &i.to_string(), "", "", b""))
            .collect();
        for k in &keys {
            put(&c, *k, 500, t0);
        }
        let (n, bytes) = c.usage();
        assert!(bytes <= 64_000, "{bytes} bytes held");
        // Each shard holds at least four of the largest entries, and all are in use.
        assert!(n >= 16 * 4, "{n} entries");
        // The newest entries are there, the oldest gone.
        assert!(c.get(&keys[1_999], t0).is_some());
        assert!(c.get(&keys[0], t0).is_none());
        // Too small to split: one shard, as large as the cache.
        assert_eq!(ResponseCache::new(1_000, 400).shards.len(), 1);
        assert_eq!(ResponseCache::new(100_000, 10_000).shards.len(), 2);
    }

    #[test]
    fn bounded_in_bytes_least_recently_used_first() {
        let c = ResponseCache::new(1_000, 400);
        let t0 = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap();
        let keys: Vec<Key> = (0..5)
            .map(|i| key(&["ep"], "GET", &i.to_string(), "", "", b""))
            .collect();
        for (i, k) in keys.iter().enumerate() {
            put(&c, *k, 100, t0 + Duration::seconds(i as i64));
            // Keep the first one in use.
            c.get(&keys[0], t0 + Duration::seconds(i as i64));
        }
        let (n, bytes) = c.usage();
        assert!(bytes <= 1_000 && n < 5, "{n} entries, {bytes} bytes");
        assert!(c.get(&keys[0], t0 + Duration::seconds(10)).is_some());
        assert!(c.get(&keys[1], t0 + Duration::seconds(10)).is_none());
        put(&c, key(&["big"], "", "", "", "", b""), 500, t0);
        assert!(c.get(&key(&["big"], "", "", "", "", b""), t0).is_none());
    }
}
