"""Error responses as the client turns them into exceptions: status, message, request id."""

import pytest
from conftest import create_endpoint, unique_name
from huggingface_hub import constants
from huggingface_hub.errors import BadRequestError, HfHubHTTPError
from huggingface_hub.utils import get_session


def assert_traceable(err: HfHubHTTPError) -> None:
    request_id = err.response.headers.get("x-request-id")
    assert request_id, "no x-request-id header on the error response"
    assert err.request_id == request_id
    assert request_id in str(err)


def test_invalid_name_is_bad_request_with_server_message(api, cpu_hardware):
    with pytest.raises(BadRequestError) as excinfo:
        create_endpoint(api, cpu_hardware, "Bad_Name")
    err = excinfo.value
    assert err.response.status_code == 400
    body = err.response.json()
    assert isinstance(body["error"], str) and body["error"]
    # The client builds its message from the header and the body: the server's own words reach the user.
    assert body["error"] in str(err)
    assert err.response.headers.get("X-Error-Message")
    assert err.response.headers["X-Error-Message"] in str(err)
    assert any(issue["path"] == "name" and issue["message"] for issue in body["issues"]), body["issues"]
    assert_traceable(err)
    assert "Bad_Name" not in [e.name for e in api.list_inference_endpoints(namespace="admin")]


@pytest.mark.parametrize("name", ["x" * 33, "has space", "UPPER", "dot.name"])
def test_other_invalid_names_are_bad_request(api, cpu_hardware, name):
    with pytest.raises(BadRequestError) as excinfo:
        create_endpoint(api, cpu_hardware, name)
    assert any(issue["path"] == "name" for issue in excinfo.value.response.json()["issues"])


def test_name_of_32_chars_is_accepted(api, cpu_hardware, cleanup):
    name = unique_name("n" * 23)
    assert len(name) == 32
    assert cleanup(create_endpoint(api, cpu_hardware, name)).name == name


def test_all_issues_are_reported(api, cpu_hardware):
    # Two independent problems in one body: both are reported, each at its own path.
    with pytest.raises(BadRequestError) as excinfo:
        create_endpoint(api, cpu_hardware, "Bad_Name", repository="no-slash", min_replica=3, max_replica=1)
    paths = {issue["path"] for issue in excinfo.value.response.json()["issues"]}
    assert "name" in paths
    assert "model.repository" in paths
    assert len(paths) >= 3, paths


def test_missing_endpoint_is_404(api):
    with pytest.raises(HfHubHTTPError) as excinfo:
        api.get_inference_endpoint("does-not-exist", namespace="admin")
    err = excinfo.value
    assert not isinstance(err, BadRequestError)
    assert err.response.status_code == 404
    body = err.response.json()
    assert isinstance(body, dict) and isinstance(body["error"], str)
    assert body["error"] in str(err)
    assert_traceable(err)


@pytest.mark.parametrize("op", ["pause", "resume", "scale_to_zero", "delete", "update"])
def test_operations_on_missing_endpoint_are_404(api, op):
    name = "does-not-exist"
    with pytest.raises(HfHubHTTPError) as excinfo:
        if op == "update":
            api.update_inference_endpoint(name, max_replica=2)
        else:
            getattr(api, f"{op}_inference_endpoint")(name)
    assert excinfo.value.response.status_code == 404


def test_unknown_namespace_is_an_error(api):
    with pytest.raises(HfHubHTTPError) as excinfo:
        api.list_inference_endpoints(namespace="no-such-namespace-xyz")
    assert excinfo.value.response.status_code in (403, 404)


def test_missing_token_is_401(server):
    response = get_session().get(f"{constants.INFERENCE_ENDPOINTS_ENDPOINT}/endpoint/admin")
    assert response.status_code == 401
    assert isinstance(response.json()["error"], str)
    assert response.headers.get("x-request-id")


def test_invalid_json_body_is_bad_request(server):
    response = get_session().post(
        f"{constants.INFERENCE_ENDPOINTS_ENDPOINT}/endpoint/admin",
        headers={"Authorization": f"Bearer {server.admin_token}", "Content-Type": "application/json"},
        content=b"{not json",
    )
    assert response.status_code == 400
    body = response.json()
    assert isinstance(body, dict) and isinstance(body["error"], str)
    assert isinstance(body["issues"], list)
