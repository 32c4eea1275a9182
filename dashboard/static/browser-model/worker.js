/* The model's forward in a Web Worker (the page stays responsive while it runs): the
 * vendored onnxruntime-web (WebAssembly) runs the Explainer's graph
 * (xai_core/browser_model/graph.py). A classic worker script (no import statement): a page
 * opened from disk can start a worker only from a blob: URL, and Chromium refuses module
 * workers and module imports there, so the one-file lesson puts the runtime's classic build
 * (`self.ort`, dashboard/lesson_model.classic_runtime) before this code; a site's worker
 * imports the runtime's module from its URL. Messages in: {type: "init", runtime (a module
 * URL, or null when self.ort is there),
 * wasm (bytes or URL), model (bytes or URL), threads}, {type: "run", id, pixels, mask};
 * out: {type: "progress", text}, {type: "ready", ms}, {type: "result", id, outputs, ms},
 * {type: "error", id, text}. */

let ort = null, session = null, inputShape = null, maskShape = null;

async function bytesOf(source, what) {
  if (typeof source !== "string") return source;
  postMessage({ type: "progress", text: `downloading ${what}` });
  const response = await fetch(source);
  if (!response.ok) throw new Error(`${what} could not be read (${response.status})`);
  return new Uint8Array(await response.arrayBuffer());
}

/** The runtime's WebAssembly: bytes, or a URL; a site stores it deflated (".deflate": 3.8 MB
 * instead of 14.8 MB, whatever the host compresses). */
async function wasmBytes(source) {
  if (typeof source !== "string" || !source.endsWith(".deflate")) return bytesOf(source, "the runtime");
  postMessage({ type: "progress", text: "downloading the runtime" });
  const response = await fetch(source);
  if (!response.ok) throw new Error(`the runtime could not be read (${response.status})`);
  return new Uint8Array(await new Response(response.body.pipeThrough(new DecompressionStream("deflate"))).arrayBuffer());
}

async function init({ runtime, wasm, model, threads, input, mask }) {
  const started = performance.now();
  postMessage({ type: "progress", text: "starting the runtime" });
  ort = self.ort || await import(runtime);
  ort.env.wasm.numThreads = threads;
  ort.env.wasm.proxy = false;
  ort.env.wasm.wasmBinary = await wasmBytes(wasm);
  const bytes = await bytesOf(model, "the model");
  postMessage({ type: "progress", text: `reading the model (${(bytes.byteLength / 1e6).toFixed(0)} MB)` });
  session = await ort.InferenceSession.create(bytes, { executionProviders: ["wasm"], graphOptimizationLevel: "all" });
  inputShape = input;
  maskShape = mask;
  postMessage({ type: "ready", ms: performance.now() - started });
}

async function run({ id, pixels, mask }) {
  const started = performance.now();
  const results = await session.run({
    pixels: new ort.Tensor("float32", pixels, inputShape),
    head_mask: new ort.Tensor("float32", mask, maskShape),
  });
  const outputs = {}, transfer = [];
  for (const name of session.outputNames) {
    outputs[name] = results[name].data;
    transfer.push(outputs[name].buffer);
  }
  postMessage({ type: "result", id, outputs, ms: performance.now() - started }, transfer);
}

onmessage = async ({ data }) => {
  try {
    if (data.type === "init") await init(data);
    else if (data.type === "run") await run(data);
  } catch (error) {
    postMessage({ type: "error", id: data.id, text: String(error && error.message ? error.message : error) });
  }
};
