"""`make run`: prepare the bundled models, then start the app in the same process.

On a fresh machine the first use of DINOv2 converts its weights and builds its k-NN memory
bank (about 10-20 s on two cores, most of it the bank's forward passes). Doing that here,
before the server listens, means no visitor waits for it; and because Streamlit then runs
the app in this very process, every session finds the models already loaded.

    python -m dashboard.serve [streamlit run options, e.g. --server.port 8600]
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "dashboard" / "app.py"
READY = "ViT Lens: models ready"  # what the terminal says before the server starts


def prepare_models() -> float:
    """Load the bundled models (converting and building what is missing) with one progress
    line per model; returns the seconds it took."""
    import xai_core  # noqa: F401  (first: sets the threads' wait policy before torch loads)
    from xai_core.cli.warmup import default_models, warm_up

    started = time.perf_counter()
    print("ViT Lens: preparing the bundled models (the first start on a machine also "
          "converts the DINOv2 weights and builds its k-NN bank)", flush=True)
    for model_id in default_models():
        print(f"  {model_id} ...", flush=True)  # (a library may draw its own progress bar)
        try:
            row = warm_up((model_id,))[0]
        except Exception as error:  # noqa: BLE001  the pages then say what is wrong, in words
            print(f"  {model_id} not prepared ({type(error).__name__}: {error})", flush=True)
            continue
        print(f"  {model_id} ready in {row['seconds']:.1f} s" if row["loaded"]
              else f"  {model_id} not loaded: {row['reason']}", flush=True)
    import plotly.graph_objects  # noqa: F401  (every page draws with it; import it now)

    # Everything loaded so far lives as long as the process; moving it out of the garbage
    # collector's sight keeps each later full collection from walking the models' objects.
    gc.collect()
    gc.freeze()
    seconds = time.perf_counter() - started
    print(f"{READY} in {seconds:.1f} s; starting the server.", flush=True)
    return seconds


def main(streamlit_args: list[str]) -> None:
    prepare_models()
    from streamlit.web import cli

    sys.argv = ["streamlit", "run", str(APP), *streamlit_args]
    sys.exit(cli.main(prog_name="streamlit"))


if __name__ == "__main__":
    main(sys.argv[1:])
