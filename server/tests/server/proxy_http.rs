//! The serving proxy at the byte level: what a caller gets and what a replica sees, for every way an HTTP/1.1
//! message may be framed, on the data plane's own path and on the general path it hands connections to.
//! The replica is a raw socket server (Python's standard library) that answers each path in one framing.

use crate::common;

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const NS: &str = "admin";

/// The replica: answers `/chunked` in chunks with a trailer, `/close` until it closes, `/continue` after a
/// `100 Continue`, `/nocontent` with 204, `/silent` and then closes without saying so, `/echo` with the head
/// and body it got (and the fields its `X-Reply`s ask for), `/early` before it reads the upload (`/deaf` too, and then reads nothing for 30 s;
/// `/mute` reads nothing and answers nothing for 30 s), `/named` with a `Connection` naming its length,
/// `/drip` with an event stream of 40 events 50 ms apart, `/slow` with `slow` after 2.5 s (`/late`: 1.8 s),
/// `/odd` with status 999, `/stall` with
/// the first 4 bytes of 10 and the rest 3 s later, `/huge` with 64 MiB, anything else with `ok` and hop-by-hop
/// fields of its own.
const REPLICA: &str = r#"
import os, socket, threading, time
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", int(os.environ["PORT"])))
srv.listen(64)

def read_head(f):
    lines = []
    while True:
        line = f.readline()
        if not line:
            return None
        if line in (b"\r\n", b"\n"):
            return lines
        lines.append(line)

def serve(conn):
    f = conn.makefile("rb")
    while True:
        head = read_head(f)
        if not head:
            break
        method, path, _ = head[0].decode().split(" ", 2)
        path = path.split("?")[0]
        # Defined before any branch uses it, on a connection's first request too.
        def send(status, body=b"", extra=""):
            text = f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode()
            conn.sendall(text + (b"" if method == "HEAD" else body))
        length, chunked = 0, False
        for line in head[1:]:
            name, value = line.decode().split(":", 1)
            if name.strip().lower() == "content-length":
                length = int(value)
            if name.strip().lower() == "transfer-encoding":
                chunked = value.strip().lower() == "chunked"
        upgrade = next((l.decode().split(":", 1)[1].strip() for l in head[1:] if l.lower().startswith(b"upgrade:")), None)
        if path == "/ws" and upgrade:
            # Agrees to a WebSocket, then sends back every byte it gets until the caller ends.
            import base64, hashlib
            key = next(l.decode().split(":", 1)[1].strip() for l in head[1:] if l.lower().startswith(b"sec-websocket-key:"))
            accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
            conn.sendall(f"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n".encode())
            while True:
                data = f.read1(4096)
                if not data:
                    break
                conn.sendall(data)
            break
        if path == "/early":
            # Answers before it reads the upload, then takes the rest and closes.
            conn.sendall(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 8\r\nConnection: close\r\n\r\ntoo much")
            f.read(length)
            break
        if path == "/mute":
            # Neither reads the upload nor answers, for 30 s.
            time.sleep(30)
            break
        if path == "/deaf":
            # Answers before it reads the upload, and then reads nothing for 30 s.
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nearly")
            time.sleep(30)
            break
        if path == "/continue-upload":
            # Tells the caller to go on before it reads the body, then answers with what it got.
            conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            got = f.read(length)
            send("200 OK", str(len(got)).encode())
            continue
        body = f.read(length) if length else b""
        while chunked:
            size = int(f.readline().split(b";")[0], 16)
            if size == 0:
                while f.readline() not in (b"\r\n", b"\n", b""):
                    pass
                break
            body += f.read(size)
            f.readline()
        if path == "/chunked":
            conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 99\r\n"
                         b"Trailer: X-Sum\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Sum: 11\r\n\r\n")
        elif path == "/close":
            conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end")
            break
        elif path == "/continue":
            conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            send("200 OK", b"after continue")
        elif path == "/named":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: Content-Length\r\n\r\nok")
        elif path == "/drip":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            try:
                for i in range(40):
                    conn.sendall(b"c\r\ndata: drop\n\n\r\n")
                    time.sleep(0.05)
                conn.sendall(b"0\r\n\r\n")
            except OSError:
                break
        elif path == "/slow":
            time.sleep(2.5)
            send("200 OK", b"slow")
        elif path == "/odd":
            conn.sendall(b"HTTP/1.1 999 Odd\r\nContent-Length: 2\r\n\r\nhm")
        elif path == "/late":
            time.sleep(1.8)
            send("200 OK", b"late")
        elif path == "/huge":
            try:
                send("200 OK", b"x" * (64 << 20))
            except OSError:
                break
        elif path == "/stall":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\npart")
            time.sleep(3)
            try:
                conn.sendall(b"ial!!!")
            except OSError:
                break
        elif path == "/nocontent":
            conn.sendall(b"HTTP/1.1 204 No Content\r\n\r\n")
        elif path == "/silent":
            send("200 OK", b"bye")
            break
        elif path == "/echo":
            # `X-Reply: Name: value` asks for that field in the answer.
            asked = [l.decode().split(":", 1)[1].strip() for l in head[1:] if l.lower().startswith(b"x-reply:")]
            fields = "Content-Type: text/plain\r\n" + "".join(a + "\r\n" for a in asked)
            send("200 OK", b"".join(head) + b"\r\n" + body, fields)
        else:
            send("200 OK", b"ok", "Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\n")
    conn.close()

while True:
    conn, _ = srv.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"#;

/// A response as read off the connection: its status, its head as text, and its body (de-chunked).
struct Answer {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Answer {
    fn field(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }
}

/// A caller's connection, reading answers one by one.
struct Caller {
    read: tokio::net::tcp::OwnedReadHalf,
    write: Option<tokio::net::tcp::OwnedWriteHalf>,
    buf: Vec<u8>,
}

impl Caller {
    async fn connect(url: &str) -> Caller {
        let addr = url.strip_prefix("http://").expect("an http URL");
        let (read, write) = TcpStream::connect(addr)
            .await
            .expect("connect")
            .into_split();
        Caller {
            read,
            write: Some(write),
            buf: Vec::new(),
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        let write = self.write.as_mut().expect("the sending half");
        write.write_all(bytes).await.expect("send");
    }

    /// Reads until `buf` holds `n` bytes; false when the connection closed first.
    async fn fill(&mut self, n: usize) -> bool {
        while self.buf.len() < n {
            self.buf.reserve(65536);
            let read =
                tokio::time::timeout(Duration::from_secs(20), self.read.read_buf(&mut self.buf));
            if read.await.expect("an answer in time").expect("read") == 0 {
                return false;
            }
        }
        true
    }

    /// Takes `n` bytes from what was read.
    async fn take(&mut self, n: usize) -> Vec<u8> {
        assert!(self.fill(n).await, "the connection closed mid-answer");
        self.buf.drain(..n).collect()
    }

    /// A line, without its end.
    async fn line(&mut self) -> String {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = self.take(end + 2).await;
                return String::from_utf8_lossy(&line[..end]).into_owned();
            }
            let want = self.buf.len() + 1;
            assert!(self.fill(want).await, "the connection closed mid-line");
        }
    }

    /// The next answer, to a request with method `method`.
    async fn answer(&mut self, method: &str) -> Answer {
        let mut head = String::new();
        loop {
            let line = self.line().await;
            if line.is_empty() {
                break;
            }
            head.push_str(&line);
            head.push('\n');
        }
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("a status");
        let mut answer = Answer {
            status,
            head,
            body: Vec::new(),
        };
        if method == "HEAD" || status == 101 || status == 204 || status == 304 {
            return answer;
        }
        if answer.field("transfer-encoding").as_deref() == Some("chunked") {
            loop {
                let size = self.line().await;
                let size = usize::from_str_radix(size.split(';').next().unwrap_or(""), 16);
                let size = size.expect("a chunk size");
                if size == 0 {
                    // Trailers, up to the empty line.
                    while !self.line().await.is_empty() {}
                    return answer;
                }
                let data = self.take(size).await;
                answer.body.extend_from_slice(&data);
                assert_eq!(self.take(2).await, b"\r\n");
            }
        }
        let length = answer.field("content-length").expect("a framed answer");
        answer.body = self.take(length.parse().expect("a length")).await;
        answer
    }

    /// Whether the server closed the connection with nothing more written (after what was read).
    async fn closed(&mut self) -> bool {
        !self.fill(self.buf.len() + 1).await
    }
}

/// A server with the raw replica behind endpoint `raw` (public, one replica, running), and the path
/// prefix of that endpoint.
async fn server_with_raw_replica() -> (common::TestServer, String) {
    server_with_replica(json!({})).await
}

/// [`server_with_raw_replica`], with `extra` set in the endpoint's spec.
async fn server_with_replica(extra: serde_json::Value) -> (common::TestServer, String) {
    server_configured(extra, |_| {}).await
}

/// [`server_with_replica`], on a server whose configuration `configure` changes.
async fn server_configured(
    extra: serde_json::Value,
    configure: impl FnOnce(&mut switchyard_server::config::Config),
) -> (common::TestServer, String) {
    let server = common::spawn_with(|c| {
        c.runtime.tick_ms = 50;
        configure(c);
    })
    .await;
    let body = json!({
        "name": "raw",
        "type": "public",
        "provider": {"vendor": "aws", "region": "us-east-1"},
        "compute": {"accelerator": "cpu", "instanceSize": "x2", "instanceType": "intel-icl",
                    "scaling": {"minReplica": 1, "maxReplica": 1}},
        "model": {
            "framework": "custom", "repository": "test/raw", "task": "feature-extraction",
            "image": {"custom": {"url": "local/raw", "healthRoute": "/health"}},
            "command": ["python3", "-c", REPLICA],
        },
    });
    let mut body = body;
    if let (Some(spec), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    server
        .admin
        .create_endpoint::<serde_json::Value>(NS, &body)
        .await
        .expect("create the endpoint");
    for _ in 0..600 {
        let ep: serde_json::Value = server.admin.get_endpoint(NS, "raw").await.expect("get");
        if ep["status"]["state"] == "running" {
            return (server, format!("/endpoints/{NS}/raw"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the raw replica never ran");
}

fn get(method: &str, path: &str, extra: &str) -> Vec<u8> {
    format!("{method} {path} HTTP/1.1\r\nHost: switchyard.test\r\n{extra}\r\n").into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_framing_passes_and_the_replica_sees_its_own_request() {
    let (server, ep) = server_with_raw_replica().await;
    let mut caller = Caller::connect(&server.url).await;

    // Pipelined: all sent at once, answered in order on the one connection.
    let mut requests = Vec::new();
    for (method, path) in [
        ("GET", "/chunked"),
        ("GET", "/close"),
        ("HEAD", "/"),
        ("GET", "/nocontent"),
        ("GET", "/continue"),
        ("GET", "/?a=1&b=%2F"),
    ] {
        requests.extend(get(method, &format!("{ep}{path}"), ""));
    }
    caller.send(&requests).await;

    let chunked = caller.answer("GET").await;
    assert_eq!(
        (chunked.status, &chunked.body[..]),
        (200, &b"hello world"[..])
    );
    assert_eq!(chunked.field("content-length"), None, "{}", chunked.head);
    let until_closed = caller.answer("GET").await;
    assert_eq!(until_closed.body, b"until the end");
    assert_eq!(
        until_closed.field("transfer-encoding").as_deref(),
        Some("chunked")
    );
    assert_eq!(
        until_closed.field("connection"),
        None,
        "the replica's close is its own"
    );
    let head = caller.answer("HEAD").await;
    assert_eq!(
        (head.status, head.field("content-length").as_deref()),
        (200, Some("2"))
    );
    assert!(head.body.is_empty());
    assert_eq!(caller.answer("GET").await.status, 204);
    let after = caller.answer("GET").await;
    assert_eq!(
        (after.status, &after.body[..]),
        (200, &b"after continue"[..])
    );
    let plain = caller.answer("GET").await;
    assert_eq!((plain.status, &plain.body[..]), (200, &b"ok"[..]));
    for hop in ["x-hop", "keep-alive", "connection"] {
        assert_eq!(plain.field(hop), None, "{hop} stays behind: {}", plain.head);
    }
    assert!(
        plain.field("date").is_some(),
        "a date is added: {}",
        plain.head
    );

    // What the replica gets: its own Host, the caller's address, none of the caller's hop fields or
    // token, the path after the endpoint's, and a body larger than one read, whole.
    let upload = vec![b'x'; 300_000];
    let mut echo = get(
        "POST",
        &format!("{ep}/echo?q=1"),
        &format!(
            "Content-Length: {}\r\nAuthorization: Bearer not-for-the-replica\r\nConnection: X-Trace\r\n\
             X-Trace: 1\r\nKeep-Alive: timeout=1\r\nX-Forwarded-For: 6.6.6.6\r\nX-Private-Link-Account: 1\r\n\
             Proxy-Connection: keep-alive\r\nX-Kept: yes\r\n",
            upload.len()
        ),
    );
    echo.extend_from_slice(&upload);
    caller.send(&echo).await;
    let seen = caller.answer("POST").await;
    let text = String::from_utf8_lossy(&seen.body).into_owned();
    let (seen_head, seen_body) = text
        .split_once("\r\n\r\n")
        .expect("the echo's head and body");
    assert!(
        seen_head.starts_with("POST /echo?q=1 HTTP/1.1\r\n"),
        "{seen_head}"
    );
    let seen_field = |name: &str| {
        seen_head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    };
    assert!(
        seen_field("host").is_some_and(|h| h.starts_with("127.0.0.1:")),
        "{seen_head}"
    );
    assert_eq!(seen_field("x-forwarded-for").as_deref(), Some("127.0.0.1"));
    assert_eq!(seen_field("x-kept").as_deref(), Some("yes"));
    for gone in [
        "authorization",
        "connection",
        "x-trace",
        "keep-alive",
        "proxy-connection",
        "x-private-link-account",
    ] {
        assert_eq!(
            seen_field(gone),
            None,
            "{gone} reached the replica: {seen_head}"
        );
    }
    assert_eq!(seen_body.len(), upload.len(), "the whole body");

    // A replica that closes a kept connection without saying so: the next request goes on a new one.
    for _ in 0..5 {
        caller.send(&get("GET", &format!("{ep}/silent"), "")).await;
        assert_eq!(caller.answer("GET").await.body, b"bye");
        caller.send(&get("GET", &format!("{ep}/"), "")).await;
        assert_eq!(caller.answer("GET").await.status, 200);
    }

    // A `Connection` naming the length changes no framing, either way: the replica gets the body's length
    // (and the next request as a request), the caller the response's.
    let mut named = get(
        "POST",
        &format!("{ep}/echo"),
        "Connection: Content-Length\r\nContent-Length: 3\r\n",
    );
    named.extend_from_slice(b"abc");
    named.extend(get("GET", &format!("{ep}/named"), ""));
    caller.send(&named).await;
    let seen = caller.answer("POST").await;
    let text = String::from_utf8_lossy(&seen.body).into_owned();
    assert!(
        text.to_ascii_lowercase().contains("content-length: 3\r\n"),
        "{text}"
    );
    assert!(text.ends_with("\r\n\r\nabc"), "{text}");
    let told = caller.answer("GET").await;
    assert_eq!(
        (told.field("content-length").as_deref(), &told.body[..]),
        (Some("2"), &b"ok"[..])
    );

    // The caller's `Connection: close` is kept: answered, then closed.
    caller
        .send(&get("GET", &format!("{ep}/"), "Connection: close\r\n"))
        .await;
    let last = caller.answer("GET").await;
    assert_eq!(
        (last.status, last.field("connection").as_deref()),
        (200, Some("close"))
    );
    assert!(caller.closed().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_requests_go_to_the_general_path_on_the_same_connection() {
    let (server, ep) = server_with_raw_replica().await;

    // A chunked upload: the general path takes the connection, and keeps serving it.
    let mut caller = Caller::connect(&server.url).await;
    let mut upload = get(
        "POST",
        &format!("{ep}/echo"),
        "Transfer-Encoding: chunked\r\n",
    );
    upload.extend_from_slice(b"4\r\nabcd\r\n3\r\nefg\r\n0\r\n\r\n");
    caller.send(&upload).await;
    let seen = caller.answer("POST").await;
    assert_eq!(seen.status, 200);
    assert!(
        seen.body.ends_with(b"\r\n\r\nabcdefg"),
        "{}",
        String::from_utf8_lossy(&seen.body)
    );
    caller.send(&get("GET", &format!("{ep}/chunked"), "")).await;
    assert_eq!(caller.answer("GET").await.body, b"hello world");
    // The API, on a connection that served an endpoint.
    caller.send(&get("GET", "/health", "")).await;
    assert_eq!(caller.answer("GET").await.status, 200);

    // HTTP/1.0, and a head that is not HTTP: the general path answers them.
    let mut old = Caller::connect(&server.url).await;
    old.send(format!("GET {ep}/ HTTP/1.0\r\n\r\n").as_bytes())
        .await;
    let answer = old.answer("GET").await;
    assert_eq!((answer.status, &answer.body[..]), (200, &b"ok"[..]));
    let mut bad = Caller::connect(&server.url).await;
    bad.send(b"GET /endpoints/admin/raw/ HTTP/1.1\r\nHost: x\r\nBad Field\r\n\r\n")
        .await;
    assert_eq!(bad.answer("GET").await.status, 400);

    // Unknown endpoints and dot segments are answered as before.
    let mut caller = Caller::connect(&server.url).await;
    caller
        .send(&get("GET", &format!("/endpoints/{NS}/nope/x"), ""))
        .await;
    assert_eq!(caller.answer("GET").await.status, 404);
    caller
        .send(&get("GET", &format!("{ep}/a/%2e%2e/b"), ""))
        .await;
    assert_eq!(caller.answer("GET").await.status, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_let_go_and_busy_ones_kept() {
    // A head has all the time it needs here: what closes a connection is idleness. The own path's
    // (the general path has `header_timeout_s` alone, for both).
    let (server, ep) = server_configured(json!({}), |c| {
        c.proxy.own_path = true;
        c.proxy.idle_timeout_s = 2;
        c.proxy.header_timeout_s = 600;
    })
    .await;

    // A request every 0.6 s, for longer than the timeout: each one sets the time again. And one answered
    // after longer than the timeout: the time does not run while a request is served.
    let mut caller = Caller::connect(&server.url).await;
    for _ in 0..6 {
        caller.send(&get("GET", &format!("{ep}/"), "")).await;
        assert_eq!(caller.answer("GET").await.body, b"ok");
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
    caller.send(&get("GET", &format!("{ep}/slow"), "")).await;
    assert_eq!(caller.answer("GET").await.body, b"slow");
    // Then silence: it is closed, with nothing written; so is a connection that never says anything.
    assert!(caller.closed().await, "an idle connection is let go");
    let mut silent = Caller::connect(&server.url).await;
    assert!(silent.closed().await, "a silent connection is let go");

    // A head begun is no longer idle: it is served when it ends, after more than the idle time.
    let mut parts = Caller::connect(&server.url).await;
    let request = get("GET", &format!("{ep}/"), "");
    let (first, rest) = request.split_at(10);
    parts.send(first).await;
    tokio::time::sleep(Duration::from_millis(3000)).await;
    parts.send(rest).await;
    assert_eq!(parts.answer("GET").await.body, b"ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heads_that_do_not_end_in_time_are_let_go() {
    // An idle connection has longer than a test waits for an answer (20 s): what closes one here is the
    // head's time.
    let (server, ep) = server_configured(json!({}), |c| {
        c.proxy.idle_timeout_s = 600;
        c.proxy.header_timeout_s = 2;
    })
    .await;

    // A head begun and never ended.
    let mut slow = Caller::connect(&server.url).await;
    slow.send(format!("GET {ep}/ HTTP/1.1\r\nHost: x\r\n").as_bytes())
        .await;
    assert!(slow.closed().await, "a begun head is let go");
    // A head that trickles in a byte at a time, each in good time: the bytes do not put its time off.
    let mut trickle = Caller::connect(&server.url).await;
    let mut write = trickle.write.take().expect("the sending half");
    let sending = tokio::spawn(async move {
        for b in b"GET / HTTP/1.1\r\nX-Long: ".iter().chain(&[b'a'; 200]) {
            if write.write_all(&[*b]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    assert!(trickle.closed().await, "a trickling head is let go");
    sending.abort();
    // The general path: a connection idle after an API request is let go by the head's time.
    let mut api = Caller::connect(&server.url).await;
    api.send(&get("GET", "/health", "")).await;
    assert_eq!(api.answer("GET").await.status, 200);
    assert!(api.closed().await, "the API's connection is let go");
    // A request served for longer than the head's time is answered.
    let mut caller = Caller::connect(&server.url).await;
    caller.send(&get("GET", &format!("{ep}/slow"), "")).await;
    assert_eq!(caller.answer("GET").await.body, b"slow");
}

/// Everything `caller` is sent until the server closes the connection.
async fn until_closed(caller: &mut Caller) -> Vec<u8> {
    while !caller.closed().await {}
    std::mem::take(&mut caller.buf)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_that_keep_callers_waiting_are_let_go() {
    let (server, ep) = server_configured(json!({}), |c| c.proxy.replica_timeout_s = 1).await;
    // On the own path (HTTP/1.1) and the general one (HTTP/1.0); each connection ends after its answer.
    let request = |path: &str, version: &str| {
        let head = format!("GET {ep}{path} HTTP/{version}\r\nHost: switchyard.test\r\n");
        (head + "Connection: close\r\n\r\n").into_bytes()
    };
    for version in ["1.1", "1.0"] {
        // No head within the time: 504, in the spec's shape.
        let mut caller = Caller::connect(&server.url).await;
        caller.send(&request("/slow", version)).await;
        let answer = caller.answer("GET").await;
        let error: serde_json::Value = serde_json::from_slice(&answer.body).expect("json");
        assert_eq!(answer.status, 504, "HTTP/{version}: {}", answer.head);
        assert_eq!(
            error["error"], "the endpoint's replica did not answer in time",
            "HTTP/{version}"
        );

        // A body that stops for longer: the caller gets what came, and then the connection's end.
        let mut caller = Caller::connect(&server.url).await;
        caller.send(&request("/stall", version)).await;
        while !caller.line().await.is_empty() {}
        assert_eq!(until_closed(&mut caller).await, b"part", "HTTP/{version}");

        // A body that takes longer than the time in all, in short steps: passed whole.
        let mut caller = Caller::connect(&server.url).await;
        caller.send(&request("/drip", version)).await;
        let events = until_closed(&mut caller).await;
        let events = String::from_utf8_lossy(&events)
            .matches("data: drop")
            .count();
        assert_eq!(events, 40, "HTTP/{version}");
    }

    // On a kept connection, whose waits on replicas share one timer set again for each: answers that came
    // in time, then one kept waiting for longer (`/slow`, 2.5 s), 504 at its own time.
    let mut caller = Caller::connect(&server.url).await;
    for _ in 0..3 {
        caller.send(&get("GET", &format!("{ep}/echo"), "")).await;
        assert_eq!(caller.answer("GET").await.status, 200);
    }
    caller.send(&get("GET", &format!("{ep}/slow"), "")).await;
    let answer = caller.answer("GET").await;
    assert_eq!(answer.status, 504, "a kept connection: {}", answer.head);

    // After a short upload, the replica's time runs from the upload's end, once: a head 1.8 s later is
    // too late for 1 s. On the own path (a known length) and the general one (chunked).
    for (framing, body) in [
        ("Content-Length: 5\r\n", "hello"),
        ("Transfer-Encoding: chunked\r\n", "5\r\nhello\r\n0\r\n\r\n"),
    ] {
        let mut caller = Caller::connect(&server.url).await;
        let mut upload = get("POST", &format!("{ep}/late"), framing);
        upload.extend_from_slice(body.as_bytes());
        caller.send(&upload).await;
        let answer = caller.answer("POST").await;
        assert_eq!(answer.status, 504, "{framing}: {}", answer.head);
    }

    // A replica that answers before the upload ends and then takes no more of it: the caller has the
    // answer, and then the connection's end (not the replica's, 30 s later); one that takes none of it and
    // says nothing: 504. On the own path (a known length) and the general one (chunked).
    for (path, chunked) in [
        ("/deaf", false),
        ("/deaf", true),
        ("/mute", false),
        ("/mute", true),
    ] {
        let size = 16 << 20;
        let framing = match chunked {
            true => "Transfer-Encoding: chunked\r\n".to_string(),
            false => format!("Content-Length: {size}\r\n"),
        };
        let mut caller = Caller::connect(&server.url).await;
        caller
            .send(&get("POST", &format!("{ep}{path}"), &framing))
            .await;
        let mut write = caller.write.take().expect("the sending half");
        let uploading = tokio::spawn(async move {
            let data = vec![b'u'; 64 << 10];
            for _ in 0..size / data.len() {
                let sent = match chunked {
                    true => [format!("{:x}\r\n", data.len()).as_bytes(), &data, b"\r\n"].concat(),
                    false => data.clone(),
                };
                if write.write_all(&sent).await.is_err() {
                    return;
                }
            }
        });
        let answer = caller.answer("POST").await;
        let (status, body) = (answer.status, String::from_utf8_lossy(&answer.body));
        match path {
            "/deaf" => assert_eq!((status, &body[..]), (200, "early"), "{framing}"),
            _ => assert_eq!(status, 504, "{path} {framing}: {body}"),
        }
        assert!(caller.closed().await, "{path} {framing}");
        uploading.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_that_keep_the_proxy_waiting_are_let_go() {
    // The replica's time as short as the caller's: what the proxy waits on the caller for is not counted
    // against the replica.
    let (server, ep) = server_configured(json!({}), |c| {
        c.proxy.caller_timeout_s = 1;
        c.proxy.replica_timeout_s = 1;
    })
    .await;
    let stalled = |answer: &Answer| {
        let error: serde_json::Value = serde_json::from_slice(&answer.body).expect("json");
        (answer.status, error["error"].as_str().map(str::to_string))
    };
    let expected = (
        408,
        Some("the request body did not come in time".to_string()),
    );

    // A body that stops coming: on the own path (a known length) and the general one (chunked), 408 and
    // the connection's end.
    let uploads = [
        ("Content-Length: 10\r\n", &b"abcd"[..]),
        ("Transfer-Encoding: chunked\r\n", &b"4\r\nabcd\r\n"[..]),
    ];
    for (framing, part) in uploads {
        let mut caller = Caller::connect(&server.url).await;
        let mut upload = get("POST", &format!("{ep}/echo"), framing);
        upload.extend_from_slice(part);
        caller.send(&upload).await;
        let answer = caller.answer("POST").await;
        assert_eq!(stalled(&answer), expected, "{framing}: {}", answer.head);
        assert!(caller.closed().await, "{framing}");
    }

    // The API's JSON bodies too.
    let token = std::fs::read_to_string(server.data_dir.join("admin-token")).expect("token");
    let mut caller = Caller::connect(&server.url).await;
    let extra = format!(
        "Authorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n",
        token.trim()
    );
    let mut upload = get("POST", &format!("/v2/endpoint/{NS}"), &extra);
    upload.extend_from_slice(br#"{"name": "#);
    caller.send(&upload).await;
    let answer = caller.answer("POST").await;
    assert_eq!(stalled(&answer), expected, "the API: {}", answer.head);
    assert!(caller.closed().await, "the API");

    // A caller that takes nothing of a large answer for longer than its time: the connection ends before
    // all of it came (what the sockets' buffers held is still read), on both paths.
    for version in ["1.1", "1.0"] {
        let mut caller = Caller::connect(&server.url).await;
        let head = format!("GET {ep}/huge HTTP/{version}\r\nHost: switchyard.test\r\n\r\n");
        caller.send(head.as_bytes()).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let got = until_closed(&mut caller).await;
        assert_eq!(
            got.get(8..13),
            Some(&b" 200 "[..]),
            "HTTP/{version}: {:?}",
            got.get(..40).map(String::from_utf8_lossy)
        );
        assert!(got.len() < 64 << 20, "HTTP/{version}: {} bytes", got.len());
    }

    // A caller that takes its answer in steps, for longer than its time in all, is not cut off: on both
    // paths.
    for version in ["1.1", "1.0"] {
        let mut caller = Caller::connect(&server.url).await;
        let head = format!("GET {ep}/huge HTTP/{version}\r\nHost: switchyard.test\r\n");
        caller
            .send((head + "Connection: close\r\n\r\n").as_bytes())
            .await;
        loop {
            tokio::time::sleep(Duration::from_millis(400)).await;
            if !caller.fill(caller.buf.len() + (8 << 20)).await {
                break;
            }
        }
        let (got, whole) = (caller.buf.len(), 64 << 20);
        assert!(
            got > whole && caller.buf.ends_with(b"x"),
            "HTTP/{version}: {got} bytes"
        );
    }

    // Nor is one whose body comes in steps, for longer than its time (and the replica's) in all: on the
    // own path (a known length) and the general one (chunked).
    let parts = [b"ab", b"cd", b"ef", b"gh", b"ij", b"kl"];
    for chunked in [false, true] {
        let framing = match chunked {
            true => "Transfer-Encoding: chunked\r\n",
            false => "Content-Length: 12\r\n",
        };
        let mut caller = Caller::connect(&server.url).await;
        caller
            .send(&get("POST", &format!("{ep}/echo"), framing))
            .await;
        for part in parts {
            tokio::time::sleep(Duration::from_millis(400)).await;
            match chunked {
                true => caller.send(&[&b"2\r\n"[..], part, b"\r\n"].concat()).await,
                false => caller.send(part).await,
            }
        }
        if chunked {
            caller.send(b"0\r\n\r\n").await;
        }
        let answer = caller.answer("POST").await;
        let body = String::from_utf8_lossy(&answer.body);
        assert!(body.ends_with("\r\n\r\nabcdefghijkl"), "{framing}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_leaves_or_a_replica_that_answers_early_spoils_nothing() {
    let (server, ep) = server_with_raw_replica().await;

    // Callers that hang up mid-stream: the replica connections they leave are not used again mid-answer,
    // so every later caller gets its own answer.
    for _ in 0..6 {
        let mut leaving = Caller::connect(&server.url).await;
        leaving.send(&get("GET", &format!("{ep}/drip"), "")).await;
        assert!(leaving.line().await.starts_with("HTTP/1.1 200"));
        drop(leaving);
        // Long enough for the proxy to find the caller gone (at the stream's next event).
        tokio::time::sleep(Duration::from_millis(80)).await;
        for _ in 0..3 {
            let mut next = Caller::connect(&server.url).await;
            next.send(&get("GET", &format!("{ep}/"), "")).await;
            let answer = next.answer("GET").await;
            assert_eq!(
                (answer.status, &answer.body[..]),
                (200, &b"ok"[..]),
                "{}",
                answer.head
            );
        }
    }

    // An informational answer while an upload goes on does not stop it: the replica gets all of it.
    let mut caller = Caller::connect(&server.url).await;
    let size = 2 << 20;
    let mut upload = get(
        "POST",
        &format!("{ep}/continue-upload"),
        &format!("Content-Length: {size}\r\n"),
    );
    upload.extend(vec![b'y'; size]);
    caller.send(&upload).await;
    let answer = caller.answer("POST").await;
    assert_eq!(
        (answer.status, answer.body),
        (200, size.to_string().into_bytes())
    );
    caller.send(&get("GET", &format!("{ep}/"), "")).await;
    assert_eq!(
        caller.answer("GET").await.body,
        b"ok",
        "the connection goes on"
    );

    // A replica that answers an upload before it has read it: the caller gets that answer, and the
    // connection ends there (the rest of its body is not taken for a request).
    let mut uploading = Caller::connect(&server.url).await;
    let size = 4 << 20;
    uploading
        .send(&get(
            "POST",
            &format!("{ep}/early"),
            &format!("Content-Length: {size}\r\n"),
        ))
        .await;
    // Sent on while the answer is read: the proxy may stop taking it at any point.
    let mut write = uploading.write.take().expect("the sending half");
    let sending = tokio::spawn(async move {
        let _ = write.write_all(&vec![b'x'; size]).await;
        write
    });
    let early = uploading.answer("POST").await;
    assert_eq!(
        (early.status, &early.body[..]),
        (413, &b"too much"[..]),
        "{}",
        early.head
    );
    assert_eq!(
        early.field("connection").as_deref(),
        Some("close"),
        "{}",
        early.head
    );
    assert!(uploading.closed().await);
    drop(sending.await.expect("the upload task"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_badly_framed_upload_is_the_callers_fault() {
    let (server, ep) = server_with_raw_replica().await;
    // A chunk size that is not hex: 400 in the spec's shape, not a 502 charged to the replica.
    let mut caller = Caller::connect(&server.url).await;
    let mut upload = get(
        "POST",
        &format!("{ep}/echo"),
        "Transfer-Encoding: chunked\r\n",
    );
    upload.extend_from_slice(b"zz\r\nabc\r\n0\r\n\r\n");
    caller.send(&upload).await;
    let answer = caller.answer("POST").await;
    assert_eq!(answer.status, 400, "{}", answer.head);
    let error: serde_json::Value = serde_json::from_slice(&answer.body).expect("json");
    assert_eq!(error["error"], "the request body could not be read");
    assert!(answer.field("x-request-id").is_some(), "{}", answer.head);
    // A head or framing no path can read: 400 in the spec's shape (not a bare one), then the end.
    for (head, why) in [
        (
            format!("POST {ep}/echo HTTP/1.1\r\nHost: s\r\nContent-Length: abc\r\n\r\n"),
            "Content-Length",
        ),
        (
            format!("POST {ep}/echo HTTP/1.1\r\nHost: s\r\nContent-Length: +3\r\n\r\nabc"),
            "Content-Length",
        ),
        (format!("GET {ep}/ HTTP/9.9\r\nHost: s\r\n\r\n"), "not HTTP"),
        (
            format!("GET {ep}/ HTTP/1.1\r\nHost: s\r\nX-Bad: a\0b\r\n\r\n"),
            "not HTTP",
        ),
        (
            "GET /v2/endpoint/admin HTTP/1.1\r\nHost\r\n\r\n".to_string(),
            "not HTTP",
        ),
        (format!("GET {ep}/ HTTP/1.1\r\n\r\n"), "one Host"),
        (
            format!("GET {ep}/ HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
            "one Host",
        ),
        (
            "GET /api/v1/catalog HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n".to_string(),
            "one Host",
        ),
    ] {
        let mut caller = Caller::connect(&server.url).await;
        caller.send(head.as_bytes()).await;
        let answer = caller.answer("POST").await;
        assert_eq!(answer.status, 400, "{head:?}: {}", answer.head);
        let error: serde_json::Value = serde_json::from_slice(&answer.body).expect("json");
        let said = error["error"].as_str().unwrap_or_default();
        assert!(said.contains(why), "{head:?}: {error}");
        assert!(answer.field("x-error-message").is_some(), "{}", answer.head);
        assert!(caller.closed().await, "{head:?}");
    }
    // A transfer coding other than chunked is not implemented (as nginx says).
    let mut caller = Caller::connect(&server.url).await;
    let gzip = format!("POST {ep}/echo HTTP/1.1\r\nHost: s\r\nTransfer-Encoding: gzip\r\n\r\n");
    caller.send(gzip.as_bytes()).await;
    let answer = caller.answer("POST").await;
    assert_eq!(answer.status, 501, "{}", answer.head);
    assert!(caller.closed().await);
    // On a connection hyper serves (since a chunked upload), a request without a Host too.
    let mut caller = Caller::connect(&server.url).await;
    let chunked = format!(
        "POST {ep}/echo HTTP/1.1\r\nHost: s\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    );
    caller.send(chunked.as_bytes()).await;
    assert_eq!(caller.answer("POST").await.status, 200);
    caller
        .send(format!("GET {ep}/ HTTP/1.1\r\n\r\n").as_bytes())
        .await;
    let answer = caller.answer("GET").await;
    assert_eq!(answer.status, 400, "{}", answer.head);
    let error: serde_json::Value = serde_json::from_slice(&answer.body).expect("json");
    assert_eq!(error["error"], "an HTTP/1.1 request has one Host field");
    // A replica's status past 599 is no answer: 502, on both paths.
    for version in ["1.1", "1.0"] {
        let mut caller = Caller::connect(&server.url).await;
        let odd = format!("GET {ep}/odd HTTP/{version}\r\nHost: s\r\n\r\n");
        caller.send(odd.as_bytes()).await;
        let answer = caller.answer("GET").await;
        assert_eq!(answer.status, 502, "HTTP/{version}: {}", answer.head);
    }
    // No such endpoint, on either path: the spec's shape and an id.
    for version in ["1.1", "1.0"] {
        let mut caller = Caller::connect(&server.url).await;
        let nowhere = format!("GET /endpoints/{NS}/nowhere/x HTTP/{version}\r\nHost: s\r\nX-Request-Id: trace-{version}\r\n\r\n");
        caller.send(nowhere.as_bytes()).await;
        let answer = caller.answer("GET").await;
        assert_eq!(answer.status, 404, "{}", answer.head);
        // The caller's own id comes back, to find the request by.
        let id = answer.field("x-request-id");
        assert_eq!(id, Some(format!("trace-{version}")), "{}", answer.head);
        assert!(answer.field("x-error-message").is_some(), "{}", answer.head);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_are_cached_in_whatever_framing_they_came() {
    let (server, ep) = server_with_replica(json!({"cacheHttpResponses": true})).await;
    let mut caller = Caller::connect(&server.url).await;
    let mut post = get("POST", &format!("{ep}/echo?x=1"), "Content-Length: 5\r\n");
    post.extend_from_slice(b"hello");
    for (request, method) in [
        (get("GET", &format!("{ep}/chunked"), ""), "GET"),
        (post, "POST"),
    ] {
        caller.send(&request).await;
        let miss = caller.answer(method).await;
        assert_eq!(
            miss.field("x-cache").as_deref(),
            Some("MISS"),
            "{}",
            miss.head
        );
        caller.send(&request).await;
        let hit = caller.answer(method).await;
        assert_eq!(hit.field("x-cache").as_deref(), Some("HIT"), "{}", hit.head);
        // The proxy's own answer carries an id to quote, as the API's do (a new one: the caller sent none).
        let id = hit.field("x-request-id").unwrap_or_default();
        assert!(id.len() >= 16, "{}", hit.head);
        assert_eq!((hit.status, &hit.body), (miss.status, &miss.body));
        assert_eq!(
            hit.field("content-length"),
            Some(hit.body.len().to_string())
        );
        assert_eq!(
            hit.field("trailer"),
            None,
            "hop fields are not kept: {}",
            hit.head
        );
    }
    // What has an effect always reaches the replica, and an answer that sets a cookie or says it is not
    // to be kept is not kept. Each is asked twice: a miss both times.
    let cases = [
        ("DELETE", ""),
        ("PUT", ""),
        ("PATCH", ""),
        ("OPTIONS", ""),
        ("GET", "X-Reply: Set-Cookie: session=alice\r\n"),
        ("GET", "X-Reply: Cache-Control: private, max-age=60\r\n"),
        ("POST", "X-Reply: Cache-Control: max-age=5, no-store\r\n"),
        ("GET", "X-Reply: cache-control: No-Cache\r\n"),
    ];
    for (i, (method, extra)) in cases.into_iter().enumerate() {
        let target = format!("{ep}/echo?case={i}");
        // On the own path (a length), then on hyper's (chunks), each on a connection of its own: one
        // handed to hyper stays there.
        for (framing, body) in [
            ("Content-Length: 0\r\n", ""),
            ("Transfer-Encoding: chunked\r\n", "0\r\n\r\n"),
        ] {
            let mut caller = Caller::connect(&server.url).await;
            let mut request = get(method, &target, &format!("{framing}{extra}"));
            request.extend_from_slice(body.as_bytes());
            for turn in 0..2 {
                caller.send(&request).await;
                let a = caller.answer(method).await;
                assert_eq!(a.status, 200, "{method} {extra}: {}", a.head);
                let what = a.field("x-cache");
                assert_eq!(
                    what.as_deref(),
                    Some("MISS"),
                    "{method} {extra} {framing} {turn}"
                );
            }
        }
    }
    // A body larger than the cache reads (1 MiB) is passed on uncached, not refused: with a length (the
    // own path, and hyper's when the length is known) and in chunks (hyper's, after reading 1 MiB).
    let big = vec![b'b'; 3 << 19];
    let chunked = [
        format!("{:x}\r\n", big.len()).as_bytes(),
        &big,
        b"\r\n0\r\n\r\n",
    ]
    .concat();
    for (framing, body) in [
        (format!("Content-Length: {}\r\n", big.len()), &big),
        ("Transfer-Encoding: chunked\r\n".to_string(), &chunked),
    ] {
        let mut caller = Caller::connect(&server.url).await;
        let mut upload = get("POST", &format!("{ep}/echo?big=1"), &framing);
        upload.extend_from_slice(body);
        for _ in 0..2 {
            caller.send(&upload).await;
            let a = caller.answer("POST").await;
            assert_eq!(a.status, 200, "{framing}: {}", a.head);
            assert_eq!(a.field("x-cache").as_deref(), Some("MISS"), "{framing}");
            assert!(a.body.ends_with(&big), "{framing}: all of it came");
        }
    }
    // Another body is another entry.
    let mut other = get("POST", &format!("{ep}/echo?x=1"), "Content-Length: 5\r\n");
    other.extend_from_slice(b"world");
    caller.send(&other).await;
    assert_eq!(
        caller.answer("POST").await.field("x-cache").as_deref(),
        Some("MISS")
    );
}

/// One request on a connection of its own, on the own path (`Content-Length`) or hyper's (chunks): its
/// answer.
async fn ask(server: &common::TestServer, target: &str, fields: &str, own_path: bool) -> Answer {
    let mut caller = Caller::connect(&server.url).await;
    let (framing, body) = match own_path {
        true => ("Content-Length: 0\r\n", ""),
        false => ("Transfer-Encoding: chunked\r\n", "0\r\n\r\n"),
    };
    let mut request = get("GET", target, &format!("{framing}{fields}"));
    request.extend_from_slice(body.as_bytes());
    caller.send(&request).await;
    caller.answer("GET").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_keeps_variants_and_callers_apart() {
    let (server, ep) = server_with_replica(json!({"cacheHttpResponses": true})).await;
    let secret = "alice-secret-session";
    for own_path in [true, false] {
        let on = if own_path { "own path" } else { "general path" };
        let target = format!("{ep}/echo?own={own_path}");
        let vary = "X-Reply: Vary: Cookie, Accept-Language\r\n";
        let ask_as = |cookie: Option<&str>, lang: &str| {
            let cookie = cookie.map(|c| format!("Cookie: session={c}\r\n"));
            format!(
                "{vary}{}Accept-Language: {lang}\r\n",
                cookie.unwrap_or_default()
            )
        };
        let steps = [
            // (cookie, language, expected X-Cache)
            (Some(secret), "fr", "MISS"),
            (None, "fr", "MISS"),
            (Some("bob"), "fr", "MISS"),
            (None, "fr", "HIT"),
            (None, "de", "MISS"),
            (Some("bob"), "fr", "MISS"),
            (None, "de", "HIT"),
        ];
        for (i, (cookie, lang, cache)) in steps.into_iter().enumerate() {
            let a = ask(&server, &target, &ask_as(cookie, lang), own_path).await;
            let body = String::from_utf8_lossy(&a.body).to_ascii_lowercase();
            assert_eq!(
                a.field("x-cache").as_deref(),
                Some(cache),
                "{on} step {i}: {}",
                a.head
            );
            // Only alice's own request ever sees her cookie.
            assert_eq!(body.contains(secret), i == 0, "{on} step {i}: {body}");
            assert!(
                body.contains(&format!("accept-language: {lang}")),
                "{on} step {i}: {body}"
            );
        }

        // Varying on everything: never kept.
        let star = format!("{ep}/echo?star={own_path}");
        for _ in 0..2 {
            let a = ask(&server, &star, "X-Reply: Vary: *\r\n", own_path).await;
            assert_eq!(
                a.field("x-cache").as_deref(),
                Some("MISS"),
                "{on}: {}",
                a.head
            );
        }

        // An answer to a cookie that says it is public is shared among callers with cookies (and with
        // the same values of what it varies on), never with those without.
        let public = format!("{ep}/echo?public={own_path}");
        let fields = |cookie: &str| {
            format!(
                "X-Reply: Cache-Control: public, max-age=60\r\nX-Reply: Vary: Accept-Language\r\n\
                 Accept-Language: fr\r\n{cookie}"
            )
        };
        let with_cookie = |c: &str| fields(&format!("Cookie: session={c}\r\n"));
        let first = ask(&server, &public, &with_cookie("carol"), own_path).await;
        assert_eq!(first.field("x-cache").as_deref(), Some("MISS"), "{on}");
        let again = ask(&server, &public, &with_cookie("dave"), own_path).await;
        assert_eq!(again.field("x-cache").as_deref(), Some("HIT"), "{on}");
        let none = ask(&server, &public, &fields(""), own_path).await;
        assert_eq!(none.field("x-cache").as_deref(), Some("MISS"), "{on}");
        assert!(
            !String::from_utf8_lossy(&none.body).contains("carol"),
            "{on}"
        );
    }
}

/// A caller whose connection the own path handed to the general one (an HTTP/1.0 request, answered first),
/// or a fresh one, whose first request the own path reads.
async fn caller_on(server: &common::TestServer, ep: &str, own_path: bool) -> Caller {
    let mut caller = Caller::connect(&server.url).await;
    if !own_path {
        let first = format!(
            "GET {ep}/ HTTP/1.0\r\nHost: switchyard.test\r\nConnection: keep-alive\r\n\r\n"
        );
        caller.send(first.as_bytes()).await;
        let a = caller.answer("GET").await;
        assert_eq!(a.status, 200, "{}", a.head);
    }
    caller
}

/// The bytes of each probe at the HTTP edge, and the status nginx answers them with in front of the same
/// replica (200: passed on, see the test for what the replica saw).
fn edge_probes(ep: &str) -> Vec<(&'static str, Vec<u8>, u16)> {
    let post = |fields: &str, body: &str| {
        format!("POST {ep}/echo HTTP/1.1\r\nHost: a.test\r\n{fields}\r\n{body}").into_bytes()
    };
    vec![
        (
            "names with underscores",
            post("X_Custom: 1\r\nTransfer_Encoding: chunked\r\nContent-Length: 5\r\n", "hello"),
            200,
        ),
        (
            "a GET with a chunked body",
            format!("GET {ep}/echo HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
                .into_bytes(),
            200,
        ),
        ("TRACE", format!("TRACE {ep}/echo HTTP/1.1\r\nHost: a.test\r\n\r\n").into_bytes(), 405),
        (
            "Content-Length and Transfer-Encoding",
            post("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"),
            400,
        ),
        ("identity, chunked", post("Transfer-Encoding: identity, chunked\r\n", "0\r\n\r\n"), 501),
        ("a chunk of 2^64 - 1 bytes", post("Transfer-Encoding: chunked\r\n", "ffffffffffffffff\r\nabc"), 400),
        ("a length of 2^64 - 1", post("Content-Length: 18446744073709551615\r\n", "abc"), 400),
        ("an empty Host", format!("GET {ep}/echo HTTP/1.1\r\nHost: \r\n\r\n").into_bytes(), 400),
        ("a malformed Host", format!("GET {ep}/echo HTTP/1.1\r\nHost: a b/c\r\n\r\n").into_bytes(), 400),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_edge_refuses_what_nginx_refuses_on_both_paths() {
    let (server, ep) = server_with_raw_replica().await;
    for own in [true, false] {
        let on = if own { "own path" } else { "general path" };
        for (name, bytes, want) in edge_probes(&ep) {
            let mut caller = caller_on(&server, &ep, own).await;
            caller.send(&bytes).await;
            let a = caller.answer("POST").await;
            assert_eq!(a.status, want, "{on}, {name}: {}", a.head);
            let body = String::from_utf8_lossy(&a.body).to_ascii_lowercase();
            if want == 200 {
                // The replica saw no underscored names, and the GET's body.
                assert!(!body.contains('_'), "{on}, {name}: {body}");
                assert!(body.ends_with("\r\n\r\nhello"), "{on}, {name}: {body}");
            } else {
                // Refused in the spec's shape, and the connection is let go.
                assert!(body.starts_with("{\"error\":"), "{on}, {name}: {body}");
                assert!(
                    caller.closed().await,
                    "{on}, {name}: the connection stays open"
                );
            }
        }
    }
}

/// The value of the metric `name` (a line without labels) on the server's `/metrics`.
async fn metric(server: &common::TestServer, name: &str) -> u64 {
    let token = std::fs::read_to_string(server.data_dir.join("admin-token")).expect("token");
    let text = reqwest::Client::new()
        .get(format!("{}/metrics", server.url))
        .bearer_auth(token.trim())
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_read_whole_are_bounded_in_all_and_in_time() {
    const MIB: usize = 1 << 20;
    let (server, ep) = server_configured(json!({"cacheHttpResponses": true}), |c| {
        c.proxy.body_buffer_bytes = 2 * MIB;
        // Long enough for all four uploads to be taken before the first is let go.
        c.proxy.body_timeout_s = 5;
    })
    .await;
    for own in [true, false] {
        let on = if own { "own path" } else { "general path" };
        let before = metric(&server, "switchyard_proxy_bodies_uncached_total").await;
        // Four uploads of a MiB each (of a length said ahead on the own path, in one chunk on hyper's), all
        // but their last byte sent: room for two of them to be read whole, the others go on uncached. Each
        // is sent once the proxy has taken the one before (held, or passed uncached): on hyper's path the
        // room grows as the chunk comes, so uploads read side by side could share it out differently.
        let mut callers = Vec::new();
        for i in 0..4usize {
            let mut caller = Caller::connect(&server.url).await;
            let mut upload = match own {
                true => get(
                    "POST",
                    &format!("{ep}/echo?u={i}"),
                    &format!("Content-Length: {MIB}\r\n"),
                ),
                false => {
                    let mut head = get(
                        "POST",
                        &format!("{ep}/echo?u={i}"),
                        "Transfer-Encoding: chunked\r\n",
                    );
                    head.extend_from_slice(format!("{MIB:x}\r\n").as_bytes());
                    head
                }
            };
            upload.extend(std::iter::repeat_n(b'x', MIB - 1));
            caller.send(&upload).await;
            callers.push(caller);
            let mut taken = false;
            for _ in 0..500 {
                let held = metric(&server, "switchyard_proxy_body_buffer_bytes").await as usize;
                assert!(held <= 2 * MIB, "{on}: {held} bytes held");
                let uncached =
                    metric(&server, "switchyard_proxy_bodies_uncached_total").await - before;
                taken = match i {
                    0 | 1 => held >= (i + 1) * (MIB - 1) && uncached == 0,
                    _ => uncached == (i - 1) as u64,
                };
                if taken {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(taken, "{on}: upload {i} was not taken as the room allows");
        }
        let held = metric(&server, "switchyard_proxy_body_buffer_bytes").await as usize;
        assert!(held <= 2 * MIB, "{on}: {held} bytes held");
        let uncached = metric(&server, "switchyard_proxy_bodies_uncached_total").await - before;
        assert_eq!(uncached, 2, "{on}: two bodies found no room");
        // None comes whole within the body's time: each is answered 408, and let go.
        for mut caller in callers {
            let a = caller.answer("POST").await;
            assert_eq!(a.status, 408, "{on}: {}", a.head);
            assert!(caller.closed().await, "{on}");
        }
        // And the room is given back.
        let mut held = u64::MAX;
        for _ in 0..200 {
            held = metric(&server, "switchyard_proxy_body_buffer_bytes").await;
            if held == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(held, 0, "{on}: room given back");

        // A trickle that never pauses for the caller's time (a byte every 100 ms) still has the body's time
        // in all: answered 408 while its body is not all sent.
        let mut caller = Caller::connect(&server.url).await;
        let head = match own {
            true => get(
                "POST",
                &format!("{ep}/echo?t=1"),
                "Content-Length: 1000\r\n",
            ),
            false => {
                let mut head = get(
                    "POST",
                    &format!("{ep}/echo?t=1"),
                    "Transfer-Encoding: chunked\r\n",
                );
                head.extend_from_slice(b"3e8\r\n");
                head
            }
        };
        caller.send(&head).await;
        let (mut sent, mut answered) = (0, None);
        while sent < 1000 && answered.is_none() {
            if caller
                .write
                .as_mut()
                .expect("writer")
                .write_all(b"x")
                .await
                .is_err()
            {
                break;
            }
            sent += 1;
            answered = tokio::time::timeout(Duration::from_millis(100), caller.answer("POST"))
                .await
                .ok();
        }
        let a = match answered {
            Some(a) => a,
            None => caller.answer("POST").await,
        };
        assert_eq!(a.status, 408, "{on}: {}", a.head);
        assert!(sent < 1000, "{on}: the whole body went first");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_bound_wait_and_idle_ones_make_room() {
    let (server, ep) = server_configured(json!({}), |c| c.proxy.max_connections = 4).await;
    // Four connections answered once and left idle: the bound (with the test's own API connection, if it
    // is still open, past it: the last of the four waits until an idle one makes room).
    let mut idle = Vec::new();
    for _ in 0..4 {
        let mut caller = Caller::connect(&server.url).await;
        caller.send(&get("GET", &format!("{ep}/"), "")).await;
        assert_eq!(caller.answer("GET").await.status, 200);
        idle.push(caller);
    }
    // A fifth is served all the same: connections that waited for their next request made room.
    let mut fifth = Caller::connect(&server.url).await;
    fifth.send(&get("GET", &format!("{ep}/"), "")).await;
    assert_eq!(fifth.answer("GET").await.status, 200);
    let shed = metric(&server, "switchyard_proxy_connections_shed_total").await;
    assert!(shed >= 1, "no idle connection made room");
    drop((fifth, idle));

    // Five connections at once, each with a request going (answered after 1.8 s), and a sixth: none of them
    // is cut for room, the listener is found at its bound, and every one is answered once a place frees.
    let full_before = metric(&server, "switchyard_proxy_connections_full_total").await;
    let mut busy = Vec::new();
    for _ in 0..6 {
        let (url, ep) = (server.url.clone(), ep.clone());
        let mut caller = Caller::connect(&url).await;
        caller.send(&get("GET", &format!("{ep}/late"), "")).await;
        busy.push(tokio::spawn(
            async move { caller.answer("GET").await.status },
        ));
    }
    loop {
        let open = metric(&server, "switchyard_proxy_connections_open").await;
        assert!(open <= 4, "{open} connections open past the bound of 4");
        if busy.iter().all(tokio::task::JoinHandle::is_finished) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for b in busy {
        assert_eq!(b.await.expect("busy"), 200, "a request was cut for room");
    }
    let full = metric(&server, "switchyard_proxy_connections_full_total").await;
    assert!(full > full_before, "the listener was never at its bound");
    assert_eq!(metric(&server, "switchyard_proxy_connections_max").await, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrades_are_joined_end_to_end_on_both_paths() {
    let (server, ep) = server_with_raw_replica().await;
    let ask = |path: &str| {
        get(
            "GET",
            &format!("{ep}{path}"),
            "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
        )
    };
    for own in [true, false] {
        let on = if own {
            "a fresh connection"
        } else {
            "a connection hyper serves"
        };
        let mut caller = caller_on(&server, &ep, own).await;
        caller.send(&ask("/ws")).await;
        let a = caller.answer("GET").await;
        assert_eq!(a.status, 101, "{on}: {}", a.head);
        assert_eq!(a.field("upgrade").as_deref(), Some("websocket"), "{on}");
        assert_eq!(
            a.field("sec-websocket-accept").as_deref(),
            Some("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
            "{on}"
        );
        // Both ways, as many times as it likes: bytes that are no HTTP pass as they are.
        for round in 0..3 {
            let frame = format!("\u{81}\u{5}hello {round} TRACE / HTTP/1.1\r\n\r\n");
            caller.send(frame.as_bytes()).await;
            let back = caller.take(frame.len()).await;
            assert_eq!(back, frame.as_bytes(), "{on}, round {round}");
        }
        // The replica says no: its answer, and the connection goes on.
        let mut caller = caller_on(&server, &ep, own).await;
        caller.send(&ask("/")).await;
        let a = caller.answer("GET").await;
        assert_eq!((a.status, &a.body[..]), (200, &b"ok"[..]), "{on}");
        caller.send(&get("GET", &format!("{ep}/"), "")).await;
        assert_eq!(caller.answer("GET").await.status, 200, "{on}");
    }
    // The endpoint's access rules hold for upgrades too.
    let _: serde_json::Value = server
        .admin
        .update_endpoint(NS, "raw", &json!({"type": "authenticated"}))
        .await
        .expect("authenticated");
    for _ in 0..200 {
        let mut caller = Caller::connect(&server.url).await;
        caller.send(&ask("/ws")).await;
        let a = caller.answer("GET").await;
        if a.status == 401 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("an upgrade reached an authenticated endpoint without a token");
}

/// One request of the differential corpus: its bytes in the parts they are sent in (with a short pause
/// between parts), whether the caller then stops sending (an early hang-up), and its method.
struct Case {
    name: &'static str,
    parts: Vec<Vec<u8>>,
    hang_up: bool,
    method: &'static str,
}

impl Case {
    fn whole(name: &'static str, method: &'static str, bytes: Vec<u8>) -> Case {
        Case {
            name,
            parts: vec![bytes],
            hang_up: false,
            method,
        }
    }
}

/// The corpus, for the endpoint under `ep` (which has the response cache on): framings both ways,
/// hop-by-hop and forwarding fields, cacheable and private answers, bodies in parts, early hang-ups.
fn corpus(ep: &str) -> Vec<Case> {
    let hop = "Connection: keep-alive, X-Trace\r\nX-Trace: 1\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\n\
               Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic eDp5\r\nTrailer: X-Sum\r\n";
    let forwarding = "X-Forwarded-For: 10.1.2.3\r\nAuthorization: Bearer not-for-the-replica\r\n\
                      X-Private-Link-Account: 7\r\nX_Under: 1\r\nForwarded: for=10.9.9.9\r\nAccept: text/plain\r\n";
    let post = |path: &str, extra: &str, body: &str| {
        let head = format!(
            "POST {ep}{path} HTTP/1.1\r\nHost: switchyard.test\r\nContent-Length: {}\r\n{extra}\r\n",
            body.len()
        );
        [head.as_bytes(), body.as_bytes()].concat()
    };
    let mut cases = vec![
        Case::whole("plain", "GET", get("GET", &format!("{ep}/echo"), "")),
        Case::whole(
            "query",
            "GET",
            get("GET", &format!("{ep}/echo?a=1&b=%2F"), ""),
        ),
        Case::whole("hop-by-hop", "GET", get("GET", &format!("{ep}/echo"), hop)),
        Case::whole(
            "forwarding",
            "GET",
            get("GET", &format!("{ep}/echo"), forwarding),
        ),
        Case::whole("head", "HEAD", get("HEAD", &format!("{ep}/echo"), "")),
        Case::whole("post", "POST", post("/echo", "", "hello world")),
        Case::whole(
            "post uncached",
            "POST",
            post("/echo", "X-Use-Cache: false\r\n", "no cache"),
        ),
        Case::whole(
            "private answer",
            "GET",
            get(
                "GET",
                &format!("{ep}/echo?private"),
                "X-Reply: Cache-Control: private\r\n",
            ),
        ),
        Case::whole(
            "chunked upload",
            "POST",
            get(
                "POST",
                &format!("{ep}/echo"),
                "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=1\r\n world\r\n0\r\n",
            ),
        ),
    ];
    // The replica's framings: chunks with a trailer, until close, a `Connection` naming its length, no
    // content, an informational answer first, a status that is none, its own hop-by-hop fields.
    for path in [
        "/chunked",
        "/close",
        "/named",
        "/nocontent",
        "/continue",
        "/odd",
        "/",
    ] {
        cases.push(Case::whole(
            path,
            "GET",
            get("GET", &format!("{ep}{path}"), ""),
        ));
    }
    // A body in parts, with and without the cache reading it first.
    for (name, extra) in [
        ("body in parts", ""),
        ("body in parts, uncached", "X-Use-Cache: false\r\n"),
    ] {
        let whole = post("/echo", extra, "helloworld");
        let (first, rest) = whole.split_at(whole.len() - 5);
        cases.push(Case {
            name,
            parts: vec![first.to_vec(), rest.to_vec()],
            hang_up: false,
            method: "POST",
        });
    }
    // A replica that answers before it has read the upload (the rest of which is still coming).
    let early = post("/early", "X-Use-Cache: false\r\n", &"x".repeat(64 * 1024));
    cases.push(Case {
        name: "answered early",
        parts: vec![early[..early.len() - 32 * 1024].to_vec()],
        hang_up: false,
        method: "POST",
    });
    // Early hang-ups: the caller stops sending partway through its body, or right after its head.
    for (name, extra, sent) in [
        ("hang-up mid-body", "", 4),
        ("hang-up mid-body, uncached", "X-Use-Cache: false\r\n", 4),
        ("hang-up after the head", "", 0),
    ] {
        let whole = post("/echo", extra, "0123456789");
        let cut = whole.len() - 10 + sent;
        cases.push(Case {
            name,
            parts: vec![whole[..cut].to_vec()],
            hang_up: true,
            method: "POST",
        });
    }
    cases
}

/// A head's fields as lines `name: value`, lowercase names, sorted; `Date` left out, and the value of a
/// field that differs by the server rather than by the path (the replica's `Host`, a request id the server
/// made) written as a placeholder.
fn fields_of(lines: &str) -> Vec<String> {
    let mut fields: Vec<String> = lines
        .split(['\r', '\n'])
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim()))
        .filter(|(n, _)| n != "date")
        .map(|(n, v)| match n.as_str() {
            "host" | "x-request-id" => format!("{n}: <…>"),
            _ => format!("{n}: {v}"),
        })
        .collect();
    fields.sort();
    fields
}

/// What a caller saw of `case` at `url`, as text: the status line, the answer's fields (see [`fields_of`])
/// and its body, where an echo's body (the request as the replica saw it) is written the same way; or that
/// the connection closed with no answer.
async fn outcome(url: &str, case: &Case) -> String {
    let mut caller = Caller::connect(url).await;
    for (i, part) in case.parts.iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        caller.send(part).await;
    }
    if case.hang_up {
        caller.write = None;
    }
    if !caller.fill(1).await {
        return "closed with no answer".into();
    }
    let answer = caller.answer(case.method).await;
    let (status, fields) = answer.head.split_once('\n').unwrap_or((&answer.head, ""));
    let mut seen = format!("{status}\n{}\n", fields_of(fields).join("\n"));
    let body = String::from_utf8_lossy(&answer.body);
    match body.split_once("\r\n\r\n") {
        // An echo: the request line, the fields and the body the replica got.
        Some((head, sent)) if answer.field("content-type").as_deref() == Some("text/plain") => {
            let (line, fields) = head.split_once("\r\n").unwrap_or((head, ""));
            let fields = fields_of(fields).join("\n");
            seen.push_str(&format!("replica saw: {line}\n{fields}\n\n{sent}"));
        }
        _ => seen.push_str(&body),
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_paths_send_the_replica_the_same_request_and_the_caller_the_same_answer() {
    let cached = json!({"cacheHttpResponses": true});
    let (own, ep) = server_configured(cached.clone(), |c| c.proxy.own_path = true).await;
    let (general, _) = server_configured(cached, |c| c.proxy.own_path = false).await;
    let mut differ = Vec::new();
    // Twice: the second round meets what the first left in each cache.
    for round in 1..=2 {
        for case in corpus(&ep) {
            let (a, b) = (
                outcome(&own.url, &case).await,
                outcome(&general.url, &case).await,
            );
            if a != b {
                differ.push(format!(
                    "{} (round {round})\n--- own path ---\n{a}\n--- general path ---\n{b}",
                    case.name
                ));
            }
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n\n"));
}
