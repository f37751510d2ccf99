//! The rows of the two lists, catalog models (with their recipes) and endpoints, as parsed from the API.
//!
//! Each keeps, lowercased once, what the `/` filter matches in it.

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
