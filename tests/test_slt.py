"""Every ``tests/slt/**/*.slt`` file, on every driver: the embedded DB-API and a real
server over pgwire (psycopg). Each file runs on a fresh instance."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slt.runner import EmbeddedDriver, PsycopgDriver, Runner, slt_files

SLT_DIR = Path(__file__).parent / "slt"
FILES = slt_files(SLT_DIR)
REPO = Path(__file__).resolve().parent.parent
# Set to 1 to make a server that does not start an error instead of a skip.
REQUIRE_SERVER = os.environ.get("RIVULET_REQUIRE_PGWIRE") == "1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _skip_or_fail(reason: str) -> None:
    if REQUIRE_SERVER:
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pgwire_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """``python -m rivulet playground --port N`` as a subprocess, for the whole session."""
    try:
        importlib.import_module("rivulet.server")
        has_main = importlib.util.find_spec("rivulet.__main__") is not None
    except ImportError as exc:
        _skip_or_fail(f"pgwire server not available: rivulet.server cannot be imported ({exc})")
    if not has_main:
        _skip_or_fail(
            "pgwire server not available yet: `python -m rivulet` does not exist"
            " (rivulet/__main__.py)"
        )
    port = _free_port()
    log = open(tmp_path_factory.mktemp("pgwire") / "server.log", "w+b")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "rivulet", "playground", "--port", str(port)],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    try:
        while True:
            if proc.poll() is not None:
                log.seek(0)
                tail = log.read().decode(errors="replace")[-2000:]
                _skip_or_fail(
                    f"pgwire server did not start (`python -m rivulet playground --port {port}`"
                    f" exited with {proc.returncode}):\n{tail}"
                )
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    _skip_or_fail(f"pgwire server did not listen on port {port} within 30 s")
                time.sleep(0.1)
        yield ("127.0.0.1", port)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


@pytest.fixture(params=["embedded", "pgwire"])
def driver(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    if request.param == "embedded":
        return EmbeddedDriver()
    host, port = request.getfixturevalue("pgwire_server")
    return PsycopgDriver(host, port)


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(SLT_DIR)) for p in FILES])
def test_slt(path: Path, driver) -> None:  # type: ignore[no-untyped-def]
    Runner(driver).run_file(path)
