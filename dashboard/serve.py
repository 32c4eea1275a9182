"""`make run` (and each replica's systemd unit): prepare the bundled models, then start the
app in the same process, and warm the gallery in the background once it answers.

On a fresh machine the first use of DINOv2 converts its weights and builds its k-NN memory
bank (about 10-20 s on two cores, most of it the bank's forward passes). Doing that here,
before the server listens, means no visitor waits for it; and because Streamlit then runs
the app in this very process, every session finds the models already loaded. Once the port
answers, a background thread computes every page's default views for the gallery, the
default picture's Explainer and page 9 first (`dashboard.background_warmup`), one log line
per step.

    python -m dashboard.serve [streamlit run options, e.g. --server.port 8600]
"""

from __future__ import annotations

import ast
import gc
import importlib
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "dashboard" / "replica_app.py"  # the app with its readiness path (as the units)
READY = "ViT Lens: models ready"  # what the terminal says before the server starts
CODE = [ROOT / "xai_core", ROOT / "dashboard", ROOT / "pages"]
# named somewhere in the code but not for the pages: the Ray backend of the benchmark, the
# conversion's ONNX oracle, the scripts that start things
NOT_PRELOADED = ("ray", "onnxruntime", "streamlit.web", "dashboard.app", "dashboard.serve",
                 "xai_core.__main__")


def modules_named_in_code() -> list[str]:
    """Every absolute module our code imports, at the top of a file or inside a function."""
    names = []
    for folder in CODE:
        for path in sorted(folder.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names += [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names.append(node.module)
    return [name for name in dict.fromkeys(names)
            if not name.startswith(NOT_PRELOADED) and name != "__future__"]


def import_app_modules() -> int:
    """Import now what the pages would import on their first visits (pandas, scipy,
    sklearn, pytorch-grad-cam and its matplotlib, ...: about 1,200 modules), so no visit
    waits for an import, and they are frozen with the models: imported later, they stayed
    in the garbage collector's view (after all ten pages it tracked 189,000 objects and a
    full collection took 75 ms; with this, 26,500 and 8 ms). Returns how many it imported."""
    before = len(sys.modules)
    for name in modules_named_in_code():
        try:
            importlib.import_module(name)
        except ImportError:  # an optional extra this machine lacks: the page says so later
            continue
    return len(sys.modules) - before


def prepare_models() -> float:
    """Load the bundled models (converting and building what is missing) with one progress
    line per model; returns the seconds it took."""
    import xai_core  # noqa: F401  (first: sets the threads' wait policy before torch loads)

    started = time.perf_counter()
    print("ViT Lens: preparing the bundled models (the first start on a machine also "
          "converts the DINOv2 weights and builds its k-NN bank)", flush=True)
    # No automatic collections while loading: each walks everything loaded so far (1.7 s
    # in all, measured, over the models and the 1,700 modules); one collection at the end
    gc.disable()
    try:
        from xai_core.lessons.warmup import default_models, warm_up  # imports the core's modules

        _load(default_models(), warm_up)
        modules = import_app_modules()
        print(f"  {modules} modules the pages use imported", flush=True)
        # Everything loaded so far lives as long as the process; moving it out of the
        # garbage collector's sight keeps each later full collection from walking it.
        gc.collect()
        gc.freeze()
    finally:
        gc.enable()
    seconds = time.perf_counter() - started
    print(f"{READY} in {seconds:.1f} s; starting the server.", flush=True)
    return seconds


def _load(model_ids, warm_up) -> None:
    for model_id in model_ids:
        print(f"  {model_id} ...", flush=True)  # (a library may draw its own progress bar)
        try:
            row = warm_up((model_id,))[0]
        except Exception as error:  # noqa: BLE001  the pages then say what is wrong, in words
            print(f"  {model_id} not prepared ({type(error).__name__}: {error})", flush=True)
            continue
        print(f"  {model_id} ready in {row['seconds']:.1f} s" if row["loaded"]
              else f"  {model_id} not loaded: {row['reason']}", flush=True)


def serving_threads(cores: int, environ=os.environ) -> int | None:
    """Torch's threads per op while the app serves: one fewer than the cores (at least one),
    or None when OMP_NUM_THREADS chose. An op waits for the slowest of its threads, and the
    server's other work (its event loop, other sessions' figures, on a laptop the browser
    itself) takes a core at times: on the 2-core development machine, with one core busy,
    page 7's DINOv2 methods took 1.7-1.8 s with two threads and 0.9-1.0 s with one (0.57-0.62 s
    and 0.72-0.74 s with both cores free)."""
    if environ.get("OMP_NUM_THREADS"):
        return None
    return max(1, cores - 1)


def _cores() -> int:
    if hasattr(os, "sched_getaffinity"):  # the cores this process may use (a container's)
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def health_url(streamlit_args: list[str]) -> str:
    """The server's health address from the Streamlit options it is started with (port,
    address, base URL path; Streamlit's defaults otherwise), on this machine."""
    options, args = {}, list(streamlit_args)
    for index, arg in enumerate(args):
        name, equals, value = arg.partition("=")
        if name.startswith("--server.") and not equals and index + 1 < len(args):
            value = args[index + 1]
        options[name] = value
    address = options.get("--server.address") or "127.0.0.1"
    if address in ("0.0.0.0", "::", ""):
        address = "127.0.0.1"
    base = options.get("--server.baseUrlPath", "").strip("/")
    return (f"http://{address}:{options.get('--server.port') or 8501}/"
            f"{base + '/' if base else ''}_stcore/health")


def main(streamlit_args: list[str]) -> None:
    prepare_models()  # with every core: nobody waits on a page yet
    from dashboard import background_warmup

    background_warmup.start(health_url(streamlit_args))  # waits for the port in its thread
    threads = serving_threads(_cores())
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
        print(f"  torch serves with {threads} thread(s) per op (one core left for the rest)",
              flush=True)
    from streamlit.web import cli

    sys.argv = ["streamlit", "run", str(APP), *streamlit_args]
    sys.exit(cli.main(prog_name="streamlit"))


if __name__ == "__main__":
    main(sys.argv[1:])
