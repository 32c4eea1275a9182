"""A random-weight model is the same model on every replica and in every run: its
initialisation is seeded from the model id, and the seed is stated in `meta` and on
the page."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import torch

from apptest_helpers import open_app
from xai_core.infra import rng
from xai_core.models import get_model, loaders
from xai_core.models.loaders import random_weights_seed

ROOT = Path(__file__).resolve().parent.parent


def expected_seed(model_id: str) -> int:
    """The documented rule, recomputed: the first 4 bytes of sha256(id), big-endian."""
    return int(hashlib.sha256(model_id.encode()).hexdigest()[:8], 16)


def explain_in_a_new_process(out: Path) -> subprocess.Popen:
    env = dict(os.environ, HF_HUB_OFFLINE="1", VIT_LENS_DEVICE="cpu", OMP_NUM_THREADS="1")
    return subprocess.Popen(
        [sys.executable, "-m", "xai_core", "explain", "--model", "deit-s16", "--random-weights",
         "--image", "sample:chelsea", "--method", "daam", "--out", str(out)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_processes_give_identical_random_weight_maps(tmp_path):
    outs = [tmp_path / "first.npz", tmp_path / "second.npz"]
    runs = [explain_in_a_new_process(out) for out in outs]  # two processes, side by side
    for run in runs:
        _, err = run.communicate(timeout=600)
        assert run.returncode == 0, err
    first, second = (np.load(out) for out in outs)
    assert first["map"].std() > 0  # a real map, not a constant
    assert np.array_equal(first["map"], second["map"])
    for name in first.files:
        if name != "meta":
            assert np.array_equal(first[name], second[name]), name
    meta = json.loads(str(first["meta"]))
    assert meta["random_weights"] is True
    assert meta["random_weights_seed"] == expected_seed("deit-s16")
    assert f"seed {expected_seed('deit-s16')}" in meta["weights_source"]
    assert f"seed {expected_seed('deit-s16')}" in meta["model_label"]


def test_the_seed_follows_the_id_and_leaves_the_global_generator_alone():
    assert random_weights_seed("deit-s16") == expected_seed("deit-s16")
    assert random_weights_seed("vit-b16") == expected_seed("vit-b16") != expected_seed("deit-s16")
    before = torch.get_rng_state()
    model = get_model("deit-s16-distilled", random_weights=True)
    assert torch.equal(torch.get_rng_state(), before)
    assert model.seed == expected_seed("deit-s16-distilled")
    assert "RANDOM WEIGHTS" in model.label and f"seed {model.seed}" in model.label


def test_the_page_states_the_seed():
    app = open_app(vit_model="deit-s16", vit_random=True)
    assert not app.exception, app.exception
    seed = expected_seed("deit-s16")
    warnings = " ".join(str(element.value) for element in app.error)
    assert f"seed {seed}" in warnings and "derived from the model id" in warnings
    subheaders = " ".join(str(element.value) for element in app.subheader)
    assert f"RANDOM WEIGHTS, seed {seed}" in subheaders


def test_the_build_waits_for_other_seeded_draws(monkeypatch):
    """timm draws the initial weights from torch's one default generator; another thread's
    seeded block (SmoothGrad's noise, KernelSHAP's coalitions) must not interleave with it,
    so the build takes the same process-wide lock."""
    monkeypatch.setattr(loaders, "_models", {})
    built = []
    with rng._GLOBAL_RNG:  # another seeded block is under way
        worker = threading.Thread(target=lambda: built.append(
            get_model("deit-s16", random_weights=True)))
        worker.start()
        worker.join(timeout=3)
        assert worker.is_alive() and not built  # waiting for the generator
    worker.join(timeout=120)
    assert built and built[0].seed == expected_seed("deit-s16")
