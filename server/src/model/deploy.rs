//! Catalog deploy bodies (spec 4.2–4.4) and the recipe enums the catalog shares with them.
//!
//! These bodies are read field by field so that every problem is reported, type errors included.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::model::endpoint::{EndpointName, EndpointType, PrivateLinkRegion};
use crate::model::issue::{Fields, Issue, Issues};
use crate::model::wire::{Int, INT32_MAX};

/// Accelerator of a catalog recipe (and the `accelerator` deploy filter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Accelerator {
    Cpu,
    Gpu,
    Neuron,
}

impl Accelerator {
    pub fn as_str(self) -> &'static str {
        match self {
            Accelerator::Cpu => "cpu",
            Accelerator::Gpu => "gpu",
            Accelerator::Neuron => "neuron",
        }
    }

    pub fn parse(s: &str) -> Option<Accelerator> {
        [Accelerator::Cpu, Accelerator::Gpu, Accelerator::Neuron]
            .into_iter()
            .find(|a| a.as_str() == s)
    }
}

impl From<Accelerator> for crate::model::endpoint::ComputeAccelerator {
    fn from(a: Accelerator) -> Self {
        use crate::model::endpoint::ComputeAccelerator as C;
        match a {
            Accelerator::Cpu => C::Cpu,
            Accelerator::Gpu => C::Gpu,
            Accelerator::Neuron => C::Neuron,
        }
    }
}

/// Serving engine of a catalog recipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
pub enum EngineType {
    #[serde(rename = "custom")]
    Custom,
    #[serde(rename = "llamacpp")]
    Llamacpp,
    #[serde(rename = "sglang")]
    Sglang,
    #[serde(rename = "tei")]
    Tei,
    #[serde(rename = "vllm")]
    Vllm,
    #[serde(rename = "vllmNeuron")]
    VllmNeuron,
    #[serde(rename = "vllmOmni")]
    VllmOmni,
}

impl EngineType {
    pub const ALL: [EngineType; 7] = [
        EngineType::Custom,
        EngineType::Llamacpp,
        EngineType::Sglang,
        EngineType::Tei,
        EngineType::Vllm,
        EngineType::VllmNeuron,
        EngineType::VllmOmni,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EngineType::Custom => "custom",
            EngineType::Llamacpp => "llamacpp",
            EngineType::Sglang => "sglang",
            EngineType::Tei => "tei",
            EngineType::Vllm => "vllm",
            EngineType::VllmNeuron => "vllmNeuron",
            EngineType::VllmOmni => "vllmOmni",
        }
    }
}

/// Body of `POST /api/v1/catalog/model/{author}/{model}/deploy`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeployModelIn {
    pub namespace: String,
    /// Picks the recipe with this accelerator.
    pub accelerator: Option<Accelerator>,
    /// Picks the recipe serving this model file.
    pub gguf_file: Option<String>,
    pub config: Option<DeployConfig>,
}

/// Body of `POST /api/v1/catalog/recipe/{recipePublicId}/deploy`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeployRecipeIn {
    pub namespace: String,
    pub config: Option<DeployConfig>,
}

/// Overrides applied to the recipe's endpoint (spec 4.4).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeployConfig {
    /// Endpoint name; follows the endpoint name rule.
    pub name: Option<String>,
    #[serde(rename = "type")]
    pub endpoint_type: Option<EndpointType>,
    pub scaling: Option<DeployScaling>,
    pub private_service: Option<DeployPrivateService>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeployScaling {
    pub max_replica: Option<u32>,
    pub min_replica: Option<u32>,
    pub scale_to_zero_timeout: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeployPrivateService {
    pub account_id: String,
    /// Defaults to `us-east-1`.
    pub region: PrivateLinkRegion,
    pub shared: Option<bool>,
}

type Count = Int<INT32_MAX>;

impl DeployModelIn {
    pub fn parse(value: &Value) -> Result<DeployModelIn, Vec<Issue>> {
        let mut issues = Issues::default();
        let body = Fields::of(value, "", &mut issues).and_then(|mut f| {
            let namespace = read_namespace(&mut f, &mut issues);
            let accelerator = f.optional("accelerator", &mut issues);
            let gguf_file = f.optional("ggufFile", &mut issues);
            let config = f
                .object("config", &mut issues)
                .map(|c| DeployConfig::read(c, &mut issues));
            f.finish(&mut issues);
            Some(DeployModelIn {
                namespace: namespace?,
                accelerator,
                gguf_file,
                config,
            })
        });
        finish(body, issues)
    }
}

impl DeployRecipeIn {
    pub fn parse(value: &Value) -> Result<DeployRecipeIn, Vec<Issue>> {
        let mut issues = Issues::default();
        let body = Fields::of(value, "", &mut issues).and_then(|mut f| {
            let namespace = read_namespace(&mut f, &mut issues);
            let config = f
                .object("config", &mut issues)
                .map(|c| DeployConfig::read(c, &mut issues));
            f.finish(&mut issues);
            Some(DeployRecipeIn {
                namespace: namespace?,
                config,
            })
        });
        finish(body, issues)
    }
}

fn read_namespace(f: &mut Fields<'_>, issues: &mut Issues) -> Option<String> {
    let namespace: String = f.required("namespace", issues)?;
    if namespace.is_empty() {
        issues.push("namespace", "must not be empty");
    }
    Some(namespace)
}

/// A body is returned only when no issue at all was found (a partly read body is never used).
fn finish<T>(body: Option<T>, issues: Issues) -> Result<T, Vec<Issue>> {
    match body {
        Some(body) if issues.is_empty() => Ok(body),
        _ => Err(issues.into_vec()),
    }
}

impl DeployConfig {
    fn read(mut f: Fields<'_>, issues: &mut Issues) -> DeployConfig {
        let name: Option<String> = f.optional("name", issues);
        if let Some(Err(e)) = name.as_deref().map(EndpointName::parse) {
            issues.push(f.path("name"), e.to_string());
        }
        let endpoint_type: Option<EndpointType> = f.optional("type", issues);
        let scaling = f.object("scaling", issues).map(|mut s| {
            let mut count = |key| s.optional::<Count>(key, issues).map(|c| narrow(c.0));
            let scaling = DeployScaling {
                max_replica: count("maxReplica"),
                min_replica: count("minReplica"),
                scale_to_zero_timeout: count("scaleToZeroTimeout"),
            };
            s.finish(issues);
            scaling
        });
        let private_service = f.object("privateService", issues).and_then(|mut p| {
            let account_id = p.required("accountId", issues);
            let region = p.optional("region", issues).unwrap_or_default();
            let shared = p.optional("shared", issues);
            p.finish(issues);
            Some(DeployPrivateService {
                account_id: account_id?,
                region,
                shared,
            })
        });
        let private = endpoint_type == Some(EndpointType::Private);
        match (f.was_given("privateService"), private) {
            (true, false) => issues.push(
                f.path("privateService"),
                "is only allowed when type is `private`",
            ),
            (false, true) => issues.push(
                f.path("privateService"),
                "is required when type is `private`: it names the account the private entry point serves",
            ),
            _ => {}
        }
        f.finish(issues);
        DeployConfig {
            name,
            endpoint_type,
            scaling,
            private_service,
        }
    }
}

/// `Count` is bounded by `i32::MAX`, so it always fits.
fn narrow(value: u64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn paths(result: Result<impl std::fmt::Debug, Vec<Issue>>) -> Vec<String> {
        result.unwrap_err().into_iter().map(|i| i.path).collect()
    }

    #[test]
    fn the_python_client_bodies_parse() {
        let model = DeployModelIn::parse(&json!({
            "namespace": "alice", "config": {"name": "my-qwen"}, "accelerator": "gpu",
            "ggufFile": "Qwen2.5-Coder-32B-Instruct-Q4_K_M.gguf"
        }))
        .unwrap();
        assert_eq!(model.accelerator, Some(Accelerator::Gpu));
        assert_eq!(model.config.unwrap().name.as_deref(), Some("my-qwen"));
        let recipe = DeployRecipeIn::parse(&json!({"namespace": "alice"})).unwrap();
        assert_eq!(
            recipe,
            DeployRecipeIn {
                namespace: "alice".into(),
                config: None
            }
        );
    }

    #[test]
    fn full_config() {
        let body = DeployRecipeIn::parse(&json!({
            "namespace": "acme",
            "config": {
                "name": "x", "type": "private",
                "scaling": {"maxReplica": 2.0, "minReplica": 0, "scaleToZeroTimeout": 30},
                "privateService": {"accountId": "123456789012"}
            }
        }))
        .unwrap();
        let config = body.config.unwrap();
        assert_eq!(
            config.scaling,
            Some(DeployScaling {
                max_replica: Some(2),
                min_replica: Some(0),
                scale_to_zero_timeout: Some(30)
            })
        );
        let ps = config.private_service.unwrap();
        assert_eq!((ps.region, ps.shared), (PrivateLinkRegion::UsEast1, None));
    }

    #[test]
    fn every_issue_is_reported() {
        let found = paths(DeployModelIn::parse(&json!({
            "accelerator": "tpu",
            "extra": 1,
            "config": {
                "name": "Bad Name",
                "type": "public",
                "scaling": {"maxReplica": 1.5, "minReplica": -1, "scaleToZeroTimeout": "1", "foo": 0},
                "privateService": {"region": "ap-south-1"}
            }
        })));
        assert_eq!(
            found,
            [
                "namespace",
                "accelerator",
                "config.name",
                "config.scaling.maxReplica",
                "config.scaling.minReplica",
                "config.scaling.scaleToZeroTimeout",
                "config.scaling.foo",
                "config.privateService.accountId",
                "config.privateService.region",
                "config.privateService",
                "extra",
            ]
        );
    }

    #[test]
    fn a_private_deploy_names_its_private_service_and_names_do_not_start_with_a_dash() {
        let found = paths(DeployRecipeIn::parse(
            &json!({"namespace": "a", "config": {"type": "private"}}),
        ));
        assert_eq!(found, ["config.privateService"]);
        let found = paths(DeployRecipeIn::parse(
            &json!({"namespace": "a", "config": {"name": "-x"}}),
        ));
        assert_eq!(found, ["config.name"]);
    }

    #[test]
    fn recipe_body_has_no_accelerator() {
        let found = paths(DeployRecipeIn::parse(
            &json!({"namespace": "a", "accelerator": "gpu"}),
        ));
        assert_eq!(found, ["accelerator"]);
    }

    #[test]
    fn optional_fields_are_not_nullable_and_body_must_be_an_object() {
        assert_eq!(
            paths(DeployModelIn::parse(
                &json!({"namespace": "a", "ggufFile": null})
            )),
            ["ggufFile"]
        );
        assert_eq!(
            paths(DeployModelIn::parse(
                &json!({"namespace": "a", "config": null})
            )),
            ["config"]
        );
        assert_eq!(paths(DeployRecipeIn::parse(&json!("x"))), [""]);
    }

    #[test]
    fn enums_spell_as_the_spec() {
        assert_eq!(
            serde_json::to_value(EngineType::VllmNeuron).unwrap(),
            json!("vllmNeuron")
        );
        assert_eq!(
            serde_json::to_value(Accelerator::Neuron).unwrap(),
            json!("neuron")
        );
        for e in EngineType::ALL {
            assert_eq!(serde_json::to_value(e).unwrap(), json!(e.as_str()));
        }
    }
}
