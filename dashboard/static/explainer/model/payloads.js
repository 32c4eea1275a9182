/* The Explainer's payloads for a picture the browser ran the model on: the same fields as
 * xai_core/explainer.py build_overview, build_block_detail and build_block_vectors, and the
 * head switch's result (explainer.head_switch), computed from the graph's outputs
 * (xai_core/browser_model/graph.py) and the model's data (bundle.model_data). The model's own
 * facts (stages, shapes, colour table) come from a recorded overview of the same model. */

import { classScore, dropWords, knnVote, openSet, top } from "./answer.js";
import { analyseSinks, headMatrix, queryRow, rolloutRows, sinkFacts } from "./attention.js";
import { distances, highNorm } from "./marks.js";
import { half, packed, signedRows, unsignedRows } from "./message.js";
import { fixed, general } from "./pyformat.js";

const round = (x, digits) => Math.round(x * 10 ** digits) / 10 ** digits;

/** One step's norms of a block: (tokens,) from norms (blocks, steps, tokens). */
function normsOf(md, out, block, step) {
  const n = md.tokens, s = md.norm_steps.indexOf(step), steps = md.norm_steps.length;
  return out.norms.subarray((block * steps + s) * n, (block * steps + s + 1) * n);
}

/** [CLS]-row maps over the patch grid (rows, patches) and prefix values (rows, prefix). */
function gridRows(md, rows) {
  const np = md.tokens - md.prefix, maps = new Float64Array(rows.length * np);
  const prefixes = new Float64Array(rows.length * md.prefix);
  rows.forEach((row, r) => {
    maps.set(row.subarray(md.prefix), r * np);
    prefixes.set(row.subarray(0, md.prefix), r * md.prefix);
  });
  return { ...unsignedRows(maps, rows.length, np, [rows.length]), prefix: half(prefixes, [rows.length, md.prefix]) };
}

function prediction(md, template, out) {
  const bank = md.knn, feature = out.output, vote = knnVote(bank, feature);
  return { head: "knn", classes: bank.classes.length, output_shape: template.prediction.output_shape,
    top: top(bank, vote.probabilities), open_set: openSet(bank, feature),
    k: bank.k, temperature: bank.temperature, bank_size: bank.labels.length, bank_classes: [...bank.classes],
    neighbours: vote.neighbours.map((n) => ({ label: n.label, source: n.source, similarity: round(n.similarity, 4) })) };
}

/** The overview: the template's model facts, this picture's numbers. `picture`: {image (data
 * URI of the model's input), facts (explainer._picture's fields)}. */
export function overview(md, template, out, picture) {
  const { attention } = out, heads = md.heads;
  const queryRows = [];
  for (let b = 0; b < md.blocks; b++) {
    const rows = [];
    for (let h = 0; h < heads; h++) rows.push(queryRow(md, attention, b, h));
    queryRows.push({ what: md.prefix ? "[CLS] row" : "mean over all patch rows (no [CLS] token)", ...gridRows(md, rows) });
  }
  const sinks = sinkFacts(md, analyseSinks(md, attention), template.sinks.rule);
  const rolled = rolloutRows(md, attention, sinks.start);
  const blocks = template.blocks.map((fact, b) => ({ ...fact, norm_out: half(normsOf(md, out, b, "x_out"), [md.tokens]) }));
  return {
    ...template, blocks, prediction: prediction(md, template, out), image: picture.image, picture: picture.facts,
    embedding_norms: half(normsOf(md, out, 0, "x_in"), [md.tokens]), query_rows: queryRows,
    high_norm: highNorm(md, (b) => normsOf(md, out, b, "x_out"), template.high_norm.rule),
    distance: distances(md, attention, template.layout.patch, template.distance.convention),
    readout: readout(md, out),
    sinks: sinks.facts,
    rollout: { blocks: rolled.map((_, i) => sinks.start + i), what: "[CLS] row", convention: template.rollout.convention,
      ...gridRows(md, rolled) },
    feature: half(out.output, [out.output.length]),
    daam: typeof md.daam === "string" ? { unavailable: md.daam } : { pending: DAAM_PENDING },
  };
}

export const DAAM_PENDING = "DAAM is being computed for your photo (a backward pass through every block)\u2026";

/** What each block would answer (xai_core/studies/readout.py, image level, k-NN): block b's
 * read-out feature voted on by block b's bank; the final answer's class score there. */
export function readout(md, out) {
  const width = md.width, banks = md.readout.banks, last = banks.length - 1;
  const target = top(md.knn, knnVote(md.knn, out.output).probabilities, 1)[0].index;
  const rows = banks.map((bank, b) => {
    const blockBank = { ...md.knn, labels: bank.labels, features: bank.features.array };
    const feature = out.readout.subarray(b * width, (b + 1) * width);
    const best = top(blockBank, knnVote(blockBank, feature).probabilities, 1)[0];
    return { best, score: classScore(blockBank, feature, target) };
  });
  const final = rows[last].best.index;
  let first = last;
  while (first > 0 && rows[first - 1].best.index === final) first -= 1;
  return { label: md.knn.classes[target], score_kind: md.knn.score_kind, bank: md.readout.bank, first_block: first,
    blocks: rows.map((r) => ({ label: r.best.label, share: round(r.best.probability, 4), target_score: round(r.score, 4) })) };
}

/** The overview's DAAM (explainer._daam_frames): the maps accumulated block by block. */
export function daamFrames(md, maps, targetLabel) {
  const patches = md.tokens - md.prefix, accumulated = new Float64Array(maps.length);
  for (let b = 0; b < md.blocks; b++) {
    for (let p = 0; p < patches; p++) {
      const at = b * patches + p;
      accumulated[at] = maps[at] + (b ? accumulated[at - patches] : 0);
    }
  }
  const blocks = [...Array(md.blocks).keys()];
  return { blocks, labels: blocks.map((b) => `block ${b}`), target: targetLabel, variant: md.daam.variant,
    convention: md.daam.convention, ...unsignedRows(accumulated, md.blocks, patches, [md.blocks]) };
}

function median(values) {
  const sorted = Float64Array.from(values).sort(), n = sorted.length;
  return n % 2 ? sorted[(n - 1) / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

/** explainer.layer_norm_note, from ‖γ‖ and the token lengths before and after. */
function layerNormNote(md, size, before, after) {
  if (size === null || size === undefined) return null;
  const width = md.width;
  return `LayerNorm gives every token mean 0 and standard deviation 1 over its ${width} ` +
    `numbers (a length of \u221a${width} \u2248 ${general(Math.sqrt(width), 3)}, whatever it had), then ` +
    `multiplies each number by a learned weight \u03b3 (here \u2016\u03b3\u2016 = ${general(size, 3)}) ` +
    `and adds a learned \u03b2: so every token leaves at a similar length (median ` +
    `${general(median(after), 3)}) whatever it came in with (median ${general(median(before), 3)}).`;
}

/** explainer.build_block_detail for block `b`. */
export function detail(md, template, out, b) {
  const n = md.tokens, heads = md.heads, prefix = md.prefix, np = n - prefix;
  const patchPart = new Float64Array(heads * n * np), prefixPart = new Float64Array(heads * n * prefix);
  for (let h = 0; h < heads; h++) {
    const a = headMatrix(out.attention, n, heads, b, h);
    for (let q = 0; q < n; q++) {
      const r = h * n + q;
      for (let k = 0; k < prefix; k++) prefixPart[r * prefix + k] = a[q * n + k];
      for (let k = prefix; k < n; k++) patchPart[r * np + k - prefix] = a[q * n + k];
    }
  }
  const perHead = (name) => out[name].subarray(b * heads * n, (b + 1) * heads * n);
  const norms = Object.fromEntries(md.norm_steps.map((step) => [step, half(normsOf(md, out, b, step), [n])]));
  const weights = md.norm_weights[b], fact = template.blocks[b];
  return {
    block: b, kind: "self", nq: n, nk: n, prefix, heads, head_dim: md.head_dim,
    talking_heads: fact.talking_heads, layer_scale: fact.layer_scale,
    attention: { ...unsignedRows(patchPart, heads * n, np, [heads, n]), prefix: half(prefixPart, [heads, n, prefix]) },
    q_norms: half(perHead("q_norms"), [heads, n]), norms, context_heads: half(perHead("context_heads"), [heads, n]),
    norm_notes: { ln1: layerNormNote(md, weights.ln1, normsOf(md, out, b, "x_in"), normsOf(md, out, b, "ln1")),
      ln2: layerNormNote(md, weights.ln2, normsOf(md, out, b, "x_mid"), normsOf(md, out, b, "ln2")) },
  };
}

/** explainer.build_block_vectors for block `b`: 8-bit queries and keys. */
export function vectors(md, out, b) {
  const n = md.tokens, heads = md.heads, d = md.head_dim, size = heads * n * d;
  const part = (name) => signedRows(out[name].subarray(b * size, (b + 1) * size), heads * n, d, [heads, n]);
  return { block: b, q: part("q"), k: part("k") };
}

/** explainer.head_switch: the top five before and after, and the answer's class score before
 * and after with its drop (before minus after) and the drop in the server's words. */
export function headSwitch(md, before, after, off) {
  const bank = md.knn, r4 = (x) => round(x, 4);
  const topOf = (feature) => top(bank, knnVote(bank, feature).probabilities).map((p) => ({ label: p.label, share: r4(p.probability) }));
  const target = top(bank, knnVote(bank, before).probabilities, 1)[0];
  const scores = [before, after].map((feature) => classScore(bank, feature, target.index)), drop = scores[0] - scores[1];
  return { off, before: topOf(before), after: topOf(after),
    target: { label: target.label, score_kind: bank.score_kind, before: r4(scores[0]), after: r4(scores[1]),
      drop: Number(fixed(drop, 4)), words: dropWords(drop) },
    convention: md.switch_convention };
}

/** The model's data message's fields, arrays as typed arrays (bank features as float32). */
export function modelData(decoded) {
  const md = decoded.browser_model;
  return { ...md, knn: { ...md.knn, features: md.knn.features.array } };
}

export { packed };
