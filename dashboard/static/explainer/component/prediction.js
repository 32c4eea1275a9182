/* The last stages in the detail panel: the feature (the model's summary of the image), the
 * head (k-NN vote or linear layer) and the prediction (the top five, and what each block
 * would answer: the read-out). */

import { paintStripe } from "./colour.js";
import { headsText } from "./answer.js";
import { el } from "./dom.js";
import { esc, fmt, pct } from "./format.js";

export class FeatureNotes {
  constructor({ data }, box) {
    const m = data.model, ov = m.ov, top = ov.prediction.top[0];
    const shape = ov.stages.find((s) => s.id === "feature");
    box.innerHTML = `<h3>Feature <span class="mono">${esc(shape.shape)}</span></h3><p>The model's summary of the image is ` +
      `${esc(shape.sentence)}, taken after the final norm: <b>${ov.dims.width}</b> numbers${ov.layout.prefix_names.includes("[DIST]") ? " each" : ""}.</p>`;
    if (m.feature) {
      const canvas = el("canvas", "vx-barcode");
      const peak = paintStripe(canvas, m.feature);
      box.appendChild(canvas);
      box.appendChild(el("div", "vx-note", `The ${m.feature.length} numbers of this image's feature, red positive, ` +
        `blue negative (largest |value| ${fmt(peak)}). This vector is what the memory bank compares.`));
    } else {
      box.appendChild(el("p", "", `A linear layer turns it into ${ov.prediction.output_shape.at(-1)} class scores; ` +
        `the largest here is “${esc(top.label)}”.`));
    }
  }
}

export class HeadNotes {
  constructor({ data }, box) {
    const p = data.model.ov.prediction;
    if (p.head !== "knn") {
      box.innerHTML = `<h3>Linear head <span class="mono">${data.model.ov.dims.width}→${p.output_shape.at(-1)}</span></h3>` +
        `<p>One matrix multiplication gives a score (logit) for each of the ${p.classes} ImageNet classes; ` +
        `softmax turns the scores into probabilities that sum to 1.</p>`;
      return;
    }
    box.innerHTML = `<h3>k-NN vote <span class="mono">k = ${p.k}, ${p.bank_size} bank entries</span></h3>` +
      `<p>This self-supervised model was never taught class names. Its feature is compared (cosine similarity) ` +
      `with a memory bank of labelled features; the ${p.k} most similar entries vote, each with weight ` +
      `exp(similarity / ${p.temperature}).</p>`;
    const weights = p.neighbours.map((n) => Math.exp(n.similarity / p.temperature));
    const total = weights.reduce((a, b) => a + b, 0);
    const table = el("table", "vx-table");
    table.innerHTML = "<tr><th>#</th><th>bank entry</th><th>label</th><th>cosine</th><th>share of the vote</th></tr>" +
      p.neighbours.map((n, i) => `<tr><td>${i + 1}</td><td class="mono">${esc(n.source)}</td><td>${esc(n.label)}</td>` +
        `<td class="num">${n.similarity.toFixed(3)}</td><td class="num">${pct(weights[i] / total)}</td></tr>`).join("");
    box.appendChild(table);
    if (p.neighbours.some((n) => n.similarity > 0.999)) {
      box.appendChild(el("div", "vx-note", "The nearest entry is this very image (cosine 1): the bank was " +
        "built from the sample gallery, views included. Try your own photo for a fair test."));
    }
  }
}

export class PredictionNotes {
  constructor({ store, data }, box) {
    const p = data.model.ov.prediction;
    box.innerHTML = `<h3>Prediction <span class="mono">top 5 of ${p.classes}</span></h3>`;
    const answer = el("div", "vx-prediction");  // what the tour's prediction step points at
    answer.dataset.part = "prediction";
    box.appendChild(answer);
    const bars = el("div", "vx-bars");
    bars.innerHTML = p.top.map((t) => `<div class="vx-bar"><span>${esc(t.label)}</span>` +
      `<span class="vx-bar-track"><span class="vx-bar-fill" style="display:block;width:${(100 * t.probability).toFixed(1)}%"></span></span>` +
      `<span class="mono">${pct(t.probability)}</span></div>`).join("");
    answer.appendChild(bars);
    answer.appendChild(el("div", "vx-note", p.head === "knn"
      ? "Shares of the k-NN vote (weights exp(cos/T) summed per class), not calibrated probabilities."
      : "Softmax probabilities of the model's logits."));
    const nearest = p.head === "knn" && p.neighbours.length ? p.neighbours[0] : null;
    if (nearest && !data.model.ov.model.random) {
      answer.appendChild(el("div", "vx-note", `Nearest bank entry: ${esc(nearest.source)} (${esc(nearest.label)}), ` +
        `cosine similarity ${nearest.similarity.toFixed(3)}` + (nearest.similarity > 0.999
          ? ": this very picture, so the vote finds it rather than recognises it. A fair test: on Home, " +
            "teach the k-NN two or three photos of one kind of thing, then open another photo of that kind." : ".")));
    }
    if (!p.open_set.known) {
      // the model must name a class: say when the picture is unlike all it knows
      answer.appendChild(el("div", "vx-note vx-unknown", `This picture looks like none of what the model knows: ` +
        `${esc(p.open_set.why)}. The bars are guesses, not an answer.`));
    }
    const other = data.secondOpinion;
    if (other) {  // a model trained on ImageNet's 1000 classes, beside a bank of a few
      answer.appendChild(el("div", "vx-note vx-second", `${esc(other.model)}, trained on ImageNet's ` +
        `${other.classes} classes, answers <b>${esc(other.label)}</b> (${pct(other.share)}).`));
    }
    const off = store.state.off;
    if (off.length) {
      box.appendChild(el("div", "vx-note", `These are the trained model's answers; with ${esc(headsText(off))} ` +
        "off, the answer bars under the head chips show what it says now."));
    }
    box.appendChild(readoutTable(data.model.ov.readout));
  }
}

/** What each block would answer (the read-out): its top class and share, and the final
 * answer's class score there. */
function readoutTable(found) {
  const box = el("div", "vx-readout");
  box.dataset.part = "readout-table";
  if (found.unavailable) {
    box.appendChild(el("p", "vx-note", `No read-out here: ${esc(found.unavailable)}`));
    return box;
  }
  box.appendChild(el("h4", "", "What each block would answer (read-out)"));
  const table = el("table", "vx-table");
  table.innerHTML = `<tr><th>block</th><th>top class</th><th>share</th><th>score of ${esc(found.label)}</th></tr>` +
    found.blocks.map((r, k) => `<tr${k === found.first_block ? ' class="vx-first"' : ""}><td class="num">${k}</td>` +
      `<td>${esc(r.label)}</td><td class="num">${pct(r.share)}</td><td class="num">${fmt(r.target_score)}</td></tr>`).join("");
  box.appendChild(table);
  box.appendChild(el("div", "vx-note", `The tokens after block k, through the final norm and the head, as if ` +
    `the later blocks were not there. From block ${found.first_block} on every read-out's top class is ` +
    `${esc(found.label)}. Score: ${esc(found.score_kind)}${found.bank ? `; each block compared with the ${esc(found.bank)}` : ""}.`));
  return box;
}
