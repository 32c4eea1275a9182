/* For an instructor's slides and lecture notes: "Save PNG" (the picture as drawn, with its
 * caption) and "Copy link" (an address that opens this block, head, map and pinned patch). */

import { el } from "./dom.js";

export class ViewTools {
  /** `picture`: the picture's canvas and the text of its colour scale's top. */
  constructor({ store, data }, picture) {
    Object.assign(this, { store, data, picture });
    const tools = el("div", "vx-tools",
      `<button class="vx-btn vx-save" title="Save the picture with its map and caption as a PNG">Save PNG</button>` +
      `<button class="vx-btn vx-copy" title="A link that opens this block, head, map and pinned patch">Copy link</button>` +
      `<input class="hidden" readonly aria-label="Link to this view"><span class="muted"></span>`);
    tools.querySelector(".vx-save").addEventListener("click", () => this.savePicture());
    tools.querySelector(".vx-copy").addEventListener("click", () => this.copyLink());
    this.element = tools;
  }

  /** The picture as drawn (map, outlined patch), with its caption, the colour scale and the
   * model under it, downloaded as a PNG: what an instructor puts on a slide. */
  savePicture() {
    const m = this.data.model, st = this.store.state, picture = this.picture.canvas;
    const label = m.ov.model.label + (m.ov.model.random ? " (RANDOM WEIGHTS)" : "");
    const map = st.shown && st.shown.patch ? st.shown : null;
    const lines = [map ? map.title : "What the model sees",
      ...(map ? [`Colours: 0 (dark) to ${this.picture.scaleText()} (yellow)`] : []), `${label} · ViT Lens`];
    const line = 30, out = document.createElement("canvas");
    out.width = picture.width;
    out.height = picture.height + 12 + lines.length * line;
    const ctx = out.getContext("2d");
    ctx.fillStyle = "#ffffff";
    ctx.fillRect(0, 0, out.width, out.height);
    ctx.drawImage(picture, 0, 0);
    ctx.fillStyle = "#31333f";
    lines.forEach((text, i) => {
      ctx.font = `${i ? "" : "bold "}20px sans-serif`;
      ctx.fillText(text, 12, picture.height + 12 + (i + 0.7) * line, out.width - 24);
    });
    const link = document.createElement("a");
    link.download = `vit-lens-${m.ov.model.id}-block${st.block}-${st.overlay}.png`;
    link.href = out.toDataURL("image/png");
    link.click();
  }

  /** The address of this view (`?vx_block=...`, the rest of the address kept, the tour
   * left out), shown selected beside the button and put on the clipboard where the browser
   * allows it (a secure page: https or localhost). */
  copyLink() {
    const st = this.store.state, url = new URL(window.location.href), params = url.searchParams;
    params.delete("tour");
    const values = { block: st.block, head: st.head >= 0 ? st.head : null, patch: st.pinned,
      map: st.overlay !== "attention" ? st.overlay : null };
    for (const [name, value] of Object.entries(values)) {
      if (value === null) params.delete(`vx_${name}`);
      else params.set(`vx_${name}`, String(value));
    }
    // an upload stays on the server: the link opens this view on a sample instead, and says so
    const sample = this.data.link && this.data.link.sample;
    if (sample) params.set("image_choice", sample.id);
    const input = this.element.querySelector("input"), note = this.element.querySelector("span");
    const caveat = sample ? ` · your picture is not in the link: it opens this view on the sample “${sample.title}”` : "";
    input.value = url.toString();
    input.classList.remove("hidden");
    input.select();
    note.textContent = "select and copy" + caveat;
    note.classList.toggle("vx-link-note", !!sample);
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(input.value).then(() => { note.textContent = "copied" + caveat; }, () => {});
    }
  }
}
