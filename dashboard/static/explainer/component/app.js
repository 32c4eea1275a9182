/* The Explainer: one forward pass of a Vision Transformer, drawn in the browser. It keeps
 * what the host sent (the overview, opened blocks' details), builds the parts, and redraws
 * them from the state store: everything when the view changes, only the parts that follow
 * the pointer when it moves. Hover and play are drawn here on plain canvases with no
 * request to the server; see sync.js for what is asked of it.
 * This is the one place that wires the parts: each gets only what it uses (the store; `data`,
 * what the host sent, which only this file changes; the maps and the painter), never this
 * object or another part, and asks for anything done elsewhere by dispatching one of the
 * actions named in `actions()` to the store. */

import { AnswerPanel } from "./answer.js";
import { BlockStrip } from "./block-strip.js";
import { Painter } from "./colour.js";
import { Controls } from "./controls.js";
import { DetailPanel } from "./detail.js";
import { el, scroller } from "./dom.js";
import { esc } from "./format.js";
import { Maps } from "./maps.js";
import { METRICS } from "./metrics.js";
import { Picture } from "./picture.js";
import { Pipeline } from "./pipeline.js";
import { Player } from "./player.js";
import { decodeDaam, decodeDetail, decodeOverview, decodeVectors } from "./protocol.js";
import { Sequence } from "./sequence.js";
import { REDRAW, Store } from "./store.js";
import { Sync } from "./sync.js";
import { Tour } from "./tour.js";
import { ViewTools } from "./view-tools.js";

const DETAILS_KEPT = 8;  // opened blocks kept in the browser (0.4 MB each, 0.8 with q and k)
const PLAIN_STAGES = ["image", "patches", "tokens"];  // they show the picture without a map

export class Explainer {
  constructor(parent) {
    this.parent = parent;
    this.root = el("div", "vx");
    this.root.setAttribute("data-testid", "vit-explainer");
    parent.appendChild(this.root);
    // what the host sent, read by the parts and changed only here
    this.data = { signature: null, model: null, maps: null, painter: null,
      details: new Map(),  // block -> decoded detail (this image and model)
      liveSwitch: false,  // a server runs the model again when heads are switched off
      secondOpinion: null, link: null, presenting: false };
    this.store = new Store();
    this.store.subscribe((redraw) => this.redraw(redraw));
    this.store.handle(this.actions());
    this.send = null;  // the host's { setStateValue, setTriggerValue }
    const parts = { store: this.store, data: this.data };
    this.sync = new Sync({ ...parts, host: () => this.send });
    this.player = new Player({ ...parts, connected: () => this.root.isConnected });
    this.onKey = (event) => this.handleKey(event);
    document.addEventListener("keydown", this.onKey);
  }

  get state() { return this.store.state; }
  get signature() { return this.data.signature; }
  get model() { return this.data.model; }
  get details() { return this.data.details; }

  /** What parts may ask for (store.dispatch(name, ...)), and who does it. */
  actions() {
    return {
      hover: (patch, prefix, event) => this.setHover(patch, prefix, event),
      showBlocks: () => this.showBlocks(),
      selectStage: (id) => this.selectStage(id),
      selectBlock: (block, open) => this.selectBlock(block, open),
      switchHeads: (off) => this.switchHeads(off),
      toggleHead: (block, head) => this.toggleHead(block, head),
      play: () => this.player.play(),
      stop: () => this.player.stop(),
      requestBlock: (block) => this.sync.requestBlock(block),
      requestVectors: () => this.sync.requestVectors(),
      qkVisible: (visible) => {  // the query · key panel came into view, or left it
        this.sync.panelInView(visible);
        this.mark("qkInView", String(visible));
        this.sync.requestVectors();
      },
      forgetQk: () => this.sync.panelInView(false),  // the panel is gone (another stage)
      sendNow: () => this.sync.sendNow(),
      sendView: (extra) => this.sync.sendView(extra),
      loading: () => this.showLoading(),
      navigate: (page) => this.send.setTriggerValue("navigate", page),
      mark: (name, value) => this.mark(name, value),
    };
  }

  /** Streamlit re-created the element it lives in: carry on there, state and all. */
  moveTo(parent) {
    this.parent = parent;
    parent.appendChild(this.root);
    document.addEventListener("keydown", this.onKey);  // the same listener: added once
    return this;
  }

  /* ---------- data in ---------- */

  update(data) {
    METRICS.updates += 1;
    if (!this.root.isConnected) return;
    this.root.classList.toggle("present", !!data.presentation);
    const known = this.data;
    known.presenting = !!data.presentation;
    known.link = data.link;
    known.secondOpinion = data.second_opinion || null;  // the CNN's answer, for a picture the bank does not know
    known.liveSwitch = !!(data.switch && data.switch.live);
    // a reply without a result while heads are off answers an older view: keep the last
    if (known.liveSwitch && (data.switch.result || !this.state.off.length)) {
      this.store.set({ switchResult: data.switch.result }, REDRAW.none);
    }
    if (data.signature !== this.signature) {
      // Python believed this browser held the overview (a page element remounted us):
      // ask again, saying we hold nothing.
      if (!data.overview) return this.sync.requestEverything();
      this.start(data);
    }
    if (data.daam && !this.model.daam) this.receiveDaam(data.daam);
    if (data.tour.steps) this.tour.steps = data.tour.steps;
    this.tour.resume = data.tour.resume;
    if (data.detail) this.keepDetail(data.detail);
    if (data.vectors) this.keepVectors(data.vectors);
    this.renderAll();
    this.tour.afterData();
    if (METRICS.readyAt === null) METRICS.readyAt = performance.now();
  }

  /** A new overview (model, weights, image or head): decode it, set the view a link or
   * the host asks for, build the parts. */
  start(data) {
    const known = this.data;
    known.signature = data.signature;
    known.details.clear();
    known.model = decodeOverview(data.overview);
    this.loadPictures(data.overview);
    known.maps = new Maps(known.model, this.store, known.details);
    known.painter = new Painter(known.model.lut, known.model.grid);
    this.tour = new Tour({ store: this.store, data: known, maps: known.maps, page: this.page() },
      data.tour.steps);
    const start = data.initial;  // a `?vx_...` link may name head, map and pinned patch
    const overlay = start.overlay || "attention";
    this.store.set({ block: start.block, stage: start.stage, head: start.head ?? -1, overlay,
      hover: null, hoverPrefix: null, pinned: start.patch ?? null, playing: false,
      previewBlock: null, previewHead: null, hoverKey: null, tour: 0, off: [], targets: [], marks: [],
      position: known.maps.frameIndexOf(start.block, overlay) }, REDRAW.none);
    this.build();
    if (data.tour.active) this.tour.applyStep(data.tour.active, false);
  }

  /** DAAM computed after the overview (the model in the browser runs its backward last). */
  receiveDaam(daam) {
    const m = this.model;
    m.ov.daam = daam;
    m.daam = decodeDaam(daam);
    m.daamPending = null;
    this.store.set({ position: this.data.maps.frameIndexOf(this.state.block, this.state.overlay) }, REDRAW.none);
  }

  loadPictures(ov) {
    const m = this.model;
    m.image = new Image();
    m.image.onload = () => this.renderAll();
    m.image.src = ov.image;
    m.picture = new Image();
    m.picture.onload = () => this.detail.pictureLoaded();
    m.picture.src = ov.picture.image;
  }

  /** Keep a block's detail; forget the oldest beyond DETAILS_KEPT (never the shown one). */
  keepDetail(detail) {
    this.details.delete(detail.block);
    this.details.set(detail.block, decodeDetail(detail));
    for (const block of this.details.keys()) {
      if (this.details.size <= DETAILS_KEPT) break;
      if (block !== this.state.block) this.details.delete(block);
    }
  }

  /** A block's queries and keys, kept with its detail (and forgotten with it). */
  keepVectors(vectors) {
    const detail = this.details.get(vectors.block);
    if (detail) detail.vectors = decodeVectors(vectors);
  }

  /* ---------- the parts ---------- */

  build() {
    const ov = this.model.ov, root = this.root, data = this.data;
    const parts = { store: this.store, data, maps: data.maps, painter: data.painter };
    root.innerHTML = "";
    root.dataset.grid = this.model.grid.join("x");
    if (ov.model.random) {
      root.appendChild(el("div", "vx-random",
        `${esc(ov.model.label)}: untrained random weights. Shapes and code paths are real; ` +
        "the maps and the prediction explain nothing."));
    }
    root.appendChild(this.tour.box);
    root.appendChild(this.tour.offer);
    this.pipeline = new Pipeline(parts);
    this.strip = new BlockStrip(parts);
    this.pipeline.element.appendChild(this.strip.element);
    root.appendChild(this.pipeline.element);
    this.sequence = new Sequence(parts);
    root.appendChild(this.sequence.element);
    const main = el("div", "vx-main");
    this.picture = new Picture(parts);
    // "Save PNG" copies the picture's canvas and reads its colour scale: only those two
    this.tools = new ViewTools(parts, { canvas: this.picture.canvas,
      scaleText: () => this.picture.legendMax.textContent });
    this.controls = new Controls(parts);
    this.picture.element.appendChild(this.tools.element);
    this.picture.element.appendChild(this.controls.element);
    this.answer = new AnswerPanel(parts);
    this.picture.element.appendChild(this.answer.element);
    main.appendChild(this.picture.element);
    this.detail = new DetailPanel(parts);
    main.appendChild(this.detail.element);
    root.appendChild(main);
  }

  /** Everything drawn goes until the overview arrives (asked again, sync.js). */
  showLoading() {
    this.root.textContent = "Loading the ViT Explainer…";
  }

  /** A fact about the view for tests and tools, written on the root (its owner): parts
   * report through this and write no one else's element. */
  mark(name, value) {
    this.root.dataset[name] = value;
  }

  /** What the tour measures and changes to place a step's targets on screen (the root and
   * the picture's size are this object's; the tour writes neither). */
  page() {
    return {
      connected: () => this.root.isConnected,
      observeResize: (observer) => observer.observe(this.root),
      scroller: () => scroller(this.root),
      targets: () => [...this.root.querySelectorAll("[data-tour-target]")],
      pictureRect: () => this.picture.canvas.getBoundingClientRect(),
      pictureSize: () => this.pictureSize(),
      fitPicture: (px) => this.fitPicture(px),
    };
  }

  /** The picture's displayed size: `px` while a tour step needs room (tour.js), its own
   * size (null) otherwise. The root's --vx-image sizes it and the column it sits in. */
  fitPicture(px) {
    if (px === null) this.root.style.removeProperty("--vx-image");
    else this.root.style.setProperty("--vx-image", `${Math.floor(px)}px`);
  }

  /** The picture's own displayed size (px), whatever a tour step made of it. */
  pictureSize() {
    const fitted = this.root.style.getPropertyValue("--vx-image");
    this.root.style.removeProperty("--vx-image");
    const size = this.picture.canvas.getBoundingClientRect().width;
    if (fitted) this.root.style.setProperty("--vx-image", fitted);
    return size;
  }

  redraw(redraw) {
    if (redraw === REDRAW.all) this.renderAll();
    else if (redraw === REDRAW.chrome) this.renderChrome();
    else if (redraw === REDRAW.live) this.drawLive();
    else if (redraw === REDRAW.frame) this.drawFrame();
  }

  renderAll() {
    if (!this.model) return;
    this.tour.render();
    this.mark("tour", String(this.state.tour));
    this.mark("resume", String(this.tour.resumeStep()));
    this.renderChrome();
    this.detail.render();
    this.drawLive();
  }

  /** Buttons, selections and labels (cheap, no canvases except thumbnails). */
  renderChrome() {
    if (!this.model) return;
    const st = this.state, r = this.root.dataset;
    this.pipeline.render();
    this.controls.render();
    this.answer.render();
    r.off = st.off.map((pair) => pair.join(".")).join(",");
    r.block = String(st.block);
    r.stage = st.stage;
    r.overlay = st.overlay;
    r.head = String(st.head);
    r.playing = String(st.playing);
    r.detail = [...this.details.keys()].join(",");
    r.qk = this.sync.blocksWithVectors().join(",");
    this.strip.render();
    this.detail.renderPlaying();
  }

  /** Everything that follows the pointer: image, sequence, head chips, live detail parts. */
  drawLive() {
    if (!this.model) return;
    this.picture.draw();
    this.sequence.draw();
    this.controls.draw();
    this.detail.draw();
    this.strip.draw();
  }

  /** One frame of the player: the parts that show the moving map. */
  drawFrame() {
    if (!this.model) return;
    this.picture.draw();
    this.sequence.draw();
  }

  /* ---------- interaction shared by the parts ---------- */

  /** The pointer is on a patch (or a prefix token, or nothing): redraw what follows it and
   * time it (METRICS.hover: to drawn; hoverFrame: to the next frame). */
  setHover(patch, prefix, event) {
    const start = event ? event.timeStamp : performance.now();
    this.store.set({ hover: patch, hoverPrefix: prefix }, REDRAW.live);
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
    if (!PLAIN_STAGES.includes(this.state.stage)) return;
    this.store.set({ stage: "blocks" }, REDRAW.none);
    this.sync.requestBlock(this.state.block);
  }

  /** Switch these (block, head) pairs off, all others on: the server runs the model
   * again without them (one rerun) and the answer bars follow. */
  switchHeads(off) {
    const sorted = [...off].sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    this.store.set({ off: sorted }, REDRAW.chrome);
    if (this.data.liveSwitch) this.sync.sendNow();
  }

  toggleHead(block, head) {
    const off = this.state.off, on = off.some(([b, h]) => b === block && h === head);
    this.switchHeads(on ? off.filter(([b, h]) => b !== block || h !== head) : [...off, [block, head]]);
  }

  selectStage(id) {
    this.store.set({ stage: id }, REDRAW.none);
    if (id === "blocks") this.sync.requestBlock(this.state.block);
    this.store.notify(REDRAW.all);
  }

  selectBlock(block, open) {
    const changes = { block, position: this.data.maps.frameIndexOf(block) };
    if (open) changes.stage = "blocks";
    this.sync.requestBlock(block);
    this.store.set(changes);
  }

  handleKey(event) {
    if (!this.root.isConnected) {
      document.removeEventListener("keydown", this.onKey);
      return;
    }
    if (this.tour) this.tour.handleKey(event);
  }
}
