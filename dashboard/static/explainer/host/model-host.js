/* ViT Lens lesson: the model in the browser (written into the page by
 * dashboard/explainer/lesson_export.py when the lesson carries the model, after lesson.js; ASCII only).
 * It loads the browser-model modules (dashboard/static/explainer/model/, inlined and linked
 * as the component's are, by lesson.js's linker), gives them the model's bytes (packed in this page, or as files beside a
 * static site's page) and shows the learner's own photo through the same component. */

let api = null, model = null;  // lesson.js's API and the model's manifest entry, at start()
const blobUrl = (parts, type) => URL.createObjectURL(new Blob(Array.isArray(parts) ? parts : [parts], { type }));

async function packedPart(name) {  // one part of the model blob, inflated
  const [offset, length] = model.parts[name];
  return api.inflate(api.blobBytes(model.blob).subarray(offset, offset + length));
}

async function fileBytes(path) {
  const response = await fetch(path);
  if (!response.ok) throw new Error(`${path} could not be read (${response.status})`);
  return new Uint8Array(await response.arrayBuffer());
}

const absolute = (path) => new URL(path, window.location.href).href;

/** Where the worker finds the runtime and its WebAssembly, and the model's bytes (its graphs
 * and weights: one Explainer message, xai_core/browser_model/bundle.model_file). */
async function sources() {
  if (model.files) {  // a static site: separate files the browser caches
    return { worker: blobUrl(model.worker, "text/javascript"), runtime: absolute(model.files.runtime),
      wasm: absolute(model.files.wasm), model: await fileBytes(model.files.model) };
  }
  // from disk: one classic worker script, the runtime's classic build first (see worker.js)
  return { worker: blobUrl([await packedPart("runtime"), "\n", model.worker], "text/javascript"), runtime: null,
    wasm: (await packedPart("wasm")).buffer, model: await packedPart("model") };
}

function picker() {
  const select = document.getElementById("lesson-image");
  let option = select.querySelector('option[value="own"]');
  if (!option) {
    option = document.createElement("option");
    option.value = "own";
    select.appendChild(option);
  }
  return { select, option };
}

/** lesson.js's API: lesson.js runs as soon as the page reaches it (an async module), long before
 * this script (deferred to the end of the page, after the model's bytes); waited for anyway. */
function hostReady() {
  if (window.__vitLessonHost) return Promise.resolve(window.__vitLessonHost);
  return new Promise((resolve) => window.addEventListener("vit-lesson-host", () => resolve(window.__vitLessonHost), { once: true }));
}

async function start() {
  api = await hostReady();
  await api.ready;  // the component's wire format (wire.js), which the own photo's messages use
  model = api.manifest.browser_model;
  const setup = await api.loadModules(model.modules);
  let cached = null;
  setup({
    tour: model.tour,
    mountPanel(element) {
      const place = document.getElementById("lesson-own-photo");
      place.textContent = "";
      place.appendChild(element);
    },
    get wire() { return api.wire(); },  // the component's wire format (its wire.js)
    modelMessage: () => (model.files ? fileBytes(model.files.data) : packedPart("data")),
    templateOverview: () => api.part(0, api.manifest.images[0].overview),
    get sources() { return cached || (cached = sources()); },
    async show(own, name) {
      const { select, option } = picker();
      option.textContent = `Your photo: ${name}`;
      select.value = "own";
      api.host.own = own;
      await this.refresh();
    },
    isShown: (own) => api.host.own === own,
    async refresh() {  // the component has the photo's views: wait for them to be painted
      await api.request();
      await new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));
    },
  });
}

start().catch((error) => window.__vitLessonHost.say(`The model could not be set up in this browser: ${error && error.message ? error.message : error}`));
