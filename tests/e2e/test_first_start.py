"""`make run` on a fresh machine (issue 16, item 3): `python -m dashboard.serve` with an empty
cache converts DINOv2, builds its k-NN bank and loads every bundled model BEFORE the server
listens, saying so line by line; then the first page opens. Once the port answers, the
gallery warms in the background (issue 40): the default picture's Explainer first, one log
line per step, and page 9 says so while it runs."""

from __future__ import annotations

import re
import time

from e2e_helpers import MAKE_RUN, AppProcess, app_env, wait_app_idle

from dashboard.serve import READY
from xai_core.lessons.warmup import default_models


def test_models_are_prepared_before_the_server_listens(tmp_path, browser):
    app = AppProcess(log_name="first-start", launcher=MAKE_RUN,
                     env={**app_env(), "VIT_LENS_CACHE_DIR": str(tmp_path)})
    try:
        app.wait_healthy(timeout=600)
        log = app.log()
        ready, listening = log.find(READY), log.find("You can now view")
        assert 0 <= ready < listening, log[-2000:]
        for model_id in default_models():  # one progress line per model, each with its time
            assert re.search(rf"  {re.escape(model_id)} ready in [\d.]+ s\n", log), log[-2000:]
        assert list(tmp_path.glob("dinov2-s14*.safetensors"))  # converted weights ...
        assert list(tmp_path.glob("knn-bank-dinov2-s14-*.safetensors"))  # ... and the bank
        page = browser.new_page()
        page.goto(app.url)
        wait_app_idle(page)
        assert "DINOv2" in page.locator("[data-testid='stMain']").inner_text()
        log = app.log()
        start = log.find("ViT Lens warm-up: ")
        assert listening < start, log[-2000:]  # after the port answered
        page.goto(app.url + "interventions")
        wait_app_idle(page)
        main = page.locator("[data-testid='stMain']").inner_text()
        assert "still preparing the gallery" in main, main[:500]
        page.close()
        deadline = time.monotonic() + 600
        while "warm-up 2/" not in app.log() and time.monotonic() < deadline:
            time.sleep(2)
        steps = re.findall(r"ViT Lens warm-up \d+/\d+: (\S+), ([0-9a-z ]+?) [\d.]+ s", app.log())
        assert steps[:2] == [("chelsea", "0 vit explainer"), ("chelsea", "9 interventions")]
    finally:
        app.stop()
