//! Replica output: a bounded buffer of lines per replica, grouped by endpoint, with a live feed for `follow`.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio::sync::broadcast;

use crate::clock::Clock;

/// Longest line kept; longer output is cut (and marked) so one chatty replica cannot eat the memory.
pub const MAX_LINE_BYTES: usize = 8 * 1024;
/// Replicas of an endpoint whose lines are kept after they stop (so a crash can be read afterwards).
const KEPT_REPLICAS: usize = 8;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LogLine {
    #[serde(with = "crate::model::wire::rfc3339_z")]
    pub at: DateTime<Utc>,
    pub replica: String,
    pub stream: &'static str,
    pub line: String,
}

impl LogLine {
    /// `2026-11-22T10:00:00.000Z replica-id stderr: text`
    pub fn render(&self) -> String {
        format!(
            "{} {} {}: {}\n",
            crate::model::wire::rfc3339_z::format(&self.at),
            self.replica,
            self.stream,
            self.line
        )
    }
}

/// One replica's output on its way into the store: cut into lines per stream (stdout, stderr), each line
/// stored as it ends, a line that never ends once it passes [`MAX_LINE_BYTES`], and what is left when the
/// output ends.
pub struct ReplicaOutput {
    logs: Arc<LogStore>,
    clock: Arc<dyn Clock>,
    /// (namespace, endpoint, replica)
    who: (String, String, String),
    pending: HashMap<&'static str, Vec<u8>>,
}

impl ReplicaOutput {
    pub fn new(
        logs: Arc<LogStore>,
        clock: Arc<dyn Clock>,
        who: (String, String, String),
    ) -> ReplicaOutput {
        ReplicaOutput {
            logs,
            clock,
            who,
            pending: Default::default(),
        }
    }

    /// Takes what the replica wrote on `stream`.
    pub fn write(&mut self, stream: &'static str, bytes: &[u8]) {
        let mut buf = self.pending.remove(stream).unwrap_or_default();
        buf.extend_from_slice(bytes);
        while let Some(i) = buf.iter().position(|b| *b == b'\n') {
            self.store(stream, &buf[..i]);
            buf.drain(..=i);
        }
        if buf.len() > MAX_LINE_BYTES {
            self.store(stream, &buf);
            buf.clear();
        }
        self.pending.insert(stream, buf);
    }

    /// The output ended: what is left of each stream's last line is stored.
    pub fn finish(mut self) {
        for (stream, rest) in std::mem::take(&mut self.pending) {
            if !rest.is_empty() {
                self.store(stream, &rest);
            }
        }
    }

    fn store(&self, stream: &'static str, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        let (namespace, endpoint, replica) = &self.who;
        self.logs.push(
            namespace,
            endpoint,
            LogLine {
                at: self.clock.now(),
                replica: replica.clone(),
                stream,
                line: text.trim_end_matches(['\r', '\n']).to_string(),
            },
        );
    }
}

#[derive(Default)]
struct EndpointLogs {
    /// Replica id → its lines, oldest replica first.
    replicas: VecDeque<(String, VecDeque<LogLine>)>,
}

type Key = (String, String);

pub struct LogStore {
    per_replica: usize,
    endpoints: Mutex<HashMap<Key, EndpointLogs>>,
    feed: broadcast::Sender<(Key, LogLine)>,
}

impl LogStore {
    pub fn new(per_replica: usize) -> LogStore {
        LogStore {
            per_replica: per_replica.max(1),
            endpoints: Mutex::new(HashMap::new()),
            feed: broadcast::channel(1024).0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, EndpointLogs>> {
        match self.endpoints.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    pub fn push(&self, namespace: &str, name: &str, mut line: LogLine) {
        if line.line.len() > MAX_LINE_BYTES {
            let mut cut = MAX_LINE_BYTES;
            while !line.line.is_char_boundary(cut) {
                cut -= 1;
            }
            line.line.truncate(cut);
            line.line.push_str(" …[cut]");
        }
        let key = (namespace.to_string(), name.to_string());
        {
            let mut all = self.lock();
            let logs = all.entry(key.clone()).or_default();
            let idx = match logs.replicas.iter().position(|(id, _)| *id == line.replica) {
                Some(i) => i,
                None => {
                    if logs.replicas.len() >= KEPT_REPLICAS {
                        logs.replicas.pop_front();
                    }
                    logs.replicas
                        .push_back((line.replica.clone(), VecDeque::new()));
                    logs.replicas.len() - 1
                }
            };
            let lines = &mut logs.replicas[idx].1;
            if lines.len() >= self.per_replica {
                lines.pop_front();
            }
            lines.push_back(line.clone());
        }
        // Nobody following is fine.
        let _ = self.feed.send((key, line));
    }

    /// The kept lines of an endpoint, in time order, from `since` on, the last `tail` of them.
    pub fn read(
        &self,
        namespace: &str,
        name: &str,
        since: Option<DateTime<Utc>>,
        tail: Option<usize>,
    ) -> Vec<LogLine> {
        let all = self.lock();
        let Some(logs) = all.get(&(namespace.to_string(), name.to_string())) else {
            return Vec::new();
        };
        let mut lines: Vec<LogLine> = logs
            .replicas
            .iter()
            .flat_map(|(_, l)| l.iter())
            .filter(|l| since.is_none_or(|s| l.at >= s))
            .cloned()
            .collect();
        lines.sort_by_key(|l| l.at);
        if let Some(n) = tail {
            let skip = lines.len().saturating_sub(n);
            lines.drain(..skip);
        }
        lines
    }

    /// The last line a replica wrote, if any is kept.
    pub fn last_line(&self, namespace: &str, name: &str, replica: &str) -> Option<String> {
        let all = self.lock();
        let logs = all.get(&(namespace.to_string(), name.to_string()))?;
        let (_, lines) = logs.replicas.iter().find(|(id, _)| id == replica)?;
        lines.back().map(|l| l.line.clone())
    }

    /// Lines as they arrive, for every endpoint; the reader filters.
    pub fn subscribe(&self) -> broadcast::Receiver<(Key, LogLine)> {
        self.feed.subscribe()
    }

    pub fn forget(&self, namespace: &str, name: &str) {
        self.lock()
            .remove(&(namespace.to_string(), name.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn line(replica: &str, sec: u32, text: &str) -> LogLine {
        LogLine {
            at: Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, sec).unwrap(),
            replica: replica.into(),
            stream: "stdout",
            line: text.into(),
        }
    }

    #[test]
    fn bounded_per_replica_and_merged_in_time_order() {
        let store = LogStore::new(3);
        for i in 0..5 {
            store.push("ns", "ep", line("a", i * 2, &format!("a{i}")));
            store.push("ns", "ep", line("b", i * 2 + 1, &format!("b{i}")));
        }
        let all = store.read("ns", "ep", None, None);
        let texts: Vec<_> = all.iter().map(|l| l.line.as_str()).collect();
        assert_eq!(texts, ["a2", "b2", "a3", "b3", "a4", "b4"]);
        assert_eq!(store.last_line("ns", "ep", "a").as_deref(), Some("a4"));
        assert_eq!(store.last_line("ns", "ep", "zz"), None);
        let tail = store.read("ns", "ep", None, Some(2));
        assert_eq!(tail.len(), 2);
        assert_eq!(tail[1].line, "b4");
        let since = store.read(
            "ns",
            "ep",
            Some(Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 8).unwrap()),
            None,
        );
        assert_eq!(since.len(), 2);
        assert!(store.read("ns", "other", None, None).is_empty());
    }

    #[test]
    fn long_lines_are_cut_and_old_replicas_dropped() {
        let store = LogStore::new(10);
        store.push("ns", "ep", line("a", 0, &"é".repeat(MAX_LINE_BYTES)));
        let got = store.read("ns", "ep", None, None);
        assert!(got[0].line.len() <= MAX_LINE_BYTES + 10);
        assert!(got[0].line.ends_with("[cut]"));
        for i in 0..(KEPT_REPLICAS + 2) {
            store.push("ns", "ep", line(&format!("r{i}"), 1, "x"));
        }
        let got = store.read("ns", "ep", None, None);
        assert_eq!(got.len(), KEPT_REPLICAS);
        assert!(got.iter().all(|l| l.replica != "a" && l.replica != "r0"));
    }
}
