//! Catalog items and recipes (service spec 2.1, 2.2), the list query (4.1), and the stored form of an item.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::model::{repo, Accelerator, EngineType};

/// Tasks a catalog item may carry: the `task` enum of the list operation (4.1).
pub const CATALOG_TASKS: [&str; 21] = [
    "custom",
    "any-to-any",
    "audio-classification",
    "automatic-speech-recognition",
    "feature-extraction",
    "fill-mask",
    "image-classification",
    "image-segmentation",
    "image-text-to-text",
    "object-detection",
    "question-answering",
    "sentence-similarity",
    "summarization",
    "table-question-answering",
    "text-classification",
    "text-generation",
    "text-ranking",
    "text-to-image",
    "token-classification",
    "translation",
    "zero-shot-classification",
];

/// Engines the list operation filters by. `vllm` also matches its Neuron and Omni variants.
pub const ENGINE_FILTERS: [&str; 4] = ["llamacpp", "tei", "vllm", "sglang"];

/// Largest `limit` the list accepts: JavaScript's `Number.MAX_SAFE_INTEGER`.
pub const MAX_LIMIT: u64 = 9_007_199_254_740_991;

/// A catalog item as listed (2.1): exactly the spec's fields.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CatalogItem {
    pub model_name: String,
    /// UTC, RFC 3339, ends with `Z`.
    pub created_at: String,
    pub author_name: String,
    pub license: String,
    pub repo_id: String,
    pub task: String,
    pub recipes: Vec<Recipe>,
}

/// A recipe as listed (2.2): exactly the spec's fields.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Recipe {
    pub accelerator: Accelerator,
    pub engine_type: EngineType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gguf_file: Option<String>,
    pub public_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct CatalogListOut {
    pub items: Vec<CatalogItem>,
}

/// A catalog item as stored and as the admin API takes it: the public fields plus, per recipe,
/// the memory the recipe needs, which decides which compute can run it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CatalogEntry {
    pub model_name: String,
    pub created_at: String,
    pub author_name: String,
    pub license: String,
    pub repo_id: String,
    pub task: String,
    pub recipes: Vec<RecipeEntry>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecipeEntry {
    pub accelerator: Accelerator,
    pub engine_type: EngineType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gguf_file: Option<String>,
    pub public_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Accelerator memory (GPU, Neuron) or RAM (CPU) in GB that serving this recipe needs. Internal.
    pub memory_gb: f64,
}

impl CatalogEntry {
    /// Problems with this entry, as (field, message); empty when it is valid.
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut bad = |field: &str, msg: String| out.push((field.to_string(), msg));
        if self.model_name.is_empty() {
            bad("modelName", "must not be empty".into());
        }
        if self.author_name.is_empty() {
            bad("authorName", "must not be empty".into());
        }
        if self.repo_id != format!("{}/{}", self.author_name, self.model_name) {
            bad(
                "repoId",
                format!(
                    "must be authorName/modelName ({}/{})",
                    self.author_name, self.model_name
                ),
            );
        } else if let Err(message) = repo::check_repo_id(&self.repo_id) {
            bad("repoId", message.into());
        }
        if self.license.is_empty() {
            bad("license", "must not be empty".into());
        }
        if !CATALOG_TASKS.contains(&self.task.as_str()) {
            bad("task", format!("unknown task {:?}", self.task));
        }
        if !is_utc_timestamp(&self.created_at) {
            bad(
                "createdAt",
                "must be an RFC 3339 UTC date-time ending with Z".into(),
            );
        }
        if self.recipes.is_empty() {
            bad("recipes", "must list at least one recipe".into());
        }
        let mut ids = std::collections::HashSet::new();
        for (i, r) in self.recipes.iter().enumerate() {
            let at = |f: &str| format!("recipes[{i}].{f}");
            if !ids.insert(r.public_id.as_str()) {
                bad(
                    &at("publicId"),
                    "used by another recipe of this item".into(),
                );
            }
            let id_ok = !r.public_id.is_empty()
                && r.public_id.len() <= 64
                && r.public_id
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
            if !id_ok {
                bad(
                    &at("publicId"),
                    "1 to 64 characters of a-z, 0-9 or -".into(),
                );
            }
            if !(r.memory_gb.is_finite() && r.memory_gb > 0.0) {
                bad(&at("memoryGb"), "must be a number greater than 0".into());
            }
            if let Some(Err(message)) = r.revision.as_deref().map(repo::check_revision) {
                bad(&at("revision"), message.into());
            }
            if let Some(message) = r.gguf_file_problem() {
                bad(&at("ggufFile"), message.into());
            }
        }
        out
    }

    pub fn public(&self) -> CatalogItem {
        CatalogItem {
            model_name: self.model_name.clone(),
            created_at: self.created_at.clone(),
            author_name: self.author_name.clone(),
            license: self.license.clone(),
            repo_id: self.repo_id.clone(),
            task: self.task.clone(),
            recipes: self.recipes.iter().map(RecipeEntry::public).collect(),
        }
    }
}

impl RecipeEntry {
    /// A llamacpp recipe names its `.gguf` file, a path inside the model's repository; no other recipe
    /// has one.
    fn gguf_file_problem(&self) -> Option<&'static str> {
        match (self.engine_type, self.gguf_file.as_deref()) {
            (EngineType::Llamacpp, None) => Some("a llamacpp recipe names its GGUF file"),
            (EngineType::Llamacpp, Some(f)) if !f.ends_with(".gguf") => Some("must end with .gguf"),
            (EngineType::Llamacpp, Some(f)) if f.starts_with('/') => {
                Some("must be a path relative to the model's repository")
            }
            (EngineType::Llamacpp, Some(f)) => repo::check_model_file(f).err(),
            (_, Some(_)) => Some("only llamacpp recipes have a GGUF file"),
            (_, None) => None,
        }
    }

    pub fn public(&self) -> Recipe {
        Recipe {
            accelerator: self.accelerator,
            engine_type: self.engine_type,
            gguf_file: self.gguf_file.clone(),
            public_id: self.public_id.clone(),
            revision: self.revision.clone(),
        }
    }

    /// Whether this recipe passes the list's `engine` filter.
    pub fn matches_engine_filter(&self, engine: &str) -> bool {
        match engine {
            "vllm" => matches!(
                self.engine_type,
                EngineType::Vllm | EngineType::VllmNeuron | EngineType::VllmOmni
            ),
            other => self.engine_type.as_str() == other,
        }
    }
}

/// `YYYY-MM-DDTHH:MM:SS[.fff]Z`, a real calendar date and time.
pub fn is_utc_timestamp(s: &str) -> bool {
    s.ends_with('Z') && DateTime::parse_from_rfc3339(s).is_ok()
}

pub fn utc_timestamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The list operation's query, parsed (4.1).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CatalogQuery {
    pub accelerator: Option<Accelerator>,
    pub engine: Option<String>,
    pub license: Option<String>,
    pub limit: Option<u64>,
    /// Lower-cased; matched against model name, author and repo id.
    pub search: Option<String>,
    pub task: Option<String>,
}

impl CatalogQuery {
    /// Parses decoded query pairs. On failure, returns one message per bad parameter.
    pub fn parse(pairs: &[(String, String)]) -> Result<CatalogQuery, BTreeMap<String, String>> {
        let mut q = CatalogQuery::default();
        let mut bad = BTreeMap::new();
        let mut seen = std::collections::HashSet::new();
        for (key, value) in pairs {
            if !seen.insert(key.as_str()) {
                bad.insert(key.clone(), "given more than once".to_string());
                continue;
            }
            match key.as_str() {
                "accelerator" => match Accelerator::parse(value) {
                    Some(a) => q.accelerator = Some(a),
                    None => {
                        bad.insert(key.clone(), one_of(value, &["cpu", "gpu", "neuron"]));
                    }
                },
                "engine" => {
                    if ENGINE_FILTERS.contains(&value.as_str()) {
                        q.engine = Some(value.clone());
                    } else {
                        bad.insert(key.clone(), one_of(value, &ENGINE_FILTERS));
                    }
                }
                "license" => q.license = Some(value.clone()),
                "search" => q.search = Some(value.to_lowercase()),
                "task" => {
                    if CATALOG_TASKS.contains(&value.as_str()) {
                        q.task = Some(value.clone());
                    } else {
                        bad.insert(key.clone(), one_of(value, &CATALOG_TASKS));
                    }
                }
                "limit" => match parse_limit(value) {
                    Some(n) => q.limit = Some(n),
                    None => {
                        bad.insert(
                            key.clone(),
                            format!(
                                "{value:?} is not an integer greater than 0 and at most {MAX_LIMIT}"
                            ),
                        );
                    }
                },
                _ => {
                    bad.insert(
                        key.clone(),
                        "unknown parameter; expected accelerator, engine, license, limit, search or task"
                            .to_string(),
                    );
                }
            }
        }
        if bad.is_empty() {
            Ok(q)
        } else {
            Err(bad)
        }
    }

    /// Whether a recipe passes the recipe-level filters (accelerator and engine, on the same recipe).
    pub fn recipe_matches(&self, r: &RecipeEntry) -> bool {
        self.accelerator.is_none_or(|a| r.accelerator == a)
            && self
                .engine
                .as_deref()
                .is_none_or(|e| r.matches_engine_filter(e))
    }

    pub fn has_recipe_filter(&self) -> bool {
        self.accelerator.is_some() || self.engine.is_some()
    }
}

fn one_of(value: &str, allowed: &[&str]) -> String {
    format!("{value:?} is not one of: {}", allowed.join(", "))
}

fn parse_limit(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 16 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<u64>()
        .ok()
        .filter(|n| (1..=MAX_LIMIT).contains(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn limit_bounds() {
        assert_eq!(parse_limit("1"), Some(1));
        assert_eq!(parse_limit("9007199254740991"), Some(MAX_LIMIT));
        for bad in [
            "0",
            "-1",
            "1.5",
            "1.0",
            "abc",
            "",
            "9007199254740992",
            "+3",
            "1e3",
            "99999999999999999999",
        ] {
            assert_eq!(parse_limit(bad), None, "{bad}");
        }
    }

    #[test]
    fn query_accepts_every_filter() {
        let q = CatalogQuery::parse(&pairs(&[
            ("accelerator", "gpu"),
            ("engine", "vllm"),
            ("license", "mit"),
            ("limit", "5"),
            ("search", "LLaMA"),
            ("task", "text-generation"),
        ]))
        .unwrap();
        assert_eq!(q.accelerator, Some(Accelerator::Gpu));
        assert_eq!(q.engine.as_deref(), Some("vllm"));
        assert_eq!(q.limit, Some(5));
        assert_eq!(q.search.as_deref(), Some("llama"));
    }

    #[test]
    fn query_names_each_bad_parameter() {
        let err = CatalogQuery::parse(&pairs(&[
            ("accelerator", "tpu"),
            ("engine", "vllmNeuron"),
            ("task", "sentence-embeddings"),
            ("limit", "0"),
            ("colour", "red"),
        ]))
        .unwrap_err();
        let keys: Vec<_> = err.keys().map(String::as_str).collect();
        assert_eq!(keys, ["accelerator", "colour", "engine", "limit", "task"]);
        assert!(err["accelerator"].contains("cpu, gpu, neuron"));
    }

    #[test]
    fn query_rejects_zero_gpu_and_duplicates() {
        assert!(CatalogQuery::parse(&pairs(&[("accelerator", "zero_gpu")])).is_err());
        let err = CatalogQuery::parse(&pairs(&[("limit", "1"), ("limit", "2")])).unwrap_err();
        assert!(err["limit"].contains("more than once"));
    }

    fn entry() -> CatalogEntry {
        CatalogEntry {
            model_name: "m".into(),
            created_at: "2024-01-02T03:04:05Z".into(),
            author_name: "a".into(),
            license: "mit".into(),
            repo_id: "a/m".into(),
            task: "text-generation".into(),
            recipes: vec![RecipeEntry {
                accelerator: Accelerator::Cpu,
                engine_type: EngineType::Llamacpp,
                gguf_file: Some("m-Q4_K_M.gguf".into()),
                public_id: "a-m-cpu".into(),
                revision: None,
                memory_gb: 2.0,
            }],
        }
    }

    #[test]
    fn entry_rules() {
        assert!(entry().problems().is_empty());
        let mut e = entry();
        e.repo_id = "b/m".into();
        e.created_at = "2024-02-30T00:00:00Z".into();
        e.task = "sentence-embeddings".into();
        e.recipes[0].gguf_file = None;
        e.recipes[0].public_id = "Bad Id".into();
        e.recipes[0].memory_gb = 0.0;
        let fields: Vec<_> = e.problems().into_iter().map(|(f, _)| f).collect();
        assert_eq!(
            fields,
            [
                "repoId",
                "task",
                "createdAt",
                "recipes[0].publicId",
                "recipes[0].memoryGb",
                "recipes[0].ggufFile"
            ]
        );
    }

    #[test]
    fn entry_repo_ids_revisions_and_files_are_checked_as_what_they_are() {
        let mut e = entry();
        e.author_name = "--help".into();
        e.repo_id = "--help/m".into();
        e.recipes[0].revision = Some("--output=/etc/x".into());
        e.recipes[0].gguf_file = Some("../../etc/passwd.gguf".into());
        let fields: Vec<_> = e.problems().into_iter().map(|(f, _)| f).collect();
        assert_eq!(
            fields,
            ["repoId", "recipes[0].revision", "recipes[0].ggufFile"]
        );
        let mut e = entry();
        e.recipes[0].gguf_file = Some("/repository/m.gguf".into());
        assert_eq!(e.problems()[0].0, "recipes[0].ggufFile");
        e.recipes[0].gguf_file = Some("Q4_K_M/m-00001-of-00002.gguf".into());
        e.recipes[0].revision = Some("refs/pr/1".into());
        assert!(e.problems().is_empty());
    }

    #[test]
    fn timestamps_need_z_and_a_real_date() {
        assert!(is_utc_timestamp("2024-02-29T23:59:59Z"));
        assert!(!is_utc_timestamp("2023-02-29T00:00:00Z"));
        assert!(!is_utc_timestamp("2024-01-01T00:00:00+00:00"));
    }

    #[test]
    fn vllm_filter_covers_its_variants() {
        let mut r = entry().recipes[0].clone();
        r.engine_type = EngineType::VllmNeuron;
        assert!(r.matches_engine_filter("vllm"));
        assert!(!r.matches_engine_filter("tei"));
    }
}
