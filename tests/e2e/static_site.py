"""A static file server on loopback for the exported site (`export-site`), as a static host
or CDN serves it: plain files, with or without the cross-origin isolation headers that let
the model run on several threads (docs/hosting.md). Used by the e2e tests and the bench."""

from __future__ import annotations

import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ISOLATION = {"Cross-Origin-Opener-Policy": "same-origin",
             "Cross-Origin-Embedder-Policy": "require-corp"}


class _Handler(SimpleHTTPRequestHandler):
    isolated = True
    extensions_map = {**SimpleHTTPRequestHandler.extensions_map, ".wasm": "application/wasm",
                      ".mjs": "text/javascript", ".js": "text/javascript"}

    def end_headers(self) -> None:
        if self.isolated:
            for name, value in ISOLATION.items():
                self.send_header(name, value)
        self.send_header("Cache-Control", "no-cache" if self.path.endswith((".html", "/"))
                         else "public, max-age=31536000, immutable")
        super().end_headers()

    def log_message(self, *args) -> None:  # quiet
        pass


class StaticSite:
    """`with StaticSite(folder) as site:` serves folder at site.url (a free loopback port)."""

    def __init__(self, folder: Path, isolated: bool = True):
        handler = type("Handler", (_Handler,), {"isolated": isolated})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0),
                                          functools.partial(handler, directory=str(folder)))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "StaticSite":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
