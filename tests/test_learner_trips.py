"""What a learner tripped on (issue 28): page 4's end block kept when a start is chosen,
a tour opened by link resumed after a deeper page, unknown pictures named as such, page 7's
export reusing the faithfulness run, and what an upload's link and resizing do."""

import numpy as np
from apptest_helpers import chart_specs, chart_title, element_text, open_app

from xai_core import pipeline
from xai_core.images import load_sample
from xai_core.methods import rollout
from xai_core.models import get_model


def ok(app):
    assert not app.exception, app.exception
    return app


def rollout_title(app) -> str:
    return next(t for t in map(chart_title, chart_specs(app)) if t.startswith("Rollout, blocks"))


def test_page_4_start_block_0_keeps_the_end_block():
    """Start 0 used to reset End to 0 in the browser: the End slider's range followed the
    start, so each start made a new widget there. The range is fixed now (same widget id)
    and the end moves only when it would lie before the start, with a sentence."""
    capture = pipeline.vit_capture(get_model("dinov2-s14"), load_sample("chelsea"))
    last = len(rollout.rollout_blocks(capture)) - 1  # the last self-attention block
    app = ok(open_app("4_rollout_heads.py"))
    end = app.slider(key="p4_end")
    widget_id, low = end.id, end.min
    assert end.value == last
    app.selectbox(key="p4_start").set_value(0).run()
    ok(app)
    assert app.slider(key="p4_end").value == last and app.slider(key="p4_end").id == widget_id
    assert rollout_title(app).startswith(f"Rollout, blocks 0–{last}<br>")
    assert "End moved" not in element_text(app, "caption")

    app.slider(key="p4_end").set_value(3).run()
    app.selectbox(key="p4_start").set_value(5).run()  # after the end: the end must move
    ok(app)
    assert app.slider(key="p4_end").value == 5 and app.slider(key="p4_end").min == low
    assert rollout_title(app).startswith("Rollout, blocks 5–5<br>")
    assert "End moved from block 3 to block 5" in element_text(app, "caption")
    app.selectbox(key="p4_start").set_value(2).run()  # before the end: it stays
    ok(app)
    assert app.slider(key="p4_end").value == 5 and "End moved" not in element_text(app, "caption")
