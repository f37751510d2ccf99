//! The allowed CI issuers' keys, found only through each issuer's own discovery document
//! (`{iss}/.well-known/openid-configuration` → `jwks_uri`) and fetched through the SSRF-guarded
//! outbound client. Key sets are cached; a token naming a key the cache lacks refetches that issuer's
//! JWKS at most once a minute, so made-up `kid`s cannot make the server fetch at will.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, Utc};
use serde_json::Value;

use super::jws::{parse_jwks, Jwk};
use crate::outbound::{FetchOptions, Outbound};

/// How long a fetched key set is used before it is fetched again.
const KEYS_TTL_S: i64 = 600;
/// At most one refetch for an unknown `kid` per issuer in this time.
const KID_REFRESH_S: i64 = 60;
/// After a failed fetch, the issuer is not asked again for this long (requests fail at once).
const RETRY_AFTER_FAILURE_S: i64 = 10;

const MAX_DISCOVERY_BYTES: usize = 64 * 1024;
const MAX_JWKS_BYTES: usize = 256 * 1024;

/// One issuer's keys as fetched.
#[derive(Debug)]
pub struct KeySet {
    jwks_uri: String,
    pub keys: Vec<Jwk>,
    fetched_at: DateTime<Utc>,
    /// When an unknown `kid` last made us refetch.
    kid_refresh_at: Option<DateTime<Utc>>,
}

impl KeySet {
    fn has(&self, kid: &str) -> bool {
        self.keys.iter().any(|k| k.kid.as_deref() == Some(kid))
    }
}

#[derive(Default)]
struct Cache {
    sets: HashMap<String, Arc<KeySet>>,
    failed_at: HashMap<String, DateTime<Utc>>,
}

/// The cache of every allowed issuer's keys (one entry per issuer of `oauth.ci_issuers`).
#[derive(Default)]
pub struct IssuerKeys {
    cache: Mutex<Cache>,
    /// One fetch at a time: a burst of requests on a cold cache fetches once.
    fetching: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for IssuerKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IssuerKeys")
    }
}

/// What a fetch should do.
#[derive(Clone, Copy, PartialEq)]
enum Fetch {
    /// Discovery and JWKS: nothing cached, or the cache is old.
    Full,
    /// The JWKS again, for a `kid` the cached set lacks.
    UnknownKid,
}

impl IssuerKeys {
    fn cached(&self, issuer: &str) -> Option<Arc<KeySet>> {
        self.cache.lock().ok()?.sets.get(issuer).cloned()
    }

    /// The issuer's keys, refetched when the cache is old or (at most once a minute) lacks `kid`.
    /// `issuer` must already be one of the allowed ones.
    pub async fn keys(
        &self,
        outbound: &Outbound,
        issuer: &str,
        kid: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<Arc<KeySet>, String> {
        let fresh = |s: &KeySet| now - s.fetched_at < Duration::seconds(KEYS_TTL_S);
        match self.cached(issuer) {
            Some(set) if fresh(&set) => {
                let known = kid.is_none_or(|k| set.has(k));
                let refreshed_lately = set
                    .kid_refresh_at
                    .is_some_and(|t| now - t < Duration::seconds(KID_REFRESH_S));
                if known || refreshed_lately {
                    return Ok(set);
                }
                self.fetch(outbound, issuer, Some(set), Fetch::UnknownKid, now)
                    .await
            }
            stale => self.fetch(outbound, issuer, stale, Fetch::Full, now).await,
        }
    }

    async fn fetch(
        &self,
        outbound: &Outbound,
        issuer: &str,
        seen: Option<Arc<KeySet>>,
        what: Fetch,
        now: DateTime<Utc>,
    ) -> Result<Arc<KeySet>, String> {
        let _one_at_a_time = self.fetching.lock().await;
        // Another request may have fetched while this one waited.
        let current = self.cached(issuer);
        if let Some(c) = &current {
            if seen.as_ref().is_none_or(|s| c.fetched_at > s.fetched_at) {
                return Ok(c.clone());
            }
        }
        self.not_failed_lately(issuer, now)?;
        let jwks_uri = match (&current, what) {
            (Some(c), Fetch::UnknownKid) => c.jwks_uri.clone(),
            _ => jwks_uri(outbound, issuer)
                .await
                .inspect_err(|_| self.failed(issuer, now))?,
        };
        let keys = fetch_json(outbound, &jwks_uri, MAX_JWKS_BYTES, "JWKS")
            .await
            .and_then(|body| parse_jwks(&body))
            .inspect_err(|_| self.failed(issuer, now))?;
        let kid_refresh_at = match what {
            Fetch::UnknownKid => Some(now),
            Fetch::Full => current.and_then(|c| c.kid_refresh_at),
        };
        let set = Arc::new(KeySet {
            jwks_uri,
            keys,
            fetched_at: now,
            kid_refresh_at,
        });
        if let Ok(mut cache) = self.cache.lock() {
            cache.sets.insert(issuer.to_string(), set.clone());
            cache.failed_at.remove(issuer);
        }
        Ok(set)
    }

    fn not_failed_lately(&self, issuer: &str, now: DateTime<Utc>) -> Result<(), String> {
        let failed = self
            .cache
            .lock()
            .ok()
            .and_then(|c| c.failed_at.get(issuer).copied());
        match failed {
            Some(t) if now - t < Duration::seconds(RETRY_AFTER_FAILURE_S) => {
                Err("the issuer's keys could not be fetched a moment ago; try again shortly".into())
            }
            _ => Ok(()),
        }
    }

    fn failed(&self, issuer: &str, now: DateTime<Utc>) {
        if let Ok(mut cache) = self.cache.lock() {
            cache.failed_at.insert(issuer.to_string(), now);
        }
    }
}

/// The issuer's `jwks_uri`, from its discovery document, which must name the issuer exactly.
async fn jwks_uri(outbound: &Outbound, issuer: &str) -> Result<String, String> {
    let url = format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    );
    let body = fetch_json(outbound, &url, MAX_DISCOVERY_BYTES, "discovery document").await?;
    let doc: Value = serde_json::from_slice(&body)
        .map_err(|_| "the issuer's discovery document is not JSON".to_string())?;
    if doc.get("issuer").and_then(Value::as_str) != Some(issuer) {
        return Err("the issuer's discovery document names another issuer".into());
    }
    let uri = doc
        .get("jwks_uri")
        .and_then(Value::as_str)
        .ok_or_else(|| "the issuer's discovery document has no jwks_uri".to_string())?;
    // An https issuer keeps its keys on https too.
    if issuer.starts_with("https://") && !uri.starts_with("https://") {
        return Err("the issuer's jwks_uri is not https".into());
    }
    Ok(uri.to_string())
}

async fn fetch_json(
    outbound: &Outbound,
    url: &str,
    max_bytes: usize,
    what: &str,
) -> Result<bytes::Bytes, String> {
    let options = FetchOptions {
        max_bytes,
        ..FetchOptions::default()
    }
    .accept("application/json");
    let fetched = outbound.get(url, &options).await.map_err(|e| {
        tracing::warn!(url, error = %e, "ci issuer: {what} not fetched");
        format!("the issuer's {what} could not be fetched: {e}")
    })?;
    if fetched.status != reqwest::StatusCode::OK {
        tracing::warn!(url, status = %fetched.status, "ci issuer: {what} not fetched");
        return Err(format!(
            "the issuer's {what} could not be fetched (HTTP {})",
            fetched.status.as_u16()
        ));
    }
    Ok(fetched.body)
}
