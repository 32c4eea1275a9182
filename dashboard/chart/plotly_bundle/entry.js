// plotly.js's core (scatter, shapes, annotations, sliders, update menus, colour bars, ...)
// and the other traces ViT Lens draws; tests/test_charts.py checks that no figure needs more.
var Plotly = require('plotly.js/lib/core');

Plotly.register([
    require('plotly.js/lib/bar'),
    require('plotly.js/lib/heatmap'),
    require('plotly.js/lib/image'),
]);

module.exports = Plotly;
