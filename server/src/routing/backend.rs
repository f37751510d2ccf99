//! A ready replica as routing sees it: its address, its requests in flight and its pool of connections.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use super::per_worker::Gauge;
use super::upstream;

/// A ready replica as the proxy sees it.
#[derive(Debug)]
pub struct Backend {
    pub replica_id: String,
    pub addr: SocketAddr,
    /// `addr` as a `Host` header, made once rather than per request.
    pub host: axum::http::HeaderValue,
    /// Requests in flight to this replica (least-connections balancing).
    pub in_flight: Gauge,
    /// The proxy's idle connections to it.
    pub pool: upstream::Pool,
    /// What its engine last said of its load (the `least_load` balancer reads it).
    pub engine: EngineFigures,
}

/// What a replica's engine last said of its load on `/metrics`, as the runtime read it (once a tick, see
/// `runtime::reconciler`): requests waiting for a slot and KV-cache use, with when they were read.
#[derive(Debug, Default)]
pub struct EngineFigures {
    /// Requests waiting, in thousandths.
    waiting_milli: AtomicU64,
    /// KV-cache use, in thousandths of the whole.
    kv_milli: AtomicU64,
    /// When they were read (milliseconds since the epoch, on the runtime's clock); 0 before the first read.
    read_at_ms: AtomicI64,
}

impl EngineFigures {
    /// Records the figures read at `now_ms`: requests waiting that others sent (see
    /// `runtime::engine_load`: this server's own are counted live by the balancer) and KV-cache use
    /// (`kv_percent`, 0 to 100); one the engine does not report counts as none. Nothing is recorded when it
    /// reported neither.
    pub fn record(&self, waiting: Option<f64>, kv_percent: Option<f64>, now_ms: i64) {
        if waiting.is_none() && kv_percent.is_none() {
            return;
        }
        let milli = |v: f64| (v.max(0.0) * 1000.0).min(u64::MAX as f64) as u64;
        self.waiting_milli
            .store(milli(waiting.unwrap_or(0.0)), Ordering::Relaxed);
        let kv = kv_percent.map_or(0.0, |p| p.clamp(0.0, 100.0) / 100.0);
        self.kv_milli.store(milli(kv), Ordering::Relaxed);
        self.read_at_ms.store(now_ms.max(1), Ordering::Relaxed);
    }

    /// The figures, when they were read within `within_ms` of `now_ms`: requests waiting, and KV-cache use
    /// as a fraction of the whole.
    pub fn fresh(&self, now_ms: i64, within_ms: i64) -> Option<(f64, f64)> {
        let at = self.read_at_ms.load(Ordering::Relaxed);
        if at == 0 || now_ms.saturating_sub(at) > within_ms {
            return None;
        }
        let waiting = self.waiting_milli.load(Ordering::Relaxed) as f64 / 1000.0;
        let kv = self.kv_milli.load(Ordering::Relaxed) as f64 / 1000.0;
        Some((waiting, kv))
    }
}

impl Backend {
    /// The replica `replica_id` at `addr`, whose connections fail a write that waits on it for longer than
    /// `write_limit` (see [`upstream::Pool::new`]).
    pub fn new(replica_id: String, addr: SocketAddr, write_limit: std::time::Duration) -> Backend {
        Backend {
            // A socket address is always a valid header value.
            host: axum::http::HeaderValue::from_str(&addr.to_string())
                .unwrap_or_else(|_| axum::http::HeaderValue::from_static("127.0.0.1")),
            replica_id,
            addr,
            in_flight: Gauge::default(),
            pool: upstream::Pool::new(write_limit),
            engine: EngineFigures::default(),
        }
    }

    /// Sends `req` (its URI a path) to this replica with the replica's own address as `Host`, as if called
    /// directly: see [`upstream::send`].
    pub async fn send(
        &self,
        mut req: axum::http::Request<upstream::ToReplica>,
    ) -> Result<upstream::Exchange, upstream::Error> {
        req.headers_mut()
            .insert(axum::http::header::HOST, self.host.clone());
        upstream::send(&self.pool, self.addr, req).await
    }

    /// Sends a request to upgrade the connection to this replica, with its own address as `Host`: see
    /// [`upstream::send_upgrade`].
    pub async fn send_upgrade(
        &self,
        mut req: axum::http::Request<upstream::ToReplica>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, upstream::Error> {
        req.headers_mut()
            .insert(axum::http::header::HOST, self.host.clone());
        upstream::send_upgrade(self.addr, req).await
    }

    /// A request of the server's own (a health check, a metrics scrape, the backend list for a custom
    /// router; its URI a path), on the same connections as traffic: the status and at most `limit` bytes
    /// of body, or `None` when no whole answer came within `timeout`.
    pub async fn call(
        &self,
        req: axum::http::Request<axum::body::Body>,
        limit: usize,
        timeout: std::time::Duration,
    ) -> Option<(axum::http::StatusCode, axum::body::Bytes)> {
        use http_body_util::BodyExt;
        let answer = async {
            let (resp, sender) = self.send(req.map(upstream::ToReplica::Right)).await.ok()?;
            let (parts, body) = resp.into_parts();
            let body = http_body_util::Limited::new(body, limit).collect().await;
            // Read in full: the connection can take the next request.
            self.pool.give_back(sender);
            Some((parts.status, body.ok()?.to_bytes()))
        };
        tokio::time::timeout(timeout, answer).await.ok().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::upstream::stub::{replica, Close};
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    #[tokio::test]
    async fn own_calls_take_the_whole_answer_within_bounds() {
        let (addr, accepted) = replica(Close::Never).await;
        let backend = Backend::new("r1".into(), addr, upstream::default_write_limit());
        let call = |path: &'static str, timeout_ms: u64| {
            let timeout = Duration::from_millis(timeout_ms);
            let req = axum::http::Request::get(path).body(Default::default());
            backend.call(req.unwrap(), 1024, timeout)
        };
        for _ in 0..3 {
            let (status, body) = call("/health", 5_000).await.expect("an answer");
            assert_eq!((status.as_u16(), &body[..]), (200, &b"ok"[..]));
        }
        // Each answer read in full: one connection served them all.
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        assert!(call("/big", 5_000).await.is_none(), "over the limit");
        assert!(call("/silent", 200).await.is_none(), "past the timeout");
    }
}
