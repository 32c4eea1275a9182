/* The block player: the map moves block by block (rollout and DAAM over their frames),
 * drawn in the browser only; playing never talks to the server. */

import { METRICS } from "./metrics.js";
import { REDRAW } from "./store.js";

const BLOCKS_PER_SECOND = 1.25;  // slow enough to read each block

export class Player {
  constructor(app) {
    this.app = app;
    this.raf = null;
    this.lastTick = 0;
    // whoever stops the player (a tour step, stop()) says so in the store: no frame follows
    app.store.subscribe(() => { if (!app.state.playing) cancelAnimationFrame(this.raf); });
  }

  play() {
    const app = this.app, st = app.state;
    if (st.overlay === "daam" && !app.model.daam) return;
    app.showBlocks();
    let position = app.maps.frameIndexOf(st.block);
    if (position >= app.maps.frameBlocks().length - 1) position = 0;
    app.store.set({ playing: true, pinned: null, position }, REDRAW.none);
    this.lastTick = performance.now();
    METRICS.frames = [];
    const tick = (now) => {
      if (!st.playing || !app.root.isConnected) return;
      // a frame's timestamp can precede the click that started playing: never step back
      const seconds = Math.max(0, now - this.lastTick) / 1000;
      this.lastTick = Math.max(now, this.lastTick);
      const frames = app.maps.frameBlocks();
      st.position = (st.position + seconds * BLOCKS_PER_SECOND) % frames.length;
      const block = frames[Math.floor(st.position)];
      if (block !== st.block) app.store.set({ block }, REDRAW.chrome);
      app.store.notify(REDRAW.frame);
      METRICS.frames.push(now);
      if (METRICS.frames.length > 600) METRICS.frames.splice(0, 300);
      this.raf = requestAnimationFrame(tick);
    };
    app.store.notify(REDRAW.chrome);  // the play button, the detail panel's faded look
    this.raf = requestAnimationFrame(tick);
  }

  /** Stop where the map is, and fetch that block's detail. */
  stop() {
    const app = this.app, st = app.state;
    if (!st.playing) return;
    this.halt();
    st.position = Math.floor(st.position);
    app.sync.requestBlock(st.block);
    app.store.notify(REDRAW.all);
  }

  /** Stop without fetching or drawing (the caller sets the view itself, and redraws). */
  halt() {
    this.app.store.set({ playing: false }, REDRAW.none);
  }
}
