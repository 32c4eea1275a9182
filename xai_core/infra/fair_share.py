"""The server's budget over time: what one visitor may take of a replica per minute.

The per-request budget (`budget.py`) bounds one request, not how many a visitor sends: a
link that fits (KernelSHAP, 400 samples: 28 s of a replica's CPU) with a new seed each time
is a new computation each time. So every visitor also has an allowance per minute: model
passes (each image through a loaded model, forward and back) and CPU-seconds. Each is a
bucket holding one minute's worth, refilled continuously; what a visitor uses is taken out.

- Who: the dashboard says (`identify_visitors_with`): the Streamlit session and a hashed
  client key (nginx's browser id, or the address of a client that sends none). Each has a
  bucket, and a call is held back while either is empty, so opening many sessions does not
  multiply the allowance. Work done for no visitor (warm-ups, the CLI, loading a model,
  which every session shares: `exempt`) is not counted.
- What: the images through a model, counted by a hook on it (`count_passes`), and the CPU
  time of the visitor's thread (`time.thread_time`; torch's other threads, when a replica
  runs more than one, as busy while the call holds the model), settled at every model call
  and at the end of a page run (`settle`). A cache hit costs nothing, so a link that only
  changes a seed (a miss each time) is counted like any new computation.
- Past it: before a request of a declared cost (a method's passes) the visitor waits until
  the allowance covers it, the wait reported as it goes (`report_waits_with`: the page's
  progress line), or is refused in one sentence (`OverShare`) when that would take longer
  than `wait_seconds`. Before any other model call a visitor past the allowance waits (a
  call is short, so the wait is). A waiting thread holds no model lock, so other visitors'
  calls go on at their speed; it never waits while it holds the process's random generator
  (`rng.seeded`), which other visitors may need.

Each replica keeps its own accounts (a browser stays on one replica). The allowance: env vars
VIT_LENS_BUDGET_PASSES_PER_MINUTE, VIT_LENS_BUDGET_CPU_PER_MINUTE and VIT_LENS_BUDGET_WAIT_S
("none" lifts a limit), else `passes_per_minute`, `cpu_seconds_per_minute` and
`wait_seconds` in `.streamlit/budget.toml`, beside the per-request budget, else the defaults.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

from . import priority, rng
from .budget import NO_LIMIT, SETTINGS_FILE, OverBudget, read_settings_file
from .errors import OptionError

ENV_PASSES = "VIT_LENS_BUDGET_PASSES_PER_MINUTE"
ENV_CPU = "VIT_LENS_BUDGET_CPU_PER_MINUTE"
ENV_WAIT = "VIT_LENS_BUDGET_WAIT_S"
MINUTE = 60.0
WAIT_STEP_S = 0.25  # how often a waiting visitor's progress line moves
SETTINGS_TTL_S = 2.0  # the settings are read again at most this often (every model call asks)
MAX_ACCOUNTS = 10_000  # the least recently used beyond it are forgotten (their buckets refill)
# A request declared this heavy (KernelSHAP's 400 samples, Occlusion, head importance) runs
# the rest of its page run at the lowest priority, as the gallery's warm-up does: on a core
# shared with other visitors' pages the kernel gives them the CPU first (weight 15 against
# 1024) and the heavy one what is left, which on a server between a class's clicks is most.
# (At nice 10, weight 110, the students' pages beside a greedy visitor were 1.54x slower at
# p95 in one of two quiet runs.) Streamlit's script thread ends when the session has no rerun
# waiting, and the next click starts a new one at the normal priority; a rerun queued during
# the heavy run runs in the same thread, lowered too.
HEAVY_PASSES = 64
HEAVY_NICE = priority.BACKGROUND_NICE


@dataclass(frozen=True)
class Share:
    """One visitor's allowance per minute; None lifts a limit."""

    passes: int | None = 800  # images through a model, forward and back
    cpu_seconds: float | None = 30.0
    wait_seconds: float = 30.0  # the longest a request waits before it is refused instead


DEFAULT = Share()
UNLIMITED = Share(None, None)


@dataclass(frozen=True)
class Visitor:
    """The keys a visitor is counted under: its session, and its client (None: unknown)."""

    session: str
    client: str | None = None

    def keys(self) -> tuple[tuple[str, str], ...]:
        return (("session", self.session),) + ((("client", self.client),) if self.client else ())


class OverShare(OverBudget):
    """A visitor past its allowance whose request would wait too long (one sentence, shown
    where a refusal of the per-request budget is)."""


# --- settings ---------------------------------------------------------------------------------

def _number(raw, name: str, kind=float):
    text = str(raw).strip().lower()
    if text == NO_LIMIT:
        return None
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or value <= 0:
        raise OptionError(f"{name} must be a positive number or 'none', got '{raw}'.")
    return value


def read_share() -> Share:
    """The allowance in force: env vars, else the settings file, else DEFAULT."""
    settings = read_settings_file(SETTINGS_FILE)

    def setting(env: str, key: str, default, kind):
        if env in os.environ:
            return _number(os.environ[env], env, kind)
        return _number(settings.get(key, default), f"{key} in {SETTINGS_FILE}", kind)
    wait = setting(ENV_WAIT, "wait_seconds", DEFAULT.wait_seconds, float)
    return Share(setting(ENV_PASSES, "passes_per_minute", DEFAULT.passes, int),
                 setting(ENV_CPU, "cpu_seconds_per_minute", DEFAULT.cpu_seconds, float),
                 DEFAULT.wait_seconds if wait is None else wait)


_read: list = [float("-inf"), DEFAULT]  # (when, share): the last reading
_read_lock = threading.Lock()


def current_share(clock: Callable[[], float] = time.monotonic) -> Share:
    """`read_share`, at most every SETTINGS_TTL_S (a model call asks each time)."""
    with _read_lock:
        if clock() - _read[0] > SETTINGS_TTL_S:
            _read[:] = [clock(), read_share()]
        return _read[1]


# --- the accounts -----------------------------------------------------------------------------

class Ledger:
    """Every visitor key's two buckets (passes, CPU-seconds), each at most a minute's worth
    and refilled at that rate; what is used is taken out, and may take a bucket below zero
    (a call's cost is known once it has run)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 max_accounts: int = MAX_ACCOUNTS):
        self.clock, self.max_accounts = clock, max_accounts
        self._used: OrderedDict[tuple, list[float]] = OrderedDict()  # key -> [passes, cpu, at]
        self._lock = threading.Lock()

    def _account(self, key: tuple, share: Share) -> list[float]:
        """Under the lock: the key's use so far, less what has refilled since."""
        now = self.clock()
        used = self._used.pop(key, None) or [0.0, 0.0, now]
        elapsed = now - used[2]
        for index, limit in ((0, share.passes), (1, share.cpu_seconds)):
            used[index] = 0.0 if limit is None else max(0.0, used[index] - limit * elapsed / MINUTE)
        used[2] = now
        self._used[key] = used
        while len(self._used) > self.max_accounts:
            self._used.popitem(last=False)
        return used

    def charge(self, visitor: Visitor, share: Share, passes: float = 0, cpu: float = 0) -> None:
        with self._lock:
            for key in visitor.keys():
                used = self._account(key, share)
                used[0] += passes
                used[1] += cpu

    def used(self, visitor: Visitor, share: Share) -> tuple[float, float]:
        """(passes, CPU-seconds) the visitor's fuller account holds now, after refilling."""
        with self._lock:
            accounts = [self._account(key, share) for key in visitor.keys()]
        return max(a[0] for a in accounts), max(a[1] for a in accounts)

    def wait_for(self, visitor: Visitor, share: Share, passes: float = 0) -> float:
        """Seconds until every account of the visitor has room for `passes` (at most a
        minute's worth) and some CPU time left; 0 when it has now."""
        used_passes, used_cpu = self.used(visitor, share)
        wait = 0.0
        if share.passes is not None:
            room_needed = min(passes, share.passes)
            over = used_passes + room_needed - share.passes
            wait = max(wait, over * MINUTE / share.passes)
        if share.cpu_seconds is not None and used_cpu >= share.cpu_seconds:
            over = used_cpu - share.cpu_seconds
            wait = max(wait, (over + 1e-3) * MINUTE / share.cpu_seconds)
        return max(0.0, wait)

    def clear(self) -> None:
        with self._lock:
            self._used.clear()


LEDGER = Ledger()


# --- who is asking ----------------------------------------------------------------------------

_identify: list[Callable[[], Visitor | None]] = [lambda: None]
_report: list[Callable[[float, float], None]] = [lambda left, total: None]
_thread = threading.local()  # exempt depth, CPU mark


def identify_visitors_with(identify: Callable[[], Visitor | None]) -> None:
    """Name the function that says which visitor the current thread works for (None: none)."""
    _identify[0] = identify


def report_waits_with(report: Callable[[float, float], None]) -> None:
    """Name the function told, while a visitor waits, (seconds left, seconds in all); it runs
    in the waiting thread (the page's, which can draw a progress line)."""
    _report[0] = report


@contextmanager
def exempt():
    """Inside: nothing this thread does is counted or held back (work every visitor shares,
    such as loading a model)."""
    _thread.exempt = getattr(_thread, "exempt", 0) + 1
    try:
        yield
    finally:
        _thread.exempt -= 1


def visitor() -> Visitor | None:
    """The visitor the current thread works for, or None (not counted)."""
    if getattr(_thread, "exempt", 0):
        return None
    try:
        return _identify[0]()
    except Exception:  # noqa: BLE001  not knowing the visitor must never break a page
        return None


def _may_wait() -> bool:
    """Not while this thread holds something another visitor may need: a model, or the
    process's random generator."""
    return not getattr(_thread, "models", 0) and not rng.held_here()


def model_taken() -> None:
    """The current thread now holds a model's lock (`faults.ModelLock`)."""
    _thread.models = getattr(_thread, "models", 0) + 1


def model_released() -> None:
    _thread.models -= 1


# --- counting ---------------------------------------------------------------------------------

def charge_passes(count: int, who: Visitor | None = None) -> None:
    who = who or visitor()
    if who is not None and count:
        LEDGER.charge(who, current_share(), passes=count)


def settle(thread_cpu: Callable[[], float] = time.thread_time, helpers_busy: float = 0.0) -> None:
    """Charge the current visitor the CPU time this thread used since the last settlement
    (and `helpers_busy` CPU-seconds of torch's other threads)."""
    who = visitor()
    now = thread_cpu()
    mark = getattr(_thread, "mark", None)
    _thread.mark = (who, now)
    if who is None:
        return
    # a thread's first settlement counts from its start (Streamlit runs each script run in
    # a thread of its own); a thread that worked for another before counts from then
    since = mark[1] if mark is not None else 0.0
    LEDGER.charge(who, current_share(), cpu=max(0.0, now - since) + helpers_busy)


PASS_COUNTER = "_vit_lens_pass_counter"  # the id of the counting hook, on the model it counts


def count_passes(module) -> None:
    """Count every image through `module` (its batch's first dimension), forward and back,
    against the visitor whose thread runs it. The backward is counted by a hook on the
    output, for the visitor of the forward (it may run on another thread)."""
    def on_forward(_module, args, output):
        who = visitor()
        if who is None:
            return
        first = args[0] if args else None
        images = int(first.shape[0]) if getattr(first, "shape", None) else 1
        charge_passes(images, who)
        if getattr(output, "requires_grad", False) and hasattr(output, "register_hook"):
            output.register_hook(lambda grad: charge_passes(images, who))
    handle = module.register_forward_hook(on_forward)
    setattr(module, PASS_COUNTER, handle.id)  # so a check for left-over hooks can tell it apart


# --- holding back -----------------------------------------------------------------------------

def admit(passes: int = 0, what: str = "this", should_stop: Callable[[], bool] | None = None,
          may_refuse: bool = True, sleep: Callable[[float], None] = time.sleep) -> float:
    """Before work of `passes` declared passes (0: a single model call) for the current
    visitor: wait until its allowance covers it, reporting the wait, or raise OverShare when
    the wait would be longer than the share's `wait_seconds` (only if `may_refuse`). Returns
    the seconds waited. No visitor, no limit, or a thread that must not wait: at once."""
    who = visitor()
    if who is None:
        return 0.0
    if passes >= HEAVY_PASSES:
        priority.lower_this_thread(HEAVY_NICE)
    if not _may_wait():
        return 0.0
    settle()
    share = current_share()
    wait = LEDGER.wait_for(who, share, passes)
    if wait <= 0:
        return 0.0
    if may_refuse and wait > share.wait_seconds:
        raise OverShare(refusal(what, wait, share))
    total, waited = wait, 0.0
    while wait > 0:
        _report[0](wait, total)
        if should_stop is not None and should_stop():
            break  # the caller's own stop check ends the work
        step = min(WAIT_STEP_S, wait)
        sleep(step)
        waited += step
        wait = LEDGER.wait_for(who, share, passes)
    _report[0](0.0, total)
    return waited


def allowance_words(share: Share) -> str:
    parts = []
    if share.passes is not None:
        parts.append(f"{share.passes} image passes")
    if share.cpu_seconds is not None:
        parts.append(f"{share.cpu_seconds:g} s of computing")
    return " and ".join(parts) + " a minute for each visitor"


def refusal(what: str, wait: float, share: Share) -> str:
    return (f"You have used your share of this server for now ({allowance_words(share)}), "
            f"and {what} would have to wait about {wait:.0f} s, so it was not started: try "
            "again in a minute, or choose settings that are already computed (the default "
            "seed, a gallery picture).")


def waiting_words(left: float, share: Share | None = None) -> str:
    """The progress line's words while a visitor waits."""
    share = share or current_share()
    return (f"You have used your share of this server for the moment "
            f"({allowance_words(share)}), so other visitors go first: this starts in about "
            f"{max(1, round(left))} s.")
