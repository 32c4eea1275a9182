/* Explainer messages (xai_core/lessons/explainer.py encode_message) packed and unpacked in
 * the browser: the learner's own photo travels to the component exactly as the server's
 * payloads do, in the wire's frame (component/wire.js, handed over by the host). A packed array is {dtype, array: TypedArray, shape}; quantisation and float16
 * follow xai_core.explainer (quantise_unsigned, quantise_signed, numpy's rounding). */

const TYPES = { u8: Uint8Array, i8: Int8Array, f16: Uint16Array, f32: Float32Array };
const ALIGN = 8;

export const packed = (dtype, array, shape) => ({ dtype, array, shape });
const isPacked = (v) => v && typeof v === "object" && "dtype" in v && "array" in v && "shape" in v;

/** numpy's rint: halves to even. */
export function rint(x) {
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

const f32 = new Float32Array(1), u32 = new Uint32Array(f32.buffer);
/** A number as IEEE half bits, rounded to nearest even. */
export function toHalf(value) {
  f32[0] = value;
  const x = u32[0], sign = (x >>> 16) & 0x8000;
  let exp = (x >>> 23) & 0xff, mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  exp = exp - 127 + 15;
  if (exp >= 0x1f) return sign | 0x7c00;
  if (exp <= 0) {
    if (exp < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - exp, rest = mant & ((1 << shift) - 1), halfway = 1 << (shift - 1);
    let h = mant >>> shift;
    if (rest > halfway || (rest === halfway && (h & 1))) h++;
    return sign | h;
  }
  let h = (exp << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && (h & 1))) h++;
  return sign | h;
}

/** IEEE half bits -> the number. */
export function fromHalf(h) {
  const sign = h & 0x8000 ? -1 : 1, exp = (h >> 10) & 31, frac = h & 1023;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

/** A packed array's values as numbers (float16 decoded). */
export function valuesOf(item) {
  return item.dtype === "f16" ? Float64Array.from(item.array, fromHalf) : Float64Array.from(item.array);
}

export function half(values, shape) {
  const out = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = toHalf(values[i]);
  return packed("f16", out, shape);
}

/** Non-negative rows of width w -> {codes u8, scale f32 per row}: code = rint(v / max * 255). */
export function unsignedRows(values, rows, width, shape) {
  const codes = new Uint8Array(rows * width), scale = new Float32Array(rows);
  for (let r = 0; r < rows; r++) {
    let top = -Infinity;
    for (let j = 0; j < width; j++) top = Math.max(top, values[r * width + j]);
    if (!width) top = 0;
    scale[r] = top;
    const safe = top > 0 ? top : 1;
    for (let j = 0; j < width; j++) {
      codes[r * width + j] = rint(Math.min(1, Math.max(0, values[r * width + j] / safe)) * 255);
    }
  }
  return { codes: packed("u8", codes, [...shape, width]), scale: packed("f32", scale, shape) };
}

/** Rows of either sign -> {codes i8 in -127..127, scale f32: the row's largest |value|}. */
export function signedRows(values, rows, width, shape) {
  const codes = new Int8Array(rows * width), scale = new Float32Array(rows);
  for (let r = 0; r < rows; r++) {
    let top = 0;
    for (let j = 0; j < width; j++) top = Math.max(top, Math.abs(values[r * width + j]));
    scale[r] = top;
    const safe = top > 0 ? top : 1;
    for (let j = 0; j < width; j++) codes[r * width + j] = rint(values[r * width + j] / safe * 127);
  }
  return { codes: packed("i8", codes, [...shape, width]), scale: packed("f32", scale, shape) };
}

/** A message packed for the wire's frame (component/wire.js frame, which the host hands
 * over): its header, each array as {dtype, shape, offset}, and the arrays' bytes, each
 * padded to 8 bytes (xai_core/lessons/explainer.encode_message). */
export function packMessage(message) {
  const chunks = [];
  let size = 0;
  const walk = (value) => {
    if (isPacked(value)) {
      const bytes = new Uint8Array(value.array.buffer, value.array.byteOffset, value.array.byteLength);
      const item = { dtype: value.dtype, shape: value.shape, offset: size };
      chunks.push(bytes);
      size += bytes.length;
      const pad = (ALIGN - (size % ALIGN)) % ALIGN;
      if (pad) { chunks.push(new Uint8Array(pad)); size += pad; }
      return item;
    }
    if (Array.isArray(value)) return value.map(walk);
    if (value && typeof value === "object") return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, walk(v)]));
    return value;
  };
  return { header: walk(message), chunks };
}

/** The inverse, from a frame's parts (component/wire.js unframe): packed arrays come back as
 * {dtype, array, shape} (copies, aligned). */
export function unpackMessage({ header, body }) {
  const walk = (value) => {
    if (Array.isArray(value)) return value.map(walk);
    if (!value || typeof value !== "object") return value;
    if ("offset" in value && "dtype" in value && "shape" in value) {
      const Type = TYPES[value.dtype], n = value.shape.reduce((a, b) => a * b, 1);
      const start = body.byteOffset + value.offset;
      const array = new Type(body.buffer.slice(start, start + n * Type.BYTES_PER_ELEMENT));
      return packed(value.dtype, array, value.shape);
    }
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, walk(v)]));
  };
  return walk(header);
}
