import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# No hub in tests: hub models must report "unavailable", never try the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VIT_LENS_DEVICE", "cpu")
# Results are shared on disk only where a test asks for it (tests/test_result_store.py):
# elsewhere a cleared cache must mean a recomputation.
os.environ.setdefault("VIT_LENS_RESULTS_DIR", "off")

import xai_core  # noqa: E402,F401  (before any test imports torch: the threads' wait policy)


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def dinov2():
    """The bundled DINOv2 ViT-S/14 (real weights): loaded once, cached by the app's loader."""
    from xai_core.models import get_model

    return get_model("dinov2-s14")


@pytest.fixture(scope="session")
def image():
    """The default sample picture (chelsea, the cat); a test file may define its own."""
    from xai_core.images import load_sample

    return load_sample("chelsea")
