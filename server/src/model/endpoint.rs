//! The endpoint specification (spec 2.3–2.12): wire types, normalization and the semantic rules.
//!
//! Untrusted input goes through [`EndpointSpec::parse`] (or [`EndpointSpec::apply_update`]); a spec obtained from
//! either satisfies every rule below. Plain `Deserialize` is for reading back specs this module already accepted.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::model::cidr::Cidr;
use crate::model::image::ModelImage;
use crate::model::issue::{child, decode, index, Issue, Issues};
use crate::model::repo;
use crate::model::wire;

/// Longest endpoint name (spec 8).
pub const MAX_NAME_LEN: usize = 32;
/// Minutes of inactivity before scale-to-zero when `scaleToZeroTimeout` is null.
pub const DEFAULT_SCALE_TO_ZERO_TIMEOUT: u32 = 15;
pub const DEFAULT_KV_CACHE_USAGE: f64 = 80.0;
pub const DEFAULT_REQUESTS_WAITING: f64 = 5.0;
pub const DEFAULT_ROUTER_PORT: u16 = 3000;
pub const DEFAULT_ROUTER_GRPC_PORT: u16 = 9002;

/// What a caller submits and the store keeps. Serializes to the full shape: every nullable field is present
/// (null when unset) and every defaulted one carries its value, because clients read keys unconditionally.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EndpointSpec {
    /// Lowercase letters, digits and `-`, not starting with `-`; at most 32 characters.
    pub name: String,
    #[serde(rename = "type")]
    pub endpoint_type: EndpointType,
    pub provider: Provider,
    pub compute: Compute,
    pub model: Model,
    #[serde(default)]
    pub cache_http_responses: bool,
    /// A stored router always has a tag: a router without one means "no router" and is dropped on input.
    #[serde(default, deserialize_with = "custom_router_or_none")]
    pub custom_router: Option<CustomRouter>,
    #[serde(default)]
    pub experimental_features: ExperimentalFeatures,
    #[serde(default)]
    pub network: Option<Network>,
    #[serde(default)]
    pub notifications: Notifications,
    #[serde(default)]
    pub private_service: Option<PrivateService>,
    #[serde(default)]
    pub route: Option<Route>,
    #[serde(default)]
    pub tags: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum EndpointType {
    Public,
    Authenticated,
    Private,
}

impl EndpointType {
    pub fn as_str(self) -> &'static str {
        match self {
            EndpointType::Public => "public",
            EndpointType::Authenticated => "authenticated",
            EndpointType::Private => "private",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Provider {
    pub vendor: String,
    pub region: String,
}

/// Resources for each replica.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Compute {
    pub accelerator: ComputeAccelerator,
    pub instance_type: String,
    pub instance_size: String,
    pub scaling: Scaling,
    /// Informational: [`EndpointSpec::parse`] drops what the caller sent; the API layer fills it in.
    #[serde(default)]
    pub id: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
pub enum ComputeAccelerator {
    #[serde(rename = "cpu")]
    Cpu,
    #[serde(rename = "gpu")]
    Gpu,
    #[serde(rename = "neuron")]
    Neuron,
    #[serde(rename = "zero_gpu")]
    ZeroGpu,
}

impl ComputeAccelerator {
    pub fn as_str(self) -> &'static str {
        match self {
            ComputeAccelerator::Cpu => "cpu",
            ComputeAccelerator::Gpu => "gpu",
            ComputeAccelerator::Neuron => "neuron",
            ComputeAccelerator::ZeroGpu => "zero_gpu",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scaling {
    /// 0 enables scale-to-zero.
    #[serde(deserialize_with = "wire::count")]
    pub min_replica: u32,
    #[serde(deserialize_with = "wire::count")]
    pub max_replica: u32,
    #[serde(default)]
    pub measure: Option<Measure>,
    /// Minutes of inactivity before scaling to zero; null means the default (15). Only with `minReplica` 0.
    #[serde(default, deserialize_with = "wire::opt_count")]
    pub scale_to_zero_timeout: Option<u32>,
    /// Daily UTC schedule; the entry in effect replaces minReplica, maxReplica and scaleToZeroTimeout.
    #[serde(default)]
    pub schedule: Option<Vec<ScheduleEntry>>,
}

impl Scaling {
    /// Minutes of inactivity before scaling to zero, or `None` when scale-to-zero is off (`minReplica` > 0).
    pub fn effective_scale_to_zero_timeout(&self) -> Option<u32> {
        effective_timeout(self.min_replica, self.scale_to_zero_timeout)
    }

    /// The schedule entry in effect at `minute_of_day` (0..1440, UTC): the latest entry starting at or before
    /// it, or, before the first entry of the day, the last one (entries wrap around midnight).
    pub fn entry_in_effect(&self, minute_of_day: u16) -> Option<&ScheduleEntry> {
        let entries = self.schedule.as_deref()?;
        let timed = entries.iter().filter_map(|e| Some((e.starts_at()?, e)));
        let latest_before = timed
            .clone()
            .filter(|(at, _)| *at <= minute_of_day)
            .max_by_key(|(at, _)| *at);
        latest_before
            .or_else(|| timed.max_by_key(|(at, _)| *at))
            .map(|(_, e)| e)
    }
}

fn effective_timeout(min_replica: u32, timeout: Option<u32>) -> Option<u32> {
    (min_replica == 0).then(|| timeout.unwrap_or(DEFAULT_SCALE_TO_ZERO_TIMEOUT))
}

/// Scaling metric and threshold; exactly one key on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum Measure {
    /// Scale when hardware utilization exceeds this percentage (0–100); null lets the platform choose.
    HardwareUsage(Option<f64>),
    /// Scale when pending requests exceed this; null lets the platform choose.
    PendingRequests(Option<f64>),
    /// Scale on inference-engine saturation (vLLM and SGLang only).
    InferenceLoad(InferenceLoad),
}

impl Measure {
    pub fn key(&self) -> &'static str {
        match self {
            Measure::HardwareUsage(_) => "hardwareUsage",
            Measure::PendingRequests(_) => "pendingRequests",
            Measure::InferenceLoad(_) => "inferenceLoad",
        }
    }
}

/// Thresholds of the `inferenceLoad` measure; null or absent means the default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InferenceLoad {
    /// Percentage of KV cache in use, in (0, 100]; default 80.
    #[serde(
        default = "default_kv_cache_usage",
        deserialize_with = "kv_cache_usage"
    )]
    pub kv_cache_usage: f64,
    /// Average requests waiting in the engine queue, > 0; default 5.
    #[serde(
        default = "default_requests_waiting",
        deserialize_with = "requests_waiting"
    )]
    pub requests_waiting: f64,
}

impl Default for InferenceLoad {
    fn default() -> Self {
        InferenceLoad {
            kv_cache_usage: DEFAULT_KV_CACHE_USAGE,
            requests_waiting: DEFAULT_REQUESTS_WAITING,
        }
    }
}

fn default_kv_cache_usage() -> f64 {
    DEFAULT_KV_CACHE_USAGE
}

fn default_requests_waiting() -> f64 {
    DEFAULT_REQUESTS_WAITING
}

fn kv_cache_usage<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(DEFAULT_KV_CACHE_USAGE))
}

fn requests_waiting<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(DEFAULT_REQUESTS_WAITING))
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScheduleEntry {
    /// UTC time of day the entry starts, `HH:MM`.
    pub at: String,
    #[serde(deserialize_with = "wire::count")]
    pub min_replica: u32,
    /// At most the endpoint's maxReplica.
    #[serde(deserialize_with = "wire::count")]
    pub max_replica: u32,
    #[serde(default, deserialize_with = "wire::opt_count")]
    pub scale_to_zero_timeout: Option<u32>,
}

impl ScheduleEntry {
    /// Minute of the day the entry starts; `None` only for a spec that did not come through `parse`.
    pub fn starts_at(&self) -> Option<u16> {
        parse_time_of_day(&self.at)
    }

    pub fn effective_scale_to_zero_timeout(&self) -> Option<u32> {
        effective_timeout(self.min_replica, self.scale_to_zero_timeout)
    }
}

/// `HH:MM` (two digits each, 00:00–23:59) as minutes since midnight.
pub fn parse_time_of_day(text: &str) -> Option<u16> {
    let (hours, minutes) = text.split_once(':')?;
    let two_digits = |s: &str| {
        (s.len() == 2 && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u16>().ok())
            .flatten()
    };
    let (h, m) = (two_digits(hours)?, two_digits(minutes)?);
    (h < 24 && m < 60).then_some(h * 60 + m)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Model {
    /// `<author>/<model>`: letters, digits, `-`, `_` and `.`.
    pub repository: String,
    pub framework: Framework,
    pub image: ModelImage,
    /// Commit SHA, branch or tag (a git ref name); null means the latest `main`.
    #[serde(default)]
    pub revision: Option<String>,
    #[serde(default)]
    pub task: Option<Task>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub secrets: Secrets,
    /// Arguments passed to the container command.
    #[serde(default)]
    pub args: Option<Vec<String>>,
    /// Overrides the container entrypoint.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// True when the endpoint was created from a catalog template.
    #[serde(default)]
    pub from_catalog: Option<bool>,
}

/// Secret environment variables. `Debug` shows names only, so a spec can be logged without leaking values.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(transparent)]
pub struct Secrets(pub BTreeMap<String, Option<String>>);

impl Secrets {
    /// Same names, every value null: what responses show.
    pub fn redacted(&self) -> Secrets {
        Secrets(self.0.keys().map(|k| (k.clone(), None)).collect())
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).and_then(|v| v.as_deref())
    }
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Framework {
    Custom,
    Pytorch,
    Llamacpp,
}

/// Model task (spec 2.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Task {
    Custom,
    AnyToAny,
    AudioClassification,
    AutomaticSpeechRecognition,
    FeatureExtraction,
    FillMask,
    ImageClassification,
    ImageSegmentation,
    ImageTextToText,
    ObjectDetection,
    QuestionAnswering,
    SentenceEmbeddings,
    SentenceRanking,
    SentenceSimilarity,
    Summarization,
    TableQuestionAnswering,
    TextClassification,
    TextGeneration,
    TextRanking,
    TextToImage,
    TokenClassification,
    Translation,
    ZeroShotClassification,
}

/// Load-balancing sidecar. Only routers with an image tag exist; see [`EndpointSpec::custom_router`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CustomRouter {
    /// Extra environment variables for the sidecar.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Port the sidecar listens on; null means 3000.
    #[serde(default = "default_router_port", deserialize_with = "router_port")]
    pub port: u16,
    /// Port of the sidecar's external-processor gRPC service (protocol extProc); null means 9002.
    #[serde(
        default = "default_router_grpc_port",
        deserialize_with = "router_grpc_port"
    )]
    pub grpc_port: u16,
    #[serde(default)]
    pub protocol: RouterProtocol,
    /// Sidecar image tag.
    pub tag: String,
}

/// The wire form, where a null or absent tag is allowed and means "remove the router".
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CustomRouterIn {
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default = "default_router_port", deserialize_with = "router_port")]
    port: u16,
    #[serde(
        default = "default_router_grpc_port",
        deserialize_with = "router_grpc_port"
    )]
    grpc_port: u16,
    #[serde(default)]
    protocol: RouterProtocol,
    #[serde(default)]
    tag: Option<String>,
}

fn custom_router_or_none<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<CustomRouter>, D::Error> {
    let router = Option::<CustomRouterIn>::deserialize(d)?;
    Ok(router.and_then(|r| {
        Some(CustomRouter {
            tag: r.tag?,
            env: r.env,
            port: r.port,
            grpc_port: r.grpc_port,
            protocol: r.protocol,
        })
    }))
}

fn default_router_port() -> u16 {
    DEFAULT_ROUTER_PORT
}

fn default_router_grpc_port() -> u16 {
    DEFAULT_ROUTER_GRPC_PORT
}

fn router_port<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
    Ok(wire::opt_port(d)?.unwrap_or(DEFAULT_ROUTER_PORT))
}

fn router_grpc_port<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
    Ok(wire::opt_port(d)?.unwrap_or(DEFAULT_ROUTER_GRPC_PORT))
}

/// How the proxy hands requests to the custom router.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
pub enum RouterProtocol {
    #[default]
    #[serde(rename = "http")]
    Http,
    #[serde(rename = "extProc")]
    ExtProc,
}

/// `customRouter.env` keys the server itself reads for an extProc router (the sidecar gets them too).
pub const EXT_PROC_TIMEOUT_ENV: &str = "SWITCHYARD_EXT_PROC_TIMEOUT_MS";
pub const EXT_PROC_FAIL_OPEN_ENV: &str = "SWITCHYARD_EXT_PROC_FAIL_OPEN";
pub const EXT_PROC_REQUEST_BODY_ENV: &str = "SWITCHYARD_EXT_PROC_REQUEST_BODY";
pub const EXT_PROC_ENV: [&str; 3] = [
    EXT_PROC_TIMEOUT_ENV,
    EXT_PROC_FAIL_OPEN_ENV,
    EXT_PROC_REQUEST_BODY_ENV,
];

/// What an extProc router sees of a request body, in Envoy's names (`ProcessingMode.request_body_mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ExtProcBody {
    /// Headers only (unless the router's answer to them asks for the body).
    None,
    /// The whole body, once the router has answered the headers.
    Buffered,
    /// The body with the headers, without waiting for their answer: what the Gateway API Inference
    /// Extension's endpoint picker expects (it answers the headers once the body has come).
    #[default]
    FullDuplexStreamed,
}

/// How the proxy speaks to an extProc router, as `customRouter.env` says: `None` for a setting left to
/// the server's `[proxy]` config.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExtProcSettings {
    pub timeout_ms: Option<u64>,
    pub fail_open: Option<bool>,
    pub request_body: ExtProcBody,
}

impl ExtProcSettings {
    /// The settings in `env`; `Err` names the key whose value is not one.
    pub fn of(env: &BTreeMap<String, String>) -> Result<ExtProcSettings, (&'static str, String)> {
        let mut out = ExtProcSettings::default();
        if let Some(v) = env.get(EXT_PROC_TIMEOUT_ENV) {
            match v.trim().parse::<u64>() {
                Ok(ms) if (1..=600_000).contains(&ms) => out.timeout_ms = Some(ms),
                _ => {
                    let why =
                        format!("must be a number of milliseconds from 1 to 600000, not {v:?}");
                    return Err((EXT_PROC_TIMEOUT_ENV, why));
                }
            }
        }
        if let Some(v) = env.get(EXT_PROC_FAIL_OPEN_ENV) {
            out.fail_open = Some(match v.trim() {
                "true" => true,
                "false" => false,
                _ => {
                    return Err((
                        EXT_PROC_FAIL_OPEN_ENV,
                        format!("must be true or false, not {v:?}"),
                    ))
                }
            });
        }
        if let Some(v) = env.get(EXT_PROC_REQUEST_BODY_ENV) {
            out.request_body = match v.trim() {
                "NONE" => ExtProcBody::None,
                "BUFFERED" => ExtProcBody::Buffered,
                "FULL_DUPLEX_STREAMED" => ExtProcBody::FullDuplexStreamed,
                _ => {
                    let why = format!("must be NONE, BUFFERED or FULL_DUPLEX_STREAMED, not {v:?}");
                    return Err((EXT_PROC_REQUEST_BODY_ENV, why));
                }
            };
        }
        Ok(out)
    }
}

/// On-demand features.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExperimentalFeatures {
    /// Cache successful responses (60-minute TTL reset on each hit).
    #[serde(default)]
    pub cache_http_responses: bool,
    /// Null means random. No effect with a custom router or mcpLb.
    #[serde(default)]
    pub load_balancer: Option<LoadBalancer>,
    #[serde(default)]
    pub mcp_lb: Option<McpLb>,
    /// Skip the model repository download on initialization.
    #[serde(default)]
    pub skip_repo_download: Option<bool>,
}

impl ExperimentalFeatures {
    pub fn effective_load_balancer(&self) -> LoadBalancer {
        self.load_balancer.unwrap_or_default()
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LoadBalancer {
    #[default]
    Random,
    Sticky,
    LeastConnections,
    /// Our extension: the replica with the least load by its engine's own figures (requests waiting, KV-cache
    /// use, read from its `/metrics`) with the requests the proxy has in flight to it.
    LeastLoad,
}

/// Balance by MCP session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct McpLb {
    /// Forward requests following the MCP session id.
    #[serde(default)]
    pub stateful: bool,
}

/// CIDR-based access restriction.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Network {
    #[serde(default)]
    pub cidr_block: Option<bool>,
    #[serde(default)]
    pub cidr_list: Option<Vec<String>>,
}

impl Network {
    /// The blocks callers must come from, or `None` when the restriction is off. Entries were checked by
    /// `parse`, so nothing is dropped for a spec that came through it.
    pub fn allow_list(&self) -> Option<Vec<Cidr>> {
        if self.cidr_block != Some(true) {
            return None;
        }
        let list = self.cidr_list.as_deref().unwrap_or_default();
        Some(list.iter().filter_map(|c| Cidr::parse(c).ok()).collect())
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Notifications {
    pub email: bool,
    pub push: bool,
}

/// Private-link connectivity: required for `private` endpoints (the account the private entry point
/// serves), and only for them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PrivateService {
    /// Cloud account allowed to connect through private link.
    pub account_id: String,
    /// Region of the private-link entry point; independent of where the endpoint computes.
    pub region: PrivateLinkRegion,
    /// Share the private-link service across all endpoints of this owner.
    #[serde(default)]
    pub shared: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
pub enum PrivateLinkRegion {
    #[default]
    #[serde(rename = "us-east-1")]
    UsEast1,
    #[serde(rename = "eu-west-1")]
    EuWest1,
}

/// Multipath routing behind a custom domain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Route {
    pub domain: String,
    /// Path prefix, starting with `/`.
    pub path: String,
}

impl Route {
    /// What makes two routes the same: the domain in lowercase without a trailing dot, and the path
    /// without trailing slashes. The store keeps it under a unique index.
    pub fn key(&self) -> (String, String) {
        (
            super::host::bare_host(&self.domain),
            self.path.trim_end_matches('/').to_string(),
        )
    }
}

/// A valid endpoint name: non-empty, `[a-z0-9-]`, not starting with `-`, at most 32 characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, ToSchema)]
#[serde(transparent)]
pub struct EndpointName(String);

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("must not be empty")]
    Empty,
    #[error("must be at most 32 characters")]
    TooLong,
    #[error("may contain only lowercase letters, digits and `-`")]
    Characters,
    #[error("must not start with `-`")]
    LeadingDash,
}

impl EndpointName {
    pub fn parse(text: &str) -> Result<EndpointName, NameError> {
        if text.is_empty() {
            Err(NameError::Empty)
        } else if text.chars().count() > MAX_NAME_LEN {
            Err(NameError::TooLong)
        } else if !text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            Err(NameError::Characters)
        } else if text.starts_with('-') {
            Err(NameError::LeadingDash)
        } else {
            Ok(EndpointName(text.to_owned()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EndpointName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for EndpointName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        EndpointName::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl EndpointSpec {
    /// Decodes, normalizes and validates an untrusted body. Structural errors stop at the first (with its path);
    /// semantic rules all run and every issue is returned.
    pub fn parse(value: &Value) -> Result<EndpointSpec, Vec<Issue>> {
        let spec: EndpointSpec = decode(value).map_err(|issue| vec![issue])?;
        spec.checked()
    }

    /// Normalizes and validates a spec built in code (e.g. from a catalog recipe) by the same rules as `parse`.
    pub fn checked(mut self) -> Result<EndpointSpec, Vec<Issue>> {
        self.normalize();
        let mut issues = Issues::default();
        self.check(&mut issues);
        issues.into_result(self)
    }

    /// The route the platform probes and the Python client's `wait()` polls.
    pub fn health_route(&self) -> String {
        self.model.image.health_route()
    }

    /// The copy shown in responses: every secret value (and any registry password) replaced by null.
    pub fn redacted(&self) -> EndpointSpec {
        let mut spec = self.clone();
        spec.model.secrets = spec.model.secrets.redacted();
        spec.model.image = spec.model.image.redacted();
        spec
    }

    fn normalize(&mut self) {
        // Informational on input; the API layer sets it from the hardware list.
        self.compute.id = None;
    }

    fn check(&self, issues: &mut Issues) {
        if let Err(e) = EndpointName::parse(&self.name) {
            issues.push("name", e.to_string());
        }
        if let Err(message) = repo::check_repo_id(&self.model.repository) {
            issues.push("model.repository", message);
        }
        if let Some(Err(message)) = self.model.revision.as_deref().map(repo::check_revision) {
            issues.push("model.revision", message);
        }
        check_scaling(&self.compute.scaling, issues);
        if let Some(measure) = &self.compute.scaling.measure {
            check_measure(measure, &self.model.image, issues);
        }
        self.model.image.check("model.image", issues);
        check_env_names(&self.model.env, "model.env", issues);
        check_env_names(&self.model.secrets.0, "model.secrets", issues);
        if let Some(router) = &self.custom_router {
            check_env_names(&router.env, "customRouter.env", issues);
            if let Err((key, why)) = ExtProcSettings::of(&router.env) {
                issues.push(format!("customRouter.env.{key}"), why);
            }
        }
        if let Some(network) = &self.network {
            check_network(network, issues);
        }
        check_private_service(self, issues);
        if let Some(route) = &self.route {
            check_route(route, issues);
        }
    }
}

/// `privateService` goes with type `private` and only with it: a private endpoint is served only on the
/// private entry point, to the account `privateService` names, so without one nobody could reach it.
fn check_private_service(spec: &EndpointSpec, issues: &mut Issues) {
    let private = spec.endpoint_type == EndpointType::Private;
    match (&spec.private_service, private) {
        (Some(_), false) => issues.push(
            "privateService",
            format!(
                "is only allowed when type is `private` (type is `{}`)",
                spec.endpoint_type.as_str()
            ),
        ),
        (None, true) => issues.push(
            "privateService",
            "is required when type is `private`: it names the account the private entry point serves",
        ),
        _ => {}
    }
}

fn check_scaling(scaling: &Scaling, issues: &mut Issues) {
    const AT: &str = "compute.scaling";
    check_replicas(
        AT,
        scaling.min_replica,
        scaling.max_replica,
        scaling.scale_to_zero_timeout,
        issues,
    );
    let Some(schedule) = &scaling.schedule else {
        return;
    };
    let mut seen: Vec<u16> = Vec::with_capacity(schedule.len());
    for (i, entry) in schedule.iter().enumerate() {
        let path = index(&child(AT, "schedule"), i);
        check_replicas(
            &path,
            entry.min_replica,
            entry.max_replica,
            entry.scale_to_zero_timeout,
            issues,
        );
        if entry.max_replica > scaling.max_replica {
            issues.push(
                child(&path, "maxReplica"),
                format!(
                    "must be at most the endpoint's maxReplica ({})",
                    scaling.max_replica
                ),
            );
        }
        match entry.starts_at() {
            None => issues.push(
                child(&path, "at"),
                "must be a UTC time of day `HH:MM` from 00:00 to 23:59",
            ),
            Some(at) if seen.contains(&at) => issues.push(
                child(&path, "at"),
                format!(
                    "`{}` is used by an earlier entry; times must be distinct",
                    entry.at
                ),
            ),
            Some(at) => seen.push(at),
        }
    }
}

/// The rules shared by the endpoint's scaling and each schedule entry.
fn check_replicas(path: &str, min: u32, max: u32, timeout: Option<u32>, issues: &mut Issues) {
    if min > max {
        issues.push(
            child(path, "minReplica"),
            format!("must be at most maxReplica ({max})"),
        );
    }
    if timeout.is_some() && min > 0 {
        issues.push(
            child(path, "scaleToZeroTimeout"),
            "is only allowed when minReplica is 0",
        );
    }
}

fn check_measure(measure: &Measure, image: &ModelImage, issues: &mut Issues) {
    const AT: &str = "compute.scaling.measure";
    match measure {
        Measure::HardwareUsage(Some(v)) if !(0.0..=100.0).contains(v) => {
            issues.push(
                child(AT, "hardwareUsage"),
                "must be from 0 to 100 (percent)",
            );
        }
        Measure::PendingRequests(Some(v)) if *v <= 0.0 => {
            issues.push(child(AT, "pendingRequests"), "must be greater than 0");
        }
        Measure::InferenceLoad(load) => {
            let at = child(AT, "inferenceLoad");
            if !(load.kv_cache_usage > 0.0 && load.kv_cache_usage <= 100.0) {
                issues.push(
                    child(&at, "kvCacheUsage"),
                    "must be greater than 0 and at most 100",
                );
            }
            if load.requests_waiting <= 0.0 {
                issues.push(child(&at, "requestsWaiting"), "must be greater than 0");
            }
            if !image.exports_inference_load() {
                issues.push(
                    AT,
                    format!(
                        "inferenceLoad needs a vLLM or sGLang image (the image is `{}`)",
                        image.key()
                    ),
                );
            }
        }
        _ => {}
    }
}

/// Environment variable names: `[A-Za-z_][A-Za-z0-9_]*`.
fn check_env_names<V>(vars: &BTreeMap<String, V>, path: &str, issues: &mut Issues) {
    for name in vars.keys().filter(|n| !is_env_name(n)) {
        issues.push(
            child(path, name),
            "is not a valid variable name (letters, digits and `_`, not starting with a digit)",
        );
    }
}

fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn check_network(network: &Network, issues: &mut Issues) {
    let list = network.cidr_list.as_deref().unwrap_or_default();
    for (i, entry) in list.iter().enumerate() {
        if let Err(e) = Cidr::parse(entry) {
            issues.push(index("network.cidrList", i), e.to_string());
        }
    }
    if network.cidr_block == Some(true) && list.is_empty() {
        issues.push(
            "network.cidrList",
            "must list at least one CIDR block when cidrBlock is true",
        );
    }
}

fn check_route(route: &Route, issues: &mut Issues) {
    if !is_dns_hostname(&route.domain) {
        issues.push(
            "route.domain",
            "must be a DNS host name such as `api.example.com`",
        );
    }
    if !route.path.starts_with('/') {
        issues.push("route.path", "must start with `/`");
    }
}

/// RFC 1123 host name with at least two labels (a custom domain, not a bare host), whose last label is not
/// numeric (so an IPv4 address is not taken for one).
pub(crate) fn is_dns_hostname(name: &str) -> bool {
    let labels: Vec<&str> = name.split('.').collect();
    let label_ok = |l: &&str| {
        (1..=63).contains(&l.len())
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    name.len() <= 253
        && labels.len() >= 2
        && labels.iter().all(label_ok)
        && labels
            .last()
            .is_some_and(|tld| !tld.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// A body like the Python client's `create_inference_endpoint` sends.
    pub(crate) fn client_body() -> Value {
        json!({
            "compute": {
                "accelerator": "cpu",
                "instanceSize": "x2",
                "instanceType": "intel-icl",
                "scaling": {"maxReplica": 1, "minReplica": 0, "scaleToZeroTimeout": 15}
            },
            "model": {
                "framework": "pytorch",
                "repository": "ProsusAI/finbert",
                "revision": null,
                "image": {"huggingface": {}},
                "task": "text-classification",
                "secrets": {"MY_SECRET_KEY": "secret_value"},
                "env": {"MODEL_ID": "/repository"}
            },
            "name": "finbert-classifier",
            "provider": {"region": "us-east-1", "vendor": "aws"},
            "type": "authenticated",
            "tags": ["dev"]
        })
    }

    fn with(mut body: Value, pointer: &str, value: Value) -> Value {
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        let target = body.pointer_mut(parent).unwrap();
        target
            .as_object_mut()
            .unwrap()
            .insert(key.to_owned(), value);
        body
    }

    fn issues(body: &Value) -> Vec<Issue> {
        EndpointSpec::parse(body).unwrap_err()
    }

    fn paths(body: &Value) -> Vec<String> {
        issues(body).into_iter().map(|i| i.path).collect()
    }

    fn ok(body: &Value) -> EndpointSpec {
        EndpointSpec::parse(body).unwrap_or_else(|e| panic!("{body}: {e:?}"))
    }

    fn vllm_body() -> Value {
        with(
            client_body(),
            "/model/image",
            json!({"vLLM": {"url": "vllm/vllm-openai:v0.23.0", "port": 8000}}),
        )
    }

    #[test]
    fn accepts_the_python_client_body_and_normalizes() {
        let spec = ok(&client_body());
        assert_eq!(spec.model.image, ModelImage::Hub(Default::default()));
        assert_eq!(
            spec.notifications,
            Notifications {
                email: false,
                push: false
            }
        );
        assert_eq!(spec.experimental_features, ExperimentalFeatures::default());
        assert_eq!(spec.health_route(), "/health");
        assert_eq!(
            spec.compute.scaling.effective_scale_to_zero_timeout(),
            Some(15)
        );
    }

    #[test]
    fn full_shape_on_output_and_round_trip() {
        let spec = ok(&client_body());
        let out = serde_json::to_value(spec.redacted()).unwrap();
        for key in [
            "cacheHttpResponses",
            "customRouter",
            "experimentalFeatures",
            "network",
            "notifications",
            "privateService",
            "route",
            "tags",
        ] {
            assert!(out.get(key).is_some(), "missing {key}");
        }
        for key in [
            "revision",
            "task",
            "env",
            "secrets",
            "args",
            "command",
            "fromCatalog",
        ] {
            assert!(out["model"].get(key).is_some(), "missing model.{key}");
        }
        assert_eq!(out["model"]["revision"], Value::Null);
        assert_eq!(out["model"]["secrets"], json!({"MY_SECRET_KEY": null}));
        assert_eq!(out["compute"]["id"], Value::Null);
        assert_eq!(out["compute"]["scaling"]["measure"], Value::Null);

        let stored = serde_json::to_value(&spec).unwrap();
        assert_eq!(ok(&stored), spec, "a stored spec parses back to itself");
    }

    #[test]
    fn secrets_never_show_in_debug() {
        let spec = ok(&client_body());
        let debug = format!("{spec:?}");
        assert!(debug.contains("MY_SECRET_KEY"));
        assert!(!debug.contains("secret_value"));
    }

    #[test]
    fn compute_id_is_ignored_on_input() {
        let body = with(client_body(), "/compute/id", json!("aws-us-east-1-cpu"));
        assert_eq!(ok(&body).compute.id, None);
    }

    #[test]
    fn structural_errors_have_paths() {
        let unknown = issues(&with(client_body(), "/model/foo", json!(1)));
        assert_eq!(unknown[0].path, "model.foo");
        assert!(unknown[0].message.starts_with("unknown field `foo`"));

        let mut body = client_body();
        body["provider"].as_object_mut().unwrap().remove("region");
        assert_eq!(
            issues(&body),
            vec![Issue::new("provider.region", "missing field `region`")]
        );

        let bad_enum = issues(&with(client_body(), "/type", json!("protected")));
        assert_eq!(bad_enum[0].path, "type");
        assert!(bad_enum[0].message.contains("unknown variant `protected`"));

        let not_object = issues(&json!([1]));
        assert_eq!(not_object[0].path, "");
    }

    #[test]
    fn replica_counts_reject_negatives_and_fractions() {
        for bad in [json!(-1), json!(1.5), json!("1")] {
            let found = issues(&with(client_body(), "/compute/scaling/maxReplica", bad));
            assert_eq!(found[0].path, "compute.scaling.maxReplica");
            assert!(
                found[0].message.contains("non-negative integer"),
                "{}",
                found[0].message
            );
        }
        ok(&with(
            client_body(),
            "/compute/scaling/maxReplica",
            json!(2.0),
        ));
    }

    #[test]
    fn rule_name() {
        for good in ["a", "my-endpoint-1", &"a".repeat(32)] {
            ok(&with(client_body(), "/name", json!(good)));
        }
        for bad in [
            "",
            "My-Endpoint",
            "under_score",
            "dot.ted",
            "-a",
            "--help",
            &"a".repeat(33),
        ] {
            assert_eq!(
                paths(&with(client_body(), "/name", json!(bad))),
                ["name"],
                "{bad:?}"
            );
        }
        assert!(EndpointName::parse("ok-1").is_ok());
        assert_eq!(EndpointName::parse("é"), Err(NameError::Characters));
        assert_eq!(EndpointName::parse("-x"), Err(NameError::LeadingDash));
        assert!(EndpointName::parse("x-").is_ok());
    }

    #[test]
    fn rule_repository() {
        ok(&with(
            client_body(),
            "/model/repository",
            json!("openai/gpt-oss-20b"),
        ));
        for bad in [
            "gpt2", "a/", "/b", "a/b/c", "a/b;id", "a/b$(id)", "--help/x", "a/b c",
        ] {
            assert_eq!(
                paths(&with(client_body(), "/model/repository", json!(bad))),
                ["model.repository"],
                "{bad}"
            );
        }
    }

    #[test]
    fn rule_revision() {
        for good in [
            json!(null),
            json!("main"),
            json!("refs/pr/1"),
            json!("a".repeat(40)),
        ] {
            ok(&with(client_body(), "/model/revision", good));
        }
        for bad in ["--output=/etc/x", "../../x", "", "a b", "$(id)"] {
            let found = issues(&with(client_body(), "/model/revision", json!(bad)));
            assert_eq!(found.len(), 1, "{bad}");
            assert_eq!(found[0].path, "model.revision", "{bad}");
        }
    }

    #[test]
    fn rule_llamacpp_model_files() {
        let llamacpp = |files: Value| {
            let mut image = json!({"url": "ghcr.io/ggml-org/llama.cpp:server"});
            image
                .as_object_mut()
                .unwrap()
                .extend(files.as_object().unwrap().clone());
            with(client_body(), "/model/image", json!({ "llamacpp": image }))
        };
        ok(&llamacpp(json!({"modelPath": "m.gguf"})));
        ok(&llamacpp(
            json!({"modelPath": "/repository/q/m.gguf", "mmprojModelPath": "mm.gguf"}),
        ));
        assert_eq!(
            paths(&llamacpp(json!({"modelPath": "../../../etc/passwd"}))),
            ["model.image.llamacpp.modelPath"]
        );
        assert_eq!(
            paths(&llamacpp(json!({
                "modelPath": "/etc/passwd",
                "mmprojModelPath": "--mmproj=/x",
                "specModelPath": "/repository/../d.gguf"
            }))),
            [
                "model.image.llamacpp.modelPath",
                "model.image.llamacpp.mmprojModelPath",
                "model.image.llamacpp.specModelPath"
            ]
        );
    }

    #[test]
    fn rule_min_at_most_max() {
        let scaling = |min: u32, max: u32| json!({"minReplica": min, "maxReplica": max});
        ok(&with(client_body(), "/compute/scaling", scaling(2, 2)));
        assert_eq!(
            paths(&with(client_body(), "/compute/scaling", scaling(3, 2))),
            ["compute.scaling.minReplica"]
        );
    }

    #[test]
    fn rule_timeout_only_with_min_zero() {
        let scaling = |min: u32, timeout: Value| json!({"minReplica": min, "maxReplica": 2, "scaleToZeroTimeout": timeout});
        let spec = ok(&with(
            client_body(),
            "/compute/scaling",
            scaling(1, Value::Null),
        ));
        assert_eq!(spec.compute.scaling.effective_scale_to_zero_timeout(), None);
        let spec = ok(&with(
            client_body(),
            "/compute/scaling",
            scaling(0, Value::Null),
        ));
        assert_eq!(
            spec.compute.scaling.scale_to_zero_timeout, None,
            "null is stored"
        );
        assert_eq!(
            spec.compute.scaling.effective_scale_to_zero_timeout(),
            Some(15)
        );
        assert_eq!(
            paths(&with(
                client_body(),
                "/compute/scaling",
                scaling(1, json!(30))
            )),
            ["compute.scaling.scaleToZeroTimeout"]
        );
    }

    fn schedule(entries: Value) -> Value {
        with(
            client_body(),
            "/compute/scaling",
            json!({"minReplica": 0, "maxReplica": 4, "schedule": entries}),
        )
    }

    #[test]
    fn rule_schedule_entries() {
        let spec = ok(&schedule(json!([
            {"at": "08:00", "minReplica": 1, "maxReplica": 4},
            {"at": "20:30", "minReplica": 0, "maxReplica": 1, "scaleToZeroTimeout": 5},
            {"at": "00:00", "minReplica": 0, "maxReplica": 1}
        ])));
        let scaling = &spec.compute.scaling;
        assert_eq!(
            scaling.entry_in_effect(9 * 60).map(|e| e.at.as_str()),
            Some("08:00")
        );
        assert_eq!(
            scaling.entry_in_effect(23 * 60).map(|e| e.at.as_str()),
            Some("20:30")
        );
        assert_eq!(
            scaling.entry_in_effect(0).map(|e| e.at.as_str()),
            Some("00:00")
        );

        let found = paths(&schedule(json!([
            {"at": "08:00", "minReplica": 3, "maxReplica": 2},
            {"at": "8:00", "minReplica": 1, "maxReplica": 5, "scaleToZeroTimeout": 5},
            {"at": "24:00", "minReplica": 0, "maxReplica": 1},
            {"at": "08:00", "minReplica": 0, "maxReplica": 1}
        ])));
        assert_eq!(
            found,
            [
                "compute.scaling.schedule[0].minReplica",
                "compute.scaling.schedule[1].scaleToZeroTimeout",
                "compute.scaling.schedule[1].maxReplica",
                "compute.scaling.schedule[1].at",
                "compute.scaling.schedule[2].at",
                "compute.scaling.schedule[3].at",
            ]
        );
    }

    #[test]
    fn time_of_day_format() {
        assert_eq!(parse_time_of_day("00:00"), Some(0));
        assert_eq!(parse_time_of_day("23:59"), Some(1439));
        for bad in [
            "24:00", "12:60", "1:00", "12:5", "12-00", "+1:00", "", "12:00:00",
        ] {
            assert_eq!(parse_time_of_day(bad), None, "{bad}");
        }
    }

    fn measure(body: Value, m: Value) -> Value {
        with(body, "/compute/scaling/measure", m)
    }

    #[test]
    fn rule_measure_hardware_and_pending() {
        ok(&measure(client_body(), json!({"hardwareUsage": 80})));
        ok(&measure(client_body(), json!({"hardwareUsage": null})));
        ok(&measure(client_body(), json!({"pendingRequests": 1.5})));
        assert_eq!(
            paths(&measure(client_body(), json!({"hardwareUsage": 101}))),
            ["compute.scaling.measure.hardwareUsage"]
        );
        assert_eq!(
            paths(&measure(client_body(), json!({"pendingRequests": 0}))),
            ["compute.scaling.measure.pendingRequests"]
        );
        let two = issues(&measure(
            client_body(),
            json!({"hardwareUsage": 1, "pendingRequests": 1}),
        ));
        assert_eq!(
            two,
            [Issue::new(
                "compute.scaling.measure",
                "must have exactly one key"
            )]
        );
    }

    #[test]
    fn rule_measure_inference_load() {
        let spec = ok(&measure(
            vllm_body(),
            json!({"inferenceLoad": {"kvCacheUsage": null}}),
        ));
        assert_eq!(
            spec.compute.scaling.measure,
            Some(Measure::InferenceLoad(InferenceLoad::default()))
        );
        ok(&measure(
            vllm_body(),
            json!({"inferenceLoad": {"kvCacheUsage": 100, "requestsWaiting": 0.5}}),
        ));
        assert_eq!(
            paths(&measure(
                vllm_body(),
                json!({"inferenceLoad": {"kvCacheUsage": 0, "requestsWaiting": -1}})
            )),
            [
                "compute.scaling.measure.inferenceLoad.kvCacheUsage",
                "compute.scaling.measure.inferenceLoad.requestsWaiting"
            ]
        );
        assert_eq!(
            paths(&measure(client_body(), json!({"inferenceLoad": {}}))),
            ["compute.scaling.measure"],
            "the hub image exports no engine metrics"
        );
    }

    #[test]
    fn rule_network() {
        let net = |v: Value| with(client_body(), "/network", v);
        ok(&net(
            json!({"cidrBlock": true, "cidrList": ["10.0.0.0/8", "2001:db8::/32", "192.168.1.7"]}),
        ));
        ok(&net(json!({"cidrBlock": null, "cidrList": null})));
        assert_eq!(
            paths(&net(
                json!({"cidrBlock": true, "cidrList": ["10.0.0.0/33", "nope", "::/0"]})
            )),
            ["network.cidrList[0]", "network.cidrList[1]"]
        );
        assert_eq!(
            paths(&net(json!({"cidrBlock": true, "cidrList": []}))),
            ["network.cidrList"]
        );
        let spec = ok(&net(json!({"cidrBlock": true, "cidrList": ["10.0.0.0/8"]})));
        let allow = spec.network.unwrap().allow_list().unwrap();
        assert!(allow[0].contains("10.9.9.9".parse().unwrap()));
    }

    #[test]
    fn rule_private_service_needs_private_type() {
        let body = with(
            client_body(),
            "/privateService",
            json!({"accountId": "123456789012", "region": "eu-west-1"}),
        );
        assert_eq!(paths(&body), ["privateService"]);
        let spec = ok(&with(body, "/type", json!("private")));
        assert_eq!(
            spec.private_service.unwrap().region,
            PrivateLinkRegion::EuWest1
        );
        // A private endpoint without one could never be reached.
        let found = issues(&with(client_body(), "/type", json!("private")));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].path, "privateService");
        assert!(found[0].message.contains("required"));
    }

    #[test]
    fn rule_route() {
        let route = |domain: &str, path: &str| {
            with(
                client_body(),
                "/route",
                json!({"domain": domain, "path": path}),
            )
        };
        ok(&route("my-new-domain.cool-website.woof", "/models/bert"));
        assert_eq!(paths(&route("bad_domain..com", "/x")), ["route.domain"]);
        assert_eq!(paths(&route("10.0.0.1", "/x")), ["route.domain"]);
        assert_eq!(paths(&route("ok.example.com", "x")), ["route.path"]);
        let partial = issues(&with(
            client_body(),
            "/route",
            json!({"domain": "ok.example.com"}),
        ));
        assert_eq!(partial[0].path, "route.path");
    }

    #[test]
    fn rule_env_and_secret_names() {
        ok(&with(
            client_body(),
            "/model/env",
            json!({"_A1": "x", "b": "y"}),
        ));
        let body = with(client_body(), "/model/env", json!({"1A": "x", "A-B": "y"}));
        let body = with(body, "/model/secrets", json!({"a.b": "x", "OK": null}));
        assert_eq!(
            paths(&body),
            ["model.env.1A", "model.env.A-B", "model.secrets[\"a.b\"]"]
        );
    }

    #[test]
    fn rule_custom_router() {
        let router = |v: Value| with(client_body(), "/customRouter", v);
        let spec = ok(&router(json!({"tag": "v1", "port": null})));
        let r = spec.custom_router.unwrap();
        assert_eq!(
            (r.port, r.grpc_port, r.protocol),
            (3000, 9002, RouterProtocol::Http)
        );
        assert_eq!(
            ok(&router(json!({"port": 8080}))).custom_router,
            None,
            "no tag: removed"
        );
        assert_eq!(
            ok(&router(json!({"tag": null, "protocol": "extProc"}))).custom_router,
            None
        );
        let found = issues(&router(json!({"tag": "v1", "grpcPort": 65536})));
        assert_eq!(found[0].path, "customRouter.grpcPort");
        assert_eq!(
            paths(&router(json!({"tag": "v1", "env": {"9X": "y"}}))),
            ["customRouter.env.9X"]
        );
    }

    #[test]
    fn rule_image_numbers() {
        ok(&with(
            vllm_body(),
            "/model/image/vLLM/tensorParallelSize",
            json!(2),
        ));
        let found = issues(&with(
            vllm_body(),
            "/model/image/vLLM/tensorParallelSize",
            json!(-2),
        ));
        assert_eq!(found[0].path, "model.image.vLLM.tensorParallelSize");
        let found = issues(&with(vllm_body(), "/model/image/vLLM/url", json!("")));
        assert_eq!(found[0].path, "model.image.vLLM.url");
    }

    #[test]
    fn collects_all_semantic_issues() {
        let body = with(client_body(), "/name", json!("Bad Name"));
        let body = with(body, "/model/repository", json!("gpt2"));
        let body = with(body, "/route", json!({"domain": "x", "path": "y"}));
        assert_eq!(
            paths(&body),
            ["name", "model.repository", "route.domain", "route.path"]
        );
    }

    #[test]
    fn optional_fields_are_not_nullable() {
        let found = issues(&with(client_body(), "/tags", Value::Null));
        assert_eq!(found[0].path, "tags");
        let found = issues(&with(
            client_body(),
            "/notifications",
            json!({"email": true}),
        ));
        assert_eq!(found[0].path, "notifications.push");
    }
}
