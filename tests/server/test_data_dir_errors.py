"""``rivulet playground --data-dir DIR`` on a directory it must not use: a one-line error
naming the problem, a hint, exit status 1, no traceback, and the store left untouched."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from conftest import free_port, start_server

import rivulet
from rivulet.storage.state_store import DB_FILE_NAME

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def good_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("good") / "db"
    con = rivulet.connect(path)
    con.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    con.execute("INSERT INTO t SELECT i, i FROM generate_series(1, 500) g(i)")
    con.execute("CREATE MATERIALIZED VIEW m AS SELECT count(*) AS n FROM t")
    con.close()
    return path


@pytest.fixture
def store(good_store: Path, tmp_path: Path) -> Path:
    path = tmp_path / "db"
    shutil.copytree(good_store, path)
    return path


def playground(data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable, "-m", "rivulet", "playground", "--data-dir", str(data_dir),
            "--port", str(free_port()), "--admin-port", "0",
        ],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip


def assert_refused(data_dir: Path, *words: str) -> str:
    before = (data_dir / DB_FILE_NAME).read_bytes()
    out = playground(data_dir)
    assert out.returncode == 1, out
    assert "Traceback" not in out.stderr + out.stdout, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 2, out.stderr
    error, hint = lines
    assert error.startswith("error: "), out.stderr
    assert hint.startswith("hint: "), out.stderr
    for word in words:
        assert word in error, out.stderr
    assert (data_dir / DB_FILE_NAME).read_bytes() == before
    return out.stderr


def test_a_newer_format_is_refused(store: Path) -> None:
    con = duckdb.connect(str(store / DB_FILE_NAME))
    con.execute("UPDATE meta.store_format SET format_version = 99")
    con.close()
    stderr = assert_refused(store, "newer Rivulet", str(store))
    assert "Upgrade Rivulet" in stderr


def test_a_truncated_store_is_refused(store: Path) -> None:
    db = store / DB_FILE_NAME
    os.truncate(db, db.stat().st_size // 2)
    stderr = assert_refused(store, "damaged", "truncated", str(db))
    assert "backup" in stderr


def test_a_corrupted_store_is_refused(store: Path) -> None:
    db = store / DB_FILE_NAME
    with open(db, "r+b") as f:
        f.seek(4096 + 16)
        f.write(b"\xff" * 32)
    assert_refused(store, "damaged", str(db))


def test_a_store_in_use_by_another_server_is_refused(store: Path, tmp_path: Path) -> None:
    first = start_server(tmp_path / "first", data_dir=store)
    try:
        out = playground(store)
        assert out.returncode == 1, out
        assert "Traceback" not in out.stderr
        assert f"in use by another Rivulet process (pid {first.proc.pid})" in out.stderr
        assert "hint: Stop the other process" in out.stderr
        # The running server is unaffected.
        with first.connect() as c:
            assert c.execute("SELECT n FROM m").fetchone() == (500,)
    finally:
        assert first.stop() == 0
    # Once it stopped, the directory opens again with its data.
    second = start_server(tmp_path / "second", data_dir=store)
    try:
        with second.connect() as c:
            assert c.execute("SELECT count(*) FROM t").fetchone() == (500,)
    finally:
        second.stop()
