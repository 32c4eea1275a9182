/* The picture and its overlay: the image the model sees, coloured by the current map, with
 * the patch grid, the query patch (cyan) and the key under the pointer (yellow); its
 * caption and colour scale. Hover points at a patch; a click pins it. */

import { el, markTargets } from "./dom.js";
import { checksum, esc, fmt, maxOf, pct } from "./format.js";
import { REDRAW } from "./store.js";

const PLAIN_STAGES = ["image", "patches", "tokens"];  // they show the picture without a map

export class Picture {
  constructor({ store, data, maps, painter }) {
    Object.assign(this, { store, data, maps, painter });
    const m = data.model, card = el("div", "vx-card vx-view");
    const [H, W] = m.ov.layout.input;
    const canvas = el("canvas", "vx-image");
    canvas.width = 800;
    canvas.height = Math.round(800 * H / W);
    canvas.style.aspectRatio = `${W} / ${H}`;
    canvas.style.height = "auto";
    canvas.dataset.part = "image";
    canvas.setAttribute("role", "img");  // labelled with its caption (drawCaption)
    canvas.addEventListener("mousemove", (event) => this.hover(event));
    canvas.addEventListener("mouseleave", () => store.dispatch("hover", null, null));
    canvas.addEventListener("click", (event) => {
      const p = this.patchAt(event);
      store.set({ pinned: store.state.pinned === p ? null : p }, REDRAW.live);
    });
    this.canvas = canvas;
    card.appendChild(canvas);
    this.caption = el("div", "vx-caption");
    this.caption.dataset.part = "caption";
    card.appendChild(this.caption);
    const legend = el("div", "vx-legend");
    legend.innerHTML = `<span class="vx-legend-min"></span><canvas width="256" height="1"></canvas><span class="vx-legend-max"></span>`;
    this.legendMax = legend.querySelector(".vx-legend-max");
    this.legendMin = legend.querySelector(".vx-legend-min");
    this.legend = legend;
    painter.paintLegend(legend.querySelector("canvas"));
    card.appendChild(legend);
    this.element = card;
  }

  patchAt(event) {
    const rect = this.canvas.getBoundingClientRect(), [rows, cols] = this.data.model.grid;
    const c = Math.min(cols - 1, Math.max(0, Math.floor((event.clientX - rect.left) / rect.width * cols)));
    const r = Math.min(rows - 1, Math.max(0, Math.floor((event.clientY - rect.top) / rect.height * rows)));
    return r * cols + c;
  }

  /** Where a patch is on screen (viewport coordinates). */
  patchRect(patch) {
    const rect = this.canvas.getBoundingClientRect(), [rows, cols] = this.data.model.grid;
    const row = Math.floor(patch / cols), col = patch % cols;
    const top = rect.top + row * rect.height / rows, left = rect.left + col * rect.width / cols;
    return { top, bottom: top + rect.height / rows, left, right: left + rect.width / cols };
  }

  hover(event) {
    const p = this.patchAt(event), st = this.store.state;
    if (p === st.hover && st.hoverPrefix === null) return;
    this.store.dispatch("hover", p, null, event);
  }

  /** The picture, its map (the store's `shown`: the sequence and "Save PNG" follow it) and
   * marks. */
  draw() {
    const store = this.store, canvas = this.canvas, ctx = canvas.getContext("2d"), st = store.state;
    const m = this.data.model, W = canvas.width, H = canvas.height, painter = this.painter;
    ctx.imageSmoothingEnabled = true;
    ctx.fillStyle = "#222";
    ctx.fillRect(0, 0, W, H);
    if (m.image.complete && m.image.naturalWidth) ctx.drawImage(m.image, 0, 0, W, H);
    const stage = st.stage;
    const showMap = !PLAIN_STAGES.includes(stage) || st.playing || st.previewBlock !== null;
    const map = showMap ? this.maps.currentMap() : null;
    store.set({ shown: map }, REDRAW.none);
    if (map && map.patch) painter.paintMap(ctx, map.patch, W, H, map.normalised ? { max: 1 } : {});
    if (["patches", "tokens"].includes(stage) || st.hover !== null || st.pinned !== null) painter.drawGridLines(ctx, W, H);
    const query = st.hover !== null ? st.hover : st.pinned;
    if (query !== null) painter.outlinePatch(ctx, query, W, H, "#22d3ee");
    if (st.hoverKey !== null && st.hoverKey >= 0) painter.outlinePatch(ctx, st.hoverKey, W, H, "#fde047", true);
    // a patch the tour step names (the sink's key): outlined, dashed
    for (const patch of st.marks) if (patch !== query) painter.outlinePatch(ctx, patch, W, H, "#f59e0b", true);
    this.drawCaption(map);
    markTargets([canvas, this.caption], st.targets);
    store.dispatch("mark", "hover", st.hover === null ? "" : String(st.hover));
    store.dispatch("mark", "mapSum", map && map.patch ? checksum(map.patch) : "");
  }

  /** How far the chosen head of the open block looks on average (page 3's mean attention
   * distance, measured for the first and last self-attention blocks), as the tour quotes it;
   * not for a sink head, whose map is its sink key whatever the query. */
  distanceText() {
    const st = this.store.state, ov = this.data.model.ov, measured = ov.distance;
    const at = measured.blocks.indexOf(st.block);
    const sink = ov.sinks.heads.some((s) => s.block === st.block && s.head === st.head);
    if (st.overlay !== "attention" || st.head < 0 || at < 0 || sink || st.previewBlock !== null) return "";
    return `Head ${st.head} of block ${st.block} looks ${Math.round(measured.mad[at][st.head])} pixels from its ` +
      `query on average (mean attention distance; evenly spread: ${Math.round(measured.reference)} pixels).`;
  }

  drawCaption(map) {
    const st = this.store.state, m = this.data.model;
    if (!map) {
      const [rows, cols] = m.grid, [ph, pw] = m.ov.layout.patch;
      const p = st.hover !== null ? st.hover : st.pinned;
      this.caption.innerHTML = st.stage === "patches"
        ? `The model cuts the image into <b>${rows}×${cols} = ${m.np}</b> patches of ${ph}×${pw} pixels. Point at or tap one.` +
          (p !== null ? `<br><b>Patch ${p}</b>: row ${Math.floor(p / cols)}, column ${p % cols} (counting from 0).` : "")
        : st.stage === "tokens"
          ? `Each patch becomes one token. Point at or tap the picture or the token strip above: the two are linked.`
          : "What the model sees: the picture resized and cropped. Open a block to colour it by attention.";
      this.canvas.setAttribute("aria-label", this.caption.textContent);
      this.legend.classList.add("hidden");
      return;
    }
    // attention and rollout rows are shares that add up to 1; DAAM has no such unit
    const share = st.overlay !== "daam" || st.hover !== null || st.pinned !== null || st.previewBlock !== null;
    let text = `<b>${esc(map.title)}</b>`;
    if (map.patch && map.prefix && map.prefix.length && !map.normalised) {
      const names = m.ov.layout.prefix_names;
      const mass = [...map.prefix].map((v, i) => `${esc(names[i] || "prefix")} ${pct(v)}`).join(", ");
      let patchMass = 0;
      for (const v of map.patch) patchMass += v;
      text += `<br><span class="muted">Of this row: ${mass}; the ${m.np} patches together ${pct(patchMass)}.</span>`;
    }
    const distance = this.distanceText();
    if (distance) text += `<br><span class="muted">${distance}</span>`;
    if (map.loading) text = `<span class="vx-loading">${esc(map.title)}</span>`;
    this.caption.innerHTML = text;
    this.canvas.setAttribute("aria-label", this.caption.textContent);
    this.legend.classList.toggle("hidden", !map.patch);
    const top = map.patch ? maxOf(map.patch) : 0;
    this.legendMin.textContent = "0";
    this.legendMax.textContent = !map.patch ? "" : map.normalised ? "max (between two blocks)"
      : share ? `${pct(top)} of the row: the brightest patch` : `${fmt(top)}: the largest value (DAAM has no unit)`;
  }
}
