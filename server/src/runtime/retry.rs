//! A failed pull or download, and when it is tried again: retrying can help (a registry or hub that does not
//! answer) or cannot (no such image, credentials refused). Tries again after 2 s, doubling up to a minute, so
//! a source that is away is not asked every tick.

use std::time::{Duration, Instant};

use super::provider::Readiness;

/// Longest wait between two tries.
const MAX_DELAY: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub why: String,
    /// Retrying cannot help.
    pub lasting: bool,
    /// Failed tries in a row before this one.
    pub before: u32,
    pub at: Instant,
}

impl Failure {
    pub fn new(why: String, lasting: bool, before: u32) -> Failure {
        Failure {
            why,
            lasting,
            before,
            at: Instant::now(),
        }
    }

    /// How long after this failure the next try begins.
    pub fn delay(&self) -> Duration {
        Duration::from_secs(2u64.saturating_pow(self.before.saturating_add(1).min(6)))
            .min(MAX_DELAY)
    }

    /// Whether the next try may begin now.
    pub fn due(&self) -> bool {
        self.at.elapsed() >= self.delay()
    }

    /// What the endpoint is told meanwhile.
    pub fn readiness(&self) -> Readiness {
        if self.lasting {
            return Readiness::Failed(self.why.clone());
        }
        let left = self.delay().saturating_sub(self.at.elapsed());
        let left = (left.as_secs_f64().ceil() as u64).max(1);
        Readiness::Waiting(format!("{}; retrying in {left} s", self.why))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tries_again_later_each_time_up_to_a_minute() {
        let delays: Vec<u64> = (0..8)
            .map(|n| Failure::new("x".into(), false, n).delay().as_secs())
            .collect();
        assert_eq!(delays, [2, 4, 8, 16, 32, 60, 60, 60]);
        let f = Failure::new("the registry does not answer".into(), false, 0);
        assert!(!f.due());
        assert_eq!(
            f.readiness(),
            Readiness::Waiting("the registry does not answer; retrying in 2 s".into())
        );
        let lasting = Failure::new("no such tag".into(), true, 0);
        assert_eq!(lasting.readiness(), Readiness::Failed("no such tag".into()));
    }
}
