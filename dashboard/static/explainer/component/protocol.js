/* A message's decoding. Python (dashboard/explainer/component.py) sends one binary message
 * per rerun (its format: wire.js, xai_core/lessons/explainer.py encode_message): a JSON
 * header, then the arrays' raw bytes. It holds the overview and the tour (only when this
 * browser lacks them), one block's detail (only when it does not keep it), that block's queries and keys
 * (only while their panel is in view), the tour step to open or to offer resuming, and the
 * presentation flag. */

import { METRICS } from "./metrics.js";
import { unframe } from "./wire.js";

let f16Table = null;
function halfToFloat() {
  if (f16Table) return f16Table;
  f16Table = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) {
    const sign = h & 0x8000 ? -1 : 1, exp = (h >> 10) & 31, frac = h & 1023;
    f16Table[h] = exp === 0 ? sign * frac * 2 ** -24
      : exp === 31 ? (frac ? NaN : sign * Infinity) : sign * (1 + frac / 1024) * 2 ** (exp - 15);
  }
  return f16Table;
}

/** A message (wire.js: a frame whose header holds the wire format's fields). Every array
 * {dtype, shape, offset} in the header becomes {values, shape} (typed arrays). */
export function readMessage(data) {
  const bytes = data instanceof Uint8Array ? data.slice() : new Uint8Array(data);  // own, aligned buffer
  const { header, bodyOffset: body } = unframe(bytes);
  const size = (shape) => shape.reduce((a, b) => a * b, 1);
  const walk = (value) => {
    if (Array.isArray(value)) return value.map(walk);
    if (!value || typeof value !== "object") return value;
    if ("offset" in value && "dtype" in value && "shape" in value) {
      const at = body + value.offset, n = size(value.shape);
      let values;
      if (value.dtype === "u8") values = new Uint8Array(bytes.buffer, at, n);
      else if (value.dtype === "i8") values = new Int8Array(bytes.buffer, at, n);
      else if (value.dtype === "f32") values = new Float32Array(bytes.buffer, at, n);
      else if (value.dtype === "f16") {
        const half = new Uint16Array(bytes.buffer, at, n), table = halfToFloat();
        values = new Float32Array(n);
        for (let i = 0; i < n; i++) values[i] = table[half[i]];
      } else throw new Error(`ViT Explainer: unknown array type ${value.dtype}`);
      return { values, shape: value.shape };
    }
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, walk(v)]));
  };
  const message = walk(header);
  METRICS.messages.push(bytes.length);
  return message;
}

/** Rows of 8-bit codes with one scale per row: value = code * scale / levels (255 for
 * the unsigned maps, 127 for signed codes). */
export class QRows {
  constructor(item, levels = 255) {
    this.codes = item.codes.values;
    this.width = item.codes.shape[item.codes.shape.length - 1];
    this.scale = item.scale.values;
    this.levels = levels;
  }

  row(r, out) {
    const w = this.width, k = this.scale[r] / this.levels, o = out || new Float32Array(w);
    for (let j = 0, base = r * w; j < w; j++) o[j] = this.codes[base + j] * k;
    return o;
  }
}

/** Queries or keys: signed 8-bit codes (-127..127), one scale per (head, token) row, its
 * largest |value| (xai_core/explainer.quantise_signed). Row r = head * tokens + token. */
export class Vectors extends QRows {
  constructor(item) {
    super(item, 127);
  }
}

/** The overview as the parts read it (the pictures are loaded by the Explainer). */
export function decodeOverview(ov) {
  const m = { ov, grid: ov.layout.grid, np: ov.layout.patches, heads: ov.dims.heads,
    lut: ov.colormap.values, blocks: ov.blocks };
  m.queryRows = ov.query_rows.map((r) => ({ what: r.what, rows: new QRows(r),
    prefix: r.prefix.values, nPrefix: r.prefix.shape[1] }));
  const roll = ov.rollout;
  m.rollout = { blocks: roll.blocks, rows: new QRows(roll), what: roll.what,
    prefix: roll.prefix.values, nPrefix: roll.prefix.shape[1], convention: roll.convention };
  // DAAM may come after the overview (the model in the browser computes it last): pending
  m.daam = ov.daam.unavailable || ov.daam.pending ? null : decodeDaam(ov.daam);
  m.daamPending = ov.daam.pending || null;
  m.normOut = ov.blocks.map((b) => b.norm_out.values);
  m.embedNorms = ov.embedding_norms.values;
  m.feature = ov.feature ? ov.feature.values : null;
  return m;
}

/** The overview's DAAM frames as the maps read them. */
export function decodeDaam(daam) {
  return { blocks: daam.blocks, labels: daam.labels, rows: new QRows(daam), target: daam.target,
    convention: daam.convention };
}

/** One opened block's detail; its queries and keys come later (decodeVectors). */
export function decodeDetail(d) {
  return { ...d, attn: new QRows(d.attention), attnPrefix: d.attention.prefix.values,
    qNorms: d.q_norms.values, vectors: null,
    norms: Object.fromEntries(Object.entries(d.norms).map(([k, v]) => [k, v.values])),
    contextHeads: d.context_heads.values };
}

export function decodeVectors(vectors) {
  return { q: new Vectors(vectors.q), k: new Vectors(vectors.k) };
}
