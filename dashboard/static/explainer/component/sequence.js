/* The token sequence of the chosen block: prefix tokens, then the patches in raster order,
 * coloured like the picture's map; hovering a token points at it everywhere. */

import { el, markTargets } from "./dom.js";
import { maxOf, patchName } from "./format.js";

export class Sequence {
  constructor({ store, data, painter }) {
    Object.assign(this, { store, data, painter });
    const card = el("div", "vx-card vx-seq");
    card.dataset.part = "sequence";
    card.appendChild(el("div", "vx-seq-caption",
      `<span><b>The token sequence</b> of the chosen block, coloured like the picture's map below. ` +
      `Prefix tokens first, then the patches in raster order (row by row).</span><span class="vx-seq-info muted"></span>`));
    const canvas = el("canvas");
    canvas.addEventListener("mousemove", (event) => this.hover(event));
    canvas.addEventListener("mouseleave", () => store.dispatch("hover", null, null));
    this.canvas = canvas;
    this.info = card.querySelector(".vx-seq-info");
    card.appendChild(canvas);
    new ResizeObserver(() => this.draw()).observe(canvas);
    this.element = card;
  }

  presenting() {
    return this.data.presenting;
  }

  layout() {
    const m = this.data.model, W = this.canvas.width, b = m.blocks[this.store.state.block];
    const P = b.nk - m.np, gap = P ? 6 * devicePixelRatio : 0;
    const prefixW = P ? Math.min(64 * devicePixelRatio * (this.presenting() ? 1.5 : 1), W * 0.08) : 0;
    const cell = (W - P * prefixW - gap) / m.np;
    return { P, prefixW, gap, cell, start: P * prefixW + gap };
  }

  hover(event) {
    const rect = this.canvas.getBoundingClientRect(), store = this.store;
    const x = (event.clientX - rect.left) * (this.canvas.width / rect.width);
    const lay = this.layout();
    if (x < lay.P * lay.prefixW) return store.dispatch("hover", null, Math.floor(x / lay.prefixW), event);
    const p = Math.min(this.data.model.np - 1, Math.max(0, Math.floor((x - lay.start) / lay.cell)));
    if (p !== store.state.hover) store.dispatch("hover", p, null, event);
  }

  draw() {
    const canvas = this.canvas, st = this.store.state, m = this.data.model;
    if (!m) return;
    markTargets([this.element], st.targets);
    const dpr = devicePixelRatio || 1, rect = canvas.getBoundingClientRect();
    const W = Math.max(200, Math.round(rect.width * dpr)), H = Math.round(rect.height * dpr) || 34;
    if (canvas.width !== W || canvas.height !== H) { canvas.width = W; canvas.height = H; }
    const ctx = canvas.getContext("2d"), painter = this.painter;
    const lay = this.layout(), names = m.ov.layout.prefix_names;
    const map = st.shown && st.shown.patch ? st.shown : null;
    const top = map ? (map.normalised ? 1 : maxOf(map.patch) || 1) : 1;
    const cellH = Math.round(H * 0.62);
    const text = dpr * (this.presenting() ? 1.6 : 1);  // label size, in canvas pixels
    ctx.clearRect(0, 0, W, H);
    for (let i = 0; i < lay.P; i++) {
      const v = map && map.prefix && i < map.prefix.length ? map.prefix[i] / top : 0;
      ctx.fillStyle = map ? painter.colour(v) : "#888";
      ctx.fillRect(i * lay.prefixW + 1, 0, lay.prefixW - 2, cellH);
      ctx.fillStyle = v > 0.55 ? "#000" : "#fff";
      ctx.font = `${Math.round(11 * text)}px sans-serif`;
      ctx.textAlign = "center";
      ctx.textBaseline = "middle";
      ctx.fillText(names[i] || "prefix", i * lay.prefixW + lay.prefixW / 2, cellH / 2);
    }
    for (let p = 0; p < m.np; p++) {
      ctx.fillStyle = map ? painter.colour(map.patch[p] / top) : "#777";
      ctx.fillRect(lay.start + p * lay.cell, 0, Math.max(1, lay.cell - (lay.cell > 3 ? 0.5 : 0)), cellH);
    }
    this.drawRows(ctx, lay, cellH, H, text);
    this.drawMarks(ctx, lay, cellH, dpr);
  }

  /** A tick at the start of every row of patches, labelled as often as there is room. */
  drawRows(ctx, lay, cellH, H, text) {
    const m = this.data.model, [, cols] = m.grid;
    ctx.fillStyle = "rgba(120,120,120,0.9)";
    ctx.textAlign = "left";
    ctx.textBaseline = "top";
    ctx.font = `${Math.round(10 * text)}px sans-serif`;
    const every = Math.max(1, Math.ceil(60 * text / (lay.cell * cols)));
    for (let r = 0; r * cols < m.np; r++) {
      const x = lay.start + r * cols * lay.cell;
      ctx.fillRect(x, cellH, 1, H * 0.14);
      if (r % every === 0) ctx.fillText(`row ${r}`, x + 2, cellH + 2);
    }
  }

  /** The query token (cyan), the key under the pointer in the matrix (yellow), the label. */
  drawMarks(ctx, lay, cellH, dpr) {
    const m = this.data.model, st = this.store.state, names = m.ov.layout.prefix_names, [, cols] = m.grid;
    const mark = (x, w, stroke) => {
      ctx.save();
      ctx.strokeStyle = stroke;
      ctx.lineWidth = 2 * dpr;
      ctx.strokeRect(x - dpr, 1, Math.max(w, 2 * dpr) + 2 * dpr, cellH - 2);
      ctx.restore();
    };
    const query = st.hover !== null ? st.hover : st.pinned;
    const onPrefix = st.hoverPrefix !== null && st.hoverPrefix < lay.P;
    if (query !== null) mark(lay.start + query * lay.cell, lay.cell, "#0891b2");
    if (onPrefix) mark(st.hoverPrefix * lay.prefixW, lay.prefixW, "#0891b2");
    if (st.hoverKey !== null && st.hoverKey >= 0) mark(lay.start + st.hoverKey * lay.cell, lay.cell, "#ca8a04");
    const b = m.blocks[st.block];
    this.info.textContent = onPrefix ? `token ${st.hoverPrefix}: ${names[st.hoverPrefix]} (no pixels)`
      : query !== null ? `token ${b.prefix + query} = ${patchName(query, cols)}`
        : `${b.nk} tokens: ${lay.P} prefix + ${m.np} patches`;
  }
}
