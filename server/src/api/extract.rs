//! Extractors that fail in our error shape: the JSON body (parsed to a `Value` for the model's
//! parsers), path parameters, the raw query, and the caller's principal.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use serde_json::Value;

use super::error::ApiError;
use super::AppState;
use crate::auth::{authenticate, bearer_in, Principal};
use crate::model::issue::parse_json;
use crate::routing::pace::{Side, Stalled};

/// A request body that is syntactically JSON, sent as JSON (`Content-Type: application/json`, or a
/// `+json` type such as `application/merge-patch+json`; parameters like `charset` are allowed). Anything
/// else is a 415 before the body is read. Its meaning is checked by the model's parsers.
pub struct JsonBody(pub Value);

impl FromRequest<AppState> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let content_type = req.headers().get(header::CONTENT_TYPE);
        if !content_type.is_some_and(is_json_media_type) {
            return Err(ApiError::UnsupportedMediaType(
                "the body must be JSON, sent with Content-Type: application/json".into(),
            ));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge(state.body_limit)
            } else if Stalled::caused(&rejection) == Some(Side::Caller) {
                ApiError::body_stalled()
            } else {
                ApiError::invalid_body(vec![crate::model::Issue::new(
                    "",
                    "the request body could not be read",
                )])
            }
        })?;
        parse_json(&bytes)
            .map(JsonBody)
            .map_err(ApiError::invalid_body)
    }
}

/// A JSON body that may be left out: a request with no body at all (no `Transfer-Encoding`, and no
/// `Content-Length` or `0`) is `None`, whatever its `Content-Type`; any other is read as a [`JsonBody`].
pub struct OptionalJsonBody(pub Option<Value>);

impl FromRequest<AppState> for OptionalJsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let headers = req.headers();
        let none = !headers.contains_key(header::TRANSFER_ENCODING)
            && headers
                .get(header::CONTENT_LENGTH)
                .is_none_or(|v| v.as_bytes() == b"0");
        if none {
            return Ok(OptionalJsonBody(None));
        }
        let JsonBody(value) = JsonBody::from_request(req, state).await?;
        Ok(OptionalJsonBody(Some(value)))
    }
}

/// `application/json` or `application/<anything>+json`, in any case, with or without parameters.
fn is_json_media_type(value: &HeaderValue) -> bool {
    let Ok(text) = value.to_str() else {
        return false;
    };
    let essence = text.split(';').next().unwrap_or("").trim();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    let subtype = subtype.to_ascii_lowercase();
    kind.eq_ignore_ascii_case("application") && (subtype == "json" || subtype.ends_with("+json"))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_media_types() {
        for good in [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON;charset=UTF-8",
            " application/json ",
            "application/merge-patch+json",
        ] {
            assert!(
                is_json_media_type(&HeaderValue::from_static(good)),
                "{good}"
            );
        }
        for bad in [
            "",
            "text/plain",
            "text/json",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonx",
            "application/+jsonx",
            "json",
        ] {
            assert!(!is_json_media_type(&HeaderValue::from_static(bad)), "{bad}");
        }
    }
}
