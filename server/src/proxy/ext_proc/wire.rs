//! The messages of Envoy's external processing protocol (`envoy.service.ext_proc.v3`) as the proxy sends
//! them, and what it reads of the answers: headers as `HeaderMap`s (values in `raw_value`, as Envoy sends
//! them), bodies in chunks, and the replica a router names.

use axum::http::{HeaderMap, Method, StatusCode};
use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::processing_mode::{
    BodySendMode, HeaderSendMode,
};
use envoy_types::pb::envoy::service::ext_proc::v3 as ext;
use envoy_types::pb::google::protobuf::{value, Struct};

use crate::model::ExtProcBody;

/// The header (and the `envoy.lb` metadata key) in which an endpoint picker names the replica to send to:
/// `ip:port`, or several, comma-separated, to try in order (the Gateway API Inference Extension's protocol).
pub const DESTINATION: &str = "x-gateway-destination-endpoint";

/// The metadata namespace of the picker's answer.
const LB_NAMESPACE: &str = "envoy.lb";

/// Most bytes of a body in one message (the picker's own chunking; gRPC's default message limit is 4 MiB).
pub const CHUNK: usize = 64 * 1024;

/// `mode` as the protocol numbers it.
fn body_mode(mode: ExtProcBody) -> BodySendMode {
    match mode {
        ExtProcBody::None => BodySendMode::None,
        ExtProcBody::Buffered => BodySendMode::Buffered,
        ExtProcBody::FullDuplexStreamed => BodySendMode::FullDuplexStreamed,
    }
}

/// One header as the protocol carries it.
fn header(key: &str, value: &[u8]) -> core::HeaderValue {
    core::HeaderValue {
        key: key.to_string(),
        value: String::new(),
        raw_value: value.to_vec(),
    }
}

/// `headers` after the pseudo-headers `pseudo`, with `end_of_stream` when no body follows.
fn http_headers(
    pseudo: &[(&str, &[u8])],
    headers: &HeaderMap,
    end_of_stream: bool,
) -> ext::HttpHeaders {
    let pseudo = pseudo.iter().map(|(k, v)| header(k, v));
    let fields = headers
        .iter()
        .map(|(k, v)| header(k.as_str(), v.as_bytes()));
    ext::HttpHeaders {
        headers: Some(core::HeaderMap {
            headers: pseudo.chain(fields).collect(),
        }),
        end_of_stream,
        ..Default::default()
    }
}

/// The first message of a request's stream: its head as the replica would get it (`path` is the path and
/// query sent on, `authority` the caller's `Host`), with the protocol's configuration.
pub fn request_headers(
    method: &Method,
    path: &str,
    authority: &str,
    headers: &HeaderMap,
    end_of_stream: bool,
    mode: ExtProcBody,
) -> ext::ProcessingRequest {
    let pseudo: [(&str, &[u8]); 4] = [
        (":method", method.as_str().as_bytes()),
        (":path", path.as_bytes()),
        (":authority", authority.as_bytes()),
        (":scheme", b"http"),
    ];
    ext::ProcessingRequest {
        request: Some(ext::processing_request::Request::RequestHeaders(
            http_headers(&pseudo, headers, end_of_stream),
        )),
        protocol_config: Some(ext::ProtocolConfiguration {
            request_body_mode: body_mode(mode) as i32,
            response_body_mode: BodySendMode::None as i32,
            send_body_without_waiting_for_header_response: mode == ExtProcBody::FullDuplexStreamed,
        }),
        ..Default::default()
    }
}

/// `body` as request-body messages of at most [`CHUNK`] bytes, the last marked as the end.
pub fn request_body(body: &[u8]) -> Vec<ext::ProcessingRequest> {
    let count = body.len().div_ceil(CHUNK).max(1);
    (0..count)
        .map(|i| {
            let part = &body[(i * CHUNK).min(body.len())..((i + 1) * CHUNK).min(body.len())];
            ext::ProcessingRequest {
                request: Some(ext::processing_request::Request::RequestBody(
                    ext::HttpBody {
                        body: part.to_vec(),
                        end_of_stream: i + 1 == count,
                        ..Default::default()
                    },
                )),
                ..Default::default()
            }
        })
        .collect()
}

/// The response's head, for the router's accounting (no body follows on this stream).
pub fn response_headers(status: StatusCode, headers: &HeaderMap) -> ext::ProcessingRequest {
    let status = status.as_str().as_bytes();
    ext::ProcessingRequest {
        request: Some(ext::processing_request::Request::ResponseHeaders(
            http_headers(&[(":status", status)], headers, false),
        )),
        ..Default::default()
    }
}

/// A header's value as the router gave it: `raw_value`, or `value` when that is empty.
pub fn value_of(h: &core::HeaderValue) -> &[u8] {
    if h.raw_value.is_empty() {
        h.value.as_bytes()
    } else {
        &h.raw_value
    }
}

/// The destination a router named in its dynamic metadata (`envoy.lb` → [`DESTINATION`]).
pub fn destination_in(metadata: Option<&Struct>) -> Option<String> {
    let lb = metadata?.fields.get(LB_NAMESPACE)?;
    let Some(value::Kind::StructValue(lb)) = &lb.kind else {
        return None;
    };
    match &lb.fields.get(DESTINATION)?.kind {
        Some(value::Kind::StringValue(s)) => Some(s.clone()),
        _ => None,
    }
}

/// Whether a router's answer says it wants no response head (`mode_override.response_header_mode = SKIP`).
pub fn skips_response(r: &ext::ProcessingResponse) -> bool {
    let mode = r.mode_override.as_ref().map(|m| m.response_header_mode);
    mode == Some(HeaderSendMode::Skip as i32)
}

/// The request-body mode a router's answer switches to (`mode_override`), if any.
pub fn body_override(r: &ext::ProcessingResponse) -> Option<ExtProcBody> {
    let mode = r.mode_override.as_ref()?.request_body_mode;
    Some(match BodySendMode::try_from(mode).ok()? {
        BodySendMode::None => ExtProcBody::None,
        BodySendMode::FullDuplexStreamed | BodySendMode::Streamed => {
            ExtProcBody::FullDuplexStreamed
        }
        _ => ExtProcBody::Buffered,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_goes_in_chunks_the_last_marked_as_the_end() {
        let body = vec![7u8; CHUNK * 2 + 1];
        let parts = request_body(&body);
        let sizes: Vec<(usize, bool)> = parts
            .iter()
            .map(|p| match &p.request {
                Some(ext::processing_request::Request::RequestBody(b)) => {
                    (b.body.len(), b.end_of_stream)
                }
                _ => panic!("not a body"),
            })
            .collect();
        assert_eq!(sizes, [(CHUNK, false), (CHUNK, false), (1, true)]);
        assert_eq!(
            request_body(b"").len(),
            1,
            "an empty body is one message, the end"
        );
    }

    #[test]
    fn the_destination_is_read_from_envoy_lb_metadata() {
        use envoy_types::pb::google::protobuf::Value;
        let string = |s: &str| Value {
            kind: Some(value::Kind::StringValue(s.into())),
        };
        let lb = Struct {
            fields: [(DESTINATION.to_string(), string("10.0.0.1:8000"))].into(),
        };
        let md = Struct {
            fields: [(
                LB_NAMESPACE.to_string(),
                Value {
                    kind: Some(value::Kind::StructValue(lb)),
                },
            )]
            .into(),
        };
        assert_eq!(destination_in(Some(&md)).as_deref(), Some("10.0.0.1:8000"));
        let other = Struct {
            fields: [(LB_NAMESPACE.to_string(), string("x"))].into(),
        };
        assert_eq!(destination_in(Some(&other)), None);
        assert_eq!(destination_in(None), None);
    }
}
