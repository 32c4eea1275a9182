"""`python -m xai_core warmup`: load the bundled models before the first user arrives.

A shared lab server should not make the first student of the day wait for the
DINOv2 conversion, the k-NN memory bank and the first forward passes. The
systemd unit runs this once before `streamlit run` (ExecStartPre), so the
on-disk caches (converted weights, bank) are filled; each app process then
loads from those caches in seconds. With `--gallery` it also computes every
page's default views for each gallery image into the shared result store, which
every replica reads.
"""

from __future__ import annotations

import time

from ..infra.health import wait_healthy
from .common import CliError, emit


def add_warmup_command(add) -> None:
    sub = add("warmup", cmd_warmup, "load the bundled models and the k-NN bank once "
                                    "(run before the first user)", image=False)
    sub.add_argument("--models", nargs="+", metavar="ID",
                     help="model ids to load (default: the bundled ViT, CNN and text model)")
    sub.add_argument("--gallery", action="store_true",
                     help="also compute every page's default views for each gallery image on "
                          "the default ViT and CNN, into the shared result store")


def cmd_warmup(args) -> None:
    from ..lessons.warmup import default_models, warm_up
    from ..models import get_spec

    model_ids = tuple(args.models or default_models())
    for model_id in model_ids:
        get_spec(model_id)  # unknown id: UnknownModelError, exit 2
    cache = cache_report()
    rows = warm_up(model_ids)
    failed = [row for row in rows if not row["loaded"]]
    text = "\n".join(f"{row['model']:20} " + (f"loaded in {row['seconds']:.1f} s"
                                               + (f", top class on the cat: {row['top']}"
                                                  if row["top"] else "")
                                               if row["loaded"] else f"NOT loaded: {row['reason']}")
                     for row in rows)
    if failed:
        emit(args, {"models": rows, "cache": cache}, f"{text}\n{cache_line(cache)}")
        raise CliError(f"{len(failed)} model(s) could not be loaded: "
                       + ", ".join(row["model"] for row in failed))
    payload, lines = {"models": rows, "cache": cache}, [text, cache_line(cache)]
    if args.gallery:
        payload["gallery"] = warm_gallery(lines)
    emit(args, payload, "\n".join(lines))
    problems = [f"{row['image']} ({'; '.join(row['failures'])})"
                for row in payload.get("gallery", {}).get("images", []) if row["failures"]]
    problems += [f"{row['model']} ({'; '.join(row['failures'])})"
                 for row in rows if row.get("failures")]
    if problems:
        raise CliError("Some default views could not be computed: " + ", ".join(problems))


def warm_gallery(lines: list[str]) -> dict:
    """Every page's default views for each gallery image (and the collage) on the default
    ViT and CNN; says per image how long it took and how much it computed."""
    from dataclasses import asdict

    from ..images import sample_ids
    from ..models import DEFAULT_CNN, DEFAULT_VIT, disk_cache, get_model

    store = disk_cache.result_store()
    where = (f"{store.folder} (warm-ups' area bound {store.warm_max_bytes / 2**20:.0f} MB, "
             f"visitors' {store.max_bytes / 2**20:.0f} MB)" if store else
             "off: results stay in this process (set VIT_LENS_RESULTS_DIR to share them)")
    vit, cnn = get_model(DEFAULT_VIT), get_model(DEFAULT_CNN)  # the sidebar's defaults
    started, rows = time.perf_counter(), []
    for sample_id in sample_ids():
        row = _warm_one(store, vit, cnn, sample_id)
        rows.append(asdict(row))
        lines.append(f"{'gallery ' + sample_id:20} {row.seconds:.1f} s: {row.computed} "
                     f"computed, {row.from_disk} read from the store"
                     + (f"; FAILED: {'; '.join(row.failures)}" if row.failures else ""))
    seconds = time.perf_counter() - started
    size = store.total_bytes(warm=True) if store else 0
    lines.append(f"{'gallery':20} {len(rows)} images in {seconds:.1f} s; result store {where}"
                 + (f": {size / 2**20:.0f} MB of warm-up results" if store else ""))
    if store and size > 0.9 * store.warm_max_bytes:
        lines.append(f"{'gallery':20} the warm-ups' area is nearly full: raise "
                     f"VIT_LENS_RESULTS_WARM_MB, or its oldest results go first")
    return {"images": rows, "seconds": seconds, "store": str(store.folder) if store else None,
            "store_bytes": size}


def _warm_one(store, vit, cnn, sample_id: str):
    """One gallery image's default views, every result in the warm-ups' area before it
    returns: a batch job waits for the writer rather than drop a write, as a request would."""
    from ..lessons.warmup import warm_image
    from ..images import load_sample

    if store is None:
        return warm_image(vit, cnn, sample_id, load_sample(sample_id))
    with store.pinning():  # into the warm-ups' area, which no visitor's result evicts
        return warm_image(vit, cnn, sample_id, load_sample(sample_id))


def add_health_command(add) -> None:
    sub = add("health", cmd_health, "check (or wait for) a running app's /_stcore/health",
              image=False)
    sub.add_argument("url", help="e.g. http://127.0.0.1:8501/vit-lens/_stcore/health")
    sub.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                     help="keep trying this long before giving up")


def cmd_health(args) -> None:
    cache = cache_report()  # this machine's cache folder, as the app's own settings name it
    if not wait_healthy(args.url, args.wait):
        raise CliError(f"{args.url} did not answer 'ok'"
                       + (f" within {args.wait:g} s." if args.wait else "."))
    emit(args, {"url": args.url, "healthy": True, "cache": cache},
          f"{args.url}: ok\n{cache_line(cache)}")


def cache_report() -> dict:
    """Whether the cache folder takes files; an unwritable one is also said on stderr (the
    CLI prints disk_cache.notice() once), but it fails neither command: the app runs without."""
    from ..models import cache_dir, disk_cache

    folder = cache_dir()
    reason = disk_cache.check_writable(folder)
    return {"dir": str(folder), "writable": reason is None, "reason": reason}


def cache_line(cache: dict) -> str:
    state = "writable" if cache["writable"] else f"NOT writable ({cache['reason']})"
    return f"{'cache':20} {cache['dir']}: {state}"
