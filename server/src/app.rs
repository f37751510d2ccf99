//! Assembles the service from its config: store, secrets key, hardware, catalog, first admin, listener.
//!
//! Start order: bind → [`check`] (the settings and every file they name, touching nothing) → data dir
//! (closed to other users) → secrets key → store (migrations) → catalog seed (first start only) → first
//! administrator (empty store only) → the data dir's files closed to other users → replica directory and
//! user → serve. `switchyard config check` runs the same [`check`]. Shutdown: stop accepting, finish
//! in-flight requests, close the store.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::api::{self, AppInner, AppState};
use crate::catalog::{load_seed, CatalogCache};
use crate::clock::{Clock, SystemClock};
use crate::config::{Config, ProviderName};
use crate::crypto::{random_id, SecretBox};
use crate::hardware::HardwareList;
use crate::model::catalog::CatalogEntry;
use crate::proxy::{self, Proxy};
use crate::runtime::cluster::Follower;
use crate::runtime::docker::DockerProvider;
use crate::runtime::isolation::ReplicaHome;
use crate::runtime::local::LocalProvider;
use crate::runtime::provider::ReplicaProvider;
use crate::runtime::reconciler::Reconciler;
use crate::runtime::repositories::Repositories;
use crate::services::accounts::bootstrap_admin;
use crate::store::cluster::{ServerInfo, Topic};
use crate::store::{SqlStore, Store, StoreUrl};

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StartError(pub String);

fn fail(context: &str) -> impl FnOnce(String) -> StartError + '_ {
    move |e| StartError(format!("{context}: {e}"))
}

/// Names that differ only in case from an older account's were allowed once; they keep working, and
/// every start says which they are until they are renamed or deleted.
async fn report_name_clashes(store: &dyn Store) {
    match crate::services::accounts::name_clashes(store).await {
        Ok(names) if !names.is_empty() => tracing::warn!(
            accounts = %names.join(", "),
            "these account names differ only in case from older accounts' (names are now unique without \
             regard to case): delete them (switchyard admin user delete / org delete) once their owners moved"
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "could not check account names"),
    }
}

/// The key that seals endpoint secrets: `secrets.key`, or the key file (created only when `create`).
fn open_secrets(config: &Config, create: bool) -> Result<SecretBox, StartError> {
    match &config.secrets.key {
        Some(k) => SecretBox::from_base64(k),
        None => SecretBox::from_key_file(
            &config.key_file().map_err(|e| StartError(e.to_string()))?,
            create,
        ),
    }
    .map_err(|e| StartError(e.to_string()))
}

/// What [`check`] found: the settings start-up needs, resolved, and the files they name, loaded.
pub struct Checked {
    pub data_dir: PathBuf,
    pub store_url: StoreUrl,
    /// The key from `secrets.key` or from an existing key file. `None`: no key file yet, which start-up
    /// creates for a new store and refuses for one that holds secrets (see [`SecretBox::from_key_file`]).
    pub secrets: Option<SecretBox>,
    pub hardware: HardwareList,
    pub seed: Vec<CatalogEntry>,
    /// The GPUs replicas are placed on (see [`crate::runtime::devices`]).
    pub gpus: Vec<String>,
}

/// Every check start-up makes of its config before it writes, binds or connects anything: public URL,
/// trusted proxies, outbound settings (allow list, fixed names, CA file), data dir, store URL, secrets
/// key, hardware list and catalog seed. Start-up ([`Services::open_at`]) and `switchyard config check` both call this, so they agree.
pub fn check(config: &Config) -> Result<Checked, StartError> {
    if let Some(url) = &config.runtime.public_url {
        public_host_of(url)?;
    }
    config.proxy.trusted_cidrs().map_err(StartError)?;
    crate::outbound::Outbound::builder(&config.outbound).map_err(StartError)?;
    config.oauth.check_ci_issuers().map_err(StartError)?;
    config.webhooks.settings().map_err(StartError)?;
    let data_dir = config.data_dir().map_err(|e| StartError(e.to_string()))?;
    let store_url = config.store_url().map_err(|e| StartError(e.to_string()))?;
    let key_file = config.key_file().map_err(|e| StartError(e.to_string()))?;
    let store_exists = matches!(&store_url, StoreUrl::Sqlite(p) if p.exists());
    // Read only: a missing key file is made (or refused) when the store is open.
    let secrets = match config.secrets.key.is_some() || key_file.exists() || store_exists {
        true => Some(open_secrets(config, false)?),
        false => None,
    };
    let gpus = config
        .runtime
        .gpus
        .clone()
        .unwrap_or_else(crate::runtime::devices::detected);
    let accelerators = machine_accelerators(config, &gpus)?;
    let hardware = HardwareList::load(config.catalog.hardware_file.as_deref())
        .map_err(fail("hardware list"))?
        .on_machine(&accelerators, gpus.len());
    let seed = load_seed(config.catalog.seed_file.as_deref()).map_err(fail("catalog seed"))?;
    Ok(Checked {
        data_dir,
        store_url,
        secrets,
        hardware,
        seed,
        gpus,
    })
}

/// The accelerators this server's replicas run on: `runtime.accelerators`, else what the machine has (`gpu`
/// too when it places replicas on GPUs).
fn machine_accelerators(config: &Config, gpus: &[String]) -> Result<Vec<String>, StartError> {
    let Some(listed) = &config.runtime.accelerators else {
        let mut found = crate::hardware::detected_accelerators();
        if !gpus.is_empty() && !found.iter().any(|a| a == "gpu") {
            found.push("gpu".into());
        }
        return Ok(found);
    };
    match listed
        .iter()
        .find(|a| !["cpu", "gpu", "neuron"].contains(&a.as_str()))
    {
        Some(bad) => Err(StartError(format!(
            "runtime.accelerators: unknown accelerator {bad:?} (cpu, gpu or neuron)"
        ))),
        None => Ok(listed.clone()),
    }
}

/// The host endpoints are served under, from `runtime.public_url` (or the URL the listener makes).
fn public_host_of(public_url: &str) -> Result<String, StartError> {
    crate::routing::public_host(public_url).ok_or_else(|| {
        StartError(format!(
            "runtime.public_url {public_url:?} is not an http(s) URL with a host"
        ))
    })
}

/// The store and the key that seals its secrets. For SQLite the key comes first: a first start that
/// cannot make its key leaves no database behind. A shared PostgreSQL database may be new or long in
/// use: its accounts tell whether a missing key file may be made.
async fn store_and_key(
    config: &Config,
    url: &StoreUrl,
    checked_key: Option<SecretBox>,
) -> Result<(Arc<dyn Store>, SecretBox), StartError> {
    let connect = || async {
        SqlStore::open(url, config.store.synchronous)
            .await
            .map(|s| Arc::new(s) as Arc<dyn Store>)
            .map_err(|e| fail("opening the store")(e.to_string()))
    };
    if let Some(secrets) = checked_key {
        return Ok((connect().await?, secrets));
    }
    match url {
        StoreUrl::Sqlite(path) => {
            let secrets = open_secrets(config, !path.exists())?;
            Ok((connect().await?, secrets))
        }
        StoreUrl::Postgres(_) => {
            let store = connect().await?;
            let empty = async { store.read().await?.count_accounts().await }
                .await
                .map_err(|e| fail("opening the store")(e.to_string()))?
                == 0;
            let secrets = open_secrets(config, empty)?;
            Ok((store, secrets))
        }
    }
}

/// The parts of the service that do not depend on a listener; also what `switchyard admin` opens.
pub struct Services {
    pub state: AppState,
    /// Where the reconciler publishes the routing table.
    pub table: tokio::sync::watch::Sender<Arc<crate::routing::RouteTable>>,
    pub store: Arc<dyn Store>,
    pub data_dir: PathBuf,
    /// Set when this start created the first administrator.
    pub admin_token_file: Option<PathBuf>,
    /// The GPUs replicas are placed on.
    pub devices: Arc<crate::runtime::devices::Devices>,
    /// A server's hold on its data dir and SQLite store (see [`hold_alone`]); none for `switchyard admin`.
    _alone: Vec<std::fs::File>,
}

impl Services {
    pub async fn open(config: &Config, clock: Arc<dyn Clock>) -> Result<Services, StartError> {
        let public_url = config
            .runtime
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{}", config.server.listen));
        Services::open_at(config, clock, public_url, false).await
    }

    /// Opens the services for a server whose endpoints are served under `public_url`; `serving`: for a
    /// server, which holds its data dir (and a SQLite store) alone while it runs (see [`hold_alone`]).
    pub async fn open_at(
        config: &Config,
        clock: Arc<dyn Clock>,
        public_url: String,
        serving: bool,
    ) -> Result<Services, StartError> {
        let checked = check(config)?;
        let public_host = public_host_of(&public_url)?;
        let data_dir = checked.data_dir;
        std::fs::create_dir_all(&data_dir)
            .map_err(|e| fail("creating the data dir")(format!("{}: {e}", data_dir.display())))?;
        close_data_dir(&data_dir)?;
        let alone = match serving {
            true => hold_alone(&data_dir, &checked.store_url)?,
            false => Vec::new(),
        };
        let url = checked.store_url;
        let (store, secrets) = store_and_key(config, &url, checked.secrets).await?;
        tracing::info!(store = %url.redacted(), "store open");
        let (hardware, seed) = (checked.hardware, checked.seed);
        let grace = std::time::Duration::from_millis(config.runtime.stop_grace_ms);
        let devices = crate::runtime::devices::Devices::new(checked.gpus, grace);
        let now = clock.now();
        if crate::services::catalog::seed_once(store.as_ref(), &seed, now)
            .await
            .map_err(|e| fail("seeding the catalog")(e.to_string()))?
        {
            tracing::info!(items = seed.len(), "catalog seeded");
        }
        let admin_token_file = bootstrap_admin(store.as_ref(), &data_dir, now)
            .await
            .map_err(|e| fail("creating the first administrator")(e.to_string()))?;
        report_name_clashes(store.as_ref()).await;
        if let Some(path) = &admin_token_file {
            tracing::info!(file = %path.display(), "created user 'admin'; its token is in this file (mode 0600)");
        }
        let key_file = config
            .secrets
            .key
            .is_none()
            .then(|| config.key_file().ok())
            .flatten();
        close_private_files(&data_dir, key_file);
        let (mut runtime, table) = crate::runtime::handle(
            public_url.clone(),
            public_host.clone(),
            config.runtime.log_lines,
        );
        if config.proxy.access_log {
            runtime.write_access_lines(clock.clone());
        }
        let kick = runtime.clone();
        let outbound = crate::outbound::Outbound::new(&config.outbound).map_err(StartError)?;
        let services = crate::services::Context {
            store: store.clone(),
            clock,
            secrets,
            catalog: CatalogCache::default(),
            hardware: Arc::new(hardware),
            runtime_config: config.runtime.clone(),
            quotas: config.quotas,
            analytics: config.analytics,
            revocations: Default::default(),
            public_host,
            public_url: public_url.trim_end_matches('/').to_string(),
            on_change: Arc::new(move || kick.kick()),
            engines: Arc::new(crate::engines::Engines::for_config(
                &config.runtime,
                &data_dir,
            )),
            outbound: Arc::new(outbound),
            activity: Arc::new(tokio::sync::watch::Sender::new(0)),
        };
        let oauth = Arc::new(crate::oauth::Provider::new(
            config.oauth.clone(),
            &public_url,
            &services,
            config.proxy.trusted_cidrs().map_err(StartError)?,
        ));
        match &oauth.issuer {
            Ok(issuer) => tracing::info!(%issuer, "oauth provider on"),
            Err(why) => tracing::warn!("oauth provider off: {why}"),
        }
        // Keys are loaded (the first one made) before any request: tokens are signed inside units
        // of work, which must not wait for another.
        oauth
            .reload_keys()
            .await
            .map_err(|e| fail("loading the OAuth signing keys")(e.to_string()))?;
        let state = AppState(Arc::new(AppInner {
            services,
            runtime,
            body_limit: config.server.body_limit,
            oauth,
        }));
        // Warm the catalog so the first list is fast; a failure here is retried on first use.
        if let Err(e) = state.catalog.reload(state.store.as_ref()).await {
            tracing::warn!(error = %e, "catalog not loaded yet");
        }
        Ok(Services {
            state,
            table,
            store,
            data_dir,
            admin_token_file,
            devices,
            _alone: alone,
        })
    }
}

/// Closes the data dir to every other user (0700): it holds the store, the secrets key and the admin
/// token, which neither replicas nor other local users may read.
fn close_data_dir(dir: &Path) -> Result<(), StartError> {
    dir.canonicalize()
        .and_then(|d| close(&d))
        .map(|_| ())
        .map_err(|e| {
            StartError(format!(
                "closing the data dir {} to other users (mode 0700): {e}",
                dir.display()
            ))
        })
}

/// Closes what the server keeps in the data dir (the store's files, the admin token, the `logs` and
/// `replicas` directories) and the secrets key file to other users: data dirs made before they were
/// private, and SQLite's files, made with the umask's mode. What is missing is skipped.
fn close_private_files(data_dir: &Path, key_file: Option<PathBuf>) {
    let db = crate::store::DB_FILE;
    let mut paths: Vec<PathBuf> = [db.to_string(), format!("{db}-wal"), format!("{db}-shm")]
        .into_iter()
        .chain([format!("{db}-journal"), "admin-token".to_string()])
        .map(|f| data_dir.join(f))
        .chain(key_file)
        .collect();
    for dir in ["logs", "replicas"] {
        tree(&data_dir.join(dir), 4, &mut paths);
    }
    for path in paths {
        match close(&path) {
            Ok(Some(was)) => {
                tracing::warn!(file = %path.display(), "closed to other users (its mode was {was:o})")
            }
            Ok(None) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "could not close to other users")
            }
        }
    }
}

/// `dir` and what is under it, `depth` levels down, without following links.
fn tree(dir: &Path, depth: usize, into: &mut Vec<PathBuf>) {
    into.push(dir.to_path_buf());
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        match entry.file_type() {
            Ok(t) if t.is_dir() && depth > 0 => tree(&entry.path(), depth - 1, into),
            Ok(t) if t.is_file() || t.is_dir() => into.push(entry.path()),
            _ => {}
        }
    }
}

/// Clears the group and other permission bits of `path` (never through a link); its old mode when
/// that changed it.
fn close(path: &Path) -> std::io::Result<Option<u32>> {
    let meta = std::fs::symlink_metadata(path)?;
    let mode = meta.permissions().mode() & 0o7777;
    if meta.file_type().is_symlink() || mode & 0o077 == 0 {
        return Ok(None);
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o700))?;
    Ok(Some(mode))
}

/// What runs replicas: child processes in directories of their own (`local`), or containers (`docker`).
///
/// Containers carry the store's id (the same for every server on it), so whichever server leads next
/// adopts them.
async fn replica_provider(
    config: &Config,
    services: &Services,
    clock: Arc<dyn Clock>,
) -> Result<Arc<dyn ReplicaProvider>, StartError> {
    let state = &services.state;
    let grace = Duration::from_millis(config.runtime.stop_grace_ms);
    match config.runtime.provider {
        ProviderName::Local => {
            let home =
                ReplicaHome::prepare(&config.runtime, &services.data_dir).map_err(StartError)?;
            tracing::info!(dir = %home.root.display(), user = home.user.as_ref().map(|u| u.name.as_str()), "replicas work here");
            let provider = LocalProvider::new(
                home,
                services.data_dir.join("replicas"),
                grace,
                state.runtime.logs.clone(),
                clock,
            )
            .map_err(|e| StartError(format!("preparing the replica directory: {e}")))?;
            Ok(Arc::new(provider))
        }
        ProviderName::Docker => {
            let repositories = Arc::new(Repositories::new(
                &config.models,
                &services.data_dir,
                state.outbound.clone(),
            ));
            let store_id = services
                .store
                .store_id()
                .await
                .map_err(|e| fail("reading the store's id")(e.to_string()))?;
            let provider = DockerProvider::new(
                config.runtime.docker.clone(),
                store_id,
                grace,
                repositories,
                state.runtime.logs.clone(),
                clock,
            );
            tracing::info!(host = %provider.host(), network = %config.runtime.docker.network, "replicas run as containers");
            Ok(Arc::new(provider))
        }
    }
}

/// This server's id, kept in the data dir (`node-id`), made on first start. It marks the server's
/// claims on shared work and its row among the servers, so a restart takes back its own at once (its
/// lease too). A data dir that cannot keep it gets a new id each start (its claims then wait for their
/// leases).
fn node_id(data_dir: &Path) -> String {
    let path = data_dir.join("node-id");
    if let Ok(id) = std::fs::read_to_string(&path) {
        let id = id.trim();
        if !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return id.to_string();
        }
    }
    let id = random_id();
    if let Err(e) = crate::crypto::write_private_file(&path, id.as_bytes()) {
        tracing::warn!(file = %path.display(), error = %e, "server id not kept");
    }
    id
}

/// Hears what the other servers on the store announce, for as long as the server runs: changed routes
/// and wake-ups ring the runtime, a given-up lease the election, a revocation the token caches, a recorded
/// delivery attempt the live views of the attempts.
fn listen(
    state: &AppState,
    leader_wake: Arc<tokio::sync::Notify>,
) -> impl std::future::Future<Output = ()> {
    let (store, runtime) = (state.store.clone(), state.runtime.clone());
    let (revocations, activity) = (state.revocations.clone(), state.activity.clone());
    let on = Arc::new(move |topic: Topic| match topic {
        Topic::Routes | Topic::Wake => runtime.kick(),
        Topic::Leader => leader_wake.notify_one(),
        Topic::Revoke => revocations.revoke(),
        Topic::Attempts => activity.send_modify(|n| *n += 1),
        Topic::Outbox | Topic::Mail | Topic::Notices => {}
    });
    async move { store.listen(on).await }
}

/// Holds the data dir (and a SQLite store) for this server alone, for as long as it runs: the locks go
/// with the process, however it ends. A second server on the same data dir, or on the same SQLite file,
/// is refused with what to do instead.
fn hold_alone(dir: &Path, store: &StoreUrl) -> Result<Vec<std::fs::File>, StartError> {
    let mut held = vec![lock(&dir.join("serve.lock"), || {
        format!(
            "another switchyard server uses the data dir {}: give each server a data dir of its own \
             (--data-dir, store.data_dir)",
            dir.display()
        )
    })?];
    if let StoreUrl::Sqlite(db) = store {
        let mut name = db.clone().into_os_string();
        name.push(".serve-lock");
        held.push(lock(std::path::Path::new(&name), || {
            format!(
                "another switchyard server runs on the SQLite store {}: one SQLite file serves one \
                 server; for several servers on one store, point them all at PostgreSQL \
                 (store.url = \"postgres://…\")",
                db.display()
            )
        })?);
    }
    Ok(held)
}

/// An exclusive lock on `path` (made if missing), or the error `taken` says when another process holds it.
fn lock(path: &Path, taken: impl FnOnce() -> String) -> Result<std::fs::File, StartError> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| StartError(format!("opening {}: {e}", path.display())))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(StartError(taken())),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(StartError(format!("locking {}: {e}", path.display())))
        }
    }
}

/// A built service bound to its listener, ready to run.
pub struct Application {
    listener: TcpListener,
    private_listener: Option<TcpListener>,
    services: Services,
    provider: Arc<dyn ReplicaProvider>,
    proxy: Proxy,
    webhooks: crate::config::WebhookSettings,
    mailer: crate::mail::Mailer,
    analytics: crate::config::AnalyticsConfig,
    telemetry: crate::config::TelemetryConfig,
}

/// Why the listener could not bind; a taken port names the ways to choose another.
fn bind_error(config: &Config, e: std::io::Error) -> StartError {
    let addr = config.server.listen;
    match e.kind() {
        std::io::ErrorKind::AddrInUse => StartError(format!(
            "binding {addr}: {e}: another program listens there; pass --listen ADDR (127.0.0.1:0 picks a \
             free port) or set server.listen (SWITCHYARD_LISTEN)"
        )),
        _ => StartError(format!("binding {addr}: {e}")),
    }
}

/// Whether another program already listens on `addr` (the console then takes a free port instead).
pub fn address_taken(addr: SocketAddr) -> bool {
    std::net::TcpListener::bind(addr).is_err_and(|e| e.kind() == std::io::ErrorKind::AddrInUse)
}

/// How a server's stop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// Every request was done.
    Drained,
    /// Requests were still open after [`DRAIN`]; they were cut.
    GaveUp,
}

/// How long in-flight requests get to finish after a shutdown signal before replicas are stopped anyway.
const DRAIN: Duration = Duration::from_secs(10);

impl Application {
    pub async fn build(config: &Config) -> Result<Application, StartError> {
        Application::build_with_clock(config, Arc::new(SystemClock)).await
    }

    pub async fn build_with_clock(
        config: &Config,
        clock: Arc<dyn Clock>,
    ) -> Result<Application, StartError> {
        // Bind first: a taken port fails before anything is written to the data dir.
        // Shared, a socket per data-plane worker (see `proxy::workers`).
        let listener =
            proxy::workers::bind_first(config.server.listen).map_err(|e| bind_error(config, e))?;
        let private_listener =
            match config.proxy.private_listen {
                Some(addr) => Some(TcpListener::bind(addr).await.map_err(|e| {
                    StartError(format!("binding the private entry point {addr}: {e}"))
                })?),
                None => None,
            };
        let public_url = match &config.runtime.public_url {
            Some(u) => u.clone(),
            None => format!(
                "http://{}",
                listener
                    .local_addr()
                    .map_err(|e| StartError(e.to_string()))?
            ),
        };
        let services = Services::open_at(config, clock.clone(), public_url, true).await?;
        let state = &services.state;
        let mailer = crate::mail::Mailer::new(&config.email, state.store.clone(), clock.clone())
            .map_err(StartError)?;
        if let Some(url) = &config.telemetry.otlp_url {
            state
                .outbound
                .check_url_static(url)
                .map_err(|e| StartError(format!("telemetry.otlp_url: {e}")))?;
        }
        let provider = replica_provider(config, &services, clock.clone()).await?;
        let proxy = Proxy::new(
            state.runtime.clone(),
            state.store.clone(),
            clock,
            config.proxy.clone(),
            config.server.body_limit,
            state.revocations.clone(),
        )
        .map_err(StartError)?;
        Ok(Application {
            listener,
            private_listener,
            services,
            provider,
            proxy,
            webhooks: config.webhooks.settings().map_err(StartError)?,
            mailer,
            analytics: config.analytics,
            telemetry: config.telemetry.clone(),
        })
    }

    /// The private entry point's address, when one is configured.
    pub fn private_addr(&self) -> Option<SocketAddr> {
        self.private_listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    pub fn state(&self) -> AppState {
        self.services.state.clone()
    }

    pub fn data_dir(&self) -> &std::path::Path {
        &self.services.data_dir
    }

    /// Serves until `shutdown` resolves; then stops accepting, gives in-flight requests [`DRAIN`] to
    /// finish, stops every replica and closes the store. Says whether every request was done or the drain
    /// gave up on some.
    pub async fn run(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<Stopped> {
        let Application {
            listener,
            private_listener,
            services,
            provider,
            proxy,
            webhooks,
            mailer,
            analytics,
            telemetry,
        } = self;
        let state = services.state.clone();
        let runtime = state.runtime.clone();
        let stop_rx = runtime.stopping();
        let me = ServerInfo {
            id: node_id(&services.data_dir),
            address: listener
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_default(),
            public_url: runtime.public_url.clone(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        };
        // Leadership among the servers on this store: one runs the reconciler, the others follow.
        let (lead, leadership) = watch::channel(None);
        let (leader_stop, leader_stopping) = watch::channel(false);
        let leader_wake = Arc::new(tokio::sync::Notify::new());
        let leading = tokio::spawn(crate::runtime::leader::run(
            state.store.clone(),
            me.clone(),
            lead,
            leader_wake.clone(),
            leader_stopping,
        ));
        let listening = tokio::spawn(listen(&state, leader_wake));
        let replica_timeout = proxy.config.replica_timeout();
        let table = Arc::new(services.table);
        let lead_with = {
            let (state, devices, table) = (state.clone(), services.devices.clone(), table.clone());
            let provider = provider.clone();
            move |lead: crate::runtime::leader::Lead| {
                let in_term = crate::runtime::cluster::InTerm::new(provider.clone(), lead.clone());
                Reconciler::new(
                    state.store.clone(),
                    state.clock.clone(),
                    state.secrets.clone(),
                    Arc::new(in_term),
                    state.runtime_config.clone(),
                    state.runtime.clone(),
                    table.clone(),
                )
                .with_engines(state.engines.clone())
                .with_devices(devices.clone(), state.hardware.clone())
                .with_quotas(state.quotas)
                .with_replica_timeout(replica_timeout)
                .with_lead(lead)
            }
        };
        let follower = Follower::new(
            state.store.clone(),
            runtime.clone(),
            table,
            me.id.clone(),
            replica_timeout,
            state.clock.clone(),
        );
        // The reconciler stops last, after requests drained: replicas serve until then.
        let (reconciler_stop, reconciler_stopping) = watch::channel(false);
        let reconciling = tokio::spawn(crate::runtime::cluster::serve(
            lead_with,
            leadership,
            provider,
            follower,
            runtime.clone(),
            reconciler_stopping,
        ));
        let signalled = {
            let runtime = runtime.clone();
            async move {
                shutdown.await;
                runtime.signal_stop();
            }
        };
        tokio::spawn(signalled);
        let until_stopped = |mut rx: watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        tokio::spawn(state.oauth.clone().maintain(until_stopped(stop_rx.clone())));
        let deliverer = crate::webhooks::deliver::Deliverer {
            store: state.store.clone(),
            outbound: state.outbound.clone(),
            clock: state.clock.clone(),
            secrets: state.secrets.clone(),
            settings: webhooks,
            activity: state.activity.clone(),
            node: node_id(&services.data_dir),
        };
        let delivering = tokio::spawn(deliverer.run(stop_rx.clone()));
        tokio::spawn(mailer.run(stop_rx.clone()));
        tokio::spawn(proxy::limit::give_back_memory(stop_rx.clone()));
        if let Some(url) = telemetry.otlp_url.clone() {
            let exporter = crate::telemetry::Exporter {
                url,
                every: Duration::from_secs(telemetry.otlp_interval_s.max(1)),
                outbound: state.outbound.clone(),
                table: runtime.table.clone(),
                clock: state.clock.clone(),
                server: me.id.clone(),
            };
            tokio::spawn(exporter.run(stop_rx.clone()));
        }
        let recording = analytics.enabled.then(|| {
            let recorder = crate::runtime::analytics::Recorder::new(
                state.store.clone(),
                runtime.clone(),
                state.clock.clone(),
                me.id.clone(),
                analytics,
            );
            let every = Duration::from_millis(state.runtime_config.tick_ms.clamp(10, 1000));
            tokio::spawn(recorder.run(every, stop_rx.clone()))
        });
        if let Some(l) = private_listener {
            let app = proxy::private_front(proxy.clone());
            // Served from this runtime, each connection as on a data-plane worker (the same timeouts).
            tokio::spawn(proxy::workers::accept_until(l, app, stop_rx.clone()));
        }
        // Endpoint traffic is served on the data-plane workers; the rest goes to the API's router on this
        // runtime.
        let api = proxy::router(proxy.clone()).merge(api::router(state.clone()));
        let app = proxy::Front::new(
            proxy,
            proxy::workers::OnRuntime::new(tokio::runtime::Handle::current(), api),
        );
        let (abort, aborted) = watch::channel(false);
        let serve = proxy::workers::serve(listener, app, stop_rx.clone(), aborted);
        let drained = async {
            until_stopped(stop_rx.clone()).await;
            tokio::time::sleep(DRAIN).await;
        };
        let served = tokio::select! {
            r = serve => {
                tracing::info!("every request is done; stopping");
                r.map(|()| Stopped::Drained)
            }
            _ = drained => {
                tracing::warn!("requests still open after {} s; stopping anyway", DRAIN.as_secs());
                Ok(Stopped::GaveUp)
            }
        };
        runtime.signal_stop();
        abort.send_replace(true);
        reconciler_stop.send_replace(true);
        let _ = reconciling.await;
        // The lease is given up once the replicas are stopped or left, so the next leader finds them so.
        leader_stop.send_replace(true);
        let _ = leading.await;
        listening.abort();
        let _ = delivering.await;
        if let Some(recording) = recording {
            let _ = recording.await;
        }
        state.store.close().await;
        served
    }
}
