//! A response body passed from a replica to the caller on the own path, in its framing: a known length,
//! chunks (of this path's own making, as on the general path), or until the replica closes; each piece copied
//! to the cache's fill on its way.

use std::io::Write as _;

use bytes::Buf;

use super::super::forward::Copying;
use super::super::http1::{Chunks, LINE_MAX};
use super::conn::{to_caller, Conn};
use super::upstream::Upstream;

/// Writes the head in `conn.out` with the first `first` bytes of `conn.rbuf` (taken from it) in one write.
async fn write_head_with(conn: &mut Conn, first: usize) -> bool {
    conn.out.extend_from_slice(&conn.rbuf[..first]);
    conn.rbuf.advance(first);
    to_caller(&mut conn.io, conn.timeouts, &conn.out).await
}

/// Passes a body of `n` bytes. Whether all of it went.
pub(super) async fn pass_length(
    conn: &mut Conn,
    upstream: &mut Upstream,
    n: u64,
    copy: &mut Copying,
) -> bool {
    let first = conn
        .rbuf
        .len()
        .min(usize::try_from(n).unwrap_or(usize::MAX));
    copy.piece(&conn.rbuf[..first]);
    if !write_head_with(conn, first).await {
        return false;
    }
    let mut left = n - first as u64;
    while left > 0 {
        conn.rbuf.clear();
        conn.rbuf.reserve(16 * 1024);
        match upstream.read_buf(&mut conn.rbuf).await {
            Ok(0) | Err(_) => return false,
            Ok(_) => {}
        }
        let take = conn
            .rbuf
            .len()
            .min(usize::try_from(left).unwrap_or(usize::MAX));
        copy.piece(&conn.rbuf[..take]);
        if !to_caller(&mut conn.io, conn.timeouts, &conn.rbuf[..take]).await {
            return false;
        }
        conn.rbuf.advance(take);
        left -= take as u64;
    }
    true
}

/// Appends `data` as one chunk.
fn chunk(out: &mut Vec<u8>, data: &[u8]) {
    if !data.is_empty() {
        let _ = write!(out, "{:x}\r\n", data.len());
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    }
}

/// Passes a chunked body on in chunks of this path's own making (the replica's extensions and trailers
/// stay behind, as on the general path), until its last chunk. Whether all of it went.
pub(super) async fn pass_chunked(
    conn: &mut Conn,
    upstream: &mut Upstream,
    copy: &mut Copying,
) -> bool {
    let mut scan = Chunks::Size;
    let mut data = Vec::new();
    loop {
        data.clear();
        let Ok(used) = scan.advance(&conn.rbuf, &mut data) else {
            return false;
        };
        // `conn.out` holds the head before the first write, and is this round's chunks after it.
        for &(at, len) in &data {
            copy.piece(&conn.rbuf[at..at + len]);
            chunk(&mut conn.out, &conn.rbuf[at..at + len]);
        }
        conn.rbuf.advance(used);
        let done = matches!(scan, Chunks::Done);
        if done {
            conn.out.extend_from_slice(b"0\r\n\r\n");
        }
        if !conn.out.is_empty() && !to_caller(&mut conn.io, conn.timeouts, &conn.out).await {
            return false;
        }
        conn.out.clear();
        if done {
            return true;
        }
        if conn.rbuf.len() > LINE_MAX {
            return false;
        }
        conn.rbuf.reserve(16 * 1024);
        match upstream.read_buf(&mut conn.rbuf).await {
            Ok(0) | Err(_) => return false,
            Ok(_) => {}
        }
    }
}

/// Passes a body that ends when the replica closes, in chunks. Whether all of it went.
pub(super) async fn pass_until_close(
    conn: &mut Conn,
    upstream: &mut Upstream,
    copy: &mut Copying,
) -> bool {
    loop {
        copy.piece(&conn.rbuf);
        chunk(&mut conn.out, &conn.rbuf);
        conn.rbuf.clear();
        if !to_caller(&mut conn.io, conn.timeouts, &conn.out).await {
            return false;
        }
        conn.out.clear();
        conn.rbuf.reserve(16 * 1024);
        match upstream.read_buf(&mut conn.rbuf).await {
            Ok(0) => return to_caller(&mut conn.io, conn.timeouts, b"0\r\n\r\n").await,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
}
