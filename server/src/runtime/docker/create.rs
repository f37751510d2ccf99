//! A replica's container, as the Engine API creates it: image, arguments, environment, labels, resources and
//! confinement. Pure: everything here is decided from the plan and the settings.
//!
//! Confined by default: every capability dropped (but `NET_BIND_SERVICE` for a port below 1024),
//! `no-new-privileges`, a read-only root filesystem with a tmpfs `/tmp` and a volume of its own at `/data`
//! for the engine's cache, a pids limit, nothing of the server's files mounted and no port published: the
//! server reaches it on the replicas' bridge.

use std::collections::HashMap;

use bollard::models::{ContainerCreateBody, DeviceRequest, HostConfig, Mount, MountType};

use crate::config::DockerConfig;
use crate::runtime::provider::{ContainerPlan, ReplicaPlan};

/// Labels every replica's container carries: what the next server matches it by.
pub const INSTANCE: &str = "dev.switchyard.instance";
pub const NAMESPACE: &str = "dev.switchyard.namespace";
pub const ENDPOINT: &str = "dev.switchyard.endpoint";
pub const REPLICA: &str = "dev.switchyard.replica";
pub const GENERATION: &str = "dev.switchyard.generation";
pub const PORT: &str = "dev.switchyard.port";
pub const DEVICES: &str = "dev.switchyard.devices";

/// Where each container's writable volume is mounted (the engines' model and compile caches).
pub const CACHE_DIR: &str = "/data";

/// The container's name: `switchyard-<instance>-<namespace>-<replica>`, in the characters names allow.
pub fn name(instance: &str, plan: &ReplicaPlan) -> String {
    let instance = instance.get(..8).unwrap_or(instance);
    allowed(&format!(
        "switchyard-{instance}-{}-{}",
        plan.namespace, plan.replica_id
    ))
}

/// The bridge a namespace's replicas join: `<network>-<namespace>`. One per namespace, so a replica
/// reaches the replicas (and router) of its own namespace only; the server reaches every bridge.
pub fn network(base: &str, namespace: &str) -> String {
    allowed(&format!("{base}-{namespace}"))
}

/// `text` in the characters Docker allows in names (others become `-`).
fn allowed(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// The labels of a replica's container. Nothing secret: labels are readable by anyone who can list
/// containers.
pub fn labels(instance: &str, plan: &ReplicaPlan, port: u16) -> HashMap<String, String> {
    [
        (INSTANCE, instance.to_string()),
        (NAMESPACE, plan.namespace.clone()),
        (ENDPOINT, plan.endpoint.clone()),
        (REPLICA, plan.replica_id.clone()),
        (GENERATION, plan.generation.clone()),
        (PORT, port.to_string()),
        (DEVICES, plan.resources.devices.join(",")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The create request of one replica. `cpus_here` caps the CPU limit at what the engine's machine has
/// (the engine refuses more).
/// `repository`: the model's directory on the engine's machine, mounted read-only at `/repository`.
pub fn body(
    plan: &ReplicaPlan,
    container: &ContainerPlan,
    config: &DockerConfig,
    instance: &str,
    cpus_here: Option<f64>,
    grace_s: i64,
    repository: Option<&std::path::Path>,
) -> ContainerCreateBody {
    let mut env: Vec<String> = plan.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    if !plan.env.contains_key("PORT") {
        env.push(format!("PORT={}", container.port));
    }
    env.push(format!("REPLICA_ID={}", plan.replica_id));
    ContainerCreateBody {
        image: Some(container.image.clone()),
        entrypoint: container.entrypoint.clone(),
        // No arguments keeps the image's own.
        cmd: (!plan.args.is_empty()).then(|| plan.args.clone()),
        env: Some(env),
        labels: Some(labels(instance, plan, container.port)),
        stop_timeout: Some(grace_s),
        host_config: Some(host_config(plan, container, config, cpus_here, repository)),
        ..Default::default()
    }
}

fn host_config(
    plan: &ReplicaPlan,
    container: &ContainerPlan,
    config: &DockerConfig,
    cpus_here: Option<f64>,
    repository: Option<&std::path::Path>,
) -> HostConfig {
    let cpus = match (plan.resources.cpus, cpus_here) {
        (Some(want), Some(here)) => Some(want.min(here)),
        (want, _) => want,
    };
    let devices = &plan.resources.devices;
    let mut cap_add = config.cap_add.clone();
    if container.port < 1024 && !cap_add.iter().any(|c| c == "NET_BIND_SERVICE") {
        cap_add.push("NET_BIND_SERVICE".into());
    }
    HostConfig {
        network_mode: Some(network(&config.network, &plan.namespace)),
        nano_cpus: cpus.map(|c| (c * 1e9) as i64).filter(|n| *n > 0),
        memory: plan
            .resources
            .memory_bytes
            .and_then(|m| i64::try_from(m).ok()),
        pids_limit: Some(config.pids_limit.max(16)),
        cap_drop: Some(vec!["ALL".into()]),
        cap_add: (!cap_add.is_empty()).then_some(cap_add),
        security_opt: Some(vec!["no-new-privileges".into()]),
        readonly_rootfs: Some(config.read_only_root),
        tmpfs: Some(HashMap::from([(
            "/tmp".to_string(),
            format!("rw,nosuid,nodev,size={}m", config.tmp_mib.max(1)),
        )])),
        mounts: Some(mounts(repository)),
        device_requests: (!devices.is_empty()).then(|| {
            vec![DeviceRequest {
                driver: Some("nvidia".into()),
                device_ids: Some(devices.clone()),
                capabilities: Some(vec![vec!["gpu".into()]]),
                ..Default::default()
            }]
        }),
        ..Default::default()
    }
}

/// The cache volume (anonymous: removed with its container), and the model read-only at `/repository`.
fn mounts(repository: Option<&std::path::Path>) -> Vec<Mount> {
    let mut mounts = vec![Mount {
        target: Some(CACHE_DIR.into()),
        typ: Some(MountType::VOLUME),
        ..Default::default()
    }];
    if let Some(dir) = repository {
        mounts.push(Mount {
            target: Some(crate::runtime::launch::REPOSITORY.into()),
            source: Some(dir.display().to_string()),
            typ: Some(MountType::BIND),
            read_only: Some(true),
            ..Default::default()
        });
    }
    mounts
}

/// `(repository, tag or digest)` of an image reference, as a pull asks for it: no tag is `latest` (an
/// empty tag would pull every tag).
pub fn pull_reference(image: &str) -> (String, String) {
    if let Some((repo, digest)) = image.split_once('@') {
        return (repo.to_string(), digest.to_string());
    }
    let last_slash = image.rfind('/').map_or(0, |i| i + 1);
    match image[last_slash..].rfind(':') {
        Some(i) => (
            image[..last_slash + i].to_string(),
            image[last_slash + i + 1..].to_string(),
        ),
        None => (image.to_string(), "latest".to_string()),
    }
}

/// The registry an image is pulled from: its first part when that names a host (has a `.` or a `:`, or is
/// `localhost`), else Docker Hub.
pub fn registry(image: &str) -> &str {
    match image.split_once('/') {
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => first,
        _ => "docker.io",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::provider::{Resources, Workload};

    fn sample(port: u16, devices: Vec<String>) -> (ReplicaPlan, ContainerPlan) {
        let container = ContainerPlan {
            image: "registry.local:5000/me/engine:v1".into(),
            entrypoint: None,
            port,
            credentials: Some(("me".into(), "pw".into())),
            repository: None,
        };
        let plan = ReplicaPlan {
            namespace: "acme".into(),
            endpoint: "chat".into(),
            replica_id: "chat-1234abcd".into(),
            generation: "g1".into(),
            workload: Workload::Container(container.clone()),
            args: vec![],
            env: [("HF_TOKEN".to_string(), "hf_secret".to_string())].into(),
            resources: Resources {
                cpus: Some(8.0),
                memory_bytes: Some(2 << 30),
                devices,
            },
        };
        (plan, container)
    }

    #[test]
    fn a_replica_is_confined_and_limited_by_its_compute() {
        let (plan, c) = sample(80, vec!["1".into()]);
        let model = std::path::Path::new("/srv/models/org/m/abc");
        let config = DockerConfig::default();
        let body = body(&plan, &c, &config, "inst0001xyz", Some(2.0), 5, Some(model));
        assert_eq!(body.cmd, None, "no arguments keeps the image's own");
        let host = body.host_config.expect("host config");
        assert_eq!(host.cap_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(
            host.cap_add,
            Some(vec!["NET_BIND_SERVICE".to_string()]),
            "port 80 needs it"
        );
        assert_eq!(
            host.security_opt,
            Some(vec!["no-new-privileges".to_string()])
        );
        assert_eq!(host.readonly_rootfs, Some(true));
        assert!(host.tmpfs.expect("tmpfs").contains_key("/tmp"));
        assert_eq!(
            host.nano_cpus,
            Some(2_000_000_000),
            "capped at the machine's CPUs"
        );
        assert_eq!(host.memory, Some(2 << 30));
        assert_eq!(host.port_bindings, None, "nothing published");
        assert_eq!(
            host.network_mode.as_deref(),
            Some("switchyard-acme"),
            "a bridge of its namespace's"
        );
        let mounts = host.mounts.expect("mounts");
        assert_eq!(mounts.len(), 2);
        assert_eq!(
            (mounts[0].target.as_deref(), mounts[0].source.as_deref()),
            (Some("/data"), None)
        );
        assert_eq!(
            (
                mounts[1].target.as_deref(),
                mounts[1].source.as_deref(),
                mounts[1].read_only
            ),
            (
                Some("/repository"),
                Some("/srv/models/org/m/abc"),
                Some(true)
            )
        );
        let gpu = &host.device_requests.expect("a device request")[0];
        assert_eq!(gpu.device_ids, Some(vec!["1".to_string()]));
        let labels = body.labels.expect("labels");
        assert_eq!(labels[INSTANCE], "inst0001xyz");
        assert_eq!(labels[DEVICES], "1");
        assert!(!labels.values().any(|v| v.contains("secret") || v == "pw"));
        let env = body.env.expect("env");
        assert!(
            env.contains(&"PORT=80".to_string()) && env.contains(&"HF_TOKEN=hf_secret".to_string())
        );
        // Above 1024 no capability at all; no GPU, no device request.
        let (plan, c) = sample(8000, vec![]);
        let host = super::body(&plan, &c, &DockerConfig::default(), "i", None, 5, None)
            .host_config
            .expect("host config");
        assert_eq!((host.cap_add, host.device_requests), (None, None));
        assert_eq!(host.nano_cpus, Some(8_000_000_000));
        // What an operator grants back.
        let granted = DockerConfig {
            cap_add: vec!["SETUID".into(), "SETGID".into()],
            read_only_root: false,
            ..Default::default()
        };
        let host = super::body(&plan, &c, &granted, "i", None, 5, None)
            .host_config
            .expect("host config");
        assert_eq!(
            host.cap_add,
            Some(vec!["SETUID".to_string(), "SETGID".to_string()])
        );
        assert_eq!(
            (host.cap_drop, host.readonly_rootfs),
            (Some(vec!["ALL".to_string()]), Some(false))
        );
    }

    #[test]
    fn references_and_registries() {
        assert_eq!(pull_reference("alpine"), ("alpine".into(), "latest".into()));
        assert_eq!(
            pull_reference("127.0.0.1:5000/me/e:v1"),
            ("127.0.0.1:5000/me/e".into(), "v1".into())
        );
        assert_eq!(
            pull_reference("127.0.0.1:5000/me/e"),
            ("127.0.0.1:5000/me/e".into(), "latest".into())
        );
        assert_eq!(
            pull_reference("ghcr.io/a/b@sha256:abc"),
            ("ghcr.io/a/b".into(), "sha256:abc".into())
        );
        assert_eq!(registry("ghcr.io/huggingface/tei:cpu-1.8"), "ghcr.io");
        assert_eq!(registry("127.0.0.1:5000/e:v1"), "127.0.0.1:5000");
        assert_eq!(registry("localhost/e"), "localhost");
        assert_eq!(registry("vllm/vllm-openai:v0.11.0"), "docker.io");
        assert_eq!(registry("alpine"), "docker.io");
    }

    #[test]
    fn names_keep_to_the_characters_allowed() {
        let (mut plan, _) = sample(80, vec![]);
        plan.namespace = "Acme Org".into();
        assert_eq!(
            name("0123456789", &plan),
            "switchyard-01234567-Acme-Org-chat-1234abcd"
        );
    }
}
