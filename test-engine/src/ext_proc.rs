//! `--ext-proc`: the test engine as an extProc custom-router sidecar, an Envoy external processor
//! (`envoy.service.ext_proc.v3`, gRPC on `--grpc-port` / `GRPC_PORT`) that decides like the Gateway API
//! Inference Extension's endpoint picker: in full-duplex mode it answers a request's head only once the
//! body has come. The runtime announces the replicas on its HTTP port as to the `--router` sidecar.
//!
//! What it decides, by the request:
//! - `x-pick: N` (or `N,M,…`): send to the Nth announced replica (then the Mth…), as the
//!   `x-gateway-destination-endpoint` header; `x-pick-via: metadata` names it in the `envoy.lb` dynamic
//!   metadata instead; `x-pick: elsewhere` names an address that is no replica;
//! - a path that begins `/forbidden`: an immediate 403 (`x-denied-by: test-ext-proc`);
//! - always sets `x-processed: test-ext-proc`; `x-rewrite-me` is set to `rewritten`; `x-remove-me` goes;
//! - a JSON body's `model` becomes the header `x-model`; `"rewrite_body": true` replaces the body with
//!   `{"rewritten":true,"model":…}`;
//! - `x-hang: 1`: never answers (the stream stays open until the proxy gives up); `x-die: 1`: the process
//!   exits at once;
//! - a response's head gets `x-response-seen: test-ext-proc`, unless the request said `x-skip-response`
//!   (then the head's answer asks for no response head, `mode_override`).

use std::pin::Pin;
use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::{
    header_value_option::HeaderAppendAction, HeaderValue, HeaderValueOption,
};
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::processing_mode::{
    BodySendMode, HeaderSendMode,
};
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::ProcessingMode;
use envoy_types::pb::envoy::r#type::v3::HttpStatus;
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_server::{
    ExternalProcessor, ExternalProcessorServer,
};
use envoy_types::pb::envoy::service::ext_proc::v3::{
    body_mutation, common_response::ResponseStatus, processing_request, processing_response,
    BodyMutation, BodyResponse, CommonResponse, HeaderMutation, HeadersResponse, HttpHeaders,
    ImmediateResponse, ProcessingRequest, ProcessingResponse, StreamedBodyResponse,
};
use envoy_types::pb::google::protobuf::{value, Struct, Value};
use futures_util::Stream;
use serde_json::json;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status, Streaming};

use crate::router::Backends;

const DESTINATION: &str = "x-gateway-destination-endpoint";

type Answers = Pin<Box<dyn Stream<Item = Result<ProcessingResponse, Status>> + Send>>;

struct Processor {
    backends: Arc<Backends>,
}

/// Serves the processor on `host`:`port` until the process ends.
pub async fn serve(host: &str, port: u16, backends: Arc<Backends>) -> Result<(), String> {
    let ip: std::net::IpAddr = host
        .parse()
        .map_err(|e| format!("--host {host:?} is not an address: {e}"))?;
    let addr = std::net::SocketAddr::new(ip, port);
    tonic::transport::Server::builder()
        .add_service(ExternalProcessorServer::new(Processor { backends }))
        .serve(addr)
        .await
        .map_err(|e| format!("gRPC server on {addr}: {e}"))
}

fn field(key: &str, value: &str) -> HeaderValueOption {
    HeaderValueOption {
        header: Some(HeaderValue {
            key: key.into(),
            value: String::new(),
            raw_value: value.as_bytes().to_vec(),
        }),
        append_action: HeaderAppendAction::OverwriteIfExistsOrAdd as i32,
        ..Default::default()
    }
}

fn header<'h>(h: &'h HttpHeaders, key: &str) -> Option<&'h str> {
    let mut all = h.headers.as_ref()?.headers.iter();
    let found = all.find(|f| f.key.eq_ignore_ascii_case(key))?;
    let value = if found.raw_value.is_empty() {
        found.value.as_bytes()
    } else {
        &found.raw_value
    };
    std::str::from_utf8(value).ok()
}

/// What the processor has seen of one request.
#[derive(Default)]
struct Seen {
    head: HttpHeaders,
    body: Vec<u8>,
    full_duplex: bool,
}

impl Processor {
    /// The destination `x-pick` asks for.
    fn destination(&self, pick: &str) -> String {
        if pick == "elsewhere" {
            return "127.0.0.1:1".into();
        }
        let list = self.backends.list();
        pick.split(',')
            .filter_map(|i| i.trim().parse::<usize>().ok())
            .filter_map(|i| list.get(i))
            .map(|url| {
                url.trim_start_matches("http://")
                    .trim_end_matches('/')
                    .to_string()
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The answer to a request's head: an immediate 403, or its header changes and destination.
    fn head_answer(&self, seen: &Seen) -> ProcessingResponse {
        let path = header(&seen.head, ":path").unwrap_or("/");
        if path.starts_with("/forbidden") {
            let immediate = ImmediateResponse {
                status: Some(HttpStatus { code: 403 }),
                headers: Some(HeaderMutation {
                    set_headers: vec![field("x-denied-by", "test-ext-proc")],
                    remove_headers: vec![],
                }),
                body: json!({"error": "denied by the processor"})
                    .to_string()
                    .into_bytes(),
                ..Default::default()
            };
            return answer(processing_response::Response::ImmediateResponse(immediate));
        }
        let mut set = vec![field("x-processed", "test-ext-proc")];
        if header(&seen.head, "x-rewrite-me").is_some() {
            set.push(field("x-rewrite-me", "rewritten"));
        }
        let mut metadata = None;
        if let Some(pick) = header(&seen.head, "x-pick") {
            let to = self.destination(pick);
            if header(&seen.head, "x-pick-via") == Some("metadata") {
                metadata = Some(lb_metadata(&to));
            } else {
                set.push(field(DESTINATION, &to));
            }
        }
        let mutation = HeaderMutation {
            set_headers: set,
            remove_headers: vec!["x-remove-me".into()],
        };
        let mut head = answer(processing_response::Response::RequestHeaders(
            HeadersResponse {
                response: Some(CommonResponse {
                    status: ResponseStatus::Continue as i32,
                    header_mutation: Some(mutation),
                    ..Default::default()
                }),
            },
        ));
        head.dynamic_metadata = metadata;
        if header(&seen.head, "x-skip-response").is_some() {
            head.mode_override = Some(ProcessingMode {
                response_header_mode: HeaderSendMode::Skip as i32,
                ..Default::default()
            });
        }
        head
    }

    /// The answer to a request's body: its JSON `model` as a header, and the body rewritten when it asks.
    fn body_answer(&self, seen: &Seen) -> ProcessingResponse {
        let json: Option<serde_json::Value> = serde_json::from_slice(&seen.body).ok();
        let model = json
            .as_ref()
            .and_then(|j| j.get("model")?.as_str().map(str::to_string));
        let set = model.iter().map(|m| field("x-model", m)).collect();
        let rewrite = json.as_ref().and_then(|j| j.get("rewrite_body")?.as_bool()) == Some(true);
        let body = rewrite.then(|| {
            let b = json!({"rewritten": true, "model": model})
                .to_string()
                .into_bytes();
            let mutation = if seen.full_duplex {
                body_mutation::Mutation::StreamedResponse(StreamedBodyResponse {
                    body: b,
                    end_of_stream: true,
                    ..Default::default()
                })
            } else {
                body_mutation::Mutation::Body(b)
            };
            BodyMutation {
                mutation: Some(mutation),
            }
        });
        answer(processing_response::Response::RequestBody(BodyResponse {
            response: Some(CommonResponse {
                header_mutation: Some(HeaderMutation {
                    set_headers: set,
                    remove_headers: vec![],
                }),
                body_mutation: body,
                ..Default::default()
            }),
        }))
    }
}

fn answer(response: processing_response::Response) -> ProcessingResponse {
    ProcessingResponse {
        response: Some(response),
        ..Default::default()
    }
}

fn lb_metadata(to: &str) -> Struct {
    let string = Value {
        kind: Some(value::Kind::StringValue(to.into())),
    };
    let lb = Struct {
        fields: [(DESTINATION.to_string(), string)].into(),
    };
    Struct {
        fields: [(
            "envoy.lb".to_string(),
            Value {
                kind: Some(value::Kind::StructValue(lb)),
            },
        )]
        .into(),
    }
}

#[tonic::async_trait]
impl ExternalProcessor for Processor {
    type ProcessStream = Answers;

    async fn process(
        &self,
        request: Request<Streaming<ProcessingRequest>>,
    ) -> Result<Response<Answers>, Status> {
        let mut incoming = request.into_inner();
        let (tx, rx) = mpsc::unbounded_channel::<Result<ProcessingResponse, Status>>();
        let me = Processor {
            backends: self.backends.clone(),
        };
        tokio::spawn(async move {
            let mut seen = Seen::default();
            let mut hang = false;
            while let Ok(Some(msg)) = incoming.message().await {
                let full_duplex = msg.protocol_config.is_some_and(|c| {
                    c.request_body_mode == BodySendMode::FullDuplexStreamed as i32
                });
                let answers = match msg.request {
                    Some(processing_request::Request::RequestHeaders(h)) => {
                        if header(&h, "x-die").is_some() {
                            std::process::exit(1);
                        }
                        hang = header(&h, "x-hang").is_some();
                        seen.full_duplex = full_duplex;
                        let whole = h.end_of_stream;
                        seen.head = h;
                        // In full duplex, the head is answered once the body has come.
                        if whole || !seen.full_duplex {
                            vec![me.head_answer(&seen)]
                        } else {
                            vec![]
                        }
                    }
                    Some(processing_request::Request::RequestBody(b)) => {
                        seen.body.extend(b.body);
                        match (b.end_of_stream, seen.full_duplex) {
                            (false, _) => vec![],
                            (true, true) => vec![me.head_answer(&seen), me.body_answer(&seen)],
                            (true, false) => vec![me.body_answer(&seen)],
                        }
                    }
                    Some(processing_request::Request::ResponseHeaders(_)) => {
                        let seen_by = HeaderMutation {
                            set_headers: vec![field("x-response-seen", "test-ext-proc")],
                            remove_headers: vec![],
                        };
                        let r = processing_response::Response::ResponseHeaders(HeadersResponse {
                            response: Some(CommonResponse {
                                header_mutation: Some(seen_by),
                                ..Default::default()
                            }),
                        });
                        vec![answer(r)]
                    }
                    _ => vec![],
                };
                if !hang {
                    for a in answers {
                        let _ = tx.send(Ok(a));
                    }
                }
            }
        });
        let answers =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|a| (a, rx)) },
            );
        Ok(Response::new(Box::pin(answers)))
    }
}
