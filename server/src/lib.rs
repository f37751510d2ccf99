//! Switchyard's service as a library: the `model` (wire types and their rules), the `store`
//! (persistence behind one trait), `auth` (tokens, principals, namespace access), the `api`
//! (axum routers), the in-memory `catalog` index and the `hardware` list, assembled by `app`.
//! `client` is the typed HTTP client used by the console, the CLI and the tests.

pub mod api;
pub mod app;
pub mod auth;
pub mod catalog;
pub mod client;
pub mod clock;
pub mod config;
pub mod crypto;
pub mod deploy;
pub mod hardware;
pub mod model;
pub mod proxy;
pub mod runtime;
pub mod services;
pub mod store;

pub use app::{Application, Services};
pub use config::Config;
