// `make plotly-bundle`: plotly.js as one minified IIFE that sets window.Plotly. The same
// modules as the official dist file start several times faster in Chromium (see
// dashboard/charts.py), and only the traces the app draws are in.
import { readFileSync } from 'node:fs';
import { build } from 'esbuild';

const version = JSON.parse(readFileSync('node_modules/plotly.js/package.json', 'utf8')).version;
await build({
    entryPoints: ['entry.js'],
    outfile: `../../static/plotly-vitlens-${version}.min.js`,
    bundle: true,
    minify: true,
    format: 'iife',
    globalName: 'Plotly',
    target: 'es2016',
    legalComments: 'eof',
    banner: { js: `/**\n* plotly.js v${version} (ViT Lens partial bundle: core, bar, heatmap, image - ` +
                  'minified)\n* Copyright 2012-2026, Plotly, Inc.\n* All rights reserved.\n' +
                  '* Licensed under the MIT license\n*/' },
    footer: { js: 'window.Plotly = Plotly;' },
    // maplibre's CSS, required by the registry for map traces only
    loader: { '.css': 'empty' },
    // as plotly.js's own esbuild-config.js
    define: { global: 'window', 'define.amd': 'false', 'process.env.NODE_DEBUG': 'false' },
    logLevel: 'warning',
});
