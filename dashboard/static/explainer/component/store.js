/* The one state store: what is shown, and the one way parts ask each other to act.
 * The state: stage, block, head (-1: the mean of the heads), overlay (the map: attention,
 * rollout or daam), pinned (the marked patch), tour (the step on screen, 0: none), targets
 * (the parts that step points at: each part marks its own), marks (the patches it names on
 * the picture), off (the [block, head] pairs switched off), what follows the pointer or the
 * player (hover, hoverPrefix, hoverKey, previewBlock, previewHead, playing, position), the
 * map the picture shows (shown: the sequence and "Save PNG" follow it) and the answer with
 * heads switched off (switchResult). Parts change it with set(), naming how much must be
 * redrawn; the Explainer, subscribed, redraws that. A part that needs something done
 * elsewhere (open a block, stop the player, ask the server) dispatches an action by name;
 * app.js alone says who does it. */

/** How much a change needs redrawn: everything, the chrome (buttons, labels, thumbnails),
 * the parts that follow the pointer, the parts that show the playing map (a player's frame),
 * or nothing (the caller draws itself). */
export const REDRAW = { all: "all", chrome: "chrome", live: "live", frame: "frame", none: "none" };

export function initialState() {
  return { stage: "blocks", block: 0, head: -1, overlay: "attention", hover: null,
    hoverPrefix: null, pinned: null, previewBlock: null, previewHead: null, hoverKey: null,
    playing: false, position: 0, tour: 0, targets: [], marks: [], off: [], shown: null,
    switchResult: null };
}

export class Store {
  constructor(state = initialState()) {
    this.state = state;
    this.listeners = [];
    this.actions = {};
  }

  /** Name the actions parts may dispatch and who does each (app.js, once). */
  handle(actions) {
    Object.assign(this.actions, actions);
  }

  /** Ask for an action by name (`dispatch("selectBlock", 3, true)`); an unknown name is a bug. */
  dispatch(name, ...args) {
    const action = this.actions[name];
    if (!action) throw new Error(`no action "${name}"`);
    action(...args);
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
