//! Builds a built-in engine's image (`switchyard engines image NAME`; see [`crate::engines::image`]).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use bollard::query_parameters::CreateImageOptions;
use futures_util::StreamExt;

use super::engine::{describe, Engine};
use crate::engines::image::{registration, EngineImage, PORT};
use crate::engines::{builtin, install};

/// Builds the image of the built-in engine `name` on the Docker Engine at `host` (else `DOCKER_HOST`, else
/// the local socket) and registers it in `engines_dir`; `progress(step)` is told each step.
pub async fn build(
    engines_dir: &Path,
    name: &str,
    host: Option<&str>,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<EngineImage, String> {
    if builtin(name).is_none() {
        return Err(format!(
            "no built-in engine named {name:?} (minilm, smollm)"
        ));
    }
    let docker = Engine::new(host);
    let connected = docker.connect().await?;
    let work = Scratch::new()?;
    let rootfs = work.0.join("rootfs");
    let (suite, mirror) = debian_source()?;
    progress(&format!(
        "debootstrap {suite} from {mirror} (minbase, python3)"
    ));
    debootstrap(&rootfs, &suite, &mirror)?;
    // The engine, installed as `engines install` does, into the root filesystem.
    let inside = Path::new("/opt/switchyard/engines");
    let target = rootfs.join(inside.strip_prefix("/").unwrap_or(inside));
    let python = PathBuf::from("/usr/bin/python3");
    let (dir, name_owned) = (target.clone(), name.to_string());
    let manifest = tokio::task::spawn_blocking(move || {
        install::install_with(&dir, &name_owned, Some(python), &mut |_, _| {})
    })
    .await
    .map_err(|e| format!("the install: {e}"))?
    .map_err(|e| e.to_string())?;
    progress(&format!("installed {name} into the image"));
    let mut command: Vec<String> = manifest
        .command
        .iter()
        .map(|a| match Path::new(a).strip_prefix(&rootfs) {
            Ok(rest) => Path::new("/").join(rest).display().to_string(),
            Err(_) => a.clone(),
        })
        .collect();
    // After the interpreter and serve.py: listen on every address, not only the container's loopback.
    let at = command.len().min(2);
    command.splice(at..at, ["--host".to_string(), "0.0.0.0".to_string()]);
    let tag = env!("CARGO_PKG_VERSION");
    let repo = format!("switchyard/engine-{name}");
    progress(&format!(
        "importing {repo}:{tag} into the Docker Engine at {}",
        docker.host
    ));
    // For `docker run` by hand: the engine on port 80, serving its own model.
    let entrypoint: Vec<String> = command.iter().take(4).cloned().collect();
    let model = builtin(name)
        .and_then(|b| b.models.first())
        .copied()
        .unwrap_or_default();
    let cmd = [
        "--port".to_string(),
        PORT.to_string(),
        "--model-id".into(),
        model.to_string(),
    ];
    import(&connected.docker, &rootfs, &repo, tag, &entrypoint, &cmd).await?;
    let image = EngineImage {
        name: name.to_string(),
        image: format!("{repo}:{tag}"),
        command,
        health_route: manifest.health_route,
        built_at: manifest.installed_at,
    };
    let text = serde_json::to_string_pretty(&image).map_err(|e| e.to_string())?;
    let file = registration(engines_dir, name);
    std::fs::create_dir_all(engines_dir).map_err(|e| format!("{}: {e}", engines_dir.display()))?;
    std::fs::write(&file, text).map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(image)
}

/// A scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Scratch, String> {
        let dir = std::env::temp_dir().join(format!(
            "switchyard-engine-image-{}",
            crate::crypto::random_id()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// This machine's Debian release and package mirror (from its apt sources), for debootstrap.
fn debian_source() -> Result<(String, String), String> {
    let release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    let suite = release
        .lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|s| s.trim_matches('"').to_string())
        .filter(|s| !s.is_empty())
        .ok_or("this is not a Debian machine (no VERSION_CODENAME in /etc/os-release): the image is built from this machine's Debian release")?;
    let mut sources = Vec::new();
    if let Ok(text) = std::fs::read_to_string("/etc/apt/sources.list") {
        sources.push(text);
    }
    if let Ok(dir) = std::fs::read_dir("/etc/apt/sources.list.d") {
        // What apt reads: `*.list` and `*.sources`.
        let mut files: Vec<PathBuf> = dir
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "list" || x == "sources"))
            .collect();
        files.sort();
        for f in files {
            if let Ok(mut file) = std::fs::File::open(&f) {
                let mut text = String::new();
                if file.read_to_string(&mut text).is_ok() {
                    sources.push(text);
                }
            }
        }
    }
    let mirror = sources
        .iter()
        .find_map(|text| mirror_in(text, &suite))
        .unwrap_or_else(|| "http://deb.debian.org/debian".to_string());
    Ok((suite, mirror))
}

/// The mirror an apt sources file (one-line or deb822) names for `suite`'s `main` component.
fn mirror_in(text: &str, suite: &str) -> Option<String> {
    for line in text.lines().map(str::trim).filter(|l| !l.starts_with('#')) {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() != Some(&"deb") {
            continue;
        }
        // `deb [options] URL suite components…`
        let rest: Vec<&str> = if words.get(1).is_some_and(|w| w.starts_with('[')) {
            let close = words.iter().position(|w| w.ends_with(']'))?;
            words[close + 1..].to_vec()
        } else {
            words[1..].to_vec()
        };
        if rest.len() >= 3 && rest[1] == suite && rest[2..].contains(&"main") {
            return Some(rest[0].to_string());
        }
    }
    for stanza in text.split("\n\n") {
        let field = |name: &str| {
            stanza.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim().eq_ignore_ascii_case(name)).then(|| v.trim().to_string())
            })
        };
        let (Some(uris), Some(suites)) = (field("URIs"), field("Suites")) else {
            continue;
        };
        let main = field("Components").is_some_and(|c| c.split_whitespace().any(|c| c == "main"));
        if main && suites.split_whitespace().any(|s| s == suite) {
            return uris.split_whitespace().next().map(str::to_string);
        }
    }
    None
}

fn debootstrap(rootfs: &Path, suite: &str, mirror: &str) -> Result<(), String> {
    let out = Command::new("debootstrap")
        .args(["--variant=minbase", "--include=python3,ca-certificates"])
        .arg(suite)
        .arg(rootfs)
        .arg(mirror)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            format!("running debootstrap ({e}): install it (apt-get install debootstrap); it runs as root")
        })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(5).collect();
        return Err(format!(
            "debootstrap failed ({}): {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        ));
    }
    Ok(())
}

/// Imports `rootfs` as the image `repo:tag` (`tar` streams it to the engine).
async fn import(
    docker: &bollard::Docker,
    rootfs: &Path,
    repo: &str,
    tag: &str,
    entrypoint: &[String],
    cmd: &[String],
) -> Result<(), String> {
    let json = |v: &[String]| serde_json::to_string(v).unwrap_or_default();
    let mut tar = tokio::process::Command::new("tar")
        .arg("-C")
        .arg(rootfs)
        .args(["--numeric-owner", "-cf", "-", "."])
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| format!("running tar: {e}"))?;
    let stdout = tar.stdout.take().ok_or("tar has no output")?;
    let chunks = futures_util::stream::unfold(stdout, |mut out| async move {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; 1 << 20];
        match out.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok::<_, std::io::Error>(bytes::Bytes::from(buf)), out))
            }
            Err(e) => Some((Err(e), out)),
        }
    });
    let options = CreateImageOptions {
        from_src: Some("-".into()),
        repo: Some(repo.into()),
        tag: Some(tag.into()),
        changes: vec![
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
            "ENV HF_HUB_OFFLINE=1".into(),
            "ENV TRANSFORMERS_OFFLINE=1".into(),
            format!("EXPOSE {PORT}"),
            format!("ENTRYPOINT {}", json(entrypoint)),
            format!("CMD {}", json(cmd)),
        ],
        ..Default::default()
    };
    let mut stream =
        docker.create_image(Some(options), Some(bollard::body_try_stream(chunks)), None);
    while let Some(step) = stream.next().await {
        step.map_err(|e| format!("importing the image: {}", describe(&e)))?;
    }
    let status = tar.wait().await.map_err(|e| format!("tar: {e}"))?;
    if !status.success() {
        return Err(format!("tar of the root filesystem failed ({status})"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::mirror_in;

    #[test]
    fn the_mirror_is_the_one_for_this_release() {
        let deb822 = "Types: deb\nURIs: https://deb.nodesource.com/node_20.x\nSuites: nodistro\nComponents: main\n\n\
                      Types: deb\nURIs: http://mirror.local/debian\nSuites: bookworm bookworm-updates\nComponents: main\n";
        assert_eq!(
            mirror_in(deb822, "bookworm").as_deref(),
            Some("http://mirror.local/debian")
        );
        let list = "deb https://deb.nodesource.com/node_20.x nodistro main\n\
                    deb [signed-by=/k.gpg] http://deb.debian.org/debian bookworm main contrib\n";
        assert_eq!(
            mirror_in(list, "bookworm").as_deref(),
            Some("http://deb.debian.org/debian")
        );
        assert_eq!(mirror_in(list, "trixie"), None);
    }
}
