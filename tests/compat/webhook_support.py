"""Shared by the webhook tests: a receiver on 127.0.0.1:0 that records every request (and can be told to answer
with an error, slowly, or not at all), and the catalog item whose changes they trigger."""

import http.server
import threading
import time
from dataclasses import dataclass, field

import requests

# Loopback is a special-use address: the server sends there only when told to; retries come fast.
WEBHOOK_CONFIG = """
[outbound]
allow = ["127.0.0.0/8"]

[webhooks]
retry_schedule = ["100ms", "100ms"]
"""


@dataclass
class Received:
    path: str
    headers: dict  # lower-case names
    body: bytes
    at: float


@dataclass
class Receiver:
    """What the handler does is read from these fields at each request, so a test changes it while running."""

    url: str = ""
    status: int = 200
    delay: float = 0.0
    got: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: http.server.ThreadingHTTPServer | None = None

    def received(self) -> list[Received]:
        with self.lock:
            return list(self.got)

    def wait_for(self, predicate, timeout: float = 20.0) -> list[Received]:
        """Every request so far, once `predicate(requests)` holds (or the time is up)."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.received()
            if predicate(got) or time.monotonic() > deadline:
                return got
            time.sleep(0.05)

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def start_receiver() -> Receiver:
    receiver = Receiver()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):  # noqa: N802 - the stdlib's name
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length)
            if receiver.delay:
                time.sleep(receiver.delay)
            status = receiver.status
            if status == 200:
                # Only what was answered with a 2xx counts as received.
                with receiver.lock:
                    receiver.got.append(
                        Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.monotonic())
                    )
            answer = b'{"ok": true}'
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the sender went away (killed, or gave up at its timeout)

        def log_message(self, *args):  # quiet
            pass

    class Server(http.server.ThreadingHTTPServer):
        def handle_error(self, request, client_address):  # a sender killed mid-request is expected here
            pass

    server = Server(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver.server = server
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return receiver


def catalog_item(repo_id: str, revision: str) -> dict:
    """A catalog item (admin API body) whose one recipe is pinned to `revision` (its `repo.headSha` in payloads)."""
    author, model = repo_id.split("/")
    return {
        "modelName": model,
        "createdAt": "2024-01-01T00:00:00Z",
        "authorName": author,
        "license": "mit",
        "repoId": repo_id,
        "task": "text-generation",
        "recipes": [
            {
                "accelerator": "cpu",
                "engineType": "tei",
                "publicId": f"{model}-cpu",
                "revision": revision,
                "memoryGb": 1.0,
            }
        ],
    }


def put_catalog_item(base_url: str, admin_token: str, repo_id: str, revision: str, timeout: float = 10.0):
    """`POST /api/v1/admin/catalog/items` (add or replace); returns the response."""
    return requests.post(
        f"{base_url}/api/v1/admin/catalog/items",
        json=catalog_item(repo_id, revision),
        headers={"authorization": f"Bearer {admin_token}"},
        timeout=timeout,
    )
