"""`python -m dashboard.warm_pages`: open every page once on each gallery image, as the first
student of a lecture would, so the figures the pages build land in the shared result store.

`python -m xai_core warmup --gallery` computes what the pages draw from (captures, maps,
payloads) but cannot build their figures: those are made by the pages' scripts, which need
Streamlit. A page's script runs here in Streamlit's own headless runner (AppTest), the one
way to run it outside a browser session; every replica and restart then reads the figures
(`xai_core/figures/reuse.py`, a shared cache) instead of building them while a class waits.
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import nullcontext
from pathlib import Path

from dashboard.page_list import existing_pages
from xai_core.images import COLLAGE_ID, SAMPLES

ENTRY = str(Path(__file__).resolve().parent / "app.py")
HOME = "home.py"
PAGE_TIMEOUT_S = 900  # a cold page on a busy 2-core server


def open_page(page: str, image: str) -> tuple[float, str | None]:
    """Seconds the page took on `image` (the entry script run first, as a visitor's first
    visit does) and the first exception it showed, if any."""
    from streamlit.testing.v1 import AppTest

    app = AppTest.from_file(ENTRY, default_timeout=PAGE_TIMEOUT_S)
    app.session_state["image_choice"] = image
    started = time.perf_counter()
    app.run()
    if page != HOME:
        app.switch_page(f"../pages/{page}").run()
    problem = app.exception[0].value if app.exception else None
    return time.perf_counter() - started, problem


def warm(images: list[str], pages: list[str]) -> list[dict]:
    """Each page on each image; what they build and read goes to the result store's warm-ups'
    area, which visitors' own results never evict."""
    from xai_core.models.disk_cache import result_store

    rows = []
    store = result_store()
    with store.pinning(every_thread=True) if store else nullcontext():
        for image in images:
            for page in pages:
                seconds, problem = open_page(page, image)
                rows.append({"image": image, "page": page, "seconds": seconds,
                             "problem": problem})
                print(f"{image:<14} {page:<26} {seconds:6.1f} s {problem or ''}", flush=True)
    return rows


def main(argv: list[str]) -> int:
    gallery = [*SAMPLES, COLLAGE_ID]
    pages = [entry[0] for entry in existing_pages()]
    parser = argparse.ArgumentParser(prog="python -m dashboard.warm_pages",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--images", default=",".join(gallery),
                        help="gallery ids, comma-separated (default: the whole gallery)")
    parser.add_argument("--pages", default=",".join(pages),
                        help="page files, comma-separated (default: every page)")
    args = parser.parse_args(argv)
    wanted_images, wanted_pages = args.images.split(","), args.pages.split(",")
    unknown = [i for i in wanted_images if i not in gallery] + \
        [p for p in wanted_pages if p not in pages]
    if unknown:
        print(f"warm_pages: unknown image or page: {', '.join(unknown)} (images: "
              f"{', '.join(gallery)}; pages: {', '.join(pages)})", file=sys.stderr)
        return 2
    rows = warm(wanted_images, wanted_pages)
    return 1 if any(row["problem"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
