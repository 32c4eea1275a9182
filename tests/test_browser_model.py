"""The browser model (xai_core/browser_model): its ONNX export run by onnxruntime (Python)
against the torch forward, the torch forward against the server's own capture and head
switch, and the float16-stored weights' error against both (the numbers
docs/lesson-export.md states)."""

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from xai_core.lessons import explainer
from xai_core.browser_model import bundle
from xai_core.browser_model.graph import NORM_STEPS, OUTPUTS, UnsupportedModel, ExplainerGraph
from xai_core.browser_model.pictures import check_pictures
from xai_core.studies.interventions import intervene
from xai_core.models.knn import knn_vote
from xai_core.studies.open_set import open_set
from xai_core.pipeline import model_output, predict, prepare, vit_capture

MASKS = {"all heads on": (), "two heads off": ((0, 5), (6, 2)),
         "a whole block off": tuple((11, h) for h in range(6))}
FP32_TOLERANCE = 1e-4  # |onnx - torch| <= 1e-4 * max(1, |torch|), on every output


@pytest.fixture(scope="module")
def pictures():
    return check_pictures()


@pytest.fixture(scope="module")
def runners(dinov2):
    return {precision: bundle.session(bundle.model_file(dinov2, precision))
            for precision in bundle.PRECISIONS}


def mask_of(dinov2, off):
    return bundle.head_mask(len(dinov2.module.blocks), dinov2.module.blocks[0].attn.num_heads, off)


def worst_relative(found: np.ndarray, expected: np.ndarray) -> float:
    return float((np.abs(found - expected) / np.maximum(1.0, np.abs(expected))).max())


@pytest.mark.parametrize("title", ["chelsea", "coffee", "Hubble deep field"])
@pytest.mark.parametrize("off", list(MASKS.values()), ids=list(MASKS))
def test_fp32_export_equals_torch_on_every_output(dinov2, pictures, runners, title, off):
    pixels = prepare(dinov2, pictures[title]).pixels
    mask = mask_of(dinov2, off)
    found = bundle.run(runners["fp32"], pixels, mask)
    expected = bundle.torch_run(dinov2.module, pixels, mask)
    assert list(found) == list(OUTPUTS)
    for name in OUTPUTS:
        assert found[name].shape == expected[name].shape, name
        assert worst_relative(found[name], expected[name]) <= FP32_TOLERANCE, name


def test_graph_equals_the_servers_capture(dinov2, image):
    """The wrapper's forward is the model's: attention, output and the block cards' norms
    equal what the server captures and sends (explainer.build_block_detail)."""
    pixels = prepare(dinov2, image).pixels
    found = bundle.torch_run(dinov2.module, pixels, mask_of(dinov2, ()))
    capture = vit_capture(dinov2, image)
    np.testing.assert_allclose(found["output"], model_output(dinov2, image).numpy(), atol=1e-4)
    layout = capture.layout
    assert found["attention"].shape[-1] == layout.num_tokens  # the layout read from the model
    for record in capture.blocks:
        np.testing.assert_allclose(found["attention"][record.index],
                                   record.acts["attn"][0].numpy(), atol=1e-5)
        np.testing.assert_allclose(found["q"][record.index], record.acts["q"][0].numpy(),
                                   atol=1e-4)
    detail = explainer.build_block_detail(dinov2, image, 6)
    for step, name in enumerate(NORM_STEPS):
        sent = explainer.decode(detail["norms"][name]).astype(np.float64)
        np.testing.assert_allclose(found["norms"][6, step], sent, rtol=2e-3, atol=1e-3)
    np.testing.assert_allclose(found["context_heads"][6],
                               explainer.decode(detail["context_heads"]), rtol=2e-3, atol=1e-3)


@pytest.mark.parametrize("off", [((6, 2),), ((0, 5), (6, 3))])
def test_head_mask_is_the_servers_head_switch(dinov2, image, runners, off):
    """A head mask of 0 is page 9's heads_off (zero fill): the same answer and class score."""
    pixels = prepare(dinov2, image).pixels
    found = bundle.run(runners["fp32"], pixels, mask_of(dinov2, off))
    outcome = intervene(dinov2, image, maps=False, heads_off=off)
    probabilities, _ = knn_vote(dinov2.head.bank, torch.from_numpy(found["output"][0]))
    for prediction in outcome.after:
        assert float(probabilities[prediction.index]) == pytest.approx(prediction.probability,
                                                                      abs=1e-4)
    plain = bundle.run(runners["fp32"], pixels, mask_of(dinov2, ()))
    assert not np.allclose(found["output"], plain["output"], atol=1e-3)  # the switch acts


def test_fp16_weights_error_on_the_fourteen_pictures(dinov2, pictures, runners):
    """Float16-stored weights: per head, [CLS] attention rank correlation >= 0.9999 and max
    abs <= 1e-3 against the torch forward in every block; the top class of `predict` on the
    8 gallery and 6 other pictures, its probability within 0.001."""
    assert len(pictures) == 14
    mask = mask_of(dinov2, ())
    for title, picture in pictures.items():
        pixels = prepare(dinov2, picture).pixels
        found = bundle.run(runners["fp16"], pixels, mask)
        expected = bundle.torch_run(dinov2.module, pixels, mask)
        cls_found, cls_expected = found["attention"][:, :, 0], expected["attention"][:, :, 0]
        assert float(np.abs(cls_found - cls_expected).max()) <= 1e-3, title
        for block in range(cls_found.shape[0]):
            for head in range(cls_found.shape[1]):
                rho = spearmanr(cls_found[block, head], cls_expected[block, head]).statistic
                assert rho >= 0.9999, (title, block, head)
        top = predict(dinov2, picture, topk=1)[0]
        probabilities, _ = knn_vote(dinov2.head.bank, torch.from_numpy(found["output"][0]))
        assert int(probabilities.argmax()) == top.index, title
        assert float(probabilities[top.index]) == pytest.approx(top.probability, abs=1e-3)


def test_model_data_carries_the_bank_and_threshold(dinov2, image):
    data = bundle.model_data(dinov2)
    message = explainer.decode_message(bundle.model_message(dinov2))["browser_model"]
    bank = dinov2.head.bank
    np.testing.assert_array_equal(explainer.decode(message["knn"]["features"]),
                                  bank.features.numpy())
    assert message["knn"]["labels"] == list(bank.labels)
    assert data["knn"]["threshold"] == pytest.approx(open_set(dinov2, image).threshold)
    module = dinov2.module
    assert data["grid"] == list(module.patch_embed.grid_size)
    assert data["tokens"] == vit_capture(dinov2, image).layout.num_tokens


def test_class_attention_blocks_are_refused_in_a_sentence():
    import timm

    cait = timm.create_model("cait_xxs24_224", pretrained=False, depth=2, num_classes=3)
    with pytest.raises(UnsupportedModel, match="self-attention ViTs only"):
        ExplainerGraph(cait)


def test_an_unwritable_cache_still_gives_the_model_file(dinov2, monkeypatch, tmp_path):
    """A read-only cache folder: the export goes to a temporary folder, the same bytes."""
    cached = bundle.model_file(dinov2, "fp16").read_bytes()

    def refuse(path, write):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(bundle, "cache_dir", lambda: tmp_path / "cache")
    monkeypatch.setattr(bundle.disk_cache, "replace_atomically", refuse)
    found = bundle.model_file(dinov2, "fp16")
    assert found.is_file() and not found.is_relative_to(tmp_path / "cache")
    import onnx

    ours, theirs = onnx.load_from_string(found.read_bytes()), onnx.load_from_string(cached)
    assert {i.name: i.raw_data for i in ours.graph.initializer} == \
        {i.name: i.raw_data for i in theirs.graph.initializer}
