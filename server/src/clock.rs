//! The injected clock: the system one in production, a settable one in tests.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};

pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> DateTime<Utc>;
}

#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that only moves when told to.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<Mutex<DateTime<Utc>>>);

impl ManualClock {
    pub fn new(start: DateTime<Utc>) -> ManualClock {
        ManualClock(Arc::new(Mutex::new(start)))
    }

    pub fn advance(&self, by: chrono::Duration) {
        if let Ok(mut t) = self.0.lock() {
            *t += by;
        }
    }

    pub fn set(&self, to: DateTime<Utc>) {
        if let Ok(mut t) = self.0.lock() {
            *t = to;
        }
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        match self.0.lock() {
            Ok(t) => *t,
            Err(p) => *p.into_inner(),
        }
    }
}
