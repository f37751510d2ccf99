//! A cold start on the general path: a request for an endpoint that does not serve now wakes it, and is
//! answered 503 with `Retry-After` or, when the caller asked (`X-Scale-Up-Timeout`), held in a bounded queue
//! until it serves. The own path hands such requests to the general path.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderName};
use axum::response::{IntoResponse, Response};

use super::super::count::Waiting;
use super::super::{serving, unavailable, Proxy};
use crate::error::ApiError;
use crate::model::EndpointState;
use crate::routing::Route;

const X_SCALE_UP_TIMEOUT: HeaderName = HeaderName::from_static("x-scale-up-timeout");

impl Proxy {
    /// The route once it has a replica to send to: wakes a scaled-to-zero endpoint, and holds the request
    /// when the caller asked to (`X-Scale-Up-Timeout: seconds`), in a bounded queue.
    pub(super) async fn ready_route(
        &self,
        route: &Arc<Route>,
        asked: &axum::http::request::Parts,
    ) -> Result<Arc<Route>, Response> {
        let headers = &asked.headers;
        match route.state {
            EndpointState::Paused => {
                return Err(unavailable(
                    format!(
                        "endpoint {} is paused; resume it to serve requests",
                        route.name
                    ),
                    None,
                ))
            }
            EndpointState::Failed => {
                return Err(unavailable(
                    format!("endpoint {} has failed; see its status message", route.name),
                    None,
                ))
            }
            _ if serving(route) => return Ok(route.clone()),
            _ => {}
        }
        let retry_after = self.config.retry_after_s;
        // A wait asked for badly is refused before it wakes anything.
        let wait = self
            .scale_up_wait(headers)
            .map_err(IntoResponse::into_response)?;
        route.activity.touch(self.clock.now_millis());
        // Also when the table shows it still up: it may be a tick old, and the endpoint just scaled to zero.
        // For an endpoint that is starting anyway the reconciler drops the flag.
        let request = format!("{} {}", asked.method, asked.uri.path());
        route.activity.woken_by(request.clone());
        route.activity.request_wake();
        self.routing.kick();
        let Some(wait) = wait else {
            return Err(unavailable(
                format!("endpoint {} is starting; retry shortly", route.name),
                Some(retry_after),
            ));
        };
        // Boxed: a held request is the rare case (see `token_answer`'s call).
        Box::pin(self.hold(route, wait, request)).await
    }

    /// How long the caller asked to be held while the endpoint starts (`X-Scale-Up-Timeout: seconds`), up
    /// to `max_scale_up_wait_s`; `None` when it did not ask (or asked for none), 400 for a value that is
    /// not a number of seconds.
    fn scale_up_wait(&self, headers: &HeaderMap) -> Result<Option<Duration>, ApiError> {
        let Some(value) = headers.get(&X_SCALE_UP_TIMEOUT) else {
            return Ok(None);
        };
        let secs = value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<f64>().ok());
        let Some(secs) = secs.filter(|s| s.is_finite() && *s >= 0.0) else {
            let bad = "X-Scale-Up-Timeout must be a number of seconds";
            return Err(ApiError::BadRequest(bad.into()));
        };
        let most = self.config.max_scale_up_wait_s.min(86_400) as f64;
        Ok((secs > 0.0).then(|| Duration::from_secs_f64(secs.min(most))))
    }

    /// Holds the request (`request`: its method and path, which a wake-up names), in a bounded queue, until
    /// the endpoint serves, or for `wait` at most; follows the route through each new table.
    async fn hold(
        &self,
        route: &Arc<Route>,
        wait: Duration,
        request: String,
    ) -> Result<Arc<Route>, Response> {
        let retry_after = self.config.retry_after_s;
        let activity = route.activity.clone();
        // Released however this ends, a caller that hangs up included.
        let _held = Waiting::enter(&activity);
        if activity.waiting.load(Ordering::Acquire) > self.config.cold_start_queue as u32 {
            return Err(unavailable(
                "too many requests are waiting for this endpoint to start",
                Some(retry_after),
            ));
        }
        let deadline = tokio::time::Instant::now() + wait;
        let mut table = self.routing.table.clone();
        let outcome = loop {
            let current = table
                .borrow_and_update()
                .get(&route.namespace, &route.name)
                .cloned();
            match current {
                None => {
                    break Err(
                        ApiError::NotFound(format!("endpoint {} was deleted", route.name))
                            .into_response(),
                    )
                }
                Some(r) if matches!(r.state, EndpointState::Paused | EndpointState::Failed) => {
                    break Err(unavailable(
                        format!("endpoint {} is {}", r.name, r.state),
                        None,
                    ))
                }
                Some(r) if serving(&r) => break Ok(r),
                // The table this request first saw may have been a tick old: wake whatever it is now.
                Some(r) if r.state == EndpointState::ScaledToZero => {
                    r.activity.woken_by(request.clone());
                    r.activity.request_wake();
                    self.routing.kick();
                }
                Some(_) => {}
            }
            // A closed channel (the server stopping) ends the wait like a timeout.
            if !matches!(
                tokio::time::timeout_at(deadline, table.changed()).await,
                Ok(Ok(()))
            ) {
                break Err(unavailable(
                    format!(
                        "endpoint {} did not start within {} s",
                        route.name,
                        wait.as_secs_f64()
                    ),
                    Some(retry_after),
                ));
            }
        };
        outcome
    }
}
