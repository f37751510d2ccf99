//! The webhook receiving server: `POST /webhooks/<name>` routes to handlers, behind the hub's shared
//! secret (`X-Webhook-Secret`) and/or Standard Webhooks signatures, with a body cap, dedupe on
//! `webhook-id`, a landing page at `/` and `GET /health`.
//!
//! [`Receiver::builder`] registers handlers and checks; [`Receiver::router`] is the axum router (for
//! tests or for nesting in an application of one's own) and [`Receiver::serve`] runs it on a listener.
//! A request goes through, in order: the route and method, the shared secret (headers only), the body
//! cap, the signature (it covers the body), the JSON parse, then dedupe and the handler. Answers:
//!
//! | Case | Status | Body |
//! |---|---|---|
//! | `X-Webhook-Secret` missing / wrong | 401 / 403 | `{"error": "x-webhook-secret header not set."}` / `{"error": "Invalid webhook secret."}` |
//! | signature missing, stale or not matching | 401 | `{"error": "Invalid webhook signature: <why>"}` |
//! | body over the cap | 413 | `{"error": "…"}` |
//! | body not JSON | 400 | `{"error": "The payload is not valid JSON."}` |
//! | handler answered an object / nothing | 200 | that object / `{"ok": true}` ([`empty_answer`]) |
//! | handler failed (error, exit status, output not a JSON object) | 500 | `{"error": "handler failed"}` |
//! | `run:` command over its time limit (killed) | 504 | `{"error": "handler timed out"}` |
//! | a `webhook-id` already answered with a 2xx on this route | the same | the same (handler not run) |

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::{Json, Router};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use crate::crypto::constant_time_eq;
use crate::signing::{self as signature, SigningKey};

/// The default body cap.
pub const DEFAULT_MAX_BODY: usize = 1024 * 1024;
/// How long a `run:` command may take before it is killed.
pub const DEFAULT_RUN_TIMEOUT: Duration = Duration::from_secs(30);
/// Dedupe remembers at most this many `webhook-id`s…
pub const DEDUPE_CAPACITY: usize = 10_000;
/// The longest `webhook-id` remembered.
const MAX_ID: usize = 256;
/// The largest answer body remembered for a repeated delivery.
const MAX_REMEMBERED: usize = 16 * 1024;
/// …each for this long after it was first seen.
pub const DEDUPE_TTL: Duration = Duration::from_secs(10 * 60);
/// The header the hub's client reads its shared secret from.
pub const SECRET_HEADER: &str = "x-webhook-secret";
/// A `run:` command's output beyond this is a failure (the answer would be a body nobody wants).
const MAX_COMMAND_OUTPUT: usize = 1024 * 1024;

/// The 200 body of a handler that answered nothing: an empty `run:` output, an `append:`, a function
/// returning `None`. A JSON object so that every answer is one.
pub fn empty_answer() -> Value {
    json!({"ok": true})
}

/// What a library handler returns: an answer body, nothing (→ [`empty_answer`]), or an error (logged,
/// answered with 500 `{"error": "handler failed"}`).
pub type HandlerResult = Result<Option<Value>, BoxError>;
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
type HandlerFuture = Pin<Box<dyn Future<Output = HandlerResult> + Send>>;
type HandlerFn = dyn Fn(Value) -> HandlerFuture + Send + Sync;

/// Why a receiver could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReceiverError {
    #[error(
        "invalid route {0:?}: a name ([A-Za-z0-9_-]+) or a path of such names starting with `/`"
    )]
    InvalidRoute(String),
    #[error("two handlers for the route {0}")]
    DuplicateRoute(String),
    #[error("no handler registered")]
    NoHandlers,
    #[error("invalid action {0:?}: `run:COMMAND` or `append:FILE`")]
    InvalidAction(String),
}

/// Where a handler answers: the part of the path after `/webhooks/`. Made from a name (`hello`) or an
/// explicit path (`/say_hello`, `/team/deploy`), as the hub's client does.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Route(String);

impl Route {
    pub fn parse(text: &str) -> Result<Route, ReceiverError> {
        let invalid = || ReceiverError::InvalidRoute(text.to_string());
        let rest = match text.strip_prefix('/') {
            Some(path) => path,
            None if text.contains('/') => return Err(invalid()),
            None => text,
        };
        let segment_ok = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        };
        if rest.split('/').all(segment_ok) {
            Ok(Route(rest.to_string()))
        } else {
            Err(invalid())
        }
    }

    /// The request path: `/webhooks/<route>`.
    pub fn path(&self) -> String {
        format!("/webhooks/{}", self.0)
    }
}

/// What a route does with a payload.
#[derive(Clone)]
pub enum Action {
    /// An async function of the parsed payload (library use).
    Function(Arc<HandlerFn>),
    /// `run:COMMAND`: `sh -c COMMAND` with the raw body on stdin; a JSON object on stdout is the answer.
    Run(String),
    /// `append:FILE`: the payload as one compact JSON line at the end of FILE (created if missing).
    Append(PathBuf),
}

impl Action {
    /// A handler from an async function: `Action::function(|payload| async move { Ok(None) })`.
    pub fn function<F, Fut>(f: F) -> Action
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        Action::Function(Arc::new(move |payload| Box::pin(f(payload))))
    }

    /// How the landing page and the start-up log show the action.
    pub fn describe(&self) -> String {
        match self {
            Action::Function(_) => "function".to_string(),
            Action::Run(command) => format!("run: {command}"),
            Action::Append(path) => format!("append: {}", path.display()),
        }
    }
}

impl std::fmt::Debug for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

/// The command line's form: `run:COMMAND` or `append:FILE`.
impl FromStr for Action {
    type Err = ReceiverError;

    fn from_str(text: &str) -> Result<Action, ReceiverError> {
        let invalid = || ReceiverError::InvalidAction(text.to_string());
        match text.split_once(':') {
            Some(("run", command)) if !command.trim().is_empty() => Ok(Action::Run(command.into())),
            Some(("append", file)) if !file.is_empty() => Ok(Action::Append(file.into())),
            _ => Err(invalid()),
        }
    }
}

/// Settings of a [`Receiver`]; see [`Receiver::builder`].
pub struct ReceiverBuilder {
    secret: Option<String>,
    signing_keys: Vec<SigningKey>,
    handlers: Vec<(String, Action)>,
    max_body: usize,
    landing_page: Option<String>,
    run_timeout: Duration,
}

impl ReceiverBuilder {
    /// The shared secret every request must carry in `X-Webhook-Secret` (an empty one counts as none).
    pub fn secret(mut self, secret: Option<String>) -> Self {
        self.secret = secret.filter(|s| !s.is_empty());
        self
    }

    /// A Standard Webhooks signing key every request must be signed with. May be given more than once:
    /// while a secret is rotated, a message signed by any of the keys passes.
    pub fn signing_secret(mut self, key: Option<SigningKey>) -> Self {
        self.signing_keys.extend(key);
        self
    }

    /// A handler for `POST /webhooks/<route>`; `route` is a name or an explicit path (`/say_hello`).
    pub fn handler(mut self, route: impl Into<String>, action: Action) -> Self {
        self.handlers.push((route.into(), action));
        self
    }

    /// The largest body accepted (default [`DEFAULT_MAX_BODY`]); larger ones get 413.
    pub fn max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// HTML served at `/` instead of the generated instructions.
    pub fn landing_page(mut self, html: Option<String>) -> Self {
        self.landing_page = html;
        self
    }

    /// How long a `run:` command may take (default [`DEFAULT_RUN_TIMEOUT`]).
    pub fn run_timeout(mut self, timeout: Duration) -> Self {
        self.run_timeout = timeout;
        self
    }

    pub fn build(self) -> Result<Receiver, ReceiverError> {
        if self.handlers.is_empty() {
            return Err(ReceiverError::NoHandlers);
        }
        // Two routes appending to one file share its lock, so their lines cannot interleave either.
        let mut file_locks: HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>> = HashMap::new();
        let mut handlers: Vec<Handler> = Vec::new();
        for (text, action) in self.handlers {
            let route = Route::parse(&text)?;
            if handlers.iter().any(|h| h.route == route) {
                return Err(ReceiverError::DuplicateRoute(route.path()));
            }
            let append_lock = match &action {
                Action::Append(path) => {
                    let key = std::path::absolute(path).unwrap_or_else(|_| path.clone());
                    Some(file_locks.entry(key).or_default().clone())
                }
                _ => None,
            };
            handlers.push(Handler {
                route,
                action,
                append_lock,
            });
        }
        let inner = Inner {
            secret_digest: self.secret.map(|s| Sha256::digest(s.as_bytes()).into()),
            signing_keys: self.signing_keys,
            handlers,
            max_body: self.max_body,
            landing_page: self.landing_page,
            run_timeout: self.run_timeout,
            dedupe: Mutex::new(Dedupe::default()),
        };
        if inner.is_open() {
            tracing::warn!(
                "no secret and no signing secret set: the webhook routes are open to everyone"
            );
        }
        Ok(Receiver(Arc::new(inner)))
    }
}

/// A webhook receiving server; cheap to clone.
#[derive(Clone)]
pub struct Receiver(Arc<Inner>);

struct Inner {
    /// SHA-256 of the shared secret: comparing digests keeps the secret's length from leaking.
    secret_digest: Option<[u8; 32]>,
    signing_keys: Vec<SigningKey>,
    handlers: Vec<Handler>,
    max_body: usize,
    landing_page: Option<String>,
    run_timeout: Duration,
    dedupe: Mutex<Dedupe>,
}

struct Handler {
    route: Route,
    action: Action,
    /// The file's lock, for `append:`.
    append_lock: Option<Arc<tokio::sync::Mutex<()>>>,
}

impl Inner {
    fn is_open(&self) -> bool {
        self.secret_digest.is_none() && self.signing_keys.is_empty()
    }
}

/// An answer, as sent and as remembered for a repeated `webhook-id`.
#[derive(Debug, Clone, PartialEq)]
struct Answer {
    status: StatusCode,
    body: Value,
}

impl Answer {
    /// What a repeated delivery gets: the same answer, but a large body is not kept (the status and
    /// `{"ok": true}` stand for it), so the memory stays bounded.
    fn remembered(&self) -> Answer {
        let small = serde_json::to_vec(&self.body).is_ok_and(|b| b.len() <= MAX_REMEMBERED);
        match small {
            true => self.clone(),
            false => Answer {
                status: self.status,
                body: serde_json::json!({"ok": true}),
            },
        }
    }

    fn ok(body: Value) -> Answer {
        Answer {
            status: StatusCode::OK,
            body,
        }
    }

    fn error(status: StatusCode, message: impl Into<String>) -> Answer {
        Answer {
            status,
            body: json!({"error": message.into()}),
        }
    }

    fn failed() -> Answer {
        Answer::error(StatusCode::INTERNAL_SERVER_ERROR, "handler failed")
    }
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}

impl Receiver {
    pub fn builder() -> ReceiverBuilder {
        ReceiverBuilder {
            secret: None,
            signing_keys: Vec::new(),
            handlers: Vec::new(),
            max_body: DEFAULT_MAX_BODY,
            landing_page: None,
            run_timeout: DEFAULT_RUN_TIMEOUT,
        }
    }

    /// Neither a secret nor a signing key: anyone can call the routes.
    pub fn is_open(&self) -> bool {
        self.0.is_open()
    }

    /// The routes' paths and their actions, in registration order.
    pub fn routes(&self) -> Vec<(String, String)> {
        self.0
            .handlers
            .iter()
            .map(|h| (h.route.path(), h.action.describe()))
            .collect()
    }

    pub fn router(&self) -> Router {
        let mut router = Router::new()
            .route("/", only_get(get(landing).with_state(self.clone())))
            .route(
                "/health",
                only_get(get(|| async { Json(json!({"status": "ok"})) })),
            );
        for index in 0..self.0.handlers.len() {
            let receiver = self.clone();
            let post_route = post(move |headers: HeaderMap, body: Body| async move {
                receiver.receive(index, headers, body).await
            });
            router = router.route(
                &self.0.handlers[index].route.path(),
                post_route.fallback(method_not_allowed("POST")),
            );
        }
        router
            .fallback(|| async { Answer::error(StatusCode::NOT_FOUND, "Not found.") })
            .layer(middleware::from_fn(log_request))
    }

    /// Serves [`Receiver::router`] on `listener` until `shutdown` completes, then lets requests in
    /// flight finish.
    pub async fn serve(
        &self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        axum::serve(listener, self.router())
            .with_graceful_shutdown(shutdown)
            .await
    }

    async fn receive(&self, index: usize, headers: HeaderMap, body: Body) -> Answer {
        let inner = &self.0;
        if let Some(expected) = &inner.secret_digest {
            let Some(given) = headers.get(SECRET_HEADER) else {
                return Answer::error(StatusCode::UNAUTHORIZED, "x-webhook-secret header not set.");
            };
            let given: [u8; 32] = Sha256::digest(given.as_bytes()).into();
            if !constant_time_eq(&given, expected) {
                return Answer::error(StatusCode::FORBIDDEN, "Invalid webhook secret.");
            }
        }
        let too_large = || {
            Answer::error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("The payload is larger than {} bytes.", inner.max_body),
            )
        };
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|n| n > inner.max_body as u64) {
            return too_large();
        }
        let raw = match Limited::new(body, inner.max_body).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => return too_large(),
            Err(_) => {
                return Answer::error(
                    StatusCode::BAD_REQUEST,
                    "The request body could not be read.",
                )
            }
        };
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        if !inner.signing_keys.is_empty() {
            let checked = signature::verify(
                &inner.signing_keys,
                text("webhook-id"),
                text("webhook-timestamp"),
                text("webhook-signature"),
                &raw,
                chrono::Utc::now().timestamp(),
            );
            if let Err(why) = checked {
                return Answer::error(
                    StatusCode::UNAUTHORIZED,
                    format!("Invalid webhook signature: {why}."),
                );
            }
        }
        let Ok(payload) = serde_json::from_slice::<Value>(&raw) else {
            return Answer::error(StatusCode::BAD_REQUEST, "The payload is not valid JSON.");
        };
        // An id too long to be one is not remembered (memory stays bounded): the handler just runs.
        let Some(id) = text("webhook-id").filter(|id| id.len() <= MAX_ID) else {
            return self.dispatch(index, payload, raw, None).await;
        };
        // One slot per (route, id): one event delivered to two routes runs both handlers.
        let key = (index, id.to_string());
        let slot = {
            let mut dedupe = inner.dedupe.lock().unwrap_or_else(|p| p.into_inner());
            dedupe.slot(key, Instant::now())
        };
        // A duplicate waits here while the first one runs.
        let guard = slot.lock_owned().await;
        if let Some(answer) = guard.as_ref() {
            tracing::debug!(webhook_id = ?id, "repeated delivery: answered from memory");
            return answer.clone();
        }
        self.dispatch(index, payload, raw, Some(guard)).await
    }

    /// Runs the handler in a task of its own: a panicking handler becomes a 500, and a caller that goes
    /// away does not cut it short (a duplicate waiting on `remember` still gets its answer).
    async fn dispatch(
        &self,
        index: usize,
        payload: Value,
        raw: Bytes,
        remember: Option<tokio::sync::OwnedMutexGuard<Option<Answer>>>,
    ) -> Answer {
        let receiver = self.clone();
        let task = tokio::spawn(async move {
            let answer = receiver.execute(index, payload, raw).await;
            if let Some(mut slot) = remember {
                if answer.status.is_success() {
                    *slot = Some(answer.remembered());
                }
            }
            answer
        });
        match task.await {
            Ok(answer) => answer,
            Err(e) => {
                let route = self.0.handlers[index].route.path();
                tracing::error!(%route, error = %e, "handler panicked");
                Answer::failed()
            }
        }
    }

    async fn execute(&self, index: usize, payload: Value, raw: Bytes) -> Answer {
        let handler = &self.0.handlers[index];
        let route = handler.route.path();
        let outcome = match &handler.action {
            Action::Function(f) => f(payload).await.map_err(|e| e.to_string()),
            Action::Run(command) => match run_command(command, raw, self.0.run_timeout).await {
                Err(RunError::TimedOut) => {
                    tracing::warn!(%route, timeout = ?self.0.run_timeout, "handler timed out: killed");
                    return Answer::error(StatusCode::GATEWAY_TIMEOUT, "handler timed out");
                }
                other => other.map_err(|e| e.to_string()),
            },
            Action::Append(path) => {
                let lock = handler.append_lock.clone().unwrap_or_default();
                append_line(path.clone(), &lock, &payload)
                    .await
                    .map(|()| None)
                    .map_err(|e| format!("appending to {}: {e}", path.display()))
            }
        };
        match outcome {
            Ok(Some(body)) => Answer::ok(body),
            Ok(None) => Answer::ok(empty_answer()),
            Err(cause) => {
                tracing::warn!(%route, error = %cause, "handler failed");
                Answer::failed()
            }
        }
    }
}

/// Recently seen `webhook-id`s, oldest first, bounded by [`DEDUPE_CAPACITY`] and [`DEDUPE_TTL`].
#[derive(Default)]
struct Dedupe {
    slots: HashMap<(usize, String), Slot>,
    order: VecDeque<((usize, String), Instant)>,
}

/// The answer to one id: empty while the first delivery runs (its task holds the lock) or after it
/// failed (the next delivery runs the handler again).
type Slot = Arc<tokio::sync::Mutex<Option<Answer>>>;

impl Dedupe {
    fn slot(&mut self, key: (usize, String), now: Instant) -> Slot {
        while let Some((_, seen)) = self.order.front() {
            if now.duration_since(*seen) < DEDUPE_TTL && self.order.len() < DEDUPE_CAPACITY {
                break;
            }
            if let Some((old, _)) = self.order.pop_front() {
                self.slots.remove(&old);
            }
        }
        if let Some(slot) = self.slots.get(&key) {
            return slot.clone();
        }
        let slot = Slot::default();
        self.slots.insert(key.clone(), slot.clone());
        self.order.push_back((key, now));
        slot
    }
}

#[derive(Debug, thiserror::Error)]
enum RunError {
    #[error("starting sh: {0}")]
    Spawn(std::io::Error),
    #[error("talking to the command: {0}")]
    Io(#[from] std::io::Error),
    #[error("the command exited with {0}")]
    Exit(std::process::ExitStatus),
    #[error("the command's output is not a JSON object")]
    NotAnObject,
    #[error("the command wrote more than {MAX_COMMAND_OUTPUT} bytes")]
    TooMuchOutput,
    #[error("timed out")]
    TimedOut,
}

/// `sh -c command` in a process group of its own, `input` on stdin; the JSON object it prints, or
/// nothing for an empty output. On timeout the whole group is killed.
async fn run_command(
    command: &str,
    input: Bytes,
    timeout: Duration,
) -> Result<Option<Value>, RunError> {
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(RunError::Spawn)?;
    let pid = child.id();
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let work = async {
        // Fed while the output is read, or a command echoing a large body would fill both pipes.
        let feed = async move {
            if let Some(mut stdin) = stdin {
                // A command need not read its input: a closed pipe is not a failure.
                let _ = stdin.write_all(&input).await;
            }
        };
        let read = async move {
            let mut out = Vec::new();
            if let Some(stdout) = stdout {
                let limit = MAX_COMMAND_OUTPUT as u64 + 1;
                stdout.take(limit).read_to_end(&mut out).await?;
            }
            Ok::<_, std::io::Error>(out)
        };
        let ((), out) = tokio::join!(feed, read);
        let out = out?;
        if out.len() > MAX_COMMAND_OUTPUT {
            return Err(RunError::TooMuchOutput);
        }
        let status = child.wait().await?;
        Ok((status, out))
    };
    let outcome = tokio::time::timeout(timeout, work).await;
    let (status, out) = match outcome {
        Ok(Ok(done)) => done,
        Ok(Err(e)) => {
            kill_group(pid);
            return Err(e);
        }
        Err(_) => {
            kill_group(pid);
            return Err(RunError::TimedOut);
        }
    };
    if !status.success() {
        return Err(RunError::Exit(status));
    }
    let text = String::from_utf8_lossy(&out);
    if text.trim().is_empty() {
        return Ok(None);
    }
    match serde_json::from_str::<Value>(&text) {
        Ok(body @ Value::Object(_)) => Ok(Some(body)),
        _ => Err(RunError::NotAnObject),
    }
}

fn kill_group(pid: Option<u32>) {
    let Some(pid) = pid.and_then(|p| libc::pid_t::try_from(p).ok()) else {
        return;
    };
    // Never 0 or 1: killpg(0) is our own group.
    if pid <= 1 {
        return;
    }
    // SAFETY: killpg has no memory effects; a group already gone answers ESRCH, ignored.
    unsafe {
        libc::killpg(pid, libc::SIGKILL);
    }
}

/// The payload as one compact line at the end of `path`; `lock` keeps concurrent lines whole.
async fn append_line(
    path: PathBuf,
    lock: &tokio::sync::Mutex<()>,
    payload: &Value,
) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(payload)?;
    line.push(b'\n');
    let _held = lock.lock().await;
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        file.write_all(&line)
    })
    .await
    .map_err(std::io::Error::other)?
}

/// A route that answers `method` and 405 to anything else.
fn only_get(route: MethodRouter) -> MethodRouter {
    route.fallback(method_not_allowed("GET"))
}

fn method_not_allowed(
    allowed: &'static str,
) -> impl Fn() -> std::future::Ready<Response> + Clone + Send + Sync + 'static {
    move || {
        let mut response =
            Answer::error(StatusCode::METHOD_NOT_ALLOWED, "Method not allowed.").into_response();
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static(allowed));
        std::future::ready(response)
    }
}

/// One line per request: route, status, `webhook-id`; never a header's secret.
async fn log_request(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let id = request
        .headers()
        .get("webhook-id")
        // Quoted and escaped: the id comes from outside.
        .map(|v| format!("{:?}", String::from_utf8_lossy(v.as_bytes())))
        .unwrap_or_else(|| "-".to_string());
    let response = next.run(request).await;
    tracing::info!(
        %method,
        route = ?path,
        status = response.status().as_u16(),
        webhook_id = %id,
        "webhook request"
    );
    response
}

async fn landing(
    axum::extract::State(receiver): axum::extract::State<Receiver>,
    headers: HeaderMap,
) -> Html<String> {
    if let Some(page) = &receiver.0.landing_page {
        return Html(page.clone());
    }
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("HOST:PORT");
    Html(landing_page(&receiver, host))
}

fn landing_page(receiver: &Receiver, host: &str) -> String {
    let inner = &receiver.0;
    let protection = match (inner.secret_digest.is_some(), !inner.signing_keys.is_empty()) {
        (true, true) => "Requests must carry the shared secret in <code>X-Webhook-Secret</code> and a valid Standard Webhooks signature.",
        (true, false) => "Requests must carry the shared secret in <code>X-Webhook-Secret</code>.",
        (false, true) => "Requests must carry a valid Standard Webhooks signature (<code>webhook-id</code>, <code>webhook-timestamp</code>, <code>webhook-signature</code>).",
        (false, false) => "<strong>No secret is set: these routes are open to everyone.</strong>",
    };
    let mut rows = String::new();
    let mut howto = String::new();
    for handler in &inner.handlers {
        let path = handler.route.path();
        let url = format!("http://{host}{path}");
        let name = handler.route.0.rsplit('/').next().unwrap_or("NAME");
        rows.push_str(&format!(
            "<tr><td>POST</td><td><code>{}</code></td><td><code>{}</code></td></tr>\n",
            escape(&path),
            escape(&handler.action.describe())
        ));
        let secret_arg = if inner.secret_digest.is_some() {
            ", secret=\"…\""
        } else {
            ""
        };
        howto.push_str(&format!(
            "<h3><code>{path}</code></h3>\n<pre>switchyard webhooks create --url {url} --watch user:{name} --domain repo</pre>\n\
             <pre>from huggingface_hub import create_webhook\n\
             create_webhook(url=\"{url}\", watched=[{{\"type\": \"user\", \"name\": \"{name}\"}}], domains=[\"repo\"]{secret_arg})</pre>\n",
            path = escape(&path),
            url = escape(&url),
            name = escape(name),
        ));
    }
    format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Webhook receiver</title>\n\
         <style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}td{{padding:.2em 1em}}pre{{background:#eee;padding:.5em;overflow-x:auto}}</style>\n\
         </head><body>\n<h1>Webhook receiver</h1>\n<p>{protection}</p>\n\
         <table><tr><th>Method</th><th>Route</th><th>Action</th></tr>\n{rows}</table>\n\
         <h2>Pointing a webhook here</h2>\n<p>Replace the user name with the user or organization to watch \
         (<code>org:NAME</code> for an organization).</p>\n{howto}</body></html>\n"
    )
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::http::Request;
    use tower::ServiceExt;

    use super::*;

    const SECRET: &str = "s3cret";

    fn echo() -> Action {
        Action::function(|payload| async move { Ok(Some(json!({"got": payload}))) })
    }

    /// A handler that counts its runs and takes a while, so duplicates overlap it.
    fn counting(runs: Arc<AtomicUsize>) -> Action {
        Action::function(move |_| {
            let runs = runs.clone();
            async move {
                let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
                Ok(Some(json!({"run": n})))
            }
        })
    }

    fn post(path: &str, headers: &[(&str, &str)], body: &str) -> Request<Body> {
        let mut request = Request::post(path).header("content-type", "application/json");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(Body::from(body.to_string())).expect("request")
    }

    async fn call(router: &Router, request: Request<Body>) -> (StatusCode, Value) {
        let response = router.clone().oneshot(request).await.expect("answer");
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (status, body)
    }

    fn with_secret() -> Router {
        Receiver::builder()
            .secret(Some(SECRET.into()))
            .handler("hello", echo())
            .build()
            .expect("receiver")
            .router()
    }

    #[tokio::test]
    async fn the_secret_check_answers_like_the_hubs_client() {
        let router = with_secret();
        let (status, body) = call(&router, post("/webhooks/hello", &[], "{}")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(body, json!({"error": "x-webhook-secret header not set."}));
        for wrong in ["nope", "s3cre", "s3cret!", ""] {
            let (status, body) = call(
                &router,
                post("/webhooks/hello", &[(SECRET_HEADER, wrong)], "{}"),
            )
            .await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{wrong:?}");
            assert_eq!(body, json!({"error": "Invalid webhook secret."}));
        }
        let (status, body) = call(
            &router,
            post(
                "/webhooks/hello",
                &[("X-Webhook-Secret", SECRET)],
                r#"{"a":1}"#,
            ),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body, json!({"got": {"a": 1}}));
    }

    #[tokio::test]
    async fn methods_paths_and_bodies_that_are_refused() {
        let router = with_secret();
        let get = Request::get("/webhooks/hello")
            .body(Body::empty())
            .expect("request");
        let response = router.clone().oneshot(get).await.expect("answer");
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(
            response.headers().get(header::ALLOW).expect("allow"),
            "POST"
        );
        let (status, body) = call(&router, post("/webhooks/other", &[], "{}")).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(body["error"].is_string());
        let (status, body) = call(
            &router,
            post("/webhooks/hello", &[(SECRET_HEADER, SECRET)], "not json"),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body, json!({"error": "The payload is not valid JSON."}));
        let health = Request::get("/health")
            .body(Body::empty())
            .expect("request");
        let (status, _) = call(&router, health).await;
        assert_eq!(status, StatusCode::OK);
    }

    fn signed(key: &SigningKey, id: &str, ts: i64, body: &str) -> Request<Body> {
        let signature = key.sign(id, ts, body.as_bytes());
        post(
            "/webhooks/hello",
            &[
                ("webhook-id", id),
                ("webhook-timestamp", &ts.to_string()),
                ("webhook-signature", &signature),
            ],
            body,
        )
    }

    #[tokio::test]
    async fn signatures_are_verified() {
        let key = SigningKey::parse(&SigningKey::generate()).expect("key");
        let router = Receiver::builder()
            .signing_secret(Some(key.clone()))
            .handler("hello", echo())
            .build()
            .expect("receiver")
            .router();
        let now = chrono::Utc::now().timestamp();
        let body = r#"{"event":{"action":"update"}}"#;
        let (status, answer) = call(&router, signed(&key, "msg_1", now, body)).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(answer["got"]["event"]["action"], "update");

        let other = SigningKey::parse(&SigningKey::generate()).expect("key");
        let (status, answer) = call(&router, signed(&other, "msg_2", now, body)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(
            answer,
            json!({"error": "Invalid webhook signature: no signature matches."})
        );

        let (status, answer) = call(&router, signed(&key, "msg_3", now - 600, body)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert!(answer["error"]
            .as_str()
            .is_some_and(|e| e.contains("five minutes")));

        let (status, answer) = call(&router, post("/webhooks/hello", &[], body)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert!(answer["error"]
            .as_str()
            .is_some_and(|e| e.contains("webhook-id header is missing")));

        // A changed body no longer matches.
        let mut tampered = signed(&key, "msg_4", now, body);
        *tampered.body_mut() = Body::from(r#"{"event":{"action":"delete"}}"#);
        let (status, _) = call(&router, tampered).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }

    #[tokio::test]
    async fn a_repeated_webhook_id_runs_the_handler_once_even_concurrently() {
        let runs = Arc::new(AtomicUsize::new(0));
        let router = Receiver::builder()
            .handler("hello", counting(runs.clone()))
            .handler("other", counting(runs.clone()))
            .build()
            .expect("receiver")
            .router();
        let id = [("webhook-id", "msg_same")];
        let (first, second) = tokio::join!(
            call(&router, post("/webhooks/hello", &id, "{}")),
            call(&router, post("/webhooks/hello", &id, "{}")),
        );
        assert_eq!(first, (StatusCode::OK, json!({"run": 1})));
        assert_eq!(second, first);
        let third = call(&router, post("/webhooks/hello", &id, "{}")).await;
        assert_eq!(third, first);
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        // Another id, another route, or no id at all: the handler runs.
        call(
            &router,
            post("/webhooks/hello", &[("webhook-id", "msg_new")], "{}"),
        )
        .await;
        call(&router, post("/webhooks/other", &id, "{}")).await;
        call(&router, post("/webhooks/hello", &[], "{}")).await;
        assert_eq!(runs.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn a_failed_answer_is_not_remembered() {
        let runs = Arc::new(AtomicUsize::new(0));
        let counter = runs.clone();
        let router = Receiver::builder()
            .handler(
                "flaky",
                Action::function(move |_| {
                    let n = counter.fetch_add(1, Ordering::SeqCst);
                    async move {
                        if n == 0 {
                            Err("first try fails".into())
                        } else {
                            Ok(None)
                        }
                    }
                }),
            )
            .build()
            .expect("receiver")
            .router();
        let id = [("webhook-id", "msg_retry")];
        let (status, body) = call(&router, post("/webhooks/flaky", &id, "{}")).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(body, json!({"error": "handler failed"}));
        for _ in 0..2 {
            let (status, body) = call(&router, post("/webhooks/flaky", &id, "{}")).await;
            assert_eq!((status, body), (StatusCode::OK, empty_answer()));
        }
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn dedupe_memory_is_bounded_in_count_and_time() {
        let mut dedupe = Dedupe::default();
        let start = Instant::now();
        for i in 0..DEDUPE_CAPACITY + 5 {
            dedupe.slot((0, i.to_string()), start);
        }
        assert_eq!(dedupe.slots.len(), DEDUPE_CAPACITY);
        assert!(!dedupe.slots.contains_key(&(0, "0".to_string())));
        dedupe.slot((0, "late".into()), start + DEDUPE_TTL);
        assert_eq!(dedupe.slots.len(), 1);
    }

    #[tokio::test]
    async fn a_body_over_the_cap_gets_413_and_runs_nothing() {
        let runs = Arc::new(AtomicUsize::new(0));
        let router = Receiver::builder()
            .max_body(16)
            .handler("hello", counting(runs.clone()))
            .build()
            .expect("receiver")
            .router();
        let big = format!(r#"{{"pad":"{}"}}"#, "x".repeat(64));
        let (status, body) = call(&router, post("/webhooks/hello", &[], &big)).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(body["error"].is_string());
        // Without a Content-Length (streamed), the cap still holds.
        let chunks =
            futures_util::stream::iter(vec![Ok::<_, std::io::Error>(Bytes::from(big.clone()))]);
        let streamed = Request::post("/webhooks/hello")
            .body(Body::from_stream(chunks))
            .expect("request");
        let (status, _) = call(&router, streamed).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        let (status, _) = call(&router, post("/webhooks/hello", &[], r#"{"a":1}"#)).await;
        assert_eq!(status, StatusCode::OK);
    }

    #[tokio::test]
    async fn append_writes_one_whole_line_per_request() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("events.jsonl");
        let router = Receiver::builder()
            .handler("a", Action::Append(file.clone()))
            .handler("/b/c", Action::Append(file.clone()))
            .build()
            .expect("receiver")
            .router();
        let pad = "y".repeat(20_000);
        let requests = (0..40).map(|i| {
            let path = if i % 2 == 0 {
                "/webhooks/a"
            } else {
                "/webhooks/b/c"
            };
            let body = format!("{{\n  \"n\": {i},\n  \"pad\": \"{pad}\"\n}}");
            let router = router.clone();
            async move { call(&router, post(path, &[], &body)).await }
        });
        for (status, body) in futures_util::future::join_all(requests).await {
            assert_eq!((status, body), (StatusCode::OK, empty_answer()));
        }
        let text = std::fs::read_to_string(&file).expect("file");
        let mut seen: Vec<i64> = text
            .lines()
            .map(|line| {
                let v: Value = serde_json::from_str(line).expect("a whole JSON line");
                assert_eq!(v["pad"].as_str().map(str::len), Some(20_000));
                v["n"].as_i64().expect("n")
            })
            .collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..40).collect::<Vec<_>>());
        assert!(text.ends_with('\n'));
    }

    fn run(command: &str) -> Router {
        Receiver::builder()
            .run_timeout(Duration::from_millis(500))
            .handler("cmd", Action::Run(command.into()))
            .build()
            .expect("receiver")
            .router()
    }

    #[tokio::test]
    async fn run_feeds_the_payload_and_answers_the_commands_json() {
        let body =
            r#"{"repo": {"type": "model"}, "pad": "PAD"}"#.replace("PAD", &"z".repeat(300_000));
        let (status, answer) = call(&run("cat"), post("/webhooks/cmd", &[], &body)).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(answer["repo"]["type"], "model");
        let (status, answer) = call(&run("true"), post("/webhooks/cmd", &[], "{}")).await;
        assert_eq!((status, answer), (StatusCode::OK, empty_answer()));
        // The command need not read its input.
        let (status, answer) = call(
            &run(r#"echo '{"done": true}'"#),
            post("/webhooks/cmd", &[], &body),
        )
        .await;
        assert_eq!((status, answer), (StatusCode::OK, json!({"done": true})));
    }

    #[tokio::test]
    async fn a_failing_command_answers_500_without_details() {
        for command in ["echo '{}' && exit 3", "echo not json", "echo '[1, 2]'"] {
            let (status, answer) = call(&run(command), post("/webhooks/cmd", &[], "{}")).await;
            assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{command}");
            assert_eq!(answer, json!({"error": "handler failed"}));
        }
        let (status, answer) = call(&run("sleep 10"), post("/webhooks/cmd", &[], "{}")).await;
        assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(answer, json!({"error": "handler timed out"}));
    }

    #[tokio::test]
    async fn the_landing_page_lists_the_routes_and_never_the_secret() {
        let receiver = Receiver::builder()
            .secret(Some(SECRET.into()))
            .handler("hello", Action::Append("/tmp/x.jsonl".into()))
            .handler("/say_hello", Action::Run("cat <&0".into()))
            .build()
            .expect("receiver");
        assert_eq!(
            receiver.routes(),
            vec![
                ("/webhooks/hello".into(), "append: /tmp/x.jsonl".into()),
                ("/webhooks/say_hello".into(), "run: cat <&0".into()),
            ]
        );
        let request = Request::get("/")
            .header("host", "example.test:9000")
            .body(Body::empty())
            .expect("request");
        let (status, page) = call(&receiver.router(), request).await;
        assert_eq!(status, StatusCode::OK);
        let page = page.as_str().expect("html").to_string();
        assert!(page.contains("/webhooks/hello"));
        assert!(page.contains("/webhooks/say_hello"));
        assert!(page.contains("run: cat &lt;&amp;0"));
        assert!(page.contains(
            "switchyard webhooks create --url http://example.test:9000/webhooks/hello --watch user:hello --domain repo"
        ));
        assert!(page.contains("create_webhook(url=\"http://example.test:9000/webhooks/say_hello\""));
        assert!(!page.contains(SECRET));
    }

    #[tokio::test]
    async fn a_custom_page_replaces_the_landing_page() {
        let router = Receiver::builder()
            .landing_page(Some("<h1>mine</h1>".into()))
            .handler("hello", echo())
            .build()
            .expect("receiver")
            .router();
        let request = Request::get("/").body(Body::empty()).expect("request");
        let (status, page) = call(&router, request).await;
        assert_eq!((status, page), (StatusCode::OK, json!("<h1>mine</h1>")));
    }

    #[test]
    fn routes_and_actions_are_parsed_and_duplicates_refused() {
        assert_eq!(
            Route::parse("hello").map(|r| r.path()),
            Ok("/webhooks/hello".into())
        );
        assert_eq!(
            Route::parse("/say_hello").map(|r| r.path()),
            Ok("/webhooks/say_hello".into())
        );
        for bad in ["", "/", "a b", "a/b", "/a//b", "{x}", "*rest", "é"] {
            assert!(Route::parse(bad).is_err(), "{bad:?}");
        }
        let duplicate = Receiver::builder()
            .handler("hello", echo())
            .handler("/hello", echo())
            .build();
        assert_eq!(
            duplicate.err(),
            Some(ReceiverError::DuplicateRoute("/webhooks/hello".into()))
        );
        assert_eq!(
            Receiver::builder().build().err(),
            Some(ReceiverError::NoHandlers)
        );
        assert!(matches!("run:cat".parse(), Ok(Action::Run(c)) if c == "cat"));
        assert!(matches!("append:a.jsonl".parse(), Ok(Action::Append(_))));
        for bad in ["cat", "run:", "append:", "exec:ls"] {
            assert!(bad.parse::<Action>().is_err(), "{bad:?}");
        }
    }
}
