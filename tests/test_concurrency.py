"""Shared-server safety: many sessions computing at once get exactly the serial answers,
and two app sessions never see each other's state.

The threaded part drives the app's own road (pipeline caches, METHODS registry, the
metrics, the models' fair locks) with tiny random-weight timm models, so 160 requests
really run concurrent model calls on two busy CPU cores: a small supervised ViT, a
small self-supervised ViT with a k-NN head (its own gallery memory bank), and a small
CNN. Every method registered in xai_core/methods for the "vit" and "cnn" families
takes part, so methods added later are covered without editing this file.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import pkgutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from apptest_helpers import chart_specs
from PIL import Image
from streamlit.testing.v1 import AppTest

from single_thread import one_torch_thread
from tiny_models import images, tiny_cnn, tiny_vit
from xai_core import pipeline
from xai_core.methods import METHODS, distance, rollout
from xai_core.methods.base import RESULT_CACHE
from xai_core.metrics.faithfulness import CURVE_CACHE, faithfulness

import xai_core.methods  # noqa: E402

# Every method module present takes part, also one whose import line in
# xai_core/methods/__init__.py has not landed yet (importing registers it).
for _module in pkgutil.iter_modules(xai_core.methods.__path__):
    importlib.import_module(f"xai_core.methods.{_module.name}")

ENTRY = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")
THREADS, REQUESTS_PER_THREAD = 16, 10


# --- jobs: (kind, model, image index, method, target) -> a digest of every number -------------

def digest(*arrays) -> str:
    hasher = hashlib.sha256()
    for array in arrays:
        array = np.ascontiguousarray(np.asarray(array, dtype=np.float64))
        hasher.update(str(array.shape).encode())
        hasher.update(array.tobytes())
    return hasher.hexdigest()


def result_digest(result) -> str:
    return digest(result.map, *(result.arrays[k] for k in sorted(result.arrays)
                                if np.asarray(result.arrays[k]).dtype.kind in "fiub"))


class Jobs:
    def __init__(self):
        self.vits = [tiny_vit("test-tiny-vit", knn=False), tiny_vit("test-tiny-vit-knn", knn=True)]
        self.cnn = tiny_cnn()
        self.images = images()
        self.list = []
        for image_index in range(len(self.images)):
            for model in self.vits:
                self.list.append(("capture", model, image_index, None))
                self.list.append(("metrics", model, image_index, "rollout"))
                self.list += [("method", model, image_index, name)
                              for name, info in sorted(METHODS.items()) if info.fits("vit")]
            self.list.append(("metrics", self.cnn, image_index, "gradcam"))
            self.list += [("method", self.cnn, image_index, name)
                          for name, info in sorted(METHODS.items()) if info.fits("cnn")]

    def target(self, model, image) -> int:
        # a fixed, non-top class for one model so both code paths (given / top-1) run
        if model.spec.id == "test-tiny-vit":
            return 3
        return pipeline.resolve_target(model, None, image)

    def run(self, job) -> str:
        kind, model, image_index, name = job
        image = self.images[image_index]
        target = self.target(model, image)
        if kind == "capture":
            captured = pipeline.vit_capture(model, image, target)
            return digest(captured.stacked("attn"), captured.stacked("context", grads=True),
                          captured.input_grad, [float(captured.score)])
        result = METHODS[name](model, image, target=target)
        if kind == "method":
            return result_digest(result)
        curve = faithfulness(model, image, result.map, "deletion", target, "zeros", steps=4)
        return digest(curve.scores, curve.fractions, [curve.auc])


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread_per_call():
    """Concurrency comes from the 16 request threads, not from intra-op threads."""
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def jobs(one_torch_thread_per_call):
    return Jobs()


@pytest.fixture
def capture_cache_limit():
    """Set the entry limit of the shared capture cache and of the caches of method results
    and their intermediates for one test, then restore them."""
    caches = (pipeline.CAPTURE_CACHE, RESULT_CACHE, rollout.ROLLOUT_CACHE,
              distance.DISTANCE_CACHE, CURVE_CACHE)
    saved = [cache.max_entries for cache in caches]

    def set_limit(entries: int):
        for cache in caches:
            cache.max_entries = entries
            cache.clear()

    yield set_limit
    for cache, entries in zip(caches, saved):
        cache.max_entries = entries
        cache.clear()


def run_concurrently(jobs: Jobs, schedule: list) -> tuple[list, list]:
    errors, results = [], []  # results: (job index, digest)
    lock = threading.Lock()
    start = threading.Barrier(THREADS)

    def worker(thread_jobs):
        start.wait()  # every thread starts together
        for index in thread_jobs:
            job = jobs.list[index]
            try:
                value = jobs.run(job)
            except Exception as error:  # noqa: BLE001  (every error is a failure)
                with lock:
                    errors.append(f"{job[0]} {job[1].spec.id} {job[3]}: {error!r}")
                continue
            with lock:
                results.append((index, value))

    chunks = [schedule[i::THREADS] for i in range(THREADS)]
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        list(pool.map(worker, chunks))
    return errors, results


def schedule_of(jobs: Jobs, seed: int) -> list:
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(jobs.list), THREADS * REQUESTS_PER_THREAD)
    return [int(i) for i in picks]


def test_job_mix_covers_every_kind(jobs):
    kinds = {(job[0], job[3]) for job in jobs.list}
    names = {name for _, name in kinds}
    assert {"rollout", "daam", "gradcam"} <= names
    assert ("capture", None) in kinds and ("metrics", "rollout") in kinds
    assert {name for name, info in METHODS.items() if info.family in ("vit", "cnn", "any")} <= names


@pytest.mark.parametrize("cache_entries", [0, 6], ids=["cache-bypassed", "cache-thrashing"])
def test_sixteen_threads_match_the_serial_results(jobs, capture_cache_limit, cache_entries):
    """0 entries: nothing is kept, every request runs its own model calls; 6 entries: far
    fewer than the distinct questions, so hits, misses and evictions race each other."""
    capture_cache_limit(0)
    serial = [jobs.run(job) for job in jobs.list]  # computed alone, one at a time
    assert len(set(serial)) > len(serial) // 2  # distinct questions, distinct answers

    capture_cache_limit(cache_entries)
    schedule = schedule_of(jobs, seed=cache_entries)
    errors, results = run_concurrently(jobs, schedule)
    assert errors == []
    assert len(results) == THREADS * REQUESTS_PER_THREAD
    mismatched = [jobs.list[i][:1] + (jobs.list[i][1].spec.id,) + jobs.list[i][2:]
                  for i, value in results if value != serial[i]]
    assert mismatched == []
    assert len(pipeline.CAPTURE_CACHE) <= cache_entries
    # the models' fair locks were released by every thread
    for model in (*jobs.vits, jobs.cnn):
        assert not model.lock._held and not model.lock._queue


# --- two app sessions ---------------------------------------------------------------------------

def png(color, size=(96, 64)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="PNG")
    return buffer.getvalue()


def start(**state) -> AppTest:
    app = AppTest.from_file(ENTRY, default_timeout=240)
    for key, value in state.items():
        app.session_state[key] = value
    return app.run()


def knn_top_labels(app) -> list[str]:
    import json

    for spec in chart_specs(app):
        if "k-NN" in json.dumps(spec.get("layout", {}).get("title", "")):
            return list(spec["data"][0]["y"])
    raise AssertionError("no k-NN prediction chart on the home page")


def test_two_app_sessions_keep_their_own_state():
    cat = start(image_choice="chelsea", presentation=True)
    upload = start(image_choice="upload", presentation=False)
    upload.sidebar.get("file_uploader")[0].set_value(("mine.png", png((20, 90, 200)),
                                                      "image/png")).run()
    assert not cat.exception and not upload.exception

    # teach session A's k-NN bank a new class using the cat image
    cat.text_input(key="knn_new_label").input("my-cat-class")
    cat.button(key="knn_add").click().run()
    assert not cat.exception
    cat.run()
    assert "my-cat-class" in knn_top_labels(cat)  # its own example is its nearest neighbour

    upload.run()  # B reruns after A's change
    assert not upload.exception
    assert "my-cat-class" not in knn_top_labels(upload)
    assert "knn_banks" not in upload.session_state or not upload.session_state["knn_banks"]

    # each session's figures show its own image and settings
    def image_title(app):
        import json

        return json.dumps(chart_specs(app)[0]["layout"]["title"])

    assert "(451x300)" in image_title(cat) and "(96x64)" in image_title(upload)
    assert cat.session_state["presentation"] is True
    assert upload.session_state["presentation"] is False
    assert upload.session_state["upload_image"].size == (96, 64)
    assert "upload_image" not in cat.session_state


# --- a long method does not hold up other sessions ------------------------------------------

def test_a_prediction_completes_while_score_cam_runs():
    """Session A runs Score-CAM (one forward per batch of masked images); session B asks
    for a prediction from the same model while A is under way. A holds the model's lock one
    batch at a time, so B gets its turn after A's current batch and finishes first. A waits,
    at the start of a later batch, until B is done: were the lock held for A's whole call,
    B could never finish and that wait would run out."""
    from xai_core.methods import gradcam

    cnn, (cat, other) = tiny_cnn(), images(2)
    pipeline.CAPTURE_CACHE.clear()
    expected_map = gradcam.cam_family(cnn, cat, 3, names=("Score-CAM",))[0].map
    expected_top = pipeline.predict(cnn, other, topk=3)
    pipeline.CAPTURE_CACHE.clear()

    b_may_ask, b_done = threading.Event(), threading.Event()
    forwards, finished, results, waited = [], [], {}, []

    def a_checks_before_each_forward() -> bool:
        forwards.append(1)
        if len(forwards) == 2:  # the image is done, the first batch starts
            b_may_ask.set()
        if len(forwards) == 4:  # two batches later: B must have been served by now
            waited.append(b_done.wait(timeout=120))
        return False

    def session_a():
        results["a"] = gradcam.cam_family(cnn, cat, 3, names=("Score-CAM",),
                                          should_stop=a_checks_before_each_forward)[0]
        finished.append("a")

    def session_b():
        b_may_ask.wait(timeout=120)
        results["b"] = pipeline.predict(cnn, other, topk=3)
        finished.append("b")
        b_done.set()

    threads = [threading.Thread(target=session_a), threading.Thread(target=session_b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert waited == [True] and finished == ["b", "a"]
    channels = cnn.module.get_submodule(cnn.spec.cnn_target_layer).num_features
    assert len(forwards) == 1 + channels // pipeline.default_batch_size(cnn)  # it went on
    assert results["b"] == expected_top
    np.testing.assert_allclose(results["a"].map, expected_map, atol=1e-6)
    assert not cnn.lock._held and not cnn.lock._queue


def test_a_prediction_completes_while_occlusion_runs():
    """Session A runs Occlusion through Captum (one forward per batch of occluded images);
    session B asks for a prediction from the same model while A's second forward runs. A
    takes the model's lock for each forward only, so B, queued behind that forward, runs
    its own forward before A's third: were the lock held for A's whole call, B's forward
    would come after all of A's."""
    cnn, (cat, other) = tiny_cnn(), images(2)
    expected_map = METHODS["occlusion"](cnn, cat, target=3, batch=2).map
    expected_top = pipeline.predict(cnn, other, topk=3)
    RESULT_CACHE.clear()
    pipeline.CAPTURE_CACHE.clear()

    a_thread, b_may_ask, b_forwarded = [], threading.Event(), threading.Event()
    a_forwards, b_first = [], []

    def before_forward(_module, _args):
        if threading.get_ident() not in a_thread:
            b_forwarded.set()  # B's forward, inside the lock
            return
        a_forwards.append(1)
        if len(a_forwards) == 2:
            b_may_ask.set()
            for _ in range(12000):  # until B waits for the lock this forward holds
                if cnn.lock._queue:
                    break
                threading.Event().wait(0.01)
        elif len(a_forwards) == 3:
            b_first.append(b_forwarded.is_set())

    results = {}

    def session_a():
        a_thread.append(threading.get_ident())
        results["a"] = METHODS["occlusion"](cnn, cat, target=3, batch=2)

    def session_b():
        b_may_ask.wait(timeout=120)
        results["b"] = pipeline.predict(cnn, other, topk=3)

    handle = cnn.module.register_forward_pre_hook(before_forward)
    try:
        threads = [threading.Thread(target=session_a), threading.Thread(target=session_b)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
    finally:
        handle.remove()
    assert b_first == [True]
    assert len(a_forwards) == 1 + 16 // 2  # the image, then 4x4 windows in batches of 2
    assert results["b"] == expected_top
    np.testing.assert_array_equal(results["a"].map, expected_map)
    assert not cnn.lock._held and not cnn.lock._queue
