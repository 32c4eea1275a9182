"""Bundled models give real predictions; hub models explain why they cannot load."""

import threading
import time

import pytest
import torch

from xai_core import pipeline
from xai_core.infra.cache import BoundedCache
from xai_core.images import SAMPLES, load_sample
from xai_core.infra.locks import FairLock
from xai_core.models import (ModelUnavailableError, availability, get_model, get_spec,
                             loaded_model)
from xai_core.models.registry import MODEL_SPECS, UnknownModelError


@pytest.fixture(scope="module")
def cnn():
    return get_model("efficientnet-lite0")


def test_efficientnet_sees_a_cat_and_an_espresso(cnn):
    chelsea = [p.label for p in pipeline.predict(cnn, load_sample("chelsea"), topk=3)]
    assert any("cat" in label for label in chelsea)
    coffee = pipeline.predict(cnn, load_sample("coffee"), topk=1)[0]
    assert coffee.label == "espresso" and coffee.index == 967


def test_knn_classifies_every_gallery_image_as_its_own_label(dinov2):
    for sample in SAMPLES.values():
        top = pipeline.predict(dinov2, load_sample(sample.id), topk=1)[0]
        assert top.label == sample.label, sample.id


def test_knn_probabilities_sum_to_one_and_neighbours_are_sorted(dinov2):
    output = pipeline.model_output(dinov2, load_sample("rocket"))
    probabilities = dinov2.head.probabilities(output)
    assert float(probabilities.sum()) == pytest.approx(1.0, abs=1e-6)
    similarities = [n.similarity for n in dinov2.head.neighbours(output)]
    assert similarities == sorted(similarities, reverse=True)
    assert len(similarities) == 20


def test_adding_a_user_example_changes_only_a_new_bank(dinov2):
    from xai_core.models.heads import KnnHead
    from xai_core.models.knn import embed_images

    bank = dinov2.head.bank
    image = pipeline.prepare(dinov2, load_sample("collage")).model_image
    extended = bank.with_examples(embed_images(dinov2, [image]), "cat and cup", "upload:test")
    assert len(extended.labels) == len(bank.labels) + 1
    assert "cat and cup" in extended.class_names and "cat and cup" not in bank.class_names
    assert extended.fingerprint() != bank.fingerprint()
    top = pipeline.predict(dinov2, load_sample("collage"), topk=1, head=KnnHead(extended))[0]
    assert top.label == "cat and cup"
    with pytest.raises(ValueError):
        bank.with_examples(embed_images(dinov2, [image]), "  ", "upload:test")


def test_knn_class_score_is_differentiable_and_class_specific(dinov2):
    cat = dinov2.head.bank.class_index("cat")
    cup = dinov2.head.bank.class_index("coffee cup")
    cat_map = pipeline.vit_capture(dinov2, load_sample("collage"), target=cat)
    cup_map = pipeline.vit_capture(dinov2, load_sample("collage"), target=cup)
    assert cat_map.has_gradients and cat_map.score != cup_map.score
    assert not torch.allclose(cat_map.input_grad, cup_map.input_grad)


def test_hub_models_offline_say_why():
    for spec in MODEL_SPECS.values():
        if spec.source != "hub":
            continue
        status = availability(spec.id)
        assert not status.available and "HF_HUB_OFFLINE" in status.reason
        with pytest.raises(ModelUnavailableError, match="Hugging Face hub"):
            get_model(spec.id)


def test_availability_is_kept_a_while_and_follows_the_weights_folder(monkeypatch, tmp_path):
    from xai_core.models import loaders, settings

    looked = []
    real = loaders._look_up_availability
    monkeypatch.setattr(loaders, "_look_up_availability",
                        lambda spec: looked.append(spec.id) or real(spec))
    monkeypatch.setattr(loaders, "_availability", {})
    assert not availability("vit-b16").available
    assert not availability("vit-b16").available and looked == ["vit-b16"]  # kept
    # the weights put in a local folder: a new environment, looked up again at once
    (tmp_path / "vit-b16.safetensors").write_bytes(b"")
    monkeypatch.setenv(settings.WEIGHTS_ENV, str(tmp_path))
    status = availability("vit-b16")
    assert status.available and "local copy" in status.reason and len(looked) == 2
    # past the time it is kept: looked up again
    later = loaders._clock() + loaders.AVAILABILITY_TTL_S + 1
    monkeypatch.setattr(loaders, "_clock", lambda: later)
    availability("vit-b16")
    assert looked == ["vit-b16"] * 3


def test_random_weight_models_are_labelled():
    model = get_model("deit-s16-distilled", random_weights=True)
    assert model.random_weights and "RANDOM WEIGHTS" in model.label
    assert len(model.class_names) == 1000


def test_loaded_model_returns_the_one_instance_and_never_loads():
    model = get_model("deit-s16-distilled", random_weights=True)
    assert loaded_model("deit-s16-distilled", random_weights=True) is model
    assert loaded_model("deit-s16-distilled", True, torch.device("meta")) is None  # not there


def test_unknown_model_and_target_errors():
    with pytest.raises(UnknownModelError, match="Known models"):
        get_spec("vit-huge")
    cnn = get_model("efficientnet-lite0")
    with pytest.raises(pipeline.TargetError, match="out of range"):
        pipeline.resolve_target(cnn, 1000)
    with pytest.raises(pipeline.TargetError, match="No class"):
        pipeline.resolve_target(cnn, "zebra crossing sign")
    assert pipeline.resolve_target(cnn, "espresso") == 967
    assert pipeline.resolve_target(cnn, "tabby cat") == 281


def test_fair_lock_serves_waiters_in_arrival_order():
    lock, order = FairLock(), []
    lock.acquire()
    threads = []
    for i in range(6):
        thread = threading.Thread(target=lambda i=i: (lock.acquire(), order.append(i),
                                                      lock.release()))
        thread.start()
        threads.append(thread)
        time.sleep(0.05)  # make the arrival order certain
    lock.release()
    for thread in threads:
        thread.join(5)
    assert order == list(range(6))


def test_bounded_cache_respects_entries_and_bytes():
    cache = BoundedCache(max_entries=3, max_bytes=10_000)
    for i in range(5):
        cache.get_or_compute(i, lambda: torch.zeros(100))  # 400 bytes each
    assert len(cache) == 3
    cache.get_or_compute("big", lambda: torch.zeros(2000))  # 8000 bytes
    assert cache.total_bytes() <= 10_000
    calls = []
    assert cache.get_or_compute("big", lambda: calls.append(1)) is not None and not calls


def test_a_cache_is_emptied_with_its_companions_and_bounded_apart():
    inputs = BoundedCache(max_entries=8, max_bytes=10_000)
    captures = BoundedCache(max_entries=1, max_bytes=10_000, companions=(inputs,))
    inputs.put("prepared", "x")
    captures.put("capture 1", "a")
    captures.put("capture 2", "b")  # the capture cache's one entry: only its own evicted
    assert inputs.peek("prepared") == "x" and captures.peek("capture 1") is None
    captures.clear()
    assert len(captures) == 0 and len(inputs) == 0
    assert pipeline.INPUT_CACHE in pipeline.CAPTURE_CACHE.companions


def test_bounded_cache_put_replaces_as_newest_and_peek_never_computes():
    cache = BoundedCache(max_entries=2, max_bytes=10_000)
    cache.put("a", "first")
    cache.put("b", "second")
    cache.put("a", "again")  # replaced, and now the newest: "b" is the oldest
    cache.put("c", "third")
    assert cache.peek("a") == "again" and cache.peek("c") == "third"
    assert cache.peek("b") is None and len(cache) == 2
    cache.put("huge", torch.zeros(5000))  # 20,000 bytes: over the bound, not kept
    assert cache.peek("huge") is None and cache.total_bytes() <= 10_000
