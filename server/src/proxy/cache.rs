//! The proxy's response cache.
//!
//! It holds successful, non-streaming responses, keyed by endpoint and spec generation, method, path,
//! query, accepted type, body, the caller's access and whether the request carried a cookie (see
//! [`Asked`]); 60 minutes to live, reset on each hit; bounded in bytes (least recently used entries go
//! first, found in O(log n) through a use-ordered index).
//!
//! What may be shared (see [`Said`]): never an answer that sets a cookie or says `no-store`, `private` or
//! `no-cache`, nor one that varies on everything (`Vary: *`); an answer to a request that carried a
//! `Cookie` only when it says `Cache-Control: public`. An answer that names request fields in `Vary` is one
//! variant among others: the key says where its variants are (a marker entry holding the field names), and
//! each variant is stored under the key and its request's values of those fields (see [`variant`]).

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
    kind: Kind,
    /// Headers and body, packed by [`Packing`]; for a [`Kind::Varies`] marker, the field names.
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
/// What an entry holds.
#[derive(Clone, Copy)]
enum Kind {
    /// An answer of this status.
    Answer(StatusCode),
    /// The key's answers vary on the request fields its data names (see [`variant`]).
    Varies,
}

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
    /// The fields packed, and what they say of sharing the answer (see [`Said`]).
    fn new<'a>(headers: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> (Packing, Said) {
        let mut data = Vec::with_capacity(512);
        let mut said = Said::default();
        for (name, value) in headers {
            said.read(name, value);
            data.extend_from_slice(&(name.len() as u32).to_le_bytes());
            data.extend_from_slice(&(value.len() as u32).to_le_bytes());
            data.extend_from_slice(name);
            data.extend_from_slice(value);
        }
        let body_at = data.len();
        (Packing { data, body_at }, said)
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

/// What a response's fields say of keeping it for others.
#[derive(Default)]
struct Said {
    /// It is someone's own: it sets a cookie, or its replica marked it `Cache-Control: no-store`,
    /// `private` or `no-cache` (which asks that every use be checked with it).
    own: bool,
    /// `Cache-Control: public`: it may be shared even when its request carried credentials.
    public: bool,
    /// The request fields its `Vary` names, lowercased, sorted, each once; `*` among them varies on
    /// everything.
    vary: Vec<Vec<u8>>,
}

/// The longest `Vary` list an entry keeps (in bytes of names): past it, the answer is not stored.
const VARY_MAX: usize = 1024;

impl Said {
    fn read(&mut self, name: &[u8], value: &[u8]) {
        if name.eq_ignore_ascii_case(b"set-cookie") {
            self.own = true;
        } else if name.eq_ignore_ascii_case(b"cache-control") {
            for d in directives(value) {
                let is = |n: &[u8]| d.eq_ignore_ascii_case(n);
                self.own |= is(b"no-store") || is(b"private") || is(b"no-cache");
                self.public |= is(b"public");
            }
        } else if name.eq_ignore_ascii_case(b"vary") {
            for field in value.split(|b| *b == b',').map(<[u8]>::trim_ascii) {
                if !field.is_empty() {
                    self.vary.push(field.to_ascii_lowercase());
                }
            }
        }
    }

    /// The names the answer varies on (see [`Said::vary`]), joined by commas; `None` when it may not be
    /// stored for others: someone's own, a credentialed request's answer that is not `public`, or one that
    /// varies on everything.
    fn shared(mut self, credentialed: bool) -> Option<Vec<u8>> {
        if self.own || credentialed && !self.public {
            return None;
        }
        self.vary.sort();
        self.vary.dedup();
        if self.vary.iter().any(|n| n == b"*") {
            return None;
        }
        let names = self.vary.join(&b","[..]);
        (names.len() <= VARY_MAX).then_some(names)
    }
}

/// The directive names of a `Cache-Control` value, without their `=argument`s.
fn directives(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|b| *b == b',').map(|d| {
        let d = d.trim_ascii();
        d.split(|b| *b == b'=').next().unwrap_or(d).trim_ascii()
    })
}

/// A request's fields, as the cache reads them: whether it carried a cookie, and the values of the fields an
/// answer's `Vary` names.
pub trait Fields {
    /// Each value of the field `name` (lowercase; fields match in any case), in the order they came.
    fn each(&self, name: &[u8], with: &mut dyn FnMut(&[u8]));

    /// Whether the request carried a `Cookie`: a credential that reaches the replica (the caller's bearer
    /// token never does), so an answer to it is someone's unless it says otherwise.
    fn credentialed(&self) -> bool {
        let mut found = false;
        self.each(b"cookie", &mut |_| found = true);
        found
    }
}

impl Fields for HeaderMap {
    fn each(&self, name: &[u8], with: &mut dyn FnMut(&[u8])) {
        if let Ok(name) = HeaderName::from_bytes(name) {
            self.get_all(name).iter().for_each(|v| with(v.as_bytes()));
        }
    }
}

/// The key of the variant of `key`'s answers that a request with `fields` gets: `key`, and for each name
/// in `names` (comma-separated, see [`Said::shared`]) the name and the request's values of it (a field it
/// did not send differs from one it sent empty).
fn variant(key: &Key, names: &[u8], fields: &dyn Fields) -> Key {
    let mut parts: Vec<Vec<u8>> = vec![key.to_vec()];
    for name in names.split(|b| *b == b',') {
        parts.push(name.to_vec());
        let mut values = Vec::new();
        fields.each(name, &mut |v| {
            values.push(b'=');
            values.extend_from_slice(v.trim_ascii());
        });
        parts.push(values);
    }
    crate::crypto::digest_of(parts.iter().map(Vec::as_slice))
}

/// A response copied on its way to the cache (both of the proxy's paths fill the cache so), packed as it
/// passes (see [`Packing`]) and stored once it has passed in full. One larger than an entry may be is
/// dropped as soon as it is (see [`keep`]); one that breaks off is never stored.
pub struct Fill {
    /// The key the request was looked up by, and the one its answer goes under (its variant's).
    lookup: Key,
    key: Key,
    /// The names the answer varies on (see [`variant`]); empty when it does not.
    vary: Vec<u8>,
    status: StatusCode,
    /// Most bytes the entry may take (see [`ResponseCache::max_entry`]).
    max: usize,
    packing: Packing,
}

impl Fill {
    /// A response of `status` with `headers` (name, value: as they go to the caller), to the request with
    /// `fields` looked up under `key`, for `cache`; its body's length when the response said it (room for all
    /// of it is made at once). None when it may not be kept for others (see [`Said::shared`]), or its
    /// length already makes it larger than an entry may be.
    pub fn new<'a>(
        cache: &ResponseCache,
        key: Key,
        fields: &dyn Fields,
        status: StatusCode,
        headers: impl Iterator<Item = (&'a [u8], &'a [u8])>,
        body_len: Option<u64>,
    ) -> Option<Fill> {
        let (mut packing, said) = Packing::new(headers);
        let vary = said.shared(fields.credentialed())?;
        let lookup = key;
        let key = match vary.is_empty() {
            true => key,
            false => variant(&key, &vary, fields),
        };
        if let Some(n) = body_len {
            let n = usize::try_from(n).ok()?;
            if packing.packed_len().saturating_add(n) + PER_ENTRY > cache.max_entry {
                return None;
            }
            packing.data.reserve_exact(n + 8);
        }
        Some(Fill {
            lookup,
            key,
            vary,
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

    /// Stores the response, the older entries going first to make room; an answer that varies, under its
    /// variant's key (see [`variant`]), with a marker naming the fields under the key it was looked up by.
    pub fn store(self, cache: &ResponseCache, now: DateTime<Utc>) {
        let size = self.packing.packed_len() + PER_ENTRY;
        if size > self.max {
            return;
        }
        if !self.vary.is_empty() {
            let marker = self.vary.len() + PER_ENTRY;
            cache.store(self.lookup, Kind::Varies, self.vary.into(), marker, now);
        }
        let answer = Kind::Answer(self.status);
        cache.store(self.key, answer, self.packing.finish(), size, now);
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
/// changes the answer), who asks (`access`: the caller's account on an authenticated endpoint, where
/// callers may see different things), and whether the request carried a cookie (see
/// [`Fields::credentialed`]: answers to those are kept apart, and only those that say `public` are kept).
#[derive(Clone, Copy)]
pub struct Asked<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: &'a str,
    pub accept: &'a str,
    pub access: &'a str,
    pub credentialed: bool,
    pub body: &'a [u8],
}

/// The cache key of `asked` at `route`: its endpoint in its spec generation (a new generation is a new
/// model).
pub fn key(route: &Route, asked: Asked<'_>) -> Key {
    digest(&route.id, &route.generation, asked)
}

fn digest(endpoint: &str, generation: &str, a: Asked<'_>) -> Key {
    let credentialed = if a.credentialed { "cookie" } else { "" };
    let parts = [
        endpoint,
        generation,
        a.method,
        a.path,
        a.query,
        a.accept,
        a.access,
        credentialed,
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

    /// The answer stored for a request with `fields` looked up under `key` (its variant, when the answers
    /// under `key` vary); a hit pushes its expiry 60 minutes from now.
    pub fn get(&self, key: &Key, fields: &dyn Fields, now: DateTime<Utc>) -> Option<Cached> {
        let (status, data) = match self.take(key, now)? {
            (Kind::Answer(status), data) => (status, data),
            (Kind::Varies, names) => match self.take(&variant(key, &names, fields), now)? {
                (Kind::Answer(status), data) => (status, data),
                (Kind::Varies, _) => return None,
            },
        };
        Some(unpack(status, &data))
    }

    /// A live entry's kind and data; its expiry pushed 60 minutes from now.
    fn take(&self, key: &Key, now: DateTime<Utc>) -> Option<(Kind, Bytes)> {
        let mut shard = self.shard(key)?;
        let mut entry = shard.remove(key)?;
        if entry.expires <= now {
            return None;
        }
        entry.expires = now + Duration::minutes(TTL_MINUTES);
        let found = (entry.kind, entry.data.clone());
        shard.push(*key, entry);
        Some(found)
    }

    /// Puts `data` (packed headers and body, `size` bytes counted) in as the most recently used entry.
    fn store(&self, key: Key, kind: Kind, data: Bytes, size: usize, now: DateTime<Utc>) {
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
                kind,
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
        let mut fill = Fill::new(c, k, &HeaderMap::new(), StatusCode::OK, fields, None);
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
        assert!(c
            .get(&k, &HeaderMap::new(), t0 + Duration::minutes(59))
            .is_some());
        // 59 + 59 minutes: alive only because the first hit reset the TTL.
        assert!(c
            .get(&k, &HeaderMap::new(), t0 + Duration::minutes(118))
            .is_some());
        assert!(c
            .get(&k, &HeaderMap::new(), t0 + Duration::minutes(118 + 61))
            .is_none());
        assert_eq!(c.usage(), (0, 0));
    }

    const ASKED: Asked<'static> = Asked {
        method: "POST",
        path: "/embed",
        query: "a=1",
        accept: "",
        access: "u1",
        credentialed: false,
        body: b"{}",
    };

    #[test]
    fn keys_separate_everything_that_matters() {
        let base = digest("ep", "g1", ASKED);
        // Each one part changed: endpoint, generation, method, path, query, accepted type, access, body, cookie.
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
            digest(
                "ep",
                "g1",
                Asked {
                    credentialed: true,
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
                    ("x-b", "a"),
                    ("X-B", "b"),
                    ("x-long", &long),
                    ("x-empty", ""),
                ],
                &[b"{\"inputs\"", b":\"x\"}"],
            ),
        ];
        for (i, (headers, pieces)) in cases.into_iter().enumerate() {
            let k = digest("ep", &i.to_string(), ASKED);
            fill(&c, k, headers, pieces).expect("fits").store(&c, t0);
            let back = c.get(&k, &HeaderMap::new(), t0).expect("stored");
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
        let mut f = Fill::new(&c, k, &HeaderMap::new(), StatusCode::OK, fields, Some(2));
        keep(&mut f, &read[16..]);
        f.expect("fits").store(&c, t0);
        let stored = c.get(&k, &HeaderMap::new(), t0).expect("stored");
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
        let said = |n| {
            Fill::new(
                &c,
                k,
                &HeaderMap::new(),
                StatusCode::OK,
                std::iter::empty(),
                Some(n),
            )
        };
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
        assert!(c.get(&keys[1_999], &HeaderMap::new(), t0).is_some());
        assert!(c.get(&keys[0], &HeaderMap::new(), t0).is_none());
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
            c.get(
                &keys[0],
                &HeaderMap::new(),
                t0 + Duration::seconds(i as i64),
            );
        }
        let (n, bytes) = c.usage();
        assert!(bytes <= 1_000 && n < 5, "{n} entries, {bytes} bytes");
        assert!(c
            .get(&keys[0], &HeaderMap::new(), t0 + Duration::seconds(10))
            .is_some());
        assert!(c
            .get(&keys[1], &HeaderMap::new(), t0 + Duration::seconds(10))
            .is_none());
        put(&c, digest("big", "g1", ASKED), 500, t0);
        let big = digest("big", "g1", ASKED);
        assert!(c.get(&big, &HeaderMap::new(), t0).is_none());
    }

    /// A request with these fields.
    fn asked(fields: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in fields {
            let name = HeaderName::from_bytes(n.as_bytes()).unwrap();
            h.append(name, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    /// Stores an answer `body` with `headers` to a request with `req`'s fields, looked up under `k`; whether
    /// it was kept.
    fn answer(
        c: &ResponseCache,
        k: Key,
        req: &HeaderMap,
        headers: &[(&str, &str)],
        body: &str,
    ) -> bool {
        let fields = headers.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes()));
        let t0 = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap();
        match Fill::new(c, k, req, StatusCode::OK, fields, None) {
            Some(mut f) => {
                assert!(f.keep(body.as_bytes()));
                f.store(c, t0);
                true
            }
            None => false,
        }
    }

    fn body_for(c: &ResponseCache, k: Key, req: &HeaderMap) -> Option<Bytes> {
        let t0 = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap();
        c.get(&k, req, t0).map(|hit| hit.body)
    }

    #[test]
    fn answers_that_vary_are_kept_per_variant() {
        let c = ResponseCache::new(100_000, 10_000);
        let k = digest("ep", "g1", ASKED);
        let vary = [
            ("Vary", "Accept-Language"),
            ("vary", "x-tenant, accept-language"),
        ];
        let fr = asked(&[("accept-language", "fr")]);
        let de = asked(&[("Accept-Language", "de")]);
        let none = asked(&[]);
        assert!(answer(&c, k, &fr, &vary, "bonjour"));
        assert_eq!(body_for(&c, k, &fr).as_deref(), Some(&b"bonjour"[..]));
        // Another value, or none at all, is another variant: a miss until it is stored too.
        assert_eq!(body_for(&c, k, &de), None);
        assert_eq!(body_for(&c, k, &none), None);
        assert!(answer(&c, k, &de, &vary, "hallo"));
        assert!(answer(&c, k, &none, &vary, "hello"));
        assert_eq!(body_for(&c, k, &de).as_deref(), Some(&b"hallo"[..]));
        assert_eq!(body_for(&c, k, &fr).as_deref(), Some(&b"bonjour"[..]));
        assert_eq!(body_for(&c, k, &none).as_deref(), Some(&b"hello"[..]));
        // A field sent empty is not a field left out; a field the answer does not name changes nothing.
        let empty = asked(&[("accept-language", "")]);
        assert_eq!(body_for(&c, k, &empty), None);
        let other = asked(&[("accept-language", "fr"), ("x-other", "1")]);
        assert_eq!(body_for(&c, k, &other).as_deref(), Some(&b"bonjour"[..]));
        // Varying on everything: never kept, and what was kept stays.
        assert!(!answer(&c, k, &fr, &[("Vary", "Accept, *")], "x"));
        assert_eq!(body_for(&c, k, &fr).as_deref(), Some(&b"bonjour"[..]));
        // An answer that no longer varies takes the key's place.
        assert!(answer(&c, k, &fr, &[], "same for all"));
        assert_eq!(body_for(&c, k, &de).as_deref(), Some(&b"same for all"[..]));
    }

    #[test]
    fn answers_to_cookies_are_kept_only_when_public() {
        let c = ResponseCache::new(100_000, 10_000);
        let k = digest("ep", "g1", ASKED);
        let alice = asked(&[("cookie", "session=alice-secret")]);
        assert!(alice.credentialed() && !asked(&[]).credentialed());
        assert!(!answer(&c, k, &alice, &[], "alice's"));
        assert!(!answer(
            &c,
            k,
            &alice,
            &[("cache-control", "max-age=60")],
            "alice's"
        ));
        assert!(answer(
            &c,
            k,
            &alice,
            &[("Cache-Control", "max-age=60, Public")],
            "for all"
        ));
        // Whoever sends a cookie: someone else's answer only as far as it said so.
        assert!(answer(
            &c,
            k,
            &alice,
            &[("cache-control", "public"), ("vary", "cookie")],
            "hers"
        ));
        let bob = asked(&[("cookie", "session=bob")]);
        assert_eq!(body_for(&c, k, &bob), None);
        assert_eq!(body_for(&c, k, &alice).as_deref(), Some(&b"hers"[..]));
        // Still never what is someone's own.
        for own in [
            ("set-cookie", "a=b"),
            ("cache-control", "public, private"),
            ("cache-control", "no-store"),
        ] {
            assert!(
                !answer(&c, k, &alice, &[("cache-control", "public"), own], "x"),
                "{own:?}"
            );
            assert!(!answer(&c, k, &asked(&[]), &[own], "x"), "{own:?}");
        }
    }
}
