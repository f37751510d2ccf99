//! Turning a catalog item or recipe into an endpoint spec: which recipe, on which compute, under which
//! name, with which image. The spec is built as JSON and then parsed by the model like any other
//! submitted spec, so a deployed endpoint is valid by the same rules as a created one.

use std::collections::HashSet;

use serde_json::{json, Map, Value};

use crate::hardware::{HardwareList, Placement};
use crate::model::catalog::{CatalogEntry, RecipeEntry};
use crate::model::{Accelerator, EngineType};

/// Longest endpoint name (service spec 2.3).
pub const MAX_NAME_LEN: usize = 32;

#[derive(Debug, PartialEq)]
pub enum PlanError {
    /// 404: no recipe matches what was asked for.
    NoRecipe(String),
    /// 409: recipes match, but no available compute can run any of them.
    NoCompute(String),
}

/// A recipe and the compute it will run on.
#[derive(Debug, Clone, Copy)]
pub struct Plan<'a> {
    pub entry: &'a CatalogEntry,
    pub recipe: &'a RecipeEntry,
    pub placement: Placement<'a>,
}

/// For `deployCatalogModel`: the first recipe (in catalog order) that matches `accelerator` and
/// `gguf_file` and fits on some available compute.
pub fn plan_model<'a>(
    entry: &'a CatalogEntry,
    accelerator: Option<Accelerator>,
    gguf_file: Option<&str>,
    hardware: &'a HardwareList,
) -> Result<Plan<'a>, PlanError> {
    let candidates: Vec<&RecipeEntry> = entry
        .recipes
        .iter()
        .filter(|r| accelerator.is_none_or(|a| r.accelerator == a))
        .filter(|r| gguf_file.is_none_or(|g| r.gguf_file.as_deref() == Some(g)))
        .collect();
    if candidates.is_empty() {
        let mut wanted = Vec::new();
        if let Some(a) = accelerator {
            wanted.push(format!("accelerator {}", a.as_str()));
        }
        if let Some(g) = gguf_file {
            wanted.push(format!("GGUF file {g}"));
        }
        return Err(PlanError::NoRecipe(format!(
            "{} has no recipe with {}",
            entry.repo_id,
            wanted.join(" and ")
        )));
    }
    candidates
        .iter()
        .find_map(|r| place(entry, r, hardware))
        .ok_or_else(|| no_compute(entry, &candidates, hardware))
}

/// For `deployCatalogRecipe`: exactly this recipe, on the smallest compute that fits it.
pub fn plan_recipe<'a>(
    entry: &'a CatalogEntry,
    recipe: &'a RecipeEntry,
    hardware: &'a HardwareList,
) -> Result<Plan<'a>, PlanError> {
    place(entry, recipe, hardware).ok_or_else(|| no_compute(entry, &[recipe], hardware))
}

fn place<'a>(
    entry: &'a CatalogEntry,
    recipe: &'a RecipeEntry,
    hardware: &'a HardwareList,
) -> Option<Plan<'a>> {
    hardware
        .smallest_fit(recipe.accelerator.as_str(), recipe.memory_gb)
        .map(|placement| Plan {
            entry,
            recipe,
            placement,
        })
}

/// Why none of `recipes` can be placed: this server cannot run their accelerator, or no available instance
/// is large enough.
fn no_compute(
    entry: &CatalogEntry,
    recipes: &[&RecipeEntry],
    hardware: &HardwareList,
) -> PlanError {
    let needs: Vec<String> = recipes
        .iter()
        .map(|r| {
            let accelerator = r.accelerator.as_str();
            match hardware.cannot_run(accelerator) {
                Some(why) => format!("{} runs on {accelerator}, and {why}", r.public_id),
                None => format!("{} needs {} GB on {accelerator}", r.public_id, r.memory_gb),
            }
        })
        .collect();
    let reason = match recipes
        .iter()
        .all(|r| hardware.cannot_run(r.accelerator.as_str()).is_some())
    {
        true => "this server cannot run it",
        false => "no available instance is large enough",
    };
    PlanError::NoCompute(format!(
        "no compatible compute found for {}: {reason} ({})",
        entry.repo_id,
        needs.join("; ")
    ))
}

/// An endpoint name from a model name: lower-cased, runs of other characters turned into `-`, at most
/// 32 characters, and made unique among `taken` with a numeric suffix.
pub fn derive_name(model_name: &str, taken: &HashSet<String>) -> String {
    let base = name_stem(model_name);
    let first = fit(&base, MAX_NAME_LEN);
    if !taken.contains(&first) {
        return first;
    }
    (2u32..)
        .map(|n| {
            let suffix = format!("-{n}");
            format!("{}{suffix}", fit(&base, MAX_NAME_LEN - suffix.len()))
        })
        .find(|candidate| !taken.contains(candidate))
        .unwrap_or(first)
}

/// The prefix every name `derive_name` can produce for this model starts with.
pub fn name_prefix(model_name: &str) -> String {
    // Suffixes of up to 5 digits cut the stem to 26 characters; a shorter prefix still narrows the search.
    fit(&name_stem(model_name), MAX_NAME_LEN - 6)
}

/// At most `room` characters of `s`, without a trailing `-`.
fn fit(s: &str, room: usize) -> String {
    s.chars()
        .take(room)
        .collect::<String>()
        .trim_end_matches('-')
        .to_string()
}

fn name_stem(model_name: &str) -> String {
    let mut base = String::new();
    for c in model_name.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            base.push(c);
        } else if !base.ends_with('-') && !base.is_empty() {
            base.push('-');
        }
    }
    let base = base.trim_matches('-').to_string();
    if base.is_empty() {
        "endpoint".into()
    } else {
        base
    }
}

/// The key of the serving image a recipe of `engine` gets (see [`image_for`]).
pub fn image_key(engine: EngineType) -> &'static str {
    match engine {
        EngineType::Tei => "tei",
        EngineType::Llamacpp => "llamacpp",
        EngineType::Vllm => "vLLM",
        EngineType::Sglang => "sGLang",
        EngineType::VllmNeuron => "vLLMNeuron",
        EngineType::VllmOmni => "vLLMOmni",
        EngineType::Custom => "custom",
    }
}

/// The serving image of a recipe: its container and port by engine (and accelerator where the image
/// differs), under the engine's key ([`image_key`]).
pub fn image_for(recipe: &RecipeEntry) -> Value {
    let gpu = recipe.accelerator == Accelerator::Gpu;
    let (url, port) = match recipe.engine_type {
        EngineType::Tei if gpu => ("ghcr.io/huggingface/text-embeddings-inference:1.8", 80),
        EngineType::Tei => ("ghcr.io/huggingface/text-embeddings-inference:cpu-1.8", 80),
        EngineType::Llamacpp if gpu => ("ghcr.io/ggml-org/llama.cpp:server-cuda", 8080),
        EngineType::Llamacpp => ("ghcr.io/ggml-org/llama.cpp:server", 8080),
        EngineType::Vllm => ("vllm/vllm-openai:v0.11.0", 8000),
        EngineType::Sglang => ("lmsysorg/sglang:v0.5.4", 30000),
        EngineType::VllmNeuron => (
            "public.ecr.aws/neuron/pytorch-inference-vllm-neuronx:0.9.1",
            8080,
        ),
        EngineType::VllmOmni => ("vllm/vllm-omni:v0.11.0", 8091),
        EngineType::Custom => ("ghcr.io/huggingface/hf-endpoints-toolkit:latest", 80),
    };
    let mut image = json!({ "url": url, "port": port, "healthRoute": "/health" });
    if recipe.engine_type == EngineType::Llamacpp {
        let file = recipe.gguf_file.as_deref().unwrap_or_default();
        image["modelPath"] = Value::String(format!("/repository/{file}"));
    }
    let mut keyed = Map::new();
    keyed.insert(image_key(recipe.engine_type).to_string(), image);
    Value::Object(keyed)
}

fn framework_for(engine: EngineType) -> &'static str {
    match engine {
        EngineType::Llamacpp => "llamacpp",
        EngineType::Custom => "custom",
        _ => "pytorch",
    }
}

/// The endpoint spec for a plan, before the deploy `config` overrides: authenticated, scale-to-zero
/// after the default 15 minutes, one replica at most.
pub fn base_spec(plan: &Plan<'_>, name: &str) -> Value {
    let c = plan.placement.compute;
    json!({
        "name": name,
        "type": "authenticated",
        "provider": { "vendor": plan.placement.vendor, "region": plan.placement.region },
        "compute": {
            "accelerator": c.accelerator,
            "instanceType": c.instance_type,
            "instanceSize": c.instance_size,
            "scaling": { "minReplica": 0, "maxReplica": 1, "scaleToZeroTimeout": 15 }
        },
        "model": {
            "repository": plan.entry.repo_id,
            "framework": framework_for(plan.recipe.engine_type),
            "image": image_for(plan.recipe),
            "revision": plan.recipe.revision,
            "task": plan.entry.task,
            "fromCatalog": true
        }
    })
}

/// Applies a deploy `config` (already checked by the model) to a base spec.
pub fn apply_config(spec: &mut Value, config: &Map<String, Value>) {
    if let Some(t) = config.get("type") {
        spec["type"] = t.clone();
    }
    if let Some(Value::Object(scaling)) = config.get("scaling") {
        for (k, v) in scaling {
            spec["compute"]["scaling"][k] = v.clone();
        }
        // A minimum above zero leaves no idle timeout to apply.
        let min = spec["compute"]["scaling"]["minReplica"]
            .as_f64()
            .unwrap_or(0.0);
        if min > 0.0 && !scaling.contains_key("scaleToZeroTimeout") {
            spec["compute"]["scaling"]["scaleToZeroTimeout"] = Value::Null;
        }
        // Asking for more replicas than the default maximum raises the maximum with it.
        let max = spec["compute"]["scaling"]["maxReplica"]
            .as_f64()
            .unwrap_or(0.0);
        if min > max && !scaling.contains_key("maxReplica") {
            spec["compute"]["scaling"]["maxReplica"] =
                spec["compute"]["scaling"]["minReplica"].clone();
        }
    }
    if let Some(Value::Object(ps)) = config.get("privateService") {
        let mut ps = ps.clone();
        ps.entry("region")
            .or_insert_with(|| Value::String("us-east-1".into()));
        spec["privateService"] = Value::Object(ps);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::load_seed;

    fn taken(names: &[&str]) -> HashSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn names_are_valid_short_and_unique() {
        assert_eq!(
            derive_name("Llama-3.2-1B-Instruct", &taken(&[])),
            "llama-3-2-1b-instruct"
        );
        assert_eq!(derive_name("bge_large.en", &taken(&[])), "bge-large-en");
        assert_eq!(derive_name("___", &taken(&[])), "endpoint");
        let long = "A".repeat(40);
        let n = derive_name(&long, &taken(&[]));
        assert_eq!(n.len(), 32);
        let t = taken(&[&n]);
        let n2 = derive_name(&long, &t);
        assert_eq!(n2.len(), 32);
        assert!(n2.ends_with("-2"));
        assert_eq!(derive_name("m", &taken(&["m", "m-2"])), "m-3");
        // Every derived name starts with the prefix used to look up taken names.
        let prefix = name_prefix(&long);
        assert!(n.starts_with(&prefix) && n2.starts_with(&prefix));
        assert_eq!(name_prefix("Llama-3.2-1B"), "llama-3-2-1b");
    }

    #[test]
    fn plans_pick_the_asked_recipe_and_a_compute_that_fits() {
        let seed = load_seed(None).unwrap();
        let hw = HardwareList::built_in().unwrap();
        let multi = seed
            .iter()
            .find(|e| {
                e.recipes.iter().any(|r| r.accelerator == Accelerator::Cpu)
                    && e.recipes.iter().any(|r| r.accelerator == Accelerator::Gpu)
            })
            .unwrap();
        let plan = plan_model(multi, Some(Accelerator::Gpu), None, &hw).unwrap();
        assert_eq!(plan.recipe.accelerator, Accelerator::Gpu);
        assert_eq!(plan.placement.compute.accelerator, "gpu");
        assert!(plan.placement.compute.model_memory_gb() >= plan.recipe.memory_gb);
        assert!(matches!(
            plan_model(multi, None, Some("nope.gguf"), &hw),
            Err(PlanError::NoRecipe(_))
        ));
    }

    #[test]
    fn oversized_models_have_no_compute() {
        let seed = load_seed(None).unwrap();
        let hw = HardwareList::built_in().unwrap();
        let huge = seed.iter().find(|e| e.repo_id.contains("405B")).unwrap();
        match plan_model(huge, None, None, &hw) {
            Err(PlanError::NoCompute(m)) => assert!(m.contains("no compatible compute")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn gguf_recipes_carry_their_model_path() {
        let seed = load_seed(None).unwrap();
        let r = seed
            .iter()
            .flat_map(|e| &e.recipes)
            .find(|r| r.engine_type == EngineType::Llamacpp)
            .unwrap();
        let img = image_for(r);
        let path = img["llamacpp"]["modelPath"].as_str().unwrap();
        assert!(path.ends_with(r.gguf_file.as_deref().unwrap()));
    }

    #[test]
    fn config_overrides_scaling_type_and_private_service() {
        let mut spec = json!({"type": "authenticated", "compute": {"scaling": {"minReplica": 0, "maxReplica": 1, "scaleToZeroTimeout": 15}}});
        let config = json!({"type": "private", "scaling": {"minReplica": 2}, "privateService": {"accountId": "123"}});
        apply_config(&mut spec, config.as_object().unwrap());
        assert_eq!(spec["type"], "private");
        assert_eq!(spec["compute"]["scaling"]["minReplica"], 2);
        assert_eq!(spec["compute"]["scaling"]["maxReplica"], 2);
        assert_eq!(
            spec["compute"]["scaling"]["scaleToZeroTimeout"],
            Value::Null
        );
        assert_eq!(spec["privateService"]["region"], "us-east-1");
    }
}
