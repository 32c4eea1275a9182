"""`warmup --gallery`: compute what every page draws by default for each gallery image, so
the shared result store (`result_store`) holds it before a lecture and no student waits.

Each function below makes the calls of one page's default view, with that view's default
settings (the top predicted class, the shared head, the first choice of every control), so
the keys are the ones the page asks for. The pages' own control code is Streamlit's and
lives in `pages/`; `bench/bench_result_store.py` runs the real pages after this warm-up and
counts what they still compute.

`warm_up` loads the models themselves (and DINOv2's banks) before the first visitor: the
`warmup` command runs it, and so does `make run` (`dashboard/serve.py`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..studies import cause_vs_claim, interventions, method_runs, readout
from . import explainer, interventions_lab
from .. import pipeline
from ..analysis import tokens
from ..capture import shared_forwards
from ..methods import METHODS, daam, daam_knn, gradcam, rollout


def _top(model, image) -> int:
    """The class every page's target picker starts from (rank 0 of the shared head)."""
    return pipeline.predict(model, image, topk=5, head=model.head)[0].index


def home_and_tokens(vit, cnn, image) -> None:
    """Home and page 1: the predictions of both models and the ViT's embedding views."""
    for model in (vit, cnn):
        pipeline.predict(model, image, topk=5, head=model.head)
    pipeline.model_output(vit, image)
    tokens.cached_embedding_pca(vit, components=28)
    tokens.cached_position_similarity(vit)


def vit_explainer(vit, cnn, image) -> None:
    """Page 0: the overview and the last block's detail (the block it opens on)."""
    overview = explainer.overview_payload(vit, image, vit.head)
    explainer.block_payload(vit, image, len(overview["blocks"]) - 1)


def attention_distance(vit, cnn, image) -> None:
    """Page 3 ("Every head"; page 2's model part and the Explainer quote the same)."""
    pipeline.vit_capture(vit, image)
    METHODS["distance"](vit, image, prefix="exclude", renormalise="no")
    METHODS["sinks"](vit, image)


def rollout_and_gae(vit, cnn, image) -> None:
    """Page 4 ("Rollout"): auto start, head mean, no discard, to the last block, the [CLS]
    row (the centre patch's without prefix tokens), and GAE for the top class."""
    capture = pipeline.vit_capture(vit, image)
    eligible = rollout.rollout_blocks(capture)
    prefix = capture.blocks[eligible[0]].num_prefix_tokens
    query = -1 if prefix else capture.layout.centre_patch
    METHODS["sinks"](vit, image)
    METHODS["rollout"](vit, image, start=rollout.AUTO, end=len(eligible) - 1,
                       fusion=rollout.FUSIONS[0], discard=0.0, query=query)
    METHODS["gae"](vit, image, target=_top(vit, image), head=vit.head, query=query)


def gradcam_steps(vit, cnn, image) -> None:
    """Page 5 (the CNN part, "Step by step"): Grad-CAM at the model's default layer, and
    pytorch-grad-cam's, which the page compares it with."""
    target, layer = _top(cnn, image), cnn.spec.cnn_target_layer
    METHODS["gradcam"](cnn, image, target=target, layer=layer)
    gradcam.cam_family(cnn, image, target, layer, ("Grad-CAM",))


def daam_flow(vit, cnn, image) -> None:
    """Page 6 ("The flow"): DAAM for the top class with the default weights."""
    METHODS["daam"](vit, image, target=_top(vit, image), head=vit.head,
                    knn_weights=daam_knn.KNN_FORMULAS[0], channel_relu=daam.CHANNEL_RELU[0])


def comparison(vit, cnn, image) -> None:
    """Page 7 ("Theory and maps"): every default method on both models, top class."""
    for model in (vit, cnn):
        method_runs.run_methods(model, image, method_runs.default_methods(model),
                                _top(model, image), model.head, {})


def intervention_lab(vit, cnn, image) -> None:
    """Page 9 on the ViT: its first view (the strongest sink head switched off, zero
    convention, with the maps before and after) and the views a class waits for (read-out,
    head importance, and cause vs claim with tokens dropped and with pixels masked by the
    default blur: about 10 s each on 2 cores)."""
    target = _top(vit, image)
    block, head, _sink = interventions_lab.sink_suggestion(vit, image)
    interventions.intervene(vit, image, target=target, head=vit.head,
                            heads_off=f"{block}.{head}", heads_fill="zero")
    interventions.intervene(vit, image, target=target, head=vit.head)
    readout.readout(vit, image, target=target, head=vit.head)
    interventions_lab.importance_stories(vit, image, interventions.head_importance(
        vit, image, target=target, head=vit.head, fill="zero"))
    for removal in cause_vs_claim.REMOVALS:  # the view's radio: one test each
        cause_vs_claim.cause_vs_claim(vit, image, target=target, head=vit.head,
                                      removals=removal)


PAGES = (home_and_tokens, vit_explainer, attention_distance, rollout_and_gae, gradcam_steps,
         daam_flow, comparison, intervention_lab)
# what a class opens first: the Explainer and page 9's first views, on the default picture
FIRST = (vit_explainer, intervention_lab)


def lecture_order(images: list[str], first: str) -> list[tuple[str, object]]:
    """(gallery id, page function) in the order a lecture needs them: FIRST on the `first`
    picture, then its other pages, then every page of each other picture."""
    steps = [(first, page) for page in FIRST]
    ordered = [first, *(image for image in images if image != first)]
    return steps + [(image, page) for image in ordered for page in PAGES
                    if (image, page) not in steps]


def warm_step(vit, cnn, image, page) -> str | None:
    """One page's default computations for one image: None, or its failure in words."""
    with shared_forwards():
        try:
            page(vit, cnn, image)
        except (ValueError, RuntimeError) as error:
            return f"{page.__name__}: {error}"
    return None


@dataclass
class Warmed:
    image: str
    seconds: float
    computed: int  # results computed here (the rest came from memory or the store)
    from_disk: int
    failures: list[str] = field(default_factory=list)


def _shared_caches():
    from ..methods.base import RESULT_CACHE

    return (pipeline.INPUT_CACHE, pipeline.CAPTURE_CACHE, RESULT_CACHE, explainer.EXPLAINER_CACHE,
            interventions.RESULTS, readout.RESULTS, cause_vs_claim.RESULTS,
            interventions_lab.STORIES)


def _counts() -> tuple[int, int]:
    caches = _shared_caches()
    return sum(c.misses for c in caches), sum(c.disk_hits for c in caches)


def warm_image(vit, cnn, sample_id: str, image) -> Warmed:
    """Every page's default computations for one image; a page that fails is named, and the
    others still run."""
    started, (computed, read) = time.perf_counter(), _counts()
    failures = []
    with shared_forwards():  # as the pages do: one forward per image for every pass
        for page in PAGES:
            try:
                page(vit, cnn, image)
            except (ValueError, RuntimeError) as error:
                failures.append(f"{page.__name__}: {error}")
    now_computed, now_read = _counts()
    return Warmed(sample_id, time.perf_counter() - started, now_computed - computed,
                  now_read - read, failures)


# --- the models, before the first visitor (`warmup`, and `make run` via dashboard/serve.py) ---

def default_models() -> tuple[str, ...]:
    from ..models import DEFAULT_CNN, DEFAULT_TEXT, DEFAULT_VIT

    return (DEFAULT_VIT, DEFAULT_CNN, DEFAULT_TEXT)


def warm_up(model_ids: tuple[str, ...] | None = None, sample: str = "chelsea") -> list[dict]:
    """Load each model (building DINOv2's k-NN bank and its per-block banks) and run one
    prediction.

    Returns one row per model: id, whether it loaded, seconds, and the top class.
    """
    from ..images import load_sample
    from ..models import availability, get_model

    model_ids = model_ids or default_models()

    image = load_sample(sample)
    rows = []
    for model_id in model_ids:
        started = time.perf_counter()
        status = availability(model_id)
        if not status.available:
            rows.append({"model": model_id, "loaded": False, "seconds": 0.0,
                         "top": None, "reason": status.reason})
            continue
        model = get_model(model_id)
        top = pipeline.predict(model, image, topk=1)[0].label if model.head is not None else None
        readout.warm_block_banks(model)  # the Explainer's and page 9's read-out
        rows.append({"model": model_id, "loaded": True,
                     "seconds": time.perf_counter() - started, "top": top, "reason": ""})
    return rows
