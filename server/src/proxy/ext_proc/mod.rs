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
    /// Most bytes of a body the router may send back (the proxy's bound on a body read whole).
    pub body_limit: usize,
}

/// The request as the router may change it: the head the replica is to get, and its body when the proxy
/// holds it whole (`None`: a body larger than that, which the router is not shown and goes on as it comes).
pub(super) struct Outgoing<'a> {
    pub method: &'a mut Method,
    pub path: &'a mut PathAndQuery,
    /// The caller's `Host`, as the router's `:authority`.
    pub authority: &'a str,
    pub headers: &'a mut HeaderMap,
    pub body: Option<&'a mut Bytes>,
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
        // No keepalive pings: gRPC servers in Go (the endpoint picker's) answer pings more often than every
        // 5 minutes with GOAWAY. Each wait on the router has its deadline, and a failed connection is made
        // again at the next request.
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

/// Asks the router at `addr` about the request `out`, applying what it changes. Returns what it said, and
/// the stream for the response's head.
pub(super) async fn ask(
    addr: SocketAddr,
    settings: Settings,
    mut out: Outgoing<'_>,
) -> Result<(Told, Stream), Failed> {
    let deadline = Instant::now() + settings.timeout;
    // A body the router is not shown: the head says one follows, and no body is asked for.
    let mode = if out.body.is_some() {
        settings.body
    } else {
        ExtProcBody::None
    };
    let body = out.body.as_deref().cloned().unwrap_or_default();
    let body_now = mode == ExtProcBody::FullDuplexStreamed && !body.is_empty();
    let head = wire::request_headers(
        out.method,
        out.path.as_str(),
        out.authority,
        out.headers,
        out.body.is_some() && body.is_empty(),
        mode,
    );
    // Everything this side has to say goes out before the stream's own answer is awaited: a picker in
    // full-duplex mode answers the head only once the body has come.
    let mut first = vec![head];
    if body_now {
        first.extend(wire::request_body(&body));
    }
    let mut stream = open(addr, settings, first, deadline).await?;
    let mut awaited = Awaited {
        headers: true,
        body: body_now,
        body_sent: body_now,
        streamed: None,
        destination: None,
    };
    while awaited.headers || awaited.body {
        let answer = next(&mut stream.from, deadline).await?;
        if let Some(d) = wire::destination_in(answer.dynamic_metadata.as_ref()) {
            awaited.destination = Some(d);
        }
        let body_mode = wire::body_override(&answer).unwrap_or(mode);
        stream.skip_response |= wire::skips_response(&answer);
        match answer.response {
            Some(Answer::RequestHeaders(h)) if awaited.headers => {
                awaited.headers = false;
                let replaced = h.response.as_ref().map(|c| c.status)
                    == Some(ResponseStatus::ContinueAndReplace as i32);
                apply(h.response, &mut out, &mut awaited, settings.body_limit)?;
                // A body the router asks for now (buffered, or a mode it switched to).
                let wanted = body_mode != ExtProcBody::None && !replaced && out.body.is_some();
                if wanted && !awaited.body_sent && !body.is_empty() {
                    stream.send(wire::request_body(&body));
                    awaited.body_sent = true;
                    awaited.body = true;
                }
            }
            Some(Answer::RequestBody(b)) if awaited.body => {
                awaited.body = !apply(b.response, &mut out, &mut awaited, settings.body_limit)?;
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

/// Opens a stream to the router at `addr` with `first` on its way, by `deadline`.
async fn open(
    addr: SocketAddr,
    settings: Settings,
    first: Vec<ext::ProcessingRequest>,
    deadline: Instant,
) -> Result<Stream, Failed> {
    let (to, queued) = mpsc::unbounded_channel();
    for m in first {
        let _ = to.send(m);
    }
    let outgoing =
        futures_util::stream::unfold(
            queued,
            |mut q| async move { q.recv().await.map(|m| (m, q)) },
        );
    let mut client = ExternalProcessorClient::new(channel(addr, settings.timeout));
    match timeout_at(deadline, client.process(outgoing)).await {
        Err(_) => Err(Failed::Timeout),
        Ok(Err(status)) => {
            let why = format!("the router did not take the stream: {}", status.message());
            Err(Failed::Broken(why))
        }
        Ok(Ok(r)) => Ok(Stream {
            to,
            from: r.into_inner(),
            timeout: settings.timeout,
            skip_response: false,
        }),
    }
}

/// Applies a router's common answer to the request: its header changes (noting a destination among them)
/// and its body (up to `limit` bytes). Returns whether the body is whole (a body sent back in pieces is, at
/// its last).
fn apply(
    common: Option<ext::CommonResponse>,
    out: &mut Outgoing<'_>,
    awaited: &mut Awaited,
    limit: usize,
) -> Result<bool, Failed> {
    let Some(c) = common else { return Ok(true) };
    if let Some(m) = &c.header_mutation {
        let mut named = m.set_headers.iter().filter_map(|s| s.header.as_ref());
        if let Some(d) = named.rfind(|h| h.key.eq_ignore_ascii_case(DESTINATION)) {
            awaited.destination = Some(String::from_utf8_lossy(wire::value_of(d)).into_owned());
        }
        let target = mutate::Target {
            method: out.method,
            path: out.path,
        };
        mutate::apply(m, out.headers, Message::Request, Some(target));
    }
    // A body the router was not shown is not its to change.
    let Some(body) = out.body.as_deref_mut() else {
        return Ok(true);
    };
    let too_large = || Failed::Broken(format!("the router sent a body over {limit} bytes"));
    match c.body_mutation.and_then(|b| b.mutation) {
        Some(Mutation::Body(b)) if b.len() > limit => return Err(too_large()),
        Some(Mutation::Body(b)) => *body = Bytes::from(b),
        Some(Mutation::ClearBody(true)) => *body = Bytes::new(),
        Some(Mutation::StreamedResponse(part)) => {
            let pieces = awaited.streamed.get_or_insert_with(Vec::new);
            if pieces.len() + part.body.len() > limit {
                return Err(too_large());
            }
            pieces.extend(part.body);
            if !part.end_of_stream {
                return Ok(false);
            }
            *body = Bytes::from(awaited.streamed.take().unwrap_or_default());
        }
        _ => {}
    }
    Ok(true)
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
    /// Queues `messages` on the stream.
    fn send(&self, messages: Vec<ext::ProcessingRequest>) {
        for m in messages {
            let _ = self.to.send(m);
        }
    }

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
