/* ViT Lens: what Streamlit sends with every rerun of the Explainer's fragment. The
 * component's code (dashboard/static/explainer.js, 80 kB) is served once from app/static/
 * and kept by the browser; inline, Streamlit would send it again with each rerun (opening
 * a block, a tour step). Python writes the module's address (with its content hash, so a
 * new version is never read from a stale cache) in place of __MODULE__.
 */

const MODULE = new URL("__MODULE__", document.baseURI).href;  // relative: any base path
let loading = null;

export default function mount(args) {
  if (!loading) loading = import(MODULE);
  loading.then((module) => module.default(args), (error) => {
    loading = null;  // the next rerun tries again
    args.parentElement.textContent = `The ViT Explainer's code did not load (${error.message}). ` +
      "Reload the page to try again.";
  });
}
