"""Page 7: every registered method on one image - theory, measured cost, faithfulness,
agreement, localisation, export. Layout and words only: the numbers come from
xai_core.lessons.comparison (one `Comparison` object every view reads) and xai_core.benchmark."""

import pandas as pd
import streamlit as st

from dashboard import benchmark_view, comparison_parts, links, literal, state, ui
from xai_core.capture import shared_forwards
from xai_core.lessons.comparison import (BOX_NAMES, DEFAULT_TOP_K_PERCENT, FAMILY_LABEL, Comparison,
                                         ExportRequest, FaithSettings, default_box)
from xai_core.figures.export import ExportUnavailable, comparison_png, find_browser
from xai_core.figures.matrices import agreement_heatmap
from xai_core.figures.overlays import localisation_figure
from xai_core.infra import budget
from xai_core.methods import METHODS, THEORY_ROWS
from xai_core.lessons.views.p7_comparison import COMPARISON
from xai_core.analysis.perturbation import BASELINE_NAMES, BASELINES
from xai_core.metrics.stability import is_seeded

STABILITY, LOCALISE, FAITH, TOP_K = "cmp_stability", "cmp_localise", "cmp_faith", "cmp_topk"

st.title("7 · Comparison matrix")
st.markdown(
    "Every explanation method the app knows, run on **the same image**, side by side. First "
    "what each method is in principle, then what it actually cost on this image, then the "
    "maps themselves, and finally three ways to ask whether a map deserves trust: does the "
    "model's score collapse when the highlighted pixels go (faithfulness), do the methods "
    "agree with each other (agreement), and does the map land on the object (localisation).")


def theory_view(cmp: Comparison) -> None:
    """Sections 1 and 2, the first lesson: what each method is, and its map."""
    st.header("1 · The theory matrix")
    st.markdown(
        "One column per method you chose. Rows describe each method in principle, then the "
        "options it ran with; the last two rows are **measured on this image**: "
        "hooks on the model count the forward and backward passes each method actually ran, "
        "and a clock times it. A method that finds its capture already computed (by another "
        "method or another page) runs **0 new passes** - one backward pass serves many "
        "methods. The forward pass that made the ViT's prediction above is reused too, so on "
        "a new image its gradient methods run only their backward passes.")
    ran = {r.name: r for _, r in cmp.ok_runs()}
    chosen = {r.name for s in cmp.sections for r in s.runs}
    table = {name: [*info.theory.rows().values(),
                    ran[name].options_text() if name in ran else "-",
                    ran[name].cost_text() if name in ran
                    else "did not run here (see the warning above)",
                    "x".join(map(str, ran[name].map.shape)) if name in ran else "-"]
             for name, info in METHODS.items() if name in chosen}
    rows = [*THEORY_ROWS, "Options here", "Measured here: passes, wall time",
            "Measured here: map grid"]
    measure = st.checkbox(
        "Measure seed stability", key=STABILITY,
        help="Runs every method that draws random numbers (KernelSHAP, SmoothGrad...) at two "
             "more seeds and reports the mean Spearman rank correlation of the three maps: "
             "1 = the seed changes nothing. Costs two more runs of each such method.")
    stability = {}
    if measure:
        with ui.friendly_errors():
            stability = cmp.stabilities(ui.stop_check())
        rows.append("Measured here: seed stability")
        for name in table:
            table[name].append(stability_text(stability, name))
    ui.text_table(pd.DataFrame(table, index=rows), wide="theory")

    st.header("2 · The practical matrix")
    st.markdown(
        "Each map is scaled to its own minimum (0) and maximum (1) and all share one colour "
        "scale: raw values differ by orders of magnitude between methods, so compare shapes "
        "and ranks, not heights.")
    figure = cmp.matrix_figure(stability)
    if figure is not None:
        ui.show_figure(figure, key="cmp_matrix")
    for (family, label), rho in cmp.unstable(stability).items():
        st.warning(f"**{FAMILY_LABEL[family]} {label}** is greyed out: this map mostly reflects "
                   f"its random samples (seed-to-seed rank correlation {rho:.2f}); raise samples.")
    for section, run in cmp.ok_runs():
        if run.name == "integrated-gradients":
            comparison_parts.completeness_note(section, run)


def stability_text(stability: dict, name: str) -> str:
    """One method's seed stability on each model it ran on, in words."""
    if not is_seeded(METHODS[name]):
        return "1 (no random draws)"
    return " · ".join(f"{FAMILY_LABEL[family]}: " + ("undefined (a constant map)" if rho is None
                                                    else f"{rho:.2f}")
                      for (family, method), rho in stability.items() if method == name) or "-"


def faithfulness_view(cmp: Comparison) -> None:
    st.header("3 · Faithfulness: deletion and insertion")
    st.markdown(
        "**Deletion** removes the pixels a map ranks highest first, in equal steps, and records "
        "the class score; a faithful map makes the score fall fast (**low** area under the "
        "curve). **Insertion** starts from the baseline and puts the top pixels back first; a "
        "faithful map makes the score rise fast (**high** area). Pixels are ranked by the map "
        "resized (bilinear) to the model input. **Positive / negative perturbation** (Chefer) "
        "blanks whole map cells - patches for a ViT - from the most (positive: low area is "
        "good) or the least (negative: high area is good) relevant, from 0 % to (N-1)/N.")
    for section in cmp.sections:
        st.caption(f"{cmp.family(section)} class score: **{section.score_kind}** of "
                   f"“{literal.text(section.target_label)}”.")
    left, middle, right = st.columns(3)
    defaults = FaithSettings()
    baseline = left.selectbox("Baseline", BASELINES, BASELINES.index(defaults.baseline),
                              key="cmp_baseline", format_func=lambda b: BASELINE_NAMES[b])
    low, high = COMPARISON.bounds("cmp_steps")
    most = budget.most_curve_steps(high)  # one curve is one request of the server's budget
    steps = middle.number_input("Steps", min_value=low, max_value=most,
                                value=min(defaults.steps, most), key="cmp_steps",
                                help="Each step is one perturbed image through the model, "
                                     "evaluated in batches.")
    perturb = right.checkbox("Also positive/negative perturbation", value=defaults.perturb,
                             key="cmp_perturb")
    if st.button("Run faithfulness metrics", key="cmp_run_metrics", type="primary"):
        st.session_state[FAITH] = FaithSettings(baseline, int(steps), bool(perturb))
    faith = st.session_state.get(FAITH)
    if not faith:
        st.info("Choose a baseline and a step count, then press **Run faithfulness metrics** "
                "(each deletion or insertion curve runs steps - 1 perturbed images through "
                "the model; the untouched image and the pure baseline, the same for every "
                "map, run once per image and baseline; results are cached).")
        return
    bar = st.progress(0.0, text="Perturbing...")
    with ui.friendly_errors():
        count = cmp.faithfulness(faith, lambda done, what: bar.progress(done, text=what))
        bar.progress(1.0, text=f"Done: {count} curves, {faith.steps} steps, baseline "
                               f"{faith.baseline}.")
    for section, figure in zip([s for s in cmp.sections if s.curves], cmp.curve_figures()):
        ui.show_figure(figure, key=f"cmp_curves_{section.model.spec.family}")
        st.dataframe(pd.DataFrame({metric: {method: curve.auc for (method, m), curve
                                            in section.curves.items() if m == metric}
                                   for metric in faith.metrics}).style.format("{:.4f}"),
                     width="stretch")
        any_curve = next(iter(section.curves.values()))
        st.caption(f"Full image score {any_curve.full_score:.4f}; pure baseline score "
                   f"{any_curve.baseline_score:.4f}. AUC = trapezoid over the fraction "
                   "perturbed (0 to 1), in the score's units.")


@st.fragment
def agreement_part(cmp: Comparison) -> None:
    """The two agreement heatmaps; the top-k slider reruns only this part."""
    percent = links.number(st.slider, "Top-k % for the overlap", *COMPARISON.bounds(TOP_K),
                           key=TOP_K, default=COMPARISON.default(TOP_K))
    numbers = cmp.agreement(percent)
    st.markdown(
        "**Spearman ρ** compares the full ranking of cells (1 = same order, -1 = reversed). "
        f"**Top-{percent} % overlap** is the share of one map's top cells that are also the "
        "other's top cells. Maps on different grids are compared on the finer grid (bilinear).")
    if len({(s.model.spec.input_size, s.model.spec.crop_pct) for s in cmp.sections}) > 1:
        st.warning("The two models crop the image differently, so ViT-vs-CNN cells do not "
                   "cover exactly the same pixels.")
    left, right = st.columns(2)
    with left:
        ui.show_figure(agreement_heatmap(numbers["names"], numbers["spearman"],
                                         "Spearman rank correlation"), key="cmp_spearman")
    with right:
        ui.show_figure(agreement_heatmap(numbers["names"], numbers["top_k_overlap"],
                                         f"Top-{percent} % overlap", 0, 1, "Viridis"),
                       key="cmp_overlap")


def agreement_view(cmp: Comparison) -> None:
    st.header("4 · Do the methods agree?")
    if len(cmp.maps()) >= 2:
        agreement_part(cmp)
    else:
        st.info("Choose at least two methods to compare their maps.")
    st.subheader("Attention vs gradient")
    st.markdown(
        "Is a patch that [CLS] attends to also a patch the score is sensitive to? Each point is "
        "one patch: x = last-block [CLS] attention (heads averaged), y = the size of the "
        "gradient of the class score with respect to that patch's pixels. A weak correlation "
        "is the 'attention is not explanation' warning: attention shows where information "
        "is read from, not what the decision depends on.")
    with ui.friendly_errors():
        if cmp.attention_pair is not None:
            ui.show_figure(cmp.scatter_figure(), key="cmp_scatter")
        else:
            st.info("Needs a ViT whose attention and gradient share one patch grid.")


def typed_box(first) -> list[int]:
    """The box (x0, y0, x1, y1) on the first model's input: typed in the localisation view,
    else its default; kept across views."""
    return [st.session_state.get(f"cmp_box_{name}", value)
            for name, value in zip(BOX_NAMES, default_box(first.width, first.height))]


@st.fragment
def localisation_view(cmp: Comparison) -> None:
    """The box and every map's box; typing a coordinate reruns only this part."""
    st.header("5 · Localisation (optional)")
    if not links.flag(st.checkbox, "Score the maps against a box I give", key=LOCALISE):
        return
    first = cmp.first_input()
    st.markdown(
        f"Type the object's box in pixels of the model's {first.width}x{first.height} input "
        "(x to the right, y down; x1, y1 excluded). Each map is resized to the input, "
        "binarised at **0.1 x its maximum**, and the tight box around its **largest connected "
        "region** is compared with yours by **IoU** (correct when IoU >= 0.5, the "
        "localisation protocol of the DAAM paper, Liao et al.). The **pointing game** asks "
        "only whether the map's peak falls in your box (15-pixel tolerance).")
    columns, limits = st.columns(4), (first.width, first.height) * 2
    box = [links.number(column.number_input, name, 0, limit, key=f"cmp_box_{name}",
                        default=default) for column, name, limit, default
           in zip(columns, BOX_NAMES, limits, default_box(first.width, first.height))]
    with ui.friendly_errors():
        rows = []
        for section, found in cmp.localise(box):
            results, family = found["results"], cmp.family(section)
            rows += [{"model": family, "method": name, "map box (x0, y0, x1, y1)": str(loc.box),
                      "IoU": round(loc.iou, 3), "IoU >= 0.5": loc.correct,
                      "pointing game": loc.pointing_hit} for name, loc in results.items()]
            ui.show_figure(localisation_figure(
                cmp.model_input(section), found["box"], {n: loc.box for n, loc in results.items()},
                {n: loc.peak for n, loc in results.items()},
                f"{family}: your box (dashed), each map's box and peak (x)"),
                key=f"cmp_loc_{section.model.spec.family}")
        if rows:
            st.dataframe(pd.DataFrame(rows), width="stretch", hide_index=True)


def export_view(cmp: Comparison) -> None:
    """Everything the other views computed (each cached), as files."""
    st.header("6 · Export")
    st.markdown(
        "The raw maps, the faithfulness curves you ran, the agreement and the localisation "
        "against your box (when set), with every setting needed to reproduce them.")
    request = ExportRequest(st.session_state.get(FAITH),
                            st.session_state.get(TOP_K, DEFAULT_TOP_K_PERCENT),
                            typed_box(cmp.first_input()) if st.session_state.get(LOCALISE)
                            else None)
    export = None
    with ui.friendly_errors():
        export = cmp.export(request)
    if export is None:
        return
    left, middle, right = st.columns(3)
    left.download_button("NPZ: raw maps, curves, manifest", export.npz,
                         file_name=f"{export.stem}.npz", mime="application/octet-stream",
                         key="cmp_dl_npz")
    middle.download_button("JSON manifest", export.json, file_name=f"{export.stem}.json",
                           mime="application/json", key="cmp_dl_json")
    with right:
        if find_browser() is None:
            st.warning("PNG export is off: the server has no Chromium browser for kaleido "
                       "(Debian package `chromium`). The NPZ and JSON downloads work.")
        elif st.button("Render the comparison as PNG", key="cmp_png_make"):
            try:
                with st.spinner("Rendering with kaleido..."):
                    st.session_state["cmp_png"] = (export.digest, comparison_png(export.figures()))
            except ExportUnavailable as error:
                st.warning(str(error))
        png = st.session_state.get("cmp_png")
        if png and png[0] == export.digest:
            st.download_button("PNG: the whole comparison", png[1], file_name=f"{export.stem}.png",
                               mime="image/png", key="cmp_dl_png")


image = state.current_image()
if image is None:
    st.stop()
models = [m for m in (state.current_vit(), state.current_cnn()) if m is not None]
if not models:
    st.stop()
sections = []
for column, model in zip(st.columns(len(models)), models):
    # the prediction's forward pass is the one the gradient methods reuse
    with column, ui.friendly_errors(), shared_forwards():
        sections.append(comparison_parts.model_section(model, image))
if not sections:
    st.stop()
comparison = Comparison(image, sections)
view = ui.view_picker(**COMPARISON.picker_args("cmp_view"))
if view == "dataset":
    benchmark_view.dataset_view(models)
else:
    {"maps": theory_view, "faith": faithfulness_view, "agree": agreement_view,
     "local": localisation_view, "export": export_view}[view](comparison)
