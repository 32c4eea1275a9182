/* ViT Lens lesson: the standalone host of the ViT Explainer component in one offline HTML
 * file (written by dashboard/explainer/lesson_export.py after the module linker, link.js; this file
 * must stay ASCII: the page is windows-1252).
 *
 * The component is the live page's own code, mounted exactly as Streamlit mounts it:
 * mount({ parentElement, data, setStateValue, setTriggerValue }). This host plays the
 * server: it answers the component's `view` state as explainer/component.component_data
 * does (the overview when the component lacks it, the shown block's detail unless kept, its
 * queries and keys while their panel is in view), from messages packed in the page; it
 * composes each answer from the packed messages (one header, the arrays re-offset) with the
 * component's own wire module (wire.js: the fields, the frame, what a view wants) and makes
 * no request of any kind. What needs the server is said in words.
 */

const manifest = JSON.parse(document.getElementById("lesson-manifest").textContent);
const FORMAT = 2;  // the lesson layout this host reads (dashboard/explainer/lesson_export.LESSON_FORMAT)
const ESCAPE = 0x3d;  // "=": the next byte, less 64, is the real one
const root = document.getElementById("lesson-explainer");
const notice = document.getElementById("lesson-notice");
let linkProblem = "";  // what a `?vx_...` address asked for that this file lacks
const TIMING = (window.__vitLesson = { opened: performance.now(), mounted: null, replies: 0 });

function say(text) {
  notice.textContent = text || "";
  notice.hidden = !text;
}

/* ---------------------------------------------------------------- bytes */

let byteOfChar = null;
/** windows-1252 character -> byte, from the browser's own decoder (the one that read the page). */
function charTable() {
  if (byteOfChar) return byteOfChar;
  const chars = new TextDecoder("windows-1252").decode(Uint8Array.from({ length: 256 }, (_, i) => i));
  byteOfChar = new Int16Array(65536).fill(-1);
  for (let i = 0; i < 256; i++) byteOfChar[chars.charCodeAt(i)] = i;
  return byteOfChar;
}

const blobs = new Map();  // element id -> its packed bytes
function imageBytes(index) {
  return blobBytes(manifest.images[index].blob);
}

function blobBytes(id) {  // the bytes of one <script type="application/octet-stream" id=...>
  if (blobs.has(id)) return blobs.get(id);
  const text = document.getElementById(id).textContent, table = charTable();
  const out = new Uint8Array(text.length);
  let n = 0;
  for (let i = 0; i < text.length; i++) {
    let byte = table[text.charCodeAt(i)];
    if (byte === ESCAPE) byte = (table[text.charCodeAt(++i)] - 64) & 255;
    else if (byte < 0) throw new Error("the lesson's data was changed after it was written");
    out[n++] = byte;
  }
  blobs.set(id, out.subarray(0, n));
  document.getElementById(id).textContent = "";  // the bytes are kept: free the text (2 bytes a byte)
  return blobs.get(id);
}

async function inflate(bytes) {
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

const parts = new Map();  // "image:offset" -> an Explainer message (bytes)
async function part(index, [offset, length]) {  // every part's codec: "deflate"
  const key = `${index}:${offset}`;
  if (!parts.has(key)) {
    parts.set(key, await inflate(imageBytes(index).subarray(offset, offset + length)));
  }
  return parts.get(key);
}

/* ---------------------------------------------------------------- messages */

let wire = null;  // the component's wire.js (the wire format), once the modules are linked
const isArray = (v) => v && typeof v === "object" && "offset" in v && "dtype" in v && "shape" in v;

/** One message (wire.message) from plain `fields` and the top-level entries of packed
 * messages: their arrays follow one another, offsets moved to match. */
function compose(fields, messages) {
  const header = { ...fields }, bodies = [];
  let size = 0;
  for (const packed of messages) {
    const { header: head, body } = wire.unframe(packed);
    const base = size;
    const shift = (v) => Array.isArray(v) ? v.map(shift)
      : !v || typeof v !== "object" ? v
        : isArray(v) ? { ...v, offset: v.offset + base }
          : Object.fromEntries(Object.entries(v).map(([k, x]) => [k, shift(x)]));
    Object.assign(header, shift(head));
    bodies.push(body);
    size += body.length;  // a multiple of 8: every array is padded
  }
  return wire.frame(wire.message(header), bodies);
}

/* ---------------------------------------------------------------- the host */

const host = { image: 0, presentation: false, saved: null, view: {}, linked: null,
  start: manifest.tour ? 1 : null, mount: null, queue: Promise.resolve() };

function request(view) {
  host.view = wire.view(view || {});
  const asked = host.view;
  host.queue = host.queue.then(() => reply(asked)).catch(fail);
}

function fail(error) {
  root.textContent = `The lesson could not open: ${error && error.message ? error.message : error}.`;
}

/** What the live server answers to a `view` (dashboard/explainer/component.component_data). */
async function reply(view) {
  if (host.own) {  // the learner's own photo: dashboard/static/explainer/host/model-host.js answers
    host.mount({ parentElement: root, data: await host.own.reply(view, host.presentation), setStateValue, setTriggerValue });
    say("");
    return;
  }
  const index = host.image, img = manifest.images[index], steps = img.steps;
  const holds = view.have === img.signature;
  const step = Number.isInteger(view.tour) && view.tour >= 1 && view.tour <= steps.length ? view.tour : null;
  if (step) host.saved = step;
  else if (view.dismissed === true) host.saved = null;
  const active = step || (holds ? null : host.start);
  const linked = holds ? {} : (host.linked || {});
  let block = Number.isInteger(view.block) ? view.block : linked.block;
  if (!Number.isInteger(block) || block < 0 || block >= img.limits.blocks) {
    block = active ? steps[active - 1].block : manifest.blocks[manifest.blocks.length - 1];
  }
  const packed = String(block) in img.detail, wanted = wire.wants(view, img.signature, block);
  const messages = [];
  if (!holds) messages.push(await part(index, img.overview));
  if (packed && wanted.detail) messages.push(await part(index, img.detail[block]));
  if (packed && wanted.vectors) messages.push(await part(index, img.vectors[block]));
  const { block: _ignored, ...initial } = linked;
  const data = compose({
    signature: img.signature, presentation: host.presentation,
    tour: { steps: holds ? null : steps, active, resume: step ? null : host.saved },
    initial: { ...initial, block, stage: "blocks" },
  }, messages);
  if (!holds) { host.start = null; host.linked = null; }
  say(packed ? linkProblem : `Block ${block} was left out of this file when it was exported ` +
    `(it holds block${manifest.blocks.length > 1 ? "s" : ""} ${manifest.blocks.join(", ")}): ` +
    "its full attention needs the ViT Lens server. The maps over the picture still play.");
  linkProblem = "";
  host.mount({ parentElement: root, data, setStateValue, setTriggerValue });
  TIMING.replies += 1;
  if (TIMING.mounted === null) TIMING.mounted = performance.now();
}

function setStateValue(name, value) {
  if (name === "view") request(value);
}

function setTriggerValue(name, value) {
  if (name !== "navigate") return;
  const step = manifest.images[host.image].steps.find((s) => s.page && s.page.file === value);
  const title = step ? step.page.title : "That page";
  say(`\u201c${title}\u201d is a page of the ViT Lens app: it computes on the app's server, ` +
    "so it is not in this offline file. Open ViT Lens to go deeper; the tour here goes on with Next.");
}

/* ---------------------------------------------------------------- a link to a view */

/** `?vx_block=6&vx_head=2&vx_patch=120&vx_map=rollout&tour=3&image=1` (the component's
 * "Copy link" writes the vx_ part): read once at opening, as the live page reads it. */
function readLink() {
  const params = new URLSearchParams(window.location.search), problems = [];
  const image = params.get("image");
  if (image !== null) {
    if (/^\d+$/.test(image) && Number(image) < manifest.images.length) host.image = Number(image);
    else problems.push(`image ${image} (pictures 0-${manifest.images.length - 1})`);
  }
  const limits = manifest.images[host.image].limits, linked = {};
  const whole = (raw, count) => /^\d+$/.test(raw) && Number(raw) < count ? Number(raw) : null;
  for (const [name, count] of [["block", limits.blocks], ["head", limits.heads], ["patch", limits.patches]]) {
    const raw = params.get(`vx_${name}`);
    if (raw === null) continue;
    const value = name === "head" && raw === "mean" ? -1 : whole(raw, count);
    if (value === null) problems.push(`${name} ${raw} (0-${count - 1})`);
    else linked[name] = value;
  }
  const map = params.get("vx_map");
  if (map !== null) {
    if (limits.maps.includes(map)) linked.overlay = map;
    else problems.push(`map ${map} (${limits.maps.join(", ")})`);
  }
  const tour = params.get("tour");
  if (tour !== null) {
    const steps = manifest.images[host.image].steps.length, value = whole(tour, steps + 1);
    if (value) host.start = value;
    else problems.push(`tour step ${tour} (1-${steps})`);
  }
  // a link to a view ("Copy link": no tour step) opens that view, not the tour's step 1
  if (tour === null && Object.keys(linked).length) host.start = null;
  host.linked = linked;
  if (problems.length) linkProblem = `The address asks for ${problems.join("; ")}, not in this lesson: left out.`;
}

/* ---------------------------------------------------------------- opening */

/** Link modules packed in the page (linkModules, link.js) and import them: the entry's
 * module, and the wire module when they are the component's. */
async function loadModules(modules) {
  const urls = linkModules(modules);
  if (urls["wire.js"] && !wire) wire = await import(urls["wire.js"]);
  return (await import(urls[modules[modules.length - 1].name])).default;
}

function wireControls() {
  const picker = document.getElementById("lesson-image");
  if (picker) {
    picker.value = String(host.image);
    picker.addEventListener("change", () => {
      if (picker.value === "own") return;  // model-host.js shows the learner's photo
      host.own = null;
      host.image = Number(picker.value);
      request(host.view);
    });
  }
  const present = document.getElementById("lesson-present");
  present.addEventListener("change", () => { host.presentation = present.checked; request(host.view); });
}

async function open() {
  if (manifest.format !== FORMAT) {
    throw new Error(`this file is lesson format ${manifest.format}; its reader reads format ${FORMAT}`);
  }
  readLink();
  host.mount = await loadModules(manifest.modules);
  root.textContent = "";
  wireControls();
  request({});
}

const opened = open();  // the component linked (its wire.js with it) and first asked
opened.catch(fail);

/* What dashboard/static/explainer/host/model-host.js (present when the file carries the
 * model) uses; `ready` once the component (and its wire format) is linked. */
window.__vitLessonHost = { manifest, host, request: () => { request(host.view); return host.queue; }, say, blobBytes, inflate,
  loadModules, part, wire: () => wire, ready: opened };
window.dispatchEvent(new Event("vit-lesson-host"));
