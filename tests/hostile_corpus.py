"""A corpus of hostile and broken uploads, generated here (nothing is downloaded).

Each case is either refused (`expect is None`: the app must show a plain message, the
CLI must exit 2) or accepted, with what the decoded RGB image must look like: its
size (orientation included) and a few pixels. The unit tests in test_images.py
check `load_upload` itself; this corpus drives the app and the CLI end to end and
reuses that module's byte builders.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

import numpy as np
from PIL import Image
from test_images import _zip_bytes, encode, png_with_header_size, refused_cases, solid


@dataclass(frozen=True)
class Case:
    name: str
    data: bytes
    filename: str
    expect_size: tuple[int, int] | None = None  # None: must be refused
    expect_pixels: dict = field(default_factory=dict)  # (x, y) -> RGB
    tolerance: int = 0

    @property
    def refused(self) -> bool:
        return self.expect_size is None


def _chunk(kind: bytes, payload: bytes) -> bytes:
    return (struct.pack(">I", len(payload)) + kind + payload
            + struct.pack(">I", zlib.crc32(kind + payload)))


def png_bomb(side: int = 20000) -> bytes:
    """A REAL decompression bomb: a valid 1-bit PNG of side x side black pixels whose
    ~50 MB of scanlines deflate to a few tens of kilobytes."""
    row = b"\x00" + bytes((side + 7) // 8)  # filter byte + packed bits
    squeeze = zlib.compressobj(9)
    body = b"".join(squeeze.compress(row) for _ in range(side)) + squeeze.flush()
    header = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)  # 1-bit grayscale
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", body) + \
        _chunk(b"IEND", b"")


def _exif_rotated_jpeg() -> bytes:
    stored = solid((0, 0, 255), (80, 40))  # stored landscape, red block top-left
    stored.paste((255, 0, 0), (0, 0, 16, 16))
    exif = Image.Exif()
    exif[0x0112] = 6  # display rotated 90 degrees clockwise: portrait, red top-right
    return encode(stored, "JPEG", quality=95, exif=exif)


def _palette_transparent() -> bytes:
    image = Image.new("P", (32, 32), 0)
    image.putpalette([255, 0, 0, 0, 255, 0])
    image.paste(1, (0, 0, 16, 32))  # left half: index 1, transparent
    return encode(image, "PNG", transparency=1)


def _sixteen_bit() -> bytes:
    values = np.full((24, 24), 65535, dtype=np.uint16)
    values[:, :12] = 25700  # 25700 / 257 = 100
    return encode(Image.fromarray(values), "PNG")


def deep_png(side: int = 6300, channels: int = 1, left: int = 0, right: int = 0x9234) -> bytes:
    """A 16-bit PNG (1 channel: grayscale, 3: RGB, 4: RGBA) of side x side pixels, every
    sample `left` in the left half and `right` in the right, written row by row (the
    issue's 6300x6300 one: under 100 KB, about 80-320 MB of raw samples)."""
    half = side // 2
    row = (b"\x00" + struct.pack(">H", left) * channels * half
           + struct.pack(">H", right) * channels * (side - half))
    packer = zlib.compressobj(9)
    pixels = b"".join(packer.compress(row) for _ in range(side)) + packer.flush()
    colour_type = {1: 0, 3: 2, 4: 6}[channels]
    header = struct.pack(">IIBBBBB", side, side, 16, colour_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", pixels)
            + _chunk(b"IEND", b""))


def _float_tiff() -> bytes:
    values = np.zeros((20, 20), dtype=np.float32)
    values[:, 10:] = 1.0
    return encode(Image.fromarray(values, mode="F"), "TIFF")


def corpus() -> list[Case]:
    refused = refused_cases()  # from test_images: 16 kinds of refused bytes
    names = {  # a file name a student might give each refused case
        "zero bytes": "empty.png", "text renamed": "notes.png", "HTML": "page.png",
        "SVG text": "drawing.svg", "zip": "photos.zip", "truncated JPEG": "cut.jpg",
    }
    cases = [Case(name, data, names.get(name, name.replace(" ", "_") + ".png"))
             for name, data in refused.items()]
    png = encode(solid((9, 8, 7), (32, 32)), "PNG")
    cases += [
        Case("header claims 20000x20000", png_with_header_size(20000, 20000), "huge.png"),
        Case("real 20000x20000 decompression bomb", png_bomb(), "bomb.png"),
        Case("random bytes", np.random.default_rng(3).bytes(4096), "noise.jpg"),
        Case("PDF renamed", b"%PDF-1.7\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n", "paper.png"),
        Case("ELF executable renamed", b"\x7fELF\x02\x01\x01" + bytes(200), "tool.png"),
        Case("UTF-16 text", "just some words".encode("utf-16") * 20, "words.png"),
        Case("ICO (not an upload format)", encode(solid((1, 2, 3), (32, 32)), "ICO"),
             "icon.png"),
        Case("PNG with only the signature", png[:8], "sig.png"),
    ]
    cases += [
        Case("grayscale PNG", encode(solid(77, (40, 30), "L"), "PNG"), "gray.png",
             (40, 30), {(5, 5): (77, 77, 77)}),
        Case("CMYK JPEG", encode(solid((0, 255, 255, 0), (32, 32), "CMYK"), "JPEG",
                                 quality=95), "cmyk.jpg", (32, 32), {(16, 16): (255, 0, 0)}, 6),
        Case("16-bit PNG", _sixteen_bit(), "deep.png", (24, 24),
             {(2, 2): (100, 100, 100), (20, 2): (255, 255, 255)}),
        Case("palette PNG with transparency", _palette_transparent(), "palette.png", (32, 32),
             {(4, 4): (255, 255, 255), (24, 4): (255, 0, 0)}),
        Case("RGBA PNG half transparent", encode(solid((255, 0, 0, 128), (24, 24), "RGBA"),
                                                 "PNG"), "rgba.png", (24, 24),
             {(5, 5): (255, 127, 127)}, 1),
        Case("animated GIF", encode(solid((255, 0, 0), (32, 32)), "GIF", save_all=True,
                                    append_images=[solid((0, 0, 255), (32, 32))], duration=80),
             "anim.gif", (32, 32), {(16, 16): (255, 0, 0)}),
        Case("multi-page TIFF", encode(solid((0, 200, 0), (32, 32)), "TIFF", save_all=True,
                                       append_images=[solid((0, 0, 200), (48, 48))]),
             "pages.tif", (32, 32), {(10, 10): (0, 200, 0)}),
        Case("float TIFF", _float_tiff(), "float.tif", (20, 20),
             {(2, 2): (0, 0, 0), (15, 2): (255, 255, 255)}),
        Case("EXIF-rotated JPEG", _exif_rotated_jpeg(), "phone.jpg", (40, 80),
             {(35, 5): (255, 0, 0), (5, 5): (0, 0, 255), (5, 75): (0, 0, 255)}, 30),
        Case("WEBP", encode(solid((12, 34, 56), (20, 20)), "WEBP", lossless=True), "pic.webp",
             (20, 20), {(10, 10): (12, 34, 56)}),
        Case("BMP", encode(solid((200, 100, 50), (30, 20)), "BMP"), "pic.bmp", (30, 20),
             {(3, 3): (200, 100, 50)}),
        Case("aspect ratio 10:1 (the limit)", encode(solid((5, 5, 5), (400, 40)), "PNG"),
             "strip.png", (400, 40), {(200, 20): (5, 5, 5)}),
        Case("polyglot PNG + HTML", encode(solid((10, 200, 30), (32, 32)), "PNG")
             + b"<html><script>alert(1)</script></html>", "poly.png", (32, 32),
             {(16, 16): (10, 200, 30)}),
        Case("polyglot PNG + zip", encode(solid((10, 20, 230), (32, 32)), "PNG") + _zip_bytes(),
             "poly.zip.png", (32, 32), {(16, 16): (10, 20, 230)}),
        Case("PNG named .jpg", encode(solid((40, 50, 60), (30, 20)), "PNG"), "photo.jpg",
             (30, 20), {(0, 0): (40, 50, 60)}),
        Case("16-bit 6300x6300 PNG", deep_png(), "deep-huge.png", (1024, 1024),
             {(100, 500): (0, 0, 0), (900, 500): (146, 146, 146)}),  # 0x9234 / 257 = 145.6
        Case("big JPEG downscaled to 1024", encode(solid((90, 90, 90), (2400, 1600)), "JPEG"),
             "big.jpg", (1024, 683), {(500, 300): (90, 90, 90)}, 3),
    ]
    return cases


def matches(image: Image.Image, case: Case) -> bool:
    """Accepted as expected: RGB, the expected (oriented) size, the expected pixels."""
    if image.mode != "RGB" or image.size != case.expect_size:
        return False
    return all(all(abs(a - b) <= case.tolerance for a, b in zip(image.getpixel(xy), rgb))
               for xy, rgb in case.expect_pixels.items())


# Markdown / HTML a visitor can type into a link's value, a k-NN label or a file: each would
# make a link, an image, a heading, raw HTML, maths, a colour, an icon or a bare-URL link if
# it were rendered as markup. Every one names MARKER, so a test can find where it went.
MARKER = "PWNED"
MARKUP_PAYLOADS = (
    f"x` [{MARKER}](https://evil.example/) `",  # closes the app's code span, then a link
    f"![{MARKER}](https://evil.example/x.png)",
    f'<a href="https://evil.example/">{MARKER}</a>',
    f'<img src="https://evil.example/x.png" alt="{MARKER}">',
    f"ok\n# {MARKER} heading\n- item\n> quote",  # a heading, a list, a quote after newlines
    f":red[{MARKER}] :material/warning: :smile: $\\LaTeX$ {MARKER}",  # Streamlit's own syntax
    f"https://evil.example/{MARKER} www.evil.example {MARKER}@evil.example",  # bare links
    f"[{MARKER}]: https://evil.example/\n\n[{MARKER}] *{MARKER}* ~~{MARKER}~~ &lt;b&gt;",
)
# k-NN class labels a learner may type (the label field takes 40 characters)
MARKUP_LABELS = (
    f"x` [{MARKER}](https://evil.example) <b>",
    f"a\n# {MARKER} ![i](https://evil.example/)",
    f":red[{MARKER}] :material/home: $x^2$",
)
