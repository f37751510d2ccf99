"""`switchyard receive` against independent senders: requests signed with the PyPI `standardwebhooks` package (the
Standard Webhooks reference library), and the hub client's exact answers to a missing or wrong `X-Webhook-Secret`."""

import contextlib
import json
import subprocess
import threading
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import requests
from standardwebhooks import Webhook

from conftest import LISTENING_RE, STARTUP_TIMEOUT_S, _binary_path

SIGNING_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SHARED_SECRET = "shared-s3cret"
# The hub client's (huggingface_hub WebhooksServer) exact bodies.
MISSING_SECRET = {"error": "x-webhook-secret header not set."}
WRONG_SECRET = {"error": "Invalid webhook secret."}


@contextlib.contextmanager
def receiver(tmp_path: Path, *args: str):
    """`switchyard receive --listen 127.0.0.1:0 ARGS`; yields its base URL."""
    process = subprocess.Popen(
        [str(_binary_path()), "receive", "--listen", "127.0.0.1:0", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        bufsize=1,
        env={"PATH": "/usr/bin:/bin"},
    )
    found: list[str] = []
    ready = threading.Event()

    def drain() -> None:
        for line in iter(process.stdout.readline, ""):
            match = LISTENING_RE.search(line)
            if match and not found:
                found.append(match.group(1))
                ready.set()
        ready.set()

    threading.Thread(target=drain, daemon=True).start()
    try:
        ready.wait(STARTUP_TIMEOUT_S)
        if not found:
            pytest.fail(f"`switchyard receive {' '.join(args)}` did not announce its address", pytrace=False)
        yield found[0]
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def signed_headers(body: str, msg_id: str | None = None, when: datetime | None = None) -> dict[str, str]:
    msg_id = msg_id or f"msg_{uuid.uuid4().hex}"
    when = when or datetime.now(tz=timezone.utc)
    return {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": Webhook(SIGNING_SECRET).sign(msg_id, when, body),
    }


PAYLOAD = json.dumps({"event": {"action": "update", "scope": "repo"}, "repo": {"type": "model", "name": "a/b"}})


def test_requests_signed_by_the_reference_library_are_accepted(tmp_path):
    events = tmp_path / "events.jsonl"
    with receiver(
        tmp_path,
        "--signing-secret",
        SIGNING_SECRET,
        "--handler",
        "/say_hello=run:cat",
        "--handler",
        f"log=append:{events}",
    ) as url:
        answer = requests.post(f"{url}/webhooks/say_hello", data=PAYLOAD, headers=signed_headers(PAYLOAD), timeout=10)
        assert answer.status_code == 200, answer.text
        assert answer.json() == json.loads(PAYLOAD)

        # A retry carries the same webhook-id with a fresh timestamp and signature: answered again, handled once.
        msg_id = f"msg_{uuid.uuid4().hex}"
        for _ in range(2):
            headers = signed_headers(PAYLOAD, msg_id)
            answer = requests.post(f"{url}/webhooks/log", data=PAYLOAD, headers=headers, timeout=10)
            assert (answer.status_code, answer.json()) == (200, {"ok": True})
        assert [json.loads(line) for line in events.read_text().splitlines()] == [json.loads(PAYLOAD)]


def test_unsigned_tampered_stale_and_foreign_requests_are_refused(tmp_path):
    with receiver(tmp_path, "--signing-secret", SIGNING_SECRET, "--handler", "hello=run:cat") as url:
        hook = f"{url}/webhooks/hello"

        def refused(headers: dict[str, str], data: str = PAYLOAD) -> str:
            answer = requests.post(hook, data=data, headers=headers, timeout=10)
            assert answer.status_code == 401, answer.text
            return answer.json()["error"]

        assert "webhook-id header is missing" in refused({"content-type": "application/json"})
        assert "no signature matches" in refused(signed_headers(PAYLOAD), data=PAYLOAD.replace("update", "delete"))
        stale = datetime.now(tz=timezone.utc) - timedelta(minutes=6)
        assert "five minutes" in refused(signed_headers(PAYLOAD, when=stale))
        headers = signed_headers(PAYLOAD)
        headers["webhook-signature"] = Webhook("whsec_" + "A" * 43 + "=").sign(
            headers["webhook-id"], datetime.now(tz=timezone.utc), PAYLOAD
        )
        assert "no signature matches" in refused(headers)


def test_the_shared_secret_check_answers_like_the_hubs_client(tmp_path):
    with receiver(
        tmp_path, "--secret", SHARED_SECRET, "--signing-secret", SIGNING_SECRET, "--handler", "hello=run:cat"
    ) as url:
        hook = f"{url}/webhooks/hello"
        missing = requests.post(hook, data=PAYLOAD, headers=signed_headers(PAYLOAD), timeout=10)
        assert (missing.status_code, missing.json()) == (401, MISSING_SECRET)
        wrong = requests.post(
            hook, data=PAYLOAD, headers={**signed_headers(PAYLOAD), "X-Webhook-Secret": "not-it"}, timeout=10
        )
        assert (wrong.status_code, wrong.json()) == (403, WRONG_SECRET)
        right = requests.post(
            hook, data=PAYLOAD, headers={**signed_headers(PAYLOAD), "X-Webhook-Secret": SHARED_SECRET}, timeout=10
        )
        assert (right.status_code, right.json()) == (200, json.loads(PAYLOAD))
        # The right shared secret does not stand in for a signature.
        unsigned = requests.post(
            hook,
            data=PAYLOAD,
            headers={"content-type": "application/json", "X-Webhook-Secret": SHARED_SECRET},
            timeout=10,
        )
        assert unsigned.status_code == 401
        assert unsigned.json() != MISSING_SECRET


def test_the_landing_page_and_health(tmp_path):
    with receiver(tmp_path, "--secret", SHARED_SECRET, "--handler", "/say_hello=run:cat") as url:
        page = requests.get(url + "/", timeout=10)
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert "/webhooks/say_hello" in page.text and SHARED_SECRET not in page.text
        assert requests.get(url + "/health", timeout=10).status_code == 200
