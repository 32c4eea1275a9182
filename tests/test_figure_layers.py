"""Pictures in figures as compressed layers (xai_core/figures/layers.py) and built figures
kept for reuse (xai_core/figures/reuse.py): the layer covers exactly the pixels it shows
(a heatmap cell lands on its patch, in an exported PNG too), map colours follow the colour
scale, mosaics keep their click targets on their tiles, and a reused figure is the figure
the builder makes, a fresh copy every time."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import pytest
from PIL import Image

from xai_core.analysis import toy_attention as toy
from xai_core.figures import layers, overlays, reuse
from xai_core.figures.matrices import head_mosaic, multihead_figure, position_mosaic_figure
from xai_core.figures.overlays import map_row_figure, overlay_figure, practical_matrix
from xai_core.figures.style import DIVERGING, HEATMAP_SCALE
from xai_core.maps import min_max

GREEN = [[0, "rgb(0,255,0)"], [1, "rgb(0,255,0)"]]


def decoded(source: str) -> Image.Image:
    """The picture inside a data URI."""
    return Image.open(io.BytesIO(base64.b64decode(source.split(",", 1)[1])))


def photo(width: int, height: int) -> Image.Image:
    """A smooth colour gradient (what JPEG is made for)."""
    y, x = np.mgrid[0:height, 0:width]
    pixels = np.stack([255 * x / width, 255 * y / height, 128 + 0 * x], axis=-1)
    return Image.fromarray(pixels.round().astype(np.uint8))


def span(trace: go.Image, width: int, height: int) -> tuple[float, float, float, float]:
    """(left, right, top, bottom) of an image trace as plotly.js places it: the first pixel
    centred on (x0, y0), each pixel dx by dy."""
    left, top = trace.x0 - trace.dx / 2, trace.y0 - trace.dy / 2
    return left, left + width * trace.dx, top, top + height * trace.dy


@pytest.mark.parametrize("size", [(224, 224), (300, 200), (1500, 1000), (37, 900)])
def test_a_photo_layer_covers_exactly_its_pixel_coordinates(size):
    image = photo(*size)
    trace = layers.image_trace(image)
    sent = decoded(trace.source)
    assert trace.source.startswith("data:image/jpeg;base64,") and sent.format == "JPEG"
    assert max(sent.size) == min(max(size), layers.DISPLAY_MAX_SIDE)  # shrunk to display size
    assert abs(sent.width / sent.height - size[0] / size[1]) < 0.05  # aspect kept
    np.testing.assert_allclose(span(trace, *sent.size), (0, size[0], 0, size[1]), atol=1e-9)
    shrunk = np.asarray(image.resize(sent.size, Image.Resampling.LANCZOS), dtype=float)
    assert np.abs(np.asarray(sent.convert("RGB"), dtype=float) - shrunk).mean() < 3


def test_a_photo_repeated_in_small_panels_is_sent_at_panel_size():
    """The input and seven maps, MAPS_PER_LINE panels beside the input a line: each panel
    gets PAGE_WIDTH / columns screen pixels, and every copy of the photo goes at that size
    (not 448), still spanning the panel's full pixel range."""
    image = photo(448, 448)  # larger than a panel of the matrix (PAGE_WIDTH / 6)
    maps = [(f"m{i}", np.random.default_rng(i).random((14, 14))) for i in range(7)]
    figure = practical_matrix([("row", image, maps)], height_per_row=260)
    photos = [t for t in figure.data if t.type == "image"]
    assert len(photos) == 8
    columns = overlays.MAPS_PER_LINE + 1
    side = int(np.ceil(layers.PAGE_WIDTH / columns))
    assert layers.panel_side(image, columns, 260) == side < 448
    for trace in photos:
        sent = decoded(trace.source)
        assert sent.size == (side, side)
        np.testing.assert_allclose(span(trace, *sent.size), (0, 448, 0, 448), atol=1e-9)
    # a wide panel (two side by side, 480 high) keeps the photo as it is
    wide = map_row_figure(photo(224, 224), [maps[0][1], maps[1][1]], ["a", "b"], (16, 16),
                          height=480)
    assert {decoded(t.source).size for t in wide.data if t.type == "image"} == {(224, 224)}


def test_a_lossless_layer_keeps_every_pixel_and_its_transparency():
    rng = np.random.default_rng(3)
    pixels = rng.integers(0, 256, (20, 30, 4), dtype=np.uint8)
    trace = layers.image_trace(Image.fromarray(pixels, "RGBA"), max_side=30, lossless=True,
                               left=0.5, top=-0.5)
    sent = np.asarray(decoded(trace.source))
    np.testing.assert_array_equal(sent[..., 3], pixels[..., 3])
    seen = pixels[..., 3] > 0  # a fully transparent pixel's colour is not kept
    np.testing.assert_array_equal(sent[seen], pixels[seen])
    assert span(trace, 30, 20) == (0.5, 30.5, -0.5, 19.5)


def test_the_encoding_is_cached_by_content():
    image = photo(64, 48)
    first = layers.encoded_image(image)
    assert layers.encoded_image(image.copy()) is first  # same pixels: the cached encoding
    changed = image.copy()
    changed.putpixel((0, 0), (0, 0, 0))
    assert layers.encoded_image(changed)[0] != first[0]


def rendered(figure: go.Figure, side: int = 256) -> np.ndarray:
    """The figure rendered by kaleido (the export path) at side x side screen pixels."""
    figure.update_layout(width=side, height=side, margin=dict(l=0, r=0, t=0, b=0))
    return np.asarray(Image.open(io.BytesIO(pio.to_image(figure, format="png", width=side,
                                                        height=side))).convert("RGB"))


def test_an_exported_map_cell_lands_on_its_patch_pixels():
    """A 64 px image, black in its first 16 pixel columns and white after; only the map's
    column 1 (pixels 16-31) is drawn, opaque green. At 4 screen pixels per image pixel the
    black must end exactly where the green starts (a half-pixel offset leaves a 2-pixel
    white sliver between them) and the green must end exactly where the white resumes."""
    pixels = np.zeros((64, 64, 3), np.uint8)
    pixels[:, 16:] = 255
    values = np.full((4, 4), np.nan)
    values[:, 1] = 1.0
    figure = overlay_figure(Image.fromarray(pixels), values, (16, 16), opacity=1.0, zmin=0,
                            zmax=1, colorscale=GREEN)
    figure.data[1].update(showscale=False)
    row = rendered(figure)[128].astype(int)
    green = np.array([0, 255, 0])
    assert np.abs(row[:64] - 0).max() <= 12  # black up to screen pixel 63
    assert np.abs(row[64:128] - green).max() <= 12
    assert np.abs(row[128:] - 255).max() <= 12  # white to the right edge: no background strip


def test_colour_image_interpolates_the_colour_scale_stops():
    stops = np.array([stop for stop, _ in HEATMAP_SCALE])
    rgb = np.array([[int(v) for v in colour[4:-1].split(",")] for _, colour in HEATMAP_SCALE])
    values = np.array([[-2.0, 0.0, 0.13, 0.5], [0.77, 1.0, 3.0, np.nan]])
    pixels = np.asarray(layers.colour_image(values, HEATMAP_SCALE, 0.0, 1.0))
    clipped = np.clip(np.nan_to_num(values), 0, 1)
    expected = np.stack([np.interp(clipped, stops, rgb[:, c]) for c in range(3)], axis=-1)
    # 256 steps: at most half a step off the exact interpolation, i.e. a few levels
    assert np.abs(pixels[..., :3].astype(float) - expected)[~np.isnan(values)].max() <= 3
    np.testing.assert_array_equal(pixels[..., 3], np.where(np.isnan(values), 0, 255))
    low, high = layers.colour_image(np.array([[-1.0, 1.0]]), DIVERGING, -1.0, 1.0).getdata()
    assert low[2] > low[0] and high[0] > high[2]  # RdBu_r: blue low, red high


def layer_pixels(figure: go.Figure) -> tuple[np.ndarray, go.Image]:
    layer = next(t for t in figure.data if t.type == "image")
    return np.asarray(decoded(layer.source).convert("RGBA")), layer


def test_position_mosaic_layer_and_click_targets_sit_on_each_tile():
    rows, cols = 3, 4
    rng = np.random.default_rng(0)
    similarity = rng.uniform(-1, 1, (rows, cols, rows, cols))
    figure = position_mosaic_figure(similarity)
    pixels, layer = layer_pixels(figure)
    targets = next(t for t in figure.data if t.type == "scatter" and t.customdata is not None)
    assert any(t.type == "scatter" and t.marker.showscale for t in figure.data)  # colour bar
    for (patch, r, c), x, y in zip(targets.customdata, targets.x, targets.y):
        # the pixel under the click target, and where it sits inside its tile
        px, py = int(np.floor(x - (layer.x0 - layer.dx / 2))), int(np.floor(y - (layer.y0 - 0.5)))
        tile_row, tile_col = py - r * (rows + 1), px - c * (cols + 1)
        assert 0 <= tile_row < rows and 0 <= tile_col < cols, (patch, tile_row, tile_col)
        colour = layers.colour_image(similarity[r, c, tile_row, tile_col].reshape(1, 1),
                                     DIVERGING, -1, 1).getpixel((0, 0))
        assert tuple(pixels[py, px]) == colour
    assert pixels[rows, 0, 3] == 0  # the gap between tile rows is transparent


def test_head_mosaic_layer_keeps_each_tile_under_its_marker():
    maps = np.random.default_rng(1).random((2, 3, 5, 4))
    figure = head_mosaic(maps, [4, 9], "t")
    pixels, layer = layer_pixels(figure)
    markers = figure.data[1]
    for (block, head), x, y in zip(markers.customdata, markers.x, markers.y):
        b = [4, 9].index(block)
        # the marker sits at the tile centre; the tile's top-left cell is its own min-max colour
        left, top = int(round(x - 1.5 - layer.x0)), int(round(y - 2 - layer.y0))
        assert (left, top) == (head * 5, b * 6)
        tile = min_max(maps[b, head])
        expected = layers.colour_image(tile, HEATMAP_SCALE, 0, 1)
        np.testing.assert_array_equal(pixels[top:top + 5, left:left + 4], np.asarray(expected))


# --- reuse -------------------------------------------------------------------------------------

def toy_heads(heads: int) -> list[np.ndarray]:
    multi = toy.multi_head_attention(toy.MULTIHEAD_X, toy.MULTIHEAD_WQ, toy.MULTIHEAD_WK,
                                     toy.MULTIHEAD_WV, toy.MULTIHEAD_WO, heads)
    return [step.weights for step in multi.per_head]


def test_a_reused_figure_is_the_built_figure_as_a_fresh_copy():
    weights = toy_heads(2)
    direct = json.loads(pio.to_json(multihead_figure.__wrapped__(weights, toy.MULTIHEAD_TOKENS)))
    hits = reuse.FIGURE_CACHE.hits
    first = multihead_figure(weights, toy.MULTIHEAD_TOKENS)
    again = multihead_figure([w.copy() for w in weights], toy.MULTIHEAD_TOKENS)
    assert reuse.FIGURE_CACHE.hits >= hits + 1  # the same content: built once
    assert json.loads(pio.to_json(first)) == json.loads(pio.to_json(again)) == direct
    z = again.data[0].z
    assert isinstance(z, np.ndarray) and z.dtype == weights[0].dtype
    np.testing.assert_array_equal(z, weights[0])
    first.update_layout(font=dict(size=22), title="changed")
    third = multihead_figure(weights, toy.MULTIHEAD_TOKENS)
    assert third.layout.font.size is None and third.layout.title.text is None
    other = multihead_figure(toy_heads(4), toy.MULTIHEAD_TOKENS)
    assert len(other.data) == 4 and len(third.data) == 2


def test_page_9s_figures_are_built_once_for_a_class(dinov2, image):
    """A class opening page 9 asks for the same maps-before-after and bars: built once, each
    copy the built figure (building the maps took 0.33 s a visit)."""
    from xai_core.studies import interventions as iv
    from xai_core.capture import model_layout
    from xai_core.figures import intervention_figures as figs
    from xai_core.pipeline import prepare

    plain, off = iv.intervene(dinov2, image), iv.intervene(dinov2, image, heads_off="0.5")
    picture, patch = prepare(dinov2, image).model_image, model_layout(dinov2).tokens.patch_size
    for build, args in ((figs.maps_before_after, (picture, plain.maps, off.maps, patch)),
                        (figs.before_after_bars, (off.before, off.after, "k-NN vote share"))):
        direct = json.loads(pio.to_json(build.__wrapped__(*args)))
        hits = reuse.FIGURE_CACHE.hits
        assert json.loads(pio.to_json(build(*args))) == direct
        assert json.loads(pio.to_json(build(*args))) == direct
        assert reuse.FIGURE_CACHE.hits >= hits + 1, build.__name__


def test_fingerprints_tell_apart_what_builds_different_figures():
    fingerprint = reuse.fingerprint
    array = np.arange(6, dtype=np.float32)
    assert fingerprint(True) != fingerprint(1) and fingerprint(1) != fingerprint(1.0)
    assert fingerprint(0.1) != fingerprint(float(np.nextafter(0.1, 1.0)))  # exact floats
    assert fingerprint(float("nan")) == fingerprint(float("nan"))
    assert fingerprint(array) != fingerprint(array.view(np.int32))  # same bytes, other dtype
    assert fingerprint(array) != fingerprint(array.reshape(2, 3))
    assert fingerprint(array) == fingerprint(array.copy())
    assert fingerprint(photo(8, 8)) != fingerprint(photo(8, 9))
    assert fingerprint({"a": 1, "b": 2}) == fingerprint({"b": 2, "a": 1})
    with pytest.raises(reuse.NoContentKey):
        fingerprint(object())


def test_a_builder_with_an_unkeyable_input_builds_every_time():
    calls = []

    @reuse.reused
    def build(thing) -> go.Figure:
        calls.append(thing)
        return go.Figure(go.Bar(y=[1, 2]))

    build(object())
    build(object())
    build(2)
    build(2)
    assert len(calls) == 3


def test_the_layer_and_figure_caches_are_bounded():
    for cache in (layers.LAYER_CACHE, reuse.FIGURE_CACHE):
        assert 0 < cache.max_entries <= 1024 and 0 < cache.max_bytes <= 256 * 2**20
    assert reuse.FIGURE_CACHE.total_bytes() <= reuse.FIGURE_CACHE.max_bytes
