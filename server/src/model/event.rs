//! The kinds of change recorded in the outbox, spelled as consumers see them.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventKind {
    /// A catalog item was added.
    #[serde(rename = "repo.created")]
    RepoCreated,
    /// A catalog item's recipes or facts changed.
    #[serde(rename = "repo.updated")]
    RepoUpdated,
    #[serde(rename = "repo.deleted")]
    RepoDeleted,
    #[serde(rename = "endpoint.created")]
    EndpointCreated,
    /// The spec changed.
    #[serde(rename = "endpoint.updated")]
    EndpointUpdated,
    #[serde(rename = "endpoint.deleted")]
    EndpointDeleted,
    /// The state changed (by the owner's action or the runtime): the payload has both states.
    #[serde(rename = "endpoint.status")]
    EndpointStatus,
}

impl EventKind {
    pub const ALL: [EventKind; 7] = [
        EventKind::RepoCreated,
        EventKind::RepoUpdated,
        EventKind::RepoDeleted,
        EventKind::EndpointCreated,
        EventKind::EndpointUpdated,
        EventKind::EndpointDeleted,
        EventKind::EndpointStatus,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::RepoCreated => "repo.created",
            EventKind::RepoUpdated => "repo.updated",
            EventKind::RepoDeleted => "repo.deleted",
            EventKind::EndpointCreated => "endpoint.created",
            EventKind::EndpointUpdated => "endpoint.updated",
            EventKind::EndpointDeleted => "endpoint.deleted",
            EventKind::EndpointStatus => "endpoint.status",
        }
    }

    pub fn parse(s: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spelled_the_same_by_serde_and_as_str() {
        for k in EventKind::ALL {
            assert_eq!(
                serde_json::to_value(k).ok(),
                Some(serde_json::json!(k.as_str()))
            );
            assert_eq!(EventKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(EventKind::parse("repo"), None);
    }
}
