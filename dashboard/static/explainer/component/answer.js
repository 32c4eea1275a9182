/* The answer under the head chips: the model's top five as bars, and what happens to them
 * when heads are switched off (a chip's power switch, or a tour step). A switch runs the model
 * again on the server (one rerun: sync.js sends the heads in the view); the bars are then
 * updated in place, each with a mark at its share before. An offline lesson has no server:
 * it shows the switches its tour steps carry and says that others need the app. */

import { el, markTargets } from "./dom.js";
import { esc, pct } from "./format.js";

const ROWS = 5;

/** "block 0 head 4" or "block 0 head 4, block 6 head 2" for the pairs switched off. */
export const headsText = (off) => off.map(([b, h]) => `block ${b} head ${h}`).join(", ");

export const sameHeads = (a, b) => JSON.stringify(a) === JSON.stringify(b);

export class AnswerPanel {
  constructor({ store, data }) {
    this.store = store;
    this.data = data;
    const box = el("div", "vx-answer");
    box.dataset.part = "answer";
    box.innerHTML = `<div class="vx-answer-head"><span class="vx-label">Answer</span>` +
      `<span class="vx-answer-status" aria-live="polite"></span>` +
      `<button class="vx-btn vx-answer-reset" hidden>All heads back on</button></div>`;
    this.status = box.querySelector(".vx-answer-status");
    this.reset = box.querySelector(".vx-answer-reset");
    this.reset.addEventListener("click", () => store.dispatch("switchHeads", []));
    const bars = el("div", "vx-bars");
    this.rows = Array.from({ length: ROWS }, () => {
      const row = el("div", "vx-bar", `<span class="vx-bar-label"></span><span class="vx-bar-track">` +
        `<span class="vx-bar-fill"></span><span class="vx-bar-before"></span></span><span class="mono"></span>`);
      bars.appendChild(row);
      const [label, , value] = row.children;
      return { row, label, value, fill: row.querySelector(".vx-bar-fill"),
        before: row.querySelector(".vx-bar-before") };
    });
    box.appendChild(bars);
    this.note = el("div", "vx-note", "");
    box.appendChild(this.note);
    this.element = box;
  }

  /** The bars as the model answers now: with the heads off when the result for exactly
   * those heads is here, else as trained (dimmed while the result is on its way). */
  render() {
    const st = this.store.state, data = this.data, off = st.off, result = st.switchResult;
    const current = off.length && result && sameHeads(result.off, off) ? result : null;
    const waiting = off.length > 0 && !current;
    const trained = data.model.ov.prediction.top.map((t) => ({ label: t.label, share: t.probability }));
    const shown = current && !current.error ? current.after : trained;
    const before = current && !current.error ? new Map(current.before.map((t) => [t.label, t.share])) : null;
    this.rows.forEach((r, i) => {
      const t = shown[i];
      r.row.hidden = !t;
      if (!t) return;
      r.label.textContent = t.label;
      r.fill.style.width = `${(100 * t.share).toFixed(1)}%`;
      r.value.textContent = pct(t.share);
      const was = before ? before.get(t.label) : undefined;
      r.before.hidden = was === undefined;
      if (was !== undefined) {
        r.before.style.left = `${(100 * was).toFixed(1)}%`;
        r.row.title = `${t.label}: ${pct(was)} with every head, ${pct(t.share)} with ${headsText(off)} off`;
      } else r.row.title = "";
    });
    markTargets([this.element], st.targets);
    this.element.classList.toggle("waiting", waiting);
    this.element.classList.toggle("switched", !!current && !current.error);
    this.element.dataset.off = off.map((p) => p.join(".")).join(",");
    this.element.dataset.shown = current ? "switched" : waiting ? "waiting" : "trained";
    this.reset.hidden = !off.length || !data.liveSwitch;
    this.status.innerHTML = this.statusText(off, current, waiting);
    this.note.textContent = data.liveSwitch ? "" : "Switching other heads off runs the model again, " +
      "which needs the ViT Lens app; this file holds the heads its tour switches off.";
    this.note.hidden = data.liveSwitch;
  }

  /** The switch's numbers: the class score before → after with its drop (before minus after,
   * the project's one sign convention) in the server's words, and, for a k-NN head, the
   * class's share of the vote too (its bar): two numbers that need not move together. */
  statusText(off, current, waiting) {
    if (!off.length) return `<span class="muted">every head on · the power switch on a head chip turns it off</span>`;
    if (waiting) return `running the model without ${esc(headsText(off))}…`;
    if (current.error) return `<span class="vx-unknown">${esc(current.error)}</span>`;
    const t = current.target, knn = this.data.model.ov.prediction.head === "knn";
    const share = (list) => (list.find((p) => p.label === t.label) || {}).share;
    const [was, now] = [share(current.before), share(current.after)];
    const vote = knn && was !== undefined && now !== undefined
      ? ` · <span title="The bar: the class's share of the k-NN vote">share of the vote ${pct(was)} → <b>${pct(now)}</b></span>` : "";
    return `${esc(headsText(off))} off · ${esc(t.label)}: <span title="${esc(t.score_kind)}">${knn ? "k-NN class score" : "probability"} ` +
      `${t.before.toFixed(3)} → <b>${t.after.toFixed(3)}</b></span>: it ${esc(t.words)} ` +
      `<span title="drop = the score with every head on minus the score with these heads off">(drop ${t.drop > 0 ? "+" : t.drop < 0 ? "−" : ""}${Math.abs(t.drop).toFixed(4)})</span>${vote}`;
  }
}
