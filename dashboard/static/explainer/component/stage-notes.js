/* The detail panel for the first stages: the image (the learner's picture and the part the
 * model keeps), the patches (the one under the pointer, pixel by pixel) and the tokens (the
 * length of every patch token entering the first block). */

import { el } from "./dom.js";
import { esc, fmt, minMax, pct } from "./format.js";

export class ImageNotes {
  constructor({ data }, box) {
    this.data = data;
    const ov = data.model.ov, [H, W] = ov.layout.input, pre = ov.preprocess, pic = ov.picture;
    const [w0, h0] = pic.size, [sw, sh] = pic.source;
    box.innerHTML = `<h3>Image <span class="mono">${H}×${W}×3</span></h3>`;
    const two = el("div", "vx-twocol");
    this.canvas = el("canvas", "vx-picture");
    two.appendChild(this.canvas);
    const shrunk = sw !== w0 || sh !== h0 ? `; your file was ${sw}×${sh}, shrunk on upload` : "";
    const how = pic.squashed
      ? `squeezed to <b>${H}×${W}</b> pixels, whole: its proportions change, nothing is cut off.`
      : pic.kept < 0.995
        ? `resized (${esc(pre.interpolation)}) and its centre cut out: the model sees <b>${H}×${W}</b> pixels ` +
          `covering the box, <b>${pct(pic.kept)}</b> of the picture. The shaded part never reaches the model.`
        : `resized to <b>${H}×${W}</b> pixels (${esc(pre.interpolation)}).`;
    const scale = pic.scale ? `<p>It is ${esc(pic.scale)}.</p>` : "";
    two.appendChild(el("div", "", `<p>The picture (${w0}×${h0} pixels${shrunk}) is ${how}</p>${scale}` +
      `<p>These ${(H * W * 3).toLocaleString()} numbers (red, green, blue for every pixel) are all the model ever sees. ` +
      `Each colour channel is then standardised: (x − mean) / std with mean = ` +
      `(${pre.mean.map((v) => fmt(v)).join(", ")}) and std = (${pre.std.map((v) => fmt(v)).join(", ")}), ` +
      `the statistics the model was trained with.</p>`));
    box.appendChild(two);
  }

  draw() {
    this.drawPicture();
  }

  /** The learner's whole picture with the part the model keeps (ov.picture.crop), once. */
  drawPicture() {
    const canvas = this.canvas, m = this.data.model, img = m.picture;
    if (!canvas.isConnected || !img.complete || !img.naturalWidth || canvas.dataset.drawn) return;
    canvas.dataset.drawn = "1";
    const pic = m.ov.picture, [w0, h0] = pic.size, scale = devicePixelRatio || 1;
    const side = canvas.getBoundingClientRect().width || 220;
    canvas.width = Math.round(side * scale);
    canvas.height = Math.round(side * scale * h0 / w0);
    canvas.style.height = `${side * h0 / w0}px`;
    const ctx = canvas.getContext("2d"), k = canvas.width / w0, [l, t, r, b] = pic.crop.map((v) => v * k);
    ctx.drawImage(img, 0, 0, canvas.width, canvas.height);
    ctx.fillStyle = "rgba(20, 20, 20, 0.6)";
    ctx.fillRect(0, 0, canvas.width, t);
    ctx.fillRect(0, b, canvas.width, canvas.height - b);
    ctx.fillRect(0, t, l, b - t);
    ctx.fillRect(r, t, canvas.width - r, b - t);
    ctx.lineWidth = 2 * scale;
    ctx.strokeStyle = "#22d3ee";
    ctx.strokeRect(l + scale, t + scale, r - l - 2 * scale, b - t - 2 * scale);
  }
}

export class PatchNotes {
  constructor({ store, data }, box) {
    Object.assign(this, { store, data, box });
    const ov = data.model.ov, [rows, cols] = ov.layout.grid, [ph, pw] = ov.layout.patch;
    box.innerHTML = `<h3>Patches <span class="mono">${rows}×${cols} patches of ${ph}×${pw}×3</span></h3>`;
    const two = el("div", "vx-twocol");
    const tile = el("canvas", "vx-tile");
    tile.width = pw;
    tile.height = ph;
    this.tile = tile;
    two.appendChild(tile);
    two.appendChild(el("div", "", `<p>The image is cut into a grid of <b>${rows}×${cols} = ${rows * cols}</b>` +
      ` non-overlapping patches of ${ph}×${pw} pixels. Each patch is flattened into ` +
      `<b>${ph}·${pw}·3 = ${ph * pw * 3}</b> numbers.</p><p class="vx-patch-info"></p>` +
      `<p class="muted">Left: the patch under your pointer, pixel by pixel (the image's own pixels, enlarged).</p>`));
    box.appendChild(two);
  }

  /** The patch pointed at (else the pinned one, else the middle one), enlarged. */
  draw() {
    if (!this.tile.isConnected) return;
    const m = this.data.model, [rows, cols] = m.grid, st = this.store.state;
    const p = st.hover !== null ? st.hover : st.pinned !== null ? st.pinned : (rows >> 1) * cols + (cols >> 1);
    const r = Math.floor(p / cols), c = p % cols;
    const ctx = this.tile.getContext("2d"), img = m.image;
    if (img.complete && img.naturalWidth) {
      const sw = img.naturalWidth / cols, sh = img.naturalHeight / rows;
      ctx.imageSmoothingEnabled = false;
      ctx.drawImage(img, c * sw, r * sh, sw, sh, 0, 0, this.tile.width, this.tile.height);
    }
    const prefix = m.blocks[0].prefix;
    this.box.querySelector(".vx-patch-info").innerHTML = `Patch <b>${p}</b> = row ${r}, column ${c}: ` +
      `it becomes token number <b>${prefix + p}</b> in the sequence (after ${prefix} prefix token${prefix === 1 ? "" : "s"}).`;
  }
}

export class TokenNotes {
  constructor({ store, data, painter }, box) {
    Object.assign(this, { store, data, painter, box });
    const m = data.model, ov = m.ov, [rows, cols] = ov.layout.grid, [ph, pw] = ov.layout.patch;
    const names = ov.layout.prefix_names, D = ov.dims.width, late = ov.layout.cls_joins_late;
    const seqLen = late ? m.np : ov.layout.tokens;
    box.innerHTML = `<h3>Tokens <span class="mono">${seqLen}×${D}</span></h3>`;
    const two = el("div", "vx-twocol");
    const canvas = el("canvas", "vx-tile");
    canvas.width = cols * 8;
    canvas.height = rows * 8;
    this.canvas = canvas;
    two.appendChild(canvas);
    const prefixText = late
      ? `This model adds its [CLS] token only at the class-attention blocks at the end; the first ${ov.dims.self_blocks} blocks see patches only.`
      : names.length ? `In front go <b>${names.length}</b> learned prefix token${names.length > 1 ? "s" : ""} (${names.map(esc).join(", ")}) that carry no pixels: [CLS] collects a summary of the image as the blocks run.`
        : "This model has no prefix token.";
    two.appendChild(el("div", "", `<p>A learned matrix <span class="mono">E</span> (${ph * pw * 3}×${D}) turns every patch's ` +
      `${ph * pw * 3} numbers into a token of <b>${D}</b> numbers. ${prefixText}</p>` +
      `<p>A learned position vector is added to every token (table ${ov.dims.pos_table ? ov.dims.pos_table.join("×") : "none"}), ` +
      `so the model can tell where each patch came from; attention itself ignores order.</p>` +
      `<p class="vx-token-info mono"></p><p class="muted">Left: the length ‖x‖ of each patch token as it enters the first block.</p>`));
    box.appendChild(two);
  }

  draw() {
    if (!this.canvas.isConnected) return;
    const painter = this.painter, m = this.data.model, P = m.embedNorms.length - m.np, values = m.embedNorms.subarray(P);
    const canvas = this.canvas, ctx = canvas.getContext("2d");
    painter.paintMap(ctx, values, canvas.width, canvas.height, { opaque: true, minmax: true });
    const st = this.store.state, p = st.hover !== null ? st.hover : st.pinned;
    if (p !== null) painter.outlinePatch(ctx, p, canvas.width, canvas.height, "#22d3ee");
    const [lo, hi] = minMax(values);
    this.box.querySelector(".vx-token-info").textContent = (p !== null
      ? `patch ${p}: ‖x‖ = ${fmt(values[p])}; ` : "") + `patch tokens range ${fmt(lo)}–${fmt(hi)}` +
      (P ? `; ${m.ov.layout.prefix_names[0]} ${fmt(m.embedNorms[0])}` : "");
  }
}
