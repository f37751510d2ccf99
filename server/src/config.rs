//! Settings: one TOML file, overridden by `SWITCHYARD_*` environment variables, then by flags.
//!
//! Paths: `~` and `~/…` start at the home directory wherever a path is configured; `~user` is
//! refused. A relative path is refused in the config file (the server's working directory should not
//! decide where its data goes) and resolved against the working directory when it comes from an
//! environment variable or a flag, typed where the command runs.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::model::Cidr;
use crate::store::Synchronous;

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub store: StoreConfig,
    pub secrets: SecretsConfig,
    pub catalog: CatalogConfig,
    pub runtime: RuntimeConfig,
    pub proxy: ProxyConfig,
    pub quotas: QuotaConfig,
    pub oauth: OAuthConfig,
    pub outbound: OutboundConfig,
    pub webhooks: WebhooksConfig,
    pub email: EmailConfig,
    pub log: LogConfig,
    pub models: ModelsConfig,
    pub analytics: AnalyticsConfig,
    pub telemetry: TelemetryConfig,
}

/// What the server keeps of each endpoint's traffic and fleet over time (the analytics API, the console's
/// charts), in the store: a sample every 10 s and every minute, each kept this long.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AnalyticsConfig {
    /// Off: nothing is recorded (the proxy's counters and `/metrics` are as before).
    pub enabled: bool,
    /// How long the 10-second samples are kept, in seconds (default an hour).
    pub keep_10s_s: u64,
    /// How long the 1-minute samples and the decisions are kept, in seconds (default 7 days).
    pub keep_1m_s: u64,
}

impl Default for AnalyticsConfig {
    fn default() -> Self {
        AnalyticsConfig {
            enabled: true,
            keep_10s_s: 3600,
            keep_1m_s: 7 * 86_400,
        }
    }
}

/// Pushing the endpoints' series to an OpenTelemetry collector.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP metrics URL (`http://collector:4318/v1/metrics`); none: nothing is pushed.
    /// Sent through the outbound guard (`[outbound] allow` for a collector on a private address).
    pub otlp_url: Option<String>,
    /// Seconds between pushes.
    pub otlp_interval_s: u64,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            otlp_url: None,
            otlp_interval_s: 60,
        }
    }
}

/// Where model repositories come from, for replicas that mount them at `/repository` (the Docker provider).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ModelsConfig {
    /// The hub whose HTTP API repositories are fetched through (`/api/models/…/revision/…`,
    /// `/…/resolve/…`), through the outbound guard (`[outbound] allow` for a hub on a private address).
    pub hub_url: String,
    /// Serve repositories from this directory instead (`<mirror_dir>/<org>/<name>`), for offline machines:
    /// nothing is fetched.
    pub mirror_dir: Option<PathBuf>,
}

impl Default for ModelsConfig {
    fn default() -> Self {
        ModelsConfig {
            hub_url: "https://huggingface.co".into(),
            mirror_dir: None,
        }
    }
}

/// What a namespace (a user or an organization) may hold, unless an administrator set otherwise for it
/// (`switchyard admin quota set`). Instance types are limited by the hardware list's `maxAccelerators`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct QuotaConfig {
    /// Endpoints in one namespace.
    pub endpoints: u32,
    /// Replicas one namespace's endpoints may run at once: the sum of their `maxReplica`.
    pub replicas: u32,
}

impl Default for QuotaConfig {
    fn default() -> Self {
        QuotaConfig {
            endpoints: 100,
            replicas: 32,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address the public API listens on.
    pub listen: SocketAddr,
    /// Largest request body accepted, in bytes; larger ones get 413.
    pub body_limit: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            body_limit: 1024 * 1024,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// Where the SQLite file, the secrets key and the admin token live. Default: the platform data dir.
    pub data_dir: Option<PathBuf>,
    /// The database: `postgres://user:password@host/db` for PostgreSQL, or `sqlite://PATH`. Default:
    /// the SQLite file `switchyard.db` in the data dir.
    pub url: Option<String>,
    /// `normal` keeps every acknowledged write across a crash or kill of the process; `full` also
    /// across a power loss, at the cost of one fsync per write.
    pub synchronous: Synchronous,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            data_dir: None,
            url: None,
            synchronous: Synchronous::Normal,
        }
    }
}

#[derive(Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SecretsConfig {
    /// Base64 of a 32-byte AES-256-GCM key. Prefer `key_file` or the environment for this.
    pub key: Option<String>,
    /// Key file; created with mode 0600 if missing. Default: `<data_dir>/secret.key`.
    pub key_file: Option<PathBuf>,
}

impl std::fmt::Debug for SecretsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretsConfig")
            .field("key", &self.key.as_ref().map(|_| "<redacted>"))
            .field("key_file", &self.key_file)
            .finish()
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct CatalogConfig {
    /// Catalog loaded into an empty store at first start. Default: the built-in seed.
    pub seed_file: Option<PathBuf>,
    /// Compute offered to endpoints. Default: the built-in hardware list.
    pub hardware_file: Option<PathBuf>,
}

/// Who may run `custom` images, whose `model.command` is code execution on the host.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CustomCommands {
    /// Instance administrators (and the users named in `custom_command_users`).
    #[default]
    Admins,
    /// Anyone who may change endpoints in the namespace.
    Everyone,
    /// Nobody: custom images are refused.
    Nobody,
}

/// How replicas are run and scaled.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeConfig {
    /// Base of each endpoint's `status.url` (`<public_url>/endpoints/<ns>/<name>`). Default: `http://<listen>`.
    pub public_url: Option<String>,
    /// How often the reconciler looks at every endpoint, in milliseconds (changes through the API kick it at once).
    pub tick_ms: u64,
    /// A replica that has not answered its health route this long after start counts as a failed start.
    pub start_timeout_s: u64,
    /// Between SIGTERM to a replica's process group and SIGKILL.
    pub stop_grace_ms: u64,
    /// Restart delay after a replica exits: starts here, doubles on each exit, capped by `backoff_max_ms`.
    pub backoff_initial_ms: u64,
    pub backoff_max_ms: u64,
    /// An endpoint whose replicas exit this many times within `crash_window_s` is `failed`
    /// (or `updateFailed` when the old replicas still serve).
    pub max_crashes: u32,
    pub crash_window_s: u64,
    /// Lines of stdout/stderr kept per replica.
    pub log_lines: usize,
    pub custom_commands: CustomCommands,
    /// Users who may run custom images besides those `custom_commands` allows.
    pub custom_command_users: Vec<String>,
    /// Variable names any tenant may set in `model.env`, `model.secrets` and `customRouter.env`, whatever
    /// the launcher (beside each launcher's `tenant_env`): exact names, or a prefix ending in `*`. Names
    /// outside both lists need the `custom_commands` permission.
    pub tenant_env: Vec<String>,
    /// Base directory of the replicas' working directories; each server works in a subdirectory of its
    /// own. Must be outside the data dir. Default: `<temp dir>/switchyard-replicas-<uid>`.
    pub replica_dir: Option<PathBuf>,
    /// The user replicas run as when the server runs as root; created (a system user) when missing.
    /// Default: `switchyard-replica`. Setting it on a server that does not run as root is an error.
    pub replica_user: Option<String>,
    /// Where `switchyard engines install` puts the built-in engines. Default: `<data-dir>/engines`; on a
    /// server running as root (its replicas run as another user, who cannot enter the data dir),
    /// `/var/lib/switchyard/engines/<hash of the data dir>`. Replicas must be able to reach it.
    pub engines_dir: Option<PathBuf>,
    /// The accelerators this server's replicas can use (`cpu`, `gpu`, `neuron`): compute of any other kind
    /// is listed `unavailable`, deploys of it are refused (409) and creates too (400 at `compute`).
    /// Default: what this machine has (`cpu`; `gpu` with an NVIDIA device, `/dev/nvidia0`; `neuron` with
    /// `/dev/neuron0`).
    pub accelerators: Option<Vec<String>>,
    /// The GPUs replicas are placed on, as CUDA numbers them (`["0", "1"]`): each replica of a `gpu`
    /// instance gets devices of its own (`CUDA_VISIBLE_DEVICES`), and waits when too few are free. Default:
    /// what `nvidia-smi` lists, else the `/dev/nvidiaN` devices there are. Listing any makes `gpu` one of
    /// this server's accelerators (unless `accelerators` says otherwise).
    pub gpus: Option<Vec<String>>,
    /// One launcher per engine image key (`tei`, `llamacpp`, `vLLM`, `sGLang`, `tgi`, `hub`, …).
    pub launchers: std::collections::BTreeMap<String, Launcher>,
    /// Custom-router sidecars by image tag (`customRouter.tag`); `{port}` is the port it listens on.
    pub routers: std::collections::BTreeMap<String, Launcher>,
    pub scaling: ScalingConfig,
    /// What runs replicas: `local` (child processes; needs nothing installed) or `docker` (the image each
    /// spec names, on a Docker Engine: see `[runtime.docker]`). `SWITCHYARD_RUNTIME_PROVIDER` overrides it.
    pub provider: ProviderName,
    pub docker: DockerConfig,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ProviderName {
    #[default]
    Local,
    Docker,
}

/// When the Docker provider pulls an image.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PullPolicy {
    /// Only when the engine does not have it.
    #[default]
    Missing,
    /// Before each replica starts (a pull of the same image within the last minute counts).
    Always,
    /// Never: an image the engine does not have fails the endpoint.
    Never,
}

/// The Docker replica provider (`[runtime] provider = "docker"`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DockerConfig {
    /// The engine: `unix:///var/run/docker.sock`, `tcp://host:2375`. Default: `DOCKER_HOST`, else the local
    /// socket.
    pub host: Option<String>,
    /// Replicas join the bridge `<network>-<namespace>` (one per namespace, created when missing); the
    /// server reaches them on it.
    pub network: String,
    pub pull: PullPolicy,
    /// Whether `serve` stops its containers when it stops. By default they keep running, and the next
    /// server adopts those that still match their endpoint's spec.
    pub stop_on_shutdown: bool,
    /// Most processes (threads included) one container may run.
    pub pids_limit: i64,
    /// Size of the tmpfs each container gets at `/tmp`, in MiB.
    pub tmp_mib: u64,
    /// Capabilities every replica's container is granted back (all are dropped; `NET_BIND_SERVICE` is
    /// granted anyway when the engine's port is below 1024). For engines that switch users at start
    /// (`SETUID`, `SETGID`) or change file owners (`CHOWN`).
    pub cap_add: Vec<String>,
    /// Whether the container's root filesystem is read-only (it writes to `/tmp` and `/data` only). Set
    /// false for an engine that writes elsewhere.
    pub read_only_root: bool,
    /// Credentials for pulls from a registry, by its host (`"ghcr.io"`, `"registry.local:5000"`); an
    /// endpoint's own `custom.credentials` win.
    pub registries: std::collections::BTreeMap<String, RegistryLogin>,
}

impl Default for DockerConfig {
    fn default() -> Self {
        DockerConfig {
            host: None,
            network: "switchyard".into(),
            pull: PullPolicy::Missing,
            stop_on_shutdown: false,
            pids_limit: 4096,
            tmp_mib: 1024,
            cap_add: Vec::new(),
            read_only_root: true,
            registries: Default::default(),
        }
    }
}

/// A registry account the Docker provider pulls with.
#[derive(Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RegistryLogin {
    pub username: String,
    pub password: String,
}

/// Shows the account, never its password.
impl std::fmt::Debug for RegistryLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryLogin")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            public_url: None,
            tick_ms: 1000,
            start_timeout_s: 600,
            stop_grace_ms: 5000,
            backoff_initial_ms: 1000,
            backoff_max_ms: 60_000,
            max_crashes: 5,
            crash_window_s: 600,
            log_lines: 2000,
            custom_commands: CustomCommands::Admins,
            custom_command_users: Vec::new(),
            tenant_env: DEFAULT_TENANT_ENV.iter().map(|s| s.to_string()).collect(),
            replica_dir: None,
            replica_user: None,
            engines_dir: None,
            accelerators: None,
            gpus: None,
            launchers: Default::default(),
            routers: Default::default(),
            scaling: ScalingConfig::default(),
            provider: ProviderName::Local,
            docker: DockerConfig::default(),
        }
    }
}

/// What every tenant may set by default: the hub token (to download gated models) and log verbosity.
pub const DEFAULT_TENANT_ENV: [&str; 4] = [
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "LOG_LEVEL",
    "RUST_LOG",
];

/// How an engine image is started on this host. `command` may use `{port}`, `{repository}`,
/// `{revision}` (the spec's, or `main`), `{model_file}` (llamacpp `modelPath`) and `{model_file_name}` (that
/// path inside the model's repository: without `/repository/`). Each replica runs in a
/// directory of its own, which is its working directory and `HOME`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Launcher {
    pub command: Vec<String>,
    /// Health route of the engine when the image names none.
    pub health_route: Option<String>,
    /// Extra environment for the engine (beside the spec's env and secrets).
    pub env: std::collections::BTreeMap<String, String>,
    /// Variable names a tenant may set for this engine, beside `runtime.tenant_env`: exact names, or a
    /// prefix ending in `*` (`MAX_BATCH_*`).
    pub tenant_env: Vec<String>,
    /// Flags a tenant may append in `model.args` (`--max-model-len`), as `--flag`, `--flag=value` or
    /// `--flag value`. Any other argument needs the `custom_commands` permission. Not used by routers.
    pub tenant_args: Vec<String>,
    /// Under the Docker provider, the image containers of this key run instead of the spec's (for a key
    /// that names none, such as `hub`); for a router, its sidecar's image (its `command`, when set, replaces
    /// the image's entrypoint; `{port}` is the spec's `customRouter.port`).
    pub image: Option<String>,
}

/// The scaling engine's windows; see `runtime::scaler`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ScalingConfig {
    /// Load samples are averaged over this window.
    pub evaluation_window_s: u64,
    /// A scale-up acts only on what the whole window asked for (its lowest recommendation).
    pub scale_up_stabilization_s: u64,
    /// A scale-down acts only on what the whole window asked for (its highest recommendation).
    pub scale_down_stabilization_s: u64,
    /// No change while the measure is within this fraction of its threshold.
    pub tolerance: f64,
    /// hardwareUsage threshold (percent) when the measure is null or no measure is set.
    pub default_hardware_threshold: f64,
    /// pendingRequests threshold (per replica) when the measure is null; 1.5 as on the hub.
    pub default_pending_threshold: f64,
}

impl Default for ScalingConfig {
    fn default() -> Self {
        ScalingConfig {
            evaluation_window_s: 60,
            scale_up_stabilization_s: 30,
            scale_down_stabilization_s: 300,
            tolerance: 0.1,
            default_hardware_threshold: 80.0,
            default_pending_threshold: 1.5,
        }
    }
}

/// The OAuth 2.0 / OpenID Connect provider. Lifetimes are in seconds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct OAuthConfig {
    /// The issuer, as apps see it. Default: the server's public URL (`runtime.public_url`). It must be
    /// https, except on a loopback host (development); otherwise the provider stays off and says why.
    pub issuer: Option<String>,
    pub access_token_ttl_s: u64,
    pub refresh_token_ttl_s: u64,
    pub id_token_ttl_s: u64,
    /// Authorization codes are single use and short-lived (at most 600).
    pub code_ttl_s: u64,
    /// Device authorizations (RFC 8628), and the polling interval asked of devices.
    pub device_code_ttl_s: u64,
    pub device_interval_s: u64,
    /// How long a browser stays signed in to the sign-in pages.
    pub session_ttl_s: u64,
    /// Wrong user codes a browser session may type before it is refused.
    pub device_code_attempts: u32,
    /// CI providers whose OIDC id tokens may sign in as a trusted publisher (keyless sign-in), by
    /// their exact `iss`, e.g. `https://token.actions.githubusercontent.com`. Empty: keyless sign-in is off.
    pub ci_issuers: Vec<String>,
}

impl Default for OAuthConfig {
    fn default() -> Self {
        OAuthConfig {
            issuer: None,
            access_token_ttl_s: 3600,
            refresh_token_ttl_s: 30 * 24 * 3600,
            id_token_ttl_s: 3600,
            code_ttl_s: 60,
            device_code_ttl_s: 600,
            device_interval_s: 5,
            session_ttl_s: 12 * 3600,
            device_code_attempts: 5,
            ci_issuers: Vec::new(),
        }
    }
}

impl OAuthConfig {
    /// Refuses a CI issuer that is not an https URL (plain http only on a loopback host, for
    /// development and tests): its keys are fetched from it, and tokens name it exactly.
    pub fn check_ci_issuers(&self) -> Result<(), String> {
        self.ci_issuers.iter().try_for_each(|i| check_ci_issuer(i))
    }
}

/// Whether a URL's authority (`host[:port]`) names this machine: `localhost` or a loopback address.
/// Plain-http issuers are accepted only there (development and tests).
pub fn is_loopback_host(authority: &str) -> bool {
    let host = match authority.rsplit_once(':') {
        Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => authority,
    };
    host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn check_ci_issuer(issuer: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("oauth.ci_issuers {issuer:?}: {why}"));
    let Some((scheme, rest)) = issuer.split_once("://") else {
        return bad("not an absolute URL");
    };
    if issuer.contains(['?', '#']) || issuer.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad("an issuer has no query, fragment or spaces");
    }
    let host = rest.split('/').next().unwrap_or("");
    let loopback = is_loopback_host(host);
    match scheme {
        _ if host.is_empty() => bad("no host"),
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        _ => bad("must be https (plain http only on a loopback host)"),
    }
}

/// The serving proxy.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ProxyConfig {
    /// The private entry point: serves only `private` endpoints, to callers whose private-link
    /// account (header `x-private-link-account`) is the endpoint's `privateService.accountId`. Off when unset.
    pub private_listen: Option<SocketAddr>,
    /// Peers whose `X-Forwarded-For` is believed (CIDR blocks). Everyone else is judged by the socket address.
    pub trusted_proxies: Vec<String>,
    /// `Retry-After` (seconds) on a 503 for an endpoint that is waking up.
    pub retry_after_s: u32,
    /// Requests held per endpoint while it wakes (`X-Scale-Up-Timeout`); more get 503 at once.
    pub cold_start_queue: usize,
    /// Upper bound on `X-Scale-Up-Timeout`, in seconds.
    pub max_scale_up_wait_s: u64,
    /// Total size of the response cache, and of one cached response, in bytes.
    pub cache_max_bytes: usize,
    pub cache_max_entry_bytes: usize,
    /// How long a checked bearer token is trusted by the proxy before it is looked up again.
    pub auth_cache_s: u64,
    /// Serve `/metrics` without a token (default: an instance administrator's token is needed).
    pub public_metrics: bool,
    /// A caller's connection on which no request starts for this long (seconds) is closed. A connection
    /// served by hyper (the API, the private entry point) has `header_timeout_s` alone, for both.
    pub idle_timeout_s: u64,
    /// A request head that has begun must have come whole within this (seconds), or the connection is
    /// closed.
    pub header_timeout_s: u64,
    /// How long (seconds) a caller may keep the proxy waiting mid-request: for more of a request body (408,
    /// and the connection closes), or to take more of the response (the connection is closed). Each wait
    /// counts, not the whole.
    pub caller_timeout_s: u64,
    /// How long (seconds) a replica may keep its caller waiting without a word: for the response's head
    /// (504 when it has not come), and between two reads of its body (the caller's connection is closed,
    /// the body cut short). See [`ProxyConfig::replica_timeout`].
    pub replica_timeout_s: u64,
    /// A request body must have come whole within this (seconds) from its head, however steadily it comes
    /// (408 and the connection closes): a trickle holds nothing for long.
    pub body_timeout_s: u64,
    /// Most bytes of request bodies held at once to be read whole (a cached endpoint's body is part of the
    /// cache's key): past it, bodies go on to the replica as they come, uncached.
    pub body_buffer_bytes: usize,
    /// Most callers' connections open at once (on each listener). At the bound, connections with no request
    /// going are closed, idlest first, to make room; when none is, new connections wait to be accepted.
    pub max_connections: usize,
    /// How long (microseconds) a data-plane worker keeps polling for events after a request before it
    /// sleeps (see `proxy::poll`): a replica's answer or the caller's next request is taken as it comes,
    /// without a wake-up, for at most this much CPU after each request. 0 turns it off; at most a second.
    pub busy_poll_us: u64,
    /// Whether the data plane serves the usual request on the proxy's own HTTP/1.1 path (see `proxy::own`);
    /// `false` sends every request through the general path (hyper's), to rule the own path out or to
    /// compare the two.
    pub own_path: bool,
    /// An extProc custom router that has not answered within this (milliseconds) for a request's head and
    /// body, or for a response's head, is given up on for that request (an endpoint's
    /// `customRouter.env.SWITCHYARD_EXT_PROC_TIMEOUT_MS` overrides it).
    pub ext_proc_timeout_ms: u64,
    /// What a request does when its extProc router fails it (no answer in time, an error, a closed stream):
    /// `true` sends it to the endpoint's built-in balancer, `false` refuses it with 503 (an endpoint's
    /// `customRouter.env.SWITCHYARD_EXT_PROC_FAIL_OPEN` overrides it).
    pub ext_proc_fail_open: bool,
    /// Writes one line per request a replica answered into that replica's logs (stream `access`): the
    /// method and path, the status, the time to the response's head, and what chose the replica
    /// (`by=balancer|router|fallback`). Off by default: busy endpoints would push the engines' own output
    /// out of the lines kept (`runtime.log_lines`), and each line costs the proxy about a microsecond.
    pub access_log: bool,
}

/// A timeout of `s` seconds, from a second to a year.
fn timeout(s: u64) -> std::time::Duration {
    std::time::Duration::from_secs(s.clamp(1, 365 * 86_400))
}

/// How long a caller's connection may wait for a request to begin (`idle`), for a begun head to end
/// (`header`), and on the caller mid-request (`caller`): [`ProxyConfig::client_timeouts`].
#[derive(Clone, Copy, Debug)]
pub struct ClientTimeouts {
    pub idle: std::time::Duration,
    pub header: std::time::Duration,
    pub caller: std::time::Duration,
    /// A request body's whole time (see [`ProxyConfig::body_timeout_s`]).
    pub body: std::time::Duration,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            private_listen: None,
            trusted_proxies: Vec::new(),
            retry_after_s: 5,
            cold_start_queue: 2048,
            max_scale_up_wait_s: 600,
            cache_max_bytes: 64 * 1024 * 1024,
            cache_max_entry_bytes: 1024 * 1024,
            auth_cache_s: 5,
            public_metrics: false,
            idle_timeout_s: 75,
            header_timeout_s: 60,
            caller_timeout_s: 60,
            replica_timeout_s: 600,
            body_timeout_s: 300,
            body_buffer_bytes: 64 * 1024 * 1024,
            max_connections: 10_000,
            busy_poll_us: 100,
            own_path: true,
            ext_proc_timeout_ms: 1000,
            ext_proc_fail_open: true,
            access_log: false,
        }
    }
}

impl ProxyConfig {
    /// `idle_timeout_s`, `header_timeout_s`, `caller_timeout_s` and `body_timeout_s`, each from a second to a
    /// year.
    pub fn client_timeouts(&self) -> ClientTimeouts {
        ClientTimeouts {
            idle: timeout(self.idle_timeout_s),
            header: timeout(self.header_timeout_s),
            caller: timeout(self.caller_timeout_s),
            body: timeout(self.body_timeout_s),
        }
    }

    /// `replica_timeout_s`, from a second to a year.
    pub fn replica_timeout(&self) -> std::time::Duration {
        timeout(self.replica_timeout_s)
    }

    /// `busy_poll_us`, at most a second.
    pub fn busy_poll(&self) -> std::time::Duration {
        std::time::Duration::from_micros(self.busy_poll_us.min(1_000_000))
    }

    /// `trusted_proxies` parsed; start-up refuses a list that does not parse.
    pub fn trusted_cidrs(&self) -> Result<Vec<Cidr>, String> {
        self.trusted_proxies
            .iter()
            .map(|c| Cidr::parse(c).map_err(|e| format!("proxy.trusted_proxies {c:?}: {e}")))
            .collect()
    }
}

/// Requests the server makes to the outside (client metadata documents, CI issuers' keys, webhooks).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct OutboundConfig {
    /// CIDR blocks let through although special-use (loopback, private, link-local, …). Empty: the
    /// server fetches from public addresses only.
    pub allow: Vec<String>,
    /// A CA certificate (PEM) trusted besides the public roots: a private CA in front of internal
    /// issuers, or a test CA. Unset: the public roots only.
    pub ca_file: Option<PathBuf>,
    /// Fixed addresses for host names, asked before DNS (like curl's `--resolve`):
    /// `{ "cimd.test" = "127.0.0.1" }`. What a name maps to is still checked against `allow`, so this
    /// never opens a special-use address by itself. Empty: every name goes to DNS.
    pub resolve: BTreeMap<String, String>,
}

impl OutboundConfig {
    /// `allow` parsed; start-up refuses a list that does not parse.
    pub fn allow_cidrs(&self) -> Result<Vec<Cidr>, String> {
        self.allow
            .iter()
            .map(|c| Cidr::parse(c).map_err(|e| format!("outbound.allow {c:?}: {e}")))
            .collect()
    }

    /// `resolve` parsed, names in lower case; start-up refuses an entry that is not an IP address.
    pub fn resolve_table(&self) -> Result<BTreeMap<String, IpAddr>, String> {
        self.resolve
            .iter()
            .map(|(name, ip)| {
                let ip = ip
                    .parse::<IpAddr>()
                    .map_err(|e| format!("outbound.resolve {name:?}: {ip:?}: {e}"))?;
                Ok((name.trim_end_matches('.').to_ascii_lowercase(), ip))
            })
            .collect()
    }
}

/// Webhook delivery: retries, timeouts, how hard one receiver may be pressed, how long activity is kept.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct WebhooksConfig {
    /// Delays before each retry (so one attempt more than entries), each varied by ±20 %.
    pub retry_schedule: Vec<String>,
    /// For one attempt: connecting, sending and reading the answer.
    pub timeout: String,
    /// Attempts in flight to one webhook at a time.
    pub concurrency: usize,
    /// Attempts in flight in all, per server.
    pub max_in_flight: usize,
    /// Attempts per second to one webhook; 0: no limit.
    pub rate_limit: u32,
    /// Failures in a row that open a webhook's circuit breaker: its deliveries wait (no attempt is
    /// spent) for `breaker_hold`, then one probe goes.
    pub breaker_failures: u32,
    pub breaker_hold: String,
    /// A webhook failing without a success for this long, once a delivery runs out of attempts, is
    /// disabled and its owner told.
    pub disable_after: String,
    /// Finished deliveries, their attempts and payloads are kept this long.
    pub retention: String,
    /// A worker's claim on a delivery; a worker that dies leaves it to another once it runs out.
    pub lease: String,
}

impl Default for WebhooksConfig {
    fn default() -> Self {
        WebhooksConfig {
            retry_schedule: ["5s", "5m", "30m", "2h", "5h", "10h", "10h"]
                .map(String::from)
                .to_vec(),
            timeout: "15s".into(),
            concurrency: 16,
            max_in_flight: 512,
            rate_limit: 0,
            breaker_failures: 5,
            breaker_hold: "30s".into(),
            disable_after: "5d".into(),
            retention: "30d".into(),
            lease: "60s".into(),
        }
    }
}

/// Mail for notifications (endpoint state changes, disabled webhooks).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct EmailConfig {
    /// The SMTP server, as a URL: `smtp://host:25` (plain), `smtp://host:587?tls=required`
    /// (STARTTLS), `smtps://user:password@host:465` (TLS from the start). Unset: mail is not sent (each
    /// queued mail is marked failed with that reason).
    pub smtp_url: Option<String>,
    /// The sender.
    pub from: String,
    /// For one mail: connecting and the whole SMTP exchange.
    pub timeout: String,
}

impl Default for EmailConfig {
    fn default() -> Self {
        EmailConfig {
            smtp_url: None,
            from: "Switchyard <switchyard@localhost>".into(),
            timeout: "30s".into(),
        }
    }
}

/// The lease a delivery worker keeps in hand beyond `webhooks.timeout` when it starts an attempt.
pub const LEASE_MARGIN: std::time::Duration = std::time::Duration::from_secs(1);

/// [`WebhooksConfig`] with its spans parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookSettings {
    pub retry_schedule: Vec<std::time::Duration>,
    pub timeout: std::time::Duration,
    pub concurrency: usize,
    pub max_in_flight: usize,
    pub rate_limit: u32,
    pub breaker_failures: u32,
    pub breaker_hold: std::time::Duration,
    pub disable_after: std::time::Duration,
    pub retention: std::time::Duration,
    pub lease: std::time::Duration,
}

impl WebhooksConfig {
    /// The settings parsed; start-up refuses a span that does not parse.
    pub fn settings(&self) -> Result<WebhookSettings, String> {
        let span = |key: &str, v: &str| parse_span(v).map_err(|e| format!("webhooks.{key}: {e}"));
        let retry_schedule = self
            .retry_schedule
            .iter()
            .map(|d| span("retry_schedule", d))
            .collect::<Result<Vec<_>, _>>()?;
        let settings = WebhookSettings {
            retry_schedule,
            timeout: span("timeout", &self.timeout)?,
            concurrency: self.concurrency.max(1),
            max_in_flight: self.max_in_flight.max(1),
            rate_limit: self.rate_limit,
            breaker_failures: self.breaker_failures.max(1),
            breaker_hold: span("breaker_hold", &self.breaker_hold)?,
            disable_after: span("disable_after", &self.disable_after)?,
            retention: span("retention", &self.retention)?,
            lease: span("lease", &self.lease)?,
        };
        // A worker starts an attempt only with `timeout` + LEASE_MARGIN of its lease left: a shorter
        // lease would put every claimed delivery back, unsent, for ever.
        if settings.lease <= settings.timeout + LEASE_MARGIN {
            return Err(format!(
                "webhooks.lease must be more than {}s longer than webhooks.timeout",
                LEASE_MARGIN.as_secs()
            ));
        }
        Ok(settings)
    }
}

/// A URL with its password (the part of the userinfo after `:`) replaced by `***`.
fn redact_userinfo(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        Ok(u) => u.to_string(),
        Err(_) => "<redacted>".into(),
    }
}

/// A span such as `250ms`, `5s`, `30m`, `2h` or `5d`.
pub fn parse_span(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim();
    let bad =
        || format!("invalid span {s:?}: a number and a unit (ms, s, m, h, d), e.g. 5s or 30m");
    let unit_at = t.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (num, unit) = t.split_at(unit_at);
    let n: u64 = num.parse().map_err(|_| bad())?;
    let ms = match unit {
        "ms" => Some(1),
        "s" => Some(1_000),
        "m" => Some(60_000),
        "h" => Some(3_600_000),
        "d" => Some(86_400_000),
        _ => None,
    }
    .and_then(|unit: u64| n.checked_mul(unit))
    .filter(|ms| *ms > 0)
    .ok_or_else(bad)?;
    Ok(std::time::Duration::from_millis(ms))
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// A `tracing` filter, e.g. `info` or `switchyard_server=debug,info`.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("environment variable {var}: {message}")]
    Env { var: String, message: String },
    #[error("no data directory: set store.data_dir, SWITCHYARD_DATA_DIR or --data-dir")]
    NoDataDir,
    #[error("{key}: {message}")]
    Invalid { key: &'static str, message: String },
}

/// Environment variables read, with the setting each overrides.
pub const ENV_VARS: &[(&str, &str)] = &[
    ("SWITCHYARD_LISTEN", "server.listen"),
    ("SWITCHYARD_BODY_LIMIT", "server.body_limit"),
    ("SWITCHYARD_DATA_DIR", "store.data_dir"),
    ("SWITCHYARD_SYNCHRONOUS", "store.synchronous"),
    ("SWITCHYARD_STORE_URL", "store.url"),
    ("SWITCHYARD_SECRETS_KEY", "secrets.key"),
    ("SWITCHYARD_SECRETS_KEY_FILE", "secrets.key_file"),
    ("SWITCHYARD_CATALOG_SEED_FILE", "catalog.seed_file"),
    ("SWITCHYARD_HARDWARE_FILE", "catalog.hardware_file"),
    ("SWITCHYARD_OUTBOUND_ALLOW", "outbound.allow"),
    ("SWITCHYARD_SMTP_URL", "email.smtp_url"),
    ("SWITCHYARD_LOG", "log.level"),
    ("SWITCHYARD_RUNTIME_PROVIDER", "runtime.provider"),
];

impl Config {
    /// Parses a config file's text; its paths are resolved as a config file's (see the module comment).
    pub fn parse_toml(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let mut config = Config::parse_toml_text(text, path)?;
        config
            .resolve_file_paths(home_dir().as_deref())
            .map_err(|message| ConfigError::Parse {
                path: path.to_path_buf(),
                message,
            })?;
        Ok(config)
    }

    fn parse_toml_text(text: &str, path: &Path) -> Result<Config, ConfigError> {
        // The message and the line, not toml's rendering of it: that quotes the source line, which may
        // hold the secrets key.
        toml::from_str(text).map_err(|e| {
            let message = match e.span() {
                Some(sp) => {
                    let start = sp.start.min(text.len());
                    let line_no = text.get(..start).unwrap_or("").matches('\n').count() + 1;
                    let line = text.lines().nth(line_no - 1).unwrap_or("");
                    // The key is safe to show; the value may be the secrets key.
                    let key = line.split_once('=').map(|(k, _)| k.trim()).filter(|k| {
                        !k.is_empty()
                            && k.chars()
                                .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
                    });
                    match key {
                        Some(k) => format!("line {line_no}, key `{k}`: {}", e.message()),
                        None => format!("line {line_no}: {}", e.message()),
                    }
                }
                None => e.message().to_string(),
            };
            ConfigError::Parse {
                path: path.to_path_buf(),
                message,
            }
        })
    }

    /// The file at `path`, or the default file in the platform config dir when it exists, or defaults.
    pub fn load_file(path: Option<&Path>) -> Result<Config, ConfigError> {
        let path = match path {
            Some(p) => p.to_path_buf(),
            None => match default_config_file() {
                Some(p) if p.exists() => p,
                _ => return Ok(Config::default()),
            },
        };
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
            path: path.clone(),
            source,
        })?;
        Config::parse_toml(&text, &path)
    }

    /// Applies `SWITCHYARD_*` overrides from the given variables (the process environment in production).
    pub fn apply_env<I: IntoIterator<Item = (String, String)>>(
        &mut self,
        vars: I,
    ) -> Result<(), ConfigError> {
        for (var, value) in vars {
            let bad = |message: String| ConfigError::Env {
                var: var.clone(),
                message,
            };
            match var.as_str() {
                "SWITCHYARD_LISTEN" => {
                    self.server.listen = value.parse().map_err(|e| bad(format!("{e}")))?
                }
                "SWITCHYARD_BODY_LIMIT" => {
                    self.server.body_limit = value.parse().map_err(|e| bad(format!("{e}")))?
                }
                "SWITCHYARD_DATA_DIR" => {
                    self.store.data_dir = Some(resolve_typed_path(value.as_ref()).map_err(bad)?)
                }
                "SWITCHYARD_STORE_URL" => {
                    crate::store::StoreUrl::parse(&value).map_err(bad)?;
                    let cwd = std::env::current_dir().map_err(|e| bad(e.to_string()))?;
                    let url = resolve_store_url(&value, home_dir().as_deref(), Some(&cwd));
                    self.store.url = Some(url.map_err(bad)?)
                }
                "SWITCHYARD_SYNCHRONOUS" => {
                    self.store.synchronous = match value.as_str() {
                        "normal" => Synchronous::Normal,
                        "full" => Synchronous::Full,
                        _ => return Err(bad("expected normal or full".into())),
                    }
                }
                "SWITCHYARD_SECRETS_KEY" => self.secrets.key = Some(value),
                "SWITCHYARD_SECRETS_KEY_FILE" => {
                    self.secrets.key_file = Some(resolve_typed_path(value.as_ref()).map_err(bad)?)
                }
                "SWITCHYARD_CATALOG_SEED_FILE" => {
                    self.catalog.seed_file = Some(resolve_typed_path(value.as_ref()).map_err(bad)?)
                }
                "SWITCHYARD_HARDWARE_FILE" => {
                    self.catalog.hardware_file =
                        Some(resolve_typed_path(value.as_ref()).map_err(bad)?)
                }
                "SWITCHYARD_OUTBOUND_ALLOW" => {
                    let allow: Vec<String> = value
                        .split(',')
                        .map(str::trim)
                        .filter(|c| !c.is_empty())
                        .map(str::to_string)
                        .collect();
                    for c in &allow {
                        Cidr::parse(c).map_err(|e| bad(format!("{c:?}: {e}")))?;
                    }
                    self.outbound.allow = allow;
                }
                "SWITCHYARD_LOG" => self.log.level = value,
                "SWITCHYARD_SMTP_URL" => self.email.smtp_url = Some(value),
                "SWITCHYARD_RUNTIME_PROVIDER" => {
                    self.runtime.provider = match value.as_str() {
                        "local" => ProviderName::Local,
                        "docker" => ProviderName::Docker,
                        _ => return Err(bad("expected local or docker".into())),
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The paths a config file sets, by key (a SQLite `store.url` is one too: see [`resolve_store_url`]).
    fn paths_mut(&mut self) -> [(&'static str, &mut Option<PathBuf>); 8] {
        [
            ("store.data_dir", &mut self.store.data_dir),
            ("secrets.key_file", &mut self.secrets.key_file),
            ("catalog.seed_file", &mut self.catalog.seed_file),
            ("catalog.hardware_file", &mut self.catalog.hardware_file),
            ("runtime.replica_dir", &mut self.runtime.replica_dir),
            ("runtime.engines_dir", &mut self.runtime.engines_dir),
            ("outbound.ca_file", &mut self.outbound.ca_file),
            ("models.mirror_dir", &mut self.models.mirror_dir),
        ]
    }

    /// A config file's paths: `~` expanded, a relative one refused. The message names the key.
    fn resolve_file_paths(&mut self, home: Option<&Path>) -> Result<(), String> {
        for (key, slot) in self.paths_mut() {
            if let Some(path) = slot.as_mut() {
                *path = resolve_path(path, home, None).map_err(|e| format!("{key}: {e}"))?;
            }
        }
        if let Some(url) = &self.store.url {
            let url = resolve_store_url(url, home, None).map_err(|e| format!("store.url: {e}"))?;
            self.store.url = Some(url);
        }
        Ok(())
    }

    pub fn data_dir(&self) -> Result<PathBuf, ConfigError> {
        match &self.store.data_dir {
            Some(d) => Ok(d.clone()),
            None => project_dirs()
                .map(|p| p.data_dir().to_path_buf())
                .ok_or(ConfigError::NoDataDir),
        }
    }

    /// The store to open: `store.url`, or the SQLite file in the data dir.
    pub fn store_url(&self) -> Result<crate::store::StoreUrl, ConfigError> {
        match &self.store.url {
            Some(u) => crate::store::StoreUrl::parse(u).map_err(|message| ConfigError::Invalid {
                key: "store.url",
                message,
            }),
            None => Ok(crate::store::StoreUrl::Sqlite(
                self.data_dir()?.join(crate::store::DB_FILE),
            )),
        }
    }

    pub fn key_file(&self) -> Result<PathBuf, ConfigError> {
        match &self.secrets.key_file {
            Some(f) => Ok(f.clone()),
            None => Ok(self.data_dir()?.join("secret.key")),
        }
    }

    /// The effective settings as TOML, with the secrets key and registry passwords redacted.
    pub fn to_redacted_toml(&self) -> String {
        let mut shown = self.clone();
        if shown.secrets.key.is_some() {
            shown.secrets.key = Some("<redacted>".into());
        }
        if shown.store.data_dir.is_none() {
            shown.store.data_dir = self.data_dir().ok();
        }
        if let Some(Ok(url)) = self.store.url.as_deref().map(crate::store::StoreUrl::parse) {
            shown.store.url = Some(url.redacted());
        }
        if let Some(smtp) = &self.email.smtp_url {
            shown.email.smtp_url = Some(redact_userinfo(smtp));
        }
        for login in shown.runtime.docker.registries.values_mut() {
            login.password = "<redacted>".into();
        }
        // The proxy's timeouts as the server uses them: clamped to between a second and a year.
        let (t, p) = (self.proxy.client_timeouts(), &mut shown.proxy);
        p.idle_timeout_s = t.idle.as_secs();
        p.header_timeout_s = t.header.as_secs();
        p.caller_timeout_s = t.caller.as_secs();
        p.replica_timeout_s = self.proxy.replica_timeout().as_secs();
        p.busy_poll_us = self.proxy.busy_poll().as_micros() as u64;
        toml::to_string_pretty(&shown).unwrap_or_else(|e| format!("# cannot render: {e}\n"))
    }
}

/// A configured path made usable. `~` and `~/…` start at `home`; `~user` is refused. A relative
/// path is resolved against `cwd` when one is given (a path typed where the command runs: a flag or an
/// environment variable) and refused when not (a config file's).
pub fn resolve_path(
    path: &Path,
    home: Option<&Path>,
    cwd: Option<&Path>,
) -> Result<PathBuf, String> {
    if path.as_os_str().is_empty() {
        return Err("empty path".into());
    }
    let mut parts = path.components();
    let expanded = match parts.next() {
        Some(Component::Normal(first)) if first == "~" => match home {
            Some(home) if parts.as_path().as_os_str().is_empty() => home.to_path_buf(),
            Some(home) => home.join(parts.as_path()),
            None => return Err(format!("{path:?}: no home directory is known for ~")),
        },
        Some(Component::Normal(first)) if first.as_encoded_bytes().starts_with(b"~") => {
            return Err(format!(
                "{path:?}: ~user paths are not supported; write the full path"
            ))
        }
        _ => path.to_path_buf(),
    };
    if expanded.is_absolute() {
        return Ok(expanded);
    }
    match cwd {
        Some(cwd) => Ok(cwd.join(expanded)),
        None => Err(format!(
            "relative path {path:?}: write an absolute path or one starting with ~/ \
             (a config file's paths do not depend on the directory the server starts in)"
        )),
    }
}

/// A path typed on the command line or in the environment: `~` expanded, relative to the working directory.
pub fn resolve_typed_path(path: &Path) -> Result<PathBuf, String> {
    let cwd = std::env::current_dir().map_err(|e| format!("the working directory: {e}"))?;
    resolve_path(path, home_dir().as_deref(), Some(&cwd))
}

/// `store.url` with its SQLite path resolved as [`resolve_path`] does; any other URL as it is (a bad
/// one is the start-up check's to report).
pub fn resolve_store_url(
    url: &str,
    home: Option<&Path>,
    cwd: Option<&Path>,
) -> Result<String, String> {
    use crate::store::StoreUrl;
    let Ok(StoreUrl::Sqlite(path)) = StoreUrl::parse(url) else {
        return Ok(url.to_string());
    };
    let resolved = resolve_path(&path, home, cwd)?;
    if resolved == path {
        return Ok(url.to_string());
    }
    // Written as the store writes it, less the options it sets itself (`parse` drops them anyway).
    let written = StoreUrl::Sqlite(resolved).url();
    Ok(written
        .split_once('?')
        .map_or(written.as_str(), |(u, _)| u)
        .to_string())
}

/// The user's home directory (`HOME` on Unix).
pub fn home_dir() -> Option<PathBuf> {
    directories::BaseDirs::new().map(|d| d.home_dir().to_path_buf())
}

fn project_dirs() -> Option<directories::ProjectDirs> {
    directories::ProjectDirs::from("dev", "switchyard", "switchyard")
}

/// `<platform config dir>/config.toml`, e.g. `~/.config/switchyard/config.toml`.
pub fn default_config_file() -> Option<PathBuf> {
    project_dirs().map(|p| p.config_dir().join("config.toml"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_config_parses_to_the_defaults() {
        let text = include_str!("../../config.example.toml");
        let parsed = Config::parse_toml(text, Path::new("config.example.toml")).unwrap();
        let mut expected = Config::default();
        // The example spells out the default data dir of a typical Linux box; everything else is default.
        expected.store.data_dir = parsed.store.data_dir.clone();
        assert_eq!(parsed, expected);
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let err =
            Config::parse_toml("[server]\nlisten_port = 3\n", Path::new("x.toml")).unwrap_err();
        assert!(err.to_string().contains("listen_port"), "{err}");
    }

    #[test]
    fn env_overrides() {
        let mut c = Config::default();
        c.apply_env([
            ("SWITCHYARD_LISTEN".to_string(), "0.0.0.0:9000".to_string()),
            ("SWITCHYARD_DATA_DIR".to_string(), "/tmp/sy".to_string()),
            ("SWITCHYARD_SYNCHRONOUS".to_string(), "full".to_string()),
            ("UNRELATED".to_string(), "x".to_string()),
        ])
        .unwrap();
        assert_eq!(c.server.listen.port(), 9000);
        assert_eq!(c.data_dir().unwrap(), PathBuf::from("/tmp/sy"));
        assert_eq!(c.key_file().unwrap(), PathBuf::from("/tmp/sy/secret.key"));
        assert_eq!(c.store.synchronous, Synchronous::Full);
        let err = c
            .apply_env([("SWITCHYARD_LISTEN".to_string(), "nope".to_string())])
            .unwrap_err();
        assert!(err.to_string().contains("SWITCHYARD_LISTEN"));
    }

    #[test]
    fn ci_issuers_are_https_or_loopback() {
        let c = Config::parse_toml(
            "[oauth]\nci_issuers = [\"https://token.actions.githubusercontent.com\", \"http://127.0.0.1:9\"]\n",
            Path::new("x.toml"),
        )
        .unwrap();
        assert_eq!(c.oauth.ci_issuers.len(), 2);
        assert!(c.oauth.check_ci_issuers().is_ok());
        assert!(Config::default().oauth.ci_issuers.is_empty());
        for bad in [
            "http://ci.example",
            "token.actions.githubusercontent.com",
            "https://ci.example/?x",
            "https://",
            "ftp://127.0.0.1",
            "http://localhost.evil:80",
        ] {
            let c = OAuthConfig {
                ci_issuers: vec![bad.into()],
                ..OAuthConfig::default()
            };
            let err = c.check_ci_issuers().unwrap_err();
            assert!(err.contains("oauth.ci_issuers"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_webhook_lease_leaves_room_for_an_attempt() {
        let mut c = WebhooksConfig {
            timeout: "2s".into(),
            lease: "3s".into(),
            ..WebhooksConfig::default()
        };
        let err = c.settings().unwrap_err();
        assert!(err.contains("webhooks.lease"), "{err}");
        c.lease = "3100ms".into();
        assert!(c.settings().is_ok());
    }

    #[test]
    fn outbound_allow_from_file_and_env() {
        let c = Config::parse_toml(
            "[outbound]\nallow = [\"127.0.0.0/8\", \"::1\"]\n",
            Path::new("x.toml"),
        )
        .unwrap();
        assert_eq!(c.outbound.allow_cidrs().unwrap().len(), 2);
        assert!(Config::default().outbound.allow.is_empty());

        let mut c = Config::default();
        c.apply_env([(
            "SWITCHYARD_OUTBOUND_ALLOW".to_string(),
            "127.0.0.0/8, 10.0.0.0/8,".to_string(),
        )])
        .unwrap();
        assert_eq!(c.outbound.allow, ["127.0.0.0/8", "10.0.0.0/8"]);
        let err = c
            .apply_env([(
                "SWITCHYARD_OUTBOUND_ALLOW".to_string(),
                "localhost".to_string(),
            )])
            .unwrap_err();
        assert!(
            err.to_string().contains("SWITCHYARD_OUTBOUND_ALLOW"),
            "{err}"
        );
        c.apply_env([("SWITCHYARD_OUTBOUND_ALLOW".to_string(), String::new())])
            .unwrap();
        assert!(c.outbound.allow.is_empty());

        let c = Config::parse_toml(
            "[outbound]\nca_file = \"/etc/sy/ca.pem\"\nresolve = { \"CIMD.test.\" = \"127.0.0.1\" }\n",
            Path::new("x.toml"),
        )
        .unwrap();
        assert_eq!(c.outbound.ca_file, Some(PathBuf::from("/etc/sy/ca.pem")));
        let table = c.outbound.resolve_table().unwrap();
        assert_eq!(table["cimd.test"], "127.0.0.1".parse::<IpAddr>().unwrap());
        assert!(Config::default()
            .outbound
            .resolve_table()
            .unwrap()
            .is_empty());
        let relative =
            Config::parse_toml("[outbound]\nca_file = \"ca.pem\"\n", Path::new("x.toml"));
        assert!(relative
            .unwrap_err()
            .to_string()
            .contains("outbound.ca_file"));
        let mut not_ip = Config::default();
        not_ip
            .outbound
            .resolve
            .insert("a.test".into(), "localhost".into());
        let err = not_ip.outbound.resolve_table().unwrap_err();
        assert!(err.contains("outbound.resolve"), "{err}");

        let bad = Config::parse_toml("[outbound]\nallow = [\"10/8\"]\n", Path::new("x.toml"))
            .unwrap()
            .outbound
            .allow_cidrs()
            .unwrap_err();
        assert!(bad.contains("outbound.allow"), "{bad}");
    }

    #[test]
    fn parse_errors_never_quote_the_source() {
        let err =
            Config::parse_toml("[secrets]\nkey = c2VjcmV0\n", Path::new("x.toml")).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("line 2, key `key`"), "{text}");
        assert!(!text.contains("c2VjcmV0"), "{text}");
        let c = Config {
            secrets: SecretsConfig {
                key: Some("c2VjcmV0".into()),
                key_file: None,
            },
            ..Config::default()
        };
        assert!(!format!("{c:?}").contains("c2VjcmV0"));
    }

    fn file_paths(text: &str, home: Option<&Path>) -> Result<Config, String> {
        let mut c = Config::parse_toml_text(text, Path::new("x.toml")).unwrap();
        c.resolve_file_paths(home).map(|()| c)
    }

    #[test]
    fn tilde_starts_at_home_in_every_configured_path() {
        let text = "[store]\ndata_dir = \"~/data\"\nurl = \"sqlite://~/db/s.db\"\n\
                    [secrets]\nkey_file = \"~/k\"\n\
                    [catalog]\nseed_file = \"~/seed.json\"\nhardware_file = \"~\"\n";
        let c = file_paths(text, Some(Path::new("/home/u"))).unwrap();
        assert_eq!(c.store.data_dir, Some("/home/u/data".into()));
        assert_eq!(c.secrets.key_file, Some("/home/u/k".into()));
        assert_eq!(c.catalog.seed_file, Some("/home/u/seed.json".into()));
        let hardware = c.catalog.hardware_file.clone().unwrap();
        assert_eq!(hardware.as_os_str(), "/home/u", "no trailing slash");
        assert_eq!(c.store.url.as_deref(), Some("sqlite:///home/u/db/s.db"));
        let url = c.store_url().unwrap();
        assert_eq!(
            url,
            crate::store::StoreUrl::Sqlite("/home/u/db/s.db".into())
        );
        // Absolute paths and other databases are left as they are.
        let text = "[store]\ndata_dir = \"/srv/sy\"\nurl = \"postgres://u:p@h/db\"\n";
        let c = file_paths(text, None).unwrap();
        assert_eq!(c.store.data_dir, Some("/srv/sy".into()));
        assert_eq!(c.store.url.as_deref(), Some("postgres://u:p@h/db"));
    }

    #[test]
    fn relative_paths_in_a_config_file_are_refused_by_key() {
        for (section, key) in [
            ("store", "data_dir"),
            ("secrets", "key_file"),
            ("catalog", "seed_file"),
            ("catalog", "hardware_file"),
            ("store", "url"),
        ] {
            let text = format!("[{section}]\n{key} = \"data/x\"\n");
            let err = file_paths(&text, Some(Path::new("/home/u"))).unwrap_err();
            assert!(err.starts_with(&format!("{section}.{key}: ")), "{err}");
            assert!(err.contains("relative path \"data/x\""), "{err}");
            assert!(err.contains("~/"), "{err}");
        }
        // Through the file parser: the file and the key are named.
        let err = Config::parse_toml("[store]\ndata_dir = \"./d\"\n", Path::new("/etc/s.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("/etc/s.toml: store.data_dir: relative path"),
            "{err}"
        );
    }

    #[test]
    fn tilde_user_empty_and_homeless_paths_are_refused() {
        let home = Some(Path::new("/home/u"));
        let err = resolve_path(Path::new("~bob/data"), home, None).unwrap_err();
        assert!(err.contains("~user paths are not supported"), "{err}");
        assert!(resolve_path(Path::new(""), home, Some(Path::new("/"))).is_err());
        let err = resolve_path(Path::new("~/d"), None, None).unwrap_err();
        assert!(err.contains("no home directory"), "{err}");
        // A `~` that does not start the path is an ordinary name.
        let p = resolve_path(Path::new("/srv/~x"), None, None).unwrap();
        assert_eq!(p, PathBuf::from("/srv/~x"));
    }

    #[test]
    fn typed_paths_are_relative_to_the_working_directory() {
        let (home, cwd) = (Some(Path::new("/home/u")), Some(Path::new("/work")));
        let p = resolve_path(Path::new("data"), home, cwd).unwrap();
        assert_eq!(p, PathBuf::from("/work/data"));
        let p = resolve_path(Path::new("~/d"), home, cwd).unwrap();
        assert_eq!(p, PathBuf::from("/home/u/d"));
        let url = resolve_store_url("s.db", home, cwd).unwrap();
        assert_eq!(url, "sqlite:///work/s.db");
        let mut c = Config::default();
        c.apply_env([("SWITCHYARD_DATA_DIR".to_string(), "rel".to_string())])
            .unwrap();
        let expected = std::env::current_dir().unwrap().join("rel");
        assert_eq!(c.store.data_dir, Some(expected));
        if let Some(home) = home_dir() {
            c.apply_env([("SWITCHYARD_HARDWARE_FILE".to_string(), "~/h".to_string())])
                .unwrap();
            assert_eq!(c.catalog.hardware_file, Some(home.join("h")));
        }
    }

    #[test]
    fn redacted_toml_hides_the_key() {
        let mut c = Config::default();
        c.store.data_dir = Some("/d".into());
        c.secrets.key = Some("c2VjcmV0".into());
        c.runtime.docker.registries.insert(
            "ghcr.io".into(),
            RegistryLogin {
                username: "me".into(),
                password: "ghp_registry".into(),
            },
        );
        let shown = c.to_redacted_toml();
        assert!(!shown.contains("c2VjcmV0"));
        assert!(!shown.contains("ghp_registry"), "{shown}");
        assert!(shown.contains("<redacted>"));
    }

    #[test]
    fn the_timeouts_shown_are_those_used() {
        let mut c = Config::default();
        c.store.data_dir = Some("/d".into());
        c.proxy.replica_timeout_s = 0;
        c.proxy.idle_timeout_s = 99_999_999_999_999;
        c.proxy.busy_poll_us = u64::MAX;
        let shown = c.to_redacted_toml();
        assert!(shown.contains("replica_timeout_s = 1\n"), "{shown}");
        assert!(shown.contains("idle_timeout_s = 31536000\n"), "{shown}");
        assert!(shown.contains("busy_poll_us = 1000000\n"), "{shown}");
        assert_eq!(c.proxy.busy_poll(), std::time::Duration::from_secs(1));
    }
}
