"""Plotly figure builders, grouped by what they draw (no streamlit here):

- `overlays`: a heatmap over an image (one builder, `add_overlay`, for every such panel)
- `matrices`: matrices and mosaics drawn as heatmaps
- `curves`: curves, bars and scatter plots
- `tokenization`: the patch grid and the token sequence of an image
- `text`: attention over the tokens of a sentence
- `click_targets`: invisible markers a click lands on, and reading the click back (the
  Streamlit side is `dashboard/clicks.py`); `style`: shared colours; `export`: PNG
- `layers`: pictures as compressed image layers (a photo as JPEG, a coloured map as WebP)
- `reuse`: `@reused`, which keeps a built figure for the same inputs (bounded cache)
"""
