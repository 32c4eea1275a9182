"""What a benchmark run covers: its settings, images, boxes and the methods per model.

Everything here is checked before any model loads, so bad input costs nothing and
reaches the user as one sentence (`OptionError`).
"""

from __future__ import annotations

import csv
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from PIL import Image, ImageOps

from ..images import IMAGE_SUFFIXES, SAMPLES, ImageError, load_image_file, load_sample, sample_path
from ..infra.errors import OptionError
from ..methods import METHODS
from ..metrics import HIGHER, METRICS, curve_metrics, needing
from ..metrics.faithfulness import BASELINE, STEPS, check_baseline_and_steps

RANDOM_METHOD = "random"  # the floor: a seeded random map on the model's explanation grid
# Every metric's direction and words are its declaration's (`xai_core.metrics`).
DIRECTION = {name: declared.better for name, declared in METRICS.items()}
METRIC_NOTES = {name: declared.summary for name, declared in METRICS.items()}
CURVE_METRICS = curve_metrics()  # deletion, insertion, pos-perturb, neg-perturb
BOX_METRICS = needing("boxes")  # pointing-game, energy-in-box
DEFAULT_METRICS = curve_metrics("pixel")  # deletion and insertion
DEFAULT_MODELS = ("dinov2-s14", "efficientnet-lite0")
# the class score's range (metrics.faithfulness.class_scorer) per kind of head
SCORE_RANGE = {"imagenet": (0.0, 1.0), "knn": (-1.0, 1.0)}  # a probability; a mean cosine


def value_range(metric: str, model_id: str) -> tuple[float, float] | None:
    """The values `metric` can take on `model_id` (None for a model this code does not know,
    e.g. a results.json from elsewhere): the curve metrics are areas under the class score
    over a fraction from 0 to 1, so they keep the score's range; ROAD is a difference of two
    such scores; the randomisation check a Spearman correlation; the box metrics shares."""
    from ..models import MODEL_SPECS

    if metric in BOX_METRICS:
        return 0.0, 1.0
    if metric == "randomisation":
        return -1.0, 1.0
    spec = MODEL_SPECS.get(model_id)
    if spec is None or spec.head not in SCORE_RANGE:
        return None
    low, high = SCORE_RANGE[spec.head]
    return (low - high, high - low) if metric == "road" else (low, high)


@dataclass(frozen=True)
class ImageItem:
    """One image of the run. `id` names it in the table; `source` is where it loads from
    (`sample:ID` or an absolute file path); `label` is its ImageFolder class, if any."""

    id: str
    source: str
    label: str | None = None

    @property
    def sample_id(self) -> str | None:
        return self.source.split(":", 1)[1] if self.source.startswith("sample:") else None

    @property
    def path(self) -> Path:
        return sample_path(self.sample_id) if self.sample_id else Path(self.source)

    def load(self):
        return load_sample(self.sample_id) if self.sample_id else load_image_file(self.source)

    @property
    def file_name(self) -> str:
        return self.path.name

    def original_size(self) -> tuple[int, int]:
        """(W, H) of the file as stored, the frame a box file's coordinates refer to."""
        with Image.open(self.path) as image:
            return ImageOps.exif_transpose(image).size


@dataclass(frozen=True)
class Settings:
    """A run's settings. `value_fields` are those that change a value: a folder can only
    be resumed with the same ones."""

    models: tuple[str, ...] = DEFAULT_MODELS
    images: str = "sample:"
    methods: tuple[str, ...] = ("all",)
    metrics: tuple[str, ...] = DEFAULT_METRICS
    steps: int = STEPS.default
    baseline: str = BASELINE.default
    boxes: str | None = None
    seed: int = 0
    random_weights: bool = False
    stability: bool = False  # also each map's seed stability (two more runs of a seeded one)

    def value_fields(self) -> dict:
        fields = {"steps": self.steps, "baseline": self.baseline, "seed": self.seed,
                  "random_weights": self.random_weights}
        if self.stability:  # a folder's rows all carry the column, or none does
            fields["with_stability"] = True
        return fields

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Settings":
        data = dict(data)
        for key in ("models", "methods", "metrics"):
            data[key] = tuple(data[key])
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def check_settings(settings: Settings) -> None:
    from ..models import get_spec

    for model_id in settings.models:
        spec = get_spec(model_id)
        if spec.family not in ("vit", "cnn"):
            raise OptionError(f"{model_id} is a {spec.family} model; the benchmark scores "
                              "image classifiers (ViTs and CNNs).")
    unknown = [m for m in settings.metrics if m not in DIRECTION]
    if unknown or not settings.metrics:
        raise OptionError(f"Unknown metric(s) {', '.join(unknown) or '(none)'}; choose from: "
                          f"{', '.join(DIRECTION)}.")
    if any(m in BOX_METRICS for m in settings.metrics) and not settings.boxes:
        raise OptionError(f"{' and '.join(BOX_METRICS)} need a box file (--boxes FILE).")
    check_baseline_and_steps(settings.baseline, settings.steps)
    for model_id in settings.models:
        methods_for(model_id, settings.methods)


def methods_for(model_id: str, requested: tuple[str, ...]) -> list[str]:
    """The methods the run scores on this model, then the random floor. "all" = every
    registered method for the model's family but those whose declaration says why `all`
    leaves them out (`benchmark_skip`: no map of the class decision, a duplicate map, far
    too slow)."""
    from ..models import get_spec

    family = get_spec(model_id).family
    if tuple(requested) == ("all",):
        names = [name for name, info in METHODS.items()
                 if info.fits(family) and not info.benchmark_skip]
    else:
        unknown = [name for name in requested if name not in METHODS and name != RANDOM_METHOD]
        if unknown:
            raise OptionError(f"Unknown method(s) {', '.join(unknown)}. Methods: "
                              f"{', '.join(sorted(METHODS))}, or all.")
        names = [name for name in requested
                 if name != RANDOM_METHOD and METHODS[name].fits(family)]
    return names + [RANDOM_METHOD]


def parse_shard(text: str | None) -> tuple[int, int]:
    """'i/n' with 0 <= i < n (a job array's task index and its size)."""
    if not text:
        return 0, 1
    index, sep, count = text.partition("/")
    try:
        index, count = int(index), int(count)
    except ValueError:
        index = count = -1
    if not sep or count < 1 or not 0 <= index < count:
        raise OptionError(f"--shard takes i/n with 0 <= i < n (e.g. 0/4), got '{text}'.")
    return index, count


def list_images(spec: str) -> list[ImageItem]:
    """`sample:` (the gallery photos), `sample:a,b` (some of them), a folder of images,
    or an ImageFolder tree (one sub-folder per class, the folder name is the class)."""
    if spec.startswith("sample:"):
        wanted = [s for s in spec.split(":", 1)[1].split(",") if s]
        for sample_id in wanted:
            if sample_id not in SAMPLES:
                raise OptionError(f"There is no sample called '{sample_id}'. Samples: "
                                  f"{', '.join(SAMPLES)}.")
        return [ImageItem(f"sample:{s}", f"sample:{s}") for s in wanted or SAMPLES]
    root = Path(spec)
    if not root.is_dir():
        raise OptionError(f"--images takes a folder or sample:; {spec} is not a folder.")
    items = [ImageItem(p.name, str(p.resolve())) for p in sorted(root.iterdir())
             if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES]
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        items += [ImageItem(f"{folder.name}/{p.name}", str(p.resolve()), folder.name)
                  for p in sorted(folder.iterdir())
                  if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES]
    if not items:
        raise OptionError(f"{spec} holds no image files ({', '.join(IMAGE_SUFFIXES)}).")
    return items


def read_boxes(path: str, items: list[ImageItem]) -> dict[str, list[tuple[float, ...]]]:
    """Boxes per image id, in the stored file's pixels: a CSV with columns
    image,x0,y0,x1,y1 (several rows per image allowed), or COCO JSON (`images` with
    `file_name`, `annotations` with `image_id` and `bbox` = [x, y, width, height]).
    An image is matched by its id in the run (`sample:coffee`, `class/file.jpg`), or by
    its file name (`coffee.png`)."""
    file = Path(path)
    if not file.is_file():
        raise OptionError(f"There is no box file at {path}.")
    try:
        raw = _read_coco(file) if file.suffix.lower() == ".json" else _read_csv(file)
    except (ValueError, KeyError, TypeError, json.JSONDecodeError, csv.Error) as error:
        raise OptionError(f"The box file {path} cannot be read: {error}.") from None
    by_name = {item.file_name: item.id for item in items}
    ids = {item.id for item in items}
    boxes: dict[str, list[tuple[float, ...]]] = {}
    for name, box in raw:
        key = name if name in ids else by_name.get(Path(name).name)
        if key is not None:
            if not (box[2] > box[0] and box[3] > box[1]):
                raise OptionError(f"The box file {path} has an empty box for {name}: {box}.")
            boxes.setdefault(key, []).append(box)
    if not boxes:
        raise OptionError(f"No box in {path} names an image of this run.")
    return boxes


def _read_csv(file: Path) -> list[tuple[str, tuple[float, ...]]]:
    with file.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    return [(row["image"], tuple(float(row[k]) for k in ("x0", "y0", "x1", "y1")))
            for row in rows]


def _read_coco(file: Path) -> list[tuple[str, tuple[float, ...]]]:
    data = json.loads(file.read_text())
    names = {image["id"]: image["file_name"] for image in data["images"]}
    out = []
    for note in data["annotations"]:
        x, y, w, h = (float(v) for v in note["bbox"])
        out.append((names[note["image_id"]], (x, y, x + w, y + h)))
    return out


def load_item(item: ImageItem):
    try:
        return item.load()
    except ImageError as error:
        raise OptionError(f"{item.id}: {error}") from None
