//! Switchyard's service as a library. Modules, from the bottom up (each imports only those below it):
//!
//! - `model`: wire types and their rules, pure; `store`: persistence by area (accounts, catalog,
//!   endpoints, events) behind traits with units of work, on SQLite or PostgreSQL.
//! - `clock`, `config`, `crypto` (sealing, hashing), `passwords` (users' passwords, Argon2id),
//!   `hardware` (the compute list), `catalog` (the in-memory catalog index), `deploy` (recipe → endpoint
//!   spec plans), `auth` (the principal and `authorize(principal, namespace, resource, action)`),
//!   `outbound` (the one HTTP client for requests to the outside, refusing special-use addresses at
//!   connect time), `engines` (which launcher starts an engine image; installing the built-in engines).
//! - `signing` (Standard Webhooks signing and verifying, and which of a webhook's keys sign now), beside
//!   the store; `webhooks::receive` (the receiving server, `switchyard receive`) above it.
//! - `services`: endpoint, catalog, account and webhook operations; each change, its outbox event, its
//!   webhook deliveries and its notices commit in one unit of work. Called by the API, the CLI, the
//!   deploy path and the reconciler.
//! - `webhooks::deliver` (the workers that send the queued deliveries) and `mail` (the mailer of
//!   queued notices), above the services they take their rules from.
//! - `routing`: the routing table, backends, upstream pools and stats; published by `runtime`, read by
//!   `proxy`, and neither imports the other. `error`: the one error type the HTTP fronts answer with.
//! - `oauth`: the OAuth 2.0 / OpenID Connect provider's flows, tokens and keys.
//! - `runtime` (reconciler, scaler, replica providers, the analytics recorder), `telemetry` (the routing
//!   table's figures pushed to an OpenTelemetry collector), `proxy` (the serving data plane), `api` (axum
//!   routers: parse, authorize, call a service, render), assembled by `app`.
//!
//! `client` is the typed HTTP client of the public API, used by the console, the CLI and the tests.

// Processes, signals, descriptors and sockets are Unix's: Linux, and where a call is Linux's own (the
// proxy's direct system calls, a thread's CPU use, a child's death signal) the BSDs and macOS take a
// portable one.
#[cfg(not(unix))]
compile_error!("switchyard runs on Unix-like systems: Linux, the BSDs or macOS");

pub mod api;
pub mod app;
pub mod auth;
pub mod catalog;
pub mod client;
pub mod clock;
pub mod config;
pub mod crypto;
pub mod deploy;
pub mod engines;
pub mod error;
pub mod hardware;
pub mod mail;
pub mod model;
pub mod oauth;
pub mod outbound;
pub mod passwords;
pub mod proxy;
pub mod routing;
pub mod runtime;
pub mod services;
pub mod signing;
pub mod store;
pub mod telemetry;
pub mod webhooks;

pub use app::{Application, Services};
pub use config::Config;
