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
    fit(chart, () => window.Plotly.Plots.resize(host));  // data-fitting from this moment
  }).observe(host);
}

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
const EDGE = 8;  // px between a label and the chart's edge, the toolbar or another label
let MIN_FONT = 9;  // the smallest text a fit may leave: the message's `smallest` (presentation: 14)
const plain = (text) => String(text).replace(/<[^>]+>/g, "");
const lineCount = (text) => text.split("<br>").length;
const longestLine = (text) => Math.max(...text.split(/<br\s*\/?>/i).map((l) => plain(l).length));
const longestWord = (text) => Math.max(...plain(text.replace(/<br\s*\/?>/gi, " ")).split(" ")
  .map((w) => w.length));
const clone = (value) => (value === undefined ? null : JSON.parse(JSON.stringify(value)));

/* Lines of at most `maxChars` visible characters, broken at spaces or after a hyphen
 * ("input-x-gradient" has no space); a longer piece stays whole. */
function wrapText(text, maxChars) {
  return text.split(/<br\s*\/?>/i).map((line) => {
    const lines = [];
    let current = "";
    for (const [, space, piece] of line.matchAll(/( ?)([^ -]*-?)/g)) {
      if (!piece) continue;
      const longer = current ? current + space + piece : piece;
      if (current && plain(longer).length > maxChars) {
        lines.push(current);
        current = piece;
      } else {
        current = longer;
      }
    }
    lines.push(current);
    return lines.join("<br>");
  }).join("<br>");
}

function boxIn(element, origin) {
  const r = element.getBoundingClientRect();
  return { left: r.left - origin.left, right: r.right - origin.left, top: r.top - origin.top,
           bottom: r.bottom - origin.top, width: r.width, height: r.height };
}

/* The figure's own values of everything fit() may change, to start from on a resize. */
function remember(chart, layout) {
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

function annotationFixes(host, origin) {
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
        MIN_FONT, Math.floor(font.size * room / widest));
    }
  }
  return fixes;
}

function xTickFixes(host, origin) {
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
      if (gap < 1.5 * size) fixes[`${name}.tickfont.size`] = Math.max(MIN_FONT, Math.floor(gap / 1.5));
    }
  }
  return fixes;
}

function yTickFixes(host, origin) {
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
        MIN_FONT, Math.floor(host._fullLayout[name].tickfont.size * scale));
    }
  }
  return fixes;
}

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
function titlePlacement(chart, origin) {
  const bar = chart.host.querySelector(".modebar");
  const barBox = bar && bar.getBoundingClientRect().width ? boxIn(bar, origin) : null;
  let size = chart.titleSize;
  let lines = titleLines(chart, origin, barBox, size);
  while (size > Math.max(MIN_FONT, (2 * chart.titleSize) / 3)
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

/* A legend over the x axis's labels (a horizontal one under the plot, in a short chart)
 * goes to the chart's bottom edge, and the plot makes room for it. */
function legendFixes(host, origin) {
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
function yTitleFixes(host, origin) {
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

const ABOVE_PLOT = ".nsewdrag, .xtick text, .g-xtitle text, [class*='x2title'] text, "
  + ".annotation, .legend, .g-ytitle text, .colorbar";  // a colour bar spans the plot's height

/* Room at the top: nothing above the chart's edge, and, under a title, the title where it
 * should be (plotly.js lifts a title of several lines above its top anchor) and the plot,
 * the top axis, subplot titles and a legend below it. */
function topSpace(chart, origin) {
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
function fit(chart, before = null) {
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
  if (message.smallest) MIN_FONT = message.smallest;  // one presentation setting per page
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
