//! A notification as the caller's stream shows it (`GET /api/v1/notifications`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NoticeOut {
    /// Orders the stream; `?after=` this to follow it.
    pub seq: i64,
    #[serde(with = "super::wire::rfc3339_z")]
    #[schema(value_type = String)]
    pub at: DateTime<Utc>,
    /// `endpoint.running`, `endpoint.failed`, `endpoint.updateFailed`, `endpoint.scaledToZero`,
    /// `endpoint.deleted`, `webhook.disabled`.
    pub kind: String,
    /// The namespace it concerns.
    pub namespace: String,
    /// What it is about: an endpoint's name, a webhook's id.
    pub subject: String,
    pub title: String,
    pub message: Option<String>,
}
