/* The block player: the map moves block by block (rollout and DAAM over their frames),
 * drawn in the browser only; playing never talks to the server. */

import { METRICS } from "./metrics.js";
import { REDRAW } from "./store.js";

const BLOCKS_PER_SECOND = 1.25;  // slow enough to read each block

export class Player {
  /** `connected`: whether the Explainer is still on the page (a frame after it left stops). */
  constructor({ store, data, connected }) {
    Object.assign(this, { store, data, connected });
    this.raf = null;
    this.lastTick = 0;
    // whoever stops the player (a tour step, stop()) says so in the store: no frame follows
    store.subscribe(() => { if (!store.state.playing) cancelAnimationFrame(this.raf); });
  }

  play() {
    const store = this.store, st = store.state, maps = this.data.maps;  // this overview's
    if (st.overlay === "daam" && !this.data.model.daam) return;
    store.dispatch("showBlocks");
    let position = maps.frameIndexOf(st.block);
    if (position >= maps.frameBlocks().length - 1) position = 0;
    store.set({ playing: true, pinned: null, position }, REDRAW.none);
    this.lastTick = performance.now();
    METRICS.frames = [];
    const tick = (now) => {
      if (!st.playing || !this.connected()) return;
      // a frame's timestamp can precede the click that started playing: never step back
      const seconds = Math.max(0, now - this.lastTick) / 1000;
      this.lastTick = Math.max(now, this.lastTick);
      const frames = maps.frameBlocks();
      st.position = (st.position + seconds * BLOCKS_PER_SECOND) % frames.length;
      const block = frames[Math.floor(st.position)];
      if (block !== st.block) store.set({ block }, REDRAW.chrome);
      store.notify(REDRAW.frame);
      METRICS.frames.push(now);
      if (METRICS.frames.length > 600) METRICS.frames.splice(0, 300);
      this.raf = requestAnimationFrame(tick);
    };
    store.notify(REDRAW.chrome);  // the play button, the detail panel's faded look
    this.raf = requestAnimationFrame(tick);
  }

  /** Stop where the map is, and fetch that block's detail. */
  stop() {
    const store = this.store, st = store.state;
    if (!st.playing) return;
    this.halt();
    st.position = Math.floor(st.position);
    store.dispatch("requestBlock", st.block);
    store.notify(REDRAW.all);
  }

  /** Stop without fetching or drawing (the caller sets the view itself, and redraws). */
  halt() {
    this.store.set({ playing: false }, REDRAW.none);
  }
}
