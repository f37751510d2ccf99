//! Access lines: with `[proxy] access_log` on, one line per request a replica answered, in that replica's
//! logs (stream `access`): what was asked, the status, the time to the response's head, and what chose the
//! replica (see [`PickedBy`]). The proxy queues them without waiting; the runtime writes them to the logs.
//! A line that finds the queue full is dropped: the logs never hold up a request.

use std::time::Duration;

use tokio::sync::mpsc;

use super::stats::PickedBy;

/// Lines queued at most between the proxy and the logs.
pub const QUEUED: usize = 4096;

/// One request, for its replica's logs.
#[derive(Debug)]
pub struct AccessLine {
    pub namespace: String,
    pub endpoint: String,
    pub replica: String,
    pub line: String,
}

/// Where the proxy sends access lines.
#[derive(Debug, Clone)]
pub struct AccessLog(mpsc::Sender<AccessLine>);

/// What a request asked, for its access line.
pub struct Asked<'a> {
    pub method: &'a str,
    pub target: &'a str,
}

impl AccessLog {
    /// An access log, and the queue its lines come out of.
    pub fn new() -> (AccessLog, mpsc::Receiver<AccessLine>) {
        let (tx, rx) = mpsc::channel(QUEUED);
        (AccessLog(tx), rx)
    }

    /// Queues the line of a request to `namespace/endpoint` that `replica` answered with `status` after
    /// `took`, sent there `by` what.
    pub fn write(
        &self,
        (namespace, endpoint): (&str, &str),
        replica: &str,
        asked: Asked<'_>,
        (status, took): (u16, Duration),
        by: PickedBy,
    ) {
        let ms = took.as_secs_f64() * 1000.0;
        let line = format!(
            "{} {} {status} {ms:.1}ms by={}",
            asked.method,
            asked.target,
            by.as_str()
        );
        let _ = self.0.try_send(AccessLine {
            namespace: namespace.to_string(),
            endpoint: endpoint.to_string(),
            replica: replica.to_string(),
            line,
        });
    }
}
