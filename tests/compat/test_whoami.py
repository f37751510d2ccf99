"""`GET /api/whoami-v2` as `HfApi.whoami` reads it, and the bearer-token rules around it."""

import os
import re
import stat

import pytest
from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError
from huggingface_hub.utils import get_session


def test_admin_token_file_is_private_and_well_formed(server):
    token_file = server.data_dir / "admin-token"
    mode = stat.S_IMODE(os.stat(token_file).st_mode)
    assert mode == 0o600, f"admin-token mode is {oct(mode)}, expected 0o600"
    assert re.fullmatch(r"sy_[A-Za-z0-9_-]{43}", server.admin_token)


def test_health(server):
    response = get_session().get(f"{server.url}/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert response.headers.get("x-request-id")


def test_whoami_admin(api):
    me = api.whoami()
    assert me["type"] == "user"
    assert me["name"] == "admin"
    assert isinstance(me["id"], str) and me["id"]
    assert "fullname" in me
    assert "avatarUrl" in me
    assert isinstance(me["orgs"], list)
    for org in me["orgs"]:
        assert isinstance(org["name"], str)
    access_token = me["auth"]["accessToken"]
    assert isinstance(access_token["role"], str) and access_token["role"]
    assert isinstance(access_token["displayName"], str)


def test_whoami_explicit_token_argument(server, admin_token):
    # A client built without a token, the token passed per call: the per-call token must be the one sent.
    anonymous = HfApi(endpoint=server.url, token=False)
    assert anonymous.whoami(token=admin_token)["name"] == "admin"


def test_whoami_user_lists_orgs(server, accounts):
    me = HfApi(endpoint=server.url, token=accounts.writer_token).whoami()
    assert me["type"] == "user"
    assert me["name"] == accounts.writer
    assert accounts.org in [org["name"] for org in me["orgs"]]


def test_whoami_bad_token_is_401(server):
    bad = HfApi(endpoint=server.url, token="sy_" + "A" * 43)
    with pytest.raises(HfHubHTTPError) as excinfo:
        bad.whoami()
    response = excinfo.value.response
    assert response.status_code == 401
    # The client needs a JSON object body to build its message; the request id makes errors traceable.
    assert isinstance(response.json(), dict)
    assert response.headers.get("x-request-id")
    assert "Invalid user token" in str(excinfo.value)


def test_whoami_malformed_token_is_401(server):
    bad = HfApi(endpoint=server.url, token="not-a-token")
    with pytest.raises(HfHubHTTPError) as excinfo:
        bad.whoami()
    assert excinfo.value.response.status_code == 401


def test_agent_harnesses_is_404(server):
    # With telemetry on, the client first asks for `/api/agent-harnesses`; a 404 is fine but must not break it.
    response = get_session().get(f"{server.url}/api/agent-harnesses")
    assert response.status_code == 404
    assert response.headers.get("x-request-id")


def test_expiring_token_works_before_expiry(server, accounts):
    token = server.cli("token", "create", accounts.reader, "--expires-in", "1h")
    assert re.fullmatch(r"sy_[A-Za-z0-9_-]{43}", token)
    assert HfApi(endpoint=server.url, token=token).whoami()["name"] == accounts.reader
