//! Webhooks: the delivery workers that drain the outbox's deliveries, and the receiving server. Their
//! signatures (Standard Webhooks) are [`crate::signing`]'s.

pub mod deliver;
pub mod receive;
