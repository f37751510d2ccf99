//! The proxy's own answers to requests it does not pass on, in the API's error shape.
//!
//! A status, a JSON body `{"error": message}` and the message again in `X-Error-Message` (and `Retry-After`
//! when the endpoint may serve later), as every error of the server's HTTP API is answered.

use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::auth::AuthError;
use crate::store::StoreError;

const X_ERROR_MESSAGE: HeaderName = HeaderName::from_static("x-error-message");

/// Why the proxy answers a request itself.
#[derive(Debug, Clone)]
pub enum ProxyError {
    BadRequest(String),
    Unauthorized(String),
    Forbidden(String),
    NotFound(String),
    Conflict(String),
    PayloadTooLarge(usize),
    /// The endpoint cannot serve now (paused, waking up, failed); `retry_after` in seconds.
    Unavailable {
        message: String,
        retry_after: Option<u32>,
    },
    /// A replica did not answer.
    BadGateway(String),
    /// The cause is logged, never sent.
    Internal(String),
}

impl ProxyError {
    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ProxyError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ProxyError::Forbidden(_) => StatusCode::FORBIDDEN,
            ProxyError::NotFound(_) => StatusCode::NOT_FOUND,
            ProxyError::Conflict(_) => StatusCode::CONFLICT,
            ProxyError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ProxyError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::BadGateway(_) => StatusCode::BAD_GATEWAY,
            ProxyError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The human-readable message, sent in the body and as `X-Error-Message`.
    pub fn message(&self) -> String {
        match self {
            ProxyError::BadRequest(m)
            | ProxyError::Unauthorized(m)
            | ProxyError::Forbidden(m)
            | ProxyError::NotFound(m)
            | ProxyError::Conflict(m)
            | ProxyError::BadGateway(m)
            | ProxyError::Unavailable { message: m, .. } => m.clone(),
            ProxyError::PayloadTooLarge(limit) => format!("request body larger than {limit} bytes"),
            ProxyError::Internal(_) => "internal server error".into(),
        }
    }
}

/// A header value made from any message: control characters and non-ASCII are replaced, length capped.
fn header_safe(message: &str) -> HeaderValue {
    let cleaned: String = message
        .chars()
        .map(|c| {
            if c.is_ascii() && !c.is_ascii_control() {
                c
            } else {
                '?'
            }
        })
        .take(512)
        .collect();
    HeaderValue::from_str(&cleaned).unwrap_or_else(|_| HeaderValue::from_static("error"))
}

impl IntoResponse for ProxyError {
    fn into_response(self) -> Response {
        if let ProxyError::Internal(cause) = &self {
            tracing::error!(%cause, "request failed");
        }
        let message = self.message();
        let body = serde_json::json!({ "error": message });
        let mut resp = (self.status(), axum::Json(body)).into_response();
        resp.headers_mut()
            .insert(X_ERROR_MESSAGE, header_safe(&message));
        if let ProxyError::Unavailable {
            retry_after: Some(s),
            ..
        } = &self
        {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(*s));
        }
        resp
    }
}

impl From<AuthError> for ProxyError {
    fn from(e: AuthError) -> Self {
        match e {
            AuthError::Unauthorized(m) => ProxyError::Unauthorized(m),
            AuthError::Forbidden(m) => ProxyError::Forbidden(m),
            AuthError::NotFound(m) => ProxyError::NotFound(m),
            AuthError::Store(s) => s.into(),
        }
    }
}

impl From<StoreError> for ProxyError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Conflict(m) => ProxyError::Conflict(m),
            StoreError::NotFound(m) => ProxyError::NotFound(m),
            StoreError::Stale => ProxyError::Conflict(
                "the resource was changed by another request; read it again and retry".into(),
            ),
            StoreError::Backend(m) => ProxyError::Internal(format!("store: {m}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::error::ApiError;
    use http_body_util::BodyExt;

    async fn parts(resp: Response) -> (StatusCode, axum::http::HeaderMap, axum::body::Bytes) {
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.expect("body").to_bytes();
        (parts.status, parts.headers, body)
    }

    #[tokio::test]
    async fn answers_as_the_api_does() {
        let unavailable = |retry_after| ProxyError::Unavailable {
            message: "endpoint e is starting; retry shortly".into(),
            retry_after,
        };
        let api_unavailable = |retry_after| ApiError::Unavailable {
            message: "endpoint e is starting; retry shortly".into(),
            retry_after,
        };
        let pairs = [
            (
                ProxyError::BadRequest("bad".into()),
                ApiError::BadRequest("bad".into()),
            ),
            (
                ProxyError::Unauthorized("who?".into()),
                ApiError::Unauthorized("who?".into()),
            ),
            (
                ProxyError::Forbidden("no\r\nX: 1 ï".into()),
                ApiError::Forbidden("no\r\nX: 1 ï".into()),
            ),
            (
                ProxyError::NotFound("none \"x\"".into()),
                ApiError::NotFound("none \"x\"".into()),
            ),
            (
                ProxyError::Conflict("c".into()),
                ApiError::Conflict("c".into()),
            ),
            (ProxyError::PayloadTooLarge(4), ApiError::PayloadTooLarge(4)),
            (unavailable(Some(2)), api_unavailable(Some(2))),
            (unavailable(None), api_unavailable(None)),
            (
                ProxyError::BadGateway("gone".into()),
                ApiError::BadGateway("gone".into()),
            ),
            (
                ProxyError::Internal("disk".into()),
                ApiError::Internal("disk".into()),
            ),
        ];
        for (ours, api) in pairs {
            let what = format!("{ours:?}");
            assert_eq!(
                parts(ours.into_response()).await,
                parts(api.into_response()).await,
                "{what}"
            );
        }
        let stale = ProxyError::from(AuthError::Store(StoreError::Stale)).into_response();
        let api = ApiError::from(AuthError::Store(StoreError::Stale)).into_response();
        assert_eq!(parts(stale).await, parts(api).await);
    }
}
