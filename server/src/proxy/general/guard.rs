//! The general path's connections, judged on their way to hyper. hyper's server reads a connection through
//! a [`Guard`], which lets bytes through only once it has judged them by the rules the own path reads heads
//! with ([`super::edge`], [`super::http1`]): each request head, and each body to its end (`Content-Length`
//! counted down, chunks scanned with their sizes bounded), so that it knows where the next head begins.
//!
//! A head that breaks the rules never reaches hyper: the connection ends there for hyper (it reads the
//! caller's end), and once hyper is done, the guard writes the refusal, in the spec's shape, and closes. (A
//! request hyper was still answering when a refused head came right behind it is cut off with the
//! connection: hyper ends a connection whose caller ends mid-exchange.) A body whose chunks break off or lie ends the same way, except
//! that the request it belongs to is answered by the proxy itself (its body could not be read), so the
//! guard adds nothing. After a request to upgrade (`Upgrade`, or `CONNECT`), nothing more goes to hyper
//! until it has answered: `101` (or a 2xx to `CONNECT`) makes the connection a tunnel, whose bytes pass as
//! they come; anything else and the guard reads heads again.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::super::edge::{self, Refusal};
use super::super::http1::{self, Chunks, Framing, Head, Parsed, LINE_MAX};

/// Most bytes of a request head the guard reads before it refuses it (431), as hyper's own bound.
const HEAD_MAX: usize = 64 * 1024;
/// Most bytes read from the caller at once.
const READ: usize = 16 * 1024;

/// Where the caller's bytes stand.
enum State {
    /// At a request head.
    Head,
    /// In a body with this many bytes to come.
    Length(u64),
    /// In a chunked body.
    Chunked(Chunks),
    /// A request to upgrade passed: nothing more goes until hyper has answered it (`connect`: it was
    /// `CONNECT`).
    Upgrading { connect: bool },
    /// Upgraded: bytes pass as they come.
    Tunnel,
    /// Refused: hyper reads the caller's end.
    Refused,
}

/// When the caller last sent something on a connection, for the listener's bound (see `super::super::limit`):
/// shared between the [`Guard`] that reads it and the task that serves the connection.
#[derive(Clone, Default)]
pub(super) struct LastRead(Arc<AtomicU64>);

impl LastRead {
    /// Milliseconds since this process's first look at the clock.
    fn now() -> u64 {
        static BASE: OnceLock<Instant> = OnceLock::new();
        let base = *BASE.get_or_init(Instant::now);
        u64::try_from(base.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn mark(&self) {
        self.0.store(Self::now(), Ordering::Relaxed);
    }

    /// How long ago the caller last sent something (or the connection began).
    pub(super) fn since(&self) -> Duration {
        Duration::from_millis(Self::now().saturating_sub(self.0.load(Ordering::Relaxed)))
    }
}

/// A caller's connection as hyper's server reads it (see the module's doc): `io`, with bytes already read
/// from it first.
pub(super) struct Guard<IO> {
    io: IO,
    last_read: LastRead,
    /// What was read from the caller; its first `passable` bytes were judged and may go to hyper.
    buf: BytesMut,
    passable: usize,
    state: State,
    head: Head,
    /// The caller's end was read.
    ended: bool,
    /// A refusal to write once hyper is done (its bytes, and how many went).
    answer: Option<(Vec<u8>, usize)>,
    /// hyper's read, waiting while an upgrade is answered.
    parked: Option<Waker>,
    /// What hyper wrote since an upgrade was asked for, until its answer's head is whole.
    answered: Vec<u8>,
    /// The connection's place among the listener's (see `super::super::limit`), given back with the socket.
    _room: Option<super::super::limit::Open>,
}

impl<IO> Guard<IO> {
    /// `io`, whose bytes `read` were read already (at a request head); `last_read` is told when the caller
    /// sends more.
    pub(super) fn new(io: IO, read: BytesMut, last_read: LastRead) -> Guard<IO> {
        last_read.mark();
        Guard {
            io,
            last_read,
            buf: read,
            passable: 0,
            state: State::Head,
            head: Head::default(),
            ended: false,
            answer: None,
            parked: None,
            answered: Vec::new(),
            _room: None,
        }
    }

    /// The guard holds `room` for as long as it holds the socket.
    pub(super) fn holding(mut self, room: super::super::limit::Open) -> Guard<IO> {
        self._room = Some(room);
        self
    }

    /// Judges what was read past the passable bytes, as far as it can be judged.
    fn judge(&mut self) {
        loop {
            let rest = &self.buf[self.passable..];
            let judged = match &mut self.state {
                State::Head if rest.is_empty() => return,
                State::Head => match self.head.request(rest) {
                    Parsed::Complete => {
                        let framing = Framing::of(&self.head, rest);
                        let next = after_head(&self.head, rest, &framing);
                        match next {
                            Ok(state) => {
                                self.state = state;
                                self.head.len
                            }
                            Err(refusal) => return self.refuse(Some(refusal)),
                        }
                    }
                    Parsed::Partial if rest.len() <= HEAD_MAX => return,
                    Parsed::Partial | Parsed::Invalid => {
                        return self.refuse(Some(edge::HEAD_TOO_LARGE))
                    }
                    Parsed::Malformed => return self.refuse(Some(edge::MALFORMED)),
                },
                State::Length(left) => {
                    let take = rest.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                    *left -= take as u64;
                    if *left == 0 {
                        self.state = State::Head;
                    }
                    take
                }
                State::Chunked(scan) => {
                    let mut data = Vec::new();
                    match scan.advance(rest, &mut data) {
                        Ok(used) => {
                            if matches!(scan, Chunks::Done) {
                                self.state = State::Head;
                            } else if rest.len() - used > LINE_MAX {
                                return self.refuse(None);
                            }
                            used
                        }
                        Err(()) => return self.refuse(None),
                    }
                }
                State::Tunnel => rest.len(),
                State::Upgrading { .. } | State::Refused => return,
            };
            if judged == 0 {
                return;
            }
            self.passable += judged;
        }
    }

    /// Nothing more goes to hyper; `at_head`: the refusal to write once hyper is done.
    fn refuse(&mut self, at_head: Option<Refusal>) {
        self.state = State::Refused;
        self.buf.truncate(self.passable);
        if let Some(refusal) = at_head {
            let (parts, body) = refusal.answer().into_parts();
            let body =
                futures_util::FutureExt::now_or_never(http_body_util::BodyExt::collect(body))
                    .and_then(Result::ok)
                    .map(|b| b.to_bytes())
                    .unwrap_or_default();
            let mut out = Vec::with_capacity(256);
            http1::answer(&mut out, &parts, &body, true, false);
            self.answer = Some((out, 0));
        }
    }

    /// Notes what hyper wrote while an upgrade is being answered, until its answer's head is whole.
    fn note_written(&mut self, written: &[u8]) {
        let State::Upgrading { connect } = self.state else {
            return;
        };
        self.answered.extend_from_slice(written);
        loop {
            let mut fields = [httparse::EMPTY_HEADER; http1::MAX_HEADERS];
            let mut resp = httparse::Response::new(&mut fields);
            let (len, status) = match resp.parse(&self.answered) {
                Ok(httparse::Status::Complete(len)) => (len, resp.code.unwrap_or(0)),
                Ok(httparse::Status::Partial) if self.answered.len() <= HEAD_MAX => return,
                _ => (0, 0),
            };
            match status {
                101 => self.state = State::Tunnel,
                200..=299 if connect => self.state = State::Tunnel,
                // An informational answer (`100 Continue`): the final one is still to come.
                100..=199 => {
                    self.answered.drain(..len);
                    continue;
                }
                _ => self.state = State::Head,
            }
            self.answered = Vec::new();
            if let Some(waker) = self.parked.take() {
                waker.wake();
            }
            return;
        }
    }
}

/// What follows a request head that passed the rules: its body, then the next head; or, for a request to
/// upgrade (which has no body), hyper's answer.
fn after_head(head: &Head, buf: &[u8], framing: &Framing) -> Result<State, Refusal> {
    edge::judge(head, buf, framing)?;
    let connect = head.method.in_(buf) == b"CONNECT";
    let has_body = framing.encoded || framing.length.is_some_and(|n| n > 0);
    if connect || framing.upgrade {
        return match has_body {
            true => Err(edge::UPGRADE_WITH_BODY),
            false => Ok(State::Upgrading { connect }),
        };
    }
    Ok(match (framing.encoded, framing.length) {
        (true, _) => State::Chunked(Chunks::Size),
        (false, Some(n)) if n > 0 => State::Length(n),
        _ => State::Head,
    })
}

impl<IO: AsyncRead + Unpin> AsyncRead for Guard<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        loop {
            this.judge();
            if this.passable > 0 {
                let n = this.passable.min(out.remaining());
                out.put_slice(&this.buf[..n]);
                this.buf.advance(n);
                this.passable -= n;
                return Poll::Ready(Ok(()));
            }
            match this.state {
                State::Refused => return Poll::Ready(Ok(())),
                State::Upgrading { .. } => {
                    this.parked = Some(cx.waker().clone());
                    return Poll::Pending;
                }
                _ => {}
            }
            if this.ended {
                // What is left can never be judged whole: hyper gets it, and the end, and refuses it.
                this.passable = this.buf.len();
                if this.passable == 0 {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            this.buf.reserve(READ);
            let before = this.buf.len();
            let spare = this.buf.spare_capacity_mut();
            let mut read = ReadBuf::uninit(spare);
            match Pin::new(&mut this.io).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {
                    let n = read.filled().len();
                    // SAFETY: `poll_read` initialised the first `n` bytes of the spare capacity.
                    unsafe { this.buf.set_len(before + n) };
                    this.ended = n == 0;
                    this.last_read.mark();
                }
            }
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Guard<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.io).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = written {
            this.note_written(&data[..n]);
        }
        written
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        if let (Poll::Ready(Ok(n)), State::Upgrading { .. }) = (&written, &this.state) {
            let mut left = *n;
            let mut seen = Vec::with_capacity(left);
            for b in bufs {
                let take = left.min(b.len());
                seen.extend_from_slice(&b[..take]);
                left -= take;
            }
            this.note_written(&seen);
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    /// hyper is done with the connection: a refusal still to say goes first.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        while let Some((answer, at)) = &mut this.answer {
            if *at == answer.len() {
                this.answer = None;
                break;
            }
            match Pin::new(&mut this.io).poll_write(cx, &answer[*at..]) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => this.answer = None,
                Poll::Ready(Ok(n)) => *at += n,
            }
        }
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// What hyper would read through a guard of a caller that sent `sent` (in pieces of `piece` bytes) and
    /// then closed, and what the guard writes when hyper shuts the connection down.
    async fn through(sent: &[u8], piece: usize) -> (Vec<u8>, Vec<u8>) {
        let (mut caller, server) = tokio::io::duplex(1 << 20);
        let mut guard = Guard::new(server, BytesMut::new(), LastRead::default());
        for part in sent.chunks(piece.max(1)) {
            caller.write_all(part).await.expect("send");
        }
        caller.shutdown().await.expect("end");
        let mut read = Vec::new();
        guard.read_to_end(&mut read).await.expect("read");
        guard.shutdown().await.expect("shutdown");
        let mut written = Vec::new();
        caller.read_to_end(&mut written).await.expect("answer");
        (read, written)
    }

    #[tokio::test]
    async fn good_messages_pass_whole_wherever_they_are_cut() {
        let good = b"POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc\
            POST /b HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;x=1\r\nabc\r\n0\r\nT: 1\r\n\r\n\
            GET /c HTTP/1.1\r\nHost: a\r\n\r\n";
        for piece in [1, 2, 7, 64, good.len()] {
            let (read, written) = through(good, piece).await;
            assert_eq!(read, good, "in pieces of {piece}");
            assert!(written.is_empty());
        }
    }

    #[tokio::test]
    async fn a_refused_head_ends_the_connection_and_is_answered_after_what_came_before() {
        let first = b"GET /a HTTP/1.1\r\nHost: a\r\n\r\n";
        let mut sent = first.to_vec();
        sent.extend_from_slice(b"POST /b HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
        sent.extend_from_slice(b"GET /c HTTP/1.1\r\nHost: a\r\n\r\n");
        let (read, written) = through(&sent, 5).await;
        assert_eq!(read, first, "nothing from the refused head on");
        let answer = String::from_utf8_lossy(&written);
        assert!(
            answer.starts_with("HTTP/1.1 400 Bad Request\r\n"),
            "{answer}"
        );
        assert!(answer.contains("connection: close\r\n"), "{answer}");
        assert!(
            answer.ends_with(
                "{\"error\":\"a request has Content-Length or Transfer-Encoding, not both\"}"
            ),
            "{answer}"
        );
    }

    #[tokio::test]
    async fn a_body_that_lies_is_cut_where_it_does_and_not_answered_here() {
        let sent = b"POST /b HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\nffffffffffffffff\r\nabc";
        let (read, written) = through(sent, 9).await;
        // The head, and no more than the chunks before the lie.
        let cut = sent.len() - "ffffffffffffffff\r\nabc".len();
        let head = sent
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(0, |at| at + 4);
        assert!(
            read.len() >= head && sent[..cut].starts_with(&read),
            "{read:?}"
        );
        assert!(written.is_empty(), "the proxy answers the request itself");
    }

    #[tokio::test]
    async fn an_upgrade_waits_for_its_answer() {
        let (mut caller, server) = tokio::io::duplex(1 << 16);
        let mut guard = Guard::new(server, BytesMut::new(), LastRead::default());
        let ask =
            b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n";
        caller.write_all(ask).await.expect("send");
        caller.write_all(b"\x81\x05hello").await.expect("a frame");
        let mut head = vec![0u8; ask.len()];
        guard.read_exact(&mut head).await.expect("the head");
        // Nothing more until the answer: the frame is no request head.
        let mut more = [0u8; 16];
        let early =
            tokio::time::timeout(std::time::Duration::from_millis(50), guard.read(&mut more));
        assert!(
            early.await.is_err(),
            "bytes went before the upgrade was answered"
        );
        guard
            .write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n")
            .await
            .expect("answer");
        let n = guard.read(&mut more).await.expect("the frame");
        assert_eq!(&more[..n], b"\x81\x05hello");

        // Refused, the next head is judged as one.
        let (mut caller, server) = tokio::io::duplex(1 << 16);
        let mut guard = Guard::new(server, BytesMut::new(), LastRead::default());
        caller.write_all(ask).await.expect("send");
        caller
            .write_all(b"TRACE / HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .expect("send");
        caller.shutdown().await.expect("end");
        guard.read_exact(&mut head).await.expect("the head");
        guard
            .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            .await
            .expect("answer");
        let mut rest = Vec::new();
        guard.read_to_end(&mut rest).await.expect("read");
        assert!(
            rest.is_empty(),
            "the TRACE went on: {:?}",
            String::from_utf8_lossy(&rest)
        );
    }

    #[tokio::test]
    async fn any_bytes_in_any_pieces_never_panic_and_pass_only_what_was_sent() {
        // A small xorshift: the same bytes each run.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let parts: [&[u8]; 12] = [
            b"GET / HTTP/1.1\r\n",
            b"Host: a\r\n",
            b"\r\n",
            b"Content-Length: 3\r\n",
            b"Transfer-Encoding: chunked\r\n",
            b"5\r\nhello\r\n",
            b"0\r\n\r\n",
            b"Upgrade: x\r\n",
            b"ffffffff\r\n",
            b"\x00\xff",
            b"abc",
            b"TRACE / HTTP/1.0\r\n",
        ];
        for _ in 0..300 {
            let mut sent = Vec::new();
            for _ in 0..(next() % 12) {
                sent.extend_from_slice(parts[(next() % 12) as usize]);
            }
            let (read, _) = through(&sent, (next() % 9) as usize + 1).await;
            assert!(sent.starts_with(&read), "passed what was not sent");
        }
    }
}
