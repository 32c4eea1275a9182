"""Presentation mode at projector size (issue 40): on the first view of every page (Home and
pages 0-9) at 1280x720 with presentation mode on, every text the page shows - each SVG text
of every chart (titles, subplot titles, axis and colour-bar titles, ticks, legends,
annotations) and each line of HTML text (markdown, captions, labels, tables, chips) in the
main column and the sidebar - is at least 14 px, no two of them overlap, no word is broken
inside (a line that ends in the middle of a word; a table marked wide, page 7's ten methods,
may), no text is cut short (a label ending in "...", chips scrolled out of sight), no formula
shows raw markup (`α_k`), and the sidebar lists every page above the fold. The Explainer's own component (page 0, its
shadow DOM) has its own tests. Screenshots go to artifacts/screenshots/text-sizes/."""

from __future__ import annotations

import pytest
from e2e_helpers import ARTIFACTS, running_apps
from test_browser import open_styled
from test_layout_walk import _base_probe, _settled_problems

from dashboard.page_list import existing_pages, url_path

SHOTS = ARTIFACTS / "screenshots" / "text-sizes"
SMALLEST_PX = 14
VIEWPORT = {"width": 1280, "height": 720}

# Every text box on the page, as {text, size, box, where, chart}: the SVG texts of the
# charts, and the rendered lines of every HTML text node (one box per line, from a Range), in
# the main column and the sidebar. Left out: what is not shown (no box, hidden, clipped to a
# pixel for screen readers), icon ligatures (Material icons are text in an icon font), and
# what sits in a scrolled-away part of a scroller (a table's hidden columns, the sidebar's
# lower part).
TEXTS = r"""() => {
  const found = [];
  const words = t => (t || '').trim().replace(/\s+/g, ' ');
  const visible = el => {
    for (let e = el; e && e.nodeType === 1; e = e.parentElement) {
      const style = getComputedStyle(e);
      if (style.visibility === 'hidden' || style.display === 'none' || style.opacity === '0')
        return false;
    }
    return true;
  };
  const icon = el => /Material/.test(getComputedStyle(el).fontFamily)
    || el.closest("[data-testid='stIconMaterial'], [data-testid*='Icon']");
  const clippedAway = (el, r) => {
    for (let e = el.parentElement; e && e.nodeType === 1; e = e.parentElement) {
      const style = getComputedStyle(e);
      if (style.overflowX !== 'visible' || style.overflowY !== 'visible') {
        const c = e.getBoundingClientRect();
        if (r.right <= c.left + 1 || r.left >= c.right - 1 || r.bottom <= c.top + 1
            || r.top >= c.bottom - 1 || c.width < 2 || c.height < 2) return true;
      }
    }
    return false;
  };
  const box = r => ({left: r.left, right: r.right, top: r.top, bottom: r.bottom});
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    if (!visible(gd)) continue;
    const name = words(gd.querySelector('.gtitle')?.textContent) || 'untitled chart';
    for (const t of gd.querySelectorAll('text')) {
      const r = t.getBoundingClientRect();
      if (!words(t.textContent) || r.width < 1 || !visible(t)) continue;
      // plotly.js shrinks a bar's inside label with a scale transform: the size drawn is
      // the font's size times the text's scale on screen
      const m = t.getScreenCTM();
      const scale = m ? Math.sqrt(m.a * m.a + m.b * m.b) : 1;
      found.push({text: words(t.textContent).slice(0, 60), size: scale * parseFloat(
        getComputedStyle(t).fontSize), box: box(r), where: 'chart', chart: name});
    }
  }
  const roots = document.querySelectorAll("[data-testid='stMain'], [data-testid='stSidebar']");
  for (const root of roots) {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const el = node.parentElement;
      if (!words(node.textContent) || el.closest('.js-plotly-plot, svg, style, script')
          || icon(el) || !visible(el)) continue;
      const range = document.createRange();
      range.selectNodeContents(node);
      for (const r of range.getClientRects()) {
        if (r.width < 2 || r.height < 2 || clippedAway(el, r)) continue;
        found.push({text: words(node.textContent).slice(0, 60), size: parseFloat(
          getComputedStyle(el).fontSize), box: box(r),
          where: root.dataset.testid === 'stSidebar' ? 'sidebar' : 'page', chart: null,
          katex: Boolean(el.closest('.katex'))});
      }
    }
  }
  return found;
}"""

# Words broken inside: a text node drawn on several lines whose line ends in a letter and
# the next begins with one, with no space or hyphen at the break ("sourc" | "e").
BROKEN_WORDS = r"""() => {
  const broken = [];
  const main = document.querySelector("[data-testid='stMain']");
  const walker = document.createTreeWalker(main, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const text = node.textContent;
    if (text.trim().length < 3
        || node.parentElement.closest(".js-plotly-plot, .katex, [class*='st-key-wide_table']"))
      continue;  // a wide table (page 7's ten methods) breaks words so every column shows
    const range = document.createRange();
    let lineTop = null;
    for (let i = 0; i < text.length; i++) {
      range.setStart(node, i);
      range.setEnd(node, i + 1);
      const r = range.getBoundingClientRect();
      if (!r.width) continue;
      if (lineTop !== null && r.top > lineTop + r.height / 2 && i > 0
          && /\p{L}/u.test(text[i]) && /\p{L}/u.test(text[i - 1]))
        broken.push(`"${text.slice(Math.max(0, i - 8), i)}|${text.slice(i, i + 8)}"`);
      lineTop = r.top;
    }
  }
  return broken;
}"""

# Text cut short: a box that hides what does not fit (an ellipsis, hidden or scrolled
# overflow) holding more text than it shows: a label ending in "...", chips scrolled away.
CUT = r"""() => {
  const cut = [];
  const main = document.querySelector("[data-testid='stMain']");
  for (const el of main.querySelectorAll('*')) {
    // a formula scrolls inside its column by KaTeX's 1-2 px of rounding (test_browser.py)
    if (!el.textContent.trim() || el.closest('.js-plotly-plot, .katex, .katex-display, table'))
      continue;  // (and its screen-reader copy of a formula, clipped to a pixel by design)
    const style = getComputedStyle(el);
    const hides = style.textOverflow === 'ellipsis' || ['hidden', 'auto', 'scroll', 'clip']
      .includes(style.overflowX);
    if (hides && el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1
        && getComputedStyle(el).visibility !== 'hidden')
      cut.push(`"${el.textContent.trim().replace(/\s+/g, ' ').slice(0, 50)}" `
               + `(${el.scrollWidth} px in ${el.clientWidth})`);
  }
  return cut;
}"""

# the open sidebar's page list: the last page's link above the window's bottom (a page may
# open with the sidebar collapsed: the Explainer on a projector)
NAV_BOTTOM = r"""() => {
  const bar = document.querySelector("[data-testid='stSidebar']");
  const links = [...document.querySelectorAll("[data-testid='stSidebarNav'] a")];
  if (!bar || bar.getAttribute('aria-expanded') === 'false'
      || bar.getBoundingClientRect().right <= 1 || !links.length) return null;
  return {last: links.at(-1).getBoundingClientRect().bottom,
          names: links.map(a => a.textContent.trim())};
}"""

RAW_MARKUP = ("α_k", "A^k", "d_k", "W_O", "_k ", "^k ", "\\alpha", "\\sum")


def overlapping(texts: list[dict]) -> list[str]:
    """Pairs of text boxes that cover each other by more than 2 px each way (a chart's texts
    with each other, the page's with each other)."""
    found = []
    for group in ("chart", "page", "sidebar"):
        boxes = [t for t in texts if t["where"] == group]
        for i, a in enumerate(boxes):
            for b in boxes[i + 1:]:
                if group == "chart" and a["chart"] != b["chart"]:
                    continue
                x = min(a["box"]["right"], b["box"]["right"]) - max(a["box"]["left"],
                                                                    b["box"]["left"])
                y = min(a["box"]["bottom"], b["box"]["bottom"]) - max(a["box"]["top"],
                                                                      b["box"]["top"])
                if a.get("katex") or b.get("katex"):  # a formula stacks its parts by design
                    continue
                if x > 2 and y > 2 and a["text"] != b["text"]:
                    where = f" in \"{a['chart']}\"" if group == "chart" else f" ({group})"
                    found.append(f"\"{a['text']}\" overlaps \"{b['text']}\"{where}")
    return found


def problems_of(page) -> list[str]:
    texts = page.evaluate(TEXTS)
    problems = [f"{t['size']:.1f} px: \"{t['text']}\" ({t['where']}"
                + (f", \"{t['chart']}\")" if t["chart"] else ")")
                for t in texts if t["size"] < SMALLEST_PX - 0.05 and not t.get("katex")]
    problems += overlapping(texts)
    problems += [f"word broken across lines: {b}" for b in page.evaluate(BROKEN_WORDS)]
    problems += [f"text cut short: {c}" for c in page.evaluate(CUT)]
    shown = " ".join(t["text"] for t in texts)
    problems += [f"raw formula markup {m!r} shown" for m in RAW_MARKUP if m in shown]
    nav = page.evaluate(NAV_BOTTOM)
    if nav and nav["last"] > VIEWPORT["height"]:
        problems.append(f"the sidebar's last page ({nav['names'][-1]}) is below the fold "
                        f"({nav['last']:.0f} px)")
    return problems


@pytest.fixture(scope="module")
def app():
    with running_apps(1, log_name="text-sizes") as apps:
        yield apps[0]


def test_every_pages_first_view_reads_at_projector_size(app, browser):
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(300_000)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(f"{page.url}: {error}"))
    page.on("console", lambda message: message.type == "error" and not _base_probe(message)
            and errors.append(f"{page.url}: console: {message.text}"))
    SHOTS.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    try:
        for name, _, _ in existing_pages():
            path = url_path(name)
            open_styled(page, f"{app.url}{path}?presentation=true", "[data-testid='stMain']",
                        "1.35rem")
            _settled_problems(page)  # charts drawn and fitted
            found = problems_of(page)
            problems += [f"{path or 'home'}: {p}" for p in found]
            page.screenshot(path=str(SHOTS / f"{path or 'home'}-1280.png"))
    finally:
        context.close()
    assert not errors + problems, "\n".join(errors + problems)
