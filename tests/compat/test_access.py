"""Who may see and manage which namespace: users, org roles and token scopes made with the real CLI."""

import pytest
from conftest import STARTING, create_endpoint, make_api, unique_name
from huggingface_hub.errors import HfHubHTTPError


def assert_forbidden(call) -> HfHubHTTPError:
    with pytest.raises(HfHubHTTPError) as excinfo:
        call()
    assert excinfo.value.response.status_code == 403, excinfo.value.response.text
    assert isinstance(excinfo.value.response.json()["error"], str)
    return excinfo.value


@pytest.fixture(scope="module")
def admin_endpoint(api, cpu_hardware):
    """An endpoint in admin's personal namespace that other users must not reach."""
    endpoint = create_endpoint(api, cpu_hardware, unique_name("private"))
    yield endpoint
    try:
        api.delete_inference_endpoint(endpoint.name, namespace="admin")
    except HfHubHTTPError:
        pass


def test_other_user_cannot_list_or_create_in_admin_namespace(server, accounts, cpu_hardware, api):
    bob = make_api(server, accounts.writer_token)
    assert_forbidden(lambda: bob.list_inference_endpoints(namespace="admin"))
    name = unique_name("intruder")
    assert_forbidden(lambda: create_endpoint(bob, cpu_hardware, name, namespace="admin"))
    assert name not in [e.name for e in api.list_inference_endpoints(namespace="admin")]


def test_other_user_cannot_touch_admin_endpoint(server, accounts, admin_endpoint, api):
    bob = make_api(server, accounts.writer_token)
    name = admin_endpoint.name
    # Reading or changing someone else's endpoint is refused (403; 404 would also hide its existence).
    for call in (
        lambda: bob.get_inference_endpoint(name, namespace="admin"),
        lambda: bob.update_inference_endpoint(name, namespace="admin", max_replica=2),
        lambda: bob.pause_inference_endpoint(name, namespace="admin"),
        lambda: bob.delete_inference_endpoint(name, namespace="admin"),
    ):
        with pytest.raises(HfHubHTTPError) as excinfo:
            call()
        assert excinfo.value.response.status_code in (403, 404)
    still = api.get_inference_endpoint(name, namespace="admin")
    assert still.status in STARTING
    assert still.raw["compute"]["scaling"]["maxReplica"] == 1


def test_user_manages_own_namespace(server, accounts, cpu_hardware, cleanup):
    bob = make_api(server, accounts.writer_token)
    endpoint = cleanup(create_endpoint(bob, cpu_hardware, unique_name("mine")), client=bob)
    assert endpoint.namespace == accounts.writer  # default namespace from whoami
    assert endpoint.name in [e.name for e in bob.list_inference_endpoints()]
    assert bob.pause_inference_endpoint(endpoint.name).status == "paused"


def test_write_member_can_create_in_org(server, accounts, cpu_hardware, cleanup):
    bob = make_api(server, accounts.writer_token)
    name = unique_name("org")
    endpoint = cleanup(create_endpoint(bob, cpu_hardware, name, namespace=accounts.org), client=bob)
    assert endpoint.name == name
    assert endpoint.namespace == accounts.org
    assert name in [e.name for e in bob.list_inference_endpoints(namespace=accounts.org)]
    assert bob.get_inference_endpoint(name, namespace=accounts.org).repository == endpoint.repository
    assert endpoint.raw["status"]["createdBy"]["name"] == accounts.writer
    # A write member manages it too, and the change is attributed to them.
    updated = bob.update_inference_endpoint(name, namespace=accounts.org, max_replica=2)
    assert updated.raw["compute"]["scaling"]["maxReplica"] == 2
    assert updated.raw["status"]["updatedBy"]["name"] == accounts.writer


def test_write_member_can_deploy_from_catalog_in_org(server, accounts, catalog, cleanup):
    bob = make_api(server, accounts.writer_token)
    small = sorted(
        (
            m
            for m in catalog
            if any(r.accelerator == "cpu" for r in m.recipes)
            and not any(k in m.repo_id for k in ("405B", "DeepSeek-V3"))
        ),
        key=lambda m: m.repo_id,
    )
    assert small
    endpoint = cleanup(
        bob.create_inference_endpoint_from_catalog(repo_id=small[0].repo_id, namespace=accounts.org), client=bob
    )
    assert endpoint.namespace == accounts.org
    assert endpoint.raw["model"]["fromCatalog"] is True


def test_read_member_can_list_but_not_create_in_org(server, accounts, cpu_hardware, cleanup):
    bob = make_api(server, accounts.writer_token)
    carol = make_api(server, accounts.reader_token)
    name = unique_name("seen")
    cleanup(create_endpoint(bob, cpu_hardware, name, namespace=accounts.org), client=bob)

    assert name in [e.name for e in carol.list_inference_endpoints(namespace=accounts.org)]
    assert carol.get_inference_endpoint(name, namespace=accounts.org).name == name
    assert_forbidden(lambda: create_endpoint(carol, cpu_hardware, unique_name("nope"), namespace=accounts.org))
    assert_forbidden(lambda: carol.pause_inference_endpoint(name, namespace=accounts.org))
    assert_forbidden(lambda: carol.delete_inference_endpoint(name, namespace=accounts.org))
    assert bob.get_inference_endpoint(name, namespace=accounts.org).status in STARTING


def test_non_member_cannot_list_org(server, accounts):
    outsider_name = unique_name("dave")
    outsider = make_api(server, server.create_user(outsider_name))
    assert_forbidden(lambda: outsider.list_inference_endpoints(namespace=accounts.org))
    assert accounts.org not in [org["name"] for org in outsider.whoami()["orgs"]]


def test_read_scoped_token_can_list_but_not_create(server, accounts, cpu_hardware, admin_endpoint, catalog):
    scoped = make_api(server, accounts.admin_read_scoped_token)
    assert scoped.whoami()["name"] == "admin"
    assert admin_endpoint.name in [e.name for e in scoped.list_inference_endpoints(namespace="admin")]
    assert scoped.get_inference_endpoint(admin_endpoint.name, namespace="admin").name == admin_endpoint.name
    assert_forbidden(lambda: create_endpoint(scoped, cpu_hardware, unique_name("scoped"), namespace="admin"))
    assert_forbidden(lambda: scoped.pause_inference_endpoint(admin_endpoint.name, namespace="admin"))
    assert_forbidden(lambda: scoped.delete_inference_endpoint(admin_endpoint.name, namespace="admin"))
    small = [m for m in catalog if any(r.accelerator == "cpu" for r in m.recipes)]
    assert_forbidden(lambda: scoped.create_inference_endpoint_from_catalog(repo_id=small[0].repo_id, namespace="admin"))


def test_list_all_namespaces(server, accounts, cpu_hardware, cleanup, monkeypatch):
    """`list_inference_endpoints("*")`: the personal namespace, then every org from whoami."""
    bob = make_api(server, accounts.writer_token)
    personal = cleanup(create_endpoint(bob, cpu_hardware, unique_name("star-me")), client=bob)
    in_org = cleanup(create_endpoint(bob, cpu_hardware, unique_name("star-org"), namespace=accounts.org), client=bob)
    # huggingface_hub 2.4.0 lists the personal namespace through the module-level helper, which sends the default
    # (logged-in) token rather than the HfApi's: emulate a logged-in user as real scripts run.
    monkeypatch.setenv("HF_TOKEN", accounts.writer_token)
    listed = bob.list_inference_endpoints(namespace="*")
    by_name = {e.name: e.namespace for e in listed}
    assert by_name.get(personal.name) == accounts.writer
    assert by_name.get(in_org.name) == accounts.org
    assert len(listed) == len(by_name), "an endpoint is listed twice"


def test_other_user_cannot_read_admin_hardware_quota(server, accounts):
    bob = make_api(server, accounts.writer_token)
    with pytest.raises(HfHubHTTPError) as excinfo:
        bob.list_inference_endpoints_hardware(namespace="admin")
    assert excinfo.value.response.status_code in (403, 404)
    # Their own namespace and their org's are fine.
    assert bob.list_inference_endpoints_hardware()
    assert bob.list_inference_endpoints_hardware(namespace=accounts.org)


def test_write_scoped_token_can_create_and_delete(server, cpu_hardware):
    scoped = make_api(server, server.create_token("admin", "write-endpoints"))
    name = unique_name("wscope")
    endpoint = create_endpoint(scoped, cpu_hardware, name, namespace="admin")
    assert endpoint.name == name
    assert name in [e.name for e in scoped.list_inference_endpoints(namespace="admin")]
    scoped.delete_inference_endpoint(name, namespace="admin")
    with pytest.raises(HfHubHTTPError) as excinfo:
        scoped.get_inference_endpoint(name, namespace="admin")
    assert excinfo.value.response.status_code == 404


def test_same_name_in_two_namespaces(server, accounts, cpu_hardware, cleanup, api):
    name = unique_name("same")
    bob = make_api(server, accounts.writer_token)
    mine = cleanup(create_endpoint(api, cpu_hardware, name))
    theirs = cleanup(create_endpoint(bob, cpu_hardware, name, repository="openai-community/gpt2-large"), client=bob)
    assert (mine.namespace, theirs.namespace) == ("admin", accounts.writer)
    assert api.get_inference_endpoint(name).repository == mine.repository
    assert bob.get_inference_endpoint(name).repository == "openai-community/gpt2-large"
