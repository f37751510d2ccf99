"""Inference Endpoints management (`/v2/endpoint/...`, `/v2/provider/...`) through the real client."""

import json
from datetime import datetime, timedelta

import pytest
from conftest import STARTING, TEST_REPOSITORY, create_endpoint, unique_name
from huggingface_hub.errors import BadRequestError, HfHubHTTPError

CUSTOM_URL = "ghcr.io/example/echo-server:1.0"
SECRET_VALUE = "s3cret-value-never-echoed"


def assert_timestamps(endpoint) -> None:
    status = endpoint.raw["status"]
    assert status["createdAt"].endswith("Z"), status["createdAt"]
    assert status["updatedAt"].endswith("Z"), status["updatedAt"]
    assert isinstance(endpoint.created_at, datetime) and endpoint.created_at.utcoffset() == timedelta(0)
    assert endpoint.updated_at >= endpoint.created_at


def test_hardware_list_parses(api):
    hardware = api.list_inference_endpoints_hardware()
    assert hardware
    assert len({hw.id for hw in hardware}) == len(hardware), "hardware ids are not unique"
    accelerators = {hw.accelerator for hw in hardware}
    assert "cpu" in accelerators
    for hw in hardware:
        assert hw.vendor and hw.region and hw.instance_type and hw.instance_size
        assert hw.accelerator in {"cpu", "gpu", "neuron", "zero_gpu"}, hw.accelerator
        assert isinstance(hw.num_accelerators, int) and hw.num_accelerators >= 1
        assert isinstance(hw.memory_gb, (int, float)) and hw.memory_gb > 0
        assert isinstance(hw.price_per_hour, (int, float)) and hw.price_per_hour >= 0
        assert isinstance(hw.max_accelerators, int) and isinstance(hw.used_accelerators, int)
        assert isinstance(hw.status, str) and hw.status
    # The same list for the caller's namespace given explicitly.
    assert {hw.id for hw in api.list_inference_endpoints_hardware(namespace="admin")} == {hw.id for hw in hardware}


def test_create_with_default_image(api, cpu_hardware, cleanup):
    name = unique_name("plain")
    endpoint = cleanup(create_endpoint(api, cpu_hardware, name))  # no custom_image: sends {"huggingface": {}}
    assert endpoint.name == name
    assert endpoint.namespace == "admin"
    assert endpoint.repository == TEST_REPOSITORY
    assert endpoint.framework == "pytorch"
    assert endpoint.task == "text-generation"
    assert endpoint.revision is None
    assert endpoint.status == "pending"
    assert endpoint.type == "authenticated"
    assert endpoint.url is None
    assert isinstance(endpoint.health_route, str) and endpoint.health_route.startswith("/")
    raw = endpoint.raw
    image = raw["model"]["image"]
    assert len(image) == 1 and next(iter(image)) in {"hub", "huggingface"}, image
    assert raw["compute"]["accelerator"] == cpu_hardware.accelerator
    assert raw["compute"]["instanceType"] == cpu_hardware.instance_type
    assert raw["compute"]["instanceSize"] == cpu_hardware.instance_size
    assert raw["compute"]["scaling"]["minReplica"] == 1
    assert raw["compute"]["scaling"]["maxReplica"] == 1
    assert raw["provider"] == {"vendor": cpu_hardware.vendor, "region": cpu_hardware.region}
    assert raw["model"]["fromCatalog"] in (None, False)
    assert raw["status"]["createdBy"]["name"] == "admin"
    assert raw["status"]["updatedBy"]["name"] == "admin"
    assert raw["status"]["readyReplica"] == 0
    assert_timestamps(endpoint)


def test_create_with_custom_image(api, cpu_hardware, cleanup):
    name = unique_name("custom")
    endpoint = cleanup(
        create_endpoint(
            api,
            cpu_hardware,
            name,
            framework="custom",
            task="custom",
            # The client forwards a flat dict with `url` as {"custom": {...}}; keys are the API's (camelCase).
            custom_image={"url": CUSTOM_URL, "healthRoute": "/ready", "port": 8080},
            env={"LOG_LEVEL": "debug"},
            secrets={"API_KEY": SECRET_VALUE},
            container_args=["--verbose"],
            container_command=["/bin/server"],
            tags=["compat", "custom"],
            min_replica=0,
            max_replica=2,
            scale_to_zero_timeout=30,
        )
    )
    raw = endpoint.raw
    custom = raw["model"]["image"]["custom"]
    assert list(raw["model"]["image"]) == ["custom"]
    assert custom["url"] == CUSTOM_URL
    assert custom["healthRoute"] == "/ready"
    assert custom["port"] == 8080
    assert endpoint.health_route == "/ready"
    assert raw["model"]["env"] == {"LOG_LEVEL": "debug"}
    assert raw["model"]["secrets"] == {"API_KEY": None}
    assert raw["model"]["args"] == ["--verbose"]
    assert raw["model"]["command"] == ["/bin/server"]
    assert sorted(raw["tags"]) == ["compat", "custom"]
    assert raw["compute"]["scaling"]["minReplica"] == 0
    assert raw["compute"]["scaling"]["maxReplica"] == 2
    assert raw["compute"]["scaling"]["scaleToZeroTimeout"] == 30
    assert SECRET_VALUE not in json.dumps(raw)
    # The same, read back.
    fetched = api.get_inference_endpoint(name)
    assert fetched.raw["model"]["image"]["custom"]["url"] == CUSTOM_URL
    assert fetched.raw["model"]["secrets"] == {"API_KEY": None}
    assert fetched.health_route == "/ready"
    assert SECRET_VALUE not in json.dumps(fetched.raw)


def test_get_and_list(api, cpu_hardware, cleanup):
    names = [unique_name("list"), unique_name("list")]
    for name in names:
        cleanup(create_endpoint(api, cpu_hardware, name))
    fetched = api.get_inference_endpoint(names[0], namespace="admin")
    assert fetched.name == names[0]
    assert fetched.repository == TEST_REPOSITORY
    assert fetched.status in STARTING
    assert_timestamps(fetched)

    listed = api.list_inference_endpoints(namespace="admin")
    listed_names = [e.name for e in listed]
    assert set(names) <= set(listed_names)
    assert len(listed_names) == len(set(listed_names)), "an endpoint is listed twice"
    for endpoint in listed:
        assert endpoint.namespace == "admin"
        assert_timestamps(endpoint)
    # Default namespace: the client resolves it with whoami.
    assert set(names) <= {e.name for e in api.list_inference_endpoints()}


def test_update_replicas(api, admin_token, cpu_hardware, cleanup):
    name = unique_name("scale")
    created = cleanup(create_endpoint(api, cpu_hardware, name))
    updated = api.update_inference_endpoint(name, min_replica=2, max_replica=3)
    scaling = updated.raw["compute"]["scaling"]
    assert (scaling["minReplica"], scaling["maxReplica"]) == (2, 3)
    # A partial update leaves everything else alone.
    assert updated.repository == TEST_REPOSITORY
    assert updated.raw["model"]["image"] == created.raw["model"]["image"]
    assert updated.raw["compute"]["instanceType"] == cpu_hardware.instance_type
    assert updated.raw["provider"] == created.raw["provider"]
    assert updated.updated_at >= created.updated_at
    assert updated.created_at == created.created_at
    # The object's helpers call the API with the object's own token: `HfApi(token=...)` is not copied into it.
    fetched = api.get_inference_endpoint(name, token=admin_token)
    assert (fetched.raw["compute"]["scaling"]["minReplica"], fetched.raw["compute"]["scaling"]["maxReplica"]) == (2, 3)

    # Through the InferenceEndpoint object too: it is mutated in place.
    fetched.update(max_replica=4)
    assert fetched.raw["compute"]["scaling"]["maxReplica"] == 4
    assert fetched.raw["compute"]["scaling"]["minReplica"] == 2


def test_update_rejects_min_above_max(api, cpu_hardware, cleanup):
    name = unique_name("minmax")
    cleanup(create_endpoint(api, cpu_hardware, name))
    with pytest.raises(HfHubHTTPError) as excinfo:
        api.update_inference_endpoint(name, min_replica=5, max_replica=1)
    assert excinfo.value.response.status_code == 400
    scaling = api.get_inference_endpoint(name).raw["compute"]["scaling"]
    assert (scaling["minReplica"], scaling["maxReplica"]) == (1, 1)


def test_update_env_and_secrets(api, cpu_hardware, cleanup):
    name = unique_name("secrets")
    cleanup(create_endpoint(api, cpu_hardware, name, env={"MODE": "a"}, secrets={"TOKEN_A": SECRET_VALUE}))

    updated = api.update_inference_endpoint(name, secrets={"TOKEN_B": SECRET_VALUE + "-b"})
    secrets = updated.raw["model"]["secrets"]
    assert "TOKEN_B" in secrets
    assert all(value is None for value in secrets.values()), secrets
    assert SECRET_VALUE not in json.dumps(updated.raw)
    keys_after_secret_update = set(secrets)

    # An update that does not mention secrets keeps them (visible only as keys with null values).
    updated = api.update_inference_endpoint(name, env={"MODE": "b", "EXTRA": "1"})
    assert updated.raw["model"]["env"]["MODE"] == "b"
    assert updated.raw["model"]["env"]["EXTRA"] == "1"
    assert set(updated.raw["model"]["secrets"]) == keys_after_secret_update
    assert all(value is None for value in updated.raw["model"]["secrets"].values())

    fetched = api.get_inference_endpoint(name)
    assert set(fetched.raw["model"]["secrets"]) == keys_after_secret_update
    assert fetched.raw["model"]["env"]["MODE"] == "b"
    assert SECRET_VALUE not in json.dumps(fetched.raw)


def test_update_custom_image(api, cpu_hardware, cleanup):
    name = unique_name("image")
    cleanup(
        create_endpoint(
            api, cpu_hardware, name, framework="custom", custom_image={"url": CUSTOM_URL, "healthRoute": "/ready"}
        )
    )
    new_url = "ghcr.io/example/echo-server:2.0"
    updated = api.update_inference_endpoint(
        name, custom_image={"url": new_url, "healthRoute": "/healthz", "port": 9000}
    )
    custom = updated.raw["model"]["image"]["custom"]
    assert custom["url"] == new_url
    assert custom["healthRoute"] == "/healthz"
    assert custom["port"] == 9000
    assert updated.health_route == "/healthz"
    assert api.get_inference_endpoint(name).raw["model"]["image"]["custom"]["url"] == new_url

    # Switching to another image variant replaces the image instead of merging into it.
    updated = api.update_inference_endpoint(name, custom_image={"tei": {"url": "ghcr.io/example/tei:1.0"}})
    assert list(updated.raw["model"]["image"]) == ["tei"]
    assert updated.raw["model"]["image"]["tei"]["url"] == "ghcr.io/example/tei:1.0"


def test_pause_resume_scale_to_zero(api, admin_token, cpu_hardware, cleanup):
    name = unique_name("life")
    endpoint = cleanup(create_endpoint(api, cpu_hardware, name, token=admin_token))
    assert endpoint.status == "pending"

    paused = api.pause_inference_endpoint(name)
    assert paused.status == "paused"
    assert api.get_inference_endpoint(name).status == "paused"

    resumed = api.resume_inference_endpoint(name)
    assert resumed.status == "pending"
    assert api.get_inference_endpoint(name).status in STARTING

    scaled = api.scale_to_zero_inference_endpoint(name)
    assert scaled.status == "scaledToZero"
    assert api.get_inference_endpoint(name).status == "scaledToZero"

    # The InferenceEndpoint helpers drive the same operations and mutate the object in place.
    endpoint.fetch()
    assert endpoint.status == "scaledToZero"
    endpoint.pause()
    assert endpoint.status == "paused"
    endpoint.resume()
    assert endpoint.status in STARTING
    endpoint.scale_to_zero()
    assert endpoint.status == "scaledToZero"
    assert_timestamps(endpoint)


def test_delete_then_get_is_404(api, admin_token, cpu_hardware):
    name = unique_name("gone")
    endpoint = create_endpoint(api, cpu_hardware, name, token=admin_token)
    endpoint.delete()
    with pytest.raises(HfHubHTTPError) as excinfo:
        api.get_inference_endpoint(name)
    assert excinfo.value.response.status_code == 404
    assert name not in [e.name for e in api.list_inference_endpoints(namespace="admin")]
    with pytest.raises(HfHubHTTPError) as excinfo:
        api.delete_inference_endpoint(name)
    assert excinfo.value.response.status_code == 404


def test_create_duplicate_name_is_409(api, cpu_hardware, cleanup):
    name = unique_name("dup")
    cleanup(create_endpoint(api, cpu_hardware, name))
    with pytest.raises(HfHubHTTPError) as excinfo:
        create_endpoint(api, cpu_hardware, name)
    assert excinfo.value.response.status_code == 409


def test_update_model_fields(api, cpu_hardware, cleanup):
    name = unique_name("model")
    cleanup(create_endpoint(api, cpu_hardware, name))
    updated = api.update_inference_endpoint(
        name, repository="openai-community/gpt2-medium", revision="main", task="text-classification"
    )
    assert updated.repository == "openai-community/gpt2-medium"
    assert updated.revision == "main"
    assert updated.task == "text-classification"
    assert updated.framework == "pytorch"
    fetched = api.get_inference_endpoint(name)
    assert (fetched.repository, fetched.revision, fetched.task) == (
        "openai-community/gpt2-medium",
        "main",
        "text-classification",
    )


def test_create_with_scaling_metric(api, cpu_hardware, cleanup):
    endpoint = cleanup(
        create_endpoint(
            api,
            cpu_hardware,
            unique_name("measure"),
            max_replica=3,
            scaling_metric="pendingRequests",
            scaling_threshold=4.0,
        )
    )
    assert endpoint.raw["compute"]["scaling"]["measure"] == {"pendingRequests": 4.0}
    updated = api.update_inference_endpoint(endpoint.name, scaling_metric="hardwareUsage", scaling_threshold=75.0)
    # Another measure variant replaces the previous one rather than merging into it.
    assert updated.raw["compute"]["scaling"]["measure"] == {"hardwareUsage": 75.0}


def test_create_with_route_and_cache(api, cpu_hardware, cleanup):
    endpoint = cleanup(
        create_endpoint(
            api,
            cpu_hardware,
            unique_name("route"),
            domain="models.example.com",
            path="/gpt2",
            cache_http_responses=True,
        )
    )
    assert endpoint.raw["route"] == {"domain": "models.example.com", "path": "/gpt2"}
    assert endpoint.raw["cacheHttpResponses"] is True


def test_private_link_requires_private_type(api, cpu_hardware, cleanup):
    account = "123456789012"
    endpoint = cleanup(
        create_endpoint(
            api,
            cpu_hardware,
            unique_name("private"),
            type="private",
            private_link_account_id=account,
            private_link_region="eu-west-1",
        )
    )
    assert endpoint.type == "private"
    assert endpoint.raw["privateService"]["accountId"] == account
    assert endpoint.raw["privateService"]["region"] == "eu-west-1"

    with pytest.raises(BadRequestError) as excinfo:
        create_endpoint(
            api,
            cpu_hardware,
            unique_name("notprivate"),
            type="authenticated",
            private_link_account_id=account,
            private_link_region="us-east-1",
        )
    assert any(issue["path"].startswith("privateService") for issue in excinfo.value.response.json()["issues"])


def test_registry_credentials_are_not_echoed(api, cpu_hardware, cleanup):
    password = "registry-password-never-echoed"
    endpoint = cleanup(
        create_endpoint(
            api,
            cpu_hardware,
            unique_name("creds"),
            framework="custom",
            custom_image={"url": "registry.example.com/team/server:1.0"},
            container_registry_username="robot",
            container_registry_password=password,
        )
    )
    credentials = endpoint.raw["model"]["image"]["custom"]["credentials"]
    assert credentials["username"] == "robot"
    assert password not in json.dumps(endpoint.raw)
    assert password not in json.dumps(api.get_inference_endpoint(endpoint.name).raw)


def test_delete_frees_the_name(api, cpu_hardware):
    name = unique_name("reuse")
    create_endpoint(api, cpu_hardware, name)
    api.delete_inference_endpoint(name)
    again = create_endpoint(api, cpu_hardware, name, repository="openai-community/gpt2-large")
    assert again.repository == "openai-community/gpt2-large"
    assert again.status == "pending"
    api.delete_inference_endpoint(name)
