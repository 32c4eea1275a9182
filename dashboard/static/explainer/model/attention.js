/* What the Explainer reads from every block's attention, computed in the browser as the
 * server computes it: the sink analysis and rollout's start=auto (xai_core/analysis/sinks.py,
 * methods/rollout.py auto_start), attention rollout's [CLS] row after each block (the oracle
 * convention: heads averaged, + identity, rows renormalised) and a token's attention row. */

export const SINK_THRESHOLD = 0.5;

/** A view of one block and head's (N, N) attention inside the stacked output. */
export function headMatrix(attention, tokens, heads, block, head) {
  const n2 = tokens * tokens;
  return attention.subarray((block * heads + head) * n2, (block * heads + head + 1) * n2);
}

export function keyName(md, key) {
  if (key < md.prefix) return md.prefix_names[key];
  const patch = key - md.prefix, cols = md.grid[1];
  return `patch ${patch} (row ${Math.floor(patch / cols)}, col ${patch % cols})`;
}

/** Per block and head: the mean attention each key receives, its largest value (the sink
 * score) and that key. */
export function analyseSinks(md, attention) {
  const { tokens: n, heads, blocks } = md, rows = [];
  for (let b = 0; b < blocks; b++) {
    const row = [];
    for (let h = 0; h < heads; h++) {
      const a = headMatrix(attention, n, heads, b, h), received = new Float64Array(n);
      for (let q = 0; q < n; q++) for (let k = 0; k < n; k++) received[k] += a[q * n + k];
      let key = 0;
      for (let k = 0; k < n; k++) { received[k] /= n; if (received[k] > received[key]) key = k; }
      row.push({ block: b, head: h, score: received[key], key, key_name: keyName(md, key), on_patch: key >= md.prefix });
    }
    rows.push(row);
  }
  return rows;
}

const patchSinks = (row) => row.filter((s) => s.score >= SINK_THRESHOLD && s.on_patch);

/** explainer._sink_facts and the rollout start it implies. */
export function sinkFacts(md, rows, rule) {
  const round4 = (x) => Math.round(x * 1e4) / 1e4;
  const sink = (s) => ({ block: s.block, head: s.head, score: round4(s.score), key: s.key_name, on_patch: s.on_patch,
    patch: s.on_patch ? s.key - md.prefix : null });
  const all = rows.flat();
  let strongest = all[0];
  for (const s of all) if (s.score > strongest.score) strongest = s;
  const dominated = rows.map((row, p) => (patchSinks(row).length ? p : -1)).filter((p) => p >= 0);
  const half = Math.floor(rows.length / 2), early = dominated.filter((p) => p < half);
  const start = early.length ? early[early.length - 1] + 1 : 0;
  const leftOut = [];
  for (let p = 0; p < start; p++) {
    leftOut.push({ block: p, heads: patchSinks(rows[p]).map((s) => ({ head: s.head, score: round4(s.score), key: s.key_name })) });
  }
  const heads = all.filter((s) => s.score >= SINK_THRESHOLD).sort((a, b) => b.score - a.score).map(sink);
  return { facts: { strongest: sink(strongest), heads, dominated, left_out: leftOut, rule }, start };
}

/** Block b's rollout factor: mean over heads + I, each row renormalised (N, N) float64. */
function factor(md, attention, b) {
  const n = md.tokens, out = new Float64Array(n * n);
  for (let h = 0; h < md.heads; h++) {
    const a = headMatrix(attention, n, md.heads, b, h);
    for (let i = 0; i < n * n; i++) out[i] += a[i];
  }
  for (let q = 0; q < n; q++) {
    let sum = 0;
    for (let k = 0; k < n; k++) { out[q * n + k] = out[q * n + k] / md.heads + (q === k ? 1 : 0); sum += out[q * n + k]; }
    for (let k = 0; k < n; k++) out[q * n + k] /= sum;
  }
  return out;
}

/** Row 0 of R_l = Â_l ... Â_start for every l from `start` on: e0 times the factors from the
 * left (a vector times a matrix per factor, not the full products). */
export function rolloutRows(md, attention, start) {
  const n = md.tokens, factors = [], rows = [];
  for (let b = start; b < md.blocks; b++) factors.push(factor(md, attention, b));
  for (let l = 0; l < factors.length; l++) {
    let v = Float64Array.from(factors[l].subarray(0, n));  // e0 Â_l
    for (let m = l - 1; m >= 0; m--) {
      const next = new Float64Array(n), f = factors[m];
      for (let i = 0; i < n; i++) {
        const vi = v[i];
        if (!vi) continue;
        for (let j = 0; j < n; j++) next[j] += vi * f[i * n + j];
      }
      v = next;
    }
    rows.push(v);
  }
  return rows;
}

/** Mean over the rows of one head's matrix (a block without [CLS]) or its row 0. */
export function queryRow(md, attention, b, h) {
  const n = md.tokens, a = headMatrix(attention, n, md.heads, b, h);
  if (md.prefix) return Float64Array.from(a.subarray(0, n));
  const out = new Float64Array(n);
  for (let q = 0; q < n; q++) for (let k = 0; k < n; k++) out[k] += a[q * n + k] / n;
  return out;
}
