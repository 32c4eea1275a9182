"""What a learner tripped on (issue 28): page 4's end block kept when a start is chosen,
a tour opened by link resumed after a deeper page, unknown pictures named as such, page 7's
export reusing the faithfulness run, and what an upload's link and resizing do."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from apptest_helpers import (chart_title, element_text, keyed_chart, numbers, open_app,
                             quoting, show)
from PIL import Image, ImageDraw

from dashboard.explainer.glossary import plain
from dashboard.explainer.tour import share_label
from xai_core.lessons import explainer
from xai_core import pipeline
from xai_core.figures.export import find_browser
from xai_core.images import (SAMPLES, describe_fit, fit_to_model, load_image_file, load_sample,
                             to_model_tensor)
from xai_core.methods import rollout
from xai_core.models import DEFAULT_CNN, get_model
from xai_core.studies.open_set import OpenSet, open_set

ROOT = Path(__file__).resolve().parent.parent


def ok(app):
    assert not app.exception, app.exception
    return app


def rollout_blocks(app) -> list[str]:
    """The first and last block the rollout map's title names."""
    return numbers(chart_title(keyed_chart(app, "p4_rollout")))[:2]


def test_page_4_start_block_0_keeps_the_end_block():
    """Start 0 used to reset End to 0 in the browser: the End slider's range followed the
    start, so each start made a new widget there. The range is fixed now (same widget id)
    and the end moves only when it would lie before the start, with a sentence."""
    capture = pipeline.vit_capture(get_model("dinov2-s14"), load_sample("chelsea"))
    last = len(rollout.rollout_blocks(capture)) - 1  # the last self-attention block
    app = ok(open_app("4_rollout_heads.py"))
    end = app.slider(key="p4_end")
    widget_id, low = end.id, end.min
    assert end.value == last
    app.selectbox(key="p4_start").set_value(0).run()
    ok(app)
    assert app.slider(key="p4_end").value == last and app.slider(key="p4_end").id == widget_id
    assert rollout_blocks(app) == ["0", str(last)]
    assert "End moved" not in element_text(app, "caption")

    app.slider(key="p4_end").set_value(3).run()
    app.selectbox(key="p4_start").set_value(5).run()  # after the end: the end must move
    ok(app)
    assert app.slider(key="p4_end").value == 5 and app.slider(key="p4_end").min == low
    assert rollout_blocks(app) == ["5", "5"]
    assert "End moved" in quoting(app, "caption", "3", "5")  # from block 3 to block 5
    app.selectbox(key="p4_start").set_value(2).run()  # before the end: it stays
    ok(app)
    assert app.slider(key="p4_end").value == 5 and "End moved" not in element_text(app, "caption")


# --- unknown pictures -------------------------------------------------------------------------

def noise_picture() -> Image.Image:
    pixels = np.random.default_rng(0).integers(0, 256, (240, 320, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def text_page() -> Image.Image:
    page = Image.new("RGB", (400, 520), "white")
    draw = ImageDraw.Draw(page)
    for line in range(30):
        draw.text((20, 10 + 16 * line), f"Line {line}: the quick brown fox jumps over it.",
                  fill="black")
    return page


def knn_known(model, picture) -> tuple[bool, float, float]:
    """Oracle: the nearest bank entry's cosine against the 5th percentile of the bank's
    leave-one-out nearest-entry cosines, entry by entry."""
    bank = model.head.bank.features.double().numpy()
    spec = model.spec
    pixels = to_model_tensor(fit_to_model(picture, spec.input_size, spec.crop_pct,
                                          spec.interpolation), spec.mean, spec.std)
    with torch.no_grad():
        feature = model.module(pixels)[0].double().numpy()
    score = max(float(row @ feature / np.linalg.norm(feature)) for row in bank)
    loo = [max(float(bank[i] @ bank[j]) for j in range(len(bank)) if j != i)
           for i in range(len(bank))]
    threshold = float(np.percentile(loo, 5))
    return score >= threshold, score, threshold


def imagenet_known(model, picture) -> tuple[bool, float, float]:
    """Oracle: the top softmax probability against the lowest over the sample gallery."""
    top = lambda p: pipeline.predict(model, p, topk=1)[0].probability  # noqa: E731
    threshold = min(top(load_sample(s)) for s in SAMPLES)
    return top(picture) >= threshold, top(picture), threshold


def with_picture(picture) -> dict:
    return {} if picture is None else {"image_choice": "upload", "upload_image": picture}


@pytest.mark.parametrize("make", [noise_picture, text_page, None], ids=["noise", "text", "gallery"])
def test_unknown_pictures_are_named_on_home_page_0_and_page_7(make):
    picture = make() if make else None
    vit, cnn = get_model("dinov2-s14"), get_model(DEFAULT_CNN)
    shown = picture or load_sample("chelsea")
    vit_known, score, threshold = knn_known(vit, shown)
    cnn_known = imagenet_known(cnn, shown)[0]
    assert vit_known == (make is None)  # the measure separates these three pictures

    # what the pages say is `OpenSet.warning` (worded in test_open_set_wording), with the
    # oracle's numbers
    found = {name: open_set(model, shown) for name, model in (("vit", vit), ("cnn", cnn))}
    assert (found["vit"].known, found["cnn"].known) == (vit_known, cnn_known)
    if not vit_known:
        assert numbers(found["vit"].why())[:2] == [f"{score:.3f}", f"{threshold:.3f}"]
    unknown = [f.warning() for f in found.values() if not f.known]

    home = ok(open_app(**with_picture(picture)))
    candidates = {f.warning() for f in found.values()}
    assert sorted(w.value for w in home.warning if w.value in candidates) == sorted(unknown)

    explainer = ok(open_app("0_vit_explainer.py", **with_picture(picture)))
    assert (found["vit"].warning() in element_text(explainer, "warning")) == (not vit_known)
    data = explainer_data(explainer)
    assert data["overview"]["prediction"]["open_set"]["known"] == vit_known
    step = next(s for s in data["tour"]["steps"] if s["id"] == "prediction")
    top = data["overview"]["prediction"]["top"][0]
    share = share_label(top["probability"])
    assert (found["vit"].why() in plain(step["text"])) == (not vit_known)
    assert (share in step["text"]) == vit_known  # no percentage passed off as an answer

    comparison = ok(open_app("7_comparison.py", timeout=600, **with_picture(picture),
                             cmp_methods_vit=["attention"], cmp_methods_cnn=["gradcam"]))
    notes = [c.value for c in comparison.caption  # one line each, beside the picker
             if any(f.why() in c.value for f in found.values())]
    assert len(notes) == (not vit_known) + (not cnn_known)


def test_open_set_wording():
    """The one wording test of `OpenSet.why` and `OpenSet.warning`, for both kinds of head."""
    knn = OpenSet(score=0.41234, threshold=0.5, head="knn")
    assert knn.why() == ("its nearest memory-bank picture has cosine similarity 0.412, below "
                         "0.500, which 95% of the bank's own pictures reach with their nearest "
                         "neighbour")
    imagenet = OpenSet(score=0.1234, threshold=0.3, head="imagenet")
    assert imagenet.why() == ("the model gives its top class only 12.3%, less than the 30.0% "
                              "it gives even the least clear picture of the sample gallery")
    assert knn.warning() == (
        "**This picture looks like none of what the model knows:** " + knn.why() + ". A "
        "classifier must still name one of its classes, so read its answer as the least "
        "unlike class, not as recognition.")


def explainer_data(app) -> dict:
    found = [e for e in app.get("bidi_component") if e.proto.component_name == "vit_lens.explainer"]
    return explainer.decode_message(found[0].proto.bytes)


def cli_json(*args) -> dict:
    result = subprocess.run([sys.executable, "-m", "xai_core", *args, "--json"], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_predict_json_carries_the_open_set_check(tmp_path):
    path = tmp_path / "noise.png"
    noise_picture().save(path)
    found = cli_json("predict", "--model", "dinov2-s14", "--image", str(path))["open_set"]
    known, score, threshold = knn_known(get_model("dinov2-s14"), load_image_file(path))
    assert found["known"] is known is False
    assert found["score"] == pytest.approx(score, abs=1e-5)
    assert found["threshold"] == pytest.approx(threshold, abs=1e-5)
    coffee = cli_json("predict", "--model", DEFAULT_CNN, "--image", "sample:coffee")["open_set"]
    known, score, threshold = imagenet_known(get_model(DEFAULT_CNN), load_sample("coffee"))
    assert coffee["known"] is known is True
    assert coffee["score"] == pytest.approx(score, abs=1e-6)
    assert coffee["threshold"] == pytest.approx(threshold, abs=1e-6)


# --- page 7: the export reuses the faithfulness run ---------------------------------------------

class ForwardCount:
    """Counts forward calls through the models' modules (every session shares them)."""

    def __init__(self, *models):
        self.calls = 0
        self.handles = [m.module.register_forward_hook(self.count) for m in models]

    def count(self, *_):
        self.calls += 1

    def remove(self):
        for handle in self.handles:
            handle.remove()


def test_page_7_export_and_png_reuse_the_faithfulness_run():
    """Six methods x 4 metrics: more curves than the capture cache holds. They used to push
    one another (and the captures) out, so Export and its PNG ran the whole run again."""
    app = ok(open_app("7_comparison.py", timeout=900, image_choice="coffee",
                      cmp_methods_vit=["attention", "rollout", "gae", "saliency"],
                      cmp_methods_cnn=["gradcam", "saliency"]))
    show(app, "cmp_view", "faith")
    app.number_input(key="cmp_steps").set_value(2)
    app.button(key="cmp_run_metrics").click().run()
    ok(app)
    assert numbers(app.get("progress")[0].proto.text)[0] == "24"  # 6 methods x 4 metrics
    counter = ForwardCount(get_model("dinov2-s14"), get_model(DEFAULT_CNN))
    try:
        show(app, "cmp_view", "export")
        assert counter.calls == 0
        if find_browser() is not None:  # PNG export needs Chromium (kaleido)
            app.button(key="cmp_png_make").click().run()
            ok(app)
            assert any(b.proto.id.endswith("cmp_dl_png") for b in app.get("download_button"))
        assert counter.calls == 0
    finally:
        counter.remove()


# --- an upload: what the model sees, and what a link can carry ----------------------------------

def test_describe_fit_says_what_resizing_does():
    # DINOv2's eval transform: the short side to floor(224 / 0.875) = 256, a 224 centre crop
    tiny = describe_fit((40, 30), (224, 224), 0.875)
    assert f"enlarged {256 / 30:.1f}x" in tiny and "made up" in tiny
    wide = describe_fit((3000, 300), (224, 224), 0.875)
    kept = (224 / (3000 * 256 / 300)) * (224 / 256)  # the crop's share of the resized picture
    assert f"the model sees {kept:.0%} of it" in wide and "enlarged" not in wide
    # squashed whole (crop_pct 1): width x5.6, height x7.47
    squashed = describe_fit((40, 30), (224, 224), 1.0)
    assert f"enlarged {np.sqrt(224 / 40 * 224 / 30):.1f}x" in squashed
    assert f"squeezed {(224 / 30) / (224 / 40):.1f}x sideways" in squashed
    assert describe_fit((224, 224), (224, 224), 1.0) == \
        "The model sees the whole picture at 224x224 pixels."


def test_an_upload_says_what_the_model_sees_and_that_links_cannot_carry_it():
    thumbnail = load_sample("rocket").resize((40, 30))
    app = ok(open_app("0_vit_explainer.py", image_choice="upload", upload_image=thumbnail))
    sidebar = " ".join(c.value for c in app.sidebar.caption)
    spec = get_model("dinov2-s14").spec  # describe_fit is worded in the test above
    assert describe_fit((40, 30), spec.input_size, spec.crop_pct) in sidebar
    assert f"enlarged {256 / 30:.1f}x" in sidebar
    data = explainer_data(app)
    assert data["link"] == {"sample": {"id": "chelsea", "title": SAMPLES["chelsea"].title}}
    assert f"enlarged {256 / 30:.1f}x" in data["tour"]["steps"][1]["text"]
    gallery = ok(open_app("0_vit_explainer.py"))
    assert explainer_data(gallery)["link"] == {"sample": None}
    assert "enlarged" not in " ".join(c.value for c in gallery.sidebar.caption)
    # a link made from an upload, opened elsewhere: no picture, and a word why
    elsewhere = ok(open_app(image_choice="upload"))
    assert elsewhere.session_state["image_choice"] == "upload"  # kept, though no picture
    assert "upload_image" not in elsewhere.session_state
    assert len(elsewhere.info) == 1  # the one note: upload, or pick from the gallery
