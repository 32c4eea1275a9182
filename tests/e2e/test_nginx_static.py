"""nginx serves the static files from disk: the recipe (deploy/nginx/vit-lens.conf, ports
and paths filled in as `make nginx-conf` does, Streamlit's bundle a copy precompressed as
`make nginx-gzip` does) in front of two replica ports where nothing listens - stopped
replicas. Streamlit's bundle and the app's app/static/ still arrive, gzipped, with the
cache headers the recipe promises; what needs a replica gets 502."""

from __future__ import annotations

import gzip
import re
import time

import pytest
from e2e_helpers import free_port
from proxy_helpers import PREFIX, get, nginx_in_front, precompressed_bundle

from dashboard.assets import COMPONENT, STATIC, folder_version, module_order
from dashboard.nginx_conf import RECIPE as NGINX_RECIPE

IMMUTABLE = "public, max-age=31536000, immutable"


class StoppedReplica:
    """A replica's port with no server on it."""

    def __init__(self) -> None:
        self.port = free_port()


@pytest.fixture(scope="module")
def bundle():
    with precompressed_bundle() as bundle:
        yield bundle


@pytest.fixture(scope="module")
def proxy(bundle):
    with nginx_in_front([StoppedReplica(), StoppedReplica()], log_name="static-nginx",
                        bundle=bundle) as proxy:
        yield proxy


def entry_script() -> str:
    """The script index.html loads first (`./static/js/index.<hash>.js`), read from disk."""
    from dashboard.nginx_conf import streamlit_bundle

    index = (streamlit_bundle().parent / "index.html").read_text()
    return re.search(r'<script type="module"[^>]* src="\./static/(js/[^"]+\.js)"', index)[1]


def gzipped_get(port: int, path: str):
    return get(port, path, headers={"Accept-Encoding": "gzip"})


def test_streamlit_bundle_arrives_without_a_replica_gzipped_and_immutable(proxy, bundle):
    response, _ = get(proxy.port, f"/{PREFIX}/_stcore/health")
    assert response.status == 502  # the replicas really are gone

    script = entry_script()
    on_disk = (bundle / script).read_bytes()
    response, body = gzipped_get(proxy.port, f"/{PREFIX}/static/{script}")
    assert response.status == 200
    assert response.getheader("Content-Encoding") == "gzip"
    assert response.getheader("Cache-Control") == IMMUTABLE
    assert "javascript" in response.getheader("Content-Type")
    assert gzip.decompress(body) == on_disk
    assert len(body) < len(on_disk) / 2  # minified JS still compresses 3-5x
    # sent as precompressed (gzip_static), not compressed again per request
    assert body == (bundle / f"{script}.gz").read_bytes()

    # a client that does not ask for gzip gets the file as it is
    response, body = get(proxy.port, f"/{PREFIX}/static/{script}")
    assert response.getheader("Content-Encoding") is None and body == on_disk

    css = next((bundle / "css").glob("*.css"))
    response, body = gzipped_get(proxy.port, f"/{PREFIX}/static/css/{css.name}")
    assert response.status == 200 and response.getheader("Content-Type").startswith("text/css")
    assert gzip.decompress(body) == css.read_bytes()

    font = next((bundle / "media").glob("*.woff2"))
    response, body = gzipped_get(proxy.port, f"/{PREFIX}/static/media/{font.name}")
    assert response.status == 200 and response.getheader("Cache-Control") == IMMUTABLE
    assert response.getheader("Content-Encoding") is None  # woff2 is compressed already
    assert body == font.read_bytes()

    response, _ = get(proxy.port, f"/{PREFIX}/static/js/no-such-file.js")
    assert response.status == 404


def test_a_file_without_its_gz_is_compressed_per_request(proxy, bundle):
    """After `pip install -U streamlit` and before `make nginx-gzip`: still gzipped."""
    script = sorted((bundle / "js").glob("*.js"), key=lambda p: p.stat().st_size)[-1]
    (bundle / "js" / f"{script.name}.gz").unlink()
    response, body = gzipped_get(proxy.port, f"/{PREFIX}/static/js/{script.name}")
    assert response.status == 200 and response.getheader("Content-Encoding") == "gzip"
    assert gzip.decompress(body) == script.read_bytes()


def test_every_page_address_gets_index_html_without_a_replica(proxy, bundle):
    """Streamlit answers /vit-lens/ and /vit-lens/<page> with its index.html as it is;
    nginx does the same (no-cache: the next install may change it) and sets the browser's
    id there, on the first request of a visit."""
    index = (bundle.parent / "index.html").read_bytes()
    for path in (f"/{PREFIX}/", f"/{PREFIX}/vit_explainer"):
        response, body = get(proxy.port, path + "?image_choice=Cup%20of%20coffee")
        assert response.status == 200 and body == index
        assert response.getheader("Cache-Control") == "no-cache"
        assert response.getheader("Content-Type").startswith("text/html")
        cookies = response.msg.get_all("Set-Cookie") or []
        assert any(c.startswith("vit_lens_uid=") for c in cookies), cookies
    # a path with more segments is the replica's (here: gone)
    response, _ = get(proxy.port, f"/{PREFIX}/vit_explainer/_stcore/health")
    assert response.status == 502


GZIP_MIN_LENGTH = int(re.search(r"gzip_min_length (\d+);", NGINX_RECIPE.read_text())[1])


def explainer_module_url(name: str) -> str:
    """Where the Explainer's loader fetches a module: app/static/explainer/component/<name>
    ?v=<hash of the whole folder>."""
    return f"app/static/{COMPONENT}/{name}?v={folder_version(COMPONENT)}"


def test_app_static_arrives_without_a_replica_immutable_when_versioned(proxy):
    for name in module_order(COMPONENT):  # every module the loader fetches
        url = explainer_module_url(name)
        on_disk = (STATIC / COMPONENT / name).read_bytes()
        response, body = gzipped_get(proxy.port, f"/{PREFIX}/{url}")
        assert response.status == 200, name
        assert response.getheader("Cache-Control") == IMMUTABLE, name
        assert "javascript" in response.getheader("Content-Type"), name  # an ES module needs it
        assert response.getheader("X-Content-Type-Options") == "nosniff", name
        # compressed from the recipe's gzip_min_length on (1024 bytes: dom.js and metrics.js are under it)
        zipped = len(on_disk) >= GZIP_MIN_LENGTH
        assert (response.getheader("Content-Encoding") == "gzip") == zipped, (name, len(on_disk))
        assert (gzip.decompress(body) if zipped else body) == on_disk, name

    # without its version the same file may change: the browser asks again each time
    response, body = gzipped_get(proxy.port, f"/{PREFIX}/{url.split('?')[0]}")
    assert response.status == 200 and response.getheader("Cache-Control") == "no-cache"
    assert gzip.decompress(body) == on_disk


def test_the_access_log_names_files_without_query_strings(proxy, bundle):
    time.sleep(0.3)  # a line is written after its response: the earlier tests' first
    skip = len(proxy.access_log.read_text().splitlines())
    url = explainer_module_url("main.js")
    get(proxy.port, f"/{PREFIX}/{url}")
    get(proxy.port, f"/{PREFIX}/_stcore/upload_file/0123456789abcdef/fedcba9876543210")
    get(proxy.port, f"/{PREFIX}/media/0a1b2c3d4e5f.png?title=secret")
    get(proxy.port, f"/{PREFIX}/comparison?image_choice=Cup%20of%20coffee")
    font = next((bundle / "media").glob("*.woff2")).name
    get(proxy.port, f"/{PREFIX}/static/media/{font}")
    expected = [f"/{PREFIX}/app/static/{COMPONENT}/main.js",
                f"/{PREFIX}/_stcore/upload_file/-", f"/{PREFIX}/media/-",
                f"/{PREFIX}/comparison", f"/{PREFIX}/static/media/{font}"]
    for _ in range(50):  # each line is written when its response ends: under load, later
        paths = [path for _, path, _ in proxy.upstreams_in_log(skip)]
        if len(paths) >= len(expected):
            break
        time.sleep(0.1)
    # in any order: a CI run under load logged the first file after the upload
    assert sorted(paths) == sorted(expected)
    log = proxy.access_log.read_text()
    assert "?" not in log and "0123456789abcdef" not in log and "0a1b2c3d" not in log
