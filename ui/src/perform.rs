//! Running effects against the server: each API effect of the state becomes one call (or a few) through the
//! typed client, and its answer an action. [`perform`] picks the function for an effect; they follow in the
//! order of the effects' families: signing in, endpoints, the catalog and engines, OAuth apps and the audit
//! log, webhooks and their deliveries, notifications and the servers on the store. Imports `effects`,
//! `state` and `failures`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use switchyard_server::client::{Client, ClientError};

use crate::effects::{AppAction, DeployRequest, Effect, EndpointAction, WebhookAction};
use crate::failures::{load_failure, message, refusal, servers_failure, sign_in_failure};
use crate::state::{
    self, Action, Analytics, AppRow, AuditRow, ChartRange, CreatedApp, DeliveryRow, EndpointRow,
    IssuedSecret, NotificationRow, NotificationsFailure, ReplicaLoad, SavedWebhook, Secret, Series,
    ServerRow, WebhookRow,
};

/// Runs one effect against the server; `None` for the effects the event loop runs itself (it owns the
/// terminal and the client).
pub async fn perform(client: &Client, effect: Effect) -> Option<Action> {
    Some(match effect {
        Effect::SignIn => Action::SignedIn(sign_in(client).await.map_err(|e| sign_in_failure(&e))),
        // Done by the event loop itself, which owns the terminal and the client.
        Effect::Copy(_) | Effect::Connect(_) | Effect::ExternalEdit(..) => return None,
        Effect::LoadEndpoints(seq, namespaces) => load_endpoints(client, seq, &namespaces).await,
        Effect::LoadLogs { namespace, name } => load_logs(client, namespace, name).await,
        Effect::LoadAnalytics {
            namespace,
            name,
            range,
            from,
        } => load_analytics(client, namespace, name, range, from).await,
        Effect::LoadSparklines { endpoints, from } => {
            Action::SparklinesLoaded(load_sparklines(client, endpoints, from).await)
        }
        Effect::LoadReplicas { namespace, name } => {
            let result = client.endpoint_replicas::<Value>(&namespace, &name).await;
            Action::ReplicasLoaded {
                result: result
                    .map(|v| ReplicaLoad::list_from_json(&v))
                    .map_err(|e| message(&e)),
                namespace,
                name,
            }
        }
        Effect::Update {
            namespace,
            name,
            patch,
        } => update(client, namespace, name, &patch).await,
        Effect::Act {
            action,
            namespace,
            name,
        } => act(client, action, &namespace, &name).await,
        Effect::LoadCatalog(seq, filters) => load_catalog(client, seq, &filters).await,
        Effect::Deploy(request) => deploy(client, request).await,
        Effect::LoadEngines { delay, polled } => load_engines(client, delay, polled).await,
        Effect::InstallEngine { name, .. } => install_engine(client, name).await,
        Effect::LoadApps(seq, owner) => load_apps(client, seq, owner.as_deref()).await,
        Effect::CreateApp(body) => create_app(client, &body).await,
        Effect::AppAct { action, id, name } => app_act(client, action, id, name).await,
        Effect::LoadAudit(seq, org) => load_audit(client, seq, &org).await,
        Effect::LoadWebhooks(seq) => load_webhooks(client, seq).await,
        Effect::SaveWebhook { id, body } => save_webhook(client, id.as_deref(), &body).await,
        Effect::LoadWebhook { feed, id } => Action::WebhookLoaded {
            feed,
            result: load_webhook(client, &id).await,
        },
        Effect::WebhookAct { action, id, url } => webhook_act(client, action, &id, &url).await,
        Effect::FollowDeliveries {
            feed,
            id,
            after,
            wait,
            delay,
        } => follow_deliveries(client, feed, &id, after, wait, delay).await,
        Effect::ReplayDelivery { id, delivery } => replay_delivery(client, &id, &delivery).await,
        Effect::FollowNotifications { after, wait, delay } => {
            follow_notifications(client, after, wait, delay).await
        }
        Effect::LoadServers { delay } => load_servers(client, delay).await,
    })
}

/// Waits `seconds` before a poll (a failed one backs off).
async fn pause(seconds: u64) {
    if seconds > 0 {
        tokio::time::sleep(Duration::from_secs(seconds)).await;
    }
}

/// The rows of a JSON array.
fn rows_of<T>(v: &Value, row: impl Fn(&Value) -> T) -> Vec<T> {
    v.as_array().into_iter().flatten().map(row).collect()
}

/// The signed-in user and the namespaces to list: their own and their organizations', or, for an instance
/// administrator, every user's and organization's.
async fn sign_in(client: &Client) -> Result<(String, Vec<String>), ClientError> {
    let me: Value = client.whoami().await?;
    let name = me["name"].as_str().unwrap_or("").to_string();
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a["name"].as_str().map(str::to_string))
            .collect()
    };
    let mut others = names(&me["orgs"]);
    if me["isAdmin"] == true {
        if let (Ok(users), Ok(orgs)) = (
            client.admin_list_users::<Value>().await,
            client.admin_list_orgs::<Value>().await,
        ) {
            others = names(&users)
                .into_iter()
                .chain(names(&orgs))
                .filter(|n| *n != name)
                .collect();
        }
    }
    Ok((name, others))
}

/// The endpoints of every namespace, one list call each.
async fn load_endpoints(client: &Client, seq: u64, namespaces: &[String]) -> Action {
    let mut rows = Vec::new();
    for ns in namespaces {
        match client.list_endpoints::<Value>(ns).await {
            Ok(v) => rows.extend(
                v["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|e| EndpointRow::from_json(ns, e)),
            ),
            // A namespace that went away, or lost access: skip it.
            Err(ClientError::Api { .. }) => {}
            Err(e) => return Action::EndpointsLoaded(seq, Err(message(&e))),
        }
    }
    Action::EndpointsLoaded(seq, Ok(rows))
}

/// An endpoint's latest log lines.
async fn load_logs(client: &Client, namespace: String, name: String) -> Action {
    let text = client
        .endpoint_logs(&namespace, &name, 500)
        .await
        .map_err(|e| message(&e));
    Action::LogsLoaded {
        namespace,
        name,
        text,
    }
}

/// The query of an analytics load from `from` to now: the server picks the step.
fn since(from: DateTime<Utc>) -> String {
    format!("from={}", from.timestamp())
}

async fn load_analytics(
    client: &Client,
    namespace: String,
    name: String,
    range: ChartRange,
    from: DateTime<Utc>,
) -> Action {
    let query = since(from);
    // The decisions the charts mark: all of the range's, up to the API's most.
    let decided = format!("since={}&limit=1000", from.timestamp());
    let (series, decisions) = tokio::join!(
        client.endpoint_analytics::<Value>(&namespace, &name, &query),
        client.endpoint_decisions::<Value>(&namespace, &name, &decided),
    );
    let result = match (series, decisions) {
        (Ok(s), Ok(d)) => Ok(Analytics::from_json(namespace, name, range, &s, &d)),
        (Err(e), _) | (_, Err(e)) => Err((namespace, name, message(&e))),
    };
    Action::AnalyticsLoaded { range, result }
}

/// Each endpoint's requests per second since `from`; one that cannot be read is left out.
async fn load_sparklines(
    client: &Client,
    endpoints: Vec<(String, String)>,
    from: DateTime<Utc>,
) -> Vec<((String, String), Vec<f64>)> {
    // A point a minute: a column each in the list.
    let query = format!("{}&step=60", since(from));
    let mut lines = Vec::with_capacity(endpoints.len());
    for (namespace, name) in endpoints {
        let answer = client.endpoint_analytics::<Value>(&namespace, &name, &query);
        if let Ok(answer) = answer.await {
            let rps = Series::from_json(&answer).requests_per_second;
            lines.push(((namespace, name), rps));
        }
    }
    lines
}

/// A partial update of an endpoint, from an editor: saved, or the server's refusal.
async fn update(client: &Client, namespace: String, name: String, patch: &Value) -> Action {
    let result = client
        .update_endpoint::<Value>(&namespace, &name, patch)
        .await
        .map(|_| String::new())
        .map_err(|e| refusal(&e));
    Action::Saved {
        namespace,
        name,
        result,
    }
}

/// A confirmed lifecycle action on an endpoint: its message, or why it failed.
async fn act(client: &Client, action: EndpointAction, namespace: &str, name: &str) -> Action {
    let result = match action {
        EndpointAction::Delete => client
            .delete_endpoint(namespace, name)
            .await
            .map(|_| "deleted".to_string()),
        other => client
            .endpoint_action::<Value>(namespace, name, other.verb())
            .await
            .map(|ep| ep["status"]["state"].as_str().unwrap_or("").to_string()),
    };
    Action::Done(
        result
            .map(|s| format!("{} {namespace}/{name}: {s}", action.verb()))
            .map_err(|e| format!("{} {namespace}/{name}: {}", action.verb(), message(&e))),
    )
}

/// The catalog, with the API's filters.
async fn load_catalog(client: &Client, seq: u64, filters: &[(String, String)]) -> Action {
    Action::CatalogLoaded(
        seq,
        client
            .catalog_list::<Value>(
                &filters
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect::<Vec<_>>(),
            )
            .await
            .map(|v| {
                v["items"]
                    .as_array()
                    .map(|items| items.iter().map(state::CatalogRow::from_json).collect())
                    .unwrap_or_default()
            })
            .map_err(|e| message(&e)),
    )
}

/// A deploy form's request: the new endpoint's `namespace/name`, or the server's refusal.
async fn deploy(client: &Client, request: DeployRequest) -> Action {
    let namespace = request.body["namespace"].as_str().unwrap_or("").to_string();
    let answer = match &request.target {
        Ok(repo_id) => client.deploy_model::<Value>(repo_id, &request.body).await,
        Err(recipe) => client.deploy_recipe::<Value>(recipe, &request.body).await,
    };
    Action::Deployed(
        answer
            .map(|v| {
                format!(
                    "{namespace}/{}",
                    v["endpoint"]["name"].as_str().unwrap_or("")
                )
            })
            .map_err(|e| refusal(&e)),
    )
}

/// What the server can run, after `delay` seconds; `polled` while an install is followed.
async fn load_engines(client: &Client, delay: u64, polled: bool) -> Action {
    pause(delay).await;
    let result = client
        .engines::<Value>()
        .await
        .map(|v| state::EngineMarks::from_json(&v))
        .map_err(|e| e.to_string());
    Action::EnginesLoaded { polled, result }
}

/// Starts installing a built-in engine on the server.
async fn install_engine(client: &Client, name: String) -> Action {
    Action::EngineInstallStarted(
        client
            .install_engine::<Value>(&name)
            .await
            .map(|_| name)
            .map_err(|e| e.to_string()),
    )
}

/// The OAuth apps of a namespace (`None`: the signed-in user's).
async fn load_apps(client: &Client, seq: u64, owner: Option<&str>) -> Action {
    Action::AppsLoaded(
        seq,
        client
            .oauth_apps::<Value>(owner)
            .await
            .map(|v| rows_of(&v, AppRow::from_json))
            .map_err(|e| load_failure(&e)),
    )
}

/// Registers an OAuth app: its name and client id, with the secret shown once; or the server's refusal.
async fn create_app(client: &Client, body: &Value) -> Action {
    Action::AppCreated(
        client
            .create_oauth_app::<Value>(body)
            .await
            .map(|v| CreatedApp {
                name: v["app"]["name"].as_str().unwrap_or("").to_string(),
                client_id: v["app"]["id"].as_str().unwrap_or("").to_string(),
                secret: secret_of(&v),
            })
            .map_err(|e| refusal(&e)),
    )
}

/// The secret in an answer about an app, if the server made one (it is in that answer only).
fn secret_of(answer: &Value) -> Option<Secret> {
    answer["clientSecret"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(|s| Secret::new(s.to_string()))
}

/// A confirmed action on an OAuth app: a rotated secret to show once, or a message.
async fn app_act(client: &Client, action: AppAction, id: String, name: String) -> Action {
    let done = match action {
        AppAction::RotateSecret => match client.oauth_app_secret::<Value>(&id, true).await {
            Ok(v) => match secret_of(&v) {
                Some(secret) => {
                    return Action::SecretIssued(IssuedSecret::client(name, id, secret))
                }
                None => Err("the server sent no new secret".to_string()),
            },
            Err(e) => Err(message(&e)),
        },
        AppAction::DeleteSecret => client
            .oauth_app_secret::<Value>(&id, false)
            .await
            .map(|_| format!("deleted the secret of {name}: it is a public app now"))
            .map_err(|e| message(&e)),
        AppAction::Delete => client
            .delete_oauth_app(&id)
            .await
            .map(|()| format!("deleted app {name}"))
            .map_err(|e| message(&e)),
    };
    let verb = match action {
        AppAction::RotateSecret => "rotating the secret of",
        AppAction::DeleteSecret => "deleting the secret of",
        AppAction::Delete => "deleting",
    };
    Action::Done(done.map_err(|e| format!("{verb} {name}: {e}")))
}

/// An organization's audit log.
async fn load_audit(client: &Client, seq: u64, org: &str) -> Action {
    Action::AuditLoaded(
        seq,
        client
            .audit_log::<Value>(org)
            .await
            .map(|v| rows_of(&v, AuditRow::from_json))
            .map_err(|e| load_failure(&e)),
    )
}

/// The caller's webhooks and its organizations'.
async fn load_webhooks(client: &Client, seq: u64) -> Action {
    Action::WebhooksLoaded(
        seq,
        client
            .webhooks::<Value>()
            .await
            .map(|v| rows_of(&v, WebhookRow::from_json))
            .map_err(|e| load_failure(&e)),
    )
}

/// Creates (`id` `None`) or updates a webhook with the form's body: the webhook saved, or the server's
/// refusal.
async fn save_webhook(client: &Client, id: Option<&str>, body: &Value) -> Action {
    let answer = match id {
        Some(id) => client.update_webhook::<Value>(id, body).await,
        None => client.create_webhook::<Value>(body).await,
    };
    Action::WebhookSaved(answer.map(|v| saved_webhook(&v)).map_err(|e| refusal(&e)))
}

/// The webhook in the form's answer, with the signing secret a new one comes with (in that answer only).
fn saved_webhook(answer: &Value) -> SavedWebhook {
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    SavedWebhook {
        id: text(&answer["webhook"]["id"]),
        url: text(&answer["webhook"]["url"]),
        signing_secret: answer["signingSecret"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(|s| Secret::new(s.to_string())),
    }
}

/// One webhook, read again (whether it is held, and why).
async fn load_webhook(client: &Client, id: &str) -> Result<WebhookRow, String> {
    client
        .webhook::<Value>(id)
        .await
        .map(|v| WebhookRow::from_json(&v["webhook"]))
        .map_err(|e| message(&e))
}

/// A confirmed action on a webhook: its message, or why it failed.
async fn webhook_act(client: &Client, action: WebhookAction, id: &str, url: &str) -> Action {
    let result = match action {
        WebhookAction::Delete => client.delete_webhook(id).await,
        WebhookAction::Enable | WebhookAction::Disable => client
            .set_webhook_enabled::<Value>(id, action == WebhookAction::Enable)
            .await
            .map(|_| ()),
    };
    let verb = action.verb();
    Action::Done(
        result
            .map(|()| format!("{verb}d webhook {url}"))
            .map_err(|e| format!("{verb} webhook {url}: {}", message(&e))),
    )
}

/// A webhook's attempts after `after` (`None`: the newest page at once), the server holding the request up
/// to `wait` seconds until one comes; after `delay` seconds.
async fn follow_deliveries(
    client: &Client,
    feed: u64,
    id: &str,
    after: Option<i64>,
    wait: u64,
    delay: u64,
) -> Action {
    pause(delay).await;
    let wait = after.map(|_| wait).filter(|w| *w > 0);
    Action::DeliveriesLoaded {
        feed,
        result: client
            .webhook_deliveries::<Value>(id, after, None, wait)
            .await
            .map(|v| rows_of(&v, DeliveryRow::from_json))
            .map_err(|e| message(&e)),
    }
}

/// Sends one delivery of a webhook again: the new delivery's id, or why it failed.
async fn replay_delivery(client: &Client, id: &str, delivery: &str) -> Action {
    Action::Replayed(
        client
            .replay_delivery::<Value>(id, delivery)
            .await
            .map(|v| {
                format!(
                    "replayed delivery {delivery}: new delivery {}",
                    v["deliveryId"].as_str().unwrap_or("?")
                )
            })
            .map_err(|e| format!("replaying delivery {delivery}: {}", message(&e))),
    )
}

/// The user's notifications, followed as a webhook's attempts are; a 404 is a server without them.
async fn follow_notifications(
    client: &Client,
    after: Option<i64>,
    wait: u64,
    delay: u64,
) -> Action {
    pause(delay).await;
    let wait = after.map(|_| wait).filter(|w| *w > 0);
    Action::NotificationsLoaded(
        client
            .notifications::<Value>(after, None, wait)
            .await
            .map(|v| rows_of(&v, NotificationRow::from_json))
            .map_err(|e| match e.status() {
                Some(s) if s.as_u16() == 404 => NotificationsFailure::Unsupported,
                _ => NotificationsFailure::Failed(message(&e)),
            }),
    )
}

/// The servers on the store, after `delay` seconds.
async fn load_servers(client: &Client, delay: u64) -> Action {
    pause(delay).await;
    Action::ServersLoaded(
        client
            .admin_servers::<Value>()
            .await
            .map(|v| rows_of(&v, ServerRow::from_json))
            .map_err(|e| servers_failure(&e)),
    )
}
