/* A picture as the model sees it, computed in the browser exactly as xai_core/images.py does
 * on the server: Pillow's two-pass resampling (Resample.c: the filter, its support, the
 * coefficients rounded to 22-bit integers, each pass rounded to 8 bits), the shrink of a
 * large upload to 1024 px (Lanczos), timm's resize-to-cover and centre crop (crop_pct), then
 * x / 255 and (x - mean) / std in float32 as torchvision computes them. The pixels are
 * compared with Python's in tests/e2e/test_browser_model.py. */

const PRECISION_BITS = 22;
const HALF = 1 << (PRECISION_BITS - 1), ONE = 1 << PRECISION_BITS;
export const MAX_SIDE = 1024;  // xai_core.images.load_upload's max_side

function sinc(x) {
  if (x === 0) return 1;
  x *= Math.PI;
  return Math.sin(x) / x;
}

const FILTERS = {
  box: { support: 0.5, f: (x) => (x > -0.5 && x <= 0.5 ? 1 : 0) },
  bilinear: { support: 1, f: (x) => { x = Math.abs(x); return x < 1 ? 1 - x : 0; } },
  bicubic: { support: 2, f: (x) => {
    const a = -0.5;
    x = Math.abs(x);
    if (x < 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
    if (x < 2) return (((x - 5) * x + 8) * x - 4) * a;
    return 0;
  } },
  lanczos: { support: 3, f: (x) => (x >= -3 && x < 3 ? sinc(x) * sinc(x / 3) : 0) },
};

/** Pillow's precompute_coeffs + normalize_coeffs_8bpc: per output pixel its first input
 * pixel, how many it reads and their integer weights. */
function coefficients(inSize, in0, in1, outSize, filter) {
  const scale = (in1 - in0) / outSize, filterscale = Math.max(scale, 1);
  const support = filter.support * filterscale, ksize = Math.ceil(support) * 2 + 1;
  const bounds = new Int32Array(outSize * 2), kk = new Float64Array(outSize * ksize);
  for (let xx = 0; xx < outSize; xx++) {
    const center = in0 + (xx + 0.5) * scale, ss = 1 / filterscale;
    const xmin = Math.max(Math.trunc(center - support + 0.5), 0);
    const xmax = Math.min(Math.trunc(center + support + 0.5), inSize) - xmin;
    let ww = 0;
    for (let x = 0; x < xmax; x++) {
      const w = filter.f((x + xmin - center + 0.5) * ss);
      kk[xx * ksize + x] = w;
      ww += w;
    }
    for (let x = 0; x < xmax; x++) if (ww !== 0) kk[xx * ksize + x] /= ww;
    bounds[xx * 2] = xmin;
    bounds[xx * 2 + 1] = xmax;
  }
  const ints = new Float64Array(kk.length);  // C's (int) truncates toward zero
  for (let i = 0; i < kk.length; i++) ints[i] = Math.trunc(kk[i] < 0 ? -0.5 + kk[i] * ONE : 0.5 + kk[i] * ONE);
  return { bounds, k: ints, ksize };
}

const clip8 = (v) => Math.min(255, Math.max(0, Math.floor(v / ONE)));

/** One image: {data: Uint8Array RGB, width, height}. */
export function image(data, width, height) {
  return { data, width, height };
}

/** One horizontal pass (Pillow's ImagingResampleHorizontal_8bpc): every row to `outW`. */
function horizontal(src, outW, filter) {
  const c = coefficients(src.width, 0, src.width, outW, filter), out = new Uint8Array(outW * src.height * 3);
  for (let y = 0; y < src.height; y++) {
    const row = y * src.width * 3;
    for (let xx = 0; xx < outW; xx++) {
      const xmin = c.bounds[xx * 2], xmax = c.bounds[xx * 2 + 1], base = xx * c.ksize;
      let r = HALF, g = HALF, b = HALF;
      for (let x = 0; x < xmax; x++) {
        const k = c.k[base + x], at = row + (x + xmin) * 3;
        r += src.data[at] * k; g += src.data[at + 1] * k; b += src.data[at + 2] * k;
      }
      const o = (y * outW + xx) * 3;
      out[o] = clip8(r); out[o + 1] = clip8(g); out[o + 2] = clip8(b);
    }
  }
  return image(out, outW, src.height);
}

/** One vertical pass (ImagingResampleVertical_8bpc): every column to `outH`. */
function vertical(src, outH, filter) {
  const c = coefficients(src.height, 0, src.height, outH, filter), w = src.width;
  const out = new Uint8Array(w * outH * 3);
  for (let yy = 0; yy < outH; yy++) {
    const ymin = c.bounds[yy * 2], ymax = c.bounds[yy * 2 + 1], base = yy * c.ksize;
    for (let xx = 0; xx < w; xx++) {
      let r = HALF, g = HALF, b = HALF;
      for (let y = 0; y < ymax; y++) {
        const k = c.k[base + y], at = ((y + ymin) * w + xx) * 3;
        r += src.data[at] * k; g += src.data[at + 1] * k; b += src.data[at + 2] * k;
      }
      const o = (yy * w + xx) * 3;
      out[o] = clip8(r); out[o + 1] = clip8(g); out[o + 2] = clip8(b);
    }
  }
  return image(out, w, outH);
}

/** Pillow's Image.resize(size, filter) of an RGB image: a horizontal then a vertical pass,
 * each rounded to 8 bits. Pillow 13 runs the vertical pass first on some pictures; measured
 * on proportional resizes (the model's: resize to cover, the upload's shrink), it does so
 * exactly when the picture is more than twice as tall as it is wide (tests/e2e/
 * test_browser_model.py checks both sides). Its rule for other resizes (squashing a picture
 * into a square) was not pinned down: those are not the browser model's path. */
export function resize(src, outW, outH, filterName) {
  const filter = FILTERS[filterName];
  if (!filter) throw new Error(`unknown resampling filter ${filterName}`);
  if (outW === src.width && outH === src.height) return image(src.data.slice(), outW, outH);
  if (outW === src.width) return vertical(src, outH, filter);
  if (outH === src.height) return horizontal(src, outW, filter);
  if (src.height > 2 * src.width) return horizontal(vertical(src, outH, filter), outW, filter);
  return vertical(horizontal(src, outW, filter), outH, filter);
}

export function crop(src, left, top, width, height) {
  const out = new Uint8Array(width * height * 3);
  for (let y = 0; y < height; y++) {
    const from = ((y + top) * src.width + left) * 3;
    out.set(src.data.subarray(from, from + width * 3), y * width * 3);
  }
  return image(out, width, height);
}

/** RGBA bytes (a canvas's) -> RGB; transparency over white, as xai_core.images._to_rgb. */
export function fromRGBA(rgba, width, height) {
  const out = new Uint8Array(width * height * 3);
  for (let i = 0, j = 0; i < rgba.length; i += 4, j += 3) {
    const a = rgba[i + 3];
    for (let c = 0; c < 3; c++) out[j + c] = a === 255 ? rgba[i + c] : Math.round((rgba[i + c] * a + 255 * (255 - a)) / 255);
  }
  return image(out, width, height);
}

/** xai_core.images._reduce_large then shrink_to: an upload over 2 x MAX_SIDE box-averaged by a
 * whole factor, then Lanczos down to a longer side of MAX_SIDE. */
export function shrinkUpload(src, maxSide = MAX_SIDE) {
  const factor = Math.floor(Math.max(src.width, src.height) / (2 * maxSide));
  if (factor >= 2) {
    const w = Math.max(1, Math.floor(src.width / factor)), h = Math.max(1, Math.floor(src.height / factor));
    src = resize(crop(src, 0, 0, w * factor, h * factor), w, h, "box");
  }
  const longer = Math.max(src.width, src.height);
  if (longer <= maxSide) return src;
  const scale = maxSide / longer, side = (s) => Math.max(1, pyRound(s * scale));
  return resize(src, side(src.width), side(src.height), "lanczos");
}

/** Python's round(): halves to even. */
export function pyRound(x) {
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** timm's eval transform sizes (xai_core.images._resize_and_crop): the covering size and the
 * centre crop's left, top. */
export function resizeAndCrop(width, height, targetH, targetW, cropPct) {
  const coverH = Math.floor(targetH / cropPct), coverW = Math.floor(targetW / cropPct);
  let rw, rh;
  if (coverW === coverH) {
    const short = Math.min(width, height), long = Math.max(width, height);
    const newLong = Math.trunc(coverW * long / short);
    [rw, rh] = width <= height ? [coverW, newLong] : [newLong, coverW];
  } else {
    const ratio = Math.min(height / coverH, width / coverW);
    [rw, rh] = [pyRound(width / ratio), pyRound(height / ratio)];
  }
  return { size: [rw, rh], left: pyRound((rw - targetW) / 2), top: pyRound((rh - targetH) / 2) };
}

/** xai_core.images.fit_to_model: the exact RGB picture the model sees. */
export function fitToModel(src, [targetH, targetW], cropPct, interpolation) {
  if (cropPct === 1) return resize(src, targetW, targetH, interpolation);
  const fit = resizeAndCrop(src.width, src.height, targetH, targetW, cropPct);
  const resized = resize(src, fit.size[0], fit.size[1], interpolation);
  return crop(resized, fit.left, fit.top, targetW, targetH);
}

/** xai_core.images.model_crop_box: the part of the picture the model keeps. */
export function modelCropBox(width, height, [targetH, targetW], cropPct) {
  if (cropPct === 1) return [0, 0, width, height];
  const fit = resizeAndCrop(width, height, targetH, targetW, cropPct);
  const sx = width / fit.size[0], sy = height / fit.size[1];
  return [fit.left * sx, fit.top * sy, (fit.left + targetW) * sx, (fit.top + targetH) * sy];
}

/** xai_core.images.fit_scale and scale_words. */
export function scaleWords(width, height, [targetH, targetW], cropPct) {
  const scale = cropPct === 1 ? Math.sqrt(targetW / width * targetH / height)
    : resizeAndCrop(width, height, targetH, targetW, cropPct).size[0] / width;
  if (scale >= 1.5) {
    return `enlarged ${scale.toFixed(1)}x: most pixels the model sees are blends of their ` +
      "neighbours, so its small details are made up, not photographed";
  }
  if (scale <= 1 / 1.5) {
    return `shrunk ${(1 / scale).toFixed(1)}x: details smaller than about ${(1 / scale).toFixed(0)} pixels ` +
      "of the picture are lost";
  }
  return "";
}

/** xai_core.images.to_model_tensor: (1, 3, H, W) float32, x / 255 then (x - mean) / std, each
 * step rounded to float32 as torch computes it. */
export function toModelTensor(rgb, mean, std) {
  const n = rgb.width * rgb.height, out = new Float32Array(3 * n), f = Math.fround;
  const inv = f(1 / 255);
  for (let c = 0; c < 3; c++) {
    const m = f(mean[c]), s = f(std[c]);
    for (let i = 0; i < n; i++) out[c * n + i] = f(f(f(rgb.data[i * 3 + c] * inv) - m) / s);
  }
  return out;
}
