/* The block strip: one thumbnail per transformer block (what [CLS] attends to, or the mean
 * patch row) with a bar for the mean token length and one for the read-out (what the
 * final answer scores when the model stops after that block). Hover previews a block on
 * the picture; a click opens it; a block with heads switched off is marked. */

import { el, markTargets } from "./dom.js";
import { esc, fmt, pct } from "./format.js";
import { REDRAW } from "./store.js";

export class BlockStrip {
  constructor({ store, data, maps, painter }) {
    Object.assign(this, { store, data, maps, painter });
    const m = data.model, strip = el("div", "vx-blockstrip");
    strip.dataset.part = "blocks";
    const hoverText = m.ov.layout.cls_joins_late ? "its attention map" : "what [CLS] attends to";
    this.readout = m.ov.readout.unavailable ? null : m.ov.readout;
    const readWords = this.readout ? ` · green: read-out score of ${esc(this.readout.label)}` : "";
    strip.appendChild(el("div", "vx-blockstrip-label",
      `<b>The ${m.blocks.length} blocks</b> (0–${m.blocks.length - 1})<br><span class="muted">hover: ${hoverText} · ` +
      `click: open · teal: mean token length ‖x‖${readWords}</span>`));
    this.blockEls = [];
    const row = el("div", "vx-block-row");
    row.dataset.part = "readout";
    this.row = row;
    m.blocks.forEach((b) => row.appendChild(this.blockNode(b)));
    strip.appendChild(row);
    this.element = strip;
  }

  blockNode(b) {
    const store = this.store, [rows, cols] = this.data.model.grid;
    const node = el("div", "vx-block" + (b.kind === "class" ? " class-attn" : ""));
    node.dataset.block = b.index;
    node.title = `${b.label}: ${b.kind === "class" ? "class attention" : "self-attention"}, ` +
      `${b.nq} quer${b.nq === 1 ? "y" : "ies"} × ${b.nk} keys. Hover: ${b.prefix ? "what [CLS] attends to" : "the mean attention of its patches"}; click: open it.`;
    const canvas = el("canvas");
    canvas.width = cols * 4;
    canvas.height = rows * 4;
    node.appendChild(canvas);
    node.appendChild(el("div", "vx-normbar", "<div></div>"));
    if (this.readout) node.appendChild(this.readoutBar(b.index));
    node.appendChild(el("div", "vx-block-label", b.kind === "class" ? `${b.index}C` : String(b.index)));
    node.addEventListener("mouseenter", () => store.set({ previewBlock: b.index }, REDRAW.live));
    node.addEventListener("mouseleave", () => store.set({ previewBlock: null }, REDRAW.live));
    node.addEventListener("click", () => { store.dispatch("stop"); store.dispatch("selectBlock", b.index, true); });
    this.blockEls.push({ node, canvas });
    return node;
  }

  /** The final answer's score read out after this block (a cosine-based score can be
   * below 0: drawn as 0), with the block's own top class in the tooltip. */
  readoutBar(block) {
    const found = this.readout, r = found.blocks[block];
    const bar = el("div", "vx-readbar", "<div></div>");
    bar.firstChild.style.width = `${(100 * Math.min(1, Math.max(0, r.target_score))).toFixed(1)}%`;
    bar.title = `Read-out after block ${block}: it would answer ${r.label} (${pct(r.share)}); ` +
      `${found.label} scores ${fmt(r.target_score)} here (${found.score_kind})`;
    return bar;
  }

  /** The open block marked, thumbnails in the chosen head, the norm bars. */
  render() {
    const st = this.store.state, m = this.data.model;
    markTargets([this.row], st.targets);
    this.blockEls.forEach(({ node }, i) => {
      node.classList.toggle("current", i === st.block);
      const off = st.off.filter(([block]) => block === i).length;
      node.classList.toggle("has-off", off > 0);
      node.dataset.off = String(off);
    });
    this.blockEls.forEach(({ canvas }, block) => {
      const row = this.maps.queryRow(block, st.head), ctx = canvas.getContext("2d");
      this.painter.paintMap(ctx, row.patch, canvas.width, canvas.height, { opaque: true });
    });
    const means = m.normOut.map((values) => values.reduce((a, b) => a + b, 0) / values.length);
    const top = Math.max(...means);
    this.blockEls.forEach(({ node }, i) => {
      node.querySelector(".vx-normbar > div").style.width = `${(100 * means[i] / top).toFixed(1)}%`;
      node.querySelector(".vx-normbar").title = `mean ‖x‖ of the block's output tokens: ${fmt(means[i])}`;
    });
  }

  /** The block under the pointer, previewed on the picture. */
  draw() {
    const previewing = this.store.state.previewBlock;
    this.blockEls.forEach(({ node }, i) => node.classList.toggle("previewing", i === previewing));
  }
}
