"""The state store: one DuckDB database, one transaction per epoch, epochs only grow."""

from __future__ import annotations

import threading
from pathlib import Path

import duckdb
import pytest

from rivulet.common.errors import Error
from rivulet.storage.state_store import (
    DB_FILE_NAME,
    StateStore,
    StoreOptions,
    read_next_batch,
    stream_query,
)


@pytest.fixture
def store():  # type: ignore[no-untyped-def]
    s = StateStore(None, StoreOptions())
    s.run_setup(["CREATE TABLE state.kv (k INTEGER, v VARCHAR)"])
    yield s
    s.close()


def rows(store: StateStore) -> list[tuple[int, str]]:
    return store.new_cursor().execute("SELECT k, v FROM state.kv ORDER BY k").fetchall()


def insert(k: int, v: str):  # type: ignore[no-untyped-def]
    return lambda cur: cur.execute("INSERT INTO state.kv VALUES (?, ?)", [k, v])


def test_a_new_store_starts_at_epoch_zero(store: StateStore) -> None:
    assert store.committed_epoch == 0


def test_commit_advances_the_epoch(store: StateStore) -> None:
    store.commit_epoch(1, [insert(1, "a")])
    assert store.committed_epoch == 1
    store.commit_epoch(5, [insert(2, "b")])
    assert store.committed_epoch == 5
    assert rows(store) == [(1, "a"), (2, "b")]


@pytest.mark.parametrize("stale", [0, 3, 4])
def test_epochs_only_grow(store: StateStore, stale: int) -> None:
    store.commit_epoch(4, [insert(1, "a")])
    with pytest.raises(ValueError, match="not after committed epoch 4"):
        store.commit_epoch(stale, [insert(2, "never")])
    assert store.committed_epoch == 4
    assert rows(store) == [(1, "a")]


def test_an_empty_epoch_commits(store: StateStore) -> None:
    store.commit_epoch(1, [])
    assert store.committed_epoch == 1


def test_a_failing_write_rolls_back_the_whole_epoch(store: StateStore) -> None:
    store.commit_epoch(1, [insert(1, "kept")])

    def boom(cur: duckdb.DuckDBPyConnection) -> None:
        raise RuntimeError("writer failed")

    with pytest.raises(RuntimeError, match="writer failed"):
        store.commit_epoch(2, [insert(2, "lost"), insert(3, "lost"), boom])
    assert store.committed_epoch == 1
    assert rows(store) == [(1, "kept")]
    # The store is usable afterwards, and the failed epoch number may be committed now.
    store.commit_epoch(2, [insert(4, "next")])
    assert rows(store) == [(1, "kept"), (4, "next")]


def test_a_failing_statement_rolls_back_the_whole_epoch(store: StateStore) -> None:
    bad = lambda cur: cur.execute("INSERT INTO state.kv VALUES ('not a number', 'x')")  # noqa: E731
    with pytest.raises(duckdb.Error):
        store.commit_epoch(1, [insert(1, "lost"), bad])
    assert store.committed_epoch == 0
    assert rows(store) == []


def test_readers_never_see_half_an_epoch(store: StateStore) -> None:
    """While an epoch's transaction runs, other cursors read the previous epoch."""
    store.commit_epoch(1, [insert(1, "old")])
    seen: list[object] = []

    def peek(cur: duckdb.DuckDBPyConnection) -> None:
        def read() -> None:
            seen.append(rows(store))

        t = threading.Thread(target=read)
        t.start()
        t.join()

    store.commit_epoch(2, [insert(2, "new"), peek, insert(3, "new")])
    assert seen == [[(1, "old")]]
    assert rows(store) == [(1, "old"), (2, "new"), (3, "new")]


def test_the_epoch_is_persisted_with_the_data(tmp_path: Path) -> None:
    s = StateStore(tmp_path, StoreOptions())
    s.run_setup(["CREATE TABLE IF NOT EXISTS state.kv (k INTEGER, v VARCHAR)"])
    s.commit_epoch(7, [insert(1, "a")])
    s.close()
    s = StateStore(tmp_path, StoreOptions())
    try:
        assert s.committed_epoch == 7
        assert rows(s) == [(1, "a")]
        with pytest.raises(ValueError):
            s.commit_epoch(7, [])
    finally:
        s.close()


def test_sql_reaching_duckdb_cannot_touch_files(store: StateStore) -> None:
    store.lock_configuration()
    cur = store.new_cursor()
    with pytest.raises(duckdb.Error):
        cur.execute("SELECT * FROM read_csv('/etc/passwd')")
    with pytest.raises(duckdb.Error):
        cur.execute("COPY state.kv TO '/tmp/rivulet-should-not-exist.csv'")
    with pytest.raises(duckdb.Error):
        cur.execute("SET enable_external_access = true")
    with pytest.raises(duckdb.Error):
        cur.execute("SET threads = 1")
    assert not Path("/tmp/rivulet-should-not-exist.csv").exists()


def test_a_data_directory_is_locked_while_open(tmp_path: Path) -> None:
    first = StateStore(tmp_path, StoreOptions())
    try:
        with pytest.raises(Error) as info:
            StateStore(tmp_path, StoreOptions())
        assert info.value.sqlstate == "55P03"
        assert "in use by another Rivulet process" in info.value.message
        assert info.value.hint
    finally:
        first.close()
    # Closing releases the lock.
    StateStore(tmp_path, StoreOptions()).close()


def test_a_newer_format_is_refused(tmp_path: Path) -> None:
    StateStore(tmp_path, StoreOptions()).close()
    con = duckdb.connect(str(tmp_path / DB_FILE_NAME))
    con.execute("UPDATE meta.store_format SET format_version = 99")
    con.close()
    with pytest.raises(Error) as info:
        StateStore(tmp_path, StoreOptions())
    assert info.value.sqlstate == "F0000"
    assert "newer Rivulet" in info.value.message
    # The failed open released the directory lock.
    with pytest.raises(Error) as again:
        StateStore(tmp_path, StoreOptions())
    assert again.value.sqlstate == "F0000"


def test_a_damaged_file_gets_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / DB_FILE_NAME).write_bytes(b"this is not a duckdb file" * 1000)
    with pytest.raises(Error) as info:
        StateStore(tmp_path, StoreOptions())
    assert info.value.sqlstate == "XX001"
    assert info.value.hint


def test_an_interrupted_streamed_result_raises_duckdbs_interrupt() -> None:
    """An interrupt that lands while a streamed batch is computed is DuckDB's interrupt
    (a cancel or timeout), not an Arrow I/O error."""
    cur = duckdb.connect().cursor()
    _, reader = stream_query(
        cur, "SELECT x, repeat('x', 100) FROM generate_series(1, 1000000000) AS t(x)", None, 2048
    )
    assert reader is not None
    read_next_batch(reader)
    timer = threading.Timer(0.2, cur.interrupt)
    timer.start()
    try:
        with pytest.raises(duckdb.InterruptException):
            while True:
                read_next_batch(reader)
    finally:
        timer.cancel()
