"""Page 9's two views that set maps against the model: cause vs claim (each method's top-k
patches removed, against random patches) and predict-then-reveal (the learner's own patches
first, then every method's), with the patch picker they share with the tokens view."""

import streamlit as st

from xai_core import pipeline
from xai_core.analysis.perturbation import BASELINE_NAMES, BASELINES
from xai_core.figures import intervention_figures as figs
from xai_core.lessons import interventions_lab as lab
from xai_core.lessons.views.p9_interventions import LAB_PAGE
from xai_core.methods import METHODS
from xai_core.studies import cause_vs_claim as claims
from xai_core.studies import interventions as iv

from . import links, literal, ui
from .clicks import apply_chart_click

REMOVE = {"tokens": "drop the tokens", "pixels": "mask the pixels"}


def toggle(patch: int, key: str, most: int | None = None) -> dict:
    """A click on a patch adds it to the list at `key`, or takes it out again."""
    chosen = list(st.session_state.get(key, []))
    if patch in chosen:
        chosen.remove(patch)
    elif most is None or len(chosen) < most:
        chosen.append(patch)
    return {key: chosen}


def patch_picker(model, image, key: str, chosen) -> None:
    grid = claims.patch_grid(model)
    side = model.spec.input_size[0] / grid[0], model.spec.input_size[1] / grid[1]
    ui.show_figure(figs.pick_figure(pipeline.prepare(model, image).model_image, grid, side,
                                    chosen), key=key, on_select="rerun",
                   selection_mode="points")


def method_names(names) -> dict[str, str]:
    return {name: METHODS[name].shown_name for name in names}


def and_list(names: list[str]) -> str:
    """['a', 'b', 'c'] -> 'a, b and c'."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def claims_view(model, image, target, head) -> None:
    choices = ["tokens", "pixels"] if model.spec.family == "vit" else ["pixels"]
    remove = links.choice(st.radio, "Remove a patch by", choices, key="iv_claim_remove",
                          horizontal=True, format_func=REMOVE.get)
    baseline = LAB_PAGE.default("iv_claim_baseline")
    if remove == "pixels":
        baseline = links.choice(st.selectbox, "Masked pixels show", list(BASELINES),
                                key="iv_claim_baseline", default=baseline,
                                format_func=BASELINE_NAMES.get)
    revealed = st.session_state.get("iv_revealed", (None, ()))
    mine = revealed[1] if revealed[0] == model.label else ()  # the picks you revealed: a star
    with st.spinner("Removing each method's top patches and random ones..."), \
            ui.progress_bar() as progress:
        found = claims.cause_vs_claim(model, image, target=target, head=head, removals=remove,
                                      baseline=baseline, learner=mine,
                                      should_stop=ui.stop_check(), progress=progress)
    part, top = found.removals[remove], len(found.ks) - 1
    names = method_names(part.methods)
    shown = links.choices(st.multiselect, "Methods drawn", list(names), key="iv_claim_methods",
                          default=[m for m in LAB_PAGE.default("iv_claim_methods", model)
                                   if m in names], format_func=names.get)
    ui.show_figure(figs.claims_figure(found, remove, {m: names[m] for m in shown}),
                   key="iv_claims")
    k, (low, high) = found.ks[top], part.random_interval()[top]
    beat = [names[m] for m in lab.beating_random(part, top)]
    st.markdown(
        f"**Beating random at k** means that removing the k patches a method ranks highest "
        f"lowers the score more than removing k patches picked at random: at that k its line "
        f"runs above the grey band, the random draws' 95 % interval. At k = {k} random patches "
        f"lower the score by {low:+.4f} to {high:+.4f}; "
        + (f"{and_list(beat)} beat{'s' if len(beat) == 1 else ''} random there"
           if beat else "no method beats random there")
        + f" ({len(beat)} of the {len(names)} methods).")
    if mine and part.learner is not None:
        st.markdown(f"Your {len(mine)} patch{'' if len(mine) == 1 else 'es'} (the star): "
                    f"the score {iv.drop_words(part.learner)} when they were removed.")
    for name, why in found.failed.items():
        st.caption(f"{name} has no map here: {literal.text(why)}")


def predict_view(model, image, target, head) -> None:
    k = links.number(st.slider, "k: how many patches", *LAB_PAGE.bounds("iv_k"), key="iv_k",
                     default=LAB_PAGE.default("iv_k"))
    picked = st.session_state.setdefault("iv_picked", [])
    if len(picked) > k:
        st.session_state["iv_picked"] = picked = picked[:k]
    apply_chart_click("iv_predict_pick", lambda d: toggle(int(d[0]), "iv_picked", most=k))
    picked = st.session_state["iv_picked"]
    st.markdown(f"Before any map: click the **{k}** patches you think the model needs most "
                f"for {literal.text(head.class_names[target])}. Click a patch again to "
                f"unpick it. Picked: {len(picked)} of {k}.")
    patch_picker(model, image, "iv_predict_pick", picked)
    if len(picked) < k:
        return
    if st.button("Reveal", key="iv_reveal", type="primary"):
        st.session_state["iv_revealed"] = (model.label, tuple(picked))
    if st.session_state.get("iv_revealed") != (model.label, tuple(picked)):
        return
    removals = ("tokens", "pixels") if model.spec.family == "vit" else ("pixels",)
    with st.spinner("Removing your patches, each method's and random ones..."), \
            ui.progress_bar() as progress:
        found = claims.cause_vs_claim(model, image, target=target, head=head,
                                      ks=lab.reveal_ks(model, k), removals=removals,
                                      learner=picked, should_stop=ui.stop_check(),
                                      progress=progress)
    rows, index = lab.reveal_rows(found), found.ks.index(k)
    for removal in removals:
        st.markdown(f"**{REMOVE[removal].capitalize()}**: "
                    + lab.reveal_words(found.removals[removal], k, index))
        ui.show_figure(figs.reveal_figure(rows, removal, found.score_kind),
                       key=f"iv_reveal_{removal}")
    names = method_names(found.chosen)
    shares = found.agreement()
    grid = claims.patch_grid(model)
    side = model.spec.input_size[0] / grid[0], model.spec.input_size[1] / grid[1]
    ui.show_figure(figs.choices_figure(
        pipeline.prepare(model, image).model_image, grid, side, picked,
        {f"{names[m]}: {shares[m]:.0%} shared": order[:k].tolist()
         for m, order in found.chosen.items()}), key="iv_choices")
    name, share = found.closest_method()
    st.markdown((f"Your patches (yellow) beside each method's top {k} (outlined). The method "
                 f"that agreed with you most: **{names[name]}** ({share:.0%} of your patches "
                 f"among its top {k})." if share > 0 else
                 f"Your patches (yellow) beside each method's top {k} (outlined): none of "
                 f"the methods put any of your patches among its top {k}.")
                + f" Measure: {claims.OVERLAP}.")
