"""`export-lesson`: the ViT Explainer for one model and some pictures as one offline HTML file.

The packing lives in the dashboard layer (dashboard/lesson_export.py: it reads the
component's JavaScript and CSS and the tour's words, which belong there), so this is the one
xai_core module that imports from dashboard, lazily, inside the command. Nothing it loads
imports streamlit (tests/test_lesson_export.py checks both).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from .common import CliError, emit, labelled, load_image, load_model


def add_lesson_command(add) -> None:
    sub = add("export-lesson", cmd_export_lesson,
              "the ViT Explainer as one self-contained HTML file (offline)", image=False)
    sub.add_argument("--model", required=True, help="ViT model id (see `models`)")
    sub.add_argument("--random-weights", action="store_true",
                     help="hub models only: random weights, for shapes and layouts")
    sub.add_argument("--images", action="append", required=True, metavar="LIST",
                     help="pictures: sample:ID or a file, comma-separated; repeatable")
    sub.add_argument("--blocks", default="all", help="'all' (default) or block numbers, e.g. 0,6,11")
    sub.add_argument("--tour", action="store_true", help="open the file on step 1 of the tour")
    sub.add_argument("--out", required=True, help="the .html file to write")


def writable_target(out: str) -> Path:
    """Refuse an --out whose folder is missing or not writable before any work."""
    from ..models.disk_cache import os_reason

    target = Path(out)
    folder = target.parent
    if not folder.is_dir():
        raise CliError(f"The folder {folder} does not exist.")
    try:  # a real write (permissions, a read-only file system, root on /sys alike)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise CliError(f"Cannot write in the folder {folder}: {os_reason(error)}.") from None
    if target.is_dir():
        raise CliError(f"{out} is a folder; name the .html file to write.")
    return target


def image_specs(values: list[str]) -> list[str]:
    specs = [item.strip() for value in values for item in value.split(",") if item.strip()]
    if not specs:
        raise CliError("--images names no picture.")
    return specs


def cmd_export_lesson(args) -> None:
    from dashboard.lesson_export import (LessonError, LessonImage, build_lesson, parse_blocks,
                                         sample_title)
    from ..models import get_spec
    from ..models.disk_cache import os_reason, replace_atomically

    target = writable_target(args.out)
    try:
        blocks = parse_blocks(args.blocks)
    except LessonError as error:
        raise CliError(str(error)) from None
    if not get_spec(args.model).is_vit:
        raise CliError("The Explainer follows a Vision Transformer: choose a ViT model.")
    specs = image_specs(args.images)
    images = []
    for spec in specs:
        image = load_image(spec)  # first: an unknown sample is refused here, in one line
        images.append(LessonImage(sample_title(spec[7:]) if spec.startswith("sample:")
                                  else Path(spec).name, image))
    model = load_model(args)
    if model.head is None:
        raise CliError(f"{model.label} has no classifier and no k-NN memory bank to follow.")

    shown = []  # a progress line is on stderr: end it before anything else is printed

    def progress(fraction: float, what: str) -> None:
        if not args.json and sys.stderr.isatty():
            print(f"\r{fraction:4.0%} {what[:60]:60}", end="", file=sys.stderr, flush=True)
            shown.append(True)

    try:
        page = build_lesson(model, images, blocks=blocks, tour=args.tour, progress=progress)
    except LessonError as error:
        raise CliError(str(error)) from None
    finally:
        if shown:
            print(file=sys.stderr)

    def write(name: str) -> None:
        Path(name).write_bytes(page)

    try:  # a full or read-only disk: one line, and no half-written file
        replace_atomically(target, write)
    except OSError as error:
        raise CliError(f"Could not write {args.out}: {os_reason(error)}.") from None
    emit(args, {"out": str(target), "bytes": len(page), "images": len(images),
                "random_weights": model.random_weights},
         labelled(model, f"wrote {target}: {len(page) / 1e6:.1f} MB, {len(images)} picture(s)"))
