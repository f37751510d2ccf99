//! Users' passwords: the rules one must meet, and its Argon2id hash as a PHC string, computed on the
//! blocking pool so that a slow hash never holds up an async worker.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, Salt, SaltString};
use argon2::Argon2;
use rand::RngCore;

/// Shortest password accepted, in characters.
pub const MIN_PASSWORD_CHARS: usize = 8;

/// Longest password accepted, in bytes: enough for any passphrase, and a bound on the work one
/// request can ask of the hash.
pub const MAX_PASSWORD_BYTES: usize = 1024;

/// The hash of 32 random bytes (in hex) that were thrown away, made by [`hash_password`]: a check for
/// a user without a password verifies against it, so it takes as long as one with a password.
const UNKNOWABLE_HASH: &str = "$argon2id$v=19$m=19456,t=2,p=1$\
    w85KdM3UCxsMZyxgRLXyiQ$Rmi/S08JS3iSU5pp3LHntaw+zbc9+NkOxmnPSMeywGg";

#[derive(Debug, thiserror::Error)]
pub enum PasswordError {
    #[error("a password must be at least {MIN_PASSWORD_CHARS} characters long")]
    TooShort,
    #[error("a password must be at most {MAX_PASSWORD_BYTES} bytes long")]
    TooLong,
    /// The hash could not be computed; never the password's fault.
    #[error("password hashing failed: {0}")]
    Hash(String),
}

/// Whether `password` may be set: at least [`MIN_PASSWORD_CHARS`] characters, at most
/// [`MAX_PASSWORD_BYTES`] bytes.
pub fn check_rules(password: &str) -> Result<(), PasswordError> {
    if password.len() > MAX_PASSWORD_BYTES {
        return Err(PasswordError::TooLong);
    }
    if password.chars().count() < MIN_PASSWORD_CHARS {
        return Err(PasswordError::TooShort);
    }
    Ok(())
}

/// The password's Argon2id hash (argon2's defaults: 19 MiB, 2 passes, 1 lane) with a fresh 16-byte
/// salt, as a PHC string (`$argon2id$v=19$m=19456,t=2,p=1$…`). Refuses a password that breaks the rules.
pub async fn hash_password(password: &str) -> Result<String, PasswordError> {
    check_rules(password)?;
    let mut salt = [0u8; Salt::RECOMMENDED_LENGTH];
    rand::rng().fill_bytes(&mut salt);
    let salt = SaltString::encode_b64(&salt).map_err(|e| PasswordError::Hash(e.to_string()))?;
    let password = password.to_owned();
    let _permit = permits()
        .acquire()
        .await
        .map_err(|e| PasswordError::Hash(e.to_string()))?;
    tokio::task::spawn_blocking(move || {
        Argon2::default()
            .hash_password(password.as_bytes(), &salt)
            .map(|h| h.to_string())
            .map_err(|e| PasswordError::Hash(e.to_string()))
    })
    .await
    .map_err(|e| PasswordError::Hash(e.to_string()))?
}

/// Argon2 runs at most once per core at a time (each takes 19 MiB and ~25 ms): a flood of sign-ins
/// queues here instead of filling the blocking pool and memory.
fn permits() -> &'static tokio::sync::Semaphore {
    static PERMITS: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    PERMITS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        tokio::sync::Semaphore::new(cores)
    })
}

/// Whether `password` is the one `phc` is a hash of. A string that is not a PHC hash, or a password
/// longer than any that could have been set, is simply not a match.
pub async fn verify_password(password: &str, phc: &str) -> bool {
    if password.len() > MAX_PASSWORD_BYTES {
        return false;
    }
    let (password, phc) = (password.to_owned(), phc.to_owned());
    let Ok(_permit) = permits().acquire().await else {
        return false;
    };
    tokio::task::spawn_blocking(move || {
        PasswordHash::new(&phc).is_ok_and(|hash| {
            Argon2::default()
                .verify_password(password.as_bytes(), &hash)
                .is_ok()
        })
    })
    .await
    .unwrap_or(false)
}

/// [`verify_password`] against a stored hash, or, when there is none (no such user, or one without a
/// password), against a hash nobody knows the password of: the answer is then `false`, after as much
/// work as a real check, so how long it takes does not tell which names exist.
pub async fn verify_stored(password: &str, phc: Option<&str>) -> bool {
    let matches = verify_password(password, phc.unwrap_or(UNKNOWABLE_HASH)).await;
    matches && phc.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_hash_verifies_its_password_only() {
        let phc = hash_password("correct horse battery").await.unwrap();
        assert!(phc.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{phc}");
        assert!(!phc.contains("correct horse battery"));
        assert!(verify_password("correct horse battery", &phc).await);
        assert!(!verify_password("correct horse batterY", &phc).await);
        assert!(!verify_password("", &phc).await);
        let again = hash_password("correct horse battery").await.unwrap();
        assert_ne!(phc, again, "each hash has its own salt");
        assert!(verify_stored("correct horse battery", Some(&again)).await);
    }

    #[tokio::test]
    async fn anything_but_a_phc_hash_matches_nothing() {
        for garbage in [
            "",
            "correct horse battery",
            "$argon2id$",
            "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$",
            "$argon2id$v=19$m=x,t=2,p=1$bG9uZy1mb3Jnb3R0ZW4tc2FsdA$AAAA",
            "$2b$12$R9h/cIPz0gi.URNNX3kh2OPST9/PgBkqquzi.Ss7KIUgO2t0jWMUW",
        ] {
            assert!(
                !verify_password("correct horse battery", garbage).await,
                "{garbage:?}"
            );
        }
    }

    #[tokio::test]
    async fn the_rules_bound_the_length() {
        assert!(matches!(
            hash_password("short").await,
            Err(PasswordError::TooShort)
        ));
        // Eight characters, whatever their size in bytes.
        assert!(check_rules("ééééééé").is_err());
        assert!(check_rules("éééééééé").is_ok());
        assert!(check_rules(&"x".repeat(MAX_PASSWORD_BYTES)).is_ok());
        assert!(matches!(
            hash_password(&"x".repeat(MAX_PASSWORD_BYTES + 1)).await,
            Err(PasswordError::TooLong)
        ));
        assert!(!verify_password(&"x".repeat(MAX_PASSWORD_BYTES + 1), UNKNOWABLE_HASH).await);
    }

    #[tokio::test]
    async fn without_a_stored_hash_nothing_matches() {
        assert!(!verify_stored("correct horse battery", None).await);
        assert!(!verify_stored("", None).await);
    }

    /// The stand-in costs what a real hash does: the same algorithm and parameters.
    #[tokio::test]
    async fn the_stand_in_hash_costs_what_a_real_one_does() {
        let real = hash_password("correct horse battery").await.unwrap();
        let params = |phc: &str| {
            let h = PasswordHash::new(phc).unwrap();
            (h.algorithm.to_string(), h.version, h.params.to_string())
        };
        assert_eq!(params(UNKNOWABLE_HASH), params(&real));
    }
}
