//! Wire types of the public API and their validation: pure data, no I/O.
//!
//! - [`endpoint`]: the endpoint specification (`EndpointSpec::parse`, the semantic rules); [`image`] its
//!   serving-container variants; [`update`] partial updates (`EndpointSpec::apply_update`).
//! - [`status`]: what responses show (`EndpointOut`, `EndpointStatus`); [`lifecycle`] states and transitions.
//! - [`deploy`]: catalog deploy bodies and the recipe enums (`Accelerator`, `EngineType`).
//! - [`event`]: the kinds of change the outbox records; [`analytics`] an endpoint's series and decisions.
//! - [`repo`]: repository ids, revisions and model file paths, checked as what they are.
//! - [`issue`]: `{path, message}` validation issues; [`cidr`] allow-list blocks; [`wire`] serde helpers
//!   (strict integers, timestamps ending in `Z`); `strict` a JSON decoder that takes structs only from objects.
//!
//! Every `parse` returns all semantic issues it finds; structural (serde) errors stop at the first, with its path.

pub mod account;
pub mod analytics;
pub mod catalog;
pub mod cidr;
pub mod deploy;
pub mod endpoint;
pub mod event;
pub mod host;
pub mod image;
pub mod issue;
pub mod lifecycle;
pub mod notice;
pub mod oauth;
pub mod repo;
pub mod status;
mod strict;
pub mod update;
pub mod webhook;
pub mod wire;

pub use cidr::{Cidr, CidrError};
pub use deploy::{
    Accelerator, DeployConfig, DeployModelIn, DeployPrivateService, DeployRecipeIn, DeployScaling,
    EngineType,
};
pub use endpoint::{
    Compute, ComputeAccelerator, CustomRouter, EndpointName, EndpointSpec, EndpointType,
    ExperimentalFeatures, ExtProcBody, ExtProcSettings, Framework, InferenceLoad, LoadBalancer,
    McpLb, Measure, Model, NameError, Network, Notifications, PrivateLinkRegion, PrivateService,
    Provider, Route, RouterProtocol, Scaling, ScheduleEntry, Secrets, Task, EXT_PROC_ENV,
};
pub use host::{bare_host, is_server_host};
pub use image::ModelImage;
pub use issue::{parse_json, Issue};
pub use lifecycle::{can_transition, EndpointState, LifecycleAction, TransitionError};
pub use status::{ActorOut, EndpointOut, EndpointStatus};
