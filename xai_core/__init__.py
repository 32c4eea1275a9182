"""ViT Lens core: models, one capture engine, XAI methods, metrics and figures.

Pure Python + torch. This package never imports streamlit.
"""

import os

# Threads that finish an op spin-wait for the next one by default (libgomp). On a CPU shared
# with other work, a spinning thread holds the core its peer needs, and every op then waits
# for a scheduler slice: a DINOv2 forward took 0.6-1.9 s instead of 0.13-0.3 s on the loaded
# 2-core dev machine, and DAAM, the metrics and the pages slowed alike. Waiting passively
# costs almost nothing. libgomp reads this when torch loads, so import xai_core first.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
