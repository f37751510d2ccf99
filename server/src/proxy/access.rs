//! Who may call an endpoint, the same on both paths: the entry point (private endpoints only on the private
//! listener, for their account), the caller's address (the socket's, or from a trusted proxy the last
//! untrusted hop of `X-Forwarded-For`), the CIDR allow list, and for an `authenticated` endpoint a bearer
//! token allowed to read the namespace's endpoints, its answer remembered for `proxy.auth_cache_s`.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};

use super::forward::X_FORWARDED_FOR;
use super::{Proxy, PRIVATE_ACCOUNT_HEADER};
use crate::auth::{authenticate, authorize, Action, Resource};
use crate::error::ApiError;
use crate::model::EndpointType;
use crate::routing::{worker, Route};

/// The token cache's key for a (token, namespace): one digest of both, so that a lookup allocates nothing
/// and no token is held in the clear.
pub(super) fn token_key(token: &str, namespace: &str) -> [u8; 32] {
    crate::crypto::digest_of([token.as_bytes(), namespace.as_bytes()])
}

/// What the store said of a (token, namespace): the account id, or the refusal.
pub(super) type TokenAnswer = Result<String, ApiError>;

impl Proxy {
    /// The caller's address: the socket's, or, from a trusted proxy, the last untrusted hop of
    /// `X-Forwarded-For`.
    pub(super) fn client_ip(&self, peer: SocketAddr, headers: &HeaderMap) -> IpAddr {
        let forwarded = headers.get_all(&X_FORWARDED_FOR).iter();
        self.client_ip_from(peer, forwarded.map(HeaderValue::as_bytes))
    }

    /// [`Self::client_ip`], from the values of the request's `X-Forwarded-For` headers.
    pub(super) fn client_ip_from<'v>(
        &self,
        peer: SocketAddr,
        forwarded: impl Iterator<Item = &'v [u8]>,
    ) -> IpAddr {
        crate::model::cidr::client_ip(peer.ip(), forwarded, &self.trusted)
    }

    pub(super) fn trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|c| c.contains(ip))
    }

    /// Who may call an `authenticated` endpoint: a token allowed to read the namespace's endpoints.
    /// Answers are remembered for `auth_cache_s` so the store is not asked on every request.
    pub(super) async fn check_token(
        &self,
        namespace: &str,
        token: Option<&str>,
    ) -> Result<String, Response> {
        let Some(token) = token else {
            return Err(ApiError::Unauthorized(
                "this endpoint needs a bearer token (Authorization: Bearer …)".into(),
            )
            .into_response());
        };
        let key = token_key(token, namespace);
        let ttl = Duration::from_secs(self.config.auth_cache_s);
        let epoch = self.revocations.epoch();
        if let Some((at, given, answer)) = self.auth.lock().ok().and_then(|m| m.get(&key).cloned())
        {
            if at.elapsed() < ttl && given == epoch {
                return answer.map_err(IntoResponse::into_response);
            }
        }
        // Boxed: the store's call is the rare case, and would otherwise swell every request's future.
        let answer = Box::pin(self.token_answer(token, namespace)).await;
        // A store failure is not an answer to remember.
        if let Err(e @ ApiError::Internal(_)) = answer {
            return Err(e.into_response());
        }
        if let Ok(mut m) = self.auth.lock() {
            if m.len() > 100_000 {
                m.clear();
            }
            m.insert(key, (Instant::now(), epoch, answer.clone()));
        }
        answer.map_err(IntoResponse::into_response)
    }

    /// The store's answer for a (token, namespace): the account allowed to call, or the refusal. Asked on
    /// the control plane's runtime (see [`Self::on_control`]).
    async fn token_answer(&self, token: &str, namespace: &str) -> TokenAnswer {
        let (store, clock) = (self.store.clone(), self.clock.clone());
        let (token, namespace) = (token.to_string(), namespace.to_string());
        self.on_control(async move {
            let who = authenticate(store.as_ref(), Some(&token), clock.now()).await?;
            authorize(
                store.as_ref(),
                &who,
                &namespace,
                Resource::Inference,
                Action::Read,
            )
            .await?;
            Ok::<_, ApiError>(who.account.id)
        })
        .await
    }

    /// `work` run on the control plane's runtime when called on a data-plane worker (see [`workers`]): the
    /// store's connections belong to that runtime, and live as long as it does.
    async fn on_control(
        &self,
        work: impl std::future::Future<Output = TokenAnswer> + Send + 'static,
    ) -> TokenAnswer {
        match &self.control {
            Some(control) if worker::on_worker() => control
                .spawn(work)
                .await
                .unwrap_or_else(|_| Err(ApiError::Internal("the token check failed".into()))),
            _ => work.await,
        }
    }

    /// The CIDR allow list for `client`, and access by type with `token`: for an `authenticated` endpoint
    /// the caller's account (part of the cache key), else nothing.
    pub(super) async fn admit(
        &self,
        route: &Route,
        client: IpAddr,
        token: Option<&str>,
    ) -> Result<String, Response> {
        if let Some(allow) = &route.allow {
            if !allow.iter().any(|c| c.contains(client)) {
                return Err(ApiError::Forbidden(format!(
                    "{client} is not in this endpoint's allowed CIDR blocks"
                ))
                .into_response());
            }
        }
        match route.endpoint_type {
            EndpointType::Authenticated => self.check_token(&route.namespace, token).await,
            EndpointType::Public | EndpointType::Private => Ok(String::new()),
        }
    }

    /// Entry point: private endpoints exist only on the private listener, and only for their account.
    pub(super) fn check_entry(&self, route: &Route, headers: &HeaderMap) -> Result<(), ApiError> {
        let is_private = route.endpoint_type == EndpointType::Private;
        if is_private != self.private {
            return Err(ApiError::NotFound(format!(
                "no endpoint {:?} in namespace {:?}",
                route.name, route.namespace
            )));
        }
        if self.private {
            let account = headers
                .get(&PRIVATE_ACCOUNT_HEADER)
                .and_then(|v| v.to_str().ok());
            let allowed = match (&route.private_account, account) {
                (Some(want), Some(got)) => {
                    crate::crypto::constant_time_eq(want.as_bytes(), got.as_bytes())
                }
                _ => false,
            };
            if !allowed {
                return Err(ApiError::Forbidden(
                    "this private endpoint does not accept connections from that account".into(),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_answers_are_kept_apart() {
        let key = token_key("sy_abc", "acme");
        assert_eq!(key, token_key("sy_abc", "acme"));
        assert_ne!(key, token_key("sy_abc", "other"));
        assert_ne!(key, token_key("sy_abd", "acme"));
        // Where the token ends counts: ("sy_abca", "cme") is another pair.
        assert_ne!(key, token_key("sy_abca", "cme"));
    }
}
