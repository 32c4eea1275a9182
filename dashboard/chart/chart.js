/* ViT Lens: one Plotly figure, drawn with the vendored cartesian plotly.js bundle.
 *
 * Why not st.plotly_chart: it loads Streamlit's full plotly.js chunk (4.7 MB) in every new
 * tab, about 0.8 s of main-thread time before the first chart, on every page. The cartesian
 * bundle (bar, heatmap, image, scatter and a few more; 1.5 MB) is served once from
 * app/static/ and shared by every chart of the document.
 *
 * The message from Python (bytes, UTF-8 JSON): {src, select, figure}. `select` charts report
 * a clicked point as the `selection` state, in st.plotly_chart's shape:
 * {points: [{curve_number, point_number, point_index, x, y, customdata}]}.
 * The chart's element carries data-state: "drawing", "drawn" or "failed".
 */

const charts = new WeakMap();  // parentElement -> {host, text, send}
let plotly = null;  // the one load of the library, shared by every chart

function loadPlotly(src) {
  if (window.Plotly) return Promise.resolve(window.Plotly);
  if (!plotly) {
    plotly = new Promise((resolve, reject) => {
      const script = document.createElement("script");
      script.src = src;
      script.async = true;
      script.onload = () => resolve(window.Plotly);
      script.onerror = () => {
        plotly = null;  // a later chart may try again
        script.remove();
        reject(new Error(`the chart library did not load (${src})`));
      };
      document.head.appendChild(script);
    });
  }
  return plotly;
}

function decode(data) {
  if (typeof data === "string") return data;
  const bytes = data instanceof Uint8Array ? data : new Uint8Array(data.buffer || data);
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
  let chart = charts.get(parentElement);
  if (!chart || !chart.host.isConnected) {
    chart = create(parentElement);
    charts.set(parentElement, chart);
  }
  chart.send = setStateValue;
  const text = decode(data);
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
