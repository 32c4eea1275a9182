/* Numbers written as Python writes them, so that text the browser writes for the learner's
 * photo reads exactly as the server's for the same numbers (the tour, the block cards'
 * notes): format(x, ".Nf"), format(x, ".Ng"), format(x, "g"), format(n, ","), round(). */

/** A double that lies exactly halfway between two multiples of 10^-digits (Python rounds
 * those to even, JavaScript's toFixed up): the larger multiple's integer, else null. Such a
 * half, (2k+1) / (2·10^d), is a double only when 5^d divides 2k+1 (a binary fraction); the
 * product below may round onto an odd integer for a number that is no half (0.8605). */
function exactTie(x, digits) {
  const doubled = Math.abs(x) * 2 * 10 ** digits;
  const half = Number.isSafeInteger(doubled) && doubled % 2 === 1 && doubled % 5 ** digits === 0 &&
    doubled / (2 * 10 ** digits) === Math.abs(x);
  return half ? (doubled + 1) / 2 : null;
}

/** format(x, `.${digits}f`). */
export function fixed(x, digits) {
  const tie = exactTie(x, digits);
  if (tie === null) return x.toFixed(digits);
  const even = tie % 2 === 0 ? tie : tie - 1;
  const text = (even / 10 ** digits).toFixed(digits);
  return x < 0 && even !== 0 ? `-${text}` : text;
}

/** round(x) (halves to even). */
export function pyRound(x) {
  return Number(fixed(x, 0));
}

/** format(x, `.${precision}g`) (and format(x, "g"): precision 6). */
export function general(x, precision = 6) {
  if (x === 0) return "0";
  if (!Number.isFinite(x)) return Number.isNaN(x) ? "nan" : x > 0 ? "inf" : "-inf";
  const [mantissa, e] = x.toExponential(precision - 1).split("e"), exponent = Number(e);
  const strip = (text) => (text.includes(".") ? text.replace(/\.?0+$/, "") : text);
  if (exponent < -4 || exponent >= precision) {
    return `${strip(mantissa)}e${exponent < 0 ? "-" : "+"}${String(Math.abs(exponent)).padStart(2, "0")}`;
  }
  return strip(fixed(x, precision - 1 - exponent));
}

/** format(n, ","): an integer with thousands separated by commas. */
export function thousands(n) {
  return String(Math.trunc(n)).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}
