"""The Explainer's head switch in a real browser (issue 32): the ⏻ on a head chip switches
that head off in the open block, the server runs the model again (one rerun) and the answer
bars under the chips change in place to the model's new answer, which must be what the core
computes for that head (`xai_core.lessons.explainer.head_switch`); "All heads back on" restores the
trained answer; a tour step that switches a head off shows its result at once."""

from __future__ import annotations

import pytest
from e2e_helpers import running_apps, watched_tab
from explainer_driver import ROOT, Traffic, open_explainer, state, wait_for_state

from dashboard.explainer.tour import TOUR, step_number
from xai_core.lessons.explainer import head_switch
from xai_core.images import load_sample
from xai_core.models import get_model

ANSWER = f"{ROOT} [data-part='answer']"


@pytest.fixture(scope="module")
def app():
    with running_apps(1, log_name="explainer-switch-app") as apps:
        yield apps[0]


@pytest.fixture()
def tab(app, browser):
    context, page, errors = watched_tab(browser, 1500, 1800)
    yield page
    context.close()
    assert errors == [], errors


def bars(page) -> list[tuple[str, str]]:
    """(label, share as printed) of each answer bar on screen."""
    return [tuple(row) for row in page.locator(f"{ANSWER} .vx-bar:not([hidden])").evaluate_all(
        "rows => rows.map(r => [r.children[0].textContent, r.children[2].textContent])")]


def same_answer(on_screen: list[tuple[str, str]], top: list[dict]) -> bool:
    """The bars show these labels with these shares, as printed (pct(): one decimal from
    10 %, two below; a share rounded half-way may print either way)."""
    return [label for label, _ in on_screen] == [t["label"] for t in top] and all(
        abs(float(text.rstrip("%")) - 100 * t["share"]) <= (0.05 if t["share"] >= 0.1 else 0.005)
        + 1e-9 for (_, text), t in zip(on_screen, top))


def shown(page) -> str:
    return page.locator(ANSWER).get_attribute("data-shown")


def test_switching_a_head_off_reruns_the_model_and_updates_the_bars(app, tab):
    model, image = get_model("dinov2-s14"), load_sample("chelsea")
    expected = head_switch(model, image, None, [(6, 2)])
    traffic = Traffic(tab)
    open_explainer(tab, app.url)
    trained = bars(tab)
    assert same_answer(trained, expected["before"]), trained
    tab.locator(f"{ROOT} .vx-block").nth(6).click()
    wait_for_state(tab, "detail", lambda held: "6" in (held or "").split(","))
    seen = len(traffic.messages)
    fill = tab.locator(f"{ANSWER} .vx-bar-fill").first
    node = fill.element_handle()  # the same element after the switch: updated in place
    tab.locator(f"{ROOT} .vx-headchip[data-head='2'] + .vx-headoff").click()
    assert state(tab)["off"] == "6.2"
    tab.locator(f"{ANSWER}[data-shown='switched']").wait_for()
    assert same_answer(bars(tab), expected["after"]), bars(tab)
    assert bars(tab) != trained  # the shares moved
    assert node.evaluate("n => n.isConnected")
    results = [m["header"]["switch"]["result"] for m in traffic.messages[seen:]
               if (m["header"].get("switch") or {}).get("result")]
    assert results and results[-1]["off"] == [[6, 2]]  # the server ran the model again
    chip = tab.locator(f"{ROOT} .vx-headchip[data-head='2']")
    assert "off" in chip.get_attribute("class").split()
    status = tab.locator(f"{ANSWER} .vx-answer-status").inner_text()
    target = expected["target"]
    assert f"{target['before']:.3f} → {target['after']:.3f}" in status, status
    sign = "+" if target["drop"] > 0 else "−" if target["drop"] < 0 else ""
    assert f"it {target['words']} (drop {sign}{abs(target['drop']):.4f})" in status, status
    assert tab.locator(f"{ROOT} .vx-block").nth(6).get_attribute("data-off") == "1"

    tab.locator(f"{ANSWER} .vx-answer-reset").click()
    assert state(tab)["off"] == ""
    assert shown(tab) == "trained" and bars(tab) == trained
    assert "off" not in chip.get_attribute("class").split()


def test_a_tour_step_that_switches_a_head_off_shows_its_result(app, tab):
    number = step_number("switch_sink")
    assert TOUR[number - 1].switch_off
    open_explainer(tab, app.url, f"?tour={number}")
    wait_for_state(tab, "tour", lambda step: step == str(number))
    off = state(tab)["off"]
    block, head = (int(n) for n in off.split("."))
    expected = head_switch(get_model("dinov2-s14"), load_sample("chelsea"), None,
                           [(block, head)])
    assert shown(tab) == "switched"
    assert same_answer(bars(tab), expected["after"]), bars(tab)
    text = tab.locator(f"{ROOT} .vx-tour-text").inner_text()
    target = expected["target"]
    assert f"{target['before']:.3f} → {target['after']:.3f}" in text, text  # the one-line lead
    tab.keyboard.press("ArrowRight")  # the next step switches nothing: every head back on
    wait_for_state(tab, "tour", lambda step: step == str(number + 1))
    assert state(tab)["off"] == "" and shown(tab) == "trained"
