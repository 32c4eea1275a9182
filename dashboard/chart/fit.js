/* Labels that fit the chart the browser gave it (a phone, a narrow column, presentation
 * type), measured on the drawn chart, for every figure the app draws:
 * - the title keeps every word on screen and clear of the toolbar (the modebar, top right,
 *   shown on hover or tap): wrapped at spaces to the room left of the toolbar or, when that
 *   leaves too little, put under the toolbar and wrapped to the chart's width;
 * - annotations (subplot titles, labels) that run into each other or past the edge wrap at
 *   spaces to the room they have, and shrink when one word is still too wide;
 * - x tick labels that run together stand upright, and y tick labels get smaller;
 * - a y axis title longer than its axis wraps, a legend over the x axis moves down;
 * - then the plot moves down until nothing under the title (the plot, top axis labels,
 *   subplot titles, a legend, a colour bar) touches it.
 * A resize starts again from the figure's own layout. */

import { clone, longestLine } from "./text.js";
import { annotationFixes, legendFixes, xTickFixes, yTickFixes, yTitleFixes } from "./labels.js";
import { titlePlacement, topSpace } from "./title.js";

/* The figure's own values of everything fit() may change, to start from on a resize. */
export function remember(chart, layout) {
  const { host } = chart;
  const spec = layout.title;
  chart.title = (typeof spec === "string" ? spec : spec && spec.text) || "";
  const drawn = host.querySelector(".gtitle");
  chart.titleSize = host._fullLayout.title.font.size;
  chart.titleCharWidth = chart.title && drawn
    ? drawn.getBoundingClientRect().width / Math.max(1, longestLine(chart.title)) : 0;
  chart.original = { title: clone(layout.title), "margin.t": host._fullLayout.margin.t,
                     "margin.b": host._fullLayout.margin.b };
  if (layout.annotations) chart.original.annotations = clone(layout.annotations);
  chart.original.legend = clone(layout.legend);
  const own = (name, path) => {
    const value = path.reduce((node, key) => (node == null ? node : node[key]), layout[name]);
    return value === undefined ? null : value;
  };
  for (const axis of host._fullLayout._subplots.xaxis || []) {
    const name = `xaxis${axis.slice(1)}`;
    chart.original[`${name}.tickangle`] = own(name, ["tickangle"]);
    chart.original[`${name}.tickfont.size`] = own(name, ["tickfont", "size"]);
  }
  for (const axis of host._fullLayout._subplots.yaxis || []) {
    const name = `yaxis${axis.slice(1)}`;
    chart.original[`${name}.tickfont.size`] = own(name, ["tickfont", "size"]);
    chart.original[`${name}.title.text`] = host._fullLayout[name].title.text || null;
  }
  chart.changed = false;
}

async function refit(chart) {
  const { host } = chart;
  if (!host.offsetParent || !chart.original) return;
  if (chart.changed) {
    await window.Plotly.relayout(host, chart.original);
    chart.changed = false;
  }
  const passes = [
    (box) => ({ ...annotationFixes(host, box),
                ...(chart.title && chart.titleCharWidth ? titlePlacement(chart, box) : {}) }),
    (box) => topSpace(chart, box),
    // the plot's final height: a legend under it is where it stays
    (box) => ({ ...yTitleFixes(host, box), ...xTickFixes(host, box), ...legendFixes(host, box) }),
    (box) => yTickFixes(host, box),  // upright x labels take height
  ];
  for (const pass of passes) {
    const fixes = pass(host.getBoundingClientRect());
    if (Object.keys(fixes).length) {
      chart.changed = true;
      await window.Plotly.relayout(host, fixes);
    }
  }
}

/* One fit at a time per chart (a resize during a fit waits for it), after `before` (the
 * resize to the new width); data-fitting is set from the call until the fit ends, so a test
 * that measures the chart never sees it between a resize and its fit. */
export function fit(chart, before = null) {
  const { host } = chart;
  chart.pending = (chart.pending || 0) + 1;
  host.dataset.fitting = "1";
  chart.queue = (chart.queue || Promise.resolve())
    .then(async () => { if (before) await before(); await refit(chart); }).catch(() => {})
    .then(() => {
      chart.pending -= 1;
      if (!chart.pending) delete host.dataset.fitting;
    });
  return chart.queue;
}
