//! Typed HTTP client of the public API, used by the console, the CLI and the tests. Every call goes
//! over HTTP, so the in-process and the remote server are one code path. Response bodies decode into
//! whatever the caller asks for (`serde_json::Value` or a model type).

use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error status; `body` is its JSON error object.
    #[error("{status}: {message}")]
    Api {
        status: StatusCode,
        message: String,
        body: Value,
    },
    #[error("cannot reach the server: {0}")]
    Transport(String),
    #[error("unexpected response: {0}")]
    Decode(String),
}

impl ClientError {
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }
}

pub type ClientResult<T> = Result<T, ClientError>;

/// A request that got no answer, as a person says it: where, what happened, and the innermost cause
/// (`nothing answers at http://127.0.0.1:1 (Connection refused (os error 111))`), not the request's URL.
fn transport(base: &str, e: &reqwest::Error) -> ClientError {
    let mut cause: &dyn std::error::Error = e;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    let what = if e.is_timeout() {
        format!("{base} did not answer in time")
    } else if e.is_connect() {
        format!("nothing answers at {base}")
    } else {
        format!("the connection to {base} failed")
    };
    ClientError::Transport(format!("{what} ({cause})"))
}

#[derive(Clone)]
pub struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Client {
    pub fn new(base_url: &str, token: Option<String>) -> Client {
        Client {
            base: base_url.trim_end_matches('/').to_string(),
            token,
            // A server that stops answering must not hang a caller (the console polls every second).
            http: reqwest::Client::builder()
                .connect_timeout(std::time::Duration::from_secs(5))
                .timeout(std::time::Duration::from_secs(30))
                .build()
                .unwrap_or_default(),
        }
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    pub fn with_token(&self, token: Option<String>) -> Client {
        Client {
            token,
            ..self.clone()
        }
    }

    /// Sends a request and decodes a JSON answer; an empty 2xx body decodes as `null`.
    pub async fn request<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> ClientResult<T> {
        let bytes = self.fetch(method, path, body).await?;
        let value: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).map_err(|e| ClientError::Decode(e.to_string()))?
        };
        serde_json::from_value(value).map_err(|e| ClientError::Decode(e.to_string()))
    }

    /// `GET` of a plain-text answer (replica logs); errors are decoded as usual.
    async fn get_text(&self, path: &str) -> ClientResult<String> {
        let bytes = self.fetch(Method::GET, path, None).await?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Sends a request and returns the body of a successful answer; any other answer is an
    /// [`ClientError::Api`] with the server's message.
    async fn fetch(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> ClientResult<axum::body::Bytes> {
        let mut req = self.http.request(method, format!("{}{}", self.base, path));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let transport = |e: reqwest::Error| transport(&self.base, &e);
        let resp = req.send().await.map_err(transport)?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(transport)?;
        if status.is_success() {
            return Ok(bytes);
        }
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let message = body
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("error without a message")
            .to_string();
        Err(ClientError::Api {
            status,
            message,
            body,
        })
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> ClientResult<T> {
        self.request(Method::GET, path, None).await
    }

    async fn post<T: DeserializeOwned>(&self, path: &str, body: &Value) -> ClientResult<T> {
        self.request(Method::POST, path, Some(body)).await
    }

    pub async fn health(&self) -> ClientResult<Value> {
        self.get("/health").await
    }

    pub async fn whoami<T: DeserializeOwned>(&self) -> ClientResult<T> {
        self.get("/api/whoami-v2").await
    }

    /// `GET /api/v1/catalog/list` with the given filters.
    pub async fn catalog_list<T: DeserializeOwned>(
        &self,
        filters: &[(&str, &str)],
    ) -> ClientResult<T> {
        let query =
            serde_urlencoded::to_string(filters).map_err(|e| ClientError::Decode(e.to_string()))?;
        let path = if query.is_empty() {
            "/api/v1/catalog/list".to_string()
        } else {
            format!("/api/v1/catalog/list?{query}")
        };
        self.get(&path).await
    }

    /// `GET /api/v1/engines`: the engines, and whether each catalog recipe runs on the server.
    pub async fn engines<T: DeserializeOwned>(&self) -> ClientResult<T> {
        self.get("/api/v1/engines").await
    }

    /// `POST /api/v1/admin/engines/{name}/install`: starts installing a built-in engine on the server.
    pub async fn install_engine<T: DeserializeOwned>(&self, name: &str) -> ClientResult<T> {
        self.post(
            &format!("/api/v1/admin/engines/{name}/install"),
            &Value::Null,
        )
        .await
    }

    pub async fn deploy_model<T: DeserializeOwned>(
        &self,
        repo_id: &str,
        body: &Value,
    ) -> ClientResult<T> {
        self.post(&format!("/api/v1/catalog/model/{repo_id}/deploy"), body)
            .await
    }

    pub async fn deploy_recipe<T: DeserializeOwned>(
        &self,
        public_id: &str,
        body: &Value,
    ) -> ClientResult<T> {
        self.post(&format!("/api/v1/catalog/recipe/{public_id}/deploy"), body)
            .await
    }

    pub async fn list_endpoints<T: DeserializeOwned>(&self, namespace: &str) -> ClientResult<T> {
        self.get(&format!("/v2/endpoint/{namespace}")).await
    }

    pub async fn create_endpoint<T: DeserializeOwned>(
        &self,
        namespace: &str,
        spec: &Value,
    ) -> ClientResult<T> {
        self.post(&format!("/v2/endpoint/{namespace}"), spec).await
    }

    pub async fn get_endpoint<T: DeserializeOwned>(
        &self,
        namespace: &str,
        name: &str,
    ) -> ClientResult<T> {
        self.get(&format!("/v2/endpoint/{namespace}/{name}")).await
    }

    /// `PUT` a partial spec: only the keys being changed.
    pub async fn update_endpoint<T: DeserializeOwned>(
        &self,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> ClientResult<T> {
        self.request(
            Method::PUT,
            &format!("/v2/endpoint/{namespace}/{name}"),
            Some(patch),
        )
        .await
    }

    pub async fn delete_endpoint(&self, namespace: &str, name: &str) -> ClientResult<()> {
        self.request::<Value>(
            Method::DELETE,
            &format!("/v2/endpoint/{namespace}/{name}"),
            None,
        )
        .await
        .map(|_| ())
    }

    /// `pause`, `resume` or `scale-to-zero`.
    pub async fn endpoint_action<T: DeserializeOwned>(
        &self,
        namespace: &str,
        name: &str,
        action: &str,
    ) -> ClientResult<T> {
        self.request(
            Method::POST,
            &format!("/v2/endpoint/{namespace}/{name}/{action}"),
            None,
        )
        .await
    }

    /// The last `tail` lines of the endpoint's replica output.
    pub async fn endpoint_logs(
        &self,
        namespace: &str,
        name: &str,
        tail: usize,
    ) -> ClientResult<String> {
        self.get_text(&format!("/v2/endpoint/{namespace}/{name}/logs?tail={tail}"))
            .await
    }

    /// The endpoint's ready replicas and their load.
    pub async fn endpoint_replicas<T: DeserializeOwned>(
        &self,
        namespace: &str,
        name: &str,
    ) -> ClientResult<T> {
        self.get(&format!("/v2/endpoint/{namespace}/{name}/replicas"))
            .await
    }

    /// The endpoint's series; `query` is the query string without `?` (`from=…&to=…&step=…`, or empty).
    pub async fn endpoint_analytics<T: DeserializeOwned>(
        &self,
        namespace: &str,
        name: &str,
        query: &str,
    ) -> ClientResult<T> {
        let path = format!("/api/v1/endpoints/{namespace}/{name}/analytics");
        self.get(&with_query(path, query)).await
    }

    /// The endpoint's decisions, newest first; `query` as for [`Self::endpoint_analytics`]
    /// (`since=…&limit=…`, or empty).
    pub async fn endpoint_decisions<T: DeserializeOwned>(
        &self,
        namespace: &str,
        name: &str,
        query: &str,
    ) -> ClientResult<T> {
        let path = format!("/api/v1/endpoints/{namespace}/{name}/decisions");
        self.get(&with_query(path, query)).await
    }

    pub async fn hardware<T: DeserializeOwned>(&self, namespace: &str) -> ClientResult<T> {
        self.get(&format!("/v2/provider/{namespace}")).await
    }

    pub async fn admin_list_users<T: DeserializeOwned>(&self) -> ClientResult<T> {
        self.get("/api/v1/admin/users").await
    }

    /// `GET /api/v1/admin/servers`: the servers on the store, which one leads, which stopped answering.
    pub async fn admin_servers<T: DeserializeOwned>(&self) -> ClientResult<T> {
        self.get("/api/v1/admin/servers").await
    }

    pub async fn admin_list_orgs<T: DeserializeOwned>(&self) -> ClientResult<T> {
        self.get("/api/v1/admin/orgs").await
    }

    pub async fn admin_create_user<T: DeserializeOwned>(&self, body: &Value) -> ClientResult<T> {
        self.post("/api/v1/admin/users", body).await
    }

    pub async fn admin_create_org<T: DeserializeOwned>(&self, name: &str) -> ClientResult<T> {
        self.post("/api/v1/admin/orgs", &serde_json::json!({ "name": name }))
            .await
    }

    pub async fn admin_set_member<T: DeserializeOwned>(
        &self,
        org: &str,
        user: &str,
        role: &str,
    ) -> ClientResult<T> {
        self.request(
            Method::PUT,
            &format!("/api/v1/admin/orgs/{org}/members/{user}"),
            Some(&serde_json::json!({ "role": role })),
        )
        .await
    }

    /// Sets a user's password.
    pub async fn admin_set_password(&self, user: &str, password: &str) -> ClientResult<()> {
        self.request::<Value>(
            Method::PUT,
            &format!("/api/v1/admin/users/{user}/password"),
            Some(&serde_json::json!({ "password": password })),
        )
        .await
        .map(|_| ())
    }

    /// Issues a token for `user`; returns the token itself.
    pub async fn admin_create_token(&self, user: &str, body: &Value) -> ClientResult<String> {
        let out: Value = self
            .post(&format!("/api/v1/admin/users/{user}/tokens"), body)
            .await?;
        out.get("token")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| ClientError::Decode("no token in the response".into()))
    }

    pub async fn admin_put_catalog_item<T: DeserializeOwned>(
        &self,
        entry: &Value,
    ) -> ClientResult<T> {
        self.post("/api/v1/admin/catalog/items", entry).await
    }

    pub async fn admin_delete_catalog_item(&self, repo_id: &str) -> ClientResult<()> {
        self.request::<Value>(
            Method::DELETE,
            &format!("/api/v1/admin/catalog/items/{repo_id}"),
            None,
        )
        .await
        .map(|_| ())
    }

    /// The caller's OAuth apps, or those of `owner` (an organization it administers).
    pub async fn oauth_apps<T: DeserializeOwned>(&self, owner: Option<&str>) -> ClientResult<T> {
        match owner {
            Some(o) => {
                let q = serde_urlencoded::to_string([("owner", o)]).unwrap_or_default();
                self.get(&format!("/api/v1/oauth/apps?{q}")).await
            }
            None => self.get("/api/v1/oauth/apps").await,
        }
    }

    /// Registers an OAuth app; the answer holds its secret, shown this once.
    pub async fn create_oauth_app<T: DeserializeOwned>(&self, body: &Value) -> ClientResult<T> {
        self.post("/api/v1/oauth/apps", body).await
    }

    pub async fn update_oauth_app<T: DeserializeOwned>(
        &self,
        id: &str,
        body: &Value,
    ) -> ClientResult<T> {
        self.request(
            Method::PATCH,
            &format!("/api/v1/oauth/apps/{id}"),
            Some(body),
        )
        .await
    }

    pub async fn delete_oauth_app(&self, id: &str) -> ClientResult<()> {
        self.request::<Value>(Method::DELETE, &format!("/api/v1/oauth/apps/{id}"), None)
            .await
            .map(|_| ())
    }

    /// A new secret for the app (`rotate`), or none (the app becomes public).
    pub async fn oauth_app_secret<T: DeserializeOwned>(
        &self,
        id: &str,
        rotate: bool,
    ) -> ClientResult<T> {
        let method = if rotate { Method::POST } else { Method::DELETE };
        self.request(method, &format!("/api/v1/oauth/apps/{id}/secret"), None)
            .await
    }

    /// An organization's audit log, newest first.
    pub async fn audit_log<T: DeserializeOwned>(&self, org: &str) -> ClientResult<T> {
        self.get(&format!("/api/v1/organizations/{org}/audit-log"))
            .await
    }

    /// The trusted publishers of a namespace (the caller or an organization it administers).
    pub async fn trusted_publishers<T: DeserializeOwned>(
        &self,
        namespace: &str,
    ) -> ClientResult<T> {
        self.get(&format!("/api/v1/trusted-publishers/{namespace}"))
            .await
    }

    /// Registers a trusted publisher: `{"issuer", "audience", "claims": {…}, "scopes": […]}`.
    pub async fn create_trusted_publisher<T: DeserializeOwned>(
        &self,
        namespace: &str,
        body: &Value,
    ) -> ClientResult<T> {
        self.post(&format!("/api/v1/trusted-publishers/{namespace}"), body)
            .await
    }

    pub async fn delete_trusted_publisher(&self, namespace: &str, id: &str) -> ClientResult<()> {
        let path = format!("/api/v1/trusted-publishers/{namespace}/{id}");
        self.request::<Value>(Method::DELETE, &path, None)
            .await
            .map(|_| ())
    }

    /// The caller's webhooks and those of organizations it administers (a bare array).
    pub async fn webhooks<T: DeserializeOwned>(&self) -> ClientResult<T> {
        self.get("/api/settings/webhooks").await
    }

    /// `{"watched": [{"type", "name"}], "domains": […], "url", "secret"?, "owner"?}`; the answer
    /// holds `webhook` and its `signingSecret`.
    pub async fn create_webhook<T: DeserializeOwned>(&self, body: &Value) -> ClientResult<T> {
        self.post("/api/settings/webhooks", body).await
    }

    /// `{"webhook": …}`.
    pub async fn webhook<T: DeserializeOwned>(&self, id: &str) -> ClientResult<T> {
        self.get(&format!("/api/settings/webhooks/{id}")).await
    }

    /// Changes what `body` names (an empty `watched` leaves it as it is).
    pub async fn update_webhook<T: DeserializeOwned>(
        &self,
        id: &str,
        body: &Value,
    ) -> ClientResult<T> {
        self.post(&format!("/api/settings/webhooks/{id}"), body)
            .await
    }

    pub async fn set_webhook_enabled<T: DeserializeOwned>(
        &self,
        id: &str,
        enabled: bool,
    ) -> ClientResult<T> {
        let action = if enabled { "enable" } else { "disable" };
        self.post(
            &format!("/api/settings/webhooks/{id}/{action}"),
            &Value::Null,
        )
        .await
    }

    pub async fn delete_webhook(&self, id: &str) -> ClientResult<()> {
        let path = format!("/api/settings/webhooks/{id}");
        self.request::<Value>(Method::DELETE, &path, None)
            .await
            .map(|_| ())
    }

    /// Attempts, newest first: `after` a seq (to follow; with `wait` seconds the server holds the
    /// request until one comes), at most `limit`.
    pub async fn webhook_deliveries<T: DeserializeOwned>(
        &self,
        id: &str,
        after: Option<i64>,
        limit: Option<i64>,
        wait: Option<u64>,
    ) -> ClientResult<T> {
        let q = follow_query(after, limit, wait);
        self.get(&format!("/api/settings/webhooks/{id}/deliveries?{q}"))
            .await
    }

    /// Sends one delivery again (`{"deliveryId"}` of the new one).
    pub async fn replay_delivery<T: DeserializeOwned>(
        &self,
        id: &str,
        delivery: &str,
    ) -> ClientResult<T> {
        let path = format!("/api/settings/webhooks/{id}/deliveries/{delivery}/replay");
        self.post(&path, &Value::Null).await
    }

    /// Sends again every failed delivery since `since` (RFC 3339): `{"replayed": n}`.
    pub async fn replay_failed<T: DeserializeOwned>(
        &self,
        id: &str,
        since: &str,
    ) -> ClientResult<T> {
        let body = serde_json::json!({ "since": since });
        self.post(&format!("/api/settings/webhooks/{id}/replay"), &body)
            .await
    }

    /// `{"signingSecret"}`: the current one.
    pub async fn webhook_signing_secret<T: DeserializeOwned>(&self, id: &str) -> ClientResult<T> {
        self.get(&format!("/api/settings/webhooks/{id}/signing-secret"))
            .await
    }

    /// A new signing secret; the old ones sign too for `grace_seconds` (default a day).
    pub async fn rotate_webhook_secret<T: DeserializeOwned>(
        &self,
        id: &str,
        grace_seconds: Option<i64>,
    ) -> ClientResult<T> {
        let body = match grace_seconds {
            Some(g) => serde_json::json!({ "graceSeconds": g }),
            None => serde_json::json!({}),
        };
        self.post(&format!("/api/settings/webhooks/{id}/rotate-secret"), &body)
            .await
    }

    /// The caller's notices after `after` (oldest first; without it, the latest `limit`); with `wait`
    /// seconds the server holds the request until one comes.
    pub async fn notifications<T: DeserializeOwned>(
        &self,
        after: Option<i64>,
        limit: Option<i64>,
        wait: Option<u64>,
    ) -> ClientResult<T> {
        let q = follow_query(after, limit, wait);
        self.get(&format!("/api/v1/notifications?{q}")).await
    }
}

/// `after`, `limit` and `wait` of a followed list, as a query string.
fn follow_query(after: Option<i64>, limit: Option<i64>, wait: Option<u64>) -> String {
    let q: Vec<(&str, String)> = [
        ("after", after.map(|a| a.to_string())),
        ("limit", limit.map(|l| l.to_string())),
        ("wait", wait.map(|w| w.to_string())),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.map(|v| (k, v)))
    .collect();
    serde_urlencoded::to_string(&q).unwrap_or_default()
}

/// `path`, with `query` (without its `?`) when there is one.
fn with_query(path: String, query: &str) -> String {
    match query.is_empty() {
        true => path,
        false => format!("{path}?{query}"),
    }
}
