//! The connection to the Docker Engine: made on first use, its API version negotiated (Debian 12's engine
//! speaks 1.41, current ones more), and made again after the engine went away.

use std::time::Duration;

use bollard::{Docker, API_DEFAULT_VERSION};
use tokio::sync::Mutex;

/// Longest a single call (not a pull, a log stream or a stop) may take.
pub const CALL: Duration = Duration::from_secs(30);

/// The bollard client's own bound on a request: long, as it bounds pulls too; calls are bounded by [`CALL`].
const CLIENT_TIMEOUT: u64 = 3600;

pub struct Engine {
    /// `unix:///var/run/docker.sock`, `tcp://…`.
    pub host: String,
    client: Mutex<Option<Connected>>,
    /// The last failed connection, answered again for [`RETRY_CONNECT`] (callers do not queue behind a
    /// connection that cannot be made).
    failed: std::sync::Mutex<Option<(std::time::Instant, String)>>,
}

/// How long a failed connection stands before the next one is tried.
const RETRY_CONNECT: Duration = Duration::from_secs(2);

/// How long connecting (and negotiating the version) may take.
const CONNECT: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct Connected {
    pub docker: Docker,
    /// The CPUs of the engine's machine: a container may be given no more.
    pub cpus: Option<f64>,
}

impl Engine {
    /// The engine at `host`; else `DOCKER_HOST`, else the local socket.
    pub fn new(host: Option<&str>) -> Engine {
        let host = host
            .map(str::to_string)
            .or_else(|| std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty()))
            .unwrap_or_else(|| "unix:///var/run/docker.sock".to_string());
        Engine {
            host,
            client: Mutex::new(None),
            failed: std::sync::Mutex::new(None),
        }
    }

    /// The client, connected and its version negotiated; `Err` says why the engine cannot be used now.
    pub async fn connect(&self) -> Result<Connected, String> {
        let recent = self
            .failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some((_, why)) = recent.filter(|(at, _)| at.elapsed() < RETRY_CONNECT) {
            return Err(why);
        }
        let mut held = self.client.lock().await;
        if let Some(c) = held.as_ref() {
            return Ok(c.clone());
        }
        let connected = self.connect_now().await;
        let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        match connected {
            Ok(c) => {
                *failed = None;
                *held = Some(c.clone());
                Ok(c)
            }
            Err(why) => {
                *failed = Some((std::time::Instant::now(), why.clone()));
                Err(why)
            }
        }
    }

    async fn connect_now(&self) -> Result<Connected, String> {
        let docker = match &self.host {
            h if h.starts_with("unix://") => {
                Docker::connect_with_unix(h, CLIENT_TIMEOUT, API_DEFAULT_VERSION)
            }
            h if h.starts_with("tcp://") || h.starts_with("http://") => {
                Docker::connect_with_http(h, CLIENT_TIMEOUT, API_DEFAULT_VERSION)
            }
            h => {
                return Err(format!(
                    "[runtime.docker] host {h:?}: expected unix:///path or tcp://host:port"
                ))
            }
        }
        .map_err(|e| self.unanswered(&describe(&e)))?;
        let docker = tokio::time::timeout(CONNECT, docker.negotiate_version())
            .await
            .map_err(|_| self.unanswered("no answer"))?
            .map_err(|e| self.unanswered(&describe(&e)))?;
        let info = tokio::time::timeout(CONNECT, docker.info())
            .await
            .map_err(|_| self.unanswered("no answer"))?
            .map_err(|e| self.unanswered(&describe(&e)))?;
        tracing::info!(host = %self.host, version = ?info.server_version, api = %docker.client_version(), "connected to the Docker Engine");
        Ok(Connected {
            docker,
            cpus: info.ncpu.filter(|n| *n > 0).map(|n| n as f64),
        })
    }

    /// Forgets the connection after a call found the engine gone: the next use connects (and negotiates)
    /// again.
    pub async fn lost(&self) {
        *self.client.lock().await = None;
    }

    pub fn unanswered(&self, why: &str) -> String {
        format!("the Docker Engine at {} does not answer ({why})", self.host)
    }
}

/// What went wrong, in the engine's words when it gave any.
pub fn describe(e: &bollard::errors::Error) -> String {
    use bollard::errors::Error;
    match e {
        Error::DockerResponseServerError { message, .. } => message.trim().to_string(),
        Error::DockerStreamError { error } => error.trim().to_string(),
        other => other.to_string(),
    }
}

/// Whether an error says the engine itself could not be reached (rather than refusing a request).
pub fn unreachable(e: &bollard::errors::Error) -> bool {
    use bollard::errors::Error;
    !matches!(
        e,
        Error::DockerResponseServerError { .. } | Error::DockerStreamError { .. }
    )
}
