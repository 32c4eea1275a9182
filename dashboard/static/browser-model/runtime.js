/* The model on the main thread's side: what this browser can do (WebAssembly SIMD, memory,
 * threads), the worker that runs the forward (worker.js), one forward at a time. */

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
 * sending COOP/COEP headers); a file opened from disk never is. */
export function threadCount() {
  if (!self.crossOriginIsolated) return 1;
  return Math.max(1, Math.min(4, navigator.hardwareConcurrency || 1));
}

export class BrowserModel {
  /** sources: {worker (URL), runtime (module URL), wasm, model (bytes or URLs)}; md: model data. */
  constructor(sources, md, onProgress) {
    this.sources = sources;
    this.md = md;
    this.onProgress = onProgress;
    this.threads = threadCount();
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
        else if (data.type === "ready") resolve(data.ms);
        else if (data.type === "result" || data.type === "error") {
          const job = this.pending.get(data.id);
          if (!job) { if (data.type === "error") reject(new Error(data.text)); return; }
          this.pending.delete(data.id);
          if (data.type === "result") job.resolve(data); else job.reject(new Error(data.text));
        }
      };
      this.worker.onerror = (event) => reject(new Error(event.message || "the model's worker could not start"));
    });
    this.worker.postMessage({ type: "init", runtime: this.sources.runtime, wasm: this.sources.wasm,
      model: this.sources.model, threads: this.threads, input: [1, 3, ...md.input], mask: [md.blocks, md.heads] });
    return this.ready;
  }

  /** One forward: {outputs (typed arrays by name), ms}. `off`: [block, head] pairs. */
  async run(pixels, off = []) {
    await this.start();
    const md = this.md, mask = new Float32Array(md.blocks * md.heads).fill(1);
    for (const [b, h] of off) mask[b * md.heads + h] = 0;
    const id = this.next++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ type: "run", id, pixels: pixels.slice(), mask });
    });
  }
}
