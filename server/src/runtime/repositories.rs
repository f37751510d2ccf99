//! Model repositories for `/repository`: fetched once per revision through the hub's HTTP API into a cache in
//! the data dir, or served from a local mirror (`[models] mirror_dir`), for a provider to mount read-only.
//!
//! A fetch asks the hub for the revision's commit and files (`GET {hub}/api/models/{repo}/revision/{rev}`),
//! then downloads each file (`GET {hub}/{repo}/resolve/{commit}/{file}`, redirects followed, each hop checked
//! by the outbound guard; the endpoint's `HF_TOKEN` goes to the hub only) into
//! `<cache>/<repo>/<commit>.partial/`, resuming a file cut short with a `Range` request, and renames the
//! directory to `<cache>/<repo>/<commit>` once every file is there; `<cache>/<repo>/refs/<revision>` names
//! the commit, so the next replica of that revision finds it without asking. Progress is the endpoint's
//! status message (`downloading org/model@main: 45%`).

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::{HeaderValue, AUTHORIZATION, RANGE};
use reqwest::StatusCode;
use serde::Deserialize;

use super::provider::Readiness;
use super::retry::Failure;
use crate::config::ModelsConfig;
use crate::outbound::{FetchOptions, Outbound, OutboundError};

/// The access marker of a repository the hub served without a token.
const PUBLIC: &str = "public";

/// The access marker of `token`: a digest, never the token.
fn who(token: Option<&str>) -> String {
    use sha2::{Digest, Sha256};
    match token {
        None => PUBLIC.to_string(),
        Some(t) => crate::crypto::hex(&Sha256::digest(t.as_bytes())[..16]),
    }
}

/// How long a download may go without a byte (there is no bound on the whole).
const STALL: Duration = Duration::from_secs(60);

/// Where a repository is, for a provider to mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Here(PathBuf),
    Not(Readiness),
}

#[derive(Default)]
struct Progress {
    done: u64,
    total: u64,
    files: (usize, usize),
}

enum Fetch {
    Running(Arc<Mutex<Progress>>),
    Failed(Failure),
}

pub struct Repositories {
    cache: PathBuf,
    hub_url: String,
    mirror_dir: Option<PathBuf>,
    outbound: Arc<Outbound>,
    fetches: Mutex<HashMap<String, Fetch>>,
    commits: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// The hub's answer about one revision.
#[derive(Deserialize)]
struct Revision {
    sha: String,
    #[serde(default)]
    siblings: Vec<Sibling>,
}

#[derive(Deserialize)]
struct Sibling {
    rfilename: String,
    #[serde(default)]
    size: Option<u64>,
}

impl Repositories {
    /// Repositories cached under `data_dir/models`.
    pub fn new(config: &ModelsConfig, data_dir: &Path, outbound: Arc<Outbound>) -> Repositories {
        Repositories {
            cache: data_dir.join("models"),
            hub_url: config.hub_url.trim_end_matches('/').to_string(),
            mirror_dir: config.mirror_dir.clone(),
            outbound,
            fetches: Mutex::new(HashMap::new()),
            commits: Mutex::new(HashMap::new()),
        }
    }

    fn fetches(&self) -> std::sync::MutexGuard<'_, HashMap<String, Fetch>> {
        self.fetches.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where `repo` at `revision` is: here (mirrored, or fetched already), or not yet (a fetch begins, or goes
    /// on) or never (with why). `token` is the endpoint's `HF_TOKEN`.
    pub fn find(self: &Arc<Self>, repo: &str, revision: &str, token: Option<&str>) -> Found {
        if let Some(mirror) = &self.mirror_dir {
            let dir = mirror.join(repo);
            return if dir.is_dir() {
                Found::Here(dir)
            } else {
                Found::Not(Readiness::Failed(format!(
                    "model.repository {repo} is not in the mirror ({} has no such directory)",
                    dir.display()
                )))
            };
        }
        if let Some(dir) = self.cached(repo, revision, token) {
            return Found::Here(dir);
        }
        let key = format!("{repo}@{revision}");
        let mut fetches = self.fetches();
        match fetches.get(&key) {
            Some(Fetch::Running(p)) => {
                let p = p.lock().unwrap_or_else(|e| e.into_inner());
                return Found::Not(Readiness::Waiting(message(&key, &p)));
            }
            // Reported once: the next call fetches again.
            Some(Fetch::Failed(f)) if f.lasting => {
                let told = f.readiness();
                fetches.remove(&key);
                return Found::Not(told);
            }
            Some(Fetch::Failed(f)) if !f.due() => return Found::Not(f.readiness()),
            Some(Fetch::Failed(_)) | None => {}
        }
        let progress = Arc::new(Mutex::new(Progress::default()));
        let before = match fetches.insert(key.clone(), Fetch::Running(progress.clone())) {
            Some(Fetch::Failed(f)) if !f.lasting => f.before + 1,
            _ => 0,
        };
        drop(fetches);
        let (this, owned) = (self.clone(), (repo.to_string(), revision.to_string()));
        let token = token.map(str::to_string);
        tokio::spawn(async move {
            let (repo, revision) = owned;
            let outcome = this
                .fetch(&repo, &revision, token.as_deref(), &progress)
                .await;
            let key = format!("{repo}@{revision}");
            match outcome {
                Ok(()) => {
                    tracing::info!(repository = %key, "model repository fetched");
                    this.fetches().remove(&key);
                }
                Err((why, retry)) => {
                    tracing::warn!(repository = %key, retry, "{why}");
                    let why = format!("downloading {key} failed: {why}");
                    let failed = Failure::new(why, !retry, before);
                    this.fetches().insert(key, Fetch::Failed(failed));
                }
            }
        });
        Found::Not(Readiness::Waiting(format!("downloading {repo}@{revision}")))
    }

    /// The complete copy of `repo` at `revision`, when there is one that `token` may read: one fetched
    /// without a token, or with this one. (A copy fetched with another tenant's token is not handed out:
    /// the hub is asked again, with this token, whether it may.)
    fn cached(&self, repo: &str, revision: &str, token: Option<&str>) -> Option<PathBuf> {
        let home = self.cache.join(repo);
        let sha = std::fs::read_to_string(home.join("refs").join(revision)).ok()?;
        let dir = home.join(sha.trim());
        let access = home.join("access");
        let allowed = access.join(PUBLIC).exists() || access.join(who(token)).exists();
        (dir.is_dir() && allowed).then_some(dir)
    }

    /// The lock of one commit's download.
    fn commit_lock(&self, repo: &str, sha: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.commits.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(format!("{repo}@{sha}")).or_default().clone()
    }

    fn options(&self, token: Option<&str>) -> FetchOptions {
        let mut options = FetchOptions {
            timeout: STALL,
            max_bytes: 16 * 1024 * 1024,
            ..Default::default()
        };
        if let Some(value) = token.and_then(|t| HeaderValue::from_str(&format!("Bearer {t}")).ok())
        {
            options.headers.insert(AUTHORIZATION, value);
        }
        options
    }

    /// Fetches every file of `repo` at `revision`. `Err` says why, and whether a retry can help.
    async fn fetch(
        &self,
        repo: &str,
        revision: &str,
        token: Option<&str>,
        progress: &Mutex<Progress>,
    ) -> Result<(), (String, bool)> {
        let options = self.options(token);
        let url = format!(
            "{}/api/models/{repo}/revision/{revision}?blobs=true",
            self.hub_url
        );
        let answer = self
            .outbound
            .get(&url, &options)
            .await
            .map_err(|e| (e.to_string(), may_pass(&e)))?;
        match answer.status {
            StatusCode::OK => {}
            s @ (StatusCode::NOT_FOUND | StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) => {
                return Err((format!("the hub answered {s} for {repo}@{revision}"), false))
            }
            s => return Err((format!("the hub answered {s}"), true)),
        }
        let about: Revision = serde_json::from_slice(&answer.body)
            .map_err(|e| (format!("the hub's answer is not a revision: {e}"), true))?;
        if about.sha.len() != 40 || !about.sha.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err((format!("the hub named no commit ({:?})", about.sha), true));
        }
        let files: Vec<&Sibling> = about
            .siblings
            .iter()
            .filter(|s| safe_file(&s.rfilename))
            .collect();
        {
            let mut p = progress.lock().unwrap_or_else(|e| e.into_inner());
            p.total = files
                .iter()
                .filter_map(|s| s.size)
                .fold(0u64, u64::saturating_add);
            p.files = (0, files.len());
        }
        let home = self.cache.join(repo);
        let partial = home.join(format!("{}.partial", about.sha));
        let local = |e: std::io::Error| (format!("writing {}: {e}", partial.display()), true);
        // One fetch of a commit at a time (two revisions can name the same one).
        let lock = self.commit_lock(repo, &about.sha);
        let _writing = lock.lock().await;
        let done = home.join(&about.sha);
        if !done.is_dir() {
            make_dir(&partial).map_err(local)?;
            for sibling in files {
                self.fetch_file(repo, &about.sha, sibling, &partial, &options, progress)
                    .await?;
                let mut p = progress.lock().unwrap_or_else(|e| e.into_inner());
                p.files.0 += 1;
            }
            std::fs::rename(&partial, &done).map_err(local)?;
        }
        let refs = home.join("refs").join(revision);
        make_dir(refs.parent().unwrap_or(&home)).map_err(local)?;
        std::fs::write(&refs, &about.sha).map_err(local)?;
        // The hub let this token (or no token) read it.
        make_dir(&home.join("access")).map_err(local)?;
        std::fs::write(home.join("access").join(who(token)), b"").map_err(local)?;
        Ok(())
    }

    /// One file, resumed from what an earlier try left.
    async fn fetch_file(
        &self,
        repo: &str,
        sha: &str,
        sibling: &Sibling,
        into: &Path,
        options: &FetchOptions,
        progress: &Mutex<Progress>,
    ) -> Result<(), (String, bool)> {
        let path = into.join(&sibling.rfilename);
        let local = |e: std::io::Error| (format!("writing {}: {e}", path.display()), true);
        if let Some(parent) = path.parent() {
            make_dir(parent).map_err(local)?;
        }
        let mut have = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        if sibling.size.is_some_and(|size| have > size) {
            // Longer than the hub says: not a start of it.
            std::fs::write(&path, b"").map_err(local)?;
            have = 0;
        }
        if sibling.size.is_some_and(|size| size == have && have > 0) {
            let mut p = progress.lock().unwrap_or_else(|e| e.into_inner());
            p.done = p.done.saturating_add(have);
            return Ok(());
        }
        let mut options = options.clone();
        if have > 0 {
            if let Ok(range) = HeaderValue::from_str(&format!("bytes={have}-")) {
                options.headers.insert(RANGE, range);
            }
        }
        let url = format!(
            "{}/{repo}/resolve/{sha}/{}",
            self.hub_url, sibling.rfilename
        );
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o644)
            .open(&path)
            .map_err(local)?;
        {
            let mut p = progress.lock().unwrap_or_else(|e| e.into_inner());
            p.done = p.done.saturating_add(have);
        }
        let mut from_scratch = have == 0;
        let status = self
            .outbound
            .download(&url, &options, |status, chunk| {
                if !from_scratch && status == StatusCode::OK {
                    // The whole file comes again (the server ignored the range): only that is kept.
                    file.set_len(0)?;
                    from_scratch = true;
                }
                file.write_all(chunk)?;
                let mut p = progress.lock().unwrap_or_else(|e| e.into_inner());
                p.done = p.done.saturating_add(chunk.len() as u64);
                Ok(())
            })
            .await
            .map_err(|e| (e.to_string(), may_pass(&e)))?;
        match status {
            StatusCode::OK | StatusCode::PARTIAL_CONTENT => {}
            // Nothing past what we have: complete, if it is the size the hub said.
            StatusCode::RANGE_NOT_SATISFIABLE if sibling.size.is_none_or(|size| size == have) => {}
            s @ (StatusCode::NOT_FOUND | StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) => {
                return Err((
                    format!("the hub answered {s} for {}", sibling.rfilename),
                    false,
                ))
            }
            s => {
                return Err((
                    format!("the hub answered {s} for {}", sibling.rfilename),
                    true,
                ))
            }
        }
        let written = file.metadata().map_err(local)?.len();
        if sibling.size.is_some_and(|size| size != written) {
            // Cut short, or more than the hub said: fetched again from the start at the next try.
            file.set_len(0).map_err(local)?;
            return Err((
                format!(
                    "{} came to {written} bytes, not the {} the hub said",
                    sibling.rfilename,
                    sibling.size.unwrap_or_default()
                ),
                true,
            ));
        }
        // On disk before the copy counts as complete; a large file's flush is off the async workers.
        let synced = tokio::task::spawn_blocking(move || file.sync_all()).await;
        synced
            .map_err(|e| std::io::Error::other(e.to_string()))
            .and_then(|r| r)
            .map_err(local)?;
        Ok(())
    }
}

/// Whether an outbound failure may pass (the hub away, a connection cut), rather than last (the guard
/// refusing the hub's address, a URL that is not one, a full disk).
fn may_pass(e: &OutboundError) -> bool {
    !matches!(
        e,
        OutboundError::Refused { .. }
            | OutboundError::BadUrl(_)
            | OutboundError::Scheme(_)
            | OutboundError::NoHost
            | OutboundError::Redirected { .. }
            | OutboundError::TooLarge { .. }
            | OutboundError::Sink { .. }
    )
}

/// `downloading org/model@main: 45% (3 of 7 files)`.
fn message(key: &str, p: &Progress) -> String {
    match p.done.saturating_mul(100).checked_div(p.total) {
        Some(percent) => format!(
            "downloading {key}: {}% ({} of {} files)",
            percent.min(100),
            p.files.0,
            p.files.1
        ),
        None => format!("downloading {key}"),
    }
}

/// A directory readable by the replica (the files in it are model weights, not the server's secrets).
fn make_dir(path: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(path)
}

/// Whether a file name the hub gave stays inside the repository's directory.
fn safe_file(name: &str) -> bool {
    !name.is_empty()
        && Path::new(name)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_stay_inside_the_repository() {
        assert!(safe_file("config.json") && safe_file("onnx/model.onnx"));
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "./x"] {
            assert!(!safe_file(bad), "{bad}");
        }
    }

    #[test]
    fn progress_counts_bytes_and_files() {
        let p = Progress {
            done: 45,
            total: 100,
            files: (3, 7),
        };
        assert_eq!(
            message("o/m@main", &p),
            "downloading o/m@main: 45% (3 of 7 files)"
        );
        assert_eq!(
            message("o/m@main", &Progress::default()),
            "downloading o/m@main"
        );
    }
}
