//! What is in flight, counted for the scaler and the balancers: a request on its route and its replica
//! ([`Counted`]), and a request held for a cold start ([`Waiting`]).

use std::ops::Deref;
use std::sync::atomic::Ordering;

use crate::routing::{Activity, Backend, Route};

/// One request held for a cold start, counted while it lives.
pub(super) struct Waiting<'a>(&'a Activity);

impl<'a> Waiting<'a> {
    pub(super) fn enter(activity: &'a Activity) -> Waiting<'a> {
        activity.waiting.fetch_add(1, Ordering::AcqRel);
        Waiting(activity)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A request counted on its route (for the scaler) and, once one is picked, its replica (for
/// `least_connections`) until dropped. `R` and `B` hold the two: shared where the count outlives the
/// request's own borrow of them (the general path's, dropped with the response body), borrowed on the own
/// path (whose request ends before its route could).
pub(super) struct Counted<R: Deref<Target = Route>, B: Deref<Target = Backend>> {
    route: R,
    pub(super) replica: Option<B>,
}

impl<R: Deref<Target = Route>, B: Deref<Target = Backend>> Counted<R, B> {
    /// A request counted on `route` (whose activity it touches) from now on.
    pub(super) fn enter(route: R, now_ms: i64) -> Self {
        route.activity.touch(now_ms);
        route.activity.in_flight.up();
        Counted {
            route,
            replica: None,
        }
    }

    /// The request counted on `replica` too, from now on (no longer on one it was counted on before: a
    /// request that could not reach its first replica goes on to the next).
    pub(super) fn add_replica(&mut self, replica: B) {
        replica.in_flight.up();
        if let Some(before) = self.replica.replace(replica) {
            before.in_flight.down();
        }
    }
}

impl<R: Deref<Target = Route>, B: Deref<Target = Backend>> Drop for Counted<R, B> {
    fn drop(&mut self) {
        self.route.activity.in_flight.down();
        if let Some(b) = &self.replica {
            b.in_flight.down();
        }
    }
}
