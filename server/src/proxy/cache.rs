//! The proxy's response cache.
//!
//! It holds successful, non-streaming responses, keyed by endpoint and spec generation, method, path,
//! query, accepted type, body and the caller's access (see [`Asked`]); 60 minutes to live, reset on each hit; bounded in bytes (least recently used entries go
//! first, found in O(log n) through a use-ordered index).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use chrono::{DateTime, Duration, Utc};

use crate::routing::Route;

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
    /// Headers and body, packed by [`Packing`].
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
/// held. Measured (when each header packed a byte more): 200,000 entries of four headers and a 22-byte body
/// held 413 bytes each, counted as 424.
const PER_ENTRY: usize = 256;
/// Bytes [`Packing`] adds to each header: the two lengths.
const PER_HEADER: usize = 8;

/// A response's headers and body packed in one buffer of its own, as it passes: each header as its name's
/// length and its value's (u32, little-endian), name and value; then the body, and its length (u64,
/// little-endian).
///
/// Of its own: header values and body pieces read from a connection are slices of that connection's read
/// buffer, and an entry holding them would keep the whole buffer (several kilobytes) alive, uncounted by the
/// byte bound. In one buffer: one allocation per entry, and a few hundred bytes less than a header map.
struct Packing {
    data: Vec<u8>,
    body_at: usize,
}

impl Packing {
    /// The fields packed; `None` at the first that keeps the response from others (see
    /// [`kept_for_others`]).
    fn new<'a>(headers: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Option<Packing> {
        let mut data = Vec::with_capacity(512);
        for (name, value) in headers {
            if !kept_for_others(name, value) {
                return None;
            }
            data.extend_from_slice(&(name.len() as u32).to_le_bytes());
            data.extend_from_slice(&(value.len() as u32).to_le_bytes());
            data.extend_from_slice(name);
            data.extend_from_slice(value);
        }
        let body_at = data.len();
        Some(Packing { data, body_at })
    }

    fn body_len(&self) -> usize {
        self.data.len() - self.body_at
    }

    /// Bytes the entry will hold.
    fn packed_len(&self) -> usize {
        self.data.len() + 8
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

/// Whether a response with this field may be stored and given to other callers: not one that sets a
/// cookie (someone's session), nor one its replica marked `Cache-Control: no-store`, `private` or
/// `no-cache` (which asks that every use be checked with it).
fn kept_for_others(name: &[u8], value: &[u8]) -> bool {
    if name.eq_ignore_ascii_case(b"set-cookie") {
        return false;
    }
    if !name.eq_ignore_ascii_case(b"cache-control") {
        return true;
    }
    let directives = value.split(|b| *b == b',').map(|d| {
        let d = d.trim_ascii();
        // A directive's name, without any `=argument`.
        d.split(|b| *b == b'=').next().unwrap_or(d).trim_ascii()
    });
    !directives.into_iter().any(|d| {
        [&b"no-store"[..], b"private", b"no-cache"]
            .iter()
            .any(|n| d.eq_ignore_ascii_case(n))
    })
}

/// A response copied on its way to the cache (both of the proxy's paths fill the cache so), packed as it
/// passes (see [`Packing`]) and stored once it has passed in full. One larger than an entry may be is
/// dropped as soon as it is (see [`keep`]); one that breaks off is never stored.
pub struct Fill {
    key: Key,
    status: StatusCode,
    /// Most bytes the entry may take (see [`ResponseCache::max_entry`]).
    max: usize,
    packing: Packing,
}

impl Fill {
    /// A response of `status` with `headers` (name, value: as they go to the caller), for `cache`; its
    /// body's length when the response said it (room for all of it is made at once). None when that
    /// already makes it larger than an entry may be.
    pub fn new<'a>(
        cache: &ResponseCache,
        key: Key,
        status: StatusCode,
        headers: impl Iterator<Item = (&'a [u8], &'a [u8])>,
        body_len: Option<u64>,
    ) -> Option<Fill> {
        let mut packing = Packing::new(headers)?;
        if let Some(n) = body_len {
            let n = usize::try_from(n).ok()?;
            if packing.packed_len().saturating_add(n) + PER_ENTRY > cache.max_entry {
                return None;
            }
            packing.data.reserve_exact(n + 8);
        }
        Some(Fill {
            key,
            status,
            max: cache.max_entry,
            packing,
        })
    }

    /// Copies the next piece of the body: false (and nothing copied) once the response would be larger than
    /// an entry may be, when the fill is to be dropped.
    pub fn keep(&mut self, piece: &[u8]) -> bool {
        let fits = self.packing.packed_len() + piece.len() + PER_ENTRY <= self.max;
        if fits {
            self.packing.data.extend_from_slice(piece);
        }
        fits
    }

    /// Stores the response, the older entries going first to make room.
    pub fn store(self, cache: &ResponseCache, now: DateTime<Utc>) {
        let size = self.packing.packed_len() + PER_ENTRY;
        if size <= self.max {
            cache.store(self.key, self.status, self.packing.finish(), size, now);
        }
    }
}

/// Copies the next piece of a response's body to its fill, or drops the fill once the response is larger
/// than an entry may be.
pub fn keep(fill: &mut Option<Fill>, piece: &[u8]) {
    if fill.as_mut().is_some_and(|f| !f.keep(piece)) {
        *fill = None;
    }
}

/// The headers and body that [`Packing`] packed (values and body share its buffer).
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
        let name_at = at + PER_HEADER;
        let value_at = name_at + n;
        at = value_at + v;
        // A field that is no valid header (as a replica may send) is left out.
        let name = data.get(name_at..value_at).map(HeaderName::from_bytes);
        let value =
            (at <= body_at).then(|| HeaderValue::from_maybe_shared(data.slice(value_at..at)));
        if let (Some(Ok(name)), Some(Ok(value))) = (name, value) {
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

/// What a cached response answers: the request (with its whole body), what the caller accepts (which
/// changes the answer), and who asks (`access`: the caller's account on an authenticated endpoint, where
/// callers may see different things).
#[derive(Clone, Copy)]
pub struct Asked<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: &'a str,
    pub accept: &'a str,
    pub access: &'a str,
    pub body: &'a [u8],
}

/// The cache key of `asked` at `route`: its endpoint in its spec generation (a new generation is a new
/// model).
pub fn key(route: &Route, asked: Asked<'_>) -> Key {
    digest(&route.id, &route.generation, asked)
}

fn digest(endpoint: &str, generation: &str, a: Asked<'_>) -> Key {
    let parts = [
        endpoint, generation, a.method, a.path, a.query, a.accept, a.access,
    ];
    crate::crypto::digest_of(parts.map(str::as_bytes).into_iter().chain([a.body]))
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

    /// A fill of a 200 with `headers` and a body in `pieces`, as a response passes.
    fn fill(c: &ResponseCache, k: Key, headers: &[(&str, &str)], pieces: &[&[u8]]) -> Option<Fill> {
        let fields = headers.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes()));
        let mut fill = Fill::new(c, k, StatusCode::OK, fields, None);
        for piece in pieces {
            keep(&mut fill, piece);
        }
        fill
    }

    /// Stores an answer of `n` bytes (in two pieces, as a body may come) under `k`.
    fn put(c: &ResponseCache, k: Key, n: usize, t: DateTime<Utc>) {
        let body = vec![b'x'; n];
        let (a, b) = body.split_at(n / 2);
        if let Some(f) = fill(c, k, &[], &[a, b]) {
            f.store(c, t);
        }
    }

    #[test]
    fn ttl_resets_on_each_hit() {
        let c = ResponseCache::new(10_000, 1_000);
        let t0 = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap();
        let k = digest("ep", "g1", ASKED);
        put(&c, k, 10, t0);
        assert!(c.get(&k, t0 + Duration::minutes(59)).is_some());
        // 59 + 59 minutes: alive only because the first hit reset the TTL.
        assert!(c.get(&k, t0 + Duration::minutes(118)).is_some());
        assert!(c.get(&k, t0 + Duration::minutes(118 + 61)).is_none());
        assert_eq!(c.usage(), (0, 0));
    }

    const ASKED: Asked<'static> = Asked {
        method: "POST",
        path: "/embed",
        query: "a=1",
        accept: "",
        access: "u1",
        body: b"{}",
    };

    #[test]
    fn keys_separate_everything_that_matters() {
        let base = digest("ep", "g1", ASKED);
        // Each one part changed: endpoint, generation, method, path, query, accepted type, access, body.
        let others = [
            digest("ep2", "g1", ASKED),
            digest("ep", "g2", ASKED),
            digest(
                "ep",
                "g1",
                Asked {
                    method: "GET",
                    ..ASKED
                },
            ),
            digest(
                "ep",
                "g1",
                Asked {
                    path: "/embed/x",
                    ..ASKED
                },
            ),
            digest(
                "ep",
                "g1",
                Asked {
                    query: "a=2",
                    ..ASKED
                },
            ),
            digest(
                "ep",
                "g1",
                Asked {
                    accept: "text/html",
                    ..ASKED
                },
            ),
            digest(
                "ep",
                "g1",
                Asked {
                    access: "u2",
                    ..ASKED
                },
            ),
            digest(
                "ep",
                "g1",
                Asked {
                    body: b"{ }",
                    ..ASKED
                },
            ),
        ];
        for (i, other) in others.iter().enumerate() {
            assert_ne!(base, *other, "variant {i}");
        }
        // Field boundaries count: ("ab","c") differs from ("a","bc").
        assert_ne!(digest("ab", "c", ASKED), digest("a", "bc", ASKED));
    }

    #[test]
    fn stored_entries_come_back_whole_and_of_their_own() {
        let c = ResponseCache::new(1_000_000, 200_000);
        let t0 = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap();
        let long = "v".repeat(70_000);
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a [&'a [u8]]);
        let cases: [Case; 3] = [
            (&[], &[]),
            (&[], &[b"no headers"]),
            (
                &[
                    ("vary", "a"),
                    ("Vary", "b"),
                    ("x-long", &long),
                    ("x-empty", ""),
                ],
                &[b"{\"inputs\"", b":\"x\"}"],
            ),
        ];
        for (i, (headers, pieces)) in cases.into_iter().enumerate() {
            let k = digest("ep", &i.to_string(), ASKED);
            fill(&c, k, headers, pieces).expect("fits").store(&c, t0);
            let back = c.get(&k, t0).expect("stored");
            assert_eq!(back.status, StatusCode::OK);
            let mut want = HeaderMap::new();
            for (n, v) in headers {
                let name = HeaderName::from_bytes(n.as_bytes()).unwrap();
                want.append(name, HeaderValue::from_str(v).unwrap());
            }
            assert_eq!(back.headers, want);
            assert_eq!(back.body, pieces.concat());
        }
        // Its own: nothing stored points into what it was copied from.
        let read = b"application/json{}".to_vec();
        let k = digest("ep", "own", ASKED);
        let fields = [(&b"content-type"[..], &read[..16])].into_iter();
        let mut f = Fill::new(&c, k, StatusCode::OK, fields, Some(2));
        keep(&mut f, &read[16..]);
        f.expect("fits").store(&c, t0);
        let stored = c.get(&k, t0).expect("stored");
        let held = read.as_ptr_range();
        let values = stored.headers.values().map(|v| v.as_bytes().as_ptr());
        for at in values.chain([stored.body.as_ptr()]) {
            assert!(!held.contains(&at), "a stored part is in the read buffer");
        }
    }

    #[test]
    fn a_fill_larger_than_an_entry_is_dropped_as_it_grows() {
        let c = ResponseCache::new(10_000, 1_000);
        let k = digest("ep", "g1", ASKED);
        let piece = [b'x'; 300];
        assert!(fill(&c, k, &[], &[&piece, &piece]).is_some());
        assert!(fill(&c, k, &[], &[&piece, &piece, &piece]).is_none());
        // Its headers count too.
        let long = "v".repeat(600);
        assert!(fill(&c, k, &[("x-long", &long)], &[&piece]).is_none());
        // A length said beforehand that does not fit: no fill at all.
        let said = |n| Fill::new(&c, k, StatusCode::OK, std::iter::empty(), Some(n));
        assert!(said(600).is_some());
        assert!(said(900).is_none());
    }

    #[test]
    fn shards_keep_the_bound_together() {
        // Room for 16 shards of 4 largest entries each: split, and still bounded in all.
        let c = ResponseCache::new(64_000, 1_000);
        assert_eq!(c.shards.len(), 16);
        let t0 = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap();
        let keys: Vec<Key> = (0..2_000)
            .map(|i| digest("ep", &i.to_string(), ASKED))
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
            .map(|i| digest("ep", &i.to_string(), ASKED))
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
        put(&c, digest("big", "g1", ASKED), 500, t0);
        assert!(c.get(&digest("big", "g1", ASKED), t0).is_none());
    }
}
