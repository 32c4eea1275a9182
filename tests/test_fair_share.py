"""The budget over time (xai_core/infra/fair_share.py): each visitor's passes and CPU-seconds
per minute, refilled at that rate (a fake clock: every wait is the closed form), the session
and the client key both counted, the images really run counted against the visitor whose
thread runs them (cache hits free, a new seed a new computation), a visitor past it waiting
with a progress report or refused in one sentence, and nobody else held up meanwhile."""

from __future__ import annotations

import sys
import threading
import time

import pytest
from tiny_models import images, tiny_vit

from xai_core import pipeline
from xai_core.infra import budget, fair_share, priority, rng
from xai_core.methods import METHODS
from xai_core.studies.method_runs import PassCounter

SHARE = fair_share.Share(passes=600, cpu_seconds=30.0, wait_seconds=20.0)
BIG = fair_share.Share(passes=10**6, cpu_seconds=10**6, wait_seconds=20.0)  # never waits


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(autouse=True)
def default_share(monkeypatch, tmp_path):
    """The defaults whatever the machine says, a fresh ledger, no visitor unless a test
    names one."""
    for name in (fair_share.ENV_PASSES, fair_share.ENV_CPU, fair_share.ENV_WAIT,
                 budget.ENV_PASSES, budget.ENV_MB):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(fair_share, "SETTINGS_FILE", tmp_path / "no-such-budget.toml")
    monkeypatch.setattr(fair_share, "_read", [float("-inf"), fair_share.DEFAULT])
    monkeypatch.setattr(fair_share, "LEDGER", fair_share.Ledger())
    monkeypatch.setattr(fair_share, "_identify", [lambda: None])
    monkeypatch.setattr(fair_share, "_report", [lambda left, total: None])
    nice = priority.thread_nice()
    yield
    if nice is not None:  # a heavy admission below lowered this thread: back
        priority.lower_this_thread(nice)


def as_visitor(monkeypatch, who_by_thread: dict):
    """Thread ident -> Visitor: who each thread works for."""
    monkeypatch.setattr(fair_share, "_identify",
                        [lambda: who_by_thread.get(threading.get_ident())])


# --- the accounts, on a fake clock ------------------------------------------------------------

def test_an_allowance_refills_at_its_rate_per_minute():
    clock = FakeClock()
    ledger = fair_share.Ledger(clock)
    ann = fair_share.Visitor("ann")
    assert ledger.wait_for(ann, SHARE, passes=600) == 0  # a full minute's worth at first
    ledger.charge(ann, SHARE, passes=600)
    # 600 passes a minute = 10 a second: room for 100 more takes 10 s
    assert ledger.wait_for(ann, SHARE, passes=100) == pytest.approx(10.0)
    clock.now += 4
    assert ledger.wait_for(ann, SHARE, passes=100) == pytest.approx(6.0)
    assert ledger.used(ann, SHARE)[0] == pytest.approx(560.0)
    clock.now += 600  # never more than a minute's worth back
    assert ledger.used(ann, SHARE) == (0.0, 0.0)
    # a request bigger than a minute's worth needs a full bucket, not more
    ledger.charge(ann, SHARE, passes=300)
    assert ledger.wait_for(ann, SHARE, passes=5000) == pytest.approx(30.0)


def test_cpu_seconds_past_the_allowance_wait_for_their_refill():
    clock = FakeClock()
    ledger = fair_share.Ledger(clock)
    ann = fair_share.Visitor("ann")
    ledger.charge(ann, SHARE, cpu=29.0)
    assert ledger.wait_for(ann, SHARE) == 0  # still some left
    ledger.charge(ann, SHARE, cpu=3.0)  # 2 s over: 30 s a minute refill 0.5 s a second
    assert ledger.wait_for(ann, SHARE) == pytest.approx(4.0, abs=0.01)
    clock.now += 4.01
    assert ledger.wait_for(ann, SHARE) == 0
    unlimited = fair_share.Share(None, None)
    ledger.charge(ann, unlimited, passes=10**6, cpu=10**6)
    assert ledger.wait_for(ann, unlimited, passes=10**6) == 0


def test_the_client_key_holds_every_session_of_one_client():
    """Many sessions of one browser share its allowance; another browser is not touched."""
    clock = FakeClock()
    ledger = fair_share.Ledger(clock)
    tab1, tab2 = fair_share.Visitor("s1", "browser-a"), fair_share.Visitor("s2", "browser-a")
    other = fair_share.Visitor("s3", "browser-b")
    ledger.charge(tab1, SHARE, passes=400)
    ledger.charge(tab2, SHARE, passes=200)
    assert ledger.wait_for(fair_share.Visitor("s4", "browser-a"), SHARE, passes=60) == \
        pytest.approx(6.0)  # a new session of that browser: its client key is full
    assert ledger.wait_for(tab1, SHARE, passes=60) == pytest.approx(6.0)
    assert ledger.wait_for(other, SHARE, passes=600) == 0


def test_accounts_are_bounded():
    ledger = fair_share.Ledger(FakeClock(), max_accounts=3)
    for name in "abcde":
        ledger.charge(fair_share.Visitor(name), SHARE, passes=1)
    assert len(ledger._used) == 3


# --- holding back -----------------------------------------------------------------------------

def test_a_visitor_past_its_allowance_waits_with_a_progress_report(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(fair_share, "LEDGER", fair_share.Ledger(clock))
    monkeypatch.setattr(fair_share, "_read", [float("inf"), SHARE])  # no settings read
    monkeypatch.setattr(fair_share, "settle", lambda **kwargs: None)  # CPU by hand here
    ann = fair_share.Visitor("ann", "browser-a")
    as_visitor(monkeypatch, {threading.get_ident(): ann})
    reports = []
    monkeypatch.setattr(fair_share, "_report", [lambda left, total: reports.append(left)])
    fair_share.LEDGER.charge(ann, SHARE, passes=590)
    waited = fair_share.admit(passes=110, what="kernel-shap", sleep=clock.sleep)
    assert waited == pytest.approx(10.0)  # 100 passes short, 10 a second
    assert reports[0] == pytest.approx(10.0) and reports[-1] == 0.0
    assert all(a > b for a, b in zip(reports[:-1], reports[1:]))  # counting down
    assert len(reports) == 10.0 / fair_share.WAIT_STEP_S + 1


def test_a_wait_longer_than_allowed_is_refused_in_one_sentence(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(fair_share, "LEDGER", fair_share.Ledger(clock))
    monkeypatch.setattr(fair_share, "_read", [float("inf"), SHARE])
    monkeypatch.setattr(fair_share, "settle", lambda **kwargs: None)
    ann = fair_share.Visitor("ann")
    as_visitor(monkeypatch, {threading.get_ident(): ann})
    fair_share.LEDGER.charge(ann, SHARE, passes=600, cpu=50.0)  # 20 s over, 0.5 a second
    with pytest.raises(fair_share.OverShare) as refused:
        fair_share.admit(passes=10, what="kernel-shap", sleep=clock.sleep)
    sentence = str(refused.value)
    assert sentence.count(". ") == 0 and sentence.endswith(".") and "\n" not in sentence
    assert "600 image passes and 30 s of computing a minute" in sentence
    assert "kernel-shap would have to wait about 40 s" in sentence
    assert isinstance(refused.value, budget.OptionError)  # the pages' friendly errors show it
    # a single model call is never refused: it waits
    assert fair_share.admit(may_refuse=False, sleep=clock.sleep) == pytest.approx(40.0, abs=0.3)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice: Linux's")
def test_a_heavy_request_yields_the_cpu_to_other_visitors_pages(monkeypatch):
    """Admitted work of HEAVY_PASSES or more runs the rest of its thread's run at HEAVY_NICE;
    lighter work, and work for no visitor (a warm-up, the CLI), keep their priority."""
    monkeypatch.setattr(fair_share, "_read", [float("inf"), BIG])
    monkeypatch.setattr(fair_share, "settle", lambda **kwargs: None)
    visitors, nices = {}, {}

    def request(name: str, who, passes: int) -> None:
        visitors[threading.get_ident()] = who
        fair_share.admit(passes=passes, what="kernel-shap")
        nices[name] = priority.thread_nice()

    as_visitor(monkeypatch, visitors)
    ann = fair_share.Visitor("ann")
    for name, who, passes in (("heavy", ann, fair_share.HEAVY_PASSES),
                              ("light", ann, fair_share.HEAVY_PASSES - 1),
                              ("nobody's", None, 400)):
        thread = threading.Thread(target=request, args=(name, who, passes))
        thread.start()
        thread.join()
    base = priority.thread_nice()
    assert nices == {"heavy": fair_share.HEAVY_NICE, "light": base, "nobody's": base}


def test_no_visitor_or_no_limit_is_never_held_back(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(fair_share, "LEDGER", fair_share.Ledger(clock))
    monkeypatch.setattr(fair_share, "_read", [float("inf"), fair_share.UNLIMITED])
    ann = fair_share.Visitor("ann")
    fair_share.LEDGER.charge(ann, SHARE, passes=10**6)
    assert fair_share.admit(passes=500, sleep=clock.sleep) == 0  # no visitor in this thread
    as_visitor(monkeypatch, {threading.get_ident(): ann})
    assert fair_share.admit(passes=500, sleep=clock.sleep) == 0  # no limit
    with fair_share.exempt():
        assert fair_share.visitor() is None


def test_settle_charges_the_threads_cpu_time_since_the_last_settlement(monkeypatch):
    monkeypatch.setattr(fair_share, "_read", [float("inf"), SHARE])
    ann, bob = fair_share.Visitor("ann"), fair_share.Visitor("bob")
    who = {}
    as_visitor(monkeypatch, who)
    me = threading.get_ident()
    monkeypatch.setattr(fair_share._thread, "mark", None, raising=False)
    who[me] = ann
    fair_share.settle(thread_cpu=lambda: 5.0)  # first settlement: from the thread's start
    fair_share.settle(thread_cpu=lambda: 7.5, helpers_busy=1.0)
    assert fair_share.LEDGER.used(ann, SHARE)[1] == pytest.approx(8.5, abs=0.01)
    who[me] = bob  # the thread now works for another visitor: from the last settlement
    fair_share.settle(thread_cpu=lambda: 9.0)
    assert fair_share.LEDGER.used(bob, SHARE)[1] == pytest.approx(1.5, abs=0.01)
    fair_share.settle(thread_cpu=lambda: 10.0)
    assert fair_share.LEDGER.used(bob, SHARE)[1] == pytest.approx(2.5, abs=0.01)


def test_settings_come_from_env_then_file_then_defaults(monkeypatch, tmp_path):
    assert fair_share.read_share() == fair_share.DEFAULT
    settings = tmp_path / "budget.toml"
    settings.write_text("passes = 400\npasses_per_minute = 120\ncpu_seconds_per_minute = 12.5\n"
                        "wait_seconds = 5\n")
    monkeypatch.setattr(fair_share, "SETTINGS_FILE", settings)
    assert fair_share.read_share() == fair_share.Share(120, 12.5, 5.0)
    monkeypatch.setenv(fair_share.ENV_CPU, "none")
    monkeypatch.setenv(fair_share.ENV_PASSES, "90")
    assert fair_share.read_share() == fair_share.Share(90, None, 5.0)
    monkeypatch.setenv(fair_share.ENV_PASSES, "many")
    with pytest.raises(budget.OptionError, match=fair_share.ENV_PASSES):
        fair_share.read_share()


def test_the_repository_settings_file_holds_the_defaults():
    shipped = fair_share.read_settings_file(budget.SETTINGS_FILE)
    assert (shipped["passes_per_minute"], shipped["cpu_seconds_per_minute"],
            shipped["wait_seconds"]) == (fair_share.DEFAULT.passes, fair_share.DEFAULT.cpu_seconds,
                                         fair_share.DEFAULT.wait_seconds)


# --- counting real model calls ------------------------------------------------------------------

@pytest.fixture(scope="module")
def counted_vit():
    model = tiny_vit("test-tiny-fair-share", knn=False)
    fair_share.count_passes(model.module)
    return model


def test_the_images_a_method_runs_are_charged_and_a_cache_hit_is_free(monkeypatch, counted_vit):
    """The oracle: forward hooks (method_runs.PassCounter) count the images KernelSHAP runs;
    the visitor is charged exactly those. The same link again is a cache hit, charged
    nothing; only its seed changed, it is a new computation, charged again."""
    monkeypatch.setattr(fair_share, "_read", [float("inf"), BIG])
    monkeypatch.setattr(fair_share, "LEDGER", fair_share.Ledger(FakeClock()))  # no refill
    ann = fair_share.Visitor("ann", "browser-a")
    as_visitor(monkeypatch, {threading.get_ident(): ann})
    image = images(1)[0]
    target = pipeline.resolve_target(counted_vit, None, image)
    shap = METHODS["kernel-shap"]
    options = {"samples": 12, "batch": 5, "seed": 1}
    before = fair_share.LEDGER.used(ann, BIG)[0]
    with PassCounter(counted_vit) as counter:
        shap(counted_vit, image, target=target, **options)
    charged = fair_share.LEDGER.used(ann, BIG)[0] - before
    assert charged == counter.images == shap.cost.passes(shap.resolve(counted_vit, options),
                                                         counted_vit)
    shap(counted_vit, image, target=target, **options)
    assert fair_share.LEDGER.used(ann, BIG)[0] - before == charged
    shap(counted_vit, image, target=target, **{**options, "seed": 2})
    assert fair_share.LEDGER.used(ann, BIG)[0] - before == 2 * charged


def test_a_backward_is_charged_like_a_forward(monkeypatch, counted_vit):
    monkeypatch.setattr(fair_share, "_read", [float("inf"), BIG])
    monkeypatch.setattr(fair_share, "LEDGER", fair_share.Ledger(FakeClock()))  # no refill
    ann = fair_share.Visitor("ann")
    as_visitor(monkeypatch, {threading.get_ident(): ann})
    image = images(2)[1]
    integrated = METHODS["integrated-gradients"]
    options = {"steps": 5, "batch": 2}
    values = integrated.resolve(counted_vit, options)
    target = pipeline.resolve_target(counted_vit, None, image)
    before = fair_share.LEDGER.used(ann, BIG)[0]
    integrated(counted_vit, image, target=target, **options)
    charged = fair_share.LEDGER.used(ann, BIG)[0] - before
    assert charged == integrated.cost.passes(values, counted_vit)  # forwards + backwards
    assert charged > integrated.cost.forwards(values, counted_vit)


def test_a_waiting_visitor_holds_nobody_up(monkeypatch, counted_vit):
    """Ann is past her allowance and her prediction waits (real time: about 2 s); Bob's
    prediction on the same model meanwhile runs at once."""
    share = fair_share.Share(passes=600, cpu_seconds=None, wait_seconds=20)
    monkeypatch.setattr(fair_share, "_read", [float("inf"), share])
    ann, bob = fair_share.Visitor("ann", "a"), fair_share.Visitor("bob", "b")
    who: dict = {}
    as_visitor(monkeypatch, who)
    fair_share.LEDGER.charge(ann, share, passes=620)  # 20 over, 10 a second: 2 s
    ann_done, bob_done = {}, {}
    pictures = images(3)

    def run(name, visitor, picture, done):
        who[threading.get_ident()] = visitor
        started = time.perf_counter()
        pipeline.predict(counted_vit, picture, topk=1)
        done["seconds"] = time.perf_counter() - started

    first = threading.Thread(target=run, args=("ann", ann, pictures[2], ann_done))
    first.start()
    time.sleep(0.3)  # Ann is waiting now
    second = threading.Thread(target=run, args=("bob", bob, pictures[0], bob_done))
    second.start()
    second.join(10)
    assert bob_done["seconds"] < 1.0 and "seconds" not in ann_done
    first.join(10)
    assert 1.5 < ann_done["seconds"] < 6.0


def test_no_wait_while_holding_the_random_generator(monkeypatch):
    """A seeded block (KernelSHAP's coalitions) may be what others wait for: inside one a
    visitor is counted but never held back."""
    clock = FakeClock()
    monkeypatch.setattr(fair_share, "LEDGER", fair_share.Ledger(clock))
    monkeypatch.setattr(fair_share, "_read", [float("inf"), SHARE])
    ann = fair_share.Visitor("ann")
    as_visitor(monkeypatch, {threading.get_ident(): ann})
    fair_share.LEDGER.charge(ann, SHARE, passes=700)
    import torch

    with rng.seeded(torch.device("cpu"), 3):
        assert rng.held_here()
        assert fair_share.admit(passes=10, sleep=clock.sleep) == 0
    assert not rng.held_here()
    assert fair_share.admit(passes=10, may_refuse=False, sleep=clock.sleep) > 0


# --- in the app -------------------------------------------------------------------------------

def test_page_7_refuses_a_new_seed_past_the_allowance_in_one_sentence(monkeypatch):
    """A visitor (AppTest's session) runs KernelSHAP from a link, then the same link with only
    its seed changed: a new computation, past 60 passes a minute, that would wait longer than
    the 5 s allowed, so it is refused in one sentence in the page's error box. The same seed
    again is a cache hit and is shown, not refused."""
    from apptest_helpers import open_app, text_tables

    from dashboard import visitor_share

    monkeypatch.setenv(fair_share.ENV_PASSES, "60")
    monkeypatch.setenv(fair_share.ENV_CPU, "none")
    monkeypatch.setenv(fair_share.ENV_WAIT, "5")
    visitor_share.install()  # as the app's import did (the fixture named no visitor)
    app = open_app("7_comparison.py", timeout=600, image_choice="coffee",
                   cmp_methods_vit=["attention"])
    assert not app.exception, app.exception
    link = {"cmp_methods_vit": "kernel-shap", "cmp_opt_vit_kernel-shap_samples": "40",
            "cmp_opt_vit_kernel-shap_batch": "20"}
    for key, value in {**link, "cmp_opt_vit_kernel-shap_seed": "4242"}.items():
        app.query_params[key] = value
    app.run()
    assert not app.exception and not app.error, (app.exception, [e.value for e in app.error])
    assert "kernel-shap" in text_tables(app)[0].columns  # it ran
    app.query_params["cmp_opt_vit_kernel-shap_seed"] = "4243"
    app.run()
    errors = [e.value for e in app.error]
    assert len(errors) == 1 and errors[0].count(". ") == 0 and errors[0].endswith("."), errors
    assert "60 image passes a minute for each visitor" in errors[0]
    assert "kernel-shap would have to wait about" in errors[0]
    app.query_params["cmp_opt_vit_kernel-shap_seed"] = "4242"  # computed already: free
    app.run()
    assert not app.error and "kernel-shap" in text_tables(app)[0].columns


def test_the_client_key_is_the_browser_else_the_address_hashed():
    """nginx's browser id names the client (many sessions of one browser, one key); a client
    without one is named by its address; neither is kept as it came."""
    from dashboard import visitor_share as share

    browser = {share.BROWSER_COOKIE: "fQAAAGqVZ2e1zQ8BAwMEAg=="}
    via_proxy = {share.ADDRESS_HEADER: "10.1.2.3"}
    key = share.client_key(browser, via_proxy, "127.0.0.1")
    assert key == share.client_key(browser, {share.ADDRESS_HEADER: "10.9.9.9"}, None)
    assert key != share.client_key({share.BROWSER_COOKIE: "another"}, via_proxy, None)
    by_address = share.client_key({}, via_proxy, "127.0.0.1")
    assert by_address == share.client_key(None, via_proxy, None) != key
    assert by_address != share.client_key({}, {share.ADDRESS_HEADER: "10.1.2.4"}, None)
    assert share.client_key({}, {}, None) is None
    assert "10.1.2.3" not in by_address and len(key) == 24
    # the server's own sessions (loopback, no proxy header) are nobody's share
    assert share.server_own({}, "127.0.0.1") and share.server_own(None, "::1")
    assert not share.server_own(via_proxy, "127.0.0.1")  # through nginx: a visitor
    assert not share.server_own({}, "10.1.2.3") and not share.server_own(None, None)
