"""`python -m xai_core benchmark`: same numbers as the single-image `metrics` command,
resumable (a rerun skips, a killed run resumes without duplicates), the same table on Ray,
and a summary whose intervals and ranks match independent computations."""

import csv
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy import stats as scipy_stats

from xai_core.maps import upsample
from xai_core.metrics.agreement import spearman
from xai_core.metrics.faithfulness import faithfulness
from xai_core.benchmark.plan import Settings
from xai_core.benchmark.run import read_units, run_benchmark
from xai_core.metrics.statistics import t_interval
from xai_core.benchmark.summary import mean_ranks
from xai_core.cli.main import main
from xai_core.images import fit_to_model, model_input_box
from xai_core.metrics.faithfulness import CURVE_CACHE
from xai_core.pipeline import CAPTURE_CACHE

ROOT = Path(__file__).resolve().parent.parent
SMALL = Settings(models=("dinov2-s14",), images="sample:coffee,chelsea",
                 methods=("attention", "gae"), metrics=("deletion", "insertion"), steps=3)
IMAGES4 = "sample:coffee,chelsea,rocket,astronaut"


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench-local")
    return out, run_benchmark(SMALL, out, progress_bar=False)


def read_csv(path: Path) -> list[dict]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def test_table_equals_the_metrics_command(local_run, capsys):
    out, summary = local_run
    rows = read_csv(out / "results.csv")
    assert len(rows) == 2 * 3 * 2  # images x (2 methods + random floor) x metrics
    assert {r["method"] for r in rows} == {"attention", "gae", "random"}
    CAPTURE_CACHE.clear()  # the command recomputes everything, nothing is read back
    CURVE_CACHE.clear()
    for row in rows:
        if row["method"] == "random":
            continue
        code = main(["metrics", "--model", row["model"], "--image", row["image"],
                     "--method", row["method"], "--metric", row["metric"], "--steps", "3",
                     "--baseline", "zeros", "--json"])
        assert code == 0
        payload = json.loads(capsys.readouterr().out)
        assert float(row["value"]) == pytest.approx(payload["auc"], abs=1e-7), row
        assert int(row["target"]) == payload["target"]
    assert summary["units"] == {"total": 6, "done": 6}


def test_random_floor_is_seeded_noise_on_the_patch_grid(local_run):
    out, _ = local_run
    from xai_core.benchmark.scoring import random_map
    from xai_core.models import get_model

    model = get_model("dinov2-s14")
    floor = random_map(model, "sample:coffee", seed=0)
    patch = model.module.patch_embed.patch_size[0]
    assert floor.shape == (224 // patch, 224 // patch)
    np.testing.assert_array_equal(floor, random_map(model, "sample:coffee", seed=0))
    assert not np.array_equal(floor, random_map(model, "sample:chelsea", seed=0))
    row = next(r for r in read_csv(out / "results.csv")
               if r["method"] == "random" and r["image"] == "sample:coffee"
               and r["metric"] == "deletion")
    target = int(row["target"])
    from xai_core.images import load_sample

    curve = faithfulness(model, load_sample("coffee"), floor, "deletion", target, "zeros", 3)
    assert float(row["value"]) == pytest.approx(curve.auc, abs=1e-7)


def test_rerun_skips_finished_units(local_run):
    out, _ = local_run
    journal = (out / "rows.jsonl").read_text().splitlines()
    again = run_benchmark(SMALL, out, progress_bar=False)
    assert again["run"]["computed_units"] == 0 and again["run"]["skipped_units"] == 6
    assert (out / "rows.jsonl").read_text().splitlines() == journal


def test_a_folder_refuses_other_value_settings(local_run):
    out, _ = local_run
    code = main(["benchmark", "--model", "dinov2-s14", "--images", "sample:coffee",
                 "--methods", "attention", "--metrics", "deletion", "--steps", "5",
                 "--out", str(out)])
    assert code == 2


def test_summary_matches_an_independent_recomputation(local_run):
    out, summary = local_run
    rows = [r for r in read_csv(out / "results.csv") if r["metric"] == "deletion"]
    table = next(t for t in summary["tables"] if t["metric"] == "deletion")
    by_method = {e["method"]: e for e in table["methods"]}
    for method in ("attention", "gae", "random"):
        values = [float(r["value"]) for r in rows if r["method"] == method]
        assert by_method[method]["mean"] == pytest.approx(np.mean(values))
        expected = scipy_stats.t.interval(0.95, len(values) - 1, loc=np.mean(values),
                                          scale=scipy_stats.sem(values))
        assert by_method[method]["interval"] == pytest.approx(list(expected), abs=1e-12)
    # ranks by hand: per image, sort the three deletion AUCs ascending (lower is better)
    ranks = {m: [] for m in ("attention", "gae", "random")}
    for image in ("sample:coffee", "sample:chelsea"):
        scores = {r["method"]: float(r["value"]) for r in rows if r["image"] == image}
        for position, method in enumerate(sorted(scores, key=scores.get), start=1):
            ranks[method].append(position)
    for method, positions in ranks.items():
        assert by_method[method]["mean_rank"] == pytest.approx(np.mean(positions))
    assert [e["method"] for e in table["methods"]] == sorted(
        ranks, key=lambda m: (np.mean(ranks[m]), m))


def test_t_interval_and_ranks_against_closed_forms():
    assert t_interval(np.array([0.3, 0.3, 0.3])) == (0.3, 0.3)
    rng = np.random.default_rng(5)
    values = rng.normal(2.0, 1.0, size=400)
    low, high = t_interval(values)
    half_width = 1.966 * values.std(ddof=1) / math.sqrt(values.size)  # t(399) quantile
    assert (high - low) / 2 == pytest.approx(half_width, rel=1e-3)
    assert (low + high) / 2 == pytest.approx(values.mean(), abs=1e-12)
    ranks = mean_ranks({"a": {"x": 1.0, "y": 3.0}, "b": {"x": 1.0, "y": 2.0},
                        "c": {"x": 0.5, "y": float("nan")}}, higher_is_better=False)
    # image x: c=1, a=b=2.5 (tie); image y (c missing): b=1, a=2
    assert ranks == {"c": 1.0, "a": pytest.approx(2.25), "b": pytest.approx(1.75)}


def test_killed_run_resumes_without_duplicates(tmp_path):
    """A subprocess is killed (SIGKILL) after its first finished units; the rerun completes
    the table and no unit appears twice."""
    args = [sys.executable, "-m", "xai_core", "benchmark", "--model", "dinov2-s14",
            "--images", IMAGES4, "--methods", "attention", "--metrics", "deletion",
            "--steps", "6", "--out", str(tmp_path), "--progress", "off"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    journal = tmp_path / "rows.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and process.poll() is None:
        if journal.is_file() and len(journal.read_text().splitlines()) >= 2:
            break
        time.sleep(0.05)
    assert process.poll() is None, process.stderr.read().decode()[-2000:]
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    before = len(journal.read_text().splitlines())
    total = 4 * 2  # images x (attention + random)
    assert 2 <= before < total
    summary = run_benchmark(Settings(models=("dinov2-s14",), images=IMAGES4,
                                     methods=("attention",), metrics=("deletion",), steps=6),
                            tmp_path, progress_bar=False)
    assert summary["run"]["skipped_units"] == before
    units = [tuple(json.loads(line)["unit"]) for line in journal.read_text().splitlines()]
    assert len(units) == len(set(units)) == total
    assert len(read_csv(tmp_path / "results.csv")) == total


def test_a_torn_last_line_is_cut_before_appending(tmp_path):
    from xai_core.benchmark.run import Journal

    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"unit": ["a", "m", "x"], "rows": []}) + "\n" + '{"unit": ["b"')
    journal = Journal(tmp_path, (0, 1))
    journal.append(("c", "m", "x"), [])
    assert list(read_units(tmp_path)) == [("a", "m", "x"), ("c", "m", "x")]


def test_ray_backend_gives_the_same_table(local_run, tmp_path):
    ray = pytest.importorskip("ray")
    from xai_core.benchmark.run import _runtime_env

    out, _ = local_run
    ray.init(num_cpus=2, include_dashboard=False, runtime_env=_runtime_env(),
             logging_level="ERROR", log_to_driver=False)
    try:
        summary = run_benchmark(SMALL, tmp_path, backend="ray", progress_bar=False)
    finally:
        ray.shutdown()
    assert summary["run"]["backend"] == "ray" and summary["run"]["tasks"] >= 2
    keys = ("image", "model", "method", "metric", "target")
    local = {tuple(r[k] for k in keys): float(r["value"]) for r in read_csv(out / "results.csv")}
    remote = {tuple(r[k] for k in keys): float(r["value"])
              for r in read_csv(tmp_path / "results.csv")}
    assert remote.keys() == local.keys()
    for key, value in local.items():
        assert remote[key] == pytest.approx(value, abs=1e-6), key


def test_shards_split_the_images_and_share_the_folder(tmp_path):
    base = Settings(models=("efficientnet-lite0",), images="sample:coffee,chelsea,rocket",
                    methods=("gradcam",), metrics=("deletion",), steps=2)
    first = run_benchmark(base, tmp_path, shard="0/2", progress_bar=False)
    assert first["units"] == {"total": 6, "done": 4}  # images 0 and 2 of 3
    second = run_benchmark(base, tmp_path, shard="1/2", progress_bar=False)
    assert second["units"] == {"total": 6, "done": 6}
    assert sorted(p.name for p in tmp_path.glob("rows*.jsonl")) == [
        "rows-shard-0-of-2.jsonl", "rows-shard-1-of-2.jsonl"]
    assert len(read_csv(tmp_path / "results.csv")) == 6


def test_model_input_box_follows_the_resize_and_crop():
    """A red rectangle drawn on a wide image: after fit_to_model the red pixels lie
    exactly within the carried box (up to the resampling's one-pixel blur)."""
    image = Image.new("RGB", (640, 400), (0, 0, 255))
    box = (300, 100, 420, 260)
    image.paste((255, 0, 0), box)
    for crop_pct in (0.875, 1.0):
        fitted = np.asarray(fit_to_model(image, (224, 224), crop_pct, "bilinear")).astype(int)
        red = (fitted[..., 0] > 128) & (fitted[..., 2] < 128)
        ys, xs = np.nonzero(red)
        x0, y0, x1, y1 = model_input_box(box, image.size, (224, 224), crop_pct)
        assert abs(xs.min() - x0) <= 1 and abs(xs.max() + 1 - x1) <= 1
        assert abs(ys.min() - y0) <= 1 and abs(ys.max() + 1 - y1) <= 1
    assert model_input_box((0, 0, 20, 20), (640, 400), (224, 224), 0.875) is None  # cropped


def test_box_metrics_from_a_csv_file(tmp_path):
    from xai_core.images import sample_path

    with Image.open(sample_path("coffee")) as photo:
        width, height = photo.size
    boxes = tmp_path / "boxes.csv"
    boxes.write_text(f"image,x0,y0,x1,y1\ncoffee.png,0,0,{width // 2},{height}\n")
    settings = Settings(models=("efficientnet-lite0",), images="sample:coffee",
                        methods=("gradcam",), metrics=("pointing-game", "energy-in-box"),
                        boxes=str(boxes), steps=2)
    run_benchmark(settings, tmp_path / "out", progress_bar=False)
    rows = {(r["method"], r["metric"]): r for r in read_csv(tmp_path / "out" / "results.csv")}
    from xai_core.studies.method_runs import run_method
    from xai_core.images import load_sample
    from xai_core.models import get_model

    model = get_model("efficientnet-lite0")
    saliency = run_method(model, load_sample("coffee"), "gradcam",
                          int(rows[("gradcam", "energy-in-box")]["target"])).map
    placed = model_input_box((0, 0, width // 2, height), (width, height), (224, 224),
                             model.spec.crop_pct)
    values = np.clip(upsample(saliency, (224, 224)), 0, None)
    inside = values[placed[1]:placed[3], placed[0]:placed[2]].sum() / values.sum()
    assert float(rows[("gradcam", "energy-in-box")]["value"]) == pytest.approx(inside, rel=1e-5)
    peak_y, peak_x = np.unravel_index(np.argmax(values), values.shape)
    dx = max(placed[0] - peak_x, 0, peak_x - (placed[2] - 1))
    dy = max(placed[1] - peak_y, 0, peak_y - (placed[3] - 1))
    hit = math.hypot(dx, dy) <= 15
    assert float(rows[("gradcam", "pointing-game")]["value"]) == float(hit)


@pytest.mark.parametrize("extra", [
    ["--metrics", "deletion,no-such-metric"],
    ["--metrics", "pointing-game"],  # needs --boxes
    ["--shard", "2/2"],
    ["--methods", "no-such-method"],
    ["--images", "/no/such/folder"],
    ["--steps", "1"],
    ["--baseline", "noise"],
])
def test_bad_input_exits_2_with_one_line(extra, tmp_path, capsys):
    code = main(["benchmark", "--model", "efficientnet-lite0", "--images", "sample:coffee",
                 "--out", str(tmp_path), *extra])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1


def test_road_equals_pytorch_grad_cam_and_randomisation_uses_a_private_copy(tmp_path):
    import torch
    from pytorch_grad_cam.metrics.road import ROADCombined

    from xai_core.benchmark.scoring import randomised_twin
    from xai_core.studies.method_runs import run_method
    from xai_core.images import load_sample
    from xai_core.models import get_model
    from xai_core.pipeline import prepare

    settings = Settings(models=("efficientnet-lite0",), images="sample:coffee",
                        methods=("gradcam",), metrics=("road", "randomisation"), steps=2, seed=4)
    run_benchmark(settings, tmp_path, progress_bar=False)
    rows = {(r["method"], r["metric"]): r for r in read_csv(tmp_path / "results.csv")}
    model, image = get_model("efficientnet-lite0"), load_sample("coffee")
    target = int(rows[("gradcam", "road")]["target"])
    saliency = run_method(model, image, "gradcam", target).map
    cam = upsample(saliency, (224, 224))
    cam = ((cam - cam.min()) / (cam.max() - cam.min()))[None].astype(np.float32)

    def probability(output):
        return output.softmax(-1)[target]

    with torch.random.fork_rng():
        torch.manual_seed(4)
        expected = ROADCombined()(prepare(model, image).pixels, cam, [probability], model.module)
    assert float(rows[("gradcam", "road")]["value"]) == pytest.approx(float(expected[0]),
                                                                      abs=1e-5)
    twin = randomised_twin(model, 4)
    trained = dict(model.module.named_parameters())
    changed = [name for name, p in twin.module.named_parameters()
               if not torch.equal(p, trained[name])]
    assert changed and all(p.requires_grad is False for p in model.module.parameters())
    assert twin.spec.id != model.spec.id and twin.random_weights
    other = run_method(twin, image, "gradcam", target).map
    assert float(rows[("gradcam", "randomisation")]["value"]) == pytest.approx(
        spearman(saliency, other), abs=1e-9)
    # a map that ignores the weights (the random floor) correlates perfectly with itself
    assert float(rows[("random", "randomisation")]["value"]) == pytest.approx(1.0)


def test_cli_prints_the_ranking_and_writes_the_tables(tmp_path, capsys):
    code = main(["benchmark", "--model", "efficientnet-lite0", "--images", "sample:coffee,rocket",
                 "--methods", "gradcam", "--metrics", "deletion", "--steps", "2",
                 "--out", str(tmp_path), "--progress", "off"])
    assert code == 0
    text = capsys.readouterr().out
    assert "efficientnet-lite0 · deletion (lower is better; 2 images)" in text
    assert "95 % interval" in text and "the floor" in text
    summary = json.loads((tmp_path / "summary.json").read_text())
    gradcam = next(e for e in summary["tables"][0]["methods"] if e["method"] == "gradcam")
    assert gradcam["vs_random"]["verdict"] in text
    assert summary["versions"]["captum"] == "0.9.0" and summary["settings"]["steps"] == 2
    assert len(read_csv(tmp_path / "results.csv")) == 4


def test_coco_boxes_are_read_as_corners_and_matched_by_file_name(tmp_path):
    from xai_core.benchmark.plan import list_images, read_boxes

    coco = {"images": [{"id": 7, "file_name": "val/coffee.png"}, {"id": 8, "file_name": "x.jpg"}],
            "annotations": [{"image_id": 7, "bbox": [10, 20, 30, 40]},
                            {"image_id": 7, "bbox": [0, 0, 5, 5]},
                            {"image_id": 8, "bbox": [1, 1, 2, 2]}]}
    path = tmp_path / "boxes.json"
    path.write_text(json.dumps(coco))
    boxes = read_boxes(str(path), list_images("sample:coffee,chelsea"))
    assert boxes == {"sample:coffee": [(10.0, 20.0, 40.0, 60.0), (0.0, 0.0, 5.0, 5.0)]}
    path.write_text("{broken")
    with pytest.raises(Exception, match="cannot be read"):
        read_boxes(str(path), list_images("sample:coffee"))
