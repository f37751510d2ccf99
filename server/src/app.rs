//! Assembles the service from its config: store, secrets key, hardware, catalog, first admin, listener.
//!
//! Start order: bind → data dir → secrets key → store (migrations) → hardware list → catalog seed (first start
//! only) → first administrator (empty store only) → serve. Shutdown: stop accepting, finish
//! in-flight requests, close the store.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::api::{self, AppInner, AppState};
use crate::auth::accounts::bootstrap_admin;
use crate::catalog::{load_seed, CatalogCache};
use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::crypto::SecretBox;
use crate::hardware::HardwareList;
use crate::store::{SqliteStore, Store};

/// File name of the database inside the data dir.
pub const DB_FILE: &str = "switchyard.db";

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StartError(pub String);

fn fail(context: &str) -> impl FnOnce(String) -> StartError + '_ {
    move |e| StartError(format!("{context}: {e}"))
}

/// The parts of the service that do not depend on a listener; also what `switchyard admin` opens.
pub struct Services {
    pub state: AppState,
    pub sqlite: SqliteStore,
    pub data_dir: PathBuf,
    /// Set when this start created the first administrator.
    pub admin_token_file: Option<PathBuf>,
}

impl Services {
    pub async fn open(config: &Config, clock: Arc<dyn Clock>) -> Result<Services, StartError> {
        let data_dir = config.data_dir().map_err(|e| StartError(e.to_string()))?;
        std::fs::create_dir_all(&data_dir)
            .map_err(|e| fail("creating the data dir")(format!("{}: {e}", data_dir.display())))?;
        let db_path = data_dir.join(DB_FILE);
        let new_store = !db_path.exists();
        // The key before the store: a first start that cannot make its key leaves no database behind.
        let secrets = match &config.secrets.key {
            Some(k) => SecretBox::from_base64(k),
            None => SecretBox::from_key_file(
                &config.key_file().map_err(|e| StartError(e.to_string()))?,
                new_store,
            ),
        }
        .map_err(|e| StartError(e.to_string()))?;
        let sqlite = SqliteStore::open(&db_path, config.store.synchronous)
            .await
            .map_err(|e| fail("opening the store")(e.to_string()))?;
        let hardware = HardwareList::load(config.catalog.hardware_file.as_deref())
            .map_err(fail("hardware list"))?;
        let seed = load_seed(config.catalog.seed_file.as_deref()).map_err(fail("catalog seed"))?;
        let now = clock.now();
        if sqlite
            .seed_catalog_once(&seed, now)
            .await
            .map_err(|e| fail("seeding the catalog")(e.to_string()))?
        {
            tracing::info!(items = seed.len(), "catalog seeded");
        }
        let admin_token_file = bootstrap_admin(&sqlite, &data_dir, now)
            .await
            .map_err(|e| fail("creating the first administrator")(e.to_string()))?;
        if let Some(path) = &admin_token_file {
            tracing::info!(file = %path.display(), "created user 'admin'; its token is in this file (mode 0600)");
        }
        let store: Arc<dyn Store> = Arc::new(sqlite.clone());
        let state = AppState(Arc::new(AppInner {
            store,
            clock,
            secrets,
            catalog: CatalogCache::default(),
            hardware: Arc::new(hardware),
            body_limit: config.server.body_limit,
        }));
        // Warm the catalog so the first list is fast; a failure here is retried on first use.
        if let Err(e) = state.catalog.reload(state.store.as_ref()).await {
            tracing::warn!(error = %e, "catalog not loaded yet");
        }
        Ok(Services {
            state,
            sqlite,
            data_dir,
            admin_token_file,
        })
    }
}

/// A built service bound to its listener, ready to run.
pub struct Application {
    listener: TcpListener,
    services: Services,
}

impl Application {
    pub async fn build(config: &Config) -> Result<Application, StartError> {
        Application::build_with_clock(config, Arc::new(SystemClock)).await
    }

    pub async fn build_with_clock(
        config: &Config,
        clock: Arc<dyn Clock>,
    ) -> Result<Application, StartError> {
        // Bind first: a taken port fails before anything is written to the data dir.
        let listener = TcpListener::bind(config.server.listen)
            .await
            .map_err(|e| StartError(format!("binding {}: {e}", config.server.listen)))?;
        let services = Services::open(config, clock).await?;
        Ok(Application { listener, services })
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

    /// Serves until `shutdown` resolves, then drains in-flight requests and closes the store.
    pub async fn run(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let app = api::router(self.services.state.clone());
        axum::serve(
            self.listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(shutdown)
        .await?;
        self.services.sqlite.close().await;
        Ok(())
    }
}
