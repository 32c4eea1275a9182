/* The chart library (the vendored plotly.js bundle), loaded once per document. */

const SCRIPT_ID = "vl-plotly";

/* The library, loaded once per document: a <script> element every chart (and the
 * sidebar's preload, a separate component with its own copy of this module) waits on. */
export function loadPlotly(src) {
  if (window.Plotly) return Promise.resolve(window.Plotly);
  let script = document.getElementById(SCRIPT_ID);
  if (!script) {
    script = document.createElement("script");
    script.id = SCRIPT_ID;
    script.src = src;
    script.async = true;
    document.head.appendChild(script);
  }
  return new Promise((resolve, reject) => {
    script.addEventListener("load", () => resolve(window.Plotly));
    script.addEventListener("error", () => {
      script.remove();  // a later chart may try again
      reject(new Error(`the chart library did not load (${src})`));
    });
  });
}
