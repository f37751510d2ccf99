//! `model.image`: the serving container, one key per variant (spec 2.8.1), deprecated engine fields kept.
//!
//! Serde's `flatten` cannot be combined with `deny_unknown_fields`, so every variant spells out the base container
//! fields (`url`, `port`, `healthRoute`) itself.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::model::issue::{child, Issues};
use crate::model::repo::check_model_file;
use crate::model::wire;

/// Health route used when the image does not name one.
pub const DEFAULT_HEALTH_ROUTE: &str = "/health";

/// The serving container. Exactly one key on the wire; the key selects the variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub enum ModelImage {
    /// The managed default image. The Python client sends `huggingface` for it.
    #[serde(rename = "hub", alias = "huggingface")]
    Hub(HubImage),
    /// The client's CLI calls this `huggingfaceNeuron`.
    #[serde(rename = "hubNeuron", alias = "huggingfaceNeuron")]
    HubNeuron(HubNeuronImage),
    #[serde(rename = "tgi")]
    Tgi(TgiImage),
    #[serde(rename = "tgiNeuron")]
    TgiNeuron(TgiNeuronImage),
    #[serde(rename = "tei")]
    Tei(TeiImage),
    #[serde(rename = "llamacpp")]
    Llamacpp(LlamacppImage),
    #[serde(rename = "vLLM")]
    Vllm(VllmImage),
    #[serde(rename = "vLLMOmni")]
    VllmOmni(VllmOmniImage),
    #[serde(rename = "vLLMNeuron")]
    VllmNeuron(BaseContainer),
    #[serde(rename = "sGLang")]
    Sglang(SglangImage),
    /// The client's CLI calls this `hfServe`.
    #[serde(rename = "hubServe", alias = "hfServe")]
    HubServe(BaseContainer),
    #[serde(rename = "custom")]
    Custom(CustomImage),
}

/// Input spellings of variant keys that mean a canonical key (see the serde aliases above).
pub(crate) fn canonical_key(key: &str) -> &str {
    match key {
        "huggingface" => "hub",
        "huggingfaceNeuron" => "hubNeuron",
        "hfServe" => "hubServe",
        other => other,
    }
}

/// Builds a [`BaseRef`] from any variant struct with the three base container fields.
macro_rules! base_ref {
    ($i:expr) => {
        BaseRef {
            url: &$i.url,
            port: $i.port,
            health_route: $i.health_route.as_deref(),
        }
    };
}
impl ModelImage {
    /// The wire key of this variant.
    pub fn key(&self) -> &'static str {
        match self {
            ModelImage::Hub(_) => "hub",
            ModelImage::HubNeuron(_) => "hubNeuron",
            ModelImage::Tgi(_) => "tgi",
            ModelImage::TgiNeuron(_) => "tgiNeuron",
            ModelImage::Tei(_) => "tei",
            ModelImage::Llamacpp(_) => "llamacpp",
            ModelImage::Vllm(_) => "vLLM",
            ModelImage::VllmOmni(_) => "vLLMOmni",
            ModelImage::VllmNeuron(_) => "vLLMNeuron",
            ModelImage::Sglang(_) => "sGLang",
            ModelImage::HubServe(_) => "hubServe",
            ModelImage::Custom(_) => "custom",
        }
    }

    /// The base container fields, for variants that have them (all but `hub` and `hubNeuron`).
    pub fn base(&self) -> Option<BaseRef<'_>> {
        let base = match self {
            ModelImage::Hub(_) | ModelImage::HubNeuron(_) => return None,
            ModelImage::Tgi(i) => base_ref!(i),
            ModelImage::TgiNeuron(i) => base_ref!(i),
            ModelImage::Tei(i) => base_ref!(i),
            ModelImage::Llamacpp(i) => base_ref!(i),
            ModelImage::Vllm(i) => base_ref!(i),
            ModelImage::VllmOmni(i) => base_ref!(i),
            ModelImage::VllmNeuron(i) => base_ref!(i),
            ModelImage::Sglang(i) => base_ref!(i),
            ModelImage::HubServe(i) => base_ref!(i),
            ModelImage::Custom(i) => base_ref!(i),
        };
        Some(base)
    }

    /// The route the platform probes: the container's `healthRoute` when set, else its engine's (`/health`;
    /// vLLM's `/v1/models`, since its `/health` answers before the model is loaded).
    pub fn health_route(&self) -> String {
        self.base()
            .and_then(|b| b.health_route)
            .filter(|r| !r.is_empty())
            .unwrap_or(match self {
                ModelImage::Vllm(_) | ModelImage::VllmOmni(_) | ModelImage::VllmNeuron(_) => {
                    "/v1/models"
                }
                _ => DEFAULT_HEALTH_ROUTE,
            })
            .to_owned()
    }

    /// The port the image's engine listens on: the container's `port` when set, else its engine's (TEI and
    /// TGI 80, vLLM 8000, llama.cpp 8080, SGLang 30000; any other image 80).
    pub fn port(&self) -> u16 {
        self.base().and_then(|b| b.port).unwrap_or(match self {
            ModelImage::Vllm(_) | ModelImage::VllmOmni(_) | ModelImage::VllmNeuron(_) => 8000,
            ModelImage::Llamacpp(_) => 8080,
            ModelImage::Sglang(_) => 30000,
            _ => 80,
        })
    }

    /// Whether the image runs an engine that exports the saturation metrics `inferenceLoad` scales on.
    pub fn exports_inference_load(&self) -> bool {
        matches!(self, ModelImage::Vllm(_) | ModelImage::Sglang(_))
    }

    /// The copy shown in responses: registry passwords are secrets too.
    pub fn redacted(&self) -> ModelImage {
        let mut image = self.clone();
        if let ModelImage::Custom(CustomImage {
            credentials: Some(credentials),
            ..
        }) = &mut image
        {
            credentials.password = None;
        }
        image
    }

    /// Semantic rules the types cannot carry.
    pub(crate) fn check(&self, path: &str, issues: &mut Issues) {
        let path = child(path, self.key());
        if let Some(base) = self.base() {
            if base.url.trim().is_empty() {
                issues.push(child(&path, "url"), "must not be empty");
            }
        }
        if let ModelImage::Llamacpp(i) = self {
            i.check_files(&path, issues);
        }
        if let ModelImage::Custom(CustomImage {
            credentials: Some(c),
            ..
        }) = self
        {
            if c.username.is_empty() {
                issues.push(child(&path, "credentials.username"), "must not be empty");
            }
        }
    }
}

/// Borrowed view of the base container fields shared by most variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BaseRef<'a> {
    pub url: &'a str,
    pub port: Option<u16>,
    pub health_route: Option<&'a str>,
}

/// `hub`: the managed image; no settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HubImage {}

/// `hubNeuron`: the managed image on Neuron accelerators.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HubNeuronImage {
    /// Deprecated: set `HUB_BATCH_SIZE` in env.
    #[serde(default, deserialize_with = "wire::opt_count")]
    #[schema(deprecated)]
    pub batch_size: Option<u32>,
    /// Deprecated: set `CUSTOM_CACHE_REPO` in env.
    #[serde(default)]
    #[schema(deprecated)]
    pub neuron_cache: Option<String>,
    /// Deprecated: set `HUB_OPTIMUM_SEQUENCE_LENGTH` in env.
    #[serde(default, deserialize_with = "wire::opt_count")]
    #[schema(deprecated)]
    pub sequence_length: Option<u32>,
}

/// Base container: any image by URL.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BaseContainer {
    /// Container image URL.
    pub url: String,
    /// API port; the container's default when null.
    #[serde(default, deserialize_with = "wire::opt_port")]
    pub port: Option<u16>,
    #[serde(default)]
    pub health_route: Option<String>,
}

/// Text Generation Inference. All engine fields are deprecated in favour of the matching flag in `args`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TgiImage {
    pub url: String,
    #[serde(default, deserialize_with = "wire::opt_port")]
    pub port: Option<u16>,
    #[serde(default)]
    pub health_route: Option<String>,
    #[serde(default, deserialize_with = "wire::opt_count")]
    #[schema(deprecated)]
    pub max_batch_prefill_tokens: Option<u32>,
    #[serde(default, deserialize_with = "wire::opt_count")]
    #[schema(deprecated)]
    pub max_batch_total_tokens: Option<u32>,
    #[serde(default, deserialize_with = "wire::opt_count")]
    #[schema(deprecated)]
    pub max_input_length: Option<u32>,
    #[serde(default, deserialize_with = "wire::opt_count")]
    #[schema(deprecated)]
    pub max_total_tokens: Option<u32>,
    /// `--disable-custom-kernels`.
    #[serde(default)]
    #[schema(deprecated)]
    pub disable_custom_kernels: Option<bool>,
    /// `--quantize`.
    #[serde(default)]
    #[schema(deprecated)]
    pub quantize: Option<Quantize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Quantize {
    Awq,
    Bitsandbytes,
    Eetq,
    Gptq,
}

/// TGI on Neuron. On Neuron the input-length flag is `--max-input-tokens`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TgiNeuronImage {
    pub url: String,
    #[serde(default, deserialize_with = "wire::opt_port")]
    pub port: Option<u16>,
    #[serde(default)]
    pub health_route: Option<String>,
    #[serde(default, deserialize_with = "wire::opt_count")]
    #[schema(deprecated)]
    pub max_batch_prefill_tokens: Option<u32>,
    #[serde(default, deserialize_with = "wire::opt_count")]
    #[schema(deprecated)]
    pub max_batch_total_tokens: Option<u32>,
    #[serde(default, deserialize_with = "wire::opt_count")]
    #[schema(deprecated)]
    pub max_input_length: Option<u32>,
    #[serde(default, deserialize_with = "wire::opt_count")]
    #[schema(deprecated)]
    pub max_total_tokens: Option<u32>,
    /// Env `HUB_AUTO_CAST_TYPE`.
    #[serde(default)]
    #[schema(deprecated)]
    pub hf_auto_cast_type: Option<HfAutoCastType>,
    /// Env `HUB_NUM_CORES`.
    #[serde(default, deserialize_with = "wire::opt_count")]
    #[schema(deprecated)]
    pub hf_num_cores: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum HfAutoCastType {
    Bf16,
    Fp16,
}

/// Text Embeddings Inference.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TeiImage {
    pub url: String,
    #[serde(default, deserialize_with = "wire::opt_port")]
    pub port: Option<u16>,
    #[serde(default)]
    pub health_route: Option<String>,
    /// `--max-batch-tokens`.
    #[serde(default, deserialize_with = "wire::opt_count")]
    #[schema(deprecated)]
    pub max_batch_tokens: Option<u32>,
    /// `--max-concurrent-requests`.
    #[serde(default, deserialize_with = "wire::opt_count")]
    #[schema(deprecated)]
    pub max_concurrent_requests: Option<u32>,
    /// `--pooling`.
    #[serde(default)]
    #[schema(deprecated)]
    pub pooling: Option<TeiPooling>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum TeiPooling {
    Mean,
    Cls,
}

/// llama.cpp server; `modelPath` names the `.gguf` file to serve.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LlamacppImage {
    pub url: String,
    #[serde(default, deserialize_with = "wire::opt_port")]
    pub port: Option<u16>,
    #[serde(default)]
    pub health_route: Option<String>,
    /// Path to the `.gguf` file, in the model's directory: relative to it, or under `/repository/`.
    pub model_path: String,
    /// Vision model `.gguf`, a path like `modelPath`.
    #[serde(default)]
    #[schema(deprecated)]
    pub mmproj_model_path: Option<String>,
    /// Draft model `.gguf` for speculative decoding, a path like `modelPath`.
    #[serde(default)]
    #[schema(deprecated)]
    pub spec_model_path: Option<String>,
    /// Pattern of the `.gguf` files to load.
    #[serde(default)]
    #[schema(deprecated)]
    pub variant: Option<String>,
    /// `--ctx-size`; unset: fit to GPU memory, 8192 on CPU.
    #[serde(default, deserialize_with = "wire::opt_count")]
    #[schema(deprecated)]
    pub ctx_size: Option<u32>,
    #[serde(default)]
    #[schema(deprecated)]
    pub mode: Option<LlamacppMode>,
    /// `--n-gpu-layers`.
    #[serde(default, deserialize_with = "wire::opt_count")]
    #[schema(deprecated)]
    pub n_gpu_layers: Option<u32>,
    /// `--parallel`.
    #[serde(default, deserialize_with = "wire::opt_count")]
    #[schema(deprecated)]
    pub n_parallel: Option<u32>,
    #[serde(default)]
    #[schema(deprecated)]
    pub pooling: Option<LlamacppPooling>,
    /// `--threads-http`.
    #[serde(default, deserialize_with = "wire::opt_count")]
    #[schema(deprecated)]
    pub threads_http: Option<u32>,
}

impl LlamacppImage {
    /// The model files are files inside the model's directory (see [`check_model_file`]).
    fn check_files(&self, path: &str, issues: &mut Issues) {
        let files = [
            ("modelPath", Some(self.model_path.as_str())),
            ("mmprojModelPath", self.mmproj_model_path.as_deref()),
            ("specModelPath", self.spec_model_path.as_deref()),
        ];
        for (key, file) in files {
            if let Some(Err(message)) = file.map(check_model_file) {
                issues.push(child(path, key), message);
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum LlamacppMode {
    Embeddings,
    Reranking,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum LlamacppPooling {
    Mean,
    Cls,
    Last,
    Rank,
}

/// vLLM.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VllmImage {
    pub url: String,
    #[serde(default, deserialize_with = "wire::opt_port")]
    pub port: Option<u16>,
    #[serde(default)]
    pub health_route: Option<String>,
    /// `--data-parallel-size`.
    #[serde(default, deserialize_with = "wire::opt_count")]
    #[schema(deprecated)]
    pub data_parallel_size: Option<u32>,
    #[serde(default)]
    #[schema(deprecated)]
    pub kv_cache_dtype: Option<VllmKvCacheDtype>,
    /// `--max-num-batched-tokens`.
    #[serde(default, deserialize_with = "wire::opt_count")]
    #[schema(deprecated)]
    pub max_num_batched_tokens: Option<u32>,
    /// `--max-num-seqs`.
    #[serde(default, deserialize_with = "wire::opt_count")]
    #[schema(deprecated)]
    pub max_num_seqs: Option<u32>,
    /// `--tensor-parallel-size`.
    #[serde(default, deserialize_with = "wire::opt_count")]
    #[schema(deprecated)]
    pub tensor_parallel_size: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum VllmKvCacheDtype {
    #[serde(rename = "fp8")]
    Fp8,
    #[serde(rename = "fp8-e4-m3")]
    Fp8E4M3,
    #[serde(rename = "fp8-e5-m2")]
    Fp8E5M2,
}

/// vLLM-Omni.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VllmOmniImage {
    pub url: String,
    #[serde(default, deserialize_with = "wire::opt_port")]
    pub port: Option<u16>,
    #[serde(default)]
    pub health_route: Option<String>,
    /// `--deploy-config`.
    #[serde(default)]
    #[schema(deprecated)]
    pub deploy_config: Option<String>,
    /// `--max-num-seqs`.
    #[serde(default, deserialize_with = "wire::opt_count")]
    #[schema(deprecated)]
    pub max_num_seqs: Option<u32>,
}

/// SGLang.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SglangImage {
    pub url: String,
    #[serde(default, deserialize_with = "wire::opt_port")]
    pub port: Option<u16>,
    #[serde(default)]
    pub health_route: Option<String>,
    /// `--chunked-prefill-size`.
    #[serde(default, deserialize_with = "wire::opt_count")]
    #[schema(deprecated)]
    pub chunked_prefill_size: Option<u32>,
    #[serde(default)]
    #[schema(deprecated)]
    pub kv_cache_dtype: Option<SglangKvCacheDtype>,
    /// `--max-prefill-tokens`.
    #[serde(default, deserialize_with = "wire::opt_count")]
    #[schema(deprecated)]
    pub max_prefill_tokens: Option<u32>,
    /// `--max-running-requests`.
    #[serde(default, deserialize_with = "wire::opt_count")]
    #[schema(deprecated)]
    pub max_running_requests: Option<u32>,
    /// `--tp-size`.
    #[serde(default, deserialize_with = "wire::opt_count")]
    #[schema(deprecated)]
    pub tensor_parallel_size: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum SglangKvCacheDtype {
    #[serde(rename = "fp8-e4-m3")]
    Fp8E4M3,
    #[serde(rename = "fp8-e5-m2")]
    Fp8E5M2,
}

/// Any container, optionally pulled with registry credentials.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CustomImage {
    pub url: String,
    #[serde(default, deserialize_with = "wire::opt_port")]
    pub port: Option<u16>,
    #[serde(default)]
    pub health_route: Option<String>,
    #[serde(default)]
    pub credentials: Option<RegistryCredentials>,
}

/// Credentials for pulling a custom image. The password is redacted (null) in responses.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegistryCredentials {
    pub username: String,
    /// The spec makes this key required (value may be null), but the Python client omits it when no password is
    /// given, so absence is read as null.
    #[serde(default)]
    #[schema(required = true)]
    pub password: Option<String>,
}

/// Shows whether a password is set, never the password (even sealed).
impl std::fmt::Debug for RegistryCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryCredentials")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::issue::decode;
    use serde_json::json;

    #[test]
    fn huggingface_and_cli_spellings_mean_the_canonical_keys() {
        let hub: ModelImage = decode(&json!({"huggingface": {}})).unwrap();
        assert_eq!(hub, ModelImage::Hub(HubImage {}));
        assert_eq!(serde_json::to_value(&hub).unwrap(), json!({"hub": {}}));
        let serve: ModelImage = decode(&json!({"hfServe": {"url": "x"}})).unwrap();
        assert_eq!(serve.key(), "hubServe");
        let neuron: ModelImage = decode(&json!({"huggingfaceNeuron": {}})).unwrap();
        assert_eq!(neuron.key(), "hubNeuron");
    }

    #[test]
    fn exactly_one_key() {
        let none = decode::<ModelImage>(&json!({})).unwrap_err();
        assert_eq!(none.message, "must have exactly one key");
        let two = decode::<ModelImage>(&json!({"hub": {}, "tgi": {"url": "x"}})).unwrap_err();
        assert_eq!(two.message, "must have exactly one key");
        let unknown = decode::<ModelImage>(&json!({"tgx": {}})).unwrap_err();
        assert!(
            unknown.message.starts_with("unknown variant `tgx`"),
            "{}",
            unknown.message
        );
    }

    #[test]
    fn llamacpp_requires_model_path() {
        let err = decode::<ModelImage>(&json!({"llamacpp": {"url": "x"}})).unwrap_err();
        assert_eq!(err.path, "llamacpp.modelPath");
        let ok: ModelImage =
            decode(&json!({"llamacpp": {"url": "x", "modelPath": "m.gguf", "pooling": "rank"}}))
                .unwrap();
        assert_eq!(ok.key(), "llamacpp");
    }

    #[test]
    fn engine_numbers_are_non_negative_integers() {
        let ok: ModelImage = decode(&json!({"vLLM": {"url": "x", "maxNumSeqs": 8.0}})).unwrap();
        assert!(matches!(
            ok,
            ModelImage::Vllm(VllmImage {
                max_num_seqs: Some(8),
                ..
            })
        ));
        for bad in [json!(-1), json!(1.5), json!("8")] {
            let err = decode::<ModelImage>(&json!({"vLLM": {"url": "x", "maxNumSeqs": bad}}))
                .unwrap_err();
            assert_eq!(err.path, "vLLM.maxNumSeqs");
            assert!(
                err.message.contains("non-negative integer"),
                "{}",
                err.message
            );
        }
        let port = decode::<ModelImage>(&json!({"tei": {"url": "x", "port": 70000}})).unwrap_err();
        assert_eq!(port.path, "tei.port");
    }

    #[test]
    fn enums_take_exactly_the_spec_values() {
        let ok: ModelImage =
            decode(&json!({"vLLM": {"url": "x", "kvCacheDtype": "fp8-e4-m3"}})).unwrap();
        assert!(matches!(
            ok,
            ModelImage::Vllm(VllmImage {
                kv_cache_dtype: Some(VllmKvCacheDtype::Fp8E4M3),
                ..
            })
        ));
        let err = decode::<ModelImage>(&json!({"sGLang": {"url": "x", "kvCacheDtype": "fp8"}}))
            .unwrap_err();
        assert_eq!(err.path, "sGLang.kvCacheDtype");
        let err =
            decode::<ModelImage>(&json!({"tgi": {"url": "x", "quantize": "int4"}})).unwrap_err();
        assert_eq!(err.path, "tgi.quantize");
    }

    #[test]
    fn health_route_defaults_to_health() {
        let hub = ModelImage::Hub(HubImage {});
        assert_eq!(hub.health_route(), "/health");
        let custom: ModelImage =
            decode(&json!({"custom": {"url": "x", "healthRoute": "/ready"}})).unwrap();
        assert_eq!(custom.health_route(), "/ready");
        let unset: ModelImage =
            decode(&json!({"custom": {"url": "x", "healthRoute": null}})).unwrap();
        assert_eq!(unset.health_route(), "/health");
        let vllm: ModelImage = decode(&json!({"vLLM": {"url": "x"}})).unwrap();
        assert_eq!(
            vllm.health_route(),
            "/v1/models",
            "its /health answers before the model loads"
        );
    }

    #[test]
    fn ports_default_to_the_engines_own() {
        let port = |v: serde_json::Value| decode::<ModelImage>(&v).unwrap().port();
        assert_eq!(port(json!({"tei": {"url": "x"}})), 80);
        assert_eq!(port(json!({"tgi": {"url": "x"}})), 80);
        assert_eq!(port(json!({"vLLM": {"url": "x"}})), 8000);
        assert_eq!(
            port(json!({"llamacpp": {"url": "x", "modelPath": "m.gguf"}})),
            8080
        );
        assert_eq!(port(json!({"sGLang": {"url": "x"}})), 30000);
        assert_eq!(port(json!({"custom": {"url": "x", "port": 7000}})), 7000);
        assert_eq!(port(json!({"tei": {"url": "x", "port": 9000}})), 9000);
    }

    #[test]
    fn redaction_hides_the_registry_password() {
        let image: ModelImage = decode(
            &json!({"custom": {"url": "x", "credentials": {"username": "u", "password": "p"}}}),
        )
        .unwrap();
        let shown = serde_json::to_value(image.redacted()).unwrap();
        assert_eq!(
            shown["custom"]["credentials"],
            json!({"username": "u", "password": null})
        );
    }

    #[test]
    fn output_has_every_field() {
        let image: ModelImage = decode(&json!({"tgi": {"url": "x"}})).unwrap();
        let shown = serde_json::to_value(&image).unwrap();
        let fields = shown["tgi"].as_object().unwrap();
        assert_eq!(fields.len(), 9);
        assert!(fields.values().skip(1).all(|v| v.is_null()));
    }
}
