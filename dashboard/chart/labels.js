/* Fits for the labels under and beside the plot: annotations, tick labels, a legend over the
 * x axis, a y axis title longer than its axis. Each returns the relayout it needs. */

import { EDGE, LIMITS, boxIn, longestLine, wrapText } from "./text.js";

export function annotationFixes(host, origin) {
  const full = host._fullLayout.annotations || [];
  const notes = [...host.querySelectorAll(".annotation")].map((el) => ({
    index: Number(el.getAttribute("data-index")), box: boxIn(el, origin) }))
    .filter((n) => n.box.width > 0 && full[n.index] && full[n.index].text);
  const fixes = {};
  for (const note of notes) {
    const centre = (note.box.left + note.box.right) / 2;
    let room = 2 * Math.min(centre, origin.width - centre);
    for (const other of notes) {
      const sameRow = Math.min(note.box.bottom, other.box.bottom)
        - Math.max(note.box.top, other.box.top) > 2;
      if (other !== note && sameRow) {
        room = Math.min(room, Math.abs(centre - (other.box.left + other.box.right) / 2));
      }
    }
    room -= EDGE;
    if (note.box.width <= room) continue;
    const { text, font } = full[note.index];
    const charWidth = note.box.width / Math.max(1, longestLine(text));
    const wrapped = wrapText(text, Math.max(1, Math.floor(room / charWidth)));
    fixes[`annotations[${note.index}].text`] = wrapped;
    const widest = longestLine(wrapped) * charWidth;
    if (widest > room) {
      fixes[`annotations[${note.index}].font.size`] = Math.max(
        LIMITS.minFont, Math.floor(font.size * room / widest));
    }
  }
  return fixes;
}

export function xTickFixes(host, origin) {
  const fixes = {};
  for (const axis of host._fullLayout._subplots.xaxis || []) {
    const ticks = [...host.querySelectorAll(`.xaxislayer-above .${axis}tick text`)]
      .map((el) => boxIn(el, origin)).filter((b) => b.width > 0)
      .sort((a, b) => a.left - b.left);
    if (ticks.some((b, i) => i > 0 && b.left < ticks[i - 1].right + 2)) {
      const name = `xaxis${axis.slice(1)}`;
      fixes[`${name}.tickangle`] = -90;  // upright, and small enough for the gaps
      const gap = Math.min(...ticks.slice(1).map((b, i) => (b.left + b.right
                                                             - ticks[i].left - ticks[i].right) / 2));
      const size = host._fullLayout[name].tickfont.size;
      if (gap < 1.5 * size) fixes[`${name}.tickfont.size`] = Math.max(LIMITS.minFont, Math.floor(gap / 1.5));
    }
  }
  return fixes;
}

export function yTickFixes(host, origin) {
  const fixes = {};
  for (const axis of host._fullLayout._subplots.yaxis || []) {  // rows too close: smaller type
    const ticks = [...host.querySelectorAll(`.yaxislayer-above .${axis}tick text`)]
      .map((el) => boxIn(el, origin)).filter((b) => b.height > 0)
      .sort((a, b) => a.top - b.top);
    let scale = 1;
    ticks.forEach((b, i) => {
      if (i > 0) scale = Math.min(scale, (b.top + b.bottom - ticks[i - 1].top - ticks[i - 1].bottom)
                                  / 2 / b.height);
    });
    if (scale < 1) {
      const name = `yaxis${axis.slice(1)}`;
      fixes[`${name}.tickfont.size`] = Math.max(
        LIMITS.minFont, Math.floor(host._fullLayout[name].tickfont.size * scale));
    }
  }
  return fixes;
}

/* A legend over the x axis's labels (a horizontal one under the plot, in a short chart)
 * goes to the chart's bottom edge, and the plot makes room for it. */
export function legendFixes(host, origin) {
  const legend = host.querySelector(".legend");
  if (!legend) return {};
  const l = boxIn(legend, origin);
  const hit = [...host.querySelectorAll(".xtick text, .g-xtitle text")].some((el) => {
    const b = boxIn(el, origin);
    return b.width && b.left < l.right && b.right > l.left && b.top < l.bottom && b.bottom > l.top;
  });
  if (!hit) return {};
  // at the chart's bottom edge, in a bottom margin grown by the legend's height
  return { "legend.yref": "container", "legend.y": 0, "legend.yanchor": "bottom",
           "margin.b": host._fullLayout.margin.b + Math.ceil(l.height) + EDGE };
}

/* A y axis title longer than its axis would run into the chart's title or the x axis
 * title: wrapped to the axis's length. */
export function yTitleFixes(host, origin) {
  const fixes = {};
  for (const axis of host._fullLayout._subplots.yaxis || []) {
    const name = `yaxis${axis.slice(1)}`;
    const el = host.querySelector(`.g-${axis}title text`);
    const length = host._fullLayout[name]._length;
    const text = host._fullLayout[name].title.text;
    if (!el || !text || !length) continue;
    const b = boxIn(el, origin);
    if (b.height > length - EDGE) {
      fixes[`${name}.title.text`] = wrapText(
        text, Math.max(1, Math.floor(longestLine(text) * (length - EDGE) / b.height)));
    }
  }
  return fixes;
}
