//! Pulls: one at a time per image, in the background, with their progress as the endpoint's status
//! message (`pulling ghcr.io/…: 45%`), and their failures sorted into those a retry can mend (the registry
//! does not answer) and those it cannot (no such image or tag, credentials refused).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bollard::auth::DockerCredentials;
use bollard::query_parameters::CreateImageOptions;
use bollard::Docker;
use futures_util::StreamExt;

use super::create::pull_reference;
use crate::runtime::provider::Readiness;
use crate::runtime::retry::Failure;

/// A pull of `always` this recent counts for the next replica of the same image.
const FRESH: Duration = Duration::from_secs(60);

/// Bytes pulled so far and in all, by layer.
#[derive(Default)]
struct Progress {
    layers: HashMap<String, (u64, u64)>,
}

impl Progress {
    fn note(
        &mut self,
        layer: Option<&str>,
        status: Option<&str>,
        current: Option<i64>,
        total: Option<i64>,
    ) {
        let Some(layer) = layer else { return };
        let entry = self.layers.entry(layer.to_string()).or_default();
        let (current, total) = (
            current.unwrap_or(0).max(0) as u64,
            total.unwrap_or(0).max(0) as u64,
        );
        match status {
            Some("Downloading") if total > 0 => *entry = (current.min(total), total),
            Some("Download complete" | "Pull complete" | "Already exists") => entry.0 = entry.1,
            _ => {}
        }
    }

    /// `pulling IMAGE: 45%`, or `pulling IMAGE` before any size is known.
    fn message(&self, image: &str) -> String {
        let (done, all) = self.layers.values().fold((0u64, 0u64), |(d, a), (c, t)| {
            (d.saturating_add(*c), a.saturating_add(*t))
        });
        match done.saturating_mul(100).checked_div(all) {
            Some(percent) => format!("pulling {image}: {percent}%"),
            None => format!("pulling {image}"),
        }
    }
}

enum Pull {
    Running(Arc<Mutex<Progress>>),
    Done(Instant),
    Failed(Failure),
}

/// The pulls of one provider, by image and by whose credentials they were made with (see [`key`]).
#[derive(Default)]
pub struct Pulls {
    by_image: Mutex<HashMap<String, Pull>>,
    /// Images pulled with an endpoint's own credentials: private, so another endpoint may use the copy
    /// on the engine only once a pull with its own credentials (or none) succeeds.
    private: Mutex<std::collections::HashSet<String>>,
}

/// What a pull is known by: the image, and a digest of the endpoint's own credentials when it has some (an
/// endpoint without never shares the pull of one with).
pub fn key(image: &str, own: Option<&(String, String)>) -> String {
    use sha2::{Digest, Sha256};
    match own {
        None => image.to_string(),
        Some((user, password)) => {
            let digest = Sha256::digest(format!("{user}\0{password}").as_bytes());
            format!("{image} as {}", crate::crypto::hex(&digest[..12]))
        }
    }
}

impl Pulls {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pull>> {
        self.by_image.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where the pull of `image` stands: `None` when a pull should begin (never pulled, its retry is due, or
    /// its lasting failure was reported: each is reported once, and the next call pulls again).
    pub fn state(&self, key: &str, image: &str, always: bool) -> Option<Readiness> {
        let mut map = self.map();
        match map.get(key)? {
            Pull::Running(p) => {
                let p = p.lock().unwrap_or_else(|e| e.into_inner());
                Some(Readiness::Waiting(p.message(image)))
            }
            Pull::Done(at) if !always || at.elapsed() < FRESH => Some(Readiness::Ready),
            Pull::Done(_) => None,
            Pull::Failed(f) if f.lasting => {
                let told = f.readiness();
                map.remove(key);
                Some(told)
            }
            Pull::Failed(f) if f.due() => None,
            Pull::Failed(f) => Some(f.readiness()),
        }
    }

    /// The engine has the image of `key` already.
    pub fn have(&self, key: &str) {
        self.map()
            .insert(key.to_string(), Pull::Done(Instant::now()));
    }

    /// Forgets every pull of `image` (the engine lost it).
    pub fn forget(&self, image: &str) {
        self.map()
            .retain(|k, _| k != image && !k.starts_with(&format!("{image} as ")));
    }

    /// Whether `image` was pulled with an endpoint's own credentials.
    pub fn private(&self, image: &str) -> bool {
        self.private
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(image)
    }

    /// Starts pulling `image` in the background; says where it stands.
    /// `own`: whether the credentials are the endpoint's own (the image is then private).
    pub fn begin(
        self: &Arc<Self>,
        docker: Docker,
        (key, image): (&str, &str),
        credentials: Option<DockerCredentials>,
        own: bool,
    ) -> Readiness {
        let progress = Arc::new(Mutex::new(Progress::default()));
        let before = match self
            .map()
            .insert(key.to_string(), Pull::Running(progress.clone()))
        {
            Some(Pull::Failed(f)) if !f.lasting => f.before + 1,
            _ => 0,
        };
        let (pulls, pulling) = (self.clone(), (key.to_string(), image.to_string()));
        tokio::spawn(async move {
            let (key, image) = pulling;
            let outcome = pull(&docker, &image, credentials, &progress).await;
            let state = match outcome {
                Ok(()) => {
                    tracing::info!(%image, "image pulled");
                    if own {
                        let mut private = pulls.private.lock().unwrap_or_else(|e| e.into_inner());
                        private.insert(image.clone());
                    }
                    Pull::Done(Instant::now())
                }
                Err(why) => {
                    let retry = can_retry(&why);
                    tracing::warn!(%image, retry, "{why}");
                    let why = format!("pulling {image} failed: {why}");
                    Pull::Failed(Failure::new(why, !retry, before))
                }
            };
            pulls.map().insert(key, state);
        });
        Readiness::Waiting(format!("pulling {image}"))
    }
}

async fn pull(
    docker: &Docker,
    image: &str,
    credentials: Option<DockerCredentials>,
    progress: &Mutex<Progress>,
) -> Result<(), String> {
    let (from_image, tag) = pull_reference(image);
    let options = CreateImageOptions {
        from_image: Some(from_image),
        tag: Some(tag),
        ..Default::default()
    };
    let mut stream = docker.create_image(Some(options), None, credentials);
    while let Some(step) = stream.next().await {
        let info = step.map_err(|e| super::engine::describe(&e))?;
        let detail = info.progress_detail.as_ref();
        progress.lock().unwrap_or_else(|e| e.into_inner()).note(
            info.id.as_deref(),
            info.status.as_deref(),
            detail.and_then(|d| d.current),
            detail.and_then(|d| d.total),
        );
    }
    Ok(())
}

/// Whether a pull that failed so may work later: a registry that does not answer may come back; an image,
/// tag or account that does not exist will not.
fn can_retry(why: &str) -> bool {
    let why = why.to_ascii_lowercase();
    let lasting = [
        "not found",
        "manifest unknown",
        "unauthorized",
        "authentication required",
        "denied",
        "no basic auth credentials",
        "invalid reference",
        "repository does not exist",
    ];
    !lasting.iter().any(|l| why.contains(l))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_the_bytes_of_every_layer() {
        let mut p = Progress::default();
        assert_eq!(p.message("x:v1"), "pulling x:v1");
        p.note(Some("a"), Some("Downloading"), Some(30), Some(100));
        p.note(Some("b"), Some("Downloading"), Some(0), Some(100));
        assert_eq!(p.message("x:v1"), "pulling x:v1: 15%");
        p.note(Some("a"), Some("Download complete"), None, None);
        p.note(Some("b"), Some("Downloading"), Some(80), Some(100));
        assert_eq!(p.message("x:v1"), "pulling x:v1: 90%");
    }

    #[test]
    fn missing_images_and_refused_credentials_are_not_retried() {
        assert!(!can_retry(
            "manifest for r/x:nope not found: manifest unknown: manifest unknown"
        ));
        assert!(!can_retry(
            "Head \"http://r/v2/x/manifests/v1\": no basic auth credentials"
        ));
        assert!(!can_retry("unauthorized: authentication required"));
        assert!(can_retry(
            "Get \"http://127.0.0.1:1/v2/\": dial tcp 127.0.0.1:1: connect: connection refused"
        ));
    }

    #[test]
    fn a_failure_is_reported_once() {
        let pulls = Pulls::default();
        pulls
            .map()
            .insert("x".into(), Pull::Failed(Failure::new("no".into(), true, 0)));
        assert_eq!(
            pulls.state("x", "x", false),
            Some(Readiness::Failed("no".into()))
        );
        assert_eq!(
            pulls.state("x", "x", false),
            None,
            "the next one pulls again"
        );
        pulls.have("y");
        assert_eq!(pulls.state("y", "y", false), Some(Readiness::Ready));
        assert_eq!(
            pulls.state("y", "y", true),
            Some(Readiness::Ready),
            "fresh enough for always"
        );
    }
}
