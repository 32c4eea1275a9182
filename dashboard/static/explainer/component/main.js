/* ViT Explainer: the entry a host mounts (Streamlit's components v2 through
 * dashboard/static/explainer/host/loader.js, or a page of its own). `data` is one binary message as
 * xai_core/explainer.py's encode_message writes it; the view goes back through
 * setStateValue("view", ...) and "go deeper" through setTriggerValue("navigate", page). */

import { Explainer } from "./app.js";
import { readMessage } from "./protocol.js";

const controllers = new WeakMap();
let latest = null;  // the Explainer drawn last on this page

export default function mount({ parentElement, data, setStateValue, setTriggerValue }) {
  const message = readMessage(data);
  let explainer = controllers.get(parentElement);
  if (!explainer || !explainer.root.isConnected) {
    // the host re-created our element (e.g. presentation mode added a style above it) while
    // Python knows this browser holds the overview: move the live view over, state and all
    const remounted = latest && !latest.root.isConnected && !message.overview &&
      message.signature === latest.signature;
    explainer = remounted ? latest.moveTo(parentElement) : new Explainer(parentElement);
    controllers.set(parentElement, explainer);
  }
  latest = explainer;
  explainer.send = { setStateValue, setTriggerValue };
  explainer.update(message);
}
