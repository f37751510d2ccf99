//! The rows of the lists, catalog models (with their recipes), endpoints, OAuth apps and audit entries, as
//! parsed from the API.
//!
//! Each keeps, lowercased once, what the `/` filter matches in it. Text that others choose (an app's name, the
//! email an exchange asked for) comes in with its control characters dropped: it never steers the terminal.

use serde_json::Value;

/// The fields `/` looks in, lowercased and kept apart so a match never spans two of them.
fn search_text(fields: &[&str]) -> String {
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
            raw: ep.clone(),
        };
        row.search = search_text(&[&row.namespace, &row.name, &row.state, &row.model, &row.kind]);
        row
    }

    pub(super) fn matches(&self, filter: &str) -> bool {
        self.search.contains(filter)
    }
}

/// Text as the screen shows it: control characters (escape sequences, newlines) dropped.
fn plain(v: &Value) -> String {
    v.as_str()
        .unwrap_or("")
        .chars()
        .filter(|c| !c.is_control())
        .collect()
}

/// `2026-11-22T10:00:00.123Z` as `2026-11-22 10:00:00`.
fn time(v: &Value) -> String {
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
                false => "confidential (has a secret; R rotates it, X deletes it)",
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

    /// Whether the entry records a success (else a refusal).
    pub fn succeeded(&self) -> bool {
        self.outcome == "success"
    }

    pub(super) fn matches(&self, filter: &str) -> bool {
        self.search.contains(filter)
    }
}
