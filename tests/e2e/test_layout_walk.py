"""Every view of every page, opened by its deep link in one browser tab, at a 1920x1080
desktop, a 1280x720 laptop (also in presentation mode) and a 390x844 phone: no text wider
than its box, no chart text cut at the chart's edge or covered by the chart's toolbar or by
another label, no button over a label, no console error. A view is drawn once per mode; the
sizes are window resizes of the drawn page (no rerun), so the walk stays affordable.
Screenshots of every view at every size go to artifacts/screenshots/walk/."""

from __future__ import annotations

import pytest
from e2e_helpers import ARTIFACTS, running_apps
from test_browser import open_styled

from dashboard.page_list import existing_pages, url_path
from xai_core.lessons.views import PAGES

SHOTS = ARTIFACTS / "screenshots" / "walk"
DESKTOP = [(1920, 1080), (1280, 720), (390, 844)]
PRESENTATION = [(1280, 720)]


def views_of(page_file: str) -> list[tuple[str, str]]:
    """(query key, view id) of every view but the first (the default) of every picker the page
    declares (`xai_core.lessons.views`): `?<key>=<id>` opens it."""
    page = PAGES.get(page_file)
    if page is None:
        return []
    return [(picker.key, view) for picker in page.pickers
            for view in list(picker.titles())[1:]]  # the first: the page's own link


def walk() -> list[tuple[str, str]]:
    """(page path, query string) of every view of every page."""
    stops = []
    for name, _, _ in existing_pages():
        path = url_path(name)
        stops += [(path, "")] + [(path, f"{key}={view}") for key, view in views_of(name)]
    return stops


# Everything the browser shows that can be cut or covered, as problem sentences.
# Text: an element whose text runs past its own box (scrollWidth > clientWidth); a table or
# data grid may scroll sideways only on a phone and only across the whole column (a table
# squeezed into a narrow column hides its columns). Charts (plotly.js SVG): every title, axis
# title, annotation, legend entry, slider and button label lies inside the chart; the
# toolbar (modebar, shown on hover or tap) is clear of the chart's title; those labels do
# not overlap each other, neighbouring tick labels of one axis do not run together, and no
# number carries an SI prefix ("250µ") that reads as a unit.
MEASURE = r"""() => {
  const problems = [];
  const main = document.querySelector("[data-testid='stMain']");
  const column = document.querySelector("[data-testid='stMainBlockContainer']");
  const phone = window.innerWidth < 640;
  const shown = el => el.getClientRects().length > 0
    && getComputedStyle(el).visibility !== 'hidden';
  const words = el => (el.textContent || '').trim().replace(/\s+/g, ' ').slice(0, 50);
  const box = el => el.getBoundingClientRect();
  const overlap = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 2
    && Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 2;
  const inside = (a, b) => a.left >= b.left - 2 && a.right <= b.right + 2
    && a.top >= b.top - 2 && a.bottom <= b.bottom + 2;
  const scroller = el => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
  const fullWidth = el => box(el).width >= 0.9 * (column.clientWidth
    - parseFloat(getComputedStyle(column).paddingLeft)
    - parseFloat(getComputedStyle(column).paddingRight));

  const TEXT = "p, li, h1, h2, h3, h4, h5, h6, td, th, label, button, summary, "
    + "[data-testid='stCaptionContainer'], [data-testid='stMetricValue'], "
    + "[data-testid='stMetricLabel']";
  for (const el of main.querySelectorAll(TEXT)) {
    if (!shown(el) || el.closest('.js-plotly-plot, .katex-display') || scroller(el)) continue;
    if (el.scrollWidth > el.clientWidth + 1 && el.clientWidth > 0)
      problems.push(`text wider than its box (${el.scrollWidth} > ${el.clientWidth} px): `
                    + `<${el.tagName.toLowerCase()}> "${words(el)}"`);
  }
  const grids = [...main.querySelectorAll('.stMarkdown table')].concat(
    [...main.querySelectorAll("[data-testid='stDataFrame'] .dvn-scroller")]);
  for (const el of grids) {
    if (!shown(el) || el.scrollWidth <= el.clientWidth + 1) continue;
    if (phone && fullWidth(el)) continue;  // a wide table scrolls across a phone's column
    problems.push(`table scrolls sideways, hiding columns (${el.scrollWidth} in `
                  + `${el.clientWidth} px): "${words(el)}"`);
  }

  for (const gd of main.querySelectorAll('.js-plotly-plot')) {
    if (!shown(gd)) continue;
    const chart = box(gd);
    const title = gd.querySelector('.gtitle');
    const name = title ? words(title) : `chart of ${gd.closest('[class*="st-key-"]')
      ?.className.match(/st-key-(\S+)/)?.[1]}`;
    const labels = [...gd.querySelectorAll(
      '.gtitle, .g-xtitle text, .g-ytitle text, [class*="-title"] text, .annotation-text, '
      + '.legendtext, .cbtitle text, .slider-label, .slider-current-value, '
      + '.updatemenu-button')].filter(el => shown(el) && words(el));
    for (const el of labels)
      if (!inside(box(el), chart))
        problems.push(`"${words(el)}" cut at the edge of "${name}"`);
    const modebar = gd.querySelector('.modebar');
    if (title && modebar && shown(modebar) && overlap(box(title), box(modebar)))
      problems.push(`the chart toolbar covers the title "${name}"`);
    for (let i = 0; i < labels.length; i++)
      for (let j = i + 1; j < labels.length; j++) {
        const [a, b] = [labels[i], labels[j]];
        if (a.contains(b) || b.contains(a)) continue;
        if (overlap(box(a), box(b)))
          problems.push(`"${words(a)}" overlaps "${words(b)}" in "${name}"`);
      }
    for (const el of gd.querySelectorAll('text'))  // "250µ" reads as a unit, "250u"
      if (/^[−-]?\d+(\.\d+)?[µμunpm]$/.test(words(el)))
        problems.push(`number "${words(el)}" with an SI prefix for a unit in "${name}"`);
    for (const axis of gd.querySelectorAll('.xaxislayer-above, .yaxislayer-above')) {
      const ticks = [...axis.querySelectorAll('.xtick text, .ytick text')]
        .filter(el => shown(el) && words(el)).map(el => [el, box(el)]);
      for (let i = 1; i < ticks.length; i++)
        if (overlap(ticks[i - 1][1], ticks[i][1]))
          problems.push(`tick labels "${words(ticks[i - 1][0])}" and "${words(ticks[i][0])}" `
                        + `run together in "${name}"`);
    }
  }
  return problems;
}"""


@pytest.fixture(scope="module")
def app():
    with running_apps(1, log_name="layout-walk") as apps:
        yield apps[0]


def _base_probe(message) -> bool:
    """Streamlit's page, opened at a page's own address, first asks that address for
    `_stcore/health` and `_stcore/host-config` to find the app's base path: two 404s that
    are part of how it starts, not errors of the app."""
    url = message.location.get("url", "")
    return "404" in message.text and url.endswith(("/_stcore/health", "/_stcore/host-config"))


def _settle(page) -> None:
    """Charts drawn, resized to the window (plotly.js follows a resize a frame later) and
    their labels fitted (dashboard/chart/chart.js marks a chart data-fitting meanwhile)."""
    page.wait_for_timeout(400)
    page.wait_for_function("() => [...document.querySelectorAll('.vl-chart')]"
                           ".every(c => c.dataset.state !== 'drawing' && !c.dataset.fitting)")


def _settled_problems(page, tries: int = 4) -> list[str]:
    """MEASURE once the layout has settled. Streamlit may still widen a column (its own
    rerender, the presentation style) after the charts fitted the first width: each chart
    then fits again. A problem is reported only if it is still there after `tries` settles
    about a second apart; one that lasts is a real one."""
    for attempt in range(tries):
        if attempt:
            page.wait_for_timeout(1000)
        _settle(page)
        found = page.evaluate(MEASURE)
        if not found:
            return []
    return found


def test_every_view_fits_at_every_size(app, browser):
    context = browser.new_context(viewport={"width": 1920, "height": 1080}, has_touch=True)
    page = context.new_page()
    page.set_default_timeout(240_000)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(f"{page.url}: {error}"))
    page.on("console", lambda message: message.type == "error" and not _base_probe(message)
            and errors.append(f"{page.url}: console: {message.text}"))
    problems: list[str] = []
    SHOTS.mkdir(parents=True, exist_ok=True)
    try:
        for presentation, sizes in ((False, DESKTOP), (True, PRESENTATION)):
            for path, query in walk():
                flag = "&presentation=true" if presentation else ""
                page.set_viewport_size({"width": sizes[0][0], "height": sizes[0][1]})
                open_styled(page, f"{app.url}{path}?{query}{flag}", "[data-testid='stMain']",
                            "stMarkdown table")
                for width, height in sizes:
                    page.set_viewport_size({"width": width, "height": height})
                    where = f"{path or 'home'}?{query}{flag} at {width}x{height}"
                    problems += [f"{where}: {p}" for p in _settled_problems(page)]
                    shot = f"{path or 'home'}-{query.replace('=', '-')}{'-present' * presentation}"
                    page.screenshot(path=str(SHOTS / f"{shot}-{width}.png"), full_page=True)
    finally:
        context.close()
    assert not errors + problems, "\n".join(errors + problems)
