"""At-least-once delivery across `kill -9`: a server (its own data dir, SQLite) acknowledges ~200 catalog changes while
its receiver is failing, then slow, is killed without warning mid-run and restarted on the same data dir; every
acknowledged change's event must reach the receiver, and deliveries must resume on their own after the restart, before
any new change is made."""

import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest
import requests
from conftest import LISTENING_RE, STARTUP_TIMEOUT_S, _binary_path
from standardwebhooks.webhooks import Webhook
from webhook_support import put_catalog_item, start_receiver

CHANGES = 200
# Retries long enough to outlast the receiver's failing spell; a short lease so a dead server's claims come back
# soon; a short breaker hold so the failing spell does not park the webhook for long.
CONFIG = """
[outbound]
allow = ["127.0.0.0/8"]

[webhooks]
retry_schedule = ["200ms", "500ms", "1s", "1s", "2s", "2s", "3s", "3s", "3s"]
timeout = "2s"
lease = "4s"
breaker_hold = "500ms"
"""


def start(data_dir: Path, config: Path) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ)
    env.pop("SWITCHYARD_STORE_URL", None)  # SQLite in the data dir, whatever the suite's store is
    process = subprocess.Popen(
        [str(_binary_path()), "serve", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir), "--config", str(config)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
        bufsize=1,
    )
    lines: queue.Queue = queue.Queue()

    def drain():
        for line in iter(process.stdout.readline, ""):
            lines.put(line)
        lines.put(None)

    threading.Thread(target=drain, daemon=True).start()
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            break
        if line is None:
            break
        match = LISTENING_RE.search(line)
        if match:
            return process, match.group(1).rstrip("/")
    process.kill()
    process.wait()
    pytest.fail("`switchyard serve` did not announce its address", pytrace=False)


def head_shas(got) -> set[str]:
    return {json.loads(g.body)["repo"].get("headSha") for g in got}


@pytest.mark.timeout(120)
def test_every_acknowledged_change_is_delivered_across_kill_9():
    root = Path(tempfile.mkdtemp(prefix="switchyard-compat-crash-"))
    data_dir, config = root / "data", root / "config.toml"
    config.write_text(CONFIG)
    receiver = start_receiver()
    process, url = start(data_dir, config)
    try:
        token = (data_dir / "admin-token").read_text().strip()
        repo_id = f"crash/item-{uuid.uuid4().hex[:6]}"
        r = requests.post(
            f"{url}/api/settings/webhooks",
            json={"url": f"{receiver.url}/hook", "watched": [{"type": "model", "name": repo_id}], "domains": ["repo"]},
            headers={"authorization": f"Bearer {token}"},
            timeout=10,
        )
        assert r.status_code == 200, r.text
        signing = r.json()["signingSecret"]
        webhook_id = r.json()["webhook"]["id"]

        acked: list[str] = []
        restarted_at = None
        backlog: set[str] = set()
        for i in range(CHANGES):
            if i == 30:
                receiver.status = 503  # failing: every attempt is refused and retried
            elif i == 70:
                receiver.status, receiver.delay = 200, 0.5  # back, but slow: a backlog builds up
            elif i == 100:
                # Mid-run, deliveries pending, retrying and in flight: no chance to flush or give anything back.
                process.send_signal(signal.SIGKILL)
                process.wait()
                receiver.delay = 0
                time.sleep(0.5)  # what was in flight at the receiver finishes before the new server starts
                before_kill = {g.headers["webhook-id"] for g in receiver.received()}
                backlog = set(acked) - head_shas(receiver.received())
                # Before the new server starts: whatever the receiver takes from now on, the new server sent.
                restarted_at = time.monotonic()
                process, url = start(data_dir, config)
                # Deliveries resume on their own, before any new change: what was acknowledged before the kill, the
                # backlog the dead server owed among it, reaches the receiver from the new server.
                pending = set(acked)
                got = receiver.wait_for(lambda got: pending <= head_shas(got), timeout=30)
                missing = pending - head_shas(got)
                assert not missing, f"acknowledged before the kill, never delivered: {sorted(missing)[:10]}"
                after = [g for g in got if g.at > restarted_at and g.headers["webhook-id"] not in before_kill]
                assert backlog <= head_shas(after), "the backlog came from the restarted server"
            time.sleep(0.02)  # paced, so the failing and slow spells last a while in real time
            revision = f"rev-{i:04d}"
            try:
                r = put_catalog_item(url, token, repo_id, revision, timeout=10)
            except requests.RequestException:
                continue  # not acknowledged: no promise was made
            if 200 <= r.status_code < 300:
                acked.append(revision)
        assert restarted_at is not None
        assert len(acked) >= CHANGES - 5, f"only {len(acked)} of {CHANGES} changes were acknowledged"

        got = receiver.wait_for(lambda got: set(acked) <= head_shas(got), timeout=30)
        missing = set(acked) - head_shas(got)
        assert not missing, f"{len(missing)} acknowledged changes never delivered, e.g. {sorted(missing)[:10]}"
        # At least once: the same event may come twice (an attempt the dead server never recorded), always
        # with the same webhook-id and body; every one of them verifies.
        by_id: dict[str, bytes] = {}
        for g in got:
            payload = Webhook(signing).verify(g.body, g.headers)
            assert payload["id"] == g.headers["webhook-id"]
            assert by_id.setdefault(g.headers["webhook-id"], g.body) == g.body, "a redelivery is the same body"
        assert len(by_id) >= len(acked)
        # The spells really happened: refused attempts, retried until they succeeded; and the kill left work behind.
        r = requests.get(
            f"{url}/api/settings/webhooks/{webhook_id}/deliveries?limit=500",
            headers={"authorization": f"Bearer {token}"},
            timeout=10,
        )
        attempts = r.json()
        assert any(a["statusCode"] == 503 for a in attempts), "the receiver's failing spell was seen"
        assert any(a["attempt"] > 1 and a["statusCode"] == 200 for a in attempts), "a retry succeeded"
        assert backlog, "the kill came with deliveries still owed"
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        receiver.stop()
        shutil.rmtree(root, ignore_errors=True)
