"""The load benchmark's mixes beside a class (bench/bench_load.py runs them on its stack: the
nginx recipe in front of two warm replicas):

- greedy: the students' pages with and without a greedy visitor beside them, who opens
  heavy comparison links (KernelSHAP, 400 samples) with a new seed each time, as a browser
  (its cookies kept), in a loop; the budget over time holds it back;
- uploads: students uploading their own photos at once, each then on the Explainer;
- exports: students pressing Export lesson at once, each downloading the file; the
  replicas' memory then, and a minute after every socket closed;
- kill: a replica killed while a class arrives; the survivor's pages, and the killed one,
  restarted as systemd would, warming before it gets a new visitor.
"""

from __future__ import annotations

import asyncio
import io
import threading
import time

import numpy as np

from bench.load_client import Upload, _get, app_socket, upload_and_open
from dashboard.page_visit import PageRun, element_kinds, loopback, open_page, rerun_request

GREEDY_LINK = ("image_choice={image}&cmp_methods_vit=kernel-shap"
               "&cmp_opt_vit_kernel-shap_samples={samples}&cmp_opt_vit_kernel-shap_seed={seed}")
GREEDY_SAMPLES = 400  # 28 s of a replica's CPU per link
SMOKE_GREEDY_SAMPLES = 10  # the fewest KernelSHAP takes: the smoke only shows the mix runs
SETTLE_S = 60  # after the exports: memory measured again this much later
SMOKE_SETTLE_S = 5


def percentile(values, q) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def photo(seed: int, side: int = 640) -> bytes:
    """A photo-sized PNG new to every cache (random pixels, smoothed a little so it is not all
    noise: about 0.9 MB at 640 px)."""
    from PIL import Image, ImageFilter

    pixels = np.random.default_rng(seed).integers(0, 256, (side, side, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).filter(ImageFilter.GaussianBlur(1.5)).save(buffer, "PNG")
    return buffer.getvalue()


class Sampler:
    """Each replica's resident memory, every half second, in a thread of its own."""

    def __init__(self, pids: list[int], rss_gb):
        self.pids, self.rss_gb = pids, rss_gb
        self.peaks = {pid: rss_gb(pid) for pid in pids}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            for pid in self.pids:
                try:
                    self.peaks[pid] = max(self.peaks[pid], self.rss_gb(pid))
                except OSError:  # a killed replica
                    continue

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


# --- greedy --------------------------------------------------------------------------------------

async def greedy_visitor(base: str, image: str, stop: asyncio.Event,
                        samples: int = GREEDY_SAMPLES) -> list[PageRun]:
    """Heavy links with a new seed each, one after the other, as one browser: the cookies
    of its first health check kept for every visit."""
    cookies: dict[str, str] = {}
    await _get(base, "_stcore/health", cookies, 60)
    runs, seed = [], 5000
    while not stop.is_set():
        seed += 1
        runs.append(await open_page(base, "comparison",
                                    GREEDY_LINK.format(image=image, seed=seed,
                                                       samples=samples),
                                    cookies=cookies, timeout=300))
    return runs


def greedy_rows(label: str, alone: list[float], beside: list[float], runs: list[PageRun],
                seconds: float, samples: int = GREEDY_SAMPLES) -> list[dict]:
    ratio = percentile(beside, 95) / percentile(alone, 95)
    done = [run for run in runs if not run.error]
    return [
        {"name": f"{label}: students' pages p95, alone", "value": percentile(alone, 95),
         "unit": "s", "note": f"{len(alone)} finished runs"},
        {"name": f"{label}: students' pages p95, beside a greedy visitor",
         "value": percentile(beside, 95), "unit": "s", "note": f"{len(beside)} finished runs"},
        {"name": f"{label}: ratio", "value": ratio, "unit": "x", "note": "target <= 1.5"},
        {"name": f"{label}: greedy visitor's links answered", "value": float(len(done)),
         "unit": "", "note": f"in {seconds:.0f} s, each a new seed of a {samples}-sample "
                             "KernelSHAP: computed, or refused in one sentence past its "
                             "budget over time (this client does not tell which)"}]


# --- uploads ---------------------------------------------------------------------------------------

async def uploads_at_once(base: str, count: int) -> list[Upload]:
    first = time.time_ns() % 2**31  # photos new to the shared result store on every run
    photos = [photo(first + n) for n in range(count)]
    return await asyncio.gather(*(upload_and_open(base, p, "vit_explainer") for p in photos))


def upload_rows(label: str, uploads: list[Upload], peaks: dict[int, float]) -> list[dict]:
    seconds = [u.seconds for u in uploads if not u.error]
    errors = [u.error for u in uploads if u.error] + \
        [f"{u.exceptions} exception(s) shown" for u in uploads if u.exceptions]
    rows = [{"name": f"{label}: errors", "value": float(len(errors)), "unit": "",
             "note": "; ".join(sorted(set(e[:80] for e in errors))[:3])},
            {"name": f"{label}: upload -> Explainer p50", "value": percentile(seconds, 50),
             "unit": "s"},
            {"name": f"{label}: upload -> Explainer p95", "value": percentile(seconds, 95),
             "unit": "s", "note": "target <= 10 s"}]
    for number, peak in enumerate(peaks.values(), 1):
        rows.append({"name": f"{label}: replica {number} peak RSS", "value": peak, "unit": "GB",
                     "note": "target <= 2.5 GB"})
    return rows


# --- lesson exports --------------------------------------------------------------------------------

async def export_lesson(base: str, query: str, timeout: float = 600,
                        meanwhile=None) -> tuple[float, int, str]:
    """Open the Explainer, press Export lesson (a rerun of its fragment with the button's
    trigger), then fetch the file at the address its download button gives, as a browser
    does (after awaiting `meanwhile()`, when given): (seconds from the press to the last
    byte, bytes, error)."""
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    cookies: dict[str, str] = {}
    try:
        async with asyncio.timeout(timeout):
            async with app_socket(base, cookies, timeout) as socket:
                await socket.send(rerun_request("vit_explainer", query, base + "vit_explainer"))
                button = fragment = None
                async for payload in socket:
                    message = ForwardMsg.FromString(payload)
                    if message.WhichOneof("type") == "delta" and \
                            message.delta.WhichOneof("type") == "new_element":
                        element = message.delta.new_element
                        if element.WhichOneof("type") == "button" and \
                                "explainer_lesson_make" in element.button.id:
                            button, fragment = element.button.id, message.delta.fragment_id
                    if element_kinds([payload])[2]:
                        break
                if button is None:
                    return float("nan"), 0, "no Export lesson button"
                started = time.perf_counter()
                press = BackMsg.FromString(rerun_request("vit_explainer", query,
                                                         base + "vit_explainer"))
                press.rerun_script.fragment_id = fragment
                state = press.rerun_script.widget_states.widgets.add()
                state.id, state.trigger_value = button, True
                await socket.send(press.SerializeToString())
                url = ""
                async for payload in socket:
                    message = ForwardMsg.FromString(payload)
                    if message.WhichOneof("type") == "delta" and \
                            message.delta.WhichOneof("type") == "new_element" and \
                            message.delta.new_element.WhichOneof("type") == "download_button":
                        url = message.delta.new_element.download_button.url
                    if fragment_run_done(message):
                        break
                if not url:
                    return float("nan"), 0, "no file address on the download button"
                if meanwhile is not None:
                    await meanwhile()
                size = await _fetch(base, url, cookies, timeout)
                return time.perf_counter() - started, size, ""
    except Exception as error:  # noqa: BLE001  a failed student is a result
        return float("nan"), 0, f"{type(error).__name__}: {str(error)[:120]}"


def fragment_run_done(message) -> bool:
    """Whether a ForwardMsg ends the run a button in a fragment started: a fragment's run
    finishes with its own status (not the full run's `page_visit.RUN_DONE`)."""
    from dashboard.page_visit import FINISHED, RUN_DONE

    return message.WhichOneof("type") == "script_finished" and \
        message.script_finished in RUN_DONE | {FINISHED.FINISHED_FRAGMENT_RUN_SUCCESSFULLY}


async def _fetch(base: str, url: str, cookies: dict[str, str], timeout: float) -> int:
    from bench.load_client import _read_response, server_path

    host, port = loopback(base)
    path = server_path(base, url)
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    try:
        cookie = "; ".join(f"{k}={v}" for k, v in cookies.items())
        writer.write((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n"
                      f"Cookie: {cookie}\r\n\r\n").encode())
        await writer.drain()
        status, _, body = await asyncio.wait_for(_read_response(reader), timeout)
        if status != 200:
            raise OSError(f"download: HTTP {status}")
        return len(body)
    finally:
        writer.close()


def export_rows(label: str, results: list[tuple[float, int, str]], start: dict[int, float],
                peaks: dict[int, float], settled: dict[int, float],
                settle_s: float = SETTLE_S) -> list[dict]:
    seconds = [s for s, _, error in results if not error]
    errors = [error for _, _, error in results if error]
    rows = [{"name": f"{label}: errors", "value": float(len(errors)), "unit": "",
             "note": "; ".join(sorted(set(errors))[:3])},
            {"name": f"{label}: press -> file downloaded p50", "value": percentile(seconds, 50),
             "unit": "s", "note": f"{np.mean([b for _, b, e in results if not e]) / 1e6:.1f} MB "
                                  "each" if seconds else ""},
            {"name": f"{label}: press -> file downloaded p95", "value": percentile(seconds, 95),
             "unit": "s"}]
    for number, pid in enumerate(start, 1):
        rows += [{"name": f"{label}: replica {number} RSS before, peak", "unit": "GB",
                  "value": peaks[pid], "note": f"{start[pid]:.2f} GB before"},
                 {"name": f"{label}: replica {number} RSS {settle_s:.0f} s after, over before",
                  "value": (settled[pid] - start[pid]) * 1024, "unit": "MB",
                  "note": "target <= 100 MB"}]
    return rows


async def exports_at_once(base: str, count: int, query: str) -> list[tuple[float, int, str]]:
    return await asyncio.gather(*(export_lesson(base, query) for _ in range(count)))
