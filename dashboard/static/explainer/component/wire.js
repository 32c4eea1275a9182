/* The wire format: what a server (dashboard/explainer/component.py, the offline lesson's
 * host, the model in the browser) sends the component. One binary frame per message
 * ("VXB1", the header's length, a JSON header, the arrays' bytes: xai_core/lessons/
 * explainer.encode_message) whose header holds FIELDS. The fields are declared in
 * xai_core/lessons/explainer.MESSAGE_FIELDS (what each holds) and mirrored here, checked
 * equal by tests/test_explainer_wire.py; nothing else lists them. The `view` state the
 * component sends back is declared the same way (VIEW_FIELDS, built with `view`). */

export const MAGIC = "VXB1";

// each field and its "nothing new" value: xai_core/lessons/explainer.MESSAGE_FIELDS
export const FIELDS = Object.freeze({
  "signature": null,
  "presentation": false,
  "overview": null,
  "detail": null,
  "vectors": null,
  "daam": null,
  "tour": {"steps": null, "active": null, "resume": null},
  "initial": {"block": null, "stage": "blocks"},
  "link": {"sample": null},
  "second_opinion": null,
  "switch": {"live": false, "result": null}
});

/** The fields given, every other declared one at its `nothings` value; a name not declared
 * is an error (`what`: "message" or "view", for its words). */
function filled(what, nothings, fields) {
  const unknown = Object.keys(fields).filter((name) => !(name in nothings));
  if (unknown.length) throw new Error(`not fields of an Explainer ${what}: ${unknown.join(", ")}`);
  return Object.fromEntries(Object.entries(nothings).map(([name, nothing]) =>
    [name, name in fields ? fields[name] : structuredClone(nothing)]));
}

/** A message: the fields given, every other at its "nothing new" value (as Python's
 * explainer.message). A name the wire format lacks is an error. */
export function message(fields) {
  return filled("message", FIELDS, fields);
}

// each field of the component's `view` state and its kind: xai_core/lessons/explainer.VIEW_FIELDS
export const VIEW_FIELDS = Object.freeze({
  "block": "int",
  "tour": "int",
  "have": "text",
  "blocks": "ints",
  "qk": "ints",
  "want_qk": "flag",
  "off": "pairs",
  "dismissed": "flag",
  "ask": "int"
});
const NOTHING = Object.freeze({ int: null, text: null, ints: [], pairs: [], flag: false });
const VIEW_NOTHINGS = Object.fromEntries(
  Object.entries(VIEW_FIELDS).map(([name, kind]) => [name, NOTHING[kind]]));

/** The component's `view` state: the fields given, every other at its kind's "nothing"
 * (null, [] or false; what the server reads as absent). A name it lacks is an error. */
export function view(fields) {
  return filled("view", VIEW_NOTHINGS, fields);
}

/** What a server sends for the component's `view` state (explainer/component.component_data):
 * whether the browser holds this picture's overview (`signature`), and whether `block`'s
 * detail and its queries and keys must travel. */
export function wants(view, signature, block) {
  const holds = view.have === signature;
  return { holds, detail: !(holds && (view.blocks || []).includes(block)),
    vectors: view.want_qk === true && !(holds && (view.qk || []).includes(block)) };
}

/** A frame's parts: its JSON header (parsed) and the arrays' bytes after it (`bytes` must
 * start its own buffer's view at a multiple of 8, as the arrays are viewed in place). */
export function unframe(bytes) {
  if (String.fromCharCode(...bytes.subarray(0, 4)) !== MAGIC) throw new Error("ViT Explainer: unexpected message");
  const length = new DataView(bytes.buffer, bytes.byteOffset).getUint32(4, true);
  return { header: JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + length))),
    body: bytes.subarray(8 + length), bodyOffset: 8 + length };
}

/** One frame from a header (its arrays {dtype, shape, offset} counted from the end of the
 * header) and the arrays' bytes, one chunk after another (each a multiple of 8 bytes). */
export function frame(header, chunks) {
  const json = new TextEncoder().encode(JSON.stringify(header)), pad = (8 - ((json.length + 8) % 8)) % 8;
  const size = chunks.reduce((total, chunk) => total + chunk.length, 0);
  const out = new Uint8Array(8 + json.length + pad + size);
  out.set(new TextEncoder().encode(MAGIC), 0);
  new DataView(out.buffer).setUint32(4, json.length + pad, true);
  out.set(json, 8);
  out.fill(0x20, 8 + json.length, 8 + json.length + pad);
  let at = 8 + json.length + pad;
  for (const chunk of chunks) { out.set(chunk, at); at += chunk.length; }
  return out;
}
