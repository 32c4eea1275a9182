"""One comparison of page 7 - an image and, per model, the runs of the chosen methods - and
what its views derive from it: seed stability, faithfulness curves, agreement, attention vs
gradient, localisation against a box, and the export bundle with its figures.

`studies.method_runs` runs and measures the methods; this module works on their runs, so the
page keeps only layout and words, and the CLI or a bench can ask the same questions. Every
number comes from a content-keyed cache (the methods' results, the curves, the agreement matrices, the
built figures), so the export, asked after the other views, reuses what they computed.
The defaults of the views are named here once.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Callable


from ..studies import method_runs
from ..studies.method_runs import AttentionVsGradient, ModelSection
from ..figures.curves import attention_gradient_scatter, curves_figure
from ..figures.matrices import agreement_heatmap
from ..analysis.perturbation import BASELINES
from ..figures.overlays import practical_matrix
from ..figures.style import plain_text
from ..infra.faults import StopCheck
from ..methods import METHODS
from ..metrics.agreement import agreement_matrices
from ..metrics.faithfulness import faithfulness
from ..metrics.stability import UNSTABLE_BELOW, seed_stability
from ..pipeline import prepare

FAMILY_LABEL = {"vit": "ViT", "cnn": "CNN"}
DEFAULT_TOP_K_PERCENT = 10  # the agreement's top-k overlap, in % of a map's cells
DEFAULT_BOX = (0.25, 0.25, 0.75, 0.75)  # the localisation box: the middle half of the input
BOX_NAMES = ("x0", "y0", "x1", "y1")
DEFAULT_FAITH_STEPS = 20
CURVE_METRICS = ("deletion", "insertion")
PERTURB_METRICS = ("pos-perturb", "neg-perturb")
Progress = Callable[[float, str], None]  # (fraction done, what runs now)


def default_box(width: int, height: int) -> list[int]:
    """DEFAULT_BOX in whole pixels of a width x height input (rounded down)."""
    return [int(f * size) for f, size in zip(DEFAULT_BOX, (width, height, width, height))]


@dataclass(frozen=True)
class FaithSettings:
    """What "Run faithfulness metrics" asked for."""

    baseline: str = BASELINES[0]
    steps: int = DEFAULT_FAITH_STEPS
    perturb: bool = True

    @property
    def metrics(self) -> tuple[str, ...]:
        return CURVE_METRICS + (PERTURB_METRICS if self.perturb else ())


@dataclass(frozen=True)
class ExportRequest:
    """The settings of the other views that the export bundle records."""

    faith: FaithSettings | None = None
    top_k_percent: int = DEFAULT_TOP_K_PERCENT
    box: tuple[int, ...] | None = None  # on the first model's input; None: no localisation


@dataclass
class Comparison:
    """The page's state for every view: the image and one section per model."""

    image: object
    sections: list[ModelSection]

    def ok_runs(self):
        """(section, run) for every run that gave a map."""
        return [(s, r) for s in self.sections for r in s.runs if r.ok]

    def family(self, section: ModelSection) -> str:
        return FAMILY_LABEL[section.model.spec.family]

    def model_input(self, section: ModelSection):
        """The picture `section`'s model sees (resized and cropped)."""
        return prepare(section.model, self.image).model_image

    def first_input(self):
        """The first model's input picture (the box is typed on it)."""
        return self.model_input(self.sections[0])

    # --- maps and their seed stability -----------------------------------------------------

    def stabilities(self, should_stop: StopCheck | None = None) -> dict:
        """(family, method) -> the seed stability of each map that ran (cached runs)."""
        return {(s.model.spec.family, r.name): seed_stability(
            METHODS[r.name], s.model, self.image, target=r.target, head=s.head,
            should_stop=should_stop, **r.options)["stability"] for s, r in self.ok_runs()}

    def unstable(self, stability: dict) -> dict:
        """(family, map label) -> stability, for the maps below UNSTABLE_BELOW."""
        found = {}
        for section, run in self.ok_runs():
            rho = stability.get((section.model.spec.family, run.name))
            if rho is not None and rho < UNSTABLE_BELOW:
                found[(section.model.spec.family, run.label)] = rho
        return found

    def matrix_figure(self, stability: dict | None = None):
        """The practical matrix: every map of every model over its input (None without
        maps); the maps below UNSTABLE_BELOW in `stability` greyed out."""
        rows, greyed = [], {}
        unstable = self.unstable(stability or {})
        for section in self.sections:
            maps = [(r.label, r.map) for r in section.runs if r.ok]
            greyed |= {(len(rows), label): rho for (family, label), rho in unstable.items()
                       if family == section.model.spec.family}
            if maps:
                rows.append((f"{self.family(section)}: {plain_text(section.target_label[:24])}",
                             self.model_input(section), maps))
        return practical_matrix(rows, greyed=greyed) if rows else None

    # --- faithfulness ------------------------------------------------------------------------

    def faithfulness(self, settings: FaithSettings, progress: Progress | None = None,
                     should_stop: StopCheck | None = None) -> int:
        """Fill each section's curves for `settings` (cached by content, so asking again
        costs nothing); returns the number of curves."""
        jobs = [(s, r, m) for s, r in self.ok_runs() for m in settings.metrics]
        for done, (section, run, metric) in enumerate(jobs):
            def report(step, total, done=done, what=f"{section.model.spec.display_name} · "
                       f"{run.name} · {metric}"):
                if progress is not None:
                    progress(min(1.0, (done + step / total) / len(jobs)), what)
            section.curves[(run.name, metric)] = faithfulness(
                section.model, self.image, run.map, metric, section.target, settings.baseline,
                settings.steps, head=section.head, progress=report, should_stop=should_stop)
        return len(jobs)

    def curve_figures(self) -> list:
        return [curves_figure(s.curves, f"{self.family(s)}: {s.model.label}")
                for s in self.sections if s.curves]

    # --- agreement ---------------------------------------------------------------------------

    def maps(self) -> dict:
        return {f"{self.family(s)}·{r.name}": r.map for s, r in self.ok_runs()}

    def agreement(self, percent: int = DEFAULT_TOP_K_PERCENT) -> dict | None:
        """The agreement between every pair of maps (cached), as the manifest records it."""
        maps = self.maps()
        if len(maps) < 2:
            return None
        names, rho, overlap = agreement_matrices(maps, percent)
        return {"names": names, "spearman": rho, "top_k_percent": percent,
                "top_k_overlap": overlap}

    @cached_property
    def attention_pair(self) -> tuple[ModelSection, AttentionVsGradient] | None:
        """(the ViT section, attention vs gradient per patch) or None (no ViT, other grids)."""
        vit = next((s for s in self.sections if s.model.spec.family == "vit"), None)
        if vit is None:
            return None
        pair = method_runs.attention_vs_gradient(vit.model, self.image, vit.target, head=vit.head)
        return None if pair is None else (vit, pair)

    def scatter_figure(self):
        vit, pair = self.attention_pair
        title = f"{vit.model.spec.display_name}, '{plain_text(vit.target_label)}'"
        return attention_gradient_scatter(pair.attention, pair.gradient, pair.rho, title)

    # --- localisation ------------------------------------------------------------------------

    def localise(self, box) -> list[tuple[ModelSection, dict]]:
        """Every section's maps against `box`, typed on the first model's input."""
        first = self.first_input()
        return [(s, method_runs.localise_section(s, box, (first.height, first.width)))
                for s in self.sections]

    # --- export ------------------------------------------------------------------------------

    def export(self, request: ExportRequest) -> "Export":
        """The bundle: the maps, the curves and localisation asked for, the agreement and
        attention vs gradient, with every setting needed to reproduce them."""
        if request.faith:
            self.faithfulness(request.faith)
        agreement = self.agreement(request.top_k_percent)
        if self.attention_pair is not None:
            agreement = (agreement or {}) | {
                "attention_vs_gradient_spearman": self.attention_pair[1].rho}
        if request.box is not None:
            self.localise(request.box)
        settings = {"faithfulness": asdict(request.faith) if request.faith else None,
                    "methods": {s.model.spec.id: [r.name for r in s.runs] for s in self.sections},
                    "options": {s.model.spec.id: {r.name: r.given for r in s.runs if r.given}
                                for s in self.sections}}
        return Export(self, method_runs.manifest(self.image, self.sections, settings, agreement),
                      agreement)


@dataclass
class Export:
    comparison: Comparison
    manifest: dict
    agreement: dict | None
    npz: bytes = field(init=False, repr=False)

    def __post_init__(self):
        self.npz = method_runs.npz_bytes(self.comparison.sections, self.manifest)

    @property
    def json(self) -> str:
        return json.dumps(self.manifest, indent=2)

    @property
    def digest(self) -> str:
        return method_runs.manifest_digest(self.manifest)

    @property
    def stem(self) -> str:
        return f"vit-lens-comparison-{self.manifest['models'][0]['image_sha256'][:10]}"

    def figures(self) -> list:
        """What the PNG stacks: the practical matrix, attention vs gradient, the curves run
        and the Spearman agreement (each a reused figure: built once for the same inputs)."""
        comparison = self.comparison
        parts = [comparison.matrix_figure()]
        if comparison.attention_pair is not None:
            parts.append(comparison.scatter_figure())
        parts += comparison.curve_figures()
        if self.agreement and "spearman" in self.agreement:
            parts.append(agreement_heatmap(self.agreement["names"], self.agreement["spearman"],
                                           "Spearman rank correlation"))
        return [part for part in parts if part is not None]
