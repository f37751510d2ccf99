"""Webhooks through the real `huggingface_hub` client (every webhook method it has), and deliveries received by a
Python receiver that verifies each one with the Standard Webhooks reference library (`standardwebhooks`, PyPI).

The module runs its own server: it must be allowed to send to loopback (`[outbound] allow`), which the suite's
shared server is not, and retries come fast."""

import json
import time
import uuid

import pytest
import requests
from conftest import TEST_REPOSITORY, client_pointed_at, create_endpoint, running_server, unique_name
from huggingface_hub import HfApi, WebhookInfo, WebhookWatchedItem
from huggingface_hub.errors import BadRequestError, HfHubHTTPError
from standardwebhooks.webhooks import Webhook, WebhookVerificationError
from webhook_support import WEBHOOK_CONFIG, Received, put_catalog_item, start_receiver

SECRET = "s3cret-for-webhooks"


@pytest.fixture(scope="module")
def hooks_server():
    """A server of this module's, with the client's constants pointed at it (and put back afterwards)."""
    with running_server(WEBHOOK_CONFIG, own_store=True) as srv, client_pointed_at(srv):
        yield srv


@pytest.fixture(scope="module")
def hapi(hooks_server) -> HfApi:
    return HfApi(endpoint=hooks_server.url, token=hooks_server.admin_token)


@pytest.fixture
def receiver():
    r = start_receiver()
    yield r
    r.stop()


def auth(token: str) -> dict:
    return {"authorization": f"Bearer {token}"}


def create_raw(srv, body: dict) -> tuple[str, str]:
    """`POST /api/settings/webhooks` as the admin; (id, signingSecret)."""
    r = requests.post(f"{srv.url}/api/settings/webhooks", json=body, headers=auth(srv.admin_token), timeout=30)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["signingSecret"].startswith("whsec_")
    return out["webhook"]["id"], out["signingSecret"]


def check_delivery(got: Received, signing_secrets: list[str], webhook_id: str) -> dict:
    """Every check a receiver makes: each signing secret verifies it, the shared secret, the payload's envelope."""
    for s in signing_secrets:
        payload = Webhook(s).verify(got.body, got.headers)
    assert got.headers.get("x-webhook-secret") == SECRET
    assert got.headers.get("content-type", "").startswith("application/json")
    assert payload["webhook"] == {"id": webhook_id, "version": 3}
    assert payload["id"] == got.headers["webhook-id"], "the payload's id is the stable webhook-id"
    assert payload["event"]["action"] in {"create", "update", "delete", "move"}
    return payload


# --- Management through the hub's client -----------------------------------------------------------------------------


def test_every_client_method(hapi, hooks_server, receiver):
    url = f"{receiver.url}/hook"
    created = hapi.create_webhook(
        url=url, watched=[{"type": "user", "name": "admin"}], domains=["repo", "discussion"], secret=SECRET
    )
    assert isinstance(created, WebhookInfo)
    assert isinstance(created.id, str) and created.id
    assert created.url == url
    assert created.watched == [WebhookWatchedItem(type="user", name="admin")]
    assert created.domains == ["repo", "discussion"]
    assert created.secret == SECRET
    assert created.disabled is False
    assert created.job is None

    assert created.id in {w.id for w in hapi.list_webhooks()}
    assert hapi.get_webhook(created.id) == created

    # `watched` left out: the client sends `[]`, which leaves it as it was; so do the domains and the secret.
    moved = hapi.update_webhook(created.id, url=f"{receiver.url}/moved")
    assert moved.url == f"{receiver.url}/moved"
    assert moved.watched == created.watched
    assert moved.domains == created.domains
    assert moved.secret == SECRET

    # WebhookWatchedItem objects as input, on create and update; `discussions` is a spelling of `discussion`.
    org_item = WebhookWatchedItem(type="model", name="acme-compat/tiny")
    updated = hapi.update_webhook(created.id, watched=[org_item], domains=["discussions"])
    assert updated.watched == [org_item]
    assert updated.domains == ["discussion"]
    second = hapi.create_webhook(url=url, watched=[WebhookWatchedItem(type="user", name="admin")])
    assert second.watched == [WebhookWatchedItem(type="user", name="admin")]
    assert set(second.domains) <= {"repo", "discussion"}  # the client's default, whatever it sends
    assert second.secret is None

    assert hapi.disable_webhook(created.id).disabled is True
    assert hapi.get_webhook(created.id).disabled is True
    assert hapi.enable_webhook(created.id).disabled is False

    for w in (created, second):
        assert hapi.delete_webhook(w.id) is None
        with pytest.raises(HfHubHTTPError) as e:
            hapi.get_webhook(w.id)
        assert e.value.response.status_code == 404
    assert {created.id, second.id}.isdisjoint(w.id for w in hapi.list_webhooks())


def test_errors_as_the_client_raises_them(hapi, hooks_server, receiver):
    with pytest.raises(BadRequestError):
        hapi.create_webhook(url="not a url", watched=[{"type": "user", "name": "admin"}])
    with pytest.raises(BadRequestError):
        hapi.create_webhook(url="ftp://example.com/hook", watched=[{"type": "user", "name": "admin"}])
    with pytest.raises(BadRequestError):
        hapi.create_webhook(url=f"{receiver.url}/hook", watched=[{"type": "user", "name": "no-such-user-x"}])

    mine = hapi.create_webhook(url=f"{receiver.url}/hook", watched=[{"type": "user", "name": "admin"}])
    try:
        with pytest.raises(BadRequestError):
            hapi.update_webhook(mine.id, url="not a url")
        stranger = f"eve-{uuid.uuid4().hex[:6]}"
        other = HfApi(endpoint=hooks_server.url, token=hooks_server.create_user(stranger))
        assert mine.id not in {w.id for w in other.list_webhooks()}
        for call in (
            lambda: other.get_webhook(mine.id),
            lambda: other.update_webhook(mine.id, url=f"{receiver.url}/stolen"),
            lambda: other.disable_webhook(mine.id),
            lambda: other.delete_webhook(mine.id),
        ):
            with pytest.raises(HfHubHTTPError) as e:
                call()
            assert e.value.response.status_code == 404, e.value.response.text
        assert hapi.get_webhook(mine.id).url == f"{receiver.url}/hook", "untouched by the stranger"
    finally:
        hapi.delete_webhook(mine.id)


# --- Deliveries, verified with the reference library ------------------------------------------------------------------


def test_endpoint_and_catalog_changes_arrive_signed(hapi, hooks_server, receiver):
    srv = hooks_server
    repo_id = f"acme-compat/tiny-{uuid.uuid4().hex[:6]}"
    webhook_id, signing = create_raw(
        srv,
        {
            "url": f"{receiver.url}/hook",
            "watched": [{"type": "user", "name": "admin"}, {"type": "model", "name": repo_id}],
            "domains": ["repo", "endpoint"],
            "secret": SECRET,
        },
    )
    # The secret the API reads back is the one creation gave.
    r = requests.get(f"{srv.url}/api/settings/webhooks/{webhook_id}/signing-secret", headers=auth(srv.admin_token))
    assert r.status_code == 200 and r.json() == {"signingSecret": signing}

    hardware = sorted(
        (hw for hw in hapi.list_inference_endpoints_hardware() if hw.accelerator == "cpu"),
        key=lambda hw: (hw.num_accelerators, hw.memory_gb, hw.id),
    )[0]
    name = unique_name("hooked")
    endpoint = create_endpoint(hapi, hardware, name, namespace="admin")
    assert put_catalog_item(srv.url, srv.admin_token, repo_id, "rev-a").status_code == 201
    assert put_catalog_item(srv.url, srv.admin_token, repo_id, "rev-b").status_code == 200
    hapi.delete_inference_endpoint(endpoint.name, namespace="admin")

    def events(got):
        out = []
        for g in got:
            p = json.loads(g.body)
            out.append((p["event"]["scope"], p["event"]["action"], (p.get("endpoint") or {}).get("name")))
        return out

    wanted = [
        ("endpoint", "create", name),
        ("repo", "create", None),
        ("repo.content", "update", None),
        ("endpoint", "delete", name),
    ]
    got = receiver.wait_for(lambda got: all(w in events(got) for w in wanted))
    assert all(w in events(got) for w in wanted), events(got)

    # 100 % verified: every single delivery, whatever its event.
    payloads = [check_delivery(g, [signing], webhook_id) for g in got]
    assert len({g.headers["webhook-id"] for g in got}) == len(got), "one request per event (no failure, no retry)"
    for p in payloads:
        scope = p["event"]["scope"]
        if scope.startswith("endpoint"):
            assert p["repo"]["name"] == TEST_REPOSITORY
            assert p["endpoint"]["name"] == name
        else:
            assert p["repo"]["name"] == repo_id
            assert p["repo"]["type"] == "model"
            assert p["repo"]["owner"]["id"] == "acme-compat"
    content = next(p for p in payloads if p["event"]["scope"] == "repo.content")
    ref = f"refs/recipes/{repo_id.split('/')[1]}-cpu"
    assert content["updatedRefs"] == [{"ref": ref, "oldSha": "rev-a", "newSha": "rev-b"}]
    assert content["repo"]["headSha"] == "rev-b"

    # The reference library refuses a tampered body, another secret, and a missing signature.
    sample = got[0]
    with pytest.raises(WebhookVerificationError):
        Webhook(signing).verify(sample.body + b" ", sample.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(signing).verify(sample.body.replace(b'"version":3', b'"version":4'), sample.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + "A" * 43 + "=").verify(sample.body, sample.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(signing).verify(sample.body, {k: v for k, v in sample.headers.items() if k != "webhook-signature"})

    # The activity lists an attempt for each, answered 200 (each is recorded once its answer came, which
    # may be a moment after the receiver saw it).
    sent = {g.headers["webhook-id"] for g in got}
    deadline = time.monotonic() + 10
    while True:
        r = requests.get(f"{srv.url}/api/settings/webhooks/{webhook_id}/deliveries", headers=auth(srv.admin_token))
        attempts = r.json()
        if {a["eventId"] for a in attempts} >= sent or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert {a["eventId"] for a in attempts} >= sent
    assert all(a["statusCode"] == 200 and a["errorClass"] is None for a in attempts)
    hapi.delete_webhook(webhook_id)


def test_a_rotated_secret_and_the_old_one_both_verify(hapi, hooks_server, receiver):
    srv = hooks_server
    repo_id = f"acme-compat/rot-{uuid.uuid4().hex[:6]}"
    webhook_id, old = create_raw(
        srv,
        {
            "url": f"{receiver.url}/hook",
            "watched": [{"type": "model", "name": repo_id}],
            "domains": ["repo"],
            "secret": SECRET,
        },
    )
    assert put_catalog_item(srv.url, srv.admin_token, repo_id, "rev-1").status_code == 201
    before = receiver.wait_for(lambda got: len(got) >= 1)
    assert len(before) == 1
    check_delivery(before[0], [old], webhook_id)

    rotate = f"{srv.url}/api/settings/webhooks/{webhook_id}/rotate-secret"
    r = requests.post(rotate, json={"graceSeconds": 300}, headers=auth(srv.admin_token))
    assert r.status_code == 200, r.text
    new = r.json()["signingSecret"]
    assert new.startswith("whsec_") and new != old
    r = requests.get(f"{srv.url}/api/settings/webhooks/{webhook_id}/signing-secret", headers=auth(srv.admin_token))
    assert r.json() == {"signingSecret": new}

    assert put_catalog_item(srv.url, srv.admin_token, repo_id, "rev-2").status_code == 200
    got = receiver.wait_for(lambda got: len(got) >= 2)
    assert len(got) == 2
    # Signed with both during the grace period: receivers that still hold the old secret verify, as do updated ones.
    payload = check_delivery(got[1], [old, new], webhook_id)
    assert payload["repo"]["headSha"] == "rev-2"
    assert len(got[1].headers["webhook-signature"].split(" ")) == 2
    # Before the rotation only the old one signed.
    with pytest.raises(WebhookVerificationError):
        Webhook(new).verify(got[0].body, got[0].headers)

    # A grace period out of bounds is refused.
    r = requests.post(rotate, json={"graceSeconds": -1}, headers=auth(srv.admin_token))
    assert r.status_code == 400
    hapi.delete_webhook(webhook_id)
