//! The server's integration tests, one test binary for them all (one link of the server instead of one per
//! file): each file beside this one is a module, its tests named `file::test`. To run one file's tests:
//! `cargo test --test server -- api::`.

// Tests may unwrap: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod analytics;
mod api;
mod ext_proc;
mod fuzz;
mod layers;
mod notifications;
mod oauth;
mod oauth_ci;
mod oauth_cimd;
mod proxy_http;
mod runtime;
mod store;
mod webhooks;
