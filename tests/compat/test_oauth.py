"""The OAuth 2.0 / OpenID Connect provider driven by independent clients against the real binary: authlib for the
code flow with PKCE (from discovery, ID token checked against the JWKS), refresh and organization token exchange;
huggingface_hub's own device-login helpers for the device flow.

The browser side of the code flow is a `requests` session that reads the provider's pages like a browser: it fills
the forms it finds (hidden fields included), and reads the final redirect to the app without following it.
"""

import base64
import hashlib
import threading
import time
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from authlib.common.security import generate_token
from authlib.integrations.requests_client import OAuth2Session, OAuthError
from authlib.oidc.core import CodeIDToken
from conftest import running_server
from huggingface_hub import HfApi, constants
from huggingface_hub.errors import DeviceCodeError, OAuthErrorCode
from huggingface_hub.utils import _oauth_device
from joserfc import jwt
from joserfc.errors import InvalidClaimError
from joserfc.jwk import KeySet
from oauth_support import REDIRECT, admin_call, form_of, make_world, origin_of, sign_in

CODE_SCOPE = "openid profile email read-endpoints"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
USER_EMAIL_TOKEN_TYPE = "urn:hub:token-type:user-email"


@pytest.fixture(scope="module")
def world(server):
    return make_world(server)


@pytest.fixture(scope="module")
def discovery(server):
    resp = requests.get(f"{server.url}/.well-known/openid-configuration", timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.json()


def record_requests(session: requests.Session) -> list:
    """The requests a session sends, as sent (headers and body), for checking how a library authenticated."""
    sent: list[requests.PreparedRequest] = []
    session.hooks["response"].append(lambda resp, *args, **kwargs: sent.append(resp.request))
    return sent


def bearer_get(url: str, token: str) -> requests.Response:
    return requests.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def approve_in_browser(server, world, scope: str = CODE_SCOPE, orgs=()):
    """An authlib client with a fresh PKCE pair and nonce, and a browser that signs in and approves.

    Returns (client, verifier, nonce, state, redirect location)."""
    client = OAuth2Session(
        world.client_id,
        world.client_secret,
        scope=scope,
        redirect_uri=REDIRECT,
        code_challenge_method="S256",
        token_endpoint_auth_method="client_secret_basic",
    )
    verifier = generate_token(64)
    nonce = generate_token(24)
    disc = requests.get(f"{server.url}/.well-known/openid-configuration", timeout=30).json()
    url, state = client.create_authorization_url(disc["authorization_endpoint"], code_verifier=verifier, nonce=nonce)
    query = parse_qs(urlsplit(url).query)
    expected_challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    assert query["code_challenge"] == [expected_challenge] and query["code_challenge_method"] == ["S256"], url

    browser = requests.Session()
    consent = sign_in(browser, browser.get(url, timeout=30), world.user)
    if consent.status_code == 303 and not orgs:
        # A returning user who already consented to these scopes is not asked again.
        return client, verifier, nonce, state, consent.headers["Location"]
    assert consent.status_code == 200, consent.text[:2000]
    # The consent page names the host the code goes to (the redirect URI's), not the claimed homepage.
    assert "Compat Notebook" in consent.text and "127.0.0.1" in consent.text
    assert "notebook.example" not in consent.text
    form = form_of(consent.text, "/oauth/consent")
    data = {k: v for k, v in form.fields.items() if k != "org"}  # organizations: only those ticked below
    assert ("decision", "approve") in form.buttons and ("decision", "deny") in form.buttons
    data = list(data.items()) + [("decision", "approve")] + [("org", o) for o in orgs]
    back = browser.post(origin_of(consent.url) + form.action, data=data, allow_redirects=False, timeout=30)
    assert back.status_code == 303, back.text[:2000]
    return client, verifier, nonce, state, back.headers["Location"]


def validate_id_token(id_token: str, jwks: dict, disc: dict, client_id: str, nonce: str, access_token: str):
    """The ID token as authlib's OpenID client validates it: signature against the JWKS (the algorithms discovery
    lists), then `iss`, `aud`, `exp`, `iat`, `nonce` and `at_hash`."""
    decoded = jwt.decode(id_token, KeySet.import_key_set(jwks), algorithms=disc["id_token_signing_alg_values_supported"])
    options = {
        "iss": {"essential": True, "value": disc["issuer"]},
        "aud": {"essential": True, "value": client_id},
        "exp": {"essential": True},
    }
    params = {"nonce": nonce, "client_id": client_id, "access_token": access_token}
    claims = CodeIDToken(decoded.claims, decoded.header, options, params)
    claims.validate()
    return decoded.header, claims


def test_discovery_advertises_what_the_clients_rely_on(server, discovery):
    assert discovery["issuer"] == server.url
    for key in ("authorization_endpoint", "token_endpoint", "jwks_uri", "userinfo_endpoint"):
        assert discovery[key].startswith(server.url + "/"), key
    assert discovery["code_challenge_methods_supported"] == ["S256"]
    assert "ES256" in discovery["id_token_signing_alg_values_supported"]
    assert discovery["authorization_response_iss_parameter_supported"] is True
    assert "client_secret_basic" in discovery["token_endpoint_auth_methods_supported"]
    assert discovery["response_types_supported"] == ["code"]


def test_code_flow_with_pkce_id_token_userinfo_and_refresh(server, world, discovery):
    client, verifier, nonce, state, location = approve_in_browser(server, world, orgs=[world.org_id])

    # The redirect back to the app: the registered URI, our state, and the issuer (RFC 9207).
    assert location.startswith(REDIRECT + "?"), location
    back = parse_qs(urlsplit(location).query)
    assert back["state"] == [state]
    assert back["iss"] == [discovery["issuer"]]
    assert "error" not in back

    sent = record_requests(client)
    token = client.fetch_token(discovery["token_endpoint"], authorization_response=location, code_verifier=verifier)
    # authlib authenticated with HTTP Basic, the secret nowhere in the body.
    token_request = sent[-1]
    assert token_request.headers["Authorization"].startswith("Basic ")
    assert "client_secret" not in parse_qs(token_request.body)
    assert parse_qs(token_request.body)["code_verifier"] == [verifier]

    assert token["token_type"].lower() == "bearer"
    assert token["scope"] == CODE_SCOPE
    assert int(token["expires_in"]) > 0
    for key in ("access_token", "refresh_token", "id_token"):
        assert isinstance(token[key], str) and token[key], key

    jwks = requests.get(discovery["jwks_uri"], timeout=30).json()
    header, claims = validate_id_token(
        token["id_token"], jwks, discovery, world.client_id, nonce, token["access_token"]
    )
    assert header["alg"] == "ES256"
    # authlib checks nonce and at_hash only when the claims are present: they must be.
    assert claims["nonce"] == nonce
    assert "at_hash" in claims
    assert claims["preferred_username"] == world.user
    assert claims["email"] == world.email
    assert [o["preferred_username"] for o in claims["orgs"]] == [world.org]
    # The validator is not a rubber stamp: another nonce or another access token fails it.
    with pytest.raises(InvalidClaimError):
        validate_id_token(token["id_token"], jwks, discovery, world.client_id, "other-nonce", token["access_token"])
    with pytest.raises(InvalidClaimError):
        validate_id_token(token["id_token"], jwks, discovery, world.client_id, nonce, token["access_token"] + "x")

    # Userinfo, called through authlib's session (it sends the bearer token).
    info = client.get(discovery["userinfo_endpoint"], timeout=30)
    assert info.status_code == 200, info.text
    info = info.json()
    assert info["sub"] == claims["sub"]
    assert info["preferred_username"] == world.user
    assert info["email"] == world.email
    assert [o["sub"] for o in info["organizations"]] == [world.org_id]

    # Refresh rotates: a new refresh token, a working access token; the old refresh token is refused after.
    first_rt = token["refresh_token"]
    refreshed = client.refresh_token(discovery["token_endpoint"], refresh_token=first_rt)
    assert refreshed["refresh_token"] != first_rt
    assert refreshed["access_token"] != token["access_token"]
    assert bearer_get(f"{server.url}/api/whoami-v2", refreshed["access_token"]).json()["name"] == world.user
    with pytest.raises(OAuthError) as refused:
        client.refresh_token(discovery["token_endpoint"], refresh_token=first_rt)
    assert refused.value.error == "invalid_grant"
    # Reusing a rotated refresh token revokes the family (oauth-reference pitfall 5).
    assert bearer_get(f"{server.url}/api/whoami-v2", refreshed["access_token"]).status_code == 401
    with pytest.raises(OAuthError):
        client.refresh_token(discovery["token_endpoint"], refresh_token=refreshed["refresh_token"])


def test_code_is_bound_to_its_verifier(server, world, discovery):
    client, _verifier, _nonce, _state, location = approve_in_browser(server, world)
    with pytest.raises(OAuthError) as refused:
        client.fetch_token(discovery["token_endpoint"], authorization_response=location, code_verifier=generate_token(64))
    assert refused.value.error == "invalid_grant"


@pytest.fixture(scope="module")
def exchange_app(server, world):
    """An app of the org with the token-exchange privilege (only the instance admin can grant it)."""
    app = admin_call(
        server,
        "POST",
        "/api/v1/oauth/apps",
        json={
            "owner": world.org,
            "name": "orbit backend",
            "scopes": ["openid", "read-endpoints", "write-endpoints"],
            "tokenExchange": True,
        },
    )
    return app["app"]["id"], app["clientSecret"]


def test_token_exchange_for_an_org_member(server, world, discovery, exchange_app):
    client_id, secret = exchange_app
    client = OAuth2Session(client_id, secret, token_endpoint_auth_method="client_secret_basic")
    sent = record_requests(client)
    token = client.fetch_token(
        discovery["token_endpoint"],
        grant_type=EXCHANGE_GRANT,
        subject_token=world.email.lower(),  # e-mail addresses match whatever their case
        subject_token_type=USER_EMAIL_TOKEN_TYPE,
    )
    assert sent[-1].headers["Authorization"].startswith("Basic ")
    assert token["issued_token_type"] == "urn:ietf:params:oauth:token-type:access_token"
    assert token["expires_in"] == 28800
    assert "refresh_token" not in token
    access = token["access_token"]

    # The organization's resources, never the member's own namespace.
    assert bearer_get(f"{server.url}/v2/endpoint/{world.org}", access).status_code == 200
    own = bearer_get(f"{server.url}/v2/endpoint/{world.user}", access)
    assert own.status_code == 403, own.text
    # And through huggingface_hub, as an org's backend would use it.
    assert HfApi(endpoint=server.url, token=access).list_inference_endpoints(namespace=world.org) == []

    # Only HTTP Basic authenticates the exchange: the same secret in the form is refused, nothing issued.
    post_client = OAuth2Session(client_id, secret, token_endpoint_auth_method="client_secret_post")
    with pytest.raises(OAuthError) as refused:
        post_client.fetch_token(
            discovery["token_endpoint"],
            grant_type=EXCHANGE_GRANT,
            subject_token=world.email,
            subject_token_type=USER_EMAIL_TOKEN_TYPE,
        )
    assert refused.value.error == "invalid_client"


# --- Device login --------------------------------------------------------------------------------------------------
# huggingface_hub 2.4.0 has a device-code login helper: `huggingface_hub.utils._oauth_device` (`request_device_code`,
# `poll_device_token`, `refresh_access_token`), which `hf auth login` and `login()` drive. The tests call those very
# functions (not `login()` itself, which would store the token in the suite's HF_HOME for every later test), with
# `constants.DEVICE_CODE_OAUTH_CLIENT_ID` set to a public app of the server. Where the helper cannot show a server
# answer (it never polls too fast, and times out on its own clock), the test makes the calls hf-compat.md lists.


def public_device_app(server, token: str) -> str:
    app = admin_call(
        server,
        "POST",
        "/api/v1/oauth/apps",
        token=token,
        json={"name": "Compat CLI", "public": True, "redirectUris": [], "scopes": ["openid", "profile", "read-endpoints"]},
    )
    assert "clientSecret" not in app or app["clientSecret"] is None
    return app["app"]["id"]


def answer_device(server_url: str, username: str, verification_uri_complete: str, user_code: str, decision: str):
    """A second browser session: open the pre-filled verification link, sign in, confirm the code, decide."""
    browser = requests.Session()
    entry = sign_in(browser, browser.get(verification_uri_complete, timeout=30), username)
    assert entry.status_code == 200, entry.text[:2000]
    verify = form_of(entry.text, "/oauth/device/verify")
    assert verify.fields["user_code"] == user_code, "verification_uri_complete pre-fills the code"
    confirm = browser.post(server_url + verify.action, data=verify.fields, timeout=30)
    assert confirm.status_code == 200, confirm.text[:2000]
    assert "Compat CLI" in confirm.text
    decide = form_of(confirm.text, "/oauth/device/decide")
    data = {k: v for k, v in decide.fields.items() if k != "org"}
    data["decision"] = decision
    done = browser.post(server_url + decide.action, data=data, timeout=30)
    assert done.status_code == 200, done.text[:2000]
    return done.text


class DeviceAnswerer:
    """Answers the device request from a thread, started at the helper's first `authorization_pending`."""

    def __init__(self, server_url, username, info, decision):
        self.args = (server_url, username, info["verification_uri_complete"], info["user_code"], decision)
        self.pending = 0
        self.thread = None
        self.page = None
        self.error = None

    def on_pending(self):
        self.pending += 1
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()

    def _run(self):
        try:
            self.page = answer_device(*self.args)
        except BaseException as e:  # reported by join()
            self.error = e

    def join(self):
        assert self.thread is not None, "the helper never saw authorization_pending"
        self.thread.join(timeout=60)
        if self.error is not None:
            raise self.error


def test_device_login_with_huggingface_hub(server, world, monkeypatch):
    monkeypatch.setattr(constants, "DEVICE_CODE_OAUTH_CLIENT_ID", public_device_app(server, world.user_token))
    info = _oauth_device.request_device_code()
    assert info["verification_uri"] == f"{server.url}/oauth/device"
    assert info["user_code"] in info["verification_uri_complete"]
    assert info["interval"] == 5 and info["expires_in"] == 600

    answerer = DeviceAnswerer(server.url, world.user, info, "approve")
    token = _oauth_device.poll_device_token(info, on_pending=answerer.on_pending)
    answerer.join()
    assert "Device connected" in answerer.page
    assert answerer.pending >= 1
    assert token["token_type"].lower() == "bearer"
    assert int(token["expires_in"]) > 0 and token["refresh_token"]

    me = HfApi(endpoint=server.url, token=token["access_token"]).whoami()
    assert me["name"] == world.user
    assert me["type"] == "user"

    # The helper's refresh (what `get_token()` does when the token expires): a public client, no secret; it rotates.
    renewed = _oauth_device.refresh_access_token(token["refresh_token"])
    assert renewed["refresh_token"] != token["refresh_token"]
    assert HfApi(endpoint=server.url, token=renewed["access_token"]).whoami()["name"] == world.user
    with pytest.raises(DeviceCodeError) as refused:
        _oauth_device.refresh_access_token(token["refresh_token"])
    assert refused.value.error_code == OAuthErrorCode.INVALID_GRANT


# A server of its own with a short interval and lifetime, so denial and expiry take seconds, not minutes.
FAST_INTERVAL_S = 1
FAST_TTL_S = 4


@pytest.fixture(scope="module")
def fast_device(server):
    """(server, user, public client id) on a server whose device codes poll every 1 s and live 4 s."""
    config = f"[oauth]\ndevice_interval_s = {FAST_INTERVAL_S}\ndevice_code_ttl_s = {FAST_TTL_S}\n"
    with running_server(config, own_store=True) as fast:
        world = make_world(fast)
        yield fast, world.user, public_device_app(fast, world.user_token)


def test_device_denied_through_huggingface_hub(fast_device, monkeypatch):
    fast, user, client_id = fast_device
    monkeypatch.setattr(constants, "ENDPOINT", fast.url)
    monkeypatch.setattr(constants, "DEVICE_CODE_OAUTH_CLIENT_ID", client_id)
    info = _oauth_device.request_device_code()
    answerer = DeviceAnswerer(fast.url, user, info, "deny")
    with pytest.raises(DeviceCodeError) as denied:
        _oauth_device.poll_device_token(info, on_pending=answerer.on_pending)
    answerer.join()
    assert "Request denied" in answerer.page
    assert denied.value.error_code == OAuthErrorCode.ACCESS_DENIED


def test_device_polling_contract(fast_device):
    """The calls hf-compat.md lists, made by hand where the helper cannot show the answer."""
    fast, _user, client_id = fast_device
    start = requests.post(f"{fast.url}/oauth/device", data={"client_id": client_id}, timeout=30)
    assert start.status_code == 200, start.text
    d = start.json()
    for key in ("device_code", "user_code", "verification_uri", "verification_uri_complete"):
        assert isinstance(d[key], str) and d[key], key
    assert (d["interval"], d["expires_in"]) == (FAST_INTERVAL_S, FAST_TTL_S)
    began = time.monotonic()

    def poll():
        resp = requests.post(
            f"{fast.url}/oauth/token",
            data={"grant_type": DEVICE_GRANT, "device_code": d["device_code"], "client_id": client_id},
            timeout=30,
        )
        assert resp.status_code == 400, resp.text
        assert resp.headers["Cache-Control"] == "no-store"
        return resp.json()["error"]

    assert poll() == "authorization_pending"
    assert poll() == "slow_down", "polled again at once"
    # The interval grew by 5 s: polling after the original interval is still too fast.
    time.sleep(FAST_INTERVAL_S + 0.2)
    assert poll() == "slow_down"
    time.sleep(max(0.0, FAST_TTL_S - (time.monotonic() - began)) + 0.5)
    assert poll() == "expired_token"
