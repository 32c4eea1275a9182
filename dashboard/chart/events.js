/* What a drawn chart listens to: a click on a point (a `select` chart reports it as its
 * `selection` state), a double click (none), and its column's width (a new fit). */

import { fit } from "./fit.js";

function pointOf(point) {
  return {
    curve_number: point.curveNumber, point_number: point.pointNumber,
    point_index: point.pointIndex, x: point.x, y: point.y,
    customdata: point.customdata === undefined ? null : point.customdata,
  };
}

export function listen(chart) {
  const { host } = chart;
  host.on("plotly_click", (event) => {
    if (!chart.select || !event || !event.points || !event.points.length) return;
    chart.send("selection", { points: [pointOf(event.points[0])] });
  });
  host.on("plotly_doubleclick", () => {
    if (chart.select) chart.send("selection", { points: [] });
  });
  // follow the column's width (a window resize, the sidebar folding, an expander opening);
  // a hidden chart (another page's, a closed expander) has no size to follow
  new ResizeObserver(() => {
    if (host.dataset.state !== "drawn" || !host.isConnected || !host.offsetParent) return;
    fit(chart, () => window.Plotly.Plots.resize(host));  // data-fitting from this moment
  }).observe(host);
}
