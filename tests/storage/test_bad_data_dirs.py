"""Data directories Rivulet must not use: written by a newer format, truncated or
corrupted, missing committed epochs, not a Rivulet store, or held by another running
process. Each gets a clear error from ``rivulet.connect`` (SQLSTATE, a message naming
the problem, a hint saying what to do), and the files are left byte for byte as they
were: never a silent reinitialisation that drops data."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

import rivulet
from rivulet.storage.state_store import DB_FILE_NAME, EPOCH_FILE_NAME, open_error

REPO = Path(__file__).resolve().parents[2]
ROWS = 3000
# The DuckDB file: a main header and two database headers, then blocks.
HEADERS = 3 * 4096


def build_store(path: Path) -> None:
    con = rivulet.connect(path)
    con.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    con.execute(f"INSERT INTO t SELECT i, i % 10 FROM generate_series(1, {ROWS}) g(i)")
    con.execute("CREATE MATERIALIZED VIEW m AS SELECT v, count(*) AS n FROM t GROUP BY v")
    con.close()


@pytest.fixture(scope="module")
def good_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("good") / "db"
    build_store(path)
    return path


@pytest.fixture
def store(good_store: Path, tmp_path: Path) -> Path:
    """A copy of a good store the test may damage."""
    path = tmp_path / "db"
    shutil.copytree(good_store, path)
    return path


def files(path: Path) -> dict[str, bytes]:
    """Every file of a data directory but the lock file (which only holds a pid)."""
    return {f.name: f.read_bytes() for f in sorted(path.iterdir()) if f.name != "LOCK"}


def refused(path: Path, sqlstate: str, *words: str) -> rivulet.Error:
    """Opening ``path`` fails with ``sqlstate`` and a hint, and changes no file."""
    before = files(path)
    with pytest.raises(rivulet.Error) as info:
        rivulet.connect(path)
    error = info.value
    assert error.sqlstate == sqlstate, error
    for word in words:
        assert word in error.message, error
    assert error.hint, error
    assert files(path) == before, "a refused store was changed"
    # Refusing released the directory: the next attempt is refused the same way.
    with pytest.raises(rivulet.Error) as again:
        rivulet.connect(path)
    assert again.value.sqlstate == sqlstate
    return error


def assert_intact(path: Path) -> None:
    con = rivulet.connect(path)
    try:
        assert con.execute("SELECT count(*), sum(v) FROM t").fetchone() == (
            ROWS,
            sum(i % 10 for i in range(1, ROWS + 1)),
        )
        assert con.execute("SELECT sum(n) FROM m").fetchone() == (ROWS,)
    finally:
        con.close()


def block_of(path: Path, table: str) -> int:
    """The first data block of a table in the store's DuckDB file."""
    con = duckdb.connect(str(path / DB_FILE_NAME), read_only=True)
    try:
        row = con.execute(
            "SELECT min(block_id) FROM pragma_storage_info(?) WHERE block_id >= 0", [table]
        ).fetchone()
        size = con.execute("SELECT block_size FROM pragma_database_size()").fetchone()
    finally:
        con.close()
    assert row and row[0] is not None and size
    return HEADERS + int(row[0]) * int(size[0])


def flip(path: Path, offset: int, length: int = 64) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        data = f.read(length)
        f.seek(offset)
        f.write(bytes(b ^ 0xFF for b in data))


def test_a_good_store_opens(store: Path) -> None:
    assert_intact(store)
    assert_intact(store)  # and again, after a clean close


def test_a_store_that_duckdb_shortened_or_left_a_partial_block_in_opens(tmp_path: Path) -> None:
    """Not damage: DuckDB cuts free blocks off the end of its file (its header still
    counts them), and a crash while it extends the file leaves a partial block after the
    used ones."""
    path = tmp_path / "db"
    build_store(path)
    for i in range(3):  # rewrites and drops free blocks; checkpoints shorten the file
        con = rivulet.connect(path)
        con.execute(f"CREATE TABLE x{i} AS SELECT * FROM t")
        con.execute("UPDATE t SET v = v + 10 WHERE id % 2 = 0")
        con.execute("UPDATE t SET v = v - 10 WHERE id % 2 = 0")
        con.execute(f"DROP TABLE x{i}")
        con.close()
    assert_intact(path)
    with open(path / DB_FILE_NAME, "ab") as f:
        f.write(os.urandom(5000))
    assert_intact(path)


# --------------------------------------------------------------------- newer format
def test_a_store_of_a_newer_format_is_refused(store: Path) -> None:
    con = duckdb.connect(str(store / DB_FILE_NAME))
    con.execute("UPDATE meta.store_format SET format_version = 99")
    con.close()
    error = refused(store, "F0000", "newer Rivulet", "format version 99")
    assert "Upgrade Rivulet" in (error.hint or "")


def test_a_newer_duckdb_storage_version_is_named() -> None:
    exc = duckdb.IOException(
        "IO Error: Trying to read a database file with version number 70, but we can only"
        " read versions between 64 and 69.\nThe database file was created with a newer"
        " version of DuckDB."
    )
    error = open_error("/data/rivulet.duckdb", exc)
    assert error.sqlstate == "F0000"
    assert "incompatible version of DuckDB" in error.message
    assert "\n" not in error.message and error.hint


# ----------------------------------------------------------- truncated, corrupted
def used_blocks(path: Path) -> tuple[int, int]:
    """(block size, blocks in use) of a store's DuckDB file."""
    con = duckdb.connect(str(path / DB_FILE_NAME), read_only=True)
    try:
        row = con.execute("SELECT block_size, used_blocks FROM pragma_database_size()").fetchone()
    finally:
        con.close()
    assert row is not None
    return int(row[0]), int(row[1])


@pytest.mark.parametrize(
    "keep",
    [0, 100, 4096, HEADERS, "half", "one block short"],
    ids=["empty", "100-bytes", "main-header-only", "headers-only", "half", "one-block-short"],
)
def test_a_truncated_store_is_refused(store: Path, keep: int | str) -> None:
    db = store / DB_FILE_NAME
    size = db.stat().st_size
    if keep == "half":
        keep = size // 2
    elif keep == "one block short":  # cut inside the last block the used ones need
        block, used = used_blocks(store)
        keep = HEADERS + (used - 1) * block + 4096
    assert isinstance(keep, int)
    os.truncate(db, keep)
    error = refused(store, "XX001", "damaged", str(db))
    assert "backup" in (error.hint or "")


@pytest.mark.parametrize(
    "damage",
    ["magic", "main-header", "database-header", "catalog-block", "garbage"],
)
def test_a_corrupted_store_is_refused(store: Path, damage: str) -> None:
    db = store / DB_FILE_NAME
    if damage == "magic":
        flip(db, 8, 4)
    elif damage == "main-header":
        flip(db, 100)
    elif damage == "database-header":
        flip(db, 4096 + 16)
    elif damage == "catalog-block":
        flip(db, block_of(store, "meta.objects") + 64)
    else:
        db.write_bytes(os.urandom(db.stat().st_size))
    refused(store, "XX001", "damaged", str(db))


def test_damaged_state_outside_the_catalog_is_reported_when_read(store: Path) -> None:
    """State is read lazily (by vnode, as queried), so a bad block of a table's state is
    found when it is read: the query gets XX001 with a hint; nothing is reset."""
    table_id = (
        duckdb.connect(str(store / DB_FILE_NAME), read_only=True)
        .execute("SELECT id FROM meta.objects WHERE name = 't'")
        .fetchone()
    )
    assert table_id is not None
    flip(store / DB_FILE_NAME, block_of(store, f"state.t{table_id[0]}") + 64)
    con = rivulet.connect(store)
    try:
        with pytest.raises(rivulet.Error) as info:
            con.execute("SELECT sum(v) FROM t").fetchall()
        assert info.value.sqlstate == "XX001"
        assert "damaged" in info.value.message and info.value.hint
        assert con.execute("SELECT sum(n) FROM m").fetchone() == (ROWS,)
    finally:
        con.close()


# --------------------------------------------------------- lost committed epochs
def _with_wal(tmp_path: Path) -> Path:
    """A store whose last epochs are only in DuckDB's WAL (its process was killed)."""
    path = tmp_path / "wal"
    code = (
        "import os, rivulet\n"
        f"con = rivulet.connect({str(path)!r})\n"
        "con.execute('CREATE TABLE t (id INT PRIMARY KEY, v INT)')\n"
        "for i in range(10):\n"
        "    con.execute(f'INSERT INTO t SELECT i, i FROM generate_series({i * 100},"
        " {i * 100 + 99}) g(i)')\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=120)
    assert (path / f"{DB_FILE_NAME}.wal").exists()
    return path


def test_a_store_whose_wal_lost_committed_epochs_is_refused(tmp_path: Path) -> None:
    """DuckDB replays a WAL that was cut short or overwritten as far as it can and opens
    what is left: without Rivulet's epoch file, that would pass for a smaller (or new,
    empty) store."""
    path = _with_wal(tmp_path)
    damages: dict[str, Callable[[Path], object]] = {
        "cut": lambda wal: os.truncate(wal, wal.stat().st_size // 3),
        "overwritten": lambda wal: wal.write_bytes(b"\0" * wal.stat().st_size),
    }
    for name, damage in damages.items():
        copy = tmp_path / name
        shutil.copytree(path, copy)
        damage(copy / f"{DB_FILE_NAME}.wal")
        error = refused(copy, "XX001", "were committed", "write-ahead log")
        assert "backup" in (error.hint or ""), name
        assert EPOCH_FILE_NAME in (error.hint or ""), name
    # As the hint says: without the epoch file the older state is accepted on purpose.
    (tmp_path / "cut" / EPOCH_FILE_NAME).unlink()
    con = rivulet.connect(tmp_path / "cut")
    try:
        (n,) = con.execute("SELECT count(*) FROM rw_tables WHERE name = 't'").fetchone()
        if n:
            assert con.execute("SELECT count(*) FROM t").fetchone()[0] < 1000
    finally:
        con.close()
    # The untouched store opens with every committed row.
    con = rivulet.connect(path)
    try:
        assert con.execute("SELECT count(*) FROM t").fetchone() == (1000,)
    finally:
        con.close()


def test_a_directory_that_lost_its_database_file_is_not_made_anew(store: Path) -> None:
    (store / DB_FILE_NAME).unlink()
    refused(store, "XX001", "lost its state store", DB_FILE_NAME)
    assert not (store / DB_FILE_NAME).exists()


# ------------------------------------------------------------------ not Rivulet's
def test_a_duckdb_file_that_is_not_a_rivulet_store_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other"
    path.mkdir()
    con = duckdb.connect(str(path / DB_FILE_NAME))
    con.execute("CREATE TABLE precious AS SELECT range AS x FROM range(10)")
    con.close()
    refused(path, "F0000", "not a Rivulet store")


def test_a_data_directory_that_is_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "a-file"
    path.write_text("not a directory")
    with pytest.raises(rivulet.Error) as info:
        rivulet.connect(path)
    assert info.value.sqlstate == "58030"
    assert str(path) in info.value.message and info.value.hint
    assert path.read_text() == "not a directory"


# ------------------------------------------------------------ another process
def _hold(path: Path, code: str) -> subprocess.Popen[str]:
    """A second process that opens ``path`` and keeps it open until killed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code + "\nprint('ready', flush=True)\nimport time\ntime.sleep(600)"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


def test_a_store_held_by_another_rivulet_process_is_refused(store: Path) -> None:
    holder = _hold(store, f"import rivulet\ncon = rivulet.connect({str(store)!r})")
    try:
        error = refused(store, "55P03", "in use by another Rivulet process", f"pid {holder.pid}")
        assert "Stop the other process" in (error.hint or "")
    finally:
        _stop(holder)
    # A killed holder leaves no stale lock behind: the store opens, whole.
    assert_intact(store)


def test_a_store_held_by_another_duckdb_process_is_refused(store: Path) -> None:
    db = store / DB_FILE_NAME
    holder = _hold(store, f"import duckdb\ncon = duckdb.connect({str(db)!r})")
    try:
        refused(store, "55P03", "in use by another process")
    finally:
        _stop(holder)
    assert_intact(store)


def test_refusals_leave_the_directory_usable_once_repaired(store: Path) -> None:
    """Refusing takes the lock and gives it back: after the cause is gone (here the
    damaged file is restored from a copy) the store opens with all its data."""
    backup = (store / DB_FILE_NAME).read_bytes()
    flip(store / DB_FILE_NAME, 100)
    refused(store, "XX001", "damaged")
    (store / DB_FILE_NAME).write_bytes(backup)
    assert_intact(store)
    assert int((store / EPOCH_FILE_NAME).read_text()) > 0
