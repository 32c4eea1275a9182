"""Grad-CAM: ours against pytorch-grad-cam (CNN and ViT F1), the one-pass taxonomy against
cells computed with their own hooks, zero-gradient detection, class discrimination, CLI.

Oracles: the pytorch-grad-cam library (REFERENCE_CONVENTIONS: the reference implementation);
an independent per-cell re-implementation of seed 002's eqs. 10-16 (head slices in a loop)
fed by a separate forward+backward hooked on that one tensor; hand-derived facts about which
gradients must vanish (only [CLS] reaches a token-pooled head, only patches an avg-pooled one).
"""

import copy
import json

import numpy as np
import pytest
import timm
import torch
from pytorch_grad_cam import GradCAM
from tolerance import assert_close, network_tolerance

from xai_core import pipeline
from xai_core.capture import run_capture
from xai_core.cli.main import main
from xai_core.images import load_sample
from xai_core.methods import METHODS, gradcam, vit_gradcam
from xai_core.methods.gradcam import run_library_cam
from xai_core.methods.vit_gradcam import (LOCATIONS, MULTI_HEAD, WEIGHTS, ZERO_GRADIENT,
                                          taxonomy, upsample_for_display)
from xai_core.models import get_model

TARGET = 3  # class of the tiny random ViTs


# --- fixtures ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cnn():
    model = get_model("efficientnet-lite0")
    image = load_sample("collage")
    cat = pipeline.resolve_target(model, "Egyptian cat")
    espresso = pipeline.resolve_target(model, "espresso")
    return model, image, cat, espresso


def tiny_vit(global_pool="token", seed=0):
    """[CLS] + 1 register token (2 prefix tokens), a 3x4 patch grid: nothing is 14x14."""
    torch.manual_seed(seed)
    model = timm.models.vision_transformer.VisionTransformer(
        img_size=(48, 64), patch_size=16, embed_dim=48, depth=3, num_heads=3, num_classes=10,
        reg_tokens=1, global_pool=global_pool).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def score(output):
    return output[:, TARGET].sum()


@pytest.fixture(scope="module")
def pixels():
    return torch.randn(1, 3, 48, 64, generator=torch.Generator().manual_seed(1))


def hooked(model, pixels, block, location):
    """A separate forward + backward that records ONE tensor with its own hook."""
    blk = model.blocks[block]
    module, before = {"F1": (blk.norm1, False), "F2": (blk.attn.attn_drop, False),
                      "F3": (blk.attn.proj, True), "F4": (blk.norm2, False),
                      "F5": (blk.mlp, False), "F6": (blk, False)}[location]
    store = {}
    if before:
        handle = module.register_forward_pre_hook(lambda m, a: store.__setitem__("t", a[0]))
    else:
        handle = module.register_forward_hook(lambda m, i, o: store.__setitem__("t", o))
    blk.attn.fused_attn = False
    try:
        x = pixels.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(score(model(x)), [store["t"]])
    finally:
        handle.remove()
        blk.attn.fused_attn = True
    return store["t"].detach()[0].double(), grad[0].double()


def reference_cell(t, g, location, weights, heads, prefix, num_heads, grid):
    """Seed 002 eqs. 10-16 written out directly, head by head."""
    if location == "F2":  # the [CLS] query row; one channel per head
        alpha = g[:, 0, prefix:].mean(1) if weights == "patch" else g[:, 0, 0]
        per_head = alpha[:, None] * t[:, 0, prefix:]
    elif location == "F3":
        d = t.shape[1] // num_heads
        per_head = []
        for h in range(num_heads):
            x, gh = t[:, h * d:(h + 1) * d], g[:, h * d:(h + 1) * d]
            alpha = gh[prefix:].mean(0) if weights == "patch" else gh[0]
            per_head.append(x[prefix:] @ alpha)
        per_head = torch.stack(per_head)
    else:
        alpha = g[prefix:].mean(0) if weights == "patch" else g[0]
        per_head = (t[prefix:] @ alpha)[None]
    combined = (per_head.clamp(min=0).sum(0) if heads == "relu-sum"
                else per_head.sum(0).clamp(min=0))
    return combined.reshape(grid).numpy()


def source_is_zero(g, location, weights, prefix) -> bool:
    if location == "F2":
        source = g[:, 0, prefix:] if weights == "patch" else g[:, 0, 0]
    else:
        source = g[prefix:] if weights == "patch" else g[0]
    return not bool(torch.count_nonzero(source))


@pytest.fixture(scope="module")
def tiny_runs(pixels):
    """Per pooling: the model, its one-pass taxonomy, and every (block, location) hooked alone."""
    runs = {}
    for pool in ("token", "avg"):
        model = tiny_vit(pool)
        capture = run_capture(model, pixels, score)
        separate = {(b, loc): hooked(model, pixels, b, loc)
                    for b in range(len(model.blocks)) for loc in LOCATIONS}
        runs[pool] = (model, capture, taxonomy(capture), separate)
    return runs


# --- CNN -----------------------------------------------------------------------------------------

@pytest.mark.numeric
@pytest.mark.parametrize("layer", ["bn2", "blocks.3.2.bn3"])
def test_cnn_gradcam_equals_pytorch_grad_cam(cnn, layer):
    model, image, cat, espresso = cnn
    pixels = pipeline.prepare(model, image).pixels
    for target in (cat, espresso):
        steps = METHODS["gradcam"](model, image, target=target, layer=layer).detail
        reference = run_library_cam(GradCAM, model.module, [model.module.get_submodule(layer)],
                                    pixels, model.head.score_fn(target), lock=model.lock)
        assert reference.shape == steps.upsampled.shape == tuple(model.spec.input_size)
        # the library runs its own forward and backward: other orders (tests/tolerance.py)
        assert_close(steps.upsampled, reference,
                     network_tolerance(model.module, reference, passes=2))
        # the raw map is the ReLU of the alpha-weighted sum, alpha the mean gradient
        np.testing.assert_allclose(steps.alpha, steps.gradients.mean(axis=(1, 2)), atol=1e-7)
        assert steps.cam.min() >= 0 and steps.cam.max() > 0


@pytest.mark.numeric
def test_cam_family_runs_under_the_lock_and_leaves_no_hooks(cnn):
    model, image, cat, _ = cnn
    names = ("Grad-CAM", "Grad-CAM++", "Layer-CAM", "Eigen-CAM")
    results = gradcam.cam_family(model, image, cat, "bn2", names)
    assert [r.name for r in results] == list(names)
    for result in results:
        assert result.map.shape == tuple(model.spec.input_size) and result.seconds > 0
        assert result.map.min() >= 0 and result.map.max() == pytest.approx(1, abs=1e-5)
    steps = METHODS["gradcam"](model, image, target=cat).detail
    assert_close(results[0].map, steps.upsampled,
                 network_tolerance(model.module, steps.upsampled, passes=2))
    layer = model.module.get_submodule("bn2")
    assert not layer._forward_hooks and not layer._forward_pre_hooks


def left_share(values: np.ndarray) -> float:
    half = values.shape[1] // 2
    return float(values[:, :half].sum() / values.sum())


def test_class_discrimination_on_the_collage(cnn):
    """Cat on the left half, coffee cup on the right (the collage sample): Grad-CAM for a
    cat class puts most of its mass left, for espresso right; plain saliency does not
    separate the classes as much (its two maps stay more alike)."""
    model, image, cat, espresso = cnn
    cat_steps, cup_steps = (METHODS["gradcam"](model, image, target=t).detail
                            for t in (cat, espresso))
    assert left_share(cat_steps.upsampled) > 0.75
    assert left_share(cup_steps.upsampled) < 0.25
    gradcam_alike = gradcam.map_correlation(cat_steps.upsampled, cup_steps.upsampled)
    saliency_alike = gradcam.map_correlation(METHODS["saliency"](model, image, target=cat).map,
                                             METHODS["saliency"](model, image, target=espresso).map)
    assert gradcam_alike < 0 < saliency_alike


# --- ViT taxonomy ----------------------------------------------------------------------------

def test_variant_count(tiny_runs):
    _, capture, result, _ = tiny_runs["token"]
    # per block: F1, F4, F5, F6 x 2 weightings + F2, F3 x 2 weightings x 2 head modes = 16
    assert result.count == 16 * len(capture.blocks) == 48
    assert not result.undefined


@pytest.mark.numeric
def test_every_cell_equals_the_cell_computed_with_its_own_hook(tiny_runs):
    for pool, (model, capture, result, separate) in tiny_runs.items():
        prefix, grid = capture.layout.num_prefix_tokens, capture.layout.grid
        assert prefix == 2 and grid == (3, 4)
        checked = 0
        for variant, cell in result.cells.items():
            t, g = separate[(variant.block, variant.location)]
            def cell_of(t, g, v=variant):
                return reference_cell(t, g, v.location, v.weights, v.heads, prefix,
                                      model.blocks[0].attn.num_heads, grid)
            expected = cell_of(t, g)
            # one capture, or a forward and backward of its own with one hook; the sum over
            # channels can cancel, so the rounding is measured against its terms' size
            terms = cell_of(t.abs(), g.abs())
            assert_close(cell.map, expected, network_tolerance(model, terms, passes=2),
                         f"{pool} {variant.key}")
            checked += 1
        assert checked == 48
        # the two head modes really differ somewhere (eq. 15 vs eq. 16)
        assert any(not np.allclose(result.cell(b, loc, w, "sum-relu").map,
                                   result.cell(b, loc, w, "relu-sum").map)
                   for b in range(3) for loc in MULTI_HEAD for w in WEIGHTS)


def test_zero_gradient_detection_flags_exactly_the_zero_cells(tiny_runs):
    last = 2
    expected_by_reasoning = {
        # token pooling: only [CLS] leaves the last block, so patch tokens after its
        # attention (context, LN2, MLP, output) have no path to the score
        "token": {(last, "F3", "patch"), (last, "F4", "patch"), (last, "F5", "patch"),
                  (last, "F6", "patch")},
        # average pooling over patches: now [CLS] is the dead end after the last attention,
        # and the [CLS] attention row (F2 reads only that row) with it
        "avg": {(last, "F2", "patch"), (last, "F2", "cls"), (last, "F3", "cls"),
                (last, "F4", "cls"), (last, "F5", "cls"), (last, "F6", "cls")},
    }
    for pool, (_, capture, result, separate) in tiny_runs.items():
        prefix = capture.layout.num_prefix_tokens
        flagged = {(v.block, v.location, v.weights) for v, c in result.cells.items()
                   if c.status == ZERO_GRADIENT}
        zero = {(b, loc, w) for (b, loc), (_, g) in separate.items() for w in WEIGHTS
                if source_is_zero(g, loc, w, prefix)}
        assert flagged == zero == expected_by_reasoning[pool], pool
        for variant, cell in result.cells.items():
            if cell.status == ZERO_GRADIENT:
                assert not cell.map.any() and cell.reason


@pytest.mark.numeric
def test_vit_f1_last_block_equals_pytorch_grad_cam_tiny(tiny_runs, pixels):
    model, capture, result, _ = tiny_runs["token"]
    layout = capture.layout
    ours = upsample_for_display(result.cell(2, "F1", "patch").map, layout.input_size)
    expected = library_f1(model, pixels, layout, score)
    assert_close(ours, expected, network_tolerance(model, expected, passes=2))


def library_f1(module, pixels, layout, score_fn, lock=None):
    """pytorch-grad-cam's ViT recipe on blocks[-1].norm1, grid and prefix read from the layout."""
    prefix, (rows, cols) = layout.num_prefix_tokens, layout.grid

    def reshape(tokens):
        patches = tokens[:, prefix:, :]
        return patches.reshape(tokens.shape[0], rows, cols, -1).permute(0, 3, 1, 2)

    return run_library_cam(GradCAM, module, [module.blocks[-1].norm1], pixels, score_fn,
                           lock=lock, reshape_transform=reshape)


@pytest.fixture(scope="module")
def dinov2():
    model = get_model("dinov2-s14")
    image = load_sample("collage")
    return model, image, model.head.class_names.index("cat"), \
        model.head.class_names.index("coffee cup")


@pytest.mark.numeric
def test_vit_f1_last_block_equals_pytorch_grad_cam_dinov2(dinov2):
    """The real DINOv2 with its k-NN class score as the target (16x16 grid at 224 px)."""
    model, image, cat, _ = dinov2
    result = METHODS["vit-gradcam-all"](model, image, target=cat).detail
    capture = pipeline.vit_capture(model, image, target=cat)
    assert capture.layout.grid == (16, 16) and result.count == 16 * 12 == 192
    ours = upsample_for_display(result.cell(11, "F1", "patch").map, capture.layout.input_size)
    reference = library_f1(model.module, pipeline.prepare(model, image).pixels, capture.layout,
                           model.head.score_fn(cat), lock=model.lock)
    assert_close(ours, reference, network_tolerance(model.module, reference, passes=2))
    blank = {(v.block, v.location) for v, c in result.cells.items() if c.status == ZERO_GRADIENT}
    assert blank == {(11, "F3"), (11, "F4"), (11, "F5"), (11, "F6")}


def test_cait_layout_counts_only_defined_cells():
    """CaiT: patch blocks have no [CLS] (no F2 row, no [CLS] weights); class-attention blocks
    carry only [CLS] after the attention (no F3-F6 patch tokens)."""
    torch.manual_seed(0)
    model = timm.models.cait.Cait(img_size=32, patch_size=16, embed_dim=48, depth=2,
                                  num_heads=3, depth_token_only=1, num_classes=10).eval()
    capture = run_capture(model, torch.randn(1, 3, 32, 32), score)
    result = taxonomy(capture)
    # patch block: F1, F4, F5, F6 (patch) + F3 (patch) x 2 head modes = 6; class block:
    # F1 x 2 weightings + F2 x 2 weightings x 2 head modes = 6
    assert result.count == 6 * 2 + 6
    assert {(v.block, v.location) for v in result.cells if v.block == 2} == {(2, "F1"), (2, "F2")}
    assert "no [CLS]" in result.undefined[(0, "F2", "patch")]
    with pytest.raises(vit_gradcam.OptionError, match="not defined"):
        result.cell(2, "F5", "patch")


# --- CLI -------------------------------------------------------------------------------------

def read_npz(path):
    data = np.load(path)
    return data, json.loads(str(data["meta"]))


def test_cli_vit_gradcam_all_and_single(dinov2, tmp_path):
    model, image, cat, cup = dinov2
    everything = tmp_path / "all.npz"
    assert main(["explain", "--model", "dinov2-s14", "--image", "sample:collage", "--method",
                 "vit-gradcam-all", "--target", "cat", "--out", str(everything)]) == 0
    data, meta = read_npz(everything)
    result = METHODS["vit-gradcam-all"](model, image, target=cat).detail
    assert data["maps"].shape == (192, 16, 16) and meta["variant_count"] == 192
    assert int(data["zero_gradient"].sum()) == 5 and meta["target"] == cat
    index = list(data["variants"]).index("block5/F2/cls/relu-sum")
    np.testing.assert_array_equal(data["maps"][index], result.cell(5, "F2", "cls", "relu-sum").map)

    single = tmp_path / "one.npz"
    assert main(["explain", "--model", "dinov2-s14", "--image", "sample:collage", "--method",
                 "vit-gradcam", "--target", "cat", "--set", "location=F2 weights=cls",
                 "--set", "heads=relu-sum block=5", "--out", str(single)]) == 0
    one, one_meta = read_npz(single)
    np.testing.assert_array_equal(one["map"], data["maps"][index])
    assert one_meta["variant"] == "block5/F2/cls/relu-sum" and one_meta["status"] == "ok"

    cup_file = tmp_path / "cup.npz"
    assert main(["explain", "--model", "dinov2-s14", "--image", "sample:collage", "--method",
                 "vit-gradcam", "--target", "coffee cup", "--set", "location=F2 weights=cls",
                 "--set", "heads=relu-sum block=5", "--out", str(cup_file)]) == 0
    assert not np.allclose(np.load(cup_file)["map"], one["map"])  # the target matters


def test_cli_gradcam_and_bad_options(cnn, tmp_path, capsys):
    model, image, cat, _ = cnn
    out = tmp_path / "cam.npz"
    assert main(["explain", "--model", "efficientnet-lite0", "--image", "sample:collage",
                 "--method", "gradcam", "--target", str(cat), "--set", "layer=bn2",
                 "--out", str(out)]) == 0
    data, meta = read_npz(out)
    steps = METHODS["gradcam"](model, image, target=cat, layer="bn2").detail
    np.testing.assert_array_equal(data["map"], steps.cam)
    assert meta["layer"] == "bn2" and data["alpha"].shape == (1280,)
    assert METHODS["gradcam"].family == "cnn" and METHODS["vit-gradcam"].family == "vit"
    for method, option in (("gradcam", "layer=nope"), ("vit-gradcam", "location=F7"),
                           ("vit-gradcam", "block=12"), ("vit-gradcam", "weights=mean"),
                           ("vit-gradcam", "heads=max")):
        model_id = "efficientnet-lite0" if method == "gradcam" else "dinov2-s14"
        capsys.readouterr()
        assert main(["explain", "--model", model_id, "--image", "sample:collage", "--method",
                     method, "--set", option, "--out", str(tmp_path / "x.npz")]) == 2, option
        error = capsys.readouterr().err
        assert error.startswith("error:") and len(error.strip().splitlines()) == 1


class SpyLock:
    def __init__(self):
        self.held = False
        self.entries = 0

    def __enter__(self):
        assert not self.held
        self.held = True
        self.entries += 1
        return self

    def __exit__(self, *exc):
        self.held = False
        return False


def test_library_calls_never_touch_the_shared_model():
    """pytorch-grad-cam hooks (and, for Ablation-CAM, swaps) the model's layers: it works on
    a private copy that shares the weights, so the shared model never carries a hook or a
    swap, not even half-way. A gradient method holds the lock for the whole call; a batched
    one for every forward (and between forwards other calls may go in); an error half-way
    leaves the lock free."""
    from pytorch_grad_cam import AblationCAM

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                              torch.nn.Linear(4, 3)).eval()
    conv = net[0]
    lock, calls = SpyLock(), []

    def shared_model_untouched():
        assert net[0] is conv and not conv._forward_hooks and not net._forward_hooks

    def score_fn(output):
        shared_model_untouched()
        calls.append(lock.held)
        return output[:, 1].sum()

    x = torch.randn(1, 3, 8, 8)
    cam = run_library_cam(GradCAM, net, [conv], x, score_fn, lock=lock)
    assert cam.shape == (8, 8) and not lock.held and all(calls) and lock.entries == 1

    calls.clear()
    lock.entries = 0
    ablation = run_library_cam(AblationCAM, net, [conv], x, score_fn, lock=lock, batch_size=2)
    # the copy, two forwards of the image (the library's and Ablation-CAM's own), then the
    # 4 channels in batches of 2: a lock entry each; scores are read outside the lock
    assert ablation.shape == (8, 8) and lock.entries == 1 + 2 + 2 and not any(calls)
    shared_model_untouched()
    # the same map as the library run directly on a copy of its own
    own = copy.deepcopy(net)
    direct = AblationCAM(model=own, target_layers=[own[0]], batch_size=2)
    expected = direct(input_tensor=x.clone().requires_grad_(True),
                      targets=[gradcam.ScoreTarget(lambda out: out[:, 1].sum())])[0]
    np.testing.assert_allclose(ablation, expected, atol=1e-6)

    def failing(output):
        if len(calls) > 2:  # fail inside Ablation-CAM's ablation loop
            raise RuntimeError("boom")
        return score_fn(output)

    with pytest.raises(RuntimeError, match="boom"):
        run_library_cam(AblationCAM, net, [conv], x, failing, lock=lock, batch_size=2)
    assert not lock.held
    shared_model_untouched()
