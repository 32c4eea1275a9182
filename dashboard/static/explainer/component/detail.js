/* The detail panel under the pipeline: what the chosen stage does, drawn by one view per
 * stage (an opened block: its steps, attention matrix and query · key panel). Rebuilt only
 * when the stage, the opened block, its arrival or the head changes. */

import { BlockDetail } from "./block-steps.js";
import { el, markTargets } from "./dom.js";
import { NormChart } from "./norm-chart.js";
import { FeatureNotes, HeadNotes, PredictionNotes } from "./prediction.js";
import { ImageNotes, PatchNotes, TokenNotes } from "./stage-notes.js";

export class DetailPanel {
  constructor(parts) {
    this.parts = parts;  // handed on to the view it builds
    this.store = parts.store;
    this.data = parts.data;
    this.element = el("div", "vx-card vx-detail");
    this.element.dataset.part = "detail";
    this.key = null;
    this.view = null;
  }

  render() {
    const st = this.store.state, detail = this.data.details.get(st.block);
    const key = `${st.stage}:${st.stage === "blocks" ? st.block : ""}:${st.stage === "blocks" && !!detail}:${st.head}` +
      (st.stage === "top5" ? `:${st.off.join(";")}` : "");  // its note names the heads off
    if (key !== this.key) this.rebuild(key);
    this.renderPlaying();
    // the panel marks its own nodes and those of the view it built (steps, matrix, qk...)
    markTargets([this.element, ...this.element.querySelectorAll("[data-part]")], st.targets);
  }

  /** Faded while the player runs: the panel shows the block the player left. */
  renderPlaying() {
    this.element.classList.toggle("vx-stale", this.store.state.playing);
  }

  rebuild(key) {
    const st = this.store.state, detail = this.data.details.get(st.block);
    this.key = key;
    if (this.view && this.view.dispose) this.view.dispose();
    if (st.stage !== "blocks") this.store.dispatch("forgetQk");  // else: the rebuilt panel reports soon
    this.element.innerHTML = "";
    const builders = { image: () => this.detailView(ImageNotes), patches: () => this.detailView(PatchNotes),
      tokens: () => this.detailView(TokenNotes), blocks: () => this.detailView(BlockDetail, detail),
      norm: () => this.detailView(NormChart), feature: () => this.detailView(FeatureNotes),
      head: () => this.detailView(HeadNotes), top5: () => this.detailView(PredictionNotes) };
    this.view = (builders[st.stage] || builders.blocks)();
  }

  detailView(View, detail) {
    return new View(this.parts, this.element, detail);
  }

  /** The parts of the panel that follow the pointer. */
  draw() {
    if (this.view && this.view.draw) this.view.draw();
  }

  /** The learner's whole picture arrived: the image stage draws it. */
  pictureLoaded() {
    if (this.view && this.view.drawPicture) this.view.drawPicture();
  }
}
