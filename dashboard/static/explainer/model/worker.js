/* The model's graphs in a Web Worker (the page stays responsive while they run): the
 * vendored onnxruntime-web (WebAssembly) runs the Explainer's graphs
 * (xai_core/browser_model/graph.py): `embed`, then ONE `block` graph for every block, fed
 * that block's weights; `block_grad` and `ending_grad` for DAAM's backward. A classic worker
 * script (no import statement): a page opened from disk can start a worker only from a blob:
 * URL, and Chromium refuses module workers and module imports there, so the one-file lesson
 * puts the runtime's classic build (`self.ort`, dashboard/explainer/lesson_model.classic_runtime)
 * before this code; a site's worker imports the runtime's module from its URL.
 *
 * Messages in: {type: "init", runtime (a module URL, or null when self.ort is there), wasm
 * (bytes or URL), graphs {name: ONNX bytes}, inputs {name: [input names]}, weights {blocks:
 * [{name: {dtype, array, shape}}], ending: {...}}, threads, backend}, {type: "run", id, pixels,
 * mask}, {type: "resume", id, x, start, mask}, {type: "endingGrad", id, x, grad}, {type:
 * "blockGrad", id, block, x, grad}; one at a time, in the order they came.
 * Out: {type: "progress", text}, {type: "ready", ms, backend}, {type: "result", id, outputs,
 * ms}, {type: "error", id, text}. */

let ort = null, sessions = {}, graphInputs = {}, blockWeights = [], endingWeights = {};
let shapes = null, backend = "wasm";

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

const tensorOf = ({ dtype, array, shape }) => new ort.Tensor(dtype === "f16" ? "float16" : "float32", array, shape);
const tensors = (weights) => Object.fromEntries(Object.entries(weights).map(([name, item]) => [name, tensorOf(item)]));

async function init(message) {
  const started = performance.now();
  postMessage({ type: "progress", text: "starting the runtime" });
  ort = self.ort || await import(message.runtime);
  ort.env.wasm.numThreads = message.threads;
  ort.env.wasm.proxy = false;
  ort.env.wasm.wasmBinary = await wasmBytes(message.wasm);
  postMessage({ type: "progress", text: "reading the model" });
  graphInputs = message.inputs;
  blockWeights = message.weights.blocks.map(tensors);
  endingWeights = tensors(message.weights.ending);
  const options = { executionProviders: [message.backend || "wasm"], graphOptimizationLevel: "all" };
  for (const [name, bytes] of Object.entries(message.graphs)) sessions[name] = await ort.InferenceSession.create(bytes, options);
  backend = message.backend || "wasm";
  shapes = message.shapes;
  postMessage({ type: "ready", ms: performance.now() - started, backend });
}

/** One graph's run with the feeds it takes (a graph lists the inputs it kept). */
function runGraph(name, feeds, fetches) {
  const wanted = graphInputs[name], given = {};
  for (const input of wanted) given[input] = feeds[input];
  return fetches ? sessions[name].run(given, fetches) : sessions[name].run(given);
}

const sequence = (data) => new ort.Tensor("float32", data, shapes.tokens);

/** Blocks `start`..: each block's outputs (`fetches`, all when null) and the sequence that
 * entered each block. */
async function blocks(x, mask, start, fetches) {
  const heads = shapes.heads, found = [], entered = [];
  for (let b = start; b < blockWeights.length; b++) {
    entered.push(x);
    const headMask = new ort.Tensor("float32", mask.slice(b * heads, (b + 1) * heads), [heads]);
    const result = await runGraph("block", { x: sequence(x), head_mask: headMask, ...blockWeights[b], ...endingWeights }, fetches);
    found.push(result);
    x = result.x_out.data;
  }
  entered.push(x);
  return { found, entered };
}

/** Per-block outputs stacked in block order, as one array per name; "inputs": what entered
 * each block (and left the last), "output": the last block's read-out (the model's output). */
function stack(found, entered, names) {
  const outputs = {};
  for (const name of names) {
    const size = found[0][name].data.length, all = new Float32Array(size * found.length);
    found.forEach((result, b) => all.set(result[name].data, b * size));
    outputs[name] = all;
  }
  const size = entered[0].length, inputs = new Float32Array(size * entered.length);
  entered.forEach((x, b) => inputs.set(x, b * size));
  outputs.inputs = inputs;
  outputs.output = found[found.length - 1].readout.data;
  return outputs;
}

async function run({ pixels, mask }) {
  const embedded = await runGraph("embed", { pixels: new ort.Tensor("float32", pixels, shapes.pixels) });
  const { found, entered } = await blocks(embedded.tokens.data, mask, 0, null);
  return stack(found, entered, shapes.stacked);
}

/** A head switch: blocks `start`.. on the sequence that entered block `start` in the
 * photo's forward (the blocks before it are unchanged); only the output is read out. */
async function resume({ x, start, mask }) {
  const { found } = await blocks(x, mask, start, ["x_out", "readout"]);
  return { output: found[found.length - 1].readout.data };
}

/** DAAM's backward, one step per job (a head switch asked meanwhile waits for one step, not
 * for all): the gradient of the score at the output (`grad`) back through the final norm... */
async function endingGrad({ x, grad }) {
  const found = await runGraph("ending_grad", { x: sequence(x), score_grad: new ort.Tensor("float32", grad, [grad.length]), ...endingWeights });
  return { grad: found.grad.data };
}

/** ...then through block `block`: the gradient at its input and its DAAM map L_b. */
async function blockGrad({ block, x, grad }) {
  const found = await runGraph("block_grad", { x: sequence(x), grad_out: sequence(grad), ...blockWeights[block] });
  return { grad: found.grad_in.data, map: found.daam.data };
}

const JOBS = { run, resume, endingGrad, blockGrad };
let queue = Promise.resolve();  // one job at a time: a session runs one run at once

async function handle(data) {
  try {
    if (data.type === "init") { await init(data); return; }
    const started = performance.now(), outputs = await JOBS[data.type](data);
    for (const [name, array] of Object.entries(outputs)) {  // each its own buffer, to hand over
      if (array.byteOffset || array.byteLength !== array.buffer.byteLength) outputs[name] = array.slice();
    }
    postMessage({ type: "result", id: data.id, outputs, ms: performance.now() - started },
      Object.values(outputs).map((array) => array.buffer));
  } catch (error) {
    postMessage({ type: "error", id: data.id, text: String(error && error.message ? error.message : error) });
  }
}

onmessage = ({ data }) => { queue = queue.then(() => handle(data)); };
