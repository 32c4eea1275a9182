/* Two facts the component quotes, computed in the browser as the server does: each head's
 * mean attention distance (xai_core/methods/distance.py, prefix rows and columns dropped, rows
 * not renormalised) and the high-norm patch tokens (xai_core/analysis/token_marks.py). */

import { headMatrix } from "./attention.js";

const r = (x, digits) => Math.round(x * 10 ** digits) / 10 ** digits;

/** explainer._distance_facts: {blocks, mad (blocks, heads) pixels, reference, convention}. */
export function distances(md, attention, [ph, pw], convention) {
  const [rows, cols] = md.grid, np = rows * cols, n = md.tokens, p = md.prefix;
  const dist = new Float64Array(np * np);
  for (let a = 0; a < np; a++) {
    for (let b = 0; b < np; b++) {
      const dy = (Math.floor(a / cols) - Math.floor(b / cols)) * ph, dx = (a % cols - b % cols) * pw;
      dist[a * np + b] = Math.sqrt(dy * dy + dx * dx);
    }
  }
  const mad = [];
  for (let blk = 0; blk < md.blocks; blk++) {
    const row = [];
    for (let h = 0; h < md.heads; h++) {
      const m = headMatrix(attention, n, md.heads, blk, h);
      let total = 0;
      for (let q = 0; q < np; q++) {
        for (let k = 0; k < np; k++) total += m[(q + p) * n + k + p] * dist[q * np + k];
      }
      row.push(r(total / np, 3));
    }
    mad.push(row);
  }
  const reference = dist.reduce((a, b) => a + b, 0) / dist.length;
  return { blocks: [...Array(md.blocks).keys()], mad, reference: r(reference, 3), convention };
}

const RATIO = 3, GAP = 2;

function median(values) {
  const s = Float64Array.from(values).sort(), n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/** token_marks.high_mode: the separate high mode's patches and its gap. */
function highMode(norms) {
  const order = [...norms.keys()].sort((a, b) => norms[b] - norms[a] || a - b), floor = RATIO * median(norms);
  if (floor <= 0) return { found: [], gap: 0 };
  let count = 0, gap = 0;
  for (let k = 1; k <= order.length; k++) {
    const value = norms[order[k - 1]];
    if (value < floor) break;
    const below = k < order.length ? norms[order[k]] : 0;
    if (value >= GAP * below) { count = k; gap = below === 0 ? Infinity : value / below; }
  }
  return { found: order.slice(0, count), gap };
}

/** explainer._high_norm from each block's output lengths ((tokens,) per block). */
export function highNorm(md, outputNorms, rule) {
  const best = new Map();
  let largest = null;
  for (let b = Math.floor(md.blocks / 2); b < md.blocks; b++) {
    const norms = Float64Array.from(outputNorms(b).subarray(md.prefix)), mid = median(norms);
    const { found, gap } = highMode(norms);
    for (const patch of found) {
      const ratio = norms[patch] / mid;
      if (!best.has(patch) || ratio > best.get(patch).ratio) best.set(patch, { patch, block: b, ratio, gap });
    }
    let top = 0;
    for (let i = 1; i < norms.length; i++) if (norms[i] > norms[top]) top = i;
    const ratio = norms[top] / mid;
    if (!largest || ratio > largest.ratio) {
      const second = [...norms].sort((x, y) => y - x)[1] || 0;
      largest = { patch: top, block: b, ratio, gap: second ? norms[top] / second : Infinity };
    }
  }
  const shown = (t) => ({ patch: t.patch, block: t.block, ratio: r(t.ratio, 2), gap: r(t.gap, 2) });
  return { rule, flagged: [...best.values()].sort((a, b) => b.ratio - a.ratio).map(shown), largest: shown(largest) };
}
