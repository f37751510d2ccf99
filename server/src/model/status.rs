//! The endpoint as responses show it: redacted spec, health route and runtime status.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::model::endpoint::EndpointSpec;
use crate::model::lifecycle::EndpointState;

/// Runtime status. Timestamps are RFC 3339 UTC ending in `Z` (the Python client rejects `+00:00`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointStatus {
    pub state: EndpointState,
    #[serde(with = "crate::model::wire::rfc3339_z")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: DateTime<Utc>,
    #[serde(with = "crate::model::wire::rfc3339_z")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: DateTime<Utc>,
    pub ready_replica: u32,
    pub target_replica: u32,
    /// Why the endpoint is in its state, for humans (e.g. the cause of `failed`).
    pub message: Option<String>,
    /// Where to send inference requests; set once the endpoint serves.
    pub url: Option<String>,
    pub created_by: ActorOut,
    pub updated_by: ActorOut,
}

/// Who created or last changed an endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ActorOut {
    pub id: String,
    pub name: String,
}

/// An endpoint in a response: the spec's fields at the top level (secrets redacted), plus `healthRoute`,
/// `status`, and `accountId` (always null; the real service keeps it for a retired private-link field).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointOut {
    #[serde(flatten)]
    pub spec: EndpointSpec,
    pub health_route: String,
    pub status: EndpointStatus,
    pub account_id: Option<String>,
}

/// Fields a response carries that are not part of the spec. They are ignored on input, so the body of a
/// `GET` can be edited and sent back as it is.
pub const RESPONSE_ONLY_FIELDS: [&str; 3] = ["status", "healthRoute", "accountId"];

/// Removes the response-only fields from an endpoint body, leaving its spec.
pub fn strip_response_fields(body: &mut serde_json::Value) {
    if let serde_json::Value::Object(m) = body {
        for k in RESPONSE_ONLY_FIELDS {
            m.remove(k);
        }
    }
}

impl EndpointOut {
    /// Builds a response body. Redacts the spec itself (redacting twice is harmless), so no caller can
    /// forget to and leak a secret.
    pub fn new(spec: EndpointSpec, status: EndpointStatus) -> EndpointOut {
        EndpointOut {
            health_route: spec.health_route(),
            spec: spec.redacted(),
            status,
            account_id: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::endpoint::tests::client_body;
    use chrono::TimeZone;
    use serde_json::{json, Value};

    fn status() -> EndpointStatus {
        let at = Utc.with_ymd_and_hms(2026, 11, 22, 4, 34, 19).unwrap();
        let alice = ActorOut {
            id: "u1".into(),
            name: "alice".into(),
        };
        EndpointStatus {
            state: EndpointState::Pending,
            created_at: at,
            updated_at: at,
            ready_replica: 0,
            target_replica: 1,
            message: None,
            url: None,
            created_by: alice.clone(),
            updated_by: alice,
        }
    }

    #[test]
    fn response_has_what_the_python_client_reads() {
        let spec = EndpointSpec::parse(&client_body()).unwrap();
        let out = serde_json::to_value(EndpointOut::new(spec, status())).unwrap();
        assert_eq!(out["name"], "finbert-classifier");
        assert_eq!(out["type"], "authenticated");
        assert_eq!(out["healthRoute"], "/health");
        assert_eq!(out["model"]["repository"], "ProsusAI/finbert");
        assert_eq!(out["model"]["framework"], "pytorch");
        assert_eq!(out["model"]["revision"], Value::Null);
        assert_eq!(out["model"]["task"], "text-classification");
        assert_eq!(out["model"]["secrets"], json!({"MY_SECRET_KEY": null}));
        assert_eq!(out["status"]["state"], "pending");
        assert_eq!(out["status"]["createdAt"], "2026-11-22T04:34:19.000Z");
        assert_eq!(out["status"]["updatedAt"], "2026-11-22T04:34:19.000Z");
        assert_eq!(out["status"]["url"], Value::Null);
        assert_eq!(
            out["status"]["createdBy"],
            json!({"id": "u1", "name": "alice"})
        );
        assert_eq!(out["accountId"], Value::Null);
        assert!(!out.to_string().contains("secret_value"));
    }

    #[test]
    fn response_reads_back() {
        let spec = EndpointSpec::parse(&client_body()).unwrap();
        let out = EndpointOut::new(spec, status());
        let text = serde_json::to_string(&out).unwrap();
        let back: EndpointOut = serde_json::from_str(&text).unwrap();
        assert_eq!(back, out);
    }
}
