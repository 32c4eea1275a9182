"""The cost budget: every method's declared passes match the passes it really runs; a request
over the server's budget is refused with one sentence before any pass, in the app (page 7's
links) and by the CLI (exit 2); `--budget none` lifts it; env vars and the settings file set
it; every method's defaults fit the default budget."""

from __future__ import annotations

import math

import pytest
from apptest_helpers import open_app, show, text_tables
from single_thread import one_torch_thread
from tiny_models import images, tiny_cnn, tiny_vit

from xai_core.infra import budget
from xai_core import models, pipeline
from xai_core.cli import common
from xai_core.cli.main import main
from xai_core.studies.method_runs import PassCounter
from xai_core.methods import METHODS
from xai_core.methods import attribution
from xai_core.models import get_model

LINKS = {  # the links (page 7), and a 512-step / 512-batch Integrated Gradients
    "ig-memory": {"cmp_methods_vit": "integrated-gradients",
                  "cmp_opt_vit_integrated-gradients_steps": "64",
                  "cmp_opt_vit_integrated-gradients_batch": "64"},
    "ig-512": {"cmp_methods_vit": "integrated-gradients",
               "cmp_opt_vit_integrated-gradients_steps": "512",
               "cmp_opt_vit_integrated-gradients_batch": "512"},
    "shap-passes": {"cmp_methods_vit": "kernel-shap",
                    "cmp_opt_vit_kernel-shap_samples": "5000"},
}
# what each refusal must name: the option to lower, and the limit
NAMED = {"ig-memory": ("lower batch to", "1.5 GB per request"),
         "shap-passes": ("lower samples to 400 or less", "400 passes"),
         "ig-512": ("lower steps to", "400 passes")}
CLI_SETS = {"ig-memory": ["steps=64", "batch=64"], "shap-passes": ["samples=5000"],
            "ig-512": ["steps=512", "batch=512"]}


@pytest.fixture(autouse=True)
def default_budget(monkeypatch, tmp_path):
    """The defaults, whatever the machine's env or settings file say."""
    monkeypatch.delenv(budget.ENV_PASSES, raising=False)
    monkeypatch.delenv(budget.ENV_MB, raising=False)
    monkeypatch.setattr(budget, "SETTINGS_FILE", tmp_path / "no-such-budget.toml")


@pytest.fixture
def method_passes(monkeypatch):
    """Every forward a Captum method runs goes through `attribution.score_forward`: count
    them (the refusals must come before the first)."""
    calls = []
    real = attribution.score_forward

    def counting(*args, **kwargs):
        forward = real(*args, **kwargs)

        def counted(pixels):
            calls.append(int(pixels.shape[0]))
            return forward(pixels)
        return counted
    monkeypatch.setattr(attribution, "score_forward", counting)
    return calls


def one_sentence(text: str) -> bool:
    return text.count(". ") == 0 and text.endswith(".") and "\n" not in text


# --- the declarations against the passes really run --------------------------------------------

@pytest.mark.parametrize("name, options", [
    ("integrated-gradients", {"steps": 5, "batch": 2}),
    ("smoothgrad", {"samples": 5, "batch": 2}),
    ("kernel-shap", {"samples": 12, "batch": 5}),
    ("occlusion", {"window": 2, "stride": 1, "batch": 3}),
    ("occlusion", {"window": 3, "stride": 2, "batch": 64}),
    ("saliency", {}), ("attention", {}), ("gradcam", {}),
])
def test_declared_passes_are_the_passes_a_method_runs(name, options):
    """The oracle: forward hooks on the model (method_runs.PassCounter) count the images each
    forward carries and the backward calls; the declaration says images forward, images
    back, and images per pass (backward calls = images back / batch, rounded up)."""
    method = METHODS[name]
    with one_torch_thread():
        for model in (tiny_vit("test-tiny-budget", knn=False), tiny_cnn()):
            if not method.fits(model.spec.family):
                continue
            image = images(1)[0]
            target = pipeline.resolve_target(model, None, image)
            values = method.resolve(model, options)
            with PassCounter(model) as counter:
                method(model, image, target=target, **values)
            cost = method.cost
            backwards = cost.backwards(values, model)
            calls = math.ceil(backwards / cost.batch(values, model))
            if cost.kind != "passes":  # one image at most: the capture may be shared already
                assert counter.images <= 1 and counter.backwards <= calls == backwards, name
                continue
            assert counter.images == cost.forwards(values, model), (name, model.spec.id)
            assert counter.backwards == calls, name
            if name == "occlusion":  # by hand, on 4x4 cells: the input, then windows at
                # cells 0, 1, 2 (window 2, stride 1) or 0, 2 (window 3, stride 2: over the edge)
                assert model.spec.input_size[0] // attribution.cell_size(model) == 4
                assert counter.images == 1 + {2: 3, 3: 2}[values["window"]] ** 2


@pytest.mark.parametrize("model_id", ["dinov2-s14", "efficientnet-lite0"])
def test_every_method_fits_the_default_budget_at_its_defaults(model_id):
    model = get_model(model_id)
    methods = [m for m in METHODS.values() if m.fits(model.spec.family)]
    assert {"integrated-gradients", "kernel-shap", "occlusion", "smoothgrad"} <= {
        m.name for m in methods}
    for method in methods:
        values = method.resolve(model, {})
        budget.check(method, values, model=model)  # raises when over
        assert budget.peak_bytes(method, values, model) > 0


def test_memory_grows_with_the_batch_and_the_backward():
    """Estimated bytes: images per pass x bytes per image, more for a pass kept for the
    backward (the measured ratio is about 8 on both bundled models)."""
    model = get_model("dinov2-s14")
    ig, shap = METHODS["integrated-gradients"], METHODS["kernel-shap"]
    one = budget.peak_bytes(ig, ig.resolve(model, {"steps": 8, "batch": 1}), model)
    assert budget.peak_bytes(ig, ig.resolve(model, {"steps": 8, "batch": 8}), model) == \
        pytest.approx(8 * one)
    assert budget.peak_bytes(ig, ig.resolve(model, {"steps": 4, "batch": 8}), model) == \
        pytest.approx(4 * one)  # never more images per pass than steps
    forward_only = budget.peak_bytes(shap, shap.resolve(model, {"batch": 1, "samples": 10}),
                                     model)
    assert 4 * forward_only < one < 16 * forward_only


# --- the budget's settings --------------------------------------------------------------------

def test_defaults_env_vars_and_settings_file(monkeypatch, tmp_path):
    assert budget.current() == budget.Budget(400, 1536)
    settings = tmp_path / "budget.toml"
    settings.write_text("passes = 150\nmegabytes = 900\n")
    monkeypatch.setattr(budget, "SETTINGS_FILE", settings)
    assert budget.current() == budget.Budget(150, 900)
    monkeypatch.setenv(budget.ENV_PASSES, "100")  # the env var wins over the file
    assert budget.current() == budget.Budget(100, 900)
    monkeypatch.setenv(budget.ENV_MB, "none")
    assert budget.current() == budget.Budget(100, None)
    spec = models.get_spec("dinov2-s14")
    shap = METHODS["kernel-shap"]
    with pytest.raises(budget.OverBudget, match="allows 100 passes per request: lower "
                                                "samples to 100 or less"):
        budget.check(shap, shap.spec_values({}), spec=spec)  # 200 samples by default
    monkeypatch.setenv(budget.ENV_PASSES, "200")
    budget.check(shap, shap.spec_values({}), spec=spec)
    monkeypatch.setenv(budget.ENV_PASSES, "lots")
    with pytest.raises(ValueError, match=budget.ENV_PASSES):
        budget.current()
    monkeypatch.delenv(budget.ENV_PASSES)
    settings.write_text("passes = -3\n")
    with pytest.raises(ValueError, match="passes in .*budget.toml must be a whole number"):
        budget.current()


def test_the_repository_settings_file_holds_the_defaults():
    import tomllib
    from pathlib import Path

    shipped = Path(__file__).resolve().parents[1] / ".streamlit" / "budget.toml"
    settings = tomllib.loads(shipped.read_text())
    assert (settings["passes"], settings["megabytes"]) == (400, 1536)
    # the rest is the budget over time (tests/test_fair_share.py)
    assert set(settings) - {"passes", "megabytes"} == {
        "passes_per_minute", "cpu_seconds_per_minute", "wait_seconds"}


# --- the CLI ----------------------------------------------------------------------------------

def cli_args(case: str, out) -> list[str]:
    method = LINKS[case]["cmp_methods_vit"]
    args = ["explain", "--model", "dinov2-s14", "--image", "sample:coffee", "--method", method,
            "--out", str(out)]
    for item in CLI_SETS[case]:
        args += ["--set", item]
    return args


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err[len("error: "):].strip()


@pytest.mark.parametrize("case", ["shap-passes", "ig-512"])
def test_cli_refuses_too_many_passes_before_a_model_loads(case, tmp_path, monkeypatch, capsys):
    def refuse(*_args, **_kwargs):
        raise AssertionError("a model was loaded before the budget refused the request")
    monkeypatch.setattr(common, "load_model", refuse)
    out = tmp_path / "never.npz"
    assert main(cli_args(case, out)) == 2
    line = one_error_line(capsys)
    assert one_sentence(line) and all(words in line for words in NAMED[case]), line
    assert not out.exists()


def test_cli_refuses_too_much_memory_after_the_load_before_any_pass(tmp_path, method_passes,
                                                                    capsys):
    model = get_model("dinov2-s14")

    def refuse(*_args):
        raise AssertionError("the model ran before the budget refused the request")
    handle = model.module.register_forward_pre_hook(refuse)
    try:
        assert main(cli_args("ig-memory", tmp_path / "never.npz")) == 2
    finally:
        handle.remove()
    line = one_error_line(capsys)
    assert one_sentence(line) and all(words in line for words in NAMED["ig-memory"]), line
    fitting = int(line.split("lower batch to ")[1].split()[0])  # the advice is exact
    ig = METHODS["integrated-gradients"]
    assert budget.fits(ig, ig.resolve(model, {"steps": 64, "batch": fitting}), model)
    assert not budget.fits(ig, ig.resolve(model, {"steps": 64, "batch": fitting + 1}), model)
    assert method_passes == []


@pytest.fixture
def loads_tiny(monkeypatch):
    with one_torch_thread():
        pair = {"vit": tiny_vit("test-tiny-budget-cli", knn=False), "cnn": tiny_cnn()}
        monkeypatch.setattr(common, "load_model",
                            lambda args: pair[models.get_spec(args.model).family])
        yield pair


def test_a_bad_budget_setting_is_one_line_and_exit_2(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(budget.ENV_PASSES, "lots")
    assert main(cli_args("shap-passes", tmp_path / "x.npz")) == 2
    assert budget.ENV_PASSES in one_error_line(capsys)
    monkeypatch.delenv(budget.ENV_PASSES)
    broken = tmp_path / "budget.toml"
    broken.write_text("passes = = 3\n")
    monkeypatch.setattr(budget, "SETTINGS_FILE", broken)
    assert main(cli_args("shap-passes", tmp_path / "x.npz")) == 2
    assert "budget.toml cannot be read" in one_error_line(capsys)


def test_cli_budget_flag_sets_and_lifts_the_limit(tmp_path, loads_tiny, method_passes, capsys):
    """Integrated Gradients with steps=2 asks 6 passes (2 path points forward and back,
    the input and the reference forward): --budget 5 refuses it, --budget 6 and --budget
    none run it, and so do `metrics` (its curve of 3 steps adds 4 passes)."""
    image = tmp_path / "image.png"
    images(1)[0].save(image)
    base = ["--model", "efficientnet-lite0", "--image", str(image), "--method",
            "integrated-gradients", "--set", "steps=2", "--set", "batch=2"]
    out = tmp_path / "ig.npz"
    assert main(["explain", *base, "--out", str(out), "--budget", "5"]) == 2
    line = one_error_line(capsys)
    assert "needs 6 passes" in line and "allows 5 passes" in line and one_sentence(line)
    assert method_passes == [] and not out.exists()
    assert main(["explain", *base, "--out", str(out), "--budget", "6"]) == 0
    assert sum(method_passes) == 4 and out.exists()  # images forward; 2 of them went back
    del method_passes[:]
    out.unlink()
    assert main(["explain", *base, "--out", str(out), "--budget", "none"]) == 0, capsys.readouterr()
    assert out.exists()
    assert budget.current() == budget.DEFAULT  # the flag held for its command only
    metrics = ["metrics", *base, "--metric", "deletion", "--steps", "3"]
    assert main([*metrics, "--budget", "9"]) == 2
    line = one_error_line(capsys)
    assert "needs 10 passes" in line and "lower --steps to 2 or less" in line
    assert main([*metrics, "--budget", "10"]) == 0
    assert main([*metrics, "--budget", "none"]) == 0
    assert main([*metrics, "--budget", "zero"]) == 2
    assert "--budget" in one_error_line(capsys)


# --- the app ----------------------------------------------------------------------------------

def test_page_7_refuses_the_links_before_any_pass(method_passes, monkeypatch):
    """Each link is refused with one sentence in an error box (no traceback), before the
    method's first forward; the option widgets, drawn again at their defaults, are clipped
    to what fits."""
    app = open_app("7_comparison.py", timeout=600, image_choice="coffee",
                   cmp_methods_vit=["attention"])
    assert not app.exception, app.exception
    for case, params in LINKS.items():
        for key, value in params.items():
            app.query_params[key] = value
        app.run()
        assert not app.exception, app.exception
        errors = [e.value for e in app.error]
        assert len(errors) == 1 and one_sentence(errors[0]), errors
        assert all(words in errors[0] for words in NAMED[case]), errors[0]
        assert method_passes == [], case
        assert params["cmp_methods_vit"] not in text_tables(app)[0].columns  # it did not run
    app.run()  # the refused options went back to their defaults: the widgets fit the budget
    assert not app.error
    samples = app.number_input(key="cmp_opt_vit_kernel-shap_samples")
    assert samples.value == 200 and samples.max == 400  # 5000 in the declaration
    batch = app.number_input(key="cmp_opt_vit_kernel-shap_batch")
    model = get_model("dinov2-s14")  # 200 samples, so up to 200 per pass: memory clips it
    per_image = budget.bytes_per_image(model, graded=False)
    assert batch.value == 32 and batch.max == min(200, int(1536 * 2**20 // per_image)) < 512
    assert sum(method_passes) == 200  # that run ran KernelSHAP at its defaults: 200 samples
    del method_passes[:]
    monkeypatch.setenv(budget.ENV_PASSES, "30")  # the server's budget, from the env var
    show(app, "cmp_view", "faith")
    assert app.number_input(key="cmp_steps").max == 29  # a curve: steps + 1 passes
    errors = [e.value for e in app.error]  # KernelSHAP's default 200 samples no longer fit
    assert len(errors) == 1 and "allows 30 passes per request: lower samples to 30" in errors[0]
    assert method_passes == []
