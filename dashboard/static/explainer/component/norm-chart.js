/* The final LayerNorm stage: the length ‖x‖ of the tokens after each block (the median
 * patch token, the first token, the patch pointed at), as a small SVG chart. */

import { el } from "./dom.js";
import { fmt } from "./format.js";

export class NormChart {
  constructor({ store, data }, box) {
    Object.assign(this, { store, data });
    const ov = data.model.ov;
    box.innerHTML = `<h3>Final LayerNorm <span class="mono">${ov.layout.tokens}×${ov.dims.width}</span></h3>` +
      `<p>After the last block every token is normalised: its ${ov.dims.width} numbers are shifted to mean 0 and ` +
      `scaled to variance 1, then multiplied by a learned gain and shifted by a learned bias. ` +
      `Below: the length ‖x‖ of the tokens (the size of their ${ov.dims.width} numbers taken together) after each block, ` +
      `before that final norm.</p>`;
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.classList.add("vx-chart");
    this.svg = svg;
    box.appendChild(svg);
    box.appendChild(el("div", "vx-note", "<b style='color:#888'>grey</b>: the median patch token · " +
      "<b style='color:#1f6feb'>blue</b>: the first token ([CLS] where there is one) · <b style='color:#0891b2'>cyan</b>: " +
      "the marked patch, or the one under your pointer · “in”: the tokens entering block 0; then each block's output."));
  }

  /** The lines to draw: point 0 is the tokens entering block 0, point i block i-1's output. */
  series() {
    const m = this.data.model, st = this.store.state;
    const traces = [m.embedNorms, ...m.normOut];
    const patchStart = (v) => v.length - m.np;
    const medianPatch = traces.map((v) => {
      if (patchStart(v) < 0) return null;
      const sorted = Float32Array.from(v.subarray(patchStart(v))).sort(), mid = sorted.length >> 1;
      return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
    });
    const first = traces.map((v) => (patchStart(v) !== 0 ? v[0] : null));
    const series = [{ values: medianPatch, colour: "#888", width: 2 }, { values: first, colour: "#1f6feb", width: 2 }];
    const p = st.hover !== null ? st.hover : st.pinned;
    if (p !== null) {
      series.push({ values: traces.map((v) => (patchStart(v) >= 0 ? v[patchStart(v) + p] : null)),
        colour: "#0891b2", width: 3 });
    }
    return series;
  }

  /** The numbers the tour quotes, on the lines they come from: the median patch token's
   * length entering the first block and at its last point, and the marked patch's length
   * over the median in the block where it stands out most. */
  labels(series, x, y, font) {
    const median = series[0].values, st = this.store.state, marks = this.data.model.ov.high_norm;
    const last = median.reduce((found, v, i) => (v !== null ? i : found), 0);
    const text = (tx, ty, words, anchor, colour) => `<text x="${tx}" y="${ty}" font-size="${font}" ` +
      `text-anchor="${anchor}" font-weight="700" fill="${colour}" data-label="value">${words}</text>`;
    let html = text(x(0) + 4, y(median[0]) - font * 0.5, fmt(median[0]), "start", "#666") +
      text(x(last) - 4, y(median[last]) + font * 1.2, fmt(median[last]), "end", "#666");
    const mark = (marks.flagged[0] || marks.largest);
    const marked = series[2];
    if (marked && st.pinned === mark.patch && marked.values[mark.block + 1] !== null) {
      html += text(x(mark.block + 1), y(marked.values[mark.block + 1]) - font * 0.6,
        `${mark.ratio}× the median`, "middle", "#0891b2");
    }
    return html;
  }

  draw() {
    const svg = this.svg;
    if (!svg.isConnected) return;
    const data = this.data, rect = svg.getBoundingClientRect(), W = rect.width || 500, H = rect.height || 170;
    const font = Math.round(11 * (data.presenting ? 1.6 : 1));
    const pad = { l: 4.2 * font, r: font, t: 10, b: 2.6 * font }, n = data.model.blocks.length;  // r: room for the last tick label
    const series = this.series();
    const all = series.flatMap((s) => s.values.filter((v) => v !== null));
    const top = Math.max(...all) * 1.05;
    const x = (i) => pad.l + (W - pad.l - pad.r) * i / n;
    const y = (v) => H - pad.b - (H - pad.t - pad.b) * v / top;
    const label = (tx, ty, text, anchor, extra = "") =>
      `<text x="${tx}" y="${ty}" font-size="${font}" text-anchor="${anchor}" fill="currentColor" opacity="0.75" ${extra}>${text}</text>`;
    let html = `<line x1="${pad.l}" y1="${H - pad.b}" x2="${W - pad.r}" y2="${H - pad.b}" stroke="currentColor" stroke-opacity="0.3"/>`;
    for (const tick of [0, top / 2, top]) html += label(pad.l - 6, y(tick) + font / 3, fmt(tick, 2), "end");
    html += label(pad.l + 6, pad.t + font, "‖x‖", "start", 'font-weight="700"');
    for (let i = 0; i <= n; i += Math.max(1, Math.ceil(n / 13))) {  // 0: input; i: block i-1's output
      html += label(x(i), H - pad.b + font * 1.2, i ? i - 1 : "in", "middle");
    }
    html += label((pad.l + W - pad.r) / 2, H - 3, "after block", "middle");
    for (const s of series) {
      const points = s.values.map((v, i) => (v === null ? null : `${x(i)},${y(v)}`)).filter(Boolean).join(" ");
      html += `<polyline fill="none" stroke="${s.colour}" stroke-width="${s.width}" points="${points}"/>`;
    }
    html += this.labels(series, x, y, font);
    const block = this.store.state.block;
    html += `<line x1="${x(block + 1)}" x2="${x(block + 1)}" y1="${pad.t}" y2="${H - pad.b}" stroke="#f59e0b" stroke-dasharray="4 3"/>`;
    svg.innerHTML = html;
  }
}
