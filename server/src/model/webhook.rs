//! Webhooks as the management API speaks of them (`/api/settings/webhooks`, the hub's shapes), their
//! rules, and the payload (version 3) each event is delivered as.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;

use super::catalog::CatalogEntry;
use super::event::EventKind;
use super::Issue;

/// Most watched items one webhook may hold.
pub const MAX_WATCHED: usize = 100;
/// Longest URL a webhook may have.
pub const MAX_URL: usize = 2048;
/// Longest secret (`X-Webhook-Secret`).
pub const MAX_SECRET: usize = 256;
/// Most webhooks one owner may hold.
pub const MAX_PER_OWNER: usize = 100;
/// The payload version this server sends.
pub const PAYLOAD_VERSION: u32 = 3;

/// The `webhook` member every payload is sent with: which webhook it is for, and the payload's version.
pub fn webhook_member(webhook_id: &str) -> serde_json::Value {
    serde_json::json!({"id": webhook_id, "version": PAYLOAD_VERSION})
}

/// What a webhook follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum WatchedKind {
    User,
    Org,
    /// A catalog item, by repo id (`author/model`).
    Model,
    /// Accepted for the hub's scripts; Switchyard has no datasets, so nothing is emitted for it.
    Dataset,
    /// Accepted for the hub's scripts; Switchyard has no spaces, so nothing is emitted for it.
    Space,
}

impl WatchedKind {
    pub fn as_str(self) -> &'static str {
        match self {
            WatchedKind::User => "user",
            WatchedKind::Org => "org",
            WatchedKind::Model => "model",
            WatchedKind::Dataset => "dataset",
            WatchedKind::Space => "space",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Watched {
    #[serde(rename = "type")]
    pub kind: WatchedKind,
    pub name: String,
}

/// The kinds of change a webhook asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Domain {
    /// Catalog items: added, changed, removed.
    Repo,
    /// Endpoints in a watched namespace: created, updated, deleted, and each state change.
    Endpoint,
    /// Accepted (also spelled `discussions`); Switchyard has no discussions, so nothing is emitted.
    #[serde(alias = "discussions")]
    Discussion,
}

impl Domain {
    pub fn as_str(self) -> &'static str {
        match self {
            Domain::Repo => "repo",
            Domain::Endpoint => "endpoint",
            Domain::Discussion => "discussion",
        }
    }

    /// The domain an outbox event belongs to.
    pub fn of(kind: EventKind) -> Domain {
        match kind {
            EventKind::RepoCreated | EventKind::RepoUpdated | EventKind::RepoDeleted => {
                Domain::Repo
            }
            _ => Domain::Endpoint,
        }
    }
}

/// `POST /api/settings/webhooks`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookIn {
    pub watched: Vec<Watched>,
    pub domains: Option<Vec<Domain>>,
    pub url: Option<String>,
    pub secret: Option<String>,
    /// The hub runs jobs on events; Switchyard does not (refused with a 400).
    pub job_source_id: Option<String>,
    pub job: Option<Value>,
    /// Switchyard's: the organization that owns the webhook (its admins manage it). Default: the caller.
    pub owner: Option<String>,
}

/// `POST /api/settings/webhooks/{id}`: what is given changes; an empty `watched` means unchanged
/// (the hub's client always sends it); an empty `secret` removes the secret.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookUpdate {
    #[serde(default)]
    pub watched: Vec<Watched>,
    pub domains: Option<Vec<Domain>>,
    pub url: Option<String>,
    pub secret: Option<String>,
    pub job_source_id: Option<String>,
    pub secrets: Option<Value>,
}

/// The last attempt made for a webhook, for its list row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastAttempt {
    #[serde(with = "super::wire::rfc3339_z")]
    #[schema(value_type = String)]
    pub at: DateTime<Utc>,
    pub status_code: Option<u16>,
    pub error_class: Option<String>,
    pub ok: bool,
}

/// A webhook as the API shows it: the hub's fields (`id`, `url`, `watched`, `domains`, `secret`,
/// `disabled`, `job`) and Switchyard's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookOut {
    pub id: String,
    pub url: String,
    pub watched: Vec<Watched>,
    pub domains: Vec<Domain>,
    pub secret: Option<String>,
    pub disabled: bool,
    /// Always null: Switchyard runs no jobs.
    pub job: Option<Value>,
    /// The user or organization that owns it.
    pub owner: String,
    /// Why it was disabled, when the server disabled it (410 Gone, failing for days).
    pub disabled_reason: Option<String>,
    pub last_attempt: Option<LastAttempt>,
    /// Until when its deliveries wait, spending no attempt, while it is held (its receiver failed enough
    /// times in a row to open the circuit breaker, or asked to wait with `Retry-After`); null when not held.
    #[serde(default, with = "super::wire::rfc3339_z::option")]
    #[schema(value_type = Option<String>)]
    pub held_until: Option<DateTime<Utc>>,
    /// Since when every attempt failed (the start of the failing streak); null while the last one succeeded.
    #[serde(default, with = "super::wire::rfc3339_z::option")]
    #[schema(value_type = Option<String>)]
    pub failing_since: Option<DateTime<Utc>>,
    #[serde(with = "super::wire::rfc3339_z")]
    #[schema(value_type = String)]
    pub created_at: DateTime<Utc>,
    #[serde(with = "super::wire::rfc3339_z")]
    #[schema(value_type = String)]
    pub updated_at: DateTime<Utc>,
}

/// One attempt of a delivery, as the activity view (`…/{id}/deliveries`) lists it, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttemptOut {
    /// Orders attempts; `?after=` this to follow new ones.
    pub seq: i64,
    pub delivery_id: String,
    /// The event's stable id (also the `webhook-id` header and the payload's `id`).
    pub event_id: String,
    /// The payload's `event` (`action`, `scope`).
    pub event: Value,
    /// The namespace that owns what changed (an endpoint's namespace, a catalog item's author).
    #[serde(default)]
    pub namespace: String,
    /// What changed: an endpoint's name, a catalog item's repo id.
    #[serde(default)]
    pub subject: String,
    /// The request body sent (the same for every attempt of a delivery), with its `webhook` member.
    #[serde(default)]
    pub payload: Value,
    /// 1 for the first attempt of a delivery.
    pub attempt: i64,
    #[serde(with = "super::wire::rfc3339_z")]
    #[schema(value_type = String)]
    pub at: DateTime<Utc>,
    pub status_code: Option<i64>,
    pub duration_ms: i64,
    /// Why it failed: `status` (a non-2xx answer), `connect`, `timeout`, `redirect` (never
    /// followed), `refused` (a special-use address), `dns`, `url`, `http`, `internal`; null when it
    /// succeeded.
    pub error_class: Option<String>,
    pub error: Option<String>,
    /// The first KiB of the answer.
    pub response: Option<String>,
    /// When the next attempt was due after this one, as planned then; null when none was (it
    /// succeeded, or was the last), and once the delivery was cancelled.
    #[serde(with = "super::wire::rfc3339_z::option")]
    #[schema(value_type = Option<String>)]
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// A replay, not a scheduled attempt.
    pub manual: bool,
    /// The delivery's state now: pending, sending, succeeded, failed, cancelled.
    pub state: String,
}

/// Issues with the watched list and domains (each names its field).
pub fn check_watched(watched: &[Watched], issues: &mut Vec<Issue>) {
    if watched.is_empty() {
        issues.push(Issue::new(
            "watched",
            "watch at least one user, organization or model",
        ));
    }
    if watched.len() > MAX_WATCHED {
        issues.push(Issue::new(
            "watched",
            format!("at most {MAX_WATCHED} items"),
        ));
    }
    for (i, w) in watched.iter().enumerate() {
        let path = format!("watched[{i}].name");
        let ok = match w.kind {
            WatchedKind::User | WatchedKind::Org => is_account_name(&w.name),
            _ => super::repo::check_repo_id(&w.name).is_ok() && w.name.contains('/'),
        };
        if !ok {
            let what = match w.kind {
                WatchedKind::User | WatchedKind::Org => "a user or organization name",
                _ => "a repo id such as `author/model`",
            };
            issues.push(Issue::new(path, format!("{:?} is not {what}", w.name)));
        }
    }
}

fn is_account_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 96
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

pub fn check_domains(domains: &[Domain], issues: &mut Vec<Issue>) {
    if domains.is_empty() {
        issues.push(Issue::new(
            "domains",
            "name at least one domain (repo, endpoint, discussion)",
        ));
    }
}

/// A secret goes out as a header value: printable ASCII, bounded.
pub fn check_secret(secret: &str, issues: &mut Vec<Issue>) {
    if secret.len() > MAX_SECRET || !secret.bytes().all(|b| (0x21..0x7f).contains(&b)) {
        issues.push(Issue::new(
            "secret",
            format!("at most {MAX_SECRET} printable ASCII characters, no spaces"),
        ));
    }
}

pub fn check_url_shape(url: &str, issues: &mut Vec<Issue>) {
    if url.is_empty() {
        issues.push(Issue::new("url", "a webhook needs a url"));
    } else if url.len() > MAX_URL {
        issues.push(Issue::new("url", format!("at most {MAX_URL} characters")));
    }
}

/// Domains sorted, each once.
pub fn normalize_domains(mut domains: Vec<Domain>) -> Vec<Domain> {
    domains.sort();
    domains.dedup();
    domains
}

/// The public form of a repo in a payload.
fn repo_json(repo_id: &str, base: &str) -> Value {
    let owner = repo_id.split('/').next().unwrap_or(repo_id);
    json!({
        "type": "model",
        "name": repo_id,
        "id": repo_id,
        "private": false,
        "url": {
            "web": format!("{base}/{repo_id}"),
            "api": format!("{base}/api/models/{repo_id}"),
        },
        "owner": { "id": owner },
    })
}

/// The head of a catalog item: the revision its first pinned recipe serves, when one is pinned.
fn head_sha(entry: &CatalogEntry) -> Option<&str> {
    entry.recipes.iter().find_map(|r| r.revision.as_deref())
}

/// The payloads (all but `id` and `webhook`) a catalog change is delivered as: one for an added or
/// removed item (scope `repo`); for a changed one, `repo.content` when a recipe's pinned revision
/// moved (with `updatedRefs`) and `repo.config` when anything else changed (with `updatedConfig`).
pub fn repo_payloads(
    kind: EventKind,
    entry: &CatalogEntry,
    previous: Option<&CatalogEntry>,
    base: &str,
) -> Vec<Value> {
    let mut repo = repo_json(&entry.repo_id, base);
    if let (Some(head), Some(r)) = (head_sha(entry), repo.as_object_mut()) {
        r.insert("headSha".into(), json!(head));
    }
    let plain = |action: &str| json!({"event": {"action": action, "scope": "repo"}, "repo": repo});
    match (kind, previous) {
        (EventKind::RepoDeleted, _) => vec![plain("delete")],
        (EventKind::RepoUpdated, Some(before)) => {
            let mut out = Vec::new();
            let refs = moved_refs(before, entry);
            if !refs.is_empty() {
                out.push(
                    json!({"event": {"action": "update", "scope": "repo.content"},
                    "repo": repo, "updatedRefs": refs}),
                );
            }
            let config = changed_config(before, entry);
            if !config.is_empty() || out.is_empty() {
                out.push(
                    json!({"event": {"action": "update", "scope": "repo.config"},
                    "repo": repo, "updatedConfig": config}),
                );
            }
            out
        }
        _ => vec![plain("create")],
    }
}

/// One ref per recipe (`refs/recipes/<publicId>`) whose pinned revision moved; null for none.
fn moved_refs(before: &CatalogEntry, after: &CatalogEntry) -> Vec<Value> {
    let revision = |e: &CatalogEntry, id: &str| {
        e.recipes
            .iter()
            .find(|r| r.public_id == id)
            .and_then(|r| r.revision.clone())
    };
    let mut ids: Vec<&str> = before
        .recipes
        .iter()
        .chain(&after.recipes)
        .map(|r| r.public_id.as_str())
        .collect();
    ids.sort();
    ids.dedup();
    ids.into_iter()
        .filter_map(|id| {
            let (old, new) = (revision(before, id), revision(after, id));
            (old != new)
                .then(|| json!({"ref": format!("refs/recipes/{id}"), "oldSha": old, "newSha": new}))
        })
        .collect()
}

/// What changed apart from revisions: the fields of the item, and recipes added, removed or changed.
fn changed_config(before: &CatalogEntry, after: &CatalogEntry) -> serde_json::Map<String, Value> {
    let mut out = serde_json::Map::new();
    let (b, a) = (
        serde_json::to_value(before).unwrap_or_default(),
        serde_json::to_value(after).unwrap_or_default(),
    );
    let unpinned = |e: &CatalogEntry| {
        let mut e = e.clone();
        e.recipes.iter_mut().for_each(|r| r.revision = None);
        serde_json::to_value(e.recipes).unwrap_or_default()
    };
    if let (Value::Object(b), Value::Object(a)) = (b, a) {
        for (key, value) in a {
            if key != "recipes" && b.get(&key) != Some(&value) {
                out.insert(key, value);
            }
        }
    }
    let recipes = unpinned(after);
    if unpinned(before) != recipes {
        out.insert("recipes".into(), recipes);
    }
    out
}

/// The payload (all but `id` and `webhook`) of an endpoint event: scope `endpoint` for created,
/// updated and deleted, `endpoint.status` for a state change (with `previousState`, `state` and
/// `message`). It carries `repo` (the model served) so handlers typed for the hub's payload parse it.
pub fn endpoint_payload(kind: EventKind, endpoint: &Value, extra: &Value, base: &str) -> Value {
    let (action, scope) = match kind {
        EventKind::EndpointCreated => ("create", "endpoint"),
        EventKind::EndpointDeleted => ("delete", "endpoint"),
        EventKind::EndpointStatus => ("update", "endpoint.status"),
        _ => ("update", "endpoint"),
    };
    let repository = endpoint
        .pointer("/model/repository")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut payload = json!({
        "event": {"action": action, "scope": scope},
        "repo": repo_json(repository, base),
        "endpoint": endpoint,
    });
    if let (Some(p), Value::Object(extra)) = (payload.as_object_mut(), extra) {
        if kind == EventKind::EndpointStatus {
            p.insert(
                "status".into(),
                json!({
                    "previousState": extra.get("previousState"),
                    "state": extra.get("state"),
                    "message": extra.get("message"),
                }),
            );
        }
    }
    payload
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(revision: Option<&str>, license: &str) -> CatalogEntry {
        serde_json::from_value(json!({
            "modelName": "m", "createdAt": "2024-01-01T00:00:00Z", "authorName": "acme",
            "license": license, "repoId": "acme/m", "task": "text-generation",
            "recipes": [{"accelerator": "cpu", "engineType": "tei", "publicId": "r1",
                "revision": revision, "memoryGb": 1.0}]
        }))
        .expect("entry")
    }

    #[test]
    fn catalog_changes_take_the_hub_scopes() {
        let base = "http://sy.test";
        let created = repo_payloads(EventKind::RepoCreated, &entry(None, "mit"), None, base);
        assert_eq!(
            created[0]["event"],
            json!({"action": "create", "scope": "repo"})
        );
        assert_eq!(created[0]["repo"]["name"], "acme/m");
        assert_eq!(created[0]["repo"]["owner"]["id"], "acme");
        let before = entry(Some("aaa"), "mit");
        let moved = repo_payloads(
            EventKind::RepoUpdated,
            &entry(Some("bbb"), "mit"),
            Some(&before),
            base,
        );
        assert_eq!(moved.len(), 1);
        assert_eq!(moved[0]["event"]["scope"], "repo.content");
        assert_eq!(
            moved[0]["updatedRefs"],
            json!([{"ref": "refs/recipes/r1", "oldSha": "aaa", "newSha": "bbb"}])
        );
        assert_eq!(moved[0]["repo"]["headSha"], "bbb");
        let both = repo_payloads(
            EventKind::RepoUpdated,
            &entry(Some("bbb"), "apache-2.0"),
            Some(&before),
            base,
        );
        let scopes: Vec<_> = both.iter().map(|p| p["event"]["scope"].clone()).collect();
        assert_eq!(scopes, vec![json!("repo.content"), json!("repo.config")]);
        assert_eq!(both[1]["updatedConfig"], json!({"license": "apache-2.0"}));
        let deleted = repo_payloads(EventKind::RepoDeleted, &before, None, base);
        assert_eq!(deleted[0]["event"]["action"], "delete");
    }

    #[test]
    fn endpoint_status_carries_both_states_and_the_repo() {
        let ep = json!({"name": "e", "model": {"repository": "acme/m"}});
        let extra = json!({"previousState": "pending", "state": "running", "message": null});
        let p = endpoint_payload(EventKind::EndpointStatus, &ep, &extra, "http://sy.test");
        assert_eq!(
            p["event"],
            json!({"action": "update", "scope": "endpoint.status"})
        );
        assert_eq!(p["status"]["previousState"], "pending");
        assert_eq!(p["status"]["state"], "running");
        assert_eq!(p["repo"]["name"], "acme/m");
        assert_eq!(p["endpoint"]["name"], "e");
    }

    #[test]
    fn domains_take_both_spellings_and_watched_names_are_checked() {
        let d: Vec<Domain> =
            serde_json::from_value(json!(["discussions", "repo", "discussion"])).expect("domains");
        assert_eq!(normalize_domains(d), vec![Domain::Repo, Domain::Discussion]);
        let mut issues = Vec::new();
        check_watched(
            &[
                Watched {
                    kind: WatchedKind::User,
                    name: "ok-name".into(),
                },
                Watched {
                    kind: WatchedKind::Model,
                    name: "no-slash".into(),
                },
                Watched {
                    kind: WatchedKind::Org,
                    name: "bad name".into(),
                },
            ],
            &mut issues,
        );
        let paths: Vec<_> = issues.iter().map(|i| i.path.as_str()).collect();
        assert_eq!(paths, vec!["watched[1].name", "watched[2].name"]);
        let mut issues = Vec::new();
        check_secret("has space", &mut issues);
        check_secret("fine-secret", &mut issues);
        assert_eq!(issues.len(), 1);
    }
}
