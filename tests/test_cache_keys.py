"""Cache keys: one helper (`cache.cache_key`) keys every cache, and a session's own k-NN head
never receives a result cached for another head."""

import ast
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from single_thread import one_torch_thread
from test_concurrency import images, tiny_vit

from xai_core.studies import method_runs
from xai_core import pipeline
from xai_core.infra.cache import cache_key
from xai_core.methods import METHODS, distance, rollout
from xai_core.methods.base import RESULT_CACHE
from xai_core.metrics.faithfulness import CURVE_CACHE, faithfulness
from xai_core.models.heads import KnnHead
from xai_core.models.knn import embed_images

CORE = Path(__file__).resolve().parents[1] / "xai_core"


def fake_model(model_id="m", random_weights=False):
    return SimpleNamespace(spec=SimpleNamespace(id=model_id), random_weights=random_weights)


def fake_head(fingerprint):
    return SimpleNamespace(fingerprint=lambda: fingerprint)


def test_key_names_model_weights_head_image_and_details():
    base = cache_key("vit", fake_model(), 3, image="abc", head=fake_head("knn-1"))
    assert base == ("vit", "m", False, "knn-1", "abc", 3)
    changed = [cache_key("cnn", fake_model(), 3, image="abc", head=fake_head("knn-1")),
               cache_key("vit", fake_model("n"), 3, image="abc", head=fake_head("knn-1")),
               cache_key("vit", fake_model(random_weights=True), 3, image="abc",
                         head=fake_head("knn-1")),
               cache_key("vit", fake_model(), 3, image="abc", head=fake_head("knn-2")),
               cache_key("vit", fake_model(), 3, image="abd", head=fake_head("knn-1")),
               cache_key("vit", fake_model(), 4, image="abc", head=fake_head("knn-1"))]
    assert len({base, *changed}) == 7


def cache_calls(tree):
    """(function, key argument) of every `<cache>.get_or_compute(key, ...)` call."""
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for call in ast.walk(function):
                if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                        and call.func.attr == "get_or_compute"):
                    yield function, call.args[0]


def key_builders(tree) -> set[str]:
    """Names of the module's functions whose every return is a `cache_key(...)` call."""
    names = {"cache_key"}
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef):
            returns = [node.value for node in ast.walk(function) if isinstance(node, ast.Return)]
            if returns and all(isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                               and value.func.id == "cache_key" for value in returns):
                names.add(function.name)
    return names


def built_by_cache_key(function, key, builders=frozenset({"cache_key"})) -> bool:
    def is_helper(node):
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in builders)
    if is_helper(key):
        return True
    assignments = [node.value for node in ast.walk(function) if isinstance(node, ast.Assign)
                   and any(isinstance(t, ast.Name) and isinstance(key, ast.Name)
                           and t.id == key.id for t in node.targets)]
    return bool(assignments) and all(is_helper(value) for value in assignments)


def test_every_cache_in_the_core_is_keyed_by_the_helper():
    calls, hand_typed = 0, []
    for path in sorted(CORE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        builders = key_builders(tree)
        for function, key in cache_calls(tree):
            calls += 1
            if not built_by_cache_key(function, key, builders):
                hand_typed.append(f"{path.relative_to(CORE)}:{function.name}")
    assert calls >= 15 and hand_typed == []


@pytest.fixture(scope="module")
def knn_model():
    with one_torch_thread():
        yield tiny_vit("test-tiny-vit-knn", knn=True)


def clear_caches():
    for cache in (pipeline.CAPTURE_CACHE, rollout.ROLLOUT_CACHE, distance.DISTANCE_CACHE,
                  RESULT_CACHE, CURVE_CACHE):
        cache.clear()


def test_a_session_head_never_gets_another_heads_cached_result(knn_model):
    model, image = knn_model, images(1)[0]
    target = 0
    # the session adds this very image to class 0: its class score (and every gradient) moves
    features = embed_images(model, [pipeline.prepare(model, image).model_image])
    session = KnnHead(model.head.bank.with_examples(features, model.class_names[target],
                                                    "upload:test"))
    assert session.fingerprint() != model.head.fingerprint()
    names = [name for name, info in sorted(METHODS.items())
             if info.family == "vit" and info.needs_target]
    assert {"daam", "gae", "vit-gradcam"} <= set(names)

    def session_results():
        runs = {name: method_runs.run_method(model, image, name, target, head=session)
                for name in names}
        capture = pipeline.vit_capture(model, image, target, session)
        curve = faithfulness(model, image, runs["gae"].map, "deletion", target, head=session,
                             steps=4)
        return runs, capture, curve

    clear_caches()
    fresh_runs, fresh_capture, fresh_curve = session_results()
    fresh_grad = fresh_capture.input_grad.clone()
    clear_caches()
    default_grad = pipeline.vit_capture(model, image, target).input_grad.clone()
    for name in names:  # the default head's results fill the caches first
        method_runs.run_method(model, image, name, target)
    faithfulness(model, image, fresh_runs["gae"].map, "deletion", target, steps=4)
    runs, capture, curve = session_results()

    assert not np.allclose(default_grad.numpy(), fresh_grad.numpy())  # the head matters here
    np.testing.assert_array_equal(capture.input_grad.numpy(), fresh_grad.numpy())
    for name in names:
        assert runs[name].error is None, (name, runs[name].error)
        np.testing.assert_array_equal(runs[name].map, fresh_runs[name].map, err_msg=name)
    np.testing.assert_array_equal(curve.scores, fresh_curve.scores)
