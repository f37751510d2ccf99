//! What the state asks the runtime to do ([`Effect`]), and the requests it carries.
//!
//! The requests are an endpoint action, an OAuth app's action, a webhook's action, a deploy and a spec handed
//! to `$EDITOR`. Plain
//! data, below everything that makes or runs an effect.

use chrono::{DateTime, Duration, Utc};
use serde_json::Value;

use crate::format::Format;

/// Work the runtime does for the state's `update`: API calls, each reporting back as an action, and what only
/// the runtime can do (the clipboard, `$EDITOR`, the client in use).
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    SignIn,
    /// With a sequence number and the API's filters (`accelerator`, `engine`, `license`, `task`, `search`,
    /// `limit`).
    LoadCatalog(u64, Vec<(String, String)>),
    LoadLogs {
        namespace: String,
        name: String,
    },
    /// The ready replicas of an endpoint described, with their load.
    LoadReplicas {
        namespace: String,
        name: String,
    },
    /// An endpoint's series from `from` to now over `range`, and its decisions (its describe's charts).
    LoadAnalytics {
        namespace: String,
        name: String,
        range: ChartRange,
        from: DateTime<Utc>,
    },
    /// Each endpoint's requests per second from `from` to now (the list's sparklines).
    LoadSparklines {
        endpoints: Vec<(String, String)>,
        from: DateTime<Utc>,
    },
    Deploy(DeployRequest),
    /// What the server can run (`GET /api/v1/engines`), after `delay` seconds; `polled` while an install is
    /// followed.
    LoadEngines {
        delay: u64,
        polled: bool,
    },
    /// Starts installing a built-in engine on the server, which `endpoint` waits for.
    InstallEngine {
        name: String,
        endpoint: String,
    },
    /// Put text on the user's clipboard (OSC 52: works over ssh too).
    Copy(String),
    /// A partial update of an endpoint, from an editor (answered by `Action::Saved`).
    Update {
        namespace: String,
        name: String,
        patch: Value,
    },
    /// Every namespace the user may see, with a sequence number.
    LoadEndpoints(u64, Vec<String>),
    /// Suspend the console and edit `text` in `$VISUAL`/`$EDITOR` (the runtime owns the terminal).
    ExternalEdit(ExternalEdit, String),
    /// Talk to another server from now on (`None`: the one the console started with), with a token.
    Connect(Option<(String, Option<String>)>),
    Act {
        action: EndpointAction,
        namespace: String,
        name: String,
    },
    /// The OAuth apps of a namespace (`None`: the signed-in user's), with a sequence number.
    LoadApps(u64, Option<String>),
    /// Registers an OAuth app: the create body (answered by `Action::AppCreated`).
    CreateApp(Value),
    /// A confirmed action on an OAuth app, by client id; `name` is for the messages.
    AppAct {
        action: AppAction,
        id: String,
        name: String,
    },
    /// An organization's audit log, with a sequence number.
    LoadAudit(u64, String),
    /// The caller's webhooks and its organizations', with a sequence number.
    LoadWebhooks(u64),
    /// Creates (`id` `None`) or updates a webhook with the form's body (answered by `Action::WebhookSaved`).
    SaveWebhook {
        id: Option<String>,
        body: Value,
    },
    /// A confirmed action on a webhook; `url` is for the messages.
    WebhookAct {
        action: WebhookAction,
        id: String,
        url: String,
    },
    /// Follows a webhook's attempts: those after `after` (`None`: the newest page at once), the server holding
    /// the request up to `wait` seconds until one comes; after `delay` seconds (a failed poll backs off).
    /// `feed` tells the answer for the deliveries view open now from one for a view left since.
    FollowDeliveries {
        feed: u64,
        id: String,
        after: Option<i64>,
        wait: u64,
        delay: u64,
    },
    /// Reads the webhook of the deliveries view again (`feed` as for its attempts): whether it is held, and
    /// why.
    LoadWebhook {
        feed: u64,
        id: String,
    },
    /// Sends one delivery of a webhook again (answered by `Action::Replayed`).
    ReplayDelivery {
        id: String,
        delivery: String,
    },
    /// Follows the user's notifications the same way (`None`: the latest, at once).
    FollowNotifications {
        after: Option<i64>,
        wait: u64,
        delay: u64,
    },
    /// Reads the servers on the store (`GET /api/v1/admin/servers`) after `delay` seconds (answered by
    /// `Action::ServersLoaded`).
    LoadServers {
        delay: u64,
    },
}

/// A webhook action; each is confirmed first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookAction {
    Enable,
    Disable,
    Delete,
}

impl WebhookAction {
    pub fn verb(self) -> &'static str {
        match self {
            WebhookAction::Enable => "enable",
            WebhookAction::Disable => "disable",
            WebhookAction::Delete => "delete",
        }
    }
}

/// A lifecycle action on an endpoint, as the API names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointAction {
    Pause,
    Resume,
    ScaleToZero,
    Delete,
}

impl EndpointAction {
    pub fn verb(self) -> &'static str {
        match self {
            EndpointAction::Pause => "pause",
            EndpointAction::Resume => "resume",
            EndpointAction::ScaleToZero => "scale-to-zero",
            EndpointAction::Delete => "delete",
        }
    }
}

/// An action on an OAuth app; each is confirmed first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppAction {
    /// A new secret, shown once; the old one stops working.
    RotateSecret,
    /// No secret any more: the app becomes public.
    DeleteSecret,
    Delete,
}

/// What a submitted deploy form asks the server for.
#[derive(Debug, Clone, PartialEq)]
pub struct DeployRequest {
    /// `Ok(repo_id)` for a model, `Err(public_id)` for one recipe.
    pub target: Result<String, String>,
    pub body: Value,
    /// The update that sets the endpoint's `notifications` once it is made (a deploy body has no place for
    /// them); `None` when both are off, as a new endpoint's are.
    pub notifications: Option<Value>,
}

/// A spec handed to `$EDITOR`: whose it is, the spec it started from and the text's format (what the spec
/// editor needs again when the text comes back).
#[derive(Debug, Clone, PartialEq)]
pub struct ExternalEdit {
    pub namespace: String,
    pub name: String,
    pub original: Value,
    pub format: Format,
}

/// The time the charts cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChartRange {
    Minutes15,
    #[default]
    Hour,
    Day,
    Week,
}

impl ChartRange {
    pub const ALL: [ChartRange; 4] = [
        ChartRange::Minutes15,
        ChartRange::Hour,
        ChartRange::Day,
        ChartRange::Week,
    ];

    pub fn label(self) -> &'static str {
        match self {
            ChartRange::Minutes15 => "15m",
            ChartRange::Hour => "1h",
            ChartRange::Day => "24h",
            ChartRange::Week => "7d",
        }
    }

    pub fn span(self) -> Duration {
        match self {
            ChartRange::Minutes15 => Duration::minutes(15),
            ChartRange::Hour => Duration::hours(1),
            ChartRange::Day => Duration::hours(24),
            ChartRange::Week => Duration::days(7),
        }
    }

    /// Seconds between the server's samples the range is drawn from (10 s ones for the last hour, minute
    /// ones beyond): reloading more often finds nothing new.
    pub fn every_s(self) -> i64 {
        match self {
            ChartRange::Minutes15 | ChartRange::Hour => 10,
            ChartRange::Day | ChartRange::Week => 60,
        }
    }

    /// The next one, after the longest the shortest.
    pub fn next(self) -> ChartRange {
        let at = ChartRange::ALL.iter().position(|r| *r == self).unwrap_or(0);
        ChartRange::ALL[(at + 1) % ChartRange::ALL.len()]
    }
}
