//! Launch plans: from an endpoint spec, the command line, environment and health route of one replica.
//!
//! As a process, `custom` images run `model.command` + `model.args`; engine images run the launcher
//! [`Engines`] finds for them (configured, installed or on `PATH`), with the engine flags derived from the
//! image fields (e.g. llamacpp `ctxSize` → `--ctx-size`) and then `model.args`. As a container, the image
//! is the key's `url`, on its port ([`ModelImage::port`]), `model.command` replaces its entrypoint, and the
//! same derived flags and then `model.args` are its arguments.

use std::collections::BTreeMap;

use serde::Serialize;

use super::provider::{ContainerPlan, Kind, ReplicaPlan, Workload};
use crate::crypto::SecretBox;
use crate::engines::Engines;
use crate::model::image::DEFAULT_HEALTH_ROUTE;
use crate::model::{EndpointSpec, ModelImage};

/// Why a spec cannot be started here; shown as the endpoint's `status.message`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LaunchError(pub String);

/// Where a `{model_file}` under `/repository/` sits in the model's repository (`{model_file_name}`).
fn in_repository(model_file: &str) -> &str {
    model_file
        .strip_prefix("/repository/")
        .unwrap_or(model_file)
}

/// A replica's plan and the route that tells when it is ready.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    pub plan: ReplicaPlan,
    pub health_route: String,
}

fn wire<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

/// Flags and variables an engine image's fields stand for.
struct Derived {
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
}

impl Derived {
    fn flag<T: ToString>(&mut self, name: &str, value: Option<T>) {
        if let Some(v) = value {
            self.args.push(name.to_string());
            self.args.push(v.to_string());
        }
    }

    fn switch(&mut self, name: &str, on: Option<bool>) {
        if on == Some(true) {
            self.args.push(name.to_string());
        }
    }

    fn env<T: ToString>(&mut self, name: &'static str, value: Option<T>) {
        if let Some(v) = value {
            self.env.push((name, v.to_string()));
        }
    }
}

fn derive(image: &ModelImage) -> Derived {
    let mut d = Derived {
        args: Vec::new(),
        env: Vec::new(),
    };
    match image {
        ModelImage::Hub(_) | ModelImage::HubServe(_) | ModelImage::VllmNeuron(_) => {}
        ModelImage::Custom(_) => {}
        ModelImage::HubNeuron(i) => {
            d.env("HUB_BATCH_SIZE", i.batch_size);
            d.env("HUB_OPTIMUM_SEQUENCE_LENGTH", i.sequence_length);
            d.env("CUSTOM_CACHE_REPO", i.neuron_cache.clone());
        }
        ModelImage::Tgi(i) => {
            d.flag("--max-batch-prefill-tokens", i.max_batch_prefill_tokens);
            d.flag("--max-batch-total-tokens", i.max_batch_total_tokens);
            d.flag("--max-input-length", i.max_input_length);
            d.flag("--max-total-tokens", i.max_total_tokens);
            d.switch("--disable-custom-kernels", i.disable_custom_kernels);
            d.flag("--quantize", i.quantize.as_ref().map(wire));
        }
        ModelImage::TgiNeuron(i) => {
            d.flag("--max-batch-prefill-tokens", i.max_batch_prefill_tokens);
            d.flag("--max-batch-total-tokens", i.max_batch_total_tokens);
            d.flag("--max-input-tokens", i.max_input_length);
            d.flag("--max-total-tokens", i.max_total_tokens);
            d.env("HUB_AUTO_CAST_TYPE", i.hf_auto_cast_type.as_ref().map(wire));
            d.env("HUB_NUM_CORES", i.hf_num_cores);
        }
        ModelImage::Tei(i) => {
            d.flag("--max-batch-tokens", i.max_batch_tokens);
            d.flag("--max-concurrent-requests", i.max_concurrent_requests);
            d.flag("--pooling", i.pooling.as_ref().map(wire));
        }
        ModelImage::Llamacpp(i) => {
            // Unset ctxSize fits GPU memory on a GPU; this provider runs on the CPU, where it is 8192.
            d.flag("--ctx-size", Some(i.ctx_size.unwrap_or(8192)));
            d.flag("--n-gpu-layers", i.n_gpu_layers);
            d.flag("--parallel", i.n_parallel);
            d.flag("--threads-http", i.threads_http);
            d.flag("--pooling", i.pooling.as_ref().map(wire));
            d.flag("--mmproj", i.mmproj_model_path.clone());
            d.flag("--model-draft", i.spec_model_path.clone());
            if let Some(mode) = &i.mode {
                d.args.push(format!("--{}", wire(mode)));
            }
        }
        ModelImage::Vllm(i) => {
            d.flag("--data-parallel-size", i.data_parallel_size);
            d.flag("--kv-cache-dtype", i.kv_cache_dtype.as_ref().map(wire));
            d.flag("--max-num-batched-tokens", i.max_num_batched_tokens);
            d.flag("--max-num-seqs", i.max_num_seqs);
            d.flag("--tensor-parallel-size", i.tensor_parallel_size);
        }
        ModelImage::VllmOmni(i) => {
            d.flag("--deploy-config", i.deploy_config.clone());
            d.flag("--max-num-seqs", i.max_num_seqs);
        }
        ModelImage::Sglang(i) => {
            d.flag("--chunked-prefill-size", i.chunked_prefill_size);
            d.flag("--kv-cache-dtype", i.kv_cache_dtype.as_ref().map(wire));
            d.flag("--max-prefill-tokens", i.max_prefill_tokens);
            d.flag("--max-running-requests", i.max_running_requests);
            d.flag("--tp-size", i.tensor_parallel_size);
        }
    }
    d
}

/// Builds the plan of one replica of `spec`, as a process or a container (`kind`, the provider's). Secrets
/// are decrypted here, into the plan's environment only. The plan's generation and resources are the
/// caller's to fill in.
pub fn plan(
    engines: &Engines,
    secrets: &SecretBox,
    namespace: &str,
    spec: &EndpointSpec,
    replica_id: &str,
    kind: Kind,
) -> Result<Launch, LaunchError> {
    let model = &spec.model;
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    let (workload, mut args, health_route) = match kind {
        Kind::Process => process(engines, spec, &mut env)?,
        Kind::Container => container(engines, secrets, spec, &mut env)?,
    };
    args.extend(model.args.iter().flatten().cloned());
    if let Workload::Container(c) = &workload {
        // No provider chooses a container's port: the image's contract says it.
        let port = c.port.to_string();
        for a in &mut args {
            *a = a.replace("{port}", &port);
        }
    }
    for (k, v) in &model.env {
        env.insert(k.clone(), v.clone());
    }
    for (k, sealed) in &model.secrets.0 {
        if let Some(sealed) = sealed {
            env.insert(k.clone(), open(secrets, k, sealed)?);
        }
    }
    Ok(Launch {
        plan: ReplicaPlan {
            namespace: namespace.to_string(),
            endpoint: spec.name.clone(),
            replica_id: replica_id.to_string(),
            generation: String::new(),
            workload,
            args,
            env,
            resources: Default::default(),
        },
        health_route,
    })
}

fn open(secrets: &SecretBox, name: &str, sealed: &str) -> Result<String, LaunchError> {
    secrets.open(sealed).map_err(|_| {
        LaunchError(format!(
            "secret {name:?} cannot be decrypted with this server's key"
        ))
    })
}

/// A process: `model.command` for a custom image, else the launcher of the image's engine with the flags
/// its fields stand for.
fn process(
    engines: &Engines,
    spec: &EndpointSpec,
    env: &mut BTreeMap<String, String>,
) -> Result<(Workload, Vec<String>, String), LaunchError> {
    let model = &spec.model;
    let image = &model.image;
    if let ModelImage::Custom(_) = image {
        let command = model.command.as_deref().unwrap_or_default();
        let Some((program, rest)) = command.split_first() else {
            return Err(LaunchError(
                "a custom image runs model.command on this server's local provider; set model.command".into(),
            ));
        };
        let program = program.clone();
        return Ok((
            Workload::Process { program },
            rest.to_vec(),
            image.health_route(),
        ));
    }
    let launcher = engines
        .resolve_spec(spec)
        .map_err(|m| LaunchError(m.message))?
        .launcher;
    let (program, args, route) = launched(&launcher, spec, env);
    Ok((Workload::Process { program }, args, route))
}

/// A launcher's command for `spec`, its placeholders (but `{port}`) filled, then the flags the image's fields
/// stand for; its environment goes into `env`. The program, its arguments and the health route.
fn launched(
    launcher: &crate::config::Launcher,
    spec: &EndpointSpec,
    env: &mut BTreeMap<String, String>,
) -> (String, Vec<String>, String) {
    let model = &spec.model;
    let image = &model.image;
    let revision = model.revision.as_deref().unwrap_or("main");
    let model_file = match image {
        ModelImage::Llamacpp(i) => i.model_path.as_str(),
        _ => "",
    };
    let fill = |s: &String| {
        s.replace("{repository}", &model.repository)
            .replace("{revision}", revision)
            .replace("{model_file_name}", in_repository(model_file))
            .replace("{model_file}", model_file)
    };
    let mut filled = launcher.command.iter().map(fill);
    let program = filled.next().unwrap_or_default();
    let mut args: Vec<String> = filled.collect();
    let derived = derive(image);
    args.extend(derived.args);
    for (k, v) in &launcher.env {
        env.insert(k.clone(), fill(v));
    }
    for (k, v) in derived.env {
        env.insert(k.to_string(), v);
    }
    let image_route = image
        .base()
        .and_then(|b| b.health_route)
        .filter(|r| !r.is_empty());
    let route = image_route
        .map(str::to_string)
        .or_else(|| launcher.health_route.clone())
        .unwrap_or_else(|| DEFAULT_HEALTH_ROUTE.to_string());
    (program, args, route)
}

/// A container: the image's `url` on its engine's port, `model.command` as the entrypoint, the flags its
/// fields stand for as the first arguments.
fn container(
    engines: &Engines,
    secrets: &SecretBox,
    spec: &EndpointSpec,
    env: &mut BTreeMap<String, String>,
) -> Result<(Workload, Vec<String>, String), LaunchError> {
    let model = &spec.model;
    let image = &model.image;
    if let Some(built) = engines.image_for(spec) {
        // A built-in engine's own image (`switchyard engines image`), with its model inside.
        let launcher = crate::config::Launcher {
            command: built.command,
            health_route: Some(built.health_route),
            ..Default::default()
        };
        let (program, args, route) = launched(&launcher, spec, env);
        let workload = Workload::Container(ContainerPlan {
            image: built.image,
            entrypoint: Some(vec![program]),
            port: crate::engines::image::PORT,
            credentials: None,
            repository: None,
        });
        return Ok((workload, args, route));
    }
    // The operator's image for this key (`[runtime.launchers.KEY] image`), else the spec's.
    let configured = engines.configured_image(image.key());
    let url = match (configured.and_then(|l| l.image.as_deref()), image.base()) {
        (Some(url), _) => url.trim().to_string(),
        (None, Some(base)) => base.url.trim().to_string(),
        (None, None) => {
            return Err(LaunchError(format!(
                "the {key} image names no container to run; this server runs containers ([runtime] provider = \"docker\"): give the endpoint an image with a url (tei, vLLM, llamacpp, custom, …), or set runtime.launchers.{key}.image",
                key = image.key()
            )))
        }
    };
    let credentials = match image {
        ModelImage::Custom(c) => match &c.credentials {
            Some(c) => {
                let password = match &c.password {
                    Some(sealed) => open(secrets, "custom.credentials.password", sealed)?,
                    None => String::new(),
                };
                Some((c.username.clone(), password))
            }
            None => None,
        },
        _ => None,
    };
    let derived = derive(image);
    for (k, v) in derived.env {
        env.insert(k.to_string(), v);
    }
    let mounted = spec.experimental_features.skip_repo_download != Some(true);
    let mut args = if mounted {
        from_repository(image)
    } else {
        Vec::new()
    };
    args.extend(derived.args);
    let revision = model.revision.clone().unwrap_or_else(|| "main".into());
    let route = match configured.and_then(|l| l.health_route.clone()) {
        Some(route) if image.base().and_then(|b| b.health_route).is_none() => route,
        _ => image.health_route(),
    };
    let workload = Workload::Container(ContainerPlan {
        image: url,
        entrypoint: model.command.clone().filter(|c| !c.is_empty()),
        port: image.port(),
        credentials,
        repository: mounted.then(|| (model.repository.clone(), revision)),
    });
    Ok((workload, args, route))
}

/// Where a container is mounted its model: `/repository`.
pub const REPOSITORY: &str = "/repository";

/// The engine's flags that point it at the model mounted at [`REPOSITORY`]: TEI and TGI `--model-id`, vLLM
/// `--model`, SGLang `--model-path`, llama.cpp `-m` with its `modelPath` file. Other images find it there
/// themselves.
fn from_repository(image: &ModelImage) -> Vec<String> {
    let flag = |name: &str, value: String| vec![name.to_string(), value];
    match image {
        ModelImage::Tei(_) | ModelImage::Tgi(_) | ModelImage::TgiNeuron(_) => {
            flag("--model-id", REPOSITORY.into())
        }
        ModelImage::Vllm(_) | ModelImage::VllmOmni(_) | ModelImage::VllmNeuron(_) => {
            flag("--model", REPOSITORY.into())
        }
        ModelImage::Sglang(_) => flag("--model-path", REPOSITORY.into()),
        ModelImage::Llamacpp(i) => flag(
            "-m",
            format!("{REPOSITORY}/{}", in_repository(&i.model_path)),
        ),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Launcher;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn spec(image: serde_json::Value, extra: serde_json::Value) -> EndpointSpec {
        let mut body = json!({
            "name": "ep", "type": "public",
            "provider": {"vendor": "local", "region": "here"},
            "compute": {"accelerator": "cpu", "instanceType": "x", "instanceSize": "s",
                        "scaling": {"minReplica": 0, "maxReplica": 1}},
            "model": {"repository": "org/model", "framework": "pytorch", "image": image},
        });
        if let (Some(m), serde_json::Value::Object(e)) = (body["model"].as_object_mut(), extra) {
            m.extend(e);
        }
        EndpointSpec::parse(&body).unwrap()
    }

    fn config() -> Engines {
        let mut c = BTreeMap::new();
        c.insert(
            "llamacpp".into(),
            Launcher {
                command: vec![
                    "llama-server".into(),
                    "--port".into(),
                    "{port}".into(),
                    "-m".into(),
                    "{model_file}".into(),
                    "--hf-repo".into(),
                    "{repository}@{revision}".into(),
                ],
                health_route: Some("/healthz".into()),
                env: [("CACHE".to_string(), "/c/{repository}".to_string())].into(),
                ..Default::default()
            },
        );
        Engines::new("/nonexistent/engines".into(), c).with_search_path(None)
    }

    #[test]
    fn engine_flags_follow_the_image_fields() {
        let box_ = SecretBox::new(&[7; 32]);
        let s = spec(
            json!({"llamacpp": {"url": "x", "modelPath": "m.gguf", "ctxSize": 4096, "nParallel": 2, "mode": "embeddings", "pooling": "cls"}}),
            json!({"args": ["--verbose"], "env": {"A": "1"}, "secrets": {"TOKEN": box_.seal("s3cret")}, "revision": "abc"}),
        );
        let l = plan(&config(), &box_, "ns", &s, "r1", Kind::Process).unwrap();
        assert_eq!(program(&l), "llama-server");
        assert_eq!(
            l.plan.args,
            [
                "--port",
                "{port}",
                "-m",
                "m.gguf",
                "--hf-repo",
                "org/model@abc",
                "--ctx-size",
                "4096",
                "--parallel",
                "2",
                "--pooling",
                "cls",
                "--embeddings",
                "--verbose"
            ]
        );
        assert_eq!(l.health_route, "/healthz");
        assert_eq!(l.plan.env["A"], "1");
        assert_eq!(l.plan.env["TOKEN"], "s3cret");
        assert_eq!(l.plan.env["CACHE"], "/c/org/model");
        assert!(!format!("{:?}", l.plan).contains("s3cret"));
    }

    /// The process plan of `s`, with a key that opens nothing sealed.
    fn local(s: &EndpointSpec) -> Result<Launch, LaunchError> {
        plan(
            &config(),
            &SecretBox::new(&[1; 32]),
            "ns",
            s,
            "r",
            Kind::Process,
        )
    }

    fn container_of(l: &Launch) -> &ContainerPlan {
        match &l.plan.workload {
            Workload::Container(c) => c,
            other => panic!("a container, not {other:?}"),
        }
    }

    fn program(l: &Launch) -> &str {
        match &l.plan.workload {
            Workload::Process { program } => program,
            other => panic!("a process, not {other:?}"),
        }
    }

    #[test]
    fn a_container_runs_the_image_on_its_engines_port_with_the_derived_flags() {
        let box_ = SecretBox::new(&[7; 32]);
        let s = spec(
            json!({"tei": {"url": " ghcr.io/huggingface/text-embeddings-inference:cpu-1.8 ", "maxBatchTokens": 512}}),
            json!({"args": ["--port", "{port}"], "env": {"A": "1"}, "secrets": {"HF_TOKEN": box_.seal("hf_s3cret")}}),
        );
        let l = plan(&config(), &box_, "ns", &s, "r1", Kind::Container).unwrap();
        let c = container_of(&l);
        assert_eq!(
            c.image,
            "ghcr.io/huggingface/text-embeddings-inference:cpu-1.8"
        );
        assert_eq!(
            (c.port, c.entrypoint.as_ref(), c.credentials.as_ref()),
            (80, None, None)
        );
        assert_eq!(
            l.plan.args,
            [
                "--model-id",
                "/repository",
                "--max-batch-tokens",
                "512",
                "--port",
                "80"
            ]
        );
        assert_eq!(
            c.repository,
            Some(("org/model".to_string(), "main".to_string()))
        );
        assert_eq!(l.health_route, "/health");
        assert_eq!(l.plan.env["HF_TOKEN"], "hf_s3cret");
        assert!(!format!("{:?}", l.plan).contains("hf_s3cret"));
        // A custom image: its command replaces the entrypoint, its credentials are opened for the pull.
        let s = spec(
            json!({"custom": {"url": "registry.local/me/engine:v1", "port": 7000, "healthRoute": "/ready",
                   "credentials": {"username": "me", "password": box_.seal("pw")}}}),
            json!({"command": ["/engine", "--serve"]}),
        );
        let l = plan(&config(), &box_, "ns", &s, "r1", Kind::Container).unwrap();
        let c = container_of(&l);
        assert_eq!(
            c.entrypoint.as_deref(),
            Some(&["/engine".to_string(), "--serve".to_string()][..])
        );
        assert_eq!((c.port, l.health_route.as_str()), (7000, "/ready"));
        assert_eq!(c.credentials, Some(("me".to_string(), "pw".to_string())));
        assert!(
            l.plan.args.is_empty(),
            "a custom image finds its model itself"
        );
        assert!(!format!("{:?}", l.plan).contains("pw\""), "{:?}", l.plan);
        // llama.cpp is pointed at its file; skipRepoDownload mounts nothing and points at nothing.
        let s = spec(
            json!({"llamacpp": {"url": "x", "modelPath": "/repository/m.Q4.gguf"}}),
            json!({}),
        );
        let l = plan(&config(), &box_, "ns", &s, "r", Kind::Container).unwrap();
        assert_eq!(l.plan.args[..2], ["-m", "/repository/m.Q4.gguf"]);
        let mut s = spec(json!({"tei": {"url": "x"}}), json!({}));
        s.experimental_features.skip_repo_download = Some(true);
        let l = plan(&config(), &box_, "ns", &s, "r", Kind::Container).unwrap();
        let c = container_of(&l);
        assert_eq!((c.repository.as_ref(), l.plan.args.len()), (None, 0));
        // An image that names no container cannot run as one.
        let hub = spec(json!({"huggingface": {}}), json!({}));
        let err = plan(&config(), &box_, "ns", &hub, "r", Kind::Container).unwrap_err();
        assert!(err.0.contains("names no container"), "{err}");
    }

    #[test]
    fn llamacpp_ctx_size_defaults_to_8192_on_cpu() {
        let s = spec(
            json!({"llamacpp": {"url": "x", "modelPath": "m.gguf"}}),
            json!({}),
        );
        let l = local(&s).unwrap();
        let at = l.plan.args.iter().position(|a| a == "--ctx-size").unwrap();
        assert_eq!(l.plan.args[at + 1], "8192");
    }

    #[test]
    fn derived_flags_of_other_engines() {
        let d = derive(&spec(json!({"sGLang": {"url": "x", "tensorParallelSize": 2, "kvCacheDtype": "fp8-e5-m2"}}), json!({})).model.image);
        assert_eq!(d.args, ["--kv-cache-dtype", "fp8-e5-m2", "--tp-size", "2"]);
        let d = derive(
            &spec(
                json!({"tgiNeuron": {"url": "x", "maxInputLength": 10, "hfNumCores": 2}}),
                json!({}),
            )
            .model
            .image,
        );
        assert_eq!(d.args, ["--max-input-tokens", "10"]);
        assert_eq!(d.env, [("HUB_NUM_CORES", "2".to_string())]);
        let d = derive(
            &spec(
                json!({"tei": {"url": "x", "pooling": "mean", "maxBatchTokens": 5}}),
                json!({}),
            )
            .model
            .image,
        );
        assert_eq!(d.args, ["--max-batch-tokens", "5", "--pooling", "mean"]);
        let d = derive(
            &spec(
                json!({"tgi": {"url": "x", "quantize": "awq", "disableCustomKernels": true}}),
                json!({}),
            )
            .model
            .image,
        );
        assert_eq!(d.args, ["--disable-custom-kernels", "--quantize", "awq"]);
    }

    #[test]
    fn custom_runs_its_command_and_engines_need_a_launcher() {
        let s = spec(
            json!({"custom": {"url": "x", "healthRoute": "/ready"}}),
            json!({"command": ["/bin/engine", "--port", "{port}"], "args": ["-v"]}),
        );
        let l = local(&s).unwrap();
        assert_eq!(program(&l), "/bin/engine");
        assert_eq!(l.plan.args, ["--port", "{port}", "-v"]);
        assert_eq!(l.health_route, "/ready");
        let no_cmd = spec(json!({"custom": {"url": "x"}}), json!({}));
        let err = local(&no_cmd).unwrap_err();
        assert!(err.0.contains("model.command"), "{err}");
        let tei = spec(json!({"tei": {"url": "x"}}), json!({}));
        let err = local(&tei).unwrap_err();
        assert!(err.0.contains("runtime.launchers.tei"), "{err}");
    }

    #[test]
    fn a_missing_engine_names_the_command_that_installs_it() {
        let mut tei = spec(json!({"tei": {"url": "x"}}), json!({}));
        tei.model.repository = "sentence-transformers/all-MiniLM-L6-v2".into();
        let err = local(&tei).unwrap_err();
        assert!(err.0.contains("switchyard engines install minilm"), "{err}");
    }

    #[test]
    fn the_model_file_in_its_repository() {
        assert_eq!(in_repository("/repository/m.gguf"), "m.gguf");
        assert_eq!(in_repository("sub/m.gguf"), "sub/m.gguf");
    }
}
