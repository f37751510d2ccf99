//! A connection to a replica on the own path, each wait on it bounded by the replica's time.

use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::net::TcpStream;

use super::super::forward::REPLICA_STALLED;
use super::conn::write_each;
use super::deadline::Deadline;
use super::sock;
use crate::routing::pace::Side;

/// A connection to a replica, every wait on which ends after `limit` (`proxy.replica_timeout_s`) with a
/// [`Stalled`] error: a replica that keeps its caller waiting without a word does so for no longer.
pub(super) struct Upstream {
    pub(super) io: TcpStream,
    pub(super) limit: Duration,
    /// The time of a wait on it, made at the first wait of the caller's connection and set again for each.
    pub(super) timer: Option<Deadline>,
    /// When the latest wait on it began: no later than its last use.
    pub(super) used: Instant,
}

impl Upstream {
    pub(super) async fn read_buf(&mut self, buf: &mut BytesMut) -> std::io::Result<usize> {
        self.read_since(buf, None).await
    }

    /// [`Self::read_buf`], whose wait began at `now` when that is given (a time read just before).
    pub(super) async fn read_since(
        &mut self,
        buf: &mut BytesMut,
        now: Option<Instant>,
    ) -> std::io::Result<usize> {
        use futures_util::FutureExt;
        let mut read = std::pin::pin!(sock::read_buf(&self.io, buf));
        if let Some(done) = read.as_mut().now_or_never() {
            return done;
        }
        self.used = now.unwrap_or_else(Instant::now);
        let deadline = tokio::time::Instant::from_std(self.used + self.limit);
        // One timer for all of a connection's waits: set later each time, it stays where the event loop
        // keeps it rather than being put there and taken out again for each.
        let timer = match &mut self.timer {
            Some(timer) => {
                timer.set(deadline);
                timer
            }
            None => self.timer.insert(Deadline::at(deadline)),
        };
        tokio::select! {
            biased;
            read = read => read,
            () = timer.passed() => Err(REPLICA_STALLED.io()),
        }
    }

    pub(super) async fn write_all(&mut self, data: &[u8]) -> std::io::Result<()> {
        write_each(&mut self.io, self.limit, Side::Replica, data).await
    }
}
