//! The catalog held in memory for listing: built from the store, answered without touching it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, RwLock};

use crate::model::catalog::{CatalogEntry, CatalogQuery};
use crate::store::{Store, StoreError};

const BUILT_IN_SEED: &str = include_str!("../../assets/catalog.json");

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SeedFile {
    items: Vec<CatalogEntry>,
}

/// The seed catalog: the built-in one or a file, every entry checked.
pub fn load_seed(path: Option<&Path>) -> Result<Vec<CatalogEntry>, String> {
    let (text, name) = match path {
        None => (BUILT_IN_SEED.to_string(), "built-in catalog".to_string()),
        Some(p) => (
            std::fs::read_to_string(p).map_err(|e| format!("reading {}: {e}", p.display()))?,
            p.display().to_string(),
        ),
    };
    let seed: SeedFile = serde_json::from_str(&text).map_err(|e| format!("{name}: {e}"))?;
    let mut ids = std::collections::HashSet::new();
    for e in &seed.items {
        if let Some((field, msg)) = e.problems().into_iter().next() {
            return Err(format!("{name}: {}: {field}: {msg}", e.repo_id));
        }
        for r in &e.recipes {
            if !ids.insert(r.public_id.as_str()) {
                return Err(format!(
                    "{name}: recipe publicId {:?} is used twice",
                    r.public_id
                ));
            }
        }
    }
    Ok(seed.items)
}

/// One item, pre-rendered so a listing is mostly copying bytes.
struct Indexed {
    entry: CatalogEntry,
    /// `{"modelName":…,"task":…,"recipes":[` — the item's JSON up to its recipes.
    head: String,
    /// Each recipe's public JSON.
    recipes: Vec<String>,
    /// Lower-cased model name, author and repo id, for `search`.
    haystack: [String; 3],
}

/// An immutable snapshot of the catalog, in list order (by repo id).
pub struct CatalogIndex {
    items: Vec<Indexed>,
    by_repo: HashMap<String, usize>,
    by_recipe: HashMap<String, (usize, usize)>,
}

impl CatalogIndex {
    pub fn new(mut entries: Vec<CatalogEntry>) -> CatalogIndex {
        entries.sort_by(|a, b| a.repo_id.cmp(&b.repo_id));
        let mut by_repo = HashMap::new();
        let mut by_recipe = HashMap::new();
        let items: Vec<Indexed> = entries
            .into_iter()
            .enumerate()
            .map(|(i, entry)| {
                by_repo.insert(entry.repo_id.to_lowercase(), i);
                for (j, r) in entry.recipes.iter().enumerate() {
                    by_recipe.insert(r.public_id.clone(), (i, j));
                }
                let public = entry.public();
                let mut head = serde_json::to_string(&public).unwrap_or_default();
                // The public item serializes `recipes` last: cut it there to get the head.
                if let Some(pos) = head.rfind("\"recipes\":[") {
                    head.truncate(pos + "\"recipes\":[".len());
                }
                let recipes = public
                    .recipes
                    .iter()
                    .map(|r| serde_json::to_string(r).unwrap_or_default())
                    .collect();
                let haystack = [
                    entry.model_name.to_lowercase(),
                    entry.author_name.to_lowercase(),
                    entry.repo_id.to_lowercase(),
                ];
                Indexed {
                    entry,
                    head,
                    recipes,
                    haystack,
                }
            })
            .collect();
        CatalogIndex {
            items,
            by_repo,
            by_recipe,
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The list response body `{"items":[…]}` for a query. An item is listed with the recipes that
    /// pass the recipe filters (accelerator, engine), and only if at least one does.
    pub fn list_json(&self, q: &CatalogQuery) -> String {
        let limit = q
            .limit
            .map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
        let mut out = String::with_capacity(64 * 1024);
        out.push_str("{\"items\":[");
        let mut listed = 0usize;
        for item in &self.items {
            if listed >= limit {
                break;
            }
            let e = &item.entry;
            if q.task.as_deref().is_some_and(|t| e.task != t)
                || q.license
                    .as_deref()
                    .is_some_and(|l| !e.license.eq_ignore_ascii_case(l))
                || q.search
                    .as_deref()
                    .is_some_and(|s| !item.haystack.iter().any(|h| h.contains(s)))
            {
                continue;
            }
            let mut first_recipe = true;
            let mut any = false;
            for (r, json) in e.recipes.iter().zip(&item.recipes) {
                if !q.recipe_matches(r) {
                    continue;
                }
                if !any {
                    if listed > 0 {
                        out.push(',');
                    }
                    out.push_str(&item.head);
                    any = true;
                }
                if !first_recipe {
                    out.push(',');
                }
                out.push_str(json);
                first_recipe = false;
            }
            if any {
                out.push_str("]}");
                listed += 1;
            }
        }
        out.push_str("]}");
        out
    }

    /// The item with this repo id (matched without regard to case, as repo ids are).
    pub fn by_repo_id(&self, repo_id: &str) -> Option<&CatalogEntry> {
        self.by_repo
            .get(&repo_id.to_lowercase())
            .map(|&i| &self.items[i].entry)
    }

    /// The item and the index of the recipe with this public id.
    pub fn by_recipe_id(&self, public_id: &str) -> Option<(&CatalogEntry, usize)> {
        self.by_recipe
            .get(public_id)
            .map(|&(i, j)| (&self.items[i].entry, j))
    }

    pub fn entries(&self) -> impl Iterator<Item = &CatalogEntry> {
        self.items.iter().map(|i| &i.entry)
    }
}

/// The current snapshot, loaded from the store on first use and after every change. If loading
/// fails, the list answers 500 until a load succeeds.
#[derive(Default)]
pub struct CatalogCache {
    current: RwLock<Option<Arc<CatalogIndex>>>,
}

impl CatalogCache {
    pub async fn get(&self, store: &dyn Store) -> Result<Arc<CatalogIndex>, StoreError> {
        if let Some(idx) = self.peek() {
            return Ok(idx);
        }
        self.reload(store).await
    }

    fn peek(&self) -> Option<Arc<CatalogIndex>> {
        self.current.read().ok().and_then(|g| g.clone())
    }

    /// Rebuilds the snapshot from the store; on failure the cache is emptied so no stale data is served.
    pub async fn reload(&self, store: &dyn Store) -> Result<Arc<CatalogIndex>, StoreError> {
        let loaded = match store.read().await {
            Ok(mut session) => session.catalog_entries().await,
            Err(e) => Err(e),
        };
        let mut slot = match self.current.write() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        match loaded {
            Ok(entries) => {
                let idx = Arc::new(CatalogIndex::new(entries));
                *slot = Some(idx.clone());
                Ok(idx)
            }
            Err(e) => {
                *slot = None;
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::catalog::CATALOG_TASKS;
    use crate::model::{Accelerator, EngineType};

    fn seed() -> Vec<CatalogEntry> {
        load_seed(None).unwrap()
    }

    fn list(idx: &CatalogIndex, pairs: &[(&str, &str)]) -> Vec<serde_json::Value> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let q = CatalogQuery::parse(&pairs).unwrap();
        let body: serde_json::Value = serde_json::from_str(&idx.list_json(&q)).unwrap();
        body["items"].as_array().unwrap().clone()
    }

    #[test]
    fn seed_covers_the_issue() {
        let s = seed();
        assert!(s.len() >= 40);
        for t in CATALOG_TASKS {
            assert!(s.iter().any(|e| e.task == t), "task {t}");
        }
        for a in [Accelerator::Cpu, Accelerator::Gpu, Accelerator::Neuron] {
            assert!(s
                .iter()
                .flat_map(|e| &e.recipes)
                .any(|r| r.accelerator == a));
        }
        for e in EngineType::ALL {
            assert!(s
                .iter()
                .flat_map(|e| &e.recipes)
                .any(|r| r.engine_type == e));
        }
        let licenses: std::collections::HashSet<_> = s.iter().map(|e| &e.license).collect();
        assert!(licenses.len() >= 5);
    }

    #[test]
    fn items_have_exactly_the_spec_fields() {
        let idx = CatalogIndex::new(seed());
        let items = list(&idx, &[]);
        assert_eq!(items.len(), idx.len());
        for it in &items {
            let keys: Vec<_> = it.as_object().unwrap().keys().cloned().collect();
            assert_eq!(
                keys,
                [
                    "modelName",
                    "createdAt",
                    "authorName",
                    "license",
                    "repoId",
                    "task",
                    "recipes"
                ]
            );
            for r in it["recipes"].as_array().unwrap() {
                for k in r.as_object().unwrap().keys() {
                    assert!(
                        [
                            "accelerator",
                            "engineType",
                            "ggufFile",
                            "publicId",
                            "revision"
                        ]
                        .contains(&k.as_str()),
                        "{k}"
                    );
                }
            }
            assert!(it["createdAt"].as_str().unwrap().ends_with('Z'));
        }
        let ids: Vec<_> = items
            .iter()
            .map(|i| i["repoId"].as_str().unwrap().to_string())
            .collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted, "deterministic order");
    }

    #[test]
    fn filters_narrow_and_keep_only_matching_recipes() {
        let idx = CatalogIndex::new(seed());
        let all = list(&idx, &[]);
        let gpu = list(&idx, &[("accelerator", "gpu")]);
        assert!(!gpu.is_empty() && gpu.len() < all.len());
        assert!(gpu
            .iter()
            .flat_map(|i| i["recipes"].as_array().unwrap())
            .all(|r| r["accelerator"] == "gpu"));
        let tei_cpu = list(&idx, &[("accelerator", "cpu"), ("engine", "tei")]);
        assert!(!tei_cpu.is_empty());
        assert!(tei_cpu
            .iter()
            .flat_map(|i| i["recipes"].as_array().unwrap())
            .all(|r| r["accelerator"] == "cpu" && r["engineType"] == "tei"));
        let tg = list(&idx, &[("task", "text-generation")]);
        assert!(tg.iter().all(|i| i["task"] == "text-generation"));
        let lic = list(&idx, &[("license", "MIT")]);
        assert!(!lic.is_empty() && lic.iter().all(|i| i["license"] == "mit"));
        assert_eq!(list(&idx, &[("limit", "3")]).len(), 3);
        assert_eq!(
            list(&idx, &[("limit", "9007199254740991")]).len(),
            all.len()
        );
    }

    #[test]
    fn search_is_case_insensitive_over_name_author_and_repo() {
        let idx = CatalogIndex::new(seed());
        let first = &list(&idx, &[])[0];
        let author = first["authorName"].as_str().unwrap().to_uppercase();
        let hits = list(&idx, &[("search", &author)]);
        assert!(hits.iter().any(|i| i["repoId"] == first["repoId"]));
        assert!(list(&idx, &[("search", "no-such-model-anywhere")]).is_empty());
    }

    #[test]
    fn lookups_by_repo_and_recipe() {
        let idx = CatalogIndex::new(seed());
        let e = idx.entries().next().unwrap().clone();
        assert_eq!(
            idx.by_repo_id(&e.repo_id.to_uppercase()).unwrap().repo_id,
            e.repo_id
        );
        let (found, j) = idx.by_recipe_id(&e.recipes[0].public_id).unwrap();
        assert_eq!(found.repo_id, e.repo_id);
        assert_eq!(j, 0);
        assert!(idx.by_recipe_id("nope").is_none());
    }

    #[test]
    fn bad_seeds_are_rejected_with_the_item_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.json");
        std::fs::write(
            &p,
            BUILT_IN_SEED.replacen("\"task\": \"", "\"task\": \"x", 1),
        )
        .unwrap();
        let err = load_seed(Some(&p)).unwrap_err();
        assert!(err.contains("task"), "{err}");
    }
}
