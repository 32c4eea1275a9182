/* The attention matrix of an opened block: rows are queries, columns keys, each row scaled
 * to its own largest value; the query token pointed at (cyan row) and the key under the
 * pointer (yellow column). Hovering it picks both. */

import { el } from "./dom.js";
import { maxOf } from "./format.js";
import { REDRAW } from "./store.js";

export class AttentionMatrix {
  constructor({ store, data, maps }, block) {
    Object.assign(this, { store, data, maps });
    const H = block.heads, left = el("div");
    left.dataset.part = "matrix";
    left.innerHTML = `<div class="vx-axis">Attention matrix, ${H > 1 ? "<span class='vx-matrix-head'></span>" : ""}: rows = queries ↓, columns = keys →</div>`;
    const matrix = el("canvas", "vx-matrix");
    matrix.width = block.nk;
    matrix.height = block.nq;
    if (block.nq === 1) matrix.style.height = "40px";
    matrix.addEventListener("mousemove", (event) => this.hover(event));
    matrix.addEventListener("mouseleave", () => {
      store.set({ hoverKey: null }, REDRAW.none);
      store.dispatch("hover", null, null);
    });
    this.canvas = matrix;
    left.appendChild(matrix);
    left.appendChild(el("div", "vx-note", "Each row scaled to its own largest value (rows are " +
      "probabilities that sum to 1)."));
    this.element = left;
    this.key = null;  // block and head of the painted matrix
    this.image = null;
  }

  hover(event) {
    const store = this.store, detail = this.data.details.get(store.state.block);
    if (!detail) return;
    const rect = this.canvas.getBoundingClientRect();
    const qi = Math.min(detail.nq - 1, Math.floor((event.clientY - rect.top) / rect.height * detail.nq));
    const kj = Math.min(detail.nk - 1, Math.floor((event.clientX - rect.left) / rect.width * detail.nk));
    const P = detail.prefix;
    store.set({ hoverKey: kj - P }, REDRAW.none);
    if (detail.nq === 1) store.dispatch("hover", null, null, event);
    else if (qi < P) store.dispatch("hover", null, qi, event);
    else store.dispatch("hover", qi - P, null, event);
  }

  draw(detail, head, qi) {
    const ctx = this.canvas.getContext("2d"), key = `${detail.block}:${head}`;
    if (this.key !== key) {
      this.image = this.paint(ctx, detail, head);
      this.key = key;
      const label = this.element.querySelector(".vx-matrix-head");
      if (label) label.textContent = head >= 0 ? `head ${head}` : `mean of ${detail.heads} heads`;
    }
    ctx.putImageData(this.image, 0, 0);
    ctx.fillStyle = "rgba(34, 211, 238, 0.9)";
    if (qi !== null && detail.nq > 1) ctx.fillRect(0, qi, detail.nk, 1);
    const hoverKey = this.store.state.hoverKey;
    if (hoverKey !== null) {
      ctx.fillStyle = "rgba(253, 224, 71, 0.8)";
      ctx.fillRect(hoverKey + detail.prefix, 0, 1, detail.nq);
    }
  }

  /** Every query's row of one head (or the mean), each scaled to its largest value. */
  paint(ctx, detail, head) {
    const img = ctx.createImageData(detail.nk, detail.nq), lut = this.data.model.lut, P = detail.prefix;
    for (let q = 0; q < detail.nq; q++) {
      const row = this.maps.attentionRow(detail, q, head);
      const top = Math.max(maxOf(row.patch), maxOf(row.prefix)) || 1;
      for (let k = 0; k < detail.nk; k++) {
        const v = k < P ? row.prefix[k] : row.patch[k - P];
        const c = Math.round(Math.min(1, v / top) * 255) * 3, at = 4 * (q * detail.nk + k);
        img.data[at] = lut[c];
        img.data[at + 1] = lut[c + 1];
        img.data[at + 2] = lut[c + 2];
        img.data[at + 3] = 255;
      }
    }
    return img;
  }
}
