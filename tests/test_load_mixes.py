"""The load bench's upload and export clients (bench/load_client.py, bench/load_mixes.py) ask
for what a browser asks for: the addresses Streamlit hands out ("/_stcore/upload_file/...",
"/media/...") under the app's base path, where the nginx recipe's locations for them are,
and a press of a button inside a fragment ends at that fragment run's own finished status."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from bench.load_client import server_path
from bench.load_mixes import fragment_run_done
from dashboard.page_visit import FINISHED, element_kinds

RECIPE = Path(__file__).resolve().parent.parent / "deploy" / "nginx" / "vit-lens.conf"
BASE = "http://127.0.0.1:8080/vit-lens/"


def recipe_locations() -> list[str]:
    return re.findall(r"^\s*location\s+(/[^\s{]+)\s*\{", RECIPE.read_text(), re.M)


@pytest.mark.parametrize("given, location", [
    ("/_stcore/upload_file/a1b2/c3d4", "/vit-lens/_stcore/upload_file/"),
    ("/media/0123abcd.html", "/vit-lens/media/"),
    ("media/0123abcd.html", "/vit-lens/media/"),
    ("http://127.0.0.1:8080/vit-lens/media/0123abcd.html", "/vit-lens/media/"),
])
def test_an_address_the_server_gives_is_asked_under_the_base_path(given, location):
    assert location in recipe_locations()  # the recipe's own location for it
    path = server_path(BASE, given)
    assert path.startswith(location)
    assert path.endswith(given.rsplit("/", 2)[-1]) and "//" not in path


def test_without_a_base_path_the_address_is_asked_as_given():
    assert server_path("http://127.0.0.1:8501/", "/media/x.png") == "/media/x.png"


def finished(status) -> ForwardMsg:
    message = ForwardMsg()
    message.script_finished = status
    return message


def test_a_fragment_run_ends_at_its_own_status():
    fragment = finished(FINISHED.FINISHED_FRAGMENT_RUN_SUCCESSFULLY)
    # the full run's test does not see it end (the client waited 600 s for it)
    assert element_kinds([fragment.SerializeToString()])[2] is False
    assert fragment_run_done(fragment)
    assert fragment_run_done(finished(FINISHED.FINISHED_SUCCESSFULLY))
    assert not fragment_run_done(finished(FINISHED.FINISHED_EARLY_FOR_RERUN))
    assert not fragment_run_done(ForwardMsg())
