/* Timings read by the real-browser tests and bench/bench_explainer.py: one record per page
 * (window.__vitExplainer), shared by every Explainer on it. */

export const METRICS = (window.__vitExplainer = window.__vitExplainer ||
  { hover: [], hoverFrame: [], frames: [], readyAt: null, updates: 0, messages: [] });
