//! The machine's GPUs, placed per replica: each replica of a `gpu` instance is given devices of its own
//! (as many as its instance has) and holds them until it ends, so two replicas never share one by accident.
//! A replica that finds too few free waits (its endpoint says for whom) and starts once enough are given
//! back.
//!
//! The inventory is `runtime.gpus` (device ids as CUDA numbers them), else what `nvidia-smi` lists, else
//! the `/dev/nvidiaN` devices there are. An empty inventory places nothing: replicas start without devices
//! of their own, as they did before placement (a server told by `runtime.accelerators` that it runs `gpu`
//! compute, with no devices it knows of).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The GPUs replicas are placed on, and who holds each.
pub struct Devices {
    ids: Vec<String>,
    /// Device id → who holds it (`namespace/endpoint`).
    held: Mutex<BTreeMap<String, String>>,
    /// How long a stopped replica's devices stay held: its process may take the stop's grace time to end
    /// and free the device's memory.
    hold_after_stop: Duration,
}

/// Devices held by one replica; given back when dropped.
pub struct Lease {
    devices: Arc<Devices>,
    ids: Vec<String>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Lease").field(&self.ids).finish()
    }
}

impl Lease {
    /// The devices, as `CUDA_VISIBLE_DEVICES` lists them.
    pub fn ids(&self) -> &[String] {
        &self.ids
    }

    /// Gives the devices back at once: no replica was started on them.
    pub fn unused(mut self) {
        let ids = std::mem::take(&mut self.ids);
        self.devices.give_back(&ids);
    }
}

impl Drop for Lease {
    /// Given back once the replica's process has had its stop's grace time to end (at once where there is no
    /// runtime to wait on).
    fn drop(&mut self) {
        if self.ids.is_empty() {
            return;
        }
        let (devices, ids) = (self.devices.clone(), std::mem::take(&mut self.ids));
        let hold = devices.hold_after_stop;
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) if !hold.is_zero() => {
                runtime.spawn(async move {
                    tokio::time::sleep(hold).await;
                    devices.give_back(&ids);
                });
            }
            _ => devices.give_back(&ids),
        }
    }
}

impl Devices {
    /// The devices `ids` (each once, in their order), each held `hold_after_stop` past its replica's stop.
    pub fn new(ids: Vec<String>, hold_after_stop: Duration) -> Arc<Devices> {
        let mut seen = HashSet::new();
        let ids = ids
            .into_iter()
            .filter(|id| seen.insert(id.clone()))
            .collect();
        Arc::new(Devices {
            ids,
            held: Mutex::new(BTreeMap::new()),
            hold_after_stop,
        })
    }

    /// How many devices there are.
    pub fn count(&self) -> usize {
        self.ids.len()
    }

    /// `n` free devices for the endpoint `namespace`/`endpoint`, in the inventory's order; else why there
    /// are not (see [`waiting`]).
    pub fn take(
        self: &Arc<Self>,
        n: u32,
        namespace: &str,
        endpoint: &str,
    ) -> Result<Lease, String> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let free: Vec<&String> = self
            .ids
            .iter()
            .filter(|id| !held.contains_key(*id))
            .collect();
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        if free.len() < n {
            return Err(waiting(n, self.ids.len(), &held, namespace));
        }
        let ids: Vec<String> = free.into_iter().take(n).cloned().collect();
        let holder = format!("{namespace}/{endpoint}");
        for id in &ids {
            held.insert(id.clone(), holder.clone());
        }
        Ok(Lease {
            devices: self.clone(),
            ids,
        })
    }

    /// The devices `ids` that a replica an earlier server started runs on, held for it again (those of them
    /// this server knows and nobody holds yet: a device two replicas name stays with the first).
    pub fn claim(self: &Arc<Self>, ids: &[String], namespace: &str, endpoint: &str) -> Lease {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let holder = format!("{namespace}/{endpoint}");
        let ids: Vec<String> = ids
            .iter()
            .filter(|id| self.ids.contains(id) && !held.contains_key(*id))
            .cloned()
            .collect();
        for id in &ids {
            held.insert(id.clone(), holder.clone());
        }
        Lease {
            devices: self.clone(),
            ids,
        }
    }

    fn give_back(&self, ids: &[String]) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        for id in ids {
            held.remove(id);
        }
    }
}

/// `waiting for a free GPU (2 of 2 held by acme/chat, acme/chat)`: what a replica of `namespace` that wants
/// `n` waits for. Holders in other namespaces are counted, not named.
fn waiting(n: usize, total: usize, held: &BTreeMap<String, String>, namespace: &str) -> String {
    let what = if n == 1 {
        "a free GPU".to_string()
    } else {
        format!("{n} free GPUs")
    };
    if n > total {
        return format!("waiting for {what}: this server has {total}");
    }
    let ours = |h: &&String| h.split_once('/').is_some_and(|(ns, _)| ns == namespace);
    let mut by: Vec<String> = held.values().filter(ours).cloned().collect();
    let elsewhere = held.values().filter(|h| !ours(h)).count();
    match elsewhere {
        0 => {}
        1 => by.push("a replica of another namespace".into()),
        n => by.push(format!("{n} replicas of other namespaces")),
    }
    format!(
        "waiting for {what} ({} of {total} held by {})",
        held.len(),
        by.join(", ")
    )
}

/// The GPUs of this machine, when `runtime.gpus` does not list them: `nvidia-smi`'s indexes, else the
/// `/dev/nvidiaN` devices there are.
pub fn detected() -> Vec<String> {
    let listed = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=index", "--format=csv,noheader"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()))
                .map(str::to_string)
                .collect::<Vec<_>>()
        });
    if let Some(ids) = listed.filter(|ids| !ids.is_empty()) {
        return ids;
    }
    let mut ids: Vec<u32> = std::fs::read_dir("/dev")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_prefix("nvidia")?.parse::<u32>().ok()
        })
        .collect();
    ids.sort_unstable();
    ids.into_iter().map(|i| i.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_are_held_by_one_replica_at_a_time_and_given_back() {
        let d = Devices::new(vec!["1".into(), "0".into(), "1".into()], Duration::ZERO);
        assert_eq!(d.count(), 2, "each device once");
        let a = d.take(1, "acme", "chat").expect("a free one");
        let b = d.take(1, "acme", "chat").expect("the other");
        assert_eq!(
            (a.ids(), b.ids()),
            (&["1".to_string()][..], &["0".to_string()][..])
        );
        let waits = d.take(1, "acme", "embed").expect_err("none free");
        assert_eq!(
            waits,
            "waiting for a free GPU (2 of 2 held by acme/chat, acme/chat)"
        );
        // Another namespace is told how many, not whose.
        let theirs = d.take(1, "other", "x").expect_err("none free");
        assert_eq!(
            theirs,
            "waiting for a free GPU (2 of 2 held by 2 replicas of other namespaces)"
        );
        drop(a);
        let c = d.take(1, "acme", "embed").expect("the freed one");
        assert_eq!(c.ids(), &["1".to_string()][..]);
        assert_eq!(
            d.take(3, "big", "one").expect_err("more than there are"),
            "waiting for 3 free GPUs: this server has 2"
        );
        drop((b, c));
        let both = d.take(2, "big", "two").expect("both");
        assert_eq!(both.ids(), &["1".to_string(), "0".to_string()][..]);
    }

    #[test]
    fn an_adopted_replica_keeps_its_devices_and_an_unused_lease_frees_at_once() {
        let d = Devices::new(vec!["0".into(), "1".into()], Duration::from_secs(60));
        let adopted = d.claim(&["1".into(), "7".into()], "acme", "chat");
        assert_eq!(
            adopted.ids(),
            &["1".to_string()][..],
            "only devices it knows"
        );
        let next = d.take(1, "acme", "chat").expect("the other");
        assert_eq!(next.ids(), &["0".to_string()][..]);
        next.unused();
        assert!(
            d.take(1, "acme", "chat").is_ok(),
            "given back without the grace time"
        );
        let twice = d.claim(&["1".into()], "other", "x");
        assert!(twice.ids().is_empty(), "a device held is not claimed again");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopped_replicas_devices_stay_held_for_its_grace_time() {
        let d = Devices::new(vec!["0".into()], Duration::from_secs(5));
        drop(d.take(1, "acme", "chat").expect("free"));
        assert!(
            d.take(1, "acme", "next").is_err(),
            "held while the process may still end"
        );
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert!(
            d.take(1, "acme", "next").is_ok(),
            "given back after the grace time"
        );
    }
}
