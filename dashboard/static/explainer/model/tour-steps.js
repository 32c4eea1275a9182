/* The guided tour for the learner's own photo, written in the browser from the photo's
 * overview and the two heads it switches off, as dashboard/explainer/tour.py writes it for
 * a picture on the server (resolve_steps, picture_facts, the glossary's explain_first_uses).
 * The words of the steps, the glossary and the facts that depend on the model only come
 * from Python (`tour`: explainer/tour.browser_tour); this file computes the picture's facts.
 * It follows the models the browser runs: self-attention blocks with a [CLS] token, a k-NN
 * head, trained weights. tests/e2e/test_browser_model.py checks every step's words and
 * numbers against explainer/tour.resolve_steps for the same overview. */

import { valuesOf } from "./message.js";
import { fixed, general, pyRound } from "./pyformat.js";

const MARK = /⟦([a-z_]+)(?:\|([^⟧]*))?⟧/g;

/* ---------------------------------------------------------------- numbers as the tour writes them */

const shareLabel = (share) => `${fixed(100 * share, share >= 0.1 ? 1 : 2)}%`;
const percent = (share) => (share >= 0.9995 ? "over 99.9%" : `${fixed(100 * share, 1)}%`);
const whole = (value) => Math.floor(value + 0.5);
const short = (label) => label.split(",")[0];
const capital = (text) => `${text[0].toUpperCase()}${text.slice(1)}`;
const distanceLabel = (mad) => `${whole(mad)} pixels`;

function median(values) {
  const s = Float64Array.from(values).sort(), n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/* ---------------------------------------------------------------- the overview's choices */

function queryRowValues(ov, block) {
  const rows = ov.query_rows[block], codes = rows.codes.array, scale = rows.scale.array;
  const width = rows.codes.shape[rows.codes.shape.length - 1];
  return Array.from(scale, (s, h) => Float64Array.from(codes.subarray(h * width, (h + 1) * width), (c) => c * s / 255));
}

function entropy(row) {
  const total = row.reduce((a, b) => a + b, 0);
  let sum = 0;
  for (const v of row) { const p = v / total; if (p > 0) sum -= p * Math.log(p); }
  return sum;
}

function resolveBlock(choice, ov) {
  const selfs = ov.blocks.filter((b) => b.kind === "self").map((b) => b.index);
  if (choice === "sink") return ov.sinks.strongest.block;
  return { first: 0, middle: selfs[Math.floor(selfs.length / 2)], last: ov.blocks.length - 1, last_self: selfs[selfs.length - 1] }[choice];
}

function argmin(values) {
  let best = 0;
  values.forEach((v, i) => { if (v < values[best]) best = i; });
  return best;
}

function resolveHead(choice, ov, block) {
  if (choice === "mean") return -1;
  if (choice === "first") return 0;
  if (choice === "sink") return ov.sinks.strongest.block === block ? ov.sinks.strongest.head : -1;
  if (choice === "nearest") return nearestHead(ov, block);
  return argmin(queryRowValues(ov, block).map(entropy));
}

const sinkHeads = (ov, block) => new Map(ov.sinks.heads.filter((s) => s.block === block).map((s) => [s.head, s]));

function headDistances(ov, block) {
  const at = ov.distance.blocks.indexOf(block);
  return at < 0 ? null : ov.distance.mad[at];
}

function keptHeads(ov, block) {
  const heads = [...headDistances(ov, block).keys()], sinks = sinkHeads(ov, block);
  const kept = heads.filter((h) => !sinks.has(h));
  return kept.length ? kept : heads;
}

function nearestHead(ov, block) {
  const mad = headDistances(ov, block);
  if (mad === null) return -1;
  const kept = keptHeads(ov, block);
  return kept.reduce((best, h) => (mad[h] < mad[best] ? h : best), kept[0]);
}

const centrePatch = (ov) => Math.floor(ov.layout.grid[0] / 2) * ov.layout.grid[1] + Math.floor(ov.layout.grid[1] / 2);
const longestPatch = (ov) => (ov.high_norm.flagged[0] || ov.high_norm.largest).patch;

function sinkPatch(ov, tour) {
  const s = ov.sinks.strongest;
  return s.score < tour.sink_threshold || !s.on_patch ? null : s.patch;
}

/** The (block, head) each switching step turns off (xai_core/lessons/tour_choices.switched_heads). */
export function switchedHeads(md, ov, tour) {
  const pairs = [];
  for (const step of tour.steps.filter((s) => s.switch_off)) {
    const block = resolveBlock(step.block, ov), pair = [block, resolveHead(step.head, ov, block)];
    if (pair[1] >= 0 && !pairs.some((p) => p[0] === pair[0] && p[1] === pair[1])) pairs.push(pair);
  }
  return pairs;
}

/* ---------------------------------------------------------------- the picture's facts */

function keyWords(key) {
  if (key === "[CLS]") return "⟦cls⟧";
  if (key === "[DIST]") return "⟦dist⟧";
  return key.startsWith("patch") ? key : `⟦register|${key}⟧`;
}

function fitSentence(ov) {
  const p = ov.picture, [height, width] = ov.layout.input, [w, h] = p.size, [sw, sh] = p.source;
  let text = `This ${w}×${h} picture`;
  if (sw !== w || sh !== h) text = `Your ${sw}×${sh} photo was shrunk to ${w}×${h} on upload; it`;
  if (p.squashed) return `${text} is squeezed to **${height}×${width}** pixels, whole: its proportions change, nothing is cut off.`;
  if (p.kept < 0.995) {
    return `${text} is resized and its centre cut out: the model sees **${height}×${width}** pixels covering ` +
      `${shareLabel(p.kept)} of the picture (the box in the Image panel). The rest never reaches the model.`;
  }
  return `${text} is resized to **${height}×${width}** pixels.`;
}

function pictureSentence(ov) {
  const scale = ov.picture.scale;
  return fitSentence(ov) + (scale ? ` It is ${scale}.` : "");
}

function growth(ov) {
  const patches = ov.layout.patches, last = ov.blocks.filter((b) => b.nq >= patches).pop();
  const medianOf = (item) => { const v = valuesOf(item); return median(v.subarray(v.length - patches)); };
  return [medianOf(ov.embedding_norms), medianOf(last.norm_out), last];
}

function growthWords(ov) {
  const [before, after, last] = growth(ov);
  const where = `from the first block's input to the output of ${last.label.toLowerCase()}`;
  if (Math.abs(after - before) <= 0.02 * before) {
    return [`the median patch token's length stays at about ${general(before, 3)}`,
      `the median patch token stays at about ${general(before, 3)} ${where}.`];
  }
  const verb = after > before ? "grows" : "shrinks";
  return [`the median patch token's length ${verb} from ${general(before, 3)} to ${general(after, 3)}`,
    `the median patch token ${verb} from ${general(before, 3)} to ${general(after, 3)} ${where}.`];
}

function outlierSentence(ov, tour) {
  const marks = ov.high_norm, cols = ov.layout.grid[1];
  const where = (t) => `row ${Math.floor(t.patch / cols)}, column ${t.patch % cols}: ${general(t.ratio)}× the median in block ${t.block}`;
  const rule = `a patch stands apart when its list of numbers is at least ${general(tour.high_norm_ratio)}× ` +
    `as long as the median patch's and ${general(tour.high_norm_gap)}× as long as every unmarked one`;
  const study = "a 2024 study by Darcet and colleagues found large models like this one re-using a few patches as ⟦scratch⟧";
  if (!marks.flagged.length) {
    return `The marked patch is the longest (${where(marks.largest)}) but does not stand apart (${rule}). ${capital(study)}; those stand far apart.`;
  }
  const count = marks.flagged.length;
  return `${count} patch token${count > 1 ? "s" : ""} stand${count > 1 ? "" : "s"} apart (${rule}); the marked one is at ` +
    `${where(marks.flagged[0])}. ${capital(study)} like this.`;
}

const outlierQuote = (ov) => `${general((ov.high_norm.flagged[0] || ov.high_norm.largest).ratio)}×`;

function sinkSentences(ov, tour) {
  const s = ov.sinks.strongest, block = ov.blocks[s.block].label.toLowerCase(), share = percent(s.score);
  if (s.score < tour.sink_threshold) {
    return ["Does any head pour most of its attention into one key? Not here.",
      `The most concentrated head (${block}, head ${s.head}) gives its favourite key, ${keyWords(s.key)}, ${share} ` +
      `of the attention on average, below the ${fixed(100 * tour.sink_threshold, 0)}% that makes an ⟦sink⟧.`];
  }
  const lead = `Head ${s.head} of ${block} sends ${share} of its attention to ${keyWords(s.key)}: an **⟦sink|attention sink⟧**.`;
  let text = "That share is the mean over every query. Such a head copies nearly the same thing into every token, " +
    "whatever the picture shows there. Point at or tap the other heads of this block to compare.";
  if (ov.sinks.left_out.length) {
    text += " A sink on a patch would light up that patch in attention ⟦rollout⟧, so the rollout here starts after it.";
  }
  return [lead, text];
}

function distanceSentence(ov) {
  const measured = ov.distance, blocks = measured.blocks, even = measured.reference;
  const name = (i) => ov.blocks[blocks.at(i)].label.toLowerCase();
  const kept = blocks.map((block, i) => keptHeads(ov, block).map((h) => measured.mad[i][h]));
  const span = (i) => {
    const low = pyRound(Math.min(...kept.at(i))), high = pyRound(Math.max(...kept.at(i)));
    return low !== high ? `${low}–${high} pixels` : `about ${low} pixels`;
  };
  let text = `On this picture the heads of ${name(0)} look ${span(0)} from their query`;
  if (blocks.length > 1) text += `, those of ${name(-1)} ${span(-1)}`;
  text += `, in page 3's ⟦mad⟧; attention spread evenly over the picture would give ${fixed(even, 0)} pixels.`;
  if (blocks.length === 1) return text;
  const nearFirst = Math.min(...kept[0]), nearLast = Math.min(...kept.at(-1)), patch = ov.layout.patch[0];
  text += " The papers on vision ⟦transformer|transformers⟧ report early blocks mixing near- and far-looking heads, late blocks only far-looking ones; ";
  if (nearLast >= nearFirst + patch) {
    return `${text}here ${name(-1)}'s nearest head (${fixed(nearLast, 0)} pixels) looks farther than ${name(0)}'s (${fixed(nearFirst, 0)} pixels).`;
  }
  if (nearLast > nearFirst - patch) {
    return `${text}not here: the nearest heads of ${name(0)} and ${name(-1)} look about as far ` +
      `(${fixed(nearFirst, 0)} and ${fixed(nearLast, 0)} pixels, under a patch apart).`;
  }
  return `${text}not here: ${name(-1)}'s nearest head (${fixed(nearLast, 0)} pixels) looks nearer than ${name(0)}'s (${fixed(nearFirst, 0)} pixels).`;
}

function nearHeadLead(ov) {
  const block = resolveBlock("first", ov), label = ov.blocks[block].label.toLowerCase(), head = nearestHead(ov, block);
  if (head < 0) return `How far do the heads of ${label} look from their query on the picture?`;
  return `Head ${head} of ${label}, its nearest-looking head, looks ${distanceLabel(headDistances(ov, block)[head])} from its query on average.`;
}

function nearHeadSentence(ov, stepNumber) {
  const block = resolveBlock("first", ov), label = ov.blocks[block].label, head = nearestHead(ov, block);
  if (head < 0) return `The picture shows the mean of the heads of ${label.toLowerCase()}.`;
  const text = `The picture shows head ${head} of ${label.toLowerCase()}, its nearest-looking head.`;
  const sinks = sinkHeads(ov, block);
  if (!sinks.size || sinks.size === headDistances(ov, block).length) return text;
  const leftOut = [...sinks.entries()].sort((a, b) => a[0] - b[0]).map(([h, s]) => `head ${h} (${percent(s.score)} to ${keyWords(s.key)}: ` +
    (s.on_patch ? "its map is that patch whatever you pin)" : "a token with no place on the picture, so no distance)")).join("; ");
  return `${text} Left out here and below, as ⟦sink|sinks⟧ (step ${stepNumber("sinks")}): ${leftOut}.`;
}

function rolloutStart(ov, stepNumber) {
  const leftOut = ov.sinks.left_out;
  if (!leftOut.length) return "It starts at the first block.";
  const first = ov.rollout.blocks[0], last = leftOut[leftOut.length - 1].block;
  const blocks = leftOut.length === 1 ? `block ${last} is` : `blocks ${leftOut[0].block}–${last} are`;
  return `Here it starts at block ${first}: ${blocks} left out, because block ${last} has a head that is an attention ` +
    `⟦sink⟧ on a patch (step ${stepNumber("sinks")}), which rollout would carry forward as one bright patch whatever the ` +
    "picture shows. The rule: start one block after the last such block in the first half of the blocks.";
}

function daamSentences(ov) {
  const daam = ov.daam;
  if (daam.unavailable) {
    return ["⟦daam|DAAM⟧ needs a summary token, and this model has none: the map shows attention instead.", daam.unavailable];
  }
  const target = daam.target || ov.prediction.top[0].label;  // pending: the class it is computed for
  return [`**⟦daam|DAAM⟧** weighs what ⟦cls⟧ gathers by how much it moves the score of **${short(target)}**: press ▶ to watch.`,
    "Attention is the same whatever the class. DAAM (from a paper by Liao and colleagues) keeps what [CLS] gathers in each " +
    `block apart, channel by channel, weighs the channels by the ⟦gradient⟧ of the score for **${target}**, and adds the ` +
    "blocks up: the decision's evidence, accumulating."];
}

const holdsItself = (ov) => (ov.prediction.neighbours || []).length > 0 && ov.prediction.neighbours[0].similarity > 0.999;

function topAnswer(prediction) {
  const top = prediction.top[0];
  return prediction.open_set.known ? `**${short(top.label)}** (${shareLabel(top.probability)})` : `a forced guess, **${short(top.label)}**`;
}

function predictionLead(ov) {
  const prediction = ov.prediction, top = prediction.top;
  if (!prediction.open_set.known) {
    return "A forced guess: this picture looks like none of what the model knows, but it must name one of its classes.";
  }
  const vote = prediction.head === "knn" ? "The vote" : "The answer";
  const second = top.length > 1 ? `, then ${short(top[1].label)} ${shareLabel(top[1].probability)}` : "";
  const caveat = holdsItself(ov) && !ov.model.random ? ", but the bank holds this very picture" : "";
  return `${vote}: **${short(top[0].label)}** ${shareLabel(top[0].probability)}${second}${caveat}.`;
}

function predictionSentence(prediction) {
  const top = prediction.top, found = prediction.open_set;
  if (!found.known) {
    return `Here the picture looks like **none of what the model knows**: ${found.why}. The model must still name one of ` +
      `its classes (${top[0].label}), so that is a guess, not an answer.`;
  }
  const second = top.length > 1 ? `${top[1].label} (${shareLabel(top[1].probability)})` : "nothing else";
  return `Here: **${top[0].label}** (${shareLabel(top[0].probability)}), then ${second}.`;
}

function answerNote(ov) {
  if (ov.model.random) return "The weights are random, so this answer means nothing. ";
  if (holdsItself(ov)) {
    return "The bank holds this very picture (its nearest entry has ⟦cosine|cosine similarity⟧ " +
      `${fixed(ov.prediction.neighbours[0].similarity, 3)}), so this is no fair test of recognition. `;
  }
  return "";
}

function fairTest(ov, tour) {
  const prediction = ov.prediction, teach = tour.teach[0].toLowerCase() + tour.teach.slice(1);
  if (prediction.head !== "knn" || ov.model.random) return "";
  if (holdsItself(ov)) return `A fair test on this picture: ${teach}`;
  if (prediction.open_set.known) return "";
  return `The bank knows only ${prediction.classes} kinds of thing. For a fair test, ${teach}`;
}

function kinds(ov) {
  const names = ov.prediction.bank_classes || [];
  return names.length ? `${names.length} classes (${names.join(", ")})` : "classes";
}

function readoutSentence(ov) {
  const found = ov.readout;
  if (found.unavailable) return `Not here: ${found.unavailable}`;
  if (ov.model.random) return "The weights are random, so the read-outs mean nothing here.";
  const first = found.first_block, blocks = found.blocks;
  if (holdsItself(ov)) {
    return "Each block is compared with a ⟦bank⟧ of the gallery's features at that block, and the banks hold this very " +
      `picture: its own views are the nearest entries, so the read-out says ${found.label} from block ${first} on, which ` +
      `tests nothing. It shows where an answer forms on a picture the banks do not hold of one of their ${kinds(ov)}.`;
  }
  let text = `From block ${first} on, every read-out's top class is ${found.label}`;
  if (first > 0) text += `; block 0 would answer ${blocks[0].label}`;
  if (found.bank) text += " (each block is compared with a ⟦bank⟧ of the gallery's features at that block)";
  return `${text}.`;
}

/* ---------------------------------------------------------------- the two switches */

const where = (ov, [block, head]) => `head ${head} of ${ov.blocks[block].label.toLowerCase()}`;

function targetShare(result, which) {
  const found = result[which].find((t) => t.label === result.target.label);
  return found ? found.share : null;
}

function switchQuotes(result, knn) {
  if (result.error) return [];
  const quotes = [fixed(result.target.before, 3), fixed(result.target.after, 3)];
  const shares = ["before", "after"].map((which) => targetShare(result, which));
  if (knn && !shares.includes(null)) quotes.push(...shares.map(shareLabel));
  return quotes;
}

function switchLead(ov, pair, result) {
  const at = where(ov, pair);
  if (result.error) return `${capital(at)} cannot be switched off here.`;
  const target = result.target, knn = ov.prediction.head === "knn";
  const score = knn ? "⟦knn|k-NN⟧ ⟦class_score⟧" : "probability";
  let text = `${capital(at)} off: ${short(target.label)}'s ${score} ${fixed(target.before, 3)} → ${fixed(target.after, 3)}`;
  const quotes = switchQuotes(result, knn);
  if (quotes.length === 4) text += `, its share of the vote ${quotes[2]} → ${quotes[3]}`;
  return `${text}.`;
}

function switchSentence(ov, pair, result) {
  const at = where(ov, pair);
  if (result.error) return `${capital(at)} cannot be switched off here: ${result.error}`;
  const before = result.before[0], after = result.after[0], target = result.target;
  let text = `Here ${at} is switched off (its output set to 0 before the ⟦w_o⟧) and the model runs again: `;
  text += after.label === before.label ? `the answer stays **${after.label}**`
    : `the answer changes from **${before.label}** to **${after.label}**`;
  text += `; the class score of ${target.label} goes from ${fixed(target.before, 3)} to ${fixed(target.after, 3)}: ` +
    `it ${target.words}.`;
  if (ov.model.random) text += " The weights are random, so this says nothing about a trained model.";
  return text;
}

function compareSentence(sink, sharp, results, stepNumber) {
  const step = stepNumber("switch_sink"), key = (p) => p.join(",");
  if (key(sink) === key(sharp)) return `It is also the head switched off in step ${step}.`;
  if ([sink, sharp].some((p) => results.get(key(p)).error)) return "";
  const target = results.get(key(sharp)).target;
  const drop = (p) => results.get(key(p)).target.drop;
  let text = `With the ⟦sink⟧ head of step ${step} off, the score ${results.get(key(sink)).target.words}; ` +
    `with this focused head off, it ${target.words}.`;
  const largest = Math.max(Math.abs(drop(sink)), Math.abs(drop(sharp))) / Math.max(Math.abs(target.before), 1e-12);
  if (largest < 0.05) {
    text += ` Both changes are under 5% of the score itself (${fixed(target.before, 3)}): on this picture neither head carries the answer alone.`;
  }
  return text;
}

function chosenHeads(ov, tour) {
  const chosen = {};
  for (const step of tour.steps.filter((s) => s.switch_off)) {
    const block = resolveBlock(step.block, ov);
    chosen[step.id] = [block, resolveHead(step.head, ov, block)];
  }
  return chosen;
}

function switchFacts(ov, switchOf, tour, stepNumber) {
  const chosen = chosenHeads(ov, tour), sink = chosen.switch_sink, sharp = chosen.test_claim;
  const results = new Map([sink, sharp].map((p) => [p.join(","), switchOf(...p)]));
  const of = (p) => results.get(p.join(","));
  return { sink_switch_lead: switchLead(ov, sink, of(sink)), sharp_switch_lead: switchLead(ov, sharp, of(sharp)),
    sink_switch_sentence: switchSentence(ov, sink, of(sink)), sharp_switch_sentence: switchSentence(ov, sharp, of(sharp)),
    two_scores: ov.prediction.head === "knn" ? tour.two_scores : "",
    compare_sentence: compareSentence(sink, sharp, results, stepNumber) };
}

/** explainer/tour.picture_facts for the photo (no second opinion: no CNN in the browser). */
function pictureFacts(ov, switchOf, tour, stepNumber) {
  const prediction = ov.prediction, middle = resolveBlock("middle", ov);
  const [growthLead, growthSentence] = growthWords(ov), [sinkLead, sinkSentence] = sinkSentences(ov, tour);
  const [daamLead, daamSentence] = daamSentences(ov);
  return {
    random_note: ov.model.random ? "The weights are random, so that answer means nothing; the shapes are real. "
      : prediction.open_set.known ? "" : "A forced guess, because this picture looks like none of what the model knows. ",
    picture_sentence: pictureSentence(ov), sharpest: String(resolveHead("sharpest", ov, middle)),
    growth_lead: growthLead, growth_sentence: growthSentence, outlier_sentence: outlierSentence(ov, tour),
    sink_lead: sinkLead, sink_sentence: sinkSentence, distance_sentence: distanceSentence(ov),
    near_head_lead: nearHeadLead(ov), near_head_sentence: nearHeadSentence(ov, stepNumber),
    rollout_start: rolloutStart(ov, stepNumber), daam_lead: daamLead, daam_sentence: daamSentence,
    top_answer: topAnswer(prediction), prediction_lead: predictionLead(ov),
    prediction_sentence: predictionSentence(prediction), answer_note: answerNote(ov), fair_test: fairTest(ov, tour),
    readout_label: `**${short(ov.readout.label || prediction.top[0].label)}**`, readout_sentence: readoutSentence(ov),
    ...switchFacts(ov, switchOf, tour, stepNumber),
  };
}

/* ---------------------------------------------------------------- the glossary */

const marked = (text) => [...text.matchAll(MARK)].map((m) => m[1]);

/** explainer/glossary.explain_first_uses. */
function explainFirstUses(texts, glossary) {
  const seen = new Set();
  const firstMarks = (stepId, text) => {
    const found = [...new Set(marked(text))].filter((term) => !seen.has(term));
    found.forEach((term) => seen.add(term));
    return found.filter((term) => glossary[term].taught !== stepId);
  };
  const inBrackets = (text, terms) => {
    const pending = new Set(terms);
    return text.replace(MARK, (match, term) => {
      if (!pending.has(term)) return match;
      pending.delete(term);
      return `${match} (${glossary[term].words})`;
    });
  };
  return texts.map(([stepId, lead, rest]) => {
    const inLead = firstMarks(stepId, lead);
    const explained = inBrackets(rest, firstMarks(stepId, rest));
    const said = inLead.map((term) => `${capital(glossary[term].term)}: ${glossary[term].words}.`).join(" ");
    return [lead, `${said} ${explained}`.trim()];
  });
}

function termsOf(glossary, ...texts) {
  const out = {};
  for (const text of texts) for (const term of marked(text)) out[term] = out[term] || { term: glossary[term].term, words: glossary[term].words };
  return out;
}

/* ---------------------------------------------------------------- the steps */

function fill(template, facts) {
  return template.replace(/\{(\w+)\}/g, (_, name) => {
    if (!(name in facts)) throw new Error(`the tour has no fact ${name}`);
    return facts[name];
  });
}

function stepQuotes(ov, step, result, tour) {
  const prediction = ov.prediction;
  if (step.id === "pipeline" && prediction.open_set.known) return [shareLabel(prediction.top[0].probability)];
  if (step.id === "pixels" && ov.picture.kept < 0.995 && !ov.picture.squashed) return [shareLabel(ov.picture.kept)];
  if (step.id === "sinks" && ov.sinks.strongest.score >= tour.sink_threshold) return [percent(ov.sinks.strongest.score)];
  if (step.id === "distance") {
    const block = resolveBlock("first", ov), head = nearestHead(ov, block);
    return head >= 0 ? [distanceLabel(headDistances(ov, block)[head])] : [];
  }
  if (step.id === "residual") {
    const [before, after] = growth(ov);
    return [general(before, 3), general(after, 3), outlierQuote(ov)];
  }
  if (step.id === "prediction") {
    const quotes = prediction.open_set.known ? prediction.top.slice(0, 2).map((t) => shareLabel(t.probability)) : [];
    if (holdsItself(ov) && !ov.model.random) quotes.push(fixed(prediction.neighbours[0].similarity, 3));
    return quotes;
  }
  if (step.switch_off && result) return switchQuotes(result, prediction.head === "knn");
  return [];
}

/** explainer/tour.resolve_steps for the photo's overview; `switchOf(block, head)`: the
 * explainer.head_switch result of that head off (run in the browser). */
export function resolveSteps(ov, switchOf, tour) {
  const ids = tour.steps.map((s) => s.id), stepNumber = (id) => 1 + ids.indexOf(id);
  const facts = { ...tour.model_facts, ...pictureFacts(ov, switchOf, tour, stepNumber) };
  const daamOk = !ov.daam.unavailable;
  const words = explainFirstUses(tour.steps.map((s) => [s.id, fill(s.lead, facts), fill(s.text, facts)]), tour.glossary);
  return tour.steps.map((step, i) => {
    const [lead, rest] = words[i], block = resolveBlock(step.block, ov), info = ov.blocks[block];
    let patch = { centre: centrePatch(ov), longest: longestPatch(ov) }[step.patch] ?? null;
    if (patch !== null && info.kind === "class") patch = null;
    const named = step.names === "sink" ? sinkPatch(ov, tour) : null;
    const head = resolveHead(step.head, ov, block);
    const result = step.switch_off && head >= 0 ? switchOf(block, head) : null;
    return { id: step.id, title: step.title, lead, text: `${lead} ${rest}`, terms: termsOf(tour.glossary, lead, rest),
      stage: step.stage, block, head, patch, overlay: daamOk || step.overlay !== "daam" ? step.overlay : "attention",
      targets: [...step.targets], patches: step.targets.includes("image") ? [patch, named].filter((p) => p !== null) : [],
      quotes: stepQuotes(ov, step, result, tour), page: { file: step.page, title: tour.pages[step.page] }, switch: result };
  });
}
