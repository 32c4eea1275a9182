"""`export-lesson`: the ViT Explainer for one model and some pictures as one offline HTML file.

The packing lives in the dashboard layer (dashboard/explainer/lesson_export.py: it reads the
component's JavaScript and CSS and the tour's words, which belong there), so this is the one
xai_core module that imports from dashboard, lazily, inside the command. Nothing it loads
imports streamlit (tests/test_lesson_export.py checks both).
"""

from __future__ import annotations

import argparse
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
    sub.add_argument("--with-model", action="store_true",
                     help="carry the model and its runtime (about 50 MB): the learner's own "
                          "photo and the head switches run in the browser")
    sub.add_argument("--precision", default="fp16", choices=("fp16", "fp32"),
                     help="the model's weights in the file (fp16: half the bytes, float32 "
                          "arithmetic; see docs/lesson-export.md for its error)")
    sub.add_argument("--out", required=True, help="the .html file to write")
    site = add("export-site", cmd_export_site,
               "the Explainer with the model in the browser as a static site (plain files)",
               image=False)
    site.add_argument("--model", default="dinov2-s14", help="ViT model id (default dinov2-s14)")
    site.add_argument("--random-weights", action="store_true", help=argparse.SUPPRESS)
    site.add_argument("--images", action="append", default=None, metavar="LIST",
                      help="recorded pictures: sample:ID or a file, comma-separated "
                           "(default sample:chelsea)")
    site.add_argument("--blocks", default="all", help="'all' (default) or block numbers")
    site.add_argument("--precision", default="fp16", choices=("fp16", "fp32"))
    site.add_argument("--out", required=True, help="the folder to write (made if missing)")


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
    from ..models.disk_cache import os_reason, replace_atomically

    target = writable_target(args.out)
    page, model, images = build_page(args, "inline" if args.with_model else None)

    def write(name: str) -> None:
        Path(name).write_bytes(page)

    try:  # a full or read-only disk: one line, and no half-written file
        replace_atomically(target, write)
    except OSError as error:
        raise CliError(f"Could not write {args.out}: {os_reason(error)}.") from None
    emit(args, {"out": str(target), "bytes": len(page), "images": len(images),
                "random_weights": model.random_weights, "with_model": args.with_model},
         labelled(model, f"wrote {target}: {len(page) / 1e6:.1f} MB, {len(images)} picture(s)"))


def site_folder(out: str) -> Path:
    """Refuse an --out that is a file, or whose parent folder is missing, before any work."""
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise CliError(f"{out} is a file; name a folder for the site.")
    if not folder.parent.is_dir():
        raise CliError(f"The folder {folder.parent} does not exist.")
    return folder


def cmd_export_site(args) -> None:
    from ..models.disk_cache import os_reason
    from dashboard.explainer.lesson_model import write_site

    folder = site_folder(args.out)
    args.images = args.images or ["sample:chelsea"]
    args.tour = False
    page, model, images = build_page(args, "files")
    try:
        written = write_site(folder, page, args.site_pack)
    except OSError as error:
        raise CliError(f"Could not write the site in {args.out}: {os_reason(error)}.") from None
    total = sum(written.values())
    emit(args, {"out": str(folder), "files": written, "bytes": total, "images": len(images)},
         labelled(model, f"wrote {len(written)} files in {folder}: {total / 1e6:.1f} MB, "
                         f"{len(images)} recorded picture(s); open index.html through a "
                         "web server (see docs/hosting.md)"))


def build_page(args, with_model: str | None):
    """The lesson page's bytes, the model and its pictures; `with_model`: None, "inline"
    (the one file) or "files" (a site; the pack is left on args.site_pack)."""
    from dashboard.explainer.lesson_export import (LessonError, LessonImage, build_lesson,
                                                   parse_blocks, sample_title)
    from ..infra.errors import OptionError
    from ..models import get_spec

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
    pack = None
    if with_model:
        from dashboard.explainer import lesson_model
        from ..browser_model.graph import UnsupportedModel

        try:
            lesson_model.check_supported(model)
            pack = (lesson_model.inline_pack if with_model == "inline"
                    else lesson_model.site_pack)(model, None, args.precision)
        except (OptionError, UnsupportedModel) as error:
            raise CliError(str(error)) from None
        args.site_pack = pack

    shown = []  # a progress line is on stderr: end it before anything else is printed

    def progress(fraction: float, what: str) -> None:
        if not args.json and sys.stderr.isatty():
            print(f"\r{fraction:4.0%} {what[:60]:60}", end="", file=sys.stderr, flush=True)
            shown.append(True)

    try:
        page = build_lesson(model, images, blocks=blocks, tour=args.tour, progress=progress,
                            model_pack=pack)
    except LessonError as error:
        raise CliError(str(error)) from None
    finally:
        if shown:
            print(file=sys.stderr)
    return page, model, images
