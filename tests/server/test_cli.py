"""The ``rivulet`` command line as users run it."""

from __future__ import annotations

import subprocess
import sys


def test_help_lists_playground() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rivulet", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0
    assert "playground" in out.stdout


def test_banner_tells_how_to_connect(server) -> None:  # type: ignore[no-untyped-def]
    banner = server.output()
    assert f"psql -h 127.0.0.1 -p {server.port} -U root -d dev" in banner
    assert "in memory" in banner
