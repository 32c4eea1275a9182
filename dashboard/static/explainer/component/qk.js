/* The query · key panel of an opened block: q of the query token, k of one key, their
 * products, and the softmax recomputed from them, for one head. Its q and k are fetched
 * only while the panel is in view (8-bit rows: about as many bytes as the block's detail). */

import { paintStripe } from "./colour.js";
import { el } from "./dom.js";
import { esc, fmt, pct } from "./format.js";

export class QKPanel {
  constructor({ store, data, maps }) {
    Object.assign(this, { store, data, maps });
    const right = el("div", "vx-qk");
    right.dataset.part = "qk";
    this.element = right;
    // in view or not: the server is asked for q and k only while it is (sync.js)
    this.observer = new IntersectionObserver((entries) =>
      store.dispatch("qkVisible", entries[entries.length - 1].isIntersecting));
    this.observer.observe(right);
  }

  dispose() {
    this.observer.disconnect();
  }

  /** The key shown: the one under the pointer in the matrix, else the most attended. */
  keyToken(detail, captured) {
    const P = detail.prefix, hoverKey = this.store.state.hoverKey;
    const key = hoverKey !== null ? hoverKey + P : -1;
    if (key >= 0 && key < detail.nk) return key;
    let best = 0;
    for (let j = 1; j < detail.nk; j++) if (captured(j) > captured(best)) best = j;
    return best;
  }

  draw(detail, head, qi) {
    const box = this.element, m = this.data.model, h = head >= 0 ? head : 0, d = detail.head_dim;
    const names = m.ov.layout.prefix_names, [, cols] = m.grid, P = detail.prefix;
    const tokenName = (t) => t < P ? names[t] : `patch ${t - P} (r${Math.floor((t - P) / cols)}, c${(t - P) % cols})`;
    if (!detail.vectors) {  // asked for while this panel is in view
      this.store.dispatch("requestVectors");
      box.innerHTML = `<h3>Query · key, head ${h}</h3><p class="vx-loading">Fetching this ` +
        `block's queries and keys…</p>`;
      return;
    }
    const { q: queries, k: keys } = detail.vectors;
    const q = qi === null ? 0 : qi;
    const qv = queries.row(h * detail.nq + q);
    const logits = new Float32Array(detail.nk), kv = new Float32Array(d);
    for (let j = 0; j < detail.nk; j++) {
      keys.row(h * detail.nk + j, kv);
      let s = 0;
      for (let i = 0; i < d; i++) s += qv[i] * kv[i];
      logits[j] = s / Math.sqrt(d);
    }
    const row = this.maps.attentionRow(detail, q, h);
    const captured = (j) => j < P ? row.prefix[j] : row.patch[j - P];
    const key = this.keyToken(detail, captured);
    keys.row(h * detail.nk + key, kv);
    const products = qv.map((v, i) => v * kv[i]);
    let top = -Infinity, sum = 0;
    for (const v of logits) top = Math.max(top, v);
    for (const v of logits) sum += Math.exp(v - top);
    const recomputed = Math.exp(logits[key] - top) / sum;
    const dot = logits[key] * Math.sqrt(d);
    box.innerHTML = `<h3>Query · key, head ${h}</h3>` +
      (head < 0 ? `<div class="vx-note">The map shows the mean of the heads; this panel needs one ` +
        `head: pick one with the chips under the image.</div>` : "") +
      `<div class="vx-qk-row"><span>q of ${esc(tokenName(q))}</span><canvas data-v="q"></canvas></div>` +
      `<div class="vx-qk-row"><span>k of ${esc(tokenName(key))}</span><canvas data-v="k"></canvas></div>` +
      `<div class="vx-qk-row"><span>q × k, number by number</span><canvas data-v="p"></canvas></div>` +
      `<div class="vx-formula">q·k = sum of the ${d} products = <span class="hl">${fmt(dot, 4)}</span><br>` +
      `÷ √${d} = ${fmt(Math.sqrt(d), 3)} → score <b>${fmt(logits[key], 4)}</b><br>` +
      `softmax over all ${detail.nk} keys → <span class="hl">${fmt(recomputed, 3)}</span> (${pct(recomputed)} of the row)` +
      `<br><span class="muted">captured attention: ${fmt(captured(key), 3)}</span></div>` +
      `<div class="vx-note">${detail.talking_heads ? "This model mixes the heads' scores before and after the softmax (talking heads), so one head's softmax is not its final attention. " : ""}` +
      "Recomputed here from the captured q and k as sent to this page (8 bits per number, " +
      "each within 1/254 of its row's largest), so it can differ from the captured attention " +
      "printed above, most in rows where a few keys take nearly all. Point at the matrix to " +
      `pick the key; the image or the sequence to pick the query. Stripes: red positive, blue negative.</div>`;
    paintStripe(box.querySelector('canvas[data-v="q"]'), qv);
    paintStripe(box.querySelector('canvas[data-v="k"]'), kv);
    paintStripe(box.querySelector('canvas[data-v="p"]'), products);
  }
}
