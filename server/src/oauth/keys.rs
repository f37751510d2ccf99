//! ID-token signing keys: ES256 (P-256), generated at first start, the private half sealed with the
//! secrets key in the store. The newest unretired key signs; the JWKS lists it with the retired keys
//! whose ID tokens may still be valid.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::{DateTime, Duration, Utc};
use p256::ecdsa::signature::Signer;
use p256::ecdsa::{Signature, SigningKey};
use rand::RngCore;
use serde_json::json;

use crate::crypto::{random_id, SecretBox};
use crate::store::{SigningKeyRow, Store, StoreError};

pub const ALG: &str = "ES256";

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("signing key {0}: {1}")]
    Bad(String, String),
}

/// The keys as loaded: the one that signs and the JWKS document (prebuilt bytes).
pub struct KeySet {
    kid: String,
    key: SigningKey,
    /// The same key for ring's signer, which is several times faster than p256's.
    fast: ring::signature::EcdsaKeyPair,
    rng: ring::rand::SystemRandom,
    jwks: axum::body::Bytes,
}

impl std::fmt::Debug for KeySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeySet(kid={})", self.kid)
    }
}

fn new_key() -> SigningKey {
    loop {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        // Nearly every 32-byte string is a valid P-256 scalar; the rest are drawn again.
        if let Ok(k) = SigningKey::from_bytes(&bytes.into()) {
            return k;
        }
    }
}

fn public_jwk(kid: &str, key: &SigningKey) -> serde_json::Value {
    let point = key.verifying_key().to_encoded_point(false);
    let coord =
        |c: Option<&p256::FieldBytes>| c.map(|b| URL_SAFE_NO_PAD.encode(b)).unwrap_or_default();
    json!({
        "kty": "EC",
        "crv": "P-256",
        "x": coord(point.x()),
        "y": coord(point.y()),
        "use": "sig",
        "alg": ALG,
        "kid": kid,
    })
}

fn row_for(key: &SigningKey, secrets: &SecretBox, now: DateTime<Utc>) -> SigningKeyRow {
    let kid = random_id();
    SigningKeyRow {
        public_jwk: public_jwk(&kid, key).to_string(),
        private_key: secrets.seal(&URL_SAFE_NO_PAD.encode(key.to_bytes())),
        kid,
        alg: ALG.into(),
        created_at: now,
        retired_at: None,
    }
}

fn open(row: &SigningKeyRow, secrets: &SecretBox) -> Result<SigningKey, KeyError> {
    let bad = |m: String| KeyError::Bad(row.kid.clone(), m);
    let encoded = secrets
        .open(&row.private_key)
        .map_err(|e| bad(e.to_string()))?;
    let bytes = URL_SAFE_NO_PAD
        .decode(encoded)
        .map_err(|e| bad(e.to_string()))?;
    let bytes: [u8; 32] = bytes
        .try_into()
        .map_err(|_| bad("not a P-256 private key".into()))?;
    SigningKey::from_bytes(&bytes.into()).map_err(|e| bad(e.to_string()))
}

impl KeySet {
    /// Loads the keys, creating the first one when there is none.
    pub async fn load(
        store: &dyn Store,
        secrets: &SecretBox,
        now: DateTime<Utc>,
    ) -> Result<KeySet, KeyError> {
        let rows = store.read().await?.signing_keys().await?;
        if rows.iter().any(|r| r.retired_at.is_none()) {
            return KeySet::from_rows(&rows, secrets, now);
        }
        let mut unit = store.begin().await?;
        // Another process may have created it meanwhile: look again inside the unit of work.
        if !unit
            .signing_keys()
            .await?
            .iter()
            .any(|r| r.retired_at.is_none())
        {
            unit.add_signing_key(&row_for(&new_key(), secrets, now))
                .await?;
        }
        unit.commit().await?;
        let rows = store.read().await?.signing_keys().await?;
        KeySet::from_rows(&rows, secrets, now)
    }

    /// Every key published; the one that signs at `now` is the newest whose time has come (a rotated-in
    /// key's `created_at` is when it starts signing) and that is not retired yet, else (a clock set back)
    /// the oldest that is not retired.
    fn from_rows(
        rows: &[SigningKeyRow],
        secrets: &SecretBox,
        now: DateTime<Utc>,
    ) -> Result<KeySet, KeyError> {
        let live = |r: &&SigningKeyRow| r.retired_at.is_none_or(|at| at > now);
        let due = rows
            .iter()
            .filter(live)
            .filter(|r| r.created_at <= now)
            .max_by_key(|r| r.created_at);
        let waiting = || {
            rows.iter()
                .filter(|r| r.retired_at.is_none())
                .min_by_key(|r| r.created_at)
        };
        let current = due
            .or_else(waiting)
            .ok_or_else(|| KeyError::Bad("-".into(), "no current signing key".into()))?;
        let mut keys = Vec::new();
        for row in rows {
            let jwk: serde_json::Value = serde_json::from_str(&row.public_jwk)
                .map_err(|e| KeyError::Bad(row.kid.clone(), e.to_string()))?;
            keys.push(jwk);
        }
        let jwks = serde_json::to_vec(&json!({ "keys": keys }))
            .map_err(|e| KeyError::Bad(current.kid.clone(), e.to_string()))?;
        let key = open(current, secrets)?;
        let rng = ring::rand::SystemRandom::new();
        let public = key.verifying_key().to_encoded_point(false);
        let fast = ring::signature::EcdsaKeyPair::from_private_key_and_public_key(
            &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            &key.to_bytes(),
            public.as_bytes(),
            &rng,
        )
        .map_err(|e| KeyError::Bad(current.kid.clone(), e.to_string()))?;
        Ok(KeySet {
            kid: current.kid.clone(),
            key,
            fast,
            rng,
            jwks: jwks.into(),
        })
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The JWKS document.
    pub fn jwks(&self) -> axum::body::Bytes {
        self.jwks.clone()
    }

    /// A compact JWS of `claims`, signed with the current key.
    pub fn sign(&self, claims: &serde_json::Value) -> String {
        let header = json!({"alg": ALG, "typ": "JWT", "kid": self.kid});
        let input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        // JWS wants r || s, which is ring's fixed encoding. ring fails only when the system's
        // random source does; p256's deterministic (RFC 6979) signer needs none.
        let signature = match self.fast.sign(&self.rng, input.as_bytes()) {
            Ok(sig) => URL_SAFE_NO_PAD.encode(sig.as_ref()),
            Err(_) => {
                let sig: Signature = self.key.sign(input.as_bytes());
                URL_SAFE_NO_PAD.encode(sig.to_bytes())
            }
        };
        format!("{input}.{signature}")
    }
}

/// How long a client may keep the JWKS (`Cache-Control: max-age` on `/oauth/jwks`).
pub const JWKS_MAX_AGE_S: i64 = 300;

/// How long a new key is published before it signs: a client's JWKS lifetime, plus the minute in which
/// every running server picks the key up (see `Provider::maintain`), plus a minute for clocks that
/// differ, so that no client meets a token signed by a key it has not seen.
pub const PUBLISHED_AHEAD: Duration = Duration::seconds(JWKS_MAX_AGE_S + 60 + 60);

/// Publishes a new key, which starts signing [`PUBLISHED_AHEAD`] from `now`, when the current one
/// retires; returns its id and that time. Retired keys stay in the JWKS until `keep` has passed since
/// they were retired (the ID-token lifetime), after which the next rotation drops them.
pub async fn rotate(
    store: &dyn Store,
    secrets: &SecretBox,
    now: DateTime<Utc>,
    keep: Duration,
) -> Result<(String, DateTime<Utc>), KeyError> {
    let from = now + PUBLISHED_AHEAD;
    let row = row_for(&new_key(), secrets, from);
    let mut unit = store.begin().await?;
    unit.drop_retired_keys(now - keep).await?;
    unit.retire_signing_keys(from).await?;
    unit.add_signing_key(&row).await?;
    unit.commit().await?;
    Ok((row.kid, from))
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::ecdsa::signature::Verifier;
    use p256::ecdsa::VerifyingKey;

    #[test]
    fn signatures_verify_with_the_published_key() {
        let secrets = SecretBox::new(&[7u8; 32]);
        let key = new_key();
        let row = row_for(&key, &secrets, Utc::now());
        assert!(!row
            .private_key
            .contains(&URL_SAFE_NO_PAD.encode(key.to_bytes())));
        let set = KeySet::from_rows(std::slice::from_ref(&row), &secrets, Utc::now()).unwrap();
        let jwt = set.sign(&json!({"sub": "u1"}));
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let jwks: serde_json::Value = serde_json::from_slice(&set.jwks()).unwrap();
        let jwk = &jwks["keys"][0];
        assert_eq!(jwk["kid"], row.kid);
        assert!(
            jwk.get("d").is_none(),
            "the private part is never published"
        );
        let x = URL_SAFE_NO_PAD.decode(jwk["x"].as_str().unwrap()).unwrap();
        let y = URL_SAFE_NO_PAD.decode(jwk["y"].as_str().unwrap()).unwrap();
        let mut sec1 = vec![4u8];
        sec1.extend(x);
        sec1.extend(y);
        let verifying = VerifyingKey::from_sec1_bytes(&sec1).unwrap();
        let sig = Signature::from_slice(&URL_SAFE_NO_PAD.decode(parts[2]).unwrap()).unwrap();
        let input = format!("{}.{}", parts[0], parts[1]);
        assert!(verifying.verify(input.as_bytes(), &sig).is_ok());
        assert!(verifying.verify(b"other", &sig).is_err());
    }

    /// The key ids the set's JWKS publishes.
    fn kids(set: &KeySet) -> Vec<String> {
        let jwks: serde_json::Value = serde_json::from_slice(&set.jwks()).unwrap();
        jwks["keys"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|k| k["kid"].as_str().map(String::from))
            .collect()
    }

    #[tokio::test]
    async fn rotation_keeps_the_old_key_published_until_it_may_be_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let url =
            crate::store::StoreUrl::parse(&dir.path().join("s.db").display().to_string()).unwrap();
        let store = crate::store::SqlStore::open(&url, crate::store::Synchronous::Normal)
            .await
            .unwrap();
        let secrets = SecretBox::new(&[3u8; 32]);
        let t0 = Utc::now();
        let first = KeySet::load(&store, &secrets, t0).await.unwrap();
        let again = KeySet::load(&store, &secrets, t0).await.unwrap();
        assert_eq!(first.kid(), again.kid(), "loading does not make a new key");
        let (kid, from) = rotate(&store, &secrets, t0, Duration::hours(1))
            .await
            .unwrap();
        assert_eq!(from, t0 + PUBLISHED_AHEAD);
        // Published at once, signing only once clients may have seen it; the old key signs until then.
        let published = KeySet::load(&store, &secrets, t0).await.unwrap();
        assert_eq!(published.kid(), first.kid());
        assert!(kids(&published).contains(&kid), "the new key is published");
        let rotated = KeySet::load(&store, &secrets, from).await.unwrap();
        assert_eq!(rotated.kid(), kid);
        assert_eq!(kids(&rotated).len(), 2, "the old key is still published");
        // Two hours on, the next rotation drops the key retired an hour before its tokens expired.
        rotate(
            &store,
            &secrets,
            t0 + Duration::hours(2),
            Duration::hours(1),
        )
        .await
        .unwrap();
        let later = KeySet::load(&store, &secrets, t0).await.unwrap();
        let kids = kids(&later);
        assert_eq!(kids.len(), 2);
        assert!(!kids.iter().any(|k| k == first.kid()), "the first key went");
    }

    #[test]
    fn a_key_sealed_with_another_secret_does_not_open() {
        let row = row_for(&new_key(), &SecretBox::new(&[1u8; 32]), Utc::now());
        assert!(KeySet::from_rows(&[row], &SecretBox::new(&[2u8; 32]), Utc::now()).is_err());
    }
}
