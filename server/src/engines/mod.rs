//! The engines this server can run, and which one starts a given image.
//!
//! An engine image (`tei`, `llamacpp`, `vLLM`, …) runs, in this order:
//! 1. the launcher configured for its key (`[runtime.launchers.KEY]`), whatever the model;
//! 2. a built-in engine installed in the data dir (`switchyard engines install NAME`), for the models
//!    it serves, on a CPU recipe;
//! 3. an engine program found on `PATH` (`text-embeddings-router`, `llama-server`, `vllm`, `sglang`),
//!    with a default launcher.
//!
//! Nothing here starts a process: [`Engines::resolve`] says which launcher a spec gets, or why there is
//! none and which command would give one. Installing is [`install`].

pub mod image;
pub mod install;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::config::{Launcher, RuntimeConfig};
use crate::model::{EndpointSpec, ModelImage, Task};

/// A built-in engine: a small Python server shipped inside the binary, installed with its pinned
/// packages from the package registry into `<data-dir>/engines/<name>`.
#[derive(Debug)]
pub struct Builtin {
    pub name: &'static str,
    /// The image key it serves.
    pub image_key: &'static str,
    /// The models it serves (repo ids, compared without regard to case); it serves only these.
    pub models: &'static [&'static str],
    pub summary: &'static str,
    /// About how much it downloads, for the prompt before an install.
    pub download_mb: u32,
    /// About how much room it takes once installed (its venv and model), measured on Linux x86_64.
    pub disk_mb: u32,
    /// `serve.py` and `requirements.txt`.
    pub files: &'static [(&'static str, &'static str)],
    /// Arguments after the Python interpreter and `serve.py`.
    pub args: &'static [&'static str],
}

/// The engines this binary can install.
pub const BUILTINS: &[Builtin] = &[
    Builtin {
        name: "minilm",
        image_key: "tei",
        models: &["sentence-transformers/all-MiniLM-L6-v2"],
        summary: "CPU sentence embeddings (all-MiniLM-L6-v2, int8 ONNX) behind TEI's API",
        download_mb: 100,
        disk_mb: 250,
        files: &[
            ("serve.py", include_str!("../../../engines/minilm/serve.py")),
            (
                "requirements.txt",
                include_str!("../../../engines/minilm/requirements.txt"),
            ),
        ],
        args: &["--port", "{port}", "--model-id", "{repository}"],
    },
    Builtin {
        name: "smollm",
        image_key: "llamacpp",
        models: &["HuggingFaceTB/SmolLM2-135M-Instruct"],
        summary: "CPU text generation (SmolLM2-135M-Instruct, Q4_1 GGUF) on llama.cpp's server, OpenAI API",
        download_mb: 130,
        disk_mb: 220,
        files: &[
            ("serve.py", include_str!("../../../engines/smollm/serve.py")),
            (
                "requirements.txt",
                include_str!("../../../engines/smollm/requirements.txt"),
            ),
        ],
        args: &[
            "--port",
            "{port}",
            "--model-id",
            "{repository}",
            "--model-file",
            "{model_file}",
        ],
    },
];

/// An engine program that may be on `PATH`, and the launcher it gets when it is.
#[derive(Debug)]
pub struct OnPath {
    pub program: &'static str,
    pub image_key: &'static str,
    /// Arguments after the program.
    pub args: &'static [&'static str],
}

/// The engines found on `PATH`, by their usual program names and flags.
pub const ON_PATH: &[OnPath] = &[
    OnPath {
        program: "text-embeddings-router",
        image_key: "tei",
        args: &[
            "--hostname",
            "127.0.0.1",
            "--port",
            "{port}",
            "--model-id",
            "{repository}",
            "--revision",
            "{revision}",
        ],
    },
    OnPath {
        program: "llama-server",
        image_key: "llamacpp",
        args: &[
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
            "--hf-repo",
            "{repository}",
            "--hf-file",
            "{model_file_name}",
        ],
    },
    OnPath {
        program: "vllm",
        image_key: "vLLM",
        args: &[
            "serve",
            "{repository}",
            "--revision",
            "{revision}",
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
        ],
    },
    OnPath {
        program: "sglang",
        image_key: "sGLang",
        args: &[
            "serve",
            "--model-path",
            "{repository}",
            "--revision",
            "{revision}",
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
        ],
    },
];

/// Every engine answers its health route at `/health`.
const HEALTH_ROUTE: &str = "/health";

/// The record an install leaves in its directory; its presence means the engine is installed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub name: String,
    pub command: Vec<String>,
    pub health_route: String,
    pub installed_at: String,
    pub python: String,
}

/// Where a launcher comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Source {
    /// `[runtime.launchers.KEY]`.
    Config,
    /// A built-in engine installed in the data dir.
    Installed { engine: String },
    /// A program found on `PATH`.
    Path { program: String },
}

/// The launcher a spec gets, and where it comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub launcher: Launcher,
    pub source: Source,
}

/// Why no launcher starts a spec here, and what would give one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// The built-in engine that would serve it once installed.
    pub install: Option<&'static str>,
    pub message: String,
}

/// How far an install running in this process has come.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InstallState {
    /// 0 to 100.
    pub percent: u8,
    pub step: String,
    /// Set when the install failed; the engine is then not installed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub running: bool,
}

impl InstallState {
    fn running(percent: u8, step: &str) -> InstallState {
        InstallState {
            percent,
            step: step.to_string(),
            error: None,
            running: true,
        }
    }

    fn failed(error: String) -> InstallState {
        InstallState {
            percent: 0,
            step: "failed".into(),
            error: Some(error),
            running: false,
        }
    }
}

/// An install under way in this process (see [`Engines::begin_install`]).
pub struct InstallGuard {
    engines: Arc<Engines>,
    name: String,
    ended: bool,
}

impl InstallGuard {
    pub fn engines(&self) -> &Engines {
        &self.engines
    }

    pub fn progress(&self, percent: u8, step: &str) {
        self.engines
            .note_install(&self.name, InstallState::running(percent, step));
    }

    /// Records the install's end: installed, or why not.
    pub fn end(mut self, outcome: Result<(), String>) {
        self.ended = true;
        let state = match outcome {
            Ok(()) => InstallState {
                percent: 100,
                step: "installed".into(),
                error: None,
                running: false,
            },
            Err(e) => InstallState::failed(e),
        };
        self.engines.note_install(&self.name, state);
    }
}

impl Drop for InstallGuard {
    fn drop(&mut self) {
        if !self.ended {
            let interrupted = InstallState::failed("the install was interrupted".into());
            self.engines.note_install(&self.name, interrupted);
        }
    }
}

/// One engine as `switchyard engines list` and `GET /api/v1/engines` show it.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EngineInfo {
    pub name: String,
    pub image_key: String,
    /// `builtin` or `path`.
    pub kind: &'static str,
    /// `installed`, `notInstalled`, `installing`, `found` (on PATH) or `missing` (not on PATH).
    pub state: &'static str,
    /// What it serves: its models (a built-in engine), or every model of its image key.
    pub models: Vec<String>,
    pub summary: String,
    /// The program that runs (installed or found engines).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
    /// The command that installs it (built-in engines).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub install_command: Option<String>,
    /// Whether a configured launcher takes precedence for its image key.
    pub overridden_by_config: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub install: Option<InstallState>,
}

/// The engines of one server: its configured launchers, its installed built-in engines and `PATH`.
#[derive(Debug)]
pub struct Engines {
    dir: PathBuf,
    configured: BTreeMap<String, Launcher>,
    search_path: Option<OsString>,
    installs: Mutex<BTreeMap<String, InstallState>>,
}

/// Where the built-in engines of the server on `data_dir` are installed: `runtime.engines_dir`, else
/// `<data-dir>/engines`; when this runs as root, whose replicas run as another user who cannot enter the
/// data dir, `/var/lib/switchyard/engines/<hash of the data dir>` (one per server, as replica dirs are).
pub fn engines_dir(configured: Option<&Path>, data_dir: &Path) -> PathBuf {
    use sha2::Digest;
    use std::os::unix::ffi::OsStrExt;
    if let Some(dir) = configured {
        return dir.to_path_buf();
    }
    if !install::as_root() {
        return data_dir.join("engines");
    }
    let data = data_dir
        .canonicalize()
        .unwrap_or_else(|_| data_dir.to_path_buf());
    let digest = sha2::Sha256::digest(data.as_os_str().as_bytes());
    PathBuf::from(ROOT_ENGINES).join(crate::crypto::hex(&digest[..6]))
}

/// The base of root servers' engines directories.
const ROOT_ENGINES: &str = "/var/lib/switchyard/engines";

/// The built-in engines installed and the engine programs found, as [`Engines::read`] saw them.
#[derive(Debug, Clone)]
pub struct OnDisk {
    manifests: Vec<(&'static str, Option<Manifest>)>,
    programs: Vec<(&'static str, Option<PathBuf>)>,
}

/// Where [`Engines::resolve_in`] finds installed engines and programs: what was read once ([`OnDisk`]),
/// or the disk itself, asked only what one resolution needs (see [`Engines::resolve`]).
pub trait Lookup {
    fn manifest(&self, name: &str) -> Option<Manifest>;
    fn program(&self, program: &str) -> Option<PathBuf>;
}

impl Lookup for OnDisk {
    fn manifest(&self, name: &str) -> Option<Manifest> {
        self.manifests
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, m)| m.clone())
    }

    fn program(&self, program: &str) -> Option<PathBuf> {
        self.programs
            .iter()
            .find(|(p, _)| *p == program)
            .and_then(|(_, found)| found.clone())
    }
}

impl Lookup for Engines {
    fn manifest(&self, name: &str) -> Option<Manifest> {
        self.read_manifest(name)
    }

    fn program(&self, program: &str) -> Option<PathBuf> {
        self.find_program(program)
    }
}

/// The command that installs a built-in engine.
pub fn install_command(name: &str) -> String {
    format!("switchyard engines install {name}")
}

/// The built-in engine named `name`.
pub fn builtin(name: &str) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|b| b.name == name)
}

impl Builtin {
    /// Whether it serves `repository` on `accelerator`: its own models, on a CPU.
    pub fn serves(&self, repository: &str, accelerator: &str) -> bool {
        accelerator.eq_ignore_ascii_case("cpu")
            && self
                .models
                .iter()
                .any(|m| m.eq_ignore_ascii_case(repository))
    }
}

impl Engines {
    /// The engines of a server whose engines directory is `dir` (`<data-dir>/engines`).
    pub fn new(dir: PathBuf, configured: BTreeMap<String, Launcher>) -> Engines {
        Engines {
            dir,
            configured,
            search_path: std::env::var_os("PATH"),
            installs: Mutex::new(BTreeMap::new()),
        }
    }

    /// The engines of the server on `data_dir` configured by `runtime` (see [`engines_dir`]).
    pub fn for_config(runtime: &RuntimeConfig, data_dir: &Path) -> Engines {
        let dir = engines_dir(runtime.engines_dir.as_deref(), data_dir);
        Engines::new(dir, runtime.launchers.clone())
    }

    /// Looks for engine programs in `path` instead of the process's `PATH`.
    pub fn with_search_path(mut self, path: Option<OsString>) -> Engines {
        self.search_path = path;
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What the engines dir and the search path hold now: read once, for answering many questions.
    pub fn read(&self) -> OnDisk {
        OnDisk {
            manifests: BUILTINS
                .iter()
                .map(|b| (b.name, self.read_manifest(b.name)))
                .collect(),
            programs: ON_PATH
                .iter()
                .map(|p| (p.program, self.find_program(p.program)))
                .collect(),
        }
    }

    /// The launcher of an image keyed `image_key` serving `repository` on `accelerator`. The disk is asked
    /// only what this needs: nothing when the config sets the launcher.
    pub fn resolve(
        &self,
        image_key: &str,
        repository: &str,
        accelerator: &str,
    ) -> Result<Resolved, Missing> {
        self.resolve_in(self, image_key, repository, accelerator)
    }

    /// The launcher of `spec`'s image, model and accelerator (see [`Self::resolve`]; a `hub` image, see
    /// [`Self::resolve_hub`]).
    pub fn resolve_spec(&self, spec: &EndpointSpec) -> Result<Resolved, Missing> {
        let (model, accelerator) = (&spec.model, spec.compute.accelerator.as_str());
        match model.image {
            ModelImage::Hub(_) => {
                self.resolve_hub(self, &model.repository, model.task, accelerator)
            }
            _ => self.resolve(model.image.key(), &model.repository, accelerator),
        }
    }

    /// The launcher of a `hub` image (the managed image, which names no engine): the engine this server
    /// has for the model, asked as for an image of that engine's key: first the key of a built-in engine
    /// that serves this repository, then the keys of the engines for the model's task ([`task_keys`]);
    /// only then `[runtime.launchers.hub]`.
    pub fn resolve_hub(
        &self,
        disk: &impl Lookup,
        repository: &str,
        task: Option<Task>,
        accelerator: &str,
    ) -> Result<Resolved, Missing> {
        let builtin = BUILTINS.iter().find(|b| b.serves(repository, accelerator));
        let mut keys: Vec<&str> = builtin.map(|b| b.image_key).into_iter().collect();
        for key in task_keys(task) {
            if !keys.contains(key) {
                keys.push(key);
            }
        }
        let mut first_missing = None;
        for key in keys {
            match self.resolve_in(disk, key, repository, accelerator) {
                Ok(resolved) => return Ok(resolved),
                Err(m) => {
                    first_missing.get_or_insert(m);
                }
            }
        }
        if let Some(l) = self.configured_launcher("hub") {
            return Ok(Resolved {
                launcher: l.clone(),
                source: Source::Config,
            });
        }
        Err(match first_missing {
            Some(m) => Missing {
                install: m.install,
                message: match m.install {
                    Some(_) => m.message,
                    None => format!(
                        "{} (a hub image runs on the engine for its model: its task's; or set runtime.launchers.hub)",
                        m.message
                    ),
                },
            },
            None => Missing {
                install: None,
                message: format!(
                    "no engine for \"hub\" images of {repository} on this server: give the endpoint a task \
                     with an engine (feature-extraction or sentence-similarity: tei; text-generation: vLLM, tgi \
                     or sGLang), an engine image, or set runtime.launchers.hub"
                ),
            },
        })
    }

    /// [`Self::resolve`] with what `disk` holds.
    pub fn resolve_in(
        &self,
        disk: &impl Lookup,
        image_key: &str,
        repository: &str,
        accelerator: &str,
    ) -> Result<Resolved, Missing> {
        if let Some(l) = self.configured_launcher(image_key) {
            return Ok(Resolved {
                launcher: l.clone(),
                source: Source::Config,
            });
        }
        let fitting = BUILTINS
            .iter()
            .find(|b| b.image_key == image_key && b.serves(repository, accelerator));
        if let Some(m) = fitting.and_then(|b| disk.manifest(b.name)) {
            return Ok(Resolved {
                launcher: Launcher {
                    command: m.command,
                    health_route: Some(m.health_route),
                    ..Default::default()
                },
                source: Source::Installed { engine: m.name },
            });
        }
        if let Some((p, path)) =
            on_path_for(image_key).find_map(|p| disk.program(p.program).map(|path| (p, path)))
        {
            let mut command = vec![path.display().to_string()];
            command.extend(p.args.iter().map(|a| a.to_string()));
            return Ok(Resolved {
                launcher: Launcher {
                    command,
                    health_route: Some(HEALTH_ROUTE.into()),
                    ..Default::default()
                },
                source: Source::Path {
                    program: p.program.into(),
                },
            });
        }
        Err(missing(image_key, fitting))
    }

    /// The manifest of an installed built-in engine (none without an absolute engines dir: engines that
    /// only know the configured launchers).
    fn read_manifest(&self, name: &str) -> Option<Manifest> {
        if !self.dir.is_absolute() {
            return None;
        }
        let text = std::fs::read_to_string(self.dir.join(name).join(install::MANIFEST)).ok()?;
        serde_json::from_str::<Manifest>(&text)
            .ok()
            .filter(|m| m.name == name && !m.command.is_empty())
    }

    /// `program` in the search path: an executable file.
    fn find_program(&self, program: &str) -> Option<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        let path = self.search_path.as_ref()?;
        std::env::split_paths(path)
            .filter(|d| d.is_absolute())
            .map(|d| d.join(program))
            .find(|p| {
                std::fs::metadata(p)
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
    }

    /// The image of the built-in engine that serves `spec` (its own model, on a CPU), when one was built and
    /// registered here (`switchyard engines image`).
    pub fn image_for(&self, spec: &EndpointSpec) -> Option<image::EngineImage> {
        if !self.dir.is_absolute() {
            return None;
        }
        let key = spec.model.image.key();
        let accelerator = spec.compute.accelerator.as_str();
        let engine = BUILTINS
            .iter()
            .find(|b| b.image_key == key && b.serves(&spec.model.repository, accelerator))?;
        image::registered(&self.dir, engine.name)
    }

    /// Every engine this server knows of, built-in ones first.
    pub fn list(&self) -> Vec<EngineInfo> {
        self.list_in(&self.read())
    }

    /// [`Self::list`] with what `disk` read.
    pub fn list_in(&self, disk: &OnDisk) -> Vec<EngineInfo> {
        let installs = self.installs.lock().map(|i| i.clone()).unwrap_or_default();
        let builtins = BUILTINS.iter().map(|b| {
            let manifest = disk.manifest(b.name);
            let install = installs.get(b.name).cloned();
            let state = match (&install, &manifest) {
                (Some(i), _) if i.running => "installing",
                (_, Some(_)) => "installed",
                _ => "notInstalled",
            };
            EngineInfo {
                name: b.name.into(),
                image_key: b.image_key.into(),
                kind: "builtin",
                state,
                models: b.models.iter().map(|m| m.to_string()).collect(),
                summary: b.summary.into(),
                program: manifest.and_then(|m| m.command.into_iter().next()),
                install_command: Some(install_command(b.name)),
                overridden_by_config: self.configured(b.image_key),
                install,
            }
        });
        let on_path = ON_PATH.iter().map(|p| {
            let found = disk.program(p.program);
            EngineInfo {
                name: p.program.into(),
                image_key: p.image_key.into(),
                kind: "path",
                state: if found.is_some() { "found" } else { "missing" },
                models: Vec::new(),
                summary: format!("{} images, any model, when on PATH", p.image_key),
                program: found.map(|f| f.display().to_string()),
                install_command: None,
                overridden_by_config: self.configured(p.image_key),
                install: None,
            }
        });
        builtins.chain(on_path).collect()
    }

    /// Whether `[runtime.launchers.KEY]` sets the launcher of images keyed `image_key`.
    pub fn configured(&self, image_key: &str) -> bool {
        self.configured_launcher(image_key).is_some()
    }

    /// The launcher `[runtime.launchers.KEY]` sets, if it sets one with a command.
    /// The launcher configured for `image_key` that names an image (`[runtime.launchers.KEY] image`): what
    /// containers of that key run.
    pub fn configured_image(&self, image_key: &str) -> Option<&Launcher> {
        self.configured
            .get(image_key)
            .filter(|l| l.image.as_deref().is_some_and(|i| !i.trim().is_empty()))
    }

    fn configured_launcher(&self, image_key: &str) -> Option<&Launcher> {
        self.configured
            .get(image_key)
            .filter(|l| !l.command.is_empty())
    }

    /// Records how an install of `name` in this process is going.
    fn note_install(&self, name: &str, state: InstallState) {
        if let Ok(mut i) = self.installs.lock() {
            i.insert(name.to_string(), state);
        }
    }

    /// Marks an install of `name` in this process as started, unless one already runs. The guard records
    /// its progress and its end; dropped without an end (a panic), the install is recorded as interrupted.
    pub fn begin_install(self: &Arc<Self>, name: &str) -> Option<InstallGuard> {
        let mut installs = self.installs.lock().ok()?;
        if installs.get(name).is_some_and(|s| s.running) {
            return None;
        }
        installs.insert(name.to_string(), InstallState::running(0, "starting"));
        Some(InstallGuard {
            engines: self.clone(),
            name: name.to_string(),
            ended: false,
        })
    }

    /// How far an install of `name` running in this process has come; none when none runs.
    pub fn install_running(&self, name: &str) -> Option<InstallState> {
        let installs = self.installs.lock().ok()?;
        installs.get(name).filter(|s| s.running).cloned()
    }

    /// Why `spec` waits to start: the engine it needs is being installed in this process now. The disk is
    /// asked only while some install runs (the reconciler asks this of every endpoint that has no replica).
    pub fn waiting_for(&self, spec: &EndpointSpec) -> Option<String> {
        let any = self.installs.lock().ok()?.values().any(|s| s.running);
        if !any {
            return None;
        }
        let name = self.resolve_spec(spec).err()?.install?;
        let state = self.install_running(name)?;
        Some(format!(
            "waiting for the {name} engine (installing, {}%)",
            state.percent
        ))
    }

    /// Whether an install of `name` runs in this process now.
    pub fn installing(&self, name: &str) -> bool {
        self.install_running(name).is_some()
    }
}

/// Whether an endpoint's status message says it failed for want of an engine (see [`Missing`]).
pub fn is_missing(message: &str) -> bool {
    message.starts_with("no engine for ")
        || (message.starts_with("the ")
            && message.contains(" engine is not installed on this server"))
}

/// The image keys whose engines serve a `hub` image of a model with `task`, in the order they are tried.
fn task_keys(task: Option<Task>) -> &'static [&'static str] {
    match task {
        Some(Task::FeatureExtraction | Task::SentenceSimilarity) => &["tei"],
        Some(Task::TextGeneration) => &["vLLM", "tgi", "sGLang"],
        _ => &[],
    }
}

/// The engine programs that serve images keyed `image_key`.
fn on_path_for(image_key: &str) -> impl Iterator<Item = &'static OnPath> + '_ {
    ON_PATH.iter().filter(move |p| p.image_key == image_key)
}

/// Why `image_key` has no launcher, saying which command or setting would give one.
fn missing(image_key: &str, fitting: Option<&'static Builtin>) -> Missing {
    let programs: Vec<&str> = on_path_for(image_key).map(|p| p.program).collect();
    let setting = format!("runtime.launchers.{image_key}");
    let message = match (fitting, programs.first()) {
        (Some(b), _) => format!(
            "the {} engine is not installed on this server: run `{}` (or set {setting})",
            b.name,
            install_command(b.name)
        ),
        (None, Some(program)) => {
            let builtin = BUILTINS.iter().find(|b| b.image_key == image_key);
            let only = builtin.map_or(String::new(), |b| {
                format!(
                    "; the built-in {} engine serves only {} on a CPU",
                    b.name,
                    b.models.join(", ")
                )
            });
            format!("no engine for {image_key:?} images on this server: put {program} on the server's PATH or set {setting}{only}")
        }
        (None, None) => {
            format!("no engine for {image_key:?} images on this server: set {setting}")
        }
    };
    Missing {
        install: fitting.map(|b| b.name),
        message,
    }
}

#[cfg(test)]
mod tests;
