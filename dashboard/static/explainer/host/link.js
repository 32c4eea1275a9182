/* ViT Lens: the one module linker. Python puts this file's text at the top of every host
 * that runs ES modules without a build step: the live Explainer's loader (loader.js), the
 * offline lesson's host (lesson.js, whose model host borrows it) and the charts' loader
 * (dashboard/charts.py). The modules import each other only as
 * `import { a, b } from "./name.js";` at the top; each becomes a blob: address, its import
 * specifiers replaced by the addresses of the modules it imports. ASCII only (the lesson's
 * page is windows-1252).
 */

// the one import form the modules use: dashboard/assets.py MODULE_IMPORT (a test keeps them equal)
const IMPORT = /^import \{([^}]*)\} from "\.\/([\w.-]+\.js)";/gm;

/** A module's source cut around the specifier of each import, quotes included: even parts
 * are code, odd parts the names of the modules imported (assets.split_at_imports does the
 * same in Python, for the modules the lesson packs). */
function splitAtImports(source) {
  const parts = [];
  let start = 0;
  for (const match of source.matchAll(IMPORT)) {
    const quoted = `"./${match[2]}"`, at = match.index + match[0].lastIndexOf(quoted);
    parts.push(source.slice(start, at), match[2]);
    start = at + quoted.length;
  }
  parts.push(source.slice(start));
  return parts;
}

/** Link modules given as [{name, parts}], each after the modules it imports: name -> its
 * blob: address (import the last one to run them). `origin`, when given, names each
 * module's own address for the browser's developer tools. */
function linkModules(modules, origin = "") {
  const urls = {};
  for (const module of modules) {
    const code = module.parts.map((part, i) => (i % 2 ? JSON.stringify(urls[part]) : part)).join("") +
      (origin ? `\n//# sourceURL=${origin}${module.name}\n` : "");
    urls[module.name] = URL.createObjectURL(new Blob([code], { type: "text/javascript" }));
  }
  return urls;
}
