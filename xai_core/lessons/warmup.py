"""`warmup --gallery`: compute what every page draws by default for each gallery image, so
the shared result store (`result_store`) holds it before a lecture and no student waits.

What a page computes is read from its views' declarations (`lessons/views`): each view's
default is its declared computation at its declared defaults (the top predicted class, the
shared head, the first choice of every control) - the calls the page makes - so the keys are
the ones a visit asks for. `tests/test_view_contract.py` opens every declared view after a
warm-up and counts the passes still made; `bench/bench_result_store.py` times the real pages.
A view the model refuses (page 9's refusals, page 6's vote without a k-NN head) is left out,
as the page leaves it.

`warm_up` loads the models themselves (and DINOv2's banks) before the first visitor, and
computes the views that need no picture (page 8's, on the text model): the `warmup` command
runs it, and so does `make run` (`dashboard/serve.py`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..studies import cause_vs_claim, interventions, readout
from . import explainer, interventions_lab
from .. import pipeline
from ..capture import shared_forwards
from .views import every_view


def warm_views(models: dict, image, text: bool = False,
               pages: tuple[str, ...] | None = None) -> list[str]:
    """The default of every declared view on `models` ("vit", "cnn", "text" -> a loaded
    model; a view whose models are missing is skipped) and `image`, inside one shared
    forward per image as the pages open it; returns the failures, each named. `text`: the
    views of the pages that read the text model, which need no picture; else the others.
    `pages`: only the views of these page files."""
    failures = []
    with shared_forwards():
        for declared in every_view():
            if text != (declared.page.models == ("text",)) or (
                    pages is not None and declared.page.file not in pages):
                continue
            if any(declared.id in declared.page.refusals(model)
                   for name, model in models.items() if name in declared.models and model):
                continue
            try:
                declared.warm(models, image)
            except (ValueError, RuntimeError) as error:
                failures.append(f"{declared.page.file} {declared.deep_link or declared.id}: "
                                f"{error}")
    return failures


# what a class opens first: the Explainer and page 9, on the default picture
FIRST = ("0_vit_explainer.py", "9_interventions.py")


def picture_pages() -> list[str]:
    """The declared pages that draw a picture (page 8 reads the text model only), in menu
    order."""
    from .views import PAGES

    return [file for file, page in PAGES.items() if page.models != ("text",)]


def lecture_order(images: list[str], first: str) -> list[tuple[str, str]]:
    """(gallery id, page file) in the order a lecture needs them: FIRST on the `first`
    picture, then its other pages, then every page of each other picture."""
    steps = [(first, page) for page in FIRST]
    ordered = [first, *(image for image in images if image != first)]
    return steps + [(image, page) for image in ordered for page in picture_pages()
                    if (image, page) not in steps]


def warm_step(vit, cnn, image, page: str) -> str | None:
    """One page's declared views for one image: None, or its failures in words."""
    return "; ".join(warm_views({"vit": vit, "cnn": cnn}, image, pages=(page,))) or None


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
    """Every page's default views for one image; a view that fails is named, and the
    others still run."""
    started, (computed, read) = time.perf_counter(), _counts()
    failures = warm_views({"vit": vit, "cnn": cnn}, image)
    now_computed, now_read = _counts()
    return Warmed(sample_id, time.perf_counter() - started, now_computed - computed,
                  now_read - read, failures)


# --- the models, before the first visitor (`warmup`, and `make run` via dashboard/serve.py) ---

def default_models() -> tuple[str, ...]:
    from ..models import DEFAULT_CNN, DEFAULT_TEXT, DEFAULT_VIT

    return (DEFAULT_VIT, DEFAULT_CNN, DEFAULT_TEXT)


def warm_up(model_ids: tuple[str, ...] | None = None, sample: str | None = None) -> list[dict]:
    """Load each model (building DINOv2's k-NN bank and its per-block banks) and run one
    prediction on `sample` (None: the picture the app opens on); a text model computes the
    default views of the page that reads it.

    Returns one row per model: id, whether it loaded, seconds, the top class, and the
    default views that failed (named).
    """
    from ..images import DEFAULT_SAMPLE, load_sample
    from ..models import availability, get_model

    model_ids = model_ids or default_models()

    image = load_sample(sample or DEFAULT_SAMPLE)
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
        failures = (warm_views({"text": model}, None, text=True)
                    if model.spec.family == "text" else [])
        rows.append({"model": model_id, "loaded": True,
                     "seconds": time.perf_counter() - started, "top": top, "reason": "",
                     "failures": failures})
    return rows
