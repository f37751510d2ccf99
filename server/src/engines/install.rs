//! Installing a built-in engine: its files from the binary, a Python venv, its pinned packages from the
//! package registry (wheels only), an offline check that the model loads, then the manifest. The engine
//! is built in `<engines>/.<name>.partial` and renamed into place once it passed its check, so a failed
//! or interrupted install leaves the previous state (installed or not) as it was. One install or removal
//! of an engine runs at a time (an advisory lock on `<engines>/.<name>.lock`).
//!
//! Blocking: call it from a thread of its own (`spawn_blocking`).

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{builtin, Builtin, Manifest, BUILTINS, HEALTH_ROUTE};

/// The file whose presence says an engine is installed.
pub const MANIFEST: &str = "engine.json";

/// Why an install or a removal did not happen.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("no built-in engine is named {0:?} (built-in engines: {names})", names = names())]
    Unknown(String),
    #[error("{0}")]
    Python(String),
    #[error("the package registry could not be reached (pip: {0})")]
    Registry(String),
    #[error("{0}")]
    Failed(String),
    #[error("another install or removal of {0} is running")]
    Busy(String),
    #[error("{0} is not installed")]
    NotInstalled(String),
}

fn names() -> String {
    BUILTINS
        .iter()
        .map(|b| b.name)
        .collect::<Vec<_>>()
        .join(", ")
}

fn io<'a>(what: &'a str, path: &'a Path) -> impl Fn(std::io::Error) -> InstallError + 'a {
    move |e| InstallError::Failed(format!("{what} {}: {e}", path.display()))
}

/// Installs the built-in engine `name` under `dir`, calling `progress(percent, step)` as it goes.
pub fn install(
    dir: &Path,
    name: &str,
    progress: &mut dyn FnMut(u8, &str),
) -> Result<Manifest, InstallError> {
    install_with(dir, name, None, progress)
}

/// [`install`], with the venv made by `python` (else the one [`choose_python`] finds).
pub fn install_with(
    dir: &Path,
    name: &str,
    python: Option<PathBuf>,
    progress: &mut dyn FnMut(u8, &str),
) -> Result<Manifest, InstallError> {
    let engine = builtin(name).ok_or_else(|| InstallError::Unknown(name.to_string()))?;
    std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
    open_to_others(dir)?;
    reachable(dir)?;
    let _lock = lock(dir, name)?;
    let staging = dir.join(format!(".{name}.partial"));
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(io("removing", &staging))?;
    }
    std::fs::create_dir_all(&staging).map_err(io("creating", &staging))?;
    let built = build(engine, &staging, python, progress)
        .and_then(|python| place(dir, engine, &staging, &python));
    match &built {
        Ok(_) => progress(100, "installed"),
        // A failed install leaves nothing behind (the venv is hundreds of MB).
        Err(_) => {
            let _ = std::fs::remove_dir_all(&staging);
        }
    }
    built
}

/// Builds the engine in `staging`: its files, a venv with its packages, the offline check. The Python
/// the venv was made with.
fn build(
    engine: &Builtin,
    staging: &Path,
    python: Option<PathBuf>,
    progress: &mut dyn FnMut(u8, &str),
) -> Result<PathBuf, InstallError> {
    progress(1, "writing the engine's files");
    for (file, text) in engine.files {
        let path = staging.join(file);
        std::fs::write(&path, text).map_err(io("writing", &path))?;
    }
    let python = match python {
        Some(p) => p,
        None => choose_python()?,
    };
    progress(
        3,
        &format!("creating a Python venv with {}", python.display()),
    );
    let venv = staging.join(".venv");
    run_quiet(
        plain_command(&python).arg("-m").arg("venv").arg(&venv),
        "creating the venv",
    )?;
    pip_install(staging, engine, progress)?;
    progress(90, "checking that the model loads (offline)");
    run_quiet(
        plain_command(&venv.join("bin").join("python"))
            .arg(staging.join("serve.py"))
            .arg("--check")
            .env("HF_HUB_OFFLINE", "1"),
        "the engine's check",
    )?;
    Ok(python)
}

/// Removes the installed engine `name` from `dir`.
pub fn remove(dir: &Path, name: &str) -> Result<(), InstallError> {
    builtin(name).ok_or_else(|| InstallError::Unknown(name.to_string()))?;
    let target = dir.join(name);
    if !target.join(MANIFEST).exists() {
        return Err(InstallError::NotInstalled(name.to_string()));
    }
    let _lock = lock(dir, name)?;
    // Looked at again under the lock: another removal may have come first.
    if !target.join(MANIFEST).exists() {
        return Err(InstallError::NotInstalled(name.to_string()));
    }
    let gone = dir.join(format!(".{name}.removing"));
    if gone.exists() {
        std::fs::remove_dir_all(&gone).map_err(io("removing", &gone))?;
    }
    // The manifest goes first: from then on the engine is not installed, whatever remains.
    std::fs::remove_file(target.join(MANIFEST)).map_err(io("removing", &target))?;
    std::fs::rename(&target, &gone).map_err(io("moving", &target))?;
    std::fs::remove_dir_all(&gone).map_err(io("removing", &gone))?;
    // Nothing of it stays behind: its lock (an install that waited on it gets a fresh one), and the
    // engines dir itself once it holds nothing else.
    let _ = std::fs::remove_file(dir.join(format!(".{name}.lock")));
    let _ = std::fs::remove_dir(dir);
    Ok(())
}

/// Moves a checked engine into place, with its manifest, and opens it to the replicas' user.
fn place(
    dir: &Path,
    engine: &Builtin,
    staging: &Path,
    python: &Path,
) -> Result<Manifest, InstallError> {
    let target = dir.join(engine.name);
    let mut command = vec![
        target.join(".venv/bin/python").display().to_string(),
        target.join("serve.py").display().to_string(),
    ];
    command.extend(engine.args.iter().map(|a| a.to_string()));
    let manifest = Manifest {
        name: engine.name.to_string(),
        command,
        health_route: HEALTH_ROUTE.to_string(),
        installed_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        python: python.display().to_string(),
    };
    let text = serde_json::to_string_pretty(&manifest)
        .map_err(|e| InstallError::Failed(format!("writing the manifest: {e}")))?;
    let path = staging.join(MANIFEST);
    std::fs::write(&path, text).map_err(io("writing", &path))?;
    open_tree(staging)?;
    if target.exists() {
        let old = dir.join(format!(".{}.old", engine.name));
        let _ = std::fs::remove_dir_all(&old);
        std::fs::rename(&target, &old).map_err(io("moving", &target))?;
        let _ = std::fs::remove_dir_all(&old);
    }
    std::fs::rename(staging, &target).map_err(io("moving", staging))?;
    Ok(manifest)
}

/// `pip install` of the engine's pinned requirements, its progress counted in packages collected.
fn pip_install(
    staging: &Path,
    engine: &Builtin,
    progress: &mut dyn FnMut(u8, &str),
) -> Result<(), InstallError> {
    let requirements = staging.join("requirements.txt");
    let total = engine
        .files
        .iter()
        .find(|(f, _)| *f == "requirements.txt")
        .map_or(1, |(_, text)| count_requirements(text))
        .max(1);
    progress(
        5,
        &format!(
            "installing {total} packages from the package registry (about {} MB; {} MB on disk)",
            engine.download_mb, engine.disk_mb
        ),
    );
    let mut child = plain_command(&staging.join(".venv/bin/python"))
        .args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
        ])
        .args([
            "--only-binary=:all:",
            "--no-deps",
            "--timeout",
            "30",
            "--retries",
            "2",
        ])
        .arg("-r")
        .arg(&requirements)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| InstallError::Failed(format!("starting pip: {e}")))?;
    let errors = drain(child.stderr.take());
    let mut collected = 0usize;
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Some((percent, step)) = pip_step(&line, &mut collected, total) {
                progress(percent, &step);
            }
        }
    }
    let status = child
        .wait()
        .map_err(|e| InstallError::Failed(format!("waiting for pip: {e}")))?;
    let errors = errors.join().unwrap_or_default();
    if status.success() {
        return Ok(());
    }
    Err(pip_error(&errors))
}

/// What one line of pip's output says about its progress.
fn pip_step(line: &str, collected: &mut usize, total: usize) -> Option<(u8, String)> {
    let line = line.trim();
    if let Some(what) = line.strip_prefix("Collecting ") {
        *collected += 1;
        let done = (*collected).min(total);
        let percent = 5 + 75 * done / total;
        let package = what.split_whitespace().next().unwrap_or(what);
        return Some((
            percent as u8,
            format!("downloading {package} ({done}/{total})"),
        ));
    }
    if line.starts_with("Installing collected packages") {
        return Some((82, "installing the packages".to_string()));
    }
    None
}

/// Pip's failure: the registry out of reach, or something else, with pip's last words.
fn pip_error(stderr: &str) -> InstallError {
    let tail = last_lines(stderr, 3);
    // What pip says when it cannot connect. "No matching distribution" alone is not one of them: it is
    // also what a version without a wheel for this Python or platform gets.
    const UNREACHABLE: [&str; 7] = [
        "NewConnectionError",
        "Failed to establish a new connection",
        "Temporary failure in name resolution",
        "Max retries exceeded",
        "ProxyError",
        "ConnectTimeoutError",
        "Network is unreachable",
    ];
    if UNREACHABLE.iter().any(|m| stderr.contains(m)) {
        InstallError::Registry(tail)
    } else {
        InstallError::Failed(format!("pip failed: {tail}"))
    }
}

/// The requirement lines of a requirements file (not comments or blank lines).
fn count_requirements(text: &str) -> usize {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .count()
}

/// Reads a child's stream to its end on a thread of its own.
fn drain<R: Read + Send + 'static>(stream: Option<R>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut s) = stream {
            let _ = s.read_to_string(&mut text);
        }
        text
    })
}

/// Whether an install's programs get the variable `name` of this process: what finding programs, the
/// locale and reaching the registry take (proxies, certificates, pip's own settings), never the server's
/// settings or secrets (`SWITCHYARD_*`).
fn passed_on(name: &str) -> bool {
    const NAMES: [&str; 8] = [
        "PATH",
        "HOME",
        "LANG",
        "LC_ALL",
        "TMPDIR",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
    ];
    NAMES.contains(&name)
        || name.starts_with("PIP_")
        || name.to_ascii_lowercase().ends_with("_proxy")
}

/// `program` with only the environment [`passed_on`] lets through.
fn plain_command(program: &Path) -> Command {
    let mut command = Command::new(program);
    command.env_clear();
    command.envs(std::env::vars_os().filter(|(k, _)| k.to_str().is_some_and(passed_on)));
    command
}

/// Runs a command to its end; its output only when it fails.
fn run_quiet(command: &mut Command, what: &str) -> Result<(), InstallError> {
    let out = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| InstallError::Failed(format!("{what}: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    Err(InstallError::Failed(format!(
        "{what} failed ({}): {}",
        out.status,
        last_lines(&String::from_utf8_lossy(&out.stderr), 5)
    )))
}

/// The last `n` lines of a program's output that say something, on one line.
fn last_lines(text: &str, n: usize) -> String {
    let said: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    said[said.len().saturating_sub(n)..].join(" | ")
}

/// The Python that makes engine venvs: `SWITCHYARD_PYTHON`, else the first `python3` on `PATH` (then
/// `/usr/bin/python3`) that is 3.10 or newer and, when the server runs as root, that the replicas' user
/// can run (its file and every directory above it open to others: not under `/root`).
pub fn choose_python() -> Result<PathBuf, InstallError> {
    if let Some(p) = std::env::var_os("SWITCHYARD_PYTHON") {
        let p = PathBuf::from(p);
        return suitable(&p).map(|_| p.clone()).map_err(|why| {
            InstallError::Python(format!("SWITCHYARD_PYTHON={}: {why}", p.display()))
        });
    }
    let mut candidates: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("python3"))
                .collect()
        })
        .unwrap_or_default();
    candidates.push(PathBuf::from("/usr/bin/python3"));
    let mut refused = Vec::new();
    for c in candidates.iter().filter(|c| c.is_absolute() && c.exists()) {
        match suitable(c) {
            Ok(()) => return Ok(c.clone()),
            Err(why) => refused.push(format!("{}: {why}", c.display())),
        }
    }
    Err(InstallError::Python(if refused.is_empty() {
        "no python3 found on PATH: install Python 3.10 or newer (or set SWITCHYARD_PYTHON)".into()
    } else {
        format!(
            "no usable python3 (set SWITCHYARD_PYTHON): {}",
            refused.join("; ")
        )
    }))
}

/// Whether this process runs as root: its replicas then run as another user.
pub fn as_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Why `python` cannot make an engine's venv, if it cannot.
fn suitable(python: &Path) -> Result<(), String> {
    if as_root() {
        let real = python.canonicalize().map_err(|e| e.to_string())?;
        if let Some(closed) = closed_to_others(&real) {
            return Err(format!(
                "replicas run as another user and cannot reach {} ({} is closed to others)",
                real.display(),
                closed.display()
            ));
        }
    }
    let out = plain_command(python)
        .args([
            "-c",
            "import sys, venv, ensurepip; sys.exit(0 if sys.version_info >= (3, 10) else 3)",
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    match out.status.code() {
        Some(0) => Ok(()),
        Some(3) => Err("Python 3.10 or newer is needed".into()),
        _ => Err("it has no venv or ensurepip module (Debian: apt install python3-venv)".into()),
    }
}

/// Refuses an engines directory the replicas' user could not reach (a server running as root).
fn reachable(dir: &Path) -> Result<(), InstallError> {
    if !as_root() {
        return Ok(());
    }
    let real = dir.canonicalize().map_err(io("reading", dir))?;
    match closed_to_others(&real) {
        Some(closed) => Err(InstallError::Failed(format!(
            "replicas run as another user and could not reach {} ({} is closed to others): set \
             runtime.engines_dir to a directory they can reach",
            real.display(),
            closed.display()
        ))),
        None => Ok(()),
    }
}

/// The first of `path` and its ancestors that others may not pass through (or run, for the file).
fn closed_to_others(path: &Path) -> Option<PathBuf> {
    let file_ok = std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o005 == 0o005);
    if !file_ok {
        return Some(path.to_path_buf());
    }
    path.ancestors()
        .skip(1)
        .find(|d| !std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
        .map(Path::to_path_buf)
}

/// Lets others read `dir` and pass through it (the engines directory: replicas may run as another
/// user, and the engine's code is public packages).
fn open_to_others(dir: &Path) -> Result<(), InstallError> {
    let meta = std::fs::metadata(dir).map_err(io("reading", dir))?;
    let mode = meta.permissions().mode();
    if mode & 0o055 != 0o055 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o755))
            .map_err(io("opening", dir))?;
    }
    Ok(())
}

/// `chmod -R a+rX`: every file readable, every directory and executable open to others.
fn open_tree(dir: &Path) -> Result<(), InstallError> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        open_to_others(&d)?;
        for entry in std::fs::read_dir(&d).map_err(io("reading", &d))?.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() {
                let mode = entry
                    .metadata()
                    .map_err(io("reading", &path))?
                    .permissions()
                    .mode();
                let open = if mode & 0o100 != 0 { 0o555 } else { 0o444 };
                if mode & open != open {
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode | open))
                        .map_err(io("opening", &path))?;
                }
            }
        }
    }
    Ok(())
}

/// An exclusive advisory lock on `<dir>/.<name>.lock`, held until the file is dropped.
fn lock(dir: &Path, name: &str) -> Result<std::fs::File, InstallError> {
    use std::os::fd::AsRawFd;
    let path = dir.join(format!(".{name}.lock"));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io("opening", &path))?;
    // SAFETY: the descriptor is open for the call; flock has no other preconditions.
    let held = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
    if !held {
        return Err(InstallError::Busy(name.to_string()));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pip_lines_move_the_progress() {
        let mut n = 0;
        let (p, step) = pip_step("Collecting numpy==2.4.6", &mut n, 5).unwrap();
        assert_eq!((p, step.as_str()), (20, "downloading numpy==2.4.6 (1/5)"));
        assert_eq!(
            pip_step("  Downloading numpy-2.4.6.whl (16 MB)", &mut n, 5),
            None
        );
        let (p, _) = pip_step("Installing collected packages: numpy", &mut n, 5).unwrap();
        assert_eq!(p, 82);
        for _ in 0..9 {
            pip_step("Collecting x", &mut n, 5);
        }
        assert_eq!(
            pip_step("Collecting y", &mut n, 5).unwrap().0,
            80,
            "never past the download share"
        );
    }

    #[test]
    fn an_unreachable_registry_is_told_apart() {
        let e = pip_error("WARNING: Retrying ... NewConnectionError('Failed to establish a new connection')\nERROR: Could not find a version that satisfies the requirement numpy==2.4.6\nERROR: No matching distribution found for numpy==2.4.6");
        assert!(matches!(e, InstallError::Registry(_)), "{e}");
        assert!(e.to_string().contains("No matching distribution"), "{e}");
        let e = pip_error("ERROR: THESE PACKAGES DO NOT MATCH THE HASHES");
        assert!(matches!(e, InstallError::Failed(_)), "{e}");
        // No wheel for this platform: the registry answered.
        let e = pip_error("ERROR: Could not find a version that satisfies the requirement x==1\nERROR: No matching distribution found for x==1");
        assert!(matches!(e, InstallError::Failed(_)), "{e}");
    }

    #[test]
    fn installs_get_no_server_setting_or_secret() {
        for name in [
            "PATH",
            "HOME",
            "PIP_INDEX_URL",
            "https_proxy",
            "HTTPS_PROXY",
            "SSL_CERT_FILE",
        ] {
            assert!(passed_on(name), "{name}");
        }
        for name in [
            "SWITCHYARD_SECRETS_KEY",
            "SWITCHYARD_STORE_URL",
            "SWITCHYARD_SMTP_URL",
            "LD_PRELOAD",
            "PYTHONPATH",
        ] {
            assert!(!passed_on(name), "{name}");
        }
    }

    #[test]
    fn requirements_are_counted_without_comments() {
        assert_eq!(
            count_requirements("# x\na==1  # the model\n\nb==2\n#c==3\n"),
            2
        );
        for b in BUILTINS {
            let (_, text) = b
                .files
                .iter()
                .find(|(f, _)| *f == "requirements.txt")
                .unwrap();
            assert!(count_requirements(text) >= 2, "{}", b.name);
        }
    }

    #[test]
    fn unknown_engines_and_removals_of_what_is_not_there_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let e = install(dir.path(), "nope", &mut |_, _| {}).unwrap_err();
        assert!(e.to_string().contains("minilm, smollm"), "{e}");
        assert!(matches!(
            remove(dir.path(), "minilm"),
            Err(InstallError::NotInstalled(_))
        ));
    }

    #[test]
    fn a_removal_leaves_nothing_of_the_engine_behind() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("engines");
        std::fs::create_dir_all(dir.join("minilm/venv/bin")).unwrap();
        std::fs::write(dir.join("minilm").join(MANIFEST), "{}").unwrap();
        drop(lock(&dir, "minilm").unwrap());
        remove(&dir, "minilm").unwrap();
        assert!(
            !dir.exists(),
            "{:?}",
            std::fs::read_dir(&dir).map(|d| d.count())
        );
        // Another engine's files stay, and so does the dir that holds them.
        std::fs::create_dir_all(dir.join("minilm")).unwrap();
        std::fs::write(dir.join("minilm").join(MANIFEST), "{}").unwrap();
        drop(lock(&dir, "smollm").unwrap());
        remove(&dir, "minilm").unwrap();
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from(".smollm.lock")]);
    }

    #[test]
    fn one_install_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let held = lock(dir.path(), "minilm").unwrap();
        assert!(matches!(
            lock(dir.path(), "minilm"),
            Err(InstallError::Busy(_))
        ));
        assert!(lock(dir.path(), "smollm").is_ok(), "engines lock apart");
        drop(held);
        assert!(lock(dir.path(), "minilm").is_ok());
    }

    #[test]
    fn trees_open_to_others() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("a");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("f"), "x").unwrap();
        std::fs::write(sub.join("x"), "x").unwrap();
        std::fs::set_permissions(sub.join("f"), std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(sub.join("x"), std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o700)).unwrap();
        open_tree(dir.path()).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&sub), 0o755);
        assert_eq!(mode(&sub.join("f")), 0o644);
        assert_eq!(mode(&sub.join("x")), 0o755);
    }
}
