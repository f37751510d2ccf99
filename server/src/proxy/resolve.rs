//! Which endpoint a request is for, and the path and query its replica gets: by custom domain (the route's
//! domain and path prefix) or under `/endpoints/{namespace}/{name}/`, with any dot segment refused first.
//! Both paths resolve by these rules.

use std::sync::Arc;

use axum::http::uri::PathAndQuery;
use axum::http::Uri;

use super::Proxy;
use crate::error::ApiError;
use crate::routing::{bare_host, is_server_host, Route, RouteTable};

/// The endpoint a request for `host` and `path` is for by its custom domain, and the rest of the path
/// after the route's prefix (see [`send_target`]).
fn by_host_route<'t, 'p>(
    table: &'t RouteTable,
    proxy: &Proxy,
    host: Option<&str>,
    path: &'p str,
) -> Option<(&'t Arc<Route>, &'p str)> {
    if !table.has_domains() {
        return None;
    }
    let host = bare_host(host.unwrap_or(""));
    if is_server_host(&host, &proxy.routing.public_host) {
        return None;
    }
    table.by_host(&host, path)
}

/// The endpoint in `table` a request for `host` and `path` is for (by custom domain, or under
/// `/endpoints/`), and the rest of the path (see [`send_target`]); `None` for a request that is not for an
/// endpoint.
pub(super) fn endpoint_route<'t, 'p>(
    table: &'t RouteTable,
    proxy: &Proxy,
    host: Option<&str>,
    path: &'p str,
) -> Option<Result<(&'t Arc<Route>, &'p str), ApiError>> {
    let by_host = by_host_route(table, proxy, host, path);
    let by_path = path.strip_prefix("/endpoints/");
    if by_host.is_none() && by_path.is_none() {
        return None;
    }
    if has_dot_segment(path) {
        return Some(Err(ApiError::BadRequest(
            "the request path has a `.` or `..` segment (perhaps percent-encoded); send it normalized"
                .into(),
        )));
    }
    match (by_host, by_path) {
        (Some(found), _) => Some(Ok(found)),
        (None, Some(path)) => Some(by_path_route(table, path)),
        (None, None) => None,
    }
}

/// The path and query to send on: `rest` (the end of the request's path after the endpoint's part of it,
/// empty or from a `/`) and the request's query. Made in one piece, as the end of the request's own.
pub(super) fn send_target(uri: &Uri, rest: &str) -> Result<PathAndQuery, ApiError> {
    let made = match (rest.is_empty(), uri.query()) {
        (true, None) => Ok(PathAndQuery::from_static("/")),
        (true, Some(q)) => PathAndQuery::try_from(format!("/?{q}")),
        (false, query) => {
            let whole = uri.path_and_query().map_or("", PathAndQuery::as_str);
            let tail = rest.len() + query.map_or(0, |q| q.len() + 1);
            match whole.get(whole.len().saturating_sub(tail)..) {
                Some(end) if end.len() == tail && end.starts_with(rest) => {
                    PathAndQuery::try_from(end)
                }
                // A path the URI spells otherwise than it reads it back (an empty one): made anew.
                _ => PathAndQuery::try_from(match query {
                    Some(q) => format!("{rest}?{q}"),
                    None => rest.to_string(),
                }),
            }
        }
    };
    made.map_err(|_| ApiError::BadRequest("invalid request path".into()))
}

/// What the bytes at `at` of a path stand for, for [`has_dot_segment`].
enum PathByte {
    Dot,
    /// The end of a segment: `/`, `\`, `;` (parameters follow), `%2F`, `%5C`, or the end of the path.
    End,
    Other,
}

/// The meaning of the bytes at `at` and how many they are: a `.` (also `%2E`), a segment's end, or other.
fn path_byte(bytes: &[u8], at: usize) -> (PathByte, usize) {
    match bytes.get(at) {
        None | Some(b'/' | b'\\' | b';') => (PathByte::End, 1),
        Some(b'.') => (PathByte::Dot, 1),
        Some(b'%') => match bytes.get(at + 1..at + 3) {
            Some([b'2', b'e' | b'E']) => (PathByte::Dot, 3),
            Some([b'2', b'f' | b'F'] | [b'5', b'c' | b'C']) => (PathByte::End, 3),
            _ => (PathByte::Other, 1),
        },
        Some(_) => (PathByte::Other, 1),
    }
}

/// Whether a path has a `.` or `..` segment that a server along the way may resolve: also percent-encoded
/// (`%2e%2e`, `.%2E`), between backslashes or encoded slashes (`%2f`, `%5c`), or before parameters (`..;x`).
/// One pass over the bytes, nothing allocated: it runs on every request for an endpoint.
fn has_dot_segment(path: &str) -> bool {
    let bytes = path.as_bytes();
    let (mut at, mut dots, mut only_dots) = (0, 0u32, true);
    while at <= bytes.len() {
        let (byte, width) = path_byte(bytes, at);
        match byte {
            PathByte::Dot => dots += 1,
            PathByte::Other => only_dots = false,
            PathByte::End if only_dots && (dots == 1 || dots == 2) => return true,
            PathByte::End => (dots, only_dots) = (0, true),
        }
        at += width;
    }
    false
}

/// The endpoint of `{namespace}/{name}/{rest…}` (the path after `/endpoints/`), and the rest of the path:
/// `/{rest…}`, or empty when the path ends at the name (see [`send_target`]).
fn by_path_route<'t, 'p>(
    table: &'t RouteTable,
    path: &'p str,
) -> Result<(&'t Arc<Route>, &'p str), ApiError> {
    let (ns, after) = path.split_once('/').unwrap_or((path, ""));
    let (name, rest) = match after.find('/') {
        Some(at) => after.split_at(at),
        None => (after, ""),
    };
    let route = table.get(ns, name);
    route
        .map(|r| (r, rest))
        .ok_or_else(|| ApiError::NotFound(format!("no endpoint {name:?} in namespace {ns:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_segments_are_found_in_every_spelling() {
        for bad in [
            "/endpoints/ns/ep/../../v2/endpoint/carol",
            "/endpoints/ns/ep/..",
            "/endpoints/ns/ep/.",
            "/endpoints/ns/ep/./embed",
            "/endpoints/ns/../ep/embed",
            "/endpoints/ns/ep/%2e%2e/x",
            "/endpoints/ns/ep/%2E%2E/x",
            "/endpoints/ns/ep/%2E./x",
            "/endpoints/ns/ep/.%2e",
            "/endpoints/ns/ep/%2e",
            "/endpoints/ns/ep/x%2f..%2fy",
            "/endpoints/ns/ep/..%2F..%2Fv2",
            "/endpoints/ns/ep/..%5cx",
            "/endpoints/ns/ep/..\\x",
            "/endpoints/ns/ep/..;x/y",
            "/emb/../../admin",
            "..",
        ] {
            assert!(has_dot_segment(bad), "{bad}");
        }
        for good in [
            "/endpoints/ns/ep/embed",
            "/endpoints/ns/ep/",
            "/endpoints/ns/ep//x",
            "/endpoints/ns/ep/.well-known/x",
            "/endpoints/ns/ep/...",
            "/endpoints/ns/ep/a..b",
            "/endpoints/ns/ep/..a",
            "/endpoints/ns/ep/v1.0/model",
            "/endpoints/ns/ep/%2e%2e%2e",
            "/endpoints/ns/ep/%2",
            "/endpoints/ns/ep/x%",
            "/endpoints/ns/ep/%41.",
            "",
            "/",
        ] {
            assert!(!has_dot_segment(good), "{good}");
        }
    }

    /// A route for `ns`/`name`, public, with no replica.
    fn route(ns: &str, name: &str) -> Arc<Route> {
        Arc::new(Route::bare(ns, name, Default::default()))
    }

    #[test]
    fn the_target_is_the_rest_of_the_path_and_the_query() {
        let table = RouteTable::new(vec![route("ns", "ep")]);
        let target = |uri: &str| {
            let uri: Uri = uri.parse().expect("uri");
            let path = uri
                .path()
                .strip_prefix("/endpoints/")
                .expect("an endpoint path");
            let (route, rest) = by_path_route(&table, path).expect("routed");
            assert_eq!((&route.namespace[..], &route.name[..]), ("ns", "ep"));
            send_target(&uri, rest)
                .expect("a target")
                .as_str()
                .to_string()
        };
        for (uri, sent) in [
            (
                "/endpoints/ns/ep/v1/chat?stream=1&x=%2F",
                "/v1/chat?stream=1&x=%2F",
            ),
            ("/endpoints/ns/ep/v1/chat", "/v1/chat"),
            ("/endpoints/ns/ep/", "/"),
            ("/endpoints/ns/ep", "/"),
            ("/endpoints/ns/ep?q=1", "/?q=1"),
            ("/endpoints/ns/ep/a?", "/a?"),
            (
                "http://models.example.com/endpoints/ns/ep/a//b?q",
                "/a//b?q",
            ),
        ] {
            assert_eq!(target(uri), sent, "{uri}");
        }
        for missing in ["ns/other/x", "other/ep", "ns", ""] {
            let Err(ApiError::NotFound(_)) = by_path_route(&table, missing) else {
                panic!("{missing:?} is no endpoint");
            };
        }
        // By custom domain: the rest after the route's prefix, and the query.
        let uri: Uri = "http://models.example.com/emb/v1?x=1".parse().expect("uri");
        assert_eq!(send_target(&uri, "/v1").expect("target"), "/v1?x=1");
        assert_eq!(send_target(&uri, "").expect("target"), "/?x=1");
    }
}
