"""The CLI: JSON output, .npz files, and exit status 2 with one line on bad input."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


def cli(*args):
    return subprocess.run([sys.executable, "-m", "xai_core", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def test_models_lists_every_model_with_a_reason():
    result = cli("models", "--json")
    assert result.returncode == 0
    rows = {row["id"]: row for row in json.loads(result.stdout)["models"]}
    assert rows["dinov2-s14"]["available"] and rows["efficientnet-lite0"]["available"]
    assert not rows["vit-b16"]["available"] and rows["vit-b16"]["reason"]


def test_predict_json():
    result = cli("predict", "--model", "efficientnet-lite0", "--image", "sample:coffee",
                 "--topk", "3", "--json")
    assert result.returncode == 0, result.stderr
    top = json.loads(result.stdout)["top"]
    assert top[0]["label"] == "espresso" and len(top) == 3
    assert top[0]["probability"] >= top[1]["probability"] >= top[2]["probability"]


def test_capture_writes_attentions(tmp_path):
    out = tmp_path / "cap.npz"
    result = cli("capture", "--model", "dinov2-s14", "--image", "sample:chelsea", "--out", str(out))
    assert result.returncode == 0, result.stderr
    data = np.load(out)
    assert data["attentions"].shape == (12, 6, 257, 257)
    assert data["attentions"].dtype == np.float32
    np.testing.assert_allclose(data["attentions"].sum(-1), 1.0, atol=1e-4)
    assert int(data["num_prefix_tokens"]) == 1 and list(data["grid"]) == [16, 16]
    assert int(data["patch_size"][0]) == 14
    meta = json.loads(str(data["meta"]))
    assert meta["model"] == "dinov2-s14" and len(meta["image_sha256"]) == 64


@pytest.mark.parametrize("args, fragment", [
    (["predict", "--model", "nope", "--image", "sample:chelsea"], "Unknown model"),
    (["predict", "--model", "efficientnet-lite0", "--image", "/no/such.png"], "no file"),
    (["predict", "--model", "efficientnet-lite0", "--image", "sample:unicorn"], "unicorn"),
    (["predict", "--model", "vit-b16", "--image", "sample:chelsea"], "HF_HUB_OFFLINE"),
    (["explain", "--model", "dinov2-s14", "--image", "sample:chelsea", "--method", "attention",
      "--set", "block=40", "--out", "/tmp/x.npz"], "out of range"),
    (["explain", "--model", "dinov2-s14", "--image", "sample:chelsea", "--method", "magic",
      "--out", "/tmp/x.npz"], "Unknown method"),
    (["explain", "--model", "dinov2-s14", "--image", "sample:chelsea", "--method", "attention",
      "--set", "colour=red", "--out", "/tmp/x.npz"], "Unknown option"),
    (["predict", "--model", "efficientnet-lite0"], "required"),
])
def test_bad_input_exits_2_with_one_line(args, fragment, tmp_path):
    result = cli(*args)
    assert result.returncode == 2
    assert fragment.lower() in result.stderr.lower()
    assert "Traceback" not in result.stderr


def test_bad_upload_file_exits_2(tmp_path):
    fake = tmp_path / "fake.png"
    fake.write_text("<html>not an image</html>")
    result = cli("predict", "--model", "efficientnet-lite0", "--image", str(fake))
    assert result.returncode == 2 and "not an image" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
