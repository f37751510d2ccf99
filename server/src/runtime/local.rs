//! The `local` replica provider: replicas as child processes on loopback ports.
//!
//! Each replica is a child process on a free loopback port, in its own process group and working directory,
//! with a minimal environment. Its output goes to the log store. Working directories are outside the data
//! dir, and when the server runs as root replicas run as an unprivileged user (see [`super::isolation`]).
//!
//! No orphans: a clean stop kills the whole process group (SIGTERM, then SIGKILL after the grace period);
//! children get SIGKILL if the server dies (`PR_SET_PDEATHSIG`); and a pid file per replica lets the next
//! start kill whatever a crashed server left behind.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio::sync::watch;

use super::logs::{LogStore, ReplicaOutput};
use super::provider::{
    Kind, ProviderError, ReplicaInfo, ReplicaPlan, ReplicaProvider, ReplicaStatus, Workload,
};
use crate::clock::Clock;

use super::isolation::{ReplicaHome, ReplicaUser};

struct Child {
    pid: u32,
    workdir: PathBuf,
    /// `None` while it runs; how it ended afterwards.
    exited: watch::Receiver<Option<String>>,
}

pub struct LocalProvider {
    /// The replicas' working directories.
    root: PathBuf,
    /// Who replicas run as; `None`: the server's user.
    user: Option<ReplicaUser>,
    /// The server's own records of its replicas (pid files), out of their reach.
    state: PathBuf,
    grace: Duration,
    logs: Arc<LogStore>,
    clock: Arc<dyn Clock>,
    children: Mutex<HashMap<String, Child>>,
    /// Stops under way (grace period, then SIGKILL); shutdown waits for them.
    stopping: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl LocalProvider {
    /// `home.root` holds one working directory per replica, `state` the pid files (it held the working
    /// directories too before they moved out of the data dir). Kills what a previous server left running.
    pub fn new(
        home: ReplicaHome,
        state: PathBuf,
        grace: Duration,
        logs: Arc<LogStore>,
        clock: Arc<dyn Clock>,
    ) -> std::io::Result<LocalProvider> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(state.join("pids"))?;
        // Absolute, so the sweep can compare them with a process's working directory.
        let root = home.root.canonicalize()?;
        let state = state.canonicalize()?;
        let provider = LocalProvider {
            stopping: Mutex::new(Vec::new()),
            root,
            user: home.user,
            state,
            grace,
            logs,
            clock,
            children: Mutex::new(HashMap::new()),
        };
        provider.sweep_orphans();
        Ok(provider)
    }

    fn children(&self) -> std::sync::MutexGuard<'_, HashMap<String, Child>> {
        match self.children.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Kills the process groups recorded by an earlier run whose processes still work in our directories.
    fn sweep_orphans(&self) {
        let Ok(entries) = std::fs::read_dir(self.state.join("pids")) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let pid = std::fs::read_to_string(&path)
                .ok()
                .and_then(|t| t.trim().parse::<i32>().ok());
            // The group's leader may be gone (it died with the server) while what it started lives on:
            // look for any member of the recorded process group that works in our directory.
            if let Some(pgid) = pid.filter(|p| *p > 1) {
                let ours = group_members(pgid).into_iter().any(|member| {
                    std::fs::read_link(format!("/proc/{member}/cwd"))
                        .is_ok_and(|c| c.starts_with(&self.root) || c.starts_with(&self.state))
                });
                if ours {
                    tracing::warn!(
                        pgid,
                        "killing replica processes left running by an earlier server"
                    );
                    signal_group(pgid as u32, libc::SIGKILL);
                }
            }
            let _ = std::fs::remove_file(&path);
        }
        // Working directories of replicas that no longer exist (and of the layout that kept them in
        // the data dir).
        for dir in [&self.root, &self.state] {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                if e.file_name() != "pids" {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
    }

    fn pid_file(&self, replica_id: &str) -> PathBuf {
        self.state.join("pids").join(replica_id)
    }

    /// A fresh working directory for one replica, closed to everyone but the user it runs as.
    fn workdir(&self, replica_id: &str) -> std::io::Result<PathBuf> {
        let dir = self.root.join(replica_id);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        if let Some(user) = &self.user {
            std::os::unix::fs::lchown(&dir, Some(user.uid), Some(user.gid))?;
        }
        Ok(dir)
    }

    /// The command of one replica: its plan, with the server's variables last (they win), in its own
    /// process group and directory, as the replica user when there is one.
    fn command(&self, program: &str, plan: &ReplicaPlan, port: u16, workdir: &Path) -> Command {
        let mut cmd = Command::new(substitute_port(program, port));
        cmd.args(plan.args.iter().map(|a| substitute_port(a, port)))
            .env_clear()
            .envs(base_env(workdir))
            .envs(plan.env.iter().map(|(k, v)| (k, substitute_port(v, port))))
            .env("PORT", port.to_string())
            .env("REPLICA_ID", &plan.replica_id)
            .current_dir(workdir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(false);
        if let Some(user) = &self.user {
            // The child sets its groups, then its gid and uid, before `pre_exec` runs: the standard
            // library clears the supplementary groups when the server's real uid is 0 and none are
            // given (a `setgroups` in `pre_exec` would come after `setuid`, too late to be allowed).
            cmd.uid(user.uid).gid(user.gid);
        }
        // The death signal is Linux's: elsewhere a replica outlives a killed server until the next start
        // finds its pid file.
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent. It runs after the
        // change of user, which would clear the death signal.
        #[cfg(target_os = "linux")]
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        cmd
    }
}

/// Processes whose process group is `pgid`, from `/proc`.
fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    // After the name: state, ppid, pgrp.
                    let rest = &stat[stat.rfind(')')? + 1..];
                    rest.split_whitespace().nth(2)?.parse::<i32>().ok()
                })
                == Some(pgid)
        })
        .collect()
}

fn signal_group(pid: u32, signal: i32) {
    // Never 0 or 1: killpg(0) is our own group.
    if pid <= 1 {
        return;
    }
    // SAFETY: killpg has no memory effects; a stale or foreign group answers ESRCH or EPERM, both ignored.
    unsafe {
        libc::killpg(pid as libc::pid_t, signal);
    }
}

pub(super) fn free_port() -> std::io::Result<u16> {
    let l = TcpListener::bind(("127.0.0.1", 0))?;
    Ok(l.local_addr()?.port())
}

/// Writes `text` to `path`, readable by the server's user only (mode 0600, whatever the umask).
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())
}

fn substitute_port(text: &str, port: u16) -> String {
    text.replace("{port}", &port.to_string())
}

/// Copies a replica's output into the log store line by line, cutting lines that never end.
fn pump(
    mut from: impl AsyncRead + Unpin + Send + 'static,
    logs: Arc<LogStore>,
    clock: Arc<dyn Clock>,
    plan: (String, String, String),
    stream: &'static str,
) {
    tokio::spawn(async move {
        let mut out = ReplicaOutput::new(logs, clock, plan);
        let mut buf = vec![0u8; 8192];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            out.write(stream, &buf[..n]);
        }
        out.finish();
    });
}

/// The environment every replica starts from; nothing of the server's own leaks in but `PATH`.
fn base_env(workdir: &Path) -> Vec<(String, String)> {
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
    vec![
        ("PATH".into(), path),
        ("HOME".into(), workdir.display().to_string()),
        ("TMPDIR".into(), workdir.display().to_string()),
        ("LANG".into(), "C.UTF-8".into()),
    ]
}

#[async_trait]
impl ReplicaProvider for LocalProvider {
    fn kind(&self) -> Kind {
        Kind::Process
    }

    async fn start(&self, plan: &ReplicaPlan) -> Result<ReplicaInfo, ProviderError> {
        let Workload::Process { program } = &plan.workload else {
            return Err(ProviderError::Start(
                "this server runs replicas as local processes ([runtime] provider = \"local\"), not containers".into(),
            ));
        };
        let port = free_port().map_err(|e| ProviderError::Start(format!("no free port: {e}")))?;
        let workdir = self.workdir(&plan.replica_id).map_err(|e| {
            ProviderError::Start(format!(
                "preparing the replica's directory {}: {e}",
                self.root.join(&plan.replica_id).display()
            ))
        })?;
        let mut child = self.command(program, plan, port, &workdir).spawn().map_err(|e| {
            let _ = std::fs::remove_dir_all(&workdir);
            let hint = match &self.user {
                Some(u) if e.kind() == std::io::ErrorKind::PermissionDenied => format!(
                    " (replicas run as {}: the program and the directories above it must be open to that user)",
                    u.name
                ),
                _ => String::new(),
            };
            ProviderError::Start(format!("cannot run {program:?}: {e}{hint}"))
        })?;
        let Some(pid) = child.id().filter(|p| *p > 1) else {
            let _ = child.start_kill();
            return Err(ProviderError::Start(
                "the replica exited before it could be tracked".into(),
            ));
        };
        let _ = write_private(&self.pid_file(&plan.replica_id), &pid.to_string());
        let who = (
            plan.namespace.clone(),
            plan.endpoint.clone(),
            plan.replica_id.clone(),
        );
        if let Some(out) = child.stdout.take() {
            pump(
                out,
                self.logs.clone(),
                self.clock.clone(),
                who.clone(),
                "stdout",
            );
        }
        if let Some(err) = child.stderr.take() {
            pump(err, self.logs.clone(), self.clock.clone(), who, "stderr");
        }
        let (tx, rx) = watch::channel(None);
        tokio::spawn(async move {
            let how = match child.wait().await {
                Ok(status) => match (
                    status.code(),
                    std::os::unix::process::ExitStatusExt::signal(&status),
                ) {
                    (Some(c), _) => format!("exit status {c}"),
                    (None, Some(s)) => format!("killed by signal {s}"),
                    _ => "ended".to_string(),
                },
                Err(e) => format!("lost: {e}"),
            };
            let _ = tx.send(Some(how));
        });
        self.children().insert(
            plan.replica_id.clone(),
            Child {
                pid,
                workdir,
                exited: rx,
            },
        );
        Ok(ReplicaInfo {
            replica_id: plan.replica_id.clone(),
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            handle: pid.to_string(),
        })
    }

    fn status(&self, replica_id: &str) -> ReplicaStatus {
        match self.children().get(replica_id) {
            None => ReplicaStatus::Exited("unknown replica".into()),
            Some(c) => match c.exited.borrow().clone() {
                None => ReplicaStatus::Running,
                Some(how) => ReplicaStatus::Exited(how),
            },
        }
    }

    fn cpu_seconds(&self, replica_id: &str) -> Option<f64> {
        let pid = self.children().get(replica_id)?.pid;
        proc_cpu_seconds(pid)
    }

    /// Returns at once: the replica is forgotten now, and its grace period runs in the background (one slow
    /// replica must not hold up the reconciler). `stop_all` waits for those.
    async fn stop(&self, replica_id: &str) {
        let Some(child) = self.children().remove(replica_id) else {
            return;
        };
        let grace = self.grace;
        let pid_file = self.pid_file(replica_id);
        let replica = replica_id.to_string();
        let task = tokio::spawn(async move {
            let mut exited = child.exited.clone();
            if exited.borrow().is_none() {
                signal_group(child.pid, libc::SIGTERM);
                let ended = tokio::time::timeout(grace, exited.wait_for(|e| e.is_some())).await;
                if ended.is_err() {
                    tracing::warn!(%replica, "replica ignored SIGTERM; killing it");
                }
            }
            // Whatever the main process left in its group goes too.
            signal_group(child.pid, libc::SIGKILL);
            let _ = std::fs::remove_file(pid_file);
            let _ = std::fs::remove_dir_all(&child.workdir);
        });
        let mut stopping = match self.stopping.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        stopping.retain(|t| !t.is_finished());
        stopping.push(task);
    }

    async fn stop_all(&self) {
        let ids: Vec<String> = self.children().keys().cloned().collect();
        for id in ids {
            self.stop(&id).await;
        }
        let tasks = match self.stopping.lock() {
            Ok(mut g) => std::mem::take(&mut *g),
            Err(p) => std::mem::take(&mut *p.into_inner()),
        };
        futures_util::future::join_all(tasks).await;
        // This server's directory goes too, once empty (the next start makes it again).
        let _ = std::fs::remove_dir(&self.root);
    }
}

/// User plus system CPU seconds of a process, from `/proc/<pid>/stat`.
pub fn proc_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_cpu_seconds(&stat, clock_ticks())
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf only reads a constant.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

fn parse_cpu_seconds(stat: &str, ticks: f64) -> Option<f64> {
    // The command name (field 2) may hold spaces and parentheses: count fields after its last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, utime 14, stime 15 (1-based) → indices 11 and 12 here.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / ticks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_seconds_from_proc_stat() {
        let stat =
            "1234 (my (odd) engine) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0";
        assert_eq!(parse_cpu_seconds(stat, 100.0), Some(3.0));
        assert_eq!(parse_cpu_seconds("garbage", 100.0), None);
        assert!(proc_cpu_seconds(std::process::id()).is_some());
    }

    #[test]
    fn port_placeholder() {
        assert_eq!(substitute_port("--port={port}", 81), "--port=81");
        assert_eq!(substitute_port("plain", 81), "plain");
    }
}
