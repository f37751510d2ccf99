//! Randomness, token hashing and the AES-256-GCM box that keeps endpoint secrets encrypted at rest.

use std::io::Write;
use std::path::Path;

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

/// Prefix of every access token, so a leaked one is recognizable (and greppable by scanners).
pub const TOKEN_PREFIX: &str = "sy_";

/// Prefix of an encrypted value, naming the scheme so keys and schemes can rotate later.
const SEALED_PREFIX: &str = "enc:v1:";

pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    rand::rng().fill_bytes(&mut b);
    b
}

/// A random identifier for stored rows: 96 bits, hex.
pub fn random_id() -> String {
    hex(&random_bytes::<12>())
}

/// A new access token: 256 random bits behind a recognizable prefix.
pub fn new_token() -> String {
    format!(
        "{TOKEN_PREFIX}{}",
        URL_SAFE_NO_PAD.encode(random_bytes::<32>())
    )
}

/// The only form in which a token is stored.
pub fn hash_token(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

/// SHA-256 of `parts` in order, each led by its length, so that where one part ends counts (("ab", "c")
/// and ("a", "bc") differ).
pub fn digest_of<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> [u8; 32] {
    let mut h = Sha256::new();
    for part in parts {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    h.finalize().into()
}

/// Whether two byte strings are equal, in time that depends only on their lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    s
}

#[derive(Debug, thiserror::Error)]
pub enum CryptoError {
    #[error("secrets key: {0}")]
    Key(String),
    #[error("a stored secret could not be decrypted (wrong key or corrupted value)")]
    Open,
}

/// Seals and opens secret values with one AES-256-GCM key.
#[derive(Clone)]
pub struct SecretBox {
    cipher: Aes256Gcm,
}

impl std::fmt::Debug for SecretBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretBox(..)")
    }
}

impl SecretBox {
    pub fn new(key: &[u8; 32]) -> SecretBox {
        SecretBox {
            cipher: Aes256Gcm::new(key.into()),
        }
    }

    /// A key given as base64 of 32 bytes (config `secrets.key` or `SWITCHYARD_SECRETS_KEY`).
    pub fn from_base64(key: &str) -> Result<SecretBox, CryptoError> {
        let bytes = STANDARD
            .decode(key.trim())
            .map_err(|_| CryptoError::Key("not valid base64".into()))?;
        let key: [u8; 32] = bytes
            .try_into()
            .map_err(|_| CryptoError::Key("must decode to exactly 32 bytes".into()))?;
        Ok(SecretBox::new(&key))
    }

    /// Reads the key file. When it does not exist it is created (mode 0600, 32 random bytes as base64)
    /// only if `create` is set: for a store that already holds sealed values, a new key would make
    /// every stored secret unreadable, so that is an error instead.
    pub fn from_key_file(path: &Path, create: bool) -> Result<SecretBox, CryptoError> {
        match std::fs::read_to_string(path) {
            Ok(s) => {
                warn_if_readable_by_others(path);
                SecretBox::from_base64(&s).map_err(|e| CryptoError::Key(format!("{}: {e}", path.display())))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                let key = random_bytes::<32>();
                write_private_file(path, STANDARD.encode(key).as_bytes())
                    .map_err(|e| CryptoError::Key(format!("creating {}: {e}", path.display())))?;
                Ok(SecretBox::new(&key))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(CryptoError::Key(format!(
                "{} is missing but the store already exists: restore the key file (or set secrets.key); \
                 a new key could not read the secrets already stored",
                path.display()
            ))),
            Err(e) => Err(CryptoError::Key(format!("reading {}: {e}", path.display()))),
        }
    }

    pub fn seal(&self, plaintext: &str) -> String {
        let nonce = random_bytes::<12>();
        // Encryption with a valid key and a 12-byte nonce cannot fail for inputs this size.
        let ct = self
            .cipher
            .encrypt(Nonce::from_slice(&nonce), plaintext.as_bytes())
            .unwrap_or_default();
        let mut blob = Vec::with_capacity(12 + ct.len());
        blob.extend_from_slice(&nonce);
        blob.extend_from_slice(&ct);
        format!("{SEALED_PREFIX}{}", STANDARD.encode(blob))
    }

    pub fn open(&self, sealed: &str) -> Result<String, CryptoError> {
        let b64 = sealed
            .strip_prefix(SEALED_PREFIX)
            .ok_or(CryptoError::Open)?;
        let blob = STANDARD.decode(b64).map_err(|_| CryptoError::Open)?;
        if blob.len() < 12 {
            return Err(CryptoError::Open);
        }
        let (nonce, ct) = blob.split_at(12);
        let pt = self
            .cipher
            .decrypt(Nonce::from_slice(nonce), ct)
            .map_err(|_| CryptoError::Open)?;
        String::from_utf8(pt).map_err(|_| CryptoError::Open)
    }

    pub fn is_sealed(value: &str) -> bool {
        value.starts_with(SEALED_PREFIX)
    }
}

fn warn_if_readable_by_others(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(path) {
            if meta.permissions().mode() & 0o077 != 0 {
                tracing::warn!(file = %path.display(), "the secrets key file is readable by others; chmod 600 it");
            }
        }
    }
}

/// Creates a file readable only by its owner and writes `contents` to it. Fails if it exists.
pub fn write_private_file(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    f.write_all(contents)?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_prefixed_and_distinct() {
        let a = new_token();
        let b = new_token();
        assert!(a.starts_with(TOKEN_PREFIX));
        assert_eq!(a.len(), TOKEN_PREFIX.len() + 43);
        assert_ne!(a, b);
        assert_eq!(hash_token(&a).len(), 64);
        assert_ne!(hash_token(&a), hash_token(&b));
    }

    #[test]
    fn sealed_values_open_only_with_their_key() {
        let k1 = SecretBox::new(&[7u8; 32]);
        let k2 = SecretBox::new(&[8u8; 32]);
        let sealed = k1.seal("hunter2");
        assert!(!sealed.contains("hunter2"));
        assert!(SecretBox::is_sealed(&sealed));
        assert_eq!(k1.open(&sealed).unwrap(), "hunter2");
        assert!(k2.open(&sealed).is_err());
        assert_ne!(k1.seal("x"), k1.seal("x"), "nonces differ");
        assert!(k1.open("enc:v1:AAAA").is_err());
        assert!(k1.open("plain").is_err());
    }

    #[test]
    fn key_file_is_created_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret.key");
        assert!(
            SecretBox::from_key_file(&path, false).is_err(),
            "not created for an existing store"
        );
        let a = SecretBox::from_key_file(&path, true).unwrap();
        let sealed = a.seal("v");
        let b = SecretBox::from_key_file(&path, false).unwrap();
        assert_eq!(b.open(&sealed).unwrap(), "v");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(SecretBox::from_base64("c2hvcnQ=").is_err());
    }
}
