"""`GET /api/v1/catalog/list` through `HfApi.list_inference_catalog`, with every filter.

No model is hard-coded: expectations are computed from the unfiltered list the server returns.
"""

from collections import Counter
from datetime import timedelta

import pytest
from huggingface_hub import HfApi, constants
from huggingface_hub.errors import BadRequestError
from huggingface_hub.utils import get_session

ACCELERATORS = ["cpu", "gpu", "neuron"]
ENGINE_FILTERS = ["llamacpp", "tei", "vllm", "sglang"]
# The list's `engine` enum has no vllmNeuron / vllmOmni: `vllm` selects the whole vLLM family, or those recipes
# could never be found by engine.
ENGINE_FILTER_MATCHES = {
    "llamacpp": {"llamacpp"},
    "tei": {"tei"},
    "vllm": {"vllm", "vllmNeuron", "vllmOmni"},
    "sglang": {"sglang"},
}
ENGINE_TYPES = {"custom", "llamacpp", "sglang", "tei", "vllm", "vllmNeuron", "vllmOmni"}
LIST_TASKS = {
    "custom", "any-to-any", "audio-classification", "automatic-speech-recognition", "feature-extraction",
    "fill-mask", "image-classification", "image-segmentation", "image-text-to-text", "object-detection",
    "question-answering", "sentence-similarity", "summarization", "table-question-answering",
    "text-classification", "text-generation", "text-ranking", "text-to-image", "token-classification",
    "translation", "zero-shot-classification",
}  # fmt: skip
ITEM_KEYS = {"modelName", "createdAt", "authorName", "license", "repoId", "task", "recipes"}
RECIPE_REQUIRED = {"accelerator", "engineType", "publicId"}
RECIPE_KEYS = RECIPE_REQUIRED | {"ggufFile", "revision"}


def ids(models) -> set[str]:
    return {m.repo_id for m in models}


def assert_narrowed(all_models, returned, matches, what: str) -> None:
    """`returned` is exactly the models of `all_models` for which `matches` holds, and that is a strict subset."""
    expected = {m.repo_id for m in all_models if matches(m)}
    for model in returned:
        assert matches(model), f"{what}: {model.repo_id} does not match the filter"
    assert ids(returned) == expected, f"{what}: missing {expected - ids(returned)}, extra {ids(returned) - expected}"
    assert len(returned) == len(expected), f"{what}: duplicates in the filtered list"
    assert ids(all_models) - ids(returned), f"{what}: the filter excluded nothing, so it narrowed nothing"


def test_catalog_is_large_and_well_formed(catalog):
    assert len(catalog) >= 40
    assert len(ids(catalog)) == len(catalog), "repo ids are not unique"
    public_ids = [r.id for m in catalog for r in m.recipes]
    assert len(public_ids) == len(set(public_ids)), "recipe publicIds are not unique"
    for model in catalog:
        assert model.recipes, f"{model.repo_id} has no recipe"
        assert model.repo_id == f"{model.author}/{model.name}"
        assert model.task in LIST_TASKS, model.task
        assert model.license
        assert model.created_at.utcoffset() == timedelta(0)
        for recipe in model.recipes:
            assert recipe.id
            assert recipe.accelerator in ACCELERATORS, recipe.accelerator
            assert recipe.engine in ENGINE_TYPES, recipe.engine
            if recipe.engine == "llamacpp":
                assert recipe.gguf_file and recipe.gguf_file.endswith(".gguf"), (model.repo_id, recipe.gguf_file)


def test_catalog_raw_shape_has_no_extra_properties(server):
    # The spec forbids additional properties on items and recipes (internal data such as memory needs stays hidden).
    response = get_session().get(f"{constants.INFERENCE_CATALOG_ENDPOINT}/list")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"items"}
    for item in body["items"]:
        assert set(item) == ITEM_KEYS, (item.get("repoId"), set(item) ^ ITEM_KEYS)
        assert item["createdAt"].endswith("Z"), item["createdAt"]
        for recipe in item["recipes"]:
            assert RECIPE_REQUIRED <= set(recipe) <= RECIPE_KEYS, (item["repoId"], set(recipe))


def test_catalog_list_needs_no_token(server, catalog):
    anonymous = HfApi(endpoint=server.url, token=False)
    assert ids(anonymous.list_inference_catalog()) == ids(catalog)


def test_filter_task(api, catalog):
    tasks = sorted({m.task for m in catalog})
    assert len(tasks) > 1
    for task in tasks:
        returned = api.list_inference_catalog(task=task)
        assert_narrowed(catalog, returned, lambda m, t=task: m.task == t, f"task={task}")
    # A valid task that no model has gives an empty list, not an error.
    for task in sorted(LIST_TASKS - set(tasks)):
        assert api.list_inference_catalog(task=task) == []


@pytest.mark.parametrize("accelerator", ACCELERATORS)
def test_filter_accelerator(api, catalog, accelerator):
    returned = api.list_inference_catalog(accelerator=accelerator)
    assert_narrowed(
        catalog, returned, lambda m: any(r.accelerator == accelerator for r in m.recipes), f"accelerator={accelerator}"
    )


@pytest.mark.parametrize("engine", ENGINE_FILTERS)
def test_filter_engine(api, catalog, engine):
    engines = ENGINE_FILTER_MATCHES[engine]
    returned = api.list_inference_catalog(engine=engine)
    assert_narrowed(catalog, returned, lambda m: any(r.engine in engines for r in m.recipes), f"engine={engine}")


def test_filter_license(api, catalog):
    licenses = sorted({m.license for m in catalog})
    assert len(licenses) > 1
    for license_ in licenses:
        returned = api.list_inference_catalog(license=license_)
        assert_narrowed(catalog, returned, lambda m, lic=license_: m.license == lic, f"license={license_}")


def _search_term(catalog) -> tuple[str, str]:
    """A model name that is specific (matches less than half the catalog), and its repo id."""
    for model in sorted(catalog, key=lambda m: m.repo_id):
        hits = [m for m in catalog if model.name.lower() in m.repo_id.lower()]
        if len(hits) < len(catalog) / 2:
            return model.name, model.repo_id
    pytest.fail("no model name specific enough to search for")


def test_filter_search_is_case_insensitive(api, catalog):
    name, repo_id = _search_term(catalog)
    term = name.upper()
    assert term != name, "the chosen name has no letters to change case"
    returned = api.list_inference_catalog(search=term)
    assert repo_id in ids(returned)
    assert_narrowed(catalog, returned, lambda m: term.lower() in m.repo_id.lower(), f"search={term}")


def test_filter_search_by_author(api, catalog):
    authors = Counter(m.author for m in catalog)
    author = sorted(authors, key=lambda a: (-authors[a], a))[0]
    returned = api.list_inference_catalog(search=author.swapcase())
    assert {m.repo_id for m in catalog if m.author == author} <= ids(returned)
    for model in returned:
        assert author.lower() in model.repo_id.lower()


def test_filter_search_without_match(api):
    assert api.list_inference_catalog(search="zz-no-such-model-zz") == []


def test_filter_limit(api, catalog):
    all_ids = [m.repo_id for m in catalog]
    for limit in (1, 3):
        returned = api.list_inference_catalog(limit=limit)
        assert [m.repo_id for m in returned] == all_ids[:limit], f"limit={limit}"
    assert [m.repo_id for m in api.list_inference_catalog(limit=len(catalog) + 100)] == all_ids
    # The spec's upper bound (2^53 - 1) is accepted.
    assert [m.repo_id for m in api.list_inference_catalog(limit=9007199254740991)] == all_ids


def test_filters_combine(api, catalog):
    # Pick the most common task, then an accelerator that splits it, so the combination narrows both ways.
    tasks = Counter(m.task for m in catalog)
    for task in sorted(tasks, key=lambda t: (-tasks[t], t)):
        for accelerator in ACCELERATORS:

            def matches(m, t=task, a=accelerator):
                return m.task == t and any(r.accelerator == a for r in m.recipes)

            expected = {m.repo_id for m in catalog if matches(m)}
            by_task = {m.repo_id for m in catalog if m.task == task}
            if expected and expected != by_task:
                returned = api.list_inference_catalog(task=task, accelerator=accelerator)
                assert_narrowed(catalog, returned, matches, f"task={task}&accelerator={accelerator}")
                limited = api.list_inference_catalog(task=task, accelerator=accelerator, limit=1)
                assert len(limited) == 1 and matches(limited[0])
                return
    pytest.fail("no task/accelerator pair in the built-in catalog narrows the task alone: nothing was checked")


@pytest.mark.parametrize(
    "params",
    [
        {"task": "not-a-task"},
        {"task": "sentence-embeddings"},  # a model task, but not a catalog list task
        {"accelerator": "tpu"},
        {"engine": "tgi"},
        {"limit": 0},
        {"limit": -1},
        {"limit": 9007199254740992},
        {"limit": "abc"},
    ],
    ids=lambda p: "&".join(f"{k}={v}" for k, v in p.items()),
)
def test_invalid_filter_is_bad_request(api, params):
    with pytest.raises(BadRequestError) as excinfo:
        api.list_inference_catalog(**params)
    response = excinfo.value.response
    assert response.status_code == 400
    body = response.json()
    assert isinstance(body["error"], str) and body["error"]
    assert "details" in body
    assert body["error"] in str(excinfo.value)
    assert response.headers.get("x-request-id")
