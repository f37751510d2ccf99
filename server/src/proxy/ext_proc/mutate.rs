//! A router's header mutations applied to a message, within the forwarding rules: a field that stays
//! behind on its way (see [`forward::stays`]: hop-by-hop fields, `Host`, in a request the caller's token and
//! `X-Forwarded-For`) cannot be set or removed, nor `Content-Length`, which the proxy writes for the body it
//! sends. A request's `:path` may be changed, and its `:method` to one whose answer has the body a caller
//! asking the first would read (not `HEAD`, `CONNECT` or `TRACE`); other pseudo-headers are not. At most
//! [`MOST`] fields are set and [`MOST`] removed by one answer: a header map has a bound, and a message a
//! field count the edge would refuse from a caller.

use axum::http::header::CONTENT_LENGTH;
use axum::http::uri::PathAndQuery;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method};
use envoy_types::pb::envoy::config::core::v3::header_value_option::HeaderAppendAction;
use envoy_types::pb::envoy::config::core::v3::HeaderValueOption;
use envoy_types::pb::envoy::service::ext_proc::v3::HeaderMutation;

use super::super::forward::{self, Message};
use super::wire::value_of;

/// Most fields one answer sets, and most it removes.
pub const MOST: usize = 100;

/// Most fields a message may have once changed: past it nothing is added, however many answers a router
/// gives (a header map has a hard bound).
pub const MOST_FIELDS: usize = 1000;

/// What a router may change of a request's head besides its fields.
pub struct Target<'a> {
    pub method: &'a mut Method,
    pub path: &'a mut PathAndQuery,
}

/// The field a mutation may touch: `None` for one it may not (see the module's rules) or a name that is
/// not one.
fn name_for(key: &str, message: Message) -> Option<HeaderName> {
    let name = HeaderName::from_bytes(key.as_bytes()).ok()?;
    let none = None::<std::iter::Empty<&[u8]>>;
    let kept = forward::stays(name.as_str().as_bytes(), message, none) || name == CONTENT_LENGTH;
    (!kept).then_some(name)
}

/// Applies `m` to `headers` (a `message`), and through `target` (a request's) its pseudo-headers.
pub fn apply(
    m: &HeaderMutation,
    headers: &mut HeaderMap,
    message: Message,
    mut target: Option<Target<'_>>,
) {
    for set in m.set_headers.iter().take(MOST) {
        let Some(h) = &set.header else { continue };
        let key = h.key.to_ascii_lowercase();
        let value = value_of(h);
        if key.starts_with(':') {
            if let Some(t) = target.as_mut() {
                pseudo(t, &key, value);
            }
            continue;
        }
        let (Some(name), Ok(value)) = (name_for(&key, message), HeaderValue::from_bytes(value))
        else {
            continue;
        };
        if headers.len() >= MOST_FIELDS {
            continue;
        }
        match action(set) {
            HeaderAppendAction::AppendIfExistsOrAdd => {
                headers.append(name, value);
            }
            HeaderAppendAction::AddIfAbsent => {
                headers.entry(name).or_insert(value);
            }
            HeaderAppendAction::OverwriteIfExistsOrAdd => {
                headers.insert(name, value);
            }
            HeaderAppendAction::OverwriteIfExists => {
                if headers.contains_key(&name) {
                    headers.insert(name, value);
                }
            }
        }
    }
    for key in m.remove_headers.iter().take(MOST) {
        if let Some(name) = name_for(&key.to_ascii_lowercase(), message) {
            headers.remove(name);
        }
    }
}

/// The append action of `set`: the older `append` field wins when given, as in Envoy.
#[allow(deprecated)] // `append` is read because routers still send it.
fn action(set: &HeaderValueOption) -> HeaderAppendAction {
    match set.append.map(|a| a.value) {
        Some(true) => HeaderAppendAction::AppendIfExistsOrAdd,
        Some(false) => HeaderAppendAction::OverwriteIfExistsOrAdd,
        None => HeaderAppendAction::try_from(set.append_action)
            .unwrap_or(HeaderAppendAction::AppendIfExistsOrAdd),
    }
}

/// A request's `:path` (an origin-form path and query) or `:method`, when the new value is one.
fn pseudo(t: &mut Target<'_>, key: &str, value: &[u8]) {
    match key {
        ":path" if value.first() == Some(&b'/') => {
            if let Ok(p) = PathAndQuery::try_from(value) {
                *t.path = p;
            }
        }
        ":method" => {
            let body_as_asked = |m: &Method| !matches!(m.as_str(), "HEAD" | "CONNECT" | "TRACE");
            if let Ok(m) = Method::from_bytes(value) {
                if body_as_asked(&m) && body_as_asked(t.method) {
                    *t.method = m;
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::core::v3::HeaderValue as Field;

    fn set(key: &str, value: &str, action: HeaderAppendAction) -> HeaderValueOption {
        HeaderValueOption {
            header: Some(Field {
                key: key.into(),
                value: String::new(),
                raw_value: value.as_bytes().to_vec(),
            }),
            append_action: action as i32,
            ..Default::default()
        }
    }

    #[test]
    fn fields_are_set_appended_and_removed_but_not_those_that_stay_behind() {
        let mut headers = HeaderMap::new();
        headers.insert("x-a", HeaderValue::from_static("1"));
        headers.insert("x-gone", HeaderValue::from_static("1"));
        let m = HeaderMutation {
            set_headers: vec![
                set("X-A", "2", HeaderAppendAction::AppendIfExistsOrAdd),
                set("x-b", "new", HeaderAppendAction::OverwriteIfExistsOrAdd),
                set("x-c", "only-if", HeaderAppendAction::OverwriteIfExists),
                set(
                    "authorization",
                    "Bearer forged",
                    HeaderAppendAction::OverwriteIfExistsOrAdd,
                ),
                set(
                    "connection",
                    "close",
                    HeaderAppendAction::OverwriteIfExistsOrAdd,
                ),
                set(
                    "content-length",
                    "9",
                    HeaderAppendAction::OverwriteIfExistsOrAdd,
                ),
                set("bad name", "x", HeaderAppendAction::OverwriteIfExistsOrAdd),
            ],
            remove_headers: vec!["X-Gone".into(), "host".into()],
        };
        let (mut method, mut path) = (Method::POST, PathAndQuery::from_static("/v1"));
        let target = Target {
            method: &mut method,
            path: &mut path,
        };
        apply(&m, &mut headers, Message::Request, Some(target));
        let a: Vec<_> = headers.get_all("x-a").iter().collect();
        assert_eq!(a, ["1", "2"]);
        assert_eq!(headers["x-b"], "new");
        for absent in [
            "x-c",
            "authorization",
            "connection",
            "content-length",
            "x-gone",
        ] {
            assert!(!headers.contains_key(absent), "{absent}");
        }
    }

    #[test]
    fn a_request_path_and_method_may_change() {
        let m = HeaderMutation {
            set_headers: vec![
                set(
                    ":path",
                    "/v2/chat?x=1",
                    HeaderAppendAction::OverwriteIfExistsOrAdd,
                ),
                set(":method", "PUT", HeaderAppendAction::OverwriteIfExistsOrAdd),
                set(
                    ":authority",
                    "elsewhere",
                    HeaderAppendAction::OverwriteIfExistsOrAdd,
                ),
            ],
            remove_headers: vec![],
        };
        let (mut method, mut path) = (Method::POST, PathAndQuery::from_static("/v1"));
        let mut headers = HeaderMap::new();
        let target = Target {
            method: &mut method,
            path: &mut path,
        };
        apply(&m, &mut headers, Message::Request, Some(target));
        assert_eq!((method, path.as_str()), (Method::PUT, "/v2/chat?x=1"));
        assert!(headers.is_empty());
        // Not a path: kept as it was.
        let m = HeaderMutation {
            set_headers: vec![set(
                ":path",
                "http://x/",
                HeaderAppendAction::OverwriteIfExistsOrAdd,
            )],
            remove_headers: vec![],
        };
        let (mut method, mut path) = (Method::GET, PathAndQuery::from_static("/v1"));
        let target = Target {
            method: &mut method,
            path: &mut path,
        };
        apply(&m, &mut headers, Message::Request, Some(target));
        assert_eq!(path.as_str(), "/v1");
        // Nor a method whose answer has no body for a caller who reads one.
        let m = HeaderMutation {
            set_headers: vec![set(
                ":method",
                "HEAD",
                HeaderAppendAction::OverwriteIfExistsOrAdd,
            )],
            remove_headers: vec![],
        };
        let target = Target {
            method: &mut method,
            path: &mut path,
        };
        apply(&m, &mut headers, Message::Request, Some(target));
        assert_eq!(method, Method::GET);
    }

    #[test]
    fn one_answer_sets_at_most_a_bounded_number_of_fields() {
        let many = (0..MOST * 3)
            .map(|i| {
                set(
                    &format!("x-{i}"),
                    "v",
                    HeaderAppendAction::AppendIfExistsOrAdd,
                )
            })
            .collect();
        let m = HeaderMutation {
            set_headers: many,
            remove_headers: vec![],
        };
        let mut headers = HeaderMap::new();
        apply(&m, &mut headers, Message::Response, None);
        assert_eq!(headers.len(), MOST);
        // However many answers come, the message stops growing at its bound.
        for round in 0..(MOST_FIELDS / MOST) * 2 {
            let more = (0..MOST)
                .map(|i| {
                    set(
                        &format!("y-{round}-{i}"),
                        "v",
                        HeaderAppendAction::AppendIfExistsOrAdd,
                    )
                })
                .collect();
            let m = HeaderMutation {
                set_headers: more,
                remove_headers: vec![],
            };
            apply(&m, &mut headers, Message::Response, None);
        }
        assert_eq!(headers.len(), MOST_FIELDS);
    }
}
