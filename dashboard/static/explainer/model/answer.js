/* The answer from the model's output, as the server computes it: the k-NN vote
 * (xai_core/models/knn.py knn_vote: cosine similarity to every bank entry, the k most
 * similar vote with weight exp(sim / T)), the class score a head switch reports
 * (class_score: mean cosine similarity to the class's nearest entries) and the open-set
 * check (xai_core/open_set.py: the nearest entry's similarity against the bank's own
 * threshold). */

import { fixed } from "./pyformat.js";

function normalised(feature) {
  let sum = 0;
  for (const v of feature) sum += v * v;
  const norm = Math.max(Math.sqrt(sum), 1e-12);  // torch.nn.functional.normalize's eps
  return Float64Array.from(feature, (v) => v / norm);
}

/** Cosine similarity of the feature to every bank entry (rows already unit length). */
export function similarities(bank, feature) {
  const query = normalised(feature), width = query.length, rows = bank.labels.length;
  const out = new Float64Array(rows), f = bank.features;
  for (let r = 0; r < rows; r++) {
    let s = 0;
    for (let j = 0; j < width; j++) s += f[r * width + j] * query[j];
    out[r] = s;
  }
  return out;
}

/** {probabilities (bank.classes order), neighbours [{index, label, source, similarity}]}. */
export function knnVote(bank, feature) {
  const sim = similarities(bank, feature), order = nearest(bank, sim);
  const votes = new Float64Array(bank.classes.length);
  for (const i of order) votes[bank.classes.indexOf(bank.labels[i])] += Math.exp(sim[i] / bank.temperature);
  const total = votes.reduce((a, b) => a + b, 0);
  return { probabilities: votes.map((v) => v / total),
    neighbours: order.map((i) => ({ index: i, label: bank.labels[i], source: bank.sources[i], similarity: sim[i] })) };
}

/** The top `count` classes: [{index, label, probability}], best first. */
export function top(bank, probabilities, count = 5) {
  return [...probabilities.keys()].sort((a, b) => probabilities[b] - probabilities[a] || a - b)
    .slice(0, count).map((i) => ({ index: i, label: bank.classes[i], probability: probabilities[i] }));
}

/** The k-NN class score of one class: mean similarity to its `class_score_neighbours` nearest
 * entries. */
export function classScore(bank, feature, classIndex) {
  const sim = similarities(bank, feature), label = bank.classes[classIndex];
  const members = [...sim.keys()].filter((i) => bank.labels[i] === label).map((i) => sim[i]).sort((a, b) => b - a);
  const nearest = members.slice(0, Math.min(bank.class_score_neighbours, members.length));
  return nearest.reduce((a, b) => a + b, 0) / nearest.length;
}

/** A drop (the score before minus after, the project's one sign convention) in the server's
 * words (xai_core/studies/interventions.py drop_words): "fell by 0.0067", "rose by 0.0018",
 * "did not move" when it rounds to 0 at `digits` decimals. */
export function dropWords(drop, digits = 4) {
  const size = fixed(Math.abs(drop), digits);
  if (Number(size) === 0) return "did not move";
  return `${drop > 0 ? "fell" : "rose"} by ${size}`;
}

/** xai_core.open_set.OpenSet.as_dict() | {why}. */
export function openSet(bank, feature) {
  const score = Math.max(...similarities(bank, feature)), threshold = bank.threshold;
  return { score, threshold, known: score >= threshold, measure: "nearest bank entry's cosine similarity",
    rule: bank.rule,
    why: `its nearest memory-bank picture has cosine similarity ${fixed(score, 3)}, ` +
      `below ${fixed(threshold, 3)}, which 95% of the bank's own pictures reach with their nearest neighbour` };
}

/** The k nearest bank entries, most similar first (knn_vote's order). */
function nearest(bank, sim) {
  return [...sim.keys()].sort((a, b) => sim[b] - sim[a] || a - b).slice(0, Math.min(bank.k, sim.length));
}

/** DAAM's k-NN weights w (xai_core/methods/daam_knn.py knn_weights, the official formula of
 * eq. 13): the target class's entries among the k nearest (or, when it has none there, its
 * own k nearest), x̂_d·ẑ_kd averaged over them, divided by |their sum over d|, min-max to
 * [0, 1]. Returns {weights (Float64Array), voters (bank rows), fallback}. */
export function knnWeights(bank, feature, classIndex) {
  const sim = similarities(bank, feature), label = bank.classes[classIndex];
  let voters = nearest(bank, sim).filter((i) => bank.labels[i] === label), fallback = false;
  if (!voters.length) {
    fallback = true;
    voters = [...sim.keys()].filter((i) => bank.labels[i] === label).sort((a, b) => sim[b] - sim[a] || a - b).slice(0, bank.k);
  }
  const x = normalised(feature), width = x.length, mean = new Float64Array(width);
  for (const row of voters) {
    const z = normalised(bank.features.subarray(row * width, (row + 1) * width));
    for (let d = 0; d < width; d++) mean[d] += x[d] * z[d] / voters.length;
  }
  const total = Math.abs(mean.reduce((a, b) => a + b, 0));
  const raw = total > 0 ? mean.map((v) => v / total) : mean;
  const low = Math.min(...raw), span = Math.max(...raw) - low;
  return { weights: raw.map((v) => (span > 0 ? (v - low) / span : 1)), voters, fallback };
}
