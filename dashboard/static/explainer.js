/* ViT Explainer: one forward pass of a Vision Transformer, drawn in the browser.
 *
 * Loaded by Streamlit's components v2 as an ES module. Python sends `data`
 * (dashboard/explainer_component.py) as one binary message (xai_core/explainer.py,
 * encode_message): a JSON header, then the arrays' raw bytes. It holds the overview and
 * the tour (only when this browser lacks them), one block's detail (only when it does not
 * keep it), the tour step to open or to offer resuming, and the presentation flag.
 * Everything hover- and play-related is drawn here on plain canvases, with no request to
 * the server: only opening another block's detail, moving through the tour, the query · key
 * panel coming into view (that block's q and k, sent only then: they weigh as much as the
 * rest of the detail) and "go deeper" call setStateValue / setTriggerValue (one rerun of
 * the page's fragment), and the `view` state they send names what this browser already
 * holds. No library, no network.
 */

const controllers = new WeakMap();
const BLOCKS_PER_SECOND = 1.25;  // animation speed: slow enough to read each block
const DETAILS_KEPT = 8;  // opened blocks kept in the browser (0.4 MB each, 0.8 with q and k)
// timings read by the real-browser tests and bench/bench_explainer.py
const METRICS = (window.__vitExplainer = window.__vitExplainer ||
  { hover: [], hoverFrame: [], frames: [], readyAt: null, updates: 0, messages: [] });

let latest = null;  // the Explainer drawn last on this page

export default function mount({ parentElement, data, setStateValue, setTriggerValue }) {
  const message = readMessage(data);
  let explainer = controllers.get(parentElement);
  if (!explainer || !explainer.root.isConnected) {
    // Streamlit re-created our element (e.g. presentation mode added a style above it) while
    // Python knows this browser holds the overview: move the live view over, state and all
    const remounted = latest && !latest.root.isConnected && !message.overview &&
      message.signature === latest.signature;
    explainer = remounted ? latest.moveTo(parentElement) : new Explainer(parentElement);
    controllers.set(parentElement, explainer);
  }
  latest = explainer;
  explainer.send = { setStateValue, setTriggerValue };
  explainer.update(message);
}

/* ---------------------------------------------------------------- decoding */

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

/** A message from Python: "VXB1", the header's length (uint32 LE), the JSON header, then
 * the arrays, each at an 8-byte aligned offset after the header. Every array
 * {dtype, shape, offset} in the header becomes {values, shape} (typed arrays). */
function readMessage(data) {
  const bytes = data instanceof Uint8Array ? data.slice() : new Uint8Array(data);  // own, aligned buffer
  const magic = String.fromCharCode(...bytes.subarray(0, 4));
  if (magic !== "VXB1") throw new Error("ViT Explainer: unexpected message");
  const length = new DataView(bytes.buffer).getUint32(4, true), body = 8 + length;
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, body)));
  const size = (shape) => shape.reduce((a, b) => a * b, 1);
  const walk = (value) => {
    if (Array.isArray(value)) return value.map(walk);
    if (!value || typeof value !== "object") return value;
    if ("offset" in value && "dtype" in value && "shape" in value) {
      const at = body + value.offset, n = size(value.shape);
      let values;
      if (value.dtype === "u8") values = new Uint8Array(bytes.buffer, at, n);
      else if (value.dtype === "f32") values = new Float32Array(bytes.buffer, at, n);
      else {
        const half = new Uint16Array(bytes.buffer, at, n), table = halfToFloat();
        values = new Float32Array(n);
        for (let i = 0; i < n; i++) values[i] = table[half[i]];
      }
      return { values, shape: value.shape };
    }
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, walk(v)]));
  };
  const message = walk(header);
  METRICS.messages.push(bytes.length);
  return message;
}

const unpack = (item) => item || null;

/** Rows of 8-bit codes with one scale per row: value = code * scale / 255. */
class QRows {
  constructor(item) {
    const codes = unpack(item.codes);
    this.codes = codes.values;
    this.width = codes.shape[codes.shape.length - 1];
    this.scale = unpack(item.scale).values;
  }
  row(r, out) {
    const w = this.width, k = this.scale[r] / 255, o = out || new Float32Array(w);
    for (let j = 0, base = r * w; j < w; j++) o[j] = this.codes[base + j] * k;
    return o;
  }
}

/** Float rows (float16 on the wire) with the same row() interface as QRows. */
class Vectors {
  constructor(item) {
    const data = unpack(item);
    this.values = data.values;
    this.width = data.shape[data.shape.length - 1];
  }
  row(r, out) {
    const w = this.width, o = out || new Float32Array(w);
    o.set(this.values.subarray(r * w, (r + 1) * w));
    return o;
  }
}

/* ---------------------------------------------------------------- small helpers */

const esc = (text) => String(text).replace(/[&<>"']/g, (c) =>
  ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
const rich = (text) => esc(text).replace(/\*\*(.+?)\*\*/g, "<b>$1</b>");
const fmt = (x, digits = 3) => {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  const a = Math.abs(x);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return x.toExponential(2);
  return Number(x.toPrecision(digits)).toString();
};
const pct = (x) => `${(100 * x).toFixed(x >= 0.1 ? 1 : 2)}%`;
const el = (tag, cls, html) => {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (html !== undefined) node.innerHTML = html;
  return node;
};
function maxOf(values) {
  let m = 0;
  for (let i = 0; i < values.length; i++) if (values[i] > m) m = values[i];
  return m;
}
function minMax(values) {
  let lo = Infinity, hi = -Infinity;
  for (let i = 0; i < values.length; i++) {
    if (values[i] < lo) lo = values[i];
    if (values[i] > hi) hi = values[i];
  }
  return [lo, hi];
}
function argmax(values) {
  let best = 0;
  for (let i = 1; i < values.length; i++) if (values[i] > values[best]) best = i;
  return best;
}
const isEditable = (node) => node && (/^(INPUT|TEXTAREA|SELECT)$/.test(node.tagName) ||
  node.isContentEditable);

/* Blue-white-red for signed vectors (q, k, products, features). */
function diverging(v) {
  const t = Math.max(-1, Math.min(1, v));
  if (t >= 0) return [255, Math.round(255 - 175 * t), Math.round(255 - 195 * t)];
  return [Math.round(255 + 205 * t), Math.round(255 + 120 * t), 255];
}

/* ---------------------------------------------------------------- the component */

class Explainer {
  constructor(parent) {
    this.parent = parent;
    this.root = el("div", "vx");
    this.root.setAttribute("data-testid", "vit-explainer");
    parent.appendChild(this.root);
    this.signature = null;
    this.details = new Map(); // block -> decoded detail (this image and model)
    this.rowCache = new Map();
    this.requestTimer = null;
    this.state = { stage: "blocks", block: 0, head: -1, overlay: "attention", hover: null,
      hoverPrefix: null, pinned: null, previewBlock: null, previewHead: null, hoverKey: null,
      playing: false, position: 0, tour: 0 };
    this.onKey = (event) => this.handleKey(event);
    document.addEventListener("keydown", this.onKey);
  }

  /* ---------- data in ---------- */

  moveTo(parent) {
    this.parent = parent;
    parent.appendChild(this.root);
    document.addEventListener("keydown", this.onKey);  // the same listener: added once
    return this;
  }

  update(data) {
    METRICS.updates += 1;
    if (!this.root.isConnected) return;
    this.root.classList.toggle("present", !!data.presentation);
    this.link = data.link;
    if (data.signature !== this.signature) {
      // Python believed this browser held the overview (a page element remounted us):
      // ask again, saying we hold nothing.
      if (!data.overview) return this.requestEverything();
      this.signature = data.signature;
      this.details.clear();
      this.rowCache.clear();
      this.model = this.decodeOverview(data.overview);
      this.tour = { steps: data.tour.steps, resume: null };
      const st = this.state;
      const start = data.initial;  // a `?vx_...` link may name head, map and pinned patch
      Object.assign(st, { block: start.block, stage: start.stage, head: start.head ?? -1,
        overlay: start.overlay || "attention", hover: null, hoverPrefix: null,
        pinned: start.patch ?? null, playing: false, previewBlock: null, previewHead: null,
        hoverKey: null, tour: 0 });
      st.position = this.frameIndexOf(st.block);
      this.build();
      if (data.tour.active) this.applyStep(data.tour.active, false);
    }
    if (data.tour.steps) this.tour.steps = data.tour.steps;
    this.tour.resume = data.tour.resume;
    if (data.detail) this.keepDetail(data.detail);
    if (data.vectors) this.keepVectors(data.vectors);
    this.renderAll();
    // a block's detail (or q and k) arriving just after a tour step moves the page: bring the
    // step's part back
    const spotted = this.spotted;
    if ((data.detail || data.vectors) && spotted && this.state.tour && performance.now() - spotted.at < 4000) {
      requestAnimationFrame(() => this.scrollToSpot(spotted.step));
    }
    if (METRICS.readyAt === null) METRICS.readyAt = performance.now();
  }

  /** Keep a block's detail; forget the oldest beyond DETAILS_KEPT (never the shown one). */
  keepDetail(detail) {
    this.details.delete(detail.block);
    this.details.set(detail.block, this.decodeDetail(detail));
    for (const block of this.details.keys()) {
      if (this.details.size <= DETAILS_KEPT) break;
      if (block !== this.state.block) this.details.delete(block);
    }
  }

  /** A block's queries and keys, kept with its detail (and forgotten with it). */
  keepVectors(vectors) {
    const detail = this.details.get(vectors.block);
    if (detail) detail.vectors = { q: new Vectors(vectors.q), k: new Vectors(vectors.k) };
  }

  requestEverything() {
    this.asked = (this.asked || 0) + 1;
    if (!this.send || this.asked > 3) return;
    this.root.textContent = "Loading the ViT Explainer…";
    this.send.setStateValue("view", { block: null, tour: null, have: null, blocks: [], ask: this.asked });
  }

  decodeOverview(ov) {
    const m = { ov, grid: ov.layout.grid, np: ov.layout.patches, heads: ov.dims.heads,
      lut: unpack(ov.colormap).values, blocks: ov.blocks };
    m.queryRows = ov.query_rows.map((r) => ({ what: r.what, rows: new QRows(r),
      prefix: unpack(r.prefix).values, nPrefix: r.prefix.shape[1] }));
    const roll = ov.rollout;
    m.rollout = { blocks: roll.blocks, rows: new QRows(roll), what: roll.what,
      prefix: unpack(roll.prefix).values, nPrefix: roll.prefix.shape[1], convention: roll.convention };
    m.daam = ov.daam.unavailable ? null : { blocks: ov.daam.blocks, labels: ov.daam.labels,
      rows: new QRows(ov.daam), target: ov.daam.target, convention: ov.daam.convention };
    m.normOut = ov.blocks.map((b) => unpack(b.norm_out).values);
    m.embedNorms = unpack(ov.embedding_norms).values;
    m.feature = ov.feature ? unpack(ov.feature).values : null;
    m.image = new Image();
    m.image.onload = () => this.renderAll();
    m.image.src = ov.image;
    m.picture = new Image();
    m.picture.onload = () => this.drawPicture();
    m.picture.src = ov.picture.image;
    return m;
  }

  decodeDetail(d) {
    return { ...d, attn: new QRows(d.attention), attnPrefix: unpack(d.attention.prefix).values,
      qNorms: unpack(d.q_norms).values, vectors: null,
      norms: Object.fromEntries(Object.entries(d.norms).map(([k, v]) => [k, unpack(v).values])),
      contextHeads: unpack(d.context_heads).values };
  }

  /* ---------- what to draw ---------- */

  frameBlocks(overlay = this.state.overlay) {
    const m = this.model;
    if (overlay === "rollout") return m.rollout.blocks;
    if (overlay === "daam") return m.daam ? m.daam.blocks : [];
    return m.blocks.map((b) => b.index);
  }

  frameIndexOf(block) {
    const blocks = this.frameBlocks();
    const at = blocks.indexOf(block);
    return at >= 0 ? at : 0;
  }

  headOf() {
    const st = this.state;
    return st.previewHead !== null ? st.previewHead : st.head;
  }

  /** The [CLS] (or mean patch) row of a block, per head or averaged: {patch, prefix}. */
  queryRow(block, head) {
    const key = `q:${block}:${head}`;
    if (this.rowCache.has(key)) return this.rowCache.get(key);
    const entry = this.model.queryRows[block], np = this.model.np, P = entry.nPrefix;
    const patch = new Float32Array(np), prefix = new Float32Array(P), tmp = new Float32Array(np);
    const heads = head >= 0 ? [head] : [...Array(this.model.heads).keys()];
    for (const h of heads) {
      entry.rows.row(h, tmp);
      for (let j = 0; j < np; j++) patch[j] += tmp[j] / heads.length;
      for (let i = 0; i < P; i++) prefix[i] += entry.prefix[h * P + i] / heads.length;
    }
    const result = { patch, prefix, what: entry.what };
    this.rowCache.set(key, result);
    return result;
  }

  /** Attention row of query token `qi` in an opened block, per head or averaged. */
  attentionRow(detail, qi, head) {
    const key = `a:${detail.block}:${qi}:${head}`;
    if (this.rowCache.has(key)) return this.rowCache.get(key);
    const np = this.model.np, P = detail.prefix, nq = detail.nq;
    const patch = new Float32Array(np), prefix = new Float32Array(P), tmp = new Float32Array(np);
    const heads = head >= 0 ? [head] : [...Array(detail.heads).keys()];
    for (const h of heads) {
      detail.attn.row(h * nq + qi, tmp);
      for (let j = 0; j < np; j++) patch[j] += tmp[j] / heads.length;
      for (let i = 0; i < P; i++) prefix[i] += detail.attnPrefix[(h * nq + qi) * P + i] / heads.length;
    }
    const result = { patch, prefix };
    if (this.rowCache.size > 400) this.rowCache.clear();
    this.rowCache.set(key, result);
    return result;
  }

  frameRow(source, frame) {
    const key = `f:${source}:${frame}`;
    if (this.rowCache.has(key)) return this.rowCache.get(key);
    const data = source === "rollout" ? this.model.rollout : this.model.daam;
    const patch = data.rows.row(frame);
    const prefix = source === "rollout"
      ? data.prefix.slice(frame * data.nPrefix, (frame + 1) * data.nPrefix) : new Float32Array(0);
    const result = { patch, prefix };
    this.rowCache.set(key, result);
    return result;
  }

  blockLabel(block) {
    const b = this.model.blocks[block];
    return b.label;
  }

  /** The query token the learner points at in `block`: {qi, label} or null for [CLS]. */
  queryToken(block) {
    const st = this.state, b = this.model.blocks[block];
    const patch = st.hover !== null ? st.hover : st.pinned;
    if (st.hoverPrefix !== null && st.hoverPrefix < b.prefix) {
      return { qi: st.hoverPrefix, label: this.model.ov.layout.prefix_names[st.hoverPrefix] || "prefix" };
    }
    if (patch === null) return null;
    const [, cols] = this.model.grid;
    return { qi: b.prefix + patch, patch, label: `patch ${patch} (row ${Math.floor(patch / cols)}, col ${patch % cols})` };
  }

  /** The map on the image now: {patch, prefix, title, note} or {title} with no values. */
  currentMap() {
    const st = this.state, m = this.model, head = this.headOf();
    const headText = head >= 0 ? `head ${head}` : `mean of ${m.heads} heads`;
    if (st.previewBlock !== null) {
      const row = this.queryRow(st.previewBlock, head);
      return { ...row, title: `${this.blockLabel(st.previewBlock)}: ${this.rowWhat(row.what)} (${headText})` };
    }
    if (st.playing) return this.playingMap(headText);
    const block = st.block, query = this.queryToken(block), info = m.blocks[block];
    if (query) {
      if (info.kind === "class" && query.qi > 0) {
        const row = this.queryRow(block, head);
        return { ...row, title: `${this.blockLabel(block)} is a class-attention block: only [CLS] asks a question here. Its row (${headText}):` };
      }
      const detail = this.details.get(block);
      if (!detail) return { title: `Loading ${this.blockLabel(block)}'s full attention…`, loading: true };
      const row = this.attentionRow(detail, query.qi, head);
      return { ...row, title: `What ${query.label} attends to in ${this.blockLabel(block)} (${headText})` };
    }
    return this.modeMap(block, head, headText);
  }

  rowWhat(what) {
    return what === "[CLS] row" ? "what [CLS] attends to" : what;
  }

  modeMap(block, head, headText) {
    const st = this.state, m = this.model;
    if (st.overlay === "attention") {
      const row = this.queryRow(block, head);
      return { ...row, title: `${this.blockLabel(block)}: ${this.rowWhat(row.what)} (${headText})` };
    }
    const frames = this.frameBlocks();
    const frame = frames.indexOf(block);
    if (st.overlay === "daam" && !m.daam) return { title: "DAAM is not available for this model." };
    if (frame < 0) return { title: this.noFrameReason(block) };
    const row = this.frameRow(st.overlay, frame);
    const title = st.overlay === "rollout"
      ? `Rollout so far: ${m.rollout.blocks[0] === block ? `block ${block}`
        : `blocks ${m.rollout.blocks[0]}–${block}`} (${m.rollout.what}, heads averaged)`
      : `DAAM accumulated up to ${this.blockLabel(block).toLowerCase()}, for “${m.daam.target}”`;
    return { ...row, title };
  }

  /** Why the rollout or DAAM animation has no frame at this block. */
  noFrameReason(block) {
    const m = this.model, label = this.blockLabel(block);
    if (this.state.overlay === "daam") return `DAAM runs over the blocks with a [CLS] query; ${label} has none.`;
    if (m.blocks[block].kind !== "self") return `Rollout runs over the self-attention blocks only; ${label} is not one.`;
    const left = m.ov.sinks.left_out.find((entry) => entry.block === block);
    const first = this.blockLabel(m.rollout.blocks[0]);
    if (!left) return `Rollout here starts at ${first}.`;
    const heads = left.heads.map((h) => `head ${h.head} sends ${pct(h.score)} of its attention to ${h.key}`);
    return `Rollout here starts at ${first}: ${label} is left out` +
      (heads.length ? `, because ${heads.join(" and ")} (an attention sink)` : ", being before a sink-dominated block") +
      ". Rule: start=auto, as on page 4.";
  }

  playingMap(headText) {
    const st = this.state, frames = this.frameBlocks();
    const at = Math.floor(st.position) % frames.length;
    const next = (at + 1) % frames.length;
    const frac = st.position - Math.floor(st.position);
    const blend = frac < 0.7 || next === 0 ? 0 : (frac - 0.7) / 0.3;
    const get = (i) => st.overlay === "attention" ? this.queryRow(frames[i], this.headOf())
      : this.frameRow(st.overlay, i);
    const a = get(at), b = get(next);
    if (!blend) return { ...this.modeMap(frames[at], this.headOf(), headText), playing: true };
    const ma = maxOf(a.patch) || 1, mb = maxOf(b.patch) || 1;
    const patch = new Float32Array(a.patch.length);
    for (let j = 0; j < patch.length; j++) patch[j] = (1 - blend) * a.patch[j] / ma + blend * b.patch[j] / mb;
    return { patch, prefix: new Float32Array(0), normalised: true,
      title: this.modeMap(frames[at], this.headOf(), headText).title };
  }

  /* ---------- building the DOM ---------- */

  build() {
    const m = this.model, ov = m.ov;
    this.root.innerHTML = "";
    this.root.dataset.grid = m.grid.join("x");
    if (ov.model.random) {
      this.root.appendChild(el("div", "vx-random",
        `${esc(ov.model.label)}: untrained random weights. Shapes and code paths are real; ` +
        "the maps and the prediction explain nothing."));
    }
    this.tourBox = el("div", "vx-tour hidden");
    this.root.appendChild(this.tourBox);
    this.tourStart = el("div", "vx-tour-offer");
    this.root.appendChild(this.tourStart);
    this.root.appendChild(this.buildPipeline());
    this.root.appendChild(this.buildSequence());
    const main = el("div", "vx-main");
    main.appendChild(this.buildView());
    this.detailBox = el("div", "vx-card vx-detail");
    this.detailBox.dataset.part = "detail";
    main.appendChild(this.detailBox);
    this.root.appendChild(main);
    this.detailKey = null;
  }

  buildPipeline() {
    const m = this.model, box = el("div", "vx-overview");
    box.dataset.part = "pipeline";
    const row = el("div", "vx-pipeline");
    this.stageEls = {};
    this.blockEls = [];
    // two rows of half the stages each when one row is too narrow (explainer.css)
    const half = Math.ceil(m.ov.stages.length / 2);
    row.style.setProperty("--vx-two-rows",
      `repeat(${half - 1}, minmax(min-content, 1fr) auto) minmax(min-content, 1fr)`);
    m.ov.stages.forEach((stage, i) => {
      if (i) row.appendChild(el("div", i === half ? "vx-arrow vx-arrow-wrap" : "vx-arrow", "→"));
      const node = el("button", "vx-stage");
      node.dataset.stage = stage.id;
      let extra = stage.note ? `<div class="vx-stage-shape">${esc(stage.note)}</div>` : "";
      if (stage.id === "top5") {
        const top = m.ov.prediction.top[0], known = m.ov.prediction.open_set.known;
        extra = known
          ? `<div class="vx-stage-answer" title="${esc(top.label)}">${esc(top.label.split(",")[0])} · ` +
            `${pct(top.probability)}</div>`
          : `<div class="vx-stage-answer" title="Nearest class: ${esc(top.label)}">none it knows</div>`;
      }
      node.innerHTML = `<div class="vx-stage-title">${esc(stage.title)}</div>` +
        `<div class="vx-stage-shape">${esc(stage.shape)}</div>${extra}`;
      node.addEventListener("click", () => this.selectStage(stage.id));
      this.stageEls[stage.id] = node;
      row.appendChild(node);
    });
    box.appendChild(row);
    const strip = el("div", "vx-blockstrip");
    strip.dataset.part = "blocks";
    const hoverText = m.ov.layout.cls_joins_late ? "its attention map" : "what [CLS] attends to";
    strip.appendChild(el("div", "vx-blockstrip-label",
      `<b>The ${m.blocks.length} blocks</b> (0–${m.blocks.length - 1})<br><span class="muted">hover: ${hoverText} · ` +
      `click: open · bar: mean token length ‖x‖</span>`));
    strip.appendChild(this.buildBlockRow());
    box.appendChild(strip);
    return box;
  }

  buildBlockRow() {
    const m = this.model, row = el("div", "vx-block-row");
    const [rows, cols] = m.grid;
    m.blocks.forEach((b) => {
      const node = el("div", "vx-block" + (b.kind === "class" ? " class-attn" : ""));
      node.dataset.block = b.index;
      node.title = `${b.label}: ${b.kind === "class" ? "class attention" : "self-attention"}, ` +
        `${b.nq} quer${b.nq === 1 ? "y" : "ies"} × ${b.nk} keys. Hover: ${b.prefix ? "what [CLS] attends to" : "the mean attention of its patches"}; click: open it.`;
      const canvas = el("canvas");
      canvas.width = cols * 4;
      canvas.height = rows * 4;
      node.appendChild(canvas);
      node.appendChild(el("div", "vx-normbar", "<div></div>"));
      node.appendChild(el("div", "vx-block-label",
        b.kind === "class" ? `${b.index}C` : String(b.index)));
      node.addEventListener("mouseenter", () => { this.state.previewBlock = b.index; this.drawLive(); });
      node.addEventListener("mouseleave", () => { this.state.previewBlock = null; this.drawLive(); });
      node.addEventListener("click", () => { this.stop(); this.selectBlock(b.index, true); });
      this.blockEls.push({ node, canvas });
      row.appendChild(node);
    });
    return row;
  }

  buildView() {
    const m = this.model, card = el("div", "vx-card vx-view");
    const [H, W] = m.ov.layout.input;
    const canvas = el("canvas", "vx-image");
    canvas.width = 800;
    canvas.height = Math.round(800 * H / W);
    canvas.style.aspectRatio = `${W} / ${H}`;
    canvas.style.height = "auto";
    canvas.dataset.part = "image";
    canvas.setAttribute("role", "img");  // labelled with its caption (drawCaption)
    canvas.addEventListener("mousemove", (event) => this.hoverImage(event));
    canvas.addEventListener("mouseleave", () => this.setHover(null, null));
    canvas.addEventListener("click", (event) => {
      const p = this.patchAt(event);
      this.state.pinned = this.state.pinned === p ? null : p;
      this.drawLive();
    });
    this.imageCanvas = canvas;
    card.appendChild(canvas);
    this.caption = el("div", "vx-caption");
    card.appendChild(this.caption);
    const legend = el("div", "vx-legend");
    legend.innerHTML = `<span class="vx-legend-min"></span><canvas width="256" height="1"></canvas><span class="vx-legend-max"></span>`;
    this.legendMax = legend.querySelector(".vx-legend-max");
    this.legendMin = legend.querySelector(".vx-legend-min");
    this.legend = legend;
    this.paintLegend(legend.querySelector("canvas"));
    card.appendChild(legend);
    // for an instructor's slides and lecture notes
    const tools = el("div", "vx-tools",
      `<button class="vx-btn vx-save" title="Save the picture with its map and caption as a PNG">Save PNG</button>` +
      `<button class="vx-btn vx-copy" title="A link that opens this block, head, map and pinned patch">Copy link</button>` +
      `<input class="hidden" readonly aria-label="Link to this view"><span class="muted"></span>`);
    tools.querySelector(".vx-save").addEventListener("click", () => this.savePicture());
    tools.querySelector(".vx-copy").addEventListener("click", () => this.copyLink());
    this.tools = tools;
    card.appendChild(tools);
    card.appendChild(this.buildControls());
    return card;
  }

  buildControls() {
    const m = this.model, box = el("div", "vx-controls");
    const overlays = [["attention", "Attention"], ["rollout", "Rollout so far"]];
    if (m.daam) overlays.push(["daam", "DAAM so far"]);
    const seg = el("div", "vx-row");
    seg.dataset.part = "overlay";
    seg.innerHTML = `<span class="vx-label">Map</span><span class="vx-seg">${overlays.map(([id, text]) =>
      `<button data-overlay="${id}">${text}</button>`).join("")}</span>`;
    seg.querySelectorAll("button").forEach((button) => button.addEventListener("click", () => {
      this.state.overlay = button.dataset.overlay;
      this.state.position = this.frameIndexOf(this.state.block);
      this.showBlocks();
      this.renderAll();
    }));
    this.overlayButtons = seg.querySelectorAll("button");
    box.appendChild(seg);

    const heads = el("div", "vx-row");
    heads.dataset.part = "heads";
    heads.innerHTML = `<span class="vx-label">Head</span>`;
    this.headRow = heads;
    const chips = el("div", "vx-heads");
    this.headChips = [];
    const [rows, cols] = m.grid;
    for (let h = -1; h < m.heads; h++) {
      const chip = el("button", "vx-headchip");
      chip.dataset.head = h;
      const canvas = el("canvas");
      canvas.width = cols * 3;
      canvas.height = rows * 3;
      chip.appendChild(canvas);
      chip.appendChild(el("span", "", h < 0 ? "mean" : String(h)));
      chip.title = h < 0 ? "Average of all heads" : `Head ${h}: hover to preview, click to choose`;
      chip.addEventListener("mouseenter", () => { this.state.previewHead = h; this.drawLive(); });
      chip.addEventListener("mouseleave", () => { this.state.previewHead = null; this.drawLive(); });
      chip.addEventListener("click", () => { this.state.head = h; this.showBlocks(); this.renderAll(); });
      chips.appendChild(chip);
      this.headChips.push({ chip, canvas, head: h });
    }
    heads.appendChild(chips);
    box.appendChild(heads);
    // rollout and DAAM average the heads: say so, rather than offer a choice that changes nothing
    this.headsNote = el("div", "vx-note vx-heads-note", "");
    box.appendChild(this.headsNote);

    const player = el("div", "vx-player");
    player.dataset.part = "player";
    player.innerHTML = `<span class="vx-label">Block</span><button class="vx-play" title="Play / pause (block by block)">▶</button>` +
      `<input type="range" min="0" max="${m.blocks.length - 1}" step="1" value="0" aria-label="Block">` +
      `<span class="vx-blocknum"></span>`;
    this.playButton = player.querySelector("button");
    this.scrubber = player.querySelector("input");
    this.blockNum = player.querySelector(".vx-blocknum");
    this.playButton.addEventListener("click", () => (this.state.playing ? this.stop() : this.play()));
    this.scrubber.addEventListener("input", () => {
      this.stop();
      this.showBlocks();
      this.selectBlock(Number(this.scrubber.value), false);
    });
    box.appendChild(player);
    return box;
  }

  buildSequence() {
    const card = el("div", "vx-card vx-seq");
    card.dataset.part = "sequence";
    card.appendChild(el("div", "vx-seq-caption",
      `<span><b>The token sequence</b> of the chosen block, coloured like the picture's map below. ` +
      `Prefix tokens first, then the patches in raster order (row by row).</span><span class="vx-seq-info muted"></span>`));
    const canvas = el("canvas");
    canvas.addEventListener("mousemove", (event) => this.hoverSequence(event));
    canvas.addEventListener("mouseleave", () => this.setHover(null, null));
    this.seqCanvas = canvas;
    this.seqInfo = card.querySelector(".vx-seq-info");
    card.appendChild(canvas);
    new ResizeObserver(() => this.drawSequence()).observe(canvas);
    return card;
  }

  /* ---------- interaction ---------- */

  patchAt(event) {
    const rect = this.imageCanvas.getBoundingClientRect(), [rows, cols] = this.model.grid;
    const c = Math.min(cols - 1, Math.max(0, Math.floor((event.clientX - rect.left) / rect.width * cols)));
    const r = Math.min(rows - 1, Math.max(0, Math.floor((event.clientY - rect.top) / rect.height * rows)));
    return r * cols + c;
  }

  hoverImage(event) {
    const p = this.patchAt(event);
    if (p === this.state.hover && this.state.hoverPrefix === null) return;
    this.setHover(p, null, event);
  }

  sequenceLayout() {
    const canvas = this.seqCanvas, W = canvas.width, b = this.model.blocks[this.state.block];
    const P = b.nk - this.model.np, gap = P ? 6 * devicePixelRatio : 0;
    const prefixW = P ? Math.min(64 * devicePixelRatio * (this.root.classList.contains("present") ? 1.5 : 1), W * 0.08) : 0;
    const cell = (W - P * prefixW - gap) / this.model.np;
    return { P, prefixW, gap, cell, start: P * prefixW + gap };
  }

  hoverSequence(event) {
    const rect = this.seqCanvas.getBoundingClientRect();
    const x = (event.clientX - rect.left) * (this.seqCanvas.width / rect.width);
    const lay = this.sequenceLayout();
    if (x < lay.P * lay.prefixW) return this.setHover(null, Math.floor(x / lay.prefixW), event);
    const p = Math.min(this.model.np - 1, Math.max(0, Math.floor((x - lay.start) / lay.cell)));
    if (p !== this.state.hover) this.setHover(p, null, event);
  }

  setHover(patch, prefix, event) {
    const start = event ? event.timeStamp : performance.now();
    this.state.hover = patch;
    this.state.hoverPrefix = prefix;
    this.drawLive();
    const drawn = performance.now();
    if (event) {
      METRICS.hover.push(drawn - start);
      requestAnimationFrame(() => METRICS.hoverFrame.push(performance.now() - start));
      if (METRICS.hover.length > 500) METRICS.hover.splice(0, 250);
      if (METRICS.hoverFrame.length > 500) METRICS.hoverFrame.splice(0, 250);
    }
  }

  /** The map controls draw on the block view: leave the image, patch and token stages
   * (which show the plain picture) so their effect is visible. */
  showBlocks() {
    if (!["image", "patches", "tokens"].includes(this.state.stage)) return;
    this.state.stage = "blocks";
    this.requestBlock(this.state.block);
  }

  selectStage(id) {
    this.state.stage = id;
    if (id === "blocks") this.requestBlock(this.state.block);
    this.renderAll();
  }

  selectBlock(block, open) {
    const st = this.state;
    st.block = block;
    st.position = this.frameIndexOf(block);
    if (open) st.stage = "blocks";
    this.requestBlock(block);
    this.renderAll();
  }

  /** Ask Python for a block's detail (one fragment rerun), unless it is here already. */
  requestBlock(block) {
    if (this.details.has(block)) return;
    clearTimeout(this.requestTimer);
    this.requestTimer = setTimeout(() => this.sendView(), 180);
  }

  blocksWithVectors() {
    return [...this.details].filter(([, d]) => d.vectors).map(([block]) => block);
  }

  /** Ask for the shown block's q and k while its query · key panel is in view. */
  requestVectors() {
    const detail = this.details.get(this.state.block);
    if (!this.qkVisible || !detail || detail.vectors || this.vectorsAsked === detail ||
        this.state.playing) return;  // playing never talks to the server
    clearTimeout(this.requestTimer);
    this.requestTimer = setTimeout(() => this.sendView(), 180);
  }

  /** Tell Python what is on screen and what this browser holds (so it sends only the rest). */
  sendView(extra = {}) {
    if (!this.send) return;
    // asked once per detail; a view sent with the panel out of sight asks nothing
    const detail = this.details.get(this.state.block);
    this.vectorsAsked = this.qkVisible && detail && !detail.vectors ? detail : null;
    this.send.setStateValue("view", { block: this.state.block, tour: this.state.tour,
      have: this.signature, blocks: [...this.details.keys()], qk: this.blocksWithVectors(),
      want_qk: !!this.qkVisible, ...extra });
  }

  play() {
    const st = this.state;
    if (st.overlay === "daam" && !this.model.daam) return;
    this.showBlocks();
    st.playing = true;
    st.pinned = null;
    st.position = this.frameIndexOf(st.block);
    if (st.position >= this.frameBlocks().length - 1) st.position = 0;
    this.lastTick = performance.now();
    METRICS.frames = [];
    const tick = (now) => {
      if (!st.playing || !this.root.isConnected) return;
      // a frame's timestamp can precede the click that started playing: never step back
      const seconds = Math.max(0, now - this.lastTick) / 1000;
      this.lastTick = Math.max(now, this.lastTick);
      const frames = this.frameBlocks();
      st.position = (st.position + seconds * BLOCKS_PER_SECOND) % frames.length;
      const block = frames[Math.floor(st.position)];
      if (block !== st.block) { st.block = block; this.renderChrome(); }
      this.drawImage();
      this.drawSequence();
      METRICS.frames.push(now);
      if (METRICS.frames.length > 600) METRICS.frames.splice(0, 300);
      this.raf = requestAnimationFrame(tick);
    };
    this.renderChrome();
    this.detailBox.classList.add("vx-stale");
    this.raf = requestAnimationFrame(tick);
  }

  stop() {
    const st = this.state;
    if (!st.playing) return;
    st.playing = false;
    cancelAnimationFrame(this.raf);
    st.position = Math.floor(st.position);
    this.detailBox.classList.remove("vx-stale");
    this.requestBlock(st.block);
    this.renderAll();
  }

  /* ---------- the tour ---------- */

  goTo(step) {
    const count = this.tour.steps.length;
    if (step < 1 || step > count) return;
    this.applyStep(step, true);
  }

  closeTour() {
    this.state.tour = 0;
    this.tour.resume = null;
    this.root.querySelectorAll(".vx-spotlight").forEach((node) => node.classList.remove("vx-spotlight"));
    this.renderAll();
    this.sendView({ dismissed: true });
  }

  applyStep(step, send) {
    const s = this.tour.steps[step - 1], st = this.state;
    if (!s) return;
    if (st.playing) {
      st.playing = false;
      cancelAnimationFrame(this.raf);
      this.detailBox.classList.remove("vx-stale");
    }
    Object.assign(st, { tour: step, stage: s.stage, block: s.block, head: s.head, overlay: s.overlay,
      pinned: s.patch, hover: null, hoverPrefix: null, previewBlock: null, previewHead: null });
    st.position = this.frameIndexOf(st.block);
    this.renderAll();
    this.spotted = { step: s, at: performance.now() };
    requestAnimationFrame(() => this.scrollToSpot(s));
    if (send) {
      clearTimeout(this.requestTimer);
      this.sendView();
    }
  }

  /** The step the tour offers to resume at (after a visit to a deeper page), or 0. */
  resumeStep() {
    const step = this.tour.resume;
    return !this.state.tour && step >= 1 && step <= this.tour.steps.length ? step : 0;
  }

  handleKey(event) {
    if (!this.root.isConnected) {
      document.removeEventListener("keydown", this.onKey);
      return;
    }
    const st = this.state, forward = ["ArrowRight", "PageDown"].includes(event.key);
    if (event.altKey || event.ctrlKey || event.metaKey) return;
    if (isEditable(event.composedPath()[0])) return;
    if (!st.tour) {
      // → starts the tour, or picks it up where it was left; PageDown keeps scrolling the page
      if (event.key !== "ArrowRight") return;
      this.goTo(this.resumeStep() || 1);
    } else if (forward) this.goTo(st.tour + 1);
    else if (["ArrowLeft", "PageUp"].includes(event.key)) this.goTo(st.tour - 1);
    else if (event.key === "Escape") this.closeTour();
    else return;
    event.preventDefault();
  }

  renderTourOffer() {
    const box = this.tourStart, steps = this.tour.steps, resume = this.resumeStep();
    box.classList.toggle("hidden", !!this.state.tour);
    const key = `${this.state.tour}:${resume}:${steps.length}`;
    if (box.dataset.key === key) return;
    box.dataset.key = key;
    box.innerHTML = resume
      ? `<button class="vx-btn primary" data-act="resume">↩ Resume the tour at step ${resume} of ${steps.length}: ` +
        `${esc(steps[resume - 1].title)}</button><button class="vx-btn" data-act="restart">Start again from step 1</button>` +
        `<button class="vx-btn" data-act="dismiss" title="Forget where the tour was">✕</button>` +
        `<span class="vx-keys muted">or press →</span>`
      : `<button class="vx-btn primary" data-act="start" title="Or press →">▶ Start the guided tour: ${steps.length} steps from pixels to prediction</button>`;
    const on = (act, action) => { const b = box.querySelector(`[data-act="${act}"]`); if (b) b.addEventListener("click", action); };
    on("resume", () => this.goTo(resume));
    on("restart", () => this.goTo(1));
    on("start", () => this.goTo(1));
    on("dismiss", () => this.closeTour());
  }

  renderTour() {
    const st = this.state, steps = this.tour.steps, box = this.tourBox;
    this.renderTourOffer();
    box.classList.toggle("hidden", !st.tour);
    this.root.querySelectorAll(".vx-spotlight").forEach((node) => node.classList.remove("vx-spotlight"));
    this.root.dataset.tour = String(st.tour);
    this.root.dataset.resume = String(this.resumeStep());
    if (!st.tour) return;
    const s = steps[st.tour - 1];
    box.style.top = `${this.stickyTop()}px`;
    box.innerHTML =
      `<div class="vx-tour-head"><span class="vx-tour-count">Step ${st.tour} of ${steps.length}</span>` +
      `<span class="vx-tour-title">${esc(s.title)}</span>` +
      `<button class="vx-btn" data-act="close" title="Close the tour (Esc)">✕</button></div>` +
      `<div class="vx-tour-text">${rich(s.text)}</div>` +
      `<div class="vx-tour-bar"><button class="vx-btn" data-act="back" title="Back (← key)" ${st.tour === 1 ? "disabled" : ""}>◀ Back</button>` +
      `<button class="vx-btn primary" data-act="next" title="Next (→ key or a presenter's clicker)" ${st.tour === steps.length ? "disabled" : ""}>Next ▶</button>` +
      `<span class="vx-tour-dots">${steps.map((_, i) =>
        `<button class="vx-tour-dot${i + 1 === st.tour ? " on" : ""}" data-step="${i + 1}" title="Step ${i + 1}: ${esc(steps[i].title)}"></button>`).join("")}</span>` +
      (s.page ? `<button class="vx-btn" data-act="deeper" title="Opens that page; come back here to resume the tour">Go deeper: ${esc(s.page.title)} →</button>` : "") +
      `<span class="vx-keys muted">← → keys · Esc closes</span></div>`;
    box.querySelector('[data-act="close"]').addEventListener("click", () => this.closeTour());
    box.querySelector('[data-act="back"]').addEventListener("click", () => this.goTo(st.tour - 1));
    box.querySelector('[data-act="next"]').addEventListener("click", () => this.goTo(st.tour + 1));
    box.querySelectorAll(".vx-tour-dot").forEach((dot) =>
      dot.addEventListener("click", () => this.goTo(Number(dot.dataset.step))));
    const deeper = box.querySelector('[data-act="deeper"]');
    if (deeper) deeper.addEventListener("click", () => this.send.setTriggerValue("navigate", s.page.file));
    for (const part of s.spot) {
      const node = this.partNode(part);
      if (node) node.classList.add("vx-spotlight");
    }
  }

  partNode(part) {
    return part.startsWith("stage:") ? this.stageEls[part.slice(6)]
      : this.root.querySelector(`[data-part="${part}"]`);
  }

  /** The element that scrolls the page (Streamlit's main area), across the shadow root. */
  scroller() {
    for (let node = this.root; node;) {
      node = node.parentNode || node.host;
      if (!node || node === document) break;
      if (node instanceof Element) {
        const overflow = getComputedStyle(node).overflowY;
        if ((overflow === "auto" || overflow === "scroll") && node.scrollHeight > node.clientHeight) return node;
      }
    }
    return document.scrollingElement;
  }

  /** Where the sticky tour box stops: just under Streamlit's fixed header. */
  stickyTop() {
    const scroller = this.scroller();
    const top = scroller === document.scrollingElement ? 0 : scroller.getBoundingClientRect().top;
    const header = document.querySelector('[data-testid="stHeader"]');
    const bottom = header ? header.getBoundingClientRect().bottom : 0;
    return Math.max(0, Math.round(bottom - top));
  }

  /** Scroll so the parts a step talks about are in view below the (sticky) tour box. */
  scrollToSpot(s) {
    const parts = s.spot.filter((part) => !part.startsWith("stage:") && part !== "pipeline");
    const nodes = (parts.length ? parts : ["pipeline"]).map((part) => this.partNode(part)).filter(Boolean);
    if (!nodes.length || !this.root.isConnected) return;
    const scroller = this.scroller();
    const frame = scroller === document.scrollingElement ? { top: 0, bottom: innerHeight } : scroller.getBoundingClientRect();
    const free = frame.top + this.stickyTop() + this.tourBox.offsetHeight + 12, end = frame.bottom - 12;
    const delta = spotScroll(nodes.map((node) => node.getBoundingClientRect()), free, end);
    // an absolute target: a quick run of clicker presses ends where the last step wants
    if (Math.abs(delta) > 2) scroller.scrollTo({ top: scroller.scrollTop + delta, behavior: "smooth" });
  }

  /* ---------- rendering ---------- */

  renderAll() {
    if (!this.model) return;
    this.renderTour();
    this.renderChrome();
    this.renderDetail();
    this.drawLive();
  }

  /** Buttons, selections and labels (cheap, no canvases except thumbnails). */
  renderChrome() {
    const st = this.state, m = this.model;
    Object.entries(this.stageEls).forEach(([id, node]) => node.classList.toggle("selected", id === st.stage));
    this.blockEls.forEach(({ node }, i) => node.classList.toggle("current", i === st.block));
    this.overlayButtons.forEach((b) => b.classList.toggle("on", b.dataset.overlay === st.overlay));
    this.headChips.forEach(({ chip, head }) => chip.classList.toggle("on", head === st.head));
    this.playButton.textContent = st.playing ? "❚❚" : "▶";
    this.playButton.setAttribute("aria-label", st.playing ? "Pause" : "Play");
    this.scrubber.value = String(st.block);
    this.blockNum.textContent = `${st.block} of 0–${m.blocks.length - 1}`;
    this.headsNote.textContent = st.overlay === "attention" ? "" : `${st.overlay === "rollout" ? "Rollout" : "DAAM"} ` +
      "uses all heads together; a head you pick applies when you point at a patch.";
    const r = this.root.dataset;
    r.block = String(st.block);
    r.stage = st.stage;
    r.overlay = st.overlay;
    r.head = String(st.head);
    r.playing = String(st.playing);
    r.detail = [...this.details.keys()].join(",");
    r.qk = this.blocksWithVectors().join(",");
    this.drawThumbnails();
  }

  /** Everything that follows the pointer: image, sequence, head chips, live detail parts. */
  drawLive() {
    if (!this.model) return;
    this.drawImage();
    this.drawSequence();
    this.drawHeadChips();
    this.drawDetailLive();
    this.blockEls.forEach(({ node }, i) => node.classList.toggle("previewing", i === this.state.previewBlock));
  }

  paintLegend(canvas) {
    const ctx = canvas.getContext("2d"), img = ctx.createImageData(256, 1), lut = this.model.lut;
    for (let i = 0; i < 256; i++) {
      img.data.set([lut[3 * i], lut[3 * i + 1], lut[3 * i + 2], 255], 4 * i);
    }
    ctx.putImageData(img, 0, 0);
  }

  /** A patch-grid map painted over `ctx` (nearest neighbour: one cell per token). */
  paintMap(ctx, values, width, height, opts = {}) {
    const [rows, cols] = this.model.grid, lut = this.model.lut;
    if (!this.gridCanvas) {
      this.gridCanvas = document.createElement("canvas");
      this.gridCanvas.width = cols;
      this.gridCanvas.height = rows;
    }
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
    const [rows, cols] = this.model.grid, cw = width / cols, ch = height / rows;
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
    const [rows, cols] = this.model.grid;
    ctx.save();
    ctx.strokeStyle = "rgba(255,255,255,0.35)";
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (let c = 1; c < cols; c++) { const x = Math.round(c * width / cols) + 0.5; ctx.moveTo(x, 0); ctx.lineTo(x, height); }
    for (let r = 1; r < rows; r++) { const y = Math.round(r * height / rows) + 0.5; ctx.moveTo(0, y); ctx.lineTo(width, y); }
    ctx.stroke();
    ctx.restore();
  }

  drawImage() {
    const canvas = this.imageCanvas, ctx = canvas.getContext("2d"), st = this.state, m = this.model;
    const W = canvas.width, H = canvas.height;
    ctx.imageSmoothingEnabled = true;
    ctx.fillStyle = "#222";
    ctx.fillRect(0, 0, W, H);
    if (m.image.complete && m.image.naturalWidth) ctx.drawImage(m.image, 0, 0, W, H);
    const stage = st.stage;
    const showMap = !["image", "patches", "tokens"].includes(stage) || st.playing || st.previewBlock !== null;
    const map = showMap ? this.currentMap() : null;
    this.lastMap = map;
    if (map && map.patch) {
      this.paintMap(ctx, map.patch, W, H, map.normalised ? { max: 1 } : {});
    }
    if (["patches", "tokens"].includes(stage) || st.hover !== null || st.pinned !== null) this.drawGridLines(ctx, W, H);
    const query = st.hover !== null ? st.hover : st.pinned;
    if (query !== null) this.outlinePatch(ctx, query, W, H, "#22d3ee");
    if (st.hoverKey !== null && st.hoverKey >= 0) this.outlinePatch(ctx, st.hoverKey, W, H, "#fde047", true);
    this.drawCaption(map);
    this.root.dataset.hover = st.hover === null ? "" : String(st.hover);
    this.root.dataset.mapSum = map && map.patch ? checksum(map.patch) : "";
  }

  /** The picture as drawn (map, outlined patch), with its caption, the colour scale and the
   * model under it, downloaded as a PNG: what an instructor puts on a slide. */
  savePicture() {
    const m = this.model, st = this.state, picture = this.imageCanvas;
    const label = m.ov.model.label + (m.ov.model.random ? " (RANDOM WEIGHTS)" : "");
    const map = this.lastMap && this.lastMap.patch ? this.lastMap : null;
    const lines = [map ? map.title : "What the model sees",
      ...(map ? [`Colours: 0 (dark) to ${this.legendMax.textContent} (yellow)`] : []), `${label} · ViT Lens`];
    const line = 30, out = document.createElement("canvas");
    out.width = picture.width;
    out.height = picture.height + 12 + lines.length * line;
    const ctx = out.getContext("2d");
    ctx.fillStyle = "#ffffff";
    ctx.fillRect(0, 0, out.width, out.height);
    ctx.drawImage(picture, 0, 0);
    ctx.fillStyle = "#31333f";
    lines.forEach((text, i) => {
      ctx.font = `${i ? "" : "bold "}20px sans-serif`;
      ctx.fillText(text, 12, picture.height + 12 + (i + 0.7) * line, out.width - 24);
    });
    const link = document.createElement("a");
    link.download = `vit-lens-${m.ov.model.id}-block${st.block}-${st.overlay}.png`;
    link.href = out.toDataURL("image/png");
    link.click();
  }

  /** The address of this view (`?vx_block=...`, the rest of the address kept, the tour
   * left out), shown selected beside the button and put on the clipboard where the browser
   * allows it (a secure page: https or localhost). */
  copyLink() {
    const st = this.state, url = new URL(window.location.href), params = url.searchParams;
    params.delete("tour");
    const values = { block: st.block, head: st.head >= 0 ? st.head : null, patch: st.pinned,
      map: st.overlay !== "attention" ? st.overlay : null };
    for (const [name, value] of Object.entries(values)) {
      if (value === null) params.delete(`vx_${name}`);
      else params.set(`vx_${name}`, String(value));
    }
    // an upload stays on the server: the link opens this view on a sample instead, and says so
    const sample = this.link && this.link.sample;
    if (sample) params.set("image_choice", sample.id);
    const input = this.tools.querySelector("input"), note = this.tools.querySelector("span");
    const caveat = sample ? ` · your picture is not in the link: it opens this view on the sample “${sample.title}”` : "";
    input.value = url.toString();
    input.classList.remove("hidden");
    input.select();
    note.textContent = "select and copy" + caveat;
    note.classList.toggle("vx-link-note", !!sample);
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(input.value).then(() => { note.textContent = "copied" + caveat; }, () => {});
    }
  }

  drawCaption(map) {
    const st = this.state, m = this.model;
    if (!map) {
      const [rows, cols] = m.grid, [ph, pw] = m.ov.layout.patch;
      this.caption.innerHTML = st.stage === "patches"
        ? `The model cuts the image into <b>${rows}×${cols} = ${m.np}</b> patches of ${ph}×${pw} pixels. Hover one.`
        : st.stage === "tokens"
          ? `Each patch becomes one token. Hover the picture or the token strip above: the two are linked.`
          : "What the model sees: the picture resized and cropped. Open a block to colour it by attention.";
      this.imageCanvas.setAttribute("aria-label", this.caption.textContent);
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
    if (map.loading) text = `<span class="vx-loading">${esc(map.title)}</span>`;
    this.caption.innerHTML = text;
    this.imageCanvas.setAttribute("aria-label", this.caption.textContent);
    this.legend.classList.toggle("hidden", !map.patch);
    const top = map.patch ? maxOf(map.patch) : 0;
    this.legendMin.textContent = "0";
    this.legendMax.textContent = !map.patch ? "" : map.normalised ? "max (between two blocks)"
      : share ? `${pct(top)} of the row: the brightest patch` : `${fmt(top)}: the largest value (DAAM has no unit)`;
  }

  drawSequence() {
    const canvas = this.seqCanvas;
    if (!canvas || !this.model) return;
    const dpr = devicePixelRatio || 1, rect = canvas.getBoundingClientRect();
    const W = Math.max(200, Math.round(rect.width * dpr)), H = Math.round(rect.height * dpr) || 34;
    if (canvas.width !== W || canvas.height !== H) { canvas.width = W; canvas.height = H; }
    const ctx = canvas.getContext("2d"), m = this.model, st = this.state, lut = m.lut;
    const lay = this.sequenceLayout(), names = m.ov.layout.prefix_names;
    const map = this.lastMap && this.lastMap.patch ? this.lastMap : null;
    const top = map ? (map.normalised ? 1 : maxOf(map.patch) || 1) : 1;
    const cellH = Math.round(H * 0.62);
    const text = dpr * (this.root.classList.contains("present") ? 1.6 : 1);  // label size, in canvas pixels
    ctx.clearRect(0, 0, W, H);
    const colour = (v) => { const k = Math.round(Math.max(0, Math.min(1, v)) * 255) * 3; return `rgb(${lut[k]},${lut[k + 1]},${lut[k + 2]})`; };
    for (let i = 0; i < lay.P; i++) {
      const v = map && map.prefix && i < map.prefix.length ? map.prefix[i] / top : 0;
      ctx.fillStyle = map ? colour(v) : "#888";
      ctx.fillRect(i * lay.prefixW + 1, 0, lay.prefixW - 2, cellH);
      ctx.fillStyle = v > 0.55 ? "#000" : "#fff";
      ctx.font = `${Math.round(11 * text)}px sans-serif`;
      ctx.textAlign = "center";
      ctx.textBaseline = "middle";
      ctx.fillText(names[i] || "prefix", i * lay.prefixW + lay.prefixW / 2, cellH / 2);
    }
    for (let p = 0; p < m.np; p++) {
      ctx.fillStyle = map ? colour(map.patch[p] / top) : "#777";
      ctx.fillRect(lay.start + p * lay.cell, 0, Math.max(1, lay.cell - (lay.cell > 3 ? 0.5 : 0)), cellH);
    }
    const [, cols] = m.grid;
    ctx.fillStyle = "rgba(120,120,120,0.9)";
    ctx.textAlign = "left";
    ctx.textBaseline = "top";
    ctx.font = `${Math.round(10 * text)}px sans-serif`;
    const every = Math.max(1, Math.ceil(60 * text / (lay.cell * cols)));
    for (let r = 0; r * cols < m.np; r++) {
      const x = lay.start + r * cols * lay.cell;
      ctx.fillRect(x, cellH, 1, H * 0.14);
      if (r % every === 0) ctx.fillText(`row ${r}`, x + 2, cellH + 2);
    }
    const mark = (x, w, stroke) => {
      ctx.save();
      ctx.strokeStyle = stroke;
      ctx.lineWidth = 2 * dpr;
      ctx.strokeRect(x - dpr, 1, Math.max(w, 2 * dpr) + 2 * dpr, cellH - 2);
      ctx.restore();
    };
    const query = st.hover !== null ? st.hover : st.pinned;
    if (query !== null) mark(lay.start + query * lay.cell, lay.cell, "#0891b2");
    if (st.hoverPrefix !== null && st.hoverPrefix < lay.P) mark(st.hoverPrefix * lay.prefixW, lay.prefixW, "#0891b2");
    if (st.hoverKey !== null && st.hoverKey >= 0) mark(lay.start + st.hoverKey * lay.cell, lay.cell, "#ca8a04");
    const b = m.blocks[st.block];
    this.seqInfo.textContent = st.hoverPrefix !== null && st.hoverPrefix < lay.P
      ? `token ${st.hoverPrefix}: ${names[st.hoverPrefix]} (no pixels)`
      : query !== null ? `token ${b.prefix + query} = patch ${query} (row ${Math.floor(query / cols)}, col ${query % cols})`
        : `${b.nk} tokens: ${lay.P} prefix + ${m.np} patches`;
  }

  drawThumbnails() {
    const head = this.state.head;
    this.blockEls.forEach(({ canvas }, block) => {
      const row = this.queryRow(block, head), ctx = canvas.getContext("2d");
      this.paintMap(ctx, row.patch, canvas.width, canvas.height, { opaque: true });
    });
    const means = this.model.normOut.map((values) => values.reduce((a, b) => a + b, 0) / values.length);
    const top = Math.max(...means);
    this.blockEls.forEach(({ node }, i) => {
      node.querySelector(".vx-normbar > div").style.width = `${(100 * means[i] / top).toFixed(1)}%`;
      node.querySelector(".vx-normbar").title = `mean ‖x‖ of the block's output tokens: ${fmt(means[i])}`;
    });
  }

  drawHeadChips() {
    const st = this.state, b = this.model.blocks[st.block], detail = this.details.get(st.block);
    this.headRow.classList.toggle("vx-dim", st.overlay !== "attention" && st.hover === null && st.pinned === null);
    const query = this.queryToken(st.block);
    this.headChips.forEach(({ canvas, head, chip }) => {
      let row;
      if (query && detail && !(b.kind === "class" && query.qi > 0)) row = this.attentionRow(detail, query.qi, head);
      else row = this.queryRow(st.block, head);
      this.paintMap(canvas.getContext("2d"), row.patch, canvas.width, canvas.height, { opaque: true });
      chip.classList.toggle("previewing", head === st.previewHead);
    });
  }

  /* ---------- the detail panel ---------- */

  renderDetail() {
    const st = this.state, detail = this.details.get(st.block);
    const key = `${st.stage}:${st.stage === "blocks" ? st.block : ""}:${st.stage === "blocks" && !!detail}:${st.head}`;
    if (key === this.detailKey) return;
    this.detailKey = key;
    if (this.qkObserver) this.qkObserver.disconnect();
    if (st.stage !== "blocks") this.qkVisible = false;  // else: the rebuilt panel reports soon
    const box = this.detailBox;
    box.innerHTML = "";
    const builders = { image: () => this.detailImage(), patches: () => this.detailPatches(),
      tokens: () => this.detailTokens(), blocks: () => this.detailBlock(detail),
      norm: () => this.detailNorm(), feature: () => this.detailFeature(),
      head: () => this.detailHead(), top5: () => this.detailTop5() };
    (builders[st.stage] || builders.blocks)();
  }

  detailImage() {
    const ov = this.model.ov, [H, W] = ov.layout.input, pre = ov.preprocess, pic = ov.picture;
    const [w0, h0] = pic.size, [sw, sh] = pic.source, box = this.detailBox;
    box.innerHTML = `<h3>Image <span class="mono">${H}×${W}×3</span></h3>`;
    const two = el("div", "vx-twocol");
    this.pictureCanvas = el("canvas", "vx-picture");
    two.appendChild(this.pictureCanvas);
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

  /** The learner's whole picture with the part the model keeps (ov.picture.crop). */
  drawPicture() {
    const canvas = this.pictureCanvas, m = this.model, img = m.picture;
    if (!canvas || !canvas.isConnected || !img.complete || !img.naturalWidth || canvas.dataset.drawn) return;
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

  detailPatches() {
    const ov = this.model.ov, [rows, cols] = ov.layout.grid, [ph, pw] = ov.layout.patch;
    const box = this.detailBox;
    box.innerHTML = `<h3>Patches <span class="mono">${rows}×${cols} patches of ${ph}×${pw}×3</span></h3>`;
    const two = el("div", "vx-twocol");
    const tile = el("canvas", "vx-tile");
    tile.width = pw;
    tile.height = ph;
    this.patchTile = tile;
    two.appendChild(tile);
    two.appendChild(el("div", "", `<p>The image is cut into a grid of <b>${rows}×${cols} = ${rows * cols}</b>` +
      ` non-overlapping patches of ${ph}×${pw} pixels. Each patch is flattened into ` +
      `<b>${ph}·${pw}·3 = ${ph * pw * 3}</b> numbers.</p><p class="vx-patch-info"></p>` +
      `<p class="muted">Left: the patch under your pointer, pixel by pixel (the image's own pixels, enlarged).</p>`));
    box.appendChild(two);
  }

  detailTokens() {
    const m = this.model, ov = m.ov, [rows, cols] = ov.layout.grid, [ph, pw] = ov.layout.patch;
    const names = ov.layout.prefix_names, D = ov.dims.width, late = ov.layout.cls_joins_late;
    const box = this.detailBox;
    const seqLen = late ? m.np : ov.layout.tokens;
    box.innerHTML = `<h3>Tokens <span class="mono">${seqLen}×${D}</span></h3>`;
    const two = el("div", "vx-twocol");
    const canvas = el("canvas", "vx-tile");
    canvas.width = cols * 8;
    canvas.height = rows * 8;
    this.tokenMap = canvas;
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

  detailBlock(detail) {
    const st = this.state, m = this.model, b = m.blocks[st.block], ov = m.ov;
    const D = ov.dims.width, d = ov.dims.head_dim, H = b.heads;
    const box = this.detailBox;
    const kind = b.kind === "class" ? "class attention: only [CLS] asks" : "self-attention";
    box.innerHTML = `<h3>${esc(this.blockLabel(st.block))} <span class="mono">${kind} · ` +
      `${b.nq} quer${b.nq === 1 ? "y" : "ies"} × ${b.nk} keys × ${D} channels</span></h3>`;
    if (!detail) {
      box.appendChild(el("p", "vx-loading", "Fetching this block's full attention…"));
      return;
    }
    const gamma = (i) => detail.layer_scale ? `γ${i}·` : "";
    const hidden = ov.dims.mlp_hidden;
    const steps = [
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
    const grid = el("div", "vx-steps");
    grid.dataset.part = "steps";
    this.stepCards = steps.map(([id, name, formula, shape], i) => {
      const card = el("div", "vx-step");
      card.innerHTML = `<span class="vx-step-n">STEP ${i + 1}</span><span class="vx-step-name">${name}</span>` +
        `<span class="vx-step-formula">${esc(formula)}</span><span class="vx-step-shape">${shape}</span>`;
      const canvas = el("canvas");
      const [rows, cols] = m.grid;
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
      "Numbers: <b class='vx-step-token'></b>."));

    const attn = el("div", "vx-attn");
    const left = el("div");
    left.dataset.part = "matrix";
    left.innerHTML = `<div class="vx-axis">Attention matrix, ${H > 1 ? "<span class='vx-matrix-head'></span>" : ""}: rows = queries ↓, columns = keys →</div>`;
    const matrix = el("canvas", "vx-matrix");
    matrix.width = b.nk;
    matrix.height = b.nq;
    if (b.nq === 1) matrix.style.height = "40px";
    matrix.addEventListener("mousemove", (event) => this.hoverMatrix(event));
    matrix.addEventListener("mouseleave", () => { this.state.hoverKey = null; this.setHover(null, null); });
    this.matrixCanvas = matrix;
    left.appendChild(matrix);
    left.appendChild(el("div", "vx-note", "Each row scaled to its own largest value (rows are " +
      `probabilities that sum to 1). Sent to your browser as ${esc(ov.quantisation.attention)}.`));
    attn.appendChild(left);
    const right = el("div", "vx-qk");
    right.dataset.part = "qk";
    this.qkBox = right;
    attn.appendChild(right);
    this.qkObserver = new IntersectionObserver((entries) => {
      this.qkVisible = entries[entries.length - 1].isIntersecting;
      this.root.dataset.qkInView = String(this.qkVisible);
      this.requestVectors();
    });
    this.qkObserver.observe(right);
    box.appendChild(attn);
    this.matrixKey = null;
  }

  hoverMatrix(event) {
    const detail = this.details.get(this.state.block);
    if (!detail) return;
    const rect = this.matrixCanvas.getBoundingClientRect();
    const qi = Math.min(detail.nq - 1, Math.floor((event.clientY - rect.top) / rect.height * detail.nq));
    const kj = Math.min(detail.nk - 1, Math.floor((event.clientX - rect.left) / rect.width * detail.nk));
    this.state.hoverKey = kj - detail.prefix;
    const P = detail.prefix;
    if (detail.nq === 1) this.setHover(null, null, event);
    else if (qi < P) this.setHover(null, qi, event);
    else this.setHover(qi - P, null, event);
  }

  detailNorm() {
    const m = this.model, ov = m.ov;
    this.detailBox.innerHTML = `<h3>Final LayerNorm <span class="mono">${ov.layout.tokens}×${ov.dims.width}</span></h3>` +
      `<p>After the last block every token is normalised: its ${ov.dims.width} numbers are shifted to mean 0 and ` +
      `scaled to variance 1, then multiplied by a learned gain and shifted by a learned bias. ` +
      `Below: the length ‖x‖ of the tokens (the size of their ${ov.dims.width} numbers taken together) after each block, ` +
      `before that final norm.</p>`;
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.classList.add("vx-chart");
    this.normChart = svg;
    this.detailBox.appendChild(svg);
    this.detailBox.appendChild(el("div", "vx-note", "<b style='color:#888'>grey</b>: the median patch token · " +
      "<b style='color:#1f6feb'>blue</b>: the first token ([CLS] where there is one) · <b style='color:#0891b2'>cyan</b>: " +
      "the marked patch, or the one under your pointer · “in”: the tokens entering block 0; then each block's output."));
  }

  detailFeature() {
    const m = this.model, ov = m.ov, top = ov.prediction.top[0];
    const box = this.detailBox;
    const shape = ov.stages.find((s) => s.id === "feature");
    box.innerHTML = `<h3>Feature <span class="mono">${esc(shape.shape)}</span></h3><p>The model's summary of the image is ` +
      `${esc(shape.sentence)}, taken after the final norm: <b>${ov.dims.width}</b> numbers${ov.layout.prefix_names.includes("[DIST]") ? " each" : ""}.</p>`;
    if (m.feature) {
      const canvas = el("canvas", "vx-barcode");
      canvas.width = m.feature.length;
      canvas.height = 1;
      const ctx = canvas.getContext("2d"), img = ctx.createImageData(m.feature.length, 1);
      let peak = 0;
      for (const v of m.feature) peak = Math.max(peak, Math.abs(v));
      m.feature.forEach((v, i) => img.data.set([...diverging(v / (peak || 1)), 255], 4 * i));
      ctx.putImageData(img, 0, 0);
      box.appendChild(canvas);
      box.appendChild(el("div", "vx-note", `The ${m.feature.length} numbers of this image's feature, red positive, ` +
        `blue negative (largest |value| ${fmt(peak)}). This vector is what the memory bank compares.`));
    } else {
      box.appendChild(el("p", "", `A linear layer turns it into ${ov.prediction.output_shape.at(-1)} class scores; ` +
        `the largest here is “${esc(top.label)}”.`));
    }
  }

  detailHead() {
    const p = this.model.ov.prediction, box = this.detailBox;
    if (p.head === "knn") {
      box.innerHTML = `<h3>k-NN vote <span class="mono">k = ${p.k}, ${p.bank_size} bank entries</span></h3>` +
        `<p>This self-supervised model was never taught class names. Its feature is compared (cosine similarity) ` +
        `with a memory bank of labelled features; the ${p.k} most similar entries vote, each with weight ` +
        `exp(similarity / ${p.temperature}).</p>`;
      const weights = p.neighbours.map((n) => Math.exp(n.similarity / p.temperature));
      const total = weights.reduce((a, b) => a + b, 0);
      const table = el("table", "vx-table");
      table.innerHTML = "<tr><th>#</th><th>bank entry</th><th>label</th><th>cosine</th><th>share of the vote</th></tr>" +
        p.neighbours.map((n, i) => `<tr><td>${i + 1}</td><td class="mono">${esc(n.source)}</td><td>${esc(n.label)}</td>` +
          `<td class="num">${n.similarity.toFixed(3)}</td><td class="num">${pct(weights[i] / total)}</td></tr>`).join("");
      box.appendChild(table);
      if (p.neighbours.some((n) => n.similarity > 0.999)) {
        box.appendChild(el("div", "vx-note", "The nearest entry is this very image (cosine 1): the bank was " +
          "built from the sample gallery, views included. Try your own photo for a fair test."));
      }
    } else {
      box.innerHTML = `<h3>Linear head <span class="mono">${this.model.ov.dims.width}→${p.output_shape.at(-1)}</span></h3>` +
        `<p>One matrix multiplication gives a score (logit) for each of the ${p.classes} ImageNet classes; ` +
        `softmax turns the scores into probabilities that sum to 1.</p>`;
    }
  }

  detailTop5() {
    const p = this.model.ov.prediction, box = this.detailBox;
    box.innerHTML = `<h3>Prediction <span class="mono">top 5 of ${p.classes}</span></h3>`;
    const bars = el("div", "vx-bars");
    bars.dataset.part = "prediction";
    bars.innerHTML = p.top.map((t) => `<div class="vx-bar"><span>${esc(t.label)}</span>` +
      `<span class="vx-bar-track"><span class="vx-bar-fill" style="display:block;width:${(100 * t.probability).toFixed(1)}%"></span></span>` +
      `<span class="mono">${pct(t.probability)}</span></div>`).join("");
    box.appendChild(bars);
    box.appendChild(el("div", "vx-note", p.head === "knn"
      ? "Shares of the k-NN vote (weights exp(cos/T) summed per class), not calibrated probabilities."
      : "Softmax probabilities of the model's logits."));
    if (!p.open_set.known) {
      // the model must name a class: say when the picture is unlike all it knows
      box.appendChild(el("div", "vx-note vx-unknown", `This picture looks like none of what the model knows: ` +
        `${esc(p.open_set.why)}. The bars are guesses, not an answer.`));
    }
  }

  /** Parts of the detail panel that follow the pointer. */
  drawDetailLive() {
    const st = this.state;
    if (st.stage === "blocks") this.drawBlockLive();
    else if (st.stage === "image") this.drawPicture();
    else if (st.stage === "patches") this.drawPatchTile();
    else if (st.stage === "tokens") this.drawTokenMap();
    else if (st.stage === "norm") this.drawNormChart();
  }

  drawPatchTile() {
    if (!this.patchTile || !this.patchTile.isConnected) return;
    const m = this.model, [rows, cols] = m.grid, st = this.state;
    const p = st.hover !== null ? st.hover : st.pinned !== null ? st.pinned : (m.grid[0] >> 1) * m.grid[1] + (m.grid[1] >> 1);
    const r = Math.floor(p / cols), c = p % cols;
    const ctx = this.patchTile.getContext("2d"), img = m.image;
    if (img.complete && img.naturalWidth) {
      const sw = img.naturalWidth / cols, sh = img.naturalHeight / rows;
      ctx.imageSmoothingEnabled = false;
      ctx.drawImage(img, c * sw, r * sh, sw, sh, 0, 0, this.patchTile.width, this.patchTile.height);
    }
    const prefix = m.blocks[0].prefix;
    this.detailBox.querySelector(".vx-patch-info").innerHTML = `Patch <b>${p}</b> = row ${r}, column ${c}: ` +
      `it becomes token number <b>${prefix + p}</b> in the sequence (after ${prefix} prefix token${prefix === 1 ? "" : "s"}).`;
  }

  drawTokenMap() {
    if (!this.tokenMap || !this.tokenMap.isConnected) return;
    const m = this.model, P = m.embedNorms.length - m.np, values = m.embedNorms.subarray(P);
    const ctx = this.tokenMap.getContext("2d");
    this.paintMap(ctx, values, this.tokenMap.width, this.tokenMap.height, { opaque: true, minmax: true });
    const st = this.state, p = st.hover !== null ? st.hover : st.pinned;
    if (p !== null) this.outlinePatch(ctx, p, this.tokenMap.width, this.tokenMap.height, "#22d3ee");
    const [lo, hi] = minMax(values);
    this.detailBox.querySelector(".vx-token-info").textContent = (p !== null
      ? `patch ${p}: ‖x‖ = ${fmt(values[p])}; ` : "") + `patch tokens range ${fmt(lo)}–${fmt(hi)}` +
      (P ? `; ${m.ov.layout.prefix_names[0]} ${fmt(m.embedNorms[0])}` : "");
  }

  drawNormChart() {
    const svg = this.normChart;
    if (!svg || !svg.isConnected) return;
    const m = this.model, rect = svg.getBoundingClientRect(), W = rect.width || 500, H = rect.height || 170;
    const font = Math.round(11 * (this.root.classList.contains("present") ? 1.6 : 1));
    const pad = { l: 4.2 * font, r: font, t: 10, b: 2.6 * font }, n = m.blocks.length, st = this.state;  // r: room for the last tick label
    // point 0: the tokens entering block 0; point i: the output of block i - 1
    const traces = [m.embedNorms, ...m.normOut];
    const patchStart = (v) => v.length - m.np;
    const medianPatch = traces.map((v) => {
      if (patchStart(v) < 0) return null;
      const sorted = Float32Array.from(v.subarray(patchStart(v))).sort(), mid = sorted.length >> 1;
      return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
    });
    const first = traces.map((v) => (patchStart(v) !== 0 ? v[0] : null));
    const series = [{ values: medianPatch, colour: "#888", width: 2 }, { values: first, colour: "#1f6feb", width: 2 }];
    const p = st.hover !== null ? st.hover : st.pinned;
    if (p !== null) {
      series.push({ values: traces.map((v) => (patchStart(v) >= 0 ? v[patchStart(v) + p] : null)),
        colour: "#0891b2", width: 3 });
    }
    const all = series.flatMap((s) => s.values.filter((v) => v !== null));
    const top = Math.max(...all) * 1.05;
    const x = (i) => pad.l + (W - pad.l - pad.r) * i / n;
    const y = (v) => H - pad.b - (H - pad.t - pad.b) * v / top;
    const label = (tx, ty, text, anchor, extra = "") =>
      `<text x="${tx}" y="${ty}" font-size="${font}" text-anchor="${anchor}" fill="currentColor" opacity="0.75" ${extra}>${text}</text>`;
    let html = `<line x1="${pad.l}" y1="${H - pad.b}" x2="${W - pad.r}" y2="${H - pad.b}" stroke="currentColor" stroke-opacity="0.3"/>`;
    for (const tick of [0, top / 2, top]) html += label(pad.l - 6, y(tick) + font / 3, fmt(tick, 2), "end");
    html += label(pad.l + 6, pad.t + font, "‖x‖", "start", 'font-weight="700"');
    for (let i = 0; i <= n; i += Math.max(1, Math.ceil(n / 13))) {  // 0: input; i: block i-1's output
      html += label(x(i), H - pad.b + font * 1.2, i ? i - 1 : "in", "middle");
    }
    html += label((pad.l + W - pad.r) / 2, H - 3, "after block", "middle");
    for (const s of series) {
      const points = s.values.map((v, i) => (v === null ? null : `${x(i)},${y(v)}`)).filter(Boolean).join(" ");
      html += `<polyline fill="none" stroke="${s.colour}" stroke-width="${s.width}" points="${points}"/>`;
    }
    html += `<line x1="${x(st.block + 1)}" x2="${x(st.block + 1)}" y1="${pad.t}" y2="${H - pad.b}" stroke="#f59e0b" stroke-dasharray="4 3"/>`;
    svg.innerHTML = html;
  }

  drawBlockLive() {
    const st = this.state, detail = this.details.get(st.block);
    if (!detail || !this.stepCards || !this.matrixCanvas || !this.matrixCanvas.isConnected) return;
    const m = this.model, b = m.blocks[st.block], head = this.headOf();
    const query = this.queryToken(st.block);
    const qi = query && !(b.kind === "class" && query.qi > 0) ? query.qi : (b.prefix ? 0 : null);
    const P = detail.prefix, np = m.np;
    for (const card of this.stepCards) {
      const ctx = card.canvas.getContext("2d"), W = card.canvas.width, H = card.canvas.height;
      let values = null, shown = null;
      if (card.id === "attn") {
        const row = qi === null ? this.queryRow(st.block, head) : this.attentionRow(detail, qi, head);
        values = row.patch;
        shown = qi === null ? null : (qi < P ? row.prefix[qi] : row.patch[qi - P]);
        card.value.textContent = qi === null ? "mean patch row" : `to itself: ${pct(shown)}`;
      } else if (card.id === "q") {
        const all = this.queryNorms(detail, head >= 0 ? head : 0);
        values = all.subarray(detail.nq - np);
        const shownHead = head >= 0 ? head : 0;
        card.value.textContent = qi === null ? `‖q‖, head ${shownHead}` : `‖q‖ = ${fmt(all[qi])} (head ${shownHead})`;
        if (detail.nq < np) values = null;
      } else {
        const norms = card.id === "context" && head >= 0
          ? detail.contextHeads.subarray(head * detail.nq, (head + 1) * detail.nq) : detail.norms[card.id];
        const offset = norms.length - np;
        values = offset >= 0 ? norms.subarray(offset) : null;
        card.value.textContent = qi === null || qi >= norms.length ? "" :
          `‖·‖ = ${fmt(norms[qi])}${card.id === "context" && head >= 0 ? ` (head ${head})` : ""}`;
      }
      if (values && values.length === np) {
        this.paintMap(ctx, values, W, H, { opaque: true, minmax: card.id !== "attn" });
        const p = st.hover !== null ? st.hover : st.pinned;
        if (p !== null) this.outlinePatch(ctx, p, W, H, "#22d3ee");
      } else {
        ctx.fillStyle = "#ddd";
        ctx.fillRect(0, 0, W, H);
        ctx.fillStyle = "#555";
        ctx.font = `${Math.round(W / 9)}px sans-serif`;
        ctx.textAlign = "center";
        ctx.fillText("[CLS] only", W / 2, H / 2);
      }
    }
    const tokenLabel = this.detailBox.querySelector(".vx-step-token");
    if (tokenLabel) {
      const names = m.ov.layout.prefix_names, [, cols] = m.grid;
      tokenLabel.textContent = qi === null ? "hover a patch" : qi < P ? names[qi]
        : `patch ${qi - P} (row ${Math.floor((qi - P) / cols)}, col ${(qi - P) % cols})`;
    }
    this.drawMatrix(detail, head, qi);
    this.drawQK(detail, head, qi);
  }

  /** ‖q‖ of every query token of one head in an opened block (computed in Python). */
  queryNorms(detail, head) {
    return detail.qNorms.subarray(head * detail.nq, (head + 1) * detail.nq);
  }

  drawMatrix(detail, head, qi) {
    const canvas = this.matrixCanvas, ctx = canvas.getContext("2d");
    const key = `${detail.block}:${head}`;
    if (this.matrixKey !== key) {
      const img = ctx.createImageData(detail.nk, detail.nq), lut = this.model.lut, P = detail.prefix;
      for (let q = 0; q < detail.nq; q++) {
        const row = this.attentionRow(detail, q, head);
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
      this.matrixImage = img;
      this.matrixKey = key;
      const label = this.detailBox.querySelector(".vx-matrix-head");
      if (label) label.textContent = head >= 0 ? `head ${head}` : `mean of ${detail.heads} heads`;
    }
    ctx.putImageData(this.matrixImage, 0, 0);
    ctx.fillStyle = "rgba(34, 211, 238, 0.9)";
    if (qi !== null && detail.nq > 1) ctx.fillRect(0, qi, detail.nk, 1);
    if (this.state.hoverKey !== null) {
      ctx.fillStyle = "rgba(253, 224, 71, 0.8)";
      ctx.fillRect(this.state.hoverKey + detail.prefix, 0, 1, detail.nq);
    }
  }

  /** q of the query, k of one key, their products and the softmax, for one head. */
  drawQK(detail, head, qi) {
    const box = this.qkBox, m = this.model, h = head >= 0 ? head : 0, d = detail.head_dim;
    const names = m.ov.layout.prefix_names, [, cols] = m.grid, P = detail.prefix;
    const tokenName = (t) => t < P ? names[t] : `patch ${t - P} (r${Math.floor((t - P) / cols)}, c${(t - P) % cols})`;
    if (!detail.vectors) {  // asked for while this panel is in view
      this.requestVectors();
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
    const row = this.attentionRow(detail, q, h);
    const captured = (j) => j < P ? row.prefix[j] : row.patch[j - P];
    let key = this.state.hoverKey !== null ? this.state.hoverKey + P : -1;
    if (key < 0 || key >= detail.nk) {
      let best = 0;
      for (let j = 1; j < detail.nk; j++) if (captured(j) > captured(best)) best = j;
      key = best;
    }
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
      `Recomputed here from the captured q and k (${esc(m.ov.quantisation.qk)}). Hover the matrix to ` +
      `pick the key; the image or the sequence to pick the query. Stripes: red positive, blue negative.</div>`;
    const paint = (name, values) => {
      const canvas = box.querySelector(`canvas[data-v="${name}"]`);
      canvas.width = values.length;
      canvas.height = 1;
      const ctx = canvas.getContext("2d"), img = ctx.createImageData(values.length, 1);
      let peak = 0;
      for (const v of values) peak = Math.max(peak, Math.abs(v));
      values.forEach((v, i) => img.data.set([...diverging(v / (peak || 1)), 255], 4 * i));
      ctx.putImageData(img, 0, 0);
    };
    paint("q", qv);
    paint("k", kv);
    paint("p", products);
  }
}

/** How far to scroll so a step's parts (their boxes, in order) show between `free` and `end`:
 * all of them when they fit; on a short screen (a phone) as many leading parts as end on
 * screen with at least half of the first still in view (the head chips under the picture,
 * not the picture alone); else from the top of the first. */
function spotScroll(rects, free, end) {
  for (let count = rects.length; count >= 1; count--) {
    const shown = rects.slice(0, count);
    const top = Math.min(...shown.map((r) => r.top)), bottom = Math.max(...shown.map((r) => r.bottom));
    if (bottom - top <= end - free) return top < free ? top - free : Math.max(0, bottom - end);
    const first = rects[0], delta = bottom - end;
    const firstInView = Math.min(first.bottom - delta, end) - Math.max(first.top - delta, free);
    if (count > 1 && firstInView >= first.height / 2) return delta;
  }
  return rects[0].top - free;
}

/** A cheap fingerprint of a map (tests compare overlays without reading pixels). */
function checksum(values) {
  let s = 0;
  for (let i = 0; i < values.length; i++) s += values[i] * ((i % 97) + 1);
  return s.toPrecision(8);
}
