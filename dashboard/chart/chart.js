/* ViT Lens: one Plotly figure, drawn with the vendored plotly.js bundle.
 *
 * Why not st.plotly_chart: it loads Streamlit's full plotly.js chunk (4.7 MB) in every new
 * tab, about 0.8 s of main-thread time before the first chart, on every page. Our bundle
 * (plotly.js's core with bar, heatmap, image and scatter; 1.25 MB, built by
 * dashboard/chart/plotly_bundle) is served once from app/static/ and shared by every chart
 * of the document.
 *
 * The message from Python (bytes, UTF-8 JSON): {src, select, figure}, or {preload, src} from
 * the sidebar, which starts fetching the library while the server still computes the page.
 * `select` charts report a clicked point as the `selection` state, in st.plotly_chart's shape:
 * {points: [{curve_number, point_number, point_index, x, y, customdata}]}.
 * The chart's element carries data-state: "drawing", "drawn" or "failed".
 */

import { listen } from "./events.js";
import { fit, remember } from "./fit.js";
import { loadPlotly } from "./library.js";
import { LIMITS } from "./text.js";

const charts = new WeakMap();  // parentElement -> {host, text, send, select, listening}

function decode(data) {
  if (typeof data === "string") return data;
  const bytes = ArrayBuffer.isView(data)
    ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength) : new Uint8Array(data);
  return new TextDecoder().decode(bytes);
}

function create(parentElement) {
  const host = document.createElement("div");
  host.className = "vl-chart";
  parentElement.appendChild(host);
  return { host, text: null, listening: false };
}

export default function mount({ parentElement, data, setStateValue }) {
  const text = decode(data);
  if (text.startsWith('{"preload"')) {  // the sidebar's: fetch the library, draw nothing
    loadPlotly(JSON.parse(text).src).catch(() => {});  // a chart reports the failure
    return;
  }
  let chart = charts.get(parentElement);
  if (!chart || !chart.host.isConnected) {
    chart = create(parentElement);
    charts.set(parentElement, chart);
  }
  chart.send = setStateValue;
  if (text === chart.text) return;  // the same figure again (a rerun that changed nothing)
  chart.text = text;
  const message = JSON.parse(text);
  const { figure } = message;
  chart.select = Boolean(message.select);
  if (message.smallest) LIMITS.minFont = message.smallest;  // one presentation setting per page
  const { host } = chart;
  host.dataset.state = "drawing";
  host.style.height = `${(figure.layout && figure.layout.height) || 450}px`;
  loadPlotly(message.src)
    .then((Plotly) => {
      if (chart.text !== text) return null;  // a newer figure arrived meanwhile
      return Plotly.react(host, {
        data: figure.data || [], layout: figure.layout || {}, frames: figure.frames || [],
        config: { displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"] },
      }).then(() => {
        remember(chart, figure.layout || {});
        return fit(chart);
      }).then(() => {
        if (!chart.listening) {
          listen(chart);
          chart.listening = true;
        }
        if (chart.text === text) host.dataset.state = "drawn";
      });
    })
    .catch((error) => {
      host.dataset.state = "failed";
      host.textContent = `This chart could not be drawn: ${error.message}`;
    });
}
