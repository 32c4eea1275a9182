"""The result store on disk: a result computed by one process is read, not recomputed, by
another (a second replica, or the same app after a restart); a corrupt file is detected and
recomputed; an unwritable folder leaves the memory cache working; the folder keeps to its
byte bound by evicting the least recently used file; two processes writing one key leave a
whole file; and a file can only ever build data, arrays and xai_core's own classes."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from single_thread import one_torch_thread
from tiny_models import images, tiny_cnn, tiny_vit
from xai_core.infra import cache, result_store
from xai_core.studies import cause_vs_claim, interventions, method_runs, readout
from xai_core.lessons import explainer, interventions_lab
from xai_core import pipeline
from xai_core.infra.cache import BoundedCache, cache_key, fingerprint
from xai_core.methods.base import RESULT_CACHE
from xai_core.models import disk_cache, settings

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


@pytest.fixture
def store_dir(monkeypatch, tmp_path):
    """The shared store on in a fresh folder (conftest turns it off for every other test)."""
    folder = tmp_path / "results"
    monkeypatch.setenv(settings.RESULTS_ENV, str(folder))
    monkeypatch.delenv(settings.RESULTS_MB_ENV, raising=False)
    disk_cache.forget()
    yield folder
    disk_cache.forget()


def counted(value):
    """A compute function that records each call."""
    calls = []

    def compute():
        calls.append(1)
        return value

    return compute, calls


def entry_files(folder: Path) -> list[Path]:
    return sorted(folder.rglob(f"*{result_store.SUFFIX}"))


# --- two processes -------------------------------------------------------------------------

REPLICA = textwrap.dedent("""
    import hashlib, json, sys
    sys.path[:0] = [{tests!r}, {root!r}]
    import xai_core
    import torch
    torch.set_num_threads(1)
    from tiny_models import images, tiny_vit
    from xai_core import capture, pipeline
    from xai_core.studies import method_runs
    from xai_core.infra import result_store
    from xai_core.methods.base import RESULT_CACHE

    passes = []
    real_capture = capture.capture
    def counted_capture(*args, **kwargs):
        passes.append(1)
        return real_capture(*args, **kwargs)
    pipeline.capture = counted_capture  # every ViT capture of the pipeline goes through it

    model = tiny_vit("test-tiny-vit", knn=False)
    result_store.remember_weights(model)
    image = images(1)[0]
    run = method_runs.run_method(model, image, "gae", 3)
    grad = pipeline.vit_capture(model, image, 3).input_grad
    print(json.dumps({{
        "passes": len(passes),
        "computed": sum(c.misses for c in (RESULT_CACHE, pipeline.CAPTURE_CACHE,
                                           pipeline.INPUT_CACHE)),
        "from_disk": sum(c.disk_hits for c in (RESULT_CACHE, pipeline.CAPTURE_CACHE,
                                               pipeline.INPUT_CACHE)),
        "map": hashlib.sha256(run.map.tobytes()).hexdigest(),
        "grad": hashlib.sha256(grad.numpy().tobytes()).hexdigest(),
        "digest": result_store.key_digest(("k", None, False, None, None, 1.5, (2, "x")))}}))
""").format(tests=str(TESTS), root=str(ROOT))


def replica(folder) -> dict:
    """One Python process (a replica, or the app after a restart) asking for a GAE map and
    the capture it came from."""
    env = {**os.environ, settings.RESULTS_ENV: str(folder), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", REPLICA], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_result_computed_by_one_process_is_read_by_the_next(store_dir, tmp_path):
    first = replica(store_dir)
    assert first["passes"] == 1 and first["computed"] >= 3 and first["from_disk"] == 0
    assert len(entry_files(store_dir)) >= 3  # the capture, the GAE result, the page's run
    second = replica(store_dir)  # another process: a second replica, or a restart
    # read: the page's run and the capture; computed: only the resize (`prepare`: cheap, and
    # it holds a PIL image, which the store does not take)
    assert second["passes"] == 0 and second["computed"] == 1 and second["from_disk"] == 2
    assert (second["map"], second["grad"]) == (first["map"], first["grad"])
    # the oracle: a process without the store computes the very same numbers
    alone = replica("off")
    assert alone["passes"] == 1 and alone["from_disk"] == 0
    assert (alone["map"], alone["grad"]) == (first["map"], first["grad"])
    # the key's file name is the same in every process (no hash())
    assert first["digest"] == second["digest"] == alone["digest"]
    assert first["digest"] == result_store.key_digest(
        ("k", None, False, None, None, 1.5, (2, "x")))


# --- the file format ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def models():
    with one_torch_thread():
        vit, cnn = tiny_vit("test-tiny-vit", knn=False), tiny_cnn()
        yield vit, cnn


def test_every_kind_of_shared_result_comes_back_equal(models):
    """Captures, method results, the comparison's runs, the Explainer's payloads and the
    interventions', read-out's and cause vs claim's results: the
    decoded value has the same content (same types, fields, dtypes and bytes) as the one
    computed, by `cache.fingerprint`, which walks dataclasses, dicts, arrays and tensors."""
    vit, cnn = models
    image = images(1)[0]
    values = [pipeline.vit_capture(vit, image, 2), pipeline.vit_capture(vit, image),
              pipeline.cnn_capture(cnn, image, 1), pipeline.model_output(vit, image),
              explainer.overview_payload(vit, image), explainer.block_payload(vit, image, 1),
              explainer.vectors_payload(vit, image, 2),
              interventions.intervene(vit, image, target=0, heads_off="0.1"),
              interventions.intervene(vit, image, target=0, maps=False, tokens_drop="0-3"),
              interventions.head_importance(vit, image, target=0),
              readout.readout(vit, image, target=0),
              cause_vs_claim.cause_vs_claim(vit, image, target=0, removals="tokens", ks=(1, 2),
                                            methods=("attention", "rollout")),
              interventions_lab.importance_stories(
                  vit, image, interventions.head_importance(vit, image, target=0))]
    for model in models:
        values += method_runs.run_methods(model, image, method_runs.default_methods(model), 1)
        values += [RESULT_CACHE.peek(key) for key in list(RESULT_CACHE._items)
                   if key[0] == "method" and key[1] == model.spec.id]
    assert len(values) > 20
    for value in values:
        decoded = result_store.decode(result_store.encode(value))
        assert type(decoded) is type(value)
        assert fingerprint(decoded) == fingerprint(value), type(value).__qualname__


def test_values_round_trip_exactly():
    value = {"a": (1, 2.5, float("nan"), -0.0, True, None), 3: [np.float32(0.1), "s", b"\x00"],
             "arrays": [np.arange(6, dtype=">i4").reshape(2, 3), np.array([True, False]),
                        torch.tensor([1.5, 2], dtype=torch.bfloat16), torch.zeros(0, 3)]}
    back = result_store.decode(result_store.encode(value))
    assert fingerprint(back) == fingerprint(value)
    assert back["arrays"][0].dtype == np.dtype(">i4") and back["arrays"][0][1, 2] == 5
    assert type(back[3][0]) is np.float32 and back[3][0] == np.float32(0.1)
    assert np.isnan(back["a"][2]) and str(back["a"][3]) == "-0.0"
    with pytest.raises(result_store.Unstorable):
        result_store.encode({"f": lambda: 0})
    names = np.array([["fused", "q"], ["k", "value head"]])  # page 5's cells carry names
    names_back = result_store.decode(result_store.encode(names))
    assert names_back.dtype == names.dtype and names_back.shape == (2, 2)
    assert names_back[1, 1] == "value head"
    with pytest.raises(result_store.Unstorable):
        result_store.encode(np.array(["text", None], dtype=object))


def test_a_file_cannot_name_a_class_outside_xai_core(store_dir):
    """Even with a right checksum (anyone who can write the folder can compute one), a file
    that asks for another module's class builds nothing and is recomputed."""
    import safetensors.torch

    key = cache_key("test", None, 1)
    store = disk_cache.result_store()
    for name in ("os:system", "subprocess:Popen", "builtins:eval", "xai_core.infra.cache:cache_key",
                 "xai_core.__main__:main"):  # not loaded: never imported by a file's say
        tree = json.dumps({"c": name, "f": {}})
        payload = safetensors.torch.save({}, metadata={"tree": tree})
        digest = result_store.key_digest(key)
        path = store.path_of(digest)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(result_store.MAGIC + bytes.fromhex(digest)
                         + hashlib.sha256(payload).digest() + payload)
        assert store.load(key) is result_store.MISSING
        assert not path.exists()
    assert store.counts["corrupt"] == 5
    assert "xai_core.__main__" not in sys.modules


def test_keys_name_the_code_and_the_weights(models, monkeypatch):
    vit, _ = models
    key = cache_key("vit", vit, 0, image="abc")
    other = tiny_vit("test-tiny-vit-unseen", knn=False)
    assert result_store.key_digest(cache_key("vit", other, 0, image="abc")) is None
    result_store.remember_weights(vit)
    before = result_store.key_digest(key)
    assert before is not None and before == result_store.key_digest(cache_key(
        "vit", vit, 0, image="abc"))
    with torch.no_grad():
        vit.module.head.bias += 1  # other weights under the same id: another file
    try:
        result_store.remember_weights(vit)
        assert result_store.key_digest(key) != before
    finally:
        with torch.no_grad():
            vit.module.head.bias -= 1
        result_store.remember_weights(vit)
    assert result_store.key_digest(key) == before
    monkeypatch.setattr(result_store, "code_fingerprint", lambda: "other code")
    assert result_store.key_digest(key) != before
    # floats are keyed exactly, tuples and lists apart
    assert (result_store.key_digest(("k", None, False, 0.1))
            != result_store.key_digest(("k", None, False, float(np.nextafter(0.1, 1.0)))))
    assert (result_store.key_digest(("k", None, False, (1,)))
            != result_store.key_digest(("k", None, False, [1])))


# --- faults ---------------------------------------------------------------------------------

def test_a_corrupt_entry_is_detected_and_recomputed(store_dir):
    value = {"map": np.linspace(0, 1, 48, dtype=np.float32).reshape(6, 8), "label": "cat"}
    key = cache_key("test-corrupt", None, 7)
    compute, calls = counted(value)
    store = disk_cache.result_store()
    BoundedCache(4, 2**20, shared=True).get_or_compute(key, compute)
    store.flush()  # written in the store's thread
    (path,) = entry_files(store_dir)
    blob = bytearray(path.read_bytes())
    blob[-10] ^= 0xFF  # one byte of the map's values flipped
    path.write_bytes(bytes(blob))

    fresh = BoundedCache(4, 2**20, shared=True)  # a new process's memory: empty
    got = fresh.get_or_compute(key, compute)
    assert len(calls) == 2 and fresh.disk_hits == 0 and fresh.misses == 1
    np.testing.assert_array_equal(got["map"], value["map"])
    assert store.counts["corrupt"] == 1
    store.flush()
    # the recomputed value replaced the corrupt file, and is read from there next time
    again = BoundedCache(4, 2**20, shared=True)
    np.testing.assert_array_equal(again.get_or_compute(key, compute)["map"], value["map"])
    assert len(calls) == 2 and again.disk_hits == 1
    for cut in (path.stat().st_size - 5, 20):  # a file cut short is corrupt too
        path.write_bytes(path.read_bytes()[:cut])
        assert BoundedCache(4, 2**20, shared=True).get_or_compute(key, compute)["label"] == "cat"
        store.flush()
    assert len(calls) == 4 and store.counts["corrupt"] == 3


def test_an_unwritable_folder_leaves_the_memory_cache_working(monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    folder = blocker / "results"  # mkdir fails for real: Not a directory, root or not
    monkeypatch.setenv(settings.RESULTS_ENV, str(folder))
    disk_cache.forget()
    compute, calls = counted(np.ones(5))
    memory = BoundedCache(4, 2**20, shared=True)
    key = cache_key("test-unwritable", None, 1)
    store = disk_cache.result_store()
    for _ in range(3):
        np.testing.assert_array_equal(memory.get_or_compute(key, compute), np.ones(5))
        store.flush()
    assert len(calls) == 1 and memory.hits == 2 and memory.misses == 1
    assert not store.writable  # it only reads now: no write is tried again
    memory.get_or_compute(cache_key("test-unwritable", None, 2), compute)
    store.flush()
    assert store.counts["written"] == 0 and len(calls) == 2
    note = disk_cache.notice()
    assert disk_cache.RESULTS in note and str(folder) in note
    assert f"{os.strerror(errno.ENOTDIR)} (errno {errno.ENOTDIR})" in note
    assert blocker.read_text() == "not a folder"
    disk_cache.forget()


def test_off_means_memory_only(monkeypatch, tmp_path):
    monkeypatch.setenv(settings.RESULTS_ENV, "off")
    assert disk_cache.result_store() is None
    compute, calls = counted(1)
    memory = BoundedCache(4, 2**20, shared=True)
    assert memory.get_or_compute(cache_key("test-off", None), compute) == 1
    assert len(calls) == 1 and memory.misses == 1


# --- the bound ------------------------------------------------------------------------------

def test_the_folder_keeps_to_its_bound_by_evicting_the_least_recently_used(store_dir,
                                                                           monkeypatch):
    store = disk_cache.result_store()
    keys = [cache_key("test-lru", None, n) for n in range(4)]
    values = [np.full(2000, n, dtype=np.float64) for n in range(4)]  # 16 kB each
    for key, value in zip(keys[:3], values):
        assert store.save(key, value)
    sizes = [store.path_of(result_store.key_digest(key)).stat().st_size for key in keys[:3]]
    assert len(set(sizes)) == 1 and sizes[0] > 16000
    # a bound that holds three entries, not four (the store of these settings is a new one)
    monkeypatch.setenv(settings.RESULTS_MB_ENV, "1")
    small = disk_cache.result_store()
    small.max_bytes = 3 * sizes[0] + sizes[0] // 2
    past = time.time() - 100
    for age, key in enumerate(keys[:3]):  # written in order 0, 1, 2; then 0 is read again
        os.utime(small.path_of(result_store.key_digest(key)), (past + age, past + age))
    np.testing.assert_array_equal(small.load(keys[0]), values[0])
    assert small.save(keys[3], values[3])
    present = [small.path_of(result_store.key_digest(key)).exists() for key in keys]
    assert present == [True, False, True, True]  # 1 was the least recently used
    assert small.total_bytes() <= small.max_bytes and small.counts["evicted"] == 1
    assert small.load(keys[1]) is result_store.MISSING
    # a value larger than the whole bound is not written (and evicts nothing)
    assert not small.save(cache_key("test-lru", None, "big"), np.zeros(10**5))
    assert [small.path_of(result_store.key_digest(k)).exists() for k in keys] == present


def test_left_over_temporary_files_are_cleared(store_dir):
    store = disk_cache.result_store()
    assert store.save(cache_key("test-tmp", None), np.zeros(3))
    shard = entry_files(store_dir)[0].parent
    old, new = shard / "x.vlr.1-aa.tmp", shard / "y.vlr.2-bb.tmp"
    for path in (old, new):
        path.write_bytes(b"half")
    os.utime(old, (time.time() - 2 * result_store.STALE_TEMPORARY_S,) * 2)
    store.evict()
    assert not old.exists() and new.exists()  # a writer may still be busy with the new one


# --- concurrent writers ---------------------------------------------------------------------

WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    sys.path[:0] = [{root!r}]
    import numpy as np
    from xai_core.models import disk_cache
    from xai_core.infra.cache import cache_key
    store = disk_cache.result_store()
    key = cache_key("test-race", None, 1)
    value = {{"map": np.arange(300_000, dtype=np.float32), "who": "same"}}
    flags = Path(sys.argv[1])
    (flags / sys.argv[2]).touch()  # past the imports: start together
    while len(list(flags.iterdir())) < 2:
        time.sleep(0.005)
    written = sum(store.save(key, value) for _ in range(15))
    print(written)
""").format(root=str(ROOT))


def test_two_processes_writing_one_key_leave_a_whole_file(store_dir, tmp_path):
    env = {**os.environ, settings.RESULTS_ENV: str(store_dir), "OMP_NUM_THREADS": "1"}
    flags = tmp_path / "ready"
    flags.mkdir()
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(flags), f"writer-{n}"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for n in range(2)]
    store = disk_cache.result_store()
    key = cache_key("test-race", None, 1)
    expected = np.arange(300_000, dtype=np.float32)
    reads = 0
    while any(writer.poll() is None for writer in writers):
        found = store.load(key)  # while they write: absent or whole, never half a file
        time.sleep(0.01)  # leave the two cores to the writers
        if found is not result_store.MISSING:
            reads += 1
            np.testing.assert_array_equal(found["map"], expected)
    outputs = [writer.communicate() for writer in writers]
    assert [writer.returncode for writer in writers] == [0, 0], [err for _, err in outputs]
    assert [int(out) for out, _ in outputs] == [15, 15]
    assert store.counts["corrupt"] == 0 and reads > 0
    files = list(store_dir.rglob("*"))
    assert [path.suffix for path in files if path.is_file()] == [result_store.SUFFIX]
    np.testing.assert_array_equal(store.load(key)["map"], expected)


def test_the_shared_caches_of_the_pipeline_use_the_store():
    assert pipeline.CAPTURE_CACHE.shared and RESULT_CACHE.shared
    assert explainer.EXPLAINER_CACHE.shared
    assert interventions.RESULTS.shared and readout.RESULTS.shared and cause_vs_claim.RESULTS.shared
    assert interventions_lab.STORIES.shared
    assert cache._shared_store is disk_cache.result_store


# --- warmup --gallery -----------------------------------------------------------------------

def empty_memory():
    """What a new process starts with: every in-memory cache empty (the store stays)."""
    import gc

    for found in gc.get_objects():
        if type(found) is BoundedCache:
            found.clear()


def test_warmup_gallery_fills_the_store_for_the_next_process(store_dir, models, monkeypatch,
                                                             capsys):
    """`warmup --gallery` on the tiny models (standing in for the default ones): the first run
    computes every page's defaults for each image and writes them; a run in a "new process"
    (memory emptied) reads them all back and runs no pass at all."""
    from xai_core import images, models as model_package
    from xai_core.cli.main import main as cli_main

    vit, cnn = models
    for model in models:
        result_store.remember_weights(model)
    by_id = {model_package.DEFAULT_VIT: vit, model_package.DEFAULT_CNN: cnn}
    monkeypatch.setattr(model_package, "get_model", lambda model_id, *a, **k: by_id[model_id])
    monkeypatch.setattr(images, "sample_ids", lambda: ["chelsea", images.COLLAGE_ID])
    passes = []
    for name in ("capture", "capture_cnn"):
        real = getattr(pipeline, name)
        monkeypatch.setattr(pipeline, name,
                            lambda *a, real=real, **k: passes.append(1) or real(*a, **k))
    empty_memory()
    command = ["warmup", "--models", model_package.DEFAULT_CNN, "--gallery", "--json"]
    with one_torch_thread():
        assert cli_main(command) == 0
        first = json.loads(capsys.readouterr().out)["gallery"]
        assert len(passes) >= 4  # both models, both images
        written = len(entry_files(store_dir))
        empty_memory()
        passes.clear()
        assert cli_main(command[:-1]) == 0
    text = capsys.readouterr().out
    assert [row["image"] for row in first["images"]] == ["chelsea", images.COLLAGE_ID]
    for row in first["images"]:
        assert row["computed"] > 10 and row["from_disk"] == 0 and row["failures"] == []
    assert first["store"] == str(store_dir) and first["store_bytes"] > 0
    assert written > 20 and len(entry_files(store_dir)) == written  # nothing new the 2nd time
    assert passes == []
    # per image only the resizes are computed, everything else is read: on the cat the ViT's
    # of both pictures (page 3's gallery view measures every picture; the CNN's of the cat was
    # made by the models' warm-up before), on the collage its CNN's
    for image_id, resizes in (("chelsea", 2), (images.COLLAGE_ID, 1)):
        line = next(line for line in text.splitlines() if line.startswith(f"gallery {image_id}"))
        assert f": {resizes} computed, " in line and " read from the store" in line
        assert int(line.split(" computed, ")[1].split()[0]) >= 20
    assert "2 images in" in text and str(store_dir) in text


def test_the_gallery_unit_warms_the_default_models_after_the_model_warm_up():
    import re

    from xai_core.models import DEFAULT_CNN, DEFAULT_VIT

    unit = (ROOT / "deploy" / "systemd" / "vit-lens-gallery.service").read_text()
    command = re.search(r"ExecStart=(.*?[^\\])\n", unit, re.S)[1].replace("\\\n", " ").split()
    assert command[0].endswith("/.venv/bin/python")
    assert command[1:5] == ["-m", "xai_core", "warmup", "--gallery"]
    assert command[command.index("--models") + 1:] == [DEFAULT_VIT, DEFAULT_CNN]
    assert re.search(r"^After=vit-lens-warmup\.service$", unit, re.M)
    commands = [line.split()[1:] for line in unit.splitlines() if line.startswith("ExecStart=")]
    assert commands[-1] == ["-m", "dashboard.warm_pages"]  # the figures, after the results
    assert re.search(r"^Type=oneshot$", unit, re.M)
    cache = re.search(r"^Environment=VIT_LENS_CACHE_DIR=(\S+)$", unit, re.M)[1]
    assert re.search(rf"^ReadWritePaths={re.escape(cache)}$", unit, re.M)
    replica = (ROOT / "deploy" / "systemd" / "vit-lens@.service").read_text()
    assert "vit-lens-gallery" not in replica  # the replicas never wait for it


def test_a_request_does_not_wait_for_its_write(store_dir, monkeypatch):
    """The write happens in the store's thread: the computing request returns while it is
    held up; results beyond the waiting room are not written (they are only a cache)."""
    import threading

    store = disk_cache.result_store()
    release, real_save = threading.Event(), store._save
    monkeypatch.setattr(store, "_save", lambda *a: release.wait(30) and real_save(*a))
    memory = BoundedCache(64, 2**24, shared=True)
    count = result_store.PENDING_WRITES + 3  # one being written, PENDING_WRITES waiting
    for n in range(count):
        value = memory.get_or_compute(cache_key("test-later", None, n), lambda n=n: np.full(4, n))
        assert value[0] == n
        while n == 0 and store._pending.qsize():  # the writer has taken the first one
            time.sleep(0.005)
    assert entry_files(store_dir) == []  # every request answered, nothing written yet
    release.set()
    store.flush()
    assert store.counts["dropped"] == 2 and store.counts["written"] == count - 2
    assert len(entry_files(store_dir)) == count - 2
    fresh = BoundedCache(64, 2**24, shared=True)
    np.testing.assert_array_equal(fresh.get_or_compute(cache_key("test-later", None, 0),
                                                       lambda: None), np.zeros(4))


def test_a_batch_job_waits_for_room_and_drops_nothing(store_dir, monkeypatch):
    """`warmup --gallery` sets `wait_for_room`: with the writer slowed down, more results than
    the waiting room holds are all written (a request would drop them: the test above)."""
    import threading

    store = disk_cache.result_store()
    real_save, saves = store._save, []
    monkeypatch.setattr(store, "_save", lambda *a: (saves.append(1), time.sleep(0.02),
                                                    real_save(*a))[-1])
    memory = BoundedCache(64, 2**24, shared=True)
    count = result_store.PENDING_WRITES + 5
    store.wait_for_room = True
    try:
        worker = threading.Thread(target=lambda: [memory.get_or_compute(
            cache_key("test-batch", None, n), lambda n=n: np.full(4, n)) for n in range(count)])
        worker.start()
        worker.join(30)
        store.flush()
    finally:
        store.wait_for_room = False
    assert store.counts["dropped"] == 0 and store.counts["written"] == count
    assert len(entry_files(store_dir)) == count == len(saves)


def test_a_built_figure_is_read_back_by_the_next_process(store_dir):
    """A class asks every replica for the same figures at once: one replica builds a figure
    (and its pictures' encodings), the others and the next restart read them."""
    import plotly.graph_objects as go
    from PIL import Image

    from xai_core.figures.layers import LAYER_CACHE, encoded_image
    from xai_core.figures.reuse import FIGURE_CACHE, reused

    calls = []

    @reused
    def heatmap(values):
        calls.append(1)
        return go.Figure(go.Heatmap(z=values, colorbar={"title": "score"}))

    values = np.arange(6.0).reshape(2, 3)
    picture = Image.fromarray(np.arange(48, dtype=np.uint8).reshape(4, 4, 3))
    built, layer = heatmap(values), encoded_image(picture)
    disk_cache.result_store().flush()
    empty_memory()  # a new process: memory empty, the store on disk
    read, layer_read = heatmap(values), encoded_image(picture)
    assert calls == [1] and FIGURE_CACHE.disk_hits == 1 and LAYER_CACHE.disk_hits == 1
    np.testing.assert_array_equal(read.data[0].z, values)
    assert read.to_plotly_json() == built.to_plotly_json() and layer_read == layer


def test_warm_pages_leaves_the_pages_figures_for_the_next_process(store_dir):
    """`dashboard.warm_pages` runs a page as a first visitor would; in a new process the page's
    figures are then read from the store, none built again."""
    from dashboard import warm_pages
    from xai_core.figures.reuse import FIGURE_CACHE

    built_before = FIGURE_CACHE.misses
    [first] = warm_pages.warm(["chelsea"], ["home.py"])
    assert first["problem"] is None and FIGURE_CACHE.misses > built_before
    disk_cache.result_store().flush()
    empty_memory()
    built_before, read_before = FIGURE_CACHE.misses, FIGURE_CACHE.disk_hits
    [again] = warm_pages.warm(["chelsea"], ["home.py"])
    assert again["problem"] is None
    assert FIGURE_CACHE.misses == built_before and FIGURE_CACHE.disk_hits > read_before


def test_warm_pages_names_an_unknown_image_or_page(capsys):
    from dashboard import warm_pages

    assert warm_pages.main(["--images", "chelsea,nebula", "--pages", "home.py,99_x.py"]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "nebula, 99_x.py" in error


# --- the warm-ups' area ---------------------------------------------------------------------

def sized_store(store_dir, monkeypatch, visitors: int, warm: int):
    """The store of fresh settings with its two bounds set to hold `visitors` and `warm`
    entries of 16 kB (and half an entry more)."""
    monkeypatch.setenv(settings.RESULTS_MB_ENV, "2")
    store = disk_cache.result_store()
    probe = cache_key("test-warm-size", None)
    store.save(probe, np.zeros(2000))
    size = store.path_of(result_store.key_digest(probe)).stat().st_size
    _unlink_all(store_dir)
    store.max_bytes, store.warm_max_bytes = visitors * size + size // 2, warm * size + size // 2
    return store


def _unlink_all(folder: Path) -> None:
    for path in entry_files(folder):
        path.unlink()


def test_no_number_of_visitors_results_evicts_the_warm_ups(store_dir, monkeypatch):
    """What `warmup --gallery` wrote (inside `pinning`) stays while visitors' results come
    and go: 3 warm entries, then 20 visitors' entries through a bound of 4. Visitors' results
    evict each other, least recently used first; every warm entry is still there and read."""
    store = sized_store(store_dir, monkeypatch, visitors=4, warm=3)
    warm_keys = [cache_key("test-warm", None, n) for n in range(3)]
    with store.pinning():
        for n, key in enumerate(warm_keys):
            assert store.save(key, np.full(2000, n, dtype=np.float64))
    assert store.total_bytes(warm=True) > 0 and store.total_bytes() == 0
    visitor_keys = [cache_key("test-visitor", None, n) for n in range(20)]
    for n, key in enumerate(visitor_keys):
        assert store.save(key, np.full(2000, 100 + n, dtype=np.float64))
    kept = [key for key in visitor_keys if store.load(key) is not result_store.MISSING]
    assert kept == visitor_keys[-4:]  # the four most recent
    assert store.total_bytes() <= store.max_bytes
    for n, key in enumerate(warm_keys):
        np.testing.assert_array_equal(store.load(key), np.full(2000, n, dtype=np.float64))
    assert store.counts["evicted"] == 16


def test_a_warm_up_takes_over_what_a_visitor_computed_first(store_dir, monkeypatch):
    """A visitor computed a gallery result before the warm-up came to it: the warm-up reads it
    (no recomputation) and moves it into its own area, out of the visitors' eviction."""
    store = sized_store(store_dir, monkeypatch, visitors=2, warm=3)
    early = cache_key("test-early", None)
    assert store.save(early, np.full(2000, 7.0))
    assert store.path_of(result_store.key_digest(early)).exists()
    with store.pinning():
        np.testing.assert_array_equal(store.load(early), np.full(2000, 7.0))
    digest = result_store.key_digest(early)
    assert store.path_of(digest, warm=True).exists() and not store.path_of(digest).exists()
    for n in range(5):
        store.save(cache_key("test-later-visitor", None, n), np.full(2000, float(n)))
    np.testing.assert_array_equal(store.load(early), np.full(2000, 7.0))


def test_the_warm_ups_area_keeps_its_own_bound(store_dir, monkeypatch):
    store = sized_store(store_dir, monkeypatch, visitors=2, warm=2)
    keys = [cache_key("test-warm-bound", None, n) for n in range(3)]
    with store.pinning():
        for n, key in enumerate(keys):
            store.save(key, np.full(2000, float(n)))
            os.utime(store.path_of(result_store.key_digest(key), warm=True),
                     (time.time() - 100 + n, time.time() - 100 + n))
        store.evict(warm=True)
    assert [store.load(key) is result_store.MISSING for key in keys] == [True, False, False]
    assert store.total_bytes(warm=True) <= store.warm_max_bytes


def test_pinning_is_one_threads_unless_asked_for_every_thread(store_dir, monkeypatch):
    """A warm-up running in one thread of a serving replica does not pin the results its
    visitors compute meanwhile in theirs; `dashboard.warm_pages` (pages in threads of their
    own) pins every thread of its process."""
    import threading

    store = sized_store(store_dir, monkeypatch, visitors=10, warm=10)
    memory = BoundedCache(64, 2**24, shared=True)

    def visitor_computes(tag):
        memory.get_or_compute(cache_key("test-thread-pin", None, tag), lambda: np.zeros(2000))

    with store.pinning():
        worker = threading.Thread(target=visitor_computes, args=("visitor",))
        worker.start()
        worker.join(30)
        visitor_computes("warm-up")
    store.flush()
    with store.pinning(every_thread=True):
        worker = threading.Thread(target=visitor_computes, args=("page thread",))
        worker.start()
        worker.join(30)
    for tag, warm in (("visitor", False), ("warm-up", True), ("page thread", True)):
        digest = result_store.key_digest(cache_key("test-thread-pin", None, tag))
        assert store.path_of(digest, warm).exists() and not store.path_of(digest, not warm).exists()
