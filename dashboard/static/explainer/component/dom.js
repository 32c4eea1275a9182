/* Small DOM helpers: elements, focus, the element that scrolls the page, tour targets. */

export const el = (tag, cls, html) => {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (html !== undefined) node.innerHTML = html;
  return node;
};

export const isEditable = (node) => node && (/^(INPUT|TEXTAREA|SELECT)$/.test(node.tagName) ||
  node.isContentEditable);

/** The element that scrolls the page around `root` (the host's main area), across a
 * shadow root; the document's own scroller when none does. */
export function scroller(root) {
  for (let node = root; node;) {
    node = node.parentNode || node.host;
    if (!node || node === document) break;
    if (node instanceof Element) {
      const overflow = getComputedStyle(node).overflowY;
      if ((overflow === "auto" || overflow === "scroll") && node.scrollHeight > node.clientHeight) return node;
    }
  }
  return document.scrollingElement;
}

/** Mark a part's own nodes (each with its `data-part`) that the tour step on screen points
 * at (`targets`, from the store): the tour finds them by `data-tour-target`, and the page's
 * style lights them up. Each part marks only the nodes it made. */
export function markTargets(nodes, targets) {
  for (const node of nodes) {
    if (node) node.toggleAttribute("data-tour-target", targets.includes(node.dataset.part));
  }
}
