/* The controls under the picture: which map (attention, rollout, DAAM), which head (a chip
 * per head, each a small map; hover previews; its power switch turns the head off in the
 * open block), and the block player (play, scrubber). */

import { el, markTargets } from "./dom.js";
import { attentionShare, esc } from "./format.js";
import { REDRAW } from "./store.js";

// a power symbol drawn, not a character: the ⏻ glyph is missing from common fonts
const POWER = `<svg viewBox="0 0 16 16" aria-hidden="true"><path d="M8 2v6M4.6 4.4a5 5 0 1 0 6.8 0" ` +
  `fill="none" stroke="currentColor" stroke-width="2" stroke-linecap="round"/></svg>`;

export class Controls {
  constructor({ store, data, maps, painter }) {
    Object.assign(this, { store, data, maps, painter });
    const box = el("div", "vx-controls");
    box.appendChild(this.buildOverlays());
    box.appendChild(this.buildHeads());
    // rollout and DAAM average the heads: say so, rather than offer a choice that changes nothing
    this.headsNote = el("div", "vx-note vx-heads-note", "");
    box.appendChild(this.headsNote);
    box.appendChild(this.buildPlayer());
    this.element = box;
  }

  buildOverlays() {
    const store = this.store, overlays = [["attention", "Attention"], ["rollout", "Rollout so far"]];
    if (this.data.model.daam || this.data.model.daamPending) overlays.push(["daam", "DAAM so far"]);
    const seg = el("div", "vx-row");
    seg.dataset.part = "overlay";
    this.overlayRow = seg;
    seg.innerHTML = `<span class="vx-label">Map</span><span class="vx-seg">${overlays.map(([id, text]) =>
      `<button data-overlay="${id}">${text}</button>`).join("")}</span>`;
    seg.querySelectorAll("button").forEach((button) => button.addEventListener("click", () => {
      const overlay = button.dataset.overlay;
      store.dispatch("showBlocks");
      store.set({ overlay, position: this.maps.frameIndexOf(store.state.block, overlay) });
    }));
    this.overlayButtons = seg.querySelectorAll("button");
    return seg;
  }

  buildHeads() {
    const store = this.store, model = this.data.model, heads = el("div", "vx-row");
    heads.dataset.part = "heads";
    heads.innerHTML = `<span class="vx-label">Head</span>`;
    this.headRow = heads;
    const chips = el("div", "vx-heads");
    this.headChips = [];
    const [rows, cols] = model.grid;
    for (let h = -1; h < model.heads; h++) {
      const chip = el("button", "vx-headchip");
      chip.dataset.head = h;
      const canvas = el("canvas");
      canvas.width = cols * 3;
      canvas.height = rows * 3;
      chip.appendChild(canvas);
      chip.appendChild(el("span", "", h < 0 ? "mean" : String(h)));
      chip.title = h < 0 ? "Average of all heads" : `Head ${h}: hover to preview, click to choose`;
      chip.addEventListener("mouseenter", () => store.set({ previewHead: h }, REDRAW.live));
      chip.addEventListener("mouseleave", () => store.set({ previewHead: null }, REDRAW.live));
      chip.addEventListener("click", () => { store.dispatch("showBlocks"); store.set({ head: h }); });
      const wrap = el("span", "vx-chipwrap");
      wrap.appendChild(chip);
      let off = null;
      if (h >= 0) {  // the mean is no head to switch off
        off = el("button", "vx-headoff", POWER);
        off.addEventListener("click", () => store.dispatch("toggleHead", store.state.block, h));
        wrap.appendChild(off);
      }
      chips.appendChild(wrap);
      this.headChips.push({ chip, canvas, head: h, off });
    }
    heads.appendChild(chips);
    // the block's attention sinks, with the share the tour quotes (xai_core.analysis.sinks)
    this.sinkNote = el("div", "vx-note vx-sink-note", "");
    heads.appendChild(this.sinkNote);
    return heads;
  }

  buildPlayer() {
    const store = this.store, player = el("div", "vx-player");
    player.dataset.part = "player";
    this.playerRow = player;
    player.innerHTML = `<span class="vx-label">Block</span><button class="vx-play" title="Play / pause (block by block)">▶</button>` +
      `<input type="range" min="0" max="${this.data.model.blocks.length - 1}" step="1" value="0" aria-label="Block">` +
      `<span class="vx-blocknum"></span>`;
    this.playButton = player.querySelector("button");
    this.scrubber = player.querySelector("input");
    this.blockNum = player.querySelector(".vx-blocknum");
    this.playButton.addEventListener("click", () => store.dispatch(store.state.playing ? "stop" : "play"));
    this.scrubber.addEventListener("input", () => {
      store.dispatch("stop");
      store.dispatch("showBlocks");
      store.dispatch("selectBlock", Number(this.scrubber.value), false);
    });
    return player;
  }

  render() {
    const st = this.store.state, m = this.data.model;
    markTargets([this.overlayRow, this.headRow, this.playerRow], st.targets);
    this.overlayButtons.forEach((b) => b.classList.toggle("on", b.dataset.overlay === st.overlay));
    const b = m.blocks[st.block];
    // heads_off acts on self-attention blocks (xai_core.interventions); the file has no server
    const switchable = this.data.liveSwitch && b.kind === "self";
    this.headChips.forEach(({ chip, head, off }) => {
      chip.classList.toggle("on", head === st.head);
      const isOff = st.off.some(([block, h]) => block === st.block && h === head);
      chip.classList.toggle("off", isOff);
      if (!off) return;
      off.hidden = !switchable && !isOff;
      off.disabled = !switchable;
      off.setAttribute("aria-pressed", String(isOff));
      off.title = off.ariaLabel = isOff ? `Switch head ${head} of block ${st.block} back on`
        : `Switch head ${head} of block ${st.block} off: the model runs again without it`;
    });
    const sinks = m.ov.sinks.heads.filter((s) => s.block === st.block);
    this.sinkNote.innerHTML = sinks.length ? `Attention ${sinks.length > 1 ? "sinks" : "sink"} here: ` +
      sinks.map((s) => `head ${s.head} sends ${attentionShare(s.score)} to ${esc(s.key)}`).join("; ") : "";
    this.playButton.textContent = st.playing ? "❚❚" : "▶";
    this.playButton.setAttribute("aria-label", st.playing ? "Pause" : "Play");
    this.scrubber.value = String(st.block);
    this.blockNum.textContent = `${st.block} of 0–${m.blocks.length - 1}`;
    this.headsNote.textContent = st.overlay === "attention" ? "" : `${st.overlay === "rollout" ? "Rollout" : "DAAM"} ` +
      "uses all heads together; a head you pick applies when you point at a patch.";
  }

  /** Each head chip's map: the row of the query token pointed at, else the block's row. */
  draw() {
    const st = this.store.state, maps = this.maps, b = this.data.model.blocks[st.block];
    const detail = this.data.details.get(st.block);
    this.headRow.classList.toggle("vx-dim", st.overlay !== "attention" && st.hover === null && st.pinned === null);
    const query = maps.queryToken(st.block);
    this.headChips.forEach(({ canvas, head, chip }) => {
      let row;
      if (query && detail && !(b.kind === "class" && query.qi > 0)) row = maps.attentionRow(detail, query.qi, head);
      else row = maps.queryRow(st.block, head);
      this.painter.paintMap(canvas.getContext("2d"), row.patch, canvas.width, canvas.height, { opaque: true });
      chip.classList.toggle("previewing", head === st.previewHead);
    });
  }
}
