"""Endpoints really serve: `wait()` returns once the replica answers through the proxy, and inference works there."""

import json
import time
import urllib.error
import urllib.request

from conftest import create_endpoint, unique_name


def _post(url: str, body: dict, token: str | None):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def test_wait_returns_and_the_url_serves(server, api, admin_token, cpu_hardware, cleanup):
    name = unique_name("serve")
    endpoint = cleanup(
        create_endpoint(api, cpu_hardware, name, task="feature-extraction", min_replica=1, token=admin_token)
    )
    endpoint.wait(timeout=60, refresh_every=1)
    assert endpoint.status == "running"
    assert endpoint.url == f"{server.url}/endpoints/admin/{name}"
    assert endpoint.raw["status"]["readyReplica"] == 1
    # The default type is `authenticated`: a token is needed.
    status, body = _post(endpoint.url + "/embed", {"inputs": ["a", "b"]}, None)
    assert status == 401
    assert "error" in body
    status, vectors = _post(endpoint.url + "/embed", {"inputs": ["a", "b"]}, admin_token)
    assert status == 200
    assert len(vectors) == 2 and len(vectors[0]) > 0

    # Paused: the URL answers 503 and nothing restarts it; resume and wait again.
    endpoint.pause()
    # The proxy sees the pause at the runtime's next tick (it is kicked at once).
    for _ in range(50):
        status, body = _post(endpoint.url + "/embed", {"inputs": "a"}, admin_token)
        if status != 200:
            break
        time.sleep(0.1)
    assert status == 503
    assert "paused" in body["error"]
    endpoint.resume()
    endpoint.wait(timeout=60, refresh_every=1)
    assert _post(endpoint.url + "/embed", {"inputs": "a"}, admin_token)[0] == 200
