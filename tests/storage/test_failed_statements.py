"""A failed statement changes nothing: not the data, not the catalog, not the epoch -
whether it fails while computing its rows or while committing them."""

from __future__ import annotations

from pathlib import Path

import pytest

import rivulet
from rivulet.meta.catalog import CatalogChange
from rivulet.storage.state_table import StateTable


def epoch(con: rivulet.Connection) -> int:
    return con._thread.engine.store.committed_epoch


@pytest.fixture
def con():  # type: ignore[no-untyped-def]
    c = rivulet.connect()
    c.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR NOT NULL, n INT)")
    c.execute("INSERT INTO t VALUES (1, 'a', 10), (2, 'b', 20)")
    yield c
    c.close()


def snapshot(con: rivulet.Connection) -> list[tuple[object, ...]]:
    return con.execute("SELECT * FROM t ORDER BY id").fetchall()


BEFORE = [(1, "a", 10), (2, "b", 20)]


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO t VALUES (3, 'c', 30), (4, NULL, 40)",
        "INSERT INTO t VALUES (3, 'c', 30), (NULL, 'd', 40)",
        "INSERT INTO t VALUES (3, 'c', 30), (4, 'd', 'forty')",
        "INSERT INTO t SELECT id + 10, v, n / (id - 2) FROM t",
        "UPDATE t SET n = n / (id - 2)",
        "UPDATE t SET v = NULL WHERE id = 2",
        "UPDATE t SET id = id + 10, v = CASE WHEN id = 2 THEN NULL ELSE v END",
        "DELETE FROM t WHERE 1 / (id - 2) > 0",
        "INSERT INTO t VALUES (1, 'overwrite', 0); SELECT 1 / 0",
    ],
)
def test_a_failing_dml_statement_writes_nothing(con: rivulet.Connection, sql: str) -> None:
    before_epoch = epoch(con)
    with pytest.raises(rivulet.Error):
        con.execute(sql)
    if "; SELECT" not in sql:
        assert snapshot(con) == BEFORE
        assert epoch(con) == before_epoch


def test_statements_before_the_failing_one_did_commit(con: rivulet.Connection) -> None:
    with pytest.raises(rivulet.DataError):
        con.execute(
            "INSERT INTO t VALUES (3, 'c', 30); SELECT 1 / 0; INSERT INTO t VALUES (4, 'd', 40)"
        )
    assert snapshot(con) == [*BEFORE, (3, "c", 30)]


def test_every_successful_write_advances_the_epoch(con: rivulet.Connection) -> None:
    e0 = epoch(con)
    con.execute("INSERT INTO t VALUES (3, 'c', 30)")
    e1 = epoch(con)
    con.execute("UPDATE t SET n = 0 WHERE id = 3")
    e2 = epoch(con)
    con.execute("SELECT * FROM t")
    con.execute("UPDATE t SET n = 0 WHERE false")
    assert e0 < e1 < e2 == epoch(con)


def test_a_failed_commit_of_dml_writes_nothing(
    con: rivulet.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_flush(self: StateTable, memtable: object, cursor: object) -> None:
        raise RuntimeError("disk full")

    before_epoch = epoch(con)
    with monkeypatch.context() as m:
        m.setattr(StateTable, "flush", broken_flush)
        with pytest.raises(rivulet.InternalError) as info:
            con.execute("INSERT INTO t VALUES (3, 'c', 30)")
        assert "checkpoint" in info.value.message
        with pytest.raises(rivulet.InternalError):
            con.execute("UPDATE t SET v = 'changed'")
    assert snapshot(con) == BEFORE
    assert epoch(con) == before_epoch
    # The writer's overlay was discarded too: later statements see and keep only committed rows.
    con.execute("INSERT INTO t VALUES (4, 'd', 40)")
    assert snapshot(con) == [*BEFORE, (4, "d", 40)]


def test_a_failed_commit_of_create_table_leaves_no_trace(
    con: rivulet.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_write(self: CatalogChange, cursor: object) -> None:
        raise RuntimeError("disk full")

    with monkeypatch.context() as m:
        m.setattr(CatalogChange, "write", broken_write)
        with pytest.raises(rivulet.Error):
            con.execute("CREATE TABLE fresh (a INT)")
    assert con.execute("SHOW TABLES").fetchall() == [("t",)]
    assert con.execute("SELECT count(*) FROM pg_class WHERE relname = 'fresh'").fetchone() == (0,)
    with pytest.raises(rivulet.ProgrammingError):
        con.execute("SELECT * FROM fresh")
    con.execute("CREATE TABLE fresh (a INT)")
    con.execute("INSERT INTO fresh VALUES (1)")
    assert con.execute("SELECT * FROM fresh").fetchall() == [(1,)]


def test_a_failed_commit_of_drop_table_keeps_the_table(
    con: rivulet.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_write(self: CatalogChange, cursor: object) -> None:
        raise RuntimeError("disk full")

    with monkeypatch.context() as m:
        m.setattr(CatalogChange, "write", broken_write)
        with pytest.raises(rivulet.Error):
            con.execute("DROP TABLE t")
    assert snapshot(con) == BEFORE
    con.execute("INSERT INTO t VALUES (3, 'c', 30)")
    assert len(snapshot(con)) == 3


def test_failed_ddl_changes_nothing(con: rivulet.Connection) -> None:
    for sql in [
        "CREATE TABLE t (a INT)",
        "CREATE TABLE u (a INT, a INT)",
        "CREATE TABLE u (a INT PRIMARY KEY, b INT PRIMARY KEY)",
        "CREATE TABLE u AS SELECT 1 / 0 AS x",
        "DROP TABLE t, nope",
    ]:
        with pytest.raises(rivulet.Error):
            con.execute(sql)
    assert con.execute("SHOW TABLES").fetchall() == [("t",)]
    assert snapshot(con) == BEFORE


def test_failed_statements_leave_a_data_directory_unchanged(tmp_path: Path) -> None:
    with rivulet.connect(tmp_path) as c:
        c.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR NOT NULL)")
        c.execute("INSERT INTO t VALUES (1, 'a')")
        for sql in [
            "INSERT INTO t VALUES (2, 'b'), (3, NULL)",
            "UPDATE t SET v = v || (1 / 0)::text",
            "CREATE TABLE t (x INT)",
        ]:
            with pytest.raises(rivulet.Error):
                c.execute(sql)
        committed = c._thread.engine.store.committed_epoch
    with rivulet.connect(tmp_path) as c:
        assert c.execute("SELECT * FROM t").fetchall() == [(1, "a")]
        assert c.execute("SHOW TABLES").fetchall() == [("t",)]
        assert c._thread.engine.store.committed_epoch == committed


def test_a_failed_create_table_as_leaves_no_table(
    con: rivulet.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_flush(self: StateTable, memtable: object, cursor: object) -> None:
        raise RuntimeError("disk full")

    with monkeypatch.context() as m:
        m.setattr(StateTable, "flush", broken_flush)
        with pytest.raises(rivulet.InternalError):
            con.execute("CREATE TABLE copy AS SELECT * FROM t")
    assert con.execute("SHOW TABLES").fetchall() == [("t",)]
    con.execute("CREATE TABLE copy AS SELECT * FROM t")
    assert con.execute("SELECT count(*) FROM copy").fetchone() == (2,)
