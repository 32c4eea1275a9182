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
