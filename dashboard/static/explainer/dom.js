/* Small DOM helpers: elements, focus, the element that scrolls the page. */

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
