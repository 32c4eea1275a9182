/* ViT Lens: what Streamlit sends with every rerun of the Explainer's fragment, after the
 * module linker (link.js, which Python puts first). The component's code (the ES modules in
 * dashboard/static/explainer/component/, entry main.js) is served once from app/static/ and
 * kept by the browser; inline, Streamlit would send it again with each rerun (opening a
 * block, a tour step). Python writes in the folder's address, a hash
 * of all its modules (VERSION) and their names, each after the modules it imports.
 *
 * Every module is fetched at <name>?v=VERSION, so a changed module changes every address
 * and a browser never joins a new main.js to a stale cached child (a module's own
 * `import ... from "./x.js"` would be fetched without the version). The imports are then
 * pointed at the fetched modules (blob: addresses, linkModules) and main.js is imported
 * from there.
 */

const FOLDER = new URL("__FOLDER__", document.baseURI).href;  // relative: any base path
const VERSION = "__VERSION__";
const MODULES = __MODULES__;  // dependencies first, main.js last
let loading = null;

async function linked() {
  const sources = await Promise.all(MODULES.map(async (name) => {
    const response = await fetch(`${FOLDER}${name}?v=${VERSION}`);
    if (!response.ok) throw new Error(`${name}: HTTP ${response.status}`);
    return response.text();
  }));
  const urls = linkModules(MODULES.map((name, i) => ({ name, parts: splitAtImports(sources[i]) })), FOLDER);
  return import(urls[MODULES[MODULES.length - 1]]);
}

export default function mount(args) {
  if (!loading) loading = linked();
  loading.then((module) => module.default(args), (error) => {
    loading = null;  // the next rerun tries again
    args.parentElement.textContent = `The ViT Explainer's code did not load (${error.message}). ` +
      "Reload the page to try again.";
  });
}
