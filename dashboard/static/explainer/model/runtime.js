/* The model on the main thread's side: what this browser can do (WebAssembly SIMD, memory,
 * threads), the worker that runs the graphs (worker.js), one job at a time: a forward, a
 * head switch restarted at its block, DAAM's backward. */

// the smallest module using a SIMD instruction (v128.const, i8x16.popcnt): valid only where
// WebAssembly SIMD is supported, which the vendored runtime's build needs
const SIMD_PROBE = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 10, 1,
  8, 0, 65, 0, 253, 15, 253, 98, 11]);
export const MIN_MEMORY_GB = 2;  // the forward holds about 0.3 GB: below 2 GB a phone tab dies

/** Why this browser cannot run the model ("" when it can). */
export function cannotRun() {
  if (typeof WebAssembly !== "object" || !WebAssembly.validate(SIMD_PROBE)) {
    return "This browser has no WebAssembly SIMD, which the model's runtime needs.";
  }
  if (typeof Worker !== "function") return "This browser cannot run a Web Worker, which the model needs.";
  if (navigator.deviceMemory && navigator.deviceMemory < MIN_MEMORY_GB) {
    return `This device reports ${navigator.deviceMemory} GB of memory; the model needs about ${MIN_MEMORY_GB} GB.`;
  }
  return "";
}

/** Threads for the runtime: several only where the page is cross-origin isolated (a server
 * sending COOP/COEP headers; a file opened from disk never is), and one fewer than the cores
 * (at least one, at most four), the server's rule (docs/hosting.md, CPU threads): an op waits
 * for the slowest of its threads, and the page, the browser and other programs take a core at
 * times. On the busy 2-core test machine a forward took 0.53-0.61 s on one thread and
 * 0.88-1.03 s on two. */
export function threadCount() {
  if (!self.crossOriginIsolated) return 1;
  return Math.max(1, Math.min(4, (navigator.hardwareConcurrency || 1) - 1));
}

/** The model message's graphs and weights as the worker takes them (typed arrays; their
 * buffers are handed over, not copied). */
function workerModel(decoded) {
  const found = decoded.browser_graphs, transfer = [];
  const plain = ({ dtype, array, shape }) => { transfer.push(array.buffer); return { dtype, array, shape }; };
  const weights = (group) => Object.fromEntries(Object.entries(group).map(([name, item]) => [name, plain(item)]));
  const graphs = Object.fromEntries(Object.entries(found.graphs).map(([name, item]) => {
    transfer.push(item.array.buffer);
    return [name, item.array];
  }));
  return { graphs, inputs: found.inputs, transfer,
    weights: { blocks: found.weights.blocks.map(weights), ending: weights(found.weights.ending) } };
}

export class BrowserModel {
  /** sources: {worker (URL), runtime (module URL), wasm, model (the decoded model message)};
   * md: model data. */
  constructor(sources, md, onProgress) {
    this.sources = sources;
    this.md = md;
    this.onProgress = onProgress;
    this.threads = threadCount();
    this.backend = "wasm";
    this.worker = null;
    this.ready = null;
    this.pending = new Map();
    this.next = 1;
  }

  start() {
    if (this.ready) return this.ready;
    this.worker = new Worker(this.sources.worker);  // classic: see worker.js
    const md = this.md;
    this.ready = new Promise((resolve, reject) => {
      this.worker.onmessage = ({ data }) => {
        if (data.type === "progress") this.onProgress(data.text);
        else if (data.type === "ready") { this.backend = data.backend; resolve(data.ms); }
        else if (data.type === "result" || data.type === "error") {
          const job = this.pending.get(data.id);
          if (!job) { if (data.type === "error") reject(new Error(data.text)); return; }
          this.pending.delete(data.id);
          if (data.type === "result") job.resolve(data); else job.reject(new Error(data.text));
        }
      };
      this.worker.onerror = (event) => reject(new Error(event.message || "the model's worker could not start"));
    });
    const { transfer, ...model } = workerModel(this.sources.model);
    this.worker.postMessage({ type: "init", runtime: this.sources.runtime, wasm: this.sources.wasm,
      ...model, threads: this.threads, backend: this.backend,
      shapes: { pixels: [1, 3, ...md.input], tokens: [md.tokens, md.width], heads: md.heads,
        stacked: md.outputs.filter((name) => name !== "output") } }, transfer);
    return this.ready;
  }

  async job(message, transfer = []) {
    await this.start();
    const id = this.next++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ ...message, id }, transfer);
    });
  }

  mask(off) {
    const md = this.md, mask = new Float32Array(md.blocks * md.heads).fill(1);
    for (const [b, h] of off) mask[b * md.heads + h] = 0;
    return mask;
  }

  /** One forward: {outputs (typed arrays by name: the graph's outputs stacked over the
   * blocks, and "inputs", the sequence entering each block), ms}. `off`: [block, head]. */
  run(pixels, off = []) {
    return this.job({ type: "run", pixels: pixels.slice(), mask: this.mask(off) });
  }

  /** A head switch on a photo already run: from the first block with a head off, on the
   * sequence that entered it (`inputs` of the photo's forward): {outputs: {output}, ms}. */
  resume(inputs, off) {
    const md = this.md, start = Math.min(...off.map(([b]) => b)), size = md.tokens * md.width;
    return this.job({ type: "resume", x: inputs.slice(start * size, (start + 1) * size), start, mask: this.mask(off) });
  }

  /** DAAM's maps L_b (blocks, patches) for the gradient `grad` of the score at the output:
   * the backward block by block down, one job each (a head switch waits for one block). */
  async daam(inputs, grad) {
    const md = this.md, size = md.tokens * md.width, at = (b) => inputs.slice(b * size, (b + 1) * size);
    const started = performance.now();
    let gradient = (await this.job({ type: "endingGrad", x: at(md.blocks), grad: Float32Array.from(grad) })).outputs.grad;
    const patches = md.tokens - md.prefix, maps = new Float32Array(md.blocks * patches);
    for (let b = md.blocks - 1; b >= 0; b--) {
      const found = (await this.job({ type: "blockGrad", block: b, x: at(b), grad: gradient }, [gradient.buffer])).outputs;
      gradient = found.grad;
      maps.set(found.map, b * patches);
    }
    return { maps, ms: performance.now() - started };
  }
}
