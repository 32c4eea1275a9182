/* What the browser tells the host (one rerun of the page's fragment each time): the block
 * and tour step on screen and what this browser already holds, so that Python sends only
 * the rest. Only opening another block, moving through the tour, the query · key panel
 * coming into view and switching heads off talk to the server; hovering and playing never do. */

import { view } from "./wire.js";

const SETTLE_MS = 180;  // a run of clicks or scrubbing asks once, for where it ends

export class Sync {
  /** `host`: the host's { setStateValue, setTriggerValue } now (null before a mount). */
  constructor({ store, data, host }) {
    Object.assign(this, { store, data, host });
    this.timer = null;
    this.asked = 0;
    this.vectorsAsked = null;  // the detail whose q and k were asked for
    this.qkVisible = false;  // the query · key panel is in view
  }

  /** Ask Python for a block's detail (one fragment rerun), unless it is here already. */
  requestBlock(block) {
    if (this.data.details.has(block)) return;
    this.later();
  }

  /** The query · key panel is in view (q and k are asked for only then), or not. */
  panelInView(visible) {
    this.qkVisible = visible;
  }

  /** Ask for the shown block's q and k while its query · key panel is in view. */
  requestVectors() {
    const detail = this.data.details.get(this.store.state.block);
    if (!this.qkVisible || !detail || detail.vectors || this.vectorsAsked === detail ||
        this.store.state.playing) return;  // playing never talks to the server
    this.later();
  }

  later() {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.sendView(), SETTLE_MS);
  }

  /** Send now, instead of any request waiting to settle. */
  sendNow(extra = {}) {
    clearTimeout(this.timer);
    this.sendView(extra);
  }

  blocksWithVectors() {
    return [...this.data.details].filter(([, d]) => d.vectors).map(([block]) => block);
  }

  /** Tell Python what is on screen and what this browser holds (so it sends only the rest). */
  sendView(extra = {}) {
    const app = this.sent();
    if (!app) return;
    // asked once per detail; a view sent with the panel out of sight asks nothing
    const detail = this.data.details.get(this.store.state.block);
    this.vectorsAsked = this.qkVisible && detail && !detail.vectors ? detail : null;
    app.send.setStateValue("view", view({ block: app.state.block, tour: app.state.tour,
      have: app.signature, blocks: [...app.details.keys()], qk: this.blocksWithVectors(),
      want_qk: !!this.qkVisible, off: app.state.off, ...extra }));
  }

  /** Python believed this browser held the overview (a page element remounted it): ask
   * again, saying it holds nothing (three times at most). */
  requestEverything() {
    this.asked += 1;
    const app = this.sent();
    if (!app || this.asked > 3) return;
    this.store.dispatch("loading");
    app.send.setStateValue("view", view({ ask: this.asked }));
  }

  /** What a view message is made of (the host's functions, the state, what this browser
   * holds), or null while no host is mounted. */
  sent() {
    const send = this.host();
    return send && { send, state: this.store.state, signature: this.data.signature,
      details: this.data.details };
  }
}
