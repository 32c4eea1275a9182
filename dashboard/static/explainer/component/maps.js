/* What the picture is coloured by: attention rows (per head or averaged), rollout and DAAM
 * frames, and the map the current state asks for, with its title. Rows are cached. */

import { maxOf, pct, patchName } from "./format.js";

export class Maps {
  constructor(model, store, details) {
    this.model = model;
    this.store = store;
    this.details = details;  // block -> decoded detail
    this.rowCache = new Map();
  }

  get state() { return this.store.state; }

  blockLabel(block) {
    return this.model.blocks[block].label;
  }

  /** The blocks the overlay has a frame for (rollout and DAAM skip some). */
  frameBlocks(overlay = this.state.overlay) {
    const m = this.model;
    if (overlay === "rollout") return m.rollout.blocks;
    if (overlay === "daam") return m.daam ? m.daam.blocks : [];
    return m.blocks.map((b) => b.index);
  }

  frameIndexOf(block, overlay = this.state.overlay) {
    const at = this.frameBlocks(overlay).indexOf(block);
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

  /** The query token the learner points at in `block`: {qi, label} or null for [CLS]. */
  queryToken(block) {
    const st = this.state, b = this.model.blocks[block];
    const patch = st.hover !== null ? st.hover : st.pinned;
    if (st.hoverPrefix !== null && st.hoverPrefix < b.prefix) {
      return { qi: st.hoverPrefix, label: this.model.ov.layout.prefix_names[st.hoverPrefix] || "prefix" };
    }
    if (patch === null) return null;
    const [, cols] = this.model.grid;
    return { qi: b.prefix + patch, patch, label: patchName(patch, cols) };
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
    const frame = this.frameBlocks().indexOf(block);
    if (st.overlay === "daam" && !m.daam) return { title: m.daamPending || "DAAM is not available for this model." };
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

  /** While playing: the frame at `position`, blended into the next over its last 30 %. */
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
}
