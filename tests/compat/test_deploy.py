"""Catalog deployment (`POST /api/v1/catalog/model/{author}/{model}/deploy` and `/recipe/{publicId}/deploy`) through
`HfApi.create_inference_endpoint_from_catalog`.

Models are picked from the unfiltered catalog by their properties, never by name, except for the lead's guarantee that
items whose repoId contains "DeepSeek-V3" or "405B" are too large for any compute (409).
"""

import re

import pytest
from conftest import unique_name
from huggingface_hub import constants
from huggingface_hub.errors import BadRequestError, HfHubHTTPError
from huggingface_hub.utils import get_session

TOO_LARGE_MARKERS = ("DeepSeek-V3", "405B")
NAME_RE = re.compile(r"[a-z0-9-]{1,32}")
# The serving container each engine type runs (spec 2.8.1 image keys).
IMAGE_KEY_BY_ENGINE = {
    "tei": "tei",
    "llamacpp": "llamacpp",
    "vllm": "vLLM",
    "sglang": "sGLang",
    "vllmNeuron": "vLLMNeuron",
    "vllmOmni": "vLLMOmni",
    "custom": "custom",
}


def too_large(model) -> bool:
    return any(marker in model.repo_id for marker in TOO_LARGE_MARKERS)


def small_models(catalog):
    """Models that surely fit: not the guaranteed-too-large ones, and with a CPU recipe (so they are small)."""
    return sorted(
        (m for m in catalog if not too_large(m) and any(r.accelerator == "cpu" for r in m.recipes)),
        key=lambda m: m.repo_id,
    )


def pick_default_model(catalog):
    """A small model to deploy by repo id: prefer an embeddings model (tei), the cheapest kind."""
    small = small_models(catalog)
    for model in small:
        if any(r.engine == "tei" for r in model.recipes):
            return model
    if small:
        return small[0]
    pytest.fail("the catalog has no model with a cpu recipe to deploy")


def assert_catalog_endpoint(endpoint, repo_id: str, namespace: str = "admin") -> None:
    assert endpoint.repository == repo_id
    assert endpoint.status == "pending"
    assert endpoint.namespace == namespace
    assert endpoint.raw["model"]["fromCatalog"] is True
    assert NAME_RE.fullmatch(endpoint.name), endpoint.name
    assert endpoint.raw["status"]["createdAt"].endswith("Z")
    assert endpoint.raw["status"]["updatedAt"].endswith("Z")
    image = endpoint.raw["model"]["image"]
    assert isinstance(image, dict) and len(image) == 1, image


def test_deploy_by_repo_id(api, catalog, cleanup):
    model = pick_default_model(catalog)
    endpoint = cleanup(api.create_inference_endpoint_from_catalog(repo_id=model.repo_id))
    assert_catalog_endpoint(endpoint, model.repo_id)
    assert endpoint.raw["compute"]["accelerator"] in {r.accelerator for r in model.recipes}
    # The endpoint really exists: it can be read back and is listed.
    fetched = api.get_inference_endpoint(endpoint.name)
    assert fetched.repository == model.repo_id
    assert fetched.raw["model"]["fromCatalog"] is True
    assert endpoint.name in [e.name for e in api.list_inference_endpoints(namespace="admin")]


def test_deploy_by_recipe_id(api, catalog, cleanup):
    small = small_models(catalog)
    recipes = [(m, r) for m in small for r in m.recipes if r.engine == "tei"] or [
        (m, r) for m in small for r in m.recipes if r.accelerator == "cpu"
    ]
    model, recipe = recipes[0]
    endpoint = cleanup(api.create_inference_endpoint_from_catalog(recipe_id=recipe.id))
    assert_catalog_endpoint(endpoint, model.repo_id)
    assert endpoint.raw["compute"]["accelerator"] == recipe.accelerator
    assert list(endpoint.raw["model"]["image"]) == [IMAGE_KEY_BY_ENGINE[recipe.engine]]
    if recipe.revision:
        assert endpoint.raw["model"]["revision"] == recipe.revision


def test_deploy_every_engine_by_recipe(api, catalog, cleanup):
    """One recipe of each engine type deploys with the matching serving container and accelerator."""
    seen = {}
    # Small models first (those with a cpu recipe), so the recipe picked for each engine is the likeliest to fit.
    ordered = sorted(
        (m for m in catalog if not too_large(m)),
        key=lambda m: (not any(r.accelerator == "cpu" for r in m.recipes), m.repo_id),
    )
    for model in ordered:
        for recipe in model.recipes:
            seen.setdefault(recipe.engine, (model, recipe))
    assert seen
    for engine, (model, recipe) in sorted(seen.items()):
        endpoint = cleanup(api.create_inference_endpoint_from_catalog(recipe_id=recipe.id))
        assert_catalog_endpoint(endpoint, model.repo_id)
        assert endpoint.raw["compute"]["accelerator"] == recipe.accelerator, engine
        assert list(endpoint.raw["model"]["image"]) == [IMAGE_KEY_BY_ENGINE[engine]], engine
        if engine == "llamacpp":
            assert endpoint.raw["model"]["image"]["llamacpp"]["modelPath"].endswith(recipe.gguf_file)


def test_deploy_with_name_and_duplicate_is_409(api, catalog, cleanup):
    model = pick_default_model(catalog)
    name = unique_name("cat")
    endpoint = cleanup(api.create_inference_endpoint_from_catalog(repo_id=model.repo_id, name=name))
    assert endpoint.name == name
    assert_catalog_endpoint(endpoint, model.repo_id)
    assert api.get_inference_endpoint(name).repository == model.repo_id

    with pytest.raises(HfHubHTTPError) as excinfo:
        api.create_inference_endpoint_from_catalog(repo_id=model.repo_id, name=name)
    assert excinfo.value.response.status_code == 409
    assert isinstance(excinfo.value.response.json()["error"], str)

    with pytest.raises(HfHubHTTPError) as excinfo:
        api.create_inference_endpoint_from_catalog(recipe_id=model.recipes[0].id, name=name)
    assert excinfo.value.response.status_code == 409


def test_deploy_with_accelerator_chooses_recipe(api, catalog, cleanup):
    candidates = [m for m in small_models(catalog) if len({r.accelerator for r in m.recipes}) >= 2]
    assert candidates, "no small model of the built-in catalog has recipes on two accelerators: nothing to check"
    model = candidates[0]
    for accelerator in sorted({r.accelerator for r in model.recipes}):
        endpoint = cleanup(api.create_inference_endpoint_from_catalog(repo_id=model.repo_id, accelerator=accelerator))
        assert_catalog_endpoint(endpoint, model.repo_id)
        assert endpoint.raw["compute"]["accelerator"] == accelerator
        engines = {IMAGE_KEY_BY_ENGINE[r.engine] for r in model.recipes if r.accelerator == accelerator}
        assert list(endpoint.raw["model"]["image"])[0] in engines


def test_deploy_with_gguf_file_chooses_recipe(api, catalog, cleanup):
    candidates = [
        m
        for m in sorted(catalog, key=lambda m: m.repo_id)
        if not too_large(m) and len({r.gguf_file for r in m.recipes if r.engine == "llamacpp" and r.gguf_file}) >= 2
    ]
    assert candidates, "no model of the built-in catalog has several GGUF recipes: nothing to check"
    model = candidates[0]
    ggufs = [r for r in model.recipes if r.engine == "llamacpp" and r.gguf_file]
    # Not the first recipe, so a server that ignores `ggufFile` and deploys its default is caught.
    recipe = next(r for r in ggufs if r.gguf_file != ggufs[0].gguf_file)

    endpoint = cleanup(
        api.create_inference_endpoint_from_catalog(
            repo_id=model.repo_id, gguf_file=recipe.gguf_file, accelerator=recipe.accelerator
        )
    )
    assert_catalog_endpoint(endpoint, model.repo_id)
    assert endpoint.raw["compute"]["accelerator"] == recipe.accelerator
    assert endpoint.raw["model"]["image"]["llamacpp"]["modelPath"].endswith(recipe.gguf_file)

    # `gguf_file` alone is enough to select it.
    endpoint = cleanup(api.create_inference_endpoint_from_catalog(repo_id=model.repo_id, gguf_file=recipe.gguf_file))
    assert endpoint.raw["model"]["image"]["llamacpp"]["modelPath"].endswith(recipe.gguf_file)
    assert endpoint.raw["compute"]["accelerator"] in {r.accelerator for r in ggufs if r.gguf_file == recipe.gguf_file}


def test_deploy_unknown_gguf_file_is_rejected(api, catalog):
    model = next((m for m in catalog if any(r.engine == "llamacpp" for r in m.recipes)), None)
    assert model is not None, "no llamacpp model in the built-in catalog: nothing to check"
    name = unique_name("nogguf")
    with pytest.raises(HfHubHTTPError) as excinfo:
        api.create_inference_endpoint_from_catalog(repo_id=model.repo_id, gguf_file="no-such-file.gguf", name=name)
    assert excinfo.value.response.status_code in (400, 404)
    assert name not in [e.name for e in api.list_inference_endpoints(namespace="admin")]


def test_deploy_unknown_repo_is_404(api):
    with pytest.raises(HfHubHTTPError) as excinfo:
        api.create_inference_endpoint_from_catalog(repo_id="no-such-author/no-such-model-xyz")
    assert excinfo.value.response.status_code == 404
    assert isinstance(excinfo.value.response.json()["error"], str)


def test_deploy_unknown_recipe_is_404(api):
    with pytest.raises(HfHubHTTPError) as excinfo:
        api.create_inference_endpoint_from_catalog(recipe_id="no-such-recipe-xyz")
    assert excinfo.value.response.status_code == 404


def test_deploy_too_large_model_is_409(api, catalog):
    huge = sorted((m for m in catalog if too_large(m)), key=lambda m: m.repo_id)
    assert huge, "no item of the built-in catalog whose repoId contains 'DeepSeek-V3' or '405B': nothing to check"
    model = huge[0]
    before = {e.name for e in api.list_inference_endpoints(namespace="admin")}
    with pytest.raises(HfHubHTTPError) as excinfo:
        api.create_inference_endpoint_from_catalog(repo_id=model.repo_id)
    assert excinfo.value.response.status_code == 409
    assert isinstance(excinfo.value.response.json()["error"], str)
    for recipe in model.recipes:
        with pytest.raises(HfHubHTTPError) as excinfo:
            api.create_inference_endpoint_from_catalog(recipe_id=recipe.id)
        assert excinfo.value.response.status_code == 409, recipe.id
    # Nothing was created by the refused deployments.
    assert {e.name for e in api.list_inference_endpoints(namespace="admin")} == before


def test_deploy_invalid_name_is_bad_request(api, catalog):
    model = pick_default_model(catalog)
    with pytest.raises(BadRequestError) as excinfo:
        api.create_inference_endpoint_from_catalog(repo_id=model.repo_id, name="Bad_Name")
    body = excinfo.value.response.json()
    assert excinfo.value.response.status_code == 400
    assert isinstance(body["error"], str) and body["error"] in str(excinfo.value)
    assert isinstance(body["issues"], list) and body["issues"]


def test_deploy_body_with_unknown_property_is_bad_request(server, catalog):
    # The client never sends it, but the spec's "no additional properties" is what keeps future fields safe.
    model = pick_default_model(catalog)
    response = get_session().post(
        f"{constants.INFERENCE_CATALOG_ENDPOINT}/model/{model.repo_id}/deploy",
        headers={"Authorization": f"Bearer {server.admin_token}"},
        json={"namespace": "admin", "bogus": 1},
    )
    assert response.status_code == 400
    body = response.json()
    assert isinstance(body["error"], str)
    assert isinstance(body["issues"], list) and body["issues"]


def test_deploy_without_token_is_401(server, catalog):
    model = pick_default_model(catalog)
    response = get_session().post(
        f"{constants.INFERENCE_CATALOG_ENDPOINT}/model/{model.repo_id}/deploy", json={"namespace": "admin"}
    )
    assert response.status_code == 401
    assert isinstance(response.json()["error"], str)
    assert response.headers.get("x-request-id")


def test_deploy_twice_without_name_gets_two_names(api, catalog, cleanup):
    model = pick_default_model(catalog)
    first = cleanup(api.create_inference_endpoint_from_catalog(repo_id=model.repo_id))
    second = cleanup(api.create_inference_endpoint_from_catalog(repo_id=model.repo_id))
    assert first.name != second.name
    assert {first.name, second.name} <= {e.name for e in api.list_inference_endpoints(namespace="admin")}


def test_update_parallelism_round_trips_the_catalog_image(api, catalog, cleanup):
    """`update_inference_endpoint(tensor_parallel_size=…)` GETs the endpoint and PUTs its image back, as returned."""
    recipes = [
        (m, r)
        for m in sorted(catalog, key=lambda m: m.repo_id)
        if not too_large(m)
        for r in m.recipes
        if r.engine == "vllm"
    ]
    assert recipes, "no vllm recipe in the built-in catalog: nothing to check"
    model, recipe = recipes[0]
    endpoint = cleanup(api.create_inference_endpoint_from_catalog(recipe_id=recipe.id))
    before = endpoint.raw["model"]["image"]["vLLM"]
    updated = api.update_inference_endpoint(endpoint.name, tensor_parallel_size=2, data_parallel_size=1)
    after = updated.raw["model"]["image"]["vLLM"]
    assert after["tensorParallelSize"] == 2
    assert after["dataParallelSize"] == 1
    assert after["url"] == before["url"]
    assert updated.repository == model.repo_id
    assert updated.raw["model"]["fromCatalog"] is True
