//! Keeping replicas away from the server's files: where they work and which user they run as.
//!
//! Replicas work in `runtime.replica_dir`, which must be outside the data dir, in a subdirectory per
//! server named by a hash of its data dir (several servers may share one base, and a replica's working
//! directory does not say where the data dir is). When the server runs as root, replicas run as
//! `runtime.replica_user`, an unprivileged user created when missing, and own only their working
//! directories; the data dir (0700, root's) is closed to them.
//!
//! A server that does not run as root cannot start processes as another user: its replicas share its
//! uid, and a process can read its own user's files whatever their mode. There, only what replicas are
//! allowed to run (the launchers and their allowlists, `runtime.custom_commands`) keeps engine code
//! from the data dir; a dedicated server user keeps them from every other user's files.

use std::fs::{DirBuilder, Permissions};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use crate::config::RuntimeConfig;

/// The user replicas run as when `runtime.replica_user` is unset and the server runs as root.
pub const DEFAULT_REPLICA_USER: &str = "switchyard-replica";

/// An unprivileged user replicas run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// Where a server's replicas work, and who they run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaHome {
    /// This server's directory of replica working directories.
    pub root: PathBuf,
    /// `None`: replicas run as the server's user.
    pub user: Option<ReplicaUser>,
}

impl ReplicaHome {
    /// Resolves this server's replica directory, refusing one inside `data_dir`, then the replica
    /// user (created when missing).
    pub fn prepare(config: &RuntimeConfig, data_dir: &Path) -> Result<ReplicaHome, String> {
        let (ruid, euid) = process_uids()?;
        // Others may only pass through to their own directories, when replicas run as another user.
        let mode = if euid == 0 { 0o711 } else { 0o700 };
        let data = data_dir
            .canonicalize()
            .map_err(|e| format!("the data dir {}: {e}", data_dir.display()))?;
        let default = std::env::temp_dir().join(format!("switchyard-replicas-{euid}"));
        let base = config.replica_dir.as_deref().unwrap_or(&default);
        let resolved =
            resolve(base).map_err(|e| format!("runtime.replica_dir {}: {e}", base.display()))?;
        if resolved.starts_with(&data) {
            return Err(format!(
                "runtime.replica_dir {} is inside the data dir {}: replicas must not reach the \
                 server's files; choose a directory outside it",
                resolved.display(),
                data.display()
            ));
        }
        if config.replica_dir.is_some() {
            DirBuilder::new()
                .recursive(true)
                .mode(mode)
                .create(&resolved)
                .map_err(|e| format!("runtime.replica_dir {}: {e}", resolved.display()))?;
        } else {
            own_dir(&resolved, euid, mode)?;
        }
        let root = resolved.join(server_key(&data));
        own_dir(&root, euid, mode)?;
        let user = replica_user(config, ruid, euid)?;
        if let Some(user) = &user {
            reachable_by(&root, user)?;
        }
        Ok(ReplicaHome { root, user })
    }
}

/// `path` made absolute without links: its longest existing part canonicalized, then the rest.
fn resolve(path: &Path) -> std::io::Result<PathBuf> {
    let mut rest = Vec::new();
    let mut at = path;
    loop {
        match at.canonicalize() {
            Ok(found) => return Ok(rest.iter().rev().fold(found, |p, c| p.join(c))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let (Some(parent), Some(name)) = (at.parent(), at.file_name()) else {
                    return Err(e);
                };
                rest.push(name.to_os_string());
                at = if parent.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    parent
                };
            }
            Err(e) => return Err(e),
        }
    }
}

/// The name of a server's directory under the base: a hash of its data dir.
fn server_key(data_dir: &Path) -> String {
    let digest = Sha256::digest(data_dir.as_os_str().as_encoded_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// Creates `dir` (its parent must exist) or takes the one there, if it is a real directory of `uid`'s
/// (not a link someone else planted); then gives it `mode`.
fn own_dir(dir: &Path, uid: u32, mode: u32) -> Result<(), String> {
    match DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("creating {}: {e}", dir.display())),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.is_dir() || meta.uid() != uid {
        return Err(format!(
            "{} is not a directory of this server's user (uid {uid}); remove it or set \
             runtime.replica_dir",
            dir.display()
        ));
    }
    std::fs::set_permissions(dir, Permissions::from_mode(mode))
        .map_err(|e| format!("{}: {e}", dir.display()))
}

/// Fails unless `user` can pass through every directory down to `dir` (else no replica could start).
fn reachable_by(dir: &Path, user: &ReplicaUser) -> Result<(), String> {
    for step in dir.ancestors() {
        let meta = std::fs::metadata(step).map_err(|e| format!("{}: {e}", step.display()))?;
        let mode = meta.mode();
        let passes = mode & 0o001 != 0
            || (meta.uid() == user.uid && mode & 0o100 != 0)
            || (meta.gid() == user.gid && mode & 0o010 != 0);
        if !passes {
            return Err(format!(
                "replicas run as {} cannot reach {}: {} (mode {:o}) is closed to them; choose a \
                 runtime.replica_dir they can reach",
                user.name,
                dir.display(),
                step.display(),
                mode & 0o7777
            ));
        }
    }
    Ok(())
}

/// The real and effective user ids of this process, from `/proc/self/status`.
pub fn process_uids() -> Result<(u32, u32), String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("reading /proc/self/status: {e}"))?;
    let ids: Vec<u32> = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .map(|rest| {
            rest.split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    match ids[..] {
        [real, effective, ..] => Ok((real, effective)),
        _ => Err("no Uid line in /proc/self/status".into()),
    }
}

/// The user replicas run as: `runtime.replica_user` (or the default) when the server runs as root,
/// nobody else when it does not (and then setting one is an error: it cannot be honoured).
fn replica_user(
    config: &RuntimeConfig,
    ruid: u32,
    euid: u32,
) -> Result<Option<ReplicaUser>, String> {
    match (euid, &config.replica_user) {
        (0, _) if ruid != 0 => Err(format!(
            "the server runs set-user-ID root (real uid {ruid}): run it as root, or as an ordinary user"
        )),
        (0, name) => {
            find_or_create(name.as_deref().unwrap_or(DEFAULT_REPLICA_USER)).map(Some)
        }
        (_, Some(name)) => Err(format!(
            "runtime.replica_user = {name:?} needs a server running as root (this one runs as uid \
             {euid}); a server that is not root runs replicas as its own user: unset it"
        )),
        (_, None) => Ok(None),
    }
}

/// Serializes look-up-then-create among the servers of one process.
static USERS: Mutex<()> = Mutex::new(());

/// The user `name`, created as a system user without a home or a login shell when missing.
fn find_or_create(name: &str) -> Result<ReplicaUser, String> {
    if !valid_user_name(name) {
        return Err(format!(
            "runtime.replica_user {name:?} is not a valid user name (lowercase letters, digits, `_` \
             and `-`, starting with a letter or `_`, at most 32)"
        ));
    }
    let _guard = USERS.lock().unwrap_or_else(|p| p.into_inner());
    let user = match lookup(name)? {
        Some(user) => user,
        None => {
            let created = create(name);
            // Another process may have created it meanwhile: look again before giving up.
            match (lookup(name)?, created) {
                (Some(user), _) => user,
                (None, Err(e)) => {
                    return Err(format!(
                    "runtime.replica_user {name:?} does not exist and could not be created ({e}); \
                     create it (useradd --system --user-group --no-create-home --shell \
                     /usr/sbin/nologin {name}) or name an existing unprivileged user"
                ))
                }
                (None, Ok(())) => return Err(format!("useradd made no user {name:?}")),
            }
        }
    };
    if user.uid == 0 || user.gid == 0 {
        return Err(format!(
            "runtime.replica_user {name:?} has uid {} and gid {}: replicas need an unprivileged user",
            user.uid, user.gid
        ));
    }
    Ok(user)
}

fn valid_user_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 32
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

/// `name` in the user database (through `getent`, so NSS sources count; `/etc/passwd` without it).
fn lookup(name: &str) -> Result<Option<ReplicaUser>, String> {
    let text = match std::process::Command::new("getent")
        .args(["passwd", name])
        .output()
    {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
        // Exit status 2: no such user.
        Ok(out) if out.status.code() == Some(2) => return Ok(None),
        Ok(out) => return Err(format!("getent passwd {name}: {}", out.status)),
        Err(_) => std::fs::read_to_string("/etc/passwd")
            .map_err(|e| format!("reading /etc/passwd: {e}"))?,
    };
    Ok(text.lines().find_map(|l| parse_passwd_line(l, name)))
}

/// The user of a `passwd` line, when it is `name`'s.
fn parse_passwd_line(line: &str, name: &str) -> Option<ReplicaUser> {
    let mut fields = line.split(':');
    if fields.next()? != name {
        return None;
    }
    let _password = fields.next()?;
    Some(ReplicaUser {
        name: name.to_string(),
        uid: fields.next()?.parse().ok()?,
        gid: fields.next()?.parse().ok()?,
    })
}

fn create(name: &str) -> Result<(), String> {
    let out = std::process::Command::new("useradd")
        .args(["--system", "--user-group", "--no-create-home"])
        .args([
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ])
        .output()
        .map_err(|e| format!("useradd: {e}"))?;
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr);
        return Err(format!("useradd: {}", why.trim()));
    }
    tracing::info!(user = name, "created the system user replicas run as");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwd_lines_and_names() {
        let line = "switchyard-replica:x:998:997::/nonexistent:/usr/sbin/nologin";
        assert_eq!(
            parse_passwd_line(line, "switchyard-replica"),
            Some(ReplicaUser {
                name: "switchyard-replica".into(),
                uid: 998,
                gid: 997
            })
        );
        assert_eq!(parse_passwd_line(line, "switchyard"), None);
        assert_eq!(parse_passwd_line("x:x:nope:1::/:/bin/sh", "x"), None);
        assert!(valid_user_name("switchyard-replica"));
        assert!(valid_user_name("_svc1"));
        for bad in ["", "-r", "Root", "a b", "a:b", &"a".repeat(33)] {
            assert!(!valid_user_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn only_root_changes_users() {
        let named = RuntimeConfig {
            replica_user: Some("svc".into()),
            ..RuntimeConfig::default()
        };
        let err = replica_user(&named, 1000, 1000).unwrap_err();
        assert!(err.contains("needs a server running as root"), "{err}");
        assert_eq!(
            replica_user(&RuntimeConfig::default(), 1000, 1000),
            Ok(None)
        );
        let err = replica_user(&RuntimeConfig::default(), 1000, 0).unwrap_err();
        assert!(err.contains("set-user-ID"), "{err}");
        let bad = RuntimeConfig {
            replica_user: Some("-r".into()),
            ..RuntimeConfig::default()
        };
        assert!(replica_user(&bad, 0, 0)
            .unwrap_err()
            .contains("not a valid user name"));
    }

    #[test]
    fn uids_and_server_keys() {
        let (real, effective) = process_uids().unwrap();
        // SAFETY: getuid and geteuid only read the calling process's ids; they cannot fail.
        let ids = unsafe { (libc::getuid(), libc::geteuid()) };
        assert_eq!(
            (real, effective),
            ids,
            "(real, effective) as the kernel has them"
        );
        let meta = std::fs::metadata("/proc/self").unwrap();
        assert_eq!(effective, meta.uid());
        let a = server_key(Path::new("/var/lib/switchyard"));
        assert_eq!(a.len(), 16);
        assert_eq!(a, server_key(Path::new("/var/lib/switchyard")));
        assert_ne!(a, server_key(Path::new("/var/lib/other")));
    }

    #[test]
    fn a_replica_dir_inside_the_data_dir_is_refused() {
        let data = tempfile::tempdir().unwrap();
        let config = RuntimeConfig {
            replica_dir: Some(data.path().join("replicas")),
            ..RuntimeConfig::default()
        };
        let err = ReplicaHome::prepare(&config, data.path()).unwrap_err();
        assert!(err.contains("inside the data dir"), "{err}");
        assert!(!data.path().join("replicas").exists());
        let resolved = resolve(&data.path().join("a/../b/c")).unwrap_err();
        assert_eq!(resolved.kind(), std::io::ErrorKind::NotFound);
        let canonical = data.path().canonicalize().unwrap();
        assert_eq!(
            resolve(&data.path().join("b/c")).unwrap(),
            canonical.join("b/c")
        );
    }

    #[test]
    fn a_planted_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        let uid = std::fs::metadata(dir.path()).unwrap().uid();
        let err = own_dir(&link, uid, 0o700).unwrap_err();
        assert!(
            err.contains("not a directory of this server's user"),
            "{err}"
        );
        own_dir(&dir.path().join("mine"), uid, 0o711).unwrap();
        let mode = std::fs::metadata(dir.path().join("mine")).unwrap().mode();
        assert_eq!(mode & 0o777, 0o711);
    }
}
