//! The end-to-end tests of the real `switchyard` binary, one test binary for them all (one link instead of
//! one per file): each file beside this one is a module, its tests named `file::test`, and `common/` is what
//! they share. To run one file's tests: `cargo test --test e2e -- e2e_docker::`.

// Tests may unwrap: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod e2e_binary;
mod e2e_cluster;
mod e2e_cluster_docker;
mod e2e_console;
mod e2e_docker;
mod e2e_docker_engine;
#[cfg(unix)]
mod e2e_hardening;
mod e2e_oauth;
mod e2e_receive;
mod e2e_runtime;
mod e2e_webhooks_cli;
