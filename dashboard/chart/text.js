/* Measuring and wrapping the labels of a drawn chart: shared by the fits (labels.js,
 * title.js). */

export const EDGE = 8;  // px between a label and the chart's edge, the toolbar or another label
// the smallest text a fit may leave: the message's `smallest` (presentation: 14), set by chart.js
export const LIMITS = { minFont: 9 };
export const plain = (text) => String(text).replace(/<[^>]+>/g, "");
export const lineCount = (text) => text.split("<br>").length;
export const longestLine = (text) => Math.max(...text.split(/<br\s*\/?>/i).map((l) => plain(l).length));
export const clone = (value) => (value === undefined ? null : JSON.parse(JSON.stringify(value)));

/* Lines of at most `maxChars` visible characters, broken at spaces or after a hyphen
 * ("input-x-gradient" has no space); a longer piece stays whole. */
export function wrapText(text, maxChars) {
  return text.split(/<br\s*\/?>/i).map((line) => {
    const lines = [];
    let current = "";
    for (const [, space, piece] of line.matchAll(/( ?)([^ -]*-?)/g)) {
      if (!piece) continue;
      const longer = current ? current + space + piece : piece;
      if (current && plain(longer).length > maxChars) {
        lines.push(current);
        current = piece;
      } else {
        current = longer;
      }
    }
    lines.push(current);
    return lines.join("<br>");
  }).join("<br>");
}

export function boxIn(element, origin) {
  const r = element.getBoundingClientRect();
  return { left: r.left - origin.left, right: r.right - origin.left, top: r.top - origin.top,
           bottom: r.bottom - origin.top, width: r.width, height: r.height };
}
