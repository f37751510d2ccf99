//! The own path's reads and writes: `recvfrom` and `sendto` called directly, on tokio's readiness.
//!
//! The C library's `recv` and `send` are cancellation points: in a process with more than one thread each
//! call marks the thread cancellable and back around the system call (an nginx worker, single-threaded, is
//! spared that). The proxy cancels no thread, so the own path, which makes four of these calls per request,
//! makes the system calls itself. Readiness is kept as tokio keeps it for its own reads and writes: cleared
//! when a call would block, and when one moved less than it was offered (with epoll that shows the socket
//! drained, or full), so that the next call waits for the next event rather than failing first.
//!
//! The direct system calls are Linux's; elsewhere the C library's `recv` and `send` stand in.

use std::future::poll_fn;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::task::{ready, Context, Poll};

use bytes::{BufMut, BytesMut};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Reads what `io` has (at most the room `buf` has, some made when it has none) onto the end of `buf`: the
/// number of bytes read, 0 at the stream's end.
pub(super) async fn read_buf(io: &TcpStream, buf: &mut BytesMut) -> io::Result<usize> {
    if buf.len() == buf.capacity() {
        buf.reserve(64);
    }
    poll_fn(|cx| poll_read(io, cx, buf)).await
}

/// Writes as much of `data` as `io` takes at once: the number of bytes written.
pub(super) async fn write(io: &TcpStream, data: &[u8]) -> io::Result<usize> {
    poll_fn(|cx| poll_write(io, cx, data)).await
}

fn poll_read(io: &TcpStream, cx: &mut Context<'_>, buf: &mut BytesMut) -> Poll<io::Result<usize>> {
    let fd = io.as_raw_fd();
    let offered = buf.capacity() - buf.len();
    let n = ready!(poll_io(io, cx, Interest::READABLE, offered, || {
        recv(fd, buf.spare_capacity_mut())
    }))?;
    // SAFETY: the system call wrote `n` bytes at the start of the spare capacity.
    unsafe { buf.advance_mut(n) };
    Poll::Ready(Ok(n))
}

fn poll_write(io: &TcpStream, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
    let fd = io.as_raw_fd();
    poll_io(io, cx, Interest::WRITABLE, data.len(), || send(fd, data))
}

/// `call` (which moves at most `offered` bytes) made once `io` is ready for `interest`, again while it
/// would block or a signal comes first. A call that moves less than `offered` is made to look blocked to
/// [`TcpStream::try_io`], which then clears the readiness it saw before the call; its count is kept.
fn poll_io(
    io: &TcpStream,
    cx: &mut Context<'_>,
    interest: Interest,
    offered: usize,
    mut call: impl FnMut() -> io::Result<usize>,
) -> Poll<io::Result<usize>> {
    loop {
        match interest.is_readable() {
            true => ready!(io.poll_read_ready(cx))?,
            false => ready!(io.poll_write_ready(cx))?,
        }
        let mut moved = 0;
        let result = io.try_io(interest, || {
            moved = call()?;
            match 0 < moved && moved < offered {
                true => Err(io::ErrorKind::WouldBlock.into()),
                false => Ok(moved),
            }
        });
        match result {
            Ok(n) => return Poll::Ready(Ok(n)),
            Err(_) if moved > 0 => return Poll::Ready(Ok(moved)),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Poll::Ready(Err(e)),
        }
    }
}

#[cfg(target_os = "linux")]
fn recv(fd: RawFd, room: &mut [std::mem::MaybeUninit<u8>]) -> io::Result<usize> {
    // SAFETY: `room` is writable for its length.
    unsafe {
        transfer(
            libc::SYS_recvfrom,
            fd,
            room.as_mut_ptr().cast(),
            room.len(),
            0,
        )
    }
}

#[cfg(target_os = "linux")]
fn send(fd: RawFd, data: &[u8]) -> io::Result<usize> {
    // No signal for a closed peer: an error instead.
    let flags = libc::MSG_NOSIGNAL;
    // SAFETY: `data` is readable for its length (the kernel only reads it).
    unsafe {
        transfer(
            libc::SYS_sendto,
            fd,
            data.as_ptr().cast_mut().cast(),
            data.len(),
            flags,
        )
    }
}

#[cfg(target_os = "linux")]
/// `recvfrom` or `sendto` (`call`) on `fd` for `len` bytes at `at`, with no address: the bytes moved.
///
/// # Safety
/// `at` is valid for `len` bytes: writable for `recvfrom`, readable for `sendto`.
unsafe fn transfer(
    call: libc::c_long,
    fd: RawFd,
    at: *mut libc::c_void,
    len: usize,
    flags: libc::c_int,
) -> io::Result<usize> {
    // Each argument a whole register wide, as the system call takes them; no address (and no length of
    // one) for either call.
    let (fd, flags) = (libc::c_long::from(fd), libc::c_long::from(flags));
    // SAFETY: the caller vouches for `at` and `len`; the null address is what both calls take for none.
    let n = unsafe {
        libc::syscall(
            call,
            fd,
            at,
            len,
            flags,
            std::ptr::null_mut::<libc::sockaddr>(),
            0 as libc::c_long,
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// [`recv`] where the system call is not made directly: the C library's.
#[cfg(not(target_os = "linux"))]
fn recv(fd: RawFd, room: &mut [std::mem::MaybeUninit<u8>]) -> io::Result<usize> {
    // SAFETY: `room` is writable for its length.
    let n = unsafe { libc::recv(fd, room.as_mut_ptr().cast(), room.len(), 0) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// [`send`] where the system call is not made directly: the C library's. A closed peer is an error, not
/// a signal: the server keeps SIGPIPE ignored.
#[cfg(not(target_os = "linux"))]
fn send(fd: RawFd, data: &[u8]) -> io::Result<usize> {
    // SAFETY: `data` is readable for its length (the kernel only reads it).
    let n = unsafe { libc::send(fd, data.as_ptr().cast(), data.len(), 0) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::time::Duration;

    /// A loopback pair: ours on the event loop, the peer a blocking std socket.
    async fn pair() -> (TcpStream, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let peer =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (ours, _) = listener.accept().expect("accept");
        ours.set_nonblocking(true).expect("nonblocking");
        (TcpStream::from_std(ours).expect("register"), peer)
    }

    #[tokio::test]
    async fn reads_take_what_came_wait_for_more_and_see_the_end() {
        let (ours, mut peer) = pair().await;
        peer.write_all(b"abc").expect("write");
        let mut buf = BytesMut::with_capacity(16);
        assert_eq!(read_buf(&ours, &mut buf).await.expect("read"), 3);
        // That read was short: the next waits for the next bytes (a read before them would fail or spin).
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            peer.write_all(b"de").expect("write");
            peer
        });
        let more = tokio::time::timeout(Duration::from_secs(5), read_buf(&ours, &mut buf));
        assert_eq!(more.await.expect("in time").expect("read"), 2);
        assert_eq!(&buf[..], b"abcde");
        drop(writer.join().expect("writer"));
        assert_eq!(read_buf(&ours, &mut buf).await.expect("the end"), 0);
    }

    #[tokio::test]
    async fn a_read_that_fills_the_room_leaves_the_rest_to_read() {
        let (ours, mut peer) = pair().await;
        peer.write_all(&[7u8; 100]).expect("write");
        let mut buf = BytesMut::with_capacity(10);
        // Let all of it arrive, so that the first read fills its room.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let room = buf.capacity();
        assert_eq!(read_buf(&ours, &mut buf).await.expect("read"), room);
        // Not short: the socket may hold more, and the next read takes it without another event.
        let mut rest = BytesMut::with_capacity(200);
        let more = tokio::time::timeout(Duration::from_secs(5), read_buf(&ours, &mut rest));
        assert_eq!(more.await.expect("in time").expect("read"), 100 - room);
    }

    #[tokio::test]
    async fn a_full_buffer_gets_room() {
        let (ours, mut peer) = pair().await;
        peer.write_all(b"xyz").expect("write");
        let mut buf = BytesMut::new();
        assert_eq!(read_buf(&ours, &mut buf).await.expect("read"), 3);
        assert_eq!(&buf[..], b"xyz");
    }

    #[tokio::test]
    async fn writes_wait_for_room_and_all_of_it_arrives() {
        let (ours, mut peer) = pair().await;
        // Far more than the socket buffers hold, and nobody reading until a write has come up short: the
        // writes after it wait for the reader to make room.
        let data: Vec<u8> = (0..32 << 20).map(|i: u32| i as u8).collect();
        let (start, go) = std::sync::mpsc::channel::<()>();
        let reader = std::thread::spawn(move || {
            let _ = go.recv();
            let mut got = Vec::new();
            peer.read_to_end(&mut got).expect("read");
            got
        });
        let mut left = &data[..];
        let mut short = 0;
        while !left.is_empty() {
            let n = tokio::time::timeout(Duration::from_secs(10), write(&ours, left))
                .await
                .expect("in time")
                .expect("write");
            assert!(n > 0);
            if n < left.len() {
                short += 1;
                let _ = start.send(());
            }
            left = &left[n..];
        }
        let _ = start.send(());
        drop(ours);
        assert!(short > 0, "the first write came up short");
        assert!(
            reader.join().expect("reader") == data,
            "all of it, in order"
        );
    }

    #[tokio::test]
    async fn a_write_to_a_closed_peer_fails_without_a_signal() {
        let (ours, peer) = pair().await;
        // Closed: the first write after meets its reset, and a later one fails.
        drop(peer);
        let mut failed = None;
        for _ in 0..100 {
            if let Err(e) = write(&ours, b"anyone?").await {
                failed = Some(e);
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let e = failed.expect("a write fails once the peer has reset");
        assert!(
            matches!(
                e.kind(),
                io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
            ),
            "{e}"
        );
    }
}
