/* The guided tour: a sticky box over the Explainer with the step's text, back / next, one
 * dot per step and "go deeper"; each step sets the view (stage, block, head, map, pinned
 * patch), spotlights the parts it talks about and scrolls them into view below the box.
 * Keys: → starts or resumes it, ← → (or a presenter's clicker) move, Esc closes. */

import { el, isEditable, scroller } from "./dom.js";
import { esc, rich } from "./format.js";
import { REDRAW } from "./store.js";

const NAMED_PATCH = /\bpatch (\d+) \(row \d+, col/;  // as the tour's sentences name one

export class Tour {
  constructor(app, steps) {
    this.app = app;
    this.steps = steps;
    this.resume = null;  // the step to offer resuming at (after a deeper page)
    this.spotted = null;  // the step shown last and when: {step, at}
    this.box = el("div", "vx-tour hidden");
    this.offer = el("div", "vx-tour-offer");
  }

  goTo(step) {
    if (step < 1 || step > this.steps.length) return;
    this.applyStep(step, true);
  }

  close() {
    this.app.state.tour = 0;
    this.resume = null;
    this.clearSpotlight();
    this.app.store.notify(REDRAW.all);
    this.app.sync.sendView({ dismissed: true });
  }

  applyStep(step, send) {
    const s = this.steps[step - 1], app = this.app;
    if (!s) return;
    if (app.state.playing) app.player.halt();
    // a step that switches its head off carries the result: no round trip, also offline
    if (s.switch) app.switchResult = s.switch;
    app.store.set({ tour: step, stage: s.stage, block: s.block, head: s.head, overlay: s.overlay,
      off: s.switch && !s.switch.error ? s.switch.off : [], pinned: s.patch, hover: null, hoverPrefix: null,
      previewBlock: null, previewHead: null,
      position: app.maps.frameIndexOf(s.block, s.overlay) });
    this.spotted = { step: s, at: performance.now() };
    requestAnimationFrame(() => this.scrollToSpot(s));
    if (send) app.sync.sendNow();
  }

  /** A block's detail (or q and k) arriving just after a step moves the page: bring the
   * step's parts back. */
  afterData() {
    const spotted = this.spotted;
    if (spotted && this.app.state.tour && performance.now() - spotted.at < 4000) {
      requestAnimationFrame(() => this.scrollToSpot(spotted.step));
    }
  }

  /** The step the tour offers to resume at (after a visit to a deeper page), or 0. */
  resumeStep() {
    const step = this.resume;
    return !this.app.state.tour && step >= 1 && step <= this.steps.length ? step : 0;
  }

  handleKey(event) {
    const st = this.app.state, forward = ["ArrowRight", "PageDown"].includes(event.key);
    if (event.altKey || event.ctrlKey || event.metaKey) return;
    if (isEditable(event.composedPath()[0])) return;
    if (!st.tour) {
      // → starts the tour, or picks it up where it was left; PageDown keeps scrolling the page
      if (event.key !== "ArrowRight") return;
      this.goTo(this.resumeStep() || 1);
    } else if (forward) this.goTo(st.tour + 1);
    else if (["ArrowLeft", "PageUp"].includes(event.key)) this.goTo(st.tour - 1);
    else if (event.key === "Escape") this.close();
    else return;
    event.preventDefault();
  }

  renderOffer() {
    const box = this.offer, steps = this.steps, resume = this.resumeStep();
    box.classList.toggle("hidden", !!this.app.state.tour);
    const key = `${this.app.state.tour}:${resume}:${steps.length}`;
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
    on("dismiss", () => this.close());
  }

  clearSpotlight() {
    this.app.root.querySelectorAll(".vx-spotlight").forEach((node) => node.classList.remove("vx-spotlight"));
  }

  render() {
    const app = this.app, st = app.state, steps = this.steps, box = this.box;
    this.renderOffer();
    box.classList.toggle("hidden", !st.tour);
    this.clearSpotlight();
    app.root.dataset.tour = String(st.tour);
    app.root.dataset.resume = String(this.resumeStep());
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
    box.querySelector('[data-act="close"]').addEventListener("click", () => this.close());
    box.querySelector('[data-act="back"]').addEventListener("click", () => this.goTo(st.tour - 1));
    box.querySelector('[data-act="next"]').addEventListener("click", () => this.goTo(st.tour + 1));
    box.querySelectorAll(".vx-tour-dot").forEach((dot) =>
      dot.addEventListener("click", () => this.goTo(Number(dot.dataset.step))));
    const deeper = box.querySelector('[data-act="deeper"]');
    if (deeper) deeper.addEventListener("click", () => app.send.setTriggerValue("navigate", s.page.file));
    for (const part of s.spot) {
      const node = this.partNode(part);
      if (node) node.classList.add("vx-spotlight");
    }
  }

  partNode(part) {
    return part.startsWith("stage:") ? this.app.pipeline.stageNode(part.slice(6))
      : this.app.root.querySelector(`[data-part="${part}"]`);
  }

  /** Where the sticky tour box stops: just under the host page's fixed header. */
  stickyTop() {
    const scrolling = scroller(this.app.root);
    const top = scrolling === document.scrollingElement ? 0 : scrolling.getBoundingClientRect().top;
    const header = document.querySelector('[data-testid="stHeader"]');
    const bottom = header ? header.getBoundingClientRect().bottom : 0;
    return Math.max(0, Math.round(bottom - top));
  }

  /** The patch a step names on the picture, when the picture is one of its parts: the one
   * it pins, else the first its text names ("patch 3 (row 0, col 3)"); else null. */
  namedPatch(s) {
    if (!s.spot.includes("image")) return null;
    if (s.patch !== null && s.patch !== undefined) return s.patch;
    const named = NAMED_PATCH.exec(s.text);
    return named && Number(named[1]) < this.app.model.np ? Number(named[1]) : null;
  }

  /** Scroll so the parts a step talks about are in view below the (sticky) tour box, and
   * the patch it names on the picture always. */
  scrollToSpot(s) {
    const parts = s.spot.filter((part) => !part.startsWith("stage:") && part !== "pipeline");
    const nodes = (parts.length ? parts : ["pipeline"]).map((part) => this.partNode(part)).filter(Boolean);
    if (!nodes.length || !this.app.root.isConnected) return;
    const scrolling = scroller(this.app.root);
    const frame = scrolling === document.scrollingElement ? { top: 0, bottom: innerHeight } : scrolling.getBoundingClientRect();
    const free = frame.top + this.stickyTop() + this.box.offsetHeight + 12, end = frame.bottom - 12;
    let delta = spotScroll(nodes.map((node) => node.getBoundingClientRect()), free, end);
    const patch = this.namedPatch(s);
    if (patch !== null) delta = keepInView(this.app.picture.patchRect(patch), delta, free, end);
    // an absolute target: a quick run of clicker presses ends where the last step wants
    if (Math.abs(delta) > 2) scrolling.scrollTo({ top: scrolling.scrollTop + delta, behavior: "smooth" });
  }
}

/** `delta`, changed as little as needed for `rect` to end up between `free` and `end`. */
export function keepInView(rect, delta, free, end) {
  if (rect.top - delta < free) return rect.top - free;
  if (rect.bottom - delta > end) return rect.bottom - end;
  return delta;
}

/** How far to scroll so a step's parts (their boxes, in order) show between `free` and `end`:
 * all of them when they fit; on a short screen (a phone) as many leading parts as end on
 * screen with at least half of the first still in view (the head chips under the picture,
 * not the picture alone); else from the top of the first. */
export function spotScroll(rects, free, end) {
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
