//! A built-in engine as a container image (`switchyard engines image NAME`, built by
//! `runtime::docker::build`), for the Docker provider on a machine with no registry to pull from.
//!
//! A root filesystem from Debian's `debootstrap` (this machine's release, its own package mirror: `minbase`
//! plus `python3`), the engine installed into it as `switchyard engines install` does (its venv made with
//! this machine's Debian `python3`, the same release's, so it runs as it is inside), imported into the
//! engine's store (`docker import`, no registry involved) with the engine's command as its entrypoint. The
//! image is then registered in the engines dir (`<name>.image.json`), and the catalog's CPU recipes of the
//! engine's models run it under the Docker provider instead of the image their spec names.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The port the engine listens on inside its image.
pub const PORT: u16 = 80;

/// A built engine image, as registered in the engines dir.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineImage {
    pub name: String,
    /// The image reference in the engine's store (`switchyard/engine-minilm:<version>`).
    pub image: String,
    /// The engine's command inside the image, placeholders (`{port}`, `{repository}`, …) as a launcher has
    /// them.
    pub command: Vec<String>,
    pub health_route: String,
    pub built_at: String,
}

/// The registration file of the engine `name`'s image in `engines_dir`.
pub fn registration(engines_dir: &Path, name: &str) -> PathBuf {
    engines_dir.join(format!("{name}.image.json"))
}

/// The registered image of the engine `name`, when one was built.
pub fn registered(engines_dir: &Path, name: &str) -> Option<EngineImage> {
    let text = std::fs::read_to_string(registration(engines_dir, name)).ok()?;
    serde_json::from_str::<EngineImage>(&text)
        .ok()
        .filter(|i| i.name == name && !i.command.is_empty())
}
