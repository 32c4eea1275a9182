/* "Use your own photo": the learner chooses, drops or photographs a picture; it is resized
 * and normalised as the server would (preprocess.js), the model runs in a Web Worker
 * (runtime.js), and every view of the Explainer is computed from its outputs (payloads.js)
 * and handed to the same component as the server's messages, head switches included.
 * Nothing leaves the browser. The host (dashboard/static/explainer/host/model-host.js) calls
 * setup(api). */

import { knnVote, knnWeights, top as topClasses } from "./answer.js";
import { BrowserModel, cannotRun } from "./runtime.js";
import { packMessage, unpackMessage } from "./message.js";
import { daamFrames, detail, headSwitch, modelData, overview, vectors } from "./payloads.js";
import { resolveSteps, switchedHeads } from "./tour-steps.js";
import { fitToModel, fromRGBA, modelCropBox, scaleWords, shrinkUpload, toModelTensor } from "./preprocess.js";

const MIN_SIDE = 16, MAX_ASPECT = 10;  // xai_core.images: the same refusals as the server's
const THUMBNAIL_SIDE = 320;

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/** A message in the wire's frame, and back (`wire`: the component's wire.js, from the host). */
const encode = (wire, message) => { const { header, chunks } = packMessage(message); return wire.frame(header, chunks); };
const decode = (wire, bytes) => unpackMessage(wire.unframe(bytes));

const seconds = (ms) => `${(ms / 1000).toFixed(1)} s`;

/** RGB bytes -> a data: URL (a canvas drawn at that size, optionally scaled to fit `side`). */
function dataUrl(rgb, side = 0, type = "image/png") {
  const scale = side ? Math.min(1, side / Math.max(rgb.width, rgb.height)) : 1;
  const source = document.createElement("canvas");
  source.width = rgb.width;
  source.height = rgb.height;
  const pixels = new ImageData(rgb.width, rgb.height);
  for (let i = 0, j = 0; j < rgb.data.length; i += 4, j += 3) {
    pixels.data[i] = rgb.data[j]; pixels.data[i + 1] = rgb.data[j + 1]; pixels.data[i + 2] = rgb.data[j + 2]; pixels.data[i + 3] = 255;
  }
  source.getContext("2d").putImageData(pixels, 0, 0);
  if (scale === 1) return source.toDataURL(type, 0.9);
  const out = document.createElement("canvas");
  out.width = Math.max(1, Math.round(rgb.width * scale));
  out.height = Math.max(1, Math.round(rgb.height * scale));
  out.getContext("2d").drawImage(source, 0, 0, out.width, out.height);
  return out.toDataURL("image/jpeg", 0.9);
}

/** A file's pixels, upright (EXIF), as decoded without colour management (as Pillow). */
export async function decodeFile(file) {
  let bitmap;
  try {
    bitmap = await createImageBitmap(file, { imageOrientation: "from-image", colorSpaceConversion: "none", premultiplyAlpha: "none" });
  } catch {
    throw new Error("This file is not an image the browser can read (PNG, JPEG, WEBP, GIF or BMP).");
  }
  const { width, height } = bitmap;
  if (Math.min(width, height) < MIN_SIDE) throw new Error(`The image is ${width}x${height} pixels; it must be at least ${MIN_SIDE}x${MIN_SIDE} pixels.`);
  if (Math.max(width, height) > MAX_ASPECT * Math.min(width, height)) {
    throw new Error(`The image is ${width}x${height} pixels, too long and thin: the longer side may be at most ${MAX_ASPECT} times the shorter. Crop it closer to a square.`);
  }
  const canvas = new OffscreenCanvas(width, height), context = canvas.getContext("2d", { colorSpace: "srgb" });
  context.drawImage(bitmap, 0, 0);
  bitmap.close();
  return fromRGBA(context.getImageData(0, 0, width, height).data, width, height);
}

/** The model's input and the Image stage's facts (explainer._picture) for decoded pixels. */
export function prepare(md, decoded) {
  const pre = md.preprocess, source = [decoded.width, decoded.height];
  const picture = shrinkUpload(decoded), [w, h] = [picture.width, picture.height];
  const modelImage = fitToModel(picture, md.input, pre.crop_pct, pre.interpolation);
  const [left, top, right, bottom] = modelCropBox(w, h, md.input, pre.crop_pct);
  const r2 = (x) => Math.round(x * 100) / 100;
  return { modelImage, pixels: toModelTensor(modelImage, pre.mean, pre.std),
    facts: { size: [w, h], source, crop: [r2(left), r2(top), r2(right), r2(bottom)],
      kept: Math.round((right - left) * (bottom - top) / (w * h) * 1e4) / 1e4,
      squashed: pre.crop_pct === 1 && w * md.input[0] !== h * md.input[1],
      scale: scaleWords(w, h, md.input, pre.crop_pct), image: dataUrl(picture, THUMBNAIL_SIDE) } };
}

class OwnPicture {
  constructor(setup, prepared, outputs, name) {
    this.setup = setup;
    this.md = setup.md;
    this.prepared = prepared;
    this.outputs = outputs;
    this.signature = `own|${name}|${Date.now()}`;
    this.overview = overview(this.md, setup.template, outputs, { image: dataUrl(prepared.modelImage), facts: prepared.facts });
    this.steps = [];  // the tour, once the two heads it switches off have run (complete)
    this.switches = new Map();
  }

  /** explainer.head_switch for these heads off: the model restarted at the first block
   * with a head off, on what entered it in this photo's forward. */
  async switched(off) {
    const key = JSON.stringify(off);
    if (!this.switches.has(key)) {
      this.switches.set(key, this.setup.model.resume(this.outputs.inputs, off).then((run) =>
        ({ run, result: headSwitch(this.md, this.outputs.output, run.outputs.output, off) })));
    }
    return this.switches.get(key);
  }

  /** A switch the learner asked for: its result, and its run reported (`lastRun`). */
  async learnerSwitch(off) {
    const { run, result } = await this.switched(off);
    this.setup.report(run, run.outputs.output, off);
    return result;
  }

  /** What comes after the views: the tour (its two switches run first) and DAAM (a
   * backward pass); each sent to the component as it is ready. `shown()`: this photo is
   * still the one on screen. */
  async complete(shown, refresh, mark) {
    const { md, outputs } = this;
    const switches = new Map();
    for (const pair of switchedHeads(md, this.overview, this.setup.tour)) {
      switches.set(pair.join(","), (await this.switched([pair])).result);
    }
    this.steps = resolveSteps(this.overview, (b, h) => switches.get(`${b},${h}`), this.setup.tour);
    mark("tour");
    if (shown()) await refresh();
    if (typeof md.daam === "string") return;
    const target = this.overview.prediction.top[0];
    const { weights } = knnWeights(md.knn, outputs.output, target.index);
    const { maps } = await this.setup.model.daam(outputs.inputs, weights);
    this.overview.daam = daamFrames(md, maps, target.label);
    this.daamMaps = maps;
    mark("daam");
    if (shown()) await refresh();
  }

  /** What the server would answer to the component's `view` (explainer/component.component_data). */
  async reply(view, presentation) {
    const last = this.md.blocks - 1, wire = this.setup.api.wire;
    const block = Number.isInteger(view.block) && view.block >= 0 && view.block <= last ? view.block : last;
    const wanted = wire.wants(view, this.signature, block), holds = wanted.holds;
    // heads switched off in a view about another picture (the one shown before this photo)
    // do not carry over: a new picture starts with every head on, as on the live page
    const off = (holds && Array.isArray(view.off) ? view.off : []).filter((p) => Array.isArray(p) && p.length === 2 &&
      Number.isInteger(p[0]) && Number.isInteger(p[1]) && p[0] >= 0 && p[0] < this.md.blocks && p[1] >= 0 && p[1] < this.md.heads);
    return encode(wire, wire.message({
      signature: this.signature, presentation, overview: holds ? null : this.overview,
      detail: wanted.detail ? detail(this.md, this.setup.template, this.outputs, block) : null,
      vectors: wanted.vectors ? vectors(this.md, this.outputs, block) : null,
      // computed after the overview: sent with every reply until the component has them
      daam: holds && this.overview.daam.codes ? this.overview.daam : null,
      tour: { steps: this.steps, active: null, resume: null },
      initial: { block, stage: "blocks" },
      switch: { live: true, result: off.length ? await this.learnerSwitch(off) : null },
    }));
  }
}

class OwnPhoto {
  constructor(api) {
    this.api = api;
    this.md = null;
    this.template = null;
    this.model = null;
    this.busy = false;
    this.warming = null;
    this.loading = null;
  }

  build() {
    const box = el("section", "own-photo");
    box.id = "own-photo";
    box.appendChild(el("h2", "", "Use your own photo"));
    const why = cannotRun();
    if (why) {
      box.appendChild(el("p", "own-fallback", `${why} The recorded pictures above still work; the ViT Lens app runs the model for your photo.`));
      return box;
    }
    box.appendChild(el("p", "", "Choose a photo, drop one on this box, or take one with a phone's camera. " +
      "The model runs in this browser: the photo never leaves your device."));
    const row = el("div", "own-buttons");
    const choose = el("input");
    choose.type = "file"; choose.accept = "image/*"; choose.id = "own-file";
    const chooseLabel = el("label", "own-choose", "Choose a photo ");
    chooseLabel.appendChild(choose);
    const camera = el("input");
    camera.type = "file"; camera.accept = "image/*"; camera.setAttribute("capture", "environment"); camera.id = "own-camera";
    const cameraLabel = el("label", "own-camera", "Take a photo ");
    cameraLabel.appendChild(camera);
    row.append(chooseLabel, cameraLabel);
    box.appendChild(row);
    this.progress = el("p", "own-progress");
    this.progress.setAttribute("role", "status");
    this.progress.id = "own-progress";
    box.appendChild(this.progress);
    if (!self.crossOriginIsolated) {
      box.appendChild(el("p", "own-note muted", "Opened from disk (or from a server without cross-origin isolation), " +
        "the model runs on one thread: a photo took 1 to 2 s (3.4 to 6 s when the model had to start first) on a busy 2-core test machine; " +
        "the line above says how long it takes here."));
    }
    for (const input of [choose, camera]) input.addEventListener("change", () => input.files[0] && this.use(input.files[0]));
    // the runtime and the model take seconds to start: begin when the learner reaches for
    // the box (pointer, focus, touch, a file dragged over), not at opening (memory, a phone)
    for (const name of ["pointerenter", "focusin", "touchstart", "dragenter"]) {
      box.addEventListener(name, () => this.warm(), { once: true, passive: true });
    }
    box.addEventListener("dragover", (event) => { event.preventDefault(); box.classList.add("drop"); });
    box.addEventListener("dragleave", () => box.classList.remove("drop"));
    box.addEventListener("drop", (event) => {
      event.preventDefault();
      box.classList.remove("drop");
      const file = event.dataTransfer.files[0];
      if (file) this.use(file);
    });
    return box;
  }

  say(text) { if (this.progress) this.progress.textContent = text; }

  /** The model's data, the recorded overview (the model's facts) and the worker: once. */
  load() {
    this.loading = this.loading || (async () => {
      const wire = this.api.wire;
      this.md = modelData(decode(wire, await this.api.modelMessage()));
      this.template = decode(wire, await this.api.templateOverview()).overview;
      this.tour = this.api.tour;
      const sources = await this.api.sources;
      this.model = new BrowserModel({ ...sources, model: decode(wire, sources.model) }, this.md,
        (text) => this.say(`${text}\u2026`));
      window.vitLens = window.vitLens || {};
      window.vitLens.model = this.model;  // for automation: run, resume, daam
    })();
    return this.loading;
  }

  /** Start the runtime and read the model ahead of a photo; a failure is reported when
   * the photo comes. */
  warm() {
    if (!this.warming) {
      this.warming = this.load().then(() => this.model.start()).then(async (ms) => {
        window.vitLens = window.vitLens || {};
        window.vitLens.warmMs = ms;
        // one forward on a blank picture: the runtime's first run is its slowest, and the
        // learner is told how long a photo takes on this device before choosing one
        const md = this.md, blank = await this.model.run(new Float32Array(3 * md.input[0] * md.input[1]));
        if (!this.busy) {
          this.say(`Ready: the model takes about ${seconds(blank.ms)} per photo here, on ` +
            `${this.threadWords()}.`);
        }
      }).catch(() => {});
    }
    return this.warming;
  }

  threadWords() {
    return this.model.threads === 1 ? "one thread" : `${this.model.threads} threads`;
  }

  /** The last run, for automation and tests (the issue's `window.vitLens.lastRun`). */
  report(run, output, off) {
    window.vitLens = window.vitLens || {};
    window.vitLens.lastRun = { ms: run.ms, top: decodeTop(this.md, output), backend: this.model.backend,
      threads: this.model.threads, off };
    return window.vitLens.lastRun;
  }

  async forward(pixels) {
    const run = await this.model.run(pixels, []);
    // the last block's [CLS] attention row of every head, for the bench's check against the server
    const { tokens: n, heads, blocks } = this.md, last = (blocks - 1) * heads;
    this.report(run, run.outputs.output, []).clsLast = Array.from({ length: heads }, (_, h) =>
      Array.from(run.outputs.attention.subarray((last + h) * n * n, (last + h) * n * n + n)));
    return run;
  }

  async use(file) {
    if (this.busy) return;
    this.busy = true;
    const started = performance.now(), phases = {};
    const mark = (name) => { phases[name] = Math.round(performance.now() - started); };
    let own = null;
    try {
      this.say("reading the photo\u2026");
      await this.load();
      mark("model_data");
      const prepared = prepare(this.md, await decodeFile(file));
      mark("photo");
      await this.model.start();
      mark("runtime");
      this.say(`running the model on ${this.threadWords()}\u2026`);
      const run = await this.forward(prepared.pixels);
      mark("forward");
      this.say("computing the views\u2026");
      own = new OwnPicture(this, prepared, run.outputs, file.name || "photo");
      mark("views");
      // for automation: the payloads as the component gets them (one Explainer message)
      window.vitLens.payloads = (block) => encode(this.api.wire, { overview: own.overview,
        detail: detail(this.md, this.template, own.outputs, block), vectors: vectors(this.md, own.outputs, block),
        steps: own.steps });
      window.vitLens.own = own;
      await this.api.show(own, file.name || "your photo");
      mark("shown");
      this.say(`Your photo: model ${seconds(run.ms)} on ${this.threadWords()}, ` +
        `every view but DAAM and the tour drawn ${seconds(performance.now() - started)} after choosing it; ` +
        "the tour and DAAM follow\u2026");
    } catch (error) {
      this.say(`This photo could not be explained: ${error && error.message ? error.message : error}`);
      this.busy = false;
      return;
    }
    this.busy = false;
    try {
      await own.complete(() => this.api.isShown(own), () => this.api.refresh(), mark);
      if (this.api.isShown(own)) {
        this.say(`Your photo: model ${seconds(own.outputs && phases.forward - phases.runtime)} on ${this.threadWords()}; ` +
          `every view drawn ${seconds(phases.shown)} after choosing it, the tour ${seconds(phases.tour)}, ` +
          `DAAM ${seconds(phases.daam ?? phases.tour)}.`);
      }
    } catch (error) {
      this.say(`The tour or DAAM could not be computed for this photo: ${error && error.message ? error.message : error}`);
    }
    window.vitLens.phases = phases;
  }
}

function decodeTop(md, feature) {
  return topClasses(md.knn, knnVote(md.knn, feature).probabilities).map((p) => ({ label: p.label, probability: p.probability }));
}

/** api: {mountPanel(element), modelMessage(), templateOverview(), sources (worker, runtime,
 * wasm, model bytes), tour (dashboard/explainer/tour.browser_tour), show(own, name),
 * isShown(own), refresh()}. */
export default function setup(api) {
  const own = new OwnPhoto(api);
  api.mountPanel(own.build());
  return own;
}
