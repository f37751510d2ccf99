//! Webhooks: signatures (Standard Webhooks), the delivery workers that drain the outbox's deliveries,
//! and the receiving server.

pub mod deliver;
pub mod receive;
pub mod signature;
