//! Accounts: users, organizations, memberships, access tokens and their scopes.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A user's role in an organization. Order matters: later roles can do less.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Admin,
    Write,
    Contributor,
    Read,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Admin, Role::Write, Role::Contributor, Role::Read];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Write => "write",
            Role::Contributor => "contributor",
            Role::Read => "read",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// Changing endpoints in an organization takes `write` or `admin`.
    pub fn can_change_endpoints(self) -> bool {
        matches!(self, Role::Admin | Role::Write)
    }
}

/// OAuth-style scopes a token can be restricted to (service spec 5.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
pub enum Scope {
    #[serde(rename = "openid")]
    Openid,
    #[serde(rename = "profile")]
    Profile,
    #[serde(rename = "email")]
    Email,
    #[serde(rename = "read-billing")]
    ReadBilling,
    #[serde(rename = "read-memberships")]
    ReadMemberships,
    #[serde(rename = "read-repos")]
    ReadRepos,
    #[serde(rename = "gated-repos")]
    GatedRepos,
    #[serde(rename = "contribute-repos")]
    ContributeRepos,
    #[serde(rename = "write-repos")]
    WriteRepos,
    #[serde(rename = "manage-repos")]
    ManageRepos,
    #[serde(rename = "read-collections")]
    ReadCollections,
    #[serde(rename = "write-collections")]
    WriteCollections,
    #[serde(rename = "inference-api")]
    InferenceApi,
    #[serde(rename = "read-endpoints")]
    ReadEndpoints,
    #[serde(rename = "write-endpoints")]
    WriteEndpoints,
    #[serde(rename = "jobs")]
    Jobs,
    #[serde(rename = "webhooks")]
    Webhooks,
    #[serde(rename = "write-discussions")]
    WriteDiscussions,
}

impl Scope {
    pub const ALL: [Scope; 18] = [
        Scope::Openid,
        Scope::Profile,
        Scope::Email,
        Scope::ReadBilling,
        Scope::ReadMemberships,
        Scope::ReadRepos,
        Scope::GatedRepos,
        Scope::ContributeRepos,
        Scope::WriteRepos,
        Scope::ManageRepos,
        Scope::ReadCollections,
        Scope::WriteCollections,
        Scope::InferenceApi,
        Scope::ReadEndpoints,
        Scope::WriteEndpoints,
        Scope::Jobs,
        Scope::Webhooks,
        Scope::WriteDiscussions,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Openid => "openid",
            Scope::Profile => "profile",
            Scope::Email => "email",
            Scope::ReadBilling => "read-billing",
            Scope::ReadMemberships => "read-memberships",
            Scope::ReadRepos => "read-repos",
            Scope::GatedRepos => "gated-repos",
            Scope::ContributeRepos => "contribute-repos",
            Scope::WriteRepos => "write-repos",
            Scope::ManageRepos => "manage-repos",
            Scope::ReadCollections => "read-collections",
            Scope::WriteCollections => "write-collections",
            Scope::InferenceApi => "inference-api",
            Scope::ReadEndpoints => "read-endpoints",
            Scope::WriteEndpoints => "write-endpoints",
            Scope::Jobs => "jobs",
            Scope::Webhooks => "webhooks",
            Scope::WriteDiscussions => "write-discussions",
        }
    }

    pub fn parse(s: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AccountKind {
    User,
    Org,
}

impl AccountKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AccountKind::User => "user",
            AccountKind::Org => "org",
        }
    }
}

/// A user or an organization: both own a namespace of the same name.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Account {
    pub id: String,
    pub kind: AccountKind,
    pub name: String,
    pub fullname: String,
    pub email: Option<String>,
    /// Instance administrators may act in every namespace and manage the instance.
    pub is_admin: bool,
    pub created_at: DateTime<Utc>,
    /// Set while the account is disabled: none of its credentials is accepted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Membership {
    pub org: String,
    pub user: String,
    pub role: Role,
}

/// What is known of a token once issued; the token itself is never stored.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TokenInfo {
    pub id: String,
    pub user: String,
    pub display_name: String,
    /// `None`: unrestricted; otherwise only these scopes.
    pub scopes: Option<Vec<Scope>>,
    pub expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// Account and organization names: the same rule for both, since they share one namespace.
pub fn validate_account_name(name: &str) -> Result<(), String> {
    let ok_len = (2..=42).contains(&name.len());
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.');
    let ok_edges = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric());
    if ok_len && ok_chars && ok_edges {
        Ok(())
    } else {
        Err(format!(
            "invalid name {name:?}: 2 to 42 characters, letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_round_trip_by_name() {
        for s in Scope::ALL {
            assert_eq!(Scope::parse(s.as_str()), Some(s));
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{}\"", s.as_str()));
        }
        assert_eq!(Scope::parse("write-everything"), None);
    }

    #[test]
    fn roles_that_change_endpoints() {
        assert!(Role::Admin.can_change_endpoints());
        assert!(Role::Write.can_change_endpoints());
        assert!(!Role::Contributor.can_change_endpoints());
        assert!(!Role::Read.can_change_endpoints());
        assert_eq!(Role::parse("owner"), None);
    }

    #[test]
    fn account_names() {
        assert!(validate_account_name("alice").is_ok());
        assert!(validate_account_name("acme-corp.ai").is_ok());
        assert!(validate_account_name("a").is_err());
        assert!(validate_account_name("-alice").is_err());
        assert!(validate_account_name("al ice").is_err());
        assert!(validate_account_name("alice/bob").is_err());
        assert!(validate_account_name(&"a".repeat(43)).is_err());
    }
}
