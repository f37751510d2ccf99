//! Standard Webhooks signatures (<https://www.standardwebhooks.com>): `webhook-signature` is a
//! space-separated list of `v1,<base64 HMAC-SHA256>` over `"{webhook-id}.{webhook-timestamp}.{body}"`.
//! Several entries sign one message while a rotated secret's grace period runs; a verifier accepts the
//! message when any entry matches one of its keys.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ring::hmac;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::crypto::{constant_time_eq, random_bytes};

/// The prefix of a signing secret's text form.
pub const SECRET_PREFIX: &str = "whsec_";
/// How far a verifier lets `webhook-timestamp` stray from its clock, either way (the reference
/// libraries' tolerance).
pub const TOLERANCE_SECONDS: i64 = 5 * 60;

/// A signing key: the bytes behind `whsec_<base64>`.
#[derive(Clone)]
pub struct SigningKey(hmac::Key);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(…)")
    }
}

impl SigningKey {
    /// A key from its text form, `whsec_` + base64 (the prefix may be left out), 24 to 64 bytes.
    pub fn parse(secret: &str) -> Result<SigningKey, String> {
        let encoded = secret.strip_prefix(SECRET_PREFIX).unwrap_or(secret);
        let bytes = STANDARD
            .decode(encoded)
            .map_err(|_| "a signing secret is `whsec_` followed by base64".to_string())?;
        if !(24..=64).contains(&bytes.len()) {
            return Err(format!(
                "a signing secret holds 24 to 64 bytes, not {}",
                bytes.len()
            ));
        }
        Ok(SigningKey::from_bytes(&bytes))
    }

    pub fn from_bytes(bytes: &[u8]) -> SigningKey {
        SigningKey(hmac::Key::new(hmac::HMAC_SHA256, bytes))
    }

    /// A new random secret in text form (`whsec_` + base64 of 32 random bytes).
    pub fn generate() -> String {
        format!("{SECRET_PREFIX}{}", STANDARD.encode(random_bytes::<32>()))
    }

    fn tag(&self, id: &str, timestamp: i64, body: &[u8]) -> hmac::Tag {
        let mut ctx = hmac::Context::with_key(&self.0);
        ctx.update(id.as_bytes());
        ctx.update(b".");
        ctx.update(timestamp.to_string().as_bytes());
        ctx.update(b".");
        ctx.update(body);
        ctx.sign()
    }

    /// One signature entry: `v1,<base64>`.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        format!("v1,{}", STANDARD.encode(self.tag(id, timestamp, body)))
    }
}

/// The `webhook-signature` value for a message signed by every key (the current one first).
pub fn signature_header(keys: &[SigningKey], id: &str, timestamp: i64, body: &[u8]) -> String {
    keys.iter()
        .map(|k| k.sign(id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Why a signed message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the {0} header is missing")]
    Missing(&'static str),
    #[error("webhook-timestamp is not a Unix time in seconds")]
    BadTimestamp,
    #[error("webhook-timestamp is more than five minutes away from this server's clock")]
    OutOfTolerance,
    #[error("no signature matches")]
    NoMatch,
}

/// Checks a message: the timestamp within [`TOLERANCE_SECONDS`] of `now` (Unix seconds), and at least
/// one `v1` entry of `signatures` made by one of `keys`, compared in constant time.
pub fn verify(
    keys: &[SigningKey],
    id: Option<&str>,
    timestamp: Option<&str>,
    signatures: Option<&str>,
    body: &[u8],
    now: i64,
) -> Result<(), VerifyError> {
    let id = id.ok_or(VerifyError::Missing("webhook-id"))?;
    let timestamp = timestamp.ok_or(VerifyError::Missing("webhook-timestamp"))?;
    let signatures = signatures.ok_or(VerifyError::Missing("webhook-signature"))?;
    let ts: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| VerifyError::BadTimestamp)?;
    if now.abs_diff(ts) > TOLERANCE_SECONDS as u64 {
        return Err(VerifyError::OutOfTolerance);
    }
    let offered: Vec<Vec<u8>> = signatures
        .split_whitespace()
        .filter_map(|entry| entry.strip_prefix("v1,"))
        .filter_map(|b64| STANDARD.decode(b64).ok())
        .collect();
    for key in keys {
        let expected = key.tag(id, ts, body);
        if offered
            .iter()
            .any(|sig| constant_time_eq(sig, expected.as_ref()))
        {
            return Ok(());
        }
    }
    Err(VerifyError::NoMatch)
}

/// A signing key as kept (sealed as a whole): its text form and when it stops signing.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyEntry {
    pub secret: String,
    pub expires_at: Option<DateTime<Utc>>,
}

/// The keys that sign now, the current one first.
pub fn signing_keys(entries: &[KeyEntry], now: DateTime<Utc>) -> Vec<SigningKey> {
    entries
        .iter()
        .filter(|k| k.expires_at.is_none_or(|t| t > now))
        .filter_map(|k| SigningKey::parse(&k.secret).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS: i64 = 1614265330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const EXPECTED: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    #[test]
    fn the_known_vector() {
        let key = SigningKey::parse(SECRET).expect("key");
        assert_eq!(key.sign(ID, TS, BODY), EXPECTED);
        assert_eq!(
            verify(
                &[key],
                Some(ID),
                Some("1614265330"),
                Some(EXPECTED),
                BODY,
                TS + 10
            ),
            Ok(())
        );
    }

    #[test]
    fn any_entry_of_several_and_any_key_of_several_matches() {
        let old = SigningKey::parse(SECRET).expect("key");
        let new = SigningKey::parse(&SigningKey::generate()).expect("key");
        let header = signature_header(&[new.clone(), old.clone()], ID, TS, BODY);
        assert_eq!(header.split(' ').count(), 2);
        let ts = TS.to_string();
        for keys in [vec![old.clone()], vec![new.clone()]] {
            assert_eq!(
                verify(&keys, Some(ID), Some(&ts), Some(&header), BODY, TS),
                Ok(())
            );
        }
        let other = SigningKey::parse(&SigningKey::generate()).expect("key");
        assert_eq!(
            verify(&[other], Some(ID), Some(&ts), Some(&header), BODY, TS),
            Err(VerifyError::NoMatch)
        );
    }

    #[test]
    fn refuses_a_changed_body_a_stale_time_and_missing_headers() {
        let key = SigningKey::parse(SECRET).expect("key");
        let keys = [key];
        let ts = TS.to_string();
        let check =
            |body: &[u8], now: i64| verify(&keys, Some(ID), Some(&ts), Some(EXPECTED), body, now);
        assert_eq!(check(b"{}", TS), Err(VerifyError::NoMatch));
        assert_eq!(check(BODY, TS + 301), Err(VerifyError::OutOfTolerance));
        assert_eq!(check(BODY, TS - 301), Err(VerifyError::OutOfTolerance));
        assert_eq!(
            verify(&keys, None, Some(&ts), Some(EXPECTED), BODY, TS),
            Err(VerifyError::Missing("webhook-id"))
        );
        assert_eq!(
            verify(&keys, Some(ID), Some("soon"), Some(EXPECTED), BODY, TS),
            Err(VerifyError::BadTimestamp)
        );
        for extreme in [i64::MIN, i64::MAX] {
            let far = extreme.to_string();
            assert_eq!(
                verify(&keys, Some(ID), Some(&far), Some(EXPECTED), BODY, TS),
                Err(VerifyError::OutOfTolerance)
            );
        }
    }

    #[test]
    fn secrets_are_checked_and_generated_well_formed() {
        assert!(SigningKey::parse("whsec_c2hvcnQ=").is_err());
        assert!(SigningKey::parse("whsec_!!!").is_err());
        let fresh = SigningKey::generate();
        assert!(fresh.starts_with(SECRET_PREFIX));
        assert!(SigningKey::parse(&fresh).is_ok());
    }
}
