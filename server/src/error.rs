//! One error type for every answer the server's HTTP fronts (the API and the proxy) give themselves,
//! mapped to the spec's status codes and bodies.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::model::Issue;
use crate::store::StoreError;

#[derive(Debug, Clone)]
pub enum ApiError {
    /// 400 `{error, issues}`: an invalid request body.
    InvalidBody {
        message: String,
        issues: Vec<Issue>,
    },
    /// 400 `{details, error}`: invalid query parameters.
    InvalidQuery {
        message: String,
        details: Value,
    },
    /// 400 `{error}`: a request that is well-formed but not allowed now (e.g. resuming a running endpoint).
    BadRequest(String),
    Unauthorized(String),
    Forbidden(String),
    NotFound(String),
    MethodNotAllowed,
    Conflict(String),
    PayloadTooLarge(usize),
    /// 408 `{error}`: a request body that stopped coming. The connection closes after it, its request
    /// unread.
    RequestTimeout(String),
    /// 415 `{error}`: a body that is not sent as JSON where the API takes JSON.
    UnsupportedMediaType(String),
    /// 503 `{error}`: the endpoint cannot serve now (paused, waking up, failed); `retry_after` in seconds.
    Unavailable {
        message: String,
        retry_after: Option<u32>,
    },
    /// 502 `{error}`: a replica did not answer.
    BadGateway(String),
    /// 504 `{error}`: a replica said nothing for too long.
    GatewayTimeout(String),
    /// 500 `{error}`. The cause is logged, never sent.
    Internal(String),
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn internal(context: &str, cause: impl std::fmt::Display) -> ApiError {
        ApiError::Internal(format!("{context}: {cause}"))
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::InvalidBody { .. }
            | ApiError::InvalidQuery { .. }
            | ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::BadGateway(_) => StatusCode::BAD_GATEWAY,
            ApiError::GatewayTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The human-readable message, also sent as `X-Error-Message`.
    pub fn message(&self) -> String {
        match self {
            ApiError::InvalidBody { message, .. } | ApiError::InvalidQuery { message, .. } => {
                message.clone()
            }
            ApiError::BadRequest(m)
            | ApiError::Unauthorized(m)
            | ApiError::Forbidden(m)
            | ApiError::NotFound(m)
            | ApiError::Conflict(m)
            | ApiError::BadGateway(m)
            | ApiError::GatewayTimeout(m)
            | ApiError::RequestTimeout(m)
            | ApiError::UnsupportedMediaType(m)
            | ApiError::Unavailable { message: m, .. } => m.clone(),
            ApiError::MethodNotAllowed => "method not allowed on this path".into(),
            ApiError::PayloadTooLarge(limit) => format!("request body larger than {limit} bytes"),
            ApiError::Internal(_) => "internal server error".into(),
        }
    }

    pub fn body(&self) -> Value {
        let error = self.message();
        match self {
            ApiError::InvalidBody { issues, .. } => json!({ "error": error, "issues": issues }),
            ApiError::InvalidQuery { details, .. } => json!({ "details": details, "error": error }),
            _ => json!({ "error": error }),
        }
    }

    /// 408: a request body that stopped coming for the caller's time (`proxy.caller_timeout_s`).
    pub fn body_stalled() -> ApiError {
        ApiError::RequestTimeout("the request body did not come in time".into())
    }

    pub fn invalid_body(issues: Vec<Issue>) -> ApiError {
        let message = match issues.as_slice() {
            [] => "invalid request body".to_string(),
            [one] if one.path.is_empty() => format!("invalid request body: {}", one.message),
            [one] => format!("invalid request body: {}: {}", one.path, one.message),
            [first, rest @ ..] => format!(
                "invalid request body: {}: {} (and {} more)",
                first.path,
                first.message,
                rest.len()
            ),
        };
        ApiError::InvalidBody { message, issues }
    }
}

/// `message` as a header value (see [`crate::model::wire::header_text`]).
pub fn header_safe(message: &str) -> HeaderValue {
    HeaderValue::from_str(&crate::model::wire::header_text(message))
        .unwrap_or_else(|_| HeaderValue::from_static("error"))
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(cause) = &self {
            tracing::error!(%cause, "request failed");
        }
        let status = self.status();
        let mut resp = (status, axum::Json(self.body())).into_response();
        resp.headers_mut()
            .insert("x-error-message", header_safe(&self.message()));
        if let ApiError::Unavailable {
            retry_after: Some(s),
            ..
        } = &self
        {
            resp.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, HeaderValue::from(*s));
        }
        if let ApiError::RequestTimeout(_) = &self {
            resp.headers_mut().insert(
                axum::http::header::CONNECTION,
                HeaderValue::from_static("close"),
            );
        }
        resp
    }
}

impl From<crate::auth::AuthError> for ApiError {
    fn from(e: crate::auth::AuthError) -> Self {
        use crate::auth::AuthError;
        match e {
            AuthError::Unauthorized(m) => ApiError::Unauthorized(m),
            AuthError::Forbidden(m) => ApiError::Forbidden(m),
            AuthError::NotFound(m) => ApiError::NotFound(m),
            AuthError::Store(s) => s.into(),
        }
    }
}

impl From<crate::services::Error> for ApiError {
    fn from(e: crate::services::Error) -> Self {
        use crate::services::Error;
        match e {
            Error::Invalid(issues) => ApiError::invalid_body(issues),
            Error::BadRequest(m) => ApiError::BadRequest(m),
            Error::Forbidden(m) => ApiError::Forbidden(m),
            Error::NotFound(m) => ApiError::NotFound(m),
            Error::Conflict(m) => ApiError::Conflict(m),
            Error::Store(s) => s.into(),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Conflict(m) => ApiError::Conflict(m),
            StoreError::NotFound(m) => ApiError::NotFound(m),
            StoreError::Stale => ApiError::Conflict(
                "the resource was changed by another request; read it again and retry".into(),
            ),
            StoreError::Backend(m) => ApiError::Internal(format!("store: {m}")),
            StoreError::Fenced => ApiError::Internal(StoreError::Fenced.to_string()),
        }
    }
}

/// The `x-request-id` an answer carries: the caller's, when it sent a sane one (up to 128 letters, digits
/// and `-_.:`), else a new one.
pub fn request_id(given: Option<&HeaderValue>) -> String {
    given
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            !v.is_empty()
                && v.len() <= 128
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
        })
        .map(str::to_string)
        .unwrap_or_else(crate::crypto::random_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_have_the_spec_shapes() {
        let e = ApiError::invalid_body(vec![Issue {
            path: "namespace".into(),
            message: "missing field".into(),
        }]);
        let b = e.body();
        assert_eq!(b["issues"][0]["path"], "namespace");
        assert!(b["error"].as_str().unwrap().contains("namespace"));
        let q = ApiError::InvalidQuery {
            message: "bad".into(),
            details: json!({"limit": "x"}),
        };
        assert_eq!(q.body(), json!({"details": {"limit": "x"}, "error": "bad"}));
        assert_eq!(ApiError::Conflict("c".into()).body(), json!({"error": "c"}));
    }

    #[test]
    fn internal_errors_never_leak_their_cause() {
        let e = ApiError::internal("store", "disk I/O error at /secret/path");
        assert_eq!(e.body(), json!({"error": "internal server error"}));
        assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }

    #[test]
    fn header_messages_are_sanitized() {
        assert_eq!(
            header_safe("bad\r\nX-Evil: 1").to_str().unwrap(),
            "bad??X-Evil: 1"
        );
        assert_eq!(header_safe("naïve").to_str().unwrap(), "na?ve");
    }

    #[test]
    fn header_messages_say_their_punctuation_in_ascii() {
        let said = header_safe("missing bearer token (Authorization: Bearer …) — a → b “q”");
        assert_eq!(
            said.to_str().unwrap(),
            "missing bearer token (Authorization: Bearer ...) - a -> b \"q\""
        );
        let long = header_safe(&"…".repeat(400));
        assert_eq!(long.to_str().unwrap().len(), 512);
    }
}
