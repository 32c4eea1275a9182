"""The ViT Explainer's browser component (Streamlit components v2) and its Python glue.

Plain CSS and JavaScript, no build step, no library, no request outside the app: the code,
the ES modules in dashboard/static/explainer/component/ (entry main.js), is served from
app/static/ under a hash of the whole folder and kept by the browser; what Streamlit sends with
each rerun is the CSS and a loader that fetches and links them (dashboard/static/explainer/host/). The component draws the overview, hover linking and animation in
the browser; it talks to Python only through its `view` state (the opened block and tour
step: one rerun of the fragment below) and its `navigate` trigger (the tour's "go deeper"
button).

Each rerun sends only what the browser lacks: the `view` state also names the overview
the browser holds (its signature), the blocks whose detail it keeps and those whose
queries and keys it keeps, so opening another block or moving through the tour sends that
block's detail at most, never the overview and the tour again. A block's queries and keys
(as many bytes as its detail) travel only while its query · key panel is in view
(`want_qk`). The message is binary (`explainer.encode_message`).
"""

from __future__ import annotations

import json
from pathlib import Path

import streamlit as st

from dashboard import assets, literal, state, ui
from dashboard.explainer.tour import TOUR, resolve_steps, step_from_query, switcher
from dashboard.page_list import PAGE_LIST, PAGES
from xai_core.lessons import explainer
from xai_core import pipeline
from xai_core.infra.cache import BoundedCache, cache_key
from xai_core.infra.faults import ModelOutOfMemory, return_freed_memory
from xai_core.models import ModelUnavailableError, availability, get_model

KEY = "vit_explainer"
# The step the learner is on (or left the tour at, e.g. for a deeper page): this session's
# own, so the Explainer can offer to resume when they come back.
TOUR_STEP_KEY = "explainer_tour_step"

CODE = assets.COMPONENT  # the modules' folder in dashboard/static/


def loader_js() -> str:
    """The linker, then the loader with the modules' folder, its version and the modules in
    load order."""
    return assets.linker_js() + ((assets.HOSTS / "loader.js").read_text(encoding="utf-8")
            .replace("__FOLDER__", f"app/static/{CODE}/")
            .replace("__VERSION__", assets.folder_version(CODE))
            .replace("__MODULES__", json.dumps(assets.module_order(CODE))))


_mount = st.components.v2.component(
    "vit_lens.explainer",
    html="",
    css=(assets.STATIC / CODE / "explainer.css").read_text(encoding="utf-8"),
    js=loader_js(),
)


def _component_value(name: str):
    return (st.session_state.get(KEY) or {}).get(name)


def shown_block() -> int | None:
    """The block the Explainer shows (its head chips), as the browser last reported it."""
    return _view().get("block")


def _view() -> dict:
    """What the browser reported, read field by field as `explainer.VIEW_FIELDS` declares
    them: the block and tour step on screen, the signature of the overview it holds
    ("have"), the blocks whose detail ("blocks") and queries and keys ("qk") it keeps,
    whether the query · key panel is in view ("want_qk"), the heads switched off and whether
    the learner dismissed the tour. Anything else, or of another kind, is ignored: an "int"
    or "text" field is left out, a "flag" is false, "ints" and "pairs" keep their own."""
    view = _component_value("view")
    if not isinstance(view, dict):
        return {}
    read = {name: _READ[kind](view.get(name)) for name, kind in explainer.VIEW_FIELDS.items()}
    return {name: value for name, value in read.items() if value is not None}


MAX_HEADS_OFF = 64  # a link or a script cannot make one rerun switch off more


def switched_off(value) -> list[tuple[int, int]]:
    """The (block, head) pairs the learner switched off, as the browser reported them:
    pairs of two ints, sorted, each once; anything else is ignored (the core checks the
    range and says so)."""
    if not isinstance(value, list):
        return []
    pairs = {tuple(pair) for pair in value[:MAX_HEADS_OFF] if isinstance(pair, list)
             and len(pair) == 2 and all(type(n) is int for n in pair)}
    return sorted(pairs)


# how each kind of view field is read (None: left out)
_READ = {
    "int": lambda value: value if type(value) is int else None,
    "text": lambda value: value if isinstance(value, str) else None,
    "ints": lambda value: ({n for n in value if type(n) is int}
                           if isinstance(value, list) else None),
    "pairs": switched_off,
    "flag": lambda value: value is True,
}


def _on_view() -> None:
    """Keep `?tour=N` equal to the step on screen (a deep link), and the step in the
    session until the learner closes the tour."""
    view = _view()
    step = view.get("tour")
    if step and 1 <= step <= len(TOUR):
        st.query_params["tour"] = str(step)
        st.session_state[TOUR_STEP_KEY] = step
        return
    if "tour" in st.query_params:
        del st.query_params["tour"]
    if view.get("dismissed"):
        st.session_state.pop(TOUR_STEP_KEY, None)


def _navigate() -> None:
    target = _component_value("navigate")
    if target in {name for name, _, _ in PAGE_LIST}:
        st.session_state["explainer_goto"] = target


def linked_view(overview: dict) -> dict:
    """The view a `?vx_block=6&vx_head=2&vx_patch=120&vx_map=rollout` link names (the
    component's "Copy link" makes one): block, head (an index, or `mean`), pinned patch and
    map, as the component's state. Read once, then removed from the address (it would no
    longer say what is on screen); a value this model cannot take is named in a warning and
    left out."""
    maps = [m for m in explainer.OVERLAYS if m != "daam" or "unavailable" not in overview["daam"]]
    allowed = {"block": [str(b) for b in range(len(overview["blocks"]))],
               "head": ["mean"] + [str(h) for h in range(overview["dims"]["heads"])],
               "patch": [str(p) for p in range(overview["layout"]["patches"])],
               "map": maps}
    linked = {}
    for name, values in allowed.items():
        raw = st.query_params.get(f"vx_{name}")
        if raw is None:
            continue
        del st.query_params[f"vx_{name}"]
        if name == "map" and raw in values:
            linked["overlay"] = raw
        elif raw in values:
            linked[name] = -1 if raw == "mean" else int(raw)
        else:
            have = ", ".join(maps) if name == "map" else f"{values[0]}-{values[-1]}".replace(
                "mean-", "mean or 0-")
            plural = "patches" if name == "patch" else f"{name}s"
            st.warning(f"The link asks for {name} {literal.code(raw)}, which is not one here "
                       f"({plural}: {have}); it is left out.")
    return linked


def signature(model, image, head) -> str:
    """What the overview depends on: model, weights, image content and head."""
    return "|".join([model.spec.id, str(model.random_weights),
                     pipeline.prepare(model, image).sha256[:16], head.fingerprint()])


def component_data(model, image, head) -> bytes:
    """The message for the component: the overview and the tour (unless the browser holds
    them), the shown block's detail (unless it keeps it) and its queries and keys (when
    their panel is in view and it lacks them), the step of a `?tour=N` link or the one to
    offer resuming, and the presentation flag."""
    overview = explainer.overview_payload(model, image, head)
    step, problem = step_from_query(st.query_params.get("tour"))
    if problem:  # said once; the address keeps no step the page is not on
        st.warning(problem)
        del st.query_params["tour"]
    if step:  # a tour opened by link is resumed after a deeper page, as one started here
        st.session_state[TOUR_STEP_KEY] = step
    view, sig = _view(), signature(model, image, head)
    holds = view.get("have") == sig
    switch = switcher(model, image, head)
    other = second_opinion(overview, image)
    steps = None if holds else resolve_steps(overview, switch, second_opinion=other)
    last = len(overview["blocks"]) - 1
    linked = linked_view(overview)
    block = view.get("block", linked.get("block"))
    if block is None or not 0 <= block <= last:
        block = (steps or resolve_steps(overview, switch, second_opinion=other))[step - 1][
            "block"] if step else last
    kept = holds and block in view.get("blocks", ())
    vectors = view.get("want_qk", False) and not (holds and block in view.get("qk", ()))
    saved = st.session_state.get(TOUR_STEP_KEY)
    off = view.get("off")
    return explainer.encode_message(explainer.message(
        signature=sig,
        presentation=state.selection().presentation,
        overview=None if holds else overview,
        detail=None if kept else explainer.block_payload(model, image, block),
        vectors=explainer.vectors_payload(model, image, block) if vectors else None,
        tour={"steps": steps, "active": step,
              "resume": saved if not step and saved in range(1, len(TOUR) + 1) else None},
        initial={**linked, "block": block, "stage": "blocks"},
        link=link_picture(),
        second_opinion=other,
        # the heads switched off: the model run again without them (none: nothing sent)
        switch={"live": True,
                "result": explainer.head_switch(model, image, head, off) if off else None},
    ))


def second_opinion(overview: dict, image) -> dict | None:
    """The sidebar's CNN's ImageNet answer, shown beside the k-NN vote for a picture the
    k-NN bank knows nothing like (a bank of a few classes calls most photos unknown; a
    model trained on 1000 classes gives the learner a fair comparison). None for a known
    picture, another head, random weights, or a CNN that cannot load."""
    prediction = overview["prediction"]
    if prediction["head"] != "knn" or prediction["open_set"]["known"] or overview["model"]["random"]:
        return None
    chosen = state.selection()
    if chosen.cnn_random or not availability(chosen.cnn_id).available:
        return None
    try:
        cnn = get_model(chosen.cnn_id)
    except (ModelUnavailableError, ModelOutOfMemory):
        return None
    if cnn.head is None or cnn.head.kind != "imagenet":
        return None
    top = pipeline.predict(cnn, image, topk=1)[0]
    return {"model": cnn.label, "label": top.label, "share": round(top.probability, 4),
            "classes": len(cnn.head.class_names)}


def link_picture() -> dict:
    """What "Copy link" must know about the picture: an upload stays on this server, so a
    link made from it names a sample instead (and the component says so)."""
    if state.selection().image_choice != state.UPLOAD_CHOICE:
        return {"sample": None}
    return {"sample": {"id": state.DEFAULT_IMAGE, "title": state.image_title(state.DEFAULT_IMAGE)}}


@st.fragment
def explainer_view(model, image, head) -> None:
    """The component in a fragment: opening a block or moving through the tour reruns
    only this, not the page."""
    with ui.friendly_errors():
        _mount(key=KEY, data=component_data(model, image, head),
               on_view_change=_on_view, on_navigate_change=_navigate)
    goto = st.session_state.pop("explainer_goto", None)
    if goto:
        st.switch_page(PAGES / goto)


LESSON_KEY = "explainer_lesson"  # (signature, file): this session's last export
# Built lessons, shared by every session (20 students exporting the gallery's cat get one
# build and one copy, not 20 of each): a few MB each, the last few kept
LESSONS = BoundedCache(4, 160 * 2**20)


def _lesson_key(model, image, head, title: str) -> tuple:
    return cache_key("lesson-file", model, title, image=pipeline.prepare(model, image).sha256,
                     head=head)


def _built_lesson(model, image, head, title: str, progress=None) -> bytes:
    """The lesson file of this model and picture, built once for every session (and again
    only if it has left `LESSONS`); the memory its building used is given back after."""
    from dashboard.explainer.lesson_export import LessonImage, build_lesson

    def build() -> bytes:
        try:
            return build_lesson(model, [LessonImage(title, image)], head=head, progress=progress)
        finally:
            return_freed_memory()
    return LESSONS.get_or_compute(_lesson_key(model, image, head, title), build)


@st.fragment
def lesson_export(model, image, head) -> None:
    """"Export lesson": the Explainer for this model and picture as one HTML file that opens
    offline (dashboard/explainer/lesson_export.py), built on click under a progress bar, then
    offered for download. The file is built once for every session asking for the same model and
    picture (`LESSONS`) and the sessions hold that one object. The button is given the file
    itself, not Streamlit's deferred download: a deferred file is referenced by no session once
    made, so any two script runs that end in the process (another student's page, a class's
    polling) delete it, and 2 of 20 students exporting at once got HTTP 404 for their download.
    Held until the session shows another model or picture, or ends."""
    sig = signature(model, image, head)
    title = state.image_title(state.selection().image_choice)
    if st.button("Export lesson", key="explainer_lesson_make",
                 help="One HTML file with this model and picture, every block and the tour: "
                      "it opens in a browser with no server and no network."):
        bar = st.progress(0.0, text="Packing the lesson")
        with ui.friendly_errors():
            st.session_state[LESSON_KEY] = (sig, _built_lesson(
                model, image, head, title,
                progress=lambda done, what: bar.progress(done, text=literal.text(what))))
        bar.empty()
    held = st.session_state.get(LESSON_KEY)
    if held and held[0] != sig:  # another model or picture now: the old file goes
        del st.session_state[LESSON_KEY]
    elif held:
        st.download_button(f"Download the lesson ({len(held[1]) / 1e6:.1f} MB)", data=held[1],
                           file_name=f"vit-lens-lesson-{model.spec.id}.html", mime="text/html",
                           on_click="ignore", key="explainer_lesson_download")

