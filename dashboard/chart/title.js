/* Fits for the top of a chart: where the title goes and how it wraps (clear of the toolbar),
 * and room under it for the plot, the top axis, subplot titles and a legend. */

import { EDGE, LIMITS, boxIn, lineCount, longestLine, wrapText } from "./text.js";

/* The title's lines at font size `size` (the figure's own is `chart.titleSize`). */
function titleLines(chart, origin, barBox, size) {
  const charWidth = chart.titleCharWidth * size / chart.titleSize;
  const fullChars = Math.floor((origin.width - 2 * EDGE) / charWidth);
  const besideChars = barBox ? Math.floor((barBox.left - 2 * EDGE) / charWidth) : fullChars;
  const besideText = wrapText(chart.title, besideChars);
  const underText = wrapText(chart.title, fullChars);
  const under = Boolean(barBox) && (longestLine(besideText) > besideChars
                                    || lineCount(besideText) > lineCount(underText) + 1);
  return { under, text: under ? underText : besideText };
}

/* Where the title goes and how it wraps; a title that would fill more than a quarter of a
 * short chart gets smaller type (down to two thirds of its own). */
export function titlePlacement(chart, origin) {
  const bar = chart.host.querySelector(".modebar");
  const barBox = bar && bar.getBoundingClientRect().width ? boxIn(bar, origin) : null;
  let size = chart.titleSize;
  let lines = titleLines(chart, origin, barBox, size);
  while (size > Math.max(LIMITS.minFont, (2 * chart.titleSize) / 3)
         && 1.3 * size * lineCount(lines.text) > origin.height / 4) {
    size -= 1;
    lines = titleLines(chart, origin, barBox, size);
  }
  chart.titleTop = lines.under ? barBox.bottom + EDGE / 2 : EDGE / 2;
  chart.titleRight = lines.under || !barBox ? origin.width - EDGE : barBox.left - EDGE;
  return {
    "title.text": lines.text, "title.automargin": false, "title.font.size": size,
    "title.xref": "container", "title.x": 0, "title.xanchor": "left", "title.pad.l": EDGE,
    "title.yref": "container", "title.y": 1, "title.yanchor": "top",
    "title.pad.t": chart.titleTop,
  };
}

const ABOVE_PLOT = ".nsewdrag, .xtick text, .g-xtitle text, [class*='x2title'] text, "
  + ".annotation, .legend, .g-ytitle text, .colorbar";  // a colour bar spans the plot's height

/* Room at the top: nothing above the chart's edge, and, under a title, the title where it
 * should be (plotly.js lifts a title of several lines above its top anchor) and the plot,
 * the top axis, subplot titles and a legend below it. */
export function topSpace(chart, origin) {
  const { host } = chart;
  const boxes = [...host.querySelectorAll(ABOVE_PLOT)].map((el) => boxIn(el, origin))
    .filter((b) => b.width);
  const edgeNeed = Math.max(0, ...boxes.map((b) => 2 - b.top));
  const title = chart.title && host.querySelector(".gtitle");
  if (!title) {
    return edgeNeed ? { "margin.t": host._fullLayout.margin.t + Math.ceil(edgeNeed) } : {};
  }
  const t = boxIn(title, origin);
  const fixes = {};
  const right = chart.titleRight - t.left;  // the average letter was narrower than these
  let lines = 0;
  if (t.width > right) {
    const text = host._fullLayout.title.text;
    const wrapped = wrapText(chart.title, Math.floor(longestLine(text) * right / t.width));
    lines = lineCount(wrapped) - lineCount(text);
    fixes["title.text"] = wrapped;
  }
  const shift = Math.max(0, Math.ceil(chart.titleTop - t.top));
  const bottom = t.bottom + shift + EDGE / 2 + lines * t.height / lineCount(
    host._fullLayout.title.text);
  let need = edgeNeed;
  for (const b of boxes) {
    if (b.left < t.right && b.right > t.left && b.top < bottom) {
      need = Math.max(need, bottom - b.top);
    }
  }
  if (shift) fixes["title.pad.t"] = chart.titleTop + shift;
  if (need) fixes["margin.t"] = host._fullLayout.margin.t + Math.ceil(need);
  return fixes;
}
