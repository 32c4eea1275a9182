"""The browser model (xai_core/browser_model): its ONNX graphs run by onnxruntime (Python) as
the browser's worker runs them, against the torch forward; the torch forward against the
server's own capture, read-out, head switch and DAAM; a head switch restarted from its
block against the full forward; and the float16-stored weights' error against both (the
numbers docs/lesson-export.md states)."""

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from xai_core.browser_model import bundle
from xai_core.browser_model.graph import (NORM_STEPS, OUTPUTS, UnsupportedModel,
                                          self_attention_blocks)
from xai_core.browser_model.pictures import check_pictures
from xai_core.lessons import explainer
from xai_core.methods import METHODS
from xai_core.methods.daam_knn import knn_weights
from xai_core.models.knn import knn_vote
from xai_core.pipeline import model_output, predict, prepare, vit_capture
from xai_core.studies.interventions import intervene
from xai_core.studies.open_set import open_set
from xai_core.studies.readout import normed_blocks

MASKS = {"all heads on": (), "two heads off": ((0, 5), (6, 2)),
         "a whole block off": tuple((11, h) for h in range(6))}
FP32_TOLERANCE = 1e-4  # |onnx - torch| <= 1e-4 * max(1, |torch|), on every output


@pytest.fixture(scope="module")
def pictures():
    return check_pictures()


@pytest.fixture(scope="module")
def runners(dinov2):
    return {precision: bundle.runner(dinov2, precision) for precision in bundle.PRECISIONS}


def mask_of(dinov2, off):
    return bundle.head_mask(len(dinov2.module.blocks), dinov2.module.blocks[0].attn.num_heads, off)


def worst_relative(found: np.ndarray, expected: np.ndarray) -> float:
    return float((np.abs(found - expected) / np.maximum(1.0, np.abs(expected))).max())


@pytest.mark.parametrize("title", ["chelsea", "coffee", "Hubble deep field"])
@pytest.mark.parametrize("off", list(MASKS.values()), ids=list(MASKS))
def test_fp32_export_equals_torch_on_every_output(dinov2, pictures, runners, title, off):
    pixels = prepare(dinov2, pictures[title]).pixels
    mask = mask_of(dinov2, off)
    found = runners["fp32"].forward(pixels, mask)
    expected = bundle.torch_forward(dinov2.module, pixels, mask)
    for name in OUTPUTS:
        assert found[name].shape == expected[name].shape, name
        assert worst_relative(found[name], expected[name]) <= FP32_TOLERANCE, name


def test_graph_equals_the_servers_capture(dinov2, image):
    """The graphs' forward is the model's: attention, output, the block cards' norms and
    each block's read-out feature equal what the server captures and sends."""
    pixels = prepare(dinov2, image).pixels
    found = bundle.torch_forward(dinov2.module, pixels, mask_of(dinov2, ()))
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
    with torch.no_grad():
        server = [dinov2.module.forward_head(normed)[0].numpy()
                  for normed in normed_blocks(dinov2, pixels)]
    np.testing.assert_allclose(found["readout"], np.stack(server), atol=1e-4)


@pytest.mark.parametrize("off", [((6, 2),), ((0, 5), (6, 3))])
def test_head_mask_is_the_servers_head_switch(dinov2, image, runners, off):
    """A head mask of 0 is page 9's heads_off (zero fill): the same answer and class score,
    restarted from the first block with a head off as the browser does."""
    pixels = prepare(dinov2, image).pixels
    plain = runners["fp32"].forward(pixels, mask_of(dinov2, ()))
    output = runners["fp32"].resume(plain["inputs"], mask_of(dinov2, off))
    outcome = intervene(dinov2, image, maps=False, heads_off=off)
    probabilities, _ = knn_vote(dinov2.head.bank, torch.from_numpy(output[0]))
    for prediction in outcome.after:
        assert float(probabilities[prediction.index]) == pytest.approx(prediction.probability,
                                                                      abs=1e-4)
    assert not np.allclose(output, plain["output"], atol=1e-3)  # the switch acts


@pytest.mark.parametrize("precision", bundle.PRECISIONS)
@pytest.mark.parametrize("off", [((0, 1),), ((6, 2),), ((11, 0),), ((3, 4), (9, 5)),
                                 tuple((8, h) for h in range(6))])
def test_a_switch_restarted_at_its_block_equals_the_full_forward(dinov2, image, runners,
                                                                 precision, off):
    """Restarting at the first block with a head off, on the sequence that entered it with
    every head on, runs the same block graph on the same numbers as a full forward with
    that mask: the blocks before it see no mask. So the two are equal bit for bit (no
    tolerance: the same float32 operations in the same order)."""
    runner = runners[precision]
    pixels = prepare(dinov2, image).pixels
    plain = runner.forward(pixels, mask_of(dinov2, ()))
    full = runner.forward(pixels, mask_of(dinov2, off))
    first = min(block for block, _ in off)
    np.testing.assert_array_equal(full["inputs"][:first + 1], plain["inputs"][:first + 1])
    np.testing.assert_array_equal(runner.resume(plain["inputs"], mask_of(dinov2, off)),
                                  full["output"])


def browser_daam(dinov2, runner, image, target: int) -> np.ndarray:
    """DAAM as the browser computes it: the forward, eq. 13's weights from its output (the
    server's function), the backward graphs: L (blocks, patches)."""
    found = runner.forward(prepare(dinov2, image).pixels, mask_of(dinov2, ()))
    weights = knn_weights(dinov2.head.bank, torch.from_numpy(found["output"][0]), target).weights
    return runner.daam(found["inputs"], weights.astype(np.float32))


@pytest.mark.parametrize("title", ["chelsea", "retina"])
def test_daam_backward_graphs_equal_the_servers_daam(dinov2, pictures, runners, title):
    """The backward written as forward operations (fp32) gives the server's DAAM (autograd,
    methods/daam.py, the k-NN variant for the predicted class): every block's map L_b
    within 1e-4 of its largest value. Float16-stored weights: the accumulated maps D_b keep
    the order of the patches (rank correlation >= 0.99) and move by at most 2% of each
    frame's largest value (measured on the 14 pictures: 0.995 and 1.1%)."""
    image = pictures[title]
    target = predict(dinov2, image, topk=1)[0].index
    server = METHODS["daam"](dinov2, image, target=target).detail
    expected = server.L.reshape(len(server.L), -1)
    found = browser_daam(dinov2, runners["fp32"], image, target)
    for block in range(len(expected)):
        top = np.abs(expected[block]).max()
        assert np.abs(found[block] - expected[block]).max() <= FP32_TOLERANCE * max(top, 1e-12)
    accumulated = browser_daam(dinov2, runners["fp16"], image, target).cumsum(0)
    for block, frame in enumerate(server.D.reshape(len(server.D), -1)):
        assert spearmanr(accumulated[block], frame).statistic >= 0.99, block
        assert np.abs(accumulated[block] - frame).max() <= 0.02 * np.abs(frame).max(), block


def test_fp16_weights_error_on_the_fourteen_pictures(dinov2, pictures, runners):
    """Float16-stored weights: per head, [CLS] attention rank correlation >= 0.9999 and max
    abs <= 1e-3 against the torch forward in every block; the top class of `predict` on the
    8 gallery and 6 other pictures, its probability within 0.001."""
    assert len(pictures) == 14
    mask = mask_of(dinov2, ())
    for title, picture in pictures.items():
        pixels = prepare(dinov2, picture).pixels
        found = runners["fp16"].forward(pixels, mask)
        expected = bundle.torch_forward(dinov2.module, pixels, mask)
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


def test_model_data_carries_the_banks_and_threshold(dinov2, image):
    from xai_core.studies.readout import block_heads

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
    heads, _ = block_heads(dinov2, dinov2.head)
    assert len(message["readout"]["banks"]) == len(heads) == len(module.blocks)
    for sent, head in zip(message["readout"]["banks"], heads):
        np.testing.assert_array_equal(explainer.decode(sent["features"]),
                                      head.bank.features.numpy())


def test_the_model_message_holds_the_graphs_and_every_blocks_weights(dinov2):
    """One block graph for every block: the message carries each block's weights by the
    graph's input names, float16 only where the tensor is large (norms and scales stay
    float32), and each graph's inputs as the ONNX file lists them."""
    message = explainer.decode_message(bundle.model_file(dinov2, "fp16").read_bytes())
    found = message["browser_graphs"]
    assert set(found["graphs"]) == {"embed", "block", "block_grad", "ending_grad"}
    blocks = self_attention_blocks(dinov2.module)
    assert len(found["weights"]["blocks"]) == len(blocks)
    for weights, block in zip(found["weights"]["blocks"], blocks):
        np.testing.assert_array_equal(explainer.decode(weights["attn.qkv.weight"]),
                                      block.attn.qkv.weight.detach().numpy().astype(np.float16))
        assert weights["norm1.weight"]["dtype"] == "f32"
        assert set(weights) <= set(found["inputs"]["block"])
    assert found["inputs"]["block"][:2] == ["x", "head_mask"]


def test_class_attention_blocks_are_refused_in_a_sentence():
    import timm

    cait = timm.create_model("cait_xxs24_224", pretrained=False, depth=2, num_classes=3)
    with pytest.raises(UnsupportedModel, match="self-attention ViTs only"):
        self_attention_blocks(cait)


def test_blocks_with_query_key_norms_are_refused_in_a_sentence():
    import timm

    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, depth=2, num_classes=3,
                            qk_norm=True)
    with pytest.raises(UnsupportedModel, match="plain ViT blocks"):
        self_attention_blocks(vit)


def test_an_unwritable_cache_still_gives_the_model_file(dinov2, monkeypatch, tmp_path):
    """A read-only cache folder: the export goes to a temporary folder, the same weights."""
    cached = explainer.decode_message(bundle.model_file(dinov2, "fp16").read_bytes())

    def refuse(path, write):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(bundle, "cache_dir", lambda: tmp_path / "cache")
    monkeypatch.setattr(bundle.disk_cache, "replace_atomically", refuse)
    found = bundle.model_file(dinov2, "fp16")
    assert found.is_file() and not found.is_relative_to(tmp_path / "cache")
    ours = explainer.decode_message(found.read_bytes())["browser_graphs"]["weights"]
    theirs = cached["browser_graphs"]["weights"]
    for mine, other in zip(ours["blocks"], theirs["blocks"]):
        for name in mine:
            np.testing.assert_array_equal(explainer.decode(mine[name]),
                                          explainer.decode(other[name]))
