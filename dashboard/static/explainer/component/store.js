/* The one state store: what is shown. stage, block, head (-1: the mean of the heads),
 * overlay (the map: attention, rollout or daam), pinned (the marked patch), tour (the step
 * on screen, 0: none), targets (the parts that step points at: each part marks its own), marks
 * (the patches it names on the picture), off (the [block, head] pairs switched off), and what
 * follows the pointer or the player (hover, hoverPrefix,
 * hoverKey, previewBlock, previewHead, playing, position). Parts change it with set(),
 * naming how much must be redrawn; the Explainer, subscribed, redraws that. */

/** How much a change needs redrawn: everything, the chrome (buttons, labels, thumbnails),
 * the parts that follow the pointer, the parts that show the playing map (a player's frame),
 * or nothing (the caller draws itself). */
export const REDRAW = { all: "all", chrome: "chrome", live: "live", frame: "frame", none: "none" };

export function initialState() {
  return { stage: "blocks", block: 0, head: -1, overlay: "attention", hover: null,
    hoverPrefix: null, pinned: null, previewBlock: null, previewHead: null, hoverKey: null,
    playing: false, position: 0, tour: 0, targets: [], marks: [], off: [] };
}

export class Store {
  constructor(state = initialState()) {
    this.state = state;
    this.listeners = [];
  }

  subscribe(listener) {
    this.listeners.push(listener);
    return () => { this.listeners = this.listeners.filter((l) => l !== listener); };
  }

  set(changes, redraw = REDRAW.all) {
    Object.assign(this.state, changes);
    this.notify(redraw);
  }

  notify(redraw = REDRAW.all) {
    for (const listener of this.listeners) listener(redraw);
  }
}
