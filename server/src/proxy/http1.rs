//! HTTP/1.1 as the proxy reads it off the wire: heads parsed in place (`httparse`), what a head says of its
//! message's framing, and chunked bodies judged as their bytes pass. The own path reads every message with
//! these; the general path's connections are judged with them before hyper reads them (see
//! `general/guard.rs`).

use std::mem::MaybeUninit;

use axum::http::StatusCode;
use bytes::{Buf, BytesMut};

/// Most head bytes read while waiting for a head to end; a longer head goes to the general path (which
/// allows more, and answers 431 past its own bound).
pub(super) const HEAD_MAX: usize = 16 * 1024;
/// Most bytes of a replica's response head.
pub(super) const RESPONSE_HEAD_MAX: usize = 64 * 1024;
/// Most header fields in a head this path parses (hyper's bound too).
pub(super) const MAX_HEADERS: usize = 100;
/// Most bytes a chunk's size line (or a trailer line) may take before it is taken for garbage.
pub(super) const LINE_MAX: usize = 4096;

/// Where a part of a head is in the buffer it was parsed from. (A response's reason phrase is not kept:
/// the caller gets the status's own, as from the general path.)
#[derive(Clone, Copy, Default)]
pub(super) struct Span(usize, usize);

impl Span {
    /// Where `part` (a slice of `buf`, as the parser gives them) is in `buf`; empty for a part that is
    /// not in it (the parser's own empty reason phrase).
    pub(super) fn of(buf: &[u8], part: &[u8]) -> Span {
        let at = (part.as_ptr() as usize).checked_sub(buf.as_ptr() as usize);
        match at {
            Some(at)
                if at
                    .checked_add(part.len())
                    .is_some_and(|end| end <= buf.len()) =>
            {
                Span(at, at + part.len())
            }
            _ => Span(0, 0),
        }
    }

    /// The part in `buf`; empty should `buf` no longer hold it (never a panic).
    pub(super) fn in_<'b>(&self, buf: &'b [u8]) -> &'b [u8] {
        buf.get(self.0..self.1).unwrap_or_default()
    }
}

/// A head parsed in place: where each part is.
#[derive(Default)]
pub(super) struct Head {
    pub(super) len: usize,
    /// The method (a request's).
    pub(super) method: Span,
    /// The request target (a request's).
    pub(super) target: Span,
    pub(super) status: u16,
    /// HTTP/1.x's x.
    pub(super) minor: u8,
    pub(super) fields: Vec<(Span, Span)>,
}

pub(super) enum Parsed {
    Complete,
    Partial,
    /// Not one this path reads (the general path may: it answers 431 for too many fields).
    Invalid,
    /// A request head that is not HTTP/1.x at all, which the general path refuses too.
    Malformed,
}

impl Head {
    pub(super) fn request(&mut self, buf: &[u8]) -> Parsed {
        let mut fields = [const { MaybeUninit::uninit() }; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut []);
        match req.parse_with_uninit_headers(buf, &mut fields) {
            Ok(httparse::Status::Complete(len)) => {
                let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version)
                else {
                    return Parsed::Invalid;
                };
                self.len = len;
                self.method = Span::of(buf, method.as_bytes());
                self.target = Span::of(buf, target.as_bytes());
                self.minor = minor;
                self.keep(buf, req.headers);
                Parsed::Complete
            }
            Ok(httparse::Status::Partial) => Parsed::Partial,
            Err(httparse::Error::TooManyHeaders) => Parsed::Invalid,
            Err(_) => Parsed::Malformed,
        }
    }

    pub(super) fn response(&mut self, buf: &[u8]) -> Parsed {
        let mut fields = [const { MaybeUninit::uninit() }; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut []);
        let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
            &mut resp,
            buf,
            &mut fields,
        );
        match parsed {
            Ok(httparse::Status::Complete(len)) => {
                let (Some(status), Some(minor)) = (resp.code, resp.version) else {
                    return Parsed::Invalid;
                };
                self.len = len;
                self.status = status;
                self.minor = minor;
                self.keep(buf, resp.headers);
                Parsed::Complete
            }
            Ok(httparse::Status::Partial) => Parsed::Partial,
            Err(_) => Parsed::Invalid,
        }
    }

    pub(super) fn keep(&mut self, buf: &[u8], fields: &[httparse::Header<'_>]) {
        self.fields.clear();
        for f in fields {
            self.fields
                .push((Span::of(buf, f.name.as_bytes()), Span::of(buf, f.value)));
        }
    }

    /// The fields, as (name, value).
    pub(super) fn fields<'b>(
        &'b self,
        buf: &'b [u8],
    ) -> impl Iterator<Item = (&'b [u8], &'b [u8])> + 'b {
        self.fields.iter().map(|(n, v)| (n.in_(buf), v.in_(buf)))
    }

    /// The values of the `Connection` fields when they name other fields (`named`, see
    /// [`Framing::names`]), for the rule on what stays behind (`forward::stays`); `None` when they do not.
    pub(super) fn connection<'b>(
        &'b self,
        buf: &'b [u8],
        named: bool,
    ) -> Option<impl Iterator<Item = &'b [u8]> + 'b> {
        let values = self.fields(buf);
        named
            .then(|| values.filter_map(|(n, v)| n.eq_ignore_ascii_case(b"connection").then_some(v)))
    }

    /// The first value of field `name` (lowercase).
    pub(super) fn get<'b>(&self, buf: &'b [u8], name: &str) -> Option<&'b [u8]> {
        self.fields
            .iter()
            .find(|(n, _)| n.in_(buf).eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v.in_(buf))
    }
}

/// Whether a word of a `Connection` field names no other field: `close`, and `keep-alive` (itself
/// hop-by-hop). Any other word names a field that stays behind (see `forward::stays`).
pub(super) fn names_nothing(word: &[u8]) -> bool {
    word.eq_ignore_ascii_case(b"close") || word.eq_ignore_ascii_case(b"keep-alive")
}

/// Parses the response head at the start of `rbuf`, dropping informational ones (100, 103: the replica's
/// business, never passed on) until one that is not, or until what is left is partial.
pub(super) fn past_informational(rhead: &mut Head, rbuf: &mut BytesMut) -> Parsed {
    loop {
        match rhead.response(rbuf) {
            Parsed::Complete if (100..200).contains(&rhead.status) && rhead.status != 101 => {
                rbuf.advance(rhead.len);
            }
            parsed => return parsed,
        }
    }
}

/// What a head says of its message, read in one pass over its fields.
#[derive(Default)]
pub(super) struct Framing {
    /// `Content-Length`, when there is exactly one value (repeats that agree count as one).
    pub(super) length: Option<u64>,
    /// `Content-Length` that does not parse, or values that disagree.
    pub(super) bad_length: bool,
    /// `Transfer-Encoding`, whether `chunked` is its last coding, and whether it is its only one (all its
    /// fields together).
    pub(super) encoded: bool,
    pub(super) chunked: bool,
    pub(super) only_chunked: bool,
    /// `Upgrade` (the fields are read for it by the general path's guard).
    pub(super) upgrade: bool,
    /// `Connection: close`.
    pub(super) close: bool,
    /// `Connection` names fields of the message (words other than `close` and `keep-alive`).
    pub(super) names: bool,
    /// Something this path leaves to the general one: `Expect`, `Upgrade`.
    pub(super) unusual: bool,
    /// How many `Host` fields (an HTTP/1.1 request has exactly one: RFC 9112 §3.2).
    pub(super) hosts: u8,
    /// The caller's `X-Request-Id`, kept (the head may be gone) for an answer of the proxy's own.
    pub(super) request_id: Option<axum::http::HeaderValue>,
}

impl Framing {
    pub(super) fn of(head: &Head, buf: &[u8]) -> Framing {
        let mut f = Framing::default();
        for (name, value) in head.fields(buf) {
            if name.eq_ignore_ascii_case(b"content-length") {
                match (content_length(value), f.length) {
                    (Some(n), None) => f.length = Some(n),
                    (Some(n), Some(m)) if n == m => {}
                    _ => f.bad_length = true,
                }
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                let last = value.rsplit(|b| *b == b',').next().unwrap_or(b"");
                f.chunked = last.trim_ascii().eq_ignore_ascii_case(b"chunked");
                let one = value.trim_ascii().eq_ignore_ascii_case(b"chunked");
                f.only_chunked = one && !f.encoded;
                f.encoded = true;
            } else if name.eq_ignore_ascii_case(b"connection") {
                for word in words(value) {
                    let close = word.eq_ignore_ascii_case(b"close");
                    f.close |= close;
                    f.names |= !names_nothing(word);
                }
            } else if name.eq_ignore_ascii_case(b"host") {
                f.hosts = f.hosts.saturating_add(1);
            } else if name.eq_ignore_ascii_case(b"x-request-id") {
                f.request_id = axum::http::HeaderValue::from_bytes(value).ok();
            } else if name.eq_ignore_ascii_case(b"expect") {
                f.unusual = true;
            } else if name.eq_ignore_ascii_case(b"upgrade") {
                f.unusual = true;
                f.upgrade = true;
            }
        }
        f
    }
}

/// The largest length a body (and a chunk) may say it has: what a signed 64-bit count holds, as nginx's
/// `off_t`. Past it a length is taken for garbage.
pub(super) const MAX_LENGTH: u64 = i64::MAX as u64;

/// A `Content-Length` value: digits only (no sign, no spaces within), at most [`MAX_LENGTH`], or a list of
/// the same number (RFC 9110 §8.6 lets a recipient take that as the one).
fn content_length(value: &[u8]) -> Option<u64> {
    let mut found = None;
    for digits in value.split(|b| *b == b',').map(<[u8]>::trim_ascii) {
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n = std::str::from_utf8(digits).ok()?.parse::<u64>().ok()?;
        if n > MAX_LENGTH {
            return None;
        }
        if found.is_some_and(|m| m != n) {
            return None;
        }
        found = Some(n);
    }
    found
}

/// The words of a comma-separated field value.
pub(super) fn words(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|b| *b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|w| !w.is_empty())
}

/// Where a chunked body stands as its bytes pass.
pub(super) enum Chunks {
    /// At a chunk's size line.
    Size,
    /// In a chunk's data, this many bytes left.
    Data(u64),
    /// At the line end after a chunk's data.
    DataEnd,
    /// Past the last chunk, at the trailer fields.
    Trailers,
    Done,
}

impl Chunks {
    /// Goes through as much of `bytes` as can be judged: returns how many bytes that is, and adds where the
    /// data in them is to `data`. `Err` for bytes that are not a chunked body.
    pub(super) fn advance(
        &mut self,
        bytes: &[u8],
        data: &mut Vec<(usize, usize)>,
    ) -> Result<usize, ()> {
        let mut at = 0;
        loop {
            let left = &bytes[at..];
            match self {
                Chunks::Done => return Ok(at),
                // A size has a digit at least (the parser would read none as 0, the end).
                Chunks::Size if left.first().is_some_and(|b| !b.is_ascii_hexdigit()) => {
                    return Err(())
                }
                Chunks::Size => match httparse::parse_chunk_size(left) {
                    Ok(httparse::Status::Complete((used, 0))) => {
                        at += used;
                        *self = Chunks::Trailers;
                    }
                    Ok(httparse::Status::Complete((_, size))) if size > MAX_LENGTH => {
                        return Err(())
                    }
                    Ok(httparse::Status::Complete((used, size))) => {
                        at += used;
                        *self = Chunks::Data(size);
                    }
                    Ok(httparse::Status::Partial) => return Ok(at),
                    Err(_) => return Err(()),
                },
                Chunks::Data(n) => {
                    if left.is_empty() {
                        return Ok(at);
                    }
                    let take = left.len().min(usize::try_from(*n).unwrap_or(usize::MAX));
                    data.push((at, take));
                    at += take;
                    *n -= take as u64;
                    if *n == 0 {
                        *self = Chunks::DataEnd;
                    }
                }
                Chunks::DataEnd => match left {
                    [b'\r', b'\n', ..] => {
                        at += 2;
                        *self = Chunks::Size;
                    }
                    [] | [b'\r'] => return Ok(at),
                    _ => return Err(()),
                },
                Chunks::Trailers => match left.windows(2).position(|w| w == b"\r\n") {
                    Some(0) => {
                        at += 2;
                        *self = Chunks::Done;
                    }
                    Some(end) => at += end + 2,
                    None => return Ok(at),
                },
            }
        }
    }
}

/// Writes the field `name: value` and its line end.
pub(super) fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// `Content-Length: n`, its digits made on the stack (no string, and no formatter run).
pub(super) fn length_field(out: &mut Vec<u8>, n: u64) {
    field(
        out,
        b"content-length",
        itoa::Buffer::new().format(n).as_bytes(),
    );
}

/// `HTTP/1.1 {code} {reason}`: the reason is the code's own, as the general path writes it.
pub(super) fn status_line(out: &mut Vec<u8>, status: StatusCode) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `Date: …` for now, made once a second on each thread.
pub(super) fn date(out: &mut Vec<u8>) {
    thread_local! {
        static NOW: std::cell::RefCell<(u64, String)> = const { std::cell::RefCell::new((0, String::new())) };
    }
    let now = std::time::SystemTime::now();
    let secs = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    NOW.with_borrow_mut(|(at, text)| {
        if *at != secs || text.is_empty() {
            *at = secs;
            *text = httpdate::fmt_http_date(now);
        }
        field(out, b"date", text.as_bytes());
    });
}

/// Writes an answer of the server's own, whose body is at hand: its status, its fields less those that
/// frame it (this says itself how the body is framed, and whether the connection closes), `Date` when it has
/// none, and the body unless the request was `HEAD`.
pub(super) fn answer(
    out: &mut Vec<u8>,
    parts: &axum::http::response::Parts,
    body: &[u8],
    close: bool,
    head_request: bool,
) {
    status_line(out, parts.status);
    for (name, value) in &parts.headers {
        if name != axum::http::header::CONTENT_LENGTH && name != axum::http::header::CONNECTION {
            field(out, name.as_str().as_bytes(), value.as_bytes());
        }
    }
    // No length where no body may be (RFC 9110 §8.6), nor for an empty answer to `HEAD`, whose length
    // would not be the `GET`'s: as hyper writes them on the general path.
    let bodiless = matches!(parts.status.as_u16(), 100..=199 | 204 | 304);
    if !(bodiless || head_request && body.is_empty()) {
        length_field(out, body.len() as u64);
    }
    if !parts.headers.contains_key(axum::http::header::DATE) {
        date(out);
    }
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !(head_request || bodiless) {
        out.extend_from_slice(body);
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Scans `body` handed over in pieces split at `at`: the bytes judged, and the data found in them.
    fn scan(body: &[u8], at: usize) -> Result<(usize, Vec<u8>, bool), ()> {
        let mut chunks = Chunks::Size;
        let (mut buf, mut judged, mut data) = (Vec::new(), 0, Vec::new());
        for piece in [&body[..at], &body[at..]] {
            buf.extend_from_slice(piece);
            let mut found = Vec::new();
            let used = chunks.advance(&buf, &mut found)?;
            for (from, len) in found {
                data.extend_from_slice(&buf[from..from + len]);
            }
            buf.drain(..used);
            judged += used;
        }
        Ok((judged, data, matches!(chunks, Chunks::Done)))
    }

    #[test]
    fn a_chunked_body_ends_where_it_says_wherever_it_is_cut() {
        let body = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Sum: 11\r\n\r\nNEXT";
        let end = body.len() - 4;
        for at in 0..=body.len() {
            let (judged, data, done) = scan(body, at).expect("a chunked body");
            assert!(done, "cut at {at}");
            assert_eq!(judged, end, "cut at {at}: nothing past its end is taken");
            assert_eq!(data, b"hello world", "cut at {at}");
        }
        // Not done until the empty line after the trailers.
        let (_, _, done) = scan(&body[..end - 2], 3).expect("so far a chunked body");
        assert!(!done);
        for bad in [
            &b"x\r\n"[..],
            b"5\r\nhelloXX0\r\n\r\n",
            b"ffffffffffffffffff\r\n",
            b"ffffffffffffffff\r\nabc",
            b"8000000000000000\r\n",
        ] {
            assert!(scan(bad, 0).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    /// `text`'s head, parsed, and its bytes.
    pub(in crate::proxy) fn request(text: &str) -> (Head, Vec<u8>) {
        let buf = text.as_bytes().to_vec();
        let mut head = Head::default();
        assert!(matches!(head.request(&buf), Parsed::Complete), "{text}");
        (head, buf)
    }

    #[test]
    fn framing_is_read_strictly() {
        let framing = |fields: &str| {
            let (head, buf) = request(&format!("POST / HTTP/1.1\r\n{fields}\r\n"));
            Framing::of(&head, &buf)
        };
        let f = framing(
            "Content-Length: 12\r\ncontent-length: 12\r\nConnection: Keep-Alive, Close\r\n",
        );
        assert_eq!((f.length, f.bad_length, f.close), (Some(12), false, true));
        for bad in [
            "Content-Length: +12\r\n",
            "Content-Length: 1 2\r\n",
            "Content-Length: 1\r\nContent-Length: 2\r\n",
            "Content-Length:\r\n",
            "Content-Length: 5, 6\r\n",
            "Content-Length: 5,\r\n",
            "Content-Length: 18446744073709551615\r\n",
            "Content-Length: 9223372036854775808\r\n",
        ] {
            assert!(framing(bad).bad_length, "{bad}");
        }
        // A list of one number is that number (RFC 9110 §8.6).
        let f = framing("Content-Length: 5, 5\r\n");
        assert_eq!((f.length, f.bad_length), (Some(5), false));
        let f = framing("Host: a\r\nX-Request-Id: t-1\r\n");
        assert_eq!(f.hosts, 1);
        assert_eq!(
            f.request_id.as_ref().map(|v| v.as_bytes()),
            Some(&b"t-1"[..])
        );
        let f = framing("Transfer-Encoding: gzip, chunked\r\n");
        assert!(f.encoded && f.chunked && !f.only_chunked && f.length.is_none());
        let f = framing("Transfer-Encoding: Chunked\r\n");
        assert!(f.encoded && f.chunked && f.only_chunked);
        let f = framing("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n");
        assert!(f.chunked && !f.only_chunked, "two codings, not one");
        let f = framing("Transfer-Encoding: chunked, gzip\r\n");
        assert!(f.encoded && !f.chunked);
        assert!(framing("Expect: 100-continue\r\n").unusual);
        let f = framing("Upgrade: websocket\r\n");
        assert!(f.unusual && f.upgrade);
        let f = framing("Host: x\r\n");
        assert!(!f.encoded && !f.bad_length && !f.close && !f.unusual && f.length.is_none());
    }
}
