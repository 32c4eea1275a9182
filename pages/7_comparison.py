"""Page 7: every registered method on one image - theory, measured cost, faithfulness,
agreement, localisation, export."""

import json
from pathlib import Path

import pandas as pd
import streamlit as st

from dashboard import links, literal, state, ui
from xai_core.infra import budget
from xai_core import compare, pipeline
from xai_core.benchmark import plan as bench_plan
from xai_core.benchmark import run as bench_run
from xai_core.benchmark import summary as bench_summary
from xai_core.capture import shared_forwards
from xai_core.infra.errors import OptionError
from xai_core.figures.curves import (attention_gradient_scatter, curves_figure,
                                     mean_curves_figure, ranking_figure)
from xai_core.figures.export import ExportUnavailable, comparison_png, find_browser
from xai_core.figures.matrices import agreement_heatmap
from xai_core.figures.overlays import localisation_figure, practical_matrix
from xai_core.images import SAMPLES
from xai_core.methods import METHODS, THEORY_ROWS
from xai_core.metrics.agreement import agreement_matrices
from xai_core.metrics.faithfulness import (BASELINE_NAMES, BASELINES, MIN_STEPS, faithfulness,
                                          score_kind)
from xai_core.methods.integrated_gradients import COMPLETENESS_LIMIT
from xai_core.metrics.stability import UNSTABLE_BELOW, is_seeded, seed_stability

st.title("7 · Comparison matrix")
st.markdown(
    "Every explanation method the app knows, run on **the same image**, side by side. First "
    "what each method is in principle, then what it actually cost on this image, then the "
    "maps themselves, and finally three ways to ask whether a map deserves trust: does the "
    "model's score collapse when the highlighted pixels go (faithfulness), do the methods "
    "agree with each other (agreement), and does the map land on the object (localisation).")

FAMILY_LABEL = {"vit": "ViT", "cnn": "CNN"}

image = state.current_image()
if image is None:
    st.stop()
models = [m for m in (state.current_vit(), state.current_cnn()) if m is not None]
if not models:
    st.stop()

# --- choices per model: target class and methods ---------------------------------------------
sections: list[compare.ModelSection] = []
columns = st.columns(len(models))
for column, model in zip(columns, models):
    # the prediction's forward pass is the one the gradient methods reuse
    with column, ui.friendly_errors(), shared_forwards():
        family = model.spec.family
        head = state.session_head(model)
        ui.model_caption(model)
        target = ui.target_picker(model, image, key=f"cmp_target_{family}", head=head,
                                  label=f"Target class for the {FAMILY_LABEL[family]}")
        names = [info.name for info in compare.applicable_methods(model)]
        if not names:
            st.info(f"No explanation method for a {FAMILY_LABEL[family]} is registered yet.")
        key = f"cmp_methods_{family}"
        chosen = links.choices(
            st.multiselect, f"{FAMILY_LABEL[family]} methods", names, key=key,
            default=compare.default_methods(model), what="method",
            help="Every registered method for this kind of model. Off by default: " + "; ".join(
                f"{name} ({why})" for name, why in compare.off_by_default().items()) + ".")
        options = {}
        if ui.panel_switch("Change the methods' options (off: every method at its defaults)",
                           key=f"cmp_options_{family}", opened_by_prefix=f"cmp_opt_{family}_"):
            for name in chosen:
                if METHODS[name].options:
                    st.markdown(f"**{name}**")
                    options[name] = ui.method_options(METHODS[name], model,
                                                      key=f"cmp_opt_{family}_{name}")
        chosen = [name for name in chosen if options.get(name, {}) is not None]  # over budget
        with st.spinner(f"Running {len(chosen)} methods on {model.spec.display_name}..."):
            runs = compare.run_methods(model, image, chosen, target, head, options,
                                       should_stop=ui.stop_check())
        sections.append(compare.ModelSection(model, target, head.class_names[target],
                                             score_kind(model, head), runs))
        for run in runs:
            if run.over_budget:
                st.error(literal.text(run.error))
            elif run.error:
                st.warning(f"**{run.name}** cannot run here: {literal.text(run.error)}")

if not sections:
    st.stop()
ok_runs = {(s.model.spec.family, r.name): r for s in sections for r in s.runs if r.ok}


def theory_view() -> None:
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
    table = {}
    table_rows = [*THEORY_ROWS, "Options here", "Measured here: passes, wall time",
                  "Measured here: map grid"]
    chosen_names = {r.name for s in sections for r in s.runs}
    for name, info in METHODS.items():
        if name not in chosen_names:
            continue
        run = next((r for (_, n), r in ok_runs.items() if n == name), None)
        table[name] = [*info.theory.rows().values(),
                       run.options_text() if run else "-",
                       run.cost_text() if run else "did not run here (see the warning above)",
                       "x".join(map(str, run.map.shape)) if run else "-"]
    measure = st.checkbox(
        "Measure seed stability", key=STABILITY,
        help="Runs every method that draws random numbers (KernelSHAP, SmoothGrad...) at two "
             "more seeds and reports the mean Spearman rank correlation of the three maps: "
             "1 = the seed changes nothing. Costs two more runs of each such method.")
    stability = seed_stabilities() if measure else {}
    if measure:
        table_rows.append("Measured here: seed stability")
        for name in table:
            table[name].append(stability_text(stability, name))
    ui.text_table(pd.DataFrame(table, index=table_rows))

    st.header("2 · The practical matrix")
    st.markdown(
        "Each map is scaled to its own minimum (0) and maximum (1) and all share one colour "
        "scale: raw values differ by orders of magnitude between methods, so compare shapes "
        "and ranks, not heights.")
    figure = matrix_figure(stability)
    if figure is not None:
        ui.show_figure(figure, key="cmp_matrix")
    for (family, label), rho in unstable_maps(stability).items():
        st.warning(f"**{FAMILY_LABEL[family]} {label}** is greyed out: this map mostly reflects "
                   f"its random samples (seed-to-seed rank correlation {rho:.2f}); raise samples.")
    completeness_notes()


STABILITY = "cmp_stability"


def seed_stabilities() -> dict:
    """(family, method) -> the seed stability of each map that ran (cached runs)."""
    found = {}
    with ui.friendly_errors():
        for section in sections:
            for run in section.runs:
                if run.ok:
                    found[(section.model.spec.family, run.name)] = seed_stability(
                        METHODS[run.name], section.model, image, target=run.target,
                        head=state.session_head(section.model), should_stop=ui.stop_check(),
                        **run.options)["stability"]
    return found


def stability_text(stability: dict, name: str) -> str:
    """One method's seed stability on each model it ran on, in words."""
    if not is_seeded(METHODS[name]):
        return "1 (no random draws)"
    values = [(FAMILY_LABEL[family], value) for (family, method), value in stability.items()
              if method == name]
    return " · ".join(f"{model}: " + ("undefined (a constant map)" if value is None
                                      else f"{value:.2f}") for model, value in values) or "-"


def unstable_maps(stability: dict) -> dict:
    """(family, map label) -> stability, for the maps below UNSTABLE_BELOW."""
    return {(s.model.spec.family, r.label): stability[(s.model.spec.family, r.name)]
            for s in sections for r in s.runs
            if r.ok and stability.get((s.model.spec.family, r.name)) is not None
            and stability[(s.model.spec.family, r.name)] < UNSTABLE_BELOW}


def offer_more_steps(model, run) -> None:
    """A button that reruns Integrated Gradients at twice its steps (through the option's
    link, as a shared address would), or as many as the server's budget allows."""
    method, family = METHODS[run.name], model.spec.family
    fitting = budget.fitting_range(method, "steps", run.options, model)
    more = min(2 * run.options["steps"], fitting[1]) if fitting else run.options["steps"]
    if more <= run.options["steps"]:
        st.caption("More steps do not fit this server's budget for one request.")
        return
    st.button(f"Rerun {FAMILY_LABEL[family]} Integrated Gradients with {more} steps",
              key=f"cmp_more_steps_{family}", on_click=ask_for_steps, args=(family, more))


def ask_for_steps(family: str, steps: int) -> None:
    st.query_params[f"cmp_options_{family}"] = "true"
    st.query_params[f"cmp_opt_{family}_integrated-gradients_steps"] = str(steps)


def completeness_notes() -> None:
    """Integrated Gradients promises that its map adds up to f(x) - f(reference): say how
    far it misses, and what to change when it misses by more than COMPLETENESS_LIMIT."""
    for section in sections:
        for run in section.runs:
            error = run.meta.get("completeness_error") if run.ok else None
            if run.name != "integrated-gradients" or not run.ok:
                continue
            family = FAMILY_LABEL[section.model.spec.family]
            change, steps = run.meta["score_change"], run.options["steps"]
            if error is None:
                st.caption(f"{family} Integrated Gradients: the score does not change from the "
                           "reference, so there is nothing for the attributions to add up to.")
            elif error > COMPLETENESS_LIMIT:
                st.warning(
                    f"{family} Integrated Gradients: the attributions miss the score change "
                    f"f(x) - f(reference) = {change:.4g} by {error:.1%} (Captum's convergence "
                    f"delta {run.meta['convergence_delta']:.3g} at {steps} steps), more than "
                    f"{COMPLETENESS_LIMIT:.0%}: the map does not add up. Raise **steps** under "
                    "'Change the methods' options' above (the error shrinks as steps grow).")
                offer_more_steps(section.model, run)
            else:
                st.caption(f"{family} Integrated Gradients: the attributions add up to the score "
                           f"change f(x) - f(reference) = {change:.4g} within {error:.1%} "
                           f"(convergence delta {run.meta['convergence_delta']:.3g}, {steps} "
                           "steps).")


def matrix_figure(stability: dict | None = None):
    """The practical matrix: every map of every model over its input (None without maps);
    the maps below UNSTABLE_BELOW in `stability` greyed out."""
    rows, greyed = [], {}
    unstable = unstable_maps(stability or {})
    for section in sections:
        model_image = pipeline.prepare(section.model, image).model_image
        maps = [(r.label, r.map) for r in section.runs if r.ok]
        greyed |= {(len(rows), label): rho for (family, label), rho in unstable.items()
                   if family == section.model.spec.family}
        if maps:
            rows.append((f"{FAMILY_LABEL[section.model.spec.family]}: "
                         f"{literal.figure(section.target_label[:24])}", model_image, maps))
    return practical_matrix(rows, greyed=greyed) if rows else None


def faithfulness_curves(faith: dict, bar=None) -> list[str]:
    """Fill each section's curves for the settings `faith` (cached by content, so a second
    call costs nothing); returns the metrics asked for."""
    wanted = ["deletion", "insertion"] + (["pos-perturb", "neg-perturb"] if faith["perturb"]
                                          else [])
    jobs = [(s, r, m) for s in sections for r in s.runs if r.ok for m in wanted]
    for done, (section, run, metric) in enumerate(jobs):
        def report(step, total, done=done, section=section, run=run, metric=metric):
            if bar is not None:
                bar.progress(min(1.0, (done + step / total) / len(jobs)),
                             text=f"{section.model.spec.display_name} · {run.name} · {metric}")
        section.curves[(run.name, metric)] = faithfulness(
            section.model, image, run.map, metric, section.target, faith["baseline"],
            faith["steps"], head=state.session_head(section.model), progress=report)
    if bar is not None:
        bar.progress(1.0, text=f"Done: {len(jobs)} curves, {faith['steps']} steps, baseline "
                               f"{faith['baseline']}.")
    return wanted


def faithfulness_view() -> None:
    st.header("3 · Faithfulness: deletion and insertion")
    st.markdown(
        "**Deletion** removes the pixels a map ranks highest first, in equal steps, and records "
        "the class score; a faithful map makes the score fall fast (**low** area under the "
        "curve). **Insertion** starts from the baseline and puts the top pixels back first; a "
        "faithful map makes the score rise fast (**high** area). Pixels are ranked by the map "
        "resized (bilinear) to the model input. **Positive / negative perturbation** (Chefer) "
        "blanks whole map cells - patches for a ViT - from the most (positive: low area is "
        "good) or the least (negative: high area is good) relevant, from 0 % to (N-1)/N.")
    for section in sections:
        st.caption(f"{FAMILY_LABEL[section.model.spec.family]} class score: "
                   f"**{section.score_kind}** of “{literal.text(section.target_label)}”.")
    left, middle, right = st.columns(3)
    baseline = left.selectbox("Baseline", BASELINES, key="cmp_baseline",
                              format_func=lambda b: BASELINE_NAMES[b])
    most = budget.most_curve_steps(100)  # one curve is one request of the server's budget
    steps = middle.number_input("Steps", min_value=MIN_STEPS, max_value=most,
                                value=min(20, most), key="cmp_steps",
                                help="Each step is one perturbed image through the model, "
                                     "evaluated in batches.")
    perturb = right.checkbox("Also positive/negative perturbation", value=True,
                             key="cmp_perturb")
    if st.button("Run faithfulness metrics", key="cmp_run_metrics", type="primary"):
        st.session_state["cmp_faith"] = {"baseline": baseline, "steps": int(steps),
                                         "perturb": bool(perturb)}
    faith = st.session_state.get("cmp_faith")
    if not faith:
        st.info("Choose a baseline and a step count, then press **Run faithfulness metrics** "
                "(each deletion or insertion curve runs steps - 1 perturbed images through "
                "the model; the untouched image and the pure baseline, the same for every "
                "map, run once per image and baseline; results are cached).")
        return
    bar = st.progress(0.0, text="Perturbing...")
    with ui.friendly_errors():
        wanted = faithfulness_curves(faith, bar)
    for section in sections:
        if not section.curves:
            continue
        label = FAMILY_LABEL[section.model.spec.family]
        ui.show_figure(curves_figure(section.curves, f"{label}: {section.model.label}"),
                       key=f"cmp_curves_{section.model.spec.family}")
        auc = pd.DataFrame({metric: {method: curve.auc for (method, m), curve
                                     in section.curves.items() if m == metric}
                            for metric in wanted})
        st.dataframe(auc.style.format("{:.4f}"), width="stretch")
        any_curve = next(iter(section.curves.values()))
        st.caption(f"Full image score {any_curve.full_score:.4f}; pure baseline score "
                   f"{any_curve.baseline_score:.4f}. AUC = trapezoid over the fraction "
                   "perturbed (0 to 1), in the score's units.")


def all_maps() -> dict:
    return {f"{FAMILY_LABEL[s.model.spec.family]}·{r.name}": r.map
            for s in sections for r in s.runs if r.ok}


def agreement_numbers(percent: int) -> dict | None:
    """The agreement between every pair of maps (cached), as the manifest records it."""
    maps = all_maps()
    if len(maps) < 2:
        return None
    names, rho, overlap = agreement_matrices(maps, percent)
    return {"names": names, "spearman": rho, "top_k_percent": percent, "top_k_overlap": overlap}


def attention_pair():
    """(the ViT section, attention vs gradient per patch) or None (no ViT, other grids)."""
    vit = next((s for s in sections if s.model.spec.family == "vit"), None)
    if vit is None:
        return None
    pair = compare.attention_vs_gradient(vit.model, image, vit.target,
                                         head=state.session_head(vit.model))
    return None if pair is None else (vit, pair)


def scatter_figure(found):
    vit, pair = found
    title = f"{vit.model.spec.display_name}, '{literal.figure(vit.target_label)}'"
    return attention_gradient_scatter(pair.attention, pair.gradient, pair.rho, title)


@st.fragment
def agreement_part() -> None:
    """The two agreement heatmaps; the top-k slider reruns only this part."""
    percent = links.number(st.slider, "Top-k % for the overlap", 1, 50, key="cmp_topk",
                           default=10)
    numbers = agreement_numbers(percent)
    st.markdown(
        "**Spearman ρ** compares the full ranking of cells (1 = same order, -1 = reversed). "
        f"**Top-{percent} % overlap** is the share of one map's top cells that are also the "
        "other's top cells. Maps on different grids are compared on the finer grid (bilinear).")
    if len({(s.model.spec.input_size, s.model.spec.crop_pct) for s in sections}) > 1:
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


def agreement_view() -> None:
    st.header("4 · Do the methods agree?")
    if len(all_maps()) >= 2:
        agreement_part()
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
        found = attention_pair()
        if found is not None:
            ui.show_figure(scatter_figure(found), key="cmp_scatter")
        else:
            st.info("Needs a ViT whose attention and gradient share one patch grid.")


LOCALISE = "cmp_localise"


def box_inputs(first):
    """The typed box (x0, y0, x1, y1) on the first model's input; kept across views."""
    cols = st.columns(4)
    limits = (first.width, first.height, first.width, first.height)
    defaults = (first.width // 4, first.height // 4, 3 * first.width // 4,
                3 * first.height // 4)
    return [links.number(cols[i].number_input, name, 0, limits[i], key=f"cmp_box_{name}",
                         default=defaults[i]) for i, name in enumerate(("x0", "y0", "x1", "y1"))]


@st.fragment
def localisation_view() -> None:
    """The box and every map's box; typing a coordinate reruns only this part."""
    st.header("5 · Localisation (optional)")
    if not links.flag(st.checkbox, "Score the maps against a box I give", key=LOCALISE):
        return
    first = pipeline.prepare(sections[0].model, image).model_image
    st.markdown(
        f"Type the object's box in pixels of the model's {first.width}x{first.height} input "
        "(x to the right, y down; x1, y1 excluded). Each map is resized to the input, "
        "binarised at **0.1 x its maximum**, and the tight box around its **largest connected "
        "region** is compared with yours by **IoU** (correct when IoU >= 0.5, the "
        "localisation protocol of the DAAM paper, Liao et al.). The **pointing game** asks "
        "only whether the map's peak falls in your box (15-pixel tolerance).")
    box = box_inputs(first)
    with ui.friendly_errors():
        rows = []
        for section in sections:
            found = compare.localise_section(section, box, (first.height, first.width))
            results = found["results"]
            rows += [{"model": FAMILY_LABEL[section.model.spec.family], "method": name,
                      "map box (x0, y0, x1, y1)": str(loc.box), "IoU": round(loc.iou, 3),
                      "IoU >= 0.5": loc.correct, "pointing game": loc.pointing_hit}
                     for name, loc in results.items()]
            ui.show_figure(localisation_figure(
                pipeline.prepare(section.model, image).model_image, found["box"],
                {n: loc.box for n, loc in results.items()},
                {n: loc.peak for n, loc in results.items()},
                f"{FAMILY_LABEL[section.model.spec.family]}: your box (dashed), each map's box "
                "and peak (x)"), key=f"cmp_loc_{section.model.spec.family}")
        if rows:
            st.dataframe(pd.DataFrame(rows), width="stretch", hide_index=True)


def export_view() -> None:
    """Everything the other views computed (each cached), as files."""
    st.header("6 · Export")
    st.markdown(
        "The raw maps, the faithfulness curves you ran, the agreement and the localisation "
        "against your box (when set), with every setting needed to reproduce them.")
    faith = st.session_state.get("cmp_faith")
    with ui.friendly_errors():
        if faith:
            faithfulness_curves(faith)
        agreement = agreement_numbers(st.session_state.get("cmp_topk", 10))
        found = attention_pair()
        if found is not None:
            agreement = (agreement or {}) | {"attention_vs_gradient_spearman": found[1].rho}
        if st.session_state.get(LOCALISE):
            first = pipeline.prepare(sections[0].model, image).model_image
            box = [st.session_state.get(f"cmp_box_{n}", d) for n, d in
                   zip(("x0", "y0", "x1", "y1"), (first.width // 4, first.height // 4,
                                                  3 * first.width // 4, 3 * first.height // 4))]
            for section in sections:
                compare.localise_section(section, box, (first.height, first.width))
    settings = {"faithfulness": faith, "methods": {s.model.spec.id: [r.name for r in s.runs]
                                                  for s in sections},
                "options": {s.model.spec.id: {r.name: r.given for r in s.runs if r.given}
                            for s in sections}}
    bundle = compare.manifest(image, sections, settings, agreement)
    stem = f"vit-lens-comparison-{bundle['models'][0]['image_sha256'][:10]}"
    left, middle, right = st.columns(3)
    left.download_button("NPZ: raw maps, curves, manifest", compare.npz_bytes(sections, bundle),
                         file_name=f"{stem}.npz", mime="application/octet-stream",
                         key="cmp_dl_npz")
    middle.download_button("JSON manifest", json.dumps(bundle, indent=2),
                           file_name=f"{stem}.json", mime="application/json", key="cmp_dl_json")
    with right:
        digest = compare.manifest_digest(bundle)
        if find_browser() is None:
            st.warning("PNG export is off: the server has no Chromium browser for kaleido "
                       "(Debian package `chromium`). The NPZ and JSON downloads work.")
        elif st.button("Render the comparison as PNG", key="cmp_png_make"):
            parts = [f for f in [matrix_figure(), found and scatter_figure(found)] if f]
            parts += [curves_figure(s.curves, FAMILY_LABEL[s.model.spec.family])
                      for s in sections if s.curves]
            if agreement and "spearman" in agreement:
                parts.append(agreement_heatmap(agreement["names"], agreement["spearman"],
                                               "Spearman rank correlation"))
            try:
                with st.spinner("Rendering with kaleido..."):
                    st.session_state["cmp_png"] = (digest, comparison_png(parts))
            except ExportUnavailable as error:
                st.warning(str(error))
        png = st.session_state.get("cmp_png")
        if png and png[0] == digest:
            st.download_button("PNG: the whole comparison", png[1], file_name=f"{stem}.png",
                               mime="image/png", key="cmp_dl_png")


def dataset_view() -> None:
    st.header("7 · Over a data set: the benchmark")
    st.markdown(
        "One image proves little: a method can win on this photo by luck. The benchmark scores "
        "methods on **many images** and reports, per model and metric, the **mean with a "
        "95 % interval** (Student's t), the **mean rank** (1 = best on an image) and a "
        "**sign-flip test** against a **random map** on the model's own grid - the floor every "
        "method must beat - corrected (Holm) for the methods compared at once. It is "
        "the same code as `python -m xai_core benchmark` (load its `results.json` here), and every "
        "value equals what this page computes for one image.")
    source = st.radio("Benchmark results", ["run", "load"], key="cmp_bench_source", horizontal=True,
                      format_func={"run": "Run a small one on the gallery",
                                   "load": "Load a results.json"}.get)
    if source == "load":
        uploaded = st.file_uploader("results.json written by `python -m xai_core benchmark`",
                                    type=["json"], key="cmp_bench_file")
        if uploaded is not None:
            with ui.friendly_errors():
                try:
                    data = json.loads(uploaded.getvalue())
                except (UnicodeDecodeError, json.JSONDecodeError):
                    raise OptionError("The file is not JSON.") from None
                st.session_state["cmp_bench"] = bench_summary.load_results(data)
    else:
        ids = [m.spec.id for m in models]
        left, middle, right = st.columns(3)
        bench_images = left.multiselect("Gallery images", list(SAMPLES), key="cmp_bench_images",
                                        default=list(SAMPLES)[:3])
        choices = sorted({name for m in models
                          for name in bench_plan.methods_for(m.spec.id, ("all",))
                          if name != bench_plan.RANDOM_METHOD})
        bench_methods = middle.multiselect(
            "Methods", choices, key="cmp_bench_methods",
            default=[n for n in ("gradcam", "saliency", "legrad", "attention") if n in choices],
            help="The random floor is always added. Each method runs on the models it fits.")
        bench_steps = right.number_input("Steps", min_value=2, max_value=50, value=10,
                                         key="cmp_bench_steps")
        st.caption("Deletion and insertion with the model-input zeros baseline; the class is each "
                   "image's top prediction (the k-NN head uses the gallery bank, not examples you "
                   "added). Every unit (image x model x method) costs a few forward passes per "
                   "step: a minute or more on a CPU.")
        if st.button("Run the benchmark", key="cmp_bench_run", disabled=not (bench_images and
                                                                             bench_methods)):
            import tempfile

            settings = bench_plan.Settings(
                models=tuple(ids), images="sample:" + ",".join(bench_images),
                methods=tuple(bench_methods), metrics=("deletion", "insertion"),
                steps=int(bench_steps), random_weights=any(m.random_weights for m in models))
            bar = st.progress(0.0, text="Benchmark...")
            with ui.friendly_errors(), tempfile.TemporaryDirectory() as folder:
                bench_run.run_benchmark(
                    settings, folder, progress_bar=False,
                    on_progress=lambda d, t: bar.progress(d / max(t, 1),
                                                          text=f"{d} of {t} units"))
                data = json.loads((Path(folder) / "results.json").read_text())
                st.session_state["cmp_bench"] = bench_summary.load_results(data)
                bar.progress(1.0, text="Done.")

    loaded = st.session_state.get("cmp_bench")
    if loaded:
        bench_settings, bench_rows = loaded
        done_units = {(r["image"], r["model"], r["method"]) for r in bench_rows}
        summary = bench_summary.summarise(bench_rows, bench_settings, len(done_units),
                                          len(done_units))
        if bench_settings.random_weights:
            st.warning("These results come from RANDOM WEIGHTS (shapes only): they say nothing "
                       "about a trained model.")
        st.caption(f"{len(done_units)} units over {len({r['image'] for r in bench_rows})} images; "
                   f"baseline {literal.text(bench_settings.baseline)}, "
                   f"{literal.text(bench_settings.steps)} steps; intervals: "
                   f"{summary['interval']}.")
        for table in summary["tables"]:
            ui.show_figure(ranking_figure(table),
                           key=f"cmp_bench_rank_{table['model']}_{table['metric']}")
            beaten = [e["method"] for e in table["methods"]
                      if "vs_random" in e and not e["vs_random"]["better_than_random"]]
            if beaten:
                st.caption(f"Not shown better than the random floor on {table['metric']}: "
                           f"{literal.text(', '.join(beaten))}.")
            ties = bench_summary.rank_tie_groups(table["methods"])
            if ties:
                named = [[literal.text(name) for name in group] for group in ties]
                groups = "; ".join(f"{g[0]} ~ {', '.join(g[1:])}" for g in named)
                st.caption("Rank intervals overlap (~), so the data do not support the order "
                           f"between: {groups}.")
        curves = bench_summary.mean_curves(bench_rows, bench_settings.steps)
        for model_id in sorted({model for model, _ in curves}):
            ui.show_figure(mean_curves_figure(curves, model_id),
                           key=f"cmp_bench_curves_{model_id}")
        st.subheader("Do the metrics agree?")
        st.markdown(
            "Spearman correlation between two metrics over every (image, method) pair both scored, "
            "each turned so that higher is better (deletion's area negated). Near 1: the metrics "
            "order the maps alike; near 0: they measure different things.")
        for model_id, (names, matrix) in bench_summary.metric_agreement(bench_rows).items():
            if len(names) >= 2:
                ui.show_figure(agreement_heatmap(names, matrix,
                                                 f"{literal.figure(model_id)}: metric agreement"),
                               key=f"cmp_bench_agree_{model_id}")
        st.download_button("Summary (JSON)", json.dumps(summary, indent=2), key="cmp_bench_dl",
                           file_name="benchmark-summary.json", mime="application/json")


VIEWS = {"maps": "1-2 · Theory and maps", "faith": "3 · Faithfulness", "agree": "4 · Agreement",
         "local": "5 · Localisation", "export": "6 · Export", "dataset": "7 · Over a data set"}
view = ui.view_picker(VIEWS, key="cmp_view", label="Section",
                      opened_by={"agree": ("cmp_topk",), "local": (LOCALISE,)})
{"maps": theory_view, "faith": faithfulness_view, "agree": agreement_view,
 "local": localisation_view, "export": export_view, "dataset": dataset_view}[view]()
