"""Page 7's data-set view: a small benchmark run on the gallery (xai_core.benchmark.small,
checked against the server's budget as one request) or a results.json loaded, drawn as
rankings, mean curves and metric agreement."""

import json

import streamlit as st

from xai_core.benchmark import small
from xai_core.benchmark import summary as bench_summary
from xai_core.figures.curves import mean_curves_figure, ranking_figure
from xai_core.figures.matrices import agreement_heatmap
from xai_core.images import SAMPLES
from xai_core.lessons.views.p7_comparison import COMPARISON
from xai_core.infra.errors import OptionError

from . import literal, ui


def dataset_view(models) -> None:
    st.header("7 · Over a data set: the benchmark")
    st.markdown(
        "One image proves little: a method can win on this photo by luck. The benchmark scores "
        "methods on **many images** and reports, per model and metric, the **mean with a "
        "95 % interval** (Student's t), the **mean rank** (1 = best on an image) and a "
        "**sign test** against a **random map** on the model's own grid - the floor every "
        "method must beat: *better than random* means better on more images than not, "
        "corrected (Holm) for the methods compared at once. It is "
        "the same code as `python -m xai_core benchmark` (load its `results.json` here), and every "
        "value equals what this page computes for one image.")
    source = st.radio("Benchmark results", COMPARISON.choices("cmp_bench_source"),
                      key="cmp_bench_source", horizontal=True,
                      format_func={"run": "Run a small one on the gallery",
                                   "load": "Load a results.json"}.get)
    with ui.friendly_errors():
        if source == "load":
            load_benchmark()
        else:
            run_benchmark(models)
    if st.session_state.get("cmp_bench"):
        show_benchmark(*st.session_state["cmp_bench"])


def load_benchmark() -> None:
    uploaded = st.file_uploader("results.json written by `python -m xai_core benchmark`",
                                type=["json"], key="cmp_bench_file")
    if uploaded is not None:
        try:
            data = json.loads(uploaded.getvalue())
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise OptionError("The file is not JSON.") from None
        st.session_state["cmp_bench"] = bench_summary.load_results(data)


def run_benchmark(models) -> None:
    ids = tuple(m.spec.id for m in models)
    left, middle, right = st.columns(3)
    images = left.multiselect("Gallery images", list(SAMPLES), key="cmp_bench_images",
                              default=small.default_images())
    choices = small.method_choices(ids)
    methods = middle.multiselect(
        "Methods", choices, key="cmp_bench_methods", default=small.default_methods(choices),
        help="The random floor is always added. Each method runs on the models it fits.")
    steps = right.number_input("Steps", min_value=small.MIN_STEPS, max_value=small.MAX_STEPS,
                               value=small.DEFAULT_STEPS, key="cmp_bench_steps")
    st.caption("Deletion and insertion with the model-input zeros baseline; the class is each "
               "image's top prediction (the k-NN head uses the gallery bank, not examples you "
               "added). Every unit (image x model x method) costs a few forward passes per "
               "step: a minute or more on a CPU.")
    if st.button("Run the benchmark", key="cmp_bench_run", disabled=not (images and methods)):
        run = small.SmallRun(ids, tuple(images), tuple(methods), int(steps),
                             any(m.random_weights for m in models))
        small.check_budget(run)  # refused in one sentence before anything runs
        bar = st.progress(0.0, text="Benchmark...")
        st.session_state["cmp_bench"] = small.run_small(
            run, lambda done, total: bar.progress(done / max(total, 1),
                                                  text=f"{done} of {total} units"))
        bar.progress(1.0, text="Done.")


def show_benchmark(settings, rows) -> None:
    units = {(r["image"], r["model"], r["method"]) for r in rows}
    found = bench_summary.summarise(rows, settings, len(units), len(units))
    if settings.random_weights:
        st.warning("These results come from RANDOM WEIGHTS (shapes only): they say nothing "
                   "about a trained model.")
    st.caption(f"{len(units)} units over {len({r['image'] for r in rows})} images; baseline "
               f"{literal.text(settings.baseline)}, {literal.text(settings.steps)} steps; "
               f"intervals: {found['interval']}.")
    for table in found["tables"]:
        ui.show_figure(ranking_figure(table),
                       key=f"cmp_bench_rank_{table['model']}_{table['metric']}")
        beaten = [e["method"] for e in table["methods"]
                  if "vs_random" in e and not e["vs_random"]["better_than_random"]]
        if beaten:
            st.caption(f"Not shown better than the random floor on {table['metric']}: "
                       f"{literal.text(', '.join(beaten))}.")
        past = [e["method"] for e in table["methods"] if e.get("interval_past_range")]
        if past:
            low, high = table["range"]
            st.caption(f"The t interval of {literal.text(', '.join(past))} reaches past what "
                       f"{table['metric']} can take ({low:g} to {high:g}): too few images, or "
                       "values too spread out, for its normal approximation.")
        ties = [[literal.text(name) for name in group]
                for group in bench_summary.rank_tie_groups(table["methods"])]
        if ties:
            groups = "; ".join(f"{group[0]} ~ {', '.join(group[1:])}" for group in ties)
            st.caption("Rank intervals overlap (~), so the data do not support the order "
                       f"between: {groups}.")
    curves = bench_summary.mean_curves(rows, settings.steps)
    for model_id in sorted({model for model, _ in curves}):
        ui.show_figure(mean_curves_figure(curves, model_id), key=f"cmp_bench_curves_{model_id}")
    st.subheader("Do the metrics agree?")
    st.markdown(
        "Spearman correlation between two metrics over every (image, method) pair both scored, "
        "each turned so that higher is better (deletion's area negated). Near 1: the metrics "
        "order the maps alike; near 0: they measure different things.")
    for model_id, (names, matrix) in bench_summary.metric_agreement(rows).items():
        if len(names) >= 2:
            ui.show_figure(agreement_heatmap(names, matrix,
                                             f"{literal.figure(model_id)}: metric agreement"),
                           key=f"cmp_bench_agree_{model_id}")
    st.download_button("Summary (JSON)", json.dumps(found, indent=2), key="cmp_bench_dl",
                       file_name="benchmark-summary.json", mime="application/json")
