/* The pipeline: one button per stage, pixels to prediction (the prediction's stage shows
 * the answer). A click shows that stage in the detail panel. */

import { el, markTargets } from "./dom.js";
import { esc, pct } from "./format.js";

export class Pipeline {
  constructor({ store, data }) {
    this.store = store;
    const ov = data.model.ov, box = el("div", "vx-overview");
    box.dataset.part = "pipeline";
    const row = el("div", "vx-pipeline");
    this.stageEls = {};
    // two rows of half the stages each when one row is too narrow (explainer.css)
    const half = Math.ceil(ov.stages.length / 2);
    row.style.setProperty("--vx-two-rows",
      `repeat(${half - 1}, minmax(min-content, 1fr) auto) minmax(min-content, 1fr)`);
    ov.stages.forEach((stage, i) => {
      if (i) row.appendChild(el("div", i === half ? "vx-arrow vx-arrow-wrap" : "vx-arrow", "→"));
      const node = el("button", "vx-stage");
      node.dataset.stage = stage.id;
      const extra = stage.id === "top5" ? this.answer(ov.prediction)
        : stage.note ? `<div class="vx-stage-shape">${esc(stage.note)}</div>` : "";
      node.innerHTML = `<div class="vx-stage-title">${esc(stage.title)}</div>` +
        `<div class="vx-stage-shape">${esc(stage.shape)}</div>${extra}`;
      node.addEventListener("click", () => store.dispatch("selectStage", stage.id));
      this.stageEls[stage.id] = node;
      row.appendChild(node);
    });
    box.appendChild(row);
    this.element = box;
  }

  /** The top class and its share, or that the picture is like nothing the model knows. */
  answer(prediction) {
    const top = prediction.top[0];
    return prediction.open_set.known
      ? `<div class="vx-stage-answer" title="${esc(top.label)}">${esc(top.label.split(",")[0])} · ` +
        `${pct(top.probability)}</div>`
      : `<div class="vx-stage-answer" title="Nearest class: ${esc(top.label)}">none it knows</div>`;
  }

  /** The button of a stage (the tour spotlights `stage:<id>`). */
  stageNode(id) {
    return this.stageEls[id];
  }

  render() {
    const st = this.store.state, stage = st.stage;
    Object.entries(this.stageEls).forEach(([id, node]) => node.classList.toggle("selected", id === stage));
    markTargets([this.element], st.targets);
  }
}
