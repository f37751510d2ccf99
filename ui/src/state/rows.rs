//! The rows of the lists, catalog models (with their recipes), endpoints, OAuth apps and audit entries, and
//! the servers on the store, as parsed from the API.
//!
//! Each keeps, lowercased once, what the `/` filter matches in it. Text that others choose (an app's name, the
//! email an exchange asked for) comes in with its control characters dropped: it never steers the terminal.

use chrono::{DateTime, Utc};
use serde_json::Value;

/// The fields `/` looks in, lowercased and kept apart so a match never spans two of them.
pub(super) fn search_text(fields: &[&str]) -> String {
    fields.join("\u{1}").to_lowercase()
}

/// One catalog item as the list shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogRow {
    pub repo_id: String,
    pub author: String,
    pub model: String,
    pub task: String,
    pub license: String,
    pub accelerators: String,
    pub engines: String,
    pub created: String,
    pub recipes: Vec<Recipe>,
    /// What `/` searches, lowercased once.
    search: String,
}

/// One recipe of a catalog model.
#[derive(Debug, Clone, PartialEq)]
pub struct Recipe {
    pub id: String,
    pub accelerator: String,
    pub engine: String,
    /// The model file, for engines that take one (empty otherwise).
    pub file: String,
}

impl Recipe {
    /// The column heads over [`Recipe::line`]s.
    pub fn header() -> String {
        Recipe::columns("RECIPE", "ACCELERATOR", "ENGINE", "MODEL FILE")
    }

    /// The recipe as a line of the recipes pane and of a model's description.
    pub fn line(&self) -> String {
        Recipe::columns(&self.id, &self.accelerator, &self.engine, &self.file)
    }

    fn columns(id: &str, accelerator: &str, engine: &str, file: &str) -> String {
        format!("{id:<44} {accelerator:<12} {engine:<12} {file}")
            .trim_end()
            .to_string()
    }
}

impl CatalogRow {
    pub fn from_json(item: &Value) -> CatalogRow {
        let s = |v: &Value| v.as_str().unwrap_or("").to_string();
        let recipes: Vec<Recipe> = item["recipes"]
            .as_array()
            .map(|rs| {
                rs.iter()
                    .map(|r| Recipe {
                        id: s(&r["publicId"]),
                        accelerator: s(&r["accelerator"]),
                        engine: s(&r["engineType"]),
                        file: s(&r["ggufFile"]),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let distinct = |f: fn(&Recipe) -> &String| {
            let mut v: Vec<String> = recipes.iter().map(|r| f(r).clone()).collect();
            v.sort();
            v.dedup();
            v.join(",")
        };
        let mut row = CatalogRow {
            search: String::new(),
            repo_id: s(&item["repoId"]),
            author: s(&item["authorName"]),
            model: s(&item["modelName"]),
            task: s(&item["task"]),
            license: s(&item["license"]),
            accelerators: distinct(|r| &r.accelerator),
            engines: distinct(|r| &r.engine),
            created: s(&item["createdAt"]).chars().take(10).collect(),
            recipes,
        };
        row.search = search_text(&[
            &row.repo_id,
            &row.task,
            &row.license,
            &row.accelerators,
            &row.engines,
        ]);
        row
    }

    pub(super) fn matches(&self, filter: &str) -> bool {
        self.search.contains(filter)
    }
}

/// Whether a catalog recipe runs on the server, as `GET /api/v1/engines` says.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RecipeRuns {
    pub runs: bool,
    /// What starts it (an engine's name or program), when it runs.
    pub engine: String,
    /// The built-in engine that would run it once installed.
    pub install: Option<String>,
    /// Why it does not run here.
    pub message: String,
    /// What it lacks here, as the server says: `compute` or `engine`.
    pub lacks: String,
}

impl RecipeRuns {
    /// Whether the recipe runs here, would once a built-in engine is installed, or not.
    fn runs_here(&self) -> Runs {
        match (self.runs, &self.install) {
            (true, _) => Runs::Here,
            (false, Some(_)) => Runs::AfterInstall,
            (false, None) => Runs::No,
        }
    }
}

/// An engine install on the server and how far it came.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EngineInstall {
    pub name: String,
    pub percent: u64,
    pub step: String,
    pub running: bool,
    pub error: Option<String>,
}

/// Whether a model or recipe runs on this server: the console's mark, and its colour. Ordered from best to
/// worst: a model is marked by its best recipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Runs {
    Here,
    /// Once a built-in engine is installed.
    AfterInstall,
    No,
    /// The server did not say.
    Unsaid,
}

impl Runs {
    /// The catalog's mark.
    pub fn mark(self) -> &'static str {
        match self {
            Runs::Here => "yes",
            Runs::AfterInstall => "install",
            Runs::No => "no",
            Runs::Unsaid => "",
        }
    }
}

/// What the server can run: each catalog recipe's answer, and the installs it knows of. Empty on a server
/// that does not say (older, or the caller is not signed in): then nothing is marked.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EngineMarks {
    pub recipes: std::collections::BTreeMap<String, RecipeRuns>,
    pub installs: Vec<EngineInstall>,
}

impl EngineMarks {
    pub fn from_json(v: &Value) -> EngineMarks {
        let recipes = v["recipes"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(id, r)| {
                        let runs = RecipeRuns {
                            runs: r["runs"].as_bool().unwrap_or(false),
                            engine: plain(&r["engine"]),
                            install: r["install"].as_str().map(|_| plain(&r["install"])),
                            message: plain(&r["message"]),
                            lacks: plain(&r["lacks"]),
                        };
                        (id.clone(), runs)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let installs = v["engines"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["install"].is_object())
            .map(|e| EngineInstall {
                name: plain(&e["name"]),
                percent: e["install"]["percent"].as_u64().unwrap_or(0),
                step: plain(&e["install"]["step"]),
                running: e["install"]["running"].as_bool().unwrap_or(false),
                error: e["install"]["error"]
                    .as_str()
                    .map(|_| plain(&e["install"]["error"])),
            })
            .collect();
        EngineMarks { recipes, installs }
    }

    /// Whether one of a model's recipes runs here, would once a built-in engine is installed, or none;
    /// `Unsaid` when the server did not say.
    pub fn model_mark(&self, row: &CatalogRow) -> Runs {
        let answers = row.recipes.iter().filter_map(|r| self.recipes.get(&r.id));
        answers
            .map(RecipeRuns::runs_here)
            .min()
            .unwrap_or(Runs::Unsaid)
    }

    /// Whether a recipe (of `accelerator`) runs here, and its note in the recipes pane.
    pub fn recipe_note(&self, id: &str, accelerator: &str) -> (Runs, String) {
        let Some(r) = self.recipes.get(id) else {
            return (Runs::Unsaid, String::new());
        };
        let runs = r.runs_here();
        let note = match (runs, &r.install) {
            (Runs::Here, _) => format!("runs here ({})", r.engine),
            (Runs::AfterInstall, Some(name)) => format!("install {name} to run it here"),
            _ if r.lacks == "compute" => format!("no {accelerator} here"),
            _ => "no engine here".to_string(),
        };
        (runs, note)
    }

    /// The built-in engine a deploy of `recipes` needs first: none when one of them runs here.
    pub fn needed(&self, recipes: &[&Recipe]) -> Option<String> {
        let answers: Vec<&RecipeRuns> = recipes
            .iter()
            .filter_map(|r| self.recipes.get(&r.id))
            .collect();
        if answers.iter().any(|r| r.runs) {
            return None;
        }
        answers.iter().find_map(|r| r.install.clone())
    }
}

/// One endpoint as the list shows it; `raw` is the whole resource for describe.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointRow {
    pub namespace: String,
    pub name: String,
    pub state: String,
    pub ready: u64,
    pub target: u64,
    pub model: String,
    pub kind: String,
    pub url: String,
    pub updated: String,
    /// Why the endpoint is in its state (`status.message`: a failure's cause), when the server says.
    pub message: String,
    pub raw: Value,
    /// What `/` searches, lowercased once.
    search: String,
}

impl EndpointRow {
    pub fn from_json(namespace: &str, ep: &Value) -> EndpointRow {
        let s = |v: &Value| v.as_str().unwrap_or("").to_string();
        let mut row = EndpointRow {
            search: String::new(),
            namespace: namespace.to_string(),
            name: s(&ep["name"]),
            state: s(&ep["status"]["state"]),
            ready: ep["status"]["readyReplica"].as_u64().unwrap_or(0),
            target: ep["status"]["targetReplica"].as_u64().unwrap_or(0),
            model: s(&ep["model"]["repository"]),
            kind: s(&ep["type"]),
            url: s(&ep["status"]["url"]),
            updated: s(&ep["status"]["updatedAt"])
                .replace('T', " ")
                .chars()
                .take(19)
                .collect(),
            message: plain(&ep["status"]["message"]),
            raw: ep.clone(),
        };
        row.search = search_text(&[&row.namespace, &row.name, &row.state, &row.model, &row.kind]);
        row
    }

    /// What describe leads with, above the whole resource: the state and why, the replicas, the URL, the
    /// model and its image, the scaling, and the schedule's entry in effect at `minute` of the day (UTC).
    pub fn summary(&self, minute: u16) -> String {
        let or_none = |s: &str| if s.is_empty() { "-" } else { s }.to_string();
        let image = self.raw["model"]["image"]
            .as_object()
            .and_then(|m| m.keys().next().cloned())
            .unwrap_or_else(|| "-".to_string());
        let scaling = &self.raw["compute"]["scaling"];
        let lines = [
            ("state", self.state.clone()),
            ("why", or_none(&self.message)),
            (
                "replicas",
                format!("{} ready of {} wanted", self.ready, self.target),
            ),
            ("url", or_none(&self.url)),
            (
                "model",
                format!("{} (image: {image})", or_none(&self.model)),
            ),
            ("scaling", scaling_summary(scaling)),
            ("schedule", schedule_summary(&scaling["schedule"], minute)),
        ];
        let mut text = format!("{}/{}\n\n", self.namespace, self.name);
        for (what, value) in lines {
            text.push_str(&format!("{what:<10} {value}\n"));
        }
        text
    }

    pub(super) fn matches(&self, filter: &str) -> bool {
        self.search.contains(filter)
    }
}

/// One ready replica of an endpoint and its load, as the server's proxy sees it (`GET
/// /v2/endpoint/{namespace}/{name}/replicas`): requests it has in flight there, and the engine's queue and
/// KV-cache use as last read (none when they were not).
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaLoad {
    pub id: String,
    pub in_flight: u64,
    pub queue: Option<f64>,
    pub kv_cache: Option<f64>,
}

impl ReplicaLoad {
    /// The rows of a replicas answer (`{"items": [...]}`).
    pub fn list_from_json(v: &Value) -> Vec<ReplicaLoad> {
        let items = v["items"].as_array().into_iter().flatten();
        items
            .map(|r| ReplicaLoad {
                id: r["id"].as_str().unwrap_or("").to_string(),
                in_flight: r["inFlight"].as_u64().unwrap_or(0),
                queue: r["queue"].as_f64(),
                kv_cache: r["kvCache"].as_f64(),
            })
            .collect()
    }

    /// The replicas as describe lists them: a header, then one line each (`-` for a figure not read).
    pub fn table(replicas: &[ReplicaLoad]) -> String {
        let mut text = format!(
            "{:<32} {:>9} {:>6} {:>8}\n",
            "replica", "in flight", "queue", "kv cache"
        );
        for r in replicas {
            let queue = r.queue.map_or("-".to_string(), |q| format!("{q:.0}"));
            let kv = r
                .kv_cache
                .map_or("-".to_string(), |k| format!("{:.0}%", k * 100.0));
            let line = format!("{:<32} {:>9} {queue:>6} {kv:>8}\n", r.id, r.in_flight);
            text.push_str(&line);
        }
        text
    }
}

/// `min 0 · max 3 · scales to zero after 15 min idle`: an endpoint's own scaling.
fn scaling_summary(scaling: &Value) -> String {
    let count = |k: &str| {
        scaling[k]
            .as_u64()
            .map_or("-".to_string(), |n| n.to_string())
    };
    let to_zero = match scaling["minReplica"].as_u64() {
        Some(0) => format!(
            "scales to zero after {} min idle",
            scaling["scaleToZeroTimeout"].as_u64().unwrap_or(15)
        ),
        _ => "never scales to zero".to_string(),
    };
    format!(
        "min {} · max {} · {to_zero}",
        count("minReplica"),
        count("maxReplica")
    )
}

/// The schedule's entry in effect at `minute` of the day, as describe says it.
fn schedule_summary(schedule: &Value, minute: u16) -> String {
    let entries = schedule.as_array().map(Vec::as_slice).unwrap_or_default();
    let ats = entries.iter().map(|e| e["at"].as_str().unwrap_or(""));
    let Some(i) = crate::schedule::in_effect(ats, minute) else {
        return "none (the endpoint's own values apply)".to_string();
    };
    let e = &entries[i];
    let timeout = e["scaleToZeroTimeout"]
        .as_u64()
        .map(|t| format!(" · scales to zero after {t} min idle"))
        .unwrap_or_default();
    format!(
        "entry {} of {} in effect now (from {} UTC): min {} · max {}{timeout}",
        i + 1,
        entries.len(),
        plain(&e["at"]),
        e["minReplica"],
        e["maxReplica"]
    )
}

/// Text as the screen shows it: control characters (escape sequences, newlines) dropped.
pub(super) fn plain(v: &Value) -> String {
    v.as_str()
        .unwrap_or("")
        .chars()
        .filter(|c| !c.is_control())
        .collect()
}

/// `2026-11-22T10:00:00.123Z` as `2026-11-22 10:00:00`.
pub(super) fn time(v: &Value) -> String {
    plain(v).replace('T', " ").chars().take(19).collect()
}

fn plain_list(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(plain)
        .filter(|s| !s.is_empty())
        .collect()
}

/// One OAuth app as the apps list shows it. It never holds a secret: the list has none.
#[derive(Debug, Clone, PartialEq)]
pub struct AppRow {
    /// The client id.
    pub id: String,
    pub owner: String,
    pub name: String,
    pub homepage: String,
    pub logo: String,
    pub redirect_uris: Vec<String>,
    pub scopes: Vec<String>,
    /// Without a secret: a public client (PKCE only).
    pub public: bool,
    /// Bound to its organization with the `token-exchange` privilege.
    pub token_exchange: bool,
    pub created: String,
    pub updated: String,
    /// What `/` searches, lowercased once.
    search: String,
}

impl AppRow {
    pub fn from_json(app: &Value) -> AppRow {
        let mut row = AppRow {
            search: String::new(),
            id: plain(&app["id"]),
            owner: plain(&app["owner"]),
            name: plain(&app["name"]),
            homepage: plain(&app["homepageUrl"]),
            logo: plain(&app["logoUrl"]),
            redirect_uris: plain_list(&app["redirectUris"]),
            scopes: plain_list(&app["scopes"]),
            public: app["hasSecret"] != true,
            token_exchange: app["tokenExchange"] == true,
            created: time(&app["createdAt"]),
            updated: time(&app["updatedAt"]),
        };
        row.search = search_text(&[
            &row.name,
            &row.id,
            &row.redirect_uris.join(" "),
            &row.scopes.join(" "),
        ]);
        row
    }

    /// `public` or `confidential`, as the list and the details say it.
    pub fn kind(&self) -> &'static str {
        if self.public {
            "public"
        } else {
            "confidential"
        }
    }

    /// The app's details, as `enter` shows them.
    pub fn details(&self) -> String {
        let or_none = |s: &str| {
            if s.is_empty() {
                "-".to_string()
            } else {
                s.to_string()
            }
        };
        let mut text = format!(
            "{}\n\nclient id       {}\nowner           {}\nclient type     {}\ntoken exchange  {}\n\
             homepage        {}\nlogo            {}\ncreated         {}\nupdated         {}\n\nscopes\n",
            self.name,
            self.id,
            self.owner,
            match self.public {
                true => "public (no secret: PKCE and device sign-in only)",
                false => "confidential (has a secret, which can be rotated or deleted)",
            },
            match self.token_exchange {
                true => "yes (exchanges members' emails for tokens of the organization)",
                false => "no",
            },
            or_none(&self.homepage),
            or_none(&self.logo),
            self.created,
            self.updated,
        );
        for scope in &self.scopes {
            text.push_str(&format!("  {scope}\n"));
        }
        text.push_str("\nredirect URIs\n");
        if self.redirect_uris.is_empty() {
            text.push_str("  (none: device sign-in only)\n");
        }
        for uri in &self.redirect_uris {
            text.push_str(&format!("  {uri}\n"));
        }
        text
    }

    pub(super) fn matches(&self, filter: &str) -> bool {
        self.search.contains(filter)
    }
}

/// One entry of an organization's audit log.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRow {
    pub id: String,
    pub at: String,
    pub action: String,
    /// `success`, or the OAuth error of a refusal.
    pub outcome: String,
    /// The app's name (its client id when it has none).
    pub app: String,
    pub app_id: String,
    pub subject_email: String,
    pub user: String,
    pub scope: String,
    /// What `/` searches, lowercased once.
    search: String,
}

impl AuditRow {
    pub fn from_json(entry: &Value) -> AuditRow {
        let app = &entry["actor"]["app"];
        let app_id = plain(&app["id"]);
        let detail = &entry["detail"];
        let mut row = AuditRow {
            search: String::new(),
            id: plain(&entry["id"]),
            at: time(&entry["at"]),
            action: plain(&entry["action"]),
            outcome: plain(&entry["outcome"]),
            app: Some(plain(&app["name"]))
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| app_id.clone()),
            app_id,
            subject_email: plain(&detail["subjectEmail"]),
            user: plain(&detail["user"]),
            scope: plain(&detail["scope"]),
        };
        row.search = search_text(&[
            &row.action,
            &row.outcome,
            &row.app,
            &row.subject_email,
            &row.user,
            &row.scope,
        ]);
        row
    }

    /// The entry's every field, as `d` shows it (the list cuts them to fit).
    pub fn details(&self) -> String {
        let or_none = |s: &str| if s.is_empty() { "-" } else { s }.to_string();
        format!(
            "{} · {}\n\nat             {} UTC\naction         {}\noutcome        {}\napp            {} ({})\n\
             subject email  {}\nuser           {}\nscope          {}\n",
            self.action,
            self.outcome,
            self.at,
            self.action,
            self.outcome,
            self.app,
            or_none(&self.app_id),
            or_none(&self.subject_email),
            or_none(&self.user),
            or_none(&self.scope),
        )
    }

    /// Whether the entry records a success (else a refusal).
    pub fn succeeded(&self) -> bool {
        self.outcome == "success"
    }

    pub(super) fn matches(&self, filter: &str) -> bool {
        self.search.contains(filter)
    }
}

/// One webhook as the webhooks list shows it. It never holds the webhook's secret (`X-Webhook-Secret`): the
/// edit form leaves it unchanged unless a new one is typed.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookRow {
    pub id: String,
    pub url: String,
    /// `type:name` of each watched item, as the form takes them.
    pub watched: Vec<String>,
    pub domains: Vec<String>,
    pub enabled: bool,
    pub owner: String,
    /// Why the server disabled it (410 Gone, failing for days), if it did.
    pub disabled_reason: String,
    /// The last attempt, as the list says it (`200 ok`, `timeout`, `503 status`), with its time; empty
    /// before the first.
    pub last: String,
    pub last_ok: bool,
    /// Until when its deliveries are held (the circuit breaker, or a `Retry-After`), as the server said.
    pub held_until: Option<DateTime<Utc>>,
    /// Since when every attempt failed; `None` while the last one succeeded.
    pub failing_since: Option<DateTime<Utc>>,
    /// It has a shared secret (sent as `X-Webhook-Secret`); the secret itself is not kept.
    pub has_secret: bool,
    /// What `/` searches, lowercased once.
    search: String,
}

/// A timestamp of the API (`2026-11-22T10:00:00.123Z`), if it is one.
pub(super) fn instant(v: &Value) -> Option<DateTime<Utc>> {
    let text = v.as_str()?;
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// `10:00:30` or, on another day than `now`, `2026-11-22 10:00:30` (UTC).
pub fn clock(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    match t.date_naive() == now.date_naive() {
        true => t.format("%H:%M:%S").to_string(),
        false => t.format("%Y-%m-%d %H:%M:%S").to_string(),
    }
}

impl WebhookRow {
    /// Whether its deliveries are held at `now`, and until when.
    pub fn held(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.held_until.filter(|t| *t > now)
    }

    /// Why its deliveries are held or stopped, or how it fares, in a sentence: what the deliveries view and
    /// describe say of it.
    pub fn standing(&self, now: DateTime<Utc>) -> String {
        let failing = self
            .failing_since
            .map(|t| format!("every attempt since {} UTC has failed", clock(t, now)));
        match (self.enabled, self.held(now), failing) {
            (false, _, _) if !self.disabled_reason.is_empty() => {
                format!("disabled by the server: {}", self.disabled_reason)
            }
            (false, _, _) => "disabled: nothing is sent until it is enabled".to_string(),
            (true, Some(until), failing) => format!(
                "held until {} UTC: {}, so the circuit breaker (or a Retry-After the receiver sent) holds \
                 its deliveries; they wait without spending an attempt, then one goes first",
                clock(until, now),
                failing.unwrap_or_else(|| "its receiver asked to wait".to_string())
            ),
            (true, None, Some(failing)) => format!("failing: {failing}; retries follow the schedule"),
            (true, None, None) if self.last.is_empty() => "nothing sent yet".to_string(),
            (true, None, None) => format!("receiving: last attempt {}", self.last),
        }
    }

    /// Everything the webhook holds but its secrets, as `d` shows it.
    pub fn details(&self, now: DateTime<Utc>) -> String {
        let or_none = |s: &str| if s.is_empty() { "-" } else { s }.to_string();
        format!(
            "{}\n\nid         {}\nowner      {}\nwatched    {}\ndomains    {}\nenabled    {}\nsecret     {}\n\
             last       {}\nnow        {}\n",
            self.url,
            self.id,
            self.owner,
            self.watched.join(" "),
            self.domains.join(" "),
            if self.enabled { "yes" } else { "no" },
            match self.has_secret {
                true => "set (sent as X-Webhook-Secret; not shown)",
                false => "none (deliveries are signed with its signing secret all the same)",
            },
            or_none(&self.last),
            self.standing(now),
        )
    }

    pub fn from_json(hook: &Value) -> WebhookRow {
        let watched = hook["watched"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|w| format!("{}:{}", plain(&w["type"]), plain(&w["name"])))
            .collect();
        let last = &hook["lastAttempt"];
        let last_text = if last.is_object() {
            let what = match (last["statusCode"].as_u64(), last["ok"] == true) {
                (Some(code), true) => format!("{code} ok"),
                (Some(code), false) => {
                    format!("{code} {}", plain(&last["errorClass"]))
                }
                (None, true) => "ok".to_string(),
                (None, false) => plain(&last["errorClass"]),
            };
            format!("{} {}", what.trim(), time(&last["at"]))
        } else {
            String::new()
        };
        let mut row = WebhookRow {
            search: String::new(),
            id: plain(&hook["id"]),
            url: plain(&hook["url"]),
            watched,
            domains: plain_list(&hook["domains"]),
            enabled: hook["disabled"] != true,
            owner: plain(&hook["owner"]),
            disabled_reason: plain(&hook["disabledReason"]),
            last: last_text,
            last_ok: last["ok"] == true,
            held_until: instant(&hook["heldUntil"]),
            failing_since: instant(&hook["failingSince"]),
            has_secret: hook["secret"].as_str().is_some_and(|s| !s.is_empty()),
        };
        row.search = search_text(&[
            &row.url,
            &row.watched.join(" "),
            &row.domains.join(" "),
            &row.owner,
        ]);
        row
    }

    pub(super) fn matches(&self, filter: &str) -> bool {
        self.search.contains(filter)
    }
}

/// One of the signed-in user's notifications (`GET /api/v1/notifications`).
#[derive(Debug, Clone, PartialEq)]
pub struct NotificationRow {
    pub seq: i64,
    pub at: String,
    /// `endpoint.running`, `endpoint.failed`, `webhook.disabled`, …
    pub kind: String,
    pub namespace: String,
    pub subject: String,
    pub title: String,
    pub message: String,
    /// What `/` searches, lowercased once.
    search: String,
}

impl NotificationRow {
    pub fn from_json(n: &Value) -> NotificationRow {
        let mut row = NotificationRow {
            search: String::new(),
            seq: n["seq"].as_i64().unwrap_or(0),
            at: time(&n["at"]),
            kind: plain(&n["kind"]),
            namespace: plain(&n["namespace"]),
            subject: plain(&n["subject"]),
            title: plain(&n["title"]),
            message: plain(&n["message"]),
        };
        row.search = search_text(&[
            &row.kind,
            &row.namespace,
            &row.subject,
            &row.title,
            &row.message,
        ]);
        row
    }

    /// The line the status line shows: the title, else the kind and the subject.
    pub fn headline(&self) -> String {
        if self.title.is_empty() {
            format!("{} {}/{}", self.kind, self.namespace, self.subject)
        } else {
            self.title.clone()
        }
    }

    /// Something failed or was turned off: shown as an error.
    pub fn is_bad(&self) -> bool {
        [".failed", ".disabled", ".error"]
            .iter()
            .any(|s| self.kind.ends_with(s))
    }

    pub fn details(&self) -> String {
        format!(
            "{}\n\nkind       {}\nnamespace  {}\nsubject    {}\nat         {}\n\n{}\n",
            self.headline(),
            self.kind,
            self.namespace,
            self.subject,
            self.at,
            self.message
        )
    }

    pub(super) fn matches(&self, filter: &str) -> bool {
        self.search.contains(filter)
    }
}

/// One server on the store (`GET /api/v1/admin/servers`), with only what the status line shows: a read that
/// changes nothing of it needs no frame (its heartbeat's time changes at every read).
#[derive(Debug, Clone, PartialEq)]
pub struct ServerRow {
    /// Its data dir's `node-id`.
    pub id: String,
    /// Where it listens (`127.0.0.1:8080`).
    pub address: String,
    /// `running`, `notAnswering` or `stopped`, as the server says it.
    pub state: String,
    /// It holds the leader's lease.
    pub leader: bool,
}

impl ServerRow {
    /// A server as the admin API lists it.
    pub fn from_json(server: &Value) -> ServerRow {
        ServerRow {
            id: plain(&server["id"]),
            address: plain(&server["address"]),
            state: plain(&server["state"]),
            leader: server["leader"] == true,
        }
    }

    /// Its heartbeats stopped without it saying it stopped (killed, hung, cut off).
    pub fn not_answering(&self) -> bool {
        self.state == "notAnswering"
    }
}
