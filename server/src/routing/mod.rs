//! What the runtime publishes and the proxy reads: the routing table, backends, counters, upstream pools.
//!
//! Routes and their replicas ([`Backend`]s, each with its pool of [`upstream`] connections), the live
//! counters of each endpoint ([`Activity`], [`EndpointStats`]), host parsing, and the [`RoutingHandle`] a
//! reader holds to see the latest table and ask for a wake-up.
//!
//! It sits below both of its users: the runtime builds [`Route`]s and publishes a [`RouteTable`] on a watch
//! channel; the proxy reads the latest table and records activity. Both import it; it imports neither, and
//! neither imports the other.

pub mod access;
pub mod backend;
pub mod host;
pub mod metrics;
pub mod pace;
pub mod per_worker;
pub mod stats;
pub mod table;
pub mod upstream;
pub mod worker;

use std::sync::Arc;

use tokio::sync::{watch, Notify};

pub use access::AccessLog;
pub use backend::{Backend, EngineFigures};
pub use host::{bare_host, is_loopback_url, is_server_host, public_host};
pub use stats::{Activity, EndpointStats, Fleet, PickedBy, RouterFailure};
pub use table::{ExtProcRoute, Route, RouteTable};

/// What a reader of the routing table holds: the latest table, the bell that asks the runtime to look at
/// the endpoints now (a request waking a scaled-to-zero endpoint), and the server's own host.
#[derive(Clone)]
pub struct RoutingHandle {
    pub table: watch::Receiver<Arc<RouteTable>>,
    kick: Arc<Notify>,
    /// The host of the server's public URL, bare (see [`bare_host`]): never an endpoint's custom domain.
    pub public_host: String,
    /// Where the proxy writes access lines (see [`access`]), when the runtime reads them.
    pub access: Option<AccessLog>,
}

impl RoutingHandle {
    /// Asks the runtime to look at the endpoints now rather than at its next tick.
    pub fn kick(&self) {
        self.kick.notify_one();
    }

    /// The bell [`Self::kick`] rings, for the runtime to wait on.
    pub fn kicks(&self) -> Arc<Notify> {
        self.kick.clone()
    }
}

/// Creates the channel the runtime publishes tables on: the readers' handle (an empty table at first), and
/// the sender, for a server whose public host is `public_host` (see [`public_host`]).
pub fn channel(public_host: String) -> (RoutingHandle, watch::Sender<Arc<RouteTable>>) {
    let (tx, rx) = watch::channel(Arc::new(RouteTable::default()));
    let handle = RoutingHandle {
        table: rx,
        kick: Arc::new(Notify::new()),
        public_host,
        access: None,
    };
    (handle, tx)
}
