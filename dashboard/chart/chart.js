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

const charts = new WeakMap();  // parentElement -> {host, text, send, select, listening}
const SCRIPT_ID = "vl-plotly";

/* The library, loaded once per document: a <script> element every chart (and the
 * sidebar's preload, a separate component with its own copy of this module) waits on. */
function loadPlotly(src) {
  if (window.Plotly) return Promise.resolve(window.Plotly);
  let script = document.getElementById(SCRIPT_ID);
  if (!script) {
    script = document.createElement("script");
    script.id = SCRIPT_ID;
    script.src = src;
    script.async = true;
    document.head.appendChild(script);
  }
  return new Promise((resolve, reject) => {
    script.addEventListener("load", () => resolve(window.Plotly));
    script.addEventListener("error", () => {
      script.remove();  // a later chart may try again
      reject(new Error(`the chart library did not load (${src})`));
    });
  });
}

function decode(data) {
  if (typeof data === "string") return data;
  const bytes = ArrayBuffer.isView(data)
    ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength) : new Uint8Array(data);
  return new TextDecoder().decode(bytes);
}

function pointOf(point) {
  return {
    curve_number: point.curveNumber, point_number: point.pointNumber,
    point_index: point.pointIndex, x: point.x, y: point.y,
    customdata: point.customdata === undefined ? null : point.customdata,
  };
}

function listen(chart) {
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
    window.Plotly.Plots.resize(host).catch(() => {});
  }).observe(host);
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
