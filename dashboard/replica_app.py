"""What a replica serves: the app (`dashboard/app.py`) as Streamlit's ASGI app (`st.App`)
behind a guard that answers two kinds of request before Streamlit sees them: nginx's
question whether the replica is warm (`dashboard/readiness.py`), and a foreign-Origin
WebSocket, which Streamlit's own check answered only after stalling its event loop
(`dashboard/request_guard.py`).

    streamlit run dashboard/replica_app.py --server.port 8501 --server.baseUrlPath vit-lens

is what the replica unit (deploy/systemd/vit-lens@.service) and `make run` start: `streamlit
run` finds the `st.App` below and serves it, with every option as for `app.py`.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `streamlit run dashboard/replica_app.py` from anywhere
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402
from starlette.middleware import Middleware  # noqa: E402

from dashboard.request_guard import RequestGuard  # noqa: E402

app = st.App("app.py", middleware=[Middleware(RequestGuard)])
