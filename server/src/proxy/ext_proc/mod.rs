//! An endpoint's `extProc` custom router: Envoy's external processing protocol (`envoy.service.ext_proc.v3`,
//! gRPC), as the Gateway API Inference Extension's endpoint picker speaks it. For each request the proxy
//! opens one stream to the router and sends the request's head as the replica would get it (and its body,
//! as the endpoint's mode says); the router answers with changes to the head and body, an immediate answer,
//! and the replica to send to ([`wire::DESTINATION`]). Once the replica has answered, its response head goes
//! on the same stream, for the router's accounting, and the router may change its fields; the response body
//! passes as it comes and is not sent.
//!
//! A router that does not answer within its time, fails the stream, or answers out of turn has failed the
//! request ([`Failed`]); the caller decides what then (see `proxy.ext_proc_fail_open`).

mod mutate;
mod wire;

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::uri::PathAndQuery;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use envoy_types::pb::envoy::service::ext_proc::v3 as ext;
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_client::ExternalProcessorClient;
use ext::body_mutation::Mutation;
use ext::common_response::ResponseStatus;
use ext::processing_response::Response as Answer;
use tokio::sync::mpsc;
use tokio::time::{timeout_at, Instant};
use tonic::transport::{Channel, Endpoint};

use super::forward::Message;
use crate::model::ExtProcBody;
pub(super) use wire::DESTINATION;

/// How a request's router is spoken to: the endpoint's settings over `[proxy]`'s.
#[derive(Debug, Clone, Copy)]
pub(super) struct Settings {
    pub timeout: Duration,
    pub fail_open: bool,
    pub body: ExtProcBody,
}

/// The request as the router may change it: the head the replica is to get, and its whole body.
pub(super) struct Asked<'a> {
    pub method: &'a mut Method,
    pub path: &'a mut PathAndQuery,
    /// The caller's `Host`, as the router's `:authority`.
    pub authority: &'a str,
    pub headers: &'a mut HeaderMap,
    pub body: &'a mut Bytes,
}

/// What the router said of a request.
pub(super) enum Told {
    /// Send it to the replica named (`ip:port`, or several comma-separated, to try in order).
    To(String),
    /// It named none.
    Nothing,
    /// Answer the caller with this, and send nothing on.
    Answer(Response),
}

/// Why a router failed a request.
#[derive(Debug)]
pub(super) enum Failed {
    /// No answer in time.
    Timeout,
    /// The stream could not be opened, failed or ended early, or the router answered out of turn.
    Broken(String),
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Timeout => f.write_str("no answer in time"),
            Failed::Broken(why) => f.write_str(why),
        }
    }
}

thread_local! {
    /// This thread's connections to routers, by address: each data-plane worker keeps its own (a
    /// channel's connection task runs on the runtime it was made on).
    static CHANNELS: RefCell<HashMap<SocketAddr, Channel>> = RefCell::new(HashMap::new());
}

/// Most routers a thread keeps connections to: past it, they are all let go (a router replaced has a new
/// address, and its old connection would otherwise stay).
const KEPT: usize = 64;

/// A connection (HTTP/2, made on first use, made again when it fails) to the router at `addr`.
fn channel(addr: SocketAddr, timeout: Duration) -> Channel {
    CHANNELS.with(|kept| {
        let mut kept = kept.borrow_mut();
        if let Some(c) = kept.get(&addr) {
            return c.clone();
        }
        if kept.len() >= KEPT {
            kept.clear();
        }
        let uri = axum::http::Uri::from_maybe_shared(format!("http://{addr}"))
            .unwrap_or_else(|_| axum::http::Uri::from_static("http://127.0.0.1"));
        let c = Endpoint::from(uri)
            .connect_timeout(timeout)
            .tcp_nodelay(true)
            .connect_lazy();
        kept.insert(addr, c.clone());
        c
    })
}

/// A request's stream to its router, kept for the response's head.
pub(super) struct Stream {
    to: mpsc::UnboundedSender<ext::ProcessingRequest>,
    from: tonic::Streaming<ext::ProcessingResponse>,
    timeout: Duration,
    /// The router said it wants no response head (`mode_override`).
    skip_response: bool,
}

/// The next answer on `from`, by `deadline`.
async fn next(
    from: &mut tonic::Streaming<ext::ProcessingResponse>,
    deadline: Instant,
) -> Result<ext::ProcessingResponse, Failed> {
    match timeout_at(deadline, from.message()).await {
        Err(_) => Err(Failed::Timeout),
        Ok(Err(status)) => Err(Failed::Broken(format!(
            "the router failed the stream: {}",
            status.message()
        ))),
        Ok(Ok(None)) => Err(Failed::Broken("the router ended the stream early".into())),
        Ok(Ok(Some(answer))) => Ok(answer),
    }
}

/// What the request phase is still waiting for.
struct Awaited {
    headers: bool,
    body: bool,
    /// The body sent (it is, at most, once).
    body_sent: bool,
    /// A body the router sends back in pieces (`streamed_response`), until its last.
    streamed: Option<Vec<u8>>,
    destination: Option<String>,
}

/// Asks the router at `addr` about the request `asked`, applying what it changes. Returns what it said, and
/// the stream for the response's head.
pub(super) async fn ask(
    addr: SocketAddr,
    settings: Settings,
    asked: Asked<'_>,
) -> Result<(Told, Stream), Failed> {
    let deadline = Instant::now() + settings.timeout;
    let (to, queued) = mpsc::unbounded_channel();
    let body_now = settings.body == ExtProcBody::FullDuplexStreamed && !asked.body.is_empty();
    let path = asked.path.as_str().to_string();
    let empty = asked.body.is_empty();
    let head = wire::request_headers(
        asked.method,
        &path,
        asked.authority,
        asked.headers,
        empty,
        settings.body,
    );
    // Everything this side has to say goes out before the stream's own answer is awaited: a picker in
    // full-duplex mode answers the head only once the body has come.
    let _ = to.send(head);
    if body_now {
        wire::request_body(asked.body).into_iter().for_each(|m| {
            let _ = to.send(m);
        });
    }
    let outgoing =
        futures_util::stream::unfold(
            queued,
            |mut q| async move { q.recv().await.map(|m| (m, q)) },
        );
    let mut client = ExternalProcessorClient::new(channel(addr, settings.timeout));
    let opened = match timeout_at(deadline, client.process(outgoing)).await {
        Err(_) => return Err(Failed::Timeout),
        Ok(Err(status)) => {
            let why = format!("the router did not take the stream: {}", status.message());
            return Err(Failed::Broken(why));
        }
        Ok(Ok(r)) => r.into_inner(),
    };
    let mut stream = Stream {
        to,
        from: opened,
        timeout: settings.timeout,
        skip_response: false,
    };
    let mut awaited = Awaited {
        headers: true,
        body: body_now,
        body_sent: body_now,
        streamed: None,
        destination: None,
    };
    let mut asked = asked;
    while awaited.headers || awaited.body {
        let answer = next(&mut stream.from, deadline).await?;
        if let Some(d) = wire::destination_in(answer.dynamic_metadata.as_ref()) {
            awaited.destination = Some(d);
        }
        let body_mode = wire::body_override(&answer).unwrap_or(settings.body);
        stream.skip_response |= wire::skips_response(&answer);
        match answer.response {
            Some(Answer::RequestHeaders(h)) if awaited.headers => {
                awaited.headers = false;
                let replaced = h.response.as_ref().map(|c| c.status)
                    == Some(ResponseStatus::ContinueAndReplace as i32);
                apply(h.response, &mut asked, &mut awaited);
                // A body the router asks for now (buffered, or a mode it switched to).
                let wanted = body_mode != ExtProcBody::None && !replaced;
                if wanted && !awaited.body_sent && !asked.body.is_empty() {
                    wire::request_body(asked.body).into_iter().for_each(|m| {
                        let _ = stream.to.send(m);
                    });
                    awaited.body_sent = true;
                    awaited.body = true;
                }
            }
            Some(Answer::RequestBody(b)) if awaited.body => {
                awaited.body = !apply(b.response, &mut asked, &mut awaited);
            }
            Some(Answer::ImmediateResponse(i)) => return Ok((Told::Answer(immediate(i)), stream)),
            _ => return Err(Failed::Broken("the router answered out of turn".into())),
        }
    }
    let told = match awaited.destination {
        Some(d) if !d.trim().is_empty() => Told::To(d),
        _ => Told::Nothing,
    };
    Ok((told, stream))
}

/// Applies a router's common answer to the request: its header changes (noting a destination among them)
/// and its body. Returns whether the body is whole (a body sent back in pieces is, at its last).
fn apply(
    common: Option<ext::CommonResponse>,
    asked: &mut Asked<'_>,
    awaited: &mut Awaited,
) -> bool {
    let Some(c) = common else { return true };
    if let Some(m) = &c.header_mutation {
        let mut named = m.set_headers.iter().filter_map(|s| s.header.as_ref());
        if let Some(d) = named.rfind(|h| h.key.eq_ignore_ascii_case(DESTINATION)) {
            awaited.destination = Some(String::from_utf8_lossy(wire::value_of(d)).into_owned());
        }
        let target = mutate::Target {
            method: asked.method,
            path: asked.path,
        };
        mutate::apply(m, asked.headers, Message::Request, Some(target));
    }
    match c.body_mutation.and_then(|b| b.mutation) {
        Some(Mutation::Body(b)) => *asked.body = Bytes::from(b),
        Some(Mutation::ClearBody(true)) => *asked.body = Bytes::new(),
        Some(Mutation::StreamedResponse(part)) => {
            awaited
                .streamed
                .get_or_insert_with(Vec::new)
                .extend(part.body);
            if !part.end_of_stream {
                return false;
            }
            *asked.body = Bytes::from(awaited.streamed.take().unwrap_or_default());
        }
        _ => {}
    }
    true
}

/// A router's immediate answer as the caller gets it (a status that is not one is 500, as in Envoy).
fn immediate(i: ext::ImmediateResponse) -> Response {
    let code = i.status.map_or(0, |s| s.code);
    let status = u16::try_from(code)
        .ok()
        .and_then(|c| StatusCode::from_u16(c).ok())
        .filter(|s| s.as_u16() >= 200)
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = Response::new(Body::from(i.body));
    *resp.status_mut() = status;
    if let Some(m) = &i.headers {
        mutate::apply(m, resp.headers_mut(), Message::Response, None);
    }
    resp
}

impl Stream {
    /// Sends the response's head (`status`, `headers`) and applies the router's changes to its fields; an
    /// immediate answer replaces the response (`Some`). Nothing is sent to a router that asked for no
    /// response head.
    pub(super) async fn response(
        mut self,
        status: StatusCode,
        headers: &mut HeaderMap,
    ) -> Result<Option<Response>, Failed> {
        if self.skip_response {
            return Ok(None);
        }
        let deadline = Instant::now() + self.timeout;
        if self
            .to
            .send(wire::response_headers(status, headers))
            .is_err()
        {
            return Err(Failed::Broken("the router's stream has ended".into()));
        }
        loop {
            match next(&mut self.from, deadline).await?.response {
                Some(Answer::ResponseHeaders(h)) => {
                    let change = h.response.and_then(|c| c.header_mutation);
                    if let Some(m) = &change {
                        mutate::apply(m, headers, Message::Response, None);
                    }
                    return Ok(None);
                }
                Some(Answer::ImmediateResponse(i)) => return Ok(Some(immediate(i))),
                // Late pieces of the request phase.
                Some(Answer::RequestBody(_)) | Some(Answer::RequestHeaders(_)) | None => {}
                Some(_) => return Err(Failed::Broken("the router answered out of turn".into())),
            }
        }
    }
}
