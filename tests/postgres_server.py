"""A throwaway PostgreSQL server for the class-mode tests: Debian's `postgresql` package's
`initdb` and `pg_ctl`, a cluster in a temporary folder, listening on a free loopback port
(no Unix socket), trust authentication for loopback only, removed afterwards. As root (CI
here), the server runs as the package's `postgres` user, as PostgreSQL requires."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest


def _bin(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(
        f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if not found:
        pytest.fail("PostgreSQL is missing: run `make system-deps` (Debian's postgresql).")
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _as_server_user(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@contextlib.contextmanager
def postgres_server():
    """Yields a SQLAlchemy URL of an empty database `classes` on a fresh server."""
    folder = Path(tempfile.mkdtemp(prefix="vit-lens-pg-"))
    data, port = folder / "data", _free_port()
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    run = lambda command: subprocess.run(_as_server_user(command), check=True,  # noqa: E731
                                         capture_output=True, text=True, cwd=folder)
    try:
        run([_bin("initdb"), "-D", str(data), "-U", "vitlens", "--auth=trust", "-E", "UTF8",
             "--no-instructions"])
        run([_bin("pg_ctl"), "-D", str(data), "-l", str(folder / "server.log"), "-w",
             "-t", "60", "-o", f"-p {port} -c listen_addresses=127.0.0.1 "
             "-c unix_socket_directories=''", "start"])
        run([_bin("createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "vitlens", "classes"])
        yield f"postgresql+psycopg://vitlens@127.0.0.1:{port}/classes"
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run(_as_server_user([_bin("pg_ctl"), "-D", str(data), "-m", "fast",
                                            "-w", "stop"]), capture_output=True, cwd=folder)
        deadline = time.monotonic() + 10
        while (data / "postmaster.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        shutil.rmtree(folder, ignore_errors=True)
