"""The ViT Explainer's payload and tour: what the browser gets reconstructs the captured
tensors within the stated quantisation error, for DINOv2 and the random-weight layouts of
a distilled DeiT (two prefix tokens) and CaiT (patch blocks without [CLS], class-attention
blocks); the residual stream it shows adds up; the tour is data naming real controls."""

import base64
import io
import json
import math
import re
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from test_distance import brute_force_mean_pairwise, keras_mean_attention_distance

from dashboard.explainer import tour
from dashboard.explainer.glossary import plain
from dashboard.page_list import PAGES, PAGE_LIST
from xai_core.lessons import explainer, tour_choices
from xai_core import pipeline
from xai_core.capture import transformer_blocks
from xai_core.images import fit_to_model, load_sample, load_upload, model_crop_box
from xai_core.methods import METHODS
from xai_core.methods.rollout import attention_rollout, auto_start
from xai_core.models import get_model

JS = "\n".join(path.read_text() for path in sorted(
    (Path(__file__).resolve().parents[1] / "dashboard" / "static"
     / "explainer" / "component").glob("*.js")))  # the component's modules
F16 = 2.0 ** -11  # float16's relative rounding error


def as_sent(payload: dict) -> dict:
    """The payload exactly as the browser receives it (one binary message), read back."""
    return explainer.decode_message(explainer.encode_message(payload))


def unsigned(item: dict) -> tuple[np.ndarray, np.ndarray]:
    """(dequantised values, per-row scale) of an 8-bit packed map."""
    scale = explainer.decode(item["scale"]).astype(np.float64)
    return explainer.dequantise(explainer.decode(item["codes"]), scale), scale


def packed_bytes(payload) -> int:
    """The bytes of every packed array in a payload."""
    if isinstance(payload, dict):
        if "array" in payload and "dtype" in payload:
            return payload["array"].nbytes
        return sum(packed_bytes(value) for value in payload.values())
    if isinstance(payload, list):
        return sum(packed_bytes(value) for value in payload)
    return 0


def assert_within_8bit(values, item, what):
    got, scale = unsigned(item)
    # (row max)/510 from the 8-bit rounding, plus the float32 rounding of the scale itself
    bound = scale[..., None] * (1 / 510 + 1e-6) + 1e-12
    excess = np.abs(got - values) - bound
    assert excess.max() <= 0, f"{what}: error exceeds (row max)/510 by {excess.max():.3g}"


def assert_within_signed_8bit(values, item, what):
    """Queries or keys as sent (int8 codes, one scale per (head, token) row) against the
    float32 capture: each value within (the captured row's largest |value|)/254, the bound
    QUANTISATION states; the scale is that largest |value| itself."""
    row_max = np.abs(values).max(axis=-1)
    np.testing.assert_array_equal(explainer.decode(item["scale"]), row_max.astype(np.float32),
                                  err_msg=what)
    got = explainer.dequantise(explainer.decode(item["codes"]), explainer.decode(item["scale"]))
    excess = np.abs(got - values) - (row_max[..., None] * (1 / 254 + 1e-6) + 1e-12)
    assert excess.max() <= 0, f"{what}: error exceeds (row max)/254 by {excess.max():.3g}"
    return got


def qk_score_bound(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """The stated bound on q·k (every query with every key, per head) when each value of a
    row is off by at most its row's largest |value|/254: |dq·k + q·dk + dq·dk|."""
    eq, ek = np.abs(q).max(-1) / 254, np.abs(k).max(-1) / 254  # (heads, tokens)
    return (eq[:, :, None] * np.abs(k).sum(-1)[:, None, :]
            + ek[:, None, :] * np.abs(q).sum(-1)[:, :, None]
            + q.shape[-1] * eq[:, :, None] * ek[:, None, :])


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
    start = auto_start(METHODS["sinks"](model, image).detail).start
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
    result = METHODS["daam"](model, image, target=top).detail
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


def test_block_detail_and_vectors_reconstruct_attention_queries_and_keys(case):
    model, image, capture, _ = case
    for index in detail_blocks(capture):
        record = capture.blocks[index]
        detail = as_sent(explainer.block_payload(model, image, index))
        attn = record.acts["attn"][0].double().numpy()
        prefix = record.num_prefix_tokens
        assert (detail["nq"], detail["nk"], detail["prefix"]) == (*attn.shape[1:], prefix)
        assert_within_8bit(attn[..., prefix:], detail["attention"], f"block {index} attention")
        assert_within_f16(attn[..., :prefix], detail["attention"]["prefix"], f"block {index}")
        vectors = as_sent(explainer.vectors_payload(model, image, index))
        assert vectors["block"] == index
        q, k = (record.acts[name][0].double().numpy() for name in ("q", "k"))
        q_sent = assert_within_signed_8bit(q, vectors["q"], f"block {index} q")
        k_sent = assert_within_signed_8bit(k, vectors["k"], f"block {index} k")
        # the q · k panel's dot products, from what was sent, against the capture's
        error = np.abs(q_sent @ k_sent.swapaxes(1, 2) - q @ k.swapaxes(1, 2))
        assert (error <= qk_score_bound(q, k) * (1 + 1e-6) + 1e-9).all(), f"block {index} q·k"
        query_norms = record.acts["q"][0].double().norm(dim=-1).numpy()  # (heads, tokens)
        assert_within_f16(query_norms, detail["q_norms"], f"block {index} query norms")
        assert "q" not in detail and "k" not in detail  # they travel only when wanted
        context = record.acts["context"][0].double().norm(dim=-1).numpy()
        assert_within_f16(context, detail["norms"]["context"], f"block {index} context")


def test_block_detail_says_why_the_length_jumps_at_each_layer_norm(case):
    """The note beside the LayerNorm cards quotes sqrt(width), the norm's ‖γ‖ and the median
    token length before and after it, each recomputed here: the LayerNorm redone by hand
    (mean 0, standard deviation 1 over the channels, then γ and β) gives the captured output."""
    model, image, capture, _ = case
    for index in detail_blocks(capture):
        block = transformer_blocks(model.module)[index][1]
        acts = capture.blocks[index].acts
        x_mid = explainer.residual_stream(block, acts)[1]
        norm = block.norm2
        centred = x_mid - x_mid.mean(-1, keepdim=True)
        by_hand = (centred / (centred.pow(2).mean(-1, keepdim=True) + norm.eps).sqrt()
                   * norm.weight.double() + norm.bias.double())
        torch.testing.assert_close(by_hand, acts["ln2"][0].double(), rtol=1e-4, atol=1e-4)
        note = as_sent(explainer.block_payload(model, image, index))["norm_notes"]["ln2"]
        width = x_mid.shape[-1]
        numbers = [float(n) for n in re.findall(r"(?<![\w√])(\d+(?:\.\d+)?)", note)]
        expected = [width, math.sqrt(width), float(norm.weight.double().norm()),
                    float(by_hand.norm(dim=-1).median()), float(x_mid.norm(dim=-1).median())]
        assert numbers[:3] == [0, 1, width]  # "mean 0 and standard deviation 1 over its 384"
        # three significant figures; the medians of an even count may sit between two tokens
        np.testing.assert_allclose(numbers[3:], expected[1:], rtol=0.03)


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


def test_block_detail_and_vectors_reject_a_block_out_of_range():
    model, image = get_model("dinov2-s14"), load_sample("chelsea")
    for build in (explainer.build_block_detail, explainer.build_block_vectors):
        with pytest.raises(ValueError, match="Block must be 0-11; got 12"):
            build(model, image, 12)


def test_payloads_are_cached_by_content():
    model, image = get_model("dinov2-s14"), load_sample("chelsea")
    assert explainer.overview_payload(model, image) is explainer.overview_payload(model, image)
    assert explainer.block_payload(model, image, 3) is explainer.block_payload(model, image, 3)
    assert explainer.block_payload(model, image, 3) is not explainer.block_payload(model, image, 4)
    assert explainer.vectors_payload(model, image, 3) is explainer.vectors_payload(model, image, 3)
    assert explainer.vectors_payload(model, image, 3) is not explainer.vectors_payload(model, image, 4)
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


def test_signed_quantiser_bound_signs_and_zero_rows():
    values = np.random.default_rng(1).standard_normal((3, 40, 64)) * [[[0.01]], [[1]], [[300]]]
    values[1, 5] = 0.0
    codes, scale = explainer.quantise_signed(values)
    assert codes.dtype == np.int8 and scale.shape == (3, 40)
    np.testing.assert_array_equal(scale, np.abs(values).max(-1).astype(np.float32))
    back = explainer.dequantise(codes, scale)
    assert np.all(np.abs(back - values) <= scale[..., None] / 254 * (1 + 1e-6) + 1e-12)
    assert np.all(back[1, 5] == 0) and np.all(np.sign(back) * np.sign(values) >= 0)
    assert np.abs(codes.astype(int)).max() == 127 and codes.min() >= -127
    # the row's largest |value| comes back exactly (up to float32), its sign kept
    largest = np.abs(values).argmax(-1)[..., None]
    np.testing.assert_allclose(np.take_along_axis(back, largest, -1),
                               np.take_along_axis(values, largest, -1), rtol=1e-7)


# --- the tour -----------------------------------------------------------------------------------

def test_the_switching_steps_are_the_ones_xai_core_declares():
    """Page 0's view (and the gallery warm-up) runs the switches of TOUR_SWITCHES: they are
    exactly the tour's switching steps, with the same block and head choices."""
    switching = {step.id: (step.block, step.head) for step in tour.TOUR if step.switch_off}
    assert switching == tour_choices.TOUR_SWITCHES


def test_tour_is_an_ordered_list_of_steps_naming_real_controls():
    assert isinstance(tour.TOUR, list) and len(tour.TOUR) >= 12
    pages = {name for name, _, _ in PAGE_LIST}
    for number, step in enumerate(tour.TOUR, 1):
        assert isinstance(step, tour.Step)
        assert step.stage in explainer.STAGE_IDS, number
        assert step.overlay in explainer.OVERLAYS, number
        assert step.block in tour_choices.BLOCKS and step.head in tour_choices.HEADS, number
        assert step.patch in tour.PATCHES, number
        assert step.page in pages and step.page[0] in "123456789", number
        assert (PAGES / step.page).exists(), number
        assert step.targets and set(step.targets) <= set(tour.PARTS), number
    titles = [step.title for step in tour.TOUR]
    assert len(set(titles)) == len(titles)
    ids = [step.id for step in tour.TOUR]
    assert len(set(ids)) == len(ids) and ids == tour.STEP_IDS
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
    model, image, capture, overview = case
    steps = tour.resolve_steps(overview, tour.switcher(model, image, None))
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
    tokens_step = next(s for s in steps if s["id"] == "tokens")
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
    steps = {step["title"]: step
             for step in tour.resolve_steps(overview, tour.switcher(model, image, None))}
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


def captured_sink_heads(record) -> dict[int, int]:
    """head -> sink key of every sink head of one block, recomputed from the captured
    attention: the key with the largest mean received attention takes at least half."""
    received = record.acts["attn"][0].double().mean(1)  # (heads, keys)
    score, key = received.max(-1)
    return {h: int(key[h]) for h in range(len(score)) if score[h] >= 0.5}


def test_distance_step_quotes_the_measured_heads(case):
    """The near-and-far step comes after the sink step, draws the first block's nearest
    head that is not a sink head, names each sink head it leaves out, and says how far the
    other heads of the first and last self-attention blocks look, recomputed here from the
    captured attention by the Keras reference formula; it repeats the papers' pattern only
    where the numbers bear it out. (DINOv2 on chelsea: block 0's head 5 sends all of its
    attention to one patch and head 4 over half to [CLS]: both left out.)"""
    model, image, capture, overview = case
    titles = [step.title for step in tour.TOUR]
    assert titles.index("Near and far: how far the heads look") > titles.index("Attention sinks")
    step = {s["title"]: s for s in tour.resolve_steps(overview, tour.switcher(model, image, None))}[
        "Near and far: how far the heads look"]
    text, width = plain(step["text"]), capture.layout.patch_size[0]

    def kept(record) -> tuple[np.ndarray, list[int], dict[int, int]]:
        attention = record.acts["attn"].double().numpy()
        mad = keras_mean_attention_distance(width, attention, record.num_prefix_tokens)[0]
        sinks = captured_sink_heads(record)
        heads = [h for h in range(len(mad)) if h not in sinks] or list(range(len(mad)))
        return mad[heads], heads, sinks

    selfs = [b for b in capture.blocks if b.kind == "self"]
    (first, first_heads, sinks), (last, _, _) = kept(selfs[0]), kept(selfs[-1])
    assert step["block"] == selfs[0].index
    assert step["head"] == first_heads[int(first.argmin())]
    assert re.search(rf"shows head {step['head']} of block {selfs[0].index}\b", text)
    prefix = capture.layout.num_prefix_tokens
    for head, key in sinks.items():  # each left-out head named with its sink key
        named = (f"patch {key - prefix} (row" if key >= prefix
                 else overview["layout"]["prefix_names"][key])
        assert re.search(rf"head {head} \([^)]*{re.escape(named)}", text), (head, named)
    for record, mad in ((selfs[0], first), (selfs[-1], last)):
        low, high = round(mad.min()), round(mad.max())
        said = f"{low}–{high} pixels" if low != high else f"about {low} pixels"
        assert re.search(rf"block {record.index} (look )?{said}", text), (said, text)
    even = brute_force_mean_pairwise(capture.layout.grid, capture.layout.patch_size)
    assert int(re.search(r"spread evenly over the picture would give (\d+) pixels",
                         text).group(1)) == round(even)
    assert ("not here" in text) == (last.min() < first.min() + width)  # a patch: a trend
    if model.spec.id == "dinov2-s14":
        assert sinks == {4: 0, 5: prefix + 3}  # [CLS] and patch 3 (row 0, col 3)


def synthetic_overview(first: list[float], last: list[float], sinks: list[dict]) -> dict:
    """The payload fields the distance sentences read, for two blocks of made-up heads."""
    return {"blocks": [{"index": 0, "label": "Block 0", "kind": "self"},
                       {"index": 1, "label": "Block 1", "kind": "self"}],
            "distance": {"blocks": [0, 1], "mad": [first, last], "reference": 100.0},
            "layout": {"patch": [16, 16]}, "sinks": {"heads": sinks}}


@pytest.mark.parametrize("last, verdict", [([70.0, 90.0], "farther"),
                                           ([35.0, 90.0], "about as far"),
                                           ([10.0, 90.0], "nearer")])
def test_distance_sentence_leaves_sink_heads_out_of_every_number(last, verdict):
    """Block 0's head 2 is a sink into a prefix token: attention there counts no distance,
    so its 5 px would pass for the nearest head. Left out, block 0's nearest is 30 px, and
    block 1's nearest head (the trend is read from one patch, 16 px, apart) is farther,
    about as far, or nearer."""
    sink = {"block": 0, "head": 2, "score": 0.6, "key": "[CLS]", "on_patch": False}
    overview = synthetic_overview([30.0, 80.0, 5.0], last, [sink])
    assert tour.nearest_head(overview, 0) == 0 and tour.kept_heads(overview, 0) == [0, 1]
    text = plain(tour._distance_sentence(overview))
    assert re.search(r"block 0 look 30–80 pixels", text)
    quoted = [int(n) for pair in re.findall(r"\((\d+)(?: and (\d+))? pixels", text)
              for n in pair if n]  # the nearest heads' distances, in brackets
    assert 5 not in quoted and 30 in quoted and int(last[0]) in quoted
    assert ("not here" in text) == (verdict != "farther")
    assert verdict in text
    said = plain(tour._near_head_sentence(overview))
    assert re.search(r"head 0 of block 0", said) and "head 2 (60.0% to [CLS]" in said
    # every head a sink: none is left out (nothing would be left to draw)
    everyone = [dict(sink, head=h) for h in range(3)]
    assert tour.kept_heads(synthetic_overview([30.0, 80.0, 5.0], last, everyone), 0) == [0, 1, 2]


def test_tour_step_is_built_by_keywords_and_asks_for_no_hover():
    """`Step` takes keywords only (nine fields by position were easy to swap); every step
    that asks the learner to point at something says it so that it reads on a touch screen
    too (no bare "hover"); no step cites a rule it does not state (page 4's start=auto)."""
    first = tour.TOUR[0]
    fields = {name: getattr(first, name) for name in first.__dataclass_fields__}
    with pytest.raises(TypeError):
        tour.Step(*fields.values())
    assert tour.Step(**fields) == first
    model, image = get_model("dinov2-s14"), load_sample("chelsea")
    steps = tour.resolve_steps(as_sent(explainer.overview_payload(model, image)),
                               tour.switcher(model, image, None))
    for step in steps:
        assert "hover" not in step["text"].lower(), step["title"]
        assert "page 4's" not in step["text"] and "start=auto" not in step["text"]
    rollout = next(s for s in steps if s["overlay"] == "rollout")
    start = auto_start(METHODS["sinks"](model, image).detail)
    left_out = [entry["block"] for entry in start.left_out]
    assert left_out == [0]  # block 0's head 5 is a sink on a patch
    first_kept = pipeline.vit_capture(model, image).self_attention_blocks()[start.start].index
    assert re.search(rf"starts at block {first_kept}: block 0 is left out", rollout["text"])
    sink_step = 1 + [s["title"] for s in steps].index("Attention sinks")
    assert f"(step {sink_step})" in rollout["text"]


# --- the wire format ----------------------------------------------------------------------------

def test_message_round_trip_is_exact_aligned_and_smaller_than_base64():
    model, image = get_model("dinov2-s14"), load_sample("chelsea")
    detail = explainer.block_payload(model, image, 2)
    vectors = explainer.vectors_payload(model, image, 2)
    blob = explainer.encode_message({"detail": detail, "vectors": vectors, "flag": None,
                                     "text": "ok"})
    back = explainer.decode_message(blob)
    assert back["flag"] is None and back["text"] == "ok"
    for name in ("q", "k"):  # exact: the same bytes, not a re-quantisation
        for part in ("codes", "scale"):
            np.testing.assert_array_equal(explainer.decode(back["vectors"][name][part]),
                                          explainer.decode(vectors[name][part]))
    codes = back["detail"]["attention"]["codes"]["array"]
    np.testing.assert_array_equal(codes, detail["attention"]["codes"]["array"])
    # every array starts on an 8-byte boundary of the message, so the browser views it in
    # place (Float32Array needs 4); the header says where
    (length,) = struct.unpack_from("<I", blob, 4)
    assert blob[:4] == b"VXB1" and (8 + length) % 8 == 0
    header = json.loads(blob[8:8 + length])
    offsets = [header["vectors"][n][part]["offset"]
               for n in ("q", "k") for part in ("codes", "scale")]
    offsets.append(header["detail"]["q_norms"]["offset"])
    assert all(offset % 8 == 0 for offset in offsets)
    # raw bytes: about 3/4 of the same arrays as base64 text
    raw = sum(packed_bytes(part) for part in (detail, vectors))
    assert len(blob) < raw * 1.01 + 4_000
    assert len(blob) < 0.78 * len(base64.b64encode(b"\0" * raw))
    with pytest.raises(ValueError, match="not an Explainer message"):
        explainer.decode_message(b"JSON" + blob[4:])


# --- the learner's picture ----------------------------------------------------------------------

def coordinate_picture(width: int, height: int) -> Image.Image:
    """Each pixel's red = its column, green = its row (scaled to 0-255): where a pixel of
    the model's input came from can be read off its colour."""
    x = np.linspace(0, 255, width)[None, :].repeat(height, 0)
    y = np.linspace(0, 255, height)[:, None].repeat(width, 1)
    return Image.fromarray(np.stack([x, y, np.zeros_like(x)], -1).round().astype(np.uint8))


@pytest.mark.parametrize("size, crop_pct", [((450, 600), 0.875), ((1024, 768), 0.875),
                                            ((451, 300), 1.0), ((300, 300), 0.9)])
def test_crop_box_is_where_the_model_input_comes_from(size, crop_pct):
    """Oracle: the colours at the model input's edges name the original pixels there."""
    picture = coordinate_picture(*size)
    fitted = np.asarray(fit_to_model(picture, (224, 224), crop_pct, "bilinear")).astype(float)
    left, top, right, bottom = model_crop_box(size, (224, 224), crop_pct)
    width, height = size
    seen_left = fitted[112, 0, 0] / 255 * (width - 1)
    seen_right = fitted[112, -1, 0] / 255 * (width - 1)
    seen_top = fitted[0, 112, 1] / 255 * (height - 1)
    seen_bottom = fitted[-1, 112, 1] / 255 * (height - 1)
    pixel_x, pixel_y = (right - left) / 224, (bottom - top) / 224  # one input pixel, in originals
    assert seen_left == pytest.approx(left + pixel_x / 2, abs=pixel_x + 2)
    assert seen_right == pytest.approx(right - pixel_x / 2, abs=pixel_x + 2)
    assert seen_top == pytest.approx(top + pixel_y / 2, abs=pixel_y + 2)
    assert seen_bottom == pytest.approx(bottom - pixel_y / 2, abs=pixel_y + 2)
    if crop_pct == 1:
        assert (left, top, right, bottom) == (0, 0, width, height)


def test_a_big_upload_keeps_its_source_size_and_the_overview_says_so(tmp_path):
    buffer = io.BytesIO()
    coordinate_picture(4000, 3000).save(buffer, format="JPEG", quality=90)
    photo = load_upload(buffer.getvalue())
    assert photo.size == (1024, 768) and photo.info["source_size"] == (4000, 3000)
    model = get_model("dinov2-s14")
    overview = as_sent(explainer.overview_payload(model, photo))
    picture = overview["picture"]
    assert picture["size"] == [1024, 768] and picture["source"] == [4000, 3000]
    left, top, right, bottom = picture["crop"]
    assert picture["kept"] == pytest.approx((right - left) * (bottom - top) / (1024 * 768),
                                            abs=1e-4)
    step = next(s for s in tour.resolve_steps(overview, tour.switcher(model, photo, None))
                if s["id"] == "pixels")
    assert "Your 4000×3000 photo was shrunk to 1024×768" in step["text"]
    assert f"covering {tour.share_label(picture['kept'])} of the picture" in step["text"]


# --- sentences that must stay true of the model on screen ---------------------------------------

def test_growth_sentence_reads_the_median_patch_norms(case):
    """The residual step's numbers are the medians of the patch tokens (not [CLS]) before
    the first block and after the last block that still has patches, with the right verb."""
    model, image, capture, overview = case
    steps = {s["title"]: s for s in tour.resolve_steps(overview, tour.switcher(model, image, None))}
    text = steps["The residual stream"]["text"]
    patches = capture.layout.num_patches
    last = [r for r in capture.blocks if r.acts["out"].shape[1] >= patches][-1]
    after = float(np.median(last.acts["out"][0, -patches:].double().norm(dim=-1).numpy()))
    block0 = transformer_blocks(model.module)[0][1]
    x_in = explainer.residual_stream(block0, capture.blocks[0].acts)[0]
    before = float(np.median(x_in[-patches:].norm(dim=-1).numpy()))
    # three significant figures of float16 norms: within 0.6% of the float64 medians
    if abs(after - before) <= 0.02 * before:
        said = re.search(r"stays at about (\d+(?:\.\d+)?)", text)
        assert float(said.group(1)) == pytest.approx(before, rel=6e-3)
    else:
        verb = "grows" if after > before else "shrinks"
        said = re.search(rf"{verb} from (\d+(?:\.\d+)?) to (\d+(?:\.\d+)?)", text)
        assert said, text
        assert float(said.group(1)) == pytest.approx(before, rel=6e-3)
        assert float(said.group(2)) == pytest.approx(after, rel=6e-3)
    assert f"output of block {last.index}" in text
    assert steps["The residual stream"]["patch"] is not None  # a patch is marked, as said


def test_random_weights_and_self_matches_are_said_where_the_answer_is(case):
    model, image, _, overview = case
    steps = {s["title"]: s["text"]
             for s in tour.resolve_steps(overview, tour.switcher(model, image, None))}
    random_note = "The weights are random, so this answer means nothing."
    assert (random_note in steps["The prediction"]) == model.random_weights
    assert ("answer means nothing" in steps["One picture in, one answer out"]) == \
        model.random_weights
    neighbours = overview["prediction"].get("neighbours") or []
    self_match = not model.random_weights and neighbours and neighbours[0]["similarity"] > 0.999
    assert ("no fair test" in steps["The prediction"]) == bool(self_match)
    if model.spec.id == "dinov2-s14":  # chelsea is in the gallery the bank was built from
        assert self_match
