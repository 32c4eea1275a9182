"""Faults at the model call: running out of (GPU or CPU) memory, and long runs that are
stopped. The errors are injected at the model's own forward (the class method every
caller goes through, the private copies pytorch-grad-cam works on included), on CPU:
CUDA's OutOfMemoryError as torch raises it, and a real failed CPU allocation."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from apptest_helpers import chart_specs, open_app
from hook_helpers import hooked_modules
from single_thread import one_torch_thread
from tiny_models import images, tiny_cnn
from tolerance import assert_close, network_tolerance, probability_tolerance
from xai_core.studies import method_runs
from xai_core import pipeline
from xai_core.cli.main import main as cli_main
from xai_core.infra.faults import (
    RETRY_BATCH_DIVISOR,
    Cancelled,
    ModelOutOfMemory,
    retry_with_smaller_batch,
)
from xai_core.methods import METHODS, gradcam
from xai_core.methods.base import RESULT_CACHE
from xai_core.models import get_model

CUDA_OOM = "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 139.8 GiB total capacity)"


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def cnn():
    return tiny_cnn()


@pytest.fixture(scope="module")
def oracle(cnn):
    """Score-CAM of the tiny CNN computed normally, and its prediction."""
    image = images(1)[0]
    pipeline.CAPTURE_CACHE.clear()
    score_cam = gradcam.cam_family(cnn, image, 3, names=("Score-CAM",))[0].map
    top = pipeline.predict(cnn, image, topk=3)
    pipeline.CAPTURE_CACHE.clear()
    return image, score_cam, top


def inject(monkeypatch, module: torch.nn.Module, fails, error=None):
    """Replace the forward of `module`'s class: it records each batch size and raises
    `error()` when `fails(batch size)`; the default error is a real failed CPU allocation."""
    original = type(module).forward
    sizes: list[int] = []

    def forward(self, x, *args, **kwargs):
        sizes.append(int(x.shape[0]))
        if fails(x.shape[0]):
            if error is None:
                torch.empty(2**46, dtype=torch.uint8)  # 64 TiB: the allocator refuses
            raise error()
        return original(self, x, *args, **kwargs)

    monkeypatch.setattr(type(module), "forward", forward)
    return sizes


@pytest.fixture
def freed(monkeypatch):
    """Record CUDA cache releases (as if a GPU were present) and put a marker in the
    shared capture cache; `freed()` says whether both were freed."""
    releases = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: releases.append(1))
    computed, marker = [], ("marker", object())  # a key of this test's own
    pipeline.CAPTURE_CACHE.get_or_compute(marker, lambda: computed.append(1))

    def check() -> bool:
        pipeline.CAPTURE_CACHE.get_or_compute(marker, lambda: computed.append(1))
        return bool(releases) and len(computed) == 2  # computed again: the cache was cleared

    return check


def lock_free_and_no_hooks(model) -> bool:
    hooked = hooked_modules(model.module)
    return not model.lock._held and not model.lock._queue and not hooked


@pytest.mark.numeric
def test_score_cam_retries_once_with_a_smaller_batch(cnn, oracle, monkeypatch, freed):
    image, expected, _ = oracle
    batch = 16  # a GPU-like batch (the CPU default for a CNN is already small)
    monkeypatch.setattr(gradcam, "default_batch_size", lambda model: batch)
    retry = batch // RETRY_BATCH_DIVISOR
    sizes = inject(monkeypatch, cnn.module, lambda n: n > retry,
                   lambda: torch.cuda.OutOfMemoryError(CUDA_OOM))
    result = gradcam.cam_family(cnn, image, 3, names=("Score-CAM",))[0]
    channels = cnn.module.get_submodule(cnn.spec.cnn_target_layer).num_features
    # the image, then the first batch fails; again: the image, then batches a quarter the size
    assert sizes == [1, batch, 1] + [retry] * (channels // retry)
    # batches of 16 and 4 add in other orders than the oracle's (tests/tolerance.py)
    assert_close(result.map, expected, network_tolerance(cnn.module, expected))
    assert freed() and lock_free_and_no_hooks(cnn)


def test_out_of_memory_again_says_so_and_the_next_request_works(cnn, oracle, monkeypatch):
    image, expected, top = oracle
    monkeypatch.setattr(gradcam, "default_batch_size", lambda model: 16)  # retried at 4
    inject(monkeypatch, cnn.module, lambda n: n > 1,
           lambda: torch.cuda.OutOfMemoryError(CUDA_OOM))
    with pytest.raises(ModelOutOfMemory, match="ran out of GPU") as failure:
        gradcam.cam_family(cnn, image, 3, names=("Ablation-CAM",))
    assert "\n" not in str(failure.value) and "Traceback" not in str(failure.value)
    assert lock_free_and_no_hooks(cnn)
    monkeypatch.undo()
    again = gradcam.cam_family(cnn, image, 3, names=("Score-CAM",))[0]
    np.testing.assert_allclose(again.map, expected, atol=1e-5)
    assert pipeline.predict(cnn, image, topk=3) == top


def test_a_real_cpu_allocation_failure_in_a_prediction(cnn, oracle, monkeypatch, freed):
    image, _, top = oracle
    pipeline.CAPTURE_CACHE.clear()
    inject(monkeypatch, cnn.module, lambda n: True)  # torch's CPU allocator fails for real
    with pytest.raises(ModelOutOfMemory, match="ran out of memory"):
        pipeline.predict(cnn, image, topk=3)
    assert freed() and lock_free_and_no_hooks(cnn)
    monkeypatch.undo()
    assert pipeline.predict(cnn, image, topk=3) == top


class FailsBackward(torch.autograd.Function):
    """The identity forward; its backward runs out of (GPU) memory."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        raise torch.cuda.OutOfMemoryError(CUDA_OOM)


def test_out_of_memory_in_a_backward_outside_the_lock_says_so(cnn, monkeypatch, freed):
    """Captum's gradient methods take the model's lock per forward; their backward runs
    after it is released and may run out of memory too: the same sentence, memory freed,
    and the next request works."""
    image = images(1)[0]
    RESULT_CACHE.clear()
    expected = METHODS["integrated-gradients"](cnn, image, target=3, steps="2", batch="2").map
    RESULT_CACHE.clear()
    original = type(cnn.module).forward
    monkeypatch.setattr(type(cnn.module), "forward",
                        lambda self, x: FailsBackward.apply(original(self, x)))
    with pytest.raises(ModelOutOfMemory, match="ran out of GPU"):
        METHODS["integrated-gradients"](cnn, image, target=3, steps="2", batch="2")
    assert freed() and lock_free_and_no_hooks(cnn)
    monkeypatch.undo()
    again = METHODS["integrated-gradients"](cnn, image, target=3, steps="2", batch="2")
    np.testing.assert_array_equal(again.map, expected)


def test_retry_helper_divides_once_and_never_below_one():
    seen = []

    def run(size):
        seen.append(size)
        raise ModelOutOfMemory("no memory")

    with pytest.raises(ModelOutOfMemory):
        retry_with_smaller_batch(run, 64)
    assert seen == [64, 16]
    seen.clear()
    with pytest.raises(ModelOutOfMemory):
        retry_with_smaller_batch(run, 1)
    assert seen == [1]


def test_stopping_ends_score_cam_within_one_batch(cnn, oracle, monkeypatch):
    """Stop is pressed while the 3rd batch runs: that batch finishes, no 4th starts."""
    image, expected, _ = oracle
    stop = []
    sizes = inject(monkeypatch, cnn.module, lambda n: len(sizes) == 4 and bool(stop.append(1)))
    with pytest.raises(Cancelled):
        gradcam.cam_family(cnn, image, 3, names=("Score-CAM",), should_stop=lambda: bool(stop))
    assert sizes == [1] + [pipeline.default_batch_size(cnn)] * 3
    assert lock_free_and_no_hooks(cnn)
    monkeypatch.undo()
    # nothing half-done was cached: the next run computes the whole map
    again = gradcam.cam_family(cnn, image, 3, names=("Score-CAM",))[0]
    np.testing.assert_allclose(again.map, expected, atol=1e-5)


def test_cli_says_out_of_memory_in_one_line_then_works(monkeypatch, capsys, tmp_path):
    model = get_model("efficientnet-lite0")
    pipeline.CAPTURE_CACHE.clear()
    inject(monkeypatch, model.module, lambda n: True,
           lambda: torch.cuda.OutOfMemoryError(CUDA_OOM))
    args = ["explain", "--model", "efficientnet-lite0", "--image", "sample:coffee",
            "--target", "967", "--method", "gradcam", "--out", str(tmp_path / "map.npz")]
    assert cli_main(args) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: The server ran out of GPU")
    monkeypatch.undo()
    assert cli_main(args) == 0
    assert np.load(tmp_path / "map.npz")["map"].max() > 0


def test_app_shows_a_sentence_and_the_other_model_still_works(monkeypatch):
    cnn_model = get_model("efficientnet-lite0")
    pipeline.CAPTURE_CACHE.clear()
    inject(monkeypatch, cnn_model.module, lambda n: True,
           lambda: torch.cuda.OutOfMemoryError(CUDA_OOM))
    app = open_app(image_choice="coffee")
    assert not app.exception, app.exception
    errors = [str(e.value) for e in app.error]
    assert len(errors) == 1 and "ran out of GPU" in errors[0]
    titles = " ".join(json.dumps(spec) for spec in chart_specs(app))
    assert "k-NN" in titles and "ImageNet-1k" not in titles  # DINOv2 predicted, the CNN did not
    monkeypatch.undo()
    app.run()
    assert not app.exception and not app.error
    titles = " ".join(json.dumps(spec) for spec in chart_specs(app))
    assert "k-NN" in titles and "ImageNet-1k" in titles


def deletion(cnn, image, **kwargs):
    from xai_core.metrics.faithfulness import faithfulness

    saliency = np.arange(16, dtype=np.float32).reshape(4, 4)  # a map to rank pixels by
    return faithfulness(cnn, image, saliency, "deletion", 3, "zeros", steps=20, batch_size=16,
                        **kwargs)


def clear_curves():
    """Forget the captures and the metric curves (a cache of their own), so they run again."""
    from xai_core.metrics.faithfulness import CURVE_CACHE

    pipeline.CAPTURE_CACHE.clear()
    CURVE_CACHE.clear()


@pytest.mark.numeric
def test_metric_curve_retries_with_smaller_batches(cnn, oracle, monkeypatch, freed):
    image = oracle[0]
    expected = deletion(cnn, image)
    clear_curves()
    sizes = inject(monkeypatch, cnn.module, lambda n: n > 4,
                   lambda: torch.cuda.OutOfMemoryError(CUDA_OOM))
    curve = deletion(cnn, image)
    # the 2 end images (untouched, baseline) in one pass, then the 19 between: the first
    # batch of 16 fails, then 4, 4, 4, 4, 3
    assert sizes == [2, 16, 4, 4, 4, 4, 3] and curve.batches == 5
    with torch.no_grad():  # batches of 16 and 4: other orders (tests/tolerance.py)
        logits = cnn.module(pipeline.prepare(cnn, image).pixels)
    assert_close(curve.scores, expected.scores, probability_tolerance(cnn.module, logits))
    assert_close(curve.auc, expected.auc, probability_tolerance(cnn.module, logits))
    assert freed() and lock_free_and_no_hooks(cnn)


def test_stopping_ends_a_metric_curve_within_one_batch(cnn, oracle, monkeypatch):
    image = oracle[0]
    clear_curves()
    stop = []
    sizes = inject(monkeypatch, cnn.module, lambda n: bool(stop.append(1)))  # stop during #1
    with pytest.raises(Cancelled):
        deletion(cnn, image, should_stop=lambda: bool(stop))
    assert sizes == [2] and lock_free_and_no_hooks(cnn)  # the end images' pass, no batch after
    clear_curves()
    sizes.clear()
    with pytest.raises(Cancelled):  # asked to stop before anything: no pass at all
        deletion(cnn, image, should_stop=lambda: True)
    assert sizes == [] and lock_free_and_no_hooks(cnn)


def test_stopping_ends_occlusion_within_one_batch():
    """Occlusion runs Captum's hundreds of forwards: Stop, pressed during its 3rd forward,
    lets that one finish and starts no 4th; the comparison passes the stop on instead of
    reporting a failed method, caches nothing half-done, and the next run is whole."""
    model, image = tiny_cnn(), images(1)[0]
    expected = METHODS["occlusion"](model, image, target=3, batch=2).map
    RESULT_CACHE.clear()
    forwards = []
    handle = model.module.register_forward_pre_hook(lambda *_: forwards.append(1))
    try:
        with pytest.raises(Cancelled):
            method_runs.run_method(model, image, "occlusion", 3, options={"batch": 2},
                               should_stop=lambda: len(forwards) >= 3)
    finally:
        handle.remove()
    assert len(forwards) == 3 and lock_free_and_no_hooks(model)
    again = method_runs.run_method(model, image, "occlusion", 3, options={"batch": 2})
    assert again.ok
    np.testing.assert_array_equal(again.map, expected)
