/* An opened block in the detail panel: its ten steps (residual stream in, LayerNorm, q k v,
 * attention, mixing, projection, residual add, LayerNorm, MLP, residual add), each a small
 * map of the patch tokens and the pointed token's number; then its attention matrix and
 * query · key panel. */

import { el } from "./dom.js";
import { esc, fmt, patchName, pct } from "./format.js";
import { AttentionMatrix } from "./matrix.js";
import { QKPanel } from "./qk.js";

/** [id, name, formula, shape] of each step (ids name the detail's norms). */
function stepList(b, dims, layerScale) {
  const D = dims.width, d = dims.head_dim, H = b.heads, hidden = dims.mlp_hidden;
  const gamma = (i) => layerScale ? `γ${i}·` : "";
  return [
    ["x_in", "Residual stream in", "x", `${b.nq}×${D}`],
    ["ln1", "LayerNorm 1", "LN₁(x)", `${b.nk}×${D}`],
    ["q", "Queries, keys, values", "Q,K,V = LN₁(x)·W", `3 × ${H}×${b.nk}×${d}`],
    ["attn", "Attention weights", `softmax(QKᵀ/√${d})`, `${H}×${b.nq}×${b.nk}`],
    ["context", "Mix the values", "A·V, heads side by side", `${b.nq}×${H}·${d}`],
    ["attn_out", "Output projection", "·W_O", `${D}×${D}`],
    ["x_mid", "Residual add", `x + ${gamma(1)}attn`, `${b.nq}×${D}`],
    ["ln2", "LayerNorm 2", "LN₂(x)", `${b.nq}×${D}`],
    ["mlp", "MLP", `${D}→${hidden}→${D}, GELU`, `${b.nq}×${D}`],
    ["x_out", "Residual add", `x + ${gamma(2)}MLP`, `${b.nq}×${D}`],
  ];
}

export class BlockDetail {
  constructor(parts, box, detail) {
    const { store, data, maps, painter } = parts;
    Object.assign(this, { store, data, maps, painter, box });
    const st = store.state, m = data.model, b = m.blocks[st.block], ov = m.ov;
    const kind = b.kind === "class" ? "class attention: only [CLS] asks" : "self-attention";
    box.innerHTML = `<h3>${esc(maps.blockLabel(st.block))} <span class="mono">${kind} · ` +
      `${b.nq} quer${b.nq === 1 ? "y" : "ies"} × ${b.nk} keys × ${ov.dims.width} channels</span></h3>`;
    this.cards = null;
    if (!detail) {
      box.appendChild(el("p", "vx-loading", "Fetching this block's full attention…"));
      return;
    }
    const grid = el("div", "vx-steps");
    grid.dataset.part = "steps";
    const [rows, cols] = m.grid;
    this.cards = stepList(b, ov.dims, detail.layer_scale).map(([id, name, formula, shape], i) => {
      const card = el("div", "vx-step");
      card.innerHTML = `<span class="vx-step-n">STEP ${i + 1}</span><span class="vx-step-name">${name}</span>` +
        `<span class="vx-step-formula">${esc(formula)}</span><span class="vx-step-shape">${shape}</span>`;
      const canvas = el("canvas");
      canvas.width = cols * 4;
      canvas.height = rows * 4;
      card.appendChild(canvas);
      const value = el("span", "vx-step-value");
      card.appendChild(value);
      grid.appendChild(card);
      return { id, canvas, value };
    });
    box.appendChild(grid);
    box.appendChild(el("div", "vx-note", "Small maps: the length ‖·‖ of every patch token after that step " +
      "(colours min–max per map; one flat colour when all are equal); step 4 shows the query's attention row. " +
      "The number under each card is for <b class='vx-step-token'></b>; point at or tap a patch to follow another."));
    // why the lengths jump at a LayerNorm, in this block's own numbers (xai_core/explainer.py)
    for (const id of ["ln1", "ln2"]) {
      const note = detail.norm_notes && detail.norm_notes[id];
      if (note) box.appendChild(el("div", "vx-note", esc(note)));
    }
    const attn = el("div", "vx-attn");
    this.matrix = new AttentionMatrix(parts, b);
    attn.appendChild(this.matrix.element);
    this.qk = new QKPanel(parts);
    attn.appendChild(this.qk.element);
    box.appendChild(attn);
  }

  dispose() {
    if (this.qk) this.qk.dispose();
  }

  draw() {
    const st = this.store.state, detail = this.data.details.get(st.block);
    if (!detail || !this.cards || !this.matrix.canvas.isConnected) return;
    const m = this.data.model, b = m.blocks[st.block], head = this.maps.headOf();
    const query = this.maps.queryToken(st.block);
    const qi = query && !(b.kind === "class" && query.qi > 0) ? query.qi : (b.prefix ? 0 : null);
    for (const card of this.cards) this.drawCard(card, detail, head, qi);
    const tokenLabel = this.box.querySelector(".vx-step-token");
    if (tokenLabel) {
      const names = m.ov.layout.prefix_names, [, cols] = m.grid, P = detail.prefix;
      tokenLabel.textContent = qi === null ? "point at or tap a patch" : qi < P ? names[qi] : patchName(qi - P, cols);
    }
    this.matrix.draw(detail, head, qi);
    this.qk.draw(detail, head, qi);
  }

  /** One step's map of the patch tokens (its [CLS]-only placeholder) and the query's number. */
  drawCard(card, detail, head, qi) {
    const st = this.store.state, maps = this.maps, painter = this.painter;
    const np = this.data.model.np, P = detail.prefix;
    const ctx = card.canvas.getContext("2d"), W = card.canvas.width, H = card.canvas.height;
    let values = null;
    if (card.id === "attn") {
      const row = qi === null ? maps.queryRow(st.block, head) : maps.attentionRow(detail, qi, head);
      values = row.patch;
      const shown = qi === null ? null : (qi < P ? row.prefix[qi] : row.patch[qi - P]);
      card.value.textContent = qi === null ? "mean patch row" : `to itself: ${pct(shown)}`;
    } else if (card.id === "q") {
      const shownHead = head >= 0 ? head : 0;
      const all = detail.qNorms.subarray(shownHead * detail.nq, (shownHead + 1) * detail.nq);
      values = detail.nq < np ? null : all.subarray(detail.nq - np);
      card.value.textContent = qi === null ? `‖q‖, head ${shownHead}` : `‖q‖ = ${fmt(all[qi])} (head ${shownHead})`;
    } else {
      const norms = card.id === "context" && head >= 0
        ? detail.contextHeads.subarray(head * detail.nq, (head + 1) * detail.nq) : detail.norms[card.id];
      const offset = norms.length - np;
      values = offset >= 0 ? norms.subarray(offset) : null;
      card.value.textContent = qi === null || qi >= norms.length ? "" :
        `‖·‖ = ${fmt(norms[qi])}${card.id === "context" && head >= 0 ? ` (head ${head})` : ""}`;
    }
    if (values && values.length === np) {
      painter.paintMap(ctx, values, W, H, { opaque: true, minmax: card.id !== "attn" });
      const p = st.hover !== null ? st.hover : st.pinned;
      if (p !== null) painter.outlinePatch(ctx, p, W, H, "#22d3ee");
    } else {
      ctx.fillStyle = "#ddd";
      ctx.fillRect(0, 0, W, H);
      ctx.fillStyle = "#555";
      ctx.font = `${Math.round(W / 9)}px sans-serif`;
      ctx.textAlign = "center";
      ctx.fillText("[CLS] only", W / 2, H / 2);
    }
  }
}
