"""The ViT Explainer's payload and tour: what the browser gets reconstructs the captured
tensors within the stated quantisation error, for DINOv2 and the random-weight layouts of
a distilled DeiT (two prefix tokens) and CaiT (patch blocks without [CLS], class-attention
blocks); the residual stream it shows adds up; the tour is data naming real controls."""

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from dashboard import explainer_tour as tour
from dashboard.page_list import PAGES, PAGE_LIST
from xai_core import explainer, pipeline
from xai_core.capture import transformer_blocks
from xai_core.images import load_sample
from xai_core.methods import daam as daam_method
from xai_core.methods.rollout import attention_rollout, auto_start
from xai_core.methods import sinks as sink_method
from xai_core.models import get_model

JS = (Path(explainer.__file__).resolve().parent.parent / "dashboard" / "explainer"
      / "explainer.js").read_text()
F16 = 2.0 ** -11  # float16's relative rounding error


def as_sent(payload: dict) -> dict:
    """The payload exactly as the browser receives it (one binary message), read back."""
    return explainer.decode_message(explainer.encode_message(payload))


def unsigned(item: dict) -> tuple[np.ndarray, np.ndarray]:
    """(dequantised values, per-row scale) of an 8-bit packed map."""
    scale = explainer.decode(item["scale"]).astype(np.float64)
    return explainer.dequantise(explainer.decode(item["codes"]), scale), scale


def assert_within_8bit(values, item, what):
    got, scale = unsigned(item)
    # (row max)/510 from the 8-bit rounding, plus the float32 rounding of the scale itself
    bound = scale[..., None] * (1 / 510 + 1e-6) + 1e-12
    excess = np.abs(got - values) - bound
    assert excess.max() <= 0, f"{what}: error exceeds (row max)/510 by {excess.max():.3g}"


def assert_within_f16(values, item, what):
    got = explainer.decode(item).astype(np.float64)
    assert got.shape == values.shape, what
    # float16 keeps 11 significant bits; tiny values fall into its subnormal range (6e-8)
    np.testing.assert_allclose(got, values, rtol=F16, atol=6e-8, err_msg=what)


@pytest.fixture(scope="module", params=["dinov2-s14", "deit-s16-distilled", "cait-s24"])
def case(request):
    model = get_model(request.param, random_weights=request.param != "dinov2-s14")
    image = load_sample("chelsea")
    capture = pipeline.vit_capture(model, image)
    return model, image, capture, as_sent(explainer.overview_payload(model, image))


# --- the overview -------------------------------------------------------------------------------

def test_layout_and_stages_come_from_the_capture(case):
    model, _, capture, overview = case
    layout = overview["layout"]
    assert layout["grid"] == list(capture.layout.grid)
    assert layout["prefix"] == capture.layout.num_prefix_tokens
    assert layout["tokens"] == capture.layout.num_tokens
    assert [s["id"] for s in overview["stages"]] == list(explainer.STAGE_IDS)
    assert len(overview["blocks"]) == len(capture.blocks)
    for fact, record in zip(overview["blocks"], capture.blocks):
        assert (fact["kind"], fact["prefix"]) == (record.kind, record.num_prefix_tokens)
        assert (fact["nq"], fact["nk"]) == tuple(record.acts["attn"].shape[2:])
    assert overview["model"]["random"] == model.random_weights
    if model.random_weights:
        assert "RANDOM WEIGHTS" in overview["model"]["label"]


def test_query_rows_reconstruct_every_block_and_head(case):
    """[CLS] row per head (patch keys 8-bit, prefix keys float16); a block without [CLS]
    (CaiT's patch blocks) sends the mean of its patch rows instead, and says so."""
    _, _, capture, overview = case
    for record, rows in zip(capture.blocks, overview["query_rows"]):
        attn = record.acts["attn"][0].double().numpy()  # (H, Nq, Nk)
        prefix = record.num_prefix_tokens
        if prefix:
            expected, what = attn[:, 0, :], "[CLS] row"
        else:
            expected, what = attn.mean(1), "mean over all patch rows (no [CLS] token)"
        assert rows["what"] == what
        assert_within_8bit(expected[:, prefix:], rows, f"block {record.index} query rows")
        assert_within_f16(expected[:, :prefix], rows["prefix"], f"block {record.index} prefix")
        # rows are probabilities: patch part + prefix part = 1 (up to the stated errors)
        got, scale = unsigned(rows)
        total = got.sum(1) + explainer.decode(rows["prefix"]).astype(np.float64).sum(1)
        assert np.all(np.abs(total - 1) <= scale / 510 * got.shape[1] + 1e-3)


def test_rollout_frames_are_rows_of_the_rollout_matrices(case):
    """Rollout so far, from the block the app's start=auto picks (after the sink-dominated
    blocks, as on page 4) to each self-attention block."""
    model, image, capture, overview = case
    start = auto_start(sink_method.explain(model, image).detail).start
    rolled = attention_rollout(capture, start=start)
    frames = overview["rollout"]
    eligible = [b.index for b in capture.self_attention_blocks()]
    assert frames["blocks"] == eligible[start:]
    assert [entry["block"] for entry in overview["sinks"]["left_out"]] == eligible[:start]
    prefix = rolled.num_prefix_tokens
    rows = np.stack([m[0] if prefix else m.mean(0) for m in rolled.matrices])
    assert_within_8bit(rows[:, prefix:], frames, "rollout")
    # each rollout matrix is row-stochastic, so a [CLS] row sums to 1 over all tokens
    if prefix:
        got, scale = unsigned(frames)
        total = got.sum(1) + explainer.decode(frames["prefix"]).astype(np.float64).sum(1)
        assert np.all(np.abs(total - 1) <= scale / 510 * got.shape[1] + 1e-3)


def test_daam_frames_accumulate_to_the_daam_map(case):
    model, image, capture, overview = case
    daam = overview["daam"]
    top = overview["prediction"]["top"][0]["index"]
    result = daam_method.explain(model, image, target=top).detail
    assert daam["target"] == model.head.class_names[top]
    assert daam["blocks"] == result.block_indices
    expected_kind = "class" if any(b.kind == "class" for b in capture.blocks) else "self"
    assert {capture.blocks[i].kind for i in daam["blocks"]} == {expected_kind}
    assert_within_8bit(result.D.reshape(len(result.D), -1), daam, "DAAM")
    got, scale = unsigned(daam)
    # accumulated maps never decrease from one block to the next (up to 8-bit rounding)
    assert np.all(np.diff(got, axis=0) >= -(scale[:-1, None] + scale[1:, None]) / 510 - 1e-12)


def test_residual_norms_and_embeddings(case):
    model, image, capture, overview = case
    for fact, record in zip(overview["blocks"], capture.blocks):
        norms = record.acts["out"][0].double().norm(dim=-1).numpy()
        assert_within_f16(norms, fact["norm_out"], f"block {record.index} norms")
    # block 1's input, recovered from its output minus both branches, is the model's own
    # patch + position embedding (timm's forward_features before the blocks)
    module = model.module
    pixels = pipeline.prepare(model, image).pixels.to(model.device)
    with model.lock, torch.no_grad():
        tokens = module.patch_embed(pixels)
        tokens = module._pos_embed(tokens) if hasattr(module, "_pos_embed") else (
            tokens + module.pos_embed)
        tokens = getattr(module, "norm_pre", torch.nn.Identity())(tokens)
    embedded = tokens[0].double().norm(dim=-1).cpu().numpy()
    assert_within_f16(embedded, overview["embedding_norms"], "embeddings")


def test_prediction_matches_the_pipeline(case):
    model, image, _, overview = case
    expected = pipeline.predict(model, image, topk=5)
    got = overview["prediction"]["top"]
    assert [p["index"] for p in got] == [p.index for p in expected]
    assert [p["probability"] for p in got] == pytest.approx([p.probability for p in expected])
    assert overview["prediction"]["head"] == model.head.kind
    assert (overview["feature"] is None) == (model.head.kind != "knn")


# --- one block's detail -------------------------------------------------------------------------

def detail_blocks(capture) -> list[int]:
    kinds = [b.kind for b in capture.blocks]
    picks = {0, len(kinds) // 2, len(kinds) - 1}
    if "class" in kinds:
        picks.add(kinds.index("class"))
    return sorted(picks)


def test_block_detail_reconstructs_attention_queries_and_keys(case):
    model, image, capture, _ = case
    for index in detail_blocks(capture):
        record = capture.blocks[index]
        detail = as_sent(explainer.block_payload(model, image, index))
        attn = record.acts["attn"][0].double().numpy()
        prefix = record.num_prefix_tokens
        assert (detail["nq"], detail["nk"], detail["prefix"]) == (*attn.shape[1:], prefix)
        assert_within_8bit(attn[..., prefix:], detail["attention"], f"block {index} attention")
        assert_within_f16(attn[..., :prefix], detail["attention"]["prefix"], f"block {index}")
        for name in ("q", "k"):
            assert_within_f16(record.acts[name][0].double().numpy(), detail[name],
                              f"block {index} {name}")
        context = record.acts["context"][0].double().norm(dim=-1).numpy()
        assert_within_f16(context, detail["norms"]["context"], f"block {index} context")


def test_residual_stream_adds_up_across_blocks(case):
    """x_in of block b (recovered from its output minus the LayerScale'd branches) equals
    the output of block b - 1: an identity the payload's residual view relies on."""
    model, _, capture, _ = case
    modules = transformer_blocks(model.module)
    previous = None
    for record, (kind, block) in zip(capture.blocks, modules):
        x_in, x_mid, x_out = explainer.residual_stream(block, record.acts)
        torch.testing.assert_close(x_out, record.acts["out"][0].double())
        if previous is not None and kind == "self":
            torch.testing.assert_close(x_in, previous, rtol=1e-4, atol=1e-4)
        if kind == "class" and previous is not None and previous.shape[0] == 1:
            torch.testing.assert_close(x_in, previous, rtol=1e-4, atol=1e-4)  # [CLS] chain
        previous = x_out


def test_block_detail_rejects_a_block_out_of_range():
    model, image = get_model("dinov2-s14"), load_sample("chelsea")
    with pytest.raises(ValueError, match="Block must be 1-12"):
        explainer.build_block_detail(model, image, 12)


def test_payloads_are_cached_by_content():
    model, image = get_model("dinov2-s14"), load_sample("chelsea")
    assert explainer.overview_payload(model, image) is explainer.overview_payload(model, image)
    assert explainer.block_payload(model, image, 3) is explainer.block_payload(model, image, 3)
    assert explainer.block_payload(model, image, 3) is not explainer.block_payload(model, image, 4)
    cache = explainer.EXPLAINER_CACHE
    assert cache.max_entries > 0 and cache.max_bytes > 0
    assert cache.total_bytes() > 0  # the arrays are counted, so the byte bound bites


def test_quantiser_bound_and_zero_rows():
    rng = np.random.default_rng(0)
    values = rng.dirichlet(np.full(50, 0.3), size=40)
    values[3] = 0.0
    codes, scale = explainer.quantise_unsigned(values)
    assert codes.dtype == np.uint8 and scale.shape == (40,)
    back = explainer.dequantise(codes, scale)
    assert np.all(np.abs(back - values) <= scale[:, None] / 510 + 1e-12)
    assert np.all(back[3] == 0)
    assert np.all(codes.max(1)[np.arange(40) != 3] == 255)  # every row uses the full range


# --- the tour -----------------------------------------------------------------------------------

def test_tour_is_an_ordered_list_of_steps_naming_real_controls():
    assert isinstance(tour.TOUR, list) and len(tour.TOUR) >= 12
    pages = {name for name, _, _ in PAGE_LIST}
    for number, step in enumerate(tour.TOUR, 1):
        assert isinstance(step, tour.Step)
        assert step.stage in explainer.STAGE_IDS, number
        assert step.overlay in explainer.OVERLAYS, number
        assert step.block in tour.BLOCKS and step.head in tour.HEADS, number
        assert step.patch in tour.PATCHES, number
        assert step.page in pages and step.page[0] in "12345678", number
        assert (PAGES / step.page).exists(), number
        for part in step.spot:
            if part.startswith("stage:"):
                assert part[6:] in explainer.STAGE_IDS, (number, part)
            else:
                assert part in tour.PARTS, (number, part)
    titles = [step.title for step in tour.TOUR]
    assert len(set(titles)) == len(titles)
    # the order goes from pixels to the prediction
    order = [explainer.STAGE_IDS.index(step.stage) for step in tour.TOUR]
    assert order[0] == 0 and order.index(max(order)) > len(order) // 2


def test_component_has_every_part_and_overlay_the_tour_names():
    for part in tour.PARTS:
        assert re.search(rf'dataset\.part = "{part}"', JS), part
    for overlay in explainer.OVERLAYS:
        assert f'"{overlay}"' in JS, overlay
    for stage in explainer.STAGE_IDS:  # the detail panel has a builder for each stage
        assert re.search(rf"\b{stage}: \(\) => this\.detail", JS), stage


def test_tour_resolves_with_live_numbers_for_every_layout(case):
    _, _, capture, overview = case
    steps = tour.resolve_steps(overview)
    assert len(steps) == len(tour.TOUR)
    layout = capture.layout
    heads = capture.blocks[0].num_heads
    for step in steps:
        assert "{" not in step["text"] and "}" not in step["text"], step["title"]
        assert 0 <= step["block"] < len(capture.blocks)
        assert -1 <= step["head"] < heads
        if step["patch"] is not None:
            assert 0 <= step["patch"] < layout.num_patches
            assert capture.blocks[step["block"]].kind == "self"
        assert step["page"]["title"] == dict((n, t) for n, t, _ in PAGE_LIST)[step["page"]["file"]]
    text = " ".join(step["text"] for step in steps)
    assert f"**{layout.num_patches} patches**" in text
    tokens_step = next(s for s in steps if s["title"] == "Patches become tokens")
    if any(b.kind == "class" for b in capture.blocks):
        assert f"**{layout.num_patches} patch tokens**" in tokens_step["text"]
    else:
        names = overview["layout"]["prefix_names"]
        assert len(names) == layout.num_prefix_tokens
        assert (f"**{layout.num_tokens} tokens: {layout.num_patches} patches + "
                f"{', '.join(names)}**") in tokens_step["text"]
    top = overview["prediction"]["top"][0]["label"]
    assert top in text
    rollout_step = next(s for s in steps if s["overlay"] == "rollout")
    assert capture.blocks[rollout_step["block"]].kind == "self"


def test_sharpest_head_has_the_lowest_entropy():
    model, image = get_model("dinov2-s14"), load_sample("chelsea")
    overview = as_sent(explainer.overview_payload(model, image))
    block = tour.resolve_block("middle", overview)
    capture = pipeline.vit_capture(model, image)
    rows = capture.blocks[block].acts["attn"][0, :, 0, 1:].double()
    rows = rows / rows.sum(-1, keepdim=True)
    entropy = -(rows * rows.clamp_min(1e-30).log()).sum(-1)
    assert tour.resolve_head("sharpest", overview, block) == int(entropy.argmin())


@pytest.mark.parametrize("value, step, message", [
    (None, None, None), ("3", 3, None), (str(len(tour.TOUR)), len(tour.TOUR), None),
    ("0", None, "steps 1-"), ("99", None, "no step 99"), ("abc", None, "not a step number")])
def test_tour_deep_link_values(value, step, message):
    got, problem = tour.step_from_query(value)
    assert got == step
    assert (problem is None) == (message is None)
    if message:
        assert message in problem


def test_sink_and_residual_steps_point_at_measured_tokens():
    """The sink step opens the head whose mean received attention peaks highest on one key
    (recomputed here from the capture), and the residual step marks the longest patch."""
    model, image = get_model("dinov2-s14"), load_sample("chelsea")
    overview = as_sent(explainer.overview_payload(model, image))
    capture = pipeline.vit_capture(model, image)
    received = torch.stack([b.acts["attn"][0].double().mean(1)
                            for b in capture.self_attention_blocks()])  # (L, H, keys)
    block, head, key = np.unravel_index(int(received.argmax()), received.shape)
    steps = {step["title"]: step for step in tour.resolve_steps(overview)}
    sink = steps["Attention sinks"]
    assert (sink["block"], sink["head"]) == (block, head)
    share = float(received[block, head, key])
    assert share > 0.5 and tour.percent(share) in sink["text"]
    assert "100.0%" not in sink["text"]  # a softmax share is never all of it
    cols, patch = capture.layout.grid[1], key - capture.layout.num_prefix_tokens
    assert f"patch {patch} (row {patch // cols}, col {patch % cols})" in sink["text"]
    residual = steps["The residual stream"]
    half = len(capture.blocks) // 2  # the rule inspects the second half of the blocks
    norms = [b.acts["out"][0, 1:].double().norm(dim=-1) for b in capture.blocks[half:]]
    ratios = torch.stack([n / n.median() for n in norms])
    assert residual["patch"] == int(ratios.max(0).values.argmax())
