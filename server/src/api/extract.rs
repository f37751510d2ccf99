//! Extractors that fail in our error shape: the JSON body (parsed to a `Value` for the model's
//! parsers), path parameters, the raw query, and the caller's principal.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use serde_json::Value;

use super::error::ApiError;
use super::AppState;
use crate::auth::{authenticate, bearer_in, Principal};
use crate::model::issue::parse_json;

/// A request body that is syntactically JSON. Its meaning is checked by the model's parsers.
pub struct JsonBody(pub Value);

impl FromRequest<AppState> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let content_type_ok = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_none_or(|v| v.starts_with("application/json") || v.starts_with("text/plain"));
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge(state.body_limit)
            } else {
                ApiError::invalid_body(vec![crate::model::Issue::new(
                    "",
                    "the request body could not be read",
                )])
            }
        })?;
        if !content_type_ok {
            return Err(ApiError::invalid_body(vec![crate::model::Issue::new(
                "",
                "the body must be JSON (Content-Type: application/json)",
            )]));
        }
        parse_json(&bytes)
            .map(JsonBody)
            .map_err(ApiError::invalid_body)
    }
}

/// The decoded query as ordered pairs; a malformed query string is a 400 with details.
pub struct QueryPairs(pub Vec<(String, String)>);

impl<S: Send + Sync> FromRequestParts<S> for QueryPairs {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let raw = parts.uri.query().unwrap_or("");
        serde_urlencoded::from_str::<Vec<(String, String)>>(raw)
            .map(QueryPairs)
            .map_err(|e| ApiError::InvalidQuery {
                message: "invalid query string".into(),
                details: serde_json::json!({ "query": e.to_string() }),
            })
    }
}

/// Path parameters; a segment that is not valid UTF-8 after decoding is a 400, not a plain-text error.
pub struct PathParams<T>(pub T);

impl<T, S> FromRequestParts<S> for PathParams<T>
where
    T: serde::de::DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(t)| PathParams(t))
            .map_err(|e| ApiError::BadRequest(format!("invalid path: {e}")))
    }
}

impl FromRequestParts<AppState> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let token = bearer_in(&parts.headers);
        Ok(authenticate(state.store.as_ref(), token, state.clock.now()).await?)
    }
}
