//! The console's three forms and what they share. Each form knows nothing of the console around it: the
//! state opens it, hands it keys and the server's answer, and the views draw it.
//!
//! The modules, lowest first; each imports only modules listed before it (and the crate's lower layers):
//! - `issues`: a form's issues, placed beside its fields. Imports nothing of the crate.
//! - `input`: what the forms share: the edits a key asks for, typing into a field, sending and the server's
//!   answer. Imports `issues`.
//! - `deploy`: the deploy form. Imports `effects`, `input`, `issues`.
//! - `app`: the new-app form. Imports `input`, `issues`.
//! - `webhook`: the webhook form (new or edited). Imports `input`, `issues`.

pub mod app;
pub mod deploy;
pub mod input;
pub mod issues;
pub mod webhook;
