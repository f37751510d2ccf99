//! Requests to upgrade the connection (WebSocket, and any other `Upgrade`: realtime audio and chat APIs use
//! them). The request passes the endpoint's access rules as any other, then goes to the replica on a
//! connection of its own, with its `Upgrade` and `Connection: upgrade` (which other requests lose as
//! hop-by-hop fields). When the replica agrees (`101`), the caller gets its answer and the two connections
//! are joined: bytes pass both ways until either side ends, and the request counts as in flight until then.
//! Any other answer is passed on as usual, and the caller's connection goes on with its next request.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

use super::{InFlight, Reply, ReplyBody};

/// The protocol a request asks to upgrade to: its `Upgrade`, when its `Connection` names `upgrade`.
pub(super) fn asked(headers: &HeaderMap) -> Option<HeaderValue> {
    let named = headers
        .get_all(header::CONNECTION)
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
        .any(|w| w.trim_ascii().eq_ignore_ascii_case(b"upgrade"));
    named
        .then(|| headers.get(header::UPGRADE).cloned())
        .flatten()
}

/// Puts the ask back on the request the replica gets (its hop-by-hop fields were taken off).
pub(super) fn ask(headers: &mut HeaderMap, protocol: HeaderValue) {
    headers.insert(header::UPGRADE, protocol);
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
}

/// The replica agreed: the caller gets its `101` (its fields, `Upgrade` and `Connection` with them), and
/// once both connections have switched, bytes pass between them; `guard` counts the request in flight until
/// then.
pub(super) fn join(
    caller: OnUpgrade,
    mut resp: hyper::Response<Incoming>,
    guard: InFlight,
) -> Reply {
    let replica = hyper::upgrade::on(&mut resp);
    tokio::spawn(async move {
        let _guard = guard;
        match tokio::try_join!(caller, replica) {
            Ok((caller, replica)) => {
                let (mut caller, mut replica) = (TokioIo::new(caller), TokioIo::new(replica));
                if let Err(e) = tokio::io::copy_bidirectional(&mut caller, &mut replica).await {
                    tracing::debug!(error = %e, "upgraded connection ended");
                }
            }
            Err(e) => tracing::debug!(error = %e, "a connection did not switch protocols"),
        }
    });
    let (parts, _) = resp.into_parts();
    let mut answer = Reply::new(ReplyBody::Right(axum::body::Body::empty()));
    *answer.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *answer.headers_mut() = parts.headers;
    answer
}
