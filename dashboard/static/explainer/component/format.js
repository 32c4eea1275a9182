/* Small helpers for text and numbers: escaping, number formats, extremes of a map. */

export const esc = (text) => String(text).replace(/[&<>"']/g, (c) =>
  ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));

/** Escaped text with **bold** spans and the glossary's marks, ⟦id⟧ or ⟦id|words⟧ (the
 * tour's step texts; dashboard/explainer/glossary.py), drawn as buttons that open the term's
 * popover; `terms`: id -> {term, words}. */
export const rich = (text, terms = {}) => esc(text).replace(/\*\*(.+?)\*\*/g, "<b>$1</b>")
  .replace(/⟦([a-z_]+)(?:\|([^⟧]*))?⟧/g, (_, id, shown) => {
    const words = shown !== undefined ? shown : terms[id] ? esc(terms[id].term) : id;
    return terms[id] ? `<button class="vx-term" data-term="${id}" title="What is this?">${words}</button>` : words;
  });

export const fmt = (x, digits = 3) => {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  const a = Math.abs(x);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return x.toExponential(2);
  return Number(x.toPrecision(digits)).toString();
};

export const pct = (x) => `${(100 * x).toFixed(x >= 0.1 ? 1 : 2)}%`;

export function maxOf(values) {
  let m = 0;
  for (let i = 0; i < values.length; i++) if (values[i] > m) m = values[i];
  return m;
}

export function minMax(values) {
  let lo = Infinity, hi = -Infinity;
  for (let i = 0; i < values.length; i++) {
    if (values[i] < lo) lo = values[i];
    if (values[i] > hi) hi = values[i];
  }
  return [lo, hi];
}

/** A cheap fingerprint of a map (tests compare overlays without reading pixels). */
export function checksum(values) {
  let s = 0;
  for (let i = 0; i < values.length; i++) s += values[i] * ((i % 97) + 1);
  return s.toPrecision(8);
}

/** "patch 17 (row 1, col 3)" on a grid of `cols` columns. */
export const patchName = (patch, cols) =>
  `patch ${patch} (row ${Math.floor(patch / cols)}, col ${patch % cols})`;

/** A share of attention in words, never "100%" for a share that is not all of it (as the
 * tour's texts write it: dashboard/explainer/tour.py `percent`). */
export const attentionShare = (x) => (x >= 0.9995 ? "over 99.9%" : `${(100 * x).toFixed(1)}%`);
