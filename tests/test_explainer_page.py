"""Page 0 (ViT Explainer) in AppTest: what the page hands its browser component, the
`?tour=N` deep link, a bad deep link, and the random-weight CaiT layout. (Hover, play and
keys run in a real browser: tests/e2e/test_explainer_browser.py.)"""

from apptest_helpers import ENTRY, element_text
from streamlit.testing.v1 import AppTest

import numpy as np
from PIL import Image

from dashboard.explainer.component import KEY, TOUR_STEP_KEY
from dashboard.explainer.tour import TOUR, share_label
from dashboard.state import UPLOAD_CHOICE
from xai_core.images import load_sample
from xai_core.lessons import explainer
from xai_core import pipeline
from xai_core.methods import METHODS
from xai_core.methods.rollout import attention_rollout, auto_start
from xai_core.models import DEFAULT_CNN, get_model

PAGE = "../pages/0_vit_explainer.py"


def open_page(query: dict | None = None, **session_state) -> AppTest:
    app = AppTest.from_file(ENTRY, default_timeout=300)
    for key, value in session_state.items():
        app.session_state[key] = value
    for key, value in (query or {}).items():
        app.query_params[key] = value
    app.run()
    return app.switch_page(PAGE).run()


def component_data(app: AppTest) -> dict:
    components = [e for e in app.get("bidi_component")
                  if e.proto.component_name == "vit_lens.explainer"]
    assert len(components) == 1
    return explainer.decode_message(components[0].proto.bytes)


def test_default_page_sends_overview_last_block_and_tour():
    app = open_page()
    assert not app.exception, app.exception
    data = component_data(app)
    overview = data["overview"]
    assert overview["model"]["id"] == "dinov2-s14" and not overview["model"]["random"]
    blocks = len(overview["blocks"])
    assert data["detail"]["block"] == blocks - 1 == data["initial"]["block"]
    assert data["tour"]["active"] is None and len(data["tour"]["steps"]) == len(TOUR)
    assert data["presentation"] is False
    # rollout frames start where page 4's start=auto starts, on this very image
    model, image = get_model("dinov2-s14"), load_sample("chelsea")
    start = auto_start(METHODS["sinks"](model, image).detail).start
    capture = pipeline.vit_capture(model, image)
    assert overview["rollout"]["blocks"] == attention_rollout(capture, start=start).block_indices
    assert f"{len(TOUR)} steps" in element_text(app, "markdown")


def test_tour_deep_link_opens_that_step_with_its_block():
    app = open_page({"tour": "3"})
    assert not app.exception, app.exception
    data = component_data(app)
    assert data["tour"]["active"] == 3
    assert data["detail"]["block"] == data["tour"]["steps"][2]["block"]


def test_view_link_opens_block_head_patch_and_map_once():
    """A "Copy link" address opens that block, head, pinned patch and map, then leaves the
    address (it would no longer say what is on screen)."""
    link = {"vx_block": "6", "vx_head": "2", "vx_patch": "120", "vx_map": "rollout"}
    app = open_page(link)
    assert not app.exception, app.exception
    data = component_data(app)
    assert data["initial"] == {"block": 6, "stage": "blocks", "head": 2, "patch": 120,
                               "overlay": "rollout"}
    assert data["detail"]["block"] == 6
    assert not set(link) & set(app.query_params)
    mean = component_data(open_page({"vx_head": "mean"}))["initial"]
    assert mean["head"] == -1 and mean["block"] == 11


def test_bad_view_link_names_each_value_and_keeps_the_rest():
    app = open_page({"vx_block": "12", "vx_head": "6", "vx_patch": "7", "vx_map": "gradcam"})
    assert not app.exception, app.exception
    overview = component_data(app)["overview"]
    blocks, heads = len(overview["blocks"]), overview["dims"]["heads"]
    maps = [m for m in explainer.OVERLAYS if "unavailable" not in overview["daam"]
            or m != "daam"]
    # one warning per refused value: the value, and what this model has instead
    warned = {w.value.split("`")[1]: w.value for w in app.warning}
    assert set(warned) == {"12", "6", "gradcam"}
    assert f"0-{blocks - 1}" in warned["12"] and blocks == 12
    assert f"mean or 0-{heads - 1}" in warned["6"] and heads == 6
    assert ", ".join(maps) in warned["gradcam"] and "daam" in maps
    initial = component_data(app)["initial"]
    assert initial == {"block": 11, "stage": "blocks", "patch": 7}


def test_bad_tour_link_says_so_and_still_draws():
    app = open_page({"tour": "999"})
    assert not app.exception, app.exception
    assert f"steps 1-{len(TOUR)}" in element_text(app, "warning")
    assert component_data(app)["tour"]["active"] is None
    assert "tour" not in app.query_params  # the address names no step the page is not on


def test_a_bad_upload_is_said_in_the_main_area():
    """The sidebar's uploader is below the fold on a laptop: the page itself says why the
    file could not be used, instead of asking for an upload."""
    app = AppTest.from_file(ENTRY, default_timeout=300)
    app.session_state["image_choice"] = UPLOAD_CHOICE
    app.run()
    app.sidebar.get("file_uploader")[0].set_value(("notes.png", b"not a picture at all",
                                                    "image/png")).run()
    app = app.switch_page(PAGE).run()
    assert not app.exception, app.exception
    main = [e.value for e in app.main.error]
    assert len(main) == 1 and main[0].startswith("Your file could not be used:"), main
    assert [e.value for e in app.sidebar.error] == []
    assert "Upload an image" not in element_text(app, "info")


def test_a_picture_the_bank_does_not_know_gets_the_cnns_answer_beside_it():
    """DINOv2's k-NN bank of 8 gallery classes calls a noise picture unknown; the page sends
    the sidebar's CNN's ImageNet answer for it, and the tour's prediction step quotes it."""
    noise = Image.fromarray(np.random.default_rng(40).integers(0, 256, (240, 320, 3),
                                                               dtype=np.uint8))
    app = open_page(image_choice=UPLOAD_CHOICE, upload_image=noise)
    assert not app.exception, app.exception
    data = component_data(app)
    assert data["overview"]["prediction"]["open_set"]["known"] is False
    cnn = get_model(DEFAULT_CNN)
    top = pipeline.predict(cnn, noise, topk=1)[0]
    other = data["second_opinion"]
    assert (other["model"], other["label"]) == (cnn.label, top.label)
    assert other["share"] == round(top.probability, 4) and other["classes"] == 1000
    step = next(s for s in data["tour"]["steps"] if s["id"] == "prediction")
    assert f"answers **{top.label}** ({share_label(other['share'])})" in step["text"]
    assert share_label(other["share"]) in step["quotes"]
    known = component_data(open_page())
    assert known["second_opinion"] is None  # the gallery cat: no second opinion needed


def test_presentation_mode_reaches_the_component():
    app = open_page(presentation=True)
    assert component_data(app)["presentation"] is True


def test_random_cait_layout_is_labelled_and_drawn():
    app = open_page(vit_model="cait-s24", vit_random=True)
    assert not app.exception, app.exception
    assert "RANDOM WEIGHTS" in element_text(app, "error")
    data = component_data(app)
    overview = data["overview"]
    assert overview["model"]["random"] and "RANDOM WEIGHTS" in overview["model"]["label"]
    kinds = [b["kind"] for b in overview["blocks"]]
    assert kinds.count("class") == 2 and kinds[-1] == "class"
    assert data["detail"]["nq"] == 1  # the last block is a class-attention block
    assert overview["layout"]["cls_joins_late"] is True


def test_block_reply_sends_only_what_the_browser_lacks():
    """Once the browser reports the overview it holds (its signature) and the blocks it
    keeps, opening another block sends that block's detail only: no overview, no tour."""
    app = open_page()
    first = component_data(app)
    full = len(app.get("bidi_component")[0].proto.bytes)
    holds = {"have": first["signature"], "blocks": [first["detail"]["block"]]}

    app.session_state[KEY] = {"view": {"block": 3, "tour": 0, **holds}}
    app.run()
    reply = component_data(app)
    assert reply["overview"] is None and reply["tour"]["steps"] is None
    assert reply["detail"]["block"] == 3
    assert reply["signature"] == first["signature"]
    model, image = get_model("dinov2-s14"), load_sample("chelsea")
    alone = len(explainer.encode_message({"detail": explainer.block_payload(model, image, 3)}))
    smaller = len(app.get("bidi_component")[0].proto.bytes)
    assert smaller < alone + 2_000  # the detail and a few flags, nothing else
    assert full - smaller > len(explainer.encode_message(
        {"overview": explainer.overview_payload(model, image)})) - 2_000

    # a block the browser keeps already: nothing but flags
    app.session_state[KEY] = {"view": {"block": 3, "tour": 0, "have": first["signature"],
                                       "blocks": [3, first["detail"]["block"]]}}
    app.run()
    assert component_data(app)["detail"] is None
    assert len(app.get("bidi_component")[0].proto.bytes) < 1_000

    # a browser that holds another image's overview gets everything again
    app.session_state[KEY] = {"view": {"block": 3, "tour": 0, "have": "another|image",
                                       "blocks": [3]}}
    app.run()
    again = component_data(app)
    assert again["overview"] is not None and again["detail"]["block"] == 3
    assert len(again["tour"]["steps"]) == len(TOUR)


def test_queries_and_keys_travel_only_while_their_panel_is_in_view():
    """The first screen carries no q and k (half as many bytes as a block's detail);
    they come with the first rerun whose view says the query · key panel is in view, with a
    new block's detail when the panel stays in view, and never twice."""
    app = open_page()
    first = component_data(app)
    last = first["detail"]["block"]
    assert first["vectors"] is None
    model, image = get_model("dinov2-s14"), load_sample("chelsea")
    vectors = explainer.vectors_payload(model, image, last)
    assert len(app.get("bidi_component")[0].proto.bytes) < 0.8 * 2**20
    holds = {"have": first["signature"], "blocks": [last]}

    app.session_state[KEY] = {"view": {"block": last, "tour": 0, **holds, "want_qk": True}}
    app.run()
    reply = component_data(app)
    assert reply["detail"] is None and reply["vectors"]["block"] == last
    for name in ("q", "k"):
        for part in ("codes", "scale"):
            assert (explainer.decode(reply["vectors"][name][part])
                    == explainer.decode(vectors[name][part])).all()

    # kept: nothing again; another block with the panel in view: its detail and vectors
    app.session_state[KEY] = {"view": {"block": last, "tour": 0, **holds, "qk": [last],
                                       "want_qk": True}}
    app.run()
    assert component_data(app)["vectors"] is None
    app.session_state[KEY] = {"view": {"block": 2, "tour": 0, **holds, "qk": [last],
                                       "want_qk": True}}
    app.run()
    reply = component_data(app)
    assert reply["detail"]["block"] == 2 and reply["vectors"]["block"] == 2
    # out of view (or a malformed flag): no vectors
    for flag in (False, "yes", 1):
        app.session_state[KEY] = {"view": {"block": 4, "tour": 0, **holds, "want_qk": flag}}
        app.run()
        reply = component_data(app)
        assert reply["detail"]["block"] == 4 and reply["vectors"] is None


def test_tour_step_kept_in_the_session_is_offered_for_resuming():
    """Back from a deeper page (no ?tour=N), the component is told which step to offer;
    a deep link wins over the saved step."""
    app = open_page(**{TOUR_STEP_KEY: 7})
    data = component_data(app)
    assert data["tour"]["active"] is None and data["tour"]["resume"] == 7
    linked = open_page({"tour": "3"}, **{TOUR_STEP_KEY: 7})
    assert component_data(linked)["tour"]["active"] == 3
    assert component_data(linked)["tour"]["resume"] is None
    fresh = open_page()
    assert component_data(fresh)["tour"]["resume"] is None


def test_tour_opened_by_link_is_offered_for_resuming_after_a_deeper_page():
    """`?tour=9` (a lecture's link) shows step 9 without the browser reporting a step; back
    from a deeper page without the address's step, the Explainer offers to resume at 9,
    as it does for a tour started on the page."""
    app = open_page({"tour": "9"})
    assert component_data(app)["tour"]["active"] == 9
    app.switch_page(f"../pages/{TOUR[8].page}")
    del app.query_params["tour"]  # "Go deeper" opens the page without it
    app.run()
    assert not app.exception, app.exception
    app.switch_page(PAGE).run()
    assert not app.exception, app.exception
    data = component_data(app)
    assert data["tour"]["active"] is None and data["tour"]["resume"] == 9
