/* Colour scales and the patch-grid painter every picture of the Explainer uses. */

import { maxOf, minMax } from "./format.js";

/** Blue-white-red for signed vectors (q, k, products, features). */
export function diverging(v) {
  const t = Math.max(-1, Math.min(1, v));
  if (t >= 0) return [255, Math.round(255 - 175 * t), Math.round(255 - 195 * t)];
  return [Math.round(255 + 205 * t), Math.round(255 + 120 * t), 255];
}

/** A signed vector as a one-pixel-high stripe on `canvas`, scaled to its largest |value|;
 * returns that value. */
export function paintStripe(canvas, values) {
  canvas.width = values.length;
  canvas.height = 1;
  const ctx = canvas.getContext("2d"), img = ctx.createImageData(values.length, 1);
  let peak = 0;
  for (const v of values) peak = Math.max(peak, Math.abs(v));
  values.forEach((v, i) => img.data.set([...diverging(v / (peak || 1)), 255], 4 * i));
  ctx.putImageData(img, 0, 0);
  return peak;
}

/** Paints maps over one model's patch grid with its colour map (`lut`: 256 RGB triples). */
export class Painter {
  constructor(lut, grid) {
    this.lut = lut;
    this.grid = grid;
    this.gridCanvas = document.createElement("canvas");  // one pixel per patch
    [this.gridCanvas.height, this.gridCanvas.width] = grid;
  }

  /** The CSS colour of `v` in 0..1 (clamped). */
  colour(v) {
    const lut = this.lut, k = Math.round(Math.max(0, Math.min(1, v)) * 255) * 3;
    return `rgb(${lut[k]},${lut[k + 1]},${lut[k + 2]})`;
  }

  paintLegend(canvas) {
    const ctx = canvas.getContext("2d"), img = ctx.createImageData(256, 1), lut = this.lut;
    for (let i = 0; i < 256; i++) {
      img.data.set([lut[3 * i], lut[3 * i + 1], lut[3 * i + 2], 255], 4 * i);
    }
    ctx.putImageData(img, 0, 0);
  }

  /** A patch-grid map painted over `ctx` (nearest neighbour: one cell per token). */
  paintMap(ctx, values, width, height, opts = {}) {
    const [rows, cols] = this.grid, lut = this.lut;
    const g = this.gridCanvas.getContext("2d"), img = g.createImageData(cols, rows);
    let lo = 0, hi = opts.max !== undefined ? opts.max : maxOf(values);
    if (opts.minmax) [lo, hi] = minMax(values);
    const flat = opts.minmax && hi - lo <= 1e-6 * Math.abs(hi);  // every token equal
    const span = hi > lo ? hi - lo : 1;
    for (let i = 0; i < rows * cols; i++) {
      const v = flat ? 0.5 : Math.max(0, Math.min(1, (values[i] - lo) / span)), k = Math.round(v * 255) * 3;
      img.data[4 * i] = lut[k];
      img.data[4 * i + 1] = lut[k + 1];
      img.data[4 * i + 2] = lut[k + 2];
      img.data[4 * i + 3] = opts.opaque ? 255 : Math.round(255 * (0.32 + 0.58 * v));
    }
    g.putImageData(img, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(this.gridCanvas, 0, 0, width, height);
  }

  outlinePatch(ctx, patch, width, height, colour, dashed) {
    const [rows, cols] = this.grid, cw = width / cols, ch = height / rows;
    const r = Math.floor(patch / cols), c = patch % cols;
    ctx.save();
    ctx.lineWidth = Math.max(1.5, cw / 8);
    if (dashed) ctx.setLineDash([cw / 4, cw / 6]);
    ctx.strokeStyle = "rgba(0,0,0,0.85)";
    ctx.strokeRect(c * cw - 1, r * ch - 1, cw + 2, ch + 2);
    ctx.strokeStyle = colour;
    ctx.strokeRect(c * cw + 0.5, r * ch + 0.5, cw - 1, ch - 1);
    ctx.restore();
  }

  drawGridLines(ctx, width, height) {
    const [rows, cols] = this.grid;
    ctx.save();
    ctx.strokeStyle = "rgba(255,255,255,0.35)";
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (let c = 1; c < cols; c++) { const x = Math.round(c * width / cols) + 0.5; ctx.moveTo(x, 0); ctx.lineTo(x, height); }
    for (let r = 1; r < rows; r++) { const y = Math.round(r * height / rows) + 0.5; ctx.moveTo(0, y); ctx.lineTo(width, y); }
    ctx.stroke();
    ctx.restore();
  }
}
