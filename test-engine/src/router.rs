//! `--router`: the test engine as a custom-router sidecar. The runtime announces the replicas with
//! `POST /_custom_router/set-backends {"backends": ["http://127.0.0.1:PORT", …]}`; every other request is
//! forwarded to them in turn, marked with `x-routed-by: test-router`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use serde::Deserialize;
use serde_json::json;

#[derive(Default)]
pub struct Backends {
    list: Mutex<Vec<String>>,
    next: AtomicUsize,
    announcements: AtomicUsize,
}

impl Backends {
    /// The replicas last announced.
    pub fn list(&self) -> Vec<String> {
        self.list
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

type Shared = (Arc<Backends>, Client<HttpConnector, Body>);

#[derive(Deserialize)]
struct SetBackends {
    backends: Vec<String>,
}

async fn set_backends(State((b, _)): State<Shared>, Json(body): Json<SetBackends>) -> Response {
    if body.backends.iter().any(|u| u.parse::<Uri>().is_err()) {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "backends must be URLs"})),
        )
            .into_response();
    }
    *b.list.lock().unwrap_or_else(PoisonError::into_inner) = body.backends;
    b.announcements.fetch_add(1, Ordering::SeqCst);
    StatusCode::NO_CONTENT.into_response()
}

async fn backends(State((b, _)): State<Shared>) -> Response {
    let list = b
        .list
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    Json(json!({"backends": list, "announcements": b.announcements.load(Ordering::SeqCst)}))
        .into_response()
}

async fn forward(State((b, client)): State<Shared>, req: Request) -> Response {
    let target = {
        let list = b.list.lock().unwrap_or_else(PoisonError::into_inner);
        if list.is_empty() {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"error": "no backends announced"})),
            )
                .into_response();
        }
        list[b.next.fetch_add(1, Ordering::Relaxed) % list.len()].clone()
    };
    let (mut parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let Ok(uri) = format!("{}{path}", target.trim_end_matches('/')).parse::<Uri>() else {
        return (
            StatusCode::BAD_GATEWAY,
            Json(json!({"error": "bad backend URL"})),
        )
            .into_response();
    };
    parts.uri = uri;
    parts.headers.remove(axum::http::header::HOST);
    match client.request(Request::from_parts(parts, body)).await {
        Ok(resp) => {
            let mut resp = resp.map(Body::new);
            resp.headers_mut()
                .insert("x-routed-by", HeaderValue::from_static("test-router"));
            resp
        }
        Err(e) => (
            StatusCode::BAD_GATEWAY,
            Json(json!({"error": e.to_string()})),
        )
            .into_response(),
    }
}

/// The sidecar's HTTP side: `/health`, and where the runtime announces the replicas to `announced`;
/// `forward_rest` on, every other request is forwarded to them in turn.
pub fn app(announced: Arc<Backends>, forward_rest: bool) -> Router {
    let client = Client::builder(hyper_util::rt::TokioExecutor::new()).build(HttpConnector::new());
    let app = Router::new()
        .route("/health", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/_custom_router/set-backends", post(set_backends))
        .route("/_custom_router/backends", get(backends));
    let app = if forward_rest {
        app.fallback(forward)
    } else {
        app
    };
    app.with_state((announced, client))
}
