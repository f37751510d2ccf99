//! The console's integration tests, one test binary for them all (one link instead of one per file): each
//! file beside this one is a module, its tests named `file::test`. The screen snapshots are in `snapshots/`,
//! named by the module (`console__screens__…`).

// Tests may unwrap: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod against_the_server;
mod layers;
mod screens;
