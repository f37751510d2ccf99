//! The rules a request head meets before anything of it goes on, the same on both of the proxy's paths: the
//! own path judges each head it reads with them, and the general path's connections are judged by
//! the general path's guard (`general/guard.rs`) before hyper reads a byte. They are nginx's, in front of the same replicas: what it
//! refuses is refused with its status, and the fields it drops are dropped.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::http1::{Framing, Head};
use crate::error::ApiError;

/// A request refused before it is read further: its status and why, said in the spec's error shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Refusal {
    pub(super) status: StatusCode,
    pub(super) why: &'static str,
}

impl Refusal {
    const fn new(status: StatusCode, why: &'static str) -> Refusal {
        Refusal { status, why }
    }

    /// The answer: `{"error": why}` with the refusal's status.
    pub(super) fn answer(&self) -> Response {
        let mut answer = ApiError::BadRequest(self.why.into()).into_response();
        *answer.status_mut() = self.status;
        answer
    }
}

pub(super) const ONE_HOST: &str = "an HTTP/1.1 request has one Host field";
/// A head that does not parse as HTTP/1.x.
pub(super) const MALFORMED: Refusal =
    Refusal::new(StatusCode::BAD_REQUEST, "the request head is not HTTP/1.1");
/// A head longer, or with more fields, than is read.
pub(super) const HEAD_TOO_LARGE: Refusal = Refusal::new(
    StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
    "the request head is too large",
);
/// A request to upgrade the connection (`Upgrade`, `CONNECT`) with a body: what follows its head would be
/// either the body or the new protocol's bytes.
pub(super) const UPGRADE_WITH_BODY: Refusal = Refusal::new(
    StatusCode::BAD_REQUEST,
    "a request to upgrade the connection has no body",
);

/// Whether a request with this head may go on: `Err` says how it is refused.
///
/// - `TRACE` and `TRACK` (which echo the request, cookies and all, to whoever can read the answer): 405.
/// - An HTTP/1.1 request has exactly one `Host`, and a `Host` is a host name, an IPv4 address or a
///   bracketed IPv6 address, with or without a port: 400.
/// - A `Content-Length` is one whole number up to 2^63 − 1: 400.
/// - A body has one framing: `Content-Length` beside `Transfer-Encoding` is 400; `Transfer-Encoding` is
///   HTTP/1.1's, and its only coding here is `chunked` (`identity, chunked`, `gzip, chunked` and two
///   `chunked` fields are not): 501.
pub(super) fn judge(head: &Head, buf: &[u8], f: &Framing) -> Result<(), Refusal> {
    use StatusCode as S;
    let method = head.method.in_(buf);
    if method.eq_ignore_ascii_case(b"TRACE") || method.eq_ignore_ascii_case(b"TRACK") {
        return Err(Refusal::new(
            S::METHOD_NOT_ALLOWED,
            "TRACE is not served here",
        ));
    }
    if head.minor == 1 && f.hosts != 1 {
        return Err(Refusal::new(S::BAD_REQUEST, ONE_HOST));
    }
    if head.get(buf, "host").is_some_and(|h| !valid_host(h)) {
        return Err(Refusal::new(
            S::BAD_REQUEST,
            "the Host field is not a host name",
        ));
    }
    if f.encoded && (f.length.is_some() || f.bad_length) {
        return Err(Refusal::new(
            S::BAD_REQUEST,
            "a request has Content-Length or Transfer-Encoding, not both",
        ));
    }
    if f.bad_length {
        return Err(Refusal::new(
            S::BAD_REQUEST,
            "Content-Length is not one whole number",
        ));
    }
    if f.encoded && head.minor == 0 {
        return Err(Refusal::new(
            S::BAD_REQUEST,
            "an HTTP/1.0 request has no Transfer-Encoding",
        ));
    }
    if f.encoded && !f.only_chunked {
        return Err(Refusal::new(
            S::NOT_IMPLEMENTED,
            "a request's only transfer coding here is chunked",
        ));
    }
    Ok(())
}

/// Whether a request field is dropped rather than passed on: one whose name has an underscore, as nginx
/// drops them (`underscores_in_headers off`): a CGI- or WSGI-style replica reads `Transfer_Encoding` as
/// `Transfer-Encoding`, and `X_Forwarded_For` as the header this server writes.
pub(super) fn dropped_name(name: &[u8]) -> bool {
    name.contains(&b'_')
}

/// `host [":" port]` (RFC 9110 §7.2): a registered name (RFC 3986's characters), an IPv4 address or a
/// bracketed IPv6 address; a port of digits.
fn valid_host(value: &[u8]) -> bool {
    let (host, port) = match value.first() {
        Some(b'[') => match value.iter().position(|b| *b == b']') {
            Some(end) => (&value[..=end], &value[end + 1..]),
            None => return false,
        },
        _ => match value.iter().rposition(|b| *b == b':') {
            Some(at) => (&value[..at], &value[at..]),
            None => (value, &b""[..]),
        },
    };
    let port_ok = match port.split_first() {
        None => true,
        Some((b':', digits)) => digits.iter().all(u8::is_ascii_digit),
        Some(_) => false,
    };
    let host_ok = match host.strip_prefix(b"[").and_then(|h| h.strip_suffix(b"]")) {
        Some(v6) => {
            !v6.is_empty()
                && v6
                    .iter()
                    .all(|b| b.is_ascii_hexdigit() || b":.".contains(b))
        }
        None => {
            !host.is_empty()
                && host
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=%".contains(b))
        }
    };
    host_ok && port_ok
}

#[cfg(test)]
mod tests {
    use super::super::http1::tests::request;
    use super::*;

    fn judged(text: &str) -> Result<(), Refusal> {
        let (head, buf) = request(text);
        judge(&head, &buf, &Framing::of(&head, &buf))
    }

    #[test]
    fn heads_are_refused_as_nginx_refuses_them() {
        let status = |text: &str| judged(text).err().map(|r| r.status.as_u16());
        for ok in [
            "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a.test:8080\r\nContent-Length: 9223372036854775807\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: [::1]:80\r\nTransfer-Encoding: Chunked\r\n\r\n",
            "GET / HTTP/1.0\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: 10.0.0.1\r\nX_Custom: 1\r\n\r\n",
        ] {
            assert_eq!(status(ok), None, "{ok}");
        }
        for (bad, want) in [
            ("TRACE / HTTP/1.1\r\nHost: a\r\n\r\n", 405),
            ("track / HTTP/1.1\r\nHost: a\r\n\r\n", 405),
            ("GET / HTTP/1.1\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: \r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: a:b\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: [::1\r\n\r\n", 400),
            ("GET / HTTP/1.0\r\nHost: \\a\r\n\r\n", 400),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
                400,
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: x\r\n\r\n",
                400,
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 18446744073709551615\r\n\r\n",
                400,
            ),
            (
                "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
                400,
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity, chunked\r\n\r\n",
                501,
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n",
                501,
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
                501,
            ),
        ] {
            assert_eq!(status(bad), Some(want), "{bad}");
        }
    }

    #[test]
    fn names_with_underscores_are_dropped() {
        assert!(dropped_name(b"Transfer_Encoding"));
        assert!(dropped_name(b"x_forwarded_for"));
        assert!(!dropped_name(b"x-forwarded-for"));
    }
}
