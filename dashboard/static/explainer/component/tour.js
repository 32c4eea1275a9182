/* The guided tour: a compact sticky box over the Explainer (the step's title, one line and
 * "more" for the rest; back / next; "go deeper" with the rest), and each step setting the
 * view (stage, block, head, map, pinned patch) and naming the parts it points at (`targets`
 * in the store: each part marks its own nodes `data-tour-target`). The tour then places
 * the view so every target is whole on screen below the box: it scrolls, and when the
 * targets are taller than the room left, it shrinks the picture (down to half) first.
 * Keys: → starts or resumes it, ← → (or a presenter's clicker) move, Esc closes. */

import { el, isEditable } from "./dom.js";
import { esc, rich } from "./format.js";
import { sameHeads } from "./answer.js";
import { REDRAW } from "./store.js";

const GAP = 10;  // px kept free between the box, the targets and the screen's edge
const SMALLEST_PICTURE = 0.5;  // of its own size: a step may shrink the picture this far
const SETTLE_MS = 4000;  // how long after a step late layout changes (data) re-place it

export class Tour {
  /** `page` (app.js): what placing a step measures and changes (its targets, the picture's
   * size, the element that scrolls); the tour writes only its own box and offer. */
  constructor({ store, maps, page }, steps) {
    Object.assign(this, { store, maps, page });
    this.steps = steps;
    this.resume = null;  // the step to offer resuming at (after a deeper page)
    this.shownAt = 0;  // when the step on screen was applied
    this.expanded = false;  // "more": the whole text, the dots and "go deeper"
    this.box = el("div", "vx-tour hidden");
    this.box.setAttribute("data-tour-box", "");
    this.box.addEventListener("click", (event) => this.onBoxClick(event));
    this.offer = el("div", "vx-tour-offer");
    this.settling = false;
    // the targets' boxes change while a block's detail or the picture arrives: place again
    this.resizes = new ResizeObserver(() => this.placeSoon());
    page.observeResize(this.resizes);
  }

  goTo(step) {
    if (step < 1 || step > this.steps.length) return;
    this.applyStep(step, true);
  }

  /** Close the tour; the heads a switching step turned off go back on (the learner did not
   * switch them, and the next switch would find two heads off). */
  close() {
    const st = this.store.state, s = this.steps[st.tour - 1];
    const offByStep = s && s.switch && !s.switch.error && sameHeads(st.off, s.switch.off);
    this.store.set({ tour: 0, targets: [], marks: [], ...(offByStep ? { off: [] } : {}) }, REDRAW.none);
    this.resume = null;
    this.page.fitPicture(null);
    this.store.notify(REDRAW.all);
    this.store.dispatch("sendView", { dismissed: true });
  }

  applyStep(step, send) {
    const s = this.steps[step - 1];
    if (!s) return;
    this.expanded = false;
    // a step that switches its head off carries the result: no round trip, also offline;
    // playing: false stops the player (its next frame sees it)
    this.store.set({ ...(s.switch ? { switchResult: s.switch } : {}), tour: step, playing: false,
      stage: s.stage, block: s.block, head: s.head, overlay: s.overlay,
      off: s.switch && !s.switch.error ? s.switch.off : [], pinned: s.patch, hover: null, hoverPrefix: null,
      previewBlock: null, previewHead: null, targets: s.targets, marks: s.patches,
      position: this.maps.frameIndexOf(s.block, s.overlay) });
    this.shownAt = performance.now();
    this.placeSoon();
    if (send) this.store.dispatch("sendNow");
  }

  /** A reply (a block's detail, q and k) arriving just after a step changes the page: place
   * the view again. */
  afterData() {
    this.placeSoon();
  }

  /** Place the view at the next frame, while the step on screen is new. */
  placeSoon() {
    if (!this.store.state.tour || this.settling || performance.now() - this.shownAt > SETTLE_MS) return;
    this.settling = true;
    requestAnimationFrame(() => { this.settling = false; this.place(); });
  }

  /** The step the tour offers to resume at (after a visit to a deeper page), or 0. */
  resumeStep() {
    const step = this.resume;
    return !this.store.state.tour && step >= 1 && step <= this.steps.length ? step : 0;
  }

  handleKey(event) {
    const st = this.store.state, forward = ["ArrowRight", "PageDown"].includes(event.key);
    if (event.altKey || event.ctrlKey || event.metaKey) return;
    if (isEditable(event.composedPath()[0])) return;
    if (!st.tour) {
      // → starts the tour, or picks it up where it was left; PageDown keeps scrolling the page
      if (event.key !== "ArrowRight") return;
      this.goTo(this.resumeStep() || 1);
    } else if (forward) this.goTo(st.tour + 1);
    else if (["ArrowLeft", "PageUp"].includes(event.key)) this.goTo(st.tour - 1);
    else if (event.key === "Escape" && this.box.querySelector(".vx-term-pop:not([hidden])")) this.showTerm(null);
    else if (event.key === "Escape") this.close();
    else return;
    event.preventDefault();
  }

  renderOffer() {
    const box = this.offer, steps = this.steps, resume = this.resumeStep();
    box.classList.toggle("hidden", !!this.store.state.tour || !steps.length);  // no steps (yet): no offer
    const key = `${this.store.state.tour}:${resume}:${steps.length}`;
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

  render() {
    const st = this.store.state, steps = this.steps, box = this.box;
    this.renderOffer();
    box.classList.toggle("hidden", !st.tour);
    if (!st.tour) return;
    const s = steps[st.tour - 1], more = this.expanded;
    box.style.top = `${this.stickyTop()}px`;
    box.classList.toggle("expanded", more);
    box.dataset.step = s.id;
    const words = more ? s.text : s.lead;
    box.innerHTML =
      `<div class="vx-tour-head"><span class="vx-tour-count">Step ${st.tour} of ${steps.length}</span>` +
      `<span class="vx-tour-title">${esc(s.title)}</span>` +
      `<span class="vx-tour-moves"><button class="vx-btn" data-act="back" title="Back (← key)" aria-label="Back" ${st.tour === 1 ? "disabled" : ""}>◀</button>` +
      `<button class="vx-btn primary" data-act="next" title="Next (→ key or a presenter's clicker)" ${st.tour === steps.length ? "disabled" : ""}>Next ▶</button>` +
      `<button class="vx-btn" data-act="close" title="Close the tour (Esc)" aria-label="Close the tour">✕</button></span></div>` +
      `<div class="vx-tour-text">${rich(words, s.terms)} <button class="vx-more" data-act="more" aria-expanded="${more}">` +
      `${more ? "less" : "more"}</button>` +
      (s.page ? ` <button class="vx-more" data-act="deeper" title="Opens ${esc(s.page.title)}; come back here to resume the tour">` +
        `Go deeper →</button>` : "") + `</div><div class="vx-term-pop" role="note" hidden></div>` +
      (more ? `<div class="vx-tour-bar"><span class="vx-tour-dots">${steps.map((_, i) =>
        `<button class="vx-tour-dot${i + 1 === st.tour ? " on" : ""}" data-step="${i + 1}" title="Step ${i + 1}: ${esc(steps[i].title)}"></button>`).join("")}</span>` +
        `<span class="muted">Go deeper opens ${esc(s.page ? s.page.title : "")}</span>` +
        `<span class="vx-keys muted">← → keys · Esc closes</span></div>` : "");
  }

  /** One listener for the box's buttons (it is redrawn with every step). */
  onBoxClick(event) {
    const st = this.store.state, target = event.target.closest("button");
    if (!target || !st.tour) return;
    const s = this.steps[st.tour - 1], act = target.dataset.act;
    if (target.dataset.term) return this.showTerm(target);
    if (target.dataset.step) return this.goTo(Number(target.dataset.step));
    if (act === "back") this.goTo(st.tour - 1);
    else if (act === "next") this.goTo(st.tour + 1);
    else if (act === "close") this.close();
    else if (act === "more") {
      this.expanded = !this.expanded;
      this.render();
      this.place();
    } else if (act === "deeper") this.store.dispatch("navigate", s.page.file);
  }

  /** The popover of a marked term (its words, from the step's glossary), or none. */
  showTerm(button) {
    const pop = this.box.querySelector(".vx-term-pop");
    if (!pop) return;
    const s = this.steps[this.store.state.tour - 1], term = button && s.terms[button.dataset.term];
    if (!term || pop.dataset.term === button.dataset.term && !pop.hidden) {
      pop.hidden = true;
      pop.dataset.term = "";
      return;
    }
    pop.innerHTML = `<b>${esc(term.term)}</b>: ${esc(term.words)}.`;
    pop.dataset.term = button.dataset.term;
    pop.hidden = false;
  }

  /** Where the sticky tour box stops: just under the host page's fixed header. */
  stickyTop() {
    const scrolling = this.page.scroller();
    const top = scrolling === document.scrollingElement ? 0 : scrolling.getBoundingClientRect().top;
    const header = document.querySelector('[data-testid="stHeader"]');
    const bottom = header ? header.getBoundingClientRect().bottom : 0;
    return Math.max(0, Math.round(bottom - top));
  }

  /** The room between the stuck tour box and the screen's bottom edge (viewport px). */
  room() {
    const scrolling = this.page.scroller();
    const frame = scrolling === document.scrollingElement ? { top: 0, bottom: innerHeight }
      : scrolling.getBoundingClientRect();
    return { scrolling, top: frame.top + this.stickyTop() + this.box.offsetHeight + GAP,
      bottom: Math.min(frame.bottom, innerHeight) - GAP };
  }

  /** Place the view for the step on screen: every target whole between the box and the
   * screen's bottom edge, shrinking the picture when they are too tall together. */
  place() {
    const page = this.page, st = this.store.state;
    if (!st.tour || !page.connected()) return;
    const nodes = page.targets();
    if (!nodes.length) return;
    const room = this.room(), height = room.bottom - room.top;
    page.fitPicture(null);
    let span = spanOf(nodes);
    for (let tries = 0; tries < 2 && span.bottom - span.top > height; tries++) {
      const picture = page.pictureRect();
      if (picture.bottom <= span.top || picture.top >= span.bottom) break;  // not among them
      const natural = page.pictureSize(), over = span.bottom - span.top - height;
      const size = Math.max(natural * SMALLEST_PICTURE, picture.width - over - 2);
      if (size >= picture.width - 1) break;
      page.fitPicture(size);
      span = spanOf(nodes);
    }
    // an absolute target: a quick run of clicker presses ends where the last step wants
    const delta = span.top < room.top || span.bottom - span.top > height ? span.top - room.top
      : Math.max(0, span.bottom - room.bottom);
    const scrolling = room.scrolling, most = scrolling.scrollHeight - scrolling.clientHeight;
    if (scrolling.scrollTop + delta > most + 2) setTimeout(() => this.placeSoon(), 300);  // the page is still growing
    if (Math.abs(delta) > 2) scrolling.scrollTo({ top: scrolling.scrollTop + delta, behavior: "smooth" });
    this.store.dispatch("mark", "placed", `${st.tour}:${Math.round(room.scrolling.scrollTop + delta)}`);
  }
}

/** The vertical extent of some nodes' boxes (viewport px). */
export function spanOf(nodes) {
  const rects = nodes.map((node) => node.getBoundingClientRect());
  return { top: Math.min(...rects.map((r) => r.top)), bottom: Math.max(...rects.map((r) => r.bottom)) };
}
