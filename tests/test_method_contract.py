"""The method contract, checked for every registered method (methods added later included):
its declared options round-trip through the CLI (`explain --set key=value`), a bad value of
each option is refused with exit status 2 and one line before any model loads (or, for a
bound only the model knows, before any pass through it), and its result names its
convention in `meta`. Tiny random-weight models stand in for the bundled ones, so every
method runs in seconds."""

from __future__ import annotations

import json
from contextlib import contextmanager

import numpy as np
import pytest
from single_thread import one_torch_thread
from tiny_models import images, tiny_cnn, tiny_vit

from xai_core import models
from xai_core.cli import common
from xai_core.cli.main import main
from xai_core.methods import METHODS, Method
from xai_core.infra.errors import OptionError
from xai_core.methods.base import FromModel, Option

MODEL_IDS = {"vit": "dinov2-s14", "cnn": "efficientnet-lite0"}  # what --model names


@pytest.fixture(scope="module")
def tiny_pair():
    with one_torch_thread():
        yield {"vit": tiny_vit("test-tiny-vit", knn=False), "cnn": tiny_cnn()}


@pytest.fixture(scope="module")
def image_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("contract") / "image.png"
    images(1)[0].save(path)
    return str(path)


def family_of(method: Method) -> str:
    return "vit" if method.fits("vit") else "cnn"


def explain_args(method: Method, image_file: str, out, sets=()) -> list[str]:
    args = ["explain", "--model", MODEL_IDS[family_of(method)], "--image", image_file,
            "--method", method.name, "--out", str(out)]
    for key, value in sets:
        args += ["--set", f"{key}={value}"]
    return args


@pytest.fixture
def no_model_may_load(monkeypatch):
    """Any attempt to load a model fails the test (the CLI catches no AssertionError)."""
    def refuse(*_args, **_kwargs):
        raise AssertionError("a model was loaded before a bad option was refused")
    monkeypatch.setattr(common, "load_model", refuse)
    monkeypatch.setattr(models, "get_model", refuse)


@pytest.fixture
def loads_tiny(monkeypatch, tiny_pair):
    """The CLI's loader hands out the tiny model of the asked family."""
    monkeypatch.setattr(common, "load_model",
                        lambda args: tiny_pair[models.get_spec(args.model).family])
    return tiny_pair


def bad_values(option: Option) -> list:
    """Values the declaration alone refuses: a word that is no number, no choice and no name,
    and one step past every fixed bound."""
    values = ["?!"]
    if option.kind != "choice":
        step = 1 if option.kind == "int" else 0.5
        if not isinstance(option.low, FromModel):
            values.append(option.low - step)
        if not isinstance(option.high, FromModel):
            values.append(option.high + step)
    return values


def other_values(option: Option, model) -> list:
    """Valid values of one option other than its default, on this model, nearest first."""
    limits = option.limits(model)
    default = limits["default"]
    if option.kind == "choice":
        return [choice for choice in limits["choices"] if choice != default]
    low, high = limits["low"], limits["high"]
    if option.word is not None and default == option.word:
        return [low, high]
    if option.kind == "int":
        candidates = [default + 1, default - 1, low, high]
    else:
        candidates = [(default + high) / 2, (default + low) / 2]
    return [v for v in dict.fromkeys(candidates) if low <= v <= high and v != default]


def changed_options(method: Method, option: Option, model) -> list[tuple]:
    """`option` away from its default - alone when the method accepts that, else together
    with one other option (occlusion's stride needs a window at least as large)."""
    def accepted(sets) -> bool:
        try:
            method.resolve(model, dict(sets))
        except OptionError:
            return False
        return True
    for value in other_values(option, model):
        if accepted([(option.name, value)]):
            return [(option.name, value)]
        for other in method.options:
            for partner in other_values(other, model) if other is not option else []:
                if accepted([(option.name, value), (other.name, partner)]):
                    return [(option.name, value), (other.name, partner)]
    raise AssertionError(f"{method.name}: option {option.name} cannot leave its default")


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("name", sorted(METHODS))
def test_bad_option_values_are_refused_before_a_model_loads(name, image_file, tmp_path,
                                                            no_model_may_load, capsys):
    method = METHODS[name]
    out = tmp_path / "never.npz"
    cases = [(option.name, value) for option in method.options for value in bad_values(option)]
    cases.append(("no_such_option", "1"))
    for key, value in cases:
        assert main(explain_args(method, image_file, out, [(key, value)])) == 2, (key, value)
        assert key in one_error_line(capsys)
    assert not out.exists()


def test_every_method_declares_its_theory_convention_and_options():
    assert {"attention", "rollout", "gae", "daam", "gradcam", "vit-gradcam"} <= set(METHODS)
    for method in METHODS.values():
        described = method.describe()
        assert all(described["theory"].values()) and len(described["theory"]) == 6
        assert described["convention"] and described["summary"]
        assert [o["name"] for o in described["options"]] == [o.name for o in method.options]
        for option in described["options"]:
            assert option["help"] and option["default"] is not None


def test_methods_command_lists_every_method_with_options_and_convention(capsys):
    assert main(["methods", "--json"]) == 0
    listed = {entry["name"]: entry for entry in json.loads(capsys.readouterr().out)["methods"]}
    assert set(listed) == set(METHODS)
    rollout = listed["rollout"]
    options = {o["name"]: o for o in rollout["options"]}
    assert options["fusion"]["choices"] == ["mean", "max", "min"]
    assert options["start"]["default"] == "auto" and options["start"]["or"] == "auto"
    assert options["end"]["high"] == "the last self-attention block (counted among them)"
    assert "compute_rollout_attention" in rollout["convention"]


@pytest.mark.parametrize("name", sorted(METHODS))
def test_options_round_trip_through_the_cli_and_meta_names_the_convention(
        name, image_file, tmp_path, loads_tiny, capsys):
    method = METHODS[name]
    model = loads_tiny[family_of(method)]
    image = images(1)[0]
    runs = [[]] + [changed_options(method, option, model) for option in method.options]
    for sets in runs:
        out = tmp_path / f"{name}.npz"
        assert main(explain_args(method, image_file, out, sets)) == 0, capsys.readouterr().err
        saved = np.load(out)
        meta = json.loads(str(saved["meta"]))
        assert meta["method"] == name and set(meta["options"]) == {o.name for o in
                                                                    method.options}
        for key, value in sets:
            assert meta["options"][key] == value and type(meta["options"][key]) is type(value)
        assert meta["convention"] == method.convention_for(meta["options"]) != ""
        direct = method(model, image, target=meta["target"], **dict(sets))
        np.testing.assert_array_equal(saved["map"], direct.map)


@contextmanager
def no_pass_through(model):
    """Any forward pass through `model` fails the test while the block runs."""
    def refuse(*_args):
        raise AssertionError("the model ran before a bad option was refused")
    handle = model.module.register_forward_pre_hook(refuse)
    try:
        yield
    finally:
        handle.remove()


def model_bound_values(option: Option, model) -> list:
    """Values just past the bounds and outside the choices that only the model knows."""
    values = []
    if isinstance(option.low, FromModel):
        values.append(option.limits(model)["low"] - 1)
    if isinstance(option.high, FromModel):
        values.append(option.limits(model)["high"] + 1)
    if isinstance(option.choices, FromModel):
        values.append("no.such.layer")
    return values


def read_from_model(option: Option) -> bool:
    return any(isinstance(part, FromModel) for part in (option.low, option.high, option.choices))


@pytest.mark.parametrize("name", sorted(n for n, m in METHODS.items()
                                        if any(map(read_from_model, m.options))))
def test_bounds_the_model_sets_are_checked_before_any_pass(name, image_file, tmp_path,
                                                           loads_tiny, capsys):
    """A block past the model's last one, a layer it does not have: refused right after the
    model loads, before a single forward pass."""
    method = METHODS[name]
    model = loads_tiny[family_of(method)]
    with no_pass_through(model):
        for option in method.options:
            for bad in model_bound_values(option, model):
                assert main(explain_args(method, image_file, tmp_path / "x.npz",
                                         [(option.name, bad)])) == 2, (option.name, bad)
                assert option.name in one_error_line(capsys)


@pytest.mark.parametrize("name, sets, words", [
    ("rollout", [("start", 2), ("end", 1)], "before start"),
    ("distance", [("prefix", "centre"), ("renormalise", "yes")], "prefix=exclude"),
    ("occlusion", [("window", 1), ("stride", 2)], "skip cells"),
])
def test_rules_between_options_are_checked_before_any_pass(name, sets, words, image_file,
                                                           tmp_path, loads_tiny, capsys):
    method = METHODS[name]
    with no_pass_through(loads_tiny[family_of(method)]):
        assert main(explain_args(method, image_file, tmp_path / "x.npz", sets)) == 2
        assert words in one_error_line(capsys)
